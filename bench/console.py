"""Server-side response time of console pages on big data: the table page of a 100k-file Iceberg
table and the processes page over 100,000 history rows (target: p95 < 150 ms each)."""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import django_on_bench_database, write_section  # noqa: E402

BENCH_DIR = Path(__file__).resolve().parent.parent / "var" / "bench"


def _timed(client, url: str, runs: int) -> tuple[float, float]:
    client.get(url)  # warm caches, as a page visited before
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        response = client.get(url)
        samples.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 200, (url, response.status_code)
    samples.sort()
    return statistics.median(samples), samples[int(0.95 * (len(samples) - 1))]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--processes", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=60)
    args = parser.parse_args()

    import listing

    metadata = listing.build(args.files)
    table_dir = Path(metadata).parent.parent
    os.environ["LAKEWARDEN_ALLOWED_ROOTS"] = str(BENCH_DIR)
    django_on_bench_database()

    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group
    from django.test import Client
    from django.utils import timezone

    from processes.models import Process, ProcessStatus
    from storage import services
    from storage.models import Table

    Process.objects.all().delete()
    Table.objects.filter(location=str(table_dir)).delete()
    started = time.perf_counter()
    table = services.table_register(location=str(table_dir))
    register_s = time.perf_counter() - started
    statuses = [ProcessStatus.SUCCESS] * 8 + [ProcessStatus.FAILED, ProcessStatus.CANCELED]
    now = timezone.now()
    Process.objects.bulk_create(
        (
            Process(
                table=table,
                action=("rewrite", "expire-snapshots", "clean-orphan-files")[i % 3],
                factory="bench",
                status=statuses[i % len(statuses)],
                started_at=now,
                finished_at=now,
                summary={"files_in": i},
            )
            for i in range(args.processes)
        ),
        batch_size=10_000,
    )
    user, _ = get_user_model().objects.get_or_create(username="bench-admin")
    user.groups.add(Group.objects.get_or_create(name="admin")[0])
    client = Client()
    client.force_login(user)

    pages = {
        f"table page ({table.file_count:,} files)": f"/tables/{table.pk}/",
        f"processes page ({args.processes:,} rows)": "/processes/",
        f"table processes tab ({args.processes:,} rows)": f"/tables/{table.pk}/processes/",
        "processes page, oldest rows (keyset paging)": f"/processes/?before={Process.objects.order_by('id').values_list('id', flat=True)[60]}",
        "overview": "/",
    }
    lines = [f"| page | median | p95 ({args.runs} requests) | target |", "|---|---|---|---|"]
    for label, url in pages.items():
        median, p95 = _timed(client, url, args.runs)
        target = (
            ("p95 < 150 ms: met" if p95 < 150 else "p95 < 150 ms: NOT met")
            if "files)" in label or label.startswith("processes page (")
            else "—"
        )
        lines.append(f"| {label} | {median:.1f} ms | {p95:.1f} ms | {target} |")
        print(lines[-1], flush=True)
    body = (
        "Django test client in-process (no network), logged in as an admin; the bench database on the local "
        f"Postgres. Registering the table (listing its {table.file_count:,} files once to keep its histogram and "
        f"timeline on the row) took {register_s:.1f} s. The bench database also holds the {Table.objects.count():,} "
        "tables of bench/triggers.py, which the overview ranks.\n\n" + "\n".join(lines)
    )
    write_section("Console pages (bench/console.py)", body)


if __name__ == "__main__":
    main()
