"""tests/crds.py: the vendored CRDs are the released files, and validation against them can fail."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests import crds

CERTIFICATE: dict[str, Any] = {
    "apiVersion": "cert-manager.io/v1",
    "kind": "Certificate",
    "metadata": {"name": "kvcap-webhook", "namespace": "kvcap"},
    "spec": {
        "secretName": "kvcap-webhook-tls",
        "dnsNames": ["kvcap.kvcap.svc"],
        "duration": "2160h",
        "issuerRef": {"name": "kvcap-ca", "kind": "Issuer", "group": "cert-manager.io"},
    },
}
SCALED_OBJECT: dict[str, Any] = {
    "apiVersion": "keda.sh/v1alpha1",
    "kind": "ScaledObject",
    "metadata": {"name": "llama", "namespace": "llm"},
    "spec": {
        "scaleTargetRef": {"name": "llama"},
        "minReplicaCount": 1,
        "maxReplicaCount": 4,
        "triggers": [
            {"type": "prometheus", "metadata": {"serverAddress": "http://prom:9090", "threshold": "8"}}
        ],
    },
}


def test_every_vendored_crd_is_a_served_kind_with_a_schema():
    assert set(crds.schemas()) == {
        ("cert-manager.io/v1", "Certificate"),
        ("cert-manager.io/v1", "Issuer"),
        ("monitoring.coreos.com/v1", "ServiceMonitor"),
        ("monitoring.coreos.com/v1", "PrometheusRule"),
        ("keda.sh/v1alpha1", "ScaledObject"),
    }


@pytest.mark.parametrize("obj", [CERTIFICATE, SCALED_OBJECT], ids=lambda o: o["kind"])
def test_a_valid_custom_resource_passes(obj: dict[str, Any]):
    crds.validate(obj)


def changed(obj: dict[str, Any], path: tuple[str, ...], value: object) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    node = out
    for key in path[:-1]:
        node = node[key]
    if value is None:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return out


@pytest.mark.parametrize(
    ("obj", "path", "value", "problem"),
    [
        (CERTIFICATE, ("spec", "secretName"), None, "'secretName' is a required property"),
        (CERTIFICATE, ("spec", "isCa"), True, "Additional properties are not allowed ('isCa'"),
        (CERTIFICATE, ("spec", "dnsNames"), "kvcap.kvcap.svc", "is not of type 'array'"),
        (CERTIFICATE, ("spec", "privateKey"), {"algorithm": "DSA"}, "is not one of"),
        (SCALED_OBJECT, ("spec", "triggers"), None, "'triggers' is a required property"),
        (SCALED_OBJECT, ("spec", "minReplicaCount"), "1", "is not of type 'integer'"),
        (SCALED_OBJECT, ("spec", "scaleTargetRef", "kind"), 3, "is not of type 'string'"),
        (SCALED_OBJECT, ("metadata", "name"), None, "metadata/name: required"),
    ],
)
def test_a_broken_custom_resource_is_refused_naming_the_problem(
    obj: dict[str, Any], path: tuple[str, ...], value: object, problem: str
):
    problems = list(crds.errors(changed(obj, path, value)))
    assert any(problem in p for p in problems), problems


def test_int_or_string_fields_take_either():
    monitor = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": {"name": "kvcap"},
        "spec": {"selector": {}, "endpoints": [{"targetPort": 8443}, {"targetPort": "https"}]},
    }
    crds.validate(monitor)
    monitor["spec"]["endpoints"][0]["targetPort"] = 1.5
    assert list(crds.errors(monitor))
