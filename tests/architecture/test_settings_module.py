"""The settings are one module read top to bottom (issue 30, item 5): no star import, no read of a
half-built module (``sys.modules``, ``globals()``), no side effect on import (no folder made, no
environment variable set), and one beat schedule, the one the Celery app runs."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

from django.conf import settings

REPO = Path(__file__).resolve().parents[2]
SETTINGS = REPO / "console" / "settings.py"

IMPORT_PROBE = """
import json, os, sys
from pathlib import Path

before = dict(os.environ)
import console.settings
from django.conf import settings
settings.INSTALLED_APPS  # Django's own import of the module (LazySettings)
after = dict(os.environ)
changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
var = Path(sys.argv[1])
made = var.exists()
key = str(settings.SECRET_KEY)  # the first use: the key file is made now
print(json.dumps({
    "changed": changed,
    "made": made,
    "key_made": (var / "secret_key").read_text().strip() == key,
    "modules": sorted(m for m in sys.modules if m.startswith("console.settings")),
    "prometheus": "prometheus_client" in sys.modules,
}))
"""


def test_importing_the_settings_makes_no_folder_and_sets_no_environment_variable(tmp_path):
    var = tmp_path / "not-yet" / "var"
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"SECRET_KEY", "PROMETHEUS_MULTIPROC_DIR", "DJANGO_SETTINGS_MODULE"}
        and not key.startswith(("LAKEWARDEN_", "DEBUG"))
    }
    env.update(LAKEWARDEN_VAR_DIR=str(var), DJANGO_SETTINGS_MODULE="console.settings", PYTHONPATH=str(REPO))

    answer = subprocess.run(
        [sys.executable, "-c", IMPORT_PROBE, str(var)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert answer.returncode == 0, answer.stderr
    result = json.loads(answer.stdout.strip().splitlines()[-1])
    assert result["changed"] == []
    assert result["made"] is False, "importing the settings created the var folder"
    assert result["key_made"] is True  # made on first use instead
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == [
        "not-yet",
        "not-yet/var",
        "not-yet/var/secret_key",
    ]
    assert result["modules"] == ["console.settings"]
    assert result["prometheus"] is False  # its mode is chosen at first import: not from the settings


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def _settings_helpers() -> list[Path]:
    """console/settings.py and the console modules it imports from."""
    paths = [SETTINGS]
    for node in ast.walk(_tree(SETTINGS)):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("console."):
            base = REPO / Path(*node.module.split("."))
            paths.append(
                base.with_suffix(".py") if base.with_suffix(".py").exists() else base / "__init__.py"
            )
    return paths


def test_the_settings_are_one_module_with_no_star_import_and_no_read_of_a_half_built_module():
    assert sorted(p.name for p in (REPO / "console").glob("settings*")) == ["settings.py"]
    offences = []
    for path in _settings_helpers():
        for node in ast.walk(_tree(path)):
            where = f"{path.relative_to(REPO)}:{getattr(node, 'lineno', '?')}"
            if isinstance(node, ast.ImportFrom) and any(alias.name == "*" for alias in node.names):
                offences.append(f"{where} star import from {node.module}")
            if (
                isinstance(node, ast.Attribute)
                and node.attr == "modules"
                and getattr(node.value, "id", "") == "sys"
            ):
                offences.append(f"{where} reads sys.modules")
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") in {"globals", "vars", "locals"}:
                offences.append(f"{where} {node.func.id}()")
    assert not offences, "\n".join(offences)
    assert len(_settings_helpers()) > 3  # the helpers are found, so the check reads them


def _beat_schedule_definitions() -> list[str]:
    """Each place in the product code that assigns, updates or passes a beat schedule."""
    found = []
    for root in ("console", "processes", "storage", "devtools", "plugins"):
        for path in sorted((REPO / root).rglob("*.py")):
            for node in ast.walk(_tree(path)):
                where = f"{path.relative_to(REPO)}:{getattr(node, 'lineno', '?')}"
                targets: list[ast.AST] = []
                if isinstance(node, ast.Assign):
                    targets = node.targets
                elif isinstance(node, ast.AnnAssign | ast.AugAssign):
                    targets = [node.target]
                elif isinstance(node, ast.Call):
                    if (
                        isinstance(node.func, ast.Attribute)
                        and "beat_schedule" in ast.unparse(node.func).lower()
                    ):
                        found.append(f"{where} {ast.unparse(node.func)}()")
                    found += [
                        f"{where} {kw.arg}="
                        for kw in node.keywords
                        if kw.arg and "beat_schedule" in kw.arg.lower()
                    ]
                found += [
                    f"{where} {ast.unparse(t)} ="
                    for t in targets
                    if "beat_schedule" in ast.unparse(t).lower()
                ]
    return found


def test_the_beat_schedule_is_defined_once_and_is_the_one_celery_runs():
    from console.celery import app

    definitions = _beat_schedule_definitions()

    assert [d.split(":")[0] for d in definitions] == ["console/settings.py"], definitions
    assert definitions[0].endswith(" CELERY_BEAT_SCHEDULE =")
    assert app.conf.beat_schedule == settings.CELERY_BEAT_SCHEDULE
    assert set(settings.CELERY_BEAT_SCHEDULE) == {
        "refresh-tables",
        "refresh-active-tables",
        "schedule-processes",
        "reap-processes",
        "reap-queries",
        "purge-trash",
        "evaluate-alerts",
        "store-health",
    }
