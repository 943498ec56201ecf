"""The served console under concurrent load: p50/p95 response times of the table list, a table
page and the processes list with 20 concurrent logged-in clients against gunicorn run exactly as
``manage.py lakewarden_serve`` runs it (``LAKEWARDEN_WEB_WORKERS`` gthread workers of
``LAKEWARDEN_WEB_THREADS`` threads). Target: p95 < 150 ms for each page.

    .venv/bin/python bench/web.py                    # defaults below
    .venv/bin/python bench/web.py --clients 20 --requests 40 --workers 5 --threads 4

Runs against its own database (``lakewarden_bench_web``, created and migrated when missing, or
``LAKEWARDEN_BENCH_DATABASE_URL``) and only ever replaces its own rows: a 20,000-file Iceberg table
(bench/listing.py's, cached under var/bench/), 2,000 more table rows and 20,000 process history
rows. Clients and server share the machine; each client keeps its connection open, as a browser.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
os.environ.setdefault(
    "LAKEWARDEN_BENCH_DATABASE_URL", "postgresql://lakewarden:lakewarden@127.0.0.1:5432/lakewarden_bench_web"
)

from common import BENCH_DATABASE, django_on_bench_database, write_section  # noqa: E402

BENCH_DIR = ROOT / "var" / "bench"
FAKE_PREFIX = "/bench-web/"
USERNAME, PASSWORD = "bench-web-admin", "bench-web-password-not-secret"
TARGET_MS = 150
#: The same in-process measurement before the pages were made cheap (issue 10 item 8), kept for
#: comparison: mean CPU ms per request (a spread of runs on the shared machine) and SQL queries.
CPU_BEFORE = (
    "Before (2026-11-24, same measurement, means over 100 requests in 3 runs): table list "
    "10.9–12.5 ms and 5 queries, table page 11.4–14.5 ms and 5 queries (one of them the "
    "process-durations query, about 38 ms of Postgres time on this table's 20,000 processes), "
    "processes list 14.2–17.5 ms and 4 queries."
)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def build_data(files: int, tables: int, processes: int):
    """The bench rows (replacing those of an earlier run); returns the real table."""
    import listing

    table_dir = Path(listing.build(files)).parent.parent
    os.environ["LAKEWARDEN_ALLOWED_ROOTS"] = str(BENCH_DIR)
    django_on_bench_database()
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group
    from django.utils import timezone

    from processes.models import Process, ProcessStatus
    from storage import services
    from storage.models import Table

    Table.objects.filter(location__startswith=FAKE_PREFIX).delete()
    Table.objects.filter(location=str(table_dir)).delete()  # its processes go with it
    table = services.table_register(location=str(table_dir))
    formats = ("iceberg", "delta", "hudi")
    Table.objects.bulk_create(
        (
            Table(
                name=f"bench_web_{i:05d}",
                format=formats[i % 3],
                location=f"{FAKE_PREFIX}t{i:05d}",
                current_instant="1",
                file_count=100 + i,
            )
            for i in range(tables)
        ),
        batch_size=5000,
    )
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
            for i in range(processes)
        ),
        batch_size=10_000,
    )
    user = get_user_model().objects.filter(username=USERNAME).first()
    if user is None:
        user = get_user_model().objects.create_user(username=USERNAME, password=PASSWORD)
    user.groups.add(Group.objects.get_or_create(name="admin")[0])
    return table


class Server:
    """gunicorn as lakewarden_serve starts it, in its own process group, on a free port."""

    def __init__(self, workers: int, threads: int, log: Path, *, sync: bool = False) -> None:
        from console.management.commands.lakewarden_serve import web_command

        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        env = {**os.environ, "DATABASE_URL": BENCH_DATABASE, "PYTHONPATH": str(ROOT)}
        env.pop("DEBUG", None)
        command = web_command(
            sys.executable, host="127.0.0.1", port=self.port, workers=workers, threads=threads
        )
        command[command.index("--access-logfile") + 1] = os.devnull  # no logging cost in the numbers
        if sync:  # what lakewarden_serve ran before LAKEWARDEN_WEB_WORKERS: sync workers
            at = command.index("--worker-class")
            end = at + (4 if command[at + 1] == "gthread" else 2)
            command[at:end] = ["--worker-class", "sync"]
        self._handle = log.open("w")
        self.child = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=self._handle, stderr=subprocess.STDOUT, start_new_session=True
        )

    def wait_ready(self, workers: int, timeout: float = 180) -> None:
        import requests

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.child.poll() is not None:
                raise SystemExit(
                    f"gunicorn exited with {self.child.returncode}:\n{self.log.read_text()[-3000:]}"
                )
            booted = self.log.read_text().count("Booting worker with pid")
            try:
                if booted >= workers and requests.get(f"{self.url}/accounts/login/", timeout=30).ok:
                    return
            except requests.RequestException:  # not listening yet, or the app still loading
                pass
            time.sleep(0.3)
        raise SystemExit(f"gunicorn did not answer within {timeout} s:\n{self.log.read_text()[-3000:]}")

    def stop(self) -> None:
        if self.child.poll() is None:
            os.killpg(self.child.pid, signal.SIGTERM)
            try:
                self.child.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.child.pid, signal.SIGKILL)
                self.child.wait()
        self._handle.close()


def log_in(url: str):
    import requests

    session = requests.Session()
    page = session.get(f"{url}/accounts/login/", timeout=30)
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
    response = session.post(
        f"{url}/accounts/login/",
        data={"username": USERNAME, "password": PASSWORD, "csrfmiddlewaretoken": token},
        allow_redirects=False,
        timeout=30,
    )
    if response.status_code != 302:
        raise SystemExit(f"login failed: {response.status_code}")
    return session


def _get(session, url: str):
    """GET ``url``; once more on a fresh connection when the server closed the kept-alive one just
    as the request went out (gunicorn drops connections idle for 2 s), as a browser does. The
    latency measured includes the failed attempt."""
    import requests

    try:
        return session.get(url, allow_redirects=False, timeout=60)
    except requests.ConnectionError:
        return session.get(url, allow_redirects=False, timeout=60)


def load(sessions, url: str, requests_per_client: int) -> tuple[list[float], float]:
    """Every client requests ``url`` ``requests_per_client`` times, all clients at once; returns
    the latencies (ms) and the wall time (s)."""
    import requests

    samples: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()
    start = threading.Barrier(len(sessions) + 1)

    def client(session) -> None:
        mine = []
        start.wait()
        for _ in range(requests_per_client):
            began = time.perf_counter()
            try:
                response = _get(session, url)
            except requests.RequestException as error:
                errors.append(f"{url}: {error}")
                continue
            mine.append((time.perf_counter() - began) * 1000)
            if response.status_code != 200:
                errors.append(f"{url}: {response.status_code}")
        with lock:
            samples.extend(mine)

    threads = [threading.Thread(target=client, args=(s,)) for s in sessions]
    for thread in threads:
        thread.start()
    start.wait()
    began = time.perf_counter()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - began
    if errors:
        raise SystemExit(f"{len(errors)} requests failed: {errors[:5]}")
    return samples, wall


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def measure(server: Server, workers: int, pages: dict[str, str], clients: int, requests_per_client: int):
    """``(label, samples, wall)`` per page, the server serving ``clients`` concurrent clients."""
    server.wait_ready(workers)
    sessions = [log_in(server.url) for _ in range(clients)]
    results = []
    try:
        for label, path in pages.items():
            load(sessions, f"{server.url}{path}", 3)  # warm every worker's caches and connections
            samples, wall = load(sessions, f"{server.url}{path}", requests_per_client)
            results.append((label, samples, wall))
    finally:
        for session in sessions:
            session.close()
    return results


def _queries_of(client, path: str) -> int:
    from django.db import connection

    queries: list[str] = []

    def count(execute, sql, params, many, context):
        queries.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(count):
        client.get(path)
    return len(queries)


def in_process(pages: dict[str, str], requests_per_page: int) -> dict[str, tuple[float, float, int]]:
    """``(median, mean)`` CPU ms per request and SQL queries per request of each page, through
    Django's test client in this process (no network, no concurrency): what a request costs the
    server, which bounds what 2 cores can serve."""
    from django.contrib.auth import get_user_model
    from django.test import Client

    client = Client()
    client.force_login(get_user_model().objects.get(username=USERNAME))
    found = {}
    for label, path in pages.items():
        for _ in range(5):  # warm caches (templates, charts), as a page visited before
            client.get(path)
        queries = _queries_of(client, path)
        samples = []
        for _ in range(requests_per_page):
            began = time.process_time()
            response = client.get(path)
            samples.append((time.process_time() - began) * 1000)
            if response.status_code != 200:
                raise SystemExit(f"{path}: {response.status_code}")
        found[label] = (statistics.median(samples), statistics.fmean(samples), queries)
    return found


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--requests", type=int, default=40, help="requests per client and page")
    parser.add_argument("--files", type=int, default=20_000)
    parser.add_argument("--tables", type=int, default=2_000)
    parser.add_argument("--processes", type=int, default=20_000)
    parser.add_argument("--workers", type=int, default=None, help="default: LAKEWARDEN_WEB_WORKERS")
    parser.add_argument("--threads", type=int, default=None, help="default: LAKEWARDEN_WEB_THREADS")
    parser.add_argument(
        "--no-baseline", action="store_true", help="skip the former set-up (2 sync workers) for comparison"
    )
    parser.add_argument("--no-write", action="store_true", help="print only, leave RESULTS.md alone")
    parser.add_argument("--cpu-requests", type=int, default=200, help="in-process requests per page")
    args = parser.parse_args()

    table = build_data(args.files, args.tables, args.processes)
    from django.conf import settings

    from storage.models import Table

    workers = args.workers or settings.LAKEWARDEN_WEB_WORKERS
    threads = args.threads or settings.LAKEWARDEN_WEB_THREADS
    pages = {
        f"table list ({Table.objects.count():,} tables, first page)": "/tables/",
        f"table page (Iceberg, {table.file_count:,} files)": f"/tables/{table.pk}/",
        f"processes list ({args.processes:,} rows)": "/processes/",
    }
    kind = "sync workers" if threads == 1 else f"gthread workers x {threads} threads"
    setups = [(f"{workers} {kind} (default)", workers, threads, False)]
    if not args.no_baseline:
        setups.append(("5 gthread workers x 4 threads (the earlier default)", 5, 4, False))
    BENCH_DIR.mkdir(parents=True, exist_ok=True)
    costs = in_process(pages, args.cpu_requests)
    cpu_lines = [
        "| page | CPU ms/request, median | mean | SQL queries/request |",
        "|---|---:|---:|---:|",
        *(
            f"| {label} | {median:.1f} | {mean:.1f} | {queries} |"
            for label, (median, mean, queries) in costs.items()
        ),
    ]
    print("\n".join(cpu_lines), flush=True)
    load_before = os.getloadavg()[0]
    lines = [
        f"| gunicorn | page | p50 | p95 | max | requests/s | target p95 < {TARGET_MS} ms |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    met = True
    for number, (setup, setup_workers, setup_threads, sync) in enumerate(setups):
        server = Server(setup_workers, setup_threads, BENCH_DIR / "web-gunicorn.log", sync=sync)
        try:
            results = measure(server, setup_workers, pages, args.clients, args.requests)
        finally:
            server.stop()
        for label, samples, wall in results:
            p50, p95 = statistics.median(samples), percentile(samples, 0.95)
            verdict = ("met" if p95 < TARGET_MS else "NOT met") if number == 0 else "—"
            met &= number > 0 or p95 < TARGET_MS
            lines.append(
                f"| {setup} | {label} | {p50:.0f} ms | {p95:.0f} ms | {max(samples):.0f} ms | "
                f"{len(samples) / wall:.0f} | {verdict} |"
            )
            print(lines[-1], flush=True)
    load_after = os.getloadavg()[0]
    body = (
        f"gunicorn as `manage.py lakewarden_serve` runs it (`LAKEWARDEN_WEB_WORKERS` workers of "
        f"`LAKEWARDEN_WEB_THREADS` threads, defaults on this machine: sync workers for one thread), DEBUG "
        f"off, no access log; the earlier default (5 gthread workers x 4 threads) for comparison. {args.clients} concurrent clients (Python threads "
        f"with `requests`, keep-alive, logged in through the login form as an admin) each request a page "
        f"{args.requests} times after a warm-up, one page at a time. Clients, server and Postgres share the "
        f"machine, which other jobs share too: 1-minute load average {load_before:.1f} when the load "
        f"started, {load_after:.1f} when it ended. Bench database "
        f"`{BENCH_DATABASE.rsplit('/', 1)[1]}`.\n\n" + "\n".join(lines) + "\n\n"
        f"Target p95 < {TARGET_MS} ms on every page with the default set-up: {'met' if met else 'NOT met'}.\n\n"
        f"What one request costs the server: CPU time (`time.process_time`) per request through Django's "
        f"test client in one process, {args.cpu_requests} requests per page after a warm-up, same data "
        f"and user:\n\n" + "\n".join(cpu_lines) + "\n\n" + CPU_BEFORE
    )
    if not args.no_write:
        write_section("Served console under load (bench/web.py)", body)
    print(body)


if __name__ == "__main__":
    main()
