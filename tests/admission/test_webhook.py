"""POST /admission/validate: recorded AdmissionReviews, the Kubernetes contract, failure policies, logs, metrics."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from service.admission.policy import PolicyConfig, Verdict
from service.admission.reviews import AdmissionRequest
from service.admission.router import get_policy
from service.admission.router import router as admission_router
from service.app import create_app
from service.catalog.builtin import builtin_snapshot
from service.catalog.snapshot import CatalogHolder, CatalogSnapshot
from service.settings import Settings

DATA = Path(__file__).parent / "data"
URL = "/admission/validate"

EXPECTED = [
    ("deployment-llama-70b-one-l4.json", False, "weights do not fit"),
    ("statefulset-llama-8b-131k-one-l4.json", False, "vLLM would refuse --max-model-len 131,072"),
    ("statefulset-llama-8b-8k-one-l4.json", True, None),
    ("deployment-tp4-two-gpus.json", False, "needs 4 GPUs but the pod requests 2"),
    ("leaderworkerset-llama-405b-2x8-h100.json", True, None),
    ("inferenceservice-qwen-72b-awq-a100.json", True, None),
    ("pod-mistral-7b-shell-a10g.json", True, None),
    ("deployment-llama-8b-promise-64-one-l4.json", False, "promised 64 concurrent requests"),
    ("configmap.json", True, None),
    ("deployment-delete.json", True, None),
]


def load(name: str) -> dict[str, Any]:
    review: dict[str, Any] = json.loads((DATA / name).read_text())
    return review


class Recorder:
    def __init__(self) -> None:
        self.samples: list[tuple[str, str, float]] = []

    def observe(self, *, verdict: str, kind: str, duration_seconds: float) -> None:
        self.samples.append((verdict, kind, duration_seconds))


def offline_app(**settings: Any) -> FastAPI:
    """The real app with the database unreachable: the webhook must not need it."""
    app = create_app(
        Settings(database_url="postgresql+psycopg://kvcap@127.0.0.1:1/none", **settings), with_lifespan=False
    )
    if not any(getattr(route, "path", None) == URL for route in app.routes):
        app.include_router(admission_router)  # until service/app.py includes it
    app.state.catalog = CatalogHolder(builtin_snapshot())
    app.state.admission_observer = Recorder()
    return app


@pytest.fixture
async def webhook() -> AsyncIterator[httpx.AsyncClient]:
    app = offline_app()
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="https://kvcap.test"
    ) as client:
        yield client


@pytest.fixture
def records() -> Iterator[list[logging.LogRecord]]:
    """kvcap's loggers do not propagate to the root logger, so caplog cannot see them; listen directly."""
    seen: list[logging.LogRecord] = []

    class Listener(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record)

    logger = logging.getLogger("kvcap.admission")
    handler = Listener(level=logging.INFO)
    logger.addHandler(handler)
    try:
        yield seen
    finally:
        logger.removeHandler(handler)


@pytest.mark.parametrize(("name", "allowed", "message"), EXPECTED)
async def test_recorded_reviews_get_the_right_verdicts(
    webhook: httpx.AsyncClient, name: str, allowed: bool, message: str | None
) -> None:
    review = load(name)
    response = await webhook.post(URL, json=review)
    assert response.status_code == 200
    body = response.json()
    assert (body["apiVersion"], body["kind"]) == ("admission.k8s.io/v1", "AdmissionReview")
    answer = body["response"]
    assert answer["uid"] == review["request"]["uid"]
    assert answer["allowed"] is allowed
    if allowed:
        assert "status" not in answer
    else:
        assert answer["status"]["code"] == 403
        assert message is not None and message in answer["status"]["message"]
    assert answer["auditAnnotations"]["verdict"] in ("allowed", "denied", "skipped")


async def test_works_through_the_shared_app_fixture(client: httpx.AsyncClient, app: FastAPI) -> None:
    if not any(getattr(route, "path", None) == URL for route in app.routes):
        app.include_router(admission_router)
    response = await client.post(URL, json=load("deployment-tp4-two-gpus.json"))
    assert response.status_code == 200
    assert response.json()["response"]["allowed"] is False


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        (b"{not json", "not an admission.k8s.io/v1 AdmissionReview"),
        (b"[]", "not an admission.k8s.io/v1 AdmissionReview"),
        (
            json.dumps({**load("configmap.json"), "apiVersion": "admission.k8s.io/v1beta1"}).encode(),
            "apiVersion",
        ),
        (json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}).encode(), "request"),
        (
            json.dumps(
                {
                    **load("configmap.json"),
                    "request": {**load("configmap.json")["request"], "uid": ""},
                }
            ).encode(),
            "request.uid",
        ),
    ],
)
async def test_a_malformed_review_is_a_400_not_a_verdict(
    webhook: httpx.AsyncClient, body: bytes, detail: str
) -> None:
    response = await webhook.post(URL, content=body, headers={"content-type": "application/json"})
    assert response.status_code == 400
    assert response.json()["error"] == "BadRequest"
    assert detail in response.json()["detail"]


async def test_dry_run_gets_the_same_verdict(webhook: httpx.AsyncClient) -> None:
    review = load("deployment-llama-70b-one-l4.json")
    wet = (await webhook.post(URL, json=review)).json()["response"]
    review["request"]["dryRun"] = True
    dry = (await webhook.post(URL, json=review)).json()["response"]
    assert dry == wet


async def test_subresources_and_connect_are_not_checked(webhook: httpx.AsyncClient) -> None:
    review = load("deployment-llama-70b-one-l4.json")
    review["request"]["operation"] = "UPDATE"
    review["request"]["subResource"] = "status"
    answer = (await webhook.post(URL, json=review)).json()["response"]
    assert answer["allowed"] is True
    assert answer["auditAnnotations"] == {"verdict": "skipped", "reason": "subresource status is not checked"}


async def test_warnings_reach_the_user_on_allowed_objects(webhook: httpx.AsyncClient) -> None:
    review = load("statefulset-llama-8b-8k-one-l4.json")
    del review["request"]["object"]["spec"]["template"]["spec"]["affinity"]
    answer = (await webhook.post(URL, json=review)).json()["response"]
    assert answer["allowed"] is True
    assert any("GPU type unknown" in w for w in answer["warnings"])


async def test_audit_mode_allows_with_would_deny_warnings() -> None:
    app = offline_app(admission_mode="audit")
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="https://kvcap.test"
    ) as client:
        answer = (await client.post(URL, json=load("deployment-llama-70b-one-l4.json"))).json()["response"]
    assert answer["allowed"] is True
    assert answer["warnings"][0].startswith("would deny: weights do not fit")
    assert answer["auditAnnotations"]["verdict"] == "would_deny"
    assert app.state.admission_observer.samples[0][:2] == ("would_deny", "Deployment")


def broken_policy(request: AdmissionRequest, snapshot: CatalogSnapshot, config: PolicyConfig) -> Verdict:
    raise RuntimeError("boom")


@pytest.mark.parametrize(
    ("failure_policy", "allowed"),
    [("fail-open", True), ("fail-closed", False)],
)
async def test_evaluation_failures_follow_the_failure_policy(
    failure_policy: str, allowed: bool, records: list[logging.LogRecord]
) -> None:
    app = offline_app(admission_failure_policy=failure_policy)
    app.dependency_overrides[get_policy] = lambda: broken_policy
    review = load("statefulset-llama-8b-8k-one-l4.json")
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="https://kvcap.test"
    ) as client:
        response = await client.post(URL, json=review)
    assert response.status_code == 200
    answer = response.json()["response"]
    assert answer["uid"] == review["request"]["uid"]
    assert answer["allowed"] is allowed
    problem = "kvcap could not evaluate StatefulSet inference/llama-8b: RuntimeError"
    if allowed:
        assert answer["warnings"] == [f"{problem}; allowed unchecked (fail-open)"]
    else:
        assert answer["status"] == {
            "code": 500,
            "message": f"{problem}; denied because the failure policy is fail-closed",
            "reason": "InternalError",
        }
    assert app.state.admission_observer.samples[0][:2] == ("error", "StatefulSet")
    assert any(getattr(r, "uid", None) == review["request"]["uid"] and r.exc_info for r in records)


async def test_audit_mode_never_blocks_even_when_evaluation_fails() -> None:
    app = offline_app(admission_mode="audit", admission_failure_policy="fail-closed")
    app.dependency_overrides[get_policy] = lambda: broken_policy
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="https://kvcap.test"
    ) as client:
        answer = (await client.post(URL, json=load("deployment-tp4-two-gpus.json"))).json()["response"]
    assert answer["allowed"] is True
    assert answer["warnings"][0].startswith(
        "would deny: kvcap could not evaluate Deployment inference/qwen-32b"
    )


async def test_every_decision_is_logged_with_the_uid_and_counted(records: list[logging.LogRecord]) -> None:
    app = offline_app()
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="https://kvcap.test"
    ) as client:
        for name, _, _ in EXPECTED:
            await client.post(URL, json=load(name))
        await client.post(URL, content=b"nope")
    decisions = [r for r in records if getattr(r, "uid", None)]
    assert [r.uid for r in decisions] == [load(name)["request"]["uid"] for name, _, _ in EXPECTED]  # type: ignore[attr-defined]
    denied = next(r for r in decisions if r.uid == load("deployment-tp4-two-gpus.json")["request"]["uid"])  # type: ignore[attr-defined]
    assert "CREATE Deployment inference/qwen-32b: denied: tensor-parallel-size 4" in denied.getMessage()
    assert all('"containers"' not in r.getMessage() for r in records)  # never the object body
    verdicts = [(v, k) for v, k, _ in app.state.admission_observer.samples]
    assert verdicts.count(("denied", "Deployment")) == 3
    assert ("skipped", "ConfigMap") in verdicts
    assert verdicts[-1] == ("malformed", "")
    assert all(seconds >= 0 for _, _, seconds in app.state.admission_observer.samples)


async def test_a_failing_observer_never_changes_the_verdict() -> None:
    class Broken:
        def observe(self, *, verdict: str, kind: str, duration_seconds: float) -> None:
            raise ValueError("metrics down")

    app = offline_app()
    app.state.admission_observer = Broken()
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="https://kvcap.test"
    ) as client:
        response = await client.post(URL, json=load("deployment-tp4-two-gpus.json"))
    assert response.status_code == 200
    assert response.json()["response"]["allowed"] is False


async def test_the_catalog_snapshot_is_read_per_request_so_a_refresh_takes_effect() -> None:
    app = offline_app()
    review = load("statefulset-llama-8b-8k-one-l4.json")
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="https://kvcap.test"
    ) as client:
        assert (await client.post(URL, json=review)).json()["response"]["allowed"] is True
        full = builtin_snapshot()
        without_llama = CatalogSnapshot.build(
            [m.entry for name, m in full.models.items() if name != "llama-3.1-8b"],
            [g.entry for g in full.gpus.values()],
            source="test",
        )
        app.state.catalog.replace(without_llama)
        answer = (await client.post(URL, json=review)).json()["response"]
    assert answer["allowed"] is True
    assert "is not in kvcap's catalog" in answer["warnings"][0]
