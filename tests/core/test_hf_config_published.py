"""Configs read the way transformers reads them, defaults included, from config.json files as published."""

from __future__ import annotations

from typing import Any

import pytest

from service.core.errors import ConfigError
from service.core.hf_config import parse_hf_config
from service.core.specs import LayerType

# meta-llama/Llama-4-Scout-17B-16E (model card config.json, text_config): ``no_rope_layers`` is published
# as an empty list, which Llama4TextConfig turns into its default pattern.
LLAMA_4_SCOUT: dict[str, Any] = {
    "architectures": ["Llama4ForConditionalGeneration"],
    "model_type": "llama4",
    "text_config": {
        "model_type": "llama4_text",
        "attention_bias": False,
        "attention_chunk_size": 8192,
        "head_dim": 128,
        "hidden_size": 5120,
        "intermediate_size": 8192,
        "intermediate_size_mlp": 16384,
        "max_position_embeddings": 262144,
        "no_rope_layers": [],
        "num_attention_heads": 40,
        "num_experts_per_tok": 1,
        "num_hidden_layers": 48,
        "num_key_value_heads": 8,
        "num_local_experts": 16,
        "interleave_moe_layer_step": 1,
        "rope_theta": 500000.0,
        "torch_dtype": "bfloat16",
        "vocab_size": 202048,
        "tie_word_embeddings": False,
    },
}

# google/gemma-3n-E2B-it (model card config.json, text_config): one intermediate_size per layer, four sliding
# layers to each full one, the last 10 layers share the KV of earlier ones.
GEMMA_3N_E2B: dict[str, Any] = {
    "architectures": ["Gemma3nForConditionalGeneration"],
    "model_type": "gemma3n",
    "text_config": {
        "model_type": "gemma3n_text",
        "hidden_size": 2048,
        "intermediate_size": [8192] * 30,
        "num_hidden_layers": 30,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "head_dim": 256,
        "num_kv_shared_layers": 10,
        "sliding_window": 512,
        "layer_types": (["sliding_attention"] * 4 + ["full_attention"]) * 6,
        "max_position_embeddings": 32768,
        "vocab_size": 262400,
        "torch_dtype": "bfloat16",
    },
}

# Qwen/Qwen2.5-7B-Instruct (model card config.json): a sliding_window is published but switched off.
QWEN_25_7B: dict[str, Any] = {
    "architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2",
    "hidden_size": 3584,
    "intermediate_size": 18944,
    "max_position_embeddings": 32768,
    "max_window_layers": 28,
    "num_attention_heads": 28,
    "num_hidden_layers": 28,
    "num_key_value_heads": 4,
    "sliding_window": 131072,
    "use_sliding_window": False,
    "torch_dtype": "bfloat16",
    "vocab_size": 152064,
    "tie_word_embeddings": False,
}


def test_an_empty_no_rope_layers_list_means_every_fourth_layer_is_nope() -> None:
    spec = parse_hf_config(LLAMA_4_SCOUT, num_parameters=108_000_000_000)
    kinds = spec.resolved_layer_types
    # [int((i + 1) % 4 != 0) for i in range(48)]: layers 3, 7, …, 47 attend over the whole context.
    assert [i for i, k in enumerate(kinds) if k is LayerType.FULL] == list(range(3, 48, 4))
    assert sum(k is LayerType.CHUNKED for k in kinds) == 36


def test_an_explicit_no_rope_layers_list_is_taken_as_published() -> None:
    config = {**LLAMA_4_SCOUT, "text_config": {**LLAMA_4_SCOUT["text_config"], "no_rope_layers": [1, 0] * 24}}
    kinds = parse_hf_config(config, num_parameters=108_000_000_000).resolved_layer_types
    assert [i for i, k in enumerate(kinds) if k is LayerType.FULL] == list(range(1, 48, 2))


def test_a_per_layer_intermediate_size_list_is_read_as_the_layer_width() -> None:
    spec = parse_hf_config(GEMMA_3N_E2B, num_parameters=5_439_438_272)
    assert spec.intermediate_size == 8192
    assert spec.sliding_window == 512
    assert spec.resolved_layer_types[:5] == (LayerType.SLIDING,) * 4 + (LayerType.FULL,)


def test_a_mixed_intermediate_size_list_gives_the_widest_layer() -> None:
    widths = [8192] * 20 + [16384] * 10
    config = {**GEMMA_3N_E2B, "text_config": {**GEMMA_3N_E2B["text_config"], "intermediate_size": widths}}
    assert parse_hf_config(config, num_parameters=5_439_438_272).intermediate_size == 16384


@pytest.mark.parametrize("bad", [[], [8192, "wide"], [8192, 0]])
def test_a_malformed_intermediate_size_list_is_refused_naming_the_field(bad: list[Any]) -> None:
    config = {**GEMMA_3N_E2B, "text_config": {**GEMMA_3N_E2B["text_config"], "intermediate_size": bad}}
    with pytest.raises(ConfigError) as info:
        parse_hf_config(config, num_parameters=5_439_438_272)
    assert info.value.field == "intermediate_size"


def test_use_sliding_window_false_means_full_attention_in_every_layer() -> None:
    spec = parse_hf_config(QWEN_25_7B, num_parameters=7_615_616_512)
    assert spec.resolved_layer_types == (LayerType.FULL,) * 28
    assert spec.sliding_window is None


def test_an_omitted_no_rope_layers_key_means_the_same_default_pattern() -> None:
    # Llama4TextConfig: ``no_rope_layers if no_rope_layers else default`` — absent and [] are one case.
    text = {k: v for k, v in LLAMA_4_SCOUT["text_config"].items() if k != "no_rope_layers"}
    kinds = parse_hf_config({**LLAMA_4_SCOUT, "text_config": text}, num_parameters=1).resolved_layer_types
    assert [i for i, k in enumerate(kinds) if k is LayerType.FULL] == list(range(3, 48, 4))


def test_llama_4_counts_one_shared_expert_per_moe_layer() -> None:
    spec = parse_hf_config(LLAMA_4_SCOUT)
    assert spec.num_shared_experts == 1
    h, expert, layers, vocab = 5120, 3 * 5120 * 8192, 48, 202048
    attention = 5120 * 40 * 128 * 2 + 5120 * 8 * 128 * 2
    # 16 routed experts + the shared one + the router, 2 norms, per layer; untied embeddings; final norm.
    per_layer = attention + 16 * expert + expert + 16 * h + 2 * h
    assert spec.num_parameters == layers * per_layer + 2 * vocab * h + h


# Qwen/Qwen3-Coder-480B-A35B-Instruct (model card config.json): publishes ``shared_expert_intermediate_size: 0``.
QWEN3_CODER_480B: dict[str, Any] = {
    "architectures": ["Qwen3MoeForCausalLM"],
    "model_type": "qwen3_moe",
    "head_dim": 128,
    "hidden_size": 6144,
    "intermediate_size": 8192,
    "max_position_embeddings": 262144,
    "moe_intermediate_size": 2560,
    "num_attention_heads": 96,
    "num_experts": 160,
    "num_experts_per_tok": 8,
    "num_hidden_layers": 62,
    "num_key_value_heads": 8,
    "shared_expert_intermediate_size": 0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "vocab_size": 151936,
}


def test_a_zero_shared_expert_width_means_no_shared_expert() -> None:
    spec = parse_hf_config(QWEN3_CODER_480B)
    assert spec.num_shared_experts is None
    h = 6144
    per_layer = h * 96 * 128 * 2 + h * 8 * 128 * 2 + 160 * 3 * h * 2560 + 160 * h + 2 * h
    assert spec.num_parameters == 62 * per_layer + 2 * 151936 * h + h  # 480.15B; the model card says 480B


def test_a_negative_shared_expert_width_is_still_refused() -> None:
    with pytest.raises(ConfigError) as info:
        parse_hf_config({**QWEN3_CODER_480B, "shared_expert_intermediate_size": -1})
    assert info.value.field == "shared_expert_intermediate_size"


def test_an_attention_output_gate_doubles_the_query_projection() -> None:
    # Qwen3.5 (config.json ``attn_output_gate: true``): q_proj emits queries and the per-head gate.
    text = {
        "model_type": "qwen3_5_text",
        "hidden_size": 1024,
        "num_hidden_layers": 4,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "head_dim": 256,
        "intermediate_size": 4096,
        "vocab_size": 1000,
        "layer_types": ["full_attention"] * 4,
    }
    plain = parse_hf_config({"text_config": text}).num_parameters
    gated = parse_hf_config({"text_config": {**text, "attn_output_gate": True}}).num_parameters
    assert gated - plain == 4 * 1024 * 8 * 256


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        # Llama 3 RoPE: one cache over max_position_embeddings, head_dim wide, bf16.
        (QWEN_25_7B, 32768 * 128 * 2),
        # Llama 4 Scout as published in the Instruct repo: a 10M-position cache (llama3 type) of 128 × bf16.
        (
            {
                **LLAMA_4_SCOUT,
                "text_config": {**LLAMA_4_SCOUT["text_config"], "max_position_embeddings": 10485760},
            },
            10485760 * 128 * 2,
        ),
        # Phi-2: partial_rotary_factor 0.4 of an 80-wide head → 32 rotary dims, float16.
        (
            {
                "model_type": "phi",
                "hidden_size": 2560,
                "num_hidden_layers": 32,
                "num_attention_heads": 32,
                "vocab_size": 51200,
                "max_position_embeddings": 2048,
                "partial_rotary_factor": 0.4,
                "torch_dtype": "float16",
            },
            2048 * 32 * 2,
        ),
    ],
)
def test_rope_cache_bytes_follow_vllms_cache_shapes(config: dict[str, Any], expected: int) -> None:
    assert parse_hf_config(config, num_parameters=1).rope_cache_bytes == expected


def test_gemma_3_keeps_a_linear_x8_global_cache_and_an_unscaled_local_one() -> None:
    text = {
        "model_type": "gemma3_text",
        "hidden_size": 2560,
        "num_hidden_layers": 34,
        "num_attention_heads": 8,
        "vocab_size": 262208,
        "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
        "sliding_window": 1024,
    }
    spec = parse_hf_config({"model_type": "gemma3", "text_config": text}, num_parameters=1)
    # (131072 × 8 + 131072) rows × 256 (class-default head_dim) × 2 B = 0.5625 GiB
    assert spec.rope_cache_bytes == (131072 * 8 + 131072) * 256 * 2


def test_yarn_caches_original_positions_times_the_factor_and_gpt_oss_keeps_float32() -> None:
    config = {
        "model_type": "gpt_oss",
        "hidden_size": 2880,
        "num_hidden_layers": 24,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "vocab_size": 201088,
        "max_position_embeddings": 131072,
        "rope_scaling": {"rope_type": "yarn", "factor": 32.0, "original_max_position_embeddings": 4096},
    }
    assert parse_hf_config(config, num_parameters=1).rope_cache_bytes == 4096 * 32 * 64 * 4


@pytest.mark.parametrize("factor", [float("nan"), -1.0, "8", 1e12])
def test_a_bad_rope_factor_is_refused_naming_the_field(factor: Any) -> None:
    config = {**QWEN_25_7B, "rope_scaling": {"rope_type": "linear", "factor": factor}}
    with pytest.raises(ConfigError) as info:
        parse_hf_config(config, num_parameters=1)
    assert info.value.field == "rope_scaling.factor"


def _llama(layers: int = 4, **quantization: Any) -> dict[str, Any]:
    return {
        "model_type": "llama",
        "hidden_size": 1024,
        "intermediate_size": 4096,
        "num_hidden_layers": layers,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "vocab_size": 1000,
        "quantization_config": {"quant_method": "fbgemm_fp8", **quantization},
    }


ATTENTION = 1024 * 1024 * 2 + 1024 * 256 * 2  # q, o + k, v (8 heads / 2 KV heads × 128)
MLP = 3 * 1024 * 4096


def test_modules_to_not_convert_layers_and_blocks_stay_unquantised() -> None:
    # Meta's FP8 405B recipe: first and last layers whole, attention everywhere else, and the LM head.
    names = [
        "model.layers.0",
        "model.layers.3",
        "lm_head",
        "model.layers.1.self_attn",
        "model.layers.2.self_attn",
    ]
    spec = parse_hf_config(_llama(modules_to_not_convert=names))
    assert spec.unquantized_parameters == 4 * ATTENTION + 2 * MLP


def test_single_projections_wildcards_and_duplicates_are_counted_once() -> None:
    names = ["model.layers.*.self_attn", "model.layers.1.self_attn.q_proj", "model.layers.2.mlp.down_proj"]
    spec = parse_hf_config(_llama(modules_to_not_convert=names))
    assert spec.unquantized_parameters == 4 * ATTENTION + 4096 * 1024


def test_a_skip_list_naming_a_missing_layer_is_refused() -> None:
    with pytest.raises(ConfigError) as info:
        parse_hf_config(_llama(modules_to_not_convert=["model.layers.9"]))
    assert info.value.field == "quantization_config"
