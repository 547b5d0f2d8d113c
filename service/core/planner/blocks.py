"""Stages 5 and 6, blocks and concurrency: how many blocks fit, and how many requests they hold.

::

    num_gpu_blocks = available // page_size // group_size        (min over pipeline stages)
    concurrency    = num_gpu_blocks / blocks one max_model_len request needs
                     (V0: num_gpu_blocks × block_size / max_model_len)
    tokens         = int(concurrency × max_model_len)            (0.21+; blocks // groups × block before)

and the longest request the cache holds, as the release's start-up check measures it
(``vllm/v1/core/kv_cache_utils.py::check_enough_kv_cache_memory``; V0: ``max_seq_len`` against
``num_gpu_blocks × block_size`` in ``vllm/worker/worker.py::raise_if_cache_size_invalid``). Under pipeline
parallelism each stage is checked against its own layers, except in 0.14 – 0.16, whose ``get_kv_cache_configs``
checks one request over the whole model's layers (the stages' specs merged) against the smallest stage's memory.
"""

from __future__ import annotations

from typing import NamedTuple

from service.core.engines import EngineProfile
from service.core.kv_cache import (
    KvLayout,
    LayerKvSpec,
    SpecCounts,
    blocks_per_request,
    bytes_per_token,
    group_layers,
    num_blocks,
)
from service.core.overheads import Overheads
from service.core.planner.layout import Layout
from service.core.planner.memory import MemoryBudget
from service.core.planner.results import Message
from service.core.planner.settings import Settings
from service.core.specs import ModelSpec
from service.core.units import fmt_int


class PipelineStage(NamedTuple):
    """One pipeline stage as the cache sees it: its layout beside its memory."""

    stage: int
    layers: tuple[int, int]
    specs: SpecCounts
    layout: KvLayout
    weights_bytes: int
    overheads: Overheads
    available: int
    available_low: int
    available_high: int
    num_gpu_blocks: int
    margin_bytes: int = 0  # the extensible KV cache's sizing margin (0.34+, ``measured_kv_cache_bytes``)
    tentative: int | None = None  # its capacity before warm-up (``StageMemory.tentative_bytes``)


class Blocks(NamedTuple):
    stages: tuple[PipelineStage, ...]
    num_gpu_blocks: int  # min over stages; vLLM allocates the same count on every rank
    num_gpu_blocks_low: int
    num_gpu_blocks_high: int
    worst: PipelineStage  # the stage with the fewest blocks
    heaviest: PipelineStage  # the stage with the most weights (not always the worst under PP)
    layout: KvLayout  # the first stage's (what the engine reports)


def count_blocks(settings: Settings, layout: Layout, memory: MemoryBudget) -> Blocks:
    """Stage 5: blocks per pipeline stage (``get_num_blocks``), the minimum, and its band."""
    override = settings.num_gpu_blocks_override

    def blocks_for(lay: KvLayout, available: int) -> int:
        return override if override is not None else num_blocks(available, lay)

    stages = tuple(
        PipelineStage(
            stage=mem.stage,
            layers=mem.layers,
            specs=lay.specs,
            layout=lay.layout,
            weights_bytes=mem.weights_bytes,
            overheads=mem.overheads,
            available=mem.available_bytes,
            available_low=mem.available_low_bytes,
            available_high=mem.available_high_bytes,
            num_gpu_blocks=blocks_for(lay.layout, mem.available_bytes),
            margin_bytes=mem.margin_bytes,
            tentative=mem.tentative_bytes,
        )
        for lay, mem in zip(layout.stages, memory.stages, strict=True)
    )
    blocks = min(s.num_gpu_blocks for s in stages)
    if settings.detail:
        low = min(blocks_for(s.layout, s.available_low) for s in stages)
        high = min(blocks_for(s.layout, s.available_high) for s in stages)
    else:  # verdict-only plans (sweeps) do not report the band
        low = high = blocks
    single = len(stages) == 1
    worst = stages[0] if single else min(stages, key=lambda s: s.num_gpu_blocks)
    return Blocks(
        stages=stages,
        num_gpu_blocks=blocks,
        num_gpu_blocks_low=low,
        num_gpu_blocks_high=high,
        worst=worst,
        heaviest=worst if single else max(stages, key=lambda s: s.weights_bytes),
        layout=stages[0].layout,
    )


class Concurrency(NamedTuple):
    max_model_len: int  # after ``--max-model-len auto``
    max_model_len_that_fits: int
    requested_fits: bool  # one request of the asked length fits (before auto-fit)
    in_flight_tokens: int
    state_pages: int
    blocks_per_request: int
    max_concurrency: float
    kv_cache_size_tokens: int
    bytes_per_token: int
    messages: tuple[Message, ...]


def in_flight_tokens(engine: EngineProfile, *, mnbt: int, async_scheduling: bool, pp: int) -> int:
    """Tokens a sliding-window layer must keep beyond its window (``max_in_flight_tokens``, 0.28+)."""
    if engine.in_flight_batches_async == 1:
        return mnbt
    if async_scheduling:
        batches = pp + 1 if engine.in_flight_batches_pp_plus_one else (2 if pp == 1 else pp)
    else:
        batches = pp
    return batches * mnbt


class WholeModel(NamedTuple):
    """Every stage's layers as one spec set (``merged_kv_cache_specs`` → ``get_kv_cache_groups``)."""

    specs: SpecCounts
    layout: KvLayout


class LengthCheck(NamedTuple):
    """vLLM's start-up check of one request's length, with the release's arithmetic."""

    engine: EngineProfile
    in_flight_tokens: int
    state_pages: int
    num_gpu_blocks_override: int | None
    v0_capacity_tokens: int  # V0: block_size × blocks per pipeline stage
    whole_model: WholeModel | None = None  # 0.14 – 0.16 under PP: the check measures every layer at once

    def needed_bytes(self, stage: PipelineStage | WholeModel, length: int) -> int:
        """Bytes the check demands for one request of ``length`` tokens (per release)."""
        lay, engine = stage.layout, self.engine
        if engine.refusal_per_layer:
            return sum(
                s.max_blocks_per_request(
                    max_model_len=length, in_flight_tokens=self.in_flight_tokens, state_pages=self.state_pages
                )
                * s.page_size_bytes
                * n
                for s, n in stage.specs
            )
        if engine.refusal_counts_first_group_only:
            first = lay.groups[0].spec
            return (
                lay.group_size
                * lay.page_size_bytes
                * first.max_blocks_per_request(
                    max_model_len=length, in_flight_tokens=self.in_flight_tokens, state_pages=self.state_pages
                )
            )
        return lay.bytes_per_block * self.blocks_per_request(lay, length)

    def blocks_per_request(self, lay: KvLayout, length: int) -> int:
        return blocks_per_request(
            lay, max_model_len=length, in_flight_tokens=self.in_flight_tokens, state_pages=self.state_pages
        )

    def available_bytes(self, stage: PipelineStage) -> int:
        """The memory the check compares against: from 0.21 an override's blocks, from 0.30 less the null block."""
        available = stage.available
        engine = self.engine
        if self.num_gpu_blocks_override is not None and engine.override_blocks_in_checks:
            available = self.num_gpu_blocks_override * stage.layout.bytes_per_block
        if engine.null_block_in_checks:
            available -= stage.layout.bytes_per_block
        return available

    def refusal_figures(
        self, stages: tuple[PipelineStage, ...], worst: PipelineStage, length: int
    ) -> tuple[int, int]:
        """(needed, available) as the refusal reports them: the worst stage's, or under the whole-model check
        (0.14 – 0.16) the whole model's need against ``min(available_memory)`` over the stages."""
        if self.whole_model is not None:
            return self.needed_bytes(self.whole_model, length), min(self.available_bytes(s) for s in stages)
        return self.needed_bytes(worst, length), self.available_bytes(worst)

    def fits(self, stages: tuple[PipelineStage, ...], length: int) -> bool:
        if self.engine.v0:
            return length <= self.v0_capacity_tokens
        if self.whole_model is not None:
            needed = self.needed_bytes(self.whole_model, length)
            return needed <= min(self.available_bytes(s) for s in stages)
        return all(self.needed_bytes(s, length) <= self.available_bytes(s) for s in stages)

    def largest_fitting(self, stages: tuple[PipelineStage, ...], limit: int) -> int:
        """Binary search for the longest request that passes the check (0 when not even one token does).

        The check is monotone in the length, so when the limit itself passes (the usual case: the model's
        whole context fits) it is the answer without a search.
        """
        if limit < 1 or not self.fits(stages, 1):
            return 0
        if self.fits(stages, limit):
            return limit
        lo, hi = 1, limit - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.fits(stages, mid):
                lo = mid
            else:
                hi = mid - 1
        return lo


def is_attention_free(model: ModelSpec) -> bool:
    """No attention layer at all (``ModelConfig.is_attention_free``): vLLM turns prefix caching off for these."""
    return not any(kind.is_attention for kind in model.resolved_layer_types)


def whole_model(engine: EngineProfile, stages: tuple[PipelineStage, ...]) -> WholeModel | None:
    """The merged specs of every pipeline stage, grouped as one model (``get_kv_cache_configs`` of 0.14.0 –
    0.16.0: "Merge the KV cache specs of all workers", then ``_check_enough_kv_cache_memory(min(available_memory),
    …)`` over the global groups; 0.17 checks each worker's projected groups again). None for one stage."""
    if len(stages) == 1 or not engine.refusal_over_whole_model:
        return None
    merged: dict[LayerKvSpec, int] = {}
    for stage in stages:
        for spec, count in stage.specs:
            merged[spec] = merged.get(spec, 0) + count
    specs = list(merged.items())
    return WholeModel(
        specs=specs, layout=group_layers(tuple(specs), uniform_ratio=engine.group_size_ratio or 1.0)
    )


def length_check(settings: Settings, block_size: int, blocks: Blocks) -> LengthCheck:
    engine = settings.engine
    return LengthCheck(
        engine=engine,
        in_flight_tokens=in_flight_tokens(
            engine,
            mnbt=settings.max_num_batched_tokens,
            async_scheduling=settings.async_scheduling,
            pp=settings.pipeline_parallel_size,
        ),
        # Align mode needs prefix caching, which attention-free models (Mamba, Mamba2) run without, and
        # --no-enable-prefix-caching turns off (mamba_cache_mode "none": MambaModelConfig.verify_and_update_config,
        # vllm/model_executor/models/config.py, 0.32.0).
        state_pages=2
        if engine.mamba_align and settings.enable_prefix_caching and not is_attention_free(settings.model)
        else 1,
        num_gpu_blocks_override=settings.num_gpu_blocks_override,
        v0_capacity_tokens=block_size * (blocks.num_gpu_blocks // settings.pipeline_parallel_size),
        whole_model=whole_model(engine, blocks.stages),
    )


LONGEST_REMEMBERED = 64
"""Search limits remembered per configuration (the model's derived length, or the lengths asked without one)."""


def concurrency(
    settings: Settings,
    block_size: int,
    blocks: Blocks,
    check: LengthCheck,
    longest: dict[int, int] | None = None,
) -> Concurrency:
    """Stage 6: the longest request that fits, ``--max-model-len auto``, concurrency and the logged token count.

    ``longest`` remembers ``check.largest_fitting(blocks.stages, limit)`` by limit for these very blocks and
    check (``pipeline.fixed_stages`` keeps one with them): the search reads nothing else."""
    engine = settings.engine
    messages: list[Message] = []
    max_len = settings.max_model_len
    n_blocks = blocks.num_gpu_blocks
    search_limit = settings.derived_max_model_len or max_len
    requested_fits = bool(n_blocks > 0 and max_len and check.fits(blocks.stages, max_len))
    # The largest length that fits is a search; verdict-only plans (sweeps) skip it unless it decides the length.
    if settings.detail or settings.max_model_len_auto:
        known = longest.get(search_limit) if longest is not None else None
        if known is None:
            known = check.largest_fitting(blocks.stages, search_limit)
            if longest is not None and len(longest) < LONGEST_REMEMBERED:
                longest[search_limit] = known
        max_len_fits = known
    else:
        max_len_fits = max_len if requested_fits else 0
    if settings.max_model_len_auto:
        if max_len_fits == 0:
            messages.append(
                Message(
                    level="error",
                    code="auto_fit_failed",
                    text="Cannot auto-fit max_model_len: not enough GPU memory available to serve even a single token. Try increasing `gpu_memory_utilization`.",
                )
            )
        else:
            verb = "full model context length" if max_len_fits == search_limit else "reduced"
            messages.append(
                Message(
                    level="info",
                    code="auto_fit",
                    text=f"Auto-fit max_model_len: {verb} {fmt_int(max_len_fits)}",
                )
            )
            max_len = max_len_fits

    layout = blocks.layout
    request_blocks = check.blocks_per_request(layout, max_len) if max_len else 0
    if engine.v0:
        concurrency_value = n_blocks * block_size / max_len if max_len else 0.0
        kv_tokens = n_blocks * block_size
    else:
        concurrency_value = n_blocks / request_blocks if request_blocks else 0.0
        if engine.tokens_from_concurrency:
            kv_tokens = int(concurrency_value * max_len)
        else:
            kv_tokens = n_blocks // len(layout.groups) * min(g.spec.block_size for g in layout.groups)
    return Concurrency(
        max_model_len=max_len,
        max_model_len_that_fits=max_len_fits,
        requested_fits=requested_fits,
        in_flight_tokens=check.in_flight_tokens,
        state_pages=check.state_pages,
        blocks_per_request=request_blocks,
        max_concurrency=concurrency_value,
        kv_cache_size_tokens=kv_tokens,
        bytes_per_token=bytes_per_token(blocks.worst.specs),
        messages=tuple(messages),
    )
