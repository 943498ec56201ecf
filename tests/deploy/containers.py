"""Podman for the container tests: whether it can run here, the images (deploy/build-image.sh for
Lakewarden; stand-ins for the official Postgres and Redis images where no registry answers) and the
compose stack. What this kind of machine allows (issue 33): runc rather than crun, and explicit
open-file and process limits; both go into a containers.conf of the test's own (CONTAINERS_CONF),
so podman-compose's podman calls get them too."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import requests

from tests.e2e.conftest import wait_for as e2e_wait_for

REPO = Path(__file__).resolve().parents[2]
IMAGES = Path(__file__).resolve().parent / "images"
BASE = "docker.io/library/debian:bookworm-slim"
LAKEWARDEN_IMAGE = "localhost/lakewarden:test"
POSTGRES_IMAGE = "localhost/lakewarden-test-postgres:15"
REDIS_IMAGE = "localhost/lakewarden-test-redis:7"
CONTAINERS_CONF = """\
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=4096:4096"]

[engine]
runtime = "runc"
"""


def podman_env(folder: Path) -> dict[str, str]:
    conf = folder / "containers.conf"
    conf.write_text(CONTAINERS_CONF, encoding="utf-8")
    return {**os.environ, "CONTAINERS_CONF": str(conf)}


def podman_compose() -> str | None:
    beside = Path(sys.executable).parent / "podman-compose"
    return str(beside) if beside.exists() else shutil.which("podman-compose")


def why_podman_cannot_run(env: dict[str, str]) -> str | None:
    """None when podman runs containers here; else the reason, for the skip."""
    if shutil.which("podman") is None:
        return "podman is not installed (scripts/setup.sh --test installs it on Debian as root)"
    if podman_compose() is None:
        return "podman-compose is not installed (pip install -r tests/deploy/requirements.txt)"
    if not image_exists(BASE, env) and (os.geteuid() != 0 or shutil.which("debootstrap") is None):
        return f"no {BASE} image and no way to make one (debootstrap as root)"
    if image_exists(BASE, env):
        probe = run(
            ["podman", "run", "--rm", "--network", "none", BASE, "true"], env, check=False, timeout=120
        )
        if probe.returncode != 0:
            return f"podman cannot run a container here: {probe.stderr.strip()[-300:]}"
    return None


def image_exists(name: str, env: dict[str, str]) -> bool:
    return run(["podman", "image", "exists", name], env, check=False).returncode == 0


def run(
    command: list[str], env: dict[str, str], *, check: bool = True, timeout: float = 600, cwd: Path = REPO
) -> subprocess.CompletedProcess:
    result = subprocess.run(
        command, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
    )
    if check and result.returncode != 0:
        raise AssertionError(
            f"{' '.join(command)} exited {result.returncode}:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
        )
    return result


def build_images(env: dict[str, str]) -> float:
    """Lakewarden's image (layers and wheelhouse reused from earlier builds) and the stand-ins;
    returns the seconds it took."""
    started = time.monotonic()
    run(
        [str(REPO / "deploy" / "build-image.sh"), LAKEWARDEN_IMAGE],
        {**env, "LAKEWARDEN_LOCAL_BASE": "1"},
        timeout=3600,
    )
    for image, containerfile in (
        (POSTGRES_IMAGE, "postgres.Containerfile"),
        (REDIS_IMAGE, "redis.Containerfile"),
    ):
        if not image_exists(image, env):
            build = ["podman", "build", "-q", "--network", "host", "-t", image, "-f", containerfile, "."]
            run(build, env, cwd=IMAGES, timeout=1200)
    return time.monotonic() - started


def wait_for(condition, *, timeout: float, what: str, interval: float = 1.0, on_timeout=lambda: ""):
    """tests/e2e's ``wait_for``, its failure followed by ``on_timeout()`` (the containers' logs)."""
    try:
        return e2e_wait_for(condition, timeout=timeout, interval=interval, message=what)
    except AssertionError as error:
        raise AssertionError(f"{error}\n{on_timeout()}") from None


def console_login(base_url: str, *, password: str, user: str = "admin") -> requests.Session:
    """A session signed in to the console at base_url through its login form."""
    session = requests.Session()
    page = session.get(f"{base_url}/accounts/login/", timeout=30)
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
    answer = session.post(
        f"{base_url}/accounts/login/",
        data={"username": user, "password": password, "csrfmiddlewaretoken": token},
        allow_redirects=False,
        timeout=30,
    )
    assert answer.status_code == 302, answer.text[:500]
    assert "/accounts/login/" not in answer.headers["Location"]
    return session
