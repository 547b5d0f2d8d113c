"""Serving features that change what vLLM allocates: speculative decoding, LoRA, weight offloading, KV
offloading, data/expert parallelism, multimodal towers and declared prefix sharing.

A plan without features (``PlanRequest.features is None``) never enters this module. With features, the stage
``feature_costs`` runs after the weights and before the budget, and hands the next stages three things:

* ``weight_delta`` per pipeline stage (bytes added to, or taken from, the weights one GPU holds), and
  ``activation_delta`` (the multimodal encoder's profile batch, first stage),
* ``draft_specs``: the KV layers a draft model or EAGLE/MTP head adds to the *same* pool (last stage),
* ``terms`` and ``messages`` for the breakdown and the verdict.

After the blocks are counted, ``feature_outcome`` states what the features change about capacity (lookahead
slots, DP replicas, CPU KV capacity, prefix sharing) as the public ``FeaturesResult``.

Rules, each read from vLLM's source of the release named:

* LoRA (``vllm/lora/layers/base_linear.py::BaseLinearLayerWithLoRA.create_lora_weights``, 0.11+; the same shapes
  in ``vllm/lora/layers.py`` before): every target linear layer preallocates, per slice, ``lora_a_stacked``
  ``(max_loras, 1, max_lora_rank, input_size)`` and ``lora_b_stacked`` ``(max_loras, 1, output_size,
  max_lora_rank)`` in ``lora_dtype`` (the model dtype by default). Column-parallel layers (qkv, gate_up) keep the
  full input and shard the output by TP; row-parallel layers (o, down) shard the input and keep the full
  output. ``lora_extra_vocab_size`` (default 256, up to 0.11; removed in 0.12, vllm PR #28545) adds
  ``max_loras × extra × hidden`` rows to the embedding and to the LM head (``embeddings_tensors``). The dummy
  LoRAs of the profile run are built on the CPU (``vllm/lora/models.py::create_dummy_lora``).
* ``cpu_offload_gb`` (``vllm/model_executor/models/utils.py::maybe_offload_to_cpu``): each GPU moves parameters to
  pinned CPU memory until ``cpu_offload_gb`` GiB are offloaded; the GPU's weights drop by that much (at most all).
* Speculative decoding (``vllm/config/speculative.py``; ``vllm/v1/spec_decode/``): ``ngram`` needs no weights and
  no KV; a draft model (0.14+, vllm PR #24322; "not supported yet" before), an EAGLE/EAGLE-3 head or MTP layers
  load their weights on the GPU and register their attention layers in the target's KV cache config, so their
  KV shares the pool (``vllm/v1/worker/gpu_model_runner.py::get_kv_cache_spec``). MTP layers are the target's
  ``num_nextn_predict_layers`` decoder layers (``deepseek_mtp``, ``qwen3_next_mtp`` …). The scheduler reserves
  ``num_speculative_tokens`` lookahead slots per running request (``vllm/v1/core/sched/scheduler.py``:
  ``num_lookahead_tokens``). V0's spec-decode worker is not modelled.
* Data and expert parallelism (``vllm/model_executor/layers/fused_moe/config.py::FusedMoEParallelConfig.make``):
  MoE layers shard over ``TP × DP`` GPUs whether or not ``--enable-expert-parallel`` is set (``flatten_tp_across_dp``);
  with EP each GPU holds ``ceil(E / (TP × DP))`` whole experts (``determine_expert_map``), attention and dense
  weights are replicated on every DP rank, and every DP rank has its own KV cache. GPUs = TP × PP × DP.
* KV offloading (``vllm/config/cache.py``: ``kv_offloading_size``/``kv_offloading_backend``, 0.12+;
  ``vllm/config/vllm.py::_post_init_kv_transfer_config``; ``vllm/v1/kv_offload/cpu/spec.py``): the GPU pool is
  unchanged; the native backend (``OffloadingConnector``) adds ``kv_offloading_size`` GiB of CPU KV in total,
  split over the TP × PP ranks; an explicit ``OffloadingConnector`` takes ``num_cpu_blocks`` (0.11) or
  ``cpu_bytes_to_use`` (0.12+) from ``kv_connector_extra_config``; LMCache keeps its own CPU store
  (``LMCACHE_MAX_LOCAL_CPU_SIZE``, 5 GiB by default).
* Multimodal (``--limit-mm-per-prompt``; see ``_multimodal``): all limits 0 skips the tower (0.10.1+), otherwise
  the encoder's profile batch is held in the encoder cache during the profile run.
* Prefix sharing (``vllm/v1/core/kv_cache_manager.py``, prefix caching on by default in V1): requests that share a
  prompt prefix share its full blocks in the full-attention groups, so ``num_gpu_blocks`` holds
  ``(blocks − shared) / (per request − shared)`` such requests.

The release a rule starts or ends in is a field of the engine profile (``EngineProfile.lora_extra_vocab``,
``kv_offloading_size``, ``draft_model_speculation``, ``text_only_skips_encoder``), never a version test here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from service.core.dtypes import MODEL_DTYPE_BYTES, KvCacheDtype, normalize_model_dtype
from service.core.engines import EngineProfile
from service.core.errors import InvalidSpec
from service.core.kv_cache import KvLayout, SpecCounts, layer_spec_counts
from service.core.planner.results import FeaturesResult, Message, Term, gib
from service.core.specs import LayerType, ModelSpec
from service.core.units import GIB, cdiv, fmt_int
from service.core.weights import QuantScheme, resolve_quantization, weight_shares

# vllm/config/lora.py: ``max_lora_rank`` must be one of these (``possible_max_ranks``).
LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
LORA_EXTRA_VOCAB_DEFAULT = 256  # vllm/config/lora.py before 0.12
LMCACHE_DEFAULT_CPU_GIB = 5.0  # LMCache's ``max_local_cpu_size`` default
MTP_METHODS = frozenset(
    {
        "mtp",
        "deepseek_mtp",
        "qwen3_next_mtp",
        "glm4_moe_mtp",
        "mimo_mtp",
        "ernie_mtp",
        "longcat_flash_mtp",
        "pangu_ultra_moe_mtp",
    }
)
HEAD_METHODS = frozenset({"eagle", "eagle3", "medusa", "mlp_speculator"})
SUFFIX_MAX_TREE_DEPTH = (
    24  # suffix decoding's default num_speculative_tokens (suffix_decoding_max_tree_depth)
)
FREE_METHODS = frozenset({"ngram", "ngram_gpu", "suffix"})  # proposers without weights or KV
SPECULATIVE_METHODS = frozenset({*FREE_METHODS, "draft_model", *HEAD_METHODS, *MTP_METHODS})
KV_OFFLOADING_BACKENDS = ("native", "lmcache")
_SHAREABLE_KINDS = frozenset({LayerType.FULL, LayerType.MLA})


@dataclass(frozen=True, slots=True, kw_only=True)
class SpeculativeConfig:
    """``--speculative-config`` as vLLM reads it; ``draft`` is the draft model's or head's resolved config."""

    method: str
    num_speculative_tokens: int | None = None  # None: MTP takes num_nextn_predict_layers
    draft: ModelSpec | None = None
    draft_tensor_parallel_size: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class LoraConfig:
    """``--enable-lora`` with ``--max-loras``, ``--max-lora-rank``, ``--max-cpu-loras``, ``--lora-extra-vocab-size``."""

    max_loras: int = 1
    max_lora_rank: int = 16
    max_cpu_loras: int | None = None
    lora_extra_vocab_size: int | None = None  # None: the release's default (256 before 0.12, absent after)


@dataclass(frozen=True, slots=True, kw_only=True)
class KvTransferConfig:
    """``--kv-transfer-config`` (the connector) and the ``--kv-offloading-*`` shorthand of 0.12+."""

    kv_connector: str | None = None
    kv_role: str | None = None
    num_cpu_blocks: int | None = None  # OffloadingConnector extra config (0.11)
    cpu_bytes_to_use: int | None = None  # OffloadingConnector extra config (0.12+)
    lmcache_cpu_gib: float | None = None  # LMCache ``max_local_cpu_size``
    kv_offloading_size_gib: float | None = None
    kv_offloading_backend: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class MultimodalConfig:
    """``--limit-mm-per-prompt``: items per prompt by modality (all 0: text-only, the tower is not loaded);
    ``--mm-processor-kwargs`` ``max_pixels`` (Qwen-VL image processors) sizes the largest image."""

    limit_mm_per_prompt: tuple[tuple[str, int], ...] = ()
    max_pixels: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ServingFeatures:
    """The optional serving features of one plan (vLLM flag names); every default changes nothing."""

    speculative: SpeculativeConfig | None = None
    lora: LoraConfig | None = None
    cpu_offload_gb: float = 0.0
    kv_transfer: KvTransferConfig | None = None
    data_parallel_size: int = 1
    enable_expert_parallel: bool = False
    shared_prefix_tokens: int = 0
    multimodal: MultimodalConfig | None = None
    # FlashInfer installed (the vllm/vllm-openai images). A pip install without it makes the V1 sampler of
    # 0.8 – 0.11 fall back to the PyTorch-native top-k/top-p, which sorts the vocabulary (``sampler_sorts``).
    flashinfer_sampler: bool = True


class FeatureCosts(NamedTuple):
    """What the features change on one GPU before the KV cache is sized."""

    features: ServingFeatures
    weight_delta: tuple[int, ...]  # per pipeline stage
    activation_delta: int  # added to the first stage's profile peak (the encoder's dummy batch)
    lora_bytes: int  # heaviest stage's
    speculative_weight_bytes: int
    draft_specs: SpecCounts  # KV layers the draft adds to the last stage's pool
    draft_kv_layers: int
    num_speculative_tokens: int
    cpu_offload_bytes: int
    expert_delta_bytes: int
    experts_per_gpu: int | None
    terms: tuple[Term, ...]
    messages: tuple[Message, ...]


def check_features(features: ServingFeatures, engine: EngineProfile) -> None:
    """The values vLLM's argument parsing and config post-init reject outright (``InvalidSpec`` names the flag)."""
    if features.cpu_offload_gb < 0:
        raise InvalidSpec("must not be negative", field="cpu_offload_gb")
    if features.data_parallel_size < 1:
        raise InvalidSpec("must be ≥ 1", field="data_parallel_size")
    if features.shared_prefix_tokens < 0:
        raise InvalidSpec("must not be negative", field="shared_prefix_tokens")
    if features.multimodal is not None:
        for modality, count in features.multimodal.limit_mm_per_prompt:
            if count < 0:
                raise InvalidSpec("must not be negative", field=f"limit_mm_per_prompt.{modality}")
    lora = features.lora
    if lora is not None:
        if lora.max_loras < 1:
            raise InvalidSpec("must be ≥ 1", field="max_loras")
        if lora.max_lora_rank not in LORA_RANKS:
            raise InvalidSpec(
                f"max_lora_rank ({lora.max_lora_rank}) must be one of {LORA_RANKS}.", field="max_lora_rank"
            )
        if lora.max_cpu_loras is not None and lora.max_cpu_loras < lora.max_loras:
            raise InvalidSpec(
                f"max_cpu_loras ({lora.max_cpu_loras}) must be >= max_loras ({lora.max_loras})",
                field="max_cpu_loras",
            )
        if lora.lora_extra_vocab_size is not None:
            if not engine.lora_extra_vocab:
                raise InvalidSpec(
                    "--lora-extra-vocab-size does not exist from vLLM 0.12 (LoRA extra vocabulary removed)",
                    field="lora_extra_vocab_size",
                )
            if lora.lora_extra_vocab_size < 0:
                raise InvalidSpec("must not be negative", field="lora_extra_vocab_size")
    spec = features.speculative
    if spec is not None:
        if spec.method not in SPECULATIVE_METHODS:
            raise InvalidSpec(
                f"unknown method {spec.method!r}; expected one of {', '.join(sorted(SPECULATIVE_METHODS))}",
                field="speculative_config.method",
            )
        if spec.num_speculative_tokens is not None and spec.num_speculative_tokens < 1:
            raise InvalidSpec("must be ≥ 1", field="speculative_config.num_speculative_tokens")
        # vllm/config/speculative.py SpeculativeConfig.__post_init__, in its words:
        needs_model = spec.method == "draft_model" or spec.method in HEAD_METHODS
        if needs_model and spec.draft is None:
            raise InvalidSpec(
                "num_speculative_tokens was provided but without speculative model.",
                field="speculative_config.model",
            )
        if spec.num_speculative_tokens is None and spec.method not in MTP_METHODS | {"suffix"}:
            raise InvalidSpec(
                "A speculative model was provided, but `num_speculative_tokens` was not provided"
                if needs_model
                else "num_speculative_tokens must be given with method " + repr(spec.method),
                field="speculative_config.num_speculative_tokens",
            )
        if engine.v0:
            raise InvalidSpec(
                "kvcap models speculative decoding in the V1 engine (vLLM 0.8+), not V0's spec-decode worker",
                field="speculative_config",
            )
    kv = features.kv_transfer
    if kv is not None:
        if kv.kv_offloading_backend is not None and kv.kv_offloading_backend not in KV_OFFLOADING_BACKENDS:
            raise InvalidSpec(
                f"must be one of {', '.join(KV_OFFLOADING_BACKENDS)}", field="kv_offloading_backend"
            )
        if kv.kv_offloading_size_gib is not None:
            if kv.kv_offloading_size_gib <= 0:
                raise InvalidSpec("must be > 0", field="kv_offloading_size")
            if not engine.kv_offloading_size:
                raise InvalidSpec(
                    "--kv-offloading-size does not exist before vLLM 0.12; use kv_transfer_config",
                    field="kv_offloading_size",
                )


def feature_costs(
    features: ServingFeatures,
    *,
    model: ModelSpec,
    quantization: QuantScheme | None,
    engine: EngineProfile,
    dtype: str,
    kv_dtype: KvCacheDtype,
    block_size: int,
    tensor_parallel_size: int,
    stage_layers: tuple[tuple[int, int], ...],
    stage_weights: tuple[int, ...],
    stage_experts: tuple[int, ...],
    max_num_seqs: int,
    max_num_batched_tokens: int,
) -> FeatureCosts:
    """Stage 2b: the features' weight and KV-layer changes on one GPU of every pipeline stage."""
    tp = tensor_parallel_size
    elem = MODEL_DTYPE_BYTES[normalize_model_dtype(dtype)]
    n_stages = len(stage_layers)
    deltas = [0] * n_stages
    terms: list[Term] = []
    messages: list[Message] = []

    lora_stage = [0] * n_stages
    if features.lora is not None:
        lora_stage = _lora_bytes(features.lora, model, engine, elem, tp, stage_layers, terms, messages)
        deltas = [d + b for d, b in zip(deltas, lora_stage, strict=True)]

    spec_bytes, draft_layers, lookahead = 0, 0, 0
    draft_specs: SpecCounts = []
    if features.speculative is not None:
        spec_bytes, draft_specs, draft_layers, lookahead = _speculative(
            features.speculative,
            model,
            quantization,
            features.data_parallel_size,
            engine,
            dtype,
            kv_dtype,
            block_size,
            tp,
            terms,
            messages,
        )
        deltas[-1] += spec_bytes

    expert_delta, experts_per_gpu = 0, None
    dp = features.data_parallel_size
    if model.is_moe and dp > 1:
        # Experts shard over TP × DP GPUs (flatten_tp_across_dp); weight_shares split them over TP only.
        expert_delta = -max(stage_experts) + max(stage_experts) // dp
        deltas = [d - e + e // dp for d, e in zip(deltas, stage_experts, strict=True)]
        ranks = tp * dp
        if features.enable_expert_parallel and model.num_experts:
            experts_per_gpu = cdiv(model.num_experts, ranks)
        terms.append(
            Term(
                name="expert_weights_dp",
                formula=(
                    f"MoE experts over TP × DP = {tp} × {dp} GPUs"
                    + (
                        f" (EP: ceil({model.num_experts} / {ranks}) = {experts_per_gpu} experts per GPU)"
                        if experts_per_gpu
                        else " (no EP: each expert's width split)"
                    )
                    + "; attention replicated per DP rank (fused_moe/config.py flatten_tp_across_dp)"
                ),
                value=max(stage_experts) // dp,
                unit="bytes",
            )
        )
    elif features.enable_expert_parallel and model.is_moe and model.num_experts:
        experts_per_gpu = cdiv(model.num_experts, tp)
    if features.enable_expert_parallel and not model.is_moe:
        messages.append(
            Message(
                level="info",
                code="expert_parallel_without_experts",
                text="enable_expert_parallel has no effect: the model has no MoE layers",
            )
        )

    activation = 0
    if features.multimodal is not None:
        encoder_delta, activation = _multimodal(
            features.multimodal,
            model,
            engine,
            elem,
            tp,
            stage_layers,
            max_num_seqs,
            max_num_batched_tokens,
            terms,
            messages,
        )
        deltas = [d + e for d, e in zip(deltas, encoder_delta, strict=True)]

    offload = 0
    if features.cpu_offload_gb > 0:
        # Parameters are moved while the model is built; the LoRA stacks are allocated afterwards, on the GPU.
        wanted = int(features.cpu_offload_gb * GIB)
        loaded = [w + d - b for w, d, b in zip(stage_weights, deltas, lora_stage, strict=True)]
        heaviest = max(loaded)
        offload = min(wanted, heaviest)
        deltas = [d - min(wanted, w) for d, w in zip(deltas, loaded, strict=True)]
        terms.append(
            Term(
                name="cpu_offload",
                formula=(
                    f"min(cpu_offload_gb {features.cpu_offload_gb} GiB, weights) moved to CPU per GPU, whole parameters "
                    "(model_executor/models/utils.py maybe_offload_to_cpu)"
                ),
                value=-offload,
                unit="bytes",
            )
        )
        if wanted > heaviest:
            messages.append(
                Message(
                    level="warning",
                    code="cpu_offload_exceeds_weights",
                    text=f"cpu_offload_gb ({features.cpu_offload_gb}) exceeds the weights on one GPU ({gib(heaviest)} GiB): every parameter is offloaded",
                )
            )
        messages.append(
            Message(
                level="info",
                code="cpu_offload",
                text=f"{gib(offload)} GiB of weights per GPU live in pinned CPU memory and cross PCIe on every forward pass",
            )
        )
    heaviest_stage = max(range(n_stages), key=lambda i: stage_weights[i] + deltas[i])
    return FeatureCosts(
        features=features,
        weight_delta=tuple(deltas),
        activation_delta=activation,
        lora_bytes=lora_stage[heaviest_stage],
        speculative_weight_bytes=spec_bytes,
        draft_specs=draft_specs,
        draft_kv_layers=draft_layers,
        num_speculative_tokens=lookahead,
        cpu_offload_bytes=offload,
        expert_delta_bytes=expert_delta,
        experts_per_gpu=experts_per_gpu,
        terms=tuple(terms),
        messages=tuple(messages),
    )


def _multimodal(
    mm: MultimodalConfig,
    model: ModelSpec,
    engine: EngineProfile,
    elem: int,
    tp: int,
    stage_layers: tuple[tuple[int, int], ...],
    max_num_seqs: int,
    max_num_batched_tokens: int,
    terms: list[Term],
    messages: list[Message],
) -> tuple[list[int], int]:
    """(weight change per stage, encoder profile bytes) for ``--limit-mm-per-prompt``.

    All limits 0 on 0.10+ (vllm PR #22299, v0.10.1: implicit language-model-only mode) skips loading the tower
    and projector, and the profile run skips the encoder. Otherwise ``profile_run``
    (``vllm/v1/worker/gpu_model_runner.py``) runs the encoder on a dummy batch of
    ``min(encoder budget // tokens per item, limit × max_num_seqs)`` items and keeps their embeddings in the
    encoder cache during the profile; the budget is ``max(max_num_batched_tokens, tokens per item)``
    (``vllm/v1/core/encoder_cache_manager.py::compute_encoder_budget``). The tower's own activations are not
    charged.
    """
    zero = [0] * len(stage_layers)
    if not model.encoder_parameters:
        messages.append(
            Message(
                level="info",
                code="no_multimodal_encoder",
                text="limit_mm_per_prompt has no effect: the model's config has no vision tower",
            )
        )
        return zero, 0
    limits = dict(mm.limit_mm_per_prompt) or {"image": 1}  # vLLM's default: one item per modality
    if all(count == 0 for count in limits.values()):
        if not engine.text_only_skips_encoder:
            messages.append(
                Message(
                    level="info",
                    code="text_only_tower_loaded",
                    text="before vLLM 0.10.1 limit_mm_per_prompt 0 still loads the vision tower",
                )
            )
            return zero, 0
        total = model.encoder_parameters * elem // tp
        layers = model.num_hidden_layers
        delta = [-(total * (end - start) // layers) for start, end in stage_layers]
        terms.append(
            Term(
                name="encoder_weights_skipped",
                formula=(
                    f"limit_mm_per_prompt all 0 (text-only, 0.10.1+): tower + projector "
                    f"{fmt_int(model.encoder_parameters)} parameters × {elem} B / TP {tp} not loaded"
                ),
                value=-sum(delta),
                unit="bytes",
            )
        )
        return delta, 0
    tokens = model.mm_tokens_per_item
    if mm.max_pixels is not None:
        if model.mm_pixels_per_token:
            # Qwen2-VL's processor: an image of max_pixels becomes max_pixels / (patch × merge)² tokens.
            tokens = max(1, mm.max_pixels // model.mm_pixels_per_token)
        else:
            messages.append(
                Message(
                    level="info",
                    code="mm_processor_kwargs_ignored",
                    text="mm_processor_kwargs max_pixels does not size this model's images (its processor has a fixed size)",
                )
            )
    if tokens is None:
        messages.append(
            Message(
                level="warning",
                code="encoder_cache_unknown",
                text="the model's config does not say how many tokens an image becomes: the encoder profile batch is not charged",
            )
        )
        return zero, 0
    budget = max(max_num_batched_tokens, tokens)
    per_prompt = max(limits.values())
    items = min(budget // tokens, per_prompt * max_num_seqs)
    cache = items * tokens * model.hidden_size * elem
    terms.append(
        Term(
            name="encoder_cache_profile",
            formula=(
                f"min(encoder budget max(max_num_batched_tokens, {fmt_int(tokens)}) // {fmt_int(tokens)} tokens per item, "
                f"limit {per_prompt} × max_num_seqs) = {items} item(s) × {fmt_int(tokens)} tokens × hidden "
                f"{model.hidden_size} × {elem} B (profile_run encoder cache)"
            ),
            value=cache,
            unit="bytes",
        )
    )
    return zero, cache


def lora_layer_elements(model: ModelSpec, tp: int, rank: int) -> tuple[int, int]:
    """(A, B) elements one adapter slot of ``rank`` holds in one decoder layer on one GPU.

    qkv (column, 3 slices): A 3 × rank × hidden, B (q/tp + 2 × kv heads per rank × head_dim) × rank;
    o (row): A rank × heads·head_dim/tp, B hidden × rank; gate_up (column, 2 slices): A 2 × rank × hidden,
    B 2 × intermediate/tp × rank; down (row): A rank × intermediate/tp, B hidden × rank. MoE layers carry the
    attention projections only here.
    """
    hidden, head_dim = model.hidden_size, model.head_dim
    q = model.num_attention_heads * head_dim // tp
    kv = max(1, model.num_key_value_heads // tp) * head_dim
    a = 3 * rank * hidden + rank * (model.num_attention_heads * head_dim // tp)
    b = (q + 2 * kv) * rank + hidden * rank
    if not model.is_moe and model.intermediate_size:
        inter = model.intermediate_size // tp
        a += 2 * rank * hidden + rank * inter
        b += 2 * inter * rank + hidden * rank
    return a, b


def _lora_bytes(
    lora: LoraConfig,
    model: ModelSpec,
    engine: EngineProfile,
    elem: int,
    tp: int,
    stage_layers: tuple[tuple[int, int], ...],
    terms: list[Term],
    messages: list[Message],
) -> list[int]:
    a, b = lora_layer_elements(model, tp, lora.max_lora_rank)
    per_layer = (a + b) * lora.max_loras * elem
    extra = lora.lora_extra_vocab_size
    if extra is None:
        extra = LORA_EXTRA_VOCAB_DEFAULT if engine.lora_extra_vocab else 0
    vocab_rows = 2 * lora.max_loras * extra * model.hidden_size * elem  # embedding + LM head
    stages = []
    last = len(stage_layers) - 1
    for i, (start, end) in enumerate(stage_layers):
        rows = (vocab_rows // 2 if i == 0 else 0) + (vocab_rows // 2 if i == last else 0)
        stages.append(per_layer * (end - start) + rows)
    terms.append(
        Term(
            name="lora_buffers",
            formula=(
                f"max_loras {lora.max_loras} × rank {lora.max_lora_rank} × (A {a // lora.max_lora_rank:,} + "
                f"B {b // lora.max_lora_rank:,} elements per layer) × {elem} B × layers"
                + (f" + 2 × max_loras × extra vocab {extra} × hidden × {elem} B" if extra else "")
                + " (lora/layers/base_linear.py create_lora_weights)"
            ),
            value=max(stages),
            unit="bytes",
        )
    )
    # vllm/lora/models.py LRUCacheLoRAModelManager: up to max_cpu_loras adapters (default max_loras) stay
    # registered in CPU memory; at the largest rank each holds one GPU slot's worth of A and B per layer.
    cpu_loras = lora.max_cpu_loras or lora.max_loras
    adapter = (a + b) * elem * model.num_hidden_layers * tp
    terms.append(
        Term(
            name="lora_cpu_cache",
            formula=(
                f"max_cpu_loras {cpu_loras} × one adapter at rank {lora.max_lora_rank} (all TP shards), "
                "CPU memory, at most"
            ),
            value=cpu_loras * adapter,
            unit="bytes",
        )
    )
    if model.is_moe:
        messages.append(
            Message(
                level="warning",
                code="lora_moe_experts_not_charged",
                text="LoRA buffers of the MoE experts (FusedMoEWithLoRA) are not charged; only the attention projections are",
            )
        )
    if model.uses_mla:
        messages.append(
            Message(
                level="warning",
                code="lora_mla_estimate",
                text="MLA projections are charged as if they were q/k/v projections of num_attention_heads × head_dim",
            )
        )
    return stages


def _speculative(
    spec: SpeculativeConfig,
    model: ModelSpec,
    quantization: QuantScheme | None,
    dp: int,
    engine: EngineProfile,
    dtype: str,
    kv_dtype: KvCacheDtype,
    block_size: int,
    tp: int,
    terms: list[Term],
    messages: list[Message],
) -> tuple[int, SpecCounts, int, int]:
    """(draft weights on the last stage's GPU, draft KV specs, draft KV layers, lookahead tokens)."""
    method = spec.method
    k = spec.num_speculative_tokens or (SUFFIX_MAX_TREE_DEPTH if method == "suffix" else 0)
    if method in FREE_METHODS:
        terms.append(
            Term(
                name="speculative_weights",
                formula=f"{method}: proposes from the prompt and output so far, no weights, no KV (v1/spec_decode/)",
                value=0,
                unit="bytes",
            )
        )
        return 0, [], 0, k
    if method == "draft_model" and not engine.draft_model_speculation:
        messages.append(
            Message(
                level="error",
                code="speculative_draft_model_unsupported",
                text="Speculative decoding with draft model is not supported yet. Please consider using other speculative decoding methods such as ngram, medusa, eagle, or mtp.",
            )
        )
    elif method == "draft_model" and model.encoder_parameters:
        # vllm/v1/spec_decode/eagle.py::_raise_if_multimodal (0.19.1, 0.20.1; vllm issue #42005), in its words:
        messages.append(
            Message(
                level="error",
                code="speculative_draft_model_multimodal",
                text="Speculative Decoding with draft models or parallel drafting does not support multimodal models yet",
            )
        )
    if method in MTP_METHODS:
        layers = model.num_nextn_predict_layers
        if layers < 1:
            raise InvalidSpec(
                f"method {method!r} needs MTP layers: the model's config has no num_nextn_predict_layers",
                field="speculative_config.method",
            )
        if k > layers and k % layers:
            raise InvalidSpec(
                f"num_speculative_tokens:{k} must be divisible by n_predict={layers}",
                field="speculative_config.num_speculative_tokens",
            )
        k = k or layers  # the MTP layers are reused for more tokens: no more weights, no more KV
        per_layer = _mtp_layer_bytes(model, quantization, dtype, tp, dp)
        weights = per_layer * layers
        specs = list(
            layer_spec_counts(
                model,
                kv_dtype=kv_dtype,
                block_size=block_size,
                tensor_parallel_size=tp,
                layers=range(model.num_hidden_layers - layers, model.num_hidden_layers),
                model_dtype=dtype,
            )
        )
        terms.append(
            Term(
                name="speculative_weights",
                formula=(
                    f"{method}: num_nextn_predict_layers {layers} × one decoder layer's weights on this GPU "
                    "(experts over TP × DP; embedding and LM head shared with the target)"
                ),
                value=weights,
                unit="bytes",
            )
        )
    else:
        draft = spec.draft
        assert draft is not None
        draft_tp = spec.draft_tensor_parallel_size or tp
        if draft_tp not in (1, tp):
            raise InvalidSpec(
                f"draft_tensor_parallel_size ({draft_tp}) must be 1 or the target's tensor_parallel_size ({tp})",
                field="speculative_config.draft_tensor_parallel_size",
            )
        # get_rope memoises rotary embeddings by their parameters (``_ROPE_DICT``, vllm/model_executor/layers/
        # rotary_embedding/__init__.py): a draft with the target's RoPE reuses its cos/sin cache.
        same_rope = draft.head_dim == model.head_dim and draft.rope_cache_bytes == model.rope_cache_bytes
        shares = weight_shares(
            draft,
            quantization=resolve_quantization(None, native=draft.quantization),
            tensor_parallel_size=draft_tp,
            dtype=dtype,
            runtime_buffers=not same_rope,
        )
        weights = sum(s.total_bytes for s in shares)
        shared = ""
        if method in ("eagle", "eagle3") and draft.hidden_size == model.hidden_size:
            # v1/spec_decode/eagle.py load_model: the head reuses the target's embedding (same shape), and an
            # EAGLE head its LM head too (EAGLE-3 keeps its own, over its draft vocabulary).
            weights -= sum(s.embedding_bytes for s in shares)
            shared = "embedding"
            if method == "eagle":
                weights -= sum(s.lm_head_bytes for s in shares)
                shared = "embedding and LM head"
        specs = list(
            layer_spec_counts(
                draft,
                kv_dtype=kv_dtype,
                block_size=block_size,
                tensor_parallel_size=draft_tp,
                layers=range(draft.num_hidden_layers),
                model_dtype=dtype,
            )
        )
        if method in ("medusa", "mlp_speculator"):
            specs = []  # MLP heads on the target's hidden states: no attention, no KV
        layers = draft.num_hidden_layers
        terms.append(
            Term(
                name="speculative_weights",
                formula=(
                    f"{method}: the draft's {fmt_int(draft.num_parameters)} parameters × {MODEL_DTYPE_BYTES[normalize_model_dtype(dtype)]} B"
                    f" / draft TP {draft_tp}"
                    + (f", {shared} shared with the target" if shared else "")
                    + " (v1/spec_decode/)"
                ),
                value=weights,
                unit="bytes",
            )
        )
    kv_layers = sum(n for s, n in specs if not s.is_state)
    terms.append(
        Term(
            name="speculative_kv_layers",
            formula=f"{kv_layers} draft attention layer(s) join the target's KV pool (gpu_model_runner.py get_kv_cache_spec)",
            value=kv_layers,
            unit="layers",
        )
    )
    return weights, specs, kv_layers, k


def _mtp_layer_bytes(model: ModelSpec, quantization: QuantScheme | None, dtype: str, tp: int, dp: int) -> int:
    """One MTP layer's weights on one GPU: a decoder layer of the target (an MoE layer for MoE targets, its
    experts over TP × DP like the target's), without the embedding and LM head it shares with the target."""
    # The MTP layers reuse the target's RoPE cache (get_rope's memo), so none is counted per layer here.
    shares = weight_shares(
        model, quantization=quantization, tensor_parallel_size=tp, dtype=dtype, runtime_buffers=False
    )
    experts = sum(s.expert_bytes for s in shares)
    dense = sum(s.linear_bytes + s.replicated_bytes for s in shares) - experts
    moe_layers = model.num_hidden_layers - (model.first_k_dense_replace or 0) if model.is_moe else 0
    per_layer = dense // model.num_hidden_layers
    if moe_layers:
        per_layer += experts // moe_layers // dp
    return per_layer


def feature_outcome(
    costs: FeatureCosts,
    *,
    tensor_parallel_size: int,
    pipeline_parallel_size: int,
    num_gpu_blocks: int,
    max_model_len: int,
    max_concurrency: float,
    request_blocks: int,
    block_size: int,
    bytes_per_token: int,
    num_groups: int,
    layout: KvLayout,
) -> tuple[FeaturesResult, tuple[Term, ...], tuple[Message, ...]]:
    """After the blocks: lookahead, DP totals, CPU KV capacity and prefix sharing, as the plan states them."""
    features = costs.features
    dp = features.data_parallel_size
    world = tensor_parallel_size * pipeline_parallel_size
    terms: list[Term] = []
    messages: list[Message] = []
    lookahead = costs.num_speculative_tokens
    spec_blocks = request_blocks
    if lookahead and max_model_len:
        spec_blocks = cdiv(max_model_len + lookahead, block_size) * num_groups
        terms.append(
            Term(
                name="blocks_per_request_with_lookahead",
                formula=f"cdiv(max_model_len {fmt_int(max_model_len)} + num_speculative_tokens {lookahead}, block {block_size}) × groups",
                value=spec_blocks,
                unit="blocks",
            )
        )
    cpu_bytes, cpu_note = _cpu_kv_bytes(features.kv_transfer, world, bytes_per_token * block_size)
    cpu_tokens = cpu_bytes // bytes_per_token if bytes_per_token and cpu_bytes else 0
    if features.kv_transfer is not None:
        terms.append(
            Term(
                name="cpu_kv_cache",
                formula=f"{cpu_note}; GPU pool unchanged",
                value=cpu_bytes,
                unit="bytes",
            )
        )
        messages.append(
            Message(
                level="info",
                code="kv_offloading",
                text=(
                    f"KV offloading keeps the GPU pool as planned and adds {gib(cpu_bytes)} GiB of CPU KV per GPU "
                    f"(≈ {fmt_int(cpu_tokens)} tokens, {fmt_int(cpu_tokens // max_model_len) if max_model_len else 0} "
                    "max_model_len requests) for prefix reuse, not for running requests"
                ),
            )
        )
    shared = features.shared_prefix_tokens
    effective = max_concurrency
    if shared and max_model_len and num_gpu_blocks > 0:
        # Only full-attention (and MLA) groups keep a prefix's blocks for every request; a sliding window and a
        # constant state are per request (conservatively: nothing shared).
        prefix = min(shared, max_model_len)
        shared_blocks = sum(
            prefix // g.spec.block_size for g in layout.groups if g.spec.kind in _SHAREABLE_KINDS
        )
        unique = request_blocks - shared_blocks
        pool = num_gpu_blocks - shared_blocks
        effective = max(pool / unique if unique > 0 else float(num_gpu_blocks), 0.0)
        terms.append(
            Term(
                name="max_concurrency_with_shared_prefix",
                formula=(
                    f"(num_gpu_blocks − shared {shared_blocks}) / (blocks_per_request {request_blocks} − shared); "
                    f"shared = Σ full-attention groups floor({fmt_int(shared)} prefix tokens / block) (prefix caching)"
                ),
                value=round(effective, 4),
                unit="requests",
            )
        )
    gpus = world * dp
    if dp > 1:
        terms.append(
            Term(
                name="max_concurrency_all_dp_ranks",
                formula=f"max_concurrency × data_parallel_size {dp} (one KV cache per DP rank; GPUs = TP × PP × DP = {gpus})",
                value=round(effective * dp, 4),
                unit="requests",
            )
        )
    result = FeaturesResult(
        speculative_method=features.speculative.method if features.speculative else None,
        num_speculative_tokens=lookahead,
        speculative_weights_bytes=costs.speculative_weight_bytes,
        speculative_kv_layers=costs.draft_kv_layers,
        blocks_per_request_with_lookahead=spec_blocks,
        lora_bytes=costs.lora_bytes,
        cpu_offload_bytes=costs.cpu_offload_bytes,
        data_parallel_size=dp,
        enable_expert_parallel=features.enable_expert_parallel,
        experts_per_gpu=costs.experts_per_gpu,
        total_gpus=gpus,
        max_concurrency_all_ranks=round(effective * dp, 4),
        cpu_kv_cache_bytes=cpu_bytes,
        cpu_kv_cache_tokens=cpu_tokens,
        shared_prefix_tokens=shared,
        effective_max_concurrency=round(effective, 4),
    )
    return result, tuple(terms), tuple(messages)


def _cpu_kv_bytes(kv: KvTransferConfig | None, world: int, block_bytes: int) -> tuple[int, str]:
    """CPU KV bytes per GPU and how they were read (module docstring)."""
    if kv is None:
        return 0, ""
    if kv.kv_offloading_size_gib is not None:
        backend = kv.kv_offloading_backend or "native"
        if backend == "lmcache":
            total = int(kv.kv_offloading_size_gib * GIB)
            return (
                total // world,
                f"lmcache: kv_offloading_size {kv.kv_offloading_size_gib} GiB / TP × PP {world}",
            )
        total = int(kv.kv_offloading_size_gib * GIB)
        return total // world, (
            f"native OffloadingConnector: kv_offloading_size {kv.kv_offloading_size_gib} GiB in total / TP × PP {world} "
            "(config/vllm.py _post_init_kv_transfer_config)"
        )
    connector = (kv.kv_connector or "").lower()
    if "lmcache" in connector:
        size = kv.lmcache_cpu_gib if kv.lmcache_cpu_gib is not None else LMCACHE_DEFAULT_CPU_GIB
        return int(size * GIB), f"LMCache local CPU store max_local_cpu_size {size} GiB per worker"
    if connector == "offloadingconnector":
        if kv.cpu_bytes_to_use is not None:
            return kv.cpu_bytes_to_use // world, "OffloadingConnector cpu_bytes_to_use / TP × PP"
        if kv.num_cpu_blocks is not None:
            # v1/kv_offload/cpu/spec.py: one CPU block holds block_size tokens of every layer.
            return kv.num_cpu_blocks * block_bytes, (
                f"OffloadingConnector num_cpu_blocks {fmt_int(kv.num_cpu_blocks)} × block_size × bytes per token"
            )
    return 0, f"{kv.kv_connector or 'connector'}: no CPU KV store on this node (transfer only)"
