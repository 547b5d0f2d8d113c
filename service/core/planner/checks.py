"""What ``vllm serve`` refuses before it serves, in the release's words (part of the settings stage).

Each check returns error messages rather than raising: vLLM accepted the command line's syntax, and the plan
still says what it would have allocated. Sources per check below (read from the 0.5.5, 0.6.3, 0.6.4 and 0.7.3
wheels, and the V1 source where it says so).
"""

from __future__ import annotations

from service.core.engines import EngineProfile
from service.core.kv_cache import kv_heads_per_rank
from service.core.planner.request import PlanRequest
from service.core.planner.results import Message
from service.core.specs import GpuSpec, LayerType, ModelSpec
from service.core.weights import QuantScheme


def scheduler_checks(
    request: PlanRequest, engine: EngineProfile, max_len: int, mns: int, mnbt: int, chunked: bool
) -> list[Message]:
    """``vllm serve`` refuses these arguments before it loads anything.

    ``--block-size`` outside the release's argparse choices (``vllm/engine/arg_utils.py``, V0 releases), and
    ``SchedulerConfig._verify_args`` (``vllm/config.py``, 0.5.5 – 0.7.3; ``vllm/config/scheduler.py`` later):
    without chunked prefill a batch must hold a whole ``max_model_len`` prompt, and a batch must have room
    for one token of every sequence.
    """
    messages: list[Message] = []
    choices = engine.block_size_choices
    if request.block_size is not None and choices is not None and request.block_size not in choices:
        messages.append(
            Message(
                level="error",
                code="block_size_unsupported",
                text=(
                    f"argument --block-size: invalid choice: {request.block_size} "
                    f"(choose from {', '.join(str(c) for c in choices)})"
                ),
            )
        )
    if mnbt < max_len and not chunked:
        messages.append(
            Message(
                level="error",
                code="max_num_batched_tokens_below_max_model_len",
                text=(
                    f"max_num_batched_tokens ({mnbt}) is smaller than max_model_len ({max_len}). This effectively "
                    "limits the maximum sequence length to max_num_batched_tokens and makes vLLM reject longer "
                    "sequences. Please increase max_num_batched_tokens or decrease max_model_len."
                ),
            )
        )
    if mnbt < mns:
        messages.append(
            Message(
                level="error",
                code="max_num_batched_tokens_below_max_num_seqs",
                text=f"max_num_batched_tokens ({mnbt}) must be greater than or equal to max_num_seqs ({mns}).",
            )
        )
    return messages


def kernel_block_size_messages(
    model: ModelSpec, engine: EngineProfile, device: str, block_size: int
) -> list[Message]:
    """The attention kernels must take the cache's block size (``select_common_block_size``, vllm/v1/worker/
    utils.py, 0.32): the CPU backend's kernels (``CPU_ATTN``, vllm/v1/attention/backends/cpu_attn.py) take
    multiples of 32 only; its reference MLA kernel is not bound by that. vLLM refuses at worker start-up."""
    multiple = engine.cpu_kernel_block_multiple
    if device != "cpu" or multiple is None or model.uses_mla or block_size % multiple == 0:
        return []
    return [
        Message(
            level="error",
            code="block_size_unsupported",
            text=f"No common block size for {block_size} (CPU_ATTN: [MultipleOf({multiple})]).",
        )
    ]


def cpu_fp8_head_size_messages(
    model: ModelSpec, engine: EngineProfile, device: str, kv_cache_dtype: str
) -> list[Message]:
    """The CPU attention kernels pick an ISA per KV group when the cache is set up (``_get_attn_isa``,
    vllm/v1/attention/backends/cpu_attn.py, 0.32.0): a head size divisible by 16 but not by 32 takes the vec16
    path, which has no fp8 KV, and raises ``NotImplementedError``. MLA layers use the CPU MLA backend instead."""
    multiple = engine.cpu_fp8_kv_head_multiple
    head = model.head_dim
    if (
        device != "cpu"
        or multiple is None
        or model.uses_mla
        or not kv_cache_dtype.startswith("fp8")
        or head % multiple == 0
        or head % 16
    ):
        return []
    return [
        Message(
            level="error",
            code="cpu_fp8_head_size",
            text=f"FP8 KV cache requires head_size divisible by {multiple} on CPU.",
        )
    ]


def compute_capability_int(gpu: GpuSpec | None) -> int | None:
    """NVIDIA compute capability as vLLM compares it (``DeviceCapability.to_int``: "8.9" → 89); None for AMD."""
    text = gpu.compute_capability if gpu else None
    if not text or "." not in text:
        return None
    major, _, minor = text.partition(".")
    return int(major) * 10 + int(minor) if major.isdigit() and minor.isdigit() else None


def bf16_refusal(gpu: GpuSpec) -> Message:
    """``_check_if_gpu_supports_dtype`` (``vllm/worker/worker.py`` 0.5.5 – 0.7.3; the platform's
    ``check_if_supports_dtype`` in V1): bf16 needs compute capability 8.0. Releases before 0.8 keep a bf16
    config under ``--dtype auto``, so they refuse too; later releases fall back to float16 by themselves."""
    capability = gpu.compute_capability
    compute = f"has compute capability {capability}" if capability else "does not have a compute capability"
    return Message(
        level="error",
        code="dtype_unsupported",
        text=(
            "Bfloat16 is only supported on GPUs with compute capability of at least 8.0. "
            f"Your {gpu.name} GPU {compute}. You can use float16 instead by explicitly setting the"
            "`dtype` flag in CLI, for example: --dtype=half."
        ),
    )


# ``get_min_capability()`` of each quantization method (``vllm/model_executor/layers/quantization/*.py``,
# 0.6.3): the loader refuses a GPU below it (``model_loader/loader.py::_get_quantization_config``).
QUANTIZATION_MIN_CAPABILITY: dict[str, int] = {
    "aqlm": 60,
    "awq": 75,
    "awq_marlin": 80,
    "bitsandbytes": 70,
    "deepspeedfp": 60,
    "experts_int8": 80,
    "fbgemm_fp8": 80,
    "fp8": 80,
    "gguf": 60,
    "gptq": 60,
    "gptq_marlin": 80,
    "gptq_marlin_24": 80,
    "marlin": 80,
    "modelopt": 89,
    "qqq": 80,
}


# V1 (0.8+): the same refusal from ``VllmConfig._get_quantization_config`` (``vllm/config.py``, from 0.11
# ``vllm/config/vllm.py``), raised while the config is built. Only the minimums that did not move across the
# V1 releases are kept (AWQ 75 in the 0.8.5 log "Minimum capability: 75. Current capability: 70", bitsandbytes
# 70 in vLLM issue #14154, GPTQ / GGUF 60, the Marlin kernels 80); fp8 is 80 up to 0.19 (Marlin weight-only
# fallback, as in 0.6.3) and 75 from 0.30 (``Fp8Config.get_min_capability`` of v0.30.0), unknown between.
_V1_STABLE_MIN_CAPABILITY: dict[str, int] = {
    "awq": 75,
    "awq_marlin": 80,
    "bitsandbytes": 70,
    "gguf": 60,
    "gptq": 60,
    "gptq_marlin": 80,
    "marlin": 80,
}


def quantization_min_capability(engine: EngineProfile) -> dict[str, int]:
    """The release's ``get_min_capability()`` table (empty where kvcap has not read one)."""
    release = engine.version
    if release is None or not engine.overheads:
        return {}
    if engine.checks_quantization_capability:  # V0 releases 0.5 – 0.7
        return QUANTIZATION_MIN_CAPABILITY
    if release < (0, 20):
        return {**_V1_STABLE_MIN_CAPABILITY, "fp8": 80}
    if release < (0, 30):
        return dict(_V1_STABLE_MIN_CAPABILITY)
    return {**_V1_STABLE_MIN_CAPABILITY, "fp8": 75}


def quantization_capability(
    method: str | None, gpu: GpuSpec | None, device: str, table: dict[str, int] | None = None
) -> list[Message]:
    key = (method or "").strip().lower()
    minimum = (QUANTIZATION_MIN_CAPABILITY if table is None else table).get(key)
    capability = compute_capability_int(gpu)
    if device != "cuda" or minimum is None or capability is None or capability >= minimum:
        return []
    return [
        Message(
            level="error",
            code="quantization_unsupported_gpu",
            text=(
                f"The quantization method {key} is not supported for the current GPU. "
                f"Minimum capability: {minimum}. Current capability: {capability}."
            ),
        )
    ]


QUANT_GROUP_SIZE = 128  # the group size of published AWQ / GPTQ 4-bit checkpoints ("q_group_size": 128)


def quantized_shape_messages(
    model: ModelSpec,
    quant: QuantScheme | None,
    tp: int,
    engine: EngineProfile,
    gpu: GpuSpec | None,
    requested: str | None,
) -> list[Message]:
    """A group-quantised checkpoint whose row-parallel shard is not a whole number of groups cannot load.

    ``down_proj`` takes ``intermediate_size / TP`` inputs per GPU; AWQ and GPTQ scales come per group of 128
    inputs, so the shard must hold whole groups (``AWQLinearMethod.create_weights`` /
    ``GPTQLinearMethod.create_weights``; the Marlin kernels, chosen on compute capability ≥ 8.0,
    ``verify_marlin_supports_shape``: ``vllm/model_executor/layers/quantization``, 0.6.3). Checked only where
    the config is the checkpoint's own (its ``quantization_config`` names the method): checkpoints pad
    ``intermediate_size`` for this (Qwen2.5-72B's AWQ/GPTQ configs publish 29,696, the bf16 one 29,568).
    """
    if (
        quant is None
        or quant.name not in ("awq", "gptq")
        or model.quantization is None
        or (requested is not None and requested.strip().lower() not in (model.quantization, quant.name))
        or model.is_moe
        or not model.intermediate_size
    ):
        return []
    shard = model.intermediate_size // tp
    if model.intermediate_size % tp == 0 and shard % QUANT_GROUP_SIZE == 0:
        return []
    capability = compute_capability_int(gpu)
    if capability is not None and capability >= 80 and engine.auto_dtype_keeps_bf16:
        text = (
            f"Weight input_size_per_partition = {shard} is not divisible by group_size = {QUANT_GROUP_SIZE}."
            "Consider reducing tensor_parallel_size or running with --quantization gptq."
        )
    else:
        text = (
            "The input size is not aligned with the quantized weight shape. This can be caused by too large "
            "tensor parallel size."
        )
    return [Message(level="error", code="quantized_shape_unaligned", text=text)]


VOCAB_PADDING = 64  # DEFAULT_VOCAB_PADDING_SIZE (vllm/model_executor/layers/vocab_parallel_embedding.py)


def tensor_parallel_messages(model: ModelSpec, tp: int) -> list[Message]:
    """What tensor parallelism must split evenly, in the order vLLM meets it.

    1. attention heads, before anything loads (``ModelConfig.verify_with_parallel_config``: "Total number of
       attention heads (x) must be divisible by tensor parallel size (y).", 0.5 – 0.33);
    2. the vocabulary, when the model is built (its embedding comes first): ``VocabParallelEmbedding`` pads the
       vocabulary to a multiple of 64 and splits the padded rows with ``divide``, whose
       ``ensure_divisibility`` asserts "{numerator} is not divisible by {denominator}"
       (``vllm/model_executor/layers/vocab_parallel_embedding.py``, ``vllm/distributed/utils.py``; the 0.19
       log of public case 2033: "AssertionError: 151936 is not divisible by 5");
    3. KV heads, in each attention layer (fewer KV heads than TP are replicated, more must divide evenly).
    """
    messages: list[Message] = []
    if model.num_attention_heads % tp:
        messages.append(
            Message(
                level="error",
                code="tp_heads",
                text=f"Total number of attention heads ({model.num_attention_heads}) must be divisible by tensor parallel size ({tp}).",
            )
        )
    padded_vocab = -(-model.vocab_size // VOCAB_PADDING) * VOCAB_PADDING
    if padded_vocab % tp:
        messages.append(
            Message(level="error", code="tp_vocab", text=f"{padded_vocab} is not divisible by {tp}")
        )
    kv_total = model.num_key_value_heads
    if not model.uses_mla and ((tp >= kv_total and tp % kv_total) or (tp < kv_total and kv_total % tp)):
        messages.append(
            Message(
                level="error",
                code="tp_kv_heads",
                text=f"{kv_total} KV heads cannot be split evenly over tensor parallel size {tp}.",
            )
        )
    if not model.uses_mla and tp > kv_total:
        messages.append(
            Message(
                level="warning",
                code="kv_head_replication",
                text=(
                    f"tensor-parallel-size {tp} exceeds the model's {kv_total} KV heads: each GPU stores {kv_heads_per_rank(kv_total, tp)} "
                    "replicated head(s), so per-GPU KV memory no longer shrinks with TP"
                ),
            )
        )
    return messages


# Architectures built on vLLM's ``Qwen2Model`` (vllm/model_executor/models/qwen2.py; Qwen3Model and MiMoModel
# subclass it, the reward models wrap it), 0.32.0.
QWEN2_MODEL_ARCHITECTURES = frozenset(
    {
        "Qwen2ForCausalLM",
        "Qwen3ForCausalLM",
        "MiMoForCausalLM",
        "Qwen2ForRewardModel",
        "Qwen2ForProcessRewardModel",
    }
)


# ``_PREVIOUSLY_SUPPORTED_MODELS`` (vllm/model_executor/models/registry.py, 0.32.0): architectures removed from
# vLLM, with the last release that still ran them. ``ModelRegistry.resolve_model_cls`` first falls back to the
# Transformers backend (``_try_resolve_transformers``: the class exists in transformers and is backend-compatible),
# and only then refuses (``_raise_for_unsupported``). So this table holds the removed architectures transformers 5
# has no compatible class for (``MptForCausalLM`` exists but is not backend-compatible), and
# ``TRANSFORMERS_FALLBACK_ARCHITECTURES`` the ones vLLM hands to the Transformers backend instead.
REMOVED_ARCHITECTURES: dict[str, tuple[int, int]] = {
    **dict.fromkeys(("Phi3SmallForCausalLM",), (0, 9)),
    **dict.fromkeys(("MotifForCausalLM", "Phi4FlashForCausalLM", "DonutForConditionalGeneration"), (0, 10)),
    "JAISLMHeadModel": (0, 22),
    **dict.fromkeys(
        (
            "InternLM2VEForCausalLM",
            "QWenLMHeadModel",
            "QwenVLForConditionalGeneration",
            "InternLMForCausalLM",
            "XverseForCausalLM",
            "MiniMaxText01ForCausalLM",
            "MiniMaxM1ForCausalLM",
            "MiniMaxVL01ForConditionalGeneration",
            "BaiChuanForCausalLM",
            "BaichuanForCausalLM",
            "Tarsier2ForConditionalGeneration",
        ),
        (0, 23),
    ),
    **dict.fromkeys(
        (
            "AquilaModel",
            "AquilaForCausalLM",
            "Grok1ModelForCausalLM",
            "Grok1ForCausalLM",
            "TarsierForConditionalGeneration",
            "MantisForConditionalGeneration",
        ),
        (0, 24),
    ),
    **dict.fromkeys(("TeleChatForCausalLM",), (0, 25)),
    **dict.fromkeys(("Plamo2ForCausalLM", "OuroForCausalLM"), (0, 26)),
    **dict.fromkeys(
        (
            "ArcticForCausalLM",
            "Fairseq2LlamaForCausalLM",
            "GritLM",
            "MPTForCausalLM",
            "MptForCausalLM",
            "RWForCausalLM",
            "StableLMEpochForCausalLM",
            "Cheers",
            "CheersForConditionalGeneration",
            "FireRedLIDForConditionalGeneration",
            "HCXVisionForCausalLM",
            "PrithviGeoSpatialMAE",
        ),
        (0, 28),
    ),
}
_REMOVED_ARCHITECTURE_RELEASES = {arch: f"{v[0]}.{v[1]}.0" for arch, v in REMOVED_ARCHITECTURES.items()}
# Removed from vLLM's own models but implemented (backend-compatibly) in transformers 5: served by the Transformers
# backend, which runs attention layers only (vllm/model_executor/models/transformers/base.py refuses any layer that
# does not dispatch through the Transformers attention interface, e.g. Bamba's Mamba2 mixers).
TRANSFORMERS_FALLBACK_ARCHITECTURES: dict[str, tuple[int, int]] = {
    "MllamaForConditionalGeneration": (0, 10),
    "Phi4MultimodalForCausalLM": (0, 12),
    **dict.fromkeys(("Dots1ForCausalLM", "BambaForCausalLM", "MiniMaxForCausalLM"), (0, 23)),
    **dict.fromkeys(("MusicFlamingoForConditionalGeneration", "AyaVisionForConditionalGeneration"), (0, 24)),
    **dict.fromkeys(("PersimmonForCausalLM", "FuyuForCausalLM"), (0, 25)),
    "ChameleonForConditionalGeneration": (0, 28),
}


def removed_architecture_messages(model: ModelSpec, engine: EngineProfile) -> list[Message]:
    """The release no longer has the model's architecture (the table is 0.32.0's; only releases after the last one
    that listed it refuse; the ``ideal`` profile has no registry).

    Without a Transformers implementation ``ModelRegistry`` refuses it before building anything. With one, the
    Transformers backend builds it and refuses the first layer that is not attention (a Mamba or linear-attention
    mixer); a model of attention layers only runs there with the same KV cache.
    """
    arch = model.architecture or ""
    if engine.version is None:
        return []
    last = REMOVED_ARCHITECTURES.get(arch)
    if last is not None and engine.version > last:
        release = _REMOVED_ARCHITECTURE_RELEASES[arch]
        return [
            Message(
                level="error",
                code="architecture_removed",
                text=(
                    f"Model architecture {arch} was supported in vLLM until v{release}, and is not supported "
                    "anymore. Please use an older version of vLLM if you want to use this model architecture."
                ),
            )
        ]
    last = TRANSFORMERS_FALLBACK_ARCHITECTURES.get(arch)
    if last is None or engine.version <= last:
        return []
    state = next((i for i, kind in enumerate(model.resolved_layer_types) if kind.is_state), None)
    if state is None:
        return []
    return [
        Message(
            level="error",
            code="transformers_backend_layer",
            text=(
                f"Layer {state} does not dispatch through the Transformers attention interface and vLLM has no other "
                f"way to handle it. ({arch} left vLLM's own models after v{last[0]}.{last[1]}.0; the Transformers "
                "backend that serves it now runs attention layers only.)"
            ),
        )
    ]


# Cohere 2's vLLM model builds its sliding layers with ``config.sliding_window + 1``
# (``vllm/model_executor/models/commandr.py``, 0.32.0; ``cohere2_moe.py`` likewise).
COHERE2_MODEL_TYPES = frozenset({"cohere2", "cohere2_moe"})


def sliding_window_flag_messages(request: PlanRequest) -> list[Message]:
    """``--disable-sliding-window`` on a model whose constructor reads the window it removes.

    ``ModelConfig`` sets ``hf_text_config.sliding_window`` to None (``vllm/config/model.py``, 0.32.0), and Cohere 2's
    attention computes ``config.sliding_window + 1`` for its sliding layers (``commandr.py``): the model fails to
    build with a TypeError before any memory is allocated.
    """
    model = request.model
    if not request.disable_sliding_window or model.sliding_window is None:
        return []
    if model.model_type not in COHERE2_MODEL_TYPES:
        return []
    return [
        Message(
            level="error",
            code="disable_sliding_window_unsupported",
            text=(
                "unsupported operand type(s) for +: 'NoneType' and 'int' (--disable-sliding-window sets "
                "sliding_window to None and Cohere 2's attention adds 1 to it while the model is built)"
            ),
        )
    ]


def model_build_messages(model: ModelSpec, engine: EngineProfile) -> list[Message]:
    """What a model's own constructor refuses while the engine builds it.

    ``Qwen2Model.__init__`` (vllm/model_executor/models/qwen2.py, 0.32.0) asserts that the layers do not mix
    sliding and full attention: ``len(set(config.layer_types)) > 1`` requires ``max_window_layers ==
    num_hidden_layers``, which the mix itself rules out (transformers' Qwen2Config slides layers from
    ``max_window_layers`` on). So ``use_sliding_window`` with ``0 < max_window_layers < num_hidden_layers`` stops
    the start-up with an AssertionError; every layer sliding or none does not.
    """
    if not engine.qwen2_mixed_sliding_refused or model.architecture not in QWEN2_MODEL_ARCHITECTURES:
        return []
    attention = {kind for kind in model.layer_types if kind in (LayerType.FULL, LayerType.SLIDING)}
    if len(attention) < 2:
        return []
    full = sum(1 for kind in model.layer_types if kind is LayerType.FULL)
    return [
        Message(
            level="error",
            code="sliding_window_some_layers",
            text=(
                "Sliding window for some but all layers is not supported. This model uses sliding window but "
                f"`max_window_layers` = {full} is less than `num_hidden_layers` = {model.num_hidden_layers}. "
                "Please open an issue to discuss this feature."
            ),
        )
    ]
