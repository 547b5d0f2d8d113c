"""``simulate()``: what ``vllm bench serve`` would measure against one vLLM replica planned by kvcap.

The stages, each a module with typed results:

1. ``datasets.sample_requests`` — (prompt, output, shared-prefix) tokens per request, as the benchmark samples;
2. ``arrivals.arrival_offsets_seconds`` — when the client sends each one (the ``--max-concurrency`` gate is
   applied by the engine, because it depends on completions);
3. ``scheduler.Scheduler`` — vLLM V1's scheduling rules over the plan's block pool;
4. ``step_time.StepTimeModel`` — the duration of each engine step;
5. ``engine.Engine`` — the event loop (with closed-form decode stretches);
6. ``metrics.calculate_metrics`` — vLLM's result-JSON numbers.

The capacity plan (``planner.plan``) supplies what vLLM itself would decide at start-up: the number of KV
blocks, the block size, ``max_num_seqs``, ``max_num_batched_tokens``, async scheduling, the weights per GPU and
the KV bytes per token. A plan that does not fit is refused: vLLM would not start.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, replace

from service.core.dtypes import MODEL_DTYPE_BYTES, normalize_model_dtype
from service.core.engines import resolve_engine
from service.core.errors import InvalidSpec, StartRefusal
from service.core.planner import CapacityPlan, PlanRequest
from service.core.planner import plan as make_plan
from service.core.serving.arrivals import arrival_offsets_seconds
from service.core.serving.datasets import BenchmarkSpec, RequestLengths, sample_requests
from service.core.serving.engine import Engine, EngineTrace, RecordRow
from service.core.serving.metrics import (
    BenchmarkResult,
    LatencySummary,
    RequestOutcome,
    latency_summary_of,
    metrics_of,
)
from service.core.serving.scheduler import BlockDemand, Scheduler, SchedulerConfig, SimRequest
from service.core.serving.speculative import (
    LOOKAHEAD_METHODS,
    SpecDecoding,
    method_family,
    scheduled_token_budget,
    spec_decoding_of,
)
from service.core.serving.step_time import (
    DEFAULT_STEP_COEFFICIENTS,
    DraftCost,
    StepCoefficients,
    StepTimeModel,
    draft_cost,
)
from service.core.specs import LayerType
from service.core.units import cdiv

TIMELINE_POINTS = 200
# First release whose scheduler admits a request only when its whole sequence fits (vLLM PR #37307).
RESERVE_FULL_SEQUENCE_FROM = (0, 19)
# First release whose ``vllm bench serve`` skips the readiness probe by default (``--ready-check-timeout-sec``
# default 0; vLLM PR #30975, merged 2025-12-18). Before it, ``benchmarks/benchmark_serving.py`` and then
# ``vllm/benchmarks/serve.py`` always sent ``input_requests[0]`` once ("Starting initial single prompt test
# run...") and waited for it to finish before the timed run.
READY_CHECK_OFF_BY_DEFAULT_FROM = (0, 14)
# ± fraction around predicted throughput/latency: the largest held-back median |error| of ``make accuracy``
# on the kind of case the coefficients are fitted on (V1, one host: TTFT 21.2 %, TPOT 3.2 %, throughput
# 5.1 % on 2026-12-03, 86 cases; bench/serving_accuracy.py), rounded up. V0 engines and the TP runs of one author's
# pods (some without GPU P2P) err more (see the README).
ERROR_BAND_RATIO = 0.30


@dataclass(frozen=True, slots=True, kw_only=True)
class SimulationLimits:
    """Bounds on one simulation's cost (the API refuses beyond them, naming the field)."""

    max_num_prompts: int = 20_000
    max_simulated_steps: int = 400_000  # engine loop iterations (single steps + decode stretches)
    max_total_tokens: int = 200_000_000  # Σ prompt + output tokens of the benchmark

    def __post_init__(self) -> None:
        for name in ("max_num_prompts", "max_simulated_steps", "max_total_tokens"):
            if getattr(self, name) < 1:
                raise InvalidSpec("must be ≥ 1", field=f"limits.{name}")


DEFAULT_SIMULATION_LIMITS = SimulationLimits()


@dataclass(frozen=True, slots=True, kw_only=True)
class TimelinePoint:
    time_seconds: float
    running: int
    waiting: int
    kv_cache_usage_ratio: float
    tokens_per_step: float


@dataclass(frozen=True, slots=True, kw_only=True)
class SimulationResult:
    result: BenchmarkResult
    timeline: tuple[TimelinePoint, ...]
    assumptions: tuple[str, ...]
    error_band_ratio: float
    messages: tuple[str, ...]
    num_preemptions: int
    plan: CapacityPlan
    num_steps: int = 0  # engine steps simulated
    prefix_cache_hit_tokens: int = 0
    peak_running: int = 0  # most requests running in any step (any max_num_seqs ≥ this gives the same run)
    # Steps in which some request sampled a token: what vLLM's vllm:iteration_tokens_total histogram counts
    # (vllm/v1/engine/async_llm.py::output_handler records iteration stats only for steps with outputs).
    num_steps_with_output: int = 0
    # Speculative decoding, as vLLM's SpecDecodingStats counts it (0 without it): verifications with drafts,
    # draft tokens verified and accepted. 1 + accepted / drafts is vLLM's "Mean acceptance length".
    spec_num_drafts: int = 0
    spec_num_draft_tokens: int = 0
    spec_num_accepted_tokens: int = 0
    speculative: SpecDecoding | None = None  # the speculative decoding simulated (None without it)


def block_demand(plan: CapacityPlan) -> BlockDemand:
    """The per-request block rule of the plan's KV layout (see ``scheduler.BlockDemand``)."""
    block_size = plan.kv_cache.block_size
    layout = plan.layout
    if layout is None:
        return BlockDemand(block_size=block_size, full_groups=max(1, plan.kv_cache.num_groups))
    full = 0
    capped: list[tuple[int, int]] = []
    constant = 0
    in_flight = plan.in_flight_tokens or plan.settings.max_num_batched_tokens
    for spec, groups in layout.groups_per_spec:
        if spec.is_state:
            constant += groups * plan.state_pages
        elif spec.kind is LayerType.SLIDING and spec.window_tokens:
            capped.append((groups, cdiv(spec.window_tokens - 1 + in_flight, spec.block_size) + 1))
        elif spec.kind is LayerType.CHUNKED and spec.window_tokens:
            capped.append((groups, cdiv(spec.window_tokens + in_flight, spec.block_size)))
        else:
            full += groups
    return BlockDemand(
        block_size=block_size, full_groups=full, capped_groups=tuple(capped), constant_blocks=constant
    )


def _check_limits(lengths: tuple[RequestLengths, ...], limits: SimulationLimits) -> None:
    total = sum(r.prompt_tokens + r.output_tokens for r in lengths)
    if total > limits.max_total_tokens:
        raise InvalidSpec(
            f"the benchmark holds {total:,} tokens; at most {limits.max_total_tokens:,} are simulated",
            field="benchmark.num_prompts",
        )


def _timeline(
    records: tuple[RecordRow, ...], *, end_seconds: float, pool_blocks: int
) -> tuple[TimelinePoint, ...]:
    """At most ``TIMELINE_POINTS`` points evenly spread in time: the state at the last record before each
    (``StepRecord``'s fields as a row)."""
    if not records:
        return ()
    count = min(TIMELINE_POINTS, len(records))
    times = [r[0] for r in records]  # non-decreasing: the engine clock only moves forward
    points: list[TimelinePoint] = []
    index = 0  # never moves back (an all-failed run has end_seconds < 0, so t may fall)
    for i in range(count):
        t = end_seconds * i / (count - 1) if count > 1 else 0.0
        index = max(index, bisect.bisect_right(times, t) - 1)
        _, running, waiting, used_blocks, tokens = records[index]
        points.append(
            TimelinePoint(
                time_seconds=t,
                running=running,
                waiting=waiting,
                kv_cache_usage_ratio=used_blocks / pool_blocks if pool_blocks else 0.0,
                tokens_per_step=tokens,
            )
        )
    return tuple(points)


def _outcomes(trace: EngineTrace) -> tuple[RequestOutcome, ...]:
    return tuple(
        RequestOutcome(
            r.prompt_tokens,
            r.output_tokens,
            r.send_seconds,
            r.first_token_seconds,
            r.finish_seconds,
            r.finish_seconds >= 0,
        )
        for r in trace.requests
    )


def _assumptions(
    plan: CapacityPlan,
    benchmark: BenchmarkSpec,
    coefficients: StepCoefficients,
    *,
    gpu_peer_to_peer: bool,
    primed: bool = False,
    spec: SpecDecoding | None = None,
    draft: DraftCost | None = None,
) -> tuple[str, ...]:
    s = plan.settings
    scheduler = (
        "vLLM V0 scheduler: prefill-only steps of whole prompts first, then decode steps"
        if resolve_engine(s.engine).v0
        else "vLLM V1 scheduler: FCFS, chunked prefill, prefix caching"
    )
    lines = [
        f"{scheduler} ({s.engine}), max_num_seqs {s.max_num_seqs}, "
        f"max_num_batched_tokens {s.max_num_batched_tokens}",
        f"{plan.kv_cache.usable_blocks:,} KV blocks of {plan.kv_cache.block_size} tokens from the capacity plan",
        "every request generates exactly its requested output tokens (as with --ignore-eos)",
        f"step time: roofline with {coefficients.bandwidth_efficiency:.0%} of HBM bandwidth, "
        f"{coefficients.compute_efficiency:.0%} of dense peak for large GEMMs, "
        f"{coefficients.step_overhead_seconds * 1e3:.2f} ms + {coefficients.per_request_seconds * 1e6:.1f} µs "
        "per request of CPU work per step",
        "async scheduling: CPU work overlaps the GPU step"
        if s.async_scheduling
        else "synchronous scheduling: CPU work adds to every step",
    ]
    if coefficients.request_latency_seconds:
        lines.append(
            f"each request reaches the engine {coefficients.request_latency_seconds * 1e3:.1f} ms after it is "
            "sent (the API server's part of its round trip: in TTFT and E2EL, not between tokens)"
        )
    if s.tensor_parallel_size > 1 and not gpu_peer_to_peer:
        lines.append("no GPU P2P: NCCL all-reduces go through host shared memory, custom all-reduce is off")
    if s.pipeline_parallel_size > 1:
        lines.append("pipeline stages run one after another (no micro-batch overlap): a conservative bound")
    if benchmark.dataset_name == "sharegpt":
        lines.append("ShareGPT lengths drawn from a reconstructed length table, not the dataset itself")
    if s.enforce_eager:
        lines.append("eager mode: kernel launch latency paid per layer")
    if spec is not None:
        lines.append(spec.assumption())
        if draft is not None and draft.num_passes:
            lines.append(
                f"the proposer adds {draft.num_passes} sequential forward pass(es) of the draft to every step "
                "(piecewise CUDA graphs), and the target computes logits at 1 + d positions of each request"
            )
        elif draft is not None:
            lines.append(f"the {spec.method} proposer matches on the host: no GPU pass, a few µs per request")
    elif benchmark.spec_mean_acceptance_length is not None:
        lines.append("benchmark.spec_mean_acceptance_length ignored: the plan has no speculative decoding")
    if primed:
        lines.append(
            "the client sent the first prompt before the timed run (its readiness probe or --num-warmups): "
            "its full blocks are in the prefix cache when the run starts (ready_check_timeout_sec 0 to turn off)"
        )
    return tuple(lines)


@dataclass(frozen=True, slots=True, kw_only=True)
class Replica:
    """What every simulation of one planned replica shares, built once by ``prepare_replica``: the plan,
    the step-time model (stage 4), the scheduler's configuration (stage 3) and the step-time terms the
    engine has computed so far (``gpu_seconds_parts_of`` is a pure function of its arguments and the step
    model, so a kept answer is the answer for every simulation of this replica)."""

    request: PlanRequest
    plan: CapacityPlan
    coefficients: StepCoefficients
    step_model: StepTimeModel
    scheduler_config: SchedulerConfig
    step_parts: dict[tuple[int, int, float, int], tuple[float, float]]
    gpu_peer_to_peer: bool = True  # False: the TP GPUs have no P2P path (``simulate``'s docstring)
    engine_version: tuple[int, ...] | None = None  # the release (its benchmark client's defaults)
    # Speculative decoding (``speculative_config``): the method, k and the proposer's cost; None/0 without it.
    spec_method: str | None = None
    num_speculative_tokens: int = 0
    draft: DraftCost | None = None

    def spec_of(self, benchmark: BenchmarkSpec) -> SpecDecoding | None:
        """The engine's speculative decoding under ``benchmark``'s acceptance (None without it)."""
        if self.spec_method is None:
            return None
        return spec_decoding_of(
            self.spec_method, self.num_speculative_tokens, benchmark.spec_mean_acceptance_length
        )

    @property
    def simulation_inputs(self) -> tuple[object, ...]:
        """Everything of this replica a run of a benchmark depends on (``run_benchmark``: the scheduler's
        configuration, the step-time model, the release's client defaults): two replicas with equal inputs
        run every benchmark alike, and their summaries differ only in what ``for_replica`` redoes."""
        return (
            self.scheduler_config,
            self.step_model,
            self.engine_version,
            self.gpu_peer_to_peer,
            self.spec_method,
            self.num_speculative_tokens,
            self.draft,
        )


def client_primes_first_prompt(benchmark: BenchmarkSpec, engine_version: tuple[int, ...] | None) -> bool:
    """Whether the benchmark client sends the first request's prompt before the timed run — the readiness
    probe (``--ready-check-timeout-sec`` > 0, the default before ``READY_CHECK_OFF_BY_DEFAULT_FROM``) or
    ``--num-warmups`` — so that with V1's prefix caching (on by default) its full blocks are cached when the
    run starts. The probe runs to completion (``max_tokens`` = that request's output length) before the timer
    starts, so only the cache it leaves behind reaches the figures."""
    if benchmark.num_warmups > 0:
        return True
    if benchmark.ready_check_timeout_sec is not None:
        return benchmark.ready_check_timeout_sec > 0
    return engine_version is None or engine_version < READY_CHECK_OFF_BY_DEFAULT_FROM


def prepare_replica(
    request: PlanRequest,
    *,
    plan: CapacityPlan | None = None,
    coefficients: StepCoefficients | None = None,
    gpu_peer_to_peer: bool = True,
) -> Replica:
    """The replica ``simulate`` runs benchmarks against; refused (``InvalidSpec``) where vLLM would not
    start or a step cannot be timed."""
    if request.gpu is None:
        raise InvalidSpec("a GPU is needed to time the engine steps", field="gpu")
    coefficients = coefficients or DEFAULT_STEP_COEFFICIENTS
    plan = plan or make_plan(request)
    if not plan.fits or plan.kv_cache.usable_blocks <= 0:
        reason = plan.errors[0].text if plan.errors else "the plan does not fit"
        raise InvalidSpec(f"vLLM would not start: {reason}", field="model")
    settings = plan.settings
    profile = resolve_engine(settings.engine)
    step_model = StepTimeModel.build(
        model=request.model,
        gpu=request.gpu,
        plan=plan,
        coefficients=coefficients,
        gpu_peer_to_peer=gpu_peer_to_peer,
    )
    spec_method, k, draft = None, 0, None
    speculative = request.features.speculative if request.features is not None else None
    if speculative is not None and plan.features is not None and plan.features.num_speculative_tokens > 0:
        spec_method, k = speculative.method, plan.features.num_speculative_tokens
        step_model, draft = _speculative_step_models(request, plan, step_model)
    budget = scheduled_token_budget(
        spec_method,
        profile.version,
        max_num_seqs=settings.max_num_seqs,
        max_num_batched_tokens=settings.max_num_batched_tokens,
    )
    if budget <= 0:
        raise StartRefusal(
            f"max_num_scheduled_tokens is set to {budget} based on the speculative decoding settings, which does "
            "not allow any tokens to be scheduled. Increase max_num_batched_tokens to accommodate the additional "
            "draft token slots, or decrease num_speculative_tokens or max_num_seqs.",
            field="max_num_batched_tokens",
        )
    config = SchedulerConfig(
        speculative=spec_method is not None,
        num_lookahead_tokens=k
        if spec_method is not None and method_family(spec_method) in LOOKAHEAD_METHODS
        else 0,
        max_num_seqs=settings.max_num_seqs,
        max_num_batched_tokens=budget,
        demand=block_demand(plan),
        num_free_blocks=plan.kv_cache.usable_blocks,
        prefill_first=profile.v0,
        reserve_full_sequence=profile.version is not None and profile.version >= RESERVE_FULL_SEQUENCE_FROM,
        max_model_len=settings.max_model_len,
        attention_window=step_model.attention_window_tokens,
    )
    return Replica(
        engine_version=profile.version,
        request=request,
        plan=plan,
        coefficients=coefficients,
        step_model=step_model,
        scheduler_config=config,
        step_parts={},
        gpu_peer_to_peer=gpu_peer_to_peer,
        spec_method=spec_method,
        num_speculative_tokens=k,
        draft=draft,
    )


def _speculative_step_models(
    request: PlanRequest, plan: CapacityPlan, step_model: StepTimeModel
) -> tuple[StepTimeModel, DraftCost]:
    """The target's step-time model without the draft's KV layers, and the proposer's cost (``DraftCost``).

    The plan's KV bytes per token include the draft's attention layers (they share the pool); the target's
    attention reads only its own, the draft's passes only the draft's: the draft's share is its layers' part of
    the pool's layers on the last stage (the draft's layers have the target's attention shape for EAGLE heads
    and MTP layers; for a draft model of another shape the split is an approximation)."""
    assert (
        request.features is not None
        and request.features.speculative is not None
        and plan.features is not None
    )
    speculative = request.features.speculative
    features = plan.features
    settings = plan.settings
    model = request.model
    tp, pp = settings.tensor_parallel_size, settings.pipeline_parallel_size
    draft_layers = features.speculative_kv_layers
    draft_kv = 0
    if draft_layers:
        target_layers = sum(1 for kind in model.resolved_layer_types if kind.is_attention) / pp
        draft_kv = round(plan.kv_cache.bytes_per_token * draft_layers / (target_layers + draft_layers))
        step_model = replace(step_model, kv_bytes_per_token=plan.kv_cache.bytes_per_token - draft_kv)
    dtype_bytes = MODEL_DTYPE_BYTES[normalize_model_dtype(settings.dtype)]
    cost = draft_cost(
        step_model,
        method=speculative.method,
        num_speculative_tokens=features.num_speculative_tokens,
        draft=speculative.draft,
        draft_weight_bytes=features.speculative_weights_bytes,
        draft_kv_bytes_per_token=draft_kv,
        draft_tensor_parallel_size=speculative.draft_tensor_parallel_size or tp,
        tensor_parallel_size=tp,
        lm_head_bytes=model.vocab_size * model.hidden_size * dtype_bytes // tp,
    )
    return step_model, cost


def _sim_requests(benchmark: BenchmarkSpec, limits: SimulationLimits, *, primed: bool) -> list[SimRequest]:
    """Stages 1 and 2: the benchmark's requests with their lengths and the times the client sends them;
    ``primed``: the first prompt is already in the prefix cache (``client_primes_first_prompt``)."""
    lengths = sample_requests(benchmark)
    _check_limits(lengths, limits)
    offsets = arrival_offsets_seconds(
        len(lengths),
        request_rate=benchmark.request_rate,
        burstiness=benchmark.burstiness,
        seed=benchmark.seed,
    )
    sim_requests: list[SimRequest] = []
    for i, (length, offset) in enumerate(zip(lengths, offsets, strict=True)):
        r = SimRequest(i, length.prompt_tokens, length.output_tokens, length.shared_prefix_tokens)
        r.arrival_seconds = offset
        sim_requests.append(r)
    if primed and sim_requests:
        sim_requests[0].cached_prompt_tokens = sim_requests[0].prompt_tokens
    return sim_requests


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineRun:
    """Stages 1–5 of one simulation, before any figure is computed: what ``summarize`` turns into a
    ``SimulationResult`` (``simulate`` is the two in a row). A caller that needs only a few figures of a run —
    a rate search reading its throughput or its SLO latencies — reads them from here (``duration_seconds``,
    ``metrics.request_throughput``, ``latency_summary``) and summarizes only the run it keeps."""

    replica: Replica
    benchmark: BenchmarkSpec
    trace: EngineTrace
    primed: bool
    prefix_cache_hit_tokens: int
    spec: SpecDecoding | None = None

    @property
    def duration_seconds(self) -> float:
        """From the benchmark start to the last response (failed requests count as −1)."""
        return max((r.finish_seconds for r in self.trace.requests), default=0.0)

    @property
    def completed(self) -> int:
        """Requests that got every token (the others were rejected: ``finish_seconds`` < 0)."""
        return sum(1 for r in self.trace.requests if r.finish_seconds >= 0)

    def outcomes(self) -> tuple[RequestOutcome, ...]:
        """Every request as the client saw it (``metrics.calculate_metrics``' input)."""
        return _outcomes(self.trace)

    def latency_summary(self) -> LatencySummary:
        """``metrics.latency_summary(self.outcomes())``, read from the requests themselves (a request
        succeeded when it finished: ``finish_seconds`` ≥ 0, as ``_outcomes`` sets ``success``)."""
        return latency_summary_of([r for r in self.trace.requests if r.finish_seconds >= 0])


def run_benchmark(
    benchmark: BenchmarkSpec,
    *,
    replica: Replica,
    limits: SimulationLimits = DEFAULT_SIMULATION_LIMITS,
    step_by_step: bool = False,
    keep_records: bool = True,
) -> EngineRun:
    """Stages 1–5 of ``simulate`` against a replica from ``prepare_replica``; ``keep_records=False`` keeps no
    row per engine iteration, so ``summarize`` can draw no timeline from the run (every figure is the same)."""
    if benchmark.num_prompts > limits.max_num_prompts:
        raise InvalidSpec(
            f"at most {limits.max_num_prompts:,} prompts are simulated, got {benchmark.num_prompts:,}",
            field="benchmark.num_prompts",
        )
    settings = replica.plan.settings
    primed = not replica.scheduler_config.prefill_first and client_primes_first_prompt(
        benchmark, replica.engine_version
    )
    spec = replica.spec_of(benchmark)
    sim_requests = _sim_requests(benchmark, limits, primed=primed)
    scheduler = Scheduler(replica.scheduler_config)
    engine = Engine(
        requests=sim_requests,
        scheduler=scheduler,
        step_model=replica.step_model,
        max_concurrency=benchmark.max_concurrency,
        max_model_len=settings.max_model_len,
        max_iterations=limits.max_simulated_steps,
        use_stretches=not step_by_step,
        step_parts=replica.step_parts,
        keep_records=keep_records,
        spec=spec,
        draft=replica.draft if spec is not None else None,
    )
    trace = engine.run()
    return EngineRun(
        replica=replica,
        benchmark=benchmark,
        trace=trace,
        primed=primed,
        prefix_cache_hit_tokens=scheduler.prefix_hit_tokens,
        spec=spec,
    )


def summarize(run: EngineRun, *, timeline: bool = True) -> SimulationResult:
    """Stage 6 of ``simulate``: the benchmark's figures, messages and timeline from one engine run."""
    replica, trace = run.replica, run.trace
    plan, settings = replica.plan, replica.plan.settings
    duration = run.duration_seconds
    completed = [r for r in trace.requests if r.finish_seconds >= 0]  # ``outcomes()``' successes, in order
    result = metrics_of(
        completed,
        failed=len(trace.requests) - len(completed),
        duration_seconds=duration,
        itl_samples=trace.itl_samples,
        itl_count=trace.itl_count,
        itl_sum_seconds=trace.itl_sum_seconds,
        token_times=trace.output_events,
    )
    messages: list[str] = []
    if trace.failed:
        messages.append(
            f"{len(trace.failed)} requests rejected: prompt + output tokens exceed max_model_len "
            f"{settings.max_model_len} (vLLM answers HTTP 400)"
        )
    if trace.num_preemptions:
        messages.append(
            f"{trace.num_preemptions} preemptions (recompute): the KV cache ran out of blocks under this load"
        )
    return SimulationResult(
        result=result,
        timeline=_timeline(trace.record_rows, end_seconds=duration, pool_blocks=plan.kv_cache.usable_blocks)
        if timeline
        else (),
        assumptions=_assumptions(
            plan,
            run.benchmark,
            replica.coefficients,
            gpu_peer_to_peer=replica.gpu_peer_to_peer,
            primed=run.primed,
            spec=run.spec,
            draft=replica.draft,
        ),
        error_band_ratio=ERROR_BAND_RATIO,
        messages=tuple(messages),
        num_preemptions=trace.num_preemptions,
        plan=plan,
        num_steps=trace.num_steps,
        prefix_cache_hit_tokens=run.prefix_cache_hit_tokens,
        peak_running=trace.peak_running,
        num_steps_with_output=trace.num_steps_with_output,
        spec_num_drafts=trace.spec_num_drafts,
        spec_num_draft_tokens=trace.spec_num_draft_tokens,
        spec_num_accepted_tokens=trace.spec_num_accepted_tokens,
        speculative=run.spec,
    )


def for_replica(result: SimulationResult, replica: Replica, benchmark: BenchmarkSpec) -> SimulationResult:
    """``summarize`` of ``benchmark`` run against ``replica``, from ``result``, the summary of the same
    benchmark run against a replica with the same ``simulation_inputs``: the engine runs alike, so only the
    plan and the assumptions drawn from it are this replica's (the messages and the timeline read the plan's
    max_model_len and usable blocks, which the scheduler's configuration holds)."""
    primed = not replica.scheduler_config.prefill_first and client_primes_first_prompt(
        benchmark, replica.engine_version
    )
    return replace(
        result,
        plan=replica.plan,
        speculative=replica.spec_of(benchmark),
        assumptions=_assumptions(
            replica.plan,
            benchmark,
            replica.coefficients,
            gpu_peer_to_peer=replica.gpu_peer_to_peer,
            primed=primed,
            spec=replica.spec_of(benchmark),
            draft=replica.draft,
        ),
    )


def simulate(
    request: PlanRequest,
    benchmark: BenchmarkSpec,
    *,
    plan: CapacityPlan | None = None,
    coefficients: StepCoefficients | None = None,
    limits: SimulationLimits = DEFAULT_SIMULATION_LIMITS,
    step_by_step: bool = False,
    timeline: bool = True,
    replica: Replica | None = None,
    gpu_peer_to_peer: bool = True,
) -> SimulationResult:
    """Simulate ``vllm bench serve`` with ``benchmark`` against a replica planned from ``request``.

    ``gpu_peer_to_peer=False``: the tensor-parallel GPUs cannot reach each other peer-to-peer (vLLM's start-up
    log then warns that custom all-reduce is disabled for lack of GPU P2P), so NCCL's all-reduces go through
    host shared memory (``step_time``'s ``all-reduce`` term). ``step_by_step`` turns the closed-form decode
    stretches off (every step simulated on its own): the reference the fast path is tested against.
    ``timeline=False`` leaves ``SimulationResult.timeline`` empty (for callers that read only the figures,
    such as rate searches in a sweep). ``replica`` (from ``prepare_replica`` for the same request) saves the
    preparation when one replica runs many benchmarks; ``plan``, ``coefficients`` and ``gpu_peer_to_peer`` are
    then the replica's.
    """
    if benchmark.num_prompts > limits.max_num_prompts:
        raise InvalidSpec(
            f"at most {limits.max_num_prompts:,} prompts are simulated, got {benchmark.num_prompts:,}",
            field="benchmark.num_prompts",
        )
    if replica is None:
        replica = prepare_replica(
            request, plan=plan, coefficients=coefficients, gpu_peer_to_peer=gpu_peer_to_peer
        )
    run = run_benchmark(
        benchmark, replica=replica, limits=limits, step_by_step=step_by_step, keep_records=timeline
    )
    return summarize(run, timeline=timeline)
