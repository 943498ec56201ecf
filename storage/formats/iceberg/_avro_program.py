"""Compiles a writer schema and a keep spec into the program the compiled decoder runs
(``_avro_native.c``).

A program is a list of nodes ``(op, keep, size, children, keys)``, the root first and every
node before its children; ``keys`` name the fields a record returns (None: read and dropped).
The choices mirror ``_avro._Compiler`` one for one (which fields are returned, which arrays are
Iceberg's ``int -> bytes|long`` maps, how nullable unions read), so that both decoders return
the same records; tests/spec/test_avro_native.py checks that they do. A field kept ``"raw"``
(``raw_map``) compiles to a ``raw_int_bytes_map``/``raw_int_long_map`` node, under a null union
node when the field is nullable.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

# The order is the contract with the C module (its OPS tuple; _avro checks they are equal).
OPS = (
    "null",
    "boolean",
    "long",
    "float",
    "double",
    "bytes",
    "string",
    "fixed",
    "record",
    "null_first",
    "null_second",
    "union",
    "array",
    "map",
    "int_bytes_map",
    "int_long_map",
    "int_array",
    "raw_int_bytes_map",
    "raw_int_long_map",
)
_OP = {name: code for code, name in enumerate(OPS)}
_PRIMITIVE = {
    "null": "null",
    "boolean": "boolean",
    "int": "long",
    "long": "long",
    "float": "float",
    "double": "double",
    "bytes": "bytes",
    "string": "string",
}

Node = tuple[int, bool, int, tuple[int, ...], tuple[str | None, ...]]


def compile_program(schema: Any, keep: Any) -> list[Node]:
    """The program decoding one record of ``schema`` with ``keep`` (see ``_avro._Compiler``)."""
    compiler = _ProgramCompiler()
    compiler.compile(schema, keep)
    return [(op, keep, size, tuple(kids), tuple(keys)) for op, keep, size, kids, keys in compiler.nodes]


class _ProgramCompiler:
    def __init__(self) -> None:
        self.named: dict[str, Any] = {}
        self.nodes: list[tuple[int, bool, int, list[int], list[str | None]]] = []

    def add(self, op: str, keep: Any, size: int = 0) -> int:
        self.nodes.append((_OP[op], bool(keep), size, [], []))
        return len(self.nodes) - 1

    def child(self, parent: int, schema: Any, keep: Any, key: str | None = None) -> None:
        # the parent was added first: children always come after their parent
        kid = self.compile(schema, keep)
        self.nodes[parent][3].append(kid)
        self.nodes[parent][4].append(key)

    def compile(self, schema: Any, keep: Any) -> int:
        if keep == RAW:
            pair, null_at = raw_map(schema, self.named)
            raw = f"raw_int_{pair}_map"
            if null_at is None:
                return self.add(raw, True)
            node = self.add("null_first" if null_at == 0 else "null_second", True)
            self.nodes[node][3].append(self.add(raw, True))
            self.nodes[node][4].append(None)
            return node
        kind, schema = resolve(schema, self.named)
        if kind in _PRIMITIVE:
            return self.add(_PRIMITIVE[kind], keep)
        if kind == "union":
            return self._union(schema, keep)
        if kind == "record":
            return self._record(schema, keep)
        if kind == "array":
            return self._array(schema, keep)
        if kind == "map":
            node = self.add("map", keep)
            self.child(node, schema["values"], keep)
            return node
        if kind == "enum":
            return self.add("long", keep)
        if kind == "fixed":
            return self.add("fixed", keep, int(schema["size"]))
        raise ValueError(f"unsupported Avro type {kind!r} in manifest schema")

    def _union(self, branches: list[Any], keep: Any) -> int:
        if len(branches) == 2 and branches[0] == "null":
            node = self.add("null_first", keep)
            self.child(node, branches[1], keep)
        elif len(branches) == 2 and branches[1] == "null":
            node = self.add("null_second", keep)
            self.child(node, branches[0], keep)
        else:
            node = self.add("union", keep)
            for branch in branches:
                self.child(node, branch, keep)
        return node

    def _record(self, schema: dict[str, Any], keep: Any) -> int:
        node = self.add("record", keep is not False)
        for field, wanted, optional, inner in record_fields(schema, keep):
            block = None if wanted == RAW else self._block_op(inner, bool(wanted))
            # _Compiler stores inlined blocks when wanted is truthy, other fields unless it is False
            stored = bool(wanted) if block else wanted is not False
            target = node
            if optional:
                target = self.add("null_first", wanted)
                self.nodes[node][3].append(target)
                self.nodes[node][4].append(field["name"] if stored else None)
            if block:
                kid = self.add(block, wanted)
                name_items(inner["items"], self.named)
            else:
                kid = self.compile(inner, wanted)
            if optional:
                self.nodes[target][3].append(kid)
                self.nodes[target][4].append(None)
            else:
                self.nodes[node][3].append(kid)
                self.nodes[node][4].append(field["name"] if stored else None)
        return node

    def _block_op(self, schema: Any, keep: bool) -> str | None:
        """The op of an array _Compiler._blocks_inline reads inline, else None."""
        if not isinstance(schema, dict) or schema.get("type") != "array":
            return None
        items = schema["items"]
        pair = int_keyed_pair(items, self.named)
        if pair is not None:
            return "int_bytes_map" if pair == "bytes" else "int_long_map"
        return "int_array" if items in ("int", "long") else None

    def _array(self, schema: dict[str, Any], keep: Any) -> int:
        items = schema["items"]
        pair = int_keyed_pair(items, self.named)
        if pair == "bytes" and keep:
            return self.add("int_bytes_map", keep)
        if pair == "long":
            return self.add("int_long_map", keep)
        node = self.add("array", keep)
        self.child(node, items, keep)
        return node


def value_node(nodes: list[Node], path: tuple[str, ...]) -> int:
    """The index in ``nodes`` (a ``compile_program`` program) of the node that reads the value of
    the field at ``path`` (field names from the root record; under a nullable field's union, its
    value's node), or -1 when the program does not return that field or reaches it through a
    union of other types."""
    at = 0
    for name in path:
        op, _, _, kids, keys = nodes[at]
        if OPS[op] != "record" or name not in keys:
            return -1
        at = kids[keys.index(name)]
        if OPS[nodes[at][0]] in ("null_first", "null_second"):
            at = nodes[at][3][0]
    return at


def value_nodes(nodes: list[Node], fields: tuple[tuple[tuple[str, ...], str], ...]) -> tuple[int, ...]:
    """For each (path, op) of ``fields``, ``value_node(nodes, path)``, or -1 when that node reads
    its value with another op than ``op``."""
    found = []
    for path, op in fields:
        at = value_node(nodes, path)
        found.append(at if at >= 0 and OPS[nodes[at][0]] == op else -1)
    return tuple(found)


def int_keyed_pair(items: Any, named: dict[str, Any]) -> str | None:
    """ "bytes"/"long" when ``items`` is Iceberg's ``{key: int, value: bytes|long}`` map record."""
    if isinstance(items, str):
        items = named.get(items, items)
    if not isinstance(items, dict) or items.get("type") != "record":
        return None
    fields = items.get("fields", [])
    if (
        len(fields) != 2
        or fields[0]["name"] != "key"
        or fields[0]["type"] != "int"
        or fields[1]["name"] != "value"
    ):
        return None
    value = fields[1]["type"]
    return value if value in ("bytes", "long") else None


RAW = "raw"


def raw_map(schema: Any, named: dict[str, Any]) -> tuple[str, int | None]:
    """("bytes"|"long", the null branch's index or None) of a value kept ``"raw"``: Iceberg's
    int-keyed map array, or a two-branch union of it and null; ``ValueError`` for any other type
    (the raw blob is parsed only as such a map, by ``_avro.int_bytes_map``/``int_long_map``)."""
    kind, resolved = resolve(schema, named)
    null_at = None
    if kind == "union" and len(resolved) == 2 and "null" in resolved:
        null_at = resolved.index("null")
        kind, resolved = resolve(resolved[1 - null_at], named)
    pair = int_keyed_pair(resolved["items"], named) if kind == "array" else None
    if pair is None:
        raise ValueError(
            'keep "raw" is only for an Iceberg int-keyed map (an array of {key: int, value: bytes|long}'
            f" records, or a union of it and null), not for {json.dumps(schema)[:200]}"
        )
    return pair, null_at


def record_fields(schema: dict[str, Any], keep: Any) -> Iterator[tuple[dict[str, Any], Any, bool, Any]]:
    """(field, its keep spec, whether it is an optional ``["null", T]`` union, T or its type)
    for each field of a record read with ``keep`` (True: all, False: none, else by name)."""
    for field in schema["fields"]:
        if keep is True:
            wanted: Any = True
        elif keep is False:
            wanted = False
        else:
            wanted = keep.get(field["name"], False)
        field_type = field["type"]
        optional = isinstance(field_type, list) and len(field_type) == 2 and field_type[0] == "null"
        yield field, wanted, optional, field_type[1] if optional else field_type


def resolve(schema: Any, named: dict[str, Any]) -> tuple[str, Any]:
    """(kind, schema) of a schema node for both compilers: a primitive's name and itself,
    "union" and the branches, or a complex type's name and its dict. References by name are
    followed, and the names a node defines (with an array's item type) are recorded."""
    while True:
        if isinstance(schema, str):
            if schema in _PRIMITIVE:
                return schema, schema
            schema = named[schema]
            continue
        if isinstance(schema, list):
            return "union", schema
        kind = schema["type"]
        if not isinstance(kind, str):
            schema = kind
            continue
        if "name" in schema and kind in ("record", "enum", "fixed"):
            named[schema["name"]] = schema
        if kind == "array":
            name_items(schema["items"], named)
        return kind, schema


def name_items(items: Any, named: dict[str, Any]) -> None:
    """Names an array's item type: an Iceberg map's ``{key, value}`` record is read without
    compiling it, and a later field may name it again."""
    if isinstance(items, dict) and "name" in items and items.get("type") in ("record", "enum", "fixed"):
        named[items["name"]] = items


def named_records(schema: Any) -> dict[str, Any]:
    """Every named record of a schema by name (full name and short name)."""
    found: dict[str, Any] = {}

    def walk(node: Any) -> None:
        if isinstance(node, list):
            for branch in node:
                walk(branch)
        elif isinstance(node, dict):
            if node.get("type") == "record" and "name" in node:
                found[node["name"]] = node
                found[str(node["name"]).rsplit(".", 1)[-1]] = node
                for field in node.get("fields", []):
                    walk(field.get("type"))
            elif isinstance(node.get("type"), (dict, list)):
                walk(node["type"])
            else:
                walk(node.get("items"))
                walk(node.get("values"))

    walk(schema)
    return found


def record_of(schema: Any, named: dict[str, Any]) -> dict[str, Any] | None:
    """The record a field type is: itself, the non-null branch of a union, or a named one."""
    if isinstance(schema, str):
        schema = named.get(schema)
    if isinstance(schema, list):
        records = [r for r in (record_of(b, named) for b in schema if b != "null") if r is not None]
        return records[0] if len(records) == 1 else None
    if isinstance(schema, dict):
        if schema.get("type") == "record":
            return schema
        if isinstance(schema.get("type"), (dict, list)):
            return record_of(schema["type"], named)
    return None
