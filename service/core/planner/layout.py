"""Stage 4, layout: which layers store what, in pages of which size, grouped how (vLLM's KV-cache spec).

Per pipeline stage: the layers' specs (``service.core.kv_cache.layer_spec_counts``), charged the way the
release pages them (V0 pages every attention layer alike; chunked local attention as full before 0.13), page
sizes unified across attention and state layers, and layers cut into groups that share one pool
(``vllm/v1/core/kv_cache_utils.py``: ``unify_kv_cache_spec_page_size``, ``_get_kv_cache_groups_uniform_page_size``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import NamedTuple

from service.core.dtypes import KvCacheDtype
from service.core.engines import EngineProfile
from service.core.errors import InvalidSpec
from service.core.kv_cache import (
    KvLayout,
    LayerKvSpec,
    SpecCounts,
    group_layers,
    kv_heads_per_rank,
    layer_spec_counts,
    unify_page_sizes,
)
from service.core.planner.results import Message
from service.core.planner.settings import Settings
from service.core.specs import LayerType, ModelSpec
from service.core.weights import WeightShare


class StageLayout(NamedTuple):
    stage: int
    specs: SpecCounts  # distinct layer specs on this stage's GPU, with how many layers use each
    layout: KvLayout


class Layout(NamedTuple):
    stages: tuple[StageLayout, ...]
    block_size: int  # as vLLM ends up with it (hybrids raise it so attention and state pages match)
    messages: tuple[Message, ...]


def lay_out(
    settings: Settings,
    shares: tuple[WeightShare, ...],
    draft_specs: SpecCounts | None = None,
    num_speculative_tokens: int = 0,
) -> Layout:
    """The KV layout of every pipeline stage, and the block size the pages settle on.

    ``draft_specs``: a draft model's or EAGLE/MTP head's attention layers, registered in the same KV cache
    config as the target's and so paged in the same pool; they run with the last stage
    (``vllm/v1/worker/gpu_model_runner.py::get_kv_cache_spec``). ``num_speculative_tokens`` sizes the Mamba
    state's speculative rows and pages (V1)."""
    engine = settings.engine
    block_size = settings.block_size
    stages: list[StageLayout] = []
    notes: list[str] = []
    for share in shares:
        specs, stage_notes = _stage_specs(
            settings.model,
            engine,
            settings.kv_dtype,
            block_size,
            settings.tensor_parallel_size,
            range(*share.layers),
            settings.dtype,
            num_speculative_tokens,
        )
        if draft_specs and share.stage == len(shares) - 1:
            specs = _merge(specs, draft_specs)
        if any(s.is_state for s, _ in specs) and any(not s.is_state for s, _ in specs):
            specs, raised_block, note = unify_page_sizes(
                specs,
                kernel_block_alignment=_hybrid_block_alignment(settings),
                attention_bytes_per_token=_config_bytes_per_token(settings.model, specs),
            )
            if raised_block != block_size:
                block_size = raised_block  # the next stage's specs start from the raised size, as vLLM's one config does
            stage_notes.append(note)  # vLLM logs the Mamba page padding whether or not the block was raised
        specs, note = _unify_attention_pages(specs)
        if note:
            stage_notes.append(note)
        # Before 0.12 the smallest bucket always set the group size (a ratio of 1 never picks the largest).
        layout = group_layers(tuple(specs), uniform_ratio=engine.group_size_ratio or 1.0)
        stages.append(StageLayout(stage=share.stage, specs=specs, layout=layout))
        notes.extend(n for n in stage_notes if n not in notes)
    if not any(kind.is_attention for kind in settings.model.resolved_layer_types) and not engine.v0:
        # Attention-free models run without prefix caching, so a Mamba "block" spans a whole request:
        # ``mamba_block_size = max_model_len`` (HybridAttentionMambaModelConfig / MambaModelConfig, V1).
        block_size = settings.max_model_len
        stages = [
            StageLayout(
                stage=s.stage,
                specs=[(replace(spec, block_size=block_size), n) for spec, n in s.specs],
                layout=s.layout,
            )
            for s in stages
        ]
    messages = [Message(level="info", code="layout", text=note) for note in notes]
    messages.extend(
        Message(level="warning", code="padding_layers", text=padding_note)
        for padding_note in stages[0].layout.notes
    )
    return Layout(stages=tuple(stages), block_size=block_size, messages=tuple(messages))


def _config_bytes_per_token(model: ModelSpec, specs: SpecCounts) -> int | None:
    """The attention page per token vLLM sizes a hybrid's block from when the config's head_dim is not the layers'
    (``ModelSpec.config_head_dim``): ``HybridAttentionMambaModelConfig`` (vllm/platforms/interface.py, 0.32.0)
    takes ``model_config.get_head_size()``; the layers page their own heads."""
    if model.config_head_dim is None:
        return None
    attention = [s for s, _ in specs if not s.is_state and s.kind is not LayerType.MLA]
    if not attention:
        return None
    return max(replace(s, head_size=model.config_head_dim).bytes_per_token for s in attention)


def _hybrid_block_alignment(settings: Settings) -> int:
    """The grain of a hybrid's raised attention block (``Platform._align_hybrid_block_size``, vllm/platforms/
    interface.py): ``max(the backend's smallest kernel block, cache_config.block_size)``, at least 128 for MLA.

    The configured block size is the grain, not only a floor: on the CPU backend (128-token blocks, kernels in
    multiples of 32) a Mamba page is matched in steps of 128 tokens; FlashAttention's kernels take multiples of
    16, the GPU default block.
    """
    kernel = 32 if settings.device == "cpu" else 16
    alignment = max(kernel, settings.block_size)
    return max(alignment, 128) if settings.model.uses_mla else alignment


def _merge(counts: SpecCounts, more: SpecCounts) -> SpecCounts:
    merged: dict[LayerKvSpec, int] = dict(counts)
    for spec, count in more:
        merged[spec] = merged.get(spec, 0) + count
    return list(merged.items())


def _as_full(counts: SpecCounts, kinds: frozenset[LayerType]) -> SpecCounts:
    """Charge layers of ``kinds`` as full attention (their window limits attention, not memory)."""
    merged: dict[LayerKvSpec, int] = {}
    for spec, count in counts:
        if spec.kind in kinds:
            spec = replace(spec, kind=LayerType.FULL, window_tokens=None)
        merged[spec] = merged.get(spec, 0) + count
    return list(merged.items())


def _stage_specs(
    model: ModelSpec,
    engine: EngineProfile,
    kv_dtype: KvCacheDtype,
    block_size: int,
    tp: int,
    layers: range,
    dtype: str,
    num_speculative_tokens: int = 0,
) -> tuple[SpecCounts, list[str]]:
    notes: list[str] = []
    counts: SpecCounts = list(
        layer_spec_counts(
            model,
            kv_dtype=kv_dtype,
            block_size=block_size,
            tensor_parallel_size=tp,
            layers=layers,
            model_dtype=dtype,
            mamba_prefill_checkpoint=engine.mamba_prefill_checkpoint,
            num_speculative_tokens=0 if engine.v0 else num_speculative_tokens,
        )
    )
    present = {spec.kind for spec, _ in counts}
    if LayerType.MLA in present and not engine.mla_latent_cache:
        counts = _mla_as_heads(model, counts, engine, tp)
        notes.append("MLA layers cached as K and V of every KV head (no latent cache before vLLM 0.7.1)")
    if engine.v0:
        if present & {LayerType.SLIDING, LayerType.CHUNKED}:
            # V0 paged every attention layer the same way: a sliding window limits attention, not memory.
            counts = _as_full(counts, frozenset({LayerType.SLIDING, LayerType.CHUNKED}))
            notes.append("V0 engine: sliding-window layers are charged as full attention")
        counts = [(spec, n) for spec, n in counts if not spec.is_state]
    elif engine.chunked_local_as_full and LayerType.CHUNKED in present:
        counts = _as_full(counts, frozenset({LayerType.CHUNKED}))
        notes.append(
            "chunked local attention is charged as full attention (hybrid KV manager off by default before 0.15)"
        )
    return counts, notes


def _mla_as_heads(model: ModelSpec, counts: SpecCounts, engine: EngineProfile, tp: int) -> SpecCounts:
    """DeepSeek's MLA layers as V0 cached them before 0.7.1: a full-attention page of K and V for each of the
    rank's ``num_key_value_heads // tp`` heads, the head as wide as the query/key head (qk_nope_head_dim +
    qk_rope_head_dim), padded to 256 in 0.5 – 0.6 (``ModelConfig.get_head_size``; ``DeepseekV2Attention`` pads
    q, k and v to 256 before ``Attention``, vLLM 0.5.1)."""
    head = (model.qk_nope_head_dim or 0) + (model.qk_rope_head_dim or 0)
    padded = engine.mla_head_size_padded_to
    heads = kv_heads_per_rank(model.num_key_value_heads, tp)
    converted: dict[LayerKvSpec, int] = {}
    for spec, n in counts:
        if spec.kind is LayerType.MLA:
            spec = replace(spec, kind=LayerType.FULL, num_kv_heads=heads, head_size=max(head, padded or 0))
        converted[spec] = converted.get(spec, 0) + n
    return list(converted.items())


def _unify_attention_pages(counts: SpecCounts) -> tuple[SpecCounts, str]:
    """Raise smaller attention pages to the largest by multiplying their block size (``unify_kv_cache_spec_page_size``)."""
    pages = {s.page_size_bytes for s, _ in counts}
    if len(pages) <= 1:
        return counts, ""
    largest = max(pages)
    unified: SpecCounts = []
    for spec, n in counts:
        if spec.page_size_bytes == largest:
            unified.append((spec, n))
            continue
        if largest % spec.page_size_bytes:
            raise InvalidSpec(
                "The page size of the layer is not divisible by the maximum page size. Cannot unify by adjusting block_size.",
                field="model",
            )
        unified.append((replace(spec, block_size=spec.block_size * (largest // spec.page_size_bytes)), n))
    return unified, "layers with smaller pages get proportionally larger blocks so all pages are equal"
