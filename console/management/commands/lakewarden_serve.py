from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from django.core.management.base import BaseCommand, CommandError

from console.preflight import missing_services


class Command(BaseCommand):
    help = (
        "Run the web server, a Celery worker and Celery beat together in the foreground (Ctrl-C stops all)."
    )

    requires_system_checks = []

    def add_arguments(self, parser):
        parser.add_argument("--port", type=int, default=int(os.environ.get("LAKEWARDEN_PORT", "8000")))
        parser.add_argument("--host", default=os.environ.get("LAKEWARDEN_HOST", "127.0.0.1"))

    def handle(self, *args, port: int, host: str, **options):
        problems = missing_services()
        if problems:
            raise CommandError("\n".join(problems))
        python = sys.executable
        commands = {
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
            "worker": [
                python,
                "-m",
                "celery",
                "-A",
                "console",
                "worker",
                "--loglevel",
                "INFO",
                "--concurrency",
                "2",
            ],
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
        os.makedirs("var", exist_ok=True)
        children = {name: subprocess.Popen(command) for name, command in commands.items()}
        self.stdout.write(
            self.style.SUCCESS(f"Lakewarden is running at http://{host}:{port}/  (Ctrl-C to stop)")
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
