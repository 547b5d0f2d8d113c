"""``admission.k8s.io/v1`` AdmissionReview, typed, with the response built from the request.

Field names follow the Kubernetes wire format (``apiVersion``, ``oldObject``, ``dryRun``): this is the one
place where wire fidelity beats PEP 8 (``anchors-style-notes.md`` §11.5b). Unknown fields are ignored, so a
newer API server adding one does not turn every review into a 400.

Responses are only ever made by ``review.allow(...)`` / ``review.deny(...)`` (kube-rs'
``AdmissionResponse::from(&req)``): the ``uid`` and ``apiVersion`` the API server matches the answer against
cannot be forgotten or mistyped.

Reference: https://kubernetes.io/docs/reference/access-authn-authz/extensible-admission-controllers/
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field

API_VERSION: Final = "admission.k8s.io/v1"

Operation = Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]


def _one_line(text: str) -> str:
    """Warnings travel as HTTP ``Warning`` headers to kubectl: no control characters, one line."""
    return "".join(" " if ord(c) < 32 or c == "\x7f" else c for c in text)


class _Wire(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class GroupVersionKind(_Wire):
    group: str = ""
    version: str
    kind: str


class GroupVersionResource(_Wire):
    group: str = ""
    version: str
    resource: str


class UserInfo(_Wire):
    username: str | None = None
    uid: str | None = None
    groups: list[str] | None = None
    extra: dict[str, list[str]] | None = None


class AdmissionRequest(_Wire):
    """What the API server asks about: the object as it would be stored, and who is asking."""

    uid: str = Field(min_length=1)
    kind: GroupVersionKind
    resource: GroupVersionResource
    subResource: str | None = None
    requestKind: GroupVersionKind | None = None
    requestResource: GroupVersionResource | None = None
    requestSubResource: str | None = None
    name: str | None = None
    namespace: str | None = None
    operation: Operation
    userInfo: UserInfo = Field(default_factory=UserInfo)
    object: dict[str, Any] | None = None
    oldObject: dict[str, Any] | None = None
    dryRun: bool = False
    options: dict[str, Any] | None = None


class AdmissionStatus(_Wire):
    """The ``metav1.Status`` subset a webhook sets on a denial: shown to the user as ``denied the request: …``."""

    code: int
    message: str
    reason: str | None = None


class AdmissionResponse(_Wire):
    uid: str
    allowed: bool
    status: AdmissionStatus | None = None
    warnings: list[str] | None = None
    # Recorded by the API server in its audit log as "<webhook name>/<key>"; kvcap puts its verdict there.
    auditAnnotations: dict[str, str] | None = None


class AdmissionReviewResponse(_Wire):
    apiVersion: Literal["admission.k8s.io/v1"] = API_VERSION
    kind: Literal["AdmissionReview"] = "AdmissionReview"
    response: AdmissionResponse

    def to_json(self) -> bytes:
        """The wire form: unset optional fields are left out, so an allowed review carries no ``status``."""
        return self.model_dump_json(exclude_none=True).encode()


class AdmissionReview(_Wire):
    """An AdmissionReview as the API server sends it (``admission.k8s.io/v1`` only)."""

    apiVersion: Literal["admission.k8s.io/v1"]
    kind: Literal["AdmissionReview"]
    request: AdmissionRequest

    def allow(
        self, *, warnings: Sequence[str] = (), audit: Mapping[str, str] | None = None
    ) -> AdmissionReviewResponse:
        """Admit the object; ``warnings`` reach the user as ``Warning: …`` lines (kubectl ≥ 1.19)."""
        return AdmissionReviewResponse(
            response=AdmissionResponse(
                uid=self.request.uid,
                allowed=True,
                warnings=[_one_line(w) for w in warnings] or None,
                auditAnnotations=dict(audit) if audit else None,
            )
        )

    def deny(
        self,
        message: str,
        *,
        code: int = 403,
        reason: str | None = None,
        warnings: Sequence[str] = (),
        audit: Mapping[str, str] | None = None,
    ) -> AdmissionReviewResponse:
        """Reject the object: ``allowed: false`` with ``status {code, message}`` (403 for a policy denial)."""
        return AdmissionReviewResponse(
            response=AdmissionResponse(
                uid=self.request.uid,
                allowed=False,
                status=AdmissionStatus(code=code, message=message, reason=reason),
                warnings=[_one_line(w) for w in warnings] or None,
                auditAnnotations=dict(audit) if audit else None,
            )
        )


def review_for(
    obj: Mapping[str, Any],
    *,
    uid: str,
    operation: Operation = "CREATE",
    dry_run: bool = True,
) -> dict[str, Any]:
    """An AdmissionReview request for a manifest, as the API server would send it (``kvcap check --server``).

    The resource name is derived the way kubectl's RESTMapper does for regular kinds (lower-case plural).
    """
    api_version = str(obj.get("apiVersion") or "v1")
    group, _, version = api_version.rpartition("/")
    kind = str(obj.get("kind") or "")
    metadata = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
    assert isinstance(metadata, Mapping)
    lower = kind.lower()
    if lower.endswith("s"):
        plural = lower + "es"
    elif lower.endswith("y"):
        plural = lower[:-1] + "ies"
    else:
        plural = lower + "s"
    request: dict[str, Any] = {
        "uid": uid,
        "kind": {"group": group, "version": version, "kind": kind},
        "resource": {"group": group, "version": version, "resource": plural},
        "operation": operation,
        "userInfo": {"username": "kvcap-check"},
        "object": dict(obj),
        "dryRun": dry_run,
    }
    if metadata.get("name"):
        request["name"] = metadata["name"]
    if metadata.get("namespace"):
        request["namespace"] = metadata["namespace"]
    return {"apiVersion": API_VERSION, "kind": "AdmissionReview", "request": request}
