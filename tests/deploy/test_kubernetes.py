"""deploy/kubernetes: every overlay renders (tests/deploy/kustomize.py), every document validates
against the Kubernetes schemas (kubernetes-validate, strict: an unknown field is an error), and the
rules the deployment page promises hold (non-root, read-only root filesystem, probes, resources,
one beat, a disruption budget for the heavy workers, references that resolve)."""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from tests.deploy.kustomize import merge, render

KUBERNETES = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"
OVERLAYS = ("quickstart", "production")
KUBERNETES_VERSION = "1.33.0"
WORKLOADS = ("Deployment", "Job")


def _by_name(docs: list[dict]) -> dict[tuple[str, str], dict]:
    return {(doc["kind"], doc["metadata"]["name"]): doc for doc in docs}


def _pod(doc: dict) -> dict:
    return doc["spec"]["template"]["spec"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_rendered_document_validates_against_the_kubernetes_schemas(overlay):
    docs = render(KUBERNETES / "overlays" / overlay)
    for doc in docs:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
    assert (
        len(docs) == {"quickstart": 17, "production": 12}[overlay]
    )  # production: + a group's workers and budget


def test_a_field_kubernetes_does_not_know_fails_validation():
    docs = _by_name(render(KUBERNETES / "base"))
    broken = merge(docs[("Deployment", "lakewarden-beat")], {"spec": {"replica": 1}})
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)


def test_base_lists_the_lakewarden_pieces():
    docs = render(KUBERNETES / "base")
    assert sorted((doc["kind"], doc["metadata"]["name"]) for doc in docs) == [
        ("ConfigMap", "lakewarden"),
        ("Deployment", "lakewarden-beat"),
        ("Deployment", "lakewarden-web"),
        ("Deployment", "lakewarden-worker-heavy"),
        ("Deployment", "lakewarden-worker-light"),
        ("Job", "lakewarden-migrate"),
        ("PodDisruptionBudget", "lakewarden-web"),
        ("PodDisruptionBudget", "lakewarden-worker-heavy"),
        ("Secret", "lakewarden"),
        ("Service", "lakewarden-web"),
    ]
    roles = {
        doc["metadata"]["name"]: _pod(doc)["containers"][0]["args"]
        for doc in docs
        if doc["kind"] in WORKLOADS
    }
    assert roles == {
        "lakewarden-migrate": ["migrate"],
        "lakewarden-web": ["web"],
        "lakewarden-worker-light": ["worker", "--queue", "light"],
        "lakewarden-worker-heavy": ["worker", "--queue", "heavy"],
        "lakewarden-beat": ["beat"],
    }


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_lakewarden_pods_run_as_non_root_on_a_read_only_root_with_resources(overlay):
    docs = render(KUBERNETES / "overlays" / overlay)
    lakewarden = [
        doc
        for doc in docs
        if doc["kind"] in WORKLOADS
        and _pod(doc)["containers"][0]["image"].startswith(
            {"quickstart": "lakewarden:", "production": "registry.example.com/lakewarden:"}[overlay]
        )
    ]
    assert len(lakewarden) == {"quickstart": 7, "production": 6}[overlay]
    for doc in lakewarden:
        pod = _pod(doc)
        assert pod["securityContext"]["runAsNonRoot"] is True, doc["metadata"]["name"]
        assert pod["securityContext"]["runAsUser"] == 10001
        container = pod["containers"][0]
        assert container["securityContext"] == {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        }
        assert set(container["resources"]) == {"requests", "limits"}
        assert "memory" in container["resources"]["limits"]
        # the writable places of a read-only root: the var folder and /tmp
        assert {m["mountPath"] for m in container["volumeMounts"]} == {"/var/lib/lakewarden", "/tmp"}
        assert container["envFrom"] == [
            {"configMapRef": {"name": "lakewarden"}},
            {"secretRef": {"name": "lakewarden"}},
        ]


def test_probes_beat_and_disruption_budgets():
    docs = _by_name(render(KUBERNETES / "overlays" / "production"))
    web = _pod(docs[("Deployment", "lakewarden-web")])["containers"][0]
    # the pages, not /healthz (503 while no worker answers), with a Host ALLOWED_HOSTS lists
    for probe in ("startupProbe", "readinessProbe"):
        assert web[probe]["httpGet"] == {
            "path": "/accounts/login/",
            "port": "http",
            "httpHeaders": [{"name": "Host", "value": "localhost"}],
        }
    assert web["livenessProbe"]["tcpSocket"] == {"port": "http"}
    allowed = docs[("ConfigMap", "lakewarden")]["data"]["ALLOWED_HOSTS"].split(",")
    assert "localhost" in allowed
    beat = docs[("Deployment", "lakewarden-beat")]["spec"]
    assert (beat["replicas"], beat["strategy"]) == (1, {"type": "Recreate"})
    heavy = docs[("Deployment", "lakewarden-worker-heavy")]
    assert heavy["spec"]["replicas"] == 3
    assert _pod(heavy)["terminationGracePeriodSeconds"] == 600  # a warm shutdown lets processes finish
    budget = docs[("PodDisruptionBudget", "lakewarden-worker-heavy")]["spec"]
    assert budget == {
        "maxUnavailable": 1,
        "selector": {"matchLabels": heavy["spec"]["template"]["metadata"]["labels"]},
    }


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_services_select_pods_and_selectors_match_templates(overlay):
    docs = render(KUBERNETES / "overlays" / overlay)
    templates = [doc["spec"]["template"]["metadata"]["labels"] for doc in docs if doc["kind"] == "Deployment"]
    for doc in docs:
        if doc["kind"] == "Deployment":
            selector = doc["spec"]["selector"]["matchLabels"]
            assert selector.items() <= doc["spec"]["template"]["metadata"]["labels"].items()
        if doc["kind"] in ("Service", "PodDisruptionBudget"):
            selector = doc["spec"]["selector"]
            selector = selector.get("matchLabels", selector)
            assert [labels for labels in templates if selector.items() <= labels.items()], doc["metadata"]


def test_overlays_set_namespace_image_and_settings():
    quickstart = _by_name(render(KUBERNETES / "overlays" / "quickstart"))
    assert {doc["metadata"]["namespace"] for doc in quickstart.values()} == {"lakewarden-quickstart"}
    config = quickstart[("ConfigMap", "lakewarden")]["data"]
    assert config["LAKEWARDEN_DEMO_S3_ENDPOINT"] == "http://seaweedfs:8333"
    assert config["CELERY_BROKER_URL"] == "redis://redis:6379/0"  # kept from the base
    secret = quickstart[("Secret", "lakewarden")]["stringData"]
    assert secret["DATABASE_URL"] == "postgresql://lakewarden:lakewarden-quickstart@postgres:5432/lakewarden"
    production = _by_name(render(KUBERNETES / "overlays" / "production"))
    web = _pod(production[("Deployment", "lakewarden-web")])["containers"][0]
    assert web["image"] == "registry.example.com/lakewarden:0.2.0"
    assert production[("ConfigMap", "lakewarden")]["data"]["LAKEWARDEN_HTTPS"] == "1"
    assert production[("ConfigMap", "lakewarden")]["metadata"]["labels"] == {
        "app.kubernetes.io/part-of": "lakewarden"
    }


def test_renderer_refuses_a_kustomize_field_it_does_not_know(tmp_path):
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump({"resources": [], "configMapGenerator": []}))
    with pytest.raises(ValueError, match="configMapGenerator"):
        render(tmp_path)


def test_a_resource_groups_workers_take_only_that_groups_queue(settings):
    """Issue 31/33: the production overlay's worker Deployment for a group named ``etl`` consumes
    the queue the scheduler sends that group's processes to, and its pods are its own (neither
    the heavy workers' Deployment nor their disruption budget selects them)."""
    from processes.groups.models import ResourceGroup

    docs = _by_name(render(KUBERNETES / "overlays" / "production"))
    config = docs[("ConfigMap", "lakewarden")]["data"]
    settings.LAKEWARDEN_HEAVY_QUEUE = config.get("LAKEWARDEN_HEAVY_QUEUE", "lakewarden.heavy")
    group = docs[("Deployment", "lakewarden-worker-group-etl")]
    args = _pod(group)["containers"][0]["args"]
    assert args[: args.index("--queue") + 2][-1] == ResourceGroup(name="etl").effective_queue
    assert ResourceGroup(name="etl").effective_queue == "lakewarden.heavy.etl"
    labels = group["spec"]["template"]["metadata"]["labels"]
    heavy = docs[("Deployment", "lakewarden-worker-heavy")]["spec"]["selector"]["matchLabels"]
    assert not set(heavy.items()) <= set(labels.items())
    budget = docs[("PodDisruptionBudget", "lakewarden-worker-group-etl")]["spec"]
    assert budget["selector"]["matchLabels"] == labels
    assert _pod(group)["terminationGracePeriodSeconds"] == 600
