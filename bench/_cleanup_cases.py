"""The measured cases of bench/cleanup.py, each run as this script in a fresh process:

    python bench/_cleanup_cases.py <case> <table root> <objects> <result.json>

A case named ``<process>_before`` runs ``<process>_streaming`` on the modules of the commit before
the faster difference (``BEFORE``), loaded from git: old and new side by side in one run.

Imports first, then the peak reset (VmHWM through /proc/self/clear_refs), then the case; the
result names how many files the case would delete ("doomed"), its wall and CPU seconds and the
peak resident set above the one before it. Nothing is deleted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import types
from collections.abc import Callable

#: The commit before issue 35's faster difference (heapq.merge of pickled items): the ``before``
#: cases run its spill.py and listing.py, read from git, in place of today's; another commit
#: with ``LAKEWARDEN_BENCH_BEFORE`` (bench/cleanup.py's object-store cases: the listing before
#: it was paged).
BEFORE = os.environ.get("LAKEWARDEN_BENCH_BEFORE", "115056d")


def use_before() -> None:
    """Install the ``BEFORE`` commit's spill and listing modules before anything imports them."""
    import processes.maintenance  # the package, unchanged

    for name in ("spill", "listing"):  # listing imports spill: that order
        source = subprocess.run(
            ["git", "show", f"{BEFORE}:processes/maintenance/{name}.py"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        module = types.ModuleType(f"processes.maintenance.{name}")
        module.__file__ = f"{BEFORE}:processes/maintenance/{name}.py"
        sys.modules[module.__name__] = module
        exec(compile(source, module.__file__, "exec"), module.__dict__)  # noqa: S102 - our own history
        setattr(processes.maintenance, name, module)


if __name__ == "__main__" and sys.argv[1].endswith("_before"):
    use_before()

from processes.maintenance.delta.vacuum import vacuum_scan  # noqa: E402
from processes.maintenance.iceberg.orphans import scan_location, stored_files  # noqa: E402
from processes.maintenance.spill import SortedRuns, missing  # noqa: E402
from storage.formats.delta.commit import open_version  # noqa: E402
from storage.io import StoreOptions  # noqa: E402
from storage.io.guard import KeptFiles, PathGuard  # noqa: E402


def orphan_name(root: str, i: int) -> str:
    return f"{root}/data/bucket={i % 97:02d}/00000-{i}-6f1e5c1a-9d3b-4c2e-8a7f-{i:012d}.parquet"


# -- Iceberg orphan cleanup: the location under <root>/data, every tenth object unreferenced ---


def store_options(root: str) -> StoreOptions | None:
    """The object store's options (from the environment bench/cleanup.py sets), None on disk."""
    return StoreOptions.from_env() if root.startswith("s3://") else None


def orphans_streaming(root: str, count: int) -> int:
    guard = PathGuard.build(root, roots=[os.path.dirname(root)])
    referenced = (orphan_name(root, i) for i in range(count) if i % 10)
    storage = store_options(root)
    with scan_location(root, referenced, guard=guard, cutoff=time.time() + 3600, storage=storage) as scan:
        return sum(1 for _ in scan.orphans)


def orphans_sets(root: str, count: int) -> int:
    guard = PathGuard.build(root, roots=[os.path.dirname(root)])
    referenced = {orphan_name(root, i) for i in range(count) if i % 10}
    cutoff, orphans, kept = time.time() + 3600, [], KeptFiles()
    for stored in stored_files(root, store_options(root), guard):
        if stored.location in referenced or stored.mtime > cutoff:
            continue
        reason = guard.refusal(stored.location)
        if reason:
            kept.add(stored.location, reason)
        else:
            orphans.append(stored)
    return len(orphans)


def synthetic_streaming(root: str, count: int) -> int:
    listing = ((orphan_name(root, i), 0, 0.0) for i in range(count))
    referenced = (orphan_name(root, i) for i in range(count) if i % 10)
    with tempfile.TemporaryDirectory() as folder:
        names = SortedRuns(folder, "referenced", unique=True)
        names.extend(referenced)
        names.spill()
        listed = SortedRuns(folder, "listed")
        listed.extend(listing)
        return sum(1 for _ in missing(listed, names, key=lambda item: item[0]))


def synthetic_sets(root: str, count: int) -> int:
    referenced = {orphan_name(root, i) for i in range(count) if i % 10}
    listing = ((orphan_name(root, i), 0, 0.0) for i in range(count))
    return len([item for item in listing if item[0] not in referenced])


# -- Delta vacuum (full mode): 90% live, 5% expired tombstones, 5% never committed ------------


def vacuum_streaming(root: str, count: int) -> int:
    guard = PathGuard.build(root, roots=[os.path.dirname(root)])
    with vacuum_scan(root, hours=0, full=True, guard=guard) as found:
        return sum(1 for _ in found.scan.removable)


def vacuum_sets(root: str, count: int) -> int:
    guard = PathGuard.build(root, roots=[os.path.dirname(root)])
    spec = open_version(root)
    live: set[str] = set()
    tombstones: set[str] = set()
    for action in spec.log.file_actions(spec.state(spec.version).snapshot):  # oldest first
        (live if action.add else tombstones).add(action.location)
        (tombstones if action.add else live).discard(action.location)
    cutoff, doomed = time.time(), []
    for stored in stored_files(root, None, guard):
        relative = stored.location[len(root) + 1 :]
        if stored.location in live or relative.startswith(("_", ".")):
            continue
        if (stored.location in tombstones or stored.mtime < cutoff) and guard.allows(stored.location):
            doomed.append(stored)
    return len(doomed)


def vacuum_deltalake(root: str, count: int) -> int:
    from deltalake import DeltaTable

    guard = PathGuard.build(root, roots=[os.path.dirname(root)])
    found = DeltaTable(root).vacuum(
        retention_hours=0, dry_run=True, enforce_retention_duration=False, full=True
    )
    allowed, _ = guard.split(found, path=lambda relative: f"{root}/{relative}")
    return len(allowed)


CASES: dict[str, Callable[[str, int], int]] = {
    f.__name__: f
    for f in (
        orphans_streaming,
        orphans_sets,
        synthetic_streaming,
        synthetic_sets,
        vacuum_streaming,
        vacuum_sets,
        vacuum_deltalake,
    )
}
# The streaming cases on the BEFORE commit's modules (installed by use_before at start).
CASES |= {
    f"{process}_before": CASES[f"{process}_streaming"] for process in ("orphans", "synthetic", "vacuum")
}


def _mib(field: str) -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field):
                return int(line.split()[1]) / 1024
    raise LookupError(field)


def main(case: str, root: str, count: int, out: str) -> None:
    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")  # resets VmHWM to the current RSS
    before = _mib("VmRSS")
    started, cpu = time.monotonic(), time.process_time()
    doomed = CASES[case](root, count)
    seconds = time.monotonic() - started
    result = {"seconds": seconds, "cpu": time.process_time() - cpu, "growth_mb": _mib("VmHWM") - before}
    with open(out, "w") as file:
        json.dump({**result, "doomed": doomed}, file)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4])
