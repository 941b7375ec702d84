"""deploy/kubernetes/: every manifest valid for Kubernetes 1.37 (kubernetes-validate, strict,
offline: it ships its schemas), KEDA's kinds against the schema in kubernetes_manifests.py, and
the manifests consistent with each other and with the service (names, Secret keys, probes,
sizing from the bench)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from kubernetes_manifests import (
    KEDA_API,
    KEDA_SCHEMAS,
    KUBERNETES_VERSION,
    MANIFESTS,
    ROOT,
    TRIGGER_METADATA,
    all_documents,
    find,
    hpa_behavior_stand_in,
    quantity_bytes,
)
from kubernetes_validate.utils import SchemaNotFoundError

from extractor.config import LabelingSettings, Settings

DOCUMENTS = all_documents()
CORE = [(path, doc) for path, doc in DOCUMENTS if doc["apiVersion"] != KEDA_API]
KEDA = [(path, doc) for path, doc in DOCUMENTS if doc["apiVersion"] == KEDA_API]

# bench/results.md: a default-engine worker's peak with a job thread beside synchronous
# requests (308-315 MB; 287-291 MB without), gunicorn's master, and Tesseract's children while a
# PDF is read (162 MB at once for 10 pages, 193 MB for the largest single one over 100).
WORKER_PEAK_BYTES = 315 * 1000**2
MASTER_BYTES = 60 * 1000**2
PDF_CHILDREN_BYTES = 193 * 1000**2


def _id(item: tuple[Path, dict[str, Any]]) -> str:
    path, doc = item
    return f"{path.relative_to(MANIFESTS)}:{doc['kind']}/{doc['metadata']['name']}"


def test_the_manifests_are_all_there() -> None:
    kinds = {doc["kind"] for _, doc in DOCUMENTS}
    assert {
        "Deployment", "Service", "PodDisruptionBudget", "StatefulSet",
        "Secret", "HorizontalPodAutoscaler", "ScaledObject", "TriggerAuthentication",
    } <= kinds  # fmt: skip


@pytest.mark.parametrize("item", CORE, ids=[_id(item) for item in CORE])
def test_kubernetes_kinds_validate_strictly(item: tuple[Path, dict[str, Any]]) -> None:
    _, doc = item
    assert kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True) == KUBERNETES_VERSION


@pytest.mark.parametrize("item", KEDA, ids=[_id(item) for item in KEDA])
def test_keda_kinds_validate_against_their_own_schema(item: tuple[Path, dict[str, Any]]) -> None:
    _, doc = item
    # kubernetes-validate has no schema for a CRD: it must say so, not pass it quietly. Should
    # a later release ship KEDA's schemas, this fails and the stand-in schema can go.
    with pytest.raises(SchemaNotFoundError):
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
    jsonschema.Draft202012Validator(KEDA_SCHEMAS[doc["kind"]]).validate(doc)
    if doc["kind"] == "ScaledObject":
        stand_in = hpa_behavior_stand_in(doc)
        kubernetes_validate.validate(stand_in, KUBERNETES_VERSION, strict=True)
        for trigger in doc["spec"]["triggers"]:
            required, optional = TRIGGER_METADATA[trigger["type"]]
            assert required <= set(trigger["metadata"]) <= required | optional, trigger


def test_the_keda_schema_refuses_what_kubernetes_strict_mode_would() -> None:
    (scaled,) = find("ScaledObject")
    misspelt = {**scaled, "spec": {**scaled["spec"], "maxReplicas": 3}}
    with pytest.raises(jsonschema.ValidationError, match="maxReplicas"):
        jsonschema.Draft202012Validator(KEDA_SCHEMAS["ScaledObject"]).validate(misspelt)


def test_strict_validation_catches_a_misspelt_field() -> None:
    (deployment,) = find("Deployment", "extractor")
    spec = deployment["spec"]["template"]["spec"]
    container = {**spec["containers"][0], "livenessProbe": {"periodSecond": 20}}
    broken = {
        **deployment,
        "spec": {
            **deployment["spec"],
            "template": {
                **deployment["spec"]["template"],
                "spec": {**spec, "containers": [container]},
            },
        },
    }
    with pytest.raises(kubernetes_validate.ValidationError, match="periodSecond"):
        kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)


def _extractor_pod() -> dict[str, Any]:
    (deployment,) = find("Deployment", "extractor")
    return dict(deployment["spec"]["template"])


def test_secret_references_name_keys_of_the_example_secret() -> None:
    (secret,) = find("Secret", "extractor")
    keys = set(secret["stringData"])
    used: set[tuple[str, str]] = set()
    for _, doc in DOCUMENTS:
        if doc["kind"] in ("Deployment", "StatefulSet"):
            for container in doc["spec"]["template"]["spec"]["containers"]:
                for env in container.get("env", []):
                    ref = env.get("valueFrom", {}).get("secretKeyRef")
                    if ref:
                        used.add((ref["name"], ref["key"]))
        if doc["kind"] == "TriggerAuthentication":
            used |= {(ref["name"], ref["key"]) for ref in doc["spec"]["secretTargetRef"]}
    assert used, "nothing reads the Secret"
    assert {name for name, _ in used} == {"extractor"}
    assert {key for _, key in used} == keys, "the example Secret and its readers disagree"


def test_names_refer_to_what_exists() -> None:
    pod = _extractor_pod()
    labels = pod["metadata"]["labels"]
    (service,) = find("Service", "extractor")
    assert service["spec"]["selector"] == labels
    (budget,) = find("PodDisruptionBudget", "extractor")
    assert budget["spec"]["selector"]["matchLabels"] == labels
    claims = {doc["metadata"]["name"] for doc in find("PersistentVolumeClaim")}
    for volume in pod["spec"]["volumes"]:
        if "persistentVolumeClaim" in volume:
            assert volume["persistentVolumeClaim"]["claimName"] in claims
    (scaled,) = find("ScaledObject")
    (hpa,) = find("HorizontalPodAutoscaler")
    for target in (scaled["spec"]["scaleTargetRef"], hpa["spec"]["scaleTargetRef"]):
        assert (target["kind"], target["name"]) == ("Deployment", "extractor")
    auths = {doc["metadata"]["name"] for doc in find("TriggerAuthentication")}
    for trigger in scaled["spec"]["triggers"]:
        if "authenticationRef" in trigger:
            assert trigger["authenticationRef"]["name"] in auths
    (postgres,) = find("StatefulSet", "extractor-postgres")
    assert postgres["spec"]["serviceName"] in {doc["metadata"]["name"] for doc in find("Service")}


def test_probes_use_the_services_health_routes() -> None:
    (container,) = _extractor_pod()["spec"]["containers"]
    assert container["startupProbe"]["httpGet"]["path"] == "/readyz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    port_names = {port["name"] for port in container["ports"]}
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"]["port"] in port_names


def test_resources_are_sized_from_the_bench() -> None:
    (container,) = _extractor_pod()["spec"]["containers"]
    env = {item["name"]: item.get("value") for item in container["env"]}
    workers = int(env["EXTRACTOR_WORKERS"])
    resources = container["resources"]
    limit = quantity_bytes(resources["limits"]["memory"])
    request = quantity_bytes(resources["requests"]["memory"])
    # The master and every worker at its peak, a PDF's Tesseract children on top, fit under
    # the limit with a fifth to spare...
    worst = MASTER_BYTES + workers * WORKER_PEAK_BYTES + PDF_CHILDREN_BYTES
    assert limit >= 1.2 * worst
    # ...and the request covers the master and the workers at their peak.
    assert request >= MASTER_BYTES + workers * WORKER_PEAK_BYTES
    assert request <= limit
    # One core per worker at most: a worker's engine runs one thread at full speed.
    assert float(resources["limits"]["cpu"]) <= workers


def test_every_variable_set_is_a_setting() -> None:
    """A misspelt EXTRACTOR_* variable would be ignored silently by the server: refuse it here,
    in the Kubernetes manifests and in compose.yaml alike."""
    known = {
        declared.variable
        for settings in (Settings, LabelingSettings)
        for declared in settings.declared()
    }
    used: set[str] = set()
    for _, doc in DOCUMENTS:
        if doc["kind"] == "Deployment":
            for container in doc["spec"]["template"]["spec"]["containers"]:
                used |= {env["name"] for env in container.get("env", [])}
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    for service in compose["services"].values():
        used |= set(service.get("environment") or {})
    extractor_variables = {name for name in used if name.startswith("EXTRACTOR_")}
    assert extractor_variables, "no settings found"
    assert extractor_variables <= known, sorted(extractor_variables - known)
