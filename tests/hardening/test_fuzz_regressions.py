"""What the schemathesis run (``test_fuzz.py``) found, each kept as a plain test.

1. Every 422 contradicted the document: FastAPI declared its own ``HTTPValidationError`` (``detail`` a list)
   while kvcap answers ``{"error", "detail": "<text>", "errors": [...]}``; other errors declared no body.
2. Timestamps read back from SQLite were naive (``2026-01-01T12:00:00``), not RFC 3339 ``date-time``.
3. A JSON body that is not UTF-8 got an undocumented 400 (malformed JSON is a 422 everywhere else).
4. A 405 advertised only the methods of the first route of the path (``Allow: GET`` for
   ``/v1/gpus/{name}``, which also serves PATCH and DELETE), and none for ``/v1/models/import``.
5. ``/readyz``'s 503 carries the readiness body, not an error: it is declared as such.
6. The webhook declared no request body, so nothing but empty bodies was ever sent to it.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest
from fastapi import FastAPI

from service.api.errors import ErrorBody
from service.api.health import Readiness
from service.app import create_app
from service.catalog.builtin import builtin_snapshot
from service.catalog.snapshot import CatalogHolder
from service.settings import Settings

REVIEWS = Path(__file__).parents[1] / "admission" / "data"


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    return create_app(Settings(), with_lifespan=False).openapi()


def _operations(document: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (method.upper(), path, operation)
        for path, operations in document["paths"].items()
        for method, operation in operations.items()
    ]


def test_every_declared_error_response_is_the_one_error_shape(document: dict[str, Any]) -> None:
    assert "HTTPValidationError" not in document["components"]["schemas"]
    for method, path, operation in _operations(document):
        for status, response in operation["responses"].items():
            if not status.startswith(("4", "5")) or (path, status) == ("/readyz", "503"):
                continue
            schema = response["content"]["application/json"]["schema"]
            assert schema == {"$ref": "#/components/schemas/ErrorBody"}, (method, path, status)


async def test_a_422_body_validates_against_the_declared_schema(client: httpx.AsyncClient) -> None:
    response = await client.get("/readyz", params={"degraded_ok": "null"})
    assert response.status_code == 422
    body = ErrorBody.model_validate(response.json())
    assert body.error == "RequestValidationError"
    assert body.errors[0].loc == ["query", "degraded_ok"]


@pytest.mark.parametrize("path", ["/v1/gpus/h100-sxm-80gb", "/v1/models/llama-3.1-8b"])
async def test_timestamps_read_from_the_database_carry_their_offset(
    client: httpx.AsyncClient, path: str
) -> None:
    body = (await client.get(path)).json()
    for field in ("created_at", "updated_at"):
        stamp = datetime.fromisoformat(body[field])
        assert stamp.utcoffset() is not None, f"{field}={body[field]!r} is not an RFC 3339 date-time"


async def test_a_created_deployment_reads_back_with_an_offset(client: httpx.AsyncClient) -> None:
    body = {"namespace": "fz", "name": "tz", "model": "llama-3.1-8b", "gpu": "l4", "max_model_len": 4096}
    assert (await client.post("/v1/deployments", json=body)).status_code == 201
    listed = (await client.get("/v1/deployments", params={"namespace": "fz"})).json()["items"][0]
    assert datetime.fromisoformat(listed["updated_at"]).utcoffset() is not None


@pytest.mark.parametrize("path", ["/v1/plans", "/v1/gpus", "/v1/deployments", "/v1/models/import"])
async def test_a_body_that_is_not_utf8_is_a_422_naming_the_body(client: httpx.AsyncClient, path: str) -> None:
    response = await client.post(path, content=b"\xff\xfe{", headers={"content-type": "application/json"})
    assert response.status_code == 422
    body = ErrorBody.model_validate(response.json())
    assert body.error == "RequestValidationError"
    assert body.errors[0].loc == ["body"]


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        ("OPTIONS", "/v1/gpus/h100-sxm-80gb", "DELETE, GET, HEAD, PATCH"),
        ("PUT", "/v1/deployments/ns/name", "DELETE, GET, HEAD, PATCH"),
        ("DELETE", "/v1/gpus", "GET, HEAD, POST"),
        ("GET", "/v1/models/import", "POST"),
        ("PUT", "/v1/plans", "POST"),
        ("POST", "/metrics", "GET, HEAD"),
    ],
)
async def test_a_405_lists_every_method_the_path_serves(
    client: httpx.AsyncClient, method: str, path: str, allowed: str
) -> None:
    response = await client.request(method, path)
    # GET /v1/models/import is GET /v1/models/{name} with name "import": a 404, not a 405.
    if (method, path) == ("GET", "/v1/models/import"):
        assert response.status_code == 404
        response = await client.request("PUT", path)
    assert response.status_code == 405
    assert response.headers["allow"] == allowed
    assert ErrorBody.model_validate(response.json()).error == "MethodNotAllowed"


async def test_readyz_503_is_declared_with_the_readiness_body(document: dict[str, Any]) -> None:
    declared = document["paths"]["/readyz"]["get"]["responses"]["503"]
    assert declared["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/Readiness"}
    app: FastAPI = create_app(Settings(), with_lifespan=False)  # no engine: not ready
    app.state.catalog = CatalogHolder(builtin_snapshot())
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        response = await client.get("/readyz")
        degraded = await client.get("/readyz", params={"degraded_ok": "true"})
    assert response.status_code == 503
    assert Readiness.model_validate(response.json()).status == "not ready"
    assert degraded.status_code == 200
    assert Readiness.model_validate(degraded.json()).status == "degraded"


def test_the_webhook_declares_its_request_body_and_recorded_reviews_match_it(
    document: dict[str, Any],
) -> None:
    operation = document["paths"]["/admission/validate"]["post"]
    schema = operation["requestBody"]["content"]["application/json"]["schema"]
    assert "$ref" not in json.dumps(schema)  # self-contained, so it needs no components of its own
    reviews = sorted(REVIEWS.glob("*.json"))
    assert reviews
    for path in reviews:
        jsonschema.validate(json.loads(path.read_text()), schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview"}, schema)
