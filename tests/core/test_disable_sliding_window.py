"""``--disable-sliding-window``: ``ModelConfig`` caps the derived default length at the config's window (before the
RoPE factor) and sets ``sliding_window`` to None, so every sliding layer is built as full attention
(``vllm/config/model.py::_get_and_verify_max_len`` and ``ModelConfig.__post_init__``, 0.32.0).

Expected values come from that rule and the published configs, not from kvcap's output."""

from __future__ import annotations

from typing import Any

import pytest

from service.catalog.builtin import builtin_snapshot
from service.core.hf_config import parse_hf_config
from service.core.planner import PlanRequest, plan
from service.core.specs import LayerType
from service.core.units import cdiv

SNAPSHOT = builtin_snapshot()
H100 = SNAPSHOT.find_gpu("h100-sxm-80gb").spec  # type: ignore[union-attr]


def _model(name: str):  # type: ignore[no-untyped-def]
    entry = SNAPSHOT.find_model(name)
    assert entry is not None, name
    return entry.spec


def _mistral_like(**overrides: Any) -> dict[str, Any]:
    config: dict[str, Any] = {
        "architectures": ["MistralForCausalLM"],
        "model_type": "mistral",
        "hidden_size": 1024,
        "intermediate_size": 2048,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "num_hidden_layers": 4,
        "vocab_size": 32000,
        "max_position_embeddings": 32768,
        "sliding_window": 4096,
        "torch_dtype": "bfloat16",
    }
    config.update(overrides)
    return config


@pytest.mark.parametrize(
    ("name", "window", "layers"),
    [
        # Mistral-7B-v0.1: max_position_embeddings 32768, sliding_window 4096 on every layer.
        ("mistral-7b-v0.1", 4096, 32),
        # Gemma-2-9B: 8192 positions, window 4096 on every other of its 42 layers.
        ("gemma-2-9b", 4096, 42),
        # Gemma-3-4B: 131072 positions (not rope-scaled by vLLM), window 1024 on 5 of every 6 of 34 layers.
        ("gemma-3-4b", 1024, 34),
        # gpt-oss-20b: 131072 positions, YaRN (not scaled by vLLM 0.32), window 128 on half of 24 layers.
        ("gpt-oss-20b", 128, 24),
    ],
)
def test_the_default_length_is_the_window_and_every_layer_is_full_attention(
    name: str, window: int, layers: int
) -> None:
    published = _model(name)
    assert published.sliding_window is not None
    result = plan(PlanRequest(model=published, gpu=H100, disable_sliding_window=True))
    assert result.settings.max_model_len == window
    groups = result.layout.groups
    assert {group.spec.kind for group in groups} == {LayerType.FULL}
    assert sum(group.num_layers for group in groups) == layers
    # A full-attention request of `window` tokens needs cdiv(window, block) blocks per group.
    block = result.kv_cache.block_size
    assert result.kv_cache.blocks_per_request == len(groups) * cdiv(window, block)


def test_without_the_flag_the_same_model_keeps_its_window() -> None:
    result = plan(PlanRequest(model=_model("mistral-7b-v0.1"), gpu=H100))
    assert result.settings.max_model_len == 32768
    assert {group.spec.kind for group in result.layout.groups} == {LayerType.SLIDING}


def test_a_model_without_a_window_is_unchanged() -> None:
    model = _model("llama-3.1-8b")
    plain = plan(PlanRequest(model=model, gpu=H100))
    flagged = plan(PlanRequest(model=model, gpu=H100, disable_sliding_window=True))
    assert flagged.settings.max_model_len == plain.settings.max_model_len == 131072
    assert flagged.kv_cache.num_gpu_blocks == plain.kv_cache.num_gpu_blocks


def test_the_cap_comes_before_a_linear_rope_factor() -> None:
    # 4096 positions × linear factor 4 = 16384 by default; the window 2048 is capped first, then scaled: 8192.
    model = parse_hf_config(
        _mistral_like(
            max_position_embeddings=4096, sliding_window=2048, rope_scaling={"type": "linear", "factor": 4.0}
        )
    )
    assert model.max_model_len == 16384
    result = plan(PlanRequest(model=model, gpu=H100, disable_sliding_window=True))
    assert result.settings.max_model_len == 2048 * 4


def test_a_window_longer_than_the_model_leaves_the_length_and_still_removes_the_window() -> None:
    model = parse_hf_config(_mistral_like(max_position_embeddings=32768, sliding_window=65536))
    result = plan(PlanRequest(model=model, gpu=H100, disable_sliding_window=True))
    assert result.settings.max_model_len == 32768
    assert {group.spec.kind for group in result.layout.groups} == {LayerType.FULL}


def test_a_longer_max_model_len_is_refused_naming_the_window() -> None:
    result = plan(
        PlanRequest(
            model=_model("mistral-7b-v0.1"), gpu=H100, disable_sliding_window=True, max_model_len=8192
        )
    )
    assert not result.fits
    first = result.errors[0]
    assert first.code == "max_model_len_over_derived"
    assert (
        "User-specified max_model_len (8192) is greater than the derived max_model_len (sliding_window=4096.0"
        in (first.text)
    )


def test_cohere2_cannot_be_built_without_its_window() -> None:
    # commandr.py adds 1 to config.sliding_window for Cohere 2's sliding layers; the flag sets it to None.
    config = _mistral_like(
        architectures=["Cohere2ForCausalLM"],
        model_type="cohere2",
        sliding_window=4096,
        sliding_window_pattern=4,
        max_position_embeddings=8192,
    )
    model = parse_hf_config(config)
    assert plan(PlanRequest(model=model, gpu=H100)).fits
    result = plan(PlanRequest(model=model, gpu=H100, disable_sliding_window=True))
    assert not result.fits
    assert result.errors[0].code == "disable_sliding_window_unsupported"


def test_qwen2_mixed_sliding_is_still_refused() -> None:
    # Qwen2Model asserts on the published config's layer_types, which the flag does not rewrite.
    config = _mistral_like(
        architectures=["Qwen2ForCausalLM"],
        model_type="qwen2",
        use_sliding_window=True,
        max_window_layers=2,
        sliding_window=4096,
    )
    model = parse_hf_config(config)
    assert {LayerType.FULL, LayerType.SLIDING} <= set(model.resolved_layer_types)
    for flag in (False, True):
        result = plan(PlanRequest(model=model, gpu=H100, engine="vllm-0.32", disable_sliding_window=flag))
        assert [m.code for m in result.errors][:1] == ["sliding_window_some_layers"]
