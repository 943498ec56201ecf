"""What each pytest-xdist worker keeps to itself (loaded with ``-p tests.xdist_worker``, before
pytest-django imports the settings): ``make test`` (scripts/run_tests.sh) runs every test outside
tests/e2e on two workers, and these are the machine-wide things two test processes would
otherwise share. tests/e2e runs in processes of its own (the browser and served-stack tests beside
them, the rest after them, as scripts/run_tests.sh says): on 2026-11-24, with other jobs
loading the machine, two Spark end-to-end tests timed out now and then when they shared the
machine with a second test process (test_cluster.py: a fresh query after a cancelled and killed
Spark Connect job; two heavy workers' compactions).

- ``PROMETHEUS_MULTIPROC_DIR``: a subfolder per worker, so the metrics one worker's tests read
  hold only the samples of that worker's requests;
- ``LAKEWARDEN_TEST_BROKER_URL``: a Redis database per worker (15, 14, ...), which each worker
  empties when it ends without touching the other's queues;
- ``LAKEWARDEN_CACHE_PREFIX``: the cache keys (login throttling, chart fragments, the scheduler's
  pair fingerprint) of each worker apart: both workers' databases number their rows alike;
- the end-to-end tests (tests/e2e: Celery workers, Spark clusters, browsers, served stacks) all
  run on one worker, one after the other (``pytest_xdist_make_scheduler``, with ``--dist
  loadgroup``): two at once on two cores would each wait on the other's JVMs.
- the container tests (tests/deploy/test_compose.py, test_kube_play.py) run on one worker too, one
  after the other: the second reuses the image the first built instead of building it beside it,
  and two stacks of nine containers at once would each slow the other.

Without xdist (``-p no:xdist``, ``-n 0``) nothing changes.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Two test runs on databases of their own (LAKEWARDEN_TEST_DATABASE, as CONTRIBUTING suggests for
# runs side by side) keep their cache keys apart too: one run's scheduler fingerprint or login
# throttle is never the other's.
_database = os.environ.get("LAKEWARDEN_TEST_DATABASE")
if _database and "LAKEWARDEN_CACHE_PREFIX" not in os.environ:
    os.environ["LAKEWARDEN_CACHE_PREFIX"] = f"lakewarden-cache-{_database}"

_worker = os.environ.get("PYTEST_XDIST_WORKER", "")
if _worker.startswith("gw") and _worker[2:].isdigit():
    _index = int(_worker[2:])
    _samples = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if _samples:
        _own = Path(_samples) / _worker
        _own.mkdir(parents=True, exist_ok=True)
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(_own)
    if "LAKEWARDEN_TEST_BROKER_URL" not in os.environ:
        os.environ["LAKEWARDEN_TEST_BROKER_URL"] = f"redis://127.0.0.1:6379/{15 - _index % 8}"
    os.environ["LAKEWARDEN_CACHE_PREFIX"] = (
        f"{os.environ.get('LAKEWARDEN_CACHE_PREFIX', 'lakewarden-cache')}-{_worker}"
    )

E2E = "tests/e2e/"
CONTAINERS = ("tests/deploy/test_compose.py", "tests/deploy/test_kube_play.py")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """With ``--dist loadgroup``: the tests of tests/e2e are one unit of work (one worker runs
    them, one after the other), the container tests another, every other test a unit of its own
    (any worker, as ``load``).
    xdist's own loadgroup, by ``xdist_group`` marks, does not group on pytest 9 (the node id
    suffix it relies on is not kept), so the grouping is done here, by path."""
    if config.getoption("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class EndToEndOnOneWorker(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            if nodeid.startswith(CONTAINERS):
                return "containers"
            return "e2e" if nodeid.startswith(E2E) else nodeid

    return EndToEndOnOneWorker(config, log)
