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
