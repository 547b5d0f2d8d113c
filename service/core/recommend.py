"""From "will it start?" to "how do I serve this traffic, and what does it cost?".

For one (model, GPU, TP) option::

    context        = p95 prompt + p95 output tokens (means when no p95 is given)
    kv_limit       = floor(num_gpu_blocks / blocks one request of `context` needs)      (what the cache holds)
    slo_limit      = largest batch whose decode step ≤ the time-per-output-token SLO   (roofline)
    max_num_seqs   = min(kv_limit, slo_limit, vLLM's default cap unless asked for more)
    W              = TTFT + mean output × TPOT(max_num_seqs)                          (time in system)
    per replica    = max_num_seqs / W requests/s                                       (Little's law)
    replicas       = ceil(demand × (1 + headroom) / per-replica capacity)

Demand is a request rate (requests/s, compared with per-replica requests/s) or a number of concurrent users
(compared with max_num_seqs). An option that misses an SLO or does not start is never recommended; it is
reported with the reason.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from service.core.bounds import check_sweep_size
from service.core.dtypes import MODEL_DTYPE_BYTES
from service.core.engines import resolve_engine
from service.core.errors import InvalidSpec
from service.core.planner import CapacityPlan, PlanRequest, batch_defaults, plan, with_changes
from service.core.specs import GpuSpec
from service.core.throughput import decode_step_seconds, max_batch_within_tpot, prefill_seconds
from service.core.units import fmt_int
from service.core.weights import resolve_quantization, weight_shares


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

    def __post_init__(self) -> None:
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


def _round_context(needed: int, model_max: int | None) -> int:
    """A max_model_len that covers ``needed`` tokens: the next power of two (≥ 2,048), capped by the model."""
    length = max(2048, 1 << (needed - 1).bit_length())
    return min(length, model_max) if model_max else length


def evaluate(request: PlanRequest, workload: Workload) -> Option:
    """Evaluate one (model, GPU, TP, KV dtype, quantisation) option against the workload."""
    if request.gpu is None:
        raise InvalidSpec("a GPU is needed to recommend", field="gpu")
    max_len, reason = _context_length(request, workload)
    return _evaluate(
        with_changes(request, max_model_len=max_len, suggest=False, detail=False),
        workload,
        [reason] if reason else [],
    )


def _context_length(request: PlanRequest, workload: Workload) -> tuple[int, str | None]:
    """The max_model_len an option is planned at, and the reason when kvcap chose it."""
    if request.max_model_len is not None:
        return request.max_model_len, None
    model, context = request.model, workload.context_tokens
    max_len = _round_context(context, model.max_model_len or model.max_position_embeddings)
    return max_len, f"max_model_len {fmt_int(max_len)} covers p95 prompt + output ({fmt_int(context)} tokens)"


def _evaluate(request: PlanRequest, workload: Workload, reasons: list[str]) -> Option:
    """``evaluate`` for a request already at its max_model_len, in verdict-only mode."""
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
        result = plan(request)
    except InvalidSpec as exc:
        return _rejected(base, "does not fit", [str(exc)], default_mns=0)
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
        return _finish(base, workload, result, reasons, batch, kv_limit, None, cap, None, None, replicas, gpu)

    slo_batch: int | None = None
    upper = min(kv_limit, cap)
    if workload.tpot_seconds is not None:
        slo_batch = max_batch_within_tpot(
            model,
            gpu,
            tpot_seconds=workload.tpot_seconds,
            upper=max(kv_limit, cap),
            weights_bytes=result.memory.weights_bytes,
            kv_bytes_per_token=kv_per_token,
            context_tokens=workload.mean_decode_context,
            tensor_parallel_size=request.tensor_parallel_size,
            dtype_bytes=dtype_bytes,
            fp8_compute=fp8,
        )
        if slo_batch == 0:
            one = step(1)
            return _rejected(
                base,
                "misses SLO",
                [
                    f"time per output token is {one * 1e3:.1f} ms even at batch 1 (SLO {workload.tpot_seconds * 1e3:.1f} ms)"
                ],
                default_mns=cap,
                result=result,
            )
        reasons.append(
            f"batches up to {fmt_int(slo_batch)} keep time per output token ≤ {workload.tpot_seconds * 1e3:.1f} ms"
        )
    batch = min(upper, slo_batch) if slo_batch is not None else upper
    limiter = (
        "the KV cache"
        if batch == kv_limit
        else "the time-per-output-token SLO"
        if batch == slo_batch
        else f"vLLM's default max_num_seqs ({cap})"
    )
    reasons.append(f"max_num_seqs {fmt_int(batch)} is set by {limiter}")

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
        return _rejected(
            base,
            "misses SLO",
            [
                f"prefill of a {fmt_int(prompt)}-token prompt takes {ttft * 1e3:.0f} ms (TTFT SLO {workload.ttft_p95_seconds * 1e3:.0f} ms)"
            ],
            default_mns=cap,
            result=result,
        )
    tpot = step(batch)
    per_request_seconds = ttft + workload.output_tokens * tpot
    rps_per_replica = batch / per_request_seconds
    if workload.requests_per_second is not None:
        replicas = max(
            1,
            math.ceil(workload.requests_per_second * (1 + workload.headroom_ratio) / rps_per_replica - 1e-9),
        )
        reasons.append(
            f"{workload.requests_per_second:g} req/s × (1 + {workload.headroom_ratio:g} headroom) ÷ {rps_per_replica:.2f} req/s per replica → {replicas} replica(s)"
        )
    else:
        users = workload.concurrent_users or 0
        replicas = max(1, math.ceil(users * (1 + workload.headroom_ratio) / batch - 1e-9))
        reasons.append(
            f"{users} concurrent users × (1 + {workload.headroom_ratio:g} headroom) ÷ {batch} per replica → {replicas} replica(s)"
        )
    return _finish(
        base,
        workload,
        result,
        reasons,
        batch,
        kv_limit,
        slo_batch,
        cap,
        tpot,
        ttft,
        replicas,
        gpu,
        rps_per_replica,
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
    request: PlanRequest, workload: Workload, *, tensor_parallel_sizes: Sequence[int] | None = None
) -> tuple[Option | None, list[Option]]:
    """The smallest TP that starts and meets the SLO (with its replicas and cost), and every option tried.

    ``request.tensor_parallel_size`` is ignored; every candidate TP is evaluated in increasing order. A larger
    TP wins only when it serves the workload with strictly fewer GPUs in all (a small TP whose cache holds a
    handful of requests can need many times the GPUs); the reasons then say so.
    """
    sizes = list(tensor_parallel_sizes or tp_candidates(request.model.num_attention_heads))
    options = [evaluate(with_changes(request, tensor_parallel_size=tp), workload) for tp in sorted(sizes)]
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
    """Feasible options by cost per hour (unpriced after priced), then fewest GPUs; rejected ones last."""

    def key(o: Option) -> tuple[int, float, int, float]:
        cost = o.cost_per_hour_usd if o.cost_per_hour_usd is not None else math.inf
        return (
            0 if o.feasible else 1,
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
) -> list[Option]:
    """Every GPU × TP × KV dtype × quantisation option for the model and workload, ranked by cost.

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
                    options.append(
                        _evaluate(
                            with_changes(
                                request,
                                gpu=gpu,
                                tensor_parallel_size=tp,
                                kv_cache_dtype=kv,
                                quantization=quant or "none",
                                max_model_len=max_len,
                                suggest=False,
                                detail=False,
                            ),
                            workload,
                            [reason] if reason else [],
                        )
                    )
    return rank(options)
