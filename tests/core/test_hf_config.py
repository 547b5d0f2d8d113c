"""vLLM's resolution rules for config.json, one rule per test."""

from __future__ import annotations

import pytest

from service.core.errors import ConfigError
from service.core.hf_config import parse_hf_config
from service.core.specs import LayerType

BASE = {
    "num_hidden_layers": 4,
    "hidden_size": 512,
    "num_attention_heads": 8,
    "vocab_size": 1000,
    "max_position_embeddings": 4096,
    "torch_dtype": "bfloat16",
}


def test_missing_kv_heads_means_multi_head_attention() -> None:
    assert parse_hf_config(BASE).num_key_value_heads == 8


@pytest.mark.parametrize("key", ["n_head_kv", "num_kv_heads", "num_key_value_heads", "multi_query_group_num"])
def test_kv_head_aliases(key: str) -> None:
    assert parse_hf_config({**BASE, key: 2}).num_key_value_heads == 2


def test_falcon_multi_query_has_one_kv_head_unless_new_decoder_architecture() -> None:
    falcon = {**BASE, "model_type": "falcon", "multi_query": True}
    assert parse_hf_config(falcon).num_key_value_heads == 1
    assert (
        parse_hf_config({**falcon, "new_decoder_architecture": True, "num_kv_heads": 4}).num_key_value_heads
        == 4
    )


def test_head_dim_prefers_the_config_then_hidden_over_heads() -> None:
    assert parse_hf_config(BASE).head_dim == 64
    assert parse_hf_config({**BASE, "head_dim": 128}).head_dim == 128
    with pytest.raises(ConfigError) as info:
        parse_hf_config({**BASE, "hidden_size": 500})
    assert info.value.field == "head_dim"


@pytest.mark.parametrize("model_type", ["qwen2", "gptj", "opt", "granitemoe", "olmoe"])
def test_families_whose_model_file_ignores_head_dim_use_hidden_over_heads(model_type: str) -> None:
    spec = parse_hf_config({**BASE, "model_type": model_type, "head_dim": 128})
    assert spec.head_dim == 512 // 8
    # Families that read the key keep it.
    assert parse_hf_config({**BASE, "model_type": "mixtral", "head_dim": 128}).head_dim == 128


def test_gemma4_full_layers_take_the_global_head_size_and_the_last_layer_is_full() -> None:
    gemma4 = {**BASE, "model_type": "gemma4_text", "num_hidden_layers": 8, "num_key_value_heads": 4}
    spec = parse_hf_config({**gemma4, "head_dim": 32, "global_head_dim": 64})
    # transformers' Gemma4TextConfig: every 6th layer full, then the last layer forced to full.
    assert spec.layer_types == (LayerType.SLIDING,) * 5 + (LayerType.FULL, LayerType.SLIDING, LayerType.FULL)
    assert (spec.head_dim, spec.full_attention_head_dim, spec.full_attention_kv_heads) == (32, 64, None)
    # num_global_key_value_heads counts only under attention_k_eq_v.
    assert parse_hf_config({**gemma4, "num_global_key_value_heads": 1}).full_attention_kv_heads is None
    k_eq_v = parse_hf_config({**gemma4, "attention_k_eq_v": True, "num_global_key_value_heads": 1})
    assert (k_eq_v.head_dim, k_eq_v.full_attention_head_dim, k_eq_v.full_attention_kv_heads) == (256, 512, 1)


S, F = LayerType.SLIDING, LayerType.FULL


@pytest.mark.parametrize(
    ("extra", "kinds"),
    [
        ({"model_type": "laguna", "sliding_window": 256}, (F, F, F, F)),
        ({"model_type": "cwm", "sliding_window": 256}, (F, S, S, S)),
        ({"model_type": "afmoe", "sliding_window": 256, "global_attn_every_n_layers": 2}, (S, F, S, F)),
        ({"model_type": "smollm3", "sliding_window": 256, "use_sliding_window": True}, (F, F, F, S)),
        ({"model_type": "smollm3", "sliding_window": 256}, (F, F, F, F)),
    ],
)
def test_layer_kinds_transformers_fills_in_when_layer_types_is_omitted(
    extra: dict[str, object], kinds: tuple[LayerType, ...]
) -> None:
    assert parse_hf_config({**BASE, **extra}).resolved_layer_types == kinds


def test_mamba1_configs_have_no_attention_heads() -> None:
    mamba = {"model_type": "mamba", "hidden_size": 256, "num_hidden_layers": 2, "vocab_size": 1000}
    spec = parse_hf_config({**mamba, "state_size": 16, "conv_kernel": 4, "expand": 2})
    assert spec.layer_types == (LayerType.MAMBA,) * 2
    assert spec.state is not None and spec.state.intermediate_size == 512


def test_multimodal_configs_use_the_text_config() -> None:
    config = {
        "architectures": ["Gemma3ForConditionalGeneration"],
        "torch_dtype": "bfloat16",
        "text_config": {**BASE, "model_type": "gemma3_text", "sliding_window": 512},
    }
    spec = parse_hf_config(config)
    assert spec.head_dim == 256  # the gemma3_text class default, which vLLM sees
    assert spec.resolved_layer_types.count(LayerType.SLIDING) == 4  # pattern 6: no full layer in 4 layers


def test_qwen_sliding_window_is_ignored_when_use_sliding_window_is_false() -> None:
    spec = parse_hf_config(
        {**BASE, "sliding_window": 4096, "use_sliding_window": False, "max_window_layers": 2}
    )
    assert set(spec.resolved_layer_types) == {LayerType.FULL}
    sliding = parse_hf_config(
        {**BASE, "sliding_window": 1024, "use_sliding_window": True, "max_window_layers": 2}
    )
    assert sliding.resolved_layer_types == (
        LayerType.FULL,
        LayerType.FULL,
        LayerType.SLIDING,
        LayerType.SLIDING,
    )


def test_yarn_scales_the_original_context() -> None:
    config = {
        **BASE,
        "max_position_embeddings": 163_840,
        "rope_scaling": {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096},
    }
    assert parse_hf_config(config).max_model_len == 163_840


def test_llama3_rope_scaling_is_already_in_max_position_embeddings() -> None:
    config = {
        **BASE,
        "max_position_embeddings": 131_072,
        "rope_scaling": {"rope_type": "llama3", "factor": 8.0},
    }
    assert parse_hf_config(config).max_model_len == 131_072


def test_float32_checkpoints_are_served_in_16_bit() -> None:
    assert parse_hf_config({**BASE, "torch_dtype": "float32"}).torch_dtype == "bfloat16"


def test_jamba_style_attention_period() -> None:
    config = {
        **BASE,
        "num_hidden_layers": 8,
        "attn_layer_period": 4,
        "attn_layer_offset": 2,
        "mamba_expand": 2,
        "mamba_d_state": 16,
        "mamba_d_conv": 4,
    }
    kinds = parse_hf_config(config).resolved_layer_types
    assert [i for i, k in enumerate(kinds) if k is LayerType.FULL] == [2, 6]
    assert kinds.count(LayerType.MAMBA) == 6


def test_a_bad_type_names_the_key() -> None:
    with pytest.raises(ConfigError) as info:
        parse_hf_config({**BASE, "vocab_size": "many"})
    assert info.value.field == "vocab_size"


def test_a_non_object_config_is_refused() -> None:
    with pytest.raises(ConfigError):
        parse_hf_config([1, 2, 3])  # type: ignore[arg-type]


def test_dbrx_reads_kv_heads_from_attn_config() -> None:
    # DbrxAttention (vllm/model_executor/models/dbrx.py, 0.32.0): config.attn_config.kv_n_heads; transformers'
    # DbrxAttentionConfig defaults it to 1.
    dbrx = {"model_type": "dbrx", "d_model": 512, "n_heads": 8, "n_layers": 4, "vocab_size": 1000}
    assert parse_hf_config({**dbrx, "attn_config": {"kv_n_heads": 2}}).num_key_value_heads == 2
    assert parse_hf_config(dbrx).num_key_value_heads == 1


def test_minicpm3_caches_every_head_not_a_latent() -> None:
    # MiniCPM3 has kv_lora_rank but is not in vLLM's MLA list: K and V of each head, nope + rope wide.
    spec = parse_hf_config(
        {
            **BASE,
            "model_type": "minicpm3",
            "num_key_value_heads": 8,
            "kv_lora_rank": 256,
            "qk_nope_head_dim": 64,
            "qk_rope_head_dim": 32,
        }
    )
    assert (spec.num_key_value_heads, spec.head_dim, spec.uses_mla) == (8, 96, False)


def test_lfm2_conv_layers_carry_a_short_conv_state() -> None:
    config = {**BASE, "model_type": "lfm2", "conv_L_cache": 3, "conv_dim": 512, "full_attn_idxs": [1, 3]}
    spec = parse_hf_config(config)
    assert spec.layer_types == (LayerType.MAMBA, LayerType.FULL, LayerType.MAMBA, LayerType.FULL)
    assert spec.state is not None
    assert (spec.state.kind, spec.state.conv_kernel, spec.state.intermediate_size) == ("short_conv", 3, 512)


def test_falcon_h1_runs_a_mamba2_mixer_beside_every_attention_layer() -> None:
    config = {
        **BASE,
        "model_type": "falcon_h1",
        "mamba_d_ssm": 768,
        "mamba_n_heads": 16,
        "mamba_d_head": 64,
        "mamba_d_state": 128,
        "mamba_d_conv": 4,
        "mamba_expand": 2,
    }
    spec = parse_hf_config(config)
    assert spec.layer_types == (LayerType.FULL,) * 4
    assert spec.state is not None and spec.state.parallel_to_attention
    # mamba_d_ssm (768) wins over expand × hidden (1024); without it, expand × hidden.
    assert spec.state.intermediate_size == 768
    without = parse_hf_config({k: v for k, v in config.items() if k != "mamba_d_ssm"})
    assert without.state is not None and without.state.intermediate_size == 1024


def test_zamba2_hybrid_blocks_add_shared_attention_over_twice_the_hidden_size() -> None:
    config = {
        **BASE,
        "model_type": "zamba2",
        "num_key_value_heads": 2,
        "layers_block_type": ["mamba", "hybrid", "mamba", "hybrid"],
        "mamba_expand": 2,
        "n_mamba_heads": 8,
    }
    spec = parse_hf_config(config)
    assert spec.layer_types == (LayerType.MAMBA, LayerType.FULL, LayerType.MAMBA, LayerType.FULL)
    # Zamba2Attention: no num_kv_heads (every head cached), head 2 × 512 // 8.
    assert (spec.num_key_value_heads, spec.head_dim) == (8, 128)
    assert spec.state is not None and spec.state.parallel_to_attention
    assert (spec.state.num_heads, spec.state.head_dim) == (8, 2 * 512 // 8)


def test_encoder_decoder_models_are_refused_with_a_reason() -> None:
    with pytest.raises(ConfigError) as err:
        parse_hf_config({**BASE, "model_type": "whisper", "is_encoder_decoder": True})
    assert err.value.field == "is_encoder_decoder"
    assert "cross-attention" in err.value.message


def test_chatglm_groups_kv_heads_only_under_multi_query_attention() -> None:
    # GLMAttention (vllm/model_executor/models/chatglm.py, 0.32.0); ChatGLMConfig defaults multi_query_attention off.
    glm = {**BASE, "model_type": "chatglm", "multi_query_group_num": 2}
    assert parse_hf_config({**glm, "multi_query_attention": True}).num_key_value_heads == 2
    assert parse_hf_config(glm).num_key_value_heads == 8


def test_lfm2_moe_convolves_over_the_hidden_size() -> None:
    # Lfm2MoeForCausalLM.get_mamba_state_shape_from_config passes hidden_size (no conv_dim), vLLM 0.32.0.
    config = {
        **BASE,
        "model_type": "lfm2_moe",
        "conv_L_cache": 3,
        "layer_types": ["conv", "full_attention"] * 2,
    }
    spec = parse_hf_config(config)
    assert spec.state is not None and spec.state.intermediate_size == 512


def test_minimax_lightning_attention_is_refused_with_a_reason() -> None:
    with pytest.raises(ConfigError) as err:
        parse_hf_config(
            {**BASE, "model_type": "minimax", "layer_types": ["linear_attention", "full_attention"] * 2}
        )
    assert err.value.field == "layer_types"
    assert "lightning" in err.value.message
