"""What-if replanning of the whole registry: every deployment's plan and replicas under one change.

``POST /v1/deployments/replan`` (and ``kvcap replan``) ask: what would the fleet need with more traffic, other
SLOs, another vLLM release or another GPU type? Nothing is stored. Three stages:

1. **Prepare** (``prepare``): check the change against the catalog (the engine string, the GPU), turn each
   deployment into a ``ReplanJob`` — its plan request as registered, the same under the change, and the
   recommendation request for its changed workload — and refuse a batch beyond the caps
   (``MAX_DEPLOYMENTS``; ``MAX_SIMULATED_CONFIGURATIONS`` distinct configurations for the simulator) with a
   422 before any work starts. Jobs are ordered by *configuration* (the recommendation request without its
   demand: model, GPU, settings, token lengths, SLOs), so deployments that share one run back to back.
2. **Replan** (``Replanner.run``): one job → one ``ReplanDelta``. Plans are cached by their request and
   recommendations by theirs, so a configuration shared by many deployments is planned once; the serving
   simulator's rate searches depend on the configuration only, not on the demand, and are cached in the core
   (``service.core.recommend._rate_search``), so deployments that differ only in traffic re-size in about a
   millisecond each. The caller runs jobs in chunks off the event loop (``CHUNK``).
3. **Summarize** (``summarize``): totals over the deltas.

The two sides of a delta:

- ``current`` is the deployment **as registered**: its GPU, tensor/pipeline-parallel sizes and replica count,
  GPUs = replicas × TP × PP, cost = GPUs × the catalog's hourly price, and whether vLLM starts with its
  settings (its plan, block-calibrated like ``GET …/plan``).
- ``new`` is the **recommendation under the change** (``service.core.recommend.recommend``: the smallest TP
  that starts and meets the SLOs, a larger one only when it needs fewer GPUs in all; replicas from the
  per-replica capacity), with the step-time scale fitted for the deployment's configuration when live latency
  gave one (as ``GET …/plan`` does). A deployment without a workload has no demand to size: its replicas are
  scaled by the traffic multiplier (rounded up) at its registered TP, and ``fits`` is its plan's verdict.

A replan with no change at all is therefore a right-sizing report: registered replicas against recommended.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from service.catalog.snapshot import CatalogSnapshot
from service.core.engines import resolve_engine
from service.core.errors import InvalidSpec
from service.deployments.schemas import DeploymentRead, ReplanDelta, ReplanRequest, ReplanSide, ReplanSummary
from service.deployments.service import plan_body
from service.errors import ServiceError, Unprocessable
from service.planning.calibration import CalibrationHolder
from service.planning.recommendations import make_recommendation
from service.planning.schemas import (
    PlanRequestBody,
    PlanResponse,
    RecommendationOut,
    RecommendRequestBody,
    WorkloadIn,
)
from service.planning.service import make_plan, resolve_gpu_ref
from service.planning.step_time_calibration import StepTimeScales

MAX_DEPLOYMENTS = 10_000
"""Deployments one replan covers; more is a 422 asking to narrow by namespace or labels."""
MAX_SIMULATED_CONFIGURATIONS = 250
"""Distinct configurations one simulated replan sizes (each costs the serving simulator about 0.1 – 0.5 s on
one core; deployments sharing a configuration share that cost). More is a 422 suggesting ``simulate: false``."""
CHUNK = 50
"""Jobs per trip to the worker thread: the event loop is visited (and a progress line streamed) between chunks."""
_DEMAND = frozenset({"requests_per_second", "concurrent_users", "headroom_ratio"})


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplanJob:
    """One deployment, ready to replan: its requests as registered and under the change."""

    deployment: DeploymentRead
    current: PlanRequestBody
    new: PlanRequestBody
    recommend: RecommendRequestBody | None
    """None when the deployment has no workload or no GPU: replicas are then scaled, not sized."""
    workload_error: str | None = None
    """Why the changed workload is invalid for this deployment (e.g. the multiplied rate is out of range)."""
    configuration: str = ""
    """The recommendation request without its demand: jobs with equal configurations share the simulator's work."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplanBatch:
    change: ReplanRequest
    jobs: tuple[ReplanJob, ...]
    configurations: int

    def chunks(self, size: int | None = None) -> Iterator[tuple[ReplanJob, ...]]:
        size = size or CHUNK
        for start in range(0, len(self.jobs), size):
            yield self.jobs[start : start + size]


def changed_workload(workload: WorkloadIn, change: ReplanRequest) -> WorkloadIn:
    """The workload with the traffic multiplied and the new SLOs applied (validated again: 1e6 req/s at most)."""
    data = workload.model_dump()
    multiplier = change.traffic_multiplier
    if data["requests_per_second"] is not None:
        data["requests_per_second"] = data["requests_per_second"] * multiplier
    if data["concurrent_users"] is not None:
        data["concurrent_users"] = max(1, math.ceil(data["concurrent_users"] * multiplier - 1e-9))
    if change.slo is not None:
        data.update(change.slo.model_dump(exclude_none=True))
    return WorkloadIn.model_validate(data)


def check_change(snapshot: CatalogSnapshot, change: ReplanRequest) -> None:
    """A change that no deployment could be replanned with is a 422 naming the field."""
    if change.engine is not None:
        try:
            resolve_engine(change.engine)
        except InvalidSpec as exc:
            raise Unprocessable.for_field("engine", exc.message) from None
    if change.gpu is not None:
        resolve_gpu_ref(snapshot, change.gpu, field="gpu")


def _job(deployment: DeploymentRead, change: ReplanRequest) -> ReplanJob:
    current = plan_body(deployment)
    overrides: dict[str, Any] = {}
    if change.engine is not None:
        overrides["engine"] = change.engine
    if change.gpu is not None:
        overrides["gpu"] = change.gpu
        if current.pipeline_stage_gpus:
            # "Another GPU type" for a pipeline over different GPUs: every stage on that GPU.
            overrides["pipeline_stage_gpus"] = None
    new = current.model_copy(update=overrides)
    if deployment.workload is None or new.gpu is None:
        return ReplanJob(deployment=deployment, current=current, new=new, recommend=None)
    try:
        workload = changed_workload(deployment.workload, change)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"])
        message = f"workload{'.' + where if where else ''}: {error['msg']}"
        return ReplanJob(
            deployment=deployment, current=current, new=new, recommend=None, workload_error=message
        )
    fields = {
        key: getattr(deployment, key) for key in RecommendRequestBody.model_fields if hasattr(deployment, key)
    }
    body = RecommendRequestBody.model_validate(
        fields
        | overrides
        | {"workload": workload, "tensor_parallel_sizes": None, "simulate": change.simulate}
    )
    configuration = body.model_dump_json(exclude={"workload": set(_DEMAND)})
    return ReplanJob(
        deployment=deployment, current=current, new=new, recommend=body, configuration=configuration
    )


def prepare(
    snapshot: CatalogSnapshot, deployments: Sequence[DeploymentRead], change: ReplanRequest
) -> ReplanBatch:
    """Stage 1: check the change and the caps, build the jobs, order them by configuration."""
    check_change(snapshot, change)
    if len(deployments) > MAX_DEPLOYMENTS:
        raise Unprocessable.for_field(
            "labels",
            f"{len(deployments):,} deployments match; one replan covers at most {MAX_DEPLOYMENTS:,}: "
            "narrow it with namespace or labels",
        )
    jobs = [_job(deployment, change) for deployment in deployments]
    configurations = len({job.configuration for job in jobs if job.recommend is not None})
    if change.simulate and configurations > MAX_SIMULATED_CONFIGURATIONS:
        raise Unprocessable.for_field(
            "simulate",
            f"the matching deployments have {configurations:,} distinct configurations; a simulated replan "
            f"sizes at most {MAX_SIMULATED_CONFIGURATIONS:,}: pass simulate: false (roofline only) or narrow "
            "it with namespace or labels",
        )
    jobs.sort(key=lambda job: (job.configuration, job.deployment.namespace, job.deployment.name))
    return ReplanBatch(change=change, jobs=tuple(jobs), configurations=configurations)


@dataclass(slots=True)
class _Counters:
    plans_computed: int = 0
    plans_reused: int = 0
    recommendations_computed: int = 0
    recommendations_reused: int = 0


@dataclass(slots=True)
class Replanner:
    """Stage 2: jobs → deltas, with plans and recommendations cached by their request for the whole replan.

    Used from one worker thread at a time (the caller awaits each chunk before sending the next)."""

    snapshot: CatalogSnapshot
    change: ReplanRequest
    calibrations: CalibrationHolder | None = None
    scales: StepTimeScales | None = None
    counters: _Counters = field(default_factory=_Counters)
    _plans: dict[str, PlanResponse | ServiceError] = field(default_factory=dict)
    _recommendations: dict[tuple[str, float], RecommendationOut | ServiceError] = field(default_factory=dict)
    _prices: dict[str, float | None] = field(default_factory=dict)

    def run_all(self, jobs: Sequence[ReplanJob]) -> list[ReplanDelta]:
        return [self.run(job) for job in jobs]

    def run(self, job: ReplanJob) -> ReplanDelta:
        deployment = job.deployment
        try:
            current_plan = self._plan(job.current)
        except ServiceError as exc:
            return _error(deployment, None, f"as registered: {exc.message}")
        current = self._current(job, current_plan)
        try:
            new_plan = self._plan(job.new)
        except ServiceError as exc:
            return _error(deployment, current, f"under the change: {exc.message}")
        if job.workload_error is not None:
            return _error(deployment, current, job.workload_error)
        if job.recommend is None:
            new = self._scaled(job, new_plan)
        else:
            scale = self.scales.scale_for(new_plan) if self.scales is not None else 1.0
            try:
                recommendation = self._recommendation(job.recommend, scale)
            except ServiceError as exc:
                return _error(deployment, current, f"under the change: {exc.message}")
            new = _recommended(deployment, new_plan, recommendation)
        return _delta(deployment, current, new)

    def _plan(self, body: PlanRequestBody) -> PlanResponse:
        key = body.model_dump_json()
        found = self._plans.get(key)
        if found is None:
            self.counters.plans_computed += 1
            try:
                found = make_plan(self.snapshot, body, self.calibrations)
            except ServiceError as exc:
                found = exc
            self._plans[key] = found
        else:
            self.counters.plans_reused += 1
        if isinstance(found, ServiceError):
            raise found
        return found

    def _recommendation(self, body: RecommendRequestBody, time_scale: float) -> RecommendationOut:
        key = (body.model_dump_json(), time_scale)
        found = self._recommendations.get(key)
        if found is None:
            self.counters.recommendations_computed += 1
            try:
                found = make_recommendation(self.snapshot, body, time_scale=time_scale)
            except ServiceError as exc:
                found = exc
            self._recommendations[key] = found
        else:
            self.counters.recommendations_reused += 1
        if isinstance(found, ServiceError):
            raise found
        return found

    def _price(self, ref: PlanRequestBody) -> float | None:
        """The catalog's hourly price of the request's GPU (None: no GPU, or no price in the catalog)."""
        if ref.gpu is None:
            return None
        key = ref.gpu if isinstance(ref.gpu, str) else ref.gpu.model_dump_json()
        if key not in self._prices:
            spec, _ = resolve_gpu_ref(self.snapshot, ref.gpu)
            self._prices[key] = spec.price_per_hour_usd if spec is not None else None
        return self._prices[key]

    def _current(self, job: ReplanJob, result: PlanResponse) -> ReplanSide:
        deployment = job.deployment
        price = self._price(job.current)
        tp, pp = deployment.tensor_parallel_size, deployment.pipeline_parallel_size
        gpus = deployment.replicas * tp * pp
        return ReplanSide(
            gpu=result.gpu.name if result.gpu else None,
            engine=result.settings.engine,
            tensor_parallel_size=tp,
            pipeline_parallel_size=pp,
            replicas=deployment.replicas,
            gpus=gpus,
            cost_per_hour_usd=gpus * price if price is not None else None,
            fits=result.fits,
            sizing="registered",
            reason=None if result.fits else _first_error(result),
        )

    def _scaled(self, job: ReplanJob, result: PlanResponse) -> ReplanSide:
        """No workload (or no GPU) to size with: the registered replicas × the traffic multiplier, TP kept."""
        deployment = job.deployment
        multiplier = self.change.traffic_multiplier
        replicas = math.ceil(deployment.replicas * multiplier - 1e-9)
        tp, pp = deployment.tensor_parallel_size, deployment.pipeline_parallel_size
        gpus = replicas * tp * pp
        price = self._price(job.new)
        why = "no workload registered" if deployment.workload is None else "no GPU registered"
        reason = (
            f"{why}: {deployment.replicas} replica(s) × {multiplier:g} traffic → {replicas}, TP {tp} kept"
        )
        return ReplanSide(
            gpu=result.gpu.name if result.gpu else None,
            engine=result.settings.engine,
            tensor_parallel_size=tp,
            pipeline_parallel_size=pp,
            replicas=replicas,
            gpus=gpus,
            cost_per_hour_usd=gpus * price if price is not None else None,
            fits=result.fits,
            sizing="scaled",
            reason=reason if result.fits else f"{_first_error(result)} ({reason})",
        )


def _first_error(result: PlanResponse) -> str:
    errors = [m.text for m in result.messages if m.level == "error"]
    return errors[0] if errors else "vLLM would not start"


def _recommended(
    deployment: DeploymentRead, result: PlanResponse, recommendation: RecommendationOut
) -> ReplanSide:
    chosen = recommendation.recommended
    if chosen is None:
        rejected = "; ".join(
            f"TP {o.tensor_parallel_size}: {o.reasons[0]}" for o in recommendation.options if o.reasons
        )
        return ReplanSide(
            gpu=recommendation.gpu.name,
            engine=result.settings.engine,
            tensor_parallel_size=deployment.tensor_parallel_size,
            pipeline_parallel_size=deployment.pipeline_parallel_size,
            replicas=None,
            gpus=None,
            cost_per_hour_usd=None,
            fits=False,
            sizing="none",
            reason=f"no tensor-parallel size serves the workload: {rejected}" if rejected else "nothing fits",
            speculative=next((o.speculative for o in recommendation.options if o.speculative), None),
        )
    # The core's own explanation: the demand ÷ per-replica capacity line, and why a larger TP won if it did.
    sizing_lines = [r for r in chosen.reasons if "→" in r or r.startswith("tensor-parallel-size")]
    sizing_lines += [
        a for a in chosen.assumptions if a.startswith("workload.spec_mean_acceptance_length ignored")
    ]
    return ReplanSide(
        gpu=recommendation.gpu.name,
        engine=result.settings.engine,
        tensor_parallel_size=chosen.tensor_parallel_size,
        pipeline_parallel_size=chosen.pipeline_parallel_size,
        replicas=chosen.replicas,
        gpus=chosen.gpus,
        cost_per_hour_usd=chosen.cost_per_hour_usd,
        fits=True,
        sizing=chosen.sizing,
        reason="; ".join(sizing_lines) or None,
        speculative=chosen.speculative,
    )


def _delta(deployment: DeploymentRead, current: ReplanSide, new: ReplanSide) -> ReplanDelta:
    sized = new.fits is True and new.gpus is not None and current.gpus is not None
    gpus_delta = (
        new.gpus - current.gpus if sized and new.gpus is not None and current.gpus is not None else None
    )
    cost_delta = (
        new.cost_per_hour_usd - current.cost_per_hour_usd
        if sized and new.cost_per_hour_usd is not None and current.cost_per_hour_usd is not None
        else None
    )
    changed = any(
        getattr(current, name) != getattr(new, name)
        for name in ("gpu", "tensor_parallel_size", "pipeline_parallel_size", "replicas", "gpus", "fits")
    )
    return ReplanDelta(
        namespace=deployment.namespace,
        name=deployment.name,
        status="ok" if new.fits else "does_not_fit",
        changed=changed,
        current=current,
        new=new,
        gpus_delta=gpus_delta,
        cost_per_hour_delta_usd=cost_delta,
        error=None,
    )


def _error(deployment: DeploymentRead, current: ReplanSide | None, message: str) -> ReplanDelta:
    return ReplanDelta(
        namespace=deployment.namespace,
        name=deployment.name,
        status="error",
        changed=False,
        current=current,
        new=None,
        gpus_delta=None,
        cost_per_hour_delta_usd=None,
        error=message,
    )


def summarize(
    deltas: Sequence[ReplanDelta], replanner: Replanner, *, configurations: int, elapsed_seconds: float
) -> ReplanSummary:
    """Stage 3. GPU and cost totals cover the deployments with a delta on both sides (``gpus_delta`` set), so
    ``gpus_new - gpus_current == gpus_added - gpus_freed``; the rest are counted in ``does_not_fit``/``errors``."""
    sized = [d for d in deltas if d.gpus_delta is not None and d.current is not None and d.new is not None]
    priced = [d for d in sized if d.cost_per_hour_delta_usd is not None]
    counters = replanner.counters
    return ReplanSummary(
        deployments=len(deltas),
        ok=sum(1 for d in deltas if d.status == "ok"),
        does_not_fit=sum(1 for d in deltas if d.status == "does_not_fit"),
        errors=sum(1 for d in deltas if d.status == "error"),
        changed=sum(1 for d in deltas if d.changed),
        gpus_current=sum(d.current.gpus or 0 for d in sized if d.current is not None),
        gpus_new=sum(d.new.gpus or 0 for d in sized if d.new is not None),
        gpus_added=sum(max(0, d.gpus_delta or 0) for d in sized),
        gpus_freed=sum(max(0, -(d.gpus_delta or 0)) for d in sized),
        cost_per_hour_current_usd=round(
            sum(d.current.cost_per_hour_usd or 0.0 for d in priced if d.current is not None), 6
        ),
        cost_per_hour_new_usd=round(
            sum(d.new.cost_per_hour_usd or 0.0 for d in priced if d.new is not None), 6
        ),
        cost_per_hour_delta_usd=round(sum(d.cost_per_hour_delta_usd or 0.0 for d in priced), 6),
        configurations=configurations,
        plans_computed=counters.plans_computed,
        plans_reused=counters.plans_reused,
        recommendations_computed=counters.recommendations_computed,
        recommendations_reused=counters.recommendations_reused,
        simulate=replanner.change.simulate,
        elapsed_seconds=round(elapsed_seconds, 3),
    )


def replan(
    snapshot: CatalogSnapshot,
    deployments: Sequence[DeploymentRead],
    change: ReplanRequest,
    *,
    calibrations: CalibrationHolder | None = None,
    scales: StepTimeScales | None = None,
) -> tuple[list[ReplanDelta], ReplanSummary]:
    """The three stages in one call (in-process use, benchmarks); the endpoint runs them chunk by chunk."""
    started = time.perf_counter()
    batch = prepare(snapshot, deployments, change)
    replanner = Replanner(snapshot, change, calibrations, scales)
    deltas = replanner.run_all(batch.jobs)
    deltas.sort(key=lambda d: (d.namespace, d.name))
    return deltas, summarize(
        deltas, replanner, configurations=batch.configurations, elapsed_seconds=time.perf_counter() - started
    )


def matching(deployments: Sequence[DeploymentRead], labels: Mapping[str, str]) -> list[DeploymentRead]:
    """The deployments carrying every one of ``labels``."""
    return [d for d in deployments if all(d.labels.get(k) == v for k, v in labels.items())]
