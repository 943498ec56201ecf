"""The house rules of ARCHITECTURE.md, checked on every module's AST: domain below, surfaces on top.

- ``storage`` (the lakehouse and its bookkeeping) imports neither ``processes`` nor ``console``;
- ``processes`` (work on workers) never imports ``console`` (the project and its surfaces);
- neither imports ``devtools`` (the SeaweedFS launcher and demo builder), and of ``console`` only
  the management commands that start the demo do;
- the plain layers (``storage/io``, ``storage/spec``, ``storage/formats``, ``storage/results``)
  import no Django and nothing of Lakewarden's Django apps;
- no import hides inside a function to dodge a cycle between Lakewarden's own modules, and no two
  modules import each other, whether at module level or inside functions;
- no module imports another package's private name or module (``_name``): what a package offers
  others is public (``storage.formats.iceberg`` exports what maintenance needs of the format).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("console", "processes", "storage")
PLAIN_LAYERS = ("storage/io", "storage/spec", "storage/formats", "storage/results", "storage/plugins.py")
FORBIDDEN = {
    "storage": ("console", "processes", "devtools"),
    "processes": ("console", "devtools"),
}
PLAIN_FORBIDDEN = (
    "django",
    "rest_framework",
    "celery",
    "console",
    "processes",
    "storage.models",
    "storage.services",
    "storage.selectors",
    "storage.cache",
    "storage.tasks",
)


def _modules(*roots: str):
    for root in roots:
        path = ROOT / root
        files = [path] if path.suffix == ".py" else sorted(path.rglob("*.py"))
        for file in files:
            if "migrations" not in file.parts and file.exists():
                yield file


def _imports(tree: ast.AST):
    """(module name, node, inside a function) for every import statement."""
    functions: set[int] = set()
    typing_only: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            functions.update(id(child) for child in ast.walk(node) if child is not node)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            typing_only.update(id(child) for child in ast.walk(node) if child is not node)
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue  # type annotations only: never imported at run time
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node, id(node) in functions
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module, node, id(node) in functions


def _starts(name: str, prefixes) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _offenders(roots, forbidden) -> list[str]:
    found = []
    for file in _modules(*roots):
        tree = ast.parse(file.read_text(), filename=str(file))
        for name, node, _ in _imports(tree):
            if _starts(name, forbidden):
                found.append(f"{file.relative_to(ROOT)}:{node.lineno} imports {name}")
    return found


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_domain_never_imports_a_layer_above(package):
    offenders = _offenders([package], FORBIDDEN[package])
    assert offenders == [], "imports against the layering:\n" + "\n".join(offenders)


def test_dev_tools_stay_out_of_the_product():
    """``devtools`` (the SeaweedFS launcher, the demo builder) is reached only by the management
    commands that start the demo; the console's pages, API and tasks never import it."""
    commands = ROOT / "console" / "management" / "commands"
    offenders = [
        line
        for line in _offenders(["console"], ("devtools",))
        if not (ROOT / line.split(":", 1)[0]).is_relative_to(commands)
    ]
    assert offenders == [], "the product importing dev tools:\n" + "\n".join(offenders)


def test_plain_layers_import_no_django_and_no_app():
    offenders = _offenders(PLAIN_LAYERS, PLAIN_FORBIDDEN)
    assert offenders == [], "plain layers reaching into Django:\n" + "\n".join(offenders)


def _module_name(file: Path) -> str:
    parts = list(file.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _graph() -> tuple[dict[str, set[str]], list[tuple[str, str, int]]]:
    """Module-level import edges between Lakewarden's modules, and (importer, imported, line) for
    every import inside a function. ``from a import b`` counts as importing ``a.b`` when that is a
    module, else ``a``."""
    files = {_module_name(f): f for f in _modules(*PACKAGES)}
    top: dict[str, set[str]] = {name: set() for name in files}
    inner: list[tuple[str, str, int]] = []
    for name, file in files.items():
        tree = ast.parse(file.read_text(), filename=str(file))
        for imported, node, in_function in _imports(tree):
            targets = {imported} if imported in files else set()
            if isinstance(node, ast.ImportFrom):
                targets |= {f"{imported}.{a.name}" for a in node.names if f"{imported}.{a.name}" in files}
            for target in targets:
                if in_function:
                    inner.append((name, target, node.lineno))
                else:
                    top[name].add(target)
    return top, inner


def _reaches(graph: dict[str, set[str]], start: str, goal: str) -> bool:
    seen, stack = set(), [start]
    while stack:
        current = stack.pop()
        if current == goal:
            return True
        if current not in seen:
            seen.add(current)
            stack.extend(graph.get(current, ()))
    return False


def test_no_function_level_import_dodges_a_cycle():
    """A function-level import of module B from module A dodges a cycle when B (through module-level
    imports) imports A: the layering is upside down somewhere. None is left."""
    top, inner = _graph()
    offenders = [
        f"{importer} imports {imported} inside a function (line {line}), and {imported} imports {importer}"
        for importer, imported, line in inner
        if _reaches(top, imported, importer)
    ]
    assert offenders == [], "\n".join(offenders)


def test_no_module_level_import_cycle():
    top, _ = _graph()
    cycles = sorted(
        f"{a} <-> {b}" for a, targets in top.items() for b in targets if a < b and _reaches(top, b, a)
    )
    assert cycles == [], "\n".join(cycles)


def test_the_checker_sees_a_violation(tmp_path):
    """The checks above would fail on a module that imports upward (they are not vacuous)."""
    tree = ast.parse("import os\nfrom console.models import X\ndef f():\n    from storage import y\n")
    found = [(name, inside) for name, _, inside in _imports(tree)]
    assert ("console.models", False) in found
    assert ("storage", True) in found
    assert _starts("console.models", ("console",)) and not _starts("consoles", ("console",))


def test_no_module_over_600_lines_and_no_function_over_60_outside_tests():
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "check_sizes.py")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout


def test_no_import_cycle_even_through_function_level_imports():
    """Two modules importing each other, one of them inside a function, is still a cycle."""
    top, inner = _graph()
    edges = {name: set(targets) for name, targets in top.items()}
    for importer, imported, _ in inner:
        edges.setdefault(importer, set()).add(imported)
    cycles = sorted(
        f"{a} <-> {b}" for a, targets in edges.items() for b in targets if a < b and _reaches(edges, b, a)
    )
    assert cycles == [], "\n".join(cycles)


PLUGIN_PACKAGES = ("plugins/lakewarden-lance/lakewarden_lance", "plugins/lakewarden-paimon/lakewarden_paimon")
OWN = ("console", "processes", "storage", "devtools", "lakewarden_lance", "lakewarden_paimon")


def _own_modules():
    """(dotted name, file) of every Lakewarden module, the plugins' under their import names."""
    for file in _modules(*PACKAGES, "devtools"):
        yield _module_name(file), file
    for package in PLUGIN_PACKAGES:
        base = (ROOT / package).parent
        for file in _modules(package):
            parts = list(file.relative_to(base).with_suffix("").parts)
            yield ".".join(parts[:-1] if parts[-1] == "__init__" else parts), file


def _private_offences(name: str, tree: ast.AST, packages: set[str]) -> list[str]:
    """Imports in module ``name`` of another package's private module (``pkg._mod``: only modules
    inside ``pkg`` may) or of a module's private name (``mod._name``: only the modules inside
    ``mod``, when it is a package, may)."""
    found = []
    for imported, node, _ in _imports(tree):
        if not _starts(imported, OWN):
            continue  # a library's private name is the library's business (and ours to pin)
        names = [a.name for a in node.names] if isinstance(node, ast.ImportFrom) else []
        parts = imported.split(".")
        private = next((i for i, p in enumerate(parts) if p.startswith("_") and not p.startswith("__")), None)
        if private is not None:
            owner = ".".join(parts[:private])
            if not (name == owner or name.startswith(owner + ".")):
                found.append(
                    f"{name}:{node.lineno} imports the private module {'.'.join(parts[: private + 1])}"
                )
            continue
        for alias in names:
            if alias.startswith("_") and not alias.startswith("__"):
                if not (imported in packages and name.startswith(imported + ".")):
                    found.append(f"{name}:{node.lineno} imports the private name {imported}.{alias}")
    return found


def test_no_module_imports_another_packages_private_names():
    modules = dict(_own_modules())
    packages = {name for name, file in modules.items() if file.name == "__init__.py"}
    offenders = []
    for name, file in modules.items():
        offenders += _private_offences(name, ast.parse(file.read_text(), filename=str(file)), packages)
    assert offenders == [], "private names used across packages:\n" + "\n".join(offenders)


def test_the_private_name_check_sees_an_offence():
    tree = ast.parse(
        "from storage.formats.iceberg._puffin import x\n"
        "from processes.maintenance.iceberg.rewrite import _catalog_table\n"
        "from storage.formats.iceberg._lineage import y\n"
    )
    found = _private_offences("processes.maintenance.example", tree, set())
    assert len(found) == 3, found
    inside = _private_offences("storage.formats.iceberg.read", tree, set())
    assert [f for f in inside if "_lineage" in f or "_puffin" in f] == []
    helper = ast.parse("from lakewarden_paimon import _meta\nfrom storage.spec import _thing\n")
    own = _private_offences("lakewarden_paimon.adapter", helper, {"lakewarden_paimon", "storage.spec"})
    assert own == ["lakewarden_paimon.adapter:2 imports the private name storage.spec._thing"]
