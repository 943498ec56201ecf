"""deploy/kubernetes for real: the quickstart overlay, rendered as ``kubectl kustomize`` would, played
with ``podman kube play`` through deploy/kube_play.py (what podman 4.3 lacks: Services as network
aliases on a network with DNS, Jobs as Pods, Secrets as podman secrets; the workloads otherwise as
rendered). Postgres, Redis, SeaweedFS, the migrate Job, web, both workers, beat and the demo Job run;
/healthz answers, the pods run as uid 10001 on a read-only root, an admin logs in and sees the demo
tables on SeaweedFS; everything is torn down (``podman kube down``), also on failure. Skipped, saying
why, only where podman cannot run (tests/deploy/containers.py) or has no network with DNS.

Cost (2 cores at a load average of 30-35, 2026-12-02, two runs): the image is the compose test's
(deploy/build-image.sh: reused as built, or its project layer rebuilt, 150-200 s, after the tree
changed); the nine plays 45-50 s, /healthz 250-290 s and the demo built 320-410 s after the first
play, teardown 25-35 s: 6 to 7.5 minutes beside the image.
"""

from __future__ import annotations

import base64
import copy
import fcntl
import importlib.util
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
import yaml

from tests.deploy.containers import (
    BASE,
    CONTAINERS_CONF,
    IMAGES,
    LAKEWARDEN_IMAGE,
    POSTGRES_IMAGE,
    REDIS_IMAGE,
    REPO,
    build_images,
    console_login,
    image_exists,
    podman_env,
    run,
    wait_for,
    why_podman_cannot_run,
)
from tests.deploy.kustomize import render

_spec = importlib.util.spec_from_file_location("kube_play", REPO / "deploy" / "kube_play.py")
kube_play = sys.modules.setdefault("kube_play", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(kube_play)  # deploy/ is no package: the script, loaded from its file

QUICKSTART = REPO / "deploy" / "kubernetes" / "overlays" / "quickstart"
PAUSE_IMAGE = "localhost/lakewarden-test-pause:1"
IMAGES_FLAGS = {
    "lakewarden": LAKEWARDEN_IMAGE,
    "docker.io/library/postgres": POSTGRES_IMAGE,
    "docker.io/library/redis": REDIS_IMAGE,
}
#: the quickstart Secret's admin password (overlays/quickstart/secret.yaml)
ADMIN_PASSWORD = "lakewarden-demo"
#: one run at a time on a machine: pod, secret and network names are podman-wide
LOCK = Path("/tmp/lakewarden-kube-play.lock")
DEMO_TABLES = {"demo.orders", "demo.events", "demo.customers"}
WEB_PORT = 18000


def _plan(port: int = WEB_PORT):
    return kube_play.kube_play_plan(render(QUICKSTART), images=IMAGES_FLAGS, publish={"lakewarden-web": port})


def _by_name(docs):
    return {(doc["kind"], doc["metadata"]["name"]): doc for doc in docs}


def test_plan_plays_the_rendered_workloads_unchanged_but_images_and_ports():
    rendered = _by_name(render(QUICKSTART))
    plan = _plan()
    assert plan.network == "lakewarden-quickstart"
    plays = {play.name: play for play in plan.plays}
    assert {name: (play.pods, play.aliases) for name, play in plays.items()} == {
        "lakewarden-migrate": (["lakewarden-migrate"], []),
        "lakewarden-demo": (["lakewarden-demo"], []),
        "lakewarden-web": (["lakewarden-web-pod-0"], ["lakewarden-web"]),
        "lakewarden-worker-light": (["lakewarden-worker-light-pod-0"], []),
        "lakewarden-worker-heavy": (["lakewarden-worker-heavy-pod-0"], []),
        "lakewarden-beat": (["lakewarden-beat-pod-0"], []),
        "postgres": (["postgres-pod-0"], ["postgres"]),
        "redis": (["redis-pod-0"], ["redis"]),
        "seaweedfs": (["seaweedfs-pod-0"], ["seaweedfs"]),
    }
    for play in plan.plays:
        configmap, workload = play.documents
        assert configmap == rendered[("ConfigMap", "lakewarden")]
        if workload["kind"] == "Deployment":
            original = rendered[("Deployment", play.name)]
            undone = copy.deepcopy(workload)  # images and ports put back: nothing else differs
            originals = original["spec"]["template"]["spec"]["containers"]
            for container, before in zip(
                undone["spec"]["template"]["spec"]["containers"], originals, strict=True
            ):
                container["image"] = before["image"]
                if "ports" in before:
                    container["ports"] = before["ports"]
            assert undone == original, play.name
    web = plays["lakewarden-web"].documents[1]["spec"]["template"]["spec"]["containers"][0]
    assert web["image"] == LAKEWARDEN_IMAGE
    # podman 4.3 would publish every containerPort on the host: only the one asked for is
    assert web["ports"] == [
        {"name": "http", "containerPort": 8000, "hostPort": WEB_PORT, "hostIP": "127.0.0.1"}
    ]
    postgres = plays["postgres"].documents[1]["spec"]["template"]["spec"]["containers"][0]
    assert postgres["image"] == POSTGRES_IMAGE
    assert "ports" not in postgres


def test_plan_runs_jobs_as_pods_and_secrets_as_podman_secrets():
    rendered = _by_name(render(QUICKSTART))
    plays = {play.name: play for play in _plan().plays}
    migrate = plays["lakewarden-migrate"].documents[1]
    job = rendered[("Job", "lakewarden-migrate")]
    assert (migrate["kind"], migrate["metadata"]["name"]) == ("Pod", "lakewarden-migrate")
    expected = json.loads(json.dumps(job["spec"]["template"]["spec"]))
    expected["containers"][0]["image"] = LAKEWARDEN_IMAGE
    assert migrate["spec"] == expected
    assert migrate["spec"]["restartPolicy"] == "OnFailure"
    assert migrate["metadata"]["labels"]["app.kubernetes.io/component"] == "migrate"
    secret = json.loads(_plan().secrets["lakewarden"])
    decoded = {key: base64.b64decode(value).decode() for key, value in secret.items()}
    assert decoded == rendered[("Secret", "lakewarden")]["stringData"]


def test_plan_refuses_what_podman_cannot_play():
    docs = render(QUICKSTART)
    namespace = {"namespace": "lakewarden-quickstart"}
    stateful = {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db", **namespace}}
    with pytest.raises(ValueError, match="StatefulSet db: podman cannot play this kind"):
        kube_play.kube_play_plan([*docs, stateful])
    with pytest.raises(ValueError, match="one namespace at a time"):
        kube_play.kube_play_plan([*docs, {**stateful, "metadata": {"name": "db", "namespace": "other"}}])
    orphan = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "nobody", **namespace},
        "spec": {"selector": {"app": "nothing"}, "ports": [{"port": 1}]},
    }
    with pytest.raises(ValueError, match="Service nobody selects no workload"):
        kube_play.kube_play_plan([*docs, orphan])
    with pytest.raises(ValueError, match="lakewarden-beat has no port to publish"):
        kube_play.kube_play_plan(docs, publish={"lakewarden-beat": 8000})
    with pytest.raises(ValueError, match=r"--publish names no workload of these documents: \['web'\]"):
        kube_play.kube_play_plan(docs, publish={"web": 8000})


class Played:
    def __init__(self, env: dict[str, str], manifests: Path, port: int):
        self.env = env
        self.manifests = manifests
        self.port = port
        self.plan = _plan(port)
        self.base_url = f"http://127.0.0.1:{port}"
        self.started = time.monotonic()

    def cli(self, action: str, *, check: bool = True) -> subprocess.CompletedProcess:
        """deploy/kube_play.py as the deployment page runs it."""
        flags = [f"--image={name}={image}" for name, image in IMAGES_FLAGS.items()]
        flags.append(f"--publish=lakewarden-web={self.port}")
        command = [sys.executable, str(REPO / "deploy" / "kube_play.py"), action, str(self.manifests), *flags]
        return run(command, self.env, check=check, timeout=900)

    def podman(self, *args: str) -> subprocess.CompletedProcess:
        return run(["podman", *args], self.env, check=False)

    def logs(self, *containers: str) -> str:
        names = containers or (
            "lakewarden-migrate-migrate",
            "lakewarden-web-pod-0-web",
            "lakewarden-worker-heavy-pod-0-worker",
            "lakewarden-demo-demo",
            "seaweedfs-pod-0-seaweedfs",
        )
        out = []
        for name in names:
            answer = self.podman("logs", "--tail", "40", name)
            out.append(f"--- {name}:\n{answer.stdout[-4000:]}{answer.stderr[-4000:]}")
        return "\n".join(out)

    def exit_code(self, container: str) -> int | None:
        answer = self.podman("inspect", "--format", "{{.State.Status}} {{.State.ExitCode}}", container)
        status, _, code = answer.stdout.strip().partition(" ")
        return int(code) if status in ("exited", "stopped") else None

    def exited(self, container: str, *, timeout: float) -> int:
        """The exit code of a one-shot pod's container (a Job's), once it exits."""
        wait_for(
            lambda: self.exit_code(container) is not None,
            timeout=timeout,
            what=f"{container} exited",
            on_timeout=self.logs,
        )
        return self.exit_code(container)

    def healthy(self) -> bool:
        try:
            return requests.get(f"{self.base_url}/healthz", timeout=5).status_code == 200
        except requests.RequestException:
            return False

    def leftovers(self) -> list[str]:
        pods = set(self.podman("pod", "ps", "--format", "{{.Name}}").stdout.split())
        left = sorted(pod for play in self.plan.plays for pod in play.pods if pod in pods)
        if self.podman("network", "exists", self.plan.network).returncode == 0:
            left.append(f"network {self.plan.network}")
        secrets = set(self.podman("secret", "ls", "--format", "{{.Name}}").stdout.split())
        left += [f"secret {name}" for name in self.plan.secrets if name in secrets]
        return left


def _podman_env(folder: Path) -> dict[str, str]:
    """The compose test's containers.conf (runc, the limits) with an infra image of our own."""
    env = podman_env(folder)
    Path(env["CONTAINERS_CONF"]).write_text(
        f'{CONTAINERS_CONF}infra_image = "{PAUSE_IMAGE}"\n', encoding="utf-8"
    )
    return env


def _try_lock(handle) -> bool:
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def played(tmp_path_factory):
    folder = tmp_path_factory.mktemp("kube-play")
    env = _podman_env(folder)
    reason = why_podman_cannot_run(env)
    if reason:
        pytest.skip(reason)
    backend = run(["podman", "info", "--format", "{{.Host.NetworkBackend}}"], env, check=False).stdout.strip()
    if backend != "netavark":
        pytest.skip(
            f"podman's network backend is {backend or 'unknown'}, not netavark: no DNS for the Services' names"
        )
    with LOCK.open("w") as lock:
        wait_for(
            lambda: _try_lock(lock), timeout=3600, interval=5, what=f"{LOCK} free (another run of this test)"
        )
        built = build_images(env)
        if not image_exists(PAUSE_IMAGE, env):
            build = [
                "podman",
                "build",
                "-q",
                "--network",
                "none",
                "--build-arg",
                f"BASE={BASE}",
                "-t",
                PAUSE_IMAGE,
            ]
            run([*build, "-f", "pause.Containerfile", "."], env, cwd=IMAGES)
        manifests = folder / "quickstart.yaml"  # what `kubectl kustomize` prints
        manifests.write_text(yaml.safe_dump_all(render(QUICKSTART), sort_keys=False), encoding="utf-8")
        played = Played(env, manifests, _free_port())
        played.cli("down", check=False)  # what an interrupted run left
        try:
            played.cli("up")
            print(f"images ready in {built:.0f} s; played in {time.monotonic() - played.started:.0f} s")
            yield played
        finally:
            stopping = time.monotonic()
            down = played.cli("down", check=False)
            print(f"torn down in {time.monotonic() - stopping:.0f} s")
            left = played.leftovers()
            assert not left, f"podman kube down left {left}: {down.stderr[-2000:]}"


@pytest.mark.e2e
def test_quickstart_manifests_run_under_podman_kube_play(played):
    # the migrate Job (a pod here) reached Postgres and Redis by their Service names, and finished
    assert played.exited("lakewarden-migrate-migrate", timeout=600) == 0, played.logs(
        "lakewarden-migrate-migrate"
    )

    # the web pod, published on 127.0.0.1 as `kubectl port-forward` would: /healthz answers 200
    # once a worker answers its ping through Redis
    wait_for(played.healthy, timeout=600, what="/healthz 200", on_timeout=played.logs)
    print(f"/healthz answered {time.monotonic() - played.started:.0f} s after the play began")

    # the securityContext holds under podman: uid 10001, a read-only root, /tmp writable
    for container in ("lakewarden-web-pod-0-web", "lakewarden-worker-heavy-pod-0-worker"):
        probe = played.podman(
            "exec", container, "sh", "-c", "id -u; touch /probe 2>&1; touch /tmp/probe && echo tmp-ok"
        )
        lines = probe.stdout.strip().splitlines()
        assert lines[0] == "10001", (container, probe.stdout, probe.stderr)
        assert "Read-only file system" in lines[1], (container, lines)
        assert lines[2] == "tmp-ok", (container, lines)

    # the demo Job: the lakehouse built on SeaweedFS, found by its Service name
    assert played.exited("lakewarden-demo-demo", timeout=900) == 0, played.logs("lakewarden-demo-demo")
    print(f"the demo was built {time.monotonic() - played.started:.0f} s after the play began")

    session = console_login(played.base_url, password=ADMIN_PASSWORD)
    answer = session.get(f"{played.base_url}/api/v1/tables/", timeout=60)
    assert answer.status_code == 200, answer.text[:500]
    tables = {row["identifier"] or row["location"]: row for row in answer.json()["results"]}
    assert DEMO_TABLES <= set(tables), sorted(tables)
    events = tables["demo.events"]
    assert (events["format"], events["catalog"]) == ("iceberg", "demo-rest")
    assert events["location"].startswith("s3://lakehouse/"), events["location"]
