"""``manage.py lakewarden_serve``: the whole console on one machine, in the foreground.

Starts the web server (gunicorn), one Celery worker for the light queue (scheduler ticks, reaper,
kills, metadata refreshes), one for the heavy queue (processes of the ``default`` resource group and
queries, each holding a Spark session), one per other resource group on that group's queue (as many
processes as its concurrency budget) and Celery beat. A group added later gets its worker at the
next start (the capacity page shows a group no worker consumes the queue of). On several machines, run these pieces separately instead (README,
"Deployment"): any number of light and heavy workers, exactly one beat.

It supervises them: a child that exits (a crash, an out-of-memory kill) is started again after a
back-off (1 s, doubling up to 30 s, back to 1 s once a child has run for a minute), and each
start and exit is logged with the pid and exit code. Only Ctrl-C or SIGTERM stops everything: the
signal is forwarded to every child, and a child still running after ``--stop-timeout`` seconds is
killed with everything it started (each child runs in its own process group).

With ``LAKEWARDEN_DEMO_STORAGE=s3`` the demo's SeaweedFS (``devtools.seaweedfs.demo_store``: data
under ``var/seaweedfs``, fixed ports checked free first) is one more supervised child, started first
and waited for (its S3 API answering, its buckets there) before the others, which reach the demo
tables through it. It lives here rather than in the Makefile so that it is restarted like any other
child and stops with Ctrl-C; its output goes to ``var/seaweedfs/weed.log``.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from console.preflight import missing_services
from devtools.seaweedfs import PortsBusy, SeaweedFS, demo_storage, demo_store

#: Restart back-off: the first restart waits this long, each quick crash doubles it up to the cap.
FIRST_BACKOFF_SECONDS = 1.0
MAX_BACKOFF_SECONDS = 30.0
#: A child that ran at least this long before exiting is restarted after the first back-off again.
STABLE_SECONDS = 60.0
POLL_SECONDS = 0.2


def worker_command(
    python: str, *, name: str, queue: str, concurrency: int, loglevel: str = "INFO"
) -> list[str]:
    """A Celery worker consuming one queue, named ``<name>@<host>`` (unique per host)."""
    return [
        python,
        "-m",
        "celery",
        "-A",
        "console",
        "worker",
        "--loglevel",
        loglevel,
        "--queues",
        queue,
        "--concurrency",
        str(concurrency),
        "--hostname",
        f"{name}@{socket.gethostname()}",
    ]


#: gunicorn's largest request line short of unlimited (gunicorn.http.message.MAX_REQUEST_LINE).
LIMIT_REQUEST_LINE = 8190
#: Bytes of one request header field (gunicorn's default: 8190).
LIMIT_REQUEST_FIELD_SIZE = 16 * 1024


def web_command(
    python: str, *, host: str, port: int, workers: int, threads: int, control_socket: str | None = None
) -> list[str]:
    """gunicorn with ``workers`` worker processes: sync workers for one thread (the default: a page
    costs a few milliseconds of CPU, and sync workers gave the tightest tail in bench/web.py),
    gthread workers of ``threads`` threads each above that.

    gunicorn's control socket defaults to one path in the home folder shared by every gunicorn of
    the user; it goes to ``control_socket`` (the var folder) instead, or is left out when none is
    given or the path is too long for a Unix socket.

    The request line may be as long as gunicorn allows (``LIMIT_REQUEST_LINE``; its default 4,094
    bytes refused URLs the API documents), header fields twice its default; what gunicorn still
    refuses itself it answers with the API's JSON error body (console/gunicorn_conf.py).
    """
    if control_socket and len(os.fsencode(control_socket)) < 100:
        control = ["--control-socket", control_socket]
    else:
        control = ["--no-control-socket"]
    return [
        python,
        "-m",
        "gunicorn",
        "console.wsgi",
        "--bind",
        f"{host}:{port}",
        "--workers",
        str(workers),
        *(
            ["--worker-class", "sync"]
            if threads == 1
            else ["--worker-class", "gthread", "--threads", str(threads)]
        ),
        "--timeout",
        "120",
        "--access-logfile",
        "-",
        "--config",
        "python:console.gunicorn_conf",
        "--limit-request-line",
        str(LIMIT_REQUEST_LINE),
        "--limit-request-field_size",
        str(LIMIT_REQUEST_FIELD_SIZE),
        *control,
    ]


def group_queues() -> list[tuple[str, str, int]]:
    """(name, queue, concurrency budget) of each resource group other than ``default`` (whose queue
    is the heavy one); none when the groups cannot be read (said in the log)."""
    try:
        from processes.groups.models import ResourceGroup

        return [
            (group.name, group.effective_queue, group.max_concurrency)
            for group in ResourceGroup.objects.order_by("name")
            if not group.is_default and group.effective_queue != settings.LAKEWARDEN_HEAVY_QUEUE
        ]
    except Exception as error:  # no database yet, or not migrated: the groups' workers are left out
        sys.stderr.write(
            f"lakewarden_serve: no resource group workers: the groups could not be read ({error})\n"
        )
        return []


@dataclass
class Child:
    """One supervised program: its command, the running process and its restart back-off."""

    name: str
    command: list[str]
    process: subprocess.Popen | None = None
    started_at: float = 0.0
    backoff: float = FIRST_BACKOFF_SECONDS
    restart_at: float | None = None
    restarts: int = 0
    groups: set[int] = field(default_factory=set)
    #: Where its output goes (appended); None: this command's own stdout/stderr.
    log: str | None = None

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None


def _parent_death_signal():
    """On Linux, a ``preexec_fn`` that has the kernel send SIGTERM to the child when this command
    dies, even by ``kill -9`` (``prctl(PR_SET_PDEATHSIG)``): no orphaned workers. None elsewhere."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl  # loaded here, not in the forked child
    except (OSError, AttributeError):
        return None

    def preexec() -> None:
        prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG

    return preexec


def kill_group(pgid: int, sig: int = signal.SIGKILL) -> None:
    """Signal a whole process group (a child and what it started: pool processes, Spark's JVM)."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


class Command(BaseCommand):
    help = (
        "Run the web server, a light and a heavy Celery worker and Celery beat together in the "
        "foreground, restarting any that exits (Ctrl-C stops all)."
    )

    requires_system_checks = []

    def add_arguments(self, parser):
        parser.add_argument("--port", type=int, default=int(os.environ.get("LAKEWARDEN_PORT", "8000")))
        parser.add_argument("--host", default=os.environ.get("LAKEWARDEN_HOST", "127.0.0.1"))
        parser.add_argument(
            "--concurrency",
            type=int,
            default=settings.LAKEWARDEN_WORKER_CONCURRENCY,
            help="processes of the heavy worker (default: LAKEWARDEN_WORKER_CONCURRENCY)",
        )
        parser.add_argument(
            "--light-concurrency",
            type=int,
            default=settings.LAKEWARDEN_LIGHT_CONCURRENCY,
            help="processes of the light worker (default: LAKEWARDEN_LIGHT_CONCURRENCY)",
        )
        parser.add_argument(
            "--web-workers",
            type=int,
            default=settings.LAKEWARDEN_WEB_WORKERS,
            help="gunicorn worker processes (default: LAKEWARDEN_WEB_WORKERS)",
        )
        parser.add_argument(
            "--web-threads",
            type=int,
            default=settings.LAKEWARDEN_WEB_THREADS,
            help="threads per gunicorn worker (default: LAKEWARDEN_WEB_THREADS)",
        )
        parser.add_argument(
            "--stop-timeout",
            type=float,
            default=30.0,
            help="seconds the children get to stop after Ctrl-C/SIGTERM before they are killed",
        )

    def commands(
        self,
        *,
        host: str,
        port: int,
        concurrency: int,
        light_concurrency: int,
        web_workers: int | None = None,
        web_threads: int | None = None,
    ) -> dict[str, list[str]]:
        python = sys.executable
        return {
            "web": web_command(
                python,
                host=host,
                port=port,
                workers=web_workers or settings.LAKEWARDEN_WEB_WORKERS,
                threads=web_threads or settings.LAKEWARDEN_WEB_THREADS,
                control_socket=str(settings.LAKEWARDEN_VAR_DIR / "gunicorn.ctl"),
            ),
            "light worker": worker_command(
                python, name="light", queue=settings.CELERY_TASK_DEFAULT_QUEUE, concurrency=light_concurrency
            ),
            "heavy worker": worker_command(
                python, name="heavy", queue=settings.LAKEWARDEN_HEAVY_QUEUE, concurrency=concurrency
            ),
            **{
                f"group {name} worker": worker_command(
                    python, name=f"group-{name}", queue=queue, concurrency=slots
                )
                for name, queue, slots in group_queues()
            },
            "beat": [
                python,
                "-m",
                "celery",
                "-A",
                "console",
                "beat",
                "--loglevel",
                "INFO",
                "--schedule",
                str(settings.LAKEWARDEN_VAR_DIR / "celerybeat-schedule"),
            ],
        }

    def prepare_var_dir(self) -> None:
        """What the children share, made once here before they start (importing the settings
        makes nothing): the var folder, the secret key file when ``SECRET_KEY`` is unset, and the
        request-latency samples folder."""
        from console.metrics.http import samples_folder

        os.makedirs(settings.LAKEWARDEN_VAR_DIR, exist_ok=True)
        str(settings.SECRET_KEY)  # reads, or makes, <var dir>/secret_key
        samples_folder()

    def demo_store(self) -> SeaweedFS | None:
        """The demo's SeaweedFS when ``LAKEWARDEN_DEMO_STORAGE=s3``, its ports checked free."""
        try:
            if demo_storage() != "s3":
                return None
            store = demo_store(settings.LAKEWARDEN_VAR_DIR)
            store.check_ports()
        except (PortsBusy, ValueError) as error:
            raise CommandError(str(error)) from None
        return store

    def wait_for_store(self, store: SeaweedFS, child: Child) -> None:
        try:
            store.wait_ready(child.process)
            store.ensure_buckets()
        except RuntimeError as error:
            raise CommandError(f"SeaweedFS did not start: {error}") from None
        self.log(f"seaweedfs answers: S3 at {store.endpoint}, Iceberg REST at {store.rest_uri}")

    def log(self, message: str) -> None:
        self.stderr.write(f"lakewarden_serve: {message}")
        self.stderr.flush()

    def handle(
        self,
        *args,
        port: int,
        host: str,
        concurrency: int,
        light_concurrency: int,
        web_workers: int,
        web_threads: int,
        stop_timeout: float,
        **options,
    ):
        if concurrency < 1 or light_concurrency < 1:
            raise CommandError("worker concurrency must be at least 1")
        if web_workers < 1 or web_threads < 1:
            raise CommandError("web workers and threads must be at least 1")
        problems = missing_services()
        if problems:
            raise CommandError("\n".join(problems))
        commands = self.commands(
            host=host,
            port=port,
            concurrency=concurrency,
            light_concurrency=light_concurrency,
            web_workers=web_workers,
            web_threads=web_threads,
        )
        self.prepare_var_dir()
        children = [Child(name, command) for name, command in commands.items()]
        store = self.demo_store()
        if store is not None:
            children.insert(0, Child("seaweedfs", store.prepare(), log=str(store.folder / "weed.log")))
        self.preexec = _parent_death_signal()

        received: list[int] = []

        def on_signal(signum, _frame):
            received.append(signum)

        # Handlers first: a Ctrl-C while the children start still stops all of them.
        previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            for child in children:
                self.start(child)
                if store is not None and child.name == "seaweedfs":
                    self.wait_for_store(store, child)
            self.announce(host, port, web_workers, web_threads, light_concurrency, concurrency)
            while not received:
                self.supervise(children)
                time.sleep(POLL_SECONDS)
            self.log(f"{signal.Signals(received[0]).name} received; stopping every child")
            self.stop_all(children, received[0], stop_timeout)
        except BaseException:
            self.stop_all(children, signal.SIGTERM, stop_timeout)
            raise
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def announce(self, host, port, web_workers, web_threads, light_concurrency, concurrency) -> None:
        spark = settings.LAKEWARDEN_SPARK_REMOTE or settings.LAKEWARDEN_SPARK_MASTER
        self.stdout.write(
            self.style.SUCCESS(
                f"Lakewarden is running at http://{host}:{port}/  (Ctrl-C to stop)\n"
                f"  web: {web_workers} gunicorn workers x {web_threads} threads\n"
                f"  light worker: queue {settings.CELERY_TASK_DEFAULT_QUEUE}, concurrency {light_concurrency}\n"
                f"  heavy worker: queue {settings.LAKEWARDEN_HEAVY_QUEUE}, concurrency {concurrency}, "
                f"Spark {spark}"
                + "".join(
                    f"\n  resource group {name} worker: queue {queue}, concurrency {slots}"
                    for name, queue, slots in group_queues()
                )
            )
        )
        self.stdout.flush()

    def start(self, child: Child) -> None:
        # A process group per child: signals from the terminal reach only this command, which
        # forwards them, and a stuck child is killed with everything it started.
        if child.name == "web":
            # Request-latency samples of the previous web processes (prometheus-client multiprocess mode).
            from console.metrics.http import reset_samples, samples_folder

            reset_samples(samples_folder())
        output = open(child.log, "ab") if child.log else None  # noqa: SIM115 - handed to the child
        try:
            child.process = subprocess.Popen(
                child.command,
                start_new_session=True,
                preexec_fn=self.preexec,
                stdout=output,
                stderr=subprocess.STDOUT if output else None,
            )
        finally:
            if output is not None:
                output.close()
        child.groups.add(child.process.pid)
        child.started_at = time.monotonic()
        child.restart_at = None
        self.log(f"started {child.name} (pid {child.process.pid})")

    def supervise(self, children: list[Child]) -> None:
        now = time.monotonic()
        for child in children:
            if child.restart_at is not None:
                if now >= child.restart_at:
                    child.restarts += 1
                    self.start(child)
                continue
            code = child.process.poll()
            if code is None:
                continue
            ran = now - child.started_at
            if ran >= STABLE_SECONDS:
                child.backoff = FIRST_BACKOFF_SECONDS
            # What the dead child started (Celery's pool processes, a Spark JVM) goes with it.
            kill_group(child.process.pid)
            child.groups.discard(child.process.pid)
            how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
            self.log(
                f"{child.name} (pid {child.process.pid}) exited ({how}, exit code {code}) after "
                f"{ran:.1f} s; restarting in {child.backoff:g} s"
            )
            child.restart_at = now + child.backoff
            child.backoff = min(child.backoff * 2, MAX_BACKOFF_SECONDS)

    def stop_all(self, children: list[Child], sig: int, timeout: float) -> None:
        running = [child for child in children if child.running()]
        for child in running:
            try:
                child.process.send_signal(sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + timeout
        for child in running:
            try:
                child.process.wait(timeout=max(0.0, deadline - time.monotonic()))
                self.log(
                    f"{child.name} (pid {child.process.pid}) stopped (exit code {child.process.returncode})"
                )
            except subprocess.TimeoutExpired:
                self.log(
                    f"{child.name} (pid {child.process.pid}) still running after {timeout:g} s; killing it"
                )
                kill_group(child.process.pid)
                child.process.wait()
        # Whatever a child left behind in its group (an orphaned pool process) goes too.
        for child in children:
            for pgid in child.groups:
                kill_group(pgid)
