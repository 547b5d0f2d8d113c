"""Hugging Face ``config.json`` → ``ModelSpec``, with vLLM's own resolution rules.

vLLM reads a model's memory-relevant numbers through ``ModelConfig`` (``vllm/config/model.py``); this module
re-derives the same rules from a plain JSON mapping so that the catalog import and the planner agree with the
engine:

* multimodal configs keep the language model under ``text_config`` (Gemma 3, Llava, Mistral 3 …);
* KV heads (``get_total_num_kv_heads``): Falcon ``multi_query`` without ``new_decoder_architecture`` → 1, else
  the first of ``n_head_kv``, ``num_kv_heads``, ``num_key_value_heads``, ``multi_query_group_num``, else the
  attention heads (MHA);
* head size (``get_head_size``): MLA → ``kv_lora_rank + qk_rope_head_dim``; else ``head_dim``, else
  ``hidden_size_per_head``, else ``hidden_size // num_attention_heads`` — except for the families whose model file
  sizes its heads from the hidden size whatever ``head_dim`` says (``_HEAD_DIM_FROM_HIDDEN_TYPES``), and Gemma 4,
  whose full-attention layers take ``global_head_dim``;
* layer kinds: ``layer_types`` when present; else the family's pattern (Gemma 2 alternates starting with a
  sliding layer, Gemma 3 / Cohere 2 use ``sliding_window_pattern``, Qwen3-Next ``full_attention_interval``,
  Jamba ``attn_layer_period``/``attn_layer_offset``, Qwen2-style ``use_sliding_window`` + ``max_window_layers``,
  Llama 4 chunked attention); a bare ``sliding_window`` (Mistral 7B v0.1, Phi-3) makes every layer sliding;
* default context (``_get_and_verify_max_len``): the smallest of the length keys, times the RoPE scaling factor
  unless the type already bakes it in (``llama3``, ``longrope``, ``su``; Gemma 3's 128K is pre-scaled), with YaRN
  scaling ``original_max_position_embeddings``.

Values that Hugging Face's config classes fill in when a file omits them (Gemma's 256-wide heads, for example)
come from ``_CLASS_DEFAULTS`` — vLLM sees the class default, so must we. Anything that cannot be interpreted raises
``ConfigError`` naming the key.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from service.core.bounds import (
    MAX_CONTEXT_TOKENS,
    MAX_CONV_KERNEL,
    MAX_EXPERTS,
    MAX_HEAD_DIM,
    MAX_HEADS,
    MAX_HIDDEN_SIZE,
    MAX_INTERMEDIATE_SIZE,
    MAX_LAYERS,
    MAX_LORA_RANK,
    MAX_ROPE_FACTOR,
    MAX_STATE_DIM,
    MAX_VOCAB,
    check_finite,
    check_int,
)
from service.core.dtypes import MODEL_DTYPE_BYTES, normalize_model_dtype
from service.core.errors import ConfigError, InvalidSpec
from service.core.params import ParameterInputs, attention_parameters, estimate_num_parameters, mlp_parameters
from service.core.specs import LayerType, ModelSpec, StateSpec

# transformers ``configuration_*.py`` defaults for keys that published config.json files often omit.
_CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "gemma": {"head_dim": 256},
    "gemma2": {"head_dim": 256, "sliding_window": 4096, "num_key_value_heads": 16},
    "gemma3_text": {
        "head_dim": 256,
        "sliding_window": 4096,
        "sliding_window_pattern": 6,
        "num_key_value_heads": 4,
        "vocab_size": 262208,
        "max_position_embeddings": 131072,
        "torch_dtype": "bfloat16",
    },
    "cohere2": {"sliding_window_pattern": 4},
    # transformers 5 Gemma4TextConfig (and the global_head_dim its __post_init__ pops, 512).
    "gemma4_text": {
        "head_dim": 256,
        "global_head_dim": 512,
        "sliding_window": 512,
        "num_key_value_heads": 4,
        "vocab_size": 262144,
        "max_position_embeddings": 131072,
    },
    # transformers 5 Exaone4Config: sliding_window 4096, sliding_window_pattern 4 (every 4th layer full).
    "exaone4": {"sliding_window": 4096, "sliding_window_pattern": 4},
    "qwen3_next": {"full_attention_interval": 4, "linear_conv_kernel_dim": 4},
    # transformers 5 AfmoeConfig / CwmConfig / LagunaConfig windows.
    "afmoe": {"sliding_window": 1024, "global_attn_every_n_layers": 4},
    "cwm": {"sliding_window": 8192},
    "laguna": {"sliding_window": 512},
    "gpt_oss": {"head_dim": 64, "sliding_window": 128},
}

_LAYER_TYPE_NAMES: dict[str, LayerType] = {
    "full_attention": LayerType.FULL,
    "attention": LayerType.FULL,
    "full": LayerType.FULL,
    "global": LayerType.FULL,
    "sliding_attention": LayerType.SLIDING,
    "sliding": LayerType.SLIDING,
    "local": LayerType.SLIDING,
    "chunked_attention": LayerType.CHUNKED,
    "linear_attention": LayerType.LINEAR,
    "mamba": LayerType.MAMBA,
    "mamba2": LayerType.MAMBA,
    "conv": LayerType.MAMBA,  # LFM2's short convolution: a constant per-request conv state (``_state``)
}

_ATTENTION_FREE_TYPES = frozenset({"mamba", "mamba2", "falcon_mamba"})
_PATTERN_KINDS = {"M": LayerType.MAMBA, "*": LayerType.FULL, "-": LayerType.MLP, "E": LayerType.MLP}

# ``ModelArchConfigConvertorBase.is_deepseek_mla`` (vllm/transformers_utils/model_arch_config_convertor.py,
# 0.32.0): MLA only for these model types, and only with a ``kv_lora_rank``. Other families with low-rank KV
# projections (MiniCPM3) run ordinary attention on the expanded heads (the MiniCPM3 branch of parse_hf_config).
_MLA_MODEL_TYPES = frozenset(
    {
        "deepseek_v2",
        "deepseek_v3",
        "deepseek_v32",
        "deepseek_mtp",
        "dots3_note",
        "glm4_moe_lite",
        "glm4_moe_lite_mtp",
        "glm_moe_dsa",
        "kimi_k2",
        "kimi_linear",
        "longcat_flash",
        "pangu_ultra_moe",
        "pangu_ultra_moe_mtp",
    }
)
_ENCODER_DECODER_TYPES = frozenset({"whisper", "bart", "mbart", "t5", "mt5", "florence2", "nemotron_parse"})
_FALCON_MODEL_TYPES = frozenset({"falcon", "RefinedWeb", "RefinedWebModel"})
_LENGTH_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "model_max_length",
    "max_sequence_length",
    "max_seq_length",
    "seq_len",
)
_NON_GATED_MLP_TYPES = frozenset(
    {"falcon", "RefinedWeb", "RefinedWebModel", "gpt2", "gpt_neox", "phi", "starcoder2", "opt", "bloom"}
)
_QKV_BIAS_TYPES = frozenset({"qwen2", "qwen2_moe", "qwen2_vl", "qwen2_5_vl"})
# Cohere 2 passes ``config.sliding_window + 1`` as the layer's window ("cohere swa layer sees [pos -
# sliding_window, pos], i.e. sliding_window + 1 tokens"): vllm/model_executor/models/commandr.py and
# cohere2_moe.py, 0.32.0. The +1 also sizes the layer's KV (SlidingWindowSpec.sliding_window).
_WINDOW_PLUS_ONE_TYPES = frozenset({"cohere2", "cohere2_moe"})
# Families whose vLLM attention sizes its heads as ``hidden_size // num_attention_heads`` and never reads a
# ``head_dim`` key (vLLM 0.32.0, vllm/model_executor/models/: gpt2.py GPT2Attention, gpt_j.py GPTJAttention,
# opt.py OPTAttention, bloom.py BloomAttention, falcon.py FalconAttention, stablelm.py StablelmAttention,
# granitemoe.py GraniteMoeAttention, granitemoehybrid.py GraniteMoeHybridAttention, jamba.py JambaAttentionDecoderLayer,
# olmoe.py OlmoeAttention, qwen2.py Qwen2Attention, qwen2_moe.py
# Qwen2MoeAttention, dbrx.py DbrxAttention, chatglm.py GLMAttention, minicpm.py MiniCPMAttention, internlm2.py
# InternLM2Attention, orion.py OrionAttention, step1.py, and deepseek_v2.py DeepseekAttention, which
# DeepseekV2DecoderLayer picks for model_type "deepseek"). The KV cache is paged from the layer's own head size,
# so a published ``head_dim`` that disagrees does not count for these families.
_HEAD_DIM_FROM_HIDDEN_TYPES = frozenset(
    {
        "gpt2",
        "gptj",
        "opt",
        "bloom",
        *_FALCON_MODEL_TYPES,
        "stablelm",
        "granitemoe",
        "granitemoehybrid",
        "jamba",
        "olmoe",
        "qwen2",
        "qwen2_moe",
        "dbrx",
        "chatglm",
        "minicpm",
        "internlm2",
        "orion",
        "step1",
        "deepseek",
    }
)
# Families whose vLLM model gives every layer ``cache_config.sliding_window`` (no per-layer window):
# vllm/model_executor/models/qwen2_moe.py and qwen3_moe.py, 0.32.0. See ``_uniform_window_kinds``.
_UNIFORM_WINDOW_TYPES = frozenset({"qwen2_moe", "qwen3_moe"})

# The plausible range of each integer key (``service.core.bounds`` cites the largest published values).
_KEY_MAXIMUM: dict[str, int] = {
    **dict.fromkeys(("num_hidden_layers", "n_layer", "num_layers", "n_layers"), MAX_LAYERS),
    **dict.fromkeys(
        ("num_attention_heads", "n_head", "num_heads", "n_heads", "n_head_kv", "num_kv_heads"), MAX_HEADS
    ),
    **dict.fromkeys(("num_key_value_heads", "multi_query_group_num"), MAX_HEADS),
    **dict.fromkeys(("hidden_size", "n_embd", "d_model"), MAX_HIDDEN_SIZE),
    **dict.fromkeys(("vocab_size", "padded_vocab_size"), MAX_VOCAB),
    **dict.fromkeys(
        ("head_dim", "hidden_size_per_head", "qk_rope_head_dim", "qk_nope_head_dim"), MAX_HEAD_DIM
    ),
    **dict.fromkeys(("v_head_dim", "mamba_d_head", "mamba_head_dim"), MAX_HEAD_DIM),
    **dict.fromkeys(("linear_key_head_dim", "linear_value_head_dim"), MAX_HEAD_DIM),
    **dict.fromkeys(("kv_lora_rank", "q_lora_rank"), MAX_LORA_RANK),
    **dict.fromkeys(
        ("intermediate_size", "ffn_hidden_size", "n_inner", "moe_intermediate_size"), MAX_INTERMEDIATE_SIZE
    ),
    "shared_expert_intermediate_size": MAX_INTERMEDIATE_SIZE,
    **dict.fromkeys(_LENGTH_KEYS, MAX_CONTEXT_TOKENS),
    **dict.fromkeys(("sliding_window", "attention_chunk_size"), MAX_CONTEXT_TOKENS),
    **dict.fromkeys(("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts"), MAX_EXPERTS),
    **dict.fromkeys(
        ("num_experts_per_tok", "moe_top_k", "num_selected_experts", "top_k_experts"), MAX_EXPERTS
    ),
    **dict.fromkeys(("n_shared_experts", "num_shared_experts"), MAX_EXPERTS),
    **dict.fromkeys(("first_k_dense_replace", "num_kv_shared_layers", "max_window_layers"), MAX_LAYERS),
    **dict.fromkeys(
        (
            "sliding_window_pattern",
            "full_attention_interval",
            "attn_layer_period",
            "attn_layer_offset",
            "global_attn_every_n_layers",
        ),
        MAX_LAYERS,
    ),
    **dict.fromkeys(
        ("linear_conv_kernel_dim", "mamba_d_conv", "conv_kernel", "conv_L_cache"), MAX_CONV_KERNEL
    ),
    "conv_dim": MAX_INTERMEDIATE_SIZE,
    "mamba_d_ssm": MAX_INTERMEDIATE_SIZE,
    **dict.fromkeys(("linear_num_key_heads", "linear_num_value_heads", "mamba_n_heads"), MAX_STATE_DIM),
    **dict.fromkeys(("mamba_num_heads", "mamba_n_groups", "n_groups"), MAX_STATE_DIM),
    **dict.fromkeys(("n_mamba_heads", "mamba_ngroups"), MAX_STATE_DIM),
    **dict.fromkeys(("mamba_d_state", "ssm_state_size", "state_size"), MAX_STATE_DIM),
    **dict.fromkeys(("mamba_expand", "expand"), 64),  # Mamba and Jamba: 2
}
# Any other integer key: inside a 32-bit column.
_DEFAULT_MAXIMUM = 2**31 - 1


class _Reader:
    """Typed access to a config mapping that reports the offending key on error."""

    def __init__(self, config: Mapping[str, Any], defaults: Mapping[str, Any]) -> None:
        self.config = config
        self.defaults = defaults

    def raw(self, key: str) -> Any:
        if key in self.config and self.config[key] is not None:
            return self.config[key]
        return self.defaults.get(key)

    def first(self, *keys: str) -> tuple[str, Any]:
        for key in keys:
            value = self.raw(key)
            if value is not None:
                return key, value
        return keys[0], None

    def int_(
        self, *keys: str, required: bool = False, minimum: int = 1, maximum: int | None = None
    ) -> int | None:
        """The first present key as an int inside its plausible range (``service.core.bounds``)."""
        key, value = self.first(*keys)
        if value is None:
            if required:
                alias = f" (or {', '.join(keys[1:])})" if len(keys) > 1 else ""
                raise ConfigError(f"is missing{alias}", field=key)
            return None
        limit = maximum if maximum is not None else _KEY_MAXIMUM.get(key, _DEFAULT_MAXIMUM)
        try:
            return check_int(value, field=key, minimum=minimum, maximum=limit)
        except InvalidSpec as exc:
            raise ConfigError(exc.message, field=key) from None

    def bool_(self, key: str, default: bool = False) -> bool:
        value = self.raw(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise ConfigError(f"must be true or false, got {value!r}", field=key)
        return value


def _language_config(config: Mapping[str, Any]) -> tuple[dict[str, Any], str]:
    """The language-model part of a (possibly multimodal) config, and a note on where it came from."""
    for key in ("text_config", "llm_config", "language_config"):
        nested = config.get(key)
        if isinstance(nested, Mapping):
            merged = dict(nested)
            for inherited in ("torch_dtype", "dtype", "quantization_config", "tie_word_embeddings"):
                if inherited not in merged and inherited in config:
                    merged[inherited] = config[inherited]
            if "architectures" not in merged and "architectures" in config:
                merged["architectures"] = config["architectures"]
            return merged, f"language model read from {key}"
        if nested is not None:
            raise ConfigError("must be an object", field=key)
    return dict(config), ""


def _kv_heads(r: _Reader, model_type: str, heads: int) -> tuple[int, str]:
    if (
        model_type in _FALCON_MODEL_TYPES
        and not r.bool_("new_decoder_architecture")
        and r.bool_("multi_query")
    ):
        return 1, "Falcon multi_query → 1 KV head"
    if model_type == "dbrx":
        # DbrxAttention takes ``config.attn_config.kv_n_heads`` (vllm/model_executor/models/dbrx.py, 0.32.0;
        # DbrxModelArchConfigConvertor.get_total_num_kv_heads); transformers' DbrxAttentionConfig defaults it to 1.
        attn = r.raw("attn_config")
        if attn is not None and not isinstance(attn, Mapping):
            raise ConfigError("must be an object", field="attn_config")
        value = (attn or {}).get("kv_n_heads", 1)
        try:
            dbrx_kv = check_int(value, field="attn_config.kv_n_heads", minimum=1, maximum=MAX_HEADS)
        except InvalidSpec as exc:
            raise ConfigError(exc.message, field=exc.field) from None
        return dbrx_kv, "DBRX: KV heads from attn_config.kv_n_heads"
    if model_type == "chatglm" and not r.bool_("multi_query_attention"):
        # GLMAttention (vllm/model_executor/models/chatglm.py, 0.32.0): multi_query_group_num KV heads only under
        # multi_query_attention (ChatGLMConfig defaults it to false), else one per attention head.
        return heads, "ChatGLM without multi_query_attention → multi-head attention"
    if model_type == "gpt_bigcode":
        # transformers 5 (GPTBigCodeConfig.__post_init__): num_key_value_heads = 1 if multi_query (default true)
        # else n_head; vLLM 0.32 reads num_key_value_heads (model_arch_config_convertor.get_total_num_kv_heads).
        if r.bool_("multi_query", default=True):
            return 1, "GPT-BigCode multi_query (the default) → 1 KV head"
        return heads, "GPT-BigCode without multi_query → multi-head attention"
    key, value = r.first("n_head_kv", "num_kv_heads", "num_key_value_heads", "multi_query_group_num")
    if value is None:
        return heads, "no KV head count in config → multi-head attention (KV heads = attention heads)"
    kv = r.int_(key, required=True)
    assert kv is not None
    return kv, f"KV heads from {key}"


def _uniform_window_kinds(r: _Reader, model_type: str, layers: int) -> tuple[tuple[LayerType, ...], str]:
    """Qwen2-MoE / Qwen3-MoE: one window for every layer, or none.

    Their vLLM models take the window from ``cache_config.sliding_window`` only, and ``EngineArgs.
    create_engine_config`` (vllm/engine/arg_utils.py, 0.32.0) sets that only when the text config's
    ``layer_types`` is None or all ``sliding_attention``. transformers (5.x) keeps a window only under
    ``use_sliding_window`` (Qwen2-MoE stores 0, which vLLM's ModelConfig turns into None); Qwen2MoeConfig also
    fills ``layer_types`` with sliding layers at even indices below ``max_window_layers`` (default 28), so a
    Qwen2-MoE of two or more layers always ends up with full attention everywhere. Qwen3MoeConfig fills no
    ``layer_types``: ``use_sliding_window`` slides every layer.
    """
    if not r.bool_("use_sliding_window") or not r.raw("sliding_window"):
        return (LayerType.FULL,) * layers, "use_sliding_window is false: full attention everywhere"
    names = r.raw("layer_types")
    if names is None and model_type == "qwen2_moe":
        window_layers = r.int_("max_window_layers", minimum=0)
        window_layers = 28 if window_layers is None else window_layers
        names = [
            "sliding_attention" if (i + 1) % 2 and i < window_layers else "full_attention"
            for i in range(layers)
        ]
    if names is None or (isinstance(names, Sequence) and all(name == "sliding_attention" for name in names)):
        return (LayerType.SLIDING,) * layers, "use_sliding_window: every layer slides (a cache-wide window)"
    return (LayerType.FULL,) * layers, (
        "layer_types mixes sliding and full layers: vLLM sets no cache-wide window and this model has no "
        "per-layer one, so every layer is full attention"
    )


def _zamba2_kinds(r: _Reader, layers: int) -> tuple[tuple[LayerType, ...], str]:
    """Zamba2 (vllm/model_executor/models/zamba2.py, Zamba2Model, 0.32.0): a ``layers_block_type`` entry "hybrid"
    is a Mamba2 layer plus the shared attention block (an ``Attention`` of its own per hybrid layer); every
    other entry ("mamba", transformers 5's "linear_attention") is a Mamba2 layer alone."""
    names = r.raw("layers_block_type")
    if not isinstance(names, Sequence) or isinstance(names, str) or len(names) != layers:
        raise ConfigError(f"must list {layers} block types (mamba or hybrid)", field="layers_block_type")
    kinds = tuple(LayerType.FULL if name == "hybrid" else LayerType.MAMBA for name in names)
    return kinds, "Zamba2: hybrid blocks run the shared attention beside their Mamba2 mixer"


def _default_layer_types(r: _Reader, model_type: str, layers: int) -> tuple[tuple[LayerType, ...], str]:
    """The ``layer_types`` transformers 5 fills in when a config omits it, for families whose vLLM model (or the
    Transformers backend) slides exactly the layers it lists (vllm/model_executor/models/afmoe.py and laguna.py,
    0.32.0; CWM runs on the Transformers backend):

    * AfMoE (``AfmoeConfig.__post_init__``): sliding unless ``(i + 1) % global_attn_every_n_layers == 0`` (4);
    * CWM (``CwmConfig.__post_init__``): full where ``i % 4 == 0`` (the first layer among them), sliding elsewhere;
    * Laguna (``LagunaConfig.__post_init__``): full attention everywhere, whatever ``sliding_window`` says;
    * SmolLM3 (``SmolLM3Config.__post_init__``, Transformers backend): under ``use_sliding_window`` only the NoPE
      layers slide — ``no_rope_layers`` (default: 0 at every ``no_rope_layer_interval``-th layer, 4) marks them.
    """
    if model_type == "smollm3":
        no_rope = r.raw("no_rope_layers")
        if no_rope is None:
            interval = r.int_("no_rope_layer_interval") or 4
            no_rope = [int((i + 1) % interval != 0) for i in range(layers)]
        if not isinstance(no_rope, Sequence) or isinstance(no_rope, str) or len(no_rope) != layers:
            raise ConfigError(f"must list {layers} flags (1 = RoPE layer)", field="no_rope_layers")
        if not (r.bool_("use_sliding_window") and r.raw("sliding_window")):
            return (LayerType.FULL,) * layers, "SmolLM3 without use_sliding_window: full attention everywhere"
        kinds = tuple(LayerType.FULL if flag else LayerType.SLIDING for flag in no_rope)
        return kinds, "SmolLM3 with use_sliding_window: the NoPE layers slide, RoPE layers are full attention"
    if model_type == "afmoe":
        every = r.int_("global_attn_every_n_layers") or 4
        kinds = tuple(LayerType.FULL if (i + 1) % every == 0 else LayerType.SLIDING for i in range(layers))
        return kinds, f"AfMoE without layer_types: every {every}th layer full attention, sliding elsewhere"
    if model_type == "cwm":
        kinds = tuple(LayerType.FULL if i % 4 == 0 else LayerType.SLIDING for i in range(layers))
        return kinds, "CWM without layer_types: layers 0, 4, 8 … full attention, sliding elsewhere"
    return (LayerType.FULL,) * layers, "Laguna without layer_types: full attention everywhere"


def _gemma4_kinds(explicit: Any, layers: int) -> tuple[tuple[LayerType, ...], str]:
    """Gemma 4 (transformers 5 ``Gemma4TextConfig.__post_init__``, which vLLM 0.32's gemma4.py reads): an omitted
    ``layer_types`` is 5 sliding : 1 full (every 6th layer full), and the last layer is forced to full attention."""
    if explicit is None:
        names = ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(layers)]
        how = "Gemma 4 without layer_types: every 6th layer full attention, sliding elsewhere"
    elif isinstance(explicit, Sequence) and not isinstance(explicit, str) and len(explicit) == layers:
        names = [str(name) for name in explicit]
        how = "layer kinds from layer_types"
    else:
        raise ConfigError(f"must list {layers} layer kinds", field="layer_types")
    kinds: list[LayerType] = []
    for index, name in enumerate(names):
        if name not in ("sliding_attention", "full_attention"):
            raise ConfigError(
                f"unknown layer kind {name!r}; expected sliding_attention or full_attention",
                field=f"layer_types[{index}]",
            )
        kinds.append(LayerType.SLIDING if name == "sliding_attention" else LayerType.FULL)
    if kinds[-1] is not LayerType.FULL:
        kinds[-1] = LayerType.FULL
        how += "; the last layer is forced to full attention"
    return tuple(kinds), how


def _gemma4_full_layers(r: _Reader, kv_heads: int, heads: int) -> tuple[int, int, str]:
    """Head size and KV heads of Gemma 4's full-attention layers: ``global_head_dim`` (default 512), and
    ``num_global_key_value_heads`` only under ``attention_k_eq_v`` (``Gemma4TextConfig.__post_init__`` builds
    ``per_layer_config`` from them; vLLM 0.32's ``Gemma4DecoderLayer`` reads it)."""
    if r.raw("per_layer_config") is not None:
        raise ConfigError(
            "is not read by kvcap; give Gemma 4's global_head_dim and num_global_key_value_heads instead",
            field="per_layer_config",
        )
    head = r.int_("global_head_dim", required=True, maximum=MAX_HEAD_DIM)
    assert head is not None
    full_kv = kv_heads
    if r.bool_("attention_k_eq_v"):
        full_kv = r.int_("num_global_key_value_heads", maximum=MAX_HEADS) or kv_heads
    if full_kv > heads:
        raise ConfigError(
            f"({full_kv}) exceeds num_attention_heads ({heads})", field="num_global_key_value_heads"
        )
    return head, full_kv, f"Gemma 4 full-attention layers: {full_kv} KV heads of global_head_dim {head}"


def _layer_types(r: _Reader, model_type: str, layers: int, is_mla: bool) -> tuple[tuple[LayerType, ...], str]:
    if model_type in _UNIFORM_WINDOW_TYPES:
        return _uniform_window_kinds(r, model_type, layers)
    if model_type == "zamba2":
        return _zamba2_kinds(r, layers)
    if model_type in _ATTENTION_FREE_TYPES:
        # Mamba, Mamba2 and FalconMamba stack state-space mixers only (vllm/model_executor/models/mamba*.py).
        return (LayerType.MAMBA,) * layers, f"{model_type}: a state-space mixer in every layer, no attention"
    explicit = r.raw("layer_types")
    attn_indices = r.raw("full_attn_idxs")
    if explicit is None and model_type in ("lfm2", "lfm2_moe") and isinstance(attn_indices, Sequence):
        # transformers' Lfm2Config fills an omitted layer_types from full_attn_idxs, the other layers "conv"; vLLM's
        # lfm2.py builds an attention layer where layer_types says "full_attention", a ShortConv layer elsewhere.
        explicit = ["full_attention" if i in attn_indices else "conv" for i in range(layers)]
    if model_type == "gemma4_text":
        return _gemma4_kinds(explicit, layers)
    if explicit is None and model_type in ("afmoe", "cwm", "laguna", "smollm3"):
        return _default_layer_types(r, model_type, layers)
    if explicit is not None:
        if not isinstance(explicit, Sequence) or isinstance(explicit, str):
            raise ConfigError("must be a list of layer kinds", field="layer_types")
        if len(explicit) != layers:
            raise ConfigError(
                f"has {len(explicit)} entries but num_hidden_layers is {layers}", field="layer_types"
            )
        listed: list[LayerType] = []
        for index, name in enumerate(explicit):
            kind = _LAYER_TYPE_NAMES.get(str(name).lower())
            if kind is None:
                allowed = ", ".join(sorted(_LAYER_TYPE_NAMES))
                raise ConfigError(
                    f"unknown layer kind {name!r}; expected one of {allowed}", field=f"layer_types[{index}]"
                )
            listed.append(LayerType.MLA if is_mla and kind is LayerType.FULL else kind)
        return tuple(listed), "layer kinds from layer_types"
    pattern = r.raw("hybrid_override_pattern")
    if pattern is not None:
        # Nemotron-H (vllm/model_executor/models/nemotron_h.py, ALL_DECODER_LAYER_TYPES): one block per character,
        # M = Mamba2 mixer, * = attention, - = MLP, E = MoE; only M and * layers register with the KV cache.
        if not isinstance(pattern, str) or len(pattern) != layers or set(pattern) - set(_PATTERN_KINDS):
            raise ConfigError(
                f"must be a string of {layers} characters from M, *, - and E (one per layer)",
                field="hybrid_override_pattern",
            )
        kinds = tuple(_PATTERN_KINDS[c] for c in pattern)
        return kinds, "hybrid_override_pattern: M Mamba2, * attention, - MLP and E MoE blocks (no cache)"
    if is_mla:
        return (LayerType.MLA,) * layers, "MLA attention in every layer"
    if model_type == "gemma2":
        kinds = tuple(LayerType.SLIDING if i % 2 == 0 else LayerType.FULL for i in range(layers))
        return kinds, "Gemma 2 alternates sliding (even layers) and full attention"
    if model_type == "olmo3" and r.raw("sliding_window") is not None:
        # transformers 5 (Olmo3Config.__post_init__) fills an omitted layer_types with every 4th layer full; vLLM
        # 0.32 runs OLMo 3 on its Transformers backend, which gives the sliding layers their window.
        kinds = tuple(LayerType.FULL if (i + 1) % 4 == 0 else LayerType.SLIDING for i in range(layers))
        return kinds, "OLMo 3 without layer_types: every 4th layer full attention, sliding window elsewhere"
    indices = r.raw("attn_layer_indices")
    if model_type == "bamba" and isinstance(indices, Sequence) and not isinstance(indices, str):
        # transformers' BambaConfig: attention at attn_layer_indices, Mamba2 mixers elsewhere.
        kinds = tuple(LayerType.FULL if i in indices else LayerType.MAMBA for i in range(layers))
        return kinds, "Bamba: attention at attn_layer_indices, Mamba2 elsewhere"
    pattern = r.int_("sliding_window_pattern")
    if pattern is not None and r.raw("sliding_window") is not None:
        kinds = tuple(LayerType.FULL if (i + 1) % pattern == 0 else LayerType.SLIDING for i in range(layers))
        return kinds, f"sliding_window_pattern {pattern}: every {pattern}th layer is full attention"
    interval = r.int_("full_attention_interval")
    if interval is not None:
        kinds = tuple(LayerType.FULL if (i + 1) % interval == 0 else LayerType.LINEAR for i in range(layers))
        return kinds, f"full_attention_interval {interval}: linear attention elsewhere"
    period = r.int_("attn_layer_period")
    if period is not None:
        offset = r.int_("attn_layer_offset", minimum=0) or 0
        kinds = tuple(LayerType.FULL if i % period == offset else LayerType.MAMBA for i in range(layers))
        return kinds, f"attention every {period} layers (offset {offset}), Mamba elsewhere"
    chunk = r.int_("attention_chunk_size")
    if chunk is not None:
        no_rope = r.raw("no_rope_layers")
        omitted = no_rope is None and model_type.startswith("llama4")
        if omitted or (isinstance(no_rope, Sequence) and not isinstance(no_rope, str) and len(no_rope) == 0):
            # transformers' Llama4TextConfig: an empty or omitted list means the default pattern, every
            # ``no_rope_layer_interval``-th layer (4) without RoPE: [int((i + 1) % interval != 0) for i in range(L)].
            interval = r.int_("no_rope_layer_interval") or 4
            no_rope = [int((i + 1) % interval != 0) for i in range(layers)]
            how = f"chunked attention on RoPE layers; every {interval}th layer is NoPE (no_rope_layers is empty or omitted)"
        else:
            how = "chunked attention on RoPE layers"
        if isinstance(no_rope, Sequence) and len(no_rope) == layers:
            # Llama 4: layers that use RoPE attend within chunks; NoPE layers see the whole context.
            return tuple(LayerType.CHUNKED if flag else LayerType.FULL for flag in no_rope), how
        return (LayerType.CHUNKED,) * layers, "chunked attention in every layer"
    window = r.raw("sliding_window")
    if window is None:
        return (LayerType.FULL,) * layers, ""
    if "use_sliding_window" in r.config and not r.bool_("use_sliding_window"):
        return (LayerType.FULL,) * layers, "use_sliding_window is false: full attention everywhere"
    if r.bool_("use_sliding_window"):
        full_layers = r.int_("max_window_layers", minimum=0) or 0
        kinds = tuple(LayerType.FULL if i < full_layers else LayerType.SLIDING for i in range(layers))
        return kinds, f"first {full_layers} layers full attention, sliding window after"
    return (LayerType.SLIDING,) * layers, "sliding_window set without a pattern: every layer slides"


def _intermediate_size(r: _Reader) -> tuple[int | None, str]:
    """The MLP width; a per-layer list (Gemma-3n publishes one entry per layer) gives its widest layer, the one
    the activation peak sees (transformers' ``Gemma3nTextConfig`` accepts an int or a list of ``num_hidden_layers``)."""
    key, value = r.first("intermediate_size", "ffn_hidden_size", "n_inner")
    if isinstance(value, Sequence) and not isinstance(value, str):
        widths = list(value)
        if not widths or any(isinstance(w, bool) or not isinstance(w, int) or w < 1 for w in widths):
            raise ConfigError(f"must be a positive integer or a list of them, got {value!r}", field=key)
        if len(set(widths)) == 1:
            return widths[0], f"{key} is listed per layer: {widths[0]} in every layer"
        return max(widths), f"{key} is listed per layer: widest layer {max(widths)}"
    return r.int_("intermediate_size", "ffn_hidden_size", "n_inner"), ""


def _nemotron_ssm_dtype(r: _Reader) -> str:
    """``NemotronHForCausalLMConfig.update_mamba_ssm_cache_dtype`` (vllm/model_executor/models/config.py, 0.32):
    an ``auto`` SSM cache takes the config's ``mamba_ssm_cache_dtype``, else float32."""
    value = r.raw("mamba_ssm_cache_dtype")
    return str(value) if isinstance(value, str) and value != "auto" else "float32"


def _config_ssm_dtype(r: _Reader) -> str | None:
    """Qwen3.5 publishes ``mamba_ssm_dtype`` (float32); ``Qwen3_5ForConditionalGenerationConfig.verify_and_update_
    config`` (vllm/model_executor/models/config.py, 0.32) gives an auto SSM cache that dtype."""
    value = r.raw("mamba_ssm_dtype")
    return value if isinstance(value, str) and value in ("float32", "bfloat16", "float16") else None


def _state(r: _Reader, hidden: int, kinds: tuple[LayerType, ...], model_type: str) -> StateSpec | None:
    if LayerType.LINEAR in kinds and model_type in ("minimax", "minimax_text_01", "minimax_m1"):
        raise ConfigError(
            "lists MiniMax lightning-attention layers, which kvcap does not model; vLLM 0.32 no longer has them "
            "either (MiniMaxText01 left after v0.23.0, and the Transformers backend refuses a layer that is not "
            "attention)",
            field="layer_types",
        )
    if LayerType.LINEAR in kinds:
        return StateSpec(
            kind="gated_delta_net",
            conv_kernel=r.int_("linear_conv_kernel_dim", required=True) or 4,
            num_k_heads=r.int_("linear_num_key_heads", required=True) or 0,
            num_v_heads=r.int_("linear_num_value_heads", required=True) or 0,
            head_k_dim=r.int_("linear_key_head_dim", required=True) or 0,
            head_v_dim=r.int_("linear_value_head_dim", required=True) or 0,
            ssm_dtype=_config_ssm_dtype(r),
        )
    # Falcon-H1 (vllm/model_executor/models/falcon_h1.py, FalconH1ParallelHybrid, 0.32.0): every decoder layer runs
    # attention and a Mamba2 mixer side by side, both cached.
    parallel = model_type in ("falcon_h1", "zamba2")
    if LayerType.MAMBA not in kinds and not parallel:
        return None
    if model_type == "zamba2":
        # Zamba2ForCausalLM.get_mamba_state_shape_from_config: expand × hidden channels, n_mamba_heads heads of
        # mamba_headdim (transformers' Zamba2Config derives it: expand × hidden // n_mamba_heads).
        channels = (r.int_("mamba_expand") or 2) * hidden
        mamba_heads = r.int_("n_mamba_heads") or 8
        return StateSpec(
            kind="mamba2",
            parallel_to_attention=True,
            conv_kernel=r.int_("mamba_d_conv") or 4,
            intermediate_size=channels,
            n_groups=r.int_("mamba_ngroups") or 1,
            state_size=r.int_("mamba_d_state") or 64,
            num_heads=mamba_heads,
            head_dim=channels // mamba_heads,
        )
    if model_type in ("lfm2", "lfm2_moe"):
        # The ShortConv state (MambaStateShapeCalculator.short_conv_state_shape, vLLM 0.32): channels ×
        # (conv_L_cache − 1) rows. Lfm2ForCausalLM takes ``config.conv_dim`` (published LFM2 configs carry it),
        # Lfm2MoeForCausalLM the hidden size (each model's get_mamba_state_shape_from_config).
        conv_channels = hidden if model_type == "lfm2_moe" else r.int_("conv_dim", required=True)
        return StateSpec(
            kind="short_conv",
            conv_kernel=r.int_("conv_L_cache", required=True) or 3,
            intermediate_size=conv_channels or 0,
        )
    # Mamba2ForCausalLM names its mixer heads ``num_heads`` (transformers' Mamba2Config).
    num_heads = r.int_(
        "mamba_n_heads", "mamba_num_heads", *(("num_heads",) if model_type == "mamba2" else ())
    )
    if num_heads is not None:
        head_dim = (
            r.int_(
                "mamba_d_head",
                "mamba_head_dim",
                *(("head_dim",) if model_type == "mamba2" else ()),
                required=True,
            )
            or 0
        )
        expand = r.int_("mamba_expand", "expand")
        # Nemotron-H sizes the mixer by its heads (mamba_num_heads × mamba_head_dim); Mamba2, Granite 4.0 and
        # Falcon-H1 by expand × hidden_size (each model's get_mamba_state_shape_from_config, vLLM 0.32).
        inner = num_heads * head_dim if model_type == "nemotron_h" or not expand else expand * hidden
        d_ssm = r.int_("mamba_d_ssm") if parallel else None
        if d_ssm:
            # FalconH1ForCausalLM.get_mamba_state_shape_from_config: mamba_d_ssm when set, else expand × hidden.
            inner = d_ssm
        return StateSpec(
            parallel_to_attention=parallel,
            kind="mamba2",
            conv_kernel=r.int_("mamba_d_conv", "conv_kernel", required=True) or 4,
            intermediate_size=inner,
            n_groups=r.int_("mamba_n_groups", "n_groups") or 1,
            state_size=r.int_("mamba_d_state", "ssm_state_size", "state_size", required=True) or 0,
            num_heads=num_heads,
            head_dim=head_dim,
            ssm_dtype=_nemotron_ssm_dtype(r) if model_type == "nemotron_h" else None,
        )
    expand = r.int_("mamba_expand", "expand", required=True) or 2
    return StateSpec(
        kind="mamba1",
        conv_kernel=r.int_("mamba_d_conv", "conv_kernel", required=True) or 4,
        intermediate_size=expand * hidden,
        state_size=r.int_("mamba_d_state", "state_size", required=True) or 16,
    )


def _rope_factor(scaling: Mapping[str, Any], field: str) -> float:
    factor = scaling.get("factor", 1.0)
    if isinstance(factor, bool) or not isinstance(factor, int | float):
        raise ConfigError(f"must be a number, got {factor!r}", field=f"{field}.factor")
    try:
        check_finite(factor, field=f"{field}.factor", minimum=0, maximum=MAX_ROPE_FACTOR)
    except InvalidSpec as exc:
        raise ConfigError(exc.message, field=exc.field) from None
    return float(factor)


def _rope_cache_length(positions: int, scaling: Any, field: str) -> int:
    """Rows of one vLLM cos/sin cache (``model_executor/layers/rotary_embedding``, v0.8 – v0.19): the model's
    ``max_position_embeddings`` for plain, Llama 3 and M-RoPE; times the factor for linear and dynamic NTK
    scaling (``LinearScalingRotaryEmbedding`` builds ``max_position × factor`` rows); YaRN and DeepSeek-YaRN build
    ``original_max_position_embeddings × factor``; LongRoPE keeps a short and a long cache
    (``original + max_position``)."""
    if not isinstance(scaling, Mapping):
        return positions
    rope_type = scaling.get("rope_type", scaling.get("type"))
    if rope_type in ("linear", "dynamic"):
        return int(positions * _rope_factor(scaling, field))
    original = scaling.get("original_max_position_embeddings")
    if not isinstance(original, int) or isinstance(original, bool):
        original = positions
    try:
        original = check_int(
            original, field=f"{field}.original_max_position_embeddings", maximum=MAX_CONTEXT_TOKENS
        )
    except InvalidSpec as exc:
        raise ConfigError(exc.message, field=exc.field) from None
    if rope_type in ("yarn", "deepseek_yarn"):
        return int(original * _rope_factor(scaling, field))
    if rope_type in ("longrope", "su"):
        return original + positions
    return positions


def rope_cache_bytes(
    r: _Reader, model_type: str, head_dim: int, rope_dim: int | None, dtype_bytes: int
) -> int:
    """Bytes of the RoPE cos/sin caches vLLM registers as buffers at model construction: one cache per distinct
    rotary embedding (``get_rope`` memoises instances), ``rows × rotary_dim`` in the model dtype, on every GPU.
    They are loaded with the weights, so they count in "Model loading took X GiB": Gemma 3's global layers scale
    a 128K context linearly ×8 (1M rows × 256 × 2 B = 0.5 GiB), Llama 4 Scout's 10M-position cache is 2.5 GiB."""
    positions = r.int_("max_position_embeddings")
    if not positions:
        return 0
    rotary = rope_dim
    if rotary is None:
        explicit = r.int_("rotary_dim")
        factor = r.raw("partial_rotary_factor")
        parameters = r.raw("rope_parameters")
        if factor is None and isinstance(parameters, Mapping):
            factor = parameters.get("partial_rotary_factor")  # transformers 5 keeps it with the RoPE settings
        if explicit is not None:
            rotary = explicit
        elif isinstance(factor, int | float) and not isinstance(factor, bool) and 0 < factor <= 1:
            rotary = int(head_dim * factor)
        else:
            rotary = head_dim
    scaling = r.raw("rope_scaling")
    rows = _rope_cache_length(positions, scaling, "rope_scaling")
    if model_type == "gemma3_text":
        # Gemma 3: sliding layers use their own unscaled RoPE (rope_local_base_freq) — a second cache.
        rows += positions
    total = rows * rotary * dtype_bytes
    if total > MAX_CONTEXT_TOKENS * MAX_HEAD_DIM * 8:
        raise ConfigError(
            f"implies a {total:,}-byte RoPE cache, far above any published model", field="rope_scaling"
        )
    return total


_SKIP_LIST_KEYS = ("modules_to_not_convert", "ignored_layers", "ignore")
# Compiled on first use (``re``'s cache): only a checkpoint that lists skipped modules needs it, and compiling it
# costs an offline command about a millisecond of start-up.
_LAYER_MODULE = r"^(?:model\.|language_model\.model\.|model\.language_model\.)?layers\.(\d+|\*)(?:\.(self_attn|mlp)(?:\.(\w+))?)?$"


def unquantized_parameters(r: _Reader, p: ParameterInputs, kinds: tuple[LayerType, ...]) -> int:
    """Linear parameters a quantised checkpoint leaves in the model dtype.

    vLLM hands every linear layer whose prefix the checkpoint lists (``modules_to_not_convert`` of fbgemm_fp8,
    AWQ and bitsandbytes configs; ``ignored_layers`` of fp8; ``ignore`` of compressed-tensors) an
    ``UnquantizedLinearMethod`` (``quantization/fbgemm_fp8.py::FBGEMMFp8Config.get_quant_method``,
    ``is_layer_skipped``, v0.5.3 onwards). Whole layers (``model.layers.0``), a layer's attention or MLP
    (``model.layers.1.self_attn``), single dense projections and ``*`` for every layer are read; regular
    expressions, embeddings and the LM head (never quantised here) add nothing.
    """
    qc = r.raw("quantization_config")
    if not isinstance(qc, Mapping):
        return 0
    listed: list[Any] = next((qc[k] for k in _SKIP_LIST_KEYS if isinstance(qc.get(k), list)), [])
    h = p.hidden_size
    inter = p.intermediate_size or 4 * h
    q_out, kv_out = p.num_attention_heads * p.head_dim, p.num_key_value_heads * p.head_dim
    dense_projections = {
        "q_proj": h * q_out,
        "k_proj": h * kv_out,
        "v_proj": h * kv_out,
        "o_proj": q_out * h,
        "gate_proj": h * inter,
        "up_proj": h * inter,
        "down_proj": inter * h,
    }
    chosen: dict[tuple[int, str], int] = {}
    for name in listed:
        match = re.match(_LAYER_MODULE, str(name))
        if match is None:
            continue
        index, block, leaf = match.groups()
        layers = range(p.num_hidden_layers) if index == "*" else [int(index)]
        for i in layers:
            if not 0 <= i < p.num_hidden_layers:
                raise ConfigError(
                    f"names layer {i}, the model has {p.num_hidden_layers}", field="quantization_config"
                )
            kind = kinds[i]
            parts: dict[str, int] = {}
            if block in (None, "self_attn") and leaf is None and kind.is_attention:
                parts["self_attn"] = attention_parameters(p, kind)
            if block in (None, "mlp") and leaf is None:
                parts["mlp"] = mlp_parameters(p, i)
            if leaf in dense_projections and kind is LayerType.FULL and not (p.num_experts or 0) > 1:
                parts[leaf] = dense_projections[leaf]
            for part, count in parts.items():
                chosen[(i, part)] = count
    # A projection listed alongside its whole block is counted once.
    blocks = {(i, part) for (i, part) in chosen if part in ("self_attn", "mlp")}
    total = 0
    for (i, part), count in chosen.items():
        owner = "self_attn" if part in ("q_proj", "k_proj", "v_proj", "o_proj") else "mlp"
        if part not in ("self_attn", "mlp") and (i, owner) in blocks:
            continue
        total += count
    return total


def derive_max_model_len(r: _Reader, model_type: str) -> tuple[int | None, str]:
    lengths = [(key, r.int_(key)) for key in _LENGTH_KEYS]
    present = [(key, value) for key, value in lengths if value is not None]
    if not present:
        return None, ""
    key, derived = min(present, key=lambda item: item[1])
    note = f"default max_model_len from {key}"
    scaling = r.raw("rope_scaling")
    if isinstance(scaling, Mapping) and "gemma3" not in model_type:
        rope_type = scaling.get("rope_type", scaling.get("type"))
        if rope_type not in ("su", "longrope", "llama3", "default", "mrope", None):
            factor = scaling.get("factor")
            if isinstance(factor, int | float) and not isinstance(factor, bool) and factor > 0:
                try:
                    check_finite(factor, field="rope_scaling.factor", minimum=0, maximum=MAX_ROPE_FACTOR)
                except InvalidSpec as exc:
                    raise ConfigError(exc.message, field=exc.field) from None
                original = scaling.get("original_max_position_embeddings")
                if rope_type == "yarn" and isinstance(original, int) and not isinstance(original, bool):
                    try:
                        derived = check_int(
                            original,
                            field="rope_scaling.original_max_position_embeddings",
                            maximum=MAX_CONTEXT_TOKENS,
                        )
                    except InvalidSpec as exc:
                        raise ConfigError(exc.message, field=exc.field) from None
                derived = int(derived * factor)
                note += f" × rope_scaling factor {factor:g} ({rope_type})"
                if derived > MAX_CONTEXT_TOKENS:
                    raise ConfigError(
                        f"scales the context to {derived:,} tokens, above the {MAX_CONTEXT_TOKENS:,} kvcap "
                        "accepts (far above any published model)",
                        field="rope_scaling.factor",
                    )
    return derived, note


QWEN_VL_MAX_PIXELS = 12_845_056  # Qwen2-VL / Qwen2.5-VL image processor default max_pixels


def _multimodal_encoder(config: Mapping[str, Any], text_hidden: int) -> tuple[int, int | None, int | None]:
    """(encoder parameters, embedding tokens of the largest image, pixels per token when ``max_pixels`` decides
    the tokens) from ``vision_config``; (0, None, None) without one.

    A ViT tower: layers × (4·h² + 2·h·intermediate) + patch embedding (channels × patch² × h) + position
    embedding ((image / patch)² × h) + a projector h × text hidden (× merge² for Qwen-VL's patch merger).
    Tokens per image, as vLLM's processors count them (``get_max_image_tokens``): Gemma 3
    ``mm_tokens_per_image``; Qwen-VL ``max_pixels / (patch × spatial_merge)²``; else ``(image / patch)²``.
    """
    vision = config.get("vision_config")
    if not isinstance(vision, Mapping):
        return 0, None, None
    r = _Reader(vision, {})
    layers = r.int_("num_hidden_layers", "depth", minimum=0) or 0
    hidden = r.int_("hidden_size", "embed_dim") or 0
    if not layers or not hidden:
        return 0, None, None
    inter = r.int_("intermediate_size") or 4 * hidden
    patch = r.int_("patch_size", "spatial_patch_size") or 14
    channels = r.int_("num_channels", "in_chans", "in_channels") or 3
    image = r.int_("image_size")
    merge = r.int_("spatial_merge_size") or 1
    out_hidden = r.int_("out_hidden_size") or text_hidden
    positions = (image // patch) ** 2 if image else 0
    params = layers * (4 * hidden * hidden + 2 * hidden * inter)
    params += channels * patch * patch * hidden + positions * hidden + hidden * merge * merge * out_hidden
    top = _Reader(config, {})
    tokens = top.int_("mm_tokens_per_image")
    pixels_per_token = None
    if tokens is None and merge > 1 and image is None:
        pixels_per_token = (patch * merge) ** 2
        tokens = QWEN_VL_MAX_PIXELS // pixels_per_token
    if tokens is None and image:
        tokens = positions // (merge * merge)
    return params, tokens, pixels_per_token


def _quantization(r: _Reader) -> str | None:
    qc = r.raw("quantization_config")
    if qc is None:
        return None
    if not isinstance(qc, Mapping):
        raise ConfigError("must be an object", field="quantization_config")
    method = str(qc.get("quant_method", "")).lower()
    if method in ("awq", "gptq", "awq_marlin", "gptq_marlin"):
        bits = qc.get("bits", qc.get("w_bit", 4))
        return method.removesuffix("_marlin") if bits == 4 else f"{method.removesuffix('_marlin')}-int{bits}"
    if method == "compressed-tensors":
        groups = qc.get("config_groups") or {}
        if not isinstance(groups, Mapping):
            raise ConfigError("must be an object", field="quantization_config.config_groups")
        for group in groups.values():
            weights = group.get("weights") if isinstance(group, Mapping) else None
            if isinstance(weights, Mapping):
                bits, kind = weights.get("num_bits"), weights.get("type")
                if bits == 8 and kind == "float":
                    return "fp8"
                if bits == 4 and kind == "float":
                    return "nvfp4"
                if bits in (4, 8) and kind == "int":
                    return f"int{bits}"
        return "compressed-tensors"
    if method in ("fp8", "mxfp4", "bitsandbytes", "modelopt", "modelopt_fp4", "gguf", "fbgemm_fp8", "nvfp4"):
        return method
    if not method:
        raise ConfigError("has no quant_method", field="quantization_config.quant_method")
    return method


def parse_hf_config(config: Mapping[str, Any], *, num_parameters: int | None = None) -> ModelSpec:
    """Resolve a Hugging Face config the way vLLM does (see module docstring).

    ``num_parameters`` is the published count when known; otherwise it is derived from the shapes.
    """
    if not isinstance(config, Mapping):
        raise ConfigError("must be a JSON object", field="hf_config")
    if config.get("is_encoder_decoder") is True or str(config.get("model_type")) in _ENCODER_DECODER_TYPES:
        # vLLM pages an encoder-decoder model's cross-attention (CrossAttentionSpec, sized by the encoder's
        # length) beside the decoder's self-attention; kvcap models decoder-only caches and says so.
        raise ConfigError(
            "encoder-decoder models (Whisper, BART, T5 …) are not supported: kvcap predicts decoder-only KV "
            "caches, and the cross-attention cache vLLM adds for the encoder's output is not modelled",
            field="is_encoder_decoder",
        )
    text, origin = _language_config(config)
    model_type = str(text.get("model_type") or config.get("model_type") or "")
    r = _Reader(text, _CLASS_DEFAULTS.get(model_type, {}))
    notes = [origin] if origin else []

    layers = r.int_("num_hidden_layers", "n_layer", "num_layers", "n_layers", required=True)
    # transformers' MambaConfig and FalconMambaConfig have no attention heads at all (vLLM's mamba.py builds none);
    # one nominal head keeps the spec whole and pages nothing.
    attention_free = model_type in ("mamba", "falcon_mamba")
    heads = r.int_("num_attention_heads", "n_head", "num_heads", "n_heads", required=not attention_free) or 1
    hidden = r.int_("hidden_size", "n_embd", "d_model", required=True)
    vocab = r.int_("vocab_size", "padded_vocab_size", required=True)
    assert layers is not None and heads is not None and hidden is not None and vocab is not None

    kv_heads, kv_note = _kv_heads(r, model_type, heads)
    notes.append(kv_note)
    if kv_heads > heads:
        raise ConfigError(f"({kv_heads}) exceeds num_attention_heads ({heads})", field="num_key_value_heads")

    kv_lora_rank = r.int_("kv_lora_rank")
    qk_rope = r.int_("qk_rope_head_dim")
    config_head_dim: int | None = None
    is_mla = kv_lora_rank is not None and model_type in _MLA_MODEL_TYPES
    if model_type == "minicpm3":
        # MiniCPM3Attention (vllm/model_executor/models/minicpm3.py, 0.32.0) expands the low-rank KV into every
        # head and caches K and V as ordinary attention: num_kv_heads = the attention heads, head size
        # qk_nope_head_dim + qk_rope_head_dim (V is zero-padded to it).
        nope = r.int_("qk_nope_head_dim", required=True)
        rope = r.int_("qk_rope_head_dim", required=True)
        assert nope is not None and rope is not None
        kv_heads, head_dim = heads, nope + rope
        notes.append(
            f"MiniCPM3: K and V of all {heads} heads, head size qk_nope_head_dim + qk_rope_head_dim = {head_dim}"
        )
    elif model_type == "zamba2":
        # Zamba2Attention: attention over 2 × hidden_size (the hidden state concatenated with the embeddings),
        # head size 2 × hidden // heads (Zamba2Config.__post_init__ sets attention_head_dim so, whatever the file
        # says), and an Attention without num_kv_heads: every head keeps its own K and V.
        kv_heads, head_dim = heads, 2 * hidden // heads
        notes.append(f"Zamba2: {heads} KV heads of 2 × hidden_size // heads = {head_dim}")
    elif is_mla and kv_lora_rank is not None:
        if qk_rope is None:
            raise ConfigError("is missing (needed with kv_lora_rank for MLA)", field="qk_rope_head_dim")
        head_dim = kv_lora_rank + qk_rope
        notes.append(
            f"MLA: head size = kv_lora_rank {kv_lora_rank} + qk_rope_head_dim {qk_rope} = {head_dim}"
        )
    else:
        explicit_head = r.int_("head_dim", "hidden_size_per_head")
        if explicit_head is not None and model_type in _HEAD_DIM_FROM_HIDDEN_TYPES and not hidden % heads:
            if explicit_head != hidden // heads:
                notes.append(
                    f"{model_type}: vLLM sizes heads as hidden_size // num_attention_heads = {hidden // heads} "
                    f"and ignores head_dim {explicit_head}"
                )
                config_head_dim = explicit_head
            explicit_head = hidden // heads
        if explicit_head is not None:
            head_dim = explicit_head
        else:
            if hidden % heads:
                raise ConfigError(
                    f"is not given and hidden_size {hidden} is not divisible by num_attention_heads {heads}",
                    field="head_dim",
                )
            head_dim = hidden // heads
            notes.append(f"head_dim = hidden_size // num_attention_heads = {head_dim}")

    kinds, kinds_note = _layer_types(r, model_type, layers, is_mla)
    if kinds_note:
        notes.append(kinds_note)
    full_head_dim = full_kv_heads = None
    if model_type == "gemma4_text":
        full_head_dim, full_kv_heads, full_note = _gemma4_full_layers(r, kv_heads, heads)
        notes.append(full_note)
    sliding_window = r.int_("sliding_window") if LayerType.SLIDING in kinds else None
    if LayerType.SLIDING in kinds and sliding_window is None:
        raise ConfigError("is missing but some layers use sliding attention", field="sliding_window")
    if sliding_window is not None and model_type in _WINDOW_PLUS_ONE_TYPES:
        sliding_window += 1
        notes.append(
            f"Cohere 2 sliding layers keep sliding_window + 1 = {sliding_window} tokens (vLLM commandr.py)"
        )

    dtype_key, dtype_value = r.first("torch_dtype", "dtype")
    torch_dtype = "bfloat16"
    if dtype_value is not None:
        try:
            torch_dtype = normalize_model_dtype(str(dtype_value), field=dtype_key)
        except InvalidSpec as exc:
            raise ConfigError(exc.message, field=dtype_key) from None
        if torch_dtype == "float32":
            # vLLM's ``dtype="auto"`` serves float32 checkpoints in 16-bit (``_resolve_auto_dtype``).
            torch_dtype = "bfloat16"
            notes.append("float32 checkpoint is served in 16-bit by vLLM's dtype=auto")
    else:
        notes.append("no torch_dtype in config: assuming bfloat16")

    state = _state(r, hidden, kinds, model_type)
    # vLLM ``gpt_oss.py`` builds its YaRN cache in float32; every other model's cache takes the model dtype.
    rope_bytes = rope_cache_bytes(
        r,
        model_type,
        head_dim,
        qk_rope if is_mla else None,
        4 if model_type == "gpt_oss" else MODEL_DTYPE_BYTES[torch_dtype],
    )
    max_len, len_note = derive_max_model_len(r, model_type)
    if len_note:
        notes.append(len_note)

    # 0 experts is a dense model (Granite 4.0 hybrid micro publishes num_local_experts 0 with a shared MLP).
    num_experts = (
        r.int_("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts", minimum=0) or None
    )
    moe_inter = r.int_("moe_intermediate_size")
    # A published 0 means "no shared expert" (Qwen3-Coder-480B-A35B's config.json carries
    # ``shared_expert_intermediate_size: 0``; vLLM's ``qwen3_moe.py`` builds no shared expert for it).
    shared_inter = r.int_("shared_expert_intermediate_size", minimum=0) or None
    n_shared = r.int_("n_shared_experts", "num_shared_experts", minimum=0) or None
    if n_shared is None and model_type == "llama4_text" and num_experts:
        # Llama 4 has no shared-expert key, yet every MoE layer adds one expert-sized shared MLP to the routed
        # experts (vLLM ``model_executor/models/llama4.py``, ``Llama4MoE.shared_expert``, v0.8.3 onwards).
        n_shared = 1
        notes.append("Llama 4: one shared expert per MoE layer (no config key; vLLM's Llama4MoE)")
    first_dense = r.int_("first_k_dense_replace", minimum=0) or 0
    intermediate, inter_note = _intermediate_size(r)
    if inter_note:
        notes.append(inter_note)

    # transformers defaults: PretrainedConfig ties embeddings; Llama, Mistral, Qwen, Phi-3 … override to False.
    tie = r.bool_(
        "tie_word_embeddings", default=model_type.startswith("gemma") or model_type in _FALCON_MODEL_TYPES
    )
    encoder_params, mm_tokens, mm_pixels = _multimodal_encoder(config, hidden)
    if encoder_params:
        notes.append(f"multimodal encoder (tower + projector) ≈ {encoder_params:,} parameters")
    inputs = ParameterInputs(
        num_hidden_layers=layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=head_dim,
        vocab_size=vocab,
        intermediate_size=intermediate,
        tie_word_embeddings=tie,
        gated_mlp=model_type not in _NON_GATED_MLP_TYPES,
        qkv_bias=model_type in _QKV_BIAS_TYPES or r.bool_("attention_bias"),
        attention_output_gate=r.bool_("attn_output_gate"),
        layer_types=kinds,
        kv_lora_rank=kv_lora_rank,
        q_lora_rank=r.int_("q_lora_rank"),
        qk_rope_head_dim=qk_rope,
        qk_nope_head_dim=r.int_("qk_nope_head_dim"),
        v_head_dim=r.int_("v_head_dim"),
        num_experts=num_experts,
        moe_intermediate_size=moe_inter,
        num_shared_experts=n_shared,
        shared_expert_intermediate_size=shared_inter,
        first_k_dense_replace=first_dense,
        state=state,
    )
    if num_parameters is None:
        num_parameters = encoder_params + estimate_num_parameters(inputs)
        notes.append("num_parameters derived from the layer shapes")
    unquantized = unquantized_parameters(r, inputs, kinds)
    if unquantized:
        notes.append(f"quantization_config keeps {unquantized:,} linear parameters unquantised")

    architectures = r.raw("architectures")
    architecture = (
        str(architectures[0])
        if isinstance(architectures, Sequence) and architectures and not isinstance(architectures, str)
        else None
    )
    try:
        return ModelSpec(
            num_hidden_layers=layers,
            hidden_size=hidden,
            num_attention_heads=heads,
            num_key_value_heads=kv_heads,
            head_dim=head_dim,
            vocab_size=vocab,
            num_parameters=num_parameters,
            torch_dtype=torch_dtype,
            intermediate_size=intermediate,
            max_position_embeddings=r.int_("max_position_embeddings"),
            max_model_len=max_len,
            layer_types=kinds,
            sliding_window=sliding_window,
            attention_chunk_size=r.int_("attention_chunk_size") if LayerType.CHUNKED in kinds else None,
            kv_lora_rank=kv_lora_rank if is_mla else None,
            qk_rope_head_dim=qk_rope if is_mla else None,
            qk_nope_head_dim=r.int_("qk_nope_head_dim") if is_mla else None,
            v_head_dim=r.int_("v_head_dim") if is_mla else None,
            q_lora_rank=r.int_("q_lora_rank") if is_mla else None,
            num_experts=num_experts,
            num_experts_per_tok=r.int_(
                "num_experts_per_tok", "moe_top_k", "num_selected_experts", "top_k_experts"
            )
            if num_experts
            else None,
            moe_intermediate_size=moe_inter,
            num_shared_experts=n_shared,
            first_k_dense_replace=first_dense or None,
            num_kv_shared_layers=r.int_("num_kv_shared_layers", minimum=0) or 0,
            config_head_dim=config_head_dim,
            full_attention_head_dim=full_head_dim if full_head_dim != head_dim else None,
            full_attention_kv_heads=full_kv_heads if full_kv_heads != kv_heads else None,
            rope_cache_bytes=rope_bytes,
            unquantized_parameters=min(unquantized, num_parameters),
            encoder_parameters=encoder_params,
            mm_tokens_per_item=mm_tokens,
            mm_pixels_per_token=mm_pixels,
            num_nextn_predict_layers=r.int_("num_nextn_predict_layers", "mtp_num_hidden_layers", minimum=0)
            or 0,
            state=state,
            quantization=_quantization(r),
            tie_word_embeddings=tie,
            model_type=model_type or None,
            architecture=architecture,
            notes=tuple(note for note in notes if note),
        )
    except ConfigError:
        raise
    except InvalidSpec as exc:
        raise ConfigError(exc.message, field=exc.field) from None
