"""The few kustomize features deploy/kubernetes uses, rendered in Python (no kubectl here), so the
tests check what ``kubectl apply -k`` would send: ``resources`` (files and folders), ``namespace``,
``labels`` (``pairs``), ``images`` (``newName``/``newTag``), ``replicas`` and ``patches`` given by
``path`` (merged by kind and name: mappings merged, anything else replaced, which is what a strategic
merge does to the ConfigMaps, Secrets and scalars patched there). Anything else is refused, so a
manifest using more than this subset fails its test instead of passing unchecked."""

from __future__ import annotations

import copy
from pathlib import Path

import yaml

SUPPORTED = {"apiVersion", "kind", "resources", "namespace", "labels", "images", "replicas", "patches"}


def load_documents(path: Path) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc]


def merge(base: dict, patch: dict) -> dict:
    merged = copy.deepcopy(base)
    for key, value in patch.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _containers(doc: dict) -> list[dict]:
    spec = doc.get("spec", {})
    pod = spec.get("template", {}).get("spec", spec if doc["kind"] == "Pod" else {})
    return pod.get("containers", []) + pod.get("initContainers", [])


def render(folder: Path) -> list[dict]:
    """The documents ``kubectl kustomize folder`` would print (for this subset)."""
    kustomization = yaml.safe_load((folder / "kustomization.yaml").read_text(encoding="utf-8"))
    unknown = set(kustomization) - SUPPORTED
    if unknown:
        raise ValueError(f"{folder}: kustomize fields this renderer does not know: {sorted(unknown)}")
    docs: list[dict] = []
    for resource in kustomization.get("resources", []):
        path = (folder / resource).resolve()
        docs += render(path) if path.is_dir() else load_documents(path)
    for entry in kustomization.get("patches", []):
        for patch in load_documents(folder / entry["path"]):
            targets = [
                i
                for i, doc in enumerate(docs)
                if (doc["kind"], doc["metadata"]["name"]) == (patch["kind"], patch["metadata"]["name"])
            ]
            if len(targets) != 1:
                raise ValueError(f"{folder}: patch {entry['path']} matches {len(targets)} resources")
            docs[targets[0]] = merge(docs[targets[0]], patch)
    for entry in kustomization.get("replicas", []):
        matches = [
            doc for doc in docs if doc["metadata"]["name"] == entry["name"] and "replicas" in doc["spec"]
        ]
        if len(matches) != 1:
            raise ValueError(f"{folder}: replicas for {entry['name']} match {len(matches)} resources")
        matches[0]["spec"]["replicas"] = entry["count"]
    for image in kustomization.get("images", []):
        for doc in docs:
            for container in _containers(doc):
                if container["image"].split(":")[0] == image["name"]:
                    container["image"] = (
                        f"{image.get('newName', image['name'])}:{image.get('newTag', 'latest')}"
                    )
    for entry in kustomization.get("labels", []):
        for doc in docs:
            doc["metadata"].setdefault("labels", {}).update(entry["pairs"])
    if "namespace" in kustomization:
        for doc in docs:
            doc["metadata"]["namespace"] = kustomization["namespace"]
    return docs
