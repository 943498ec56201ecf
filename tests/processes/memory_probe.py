"""The peak-memory probe of the streaming cleanups (issue 35), shared by the orphan cleanup's and
the vacuum's memory tests: ``probe(tmp_path, kind, count)`` runs one scan over ``count`` empty
files in a fresh subprocess (this file run as a script) and returns what it measured and found.

Kinds:

- ``orphans``: N files under ``<location>/data`` (every tenth unreferenced), Iceberg orphan
  cleanup's ``scan_location`` against a stream of the referenced names;
- ``vacuum``: a Delta table of N files whose log keeps 90% of them live (of the other tenth, half
  tombstones, half never committed), Delta vacuum's ``vacuum_scan`` in full mode.

The peak is the resident set of that process: VmHWM, reset through ``/proc/self/clear_refs`` right
before the scan, against VmRSS just before it. RSS rather than tracemalloc: what runs a worker out
of memory is the resident set, C allocations (pyarrow, pickle buffers, the allocator's
fragmentation) included, which tracemalloc does not see; tracemalloc also slows the listing
several times over. A subprocess per size because a peak is per process. The files the scan names
for deletion are compared by value (a tenth of the objects, in path order).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BUCKETS = 97
CAN_RESET_PEAK = os.access("/proc/self/clear_refs", os.W_OK)


def orphan_name(root: str, i: int) -> str:
    return f"{root}/data/bucket={i % BUCKETS:02d}/00000-{i}-6f1e5c1a-9d3b-4c2e-8a7f-{i:012d}.parquet"


def vacuum_name(i: int) -> str:
    """A data file's path relative to the Delta table's root."""
    return f"b={i % BUCKETS:02d}/part-{i:05d}-6f1e5c1a-9d3b-4c2e-8a7f-{i:012d}-c000.snappy.parquet"


def probe(
    tmp_path: Path, kind: str, count: int, timeout: int = 300, *, root: str = "", env: dict | None = None
) -> dict:
    """Run the ``kind`` scan over ``count`` objects in a fresh process; its measures, after
    asserting that it named exactly every tenth object for deletion, nothing young or kept.
    ``orphans_s3`` scans the objects already made under the ``s3://`` location ``root`` (named
    as ``orphan_name`` names them), reaching the store with the ``LAKEWARDEN_S3_*`` of ``env``."""
    root = root or str(tmp_path / f"warehouse-{kind}-{count}" / "db" / "events")
    out = tmp_path / f"probe-{kind}-{count}.json"
    subprocess.run(
        [sys.executable, __file__, kind, root, str(count), str(out)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
        check=True,
        timeout=timeout,
    )
    found = json.loads(out.read_text())
    if kind.startswith("orphans"):
        expected = [orphan_name(str(root), i) for i in range(0, count, 10)]
    else:
        expected = [f"{root}/{vacuum_name(i)}" for i in range(0, count, 10)]
    # the unreferenced files (orphans), the tombstones and the untracked files (vacuum), in path order
    assert found["doomed"] == sorted(expected)
    assert found["young"] == 0 and found["kept"] == 0
    return found


# -- the child process ------------------------------------------------------------------------


def _mib(field: str) -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field):
                return int(line.split()[1]) / 1024
    raise LookupError(field)


def _touch(path: str) -> None:
    os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o644))


def _write_delta_log(root: str, count: int) -> None:
    import uuid

    fields = [{"name": "b", "type": "string", "nullable": True, "metadata": {}}]
    meta = {
        "id": str(uuid.uuid4()),
        "format": {"provider": "parquet", "options": {}},
        "schemaString": json.dumps({"type": "struct", "fields": fields}),
        "partitionColumns": ["b"],
        "configuration": {},
        "createdTime": 0,
    }
    os.makedirs(f"{root}/_delta_log")
    with open(f"{root}/_delta_log/{0:020d}.json", "w") as log:
        log.write(json.dumps({"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}}) + "\n")
        log.write(json.dumps({"metaData": meta}) + "\n")
        for i in range(count):
            if i % 10 or i % 20 == 0:  # live, or a tombstone-to-be; i % 20 == 10 never committed
                add = {
                    "path": vacuum_name(i),
                    "partitionValues": {"b": f"{i % BUCKETS:02d}"},
                    "size": 0,
                    "modificationTime": 0,
                    "dataChange": True,
                }
                log.write(json.dumps({"add": add}) + "\n")
    with open(f"{root}/_delta_log/{1:020d}.json", "w") as log:
        for i in range(0, count, 20):
            remove = {"path": vacuum_name(i), "deletionTimestamp": 0, "dataChange": True}
            log.write(json.dumps({"remove": remove}) + "\n")


def _child(kind: str, root: str, count: int, out: str) -> None:
    from storage.io.guard import PathGuard

    if kind == "orphans_s3":
        from processes.maintenance import spill
        from processes.maintenance.iceberg.orphans import scan_location
        from storage.io import StoreOptions

        # runs of 5,000 items: the sorted runs' memory is the same at every size, so what grows
        # with the number of objects is what the listing holds (one page, or the whole listing)
        spill.RUN_ITEMS = 5_000
        referenced = (orphan_name(root, i) for i in range(count) if i % 10)
        storage = StoreOptions.from_env()

        def scan():
            found = scan_location(root, referenced, guard=guard, cutoff=time.time() + 3600, storage=storage)
            return found, lambda s: s.orphans, lambda s: s
    elif kind == "orphans":
        from processes.maintenance.iceberg.orphans import scan_location

        for bucket in range(BUCKETS):
            os.makedirs(f"{root}/data/bucket={bucket:02d}", exist_ok=True)
        for i in range(count):
            _touch(orphan_name(root, i))
        referenced = (orphan_name(root, i) for i in range(count) if i % 10)

        def scan():
            found = scan_location(root, referenced, guard=guard, cutoff=time.time() + 3600)
            return found, lambda s: s.orphans, lambda s: s
    else:
        from processes.maintenance.delta.vacuum import vacuum_scan

        for bucket in range(BUCKETS):
            os.makedirs(f"{root}/b={bucket:02d}", exist_ok=True)
        for i in range(count):
            _touch(f"{root}/{vacuum_name(i)}")
        _write_delta_log(root, count)

        def scan():
            found = vacuum_scan(root, hours=0, full=True, guard=guard, now=time.time() + 60)
            return found, lambda s: s.scan.removable, lambda s: s.scan

    guard = PathGuard.build(root, roots=[os.path.dirname(root)])
    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")  # resets VmHWM to the current RSS
    before = _mib("VmRSS")
    started = time.monotonic()
    scanning, doomed_of, result_of = scan()
    with scanning as found:
        seconds = time.monotonic() - started
        peak = _mib("VmHWM")
        doomed = [stored.location for stored in doomed_of(found)]
        result = result_of(found)
        measured = {
            "growth_mb": peak - before,
            "seconds": seconds,
            "young": result.young,
            "kept": len(result.kept),
        }
    with open(out, "w") as file:
        json.dump({**measured, "doomed": doomed}, file)


if __name__ == "__main__":
    _child(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4])
