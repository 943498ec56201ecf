#!/usr/bin/env python3
"""Lists modules over 600 lines and functions over 60 lines in console/, processes/ and storage/
(migrations skipped); exits 1 when any is found.

    python scripts/check_sizes.py [folder ...]
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("console", "processes", "storage")
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 60


def python_files(folder: Path) -> Iterator[Path]:
    for path in sorted(folder.rglob("*.py")):
        if "migrations" not in path.relative_to(folder).parts:
            yield path


def offenders(path: Path) -> Iterator[str]:
    source = path.read_text(encoding="utf-8")
    where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    lines = len(source.splitlines())
    if lines > MAX_MODULE_LINES:
        yield f"{where}: module has {lines} lines (max {MAX_MODULE_LINES})"
    for node in ast.walk(ast.parse(source, filename=str(path))):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            if length > MAX_FUNCTION_LINES:
                yield f"{where}:{node.lineno}: function {node.name} has {length} lines (max {MAX_FUNCTION_LINES})"


def main(argv: list[str]) -> int:
    folders = [Path(a).resolve() for a in argv] or [ROOT / name for name in FOLDERS]
    found = [line for folder in folders for path in python_files(folder) for line in offenders(path)]
    for line in found:
        print(line)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
