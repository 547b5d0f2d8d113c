"""``POST /v1/simulations`` and ``kvcap simulate``: what ``vllm bench serve`` would measure against one replica.

A thin edge over ``service.core.serving``: resolve the model and GPU as ``/v1/plans`` does, turn the
``benchmark`` block into a ``BenchmarkSpec``, run the simulator under ``API_LIMITS`` and shape the answer. The
simulation is pure CPU work; the router runs it in a worker thread behind a small limiter, so the event loop
keeps serving while it runs and a burst of simulations queues instead of starving the thread pool.

``vllm_summary`` prints the block ``vllm bench serve`` prints and ``vllm_result_json`` writes the file its
``--save-result`` writes (``vllm/benchmarks/serve.py``, 0.11–0.32: ``benchmark()`` prints the lines, ``main_async``
adds ``date``, ``backend``, ``label``, ``model_id``, ``tokenizer_id``, ``num_prompts``, ``request_rate``,
``burstiness`` and ``max_concurrency`` before the result keys), so a prediction can be diffed against a real run.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from service.catalog.snapshot import CatalogSnapshot
from service.core.errors import InvalidSpec
from service.core.planner import CapacityPlan, PlanRequest, plan
from service.core.serving import (
    DEFAULT_STEP_COEFFICIENTS,
    BenchmarkSpec,
    SimulationLimits,
    SimulationResult,
    StepCoefficients,
    simulate,
)
from service.errors import Unprocessable
from service.planning.request import build_request
from service.planning.schemas import (
    BenchmarkIn,
    BenchmarkResultOut,
    ErrorBandOut,
    PlanRequestBody,
    PlanResponse,
    PlanSummaryOut,
    SettingsOut,
    SimulationOut,
    SimulationRequestBody,
    SpeculativeSimulationOut,
    Subject,
    TimelinePointOut,
)
from service.planning.service import resolve_gpu_ref, resolve_model_ref, to_response
from service.planning.step_time_calibration import StepTimeScales
from service.settings import Settings

API_LIMITS = SimulationLimits(
    max_num_prompts=20_000, max_simulated_steps=200_000, max_total_tokens=40_000_000
)
"""What one API call may simulate: a few seconds of one core at most (``make bench`` shows the speed)."""


def simulation_limits(settings: Settings) -> SimulationLimits:
    """``API_LIMITS`` with the operator's bounds (``KVCAP_SIMULATION_MAX_TOTAL_TOKENS``, ``…_MAX_STEPS``)."""
    return SimulationLimits(
        max_num_prompts=API_LIMITS.max_num_prompts,
        max_simulated_steps=settings.simulation_max_steps,
        max_total_tokens=settings.simulation_max_total_tokens,
    )


SIMULATION_THREADS = 2
"""Simulations that run at once per kvcap process; more wait for a free slot."""


def benchmark_spec(benchmark: BenchmarkIn) -> BenchmarkSpec:
    """The core's ``BenchmarkSpec`` for a validated ``benchmark`` block (422 naming the field otherwise)."""
    rate = math.inf if benchmark.request_rate == "inf" else float(benchmark.request_rate)
    try:
        return BenchmarkSpec(
            dataset_name=benchmark.dataset_name,
            num_prompts=len(benchmark.requests) if benchmark.requests else benchmark.num_prompts,
            request_rate=rate,
            burstiness=benchmark.burstiness,
            max_concurrency=benchmark.max_concurrency,
            random_input_len=benchmark.random_input_len,
            random_output_len=benchmark.random_output_len,
            random_range_ratio=benchmark.random_range_ratio,
            random_prefix_len=benchmark.random_prefix_len,
            seed=benchmark.seed,
            ready_check_timeout_sec=benchmark.ready_check_timeout_sec,
            num_warmups=benchmark.num_warmups,
            spec_mean_acceptance_length=benchmark.spec_mean_acceptance_length,
            requests=tuple((int(p), int(o)) for p, o in benchmark.requests) if benchmark.requests else None,
        )
    except InvalidSpec as exc:
        raise Unprocessable.for_field(exc.field, exc.message) from None


def scaled_coefficients(scale: float) -> StepCoefficients:
    """The default step-time coefficients with every modelled step time multiplied by ``scale``
    (``StepCoefficients.time_scale``: the per-deployment fit from live latency)."""
    base = DEFAULT_STEP_COEFFICIENTS
    return base if scale == 1.0 else dataclasses.replace(base, time_scale=base.time_scale * scale)


def _band(value: float, ratio: float) -> tuple[float, float]:
    return (value * (1 - ratio), value * (1 + ratio))


def simulation_out(
    sim: SimulationResult, *, model: Subject, gpu: Subject | None, benchmark: BenchmarkIn, scale: float
) -> SimulationOut:
    result = sim.result
    ratio = sim.error_band_ratio
    plan = sim.plan
    kv = plan.kv_cache
    return SimulationOut(
        result=BenchmarkResultOut.model_validate(result.as_dict()),
        timeline=[TimelinePointOut.model_validate(p, from_attributes=True) for p in sim.timeline],
        assumptions=list(sim.assumptions),
        error_band=ErrorBandOut(
            ratio=ratio,
            output_throughput=_band(result.output_throughput, ratio),
            request_throughput=_band(result.request_throughput, ratio),
            mean_ttft_ms=_band(result.mean_ttft_ms, ratio),
            mean_tpot_ms=_band(result.mean_tpot_ms, ratio),
        ),
        messages=list(sim.messages),
        num_preemptions=sim.num_preemptions,
        num_steps=sim.num_steps,
        step_time_scale=scale,
        benchmark=benchmark,
        plan=PlanSummaryOut(
            model=model,
            gpu=gpu,
            fits=plan.fits,
            num_gpu_blocks=kv.num_gpu_blocks,
            block_size=kv.block_size,
            kv_cache_size_tokens=kv.kv_cache_size_tokens,
            max_concurrency=kv.max_concurrency,
            settings=SettingsOut.model_validate(plan.settings, from_attributes=True),
        ),
        speculative=_speculative_out(sim),
    )


def _speculative_out(sim: SimulationResult) -> SpeculativeSimulationOut | None:
    spec = sim.speculative
    if spec is None:
        return None
    drafts, drafted, accepted = sim.spec_num_drafts, sim.spec_num_draft_tokens, sim.spec_num_accepted_tokens
    return SpeculativeSimulationOut(
        method=spec.method,
        num_speculative_tokens=spec.num_speculative_tokens,
        assumed_mean_acceptance_length=spec.mean_acceptance_length,
        mean_acceptance_length=1 + accepted / drafts if drafts else None,
        draft_acceptance_rate=accepted / drafted if drafted else None,
        num_drafts=drafts,
        num_draft_tokens=drafted,
        num_accepted_tokens=accepted,
    )


@dataclass(frozen=True, slots=True)
class Replica:
    """A resolved replica: the core's request and plan, and the plan as ``/v1/plans`` shows it (its key)."""

    request: PlanRequest
    plan: CapacityPlan
    response: PlanResponse
    model: Subject
    gpu: Subject | None


def resolve_replica(snapshot: CatalogSnapshot, body: PlanRequestBody) -> Replica:
    """Resolve the model and GPU and plan once (422 naming the field for anything vLLM would refuse)."""
    resolved = resolve_model_ref(snapshot, body.model)
    gpu, gpu_subject = resolve_gpu_ref(snapshot, body.gpu)
    if gpu is None:
        raise Unprocessable.for_field("gpu", "a GPU is needed to time the engine steps")
    request = build_request(
        resolved.spec,
        gpu,
        body,
        implied_quantization=resolved.implied_quantization,
        snapshot=snapshot,
        suggest=False,
    )
    try:
        result = plan(request)
    except InvalidSpec as exc:
        raise Unprocessable.for_field(exc.field, exc.message) from None
    response = to_response(result, model=resolved.subject, gpu=gpu_subject)
    return Replica(request=request, plan=result, response=response, model=resolved.subject, gpu=gpu_subject)


def make_simulation(
    snapshot: CatalogSnapshot,
    body: SimulationRequestBody,
    *,
    scales: StepTimeScales | None = None,
    limits: SimulationLimits = API_LIMITS,
) -> SimulationOut:
    """Resolve, simulate, shape (pure CPU; call it from a worker thread in async code).

    ``scales``: the step-time calibrations fitted from live deployments; the configuration's own scale is used
    when one exists (``step_time_scale`` in the answer says which).
    """
    spec = benchmark_spec(body.benchmark)
    replica = resolve_replica(snapshot, body)
    scale = scales.scale_for(replica.response) if scales is not None else 1.0
    try:
        sim = simulate(
            replica.request,
            spec,
            plan=replica.plan,
            coefficients=scaled_coefficients(scale),
            limits=limits,
            gpu_peer_to_peer=body.gpu_peer_to_peer,
        )
    except InvalidSpec as exc:
        raise Unprocessable.for_field(exc.field, exc.message) from None
    return simulation_out(sim, model=replica.model, gpu=replica.gpu, benchmark=body.benchmark, scale=scale)


def _line(label: str, value: object, fmt: str = "") -> str:
    """One ``{:<40} {:<10}`` line of vLLM's summary (``{:<10.2f}`` for floats)."""
    return "{:<40} {:<10{}}".format(label, value, fmt)


_SECTIONS = (
    ("ttft", "TTFT", "Time to First Token"),
    ("tpot", "TPOT", "Time per Output Token (excl. 1st token)"),
    ("itl", "ITL", "Inter-token Latency"),
    ("e2el", "E2EL", "End-to-end Latency"),
)


def vllm_summary(out: SimulationOut) -> str:
    """The result block ``vllm bench serve`` prints, line for line (``vllm/benchmarks/serve.py::benchmark``).

    ``vllm bench serve`` prints TTFT, TPOT and ITL by default (``--percentile-metrics ttft,tpot,itl``); E2EL is
    added here because the simulator has it, in the same format vLLM uses when asked for it.
    """
    r = out.result
    b = out.benchmark
    lines = ["{s:{c}^{n}}".format(s=" Serving Benchmark Result ", n=50, c="=")]
    lines.append(_line("Successful requests:", r.completed))
    lines.append(_line("Failed requests:", r.failed))
    if b.max_concurrency is not None:
        lines.append(_line("Maximum request concurrency:", b.max_concurrency))
    if b.request_rate != "inf":
        lines.append(_line("Request rate configured (RPS):", float(b.request_rate), ".2f"))
    lines.append(_line("Benchmark duration (s):", r.duration, ".2f"))
    lines.append(_line("Total input tokens:", r.total_input_tokens))
    lines.append(_line("Total generated tokens:", r.total_output_tokens))
    lines.append(_line("Request throughput (req/s):", r.request_throughput, ".2f"))
    lines.append(_line("Output token throughput (tok/s):", r.output_throughput, ".2f"))
    lines.append(_line("Peak output token throughput (tok/s):", r.max_output_tokens_per_s, ".2f"))
    lines.append(_line("Peak concurrent requests:", float(r.max_concurrent_requests), ".2f"))
    lines.append(_line("Total Token throughput (tok/s):", r.total_token_throughput, ".2f"))
    values = r.model_dump()
    for key, name, header in _SECTIONS:
        lines.append("{s:{c}^{n}}".format(s=header, n=50, c="-"))
        lines.append(_line(f"Mean {name} (ms):", values[f"mean_{key}_ms"], ".2f"))
        lines.append(_line(f"Median {name} (ms):", values[f"median_{key}_ms"], ".2f"))
        lines.append(_line(f"P99 {name} (ms):", values[f"p99_{key}_ms"], ".2f"))
    spec = out.speculative
    if spec is not None and spec.num_drafts:
        # vLLM main prints this section from the server's spec-decode counters when they moved during the run
        # (``fetch_spec_decode_metrics``); the simulator has no per-position counts, so that list is left out,
        # as vLLM does when it is empty.
        lines.append("{s:{c}^{n}}".format(s="Speculative Decoding", n=50, c="-"))
        lines.append(_line("Acceptance rate (%):", 100 * (spec.draft_acceptance_rate or 0.0), ".2f"))
        lines.append(_line("Acceptance length:", spec.mean_acceptance_length or 1.0, ".2f"))
        lines.append(_line("Drafts:", spec.num_drafts))
        lines.append(_line("Draft tokens:", spec.num_draft_tokens))
        lines.append(_line("Accepted tokens:", spec.num_accepted_tokens))
    lines.append("=" * 50)
    return "\n".join(lines)


def vllm_result_json(out: SimulationOut, *, model_id: str, now: datetime | None = None) -> dict[str, Any]:
    """The JSON ``vllm bench serve --save-result`` writes (without ``--save-detailed``), from a simulation.

    ``backend`` is ``"kvcap-simulator"`` so a predicted file is never mistaken for a measured one; vLLM's own
    keys follow, then ``kvcap`` with what only the prediction has (error band, assumptions, plan settings).
    """
    b = out.benchmark
    # vLLM stamps local time (datetime.now()); the same here, through an aware datetime.
    stamp = (now or datetime.now(UTC).astimezone()).strftime("%Y%m%d-%H%M%S")
    result: dict[str, Any] = {
        "date": stamp,
        "endpoint_type": "kvcap-simulator",
        "backend": "kvcap-simulator",
        "label": None,
        "model_id": model_id,
        "tokenizer_id": model_id,
        "num_prompts": len(b.requests) if b.requests else b.num_prompts,
        "request_rate": b.request_rate if b.request_rate == "inf" else float(b.request_rate),
        "burstiness": b.burstiness,
        "max_concurrency": b.max_concurrency,
    }
    result.update(out.result.model_dump())
    result["request_goodput"] = None
    spec = out.speculative
    if spec is not None and spec.num_drafts:
        # vLLM main's keys (``serve.py::benchmark``): acceptance rate in percent, length 1 + accepted / drafts.
        result["spec_decode_acceptance_rate"] = 100 * (spec.draft_acceptance_rate or 0.0)
        result["spec_decode_acceptance_length"] = spec.mean_acceptance_length
        result["spec_decode_num_drafts"] = spec.num_drafts
        result["spec_decode_draft_tokens"] = spec.num_draft_tokens
        result["spec_decode_accepted_tokens"] = spec.num_accepted_tokens
    result["kvcap"] = {
        "error_band": out.error_band.model_dump(),
        "assumptions": out.assumptions,
        "messages": out.messages,
        "num_preemptions": out.num_preemptions,
        "step_time_scale": out.step_time_scale,
        "settings": out.plan.settings.model_dump(),
        "num_gpu_blocks": out.plan.num_gpu_blocks,
    }
    return result
