"""Reading deploy/kubernetes/ for the tests: every manifest document, and the parts of KEDA's
``keda.sh/v1alpha1`` API the manifests use, as a JSON Schema.

kubernetes-validate ships the schemas of Kubernetes' own kinds only; KEDA's are custom resources
(CRDs) it cannot know. Rather than let its "schema not found" warning pass silently, the tests
hold KEDA's two kinds to :data:`KEDA_SCHEMAS`: written here from KEDA's API reference (v2.10 and
later: ScaledObject, TriggerAuthentication), closed (``additionalProperties: false``) so a
misspelt field fails as it would in strict mode, and covering only what the manifests set. The
``behavior`` a ScaledObject passes to its HorizontalPodAutoscaler is Kubernetes' own type and is
checked by kubernetes-validate itself, inside a stand-in HPA.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
MANIFESTS = ROOT / "deploy" / "kubernetes"
KUBERNETES_VERSION = "1.37"
KEDA_API = "keda.sh/v1alpha1"


def manifest_files() -> list[Path]:
    """Every YAML file under deploy/kubernetes/, examples included."""
    return sorted(MANIFESTS.rglob("*.yaml"))


def documents(path: Path) -> list[dict[str, Any]]:
    """The non-empty YAML documents of one file."""
    with path.open() as stream:
        return [doc for doc in yaml.safe_load_all(stream) if doc]


def all_documents() -> list[tuple[Path, dict[str, Any]]]:
    """Every document of every manifest file, with its file."""
    return [(path, doc) for path in manifest_files() for doc in documents(path)]


def find(kind: str, name: str | None = None) -> list[dict[str, Any]]:
    """The documents of ``kind`` (and ``name``, when given) across all manifests."""
    return [
        doc
        for _, doc in all_documents()
        if doc["kind"] == kind and (name is None or doc["metadata"]["name"] == name)
    ]


def _closed(properties: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": required or [],
        "additionalProperties": False,
    }


_STRING = {"type": "string", "minLength": 1}
_STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
_METADATA = _closed(
    {"name": _STRING, "namespace": _STRING, "labels": _STRING_MAP, "annotations": _STRING_MAP},
    ["name"],
)
_REPLICAS = {"type": "integer", "minimum": 0}
_SCALED_OBJECT_SPEC = _closed(
    {
        "scaleTargetRef": _closed(
            {
                "apiVersion": _STRING,
                "kind": _STRING,
                "name": _STRING,
                "envSourceContainerName": _STRING,
            },
            ["name"],
        ),
        "pollingInterval": {"type": "integer", "minimum": 1},
        "cooldownPeriod": {"type": "integer", "minimum": 0},
        "idleReplicaCount": _REPLICAS,
        "minReplicaCount": _REPLICAS,
        "maxReplicaCount": {"type": "integer", "minimum": 1},
        "advanced": _closed(
            {
                "restoreToOriginalReplicaCount": {"type": "boolean"},
                # The HPA's own HorizontalPodAutoscalerBehavior: see hpa_behavior_stand_in().
                "horizontalPodAutoscalerConfig": _closed(
                    {"name": _STRING, "behavior": {"type": "object"}}
                ),
            }
        ),
        "triggers": {
            "type": "array",
            "minItems": 1,
            "items": _closed(
                {
                    "type": _STRING,
                    "name": _STRING,
                    "metadata": _STRING_MAP,
                    "metricType": {"enum": ["AverageValue", "Value", "Utilization"]},
                    "useCachedMetrics": {"type": "boolean"},
                    "authenticationRef": _closed(
                        {
                            "name": _STRING,
                            "kind": {
                                "enum": ["TriggerAuthentication", "ClusterTriggerAuthentication"]
                            },
                        },
                        ["name"],
                    ),
                },
                ["type", "metadata"],
            ),
        },
    },
    ["scaleTargetRef", "triggers"],
)
_SECRET_TARGET = _closed({"parameter": _STRING, "name": _STRING, "key": _STRING},
                         ["parameter", "name", "key"])  # fmt: skip
_TRIGGER_AUTHENTICATION_SPEC = _closed(
    {"secretTargetRef": {"type": "array", "minItems": 1, "items": _SECRET_TARGET}}
)


def _keda_kind(kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    return _closed(
        {"apiVersion": {"const": KEDA_API}, "kind": {"const": kind}, "metadata": _METADATA,
         "spec": spec},
        ["apiVersion", "kind", "metadata", "spec"],
    )  # fmt: skip


KEDA_SCHEMAS: dict[str, dict[str, Any]] = {
    "ScaledObject": _keda_kind("ScaledObject", _SCALED_OBJECT_SPEC),
    "TriggerAuthentication": _keda_kind("TriggerAuthentication", _TRIGGER_AUTHENTICATION_SPEC),
}

# What KEDA's postgresql and cpu scalers read from a trigger's metadata (the rest is refused).
TRIGGER_METADATA = {
    "postgresql": ({"query", "targetQueryValue"}, {"activationTargetQueryValue"}),
    "cpu": ({"value"}, {"containerName"}),
}


def hpa_behavior_stand_in(scaled_object: dict[str, Any]) -> dict[str, Any]:
    """An autoscaling/v2 HPA carrying the ScaledObject's ``behavior``, for kubernetes-validate."""
    spec = scaled_object["spec"]
    behavior = spec.get("advanced", {}).get("horizontalPodAutoscalerConfig", {}).get("behavior")
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": scaled_object["metadata"]["name"]},
        "spec": {
            "scaleTargetRef": spec["scaleTargetRef"],
            "maxReplicas": spec.get("maxReplicaCount", 100),
            **({"behavior": behavior} if behavior is not None else {}),
        },
    }


def queue_depth_query() -> str:
    """The SQL the KEDA postgresql trigger polls (autoscaling/keda.yaml)."""
    (scaled,) = find("ScaledObject")
    (trigger,) = [t for t in scaled["spec"]["triggers"] if t["type"] == "postgresql"]
    return str(trigger["metadata"]["query"])


def quantity_bytes(quantity: str) -> int:
    """A Kubernetes memory quantity (``768Mi``, ``1Gi``, ``500M``) in bytes."""
    units = {"Ki": 1024, "Mi": 1024**2, "Gi": 1024**3, "K": 1000, "M": 1000**2, "G": 1000**3}
    for suffix, factor in units.items():
        if quantity.endswith(suffix) and quantity[: -len(suffix)].isdigit():
            return int(quantity[: -len(suffix)]) * factor
    return int(quantity)
