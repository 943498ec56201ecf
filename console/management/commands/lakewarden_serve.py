"""``manage.py lakewarden_serve``: the whole console on one machine, in the foreground.

Starts the web server (gunicorn), one Celery worker for the light queue (scheduler ticks, reaper,
kills, metadata refreshes), one for the heavy queue (processes and queries, each holding a Spark
session) and Celery beat. On several machines, run these pieces separately instead (README,
"Deployment"): any number of light and heavy workers, exactly one beat.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from console.preflight import missing_services


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


class Command(BaseCommand):
    help = (
        "Run the web server, a light and a heavy Celery worker and Celery beat together in the "
        "foreground (Ctrl-C stops all)."
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

    def commands(
        self, *, host: str, port: int, concurrency: int, light_concurrency: int
    ) -> dict[str, list[str]]:
        python = sys.executable
        return {
            "web": [
                python,
                "-m",
                "gunicorn",
                "console.wsgi",
                "--bind",
                f"{host}:{port}",
                "--workers",
                "2",
                "--timeout",
                "120",
                "--access-logfile",
                "-",
            ],
            "light worker": worker_command(
                python, name="light", queue=settings.CELERY_TASK_DEFAULT_QUEUE, concurrency=light_concurrency
            ),
            "heavy worker": worker_command(
                python, name="heavy", queue=settings.LAKEWARDEN_HEAVY_QUEUE, concurrency=concurrency
            ),
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
                os.path.join("var", "celerybeat-schedule"),
            ],
        }

    def handle(self, *args, port: int, host: str, concurrency: int, light_concurrency: int, **options):
        if concurrency < 1 or light_concurrency < 1:
            raise CommandError("worker concurrency must be at least 1")
        problems = missing_services()
        if problems:
            raise CommandError("\n".join(problems))
        commands = self.commands(
            host=host, port=port, concurrency=concurrency, light_concurrency=light_concurrency
        )
        os.makedirs("var", exist_ok=True)
        children = {name: subprocess.Popen(command) for name, command in commands.items()}
        spark = settings.LAKEWARDEN_SPARK_REMOTE or settings.LAKEWARDEN_SPARK_MASTER
        self.stdout.write(
            self.style.SUCCESS(
                f"Lakewarden is running at http://{host}:{port}/  (Ctrl-C to stop)\n"
                f"  light worker: queue {settings.CELERY_TASK_DEFAULT_QUEUE}, concurrency {light_concurrency}\n"
                f"  heavy worker: queue {settings.LAKEWARDEN_HEAVY_QUEUE}, concurrency {concurrency}, "
                f"Spark {spark}"
            )
        )
        stopping = False

        def stop(*_):
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGTERM, stop)
        try:
            while not stopping:
                for name, child in children.items():
                    if child.poll() is not None:
                        self.stderr.write(f"{name} exited with code {child.returncode}; stopping the others")
                        stopping = True
                time.sleep(0.5)
        finally:
            for child in children.values():
                if child.poll() is None:
                    child.terminate()
            for child in children.values():
                try:
                    child.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    child.kill()
