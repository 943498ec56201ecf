"""Format questions are answered by the format's adapter (or its maintenance package), never by a
switch on the format's name elsewhere: no ``== "delta"``, ``in ("iceberg", ...)`` in product code
outside ``storage/formats/<fmt>``, ``processes/maintenance/<fmt>`` and the plugins."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FORMATS = {"iceberg", "delta", "hudi", "lance", "paimon"}
SCANNED = ("console", "processes", "storage")
#: folders whose code is about one format, where naming it is the point
FORMAT_HOMES = ("storage/formats/", "processes/maintenance/iceberg/", "processes/maintenance/delta/")
#: not a table format: the result storage type "iceberg" (storage/results/iceberg.py's name)
NOT_TABLE_FORMATS = {"storage/services/results.py"}


def _names_a_format(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value.lower() in FORMATS
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_names_a_format(element) for element in node.elts)
    return False


def switches(source: str, where: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare) and any(
            _names_a_format(operand) for operand in [node.left, *node.comparators]
        ):
            found.append(f"{where}:{node.lineno} {ast.unparse(node)}")
        elif isinstance(node, ast.match_case) and _names_a_format(getattr(node.pattern, "value", None)):
            found.append(f"{where}:{node.pattern.lineno} case {ast.unparse(node.pattern)}")
    return found


def test_no_switch_on_a_format_name_outside_the_formats_own_packages():
    found = []
    for package in SCANNED:
        for file in sorted((ROOT / package).rglob("*.py")):
            where = str(file.relative_to(ROOT))
            if "migrations" in file.parts or where.startswith(FORMAT_HOMES) or where in NOT_TABLE_FORMATS:
                continue
            found += switches(file.read_text(), where)
    assert found == []


def test_the_check_sees_a_switch():
    source = 'if table.format == "delta":\n    pass\nok = kind in ("hudi", "x")\nfine = name == "other"\n'
    assert switches(source, "m.py") == ["m.py:1 table.format == 'delta'", "m.py:3 kind in ('hudi', 'x')"]
