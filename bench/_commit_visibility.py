"""The simulated platform's "time from a commit to the console showing it" (bench/platform_sim.py).

Wall-clock and real, on the platform's ``tables`` rows: ``writers`` of them are real Delta tables
on local disk that another writer (deltalake, outside Lakewarden) appends to; the rest are
pointer folders (``common.pointer_folder``, as bench/fresh_figures.py builds them), every table
active (a commit within the hour), so each short tick reads every pointer. In threads of this
process, as the served stack runs them: the short beat (``refresh_active_tables_task``'s body:
``active_table_ids`` + ``refresh_moved``) every ``LAKEWARDEN_ACTIVE_REFRESH_SECONDS``, queueing a
refresh of each moved table to a light worker (``refresh_table_task``, one at a time); the
console, read through the API (``GET /api/v1/tables/{id}/``, the table's file count) every
``POLL`` seconds. A commit lands at a random moment of the beat's cycle; its time to show is from
the writer's commit returning to the first API answer that counts its file. What it leaves out:
the broker's hop between beat, worker and API (milliseconds on Redis), and the tables with no
activity within the hour, which the long refresh (``LAKEWARDEN_REFRESH_SECONDS``) finds.
"""

from __future__ import annotations

import queue
import random
import shutil
import statistics
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

#: How often the bench reads the console for a commit not shown yet (seconds).
POLL = 0.2
#: A commit not shown within this many seconds is counted as not shown.
GIVE_UP = 60.0
#: The issue's promise for a table with recent activity.
TARGET_SECONDS = 15.0


@dataclass
class Visibility:
    tables: int
    writers: int
    beat: float
    latencies: list[float] = field(default_factory=list)
    missed: int = 0
    tick_seconds: list[float] = field(default_factory=list)
    refreshes: int = 0

    def line(self) -> str:
        shown = sorted(self.latencies)
        if not shown:
            return f"commit to console: none of {self.missed} commits shown within {GIVE_UP:.0f} s"
        p95 = shown[min(len(shown) - 1, int(0.95 * len(shown)))]
        within = sum(1 for s in shown if s <= TARGET_SECONDS)
        return (
            f"commit to console over {self.tables} tables ({self.writers} written to, every table active):"
            f" {len(shown) + self.missed} commits, median {statistics.median(shown):.1f} s, p95 {p95:.1f} s,"
            f" max {shown[-1]:.1f} s; {within} of {len(shown) + self.missed} within {TARGET_SECONDS:.0f} s"
            f" ({self.missed} not shown within {GIVE_UP:.0f} s); beat every {self.beat:g} s, its tick"
            f" median {statistics.median(self.tick_seconds) * 1000:.0f} ms, max {max(self.tick_seconds) * 1000:.0f} ms"
            f" ({len(self.tick_seconds)} ticks, {self.refreshes} refreshes)"
        )


def _rows(start: int, count: int):
    import pyarrow as pa

    return pa.table({"id": pa.array(range(start, start + count), pa.int64())})


def _make_tables(folder: Path, tables: int, writers: int) -> list[int]:
    """``tables`` rows committed to a minute ago; the first ``writers`` real Delta tables (one
    commit, refreshed once so their pointer is kept), the rest pointer folders. Answers the
    writers' ids."""
    import datetime as dt

    from common import pointer_folder
    from deltalake import write_deltalake
    from django.utils import timezone

    from storage.models import Table
    from storage.refresh import refresh_facts

    Table.objects.all().delete()
    now = timezone.now()
    rows = []
    for i in range(tables):
        location = folder / f"t{i}"
        if i < writers:
            write_deltalake(str(location), _rows(0, 5))
            pointer = ""
        else:
            pointer = pointer_folder(location, "delta")
        rows.append(
            Table(
                name=f"v{i}",
                identifier=f"platform.v{i}",
                format="delta",
                location=str(location),
                current_instant="0",
                metadata_pointer=pointer,
                last_commit_at=now - dt.timedelta(minutes=1),
            )
        )
    created = Table.objects.bulk_create(rows)
    Table.objects.update(registered_at=now - dt.timedelta(days=1))
    ids = [row.pk for row in created[:writers]]
    for pk in ids:
        refresh_facts(pk)
    return ids


class _Stack:
    """The beat and one light worker, as threads; ``stop()`` ends both."""

    def __init__(self, beat: float, result: Visibility) -> None:
        self.beat, self.result = beat, result
        self.queued: queue.Queue[int | None] = queue.Queue()
        self.done = threading.Event()
        self.threads = [
            threading.Thread(target=self._beat, daemon=True),
            threading.Thread(target=self._worker, daemon=True),
        ]

    def start(self) -> _Stack:
        for thread in self.threads:
            thread.start()
        return self

    def _beat(self) -> None:
        from django.db import connections
        from django.utils import timezone

        from storage import refresh

        started = time.monotonic()
        tick = 0
        try:
            while not self.done.is_set():
                began = time.perf_counter()
                refresh.refresh_moved(refresh.active_table_ids(timezone.now()), refresh=self.queued.put)
                self.result.tick_seconds.append(time.perf_counter() - began)
                tick += 1
                self.done.wait(max(0.0, started + tick * self.beat - time.monotonic()))
        finally:
            connections.close_all()

    def _worker(self) -> None:
        from django.db import connections

        from storage.tasks import refresh_table_task

        try:
            while (table_id := self.queued.get()) is not None:
                refresh_table_task(table_id)
                self.result.refreshes += 1
        finally:
            connections.close_all()

    def stop(self) -> None:
        self.done.set()
        self.queued.put(None)
        for thread in self.threads:
            thread.join(timeout=30)


def measure(*, tables: int, writers: int, commits: int, seed: int) -> Visibility:
    """``commits`` commits by another writer, spread over the ``writers`` tables at random moments
    of the beat's cycle, each waited for in the console (one commit per table pending at a time)."""
    from deltalake import write_deltalake
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group
    from rest_framework.test import APIClient

    beat = float(settings.LAKEWARDEN_ACTIVE_REFRESH_SECONDS)
    result = Visibility(tables=tables, writers=writers, beat=beat)
    folder = Path(tempfile.mkdtemp(prefix="lw_visible_"))
    rng = random.Random(seed)
    user, _ = get_user_model().objects.get_or_create(username="bench-viewer")
    user.groups.add(Group.objects.get_or_create(name="viewer")[0])
    api = APIClient()
    api.force_authenticate(user)
    try:
        ids = _make_tables(folder, tables, writers)
        files = dict.fromkeys(ids, 1)
        stack = _Stack(beat, result).start()
        pending: dict[int, tuple[float, int]] = {}  # table -> (committed at, files expected)
        next_commit, made = time.monotonic() + rng.uniform(0, beat), 0
        while made < commits or pending:
            now = time.monotonic()
            idle = [pk for pk in ids if pk not in pending]
            if made < commits and now >= next_commit and idle:
                pk = rng.choice(idle)
                write_deltalake(str(folder / f"t{ids.index(pk)}"), _rows(made * 5, 5), mode="append")
                files[pk] += 1
                pending[pk] = (time.monotonic(), files[pk])
                made += 1
                next_commit = time.monotonic() + rng.uniform(0.5, beat * 0.8)
            for pk, (committed, expected) in list(pending.items()):
                shown = api.get(f"/api/v1/tables/{pk}/").json().get("file_count")
                if shown == expected:
                    result.latencies.append(time.monotonic() - committed)
                    del pending[pk]
                elif time.monotonic() - committed > GIVE_UP:
                    result.missed += 1
                    del pending[pk]
            time.sleep(POLL)
        stack.stop()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return result
