"""``POST /admission/validate``: the validating admission webhook.

Kubernetes contract (https://kubernetes.io/docs/reference/access-authn-authz/extensible-admission-controllers/):

* A well-formed ``admission.k8s.io/v1`` review always gets HTTP 200 with an AdmissionReview that echoes the
  request's ``uid``; a denial is ``allowed: false`` + ``status {code: 403, message}``; soft problems are
  ``warnings``. A body that is not JSON or not a v1 AdmissionReview is a 400 (the API server then applies the
  webhook's own ``failurePolicy``), never mistaken for a verdict on the object; when its ``request.uid`` is
  readable the 400 body still echoes it in an AdmissionReview ``response``.
* Nothing is admitted silently unchecked: every part kvcap could not evaluate (unknown model or GPU, flags it
  cannot see, an evaluation error under ``fail-open``) is a warning on the review and a sample of
  ``kvcap_admission_unevaluated_total{reason}``.
* The hot path never touches the database: the catalog is the in-memory snapshot on ``app.state.catalog``
  (refreshed in the background by the app), and the policy is pure.
* ``dryRun`` reviews get the same verdict. The webhook has no side effects besides a log line and a metric
  sample (its configuration declares ``sideEffects: None``).
* DELETE and CONNECT, and every subresource (``status``, ``scale``), are allowed unchecked: a controller
  writing status or an autoscaler scaling must never be blocked by a capacity rule.
* An unexpected exception while evaluating follows ``KVCAP_ADMISSION_FAILURE_POLICY``: ``fail-open`` allows
  with a warning, ``fail-closed`` denies with code 500 and says kvcap failed (not that the object is wrong);
  in ``audit`` mode that denial, like every other, becomes a ``would deny:`` warning.
* An unknown model or GPU is not a failure: the policy allows with a "kvcap cannot check" warning in both
  modes (see ``policy``).

Every decision is logged at INFO with the uid (``extra={"uid": …}``), kind, namespace/name, verdict and reason,
never the object, and reported to the ``AdmissionObserver`` on ``app.state.admission_observer`` when one is set.
Verdict labels: ``allowed``, ``denied``, ``would_deny`` (audit mode), ``skipped``, ``error`` (evaluation failed),
``malformed`` (400).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from typing import Annotated, Any, Protocol

from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import JSONResponse
from pydantic import ValidationError

from service.admission.extract import extract
from service.admission.policy import PolicyConfig, Verdict, evaluate
from service.admission.reviews import API_VERSION, AdmissionRequest, AdmissionReview, AdmissionReviewResponse
from service.api.errors import error_body
from service.catalog.snapshot import CatalogHolder, CatalogSnapshot
from service.settings import Settings

logger = logging.getLogger("kvcap.admission")

router = APIRouter(prefix="/admission", tags=["admission"])

Policy = Callable[[AdmissionRequest, CatalogSnapshot, PolicyConfig], Verdict]


class AdmissionObserver(Protocol):
    """Counts reviews for ``kvcap_admission_reviews_total{verdict,kind}`` and
    ``kvcap_admission_review_duration_seconds``. The exporter implements it; the app sets
    ``app.state.admission_observer``. Defined here so that admission does not import the exporter."""

    def observe(self, *, verdict: str, kind: str, duration_seconds: float) -> None: ...

    def observe_unevaluated(self, *, reason: str) -> None:
        """One part of an object kvcap could not evaluate (``kvcap_admission_unevaluated_total{reason}``)."""


def review_policy(request: AdmissionRequest, snapshot: CatalogSnapshot, config: PolicyConfig) -> Verdict:
    """The verdict on one request: extract what vLLM will run, then apply the pure policy."""
    if request.operation in ("DELETE", "CONNECT"):
        return Verdict(allowed=True, skipped=f"{request.operation} is not checked")
    if request.subResource:
        return Verdict(allowed=True, skipped=f"subresource {request.subResource} is not checked")
    if request.object is None:
        return Verdict(allowed=True, skipped="no object in the review")
    return evaluate(extract(request.object), snapshot, config)


def get_policy() -> Policy:
    """The policy as a dependency, so tests can swap in a failing one (``app.dependency_overrides``)."""
    return review_policy


PolicyDep = Annotated[Policy, Depends(get_policy)]


def audit_annotations(verdict: Verdict) -> dict[str, str]:
    """Recorded in the API server's audit log as ``validate.kvcap.io/verdict`` and ``…/reason``."""
    out: dict[str, str] = {"verdict": verdict.outcome}
    reason = verdict.skipped or verdict.message
    if reason:
        out["reason"] = reason[:1000]
    return out


def respond(review: AdmissionReview, verdict: Verdict) -> AdmissionReviewResponse:
    audit = audit_annotations(verdict)
    if verdict.allowed:
        return review.allow(warnings=verdict.warnings, audit=audit)
    return review.deny(verdict.message, code=403, reason="Forbidden", warnings=verdict.warnings, audit=audit)


def _observe(request: Request, *, verdict: str, kind: str, started: float) -> None:
    observer: AdmissionObserver | None = getattr(request.app.state, "admission_observer", None)
    if observer is None:
        return
    try:
        observer.observe(verdict=verdict, kind=kind, duration_seconds=time.perf_counter() - started)
    except Exception:  # metrics must never change a verdict
        logger.exception("admission observer failed")


def _observe_unevaluated(request: Request, reasons: Sequence[str]) -> None:
    observer = getattr(request.app.state, "admission_observer", None)
    count = getattr(observer, "observe_unevaluated", None)
    if count is None:
        return
    try:
        for reason in reasons:
            count(reason=reason)
    except Exception:  # metrics must never change a verdict
        logger.exception("admission observer failed")


def readable_uid(body: bytes) -> str | None:
    """``request.uid`` of a review that failed validation, when the body is JSON and the uid a string."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return None
    request = data.get("request") if isinstance(data, dict) else None
    uid = request.get("uid") if isinstance(request, dict) else None
    return uid if isinstance(uid, str) and 0 < len(uid) <= 256 else None


def malformed_response(message: str, uid: str | None) -> Response:
    """400 for a body that is not an AdmissionReview, in kvcap's error shape.

    A 400 (not a 200 verdict) makes the API server apply the webhook's own ``failurePolicy``: kvcap never
    guesses a verdict on an object it could not read. When the ``uid`` is readable the body also carries an
    AdmissionReview response with it (``allowed: false``, ``status.code`` 400), so the failed call can be
    matched to the API server's request in logs and audit events.
    """
    body: dict[str, Any] = error_body("BadRequest", message)
    if uid is not None:
        body |= {
            "apiVersion": API_VERSION,
            "kind": "AdmissionReview",
            "response": {
                "uid": uid,
                "allowed": False,
                "status": {"code": 400, "message": message, "reason": "BadRequest"},
            },
        }
    return JSONResponse(body, status_code=400)


def _inline(schema: Any, defs: dict[str, Any]) -> Any:
    """``schema`` with its ``$ref``s to ``$defs`` replaced by their targets (the models are not recursive)."""
    if isinstance(schema, dict):
        ref = schema.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            return _inline(defs[ref.removeprefix("#/$defs/")], defs)
        return {key: _inline(value, defs) for key, value in schema.items() if key != "$defs"}
    if isinstance(schema, list):
        return [_inline(item, defs) for item in schema]
    return schema


_REVIEW_SCHEMA = AdmissionReview.model_json_schema()
# The body is parsed by hand (a malformed review is a 400, not FastAPI's 422), so it is declared here for the
# OpenAPI document and the schemathesis fuzz test.
_REVIEW_BODY = {
    "required": True,
    "content": {"application/json": {"schema": _inline(_REVIEW_SCHEMA, _REVIEW_SCHEMA.get("$defs", {}))}},
}


@router.post(
    "/validate",
    summary="Validating admission webhook for vLLM workloads (AdmissionReview admission.k8s.io/v1)",
    response_model=AdmissionReviewResponse,
    responses={400: {"description": "the body is not an admission.k8s.io/v1 AdmissionReview"}},
    openapi_extra={"requestBody": _REVIEW_BODY},
)
async def validate(request: Request, policy: PolicyDep) -> Response:
    """Pure computation over the in-memory catalog; HTTP 200 for every well-formed review."""
    started = time.perf_counter()
    body = await request.body()
    try:
        review = AdmissionReview.model_validate_json(body)
    except ValidationError as exc:
        _observe(request, verdict="malformed", kind="", started=started)
        uid = readable_uid(body)
        logger.info("admission review %s rejected as malformed: %s", uid or "(no uid)", _first_error(exc))
        return malformed_response(f"not an admission.k8s.io/v1 AdmissionReview: {_first_error(exc)}", uid)
    req = review.request
    settings: Settings = request.app.state.settings
    holder: CatalogHolder = request.app.state.catalog
    try:
        verdict = policy(req, holder.snapshot, PolicyConfig.from_settings(settings))
    except Exception as exc:
        fail_open = settings.admission_failure_policy == "fail-open"
        problem = f"kvcap could not evaluate {req.kind.kind} {_ref(req)}: {type(exc).__name__}"
        logger.exception(
            "admission %s %s %s: evaluation failed (%s)",
            req.uid,
            req.kind.kind,
            _ref(req),
            "allowing, fail-open" if fail_open else "denying, fail-closed",
            extra={"uid": req.uid, "namespace": req.namespace},
        )
        _observe(request, verdict="error", kind=req.kind.kind, started=started)
        _observe_unevaluated(request, ("error",))
        audit = {"verdict": "error", "reason": problem}
        if fail_open:
            answer = review.allow(warnings=[f"{problem}; allowed unchecked (fail-open)"], audit=audit)
        elif settings.admission_mode == "audit":  # audit mode never blocks, not even on kvcap's own failure
            answer = review.allow(
                warnings=[f"would deny: {problem}; denied because the failure policy is fail-closed"],
                audit=audit,
            )
        else:
            answer = review.deny(
                f"{problem}; denied because the failure policy is fail-closed",
                code=500,
                reason="InternalError",
                audit=audit,
            )
        return Response(answer.to_json(), media_type="application/json")
    _log(req, verdict)
    _observe(request, verdict=verdict.outcome, kind=req.kind.kind, started=started)
    _observe_unevaluated(request, verdict.unevaluated)
    return Response(respond(review, verdict).to_json(), media_type="application/json")


def _ref(req: AdmissionRequest) -> str:
    name = req.name or _object_name(req) or "(unnamed)"
    return f"{req.namespace}/{name}" if req.namespace else name


def _object_name(req: AdmissionRequest) -> str | None:
    metadata = (req.object or {}).get("metadata")
    if isinstance(metadata, dict):
        name = metadata.get("name") or metadata.get("generateName")
        return str(name) if name else None
    return None


def _log(req: AdmissionRequest, verdict: Verdict) -> None:
    reason = verdict.skipped or verdict.message or "; ".join(verdict.warnings) or "fits"
    logger.info(
        "admission %s %s %s %s%s: %s: %s",
        req.uid,
        req.operation,
        req.kind.kind,
        _ref(req),
        " (dry run)" if req.dryRun else "",
        verdict.outcome,
        reason,
        extra={
            "uid": req.uid,
            "namespace": req.namespace,
            "deployment": req.name,
            "verdict": verdict.outcome,
        },
    )


def _first_error(exc: ValidationError) -> str:
    errors = exc.errors()
    if not errors:
        return "invalid"
    error = errors[0]
    loc = ".".join(str(p) for p in error.get("loc", ())) or "body"
    more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{loc}: {error.get('msg')}{more}"
