"""From "will it start?" to "how do I serve this traffic, and what does it cost?".

For one (model, GPU, TP) option the serving simulator (``service.core.serving``) decides, the roofline checks:

    context        = p95 prompt + p95 output tokens (means when no p95 is given)
    kv_limit       = floor(num_gpu_blocks / blocks one request of `context` needs)      (what the cache holds)
    rate           = the largest Poisson request rate one replica sustains with the workload's TTFT and TPOT
                     SLOs met at the asked percentile (p50, p99 or mean), simulated at the mean lengths
                     (``max_rate_within_slo``: bracket at the saturated throughput, then bisection)
    max_num_seqs   = chosen by simulation: from the peak of running requests at that rate (any larger cap gives
                     the same run), halved while the sustainable rate stays ≥ 98 % of the best one
    roofline       = max_num_seqs / (TTFT + mean output × TPOT(max_num_seqs)) from the bandwidth/compute
                     roofline (``service.core.throughput``) — an optimistic bound: no queueing, no prefill
                     sharing the step with decode
    per replica    = min(rate, roofline)  (the roofline is the sanity ceiling; both are reported)
    replicas       = ceil(demand × (1 + headroom) / per-replica capacity)

Demand is a request rate (compared with per-replica requests/s) or a number of concurrent users (compared with
the requests one replica holds in flight at its sustainable rate, rate × mean end-to-end latency — Little's
law — and at most max_num_seqs). An option that misses an SLO or does not start is never recommended; it is
reported with the reason.

Searches run ``SEARCH_NUM_PROMPTS`` requests per simulation (``SWEEP_NUM_PROMPTS`` in sweeps, where the
max_num_seqs search is skipped and options whose roofline bound already costs more than the best simulated
option are not simulated at all); results are cached per configuration, so a recommendation re-asked for the
same deployment costs a dictionary lookup.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from functools import _CacheInfo, lru_cache

from service.core.bounds import check_sweep_size
from service.core.dtypes import MODEL_DTYPE_BYTES
from service.core.engines import resolve_engine
from service.core.errors import InvalidSpec
from service.core.planner import CapacityPlan, PlanRequest, batch_defaults, plan, with_changes
from service.core.serving import (
    DEFAULT_STEP_COEFFICIENTS,
    RateSearchResult,
    SloTarget,
    max_rate_within_slo,
)
from service.core.serving.search import SharedSearches
from service.core.serving.speculative import SpecDecoding, method_family, spec_decoding_of
from service.core.specs import GpuSpec
from service.core.throughput import decode_step_seconds, max_batch_within_tpot, prefill_seconds
from service.core.units import fmt_int
from service.core.weights import resolve_quantization, weight_shares

SLO_PERCENTILES = ("p50", "p99", "mean")
SEARCH_NUM_PROMPTS = 200
"""Requests per simulation in a recommendation's rate searches (vLLM's default is 1,000; 200 keeps a search
well under a second while the rate it finds moves by a few percent)."""
SWEEP_NUM_PROMPTS = 100
MAX_NUM_SEQS_KEEP_RATIO = 0.98
"""A smaller max_num_seqs is chosen while it sustains at least this share of the best simulated rate."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Workload:
    requests_per_second: float | None = None
    concurrent_users: int | None = None
    prompt_tokens: int = 1024
    output_tokens: int = 256
    prompt_tokens_p95: int | None = None
    output_tokens_p95: int | None = None
    ttft_p95_seconds: float | None = None
    tpot_seconds: float | None = None
    headroom_ratio: float = 0.2
    slo_percentile: str = "p99"
    """Where the TTFT and TPOT SLOs are checked in the simulated distribution: "p50", "p99" or "mean"."""
    spec_mean_acceptance_length: float | None = None
    """Speculative decoding only: vLLM's "Mean acceptance length" of this traffic (1 + accepted drafts per
    draft, ``vllm/v1/spec_decode/metrics.py``), in [1, 1 + k]; None: the method's default
    (``service.core.serving.speculative.DEFAULT_POSITION_ACCEPTANCE``). Ignored for a plan without it."""

    def __post_init__(self) -> None:
        if self.slo_percentile not in SLO_PERCENTILES:
            raise InvalidSpec(f"must be one of {', '.join(SLO_PERCENTILES)}", field="workload.slo_percentile")
        if (self.requests_per_second is None) == (self.concurrent_users is None):
            raise InvalidSpec("give exactly one of requests_per_second or concurrent_users", field="workload")
        if self.requests_per_second is not None and self.requests_per_second <= 0:
            raise InvalidSpec("must be > 0", field="workload.requests_per_second")
        if self.concurrent_users is not None and self.concurrent_users < 1:
            raise InvalidSpec("must be ≥ 1", field="workload.concurrent_users")
        if self.prompt_tokens < 1 or self.output_tokens < 1:
            raise InvalidSpec("prompt_tokens and output_tokens must be ≥ 1", field="workload.prompt_tokens")
        for name in ("prompt_tokens_p95", "output_tokens_p95"):
            value = getattr(self, name)
            if value is not None and value < getattr(self, name.removesuffix("_p95")):
                raise InvalidSpec("cannot be below the mean", field=f"workload.{name}")
        if not 0 <= self.headroom_ratio <= 10:
            raise InvalidSpec("must be between 0 and 10", field="workload.headroom_ratio")
        for name in ("ttft_p95_seconds", "tpot_seconds"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise InvalidSpec("must be > 0", field=f"workload.{name}")
        if self.spec_mean_acceptance_length is not None and self.spec_mean_acceptance_length < 1:
            raise InvalidSpec(
                "must be ≥ 1 (1 + accepted tokens per draft)", field="workload.spec_mean_acceptance_length"
            )

    @property
    def context_tokens(self) -> int:
        """Tokens one request holds at its end: prompt + output (p95 when given, so the tail fits)."""
        return (self.prompt_tokens_p95 or self.prompt_tokens) + (self.output_tokens_p95 or self.output_tokens)

    @property
    def mean_decode_context(self) -> int:
        """Average tokens cached per running sequence during decode: the prompt plus half the output."""
        return self.prompt_tokens + self.output_tokens // 2


@dataclass(frozen=True, slots=True, kw_only=True)
class Option:
    """One way to serve the workload, evaluated end to end."""

    gpu: str
    tensor_parallel_size: int
    pipeline_parallel_size: int
    kv_cache_dtype: str
    quantization: str | None
    feasible: bool
    rejection: str | None  # "does not fit" | "misses SLO" | "cannot estimate" | None
    reasons: tuple[str, ...]
    max_model_len: int
    max_num_seqs: int
    kv_concurrency: int
    slo_batch: int | None
    default_max_num_seqs: int
    tpot_seconds: float | None
    ttft_seconds: float | None
    tokens_per_second_per_replica: float | None
    requests_per_second_per_replica: float | None
    replicas: int
    gpus: int
    cost_per_hour_usd: float | None
    cost_per_million_output_tokens_usd: float | None
    plan: CapacityPlan | None = None
    assumptions: tuple[str, ...] = ()
    roofline_requests_per_second_per_replica: float | None = None
    """The roofline's bound on requests/s per replica (no queueing); the sanity ceiling of the simulated rate."""
    simulated_requests_per_second_per_replica: float | None = None
    """Largest request rate one replica sustains within the SLOs in the serving simulator."""
    simulations: int = 0
    """Simulations the rate searches of this option ran (counted again when answered from the cache)."""
    sizing: str = "simulated"
    """How the per-replica capacity was found: "simulated" (serving simulator, roofline-capped), "roofline"
    (a sweep option not simulated: an optimistic bound) or "kv-cache" (a GPU without bandwidth/FLOP figures)."""
    speculative: SpecDecoding | None = None
    """The speculative decoding the option is sized with — its method, k and the mean acceptance length
    assumed (``given``: the workload's; otherwise the method's default); None for a plan without it."""


def _round_context(needed: int, model_max: int | None) -> int:
    """A max_model_len that covers ``needed`` tokens: the next power of two (≥ 2,048), capped by the model."""
    length = max(2048, 1 << (needed - 1).bit_length())
    return min(length, model_max) if model_max else length


def evaluate(request: PlanRequest, workload: Workload, *, search: Search | None = None) -> Option:
    """Evaluate one (model, GPU, TP, KV dtype, quantisation) option against the workload."""
    if request.gpu is None:
        raise InvalidSpec("a GPU is needed to recommend", field="gpu")
    max_len, reason = _context_length(request, workload)
    return _evaluate(
        with_changes(request, max_model_len=max_len, suggest=False, detail=False),
        workload,
        [reason] if reason else [],
        search or Search(),
    )


def _context_length(request: PlanRequest, workload: Workload) -> tuple[int, str | None]:
    """The max_model_len an option is planned at, and the reason when kvcap chose it."""
    if request.max_model_len is not None:
        return request.max_model_len, None
    model, context = request.model, workload.context_tokens
    max_len = _round_context(context, model.max_model_len or model.max_position_embeddings)
    return max_len, f"max_model_len {fmt_int(max_len)} covers p95 prompt + output ({fmt_int(context)} tokens)"


def _evaluate(
    request: PlanRequest,
    workload: Workload,
    reasons: list[str],
    search: Search,
    planned: CapacityPlan | None = None,
) -> Option:
    """``evaluate`` for a request already at its max_model_len, in verdict-only mode; ``planned``: the plan
    of ``request`` when the caller has it already (a sweep's roofline pass planned every option). The option
    says which acceptance of speculative decoding it was sized with (``with_speculative``)."""
    return with_speculative(_evaluate_option(request, workload, reasons, search, planned), request, workload)


def speculative_of(request: PlanRequest, result: CapacityPlan, workload: Workload) -> SpecDecoding | None:
    """The plan's speculative decoding under the workload's acceptance (None without ``speculative_config``);
    an acceptance no k drafts can reach (above 1 + k, k the plan's num_speculative_tokens) is refused, naming
    the workload's field."""
    speculative = request.features.speculative if request.features is not None else None
    if speculative is None or result.features is None or result.features.num_speculative_tokens < 1:
        return None
    try:
        return spec_decoding_of(
            speculative.method, result.features.num_speculative_tokens, workload.spec_mean_acceptance_length
        )
    except InvalidSpec as exc:
        raise InvalidSpec(exc.message, field=f"workload.{ACCEPTANCE_FIELD}") from None


ACCEPTANCE_FIELD = "spec_mean_acceptance_length"


def acceptance_assumption(spec: SpecDecoding | None, workload: Workload) -> str | None:
    """The line an option's assumptions carry about the acceptance it was sized with (None: nothing to say)."""
    if spec is None:
        if workload.spec_mean_acceptance_length is None:
            return None
        return f"workload.{ACCEPTANCE_FIELD} ignored: the plan has no speculative decoding"
    head = f"speculative decoding ({spec.method}, k = {spec.num_speculative_tokens})"
    if not spec.proposes:
        return (
            f"{head}: no drafts proposed — on random prompts the n-gram matcher finds no match "
            f"(give workload.{ACCEPTANCE_FIELD} for traffic where it matches)"
        )
    source = (
        "given in the workload"
        if spec.given
        else f"the {method_family(spec.method)} default, not measured: give workload.{ACCEPTANCE_FIELD}"
    )
    return f"{head}: mean acceptance length {spec.mean_acceptance_length:.2f} ({source})"


def with_speculative(option: Option, request: PlanRequest, workload: Workload) -> Option:
    """The option with the speculative decoding it was sized with, and the assumption line about it (an
    option refused before planning has no plan to tell)."""
    if option.plan is None:
        return option
    spec = speculative_of(request, option.plan, workload)
    line = acceptance_assumption(spec, workload)
    if spec is None and line is None:
        return option
    return replace(option, speculative=spec, assumptions=(*option.assumptions, *([line] if line else [])))


def _evaluate_option(
    request: PlanRequest,
    workload: Workload,
    reasons: list[str],
    search: Search,
    planned: CapacityPlan | None = None,
) -> Option:
    """``_evaluate`` before the option is told its speculative decoding."""
    model, gpu = request.model, request.gpu
    assert gpu is not None and request.max_model_len is not None
    context = workload.context_tokens
    max_len = request.max_model_len
    scheme = resolve_quantization(request.quantization, native=model.quantization)
    base = {
        "gpu": gpu.name,
        "tensor_parallel_size": request.tensor_parallel_size,
        "pipeline_parallel_size": request.pipeline_parallel_size,
        "kv_cache_dtype": request.kv_cache_dtype or "auto",
        "quantization": scheme.name if scheme else None,
        "max_model_len": max_len,
    }
    try:
        result = planned if planned is not None else plan(request)
    except InvalidSpec as exc:
        return _rejected(base, "does not fit", [str(exc)], default_mns=0)
    spec = speculative_of(request, result, workload)  # a 422 before any simulation when out of range
    engine_default_mns, _ = batch_defaults(
        resolve_engine(result.settings.engine),
        gpu,
        request.device,
        request.tensor_parallel_size * request.pipeline_parallel_size,
    )
    cap = request.max_num_seqs or engine_default_mns
    if not result.fits:
        errors = [m.text for m in result.errors]
        return _rejected(
            base, "does not fit", errors[:1] or ["vLLM would not start"], default_mns=cap, result=result
        )
    if context > max_len:
        return _rejected(
            base,
            "does not fit",
            [f"requests of {fmt_int(context)} tokens exceed max_model_len {fmt_int(max_len)}"],
            default_mns=cap,
            result=result,
        )
    kv_limit = math.floor(result.concurrency_at(context))
    if kv_limit < 1:
        return _rejected(
            base,
            "does not fit",
            [f"the KV cache cannot hold one request of {fmt_int(context)} tokens"],
            default_mns=cap,
            result=result,
        )
    reasons.append(f"the KV cache holds {fmt_int(kv_limit)} requests of {fmt_int(context)} tokens")

    dtype_bytes = MODEL_DTYPE_BYTES.get(result.settings.dtype, 2)
    fp8 = (result.settings.quantization or "") == "fp8" and bool(gpu.fp8_dense_flops_per_second)
    kv_per_token = result.kv_cache.bytes_per_token

    def step(batch: int) -> float:
        return decode_step_seconds(
            model,
            gpu,
            weights_bytes=result.memory.weights_bytes,
            kv_bytes_per_token=kv_per_token,
            batch=batch,
            context_tokens=workload.mean_decode_context,
            tensor_parallel_size=request.tensor_parallel_size,
            dtype_bytes=dtype_bytes,
            fp8_compute=fp8,
        )

    if not gpu.memory_bandwidth_bytes_per_second or not gpu.bf16_dense_flops_per_second:
        if workload.tpot_seconds or workload.ttft_p95_seconds or workload.requests_per_second:
            return _rejected(
                base,
                "cannot estimate",
                [f"{gpu.name} lacks bandwidth/FLOP figures: latency and throughput cannot be estimated"],
                default_mns=cap,
                result=result,
            )
        batch = min(kv_limit, cap)
        replicas = max(1, math.ceil((workload.concurrent_users or 0) * (1 + workload.headroom_ratio) / batch))
        option = _finish(
            base, workload, result, reasons, batch, kv_limit, None, cap, None, None, replicas, gpu
        )
        return replace(option, sizing="kv-cache")

    bound = _roofline(
        request,
        result,
        workload,
        kv_limit=kv_limit,
        cap=cap,
        step=step,
        tokens_per_step=spec.mean_acceptance_length if spec is not None else 1.0,
    )
    if isinstance(bound, str):
        return _rejected(base, "misses SLO", [bound], default_mns=cap, result=result)
    reasons.extend(bound.reasons)
    if not search.simulate:
        return _sized(base, workload, result, reasons, kv_limit, cap, gpu, bound=bound, simulated=None)
    try:
        simulated = _simulated(
            request,
            workload,
            cap=cap,
            search=search,
            acceptance=workload.spec_mean_acceptance_length if spec is not None else None,
        )
    except InvalidSpec as exc:
        return _rejected(
            base, "cannot estimate", [f"the serving simulator: {exc}"], default_mns=cap, result=result
        )
    if simulated.rate.max_request_rate <= 0 or simulated.rate.at_rate is None:
        return _rejected(
            base,
            "misses SLO",
            [
                f"the serving simulator finds no request rate at which one replica meets {_slo_text(workload)}"
                f" (saturated throughput {simulated.rate.ceiling_request_rate:.2f} req/s)"
            ],
            default_mns=cap,
            result=result,
        )
    return _sized(base, workload, result, reasons, kv_limit, cap, gpu, bound=bound, simulated=simulated)


@dataclass(frozen=True, slots=True, kw_only=True)
class Search:
    """How hard an evaluation simulates: requests per simulation, and whether max_num_seqs is searched."""

    simulate: bool = True
    num_prompts: int = SEARCH_NUM_PROMPTS
    search_max_num_seqs: bool = True
    time_scale: float = 1.0
    """``StepCoefficients.time_scale`` for the simulations: a step-time scale fitted from live latency."""


@dataclass(frozen=True, slots=True, kw_only=True)
class _Roofline:
    slo_batch: int | None
    batch: int
    tpot_seconds: float
    ttft_seconds: float
    requests_per_second: float
    reasons: tuple[str, ...]


def _roofline(
    request: PlanRequest,
    result: CapacityPlan,
    workload: Workload,
    *,
    kv_limit: int,
    cap: int,
    step: Callable[[int], float],
    tokens_per_step: float = 1.0,
) -> _Roofline | str:
    """The roofline bound of one replica (service.core.throughput), or why even the roofline misses the SLO.

    ``tokens_per_step``: the tokens one decode step gives each request — 1, or under speculative decoding the
    mean acceptance length L (vLLM's rejection sampler returns the accepted drafts plus one token, the bonus
    or the correction, per verification: ``vllm/v1/sample/rejection_sampler.py``, V1 from 0.8 to main after
    0.11; L is ``vllm/v1/spec_decode/metrics.py``' mean acceptance length). The bound's time per output token is then step(batch) / L: the step is timed as a
    plain decode (one KV and weight read; the 1 + k verified positions and the proposer's passes left out),
    which keeps it an optimistic ceiling on the simulated rate, as it is without speculative decoding."""
    model, gpu = request.model, request.gpu
    assert gpu is not None
    dtype_bytes = MODEL_DTYPE_BYTES.get(result.settings.dtype, 2)
    fp8 = (result.settings.quantization or "") == "fp8" and bool(gpu.fp8_dense_flops_per_second)
    reasons: list[str] = []
    slo_batch: int | None = None
    if workload.tpot_seconds is not None:
        slo_batch = max_batch_within_tpot(
            model,
            gpu,
            tpot_seconds=workload.tpot_seconds * tokens_per_step,
            upper=max(kv_limit, cap),
            weights_bytes=result.memory.weights_bytes,
            kv_bytes_per_token=result.kv_cache.bytes_per_token,
            context_tokens=workload.mean_decode_context,
            tensor_parallel_size=request.tensor_parallel_size,
            dtype_bytes=dtype_bytes,
            fp8_compute=fp8,
        )
        if slo_batch == 0:
            return (
                f"time per output token is {step(1) / tokens_per_step * 1e3:.1f} ms even at batch 1 "
                f"(SLO {workload.tpot_seconds * 1e3:.1f} ms)"
            )
        reasons.append(
            f"roofline: batches up to {fmt_int(slo_batch)} keep time per output token ≤ "
            f"{workload.tpot_seconds * 1e3:.1f} ms"
            + (f" ({tokens_per_step:.2f} tokens per step accepted)" if tokens_per_step != 1.0 else "")
        )
    upper = min(kv_limit, cap)
    batch = min(upper, slo_batch) if slo_batch is not None else upper
    prompt = workload.prompt_tokens_p95 or workload.prompt_tokens
    ttft = prefill_seconds(
        model,
        gpu,
        prompt_tokens=prompt,
        weights_bytes=result.memory.weights_bytes,
        tensor_parallel_size=request.tensor_parallel_size,
        dtype_bytes=dtype_bytes,
        fp8_compute=fp8,
    ).seconds
    if workload.ttft_p95_seconds is not None and ttft > workload.ttft_p95_seconds:
        return (
            f"prefill of a {fmt_int(prompt)}-token prompt takes {ttft * 1e3:.0f} ms "
            f"(TTFT SLO {workload.ttft_p95_seconds * 1e3:.0f} ms)"
        )
    tpot = step(batch) / tokens_per_step
    return _Roofline(
        slo_batch=slo_batch,
        batch=batch,
        tpot_seconds=tpot,
        ttft_seconds=ttft,
        requests_per_second=batch / (ttft + workload.output_tokens * tpot),
        reasons=tuple(reasons),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class _Simulated:
    rate: RateSearchResult
    max_num_seqs: int
    simulations: int
    reasons: tuple[str, ...]
    time_scale: float = 1.0


def _slo_target(workload: Workload) -> SloTarget:
    return SloTarget(
        ttft_seconds=workload.ttft_p95_seconds,
        tpot_seconds=workload.tpot_seconds,
        percentile=workload.slo_percentile,
    )


def _slo_text(workload: Workload) -> str:
    parts = []
    if workload.ttft_p95_seconds is not None:
        parts.append(f"TTFT ≤ {workload.ttft_p95_seconds * 1e3:.0f} ms")
    if workload.tpot_seconds is not None:
        parts.append(f"TPOT ≤ {workload.tpot_seconds * 1e3:.1f} ms")
    return f"{workload.slo_percentile} " + " and ".join(parts) if parts else "no SLO (saturated throughput)"


_SHARED_SEARCHES = SharedSearches()
"""Searches by their replica's simulation inputs, under ``_rate_search``'s cache (which is by request): options
planned from different requests that simulate alike (two GPUs with the same figures) share one search."""


def _searched(
    request: PlanRequest,
    slo: SloTarget,
    prompt_tokens: int,
    output_tokens: int,
    num_prompts: int,
    time_scale: float = 1.0,
    spec_mean_acceptance_length: float | None = None,
) -> tuple[RateSearchResult, int, int]:
    """``max_rate_within_slo`` for one configuration, cached (requests, SLOs and lengths are all hashable):
    the result without its timeline (kept small), the simulations it ran, and the peak of running requests.
    ``spec_mean_acceptance_length``: the workload's, for a plan with speculative decoding (None otherwise)."""
    coefficients = (
        None
        if time_scale == 1.0
        else replace(DEFAULT_STEP_COEFFICIENTS, time_scale=DEFAULT_STEP_COEFFICIENTS.time_scale * time_scale)
    )
    found = max_rate_within_slo(
        request,
        slo,
        prompt_tokens=prompt_tokens,
        output_tokens=output_tokens,
        num_prompts=num_prompts,
        coefficients=coefficients,
        timeline=False,  # kept small; the peak of running requests comes with the result
        shared=_SHARED_SEARCHES,
        spec_mean_acceptance_length=spec_mean_acceptance_length,
    )
    sim = found.at_rate
    if sim is None:
        return found, found.simulations, 0
    return found, found.simulations, sim.peak_running


class _RateSearchCache:
    """``_searched`` cached by its arguments (an ``lru_cache`` above a catalog-wide sweep's options, 26 GPUs
    × 24 ≈ 620, so a repeat hits); ``cache_clear`` empties the shared searches beneath it too, so that after
    it every search simulates again."""

    def __init__(self) -> None:
        self._cached = lru_cache(maxsize=4096)(_searched)

    def __call__(
        self,
        request: PlanRequest,
        slo: SloTarget,
        prompt_tokens: int,
        output_tokens: int,
        num_prompts: int,
        time_scale: float = 1.0,
        spec_mean_acceptance_length: float | None = None,
    ) -> tuple[RateSearchResult, int, int]:
        return self._cached(
            request, slo, prompt_tokens, output_tokens, num_prompts, time_scale, spec_mean_acceptance_length
        )

    def cache_info(self) -> _CacheInfo:
        return self._cached.cache_info()

    def cache_clear(self) -> None:
        self._cached.cache_clear()
        _SHARED_SEARCHES.clear()


_rate_search = _RateSearchCache()


def _simulated(
    request: PlanRequest, workload: Workload, *, cap: int, search: Search, acceptance: float | None
) -> _Simulated:
    """The sustainable rate at vLLM's cap, then smaller max_num_seqs while they keep ≥ 98 % of it;
    ``acceptance``: the mean acceptance length the simulations assume (None: the method's default)."""
    slo = _slo_target(workload)
    lengths = (
        workload.prompt_tokens,
        workload.output_tokens,
        search.num_prompts,
        search.time_scale,
        acceptance,
    )
    at_cap = with_changes(request, max_num_seqs=cap, suggest=False, detail=False)
    best, simulations, peak = _rate_search(at_cap, slo, *lengths)
    chosen_mns, chosen = cap, best
    reasons = [
        f"simulated: one replica sustains {best.max_request_rate:.2f} req/s within {_slo_text(workload)} "
        f"(saturated {best.ceiling_request_rate:.2f} req/s; about {fmt_int(peak)} requests running at most)"
    ]
    # Below the peak of running requests the cap starts to bind; each smaller cap is checked by its own search
    # (the sampled timeline can miss the exact peak, so even the first candidate is verified).
    candidate = min(peak, cap - 1) if search.search_max_num_seqs and best.max_request_rate > 0 else 0
    while candidate >= 1:
        trial, runs, _ = _rate_search(
            with_changes(request, max_num_seqs=candidate, suggest=False, detail=False), slo, *lengths
        )
        simulations += runs
        if trial.max_request_rate < MAX_NUM_SEQS_KEEP_RATIO * best.max_request_rate:
            break
        chosen_mns, chosen = candidate, trial
        candidate //= 2
    if chosen is not best:
        reasons.append(
            f"simulated: max_num_seqs {fmt_int(chosen_mns)} still sustains {chosen.max_request_rate:.2f} "
            f"req/s (≥ {MAX_NUM_SEQS_KEEP_RATIO:.0%} of the {best.max_request_rate:.2f} at {fmt_int(cap)})"
        )
    return _Simulated(
        rate=chosen,
        max_num_seqs=max(1, chosen_mns),
        simulations=simulations,
        reasons=tuple(reasons),
        time_scale=search.time_scale,
    )


def _sized(
    base: dict[str, object],
    workload: Workload,
    result: CapacityPlan,
    reasons: list[str],
    kv_limit: int,
    cap: int,
    gpu: GpuSpec,
    *,
    bound: _Roofline,
    simulated: _Simulated | None,
) -> Option:
    """Replicas from the per-replica capacity: min(simulated, roofline) — or the roofline alone, unsimulated."""
    roofline_rps = bound.requests_per_second
    if simulated is None:
        batch, rps, tpot, ttft = bound.batch, roofline_rps, bound.tpot_seconds, bound.ttft_seconds
        users_per_replica = float(batch)
        reasons.append(f"max_num_seqs {fmt_int(batch)} from the roofline (not simulated)")
    else:
        reasons.extend(simulated.reasons)
        at = simulated.rate.at_rate
        assert at is not None
        batch = simulated.max_num_seqs
        rps = min(simulated.rate.max_request_rate, roofline_rps)
        prefix = {"p50": "median", "p99": "p99", "mean": "mean"}[workload.slo_percentile]
        tpot = getattr(at.result, f"{prefix}_tpot_ms") / 1e3
        ttft = getattr(at.result, f"{prefix}_ttft_ms") / 1e3
        in_flight = simulated.rate.max_request_rate * at.result.mean_e2el_ms / 1e3
        users_per_replica = max(1.0, min(in_flight, float(batch)))
        if rps < simulated.rate.max_request_rate:
            reasons.append(f"capped at the roofline's {roofline_rps:.2f} req/s per replica")
    if workload.requests_per_second is not None:
        replicas = max(
            1, math.ceil(workload.requests_per_second * (1 + workload.headroom_ratio) / rps - 1e-9)
        )
        reasons.append(
            f"{workload.requests_per_second:g} req/s × (1 + {workload.headroom_ratio:g} headroom) ÷ "
            f"{rps:.2f} req/s per replica → {replicas} replica(s)"
        )
    else:
        users = workload.concurrent_users or 0
        replicas = max(1, math.ceil(users * (1 + workload.headroom_ratio) / users_per_replica - 1e-9))
        reasons.append(
            f"{users} concurrent users × (1 + {workload.headroom_ratio:g} headroom) ÷ "
            f"{users_per_replica:.1f} in flight per replica → {replicas} replica(s)"
        )
    option = _finish(
        base, workload, result, reasons, batch, kv_limit, bound.slo_batch, cap, tpot, ttft, replicas, gpu, rps
    )
    assumptions = (
        [
            f"per-replica rate from the serving simulator ({simulated.rate.at_rate.result.completed if simulated.rate.at_rate else 0} "
            f"requests per simulation, Poisson arrivals, mean lengths {workload.prompt_tokens}/{workload.output_tokens}); "
            f"SLOs checked at {workload.slo_percentile}",
            f"roofline bound {roofline_rps:.2f} req/s per replica (bandwidth/compute roofline, no queueing) "
            f"against {simulated.rate.max_request_rate:.2f} simulated",
            *(
                [f"step times × {simulated.time_scale:.3g}, fitted from this deployment's observed latency"]
                if simulated.time_scale != 1.0
                else []
            ),
        ]
        if simulated is not None
        else [
            "not simulated: its roofline bound is no cheaper than the best simulated option, or it is beyond the "
            f"{SWEEP_MAX_SIMULATED} cheapest a sweep simulates",
            "decode time from a bandwidth roofline at the mean decode context; TTFT from a compute roofline, no queueing",
        ]
    )
    return replace(
        option,
        tokens_per_second_per_replica=rps * workload.output_tokens,
        assumptions=(*assumptions, f"headroom {workload.headroom_ratio:.0%} above the demand"),
        roofline_requests_per_second_per_replica=roofline_rps,
        simulated_requests_per_second_per_replica=simulated.rate.max_request_rate if simulated else None,
        simulations=simulated.simulations if simulated else 0,
        sizing="simulated" if simulated else "roofline",
    )


def _rejected(
    base: dict[str, object],
    why: str,
    details: list[str],
    *,
    default_mns: int,
    result: CapacityPlan | None = None,
) -> Option:
    return Option(
        **base,  # type: ignore[arg-type]
        feasible=False,
        rejection=why,
        reasons=(f"{why}: {details[0]}" if details else why,),
        max_num_seqs=0,
        kv_concurrency=0,
        slo_batch=None,
        default_max_num_seqs=default_mns,
        tpot_seconds=None,
        ttft_seconds=None,
        tokens_per_second_per_replica=None,
        requests_per_second_per_replica=None,
        replicas=0,
        gpus=0,
        cost_per_hour_usd=None,
        cost_per_million_output_tokens_usd=None,
        plan=result,
    )


def _finish(
    base: dict[str, object],
    workload: Workload,
    result: CapacityPlan,
    reasons: list[str],
    batch: int,
    kv_limit: int,
    slo_batch: int | None,
    cap: int,
    tpot: float | None,
    ttft: float | None,
    replicas: int,
    gpu: GpuSpec,
    rps_per_replica: float | None = None,
) -> Option:
    tp, pp = int(base["tensor_parallel_size"]), int(base["pipeline_parallel_size"])  # type: ignore[call-overload]
    gpus = replicas * tp * pp
    cost = gpus * gpu.price_per_hour_usd if gpu.price_per_hour_usd is not None else None
    if workload.requests_per_second is not None:
        output_rate = workload.requests_per_second * workload.output_tokens
    elif tpot is not None and ttft is not None:
        output_rate = (
            (workload.concurrent_users or 0) / (ttft + workload.output_tokens * tpot) * workload.output_tokens
        )
    else:
        output_rate = 0.0
    per_million = cost / (output_rate * 3600) * 1e6 if cost is not None and output_rate > 0 else None
    if cost is not None:
        reasons.append(f"{gpus} × {gpu.name} at ${gpu.price_per_hour_usd:.2f}/h = ${cost:.2f}/h")
    else:
        reasons.append(f"{gpus} × {gpu.name} (no price in the catalog)")
    return Option(
        **base,  # type: ignore[arg-type]
        feasible=True,
        rejection=None,
        reasons=tuple(reasons),
        max_num_seqs=batch,
        kv_concurrency=kv_limit,
        slo_batch=slo_batch,
        default_max_num_seqs=cap,
        tpot_seconds=tpot,
        ttft_seconds=ttft,
        tokens_per_second_per_replica=batch / tpot if tpot else None,
        requests_per_second_per_replica=rps_per_replica,
        replicas=replicas,
        gpus=gpus,
        cost_per_hour_usd=cost,
        cost_per_million_output_tokens_usd=per_million,
        plan=result,
        assumptions=(
            "decode time from a bandwidth roofline at the mean decode context; TTFT from a compute roofline, no queueing",
            f"headroom {workload.headroom_ratio:.0%} above the demand",
        ),
    )


def tp_candidates(num_attention_heads: int, *, limit: int = 8) -> list[int]:
    """Tensor-parallel sizes vLLM accepts for the model up to one node: powers of two dividing the heads."""
    return [tp for tp in (1, 2, 4, 8, 16) if tp <= limit and num_attention_heads % tp == 0]


def recommend(
    request: PlanRequest,
    workload: Workload,
    *,
    tensor_parallel_sizes: Sequence[int] | None = None,
    search: Search | None = None,
) -> tuple[Option | None, list[Option]]:
    """The smallest TP that starts and meets the SLO (with its replicas and cost), and every option tried.

    ``request.tensor_parallel_size`` is ignored; every candidate TP is evaluated in increasing order. A larger
    TP wins only when it serves the workload with strictly fewer GPUs in all (a small TP whose cache holds a
    handful of requests can need many times the GPUs); the reasons then say so.
    """
    sizes = list(tensor_parallel_sizes or tp_candidates(request.model.num_attention_heads))
    options = [
        evaluate(with_changes(request, tensor_parallel_size=tp), workload, search=search)
        for tp in sorted(sizes)
    ]
    feasible = [o for o in options if o.feasible]
    if not feasible:
        return None, options
    smallest = feasible[0]
    chosen = min(feasible, key=lambda o: (o.gpus, o.tensor_parallel_size))
    if chosen is not smallest:
        note = (
            f"tensor-parallel-size {chosen.tensor_parallel_size} needs {chosen.gpus} GPUs in all, fewer than the "
            f"{smallest.gpus} that the smallest workable size ({smallest.tensor_parallel_size}) needs"
        )
        chosen = replace(chosen, reasons=(*chosen.reasons, note))
    return chosen, options


def rank(options: Iterable[Option]) -> list[Option]:
    """Feasible options by cost per hour (unpriced after priced), then fewest GPUs; rejected ones last.

    Options sized by the roofline alone (a sweep's unsimulated ones) come after the simulated ones: their
    figures are optimistic bounds, not predictions."""

    def key(o: Option) -> tuple[int, float, int, float]:
        cost = o.cost_per_hour_usd if o.cost_per_hour_usd is not None else math.inf
        return (
            (1 if o.sizing == "roofline" else 0) if o.feasible else 2,
            cost,
            o.gpus if o.feasible else 0,
            -(o.tokens_per_second_per_replica or 0.0),
        )

    return sorted(options, key=key)


def sweep(
    request: PlanRequest,
    workload: Workload,
    gpus: Sequence[GpuSpec],
    *,
    tensor_parallel_sizes: Sequence[int] | None = None,
    kv_cache_dtypes: Sequence[str] = ("auto", "fp8"),
    quantizations: Sequence[str | None] = (None, "fp8", "awq"),
    simulate: bool = True,
    simulate_every_option: bool = False,
) -> list[Option]:
    """Every GPU × TP × KV dtype × quantisation option for the model and workload, ranked by cost.

    Every option gets its roofline figures; the serving simulator then sizes the cheapest ones, in roofline
    order, until the roofline bound shows that no option left can be cheaper (``_simulate_cheapest``). With
    ``simulate_every_option`` every option the roofline does not already exclude is simulated (each with its
    simulated per-replica rate at the SLO), not only the cheapest.

    Options whose weights alone exceed the GPU are rejected before any planning (most of a large catalog for a
    large model), so a sweep stays fast; the rest are evaluated in full.
    """
    model = request.model
    max_len, reason = _context_length(request, workload)
    sizes = sorted(set(tensor_parallel_sizes or tp_candidates(model.num_attention_heads)))
    check_sweep_size(
        gpus=len({gpu.name for gpu in gpus}),
        tensor_parallel_sizes=len(sizes),
        kv_cache_dtypes=len(set(kv_cache_dtypes)),
        quantizations=len(set(quantizations)),
    )
    options: list[Option] = []
    planned: list[tuple[Option, PlanRequest, list[str]]] = []
    seen: set[tuple[str, str | None, str, int]] = set()
    for gpu in gpus:
        for quant_name in quantizations:
            scheme = resolve_quantization(quant_name, native=model.quantization)
            quant = scheme.name if scheme else None
            for kv in kv_cache_dtypes:
                for tp in sizes:
                    key = (gpu.name, quant, kv, tp)
                    if key in seen:
                        continue
                    seen.add(key)
                    base = {
                        "gpu": gpu.name,
                        "tensor_parallel_size": tp,
                        "pipeline_parallel_size": request.pipeline_parallel_size,
                        "kv_cache_dtype": kv,
                        "quantization": quant,
                        "max_model_len": request.max_model_len or 0,
                    }
                    if kv.startswith("fp8") and not gpu.supports_fp8:
                        options.append(
                            _rejected(
                                base, "does not fit", [f"{gpu.name} has no fp8 KV cache"], default_mns=0
                            )
                        )
                        continue
                    weights = max(
                        s.total_bytes
                        for s in weight_shares(
                            model,
                            quantization=scheme,
                            tensor_parallel_size=tp,
                            pipeline_parallel_size=request.pipeline_parallel_size,
                        )
                    )
                    if weights >= gpu.memory_bytes:
                        options.append(
                            _rejected(
                                base,
                                "does not fit",
                                [
                                    f"weights need {weights / 2**30:.1f} GiB per GPU, {gpu.name} has {gpu.memory_bytes / 2**30:.1f} GiB"
                                ],
                                default_mns=0,
                            )
                        )
                        continue
                    candidate = with_changes(
                        request,
                        gpu=gpu,
                        tensor_parallel_size=tp,
                        kv_cache_dtype=kv,
                        quantization=quant or "none",
                        max_model_len=max_len,
                        suggest=False,
                        detail=False,
                    )
                    reasons = [reason] if reason else []
                    bound = _evaluate(candidate, workload, list(reasons), Search(simulate=False))
                    options.append(bound)
                    if bound.feasible:
                        planned.append((bound, candidate, reasons))
    if not simulate:
        return rank(options)
    if simulate_every_option:
        return rank(_simulate_every(options, planned, workload))
    return rank(_simulate_cheapest(options, planned, workload))


SWEEP_SEARCH = Search(num_prompts=SWEEP_NUM_PROMPTS, search_max_num_seqs=False)
SWEEP_MAX_SIMULATED = 8
"""A sweep simulates at most this many options (the cheapest by roofline cost); the rest keep roofline figures."""


def _simulate_every(
    options: list[Option], planned: list[tuple[Option, PlanRequest, list[str]]], workload: Workload
) -> list[Option]:
    """Simulate every option whose roofline bound serves the workload (the others cannot: the simulated rate
    is capped by the roofline's)."""
    by_id = {id(option): index for index, option in enumerate(options)}
    for bound, candidate, reasons in planned:
        options[by_id[id(bound)]] = _evaluate(candidate, workload, list(reasons), SWEEP_SEARCH, bound.plan)
    return options


def _simulate_cheapest(
    options: list[Option], planned: list[tuple[Option, PlanRequest, list[str]]], workload: Workload
) -> list[Option]:
    """Simulate feasible options in order of their roofline cost until the bound proves the rest dearer.

    The per-replica capacity is min(simulated, roofline), so an option's simulated cost is never below its
    roofline cost: once the cheapest simulated cost is below the next option's roofline cost, no option left
    can beat it (an equal cost cannot beat it either), and those keep their roofline figures, saying so in
    their assumptions. At most ``SWEEP_MAX_SIMULATED`` options are simulated, so a sweep stays interactive.
    """

    def cost(option: Option) -> float:
        return option.cost_per_hour_usd if option.cost_per_hour_usd is not None else math.inf

    by_id = {id(option): index for index, option in enumerate(options)}
    best = math.inf
    ordered = sorted(planned, key=lambda entry: (cost(entry[0]), entry[0].gpus))
    for bound, candidate, reasons in ordered[:SWEEP_MAX_SIMULATED]:
        if cost(bound) >= best:
            break
        simulated = _evaluate(candidate, workload, list(reasons), SWEEP_SEARCH, bound.plan)
        options[by_id[id(bound)]] = simulated
        if simulated.feasible:
            best = min(best, cost(simulated))
    return options
