"""The console as it is served: real gunicorn with several worker processes, and
``manage.py lakewarden_serve`` supervising web, workers and beat, against the test database.

- A logged-in user stays logged in whichever gunicorn worker answers (one secret key for all of
  them, kept in the var folder, when SECRET_KEY is unset).
- A crashed child of ``lakewarden_serve`` (the heavy worker killed with -9) is started again while
  the web server keeps answering; SIGTERM stops every child.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests

from tests.conftest import REPO_ROOT
from tests.e2e.conftest import _database_url, wait_for

PASSWORD = "correct horse battery"
CONSOLE_PAGES = ("/", "/tables/", "/processes/", "/catalogs/")
START_TIMEOUT = 180  # a loaded 2-core CI machine starting several Django processes at once


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _served_env(settings, var_dir: Path, **extra: str) -> dict[str, str]:
    """The environment of a served Lakewarden on the test database and the test broker, with its
    own var folder and no SECRET_KEY (the case of ``make demo``)."""
    from django.db import connection

    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"SECRET_KEY", "DEBUG", "LAKEWARDEN_HTTPS", "LAKEWARDEN_REQUIRE_SECRET_KEY"}
        and not key.startswith(("LAKEWARDEN_WEB_", "GUNICORN"))
    }
    env.update(
        DATABASE_URL=_database_url(connection.settings_dict),
        CELERY_BROKER_URL=settings.CELERY_BROKER_URL,
        CELERY_RESULT_BACKEND=settings.CELERY_BROKER_URL,
        LAKEWARDEN_VAR_DIR=str(var_dir),
        LAKEWARDEN_WAREHOUSE=str(var_dir / "warehouse"),
        LAKEWARDEN_ALLOWED_ROOTS=str(var_dir / "warehouse"),
        PYTHONPATH=str(REPO_ROOT),
        PYTHONUNBUFFERED="1",
        **extra,
    )
    return env


def _process_state(pid: int) -> str | None:
    """The state letter of a live process (``Z`` for a zombie), None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return stat.rsplit(")", 1)[1].split()[0]


def _alive(pid: int) -> bool:
    return _process_state(pid) not in (None, "Z")


def _processes() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, command line) of every live process."""
    table = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] != "Z":
            table[int(entry.name)] = (int(fields[1]), cmdline)
    return table


def _descendants(root: int) -> dict[int, str]:
    table = _processes()
    found: dict[int, str] = {}
    frontier = [root]
    while frontier:
        parent = frontier.pop()
        for pid, (ppid, cmdline) in table.items():
            if ppid == parent and pid not in found:
                found[pid] = cmdline
                frontier.append(pid)
    return found


def _kill_everything(root: subprocess.Popen, also: set[int]) -> None:
    """SIGKILL the process group of ``root`` and of each of ``also`` (and their descendants)."""
    pids = set(also) | set(_descendants(root.pid)) | {root.pid}
    for pid in pids:
        for kill in (os.killpg, os.kill):
            try:
                kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
    try:
        root.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pass


def _tail(log: Path, chars: int = 6000) -> str:
    return log.read_text(errors="replace")[-chars:] if log.exists() else "(no log)"


@pytest.fixture
def viewer_in_db(transactional_db, django_user_model):
    """A committed viewer user (the served processes read the test database on their own)."""
    from django.contrib.auth.models import Group

    user = django_user_model.objects.create_user(username="served-viewer", password=PASSWORD)
    user.groups.add(Group.objects.get_or_create(name="viewer")[0])
    return user


def _log_in(base_url: str, username: str) -> requests.Session:
    """Log in through the login form, as a browser does (CSRF cookie and the form's token)."""
    session = requests.Session()
    page = session.get(f"{base_url}/accounts/login/", timeout=30)
    assert page.status_code == 200, page.status_code
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
    response = session.post(
        f"{base_url}/accounts/login/",
        data={"username": username, "password": PASSWORD, "csrfmiddlewaretoken": token},
        headers={"Referer": f"{base_url}/accounts/login/"},
        allow_redirects=False,
        timeout=30,
    )
    assert response.status_code == 302, (response.status_code, response.text[:2000])
    assert "/accounts/login/" not in response.headers["Location"]
    assert "sessionid" in session.cookies
    return session


# --- one secret key for all gunicorn workers ------------------------------------------------------


@pytest.mark.e2e
def test_a_logged_in_user_stays_logged_in_across_gunicorn_workers(viewer_in_db, settings, tmp_path):
    """Before the fix each worker made its own key when SECRET_KEY was unset: a quarter to half of
    the requests of a logged-in user bounced to the login page."""
    var_dir = tmp_path / "var"
    port = _free_port()
    base_url = f"http://127.0.0.1:{port}"
    access_log, error_log = tmp_path / "access.log", tmp_path / "gunicorn.log"
    command = [
        sys.executable,
        "-m",
        "gunicorn",
        "console.wsgi",
        "--bind",
        f"127.0.0.1:{port}",
        "--workers",
        "4",
        "--timeout",
        "120",
        "--access-logfile",
        str(access_log),
        "--access-logformat",
        "%(p)s %(s)s %(U)s",
        "--error-logfile",
        str(error_log),
        "--no-control-socket",  # its default path is shared by every gunicorn of the user
    ]
    server = subprocess.Popen(
        command,
        cwd=REPO_ROOT,
        env=_served_env(settings, var_dir),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:

        def ready() -> bool:
            if server.poll() is not None:
                raise AssertionError(f"gunicorn exited with {server.returncode}:\n{_tail(error_log)}")
            if _tail(error_log, 10**6).count("Booting worker with pid") < 4:
                return False
            try:
                return requests.get(f"{base_url}/accounts/login/", timeout=10).status_code == 200
            except (requests.ConnectionError, requests.Timeout):
                return False

        wait_for(ready, timeout=START_TIMEOUT, interval=0.5, message="gunicorn with 4 workers answering")

        cookies = _log_in(base_url, viewer_in_db.username).cookies

        def fetch(i: int) -> tuple[str, int, str]:
            with requests.Session() as browser:  # the same cookies, a connection of its own
                browser.cookies.update(cookies)
                path = CONSOLE_PAGES[i % len(CONSOLE_PAGES)]
                response = browser.get(f"{base_url}{path}", allow_redirects=False, timeout=60)
                return path, response.status_code, response.headers.get("Location", "")

        # Several requests in flight at once: gunicorn's sync workers each take one, so the
        # requests are spread over the worker processes.
        with ThreadPoolExecutor(max_workers=8) as pool:
            results = list(pool.map(fetch, range(80)))

        bounced = [r for r in results if r[1] != 200]
        assert not bounced, (
            f"{len(bounced)} of 80 requests not served (status, login redirect): {bounced[:10]}"
        )
        key_file = var_dir / "secret_key"
        assert key_file.is_file() and (key_file.stat().st_mode & 0o777) == 0o600
        served_by = {line.split()[0] for line in access_log.read_text().splitlines() if line.strip()}
        assert len(served_by) >= 2, f"all requests went to one worker: {served_by}"
    finally:
        _kill_everything(server, set())


# --- lakewarden_serve supervises its children -----------------------------------------------------


def _children_of(pid: int) -> dict[int, str]:
    return {child: cmd for child, (ppid, cmd) in _processes().items() if ppid == pid}


@pytest.mark.e2e
def test_lakewarden_serve_restarts_a_killed_heavy_worker_and_stops_all_on_sigterm(
    transactional_db, settings, tmp_path
):
    import uuid

    from console.celery import app

    var_dir = tmp_path / "var"
    queue = f"test-serve-{uuid.uuid4().hex[:10]}"
    heavy_queue = f"{queue}.heavy"
    port = _free_port()
    base_url = f"http://127.0.0.1:{port}"
    log = tmp_path / "serve.log"
    env = _served_env(
        settings,
        var_dir,
        LAKEWARDEN_DEFAULT_QUEUE=queue,
        LAKEWARDEN_HEAVY_QUEUE=heavy_queue,
        LAKEWARDEN_WEB_WORKERS="2",
        LAKEWARDEN_WEB_THREADS="2",
        LAKEWARDEN_WORKER_CONCURRENCY="1",
        LAKEWARDEN_LIGHT_CONCURRENCY="1",
        LAKEWARDEN_SPARK_MASTER="local[1]",
    )
    handle = log.open("ab")
    serve = subprocess.Popen(
        [sys.executable, "manage.py", "lakewarden_serve", "--port", str(port), "--host", "127.0.0.1"],
        cwd=REPO_ROOT,
        env=env,
        stdout=handle,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    seen: set[int] = set()  # every process the command started, for the clean-up

    def heavy_workers() -> dict[int, str]:
        children = _children_of(serve.pid)
        seen.update(children)
        return {pid: cmd for pid, cmd in children.items() if f"--queues {heavy_queue} " in cmd + " "}

    def check_running() -> None:
        if serve.poll() is not None:
            raise AssertionError(f"lakewarden_serve exited with {serve.returncode}:\n{_tail(log)}")

    def login_page_answers() -> bool:
        try:
            return requests.get(f"{base_url}/accounts/login/", timeout=10).status_code == 200
        except (requests.ConnectionError, requests.Timeout):
            return False

    def heavy_answers_ping(pid: int) -> bool:
        check_running()
        if pid not in heavy_workers():
            return False
        replies = app.control.ping(timeout=1) or []
        return any(name.startswith("heavy@") for reply in replies for name in reply)

    try:
        wait_for(
            lambda: (check_running() or True) and login_page_answers(),
            timeout=START_TIMEOUT,
            interval=0.5,
            message=f"the console answering:\n{_tail(log)}",
        )
        (old_heavy,) = wait_for(heavy_workers, timeout=START_TIMEOUT, message="a heavy worker")
        wait_for(
            lambda: heavy_answers_ping(old_heavy),
            timeout=START_TIMEOUT,
            interval=0.5,
            message="the heavy worker answering a ping",
        )

        # Watch the web server while the heavy worker dies and comes back.
        failures: list[str] = []
        answered = [0]
        stop_watching = threading.Event()

        def watch() -> None:
            while not stop_watching.is_set():
                for path in ("/accounts/login/", "/healthz"):
                    try:
                        status = requests.get(f"{base_url}{path}", timeout=30).status_code
                        if status not in (200, 503):  # /healthz: 503 while a worker is missing
                            failures.append(f"{path}: {status}")
                        else:
                            answered[0] += 1
                    except requests.RequestException as error:
                        failures.append(f"{path}: {error!r}")
                stop_watching.wait(0.2)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        try:
            os.kill(old_heavy, signal.SIGKILL)
            new_heavy = wait_for(
                lambda: check_running() or [pid for pid in heavy_workers() if pid != old_heavy],
                timeout=START_TIMEOUT,
                interval=0.3,
                message=f"a new heavy worker:\n{_tail(log)}",
            )[0]
            wait_for(
                lambda: heavy_answers_ping(new_heavy),
                timeout=START_TIMEOUT,
                interval=0.5,
                message=f"the new heavy worker answering a ping:\n{_tail(log)}",
            )
        finally:
            stop_watching.set()
            watcher.join(timeout=60)
        assert not failures, f"the web server stopped answering: {failures[:10]}\n{_tail(log)}"
        assert answered[0] > 0
        assert not _alive(old_heavy)
        assert re.search(r"heavy worker \(pid \d+\) exited .*-9", log.read_text()), _tail(log)

        # SIGTERM stops everything, children and their children.
        everything = _descendants(serve.pid)
        seen.update(everything)
        assert len(_children_of(serve.pid)) == 4, _children_of(serve.pid)
        serve.send_signal(signal.SIGTERM)
        assert serve.wait(timeout=120) == 0, _tail(log)
        wait_for(
            lambda: not [pid for pid in everything if _alive(pid)],
            timeout=60,
            message=f"every child gone (left: { {p: everything[p] for p in everything if _alive(p)} })",
        )
    finally:
        _kill_everything(serve, seen)
        handle.close()


# --- the web server's size --------------------------------------------------------------------------


def test_lakewarden_serve_runs_gthread_gunicorn_sized_by_the_settings(settings):
    from console.management.commands.lakewarden_serve import Command

    settings.LAKEWARDEN_WEB_WORKERS, settings.LAKEWARDEN_WEB_THREADS = 7, 3
    web = Command().commands(host="127.0.0.1", port=8000, concurrency=1, light_concurrency=1)["web"]

    def option(name: str) -> str:
        return web[web.index(name) + 1]

    assert (option("--workers"), option("--worker-class"), option("--threads")) == ("7", "gthread", "3")

    settings.LAKEWARDEN_WEB_THREADS = 1  # the default: sync workers
    web = Command().commands(host="127.0.0.1", port=8000, concurrency=1, light_concurrency=1)["web"]
    assert option("--worker-class") == "sync" and "--threads" not in web


def test_the_web_worker_default_follows_the_cores_within_a_cap():
    from console.gunicorn_conf import MAX_DEFAULT_WEB_WORKERS, default_web_workers

    assert [default_web_workers(cores) for cores in (1, 2, 3)] == [2, 2, 3]
    assert default_web_workers(64) == MAX_DEFAULT_WEB_WORKERS
