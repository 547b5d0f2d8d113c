"""AdmissionReview models: responses built from the request, wire names, and requests built for manifests."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from service.admission.reviews import AdmissionReview, review_for

DATA = Path(__file__).parent / "data"


def review() -> AdmissionReview:
    return AdmissionReview.model_validate_json((DATA / "deployment-tp4-two-gpus.json").read_text())


def test_allow_echoes_uid_and_api_version_and_leaves_out_unset_fields() -> None:
    wire = json.loads(review().allow().to_json())
    assert wire == {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": "c7d8e9f0-1a2b-4c3d-9e8f-7a6b5c4d3e2f", "allowed": True},
    }


def test_deny_carries_a_status_and_warnings_are_one_line() -> None:
    wire = json.loads(review().deny("no", warnings=["two\nlines\x1b[31m"]).to_json())["response"]
    assert wire["allowed"] is False
    assert wire["status"] == {"code": 403, "message": "no"}
    assert wire["warnings"] == ["two lines [31m"]


def test_unknown_fields_from_newer_api_servers_are_ignored() -> None:
    data = json.loads((DATA / "configmap.json").read_text())
    data["request"]["somethingNew"] = {"x": 1}
    assert AdmissionReview.model_validate(data).request.uid


def test_only_v1_reviews_are_accepted() -> None:
    data = json.loads((DATA / "configmap.json").read_text())
    data["apiVersion"] = "admission.k8s.io/v1beta1"
    with pytest.raises(ValidationError):
        AdmissionReview.model_validate(data)


@pytest.mark.parametrize(
    ("api_version", "kind", "group", "resource"),
    [
        ("apps/v1", "Deployment", "apps", "deployments"),
        ("v1", "Pod", "", "pods"),
        ("serving.kserve.io/v1beta1", "InferenceService", "serving.kserve.io", "inferenceservices"),
        ("networking.k8s.io/v1", "NetworkPolicy", "networking.k8s.io", "networkpolicies"),
        ("networking.k8s.io/v1", "Ingress", "networking.k8s.io", "ingresses"),
    ],
)
def test_review_for_a_manifest_names_its_resource(
    api_version: str, kind: str, group: str, resource: str
) -> None:
    obj = {"apiVersion": api_version, "kind": kind, "metadata": {"name": "x", "namespace": "ns"}}
    built = AdmissionReview.model_validate(review_for(obj, uid="u-1"))
    request = built.request
    assert (request.kind.group, request.kind.kind, request.resource.resource) == (group, kind, resource)
    assert (request.name, request.namespace, request.dryRun, request.operation) == ("x", "ns", True, "CREATE")
