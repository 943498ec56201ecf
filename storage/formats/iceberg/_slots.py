"""Makers of instances of slots classes that set the slots and run nothing else: listing builds
a ``DataFile``, a ``FileSlice`` and three ``LazyStats`` per file with them."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar, cast

from storage.formats.iceberg._avro import SlotsMaker

T = TypeVar("T")


def slots_builder(cls: type[T]) -> Callable[..., T]:
    """A constructor of the frozen slots dataclass ``cls`` taking every field positionally, in
    field order (none optional), which fills the slots directly (``slots_maker``): several times
    as fast as the generated ``__init__``, whose assignments each go through
    ``object.__setattr__`` and whose callers pass keywords. Listing builds two such objects per
    file.

    Only for a class whose ``__init__`` does nothing else (no ``__post_init__``, no init-only
    fields): the instance is then the one ``cls(*fields)`` gives. A field added to ``cls`` later is
    a required parameter here, so a caller that does not pass it fails at once."""
    if not dataclasses.is_dataclass(cls) or hasattr(cls, "__post_init__") or "__slots__" not in vars(cls):
        raise TypeError(f"{cls.__name__} is not a frozen slots dataclass without __post_init__")
    return slots_maker(cls, tuple(f.name for f in dataclasses.fields(cls)))


def slots_maker(cls: type[T], names: tuple[str, ...], *, native: bool = True) -> Callable[..., T]:
    """A function of one positional argument per name in ``names`` returning a new ``cls`` with
    those slots set and nothing else run (neither ``__new__`` nor ``__init__`` of ``cls``): the
    compiled ``SlotsMaker`` (``_avro_native.c``, which stores each value at its slot's offset),
    else a generated function calling each slot's own descriptor. Every name must be a slot."""
    if native and SlotsMaker is not None:
        return cast(Callable[..., T], SlotsMaker(cls, names))
    namespace: dict[str, Any] = {"_new": object.__new__, "_cls": cls}
    body = ["    self = _new(_cls)"]
    for name in names:
        descriptor = next((vars(k)[name] for k in cls.__mro__ if name in vars(k)), None)
        if descriptor is None or type(descriptor).__name__ != "member_descriptor":
            raise ValueError(f"{name!r} is not a slot of {cls.__name__}")
        namespace[f"_set_{name}"] = descriptor.__set__  # the slot's own descriptor
        body.append(f"    _set_{name}(self, {name})")
    source = f"def build({', '.join(names)}):\n" + "\n".join(body) + "\n    return self\n"
    exec(compile(source, f"<slots builder {cls.__name__}>", "exec"), namespace)  # noqa: S102
    build: Callable[..., T] = namespace["build"]
    return build
