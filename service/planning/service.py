"""Plans over the in-memory catalog: resolve the model and GPU, run the pure planner, shape the response.

No database access happens here, so plans keep answering while the database is down.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from pydantic import ConfigDict, TypeAdapter, with_config
from typing_extensions import TypedDict  # pydantic needs this one below Python 3.12

from service.catalog.resolve import resolve_gpu, resolve_model
from service.catalog.snapshot import CatalogSnapshot
from service.core.errors import ConfigError, InvalidSpec
from service.core.hf_config import parse_hf_config
from service.core.planner import (
    CapacityPlan,
    KvCacheResult,
    MemoryResult,
    Message,
    Projections,
    ResolvedSettings,
    StageResult,
    Suggestion,
    Term,
    plan,
)
from service.core.planner.results import FeaturesResult, SharedResults
from service.core.records import quick_init
from service.core.specs import GpuSpec, ModelSpec
from service.errors import Unprocessable
from service.planning.calibration import (
    CalibrationHolder,
    apply_calibration,
    calibration_for,
)
from service.planning.calibration_key import calibration_key_of
from service.planning.request import build_request
from service.planning.schemas import (
    CalibrationOut,
    InlineGpu,
    InlineModel,
    PlanRequestBody,
    PlanResponse,
    Subject,
)


@dataclasses.dataclass(frozen=True, slots=True)
class ResolvedModel:
    spec: ModelSpec
    subject: Subject
    implied_quantization: str | None = None


def resolve_model_ref(
    snapshot: CatalogSnapshot, ref: str | InlineModel, *, field: str = "model"
) -> ResolvedModel:
    if isinstance(ref, InlineModel):
        try:
            spec = parse_hf_config(ref.hf_config, num_parameters=ref.num_parameters)
        except ConfigError as exc:
            raise Unprocessable.for_field(
                f"{field}.hf_config.{exc.field}" if exc.field else f"{field}.hf_config", exc.message
            ) from None
        return ResolvedModel(
            spec=spec, subject=Subject(name=ref.name or spec.architecture or "inline", source="inline")
        )
    match = resolve_model(snapshot, ref)
    if match is None:
        raise Unprocessable.for_field(
            field,
            f"unknown model {ref!r}: not a catalog name, Hugging Face id or alias (see GET /v1/models, or pass {{'hf_config': ...}})",
        )
    return ResolvedModel(
        spec=match.model.spec,
        subject=Subject(name=match.model.name, source="catalog", matched_by=match.how),
        implied_quantization=match.quantization,
    )


def resolve_gpu_ref(
    snapshot: CatalogSnapshot, ref: str | InlineGpu | None, *, field: str = "gpu"
) -> tuple[GpuSpec | None, Subject | None]:
    if ref is None:
        return None, None
    if isinstance(ref, InlineGpu):
        spec = GpuSpec(**ref.model_dump())
        return spec, Subject(name=ref.name, source="inline")
    found = resolve_gpu(snapshot, ref)
    if found is None:
        raise Unprocessable.for_field(
            field,
            f"unknown GPU {ref!r}: not a catalog name or product label (see GET /v1/gpus, or pass {{'memory_bytes': ...}})",
        )
    return found.spec, Subject(name=found.name, source="catalog")


_INTERNAL_FIELDS = frozenset({"layout", "in_flight_tokens", "state_pages", "shared"})


_RESPONSE_FIELDS = tuple(f.name for f in dataclasses.fields(CapacityPlan) if f.name not in _INTERNAL_FIELDS)


def to_response(
    result: CapacityPlan,
    *,
    model: Subject,
    gpu: Subject | None,
    calibration: CalibrationOut | None = None,
) -> PlanResponse:
    """Validate the core's dataclasses straight into the response models (attribute access, no deep copies)."""
    data = {name: getattr(result, name) for name in _RESPONSE_FIELDS}
    data["model"], data["gpu"] = model, gpu
    if calibration is not None:
        data["calibration"] = calibration
    return PlanResponse.model_validate(data, from_attributes=True)


def make_plan(
    snapshot: CatalogSnapshot, body: PlanRequestBody, calibrations: CalibrationHolder | None = None
) -> PlanResponse:
    planned = _plan_for(snapshot, body)
    if calibration_for(planned.key, calibrations, exact=planned.result.exact) is None:  # the usual case
        uncalibrated = CalibrationOut(applied=False, key=planned.key)
        return to_response(planned.result, model=planned.model, gpu=planned.gpu, calibration=uncalibrated)
    response = to_response(planned.result, model=planned.model, gpu=planned.gpu)
    return apply_calibration(response, calibrations, key=planned.key)


def make_plan_json(
    snapshot: CatalogSnapshot, body: PlanRequestBody, calibrations: CalibrationHolder | None = None
) -> bytes:
    """``make_plan(...).model_dump_json()``, the same bytes; an uncalibrated plan (the usual case) is written
    straight from the core's dataclasses (``PLAN_JSON``) instead of being validated into ``PlanResponse``, after
    the JSON of its model and GPU (``subjects_json``, kept with the names they resolve from)."""
    planned = _plan_for(snapshot, body)
    if calibration_for(planned.key, calibrations, exact=planned.result.exact) is not None:
        response = to_response(planned.result, model=planned.model, gpu=planned.gpu)
        return apply_calibration(response, calibrations, key=planned.key).model_dump_json().encode()
    result = planned.result
    calibration = Uncalibrated(key=planned.key)
    if result.shared is not None:
        return write_shared_plan(planned.subjects, result, result.shared, calibration)
    fields: PlanFields = {
        **plan_head(result),
        "breakdown": result.breakdown,
        "stages": result.stages,
        "projections": result.projections,
        "calibration": calibration,
        "features": result.features,
    }
    rest = PLAN_JSON.dump_json(fields)  # b'{"settings":…}': its brace opens the response before the subjects
    return b"".join((planned.subjects, b",", rest[1:]))


def plan_head(result: CapacityPlan) -> PlanHead:
    """The response's fields after the subjects up to ``suggestions``, from the core's plan."""
    return {
        "settings": result.settings,
        "kv_cache": result.kv_cache,
        "memory": result.memory,
        "fits": result.fits,
        "exact": result.exact,
        "max_model_len_that_fits": result.max_model_len_that_fits,
        "messages": result.messages,
        "suggestions": result.suggestions,
    }


def write_shared_plan(
    subjects: bytes, result: CapacityPlan, shared: SharedResults, calibration: Uncalibrated
) -> bytes:
    """``PLAN_JSON``'s bytes of a plan without serving features, with the breakdown's leading terms (the
    configuration's, ``SharedResults.terms``: most of the response) written once per configuration
    (``shared_terms_json``). The rest is two objects of the response's fields, written by the same types:
    up to ``suggestions``, and from ``breakdown`` on (the plan's own terms), whose list the shared terms open."""
    head = PLAN_HEAD_JSON.dump_json(plan_head(result))
    own_terms = result.breakdown[len(shared.terms) :]
    tail = PLAN_TAIL_JSON.dump_json(
        {
            "breakdown": own_terms,
            "stages": result.stages,
            "projections": result.projections,
            "calibration": calibration,
            "features": None,
        }
    )
    terms = shared_terms_json(shared)
    between = b"," if terms and own_terms else b""
    opened = len(_TAIL_OPENS)  # tail: b'{"breakdown":[' own terms… b'],"stages":…}'
    return b"".join((subjects, b",", head[1:-1], b",", tail[1:opened], terms, between, tail[opened:]))


_TAIL_OPENS = b'{"breakdown":['
_SHARED_TERMS_MAX = 4096
_SHARED_TERMS: dict[int, tuple[SharedResults, bytes]] = {}


def shared_terms_json(shared: SharedResults) -> bytes:
    """``shared.terms`` as the breakdown list writes them, without the brackets; kept by the object's identity
    (the entry holds the object, so the identity is not reused while it is kept)."""
    known = _SHARED_TERMS.get(id(shared))
    if known is None or known[0] is not shared:
        written = PLAN_TAIL_JSON.dump_json(
            {
                "breakdown": shared.terms,
                "stages": (),
                "projections": None,
                "calibration": Uncalibrated(key=""),
                "features": None,
            }
        )
        known = (shared, written[len(_TAIL_OPENS) : written.index(b'],"stages":[]')])
        if len(_SHARED_TERMS) >= _SHARED_TERMS_MAX:
            _SHARED_TERMS.clear()
        _SHARED_TERMS[id(shared)] = known
    return known[1]


@quick_init
@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Uncalibrated:
    """``CalibrationOut(applied=False, key=key)`` as a plain record, for ``PLAN_JSON`` (the same fields in the
    same order, so the same JSON)."""

    applied: bool = False
    observed_num_gpu_blocks: None = None
    uncalibrated_num_gpu_blocks: None = None
    samples: int = 0
    key: str


@quick_init
@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class _Planned:
    result: CapacityPlan
    model: Subject
    gpu: Subject | None
    key: str  # the calibration key
    subjects: bytes  # ``subjects_json(model, gpu)``


_RESOLVED_PER_SNAPSHOT = 1024
"""Catalog names remembered per snapshot (a flood of distinct unknown names is never remembered)."""
_RESOLVED: dict[int, tuple[CatalogSnapshot, dict[tuple[str, str | None], Any]]] = {}


@dataclasses.dataclass(frozen=True, slots=True)
class _Refs:
    """What a pair of catalog names resolves to, and the JSON of the two subjects."""

    model: ResolvedModel
    gpu: GpuSpec | None
    gpu_subject: Subject | None
    subjects: bytes


def _resolved_refs(snapshot: CatalogSnapshot, model: str, gpu: str | None) -> _Refs:
    """``resolve_model_ref`` and ``resolve_gpu_ref`` of catalog names, once per snapshot and pair of names.

    A snapshot is immutable and replaced whole on reload, so what its names resolve to is kept with it (under
    its identity, holding it so that the identity is not reused) and goes with it: a reloaded catalog resolves
    afresh. A name that does not resolve raises every time (nothing is kept for it).
    """
    cached = _RESOLVED.get(id(snapshot))
    if cached is None or cached[0] is not snapshot:
        if len(_RESOLVED) >= 4:  # a few generations of the catalog at most
            _RESOLVED.clear()
        cached = _RESOLVED[id(snapshot)] = (snapshot, {})
    known = cached[1]
    found: _Refs | None = known.get((model, gpu))
    if found is None:
        found = _refs(resolve_model_ref(snapshot, model), resolve_gpu_ref(snapshot, gpu))
        if len(known) < _RESOLVED_PER_SNAPSHOT:
            known[(model, gpu)] = found
    return found


def _refs(model: ResolvedModel, gpu: tuple[GpuSpec | None, Subject | None]) -> _Refs:
    return _Refs(model, gpu[0], gpu[1], subjects_json(model.subject, gpu[1]))


def _plan_for(snapshot: CatalogSnapshot, body: PlanRequestBody) -> _Planned:
    if isinstance(body.model, str) and (body.gpu is None or isinstance(body.gpu, str)):
        refs = _resolved_refs(snapshot, body.model, body.gpu)
    else:
        refs = _refs(resolve_model_ref(snapshot, body.model), resolve_gpu_ref(snapshot, body.gpu))
    resolved = refs.model
    request = build_request(
        resolved.spec,
        refs.gpu,
        body,
        implied_quantization=resolved.implied_quantization,
        snapshot=snapshot,
        prompt_tokens=body.prompt_tokens,
        output_tokens=body.output_tokens,
    )
    try:
        result = plan(request)
    except InvalidSpec as exc:
        raise Unprocessable.for_field(exc.field, exc.message) from None
    key = calibration_key_of(result, model=resolved.subject, gpu=refs.gpu_subject)
    return _Planned(
        result=result, model=resolved.subject, gpu=refs.gpu_subject, key=key, subjects=refs.subjects
    )


@with_config(ConfigDict(defer_build=True))
class Subjects(TypedDict):
    """``PlanResponse``'s first two fields."""

    model: Subject
    gpu: Subject | None


SUBJECTS_JSON: TypeAdapter[Subjects] = TypeAdapter(Subjects)


def subjects_json(model: Subject, gpu: Subject | None) -> bytes:
    """``{"model":…,"gpu":…`` as ``PlanResponse`` writes them: the response up to its third field."""
    return SUBJECTS_JSON.dump_json({"model": model, "gpu": gpu})[:-1]


@with_config(ConfigDict(defer_build=True))  # built on the first plan, not when the CLI imports this
class PlanHead(TypedDict):
    """``PlanResponse``'s fields after the subjects up to ``suggestions``, in its order, holding the core's result
    dataclasses (same names, same order)."""

    settings: ResolvedSettings
    kv_cache: KvCacheResult
    memory: MemoryResult
    fits: bool
    exact: bool
    max_model_len_that_fits: int
    messages: tuple[Message, ...]
    suggestions: tuple[Suggestion, ...]


@with_config(ConfigDict(defer_build=True))
class PlanTail(TypedDict):
    """``PlanResponse``'s fields from ``breakdown`` on."""

    breakdown: tuple[Term, ...]
    stages: tuple[StageResult, ...]
    projections: Projections | None
    calibration: Uncalibrated
    features: FeaturesResult | None


@with_config(ConfigDict(defer_build=True))
class PlanFields(PlanHead, PlanTail):
    """``PlanResponse``'s fields after the subjects: the head's, then the tail's (TypedDict bases keep that order)."""


PLAN_JSON: TypeAdapter[PlanFields] = TypeAdapter(PlanFields)
"""Writes ``PlanFields`` as ``PlanResponse.model_dump_json`` writes those fields (tests/planning/test_lane.py
compares the two over the catalog)."""

# ``PLAN_JSON`` in two pieces, for ``write_shared_plan`` (the same field types, so the same JSON).
PLAN_HEAD_JSON: TypeAdapter[PlanHead] = TypeAdapter(PlanHead)
PLAN_TAIL_JSON: TypeAdapter[PlanTail] = TypeAdapter(PlanTail)
