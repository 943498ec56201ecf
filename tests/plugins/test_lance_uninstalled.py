"""Lakewarden without the Lance plugin, for real: a Python whose site-packages hold everything the
virtualenv has except the plugin's distribution (its dist-info and editable hook), as after
``pip uninstall lakewarden-lance``. The other formats and factories still load; the Lance factories
are gone; a Lance dataset is refused with a message naming what is missing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.plugins.lance_tables import build_demo_dataset

REPO = Path(__file__).resolve().parents[2]
PLUGIN_ENTRIES = ("lakewarden_lance-", "__editable__.lakewarden_lance-", "__editable___lakewarden_lance_")

PROBE = """
import json, sys
import django
django.setup()
from processes.registry import factory_classes
from storage.spec import format_adapters, load_table
answer = {"formats": sorted(format_adapters()), "factories": sorted(factory_classes())}
for key, call in (("detected", lambda: load_table(sys.argv[1])), ("named", lambda: load_table(sys.argv[1], format="lance"))):
    try:
        call()
        answer[key] = "opened"
    except Exception as error:
        answer[key] = f"{type(error).__name__}: {error}"
print(json.dumps(answer))
"""


@pytest.fixture(scope="module")
def site_without_the_plugin(tmp_path_factory) -> Path:
    """A site folder linking every entry of the virtualenv's site-packages but the plugin's."""
    site = tmp_path_factory.mktemp("site-without-lance")
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if not entry.name.startswith(PLUGIN_ENTRIES):
            (site / entry.name).symlink_to(entry)
    return site


@pytest.fixture(scope="module")
def answer(site_without_the_plugin, tmp_path_factory) -> dict:
    """What that Python says of the plugin registries and of a Lance dataset (one subprocess)."""
    dataset = tmp_path_factory.mktemp("lance-uninstalled") / "clicks"
    build_demo_dataset(str(dataset), appends=2, rows=5, index=False)
    return {"dataset": str(dataset), **_probe(site_without_the_plugin, dataset)}


def _probe(site: Path, dataset: Path) -> dict:
    # -S: no automatic site-packages; the linked folder is added as a site dir (its .pth run)
    code = f"import site; site.addsitedir({str(site)!r})\n{PROBE}"
    env = {**os.environ, "PYTHONPATH": str(REPO), "DJANGO_SETTINGS_MODULE": "console.settings"}
    done = subprocess.run(
        [sys.executable, "-S", "-c", code, str(dataset)],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_without_the_plugin_the_rest_loads_and_a_lance_dataset_is_refused(answer):
    assert "lance" not in answer["formats"]
    assert {"delta", "hudi", "iceberg"} <= set(answer["formats"])
    assert not [name for name in answer["factories"] if name.startswith("lance-")]
    assert "iceberg-rewrite" in answer["factories"] and "delta-vacuum" in answer["factories"]
    assert answer["detected"].startswith(f"TableNotFound: no table at {answer['dataset']}")
    assert answer["named"].startswith("UnknownFormat:") and "'lance'" in answer["named"]


def test_without_the_plugin_a_lance_dataset_is_named_with_the_plugin_to_install(answer):
    assert "it looks like a lance table: install the lakewarden-lance plugin" in answer["detected"]
    assert "install the lakewarden-lance plugin" in answer["named"]
