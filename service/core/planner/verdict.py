"""Stage 7, the verdict: vLLM's start-up checks, in the wording of the release.

The weights must load, some memory must be left for blocks, and one request of ``max_model_len`` tokens must fit
(otherwise vLLM refuses and names the largest length that would). Together with the errors of earlier stages
(heads that TP cannot split, a length over the model's, a failed auto-fit) they decide ``fits``.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from service.core.dtypes import MODEL_DTYPE_BYTES, normalize_model_dtype
from service.core.engines import EngineProfile
from service.core.overheads import Estimate, estimate_cudagraph, sampler_logits_bytes
from service.core.planner.blocks import Blocks, Concurrency, LengthCheck
from service.core.planner.memory import MemoryBudget
from service.core.planner.results import Message, gib
from service.core.planner.settings import Settings, is_datacenter_blackwell
from service.core.units import GIB, fmt_int


class Verdict(NamedTuple):
    fits: bool
    messages: tuple[Message, ...]  # this stage's checks only


def judge(
    settings: Settings,
    memory: MemoryBudget,
    blocks: Blocks,
    check: LengthCheck,
    capacity: Concurrency,
    earlier: tuple[Message, ...],
) -> Verdict:
    """vLLM's start-up checks; ``fits`` when neither they nor an earlier stage raised an error."""
    gpu, worst = settings.gpu, blocks.worst
    # Each stage's weights against its own GPU (one GPU kind: the heaviest stage's against the GPU).
    over = sorted(
        (m for m in memory.stages if m.weights_bytes >= m.total_bytes), key=lambda m: -m.weights_bytes
    )
    budget = memory.stages[worst.stage].budget_bytes
    kv_bytes = settings.kv_cache_memory_bytes
    messages: list[Message] = []
    if gpu is not None and kv_bytes is None:
        if over:
            messages.append(
                Message(
                    level="error",
                    code="weights_exceed_gpu",
                    text=(
                        f"Model weights need {gib(over[0].weights_bytes)} GiB per GPU but the GPU has {gib(over[0].total_bytes)} GiB: loading fails "
                        "with CUDA out of memory."
                    ),
                )
            )
        elif worst.available <= 0 and settings.extensible_kv_cache:
            # 0.34's extensible KV cache: before warm-up when the tentative capacity is already spent, else after.
            before = worst.tentative is not None and worst.tentative <= 0
            remedy = _extensible_hint(settings.gpu_memory_utilization, not before)
            messages.append(
                Message(
                    level="error",
                    code="no_memory_for_blocks",
                    text=(
                        f"No available memory for the cache blocks. {remedy} (measured after warm-up: "
                        f"{gib(worst.available)} GiB)"
                    ),
                )
            )
        elif worst.available <= 0:
            messages.append(
                Message(
                    level="error",
                    code="no_memory_for_blocks",
                    text=(
                        "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine. "
                        f"(budget {gib(budget)} GiB − weights {gib(worst.weights_bytes)} GiB − runtime {gib(worst.overheads.total_bytes)} GiB = "
                        f"{gib(worst.available)} GiB)"
                    ),
                )
            )
    elif gpu is not None and kv_bytes is not None:
        crowded = sorted(
            (m for m in memory.stages if m.weights_bytes + kv_bytes > m.total_bytes),
            key=lambda m: -m.weights_bytes,
        )
        if crowded:
            messages.append(
                Message(
                    level="error",
                    code="kv_bytes_exceed_gpu",
                    text=(
                        f"weights ({gib(crowded[0].weights_bytes)} GiB) + kv_cache_memory_bytes ({gib(kv_bytes)} GiB) exceed "
                        f"the GPU's {gib(crowded[0].total_bytes)} GiB"
                    ),
                )
            )
    n_blocks = blocks.num_gpu_blocks
    if n_blocks <= 0 and not any(m.code in ("weights_exceed_gpu", "no_memory_for_blocks") for m in messages):
        messages.append(
            Message(
                level="error",
                code="no_memory_for_blocks",
                text="No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine.",
            )
        )
    max_len = capacity.max_model_len
    if n_blocks > 0 and max_len and not capacity.requested_fits and not settings.max_model_len_auto:
        needed, available = check.refusal_figures(blocks.stages, worst, max_len)
        estimate = capacity.max_model_len_that_fits
        hint = None
        if settings.extensible_kv_cache:
            needed, available, estimate, hint = _extensible_refusal(
                settings, blocks, check, max_len, estimate
            )
        messages.append(
            Message(
                level="error",
                code="max_model_len_too_large",
                text=max_len_message(
                    settings.engine,
                    max_len,
                    estimate,
                    needed,
                    available,
                    check.v0_capacity_tokens,
                    hint=hint,
                ),
            )
        )
    if not any(m.level == "error" for m in (*earlier, *messages)):
        messages.extend(_warm_up_after_kv_cache(settings, memory))
    fits = not any(m.level == "error" for m in (*earlier, *messages))
    if fits:
        messages.extend(_cudagraph_headroom(settings, memory, blocks))
        messages.extend(_v0_watermark(settings, blocks, capacity))
    return Verdict(fits=fits, messages=tuple(messages))


V0_WATERMARK = 0.01  # BlockSpaceManager(watermark=0.01): blocks kept free so the cache does not thrash


def _v0_watermark(settings: Settings, blocks: Blocks, capacity: Concurrency) -> list[Message]:
    """V0 starts when one ``max_model_len`` request fits ``num_gpu_blocks × block_size``, but its block manager
    never schedules a prompt that would leave fewer than ``int(0.01 × num_gpu_blocks)`` blocks free
    (``vllm/core/block_manager_v2.py::can_allocate`` → ``AllocStatus.NEVER``; the scheduler then ignores the
    request, ``vllm/core/scheduler.py``, 0.6.3). Sliding-window models cap a prompt's blocks at the window, so
    only full-attention models are checked."""
    n_blocks, max_len = blocks.num_gpu_blocks, capacity.max_model_len
    if not settings.engine.v0 or n_blocks <= 0 or not max_len or settings.model.sliding_window is not None:
        return []
    block_size = blocks.layout.groups[0].spec.block_size
    watermark = int(V0_WATERMARK * n_blocks)
    if n_blocks - -(-max_len // block_size) >= watermark:
        return []
    longest = (n_blocks - watermark) * block_size
    return [
        Message(
            level="warning",
            code="v0_watermark_rejects_long_prompts",
            text=(
                f"vLLM starts, but never schedules a prompt longer than {fmt_int(longest)} tokens: the block manager "
                f'keeps a 1 % watermark ({watermark} of {n_blocks} blocks) free and logs "Input prompt (N tokens) + '
                'lookahead slots (0) is too long and exceeds the capacity of block_manager".'
            ),
        )
    ]


def _graph_estimate(settings: Settings, layers: tuple[int, int], largest_batch: int) -> Estimate:
    gpu = settings.gpu
    return estimate_cudagraph(
        settings.model,
        engine=settings.engine,
        tensor_parallel_size=settings.tensor_parallel_size,
        layers_on_rank=layers[1] - layers[0],
        max_num_seqs=settings.max_num_seqs,
        max_num_batched_tokens=largest_batch,
        dtype=settings.dtype,
        blackwell=gpu is not None and is_datacenter_blackwell(gpu),
        coefficients=settings.coefficients,
    )


def _graphs_after_kv_cache(settings: Settings) -> bool:
    """The release captures CUDA graphs after sizing the KV cache without charging them to the budget, on a GPU
    whose overheads kvcap estimates (no KV budget given, not eager)."""
    return (
        settings.gpu is not None
        and settings.device != "cpu"
        and not settings.enforce_eager
        and settings.kv_cache_memory_bytes is None
        and bool(settings.engine.overheads)
        and not settings.engine.subtracts_cudagraphs
    )


def _warm_up_after_kv_cache(settings: Settings, memory: MemoryBudget) -> list[Message]:
    """V1 before 0.20: the CUDA graphs and the sampler warm-up must fit in what the KV cache left.

    ``gpu_worker.py::compile_or_warm_up_model`` (read in the V1 worker of 0.8 and in a main after 0.19; the 0.19.0
    logs of cases 2031/2032 show the same order: "CUDA graph pool memory", then the warm-up's OOM) runs after
    ``initialize_from_config`` allocated the KV cache: ``capture_model()``, then on the last pipeline
    rank ``_dummy_run(min(max_num_seqs, max_num_batched_tokens), cudagraph_runtime_mode=NONE)`` and
    ``_dummy_sampler_run`` on those rows (``gpu_model_runner.py``), whose out-of-memory error is re-raised as
    "CUDA out of memory occurred when warming up sampler with {num_reqs} dummy requests. …". The KV cache took
    the budget less the profiled terms, so what is left on the device is the ``1 − gpu_memory_utilization``
    share plus the activation peak the profile charged (free again after ``profile_run``). Before 0.20 the
    graphs are not charged to the budget (estimated from 0.19, subtracted from 0.20), so they come out of it::

        left     = (total − budget) + activation peak
        warm-up  = CUDA graphs + R × vocab × B/logit (``sampler_logits_bytes``) + R × hidden × dtype bytes

    The profile run sampled the same R rows (``profile_run`` → ``_dummy_sampler_run(last_hidden_states)``, one
    row per dummy request), so without graphs the warm-up always fits; with them it fails once the graphs eat
    more than ``left − sampler``, and the capture itself fails first once they exceed ``left``. ``left`` is an
    upper bound: memory held before the profiling snapshot (CUDA context, NCCL communicators from 0.11) and the
    caching allocator's fragmentation are not modelled, so the check errs towards "starts".
    """
    engine = settings.engine
    if engine.v0 or not _graphs_after_kv_cache(settings):
        return []
    last = memory.stages[-1]
    requests = min(settings.max_num_seqs, settings.max_num_batched_tokens)
    graphs = _graph_estimate(settings, last.layers, settings.max_num_batched_tokens)
    b = MODEL_DTYPE_BYTES[normalize_model_dtype(settings.dtype or settings.model.torch_dtype)]
    sampler = sampler_logits_bytes(
        settings.model,
        engine=engine,
        requests=requests,
        dtype=settings.dtype,
        flashinfer=settings.features.flashinfer_sampler if settings.features else True,
        coefficients=settings.coefficients,
    )
    need = sampler + requests * settings.model.hidden_size * b
    headroom = last.total_bytes - last.budget_bytes
    left = int(headroom + last.overheads.activation.bytes)
    if graphs.bytes + need <= left:
        return []
    figures = (
        f"after the KV cache {gib(left)} GiB are left ({gib(headroom)} GiB outside the gpu_memory_utilization "
        f"budget + the {gib(last.overheads.activation.bytes)} GiB activation peak); CUDA graphs take about "
        f"{gib(graphs.bytes)} GiB ({graphs.formula})"
    )
    if graphs.bytes > left:
        return [
            Message(
                level="error",
                code="cudagraph_capture_oom",
                text=f"CUDA out of memory while capturing CUDA graphs: {figures}. Lower gpu_memory_utilization or pass --enforce-eager.",
            )
        ]
    return [
        Message(
            level="error",
            code="sampler_warmup_oom",
            text=(
                f"CUDA out of memory occurred when warming up sampler with {requests} dummy requests. Please try "
                "lowering `max_num_seqs` or `gpu_memory_utilization` when initializing the engine. "
                f"({figures}, the warm-up's logits and hidden states {gib(need)} GiB more.)"
            ),
        )
    ]


def _cudagraph_headroom(settings: Settings, memory: MemoryBudget, blocks: Blocks) -> list[Message]:
    """A start that passes every check but whose CUDA-graph capture may not fit.

    V0 (``Worker._warm_up_model`` → ``ModelRunner.capture_model``, 0.5.5 – 0.10) and V1 before 0.20
    (``GPUModelRunner.capture_model`` after ``initialize_kv_cache``) capture the graphs after the KV cache
    took its share, so they live in the ``1 − gpu_memory_utilization`` left over. V0 captures decode batches
    up to ``max_num_seqs`` (``_BATCH_SIZES_TO_CAPTURE``). When the estimate (``estimate_cudagraph``) exceeds
    that headroom vLLM logs its KV cache size, then can fail with CUDA out of memory while capturing.
    """
    engine, gpu = settings.engine, settings.gpu
    if gpu is None or not _graphs_after_kv_cache(settings):
        return []
    stage = blocks.heaviest
    largest_batch = (
        min(settings.max_num_batched_tokens, settings.max_num_seqs)
        if engine.v0
        else settings.max_num_batched_tokens
    )
    estimate = _graph_estimate(settings, stage.layers, largest_batch)
    headroom = memory.total_bytes - memory.budget_bytes
    if estimate.bytes <= headroom:
        return []
    # The largest utilisation whose headroom total × (1 − u) holds the estimate, rounded down to 0.01.
    most = math.floor((1 - estimate.bytes / memory.total_bytes) * 100) / 100
    lower = f"set --gpu-memory-utilization ≤ {most:.2f}" if most > 0 else "lower gpu_memory_utilization"
    return [
        Message(
            level="warning",
            code="cudagraph_capture_may_oom",
            text=(
                f"CUDA graphs are captured after the KV cache is allocated, in the memory gpu_memory_utilization "
                f"leaves free: about {gib(estimate.bytes)} GiB ({estimate.formula}) against {gib(headroom)} GiB left. "
                "vLLM may log its KV cache size and then fail with CUDA out of memory while capturing CUDA graphs; "
                f"{lower} or pass --enforce-eager."
            ),
        )
    ]


def _extensible_refusal(
    settings: Settings, blocks: Blocks, check: LengthCheck, length: int, estimate: int
) -> tuple[int, int, int, str]:
    """(needed, available, estimated length, hint) of 0.34's refusal under the extensible KV cache.

    ``get_kv_cache_configs`` checks first against the capacity before warm-up (``tentative``); a request that
    passes there is checked again after warm-up and capture (``shrink_kv_cache_configs``) against the measured
    blocks less the null block. Each names its hint (``_more_kv_cache_memory_hint``,
    vllm/v1/core/kv_cache_planning.py, 0.34.0).
    """
    stages = blocks.stages
    util = settings.gpu_memory_utilization
    tentative = [s.tentative for s in stages]
    if all(t is not None for t in tentative):
        before = tuple(
            s._replace(available=t) for s, t in zip(stages, tentative, strict=True) if t is not None
        )
        worst = min(before, key=lambda s: s.available)
        if not check.fits(before, length):
            needed, available = check.refusal_figures(before, worst, length)
            limit = settings.derived_max_model_len or length
            return needed, available, check.largest_fitting(before, limit), _extensible_hint(util, False)
    # After warm-up the check reads the committed blocks, ``(num_blocks − 1) × bytes per block``.
    worst = blocks.worst
    needed, _ = check.refusal_figures(stages, worst, length)
    available = (worst.num_gpu_blocks - 1) * worst.layout.bytes_per_block
    return needed, available, estimate, _extensible_hint(util, True)


def _extensible_hint(utilization: float, after_warmup: bool) -> str:
    """``_more_kv_cache_memory_hint`` (vllm/v1/core/kv_cache_planning.py, 0.34.0) with the extensible KV cache."""
    used_by = (
        "the model, its activations, CUDA graphs and warmup"
        if after_warmup
        else "the model and its activations"
    )
    graphs = (
        " CUDA graphs take less with fewer or smaller capture sizes in the compilation config."
        if after_warmup
        else ""
    )
    if utilization < 1.0:
        return (
            f"The KV cache gets what is left after {used_by} within `gpu_memory_utilization`={utilization}; "
            "increase it (with the extensible KV cache it defaults to 1.0) or decrease `max_model_len` or "
            f"`max_num_seqs`.{graphs}"
        )
    return (
        f"The extensible KV cache already takes all device memory left after {used_by}; decrease "
        f"`max_model_len` or `max_num_seqs`, or the model needs a device with more memory.{graphs}"
    )


def max_len_message(
    engine: EngineProfile,
    length: int,
    estimate: int,
    needed: int,
    available: int,
    v0_tokens: int,
    *,
    hint: str | None = None,
) -> str:
    """vLLM's refusal when one max_model_len request does not fit, in the wording of the release (``hint``: 0.34's
    extensible KV cache names its own remedy, then "Decreasing `max_model_len` also reduces what is needed.")."""
    if engine.v0:
        return (
            f"The model's max seq len ({length}) is larger than the maximum number of tokens that can be stored in KV cache "
            f"({v0_tokens}). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine."
        )
    owner = "models's" if engine.message_style == "models's" else "model's"
    est = (
        f" Based on the available memory, the estimated maximum model length is {estimate}."
        if estimate > 0
        else ""
    )
    head = (
        f"To serve at least one request with the {owner} max seq len ({length}), ({needed / GIB:.2f} GiB KV cache is needed, "
        f"which is larger than the available KV cache memory ({available / GIB:.2f} GiB).{est}"
    )
    if hint is not None:
        return f"{head} {hint} Decreasing `max_model_len` also reduces what is needed."
    return f"{head} Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine."
