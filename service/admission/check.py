"""``kvcap check``: the admission verdict for every object in files, directories or stdin, before ``kubectl apply``.

Input is multi-document YAML or JSON as people and tools write it: ``---`` separators, comments, Helm's
``# Source:`` headers, empty documents, ``kind: List`` wrappers and whole AdmissionReviews (their
``request.object`` is checked). Objects that are not vLLM workloads (Services, ConfigMaps …) are listed as
skipped. Offline the verdict comes from the same extraction and policy as the webhook, over the built-in catalog;
with ``--server`` each object is sent to a kvcap server's ``/admission/validate`` as a dry-run AdmissionReview, so
the server's catalog and mode decide.

Exit codes: 0 every object passes, 1 at least one is denied, 2 some input could not be read (that wins, so a
pipeline never mistakes a file it could not parse for one that passed).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import yaml

from service.admission.extract import extract
from service.admission.policy import PlanSummary, PolicyConfig, Verdict, evaluate
from service.catalog.snapshot import CatalogSnapshot

if TYPE_CHECKING:  # only ``--server`` talks HTTP; an offline check never imports httpx
    import httpx

YAML_SUFFIXES = (".yaml", ".yml", ".json")

# libyaml is ~10× faster on big rendered charts; the pure-Python loader reads the same documents.
_Loader: type[yaml.SafeLoader | yaml.CSafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class InputError(Exception):
    """Input that cannot be read: a missing path, broken YAML, a document that is not an object."""


@dataclass(frozen=True, slots=True)
class Document:
    source: str  # path (or "-" for stdin)
    index: int  # 1-based document number within the source
    obj: Mapping[str, Any]

    @property
    def where(self) -> str:
        return f"{self.source}#{self.index}"


@dataclass(frozen=True, slots=True)
class Unreadable:
    source: str
    error: str
    index: int | None = None

    @property
    def where(self) -> str:
        return self.source if self.index is None else f"{self.source}#{self.index}"


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckResult:
    where: str
    kind: str
    namespace: str | None
    name: str | None
    verdict: str  # allowed | denied | would_deny | skipped | unreadable
    reason: str = ""
    warnings: tuple[str, ...] = ()
    plans: tuple[PlanSummary, ...] = field(default=())

    @property
    def ref(self) -> str:
        name = self.name or "(unnamed)"
        if not self.kind:
            return name if self.name else "-"
        return f"{self.kind} {self.namespace}/{name}" if self.namespace else f"{self.kind} {name}"

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["warnings"] = list(self.warnings)
        data["plans"] = [asdict(p) for p in self.plans]
        return data


# --- reading -------------------------------------------------------------------------------------------------


def _files(path: Path) -> Iterator[Path]:
    if path.is_dir():
        for child in sorted(path.rglob("*")):
            if child.is_file() and child.suffix.lower() in YAML_SUFFIXES and not child.name.startswith("."):
                yield child
    else:
        yield path


def _objects(value: object) -> Iterator[object]:
    """Unwrap ``kind: List`` (``kubectl get -o yaml``) and AdmissionReviews; yield everything else as is."""
    if isinstance(value, Mapping):
        kind = value.get("kind")
        if isinstance(kind, str) and kind.endswith("List") and isinstance(value.get("items"), list):
            for item in value["items"]:
                yield from _objects(item)
            return
        if kind == "AdmissionReview" and isinstance(value.get("request"), Mapping):
            obj = value["request"].get("object")
            if obj is not None:
                yield obj
            return
    yield value


def _json_document(text: str, source: str) -> list[object] | None:
    """JSON read as JSON (YAML rejects the tab indentation JSON allows); None: read it as YAML."""
    if not (source.lower().endswith(".json") or text.lstrip().startswith(("{", "["))):
        return None
    try:
        return [json.loads(text)]
    except ValueError:
        return None  # perhaps YAML flow style; the YAML reader reports what is wrong


def parse_text(text: str, source: str) -> list[Document | Unreadable]:
    out: list[Document | Unreadable] = []
    try:
        raw_documents = _json_document(text, source)
        if raw_documents is None:
            raw_documents = list(yaml.load_all(text, Loader=_Loader))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        return [Unreadable(source, f"not valid YAML{where}: {getattr(exc, 'problem', None) or exc}")]
    index = 0
    for raw in raw_documents:
        if raw is None:  # an empty document between separators, or a template that rendered to nothing
            continue
        for obj in _objects(raw):
            index += 1
            if not isinstance(obj, Mapping) or not obj.get("kind"):
                out.append(Unreadable(source, "not a Kubernetes object (no kind)", index))
                continue
            out.append(Document(source, index, obj))
    return out


def load(paths: Sequence[str], stdin: TextIO) -> list[Document | Unreadable]:
    """Every document of every input, in order; unreadable inputs are reported, not raised."""
    out: list[Document | Unreadable] = []
    for entry in paths:
        if entry == "-":
            out.extend(parse_text(stdin.read(), "-"))
            continue
        path = Path(entry)
        if not path.exists():
            out.append(Unreadable(entry, "no such file or directory"))
            continue
        files = list(_files(path))
        if path.is_dir() and not files:
            out.append(Unreadable(entry, f"no {', '.join(YAML_SUFFIXES)} files in the directory"))
        for file in files:
            try:
                text = file.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                out.append(Unreadable(str(file), f"cannot read: {exc}"))
                continue
            out.extend(parse_text(text, str(file)))
    return out


# --- checking ------------------------------------------------------------------------------------------------


def _metadata(obj: Mapping[str, Any]) -> tuple[str, str | None, str | None]:
    metadata = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
    assert isinstance(metadata, Mapping)
    name = metadata.get("name") or metadata.get("generateName")
    namespace = metadata.get("namespace")
    return str(obj.get("kind") or ""), str(namespace) if namespace else None, str(name) if name else None


def describe(plan: PlanSummary) -> str:
    """One plan in a phrase: ``llama-3.1-8b on 1 × l4 (TP 1, PP 1): 4.35 requests of 8,192 tokens at once``."""
    gpus = f"{plan.gpus} × {plan.gpu}" if plan.gpus else plan.gpu
    text = (
        f"{plan.model} on {gpus} (TP {plan.tensor_parallel_size}, PP {plan.pipeline_parallel_size}): "
        f"{plan.max_concurrency:.2f} requests of {plan.max_model_len:,} tokens at once"
    )
    if (
        plan.context_tokens is not None
        and plan.concurrency_at_context is not None
        and plan.context_tokens != plan.max_model_len
    ):
        text += f", {plan.concurrency_at_context:.2f} of {plan.context_tokens:,}"
    if plan.requests_per_second_per_replica is not None:
        text += f"; {plan.requests_per_second_per_replica:.2f} req/s per replica within the promised SLOs"
    return text


def from_verdict(document: Document, verdict: Verdict) -> CheckResult:
    kind, namespace, name = _metadata(document.obj)
    reason = verdict.skipped or verdict.message
    if verdict.outcome == "allowed" and verdict.plans:
        reason = "; ".join(describe(p) for p in verdict.plans)
    return CheckResult(
        where=document.where,
        kind=kind,
        namespace=namespace,
        name=name,
        verdict=verdict.outcome,
        reason=reason,
        warnings=verdict.warnings,
        plans=verdict.plans,
    )


def check_offline(document: Document, snapshot: CatalogSnapshot, config: PolicyConfig) -> CheckResult:
    return from_verdict(document, evaluate(extract(document.obj), snapshot, config))


class ServerError(Exception):
    """The server could not be asked or did not answer with an AdmissionReview."""


def check_remote(document: Document, client: httpx.Client, server: str) -> CheckResult:
    """Ask ``server``'s webhook with a dry-run AdmissionReview, as the API server would."""
    import uuid  # only a review sent to a server has a uid (uuid loads platform: the offline check skips both)

    import httpx

    from service.admission.reviews import review_for  # pydantic: the offline check never needs it

    kind, namespace, name = _metadata(document.obj)
    body = review_for(document.obj, uid=str(uuid.uuid4()), dry_run=True)
    url = server.rstrip("/") + "/admission/validate"
    try:
        response = client.post(url, json=body)
    except httpx.HTTPError as exc:
        raise ServerError(f"cannot reach {server}: {exc}") from None
    if response.status_code != 200:
        raise ServerError(f"{url} answered {response.status_code}: {response.text[:300]}")
    try:
        answer = response.json()["response"]
        allowed = bool(answer["allowed"])
    except (ValueError, KeyError, TypeError):
        raise ServerError(f"{url} did not answer with an AdmissionReview") from None
    audit = answer.get("auditAnnotations") or {}
    verdict = audit.get("verdict") or ("allowed" if allowed else "denied")
    if not allowed:
        verdict = "denied"
    reason = (answer.get("status") or {}).get("message") or audit.get("reason") or ""
    return CheckResult(
        where=document.where,
        kind=kind,
        namespace=namespace,
        name=name,
        verdict=verdict,
        reason=reason,
        warnings=tuple(answer.get("warnings") or ()),
    )


def unreadable(item: Unreadable) -> CheckResult:
    return CheckResult(
        where=item.where, kind="", namespace=None, name=None, verdict="unreadable", reason=item.error
    )


def exit_code(results: Iterable[CheckResult]) -> int:
    verdicts = {r.verdict for r in results}
    if "unreadable" in verdicts:
        return 2
    return 1 if "denied" in verdicts else 0


def summary(results: Sequence[CheckResult]) -> dict[str, int]:
    counts = {
        "objects": len(results),
        "allowed": 0,
        "denied": 0,
        "would_deny": 0,
        "skipped": 0,
        "unreadable": 0,
    }
    for result in results:
        counts[result.verdict] = counts.get(result.verdict, 0) + 1
    return counts


def report_json(results: Sequence[CheckResult]) -> str:
    return json.dumps(
        {
            "results": [r.to_json() for r in results],
            "summary": summary(results),
            "exit_code": exit_code(results),
        },
        indent=2,
    )
