#!/usr/bin/env python3
"""Builds the optional compiled Iceberg manifest decoder (storage/formats/iceberg/_avro_native.c)
in place, next to its source; safe to run again.

    python scripts/build_native.py

Needs a C compiler and Python's headers (scripts/setup.sh installs both). With zlib's header the
module also inflates deflate containers itself, with libdeflate's (libdeflate-dev) faster;
without zlib it is built without that and Python inflates. Lakewarden runs without the module (``_avro.NATIVE`` is then False), only slower; a
failed build prints why and exits 1.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "storage" / "formats" / "iceberg"
SOURCE = PACKAGE / "_avro_native.c"
NAME = "storage.formats.iceberg._avro_native"
FLAGS = ["-O2", "-std=c11", "-Wall", "-Wextra", "-Wno-unused-parameter", "-Wno-missing-field-initializers"]


#: What the module is built with, best first: libdeflate inflates a third faster than zlib on
#: the small blocks manifests hold (Debian: libdeflate-dev); the first that builds is installed.
VARIANTS = (("zlib and libdeflate", ("z", "deflate")), ("zlib", ("z",)), ("neither", ()))
MACROS = {"z": "LW_ZLIB", "deflate": "LW_LIBDEFLATE"}


def build(libraries: tuple[str, ...], folder: str) -> Path:
    """The module built under ``folder`` with ``libraries``, or an exception from setuptools."""
    from setuptools import Distribution, Extension
    from setuptools.command.build_ext import build_ext

    extension = Extension(
        NAME,
        sources=[str(SOURCE)],
        extra_compile_args=FLAGS,
        define_macros=[(MACROS[library], "1") for library in libraries],
        libraries=list(libraries),
    )
    command = build_ext(Distribution({"name": "lakewarden-native", "ext_modules": [extension]}))
    command.build_lib = folder
    command.build_temp = os.path.join(folder, "temp")
    command.ensure_finalized()
    command.run()
    return Path(command.get_ext_fullpath(NAME))


def install(built: Path) -> Path:
    """Moves the module into the package by a rename: a process that has the old one loaded
    keeps its (unlinked) file instead of seeing it overwritten under it."""
    target = PACKAGE / built.name
    staged = target.with_name(f".{target.name}.{os.getpid()}")
    shutil.copyfile(built, staged)
    os.replace(staged, target)
    return target


def main() -> int:
    try:
        import setuptools  # noqa: F401  (Python 3.12+ virtualenvs come without it)
    except ImportError:
        print("build_native: setuptools is not installed (pip install setuptools)", file=sys.stderr)
        return 1
    for how, libraries in VARIANTS:
        with tempfile.TemporaryDirectory(prefix="lw-native-") as folder:
            try:
                built = build(libraries, folder)
            except Exception as exc:  # setuptools raises CompileError, LinkError, DistutilsError...
                print(f"build_native: building with {how} failed: {exc}", file=sys.stderr)
                continue
            target = install(built)
        print(f"build_native: built {target.relative_to(ROOT)} (with {how})")
        return 0
    return 1


if __name__ == "__main__":
    sys.exit(main())
