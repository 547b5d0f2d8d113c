"""Recommendations and sweeps over the in-memory catalog (pure core + catalog resolution; no database)."""

from __future__ import annotations

import dataclasses

from service.catalog.snapshot import CatalogSnapshot
from service.core.errors import InvalidSpec
from service.core.recommend import Option, Search, Workload, recommend, sweep
from service.core.serving.speculative import SpecDecoding
from service.errors import Unprocessable
from service.planning.request import build_request
from service.planning.schemas import (
    OptionOut,
    RecommendationOut,
    RecommendRequestBody,
    SpeculativeAcceptanceOut,
    SweepOut,
    SweepRequestBody,
    WorkloadIn,
)
from service.planning.service import resolve_gpu_ref, resolve_model_ref


def to_workload(body: WorkloadIn) -> Workload:
    try:
        return Workload(**body.model_dump())
    except InvalidSpec as exc:
        raise Unprocessable.for_field(exc.field, exc.message) from None


def option_out(option: Option) -> OptionOut:
    data = {
        f.name: getattr(option, f.name)
        for f in dataclasses.fields(option)
        if f.name not in ("plan", "speculative")
    }
    data["num_gpu_blocks"] = option.plan.kv_cache.num_gpu_blocks if option.plan else None
    data["speculative"] = speculative_out(option.speculative)
    return OptionOut.model_validate(data)


def speculative_out(spec: SpecDecoding | None) -> SpeculativeAcceptanceOut | None:
    if spec is None:
        return None
    return SpeculativeAcceptanceOut(
        method=spec.method,
        num_speculative_tokens=spec.num_speculative_tokens,
        mean_acceptance_length=spec.mean_acceptance_length,
        source="given" if spec.given else "method default",
        position_acceptance=spec.position_acceptance,
        proposes=spec.proposes,
    )


def make_recommendation(
    snapshot: CatalogSnapshot, body: RecommendRequestBody, *, time_scale: float = 1.0
) -> RecommendationOut:
    """``time_scale``: a step-time scale fitted from live latency (the deployment plan passes its own);
    ``body.simulate = False`` sizes every option by the roofline bound alone (``Search.simulate``)."""
    model = resolve_model_ref(snapshot, body.model)
    gpu, gpu_subject = resolve_gpu_ref(snapshot, body.gpu)
    assert gpu is not None and gpu_subject is not None
    workload = to_workload(body.workload)
    request = build_request(
        model.spec, gpu, body, implied_quantization=model.implied_quantization, snapshot=snapshot
    )
    try:
        chosen, options = recommend(
            request,
            workload,
            tensor_parallel_sizes=body.tensor_parallel_sizes,
            search=Search(time_scale=time_scale, simulate=body.simulate),
        )
    except InvalidSpec as exc:
        raise Unprocessable.for_field(exc.field, exc.message) from None
    return RecommendationOut(
        model=model.subject,
        gpu=gpu_subject,
        recommended=option_out(chosen) if chosen else None,
        options=[option_out(o) for o in options],
    )


def make_sweep(snapshot: CatalogSnapshot, body: SweepRequestBody) -> SweepOut:
    model = resolve_model_ref(snapshot, body.model)
    if body.gpus:
        gpus = []
        for index, ref in enumerate(body.gpus):
            spec, _ = resolve_gpu_ref(snapshot, ref, field=f"gpus.{index}")
            assert spec is not None
            gpus.append(spec)
    else:
        gpus = [entry.spec for entry in snapshot.gpus.values()]
    workload = to_workload(body.workload)
    request = build_request(
        model.spec, None, body, implied_quantization=model.implied_quantization, snapshot=snapshot
    )
    try:
        options = sweep(
            request,
            workload,
            gpus,
            tensor_parallel_sizes=body.tensor_parallel_sizes,
            kv_cache_dtypes=body.kv_cache_dtypes,
            quantizations=body.quantizations,
        )
    except InvalidSpec as exc:
        raise Unprocessable.for_field(exc.field, exc.message) from None
    return SweepOut(
        model=model.subject,
        evaluated=len(options),
        feasible=sum(1 for o in options if o.feasible),
        options=[option_out(o) for o in options[: body.limit]],
    )
