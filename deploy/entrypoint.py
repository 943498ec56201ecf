"""The container's entry point: one image, every piece of Lakewarden by role.

    web                          gunicorn on LAKEWARDEN_HOST:LAKEWARDEN_PORT (0.0.0.0:8000)
    worker --queue light|heavy|NAME [--concurrency N]
                                 a Celery worker; light: LAKEWARDEN_DEFAULT_QUEUE, heavy:
                                 LAKEWARDEN_HEAVY_QUEUE; concurrency from LAKEWARDEN_LIGHT_CONCURRENCY /
                                 LAKEWARDEN_WORKER_CONCURRENCY
    beat                         Celery beat (run exactly one), its schedule in the var folder
    migrate                      wait for Postgres and the broker, migrate, seed the plugins'
                                 configuration, make the admin user (LAKEWARDEN_ADMIN_USER/_PASSWORD)
    demo                         build the demo lakehouse: on the object store LAKEWARDEN_DEMO_S3_ENDPOINT
                                 with its Iceberg REST catalog LAKEWARDEN_DEMO_ICEBERG_URI, or in
                                 the local warehouse without them
    seaweedfs                    the demo's object store (SeaweedFS: S3 and Iceberg REST), its data
                                 in the var folder, its buckets made
    healthcheck                  the image's HEALTHCHECK: /healthz for web, the role's process otherwise
    anything else                run as a command (``manage.py shell``, ``bash``)

Settings come only from the environment (docs/operating/configuration.md). Logs go to standard
output and error. Long-running roles replace this process (``exec``), so the SIGTERM tini passes on
reaches gunicorn or Celery itself: gunicorn finishes its requests, a Celery worker shuts down warmly
(running tasks finish), beat stops.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
import urllib.request
from pathlib import Path

APP = Path(__file__).resolve().parent.parent
#: Where the running role is written, for ``healthcheck`` (a fresh process with the image's env).
ROLE_FILE = Path("/tmp/lakewarden-role")  # noqa: S108 - the container's own /tmp
WAIT_SECONDS = float(os.environ.get("LAKEWARDEN_WAIT_SECONDS", "300"))


def _django():
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
    sys.path.insert(0, str(APP))
    os.chdir(APP)
    import django

    django.setup()
    from django.conf import settings

    return settings


def _remember(role: str) -> None:
    try:
        ROLE_FILE.write_text(role, encoding="utf-8")
    except OSError:  # a read-only /tmp: the health check then only asks /healthz when it answers
        pass


def _exec(role: str, command: list[str]) -> None:
    _remember(role)
    print(f"lakewarden-entrypoint: {role}: {' '.join(command)}", flush=True)
    os.execv(command[0], command)


def _wait_for_services() -> None:
    """Postgres and the broker answer (compose and Kubernetes start containers in any order)."""
    from console.preflight import missing_services

    deadline = time.monotonic() + WAIT_SECONDS
    while problems := missing_services():
        if time.monotonic() > deadline:
            sys.exit("\n".join(problems))
        time.sleep(1)


def _wait_for_migrations() -> None:
    """Postgres and the broker answer and every migration is applied: the ``migrate`` role (a
    compose one-shot, a Kubernetes Job) runs them while the other pieces start."""
    from django.db import DatabaseError, connection
    from django.db.migrations.executor import MigrationExecutor

    _wait_for_services()
    deadline = time.monotonic() + WAIT_SECONDS
    while True:
        try:
            executor = MigrationExecutor(connection)
            if not executor.migration_plan(executor.loader.graph.leaf_nodes()):
                return
        except DatabaseError:
            pass
        finally:
            connection.close()
        if time.monotonic() > deadline:
            sys.exit(f"migrations still not applied after {WAIT_SECONDS:.0f} s: run the migrate role")
        time.sleep(2)


def web() -> None:
    settings = _django()
    _wait_for_migrations()
    from console.management.commands.lakewarden_serve import Command, web_command
    from console.metrics.http import reset_samples, samples_folder

    Command().prepare_var_dir()
    reset_samples(samples_folder())
    command = web_command(
        sys.executable,
        host=os.environ.get("LAKEWARDEN_HOST", "0.0.0.0"),  # noqa: S104 - a container's port
        port=int(os.environ.get("LAKEWARDEN_PORT", "8000")),
        workers=settings.LAKEWARDEN_WEB_WORKERS,
        threads=settings.LAKEWARDEN_WEB_THREADS,
        control_socket=str(settings.LAKEWARDEN_VAR_DIR / "gunicorn.ctl"),
    )
    _exec("web", command)


def worker(arguments: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="worker")
    parser.add_argument("--queue", default="light", help="light, heavy or a queue name")
    parser.add_argument("--concurrency", type=int, default=None)
    parser.add_argument("--name", default=None, help="worker name (default: the queue's)")
    options = parser.parse_args(arguments)
    settings = _django()
    _wait_for_migrations()
    from console.management.commands.lakewarden_serve import worker_command

    queues = {"light": settings.CELERY_TASK_DEFAULT_QUEUE, "heavy": settings.LAKEWARDEN_HEAVY_QUEUE}
    concurrency = {"light": settings.LAKEWARDEN_LIGHT_CONCURRENCY}
    queue = queues.get(options.queue, options.queue)
    command = worker_command(
        sys.executable,
        name=options.name or options.queue.replace("@", "-"),
        queue=queue,
        concurrency=options.concurrency
        or concurrency.get(options.queue, settings.LAKEWARDEN_WORKER_CONCURRENCY),
    )
    os.makedirs(settings.LAKEWARDEN_VAR_DIR, exist_ok=True)
    _exec("worker", command)


def beat() -> None:
    settings = _django()
    _wait_for_migrations()
    from console.management.commands.lakewarden_serve import Command

    os.makedirs(settings.LAKEWARDEN_VAR_DIR, exist_ok=True)
    # lakewarden_serve's beat: its schedule in the var folder
    _exec("beat", Command().commands(host="", port=0, concurrency=1, light_concurrency=1)["beat"])


def migrate() -> None:
    _django()
    from django.core.management import call_command

    _wait_for_services()
    call_command("migrate", interactive=False, verbosity=1)
    call_command("lakewarden_plugins")
    call_command("lakewarden_admin")


def demo(arguments: list[str]) -> None:
    """The demo lakehouse; on an object store of its own when LAKEWARDEN_DEMO_S3_ENDPOINT is set."""
    parser = argparse.ArgumentParser(prog="demo")
    parser.add_argument("--scale", type=int, default=int(os.environ.get("LAKEWARDEN_DEMO_SCALE", "150")))
    options = parser.parse_args(arguments)
    _django()
    from django.core.management import call_command

    _wait_for_migrations()
    endpoint = os.environ.get("LAKEWARDEN_DEMO_S3_ENDPOINT")
    if not endpoint:
        call_command("lakewarden_demo", scale=options.scale, storage="local")
        return
    from devtools.demo import demo_lakehouse_build_s3
    from devtools.seaweedfs import TABLE_BUCKET

    s3 = {
        "s3.endpoint": endpoint,
        "s3.access-key-id": os.environ["LAKEWARDEN_DEMO_S3_ACCESS_KEY"],
        "s3.secret-access-key": os.environ["LAKEWARDEN_DEMO_S3_SECRET_KEY"],
        "s3.region": "us-east-1",
        "s3.path-style-access": "true",
    }
    rest = {
        "uri": os.environ["LAKEWARDEN_DEMO_ICEBERG_URI"],
        "warehouse": f"s3://{TABLE_BUCKET}/",
        "credential": f"{s3['s3.access-key-id']}:{s3['s3.secret-access-key']}",
        **s3,
    }
    _wait_for_catalog(rest)
    result = demo_lakehouse_build_s3(
        s3_properties=s3, rest_properties=rest, scale=options.scale, report=print
    )
    for key, reason in result["failed"].items():
        print(f"could not register {key}: {reason}", file=sys.stderr)
    print(
        f"demo lakehouse on {endpoint}: {len(result['built'])} tables built, {len(result['registered'])} registered"
    )
    if result["failed"]:
        sys.exit(1)


def _wait_for_catalog(properties: dict[str, str]) -> None:
    """The REST catalog lists its namespaces: its table bucket exists. The seaweedfs container
    makes that bucket after its server answers, so /v1/config alone answers too early (the demo
    then failed with NoSuchNamespaceError)."""
    from pyiceberg.catalog.rest import RestCatalog

    deadline = time.monotonic() + WAIT_SECONDS
    while True:
        try:
            RestCatalog("lakewarden-wait", **properties).list_namespaces()
            return
        except Exception as error:  # not up yet, the bucket not made yet, ...
            if time.monotonic() > deadline:
                sys.exit(
                    f"the Iceberg catalog at {properties['uri']} did not list namespaces in {WAIT_SECONDS:.0f} s: {error}"
                )
        time.sleep(1)


def seaweedfs() -> None:
    """``weed server`` listening on every interface, fixed ports (devtools.seaweedfs.demo_ports),
    the identity LAKEWARDEN_DEMO_S3_ACCESS_KEY/_SECRET_KEY, the demo's buckets made; it runs in the
    foreground and SIGTERM stops it."""
    settings = _django()
    from devtools.seaweedfs import DEMO_BUCKETS, SeaweedFS, demo_ports

    store = SeaweedFS(
        Path(settings.LAKEWARDEN_VAR_DIR) / "seaweedfs",
        access_key=os.environ["LAKEWARDEN_DEMO_S3_ACCESS_KEY"],
        secret_key=os.environ["LAKEWARDEN_DEMO_S3_SECRET_KEY"],
        buckets=DEMO_BUCKETS,
        ports=demo_ports(),
    )
    command = [part.replace("-ip.bind=127.0.0.1", "-ip.bind=0.0.0.0") for part in store.prepare()]
    import subprocess

    _remember("seaweedfs")
    store.process = subprocess.Popen(command, cwd=store.folder)  # its log on our standard output
    signal.signal(signal.SIGTERM, lambda *_: store.process.terminate())
    store.wait_ready()
    store.ensure_buckets()
    print(f"seaweedfs: S3 on :{store.ports['s3']}, Iceberg REST on :{store.ports['iceberg']}", flush=True)
    sys.exit(store.process.wait())


def healthcheck() -> None:
    """Exit 0 when healthy: web answers /healthz 200; other roles are healthy while they run."""
    try:
        role = ROLE_FILE.read_text(encoding="utf-8").strip()
    except OSError:
        role = ""
    if role not in ("", "web"):
        sys.exit(0)
    port = os.environ.get("LAKEWARDEN_PORT", "8000")
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as answer:  # noqa: S310
            sys.exit(0 if answer.status == 200 else 1)
    except OSError as error:
        sys.exit(f"/healthz: {error}")


def main(argv: list[str]) -> None:
    role, rest = (argv[0], argv[1:]) if argv else ("web", [])
    plain = {"web": web, "beat": beat, "migrate": migrate, "seaweedfs": seaweedfs, "healthcheck": healthcheck}
    with_arguments = {"worker": worker, "demo": demo}
    if role in plain:
        plain[role]()
    elif role in with_arguments:
        with_arguments[role](rest)
    elif role == "manage.py":
        _exec(role, [sys.executable, str(APP / "manage.py"), *rest])
    else:
        _remember(role)
        os.execvp(role, argv)


if __name__ == "__main__":
    main(sys.argv[1:])
