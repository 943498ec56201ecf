#!/usr/bin/env python3
"""Run rendered Kubernetes manifests (deploy/kubernetes) on one machine with ``podman kube play``.

    kubectl kustomize deploy/kubernetes/overlays/quickstart > quickstart.yaml
    python3 deploy/kube_play.py up quickstart.yaml --publish lakewarden-web=8000 [--image NAME=REFERENCE ...]
    python3 deploy/kube_play.py down quickstart.yaml

Podman plays Deployments, Pods and ConfigMaps itself; what it lacks is done here, the manifests
otherwise unchanged (docs/operating/deployment.md, "Trying the manifests with podman"):

- Services: podman ignores them. Every pod plays on one network with DNS (netavark and
  aardvark-dns), named after the namespace, and the workload a Service selects plays with the
  Service's name as its network alias, so ``postgres:5432`` resolves as it does in a cluster
  (to the pod: no ClusterIP and no port mapping, a client uses the pod's port, the targetPort).
- Jobs: podman 4.3 skips them; each runs as a Pod of the Job's name with the Job's pod template.
- Secrets: podman 4.3 reads a ``secretRef``/``secretKeyRef`` from a podman secret holding a JSON
  map of base64 values (a played ``kind: Secret`` is stored as YAML, which it then cannot read);
  each Secret becomes such a podman secret.
- Ports: podman 4.3 publishes every ``containerPort`` on the host's same port (a kubelet never
  does), so ``postgres`` would take the host's 5432; the ports are dropped, and ``--publish
  WORKLOAD=HOSTPORT`` publishes one on 127.0.0.1 instead (``kubectl port-forward``, for a browser).
- Anything else (PodDisruptionBudget, ...) has no meaning on one machine and is left out.

``--image NAME=REFERENCE`` replaces an image as kustomize's ``images`` does (a locally built image,
or stand-ins where no registry answers). Needs PyYAML and podman with the netavark backend.
"""

from __future__ import annotations

import argparse
import base64
import copy
import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import yaml

#: kinds podman plays as they are
PLAYED = ("Deployment", "Pod")
#: kinds with no meaning on one machine, left out
LEFT_OUT = ("PodDisruptionBudget", "HorizontalPodAutoscaler", "NetworkPolicy", "Ingress", "ServiceAccount")


@dataclass
class Play:
    """One ``podman kube play``: the ConfigMaps and one workload, on the network with its aliases."""

    name: str
    documents: list[dict]
    aliases: list[str] = field(default_factory=list)
    pods: list[str] = field(default_factory=list)


@dataclass
class Plan:
    network: str
    secrets: dict[str, str]
    plays: list[Play]


def _image_name(reference: str) -> str:
    """``docker.io/library/postgres:16`` -> ``docker.io/library/postgres`` (a registry port kept)."""
    head, _, last = reference.rpartition("/")
    name = last.split("@")[0].split(":")[0]
    return f"{head}/{name}" if head else name


def _pod_spec(doc: dict) -> dict:
    return doc["spec"] if doc["kind"] == "Pod" else doc["spec"]["template"]["spec"]


def _job_as_pod(job: dict) -> dict:
    template = job["spec"]["template"]
    metadata = {"name": job["metadata"]["name"]}
    labels = {**job["metadata"].get("labels", {}), **template.get("metadata", {}).get("labels", {})}
    if labels:
        metadata["labels"] = labels
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": copy.deepcopy(template["spec"])}


def _secret_json(secret: dict) -> str:
    values = dict(secret.get("data") or {})
    for key, value in (secret.get("stringData") or {}).items():
        values[key] = base64.b64encode(str(value).encode()).decode()
    return json.dumps(values, sort_keys=True)


def _template_labels(doc: dict) -> dict:
    if doc["kind"] == "Pod":
        return doc["metadata"].get("labels", {})
    return doc["spec"]["template"].get("metadata", {}).get("labels", {})


def _pod_names(doc: dict) -> list[str]:
    """The pods podman 4.3 names for a workload: a Pod's own name, ``NAME-pod-I`` per replica."""
    if doc["kind"] == "Pod":
        return [doc["metadata"]["name"]]
    return [f"{doc['metadata']['name']}-pod-{i}" for i in range(doc["spec"].get("replicas", 1))]


def _ports(doc: dict, host_port: int | None) -> None:
    """Drop the containers' ports; publish the first one on 127.0.0.1:host_port when given."""
    published = False
    for container in _pod_spec(doc)["containers"]:
        ports = container.pop("ports", [])
        if host_port is not None and ports and not published:
            container["ports"] = [{**ports[0], "hostPort": host_port, "hostIP": "127.0.0.1"}]
            published = True
    if host_port is not None and not published:
        raise ValueError(f"{doc['metadata']['name']} has no port to publish")


def kube_play_plan(
    documents: list[dict], *, images: dict[str, str] | None = None, publish: dict[str, int] | None = None
) -> Plan:
    """What ``up`` plays for these rendered documents; ValueError for what podman cannot do."""
    images, publish = images or {}, dict(publish or {})
    namespaces = {doc["metadata"].get("namespace", "default") for doc in documents}
    if len(namespaces) != 1:
        raise ValueError(f"one namespace at a time, these documents have {sorted(namespaces)}")
    configmaps, secrets, services, workloads = [], {}, [], []
    for doc in documents:
        kind = doc["kind"]
        if kind == "ConfigMap":
            configmaps.append(doc)
        elif kind == "Secret":
            secrets[doc["metadata"]["name"]] = _secret_json(doc)
        elif kind == "Service":
            services.append(doc)
        elif kind == "Job":
            workloads.append(_job_as_pod(doc))
        elif kind in PLAYED:
            workloads.append(copy.deepcopy(doc))
        elif kind not in LEFT_OUT:
            raise ValueError(f"{kind} {doc['metadata']['name']}: podman cannot play this kind")
    for doc in workloads:
        for container in _pod_spec(doc)["containers"] + _pod_spec(doc).get("initContainers", []):
            container["image"] = images.get(_image_name(container["image"]), container["image"])
        _ports(doc, publish.pop(doc["metadata"]["name"], None))
    if publish:
        raise ValueError(f"--publish names no workload of these documents: {sorted(publish)}")
    plays = [Play(doc["metadata"]["name"], [*configmaps, doc], pods=_pod_names(doc)) for doc in workloads]
    for service in services:
        _alias(service, plays)
    return Plan(namespaces.pop(), secrets, plays)


def _alias(service: dict, plays: list[Play]) -> None:
    """The workloads a Service selects get its name as a network alias (its ports are not mapped:
    a client reaches the pod's own port, the Service's targetPort)."""
    name, selector = service["metadata"]["name"], service["spec"].get("selector") or {}
    chosen = [
        play
        for play in plays
        if selector and selector.items() <= _template_labels(play.documents[-1]).items()
    ]
    if not chosen:
        raise ValueError(f"Service {name} selects no workload")
    for play in chosen:
        play.aliases.append(name)


def _podman(*args: str, check: bool = True, stdin: str | None = None) -> subprocess.CompletedProcess:
    result = subprocess.run(["podman", *args], input=stdin, capture_output=True, text=True, check=False)
    if check and result.returncode != 0:
        raise RuntimeError(
            f"podman {' '.join(args)}: exit {result.returncode}\n{result.stdout.strip()}\n{result.stderr.strip()}"
        )
    return result


def play_files(plan: Plan, folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for play in plan.plays:
        path = folder / f"{play.name}.yaml"
        path.write_text(yaml.safe_dump_all(play.documents, sort_keys=False), encoding="utf-8")
        paths.append(path)
    return paths


def kube_play_up(plan: Plan, folder: Path) -> None:
    """The network (DNS on), the secrets, then one ``podman kube play`` per workload."""
    if _podman("network", "exists", plan.network, check=False).returncode != 0:
        _podman("network", "create", plan.network)
    dns = _podman("network", "inspect", "--format", "{{.DNSEnabled}}", plan.network).stdout.strip()
    if dns != "true":
        raise RuntimeError(
            f"network {plan.network} has no DNS: use podman's netavark backend with aardvark-dns "
            "(podman info --format '{{.Host.NetworkBackend}}')"
        )
    for name, content in plan.secrets.items():
        _podman("secret", "rm", name, check=False)
        _podman("secret", "create", name, "-", stdin=content)
    for play, path in zip(plan.plays, play_files(plan, folder), strict=True):
        network = plan.network
        if play.aliases:
            network += ":" + ",".join(f"alias={alias}" for alias in play.aliases)
        _podman("kube", "play", "--network", network, str(path))


def kube_play_down(plan: Plan, folder: Path) -> list[str]:
    """Everything ``up`` made, removed; what could not be, returned (nothing when all went)."""
    problems = []
    for path in play_files(plan, folder):
        result = _podman("kube", "down", str(path), check=False)
        if result.returncode != 0 and "no such pod" not in result.stderr:
            problems.append(result.stderr.strip())
    for name in plan.secrets:
        _podman("secret", "rm", name, check=False)
    if _podman("network", "exists", plan.network, check=False).returncode == 0:
        result = _podman("network", "rm", "--force", plan.network, check=False)
        if result.returncode != 0:
            problems.append(result.stderr.strip())
    return problems


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="kube_play.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("up", "down", "show"))
    parser.add_argument("manifests", type=Path, help="rendered manifests (kubectl kustomize OVERLAY)")
    parser.add_argument("--image", action="append", default=[], metavar="NAME=REFERENCE")
    parser.add_argument("--publish", action="append", default=[], metavar="WORKLOAD=HOSTPORT")
    options = parser.parse_args(argv)
    documents = [doc for doc in yaml.safe_load_all(options.manifests.read_text(encoding="utf-8")) if doc]
    images = dict(entry.split("=", 1) for entry in options.image)
    publish = {name: int(port) for name, port in (entry.split("=", 1) for entry in options.publish)}
    plan = kube_play_plan(documents, images=images, publish=publish)
    with tempfile.TemporaryDirectory(prefix="kube-play-") as folder:
        if options.action == "show":
            for play in plan.plays:
                print(f"{play.name}: pods {', '.join(play.pods)}; aliases {', '.join(play.aliases) or '-'}")
        elif options.action == "up":
            kube_play_up(plan, Path(folder))
        else:
            problems = kube_play_down(plan, Path(folder))
            print("\n".join(problems), file=sys.stderr)
            return 1 if problems else 0
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
