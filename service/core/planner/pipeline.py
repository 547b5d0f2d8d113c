"""The plan as a pipeline of named stages, each a pure function with a typed result::

    settings → weights → budget and overheads → layout → blocks → concurrency → verdict → suggestions

and the breakdown that explains the numbers. Release differences live on the engine profile
(``service.core.engines.EngineProfile``), which every stage reads from ``Settings.engine``.

The stages hand each other immutable ``NamedTuple`` records rather than frozen dataclasses: sweeps plan
thousands of times per request, and a frozen dataclass's ``__init__`` (one ``object.__setattr__`` per field)
costs about three times a tuple's. The public results (``results.py``) stay frozen dataclasses.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import NamedTuple

from service.core.kv_cache import bytes_per_token
from service.core.planner.blocks import (
    Blocks,
    Concurrency,
    LengthCheck,
    concurrency,
    count_blocks,
    is_attention_free,
    length_check,
)
from service.core.planner.breakdown import Breakdown, FixedTerms, explain, explain_fixed
from service.core.planner.features import FeatureCosts, feature_costs, feature_outcome
from service.core.planner.layout import Layout, lay_out
from service.core.planner.memory import MemoryBudget, memory_budget, stage_weights
from service.core.planner.request import PlanRequest
from service.core.planner.results import (
    CapacityPlan,
    KvCacheResult,
    MemoryResult,
    Message,
    ResolvedSettings,
    SharedResults,
    StageResult,
    projection_counts,
)
from service.core.planner.settings import LengthFree, Settings, length_free, settings_at_length
from service.core.planner.suggestions import suggest
from service.core.planner.verdict import Verdict, judge
from service.core.weights import WeightShare

_NO_BREAKDOWN = Breakdown(messages=(), terms=())  # verdict-only plans (sweeps) explain nothing


class Judged(NamedTuple):
    """Stages 1–7 of one plan: everything the verdict reads, and the verdict."""

    settings: Settings
    costs: FeatureCosts | None
    memory: MemoryBudget
    layout: Layout
    blocks: Blocks
    capacity: Concurrency
    earlier: tuple[Message, ...]
    verdict: Verdict
    fixed: Fixed | None  # the cached stages 2–5 (plans without serving features)


class Fixed(NamedTuple):
    """Stages 2–5 of a plan without serving features, and what the plan reads of them: none of it reads the
    length (``fixed_stages``)."""

    shares: tuple[WeightShare, ...]
    memory: MemoryBudget
    layout: Layout
    blocks: Blocks
    check: LengthCheck
    shared: SharedResults  # the result's memory and stages, and the breakdown's terms up to the block count
    terms: FixedTerms | None  # plans with a breakdown only
    longest: dict[int, int]  # the longest request that fits, by search limit (``blocks.concurrency``)


def fixed_stages(settings: Settings) -> Fixed:
    """Weights, budget, layout, blocks and the length check of ``settings``, computed once per configuration.

    They read the model, the GPU, the engine, the dtypes, TP × PP, the utilisation, the batch sizes and the
    block settings — never the length (``max_model_len`` only sets an attention-free model's block), the
    settings' messages or the length search's bound. So the cache is keyed on the settings with those fields
    blanked, and on the type of every field (``1`` and ``1.0`` print differently in a formula). A catalog that
    changes a model or a GPU hands the planner a different spec, hence a different key: nothing is
    invalidated by hand, and an entry never outlives a spec it was not computed from.
    """
    length = settings.max_model_len if is_attention_free(settings.model) else 0
    key = settings._replace(
        max_model_len=length, derived_max_model_len=None, max_model_len_auto=False, messages=()
    )
    return _fixed(key, tuple(map(type, settings)))


@lru_cache(maxsize=4096)
def _fixed(settings: Settings, _types: tuple[type, ...]) -> Fixed:
    shares = stage_weights(settings)
    memory = memory_budget(settings, shares)
    layout = lay_out(settings, shares)
    block_size = layout.block_size
    blocks = count_blocks(settings, layout, memory)
    check = length_check(settings, block_size, blocks)
    profiled = settings.kv_cache_memory_bytes is None
    terms = (
        explain_fixed(settings, block_size, memory, blocks, bytes_per_token(blocks.worst.specs))
        if settings.detail
        else None
    )
    shared = SharedResults(
        memory=_memory_result(memory, blocks, profiled),
        stages=_stage_results(blocks),
        terms=terms.terms if terms is not None else (),
    )
    return Fixed(
        shares=shares,
        memory=memory,
        layout=layout,
        blocks=blocks,
        check=check,
        shared=shared,
        terms=terms,
        longest={},
    )


FIXED_PER_CONFIGURATION = 4
"""Stages kept per configuration: the batch sizes of the shortest lengths, with and without ``detail``. V0
without chunked prefill batches a whole prompt (one set per length): those fall through to ``_fixed``'s own
cache. With ``settings._LENGTH_FREE_MAX`` configurations this keeps at most as many as ``_fixed`` does."""


def fixed_for(base: LengthFree, settings: Settings) -> Fixed:
    """``fixed_stages(settings)``, kept with the configuration's ``LengthFree`` (``settings`` is
    ``settings_at_length`` of it) by the settings that vary within a configuration and that the stages read:
    the batch sizes and chunked prefill that follow the length, ``detail``, and an attention-free model's
    length. Every other field of ``settings`` comes from the request fields that key ``base``."""
    length = settings.max_model_len if is_attention_free(settings.model) else 0
    varying = (
        settings.max_num_seqs,
        settings.max_num_batched_tokens,
        settings.enable_chunked_prefill,
        settings.detail,
        length,
    )
    key = (varying, tuple(map(type, varying)))
    memo = base.fixed
    found = memo.get(key)
    if found is None:
        found = fixed_stages(settings)
        if len(memo) >= FIXED_PER_CONFIGURATION:
            memo.clear()
        memo[key] = found
    return found


def judged(request: PlanRequest) -> Judged:
    """Settings through the verdict (stages 1–7), without suggestions or the breakdown."""
    base = length_free(request)
    settings = settings_at_length(request, base)
    if settings.features is None:
        fixed = fixed_for(base, settings)
        return _judge(settings, None, fixed.memory, fixed.layout, fixed.blocks, fixed.check, fixed)
    shares = stage_weights(settings)
    costs = serving_feature_costs(settings, shares)
    memory = memory_budget(settings, shares, costs.weight_delta, costs.activation_delta)
    layout = lay_out(settings, shares, costs.draft_specs, costs.num_speculative_tokens)
    blocks = count_blocks(settings, layout, memory)
    check = length_check(settings, layout.block_size, blocks)
    return _judge(settings, costs, memory, layout, blocks, check, None)


def _judge(
    settings: Settings,
    costs: FeatureCosts | None,
    memory: MemoryBudget,
    layout: Layout,
    blocks: Blocks,
    check: LengthCheck,
    fixed: Fixed | None,
) -> Judged:
    capacity = concurrency(settings, layout.block_size, blocks, check, fixed.longest if fixed else None)
    earlier = (*settings.messages, *layout.messages, *capacity.messages)
    if costs is not None:
        earlier = (*earlier, *costs.messages)
    verdict = judge(settings, memory, blocks, check, capacity, earlier)
    return Judged(settings, costs, memory, layout, blocks, capacity, earlier, verdict, fixed)


def fits(request: PlanRequest) -> bool:
    """Whether ``request`` starts: ``plan(request).fits`` without building the plan (what suggestions ask)."""
    return judged(request).verdict.fits


def plan(request: PlanRequest) -> CapacityPlan:
    """What vLLM will allocate for ``request``, and whether it will start."""
    settings, costs, memory, layout, blocks, capacity, earlier, verdict, fixed = judged(request)
    block_size = layout.block_size
    suggestions = (
        suggest(request, settings, capacity.max_model_len, capacity.max_model_len_that_fits, fits)
        if request.suggest and not verdict.fits
        else ()
    )
    breakdown = (
        explain(settings, block_size, memory, blocks, capacity, fixed.terms if fixed else None)
        if request.detail
        else _NO_BREAKDOWN
    )
    features = None
    if costs is not None:
        features, feature_terms, feature_messages = feature_outcome(
            costs,
            tensor_parallel_size=settings.tensor_parallel_size,
            pipeline_parallel_size=settings.pipeline_parallel_size,
            num_gpu_blocks=blocks.num_gpu_blocks,
            max_model_len=capacity.max_model_len,
            max_concurrency=capacity.max_concurrency,
            request_blocks=capacity.blocks_per_request,
            block_size=block_size,
            bytes_per_token=capacity.bytes_per_token,
            num_groups=len(blocks.layout.groups),
            layout=blocks.layout,
        )
        if request.detail:
            breakdown = Breakdown(
                messages=(*breakdown.messages, *feature_messages),
                terms=(*breakdown.terms, *costs.terms, *feature_terms),
            )

    engine, kv_bytes = settings.engine, settings.kv_cache_memory_bytes
    lay = blocks.layout
    n_blocks, max_len = blocks.num_gpu_blocks, capacity.max_model_len
    per_token = capacity.bytes_per_token
    profiled = kv_bytes is None
    return CapacityPlan(
        settings=ResolvedSettings(
            engine=engine.engine,
            profile=engine.profile,
            device=settings.device,
            tensor_parallel_size=settings.tensor_parallel_size,
            pipeline_parallel_size=settings.pipeline_parallel_size,
            max_model_len=max_len,
            kv_cache_dtype=settings.kv_dtype.name,
            kv_cache_element_bytes=settings.kv_dtype.bytes_per_element(settings.dtype),
            quantization=settings.quantization.name if settings.quantization else None,
            dtype=settings.dtype,
            gpu_memory_utilization=settings.gpu_memory_utilization if profiled else None,
            kv_cache_memory_bytes=kv_bytes,
            block_size=block_size,
            max_num_seqs=settings.max_num_seqs,
            max_num_batched_tokens=settings.max_num_batched_tokens,
            enforce_eager=settings.enforce_eager,
            async_scheduling=settings.async_scheduling,
            enable_chunked_prefill=settings.enable_chunked_prefill,
            enable_prefix_caching=settings.enable_prefix_caching,
            disable_sliding_window=request.disable_sliding_window,
            pipeline_layer_partition=settings.layer_partition,
            pipeline_stage_gpus=tuple(g.name for g in settings.stage_gpus) if settings.stage_gpus else None,
        ),
        kv_cache=KvCacheResult(
            bytes_per_token=per_token,
            bytes_per_block=lay.bytes_per_block,
            page_size_bytes=lay.page_size_bytes,
            block_size=block_size,
            num_gpu_blocks=max(n_blocks, 0),
            usable_blocks=max(n_blocks - (0 if engine.profile == "ideal" else 1), 0),
            kv_cache_size_tokens=max(capacity.kv_cache_size_tokens, 0),
            max_concurrency=max(capacity.max_concurrency, 0.0),
            max_concurrent_sequences=max(math.floor(capacity.max_concurrency), 0),
            blocks_per_request=capacity.blocks_per_request,
            bytes_per_sequence=per_token * max_len,
            bytes_for_max_num_seqs=per_token * max_len * settings.max_num_seqs,
            num_groups=len(lay.groups),
            group_size=lay.group_size,
            padding_layers=lay.padding_layers,
            num_gpu_blocks_low=max(blocks.num_gpu_blocks_low, 0),
            num_gpu_blocks_high=max(blocks.num_gpu_blocks_high, 0),
        ),
        memory=fixed.shared.memory if fixed else _memory_result(memory, blocks, profiled),
        fits=verdict.fits,
        max_model_len_that_fits=capacity.max_model_len_that_fits,
        messages=(*earlier, *verdict.messages, *breakdown.messages),
        suggestions=suggestions,
        breakdown=breakdown.terms,
        stages=fixed.shared.stages if fixed else _stage_results(blocks),
        projections=(
            projection_counts(request.prompt_tokens, request.output_tokens)
            if request.prompt_tokens and request.output_tokens
            else None
        ),
        exact=settings.exact,
        features=features,
        layout=lay,
        in_flight_tokens=capacity.in_flight_tokens,
        state_pages=capacity.state_pages,
        shared=fixed.shared if fixed else None,
    )


def _memory_result(memory: MemoryBudget, blocks: Blocks, profiled: bool) -> MemoryResult:
    worst = blocks.worst
    return MemoryResult(
        total_bytes=memory.total_bytes,
        budget_bytes=int(memory.budget_bytes) if profiled else 0,
        weights_bytes=worst.weights_bytes,
        activation_bytes=worst.overheads.activation.bytes if profiled else 0,
        non_torch_bytes=worst.overheads.non_torch.bytes if profiled else 0,
        cudagraph_bytes=worst.overheads.cudagraph.bytes if profiled else 0,
        kv_cache_bytes=worst.available,
        kv_cache_used_bytes=blocks.num_gpu_blocks * blocks.layout.bytes_per_block,
        kv_cache_bytes_low=worst.available_low,
        kv_cache_bytes_high=worst.available_high,
    )


def _stage_results(blocks: Blocks) -> tuple[StageResult, ...]:
    return tuple(
        StageResult(
            stage=s.stage,
            layers=s.layers,
            weights_bytes=s.weights_bytes,
            kv_cache_bytes=s.available,
            num_gpu_blocks=s.num_gpu_blocks,
        )
        for s in blocks.stages
    )


def serving_feature_costs(settings: Settings, shares: tuple[WeightShare, ...]) -> FeatureCosts:
    """Stage 2b, only when the request names serving features: their weights and KV layers per GPU."""
    assert settings.features is not None
    return feature_costs(
        settings.features,
        model=settings.model,
        quantization=settings.quantization,
        engine=settings.engine,
        dtype=settings.dtype,
        kv_dtype=settings.kv_dtype,
        block_size=settings.block_size,
        tensor_parallel_size=settings.tensor_parallel_size,
        stage_layers=tuple(s.layers for s in shares),
        stage_weights=tuple(s.total_bytes for s in shares),
        stage_experts=tuple(s.expert_bytes for s in shares),
        max_num_seqs=settings.max_num_seqs,
        max_num_batched_tokens=settings.max_num_batched_tokens,
    )
