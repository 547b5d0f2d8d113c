"""Mamba2 hybrids as vLLM 0.32 caches them: layer patterns, state dtypes, the hybrid block grain and checkpoints.

Golden values are computed here from vLLM's formulas (``MambaStateShapeCalculator.mamba2_state_shape``,
``Platform._align_hybrid_block_size``, ``MambaSpec.max_memory_usage_bytes``); the recorded real-vLLM start-ups
(tests/data/vllm_recorded) check the same rules end to end.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from service.core.errors import ConfigError
from service.core.hf_config import parse_hf_config
from service.core.planner import PlanRequest, plan
from service.core.specs import LayerType
from service.core.units import cdiv

RECORDED = Path(__file__).resolve().parents[1] / "data" / "vllm_recorded"
GIB = 2**30


def config(name: str) -> dict[str, Any]:
    config: dict[str, Any] = json.loads((RECORDED / f"{name}.json").read_text())["hf_config"]
    return config


def request(cfg: dict[str, Any], **changes: Any) -> PlanRequest:
    fields: dict[str, Any] = {
        "model": parse_hf_config(cfg),
        "engine": "vllm-0.32",
        "device": "cpu",
        "kv_cache_memory_bytes": GIB,
        "max_model_len": 4096,
        "max_num_batched_tokens": 2048,
        "max_num_seqs": 128,
    }
    fields.update(changes)
    return PlanRequest(**fields)


def mamba2_state_bytes(cfg: dict[str, Any], conv_bytes: int, ssm_bytes: int) -> int:
    heads, head_dim = cfg["mamba_num_heads"], cfg["mamba_head_dim"]
    conv = (heads * head_dim + 2 * cfg["n_groups"] * cfg["ssm_state_size"]) * (cfg["conv_kernel"] - 1)
    ssm = heads * head_dim * cfg["ssm_state_size"]
    return conv * conv_bytes + ssm * ssm_bytes


def test_nemotron_h_pattern_gives_one_kind_per_block() -> None:
    model = parse_hf_config(config("nemotron-h-hybrid"))  # "M-M*-"
    assert model.resolved_layer_types == (
        LayerType.MAMBA,
        LayerType.MLP,
        LayerType.MAMBA,
        LayerType.FULL,
        LayerType.MLP,
    )
    assert model.state is not None and model.state.ssm_dtype == "float32"  # Nemotron-H's default


@pytest.mark.parametrize("pattern", ["M-M*", "M-Mx-", 5])
def test_a_pattern_that_does_not_describe_every_layer_is_refused(pattern: object) -> None:
    cfg = {**config("nemotron-h-hybrid"), "hybrid_override_pattern": pattern}
    with pytest.raises(ConfigError) as exc:
        parse_hf_config(cfg)
    assert exc.value.field == "hybrid_override_pattern"


def test_only_mamba_and_attention_blocks_take_cache_pages() -> None:
    result = plan(request(config("nemotron-h-hybrid")))
    # 2 Mamba2 layers + 1 attention layer, each its own group of one (the MLP blocks register nothing)
    assert (result.kv_cache.num_groups, result.kv_cache.group_size) == (3, 1)


def test_the_hybrid_block_is_raised_in_steps_of_the_configured_block() -> None:
    cfg = config("nemotron-h-hybrid")
    state = mamba2_state_bytes(cfg, conv_bytes=2, ssm_bytes=4)
    per_token = 2 * cfg["num_key_value_heads"] * cfg["head_dim"] * 2
    result = plan(request(cfg))
    assert result.kv_cache.block_size == 128 * cdiv(state, 128 * per_token)  # CPU: 128-token grain
    gpu = plan(request(cfg, device="cuda", block_size=16))
    assert gpu.kv_cache.block_size == 16 * cdiv(state, 16 * per_token)


def test_align_mode_holds_two_state_pages_and_one_prefill_checkpoint_per_mamba2_layer() -> None:
    result = plan(request(config("nemotron-h-hybrid")))
    block = result.kv_cache.block_size
    per_request = cdiv(4096, block) + 2 * (2 + 1)  # attention pages + 2 Mamba2 layers × (2 + 1 checkpoint)
    assert result.kv_cache.max_concurrency == pytest.approx(result.kv_cache.num_gpu_blocks / per_request)
    before = plan(request(config("nemotron-h-hybrid"), engine="vllm-0.31"))
    assert before.kv_cache.max_concurrency == pytest.approx(
        before.kv_cache.num_gpu_blocks / (cdiv(4096, before.kv_cache.block_size) + 2 * 2)
    )


def test_cpu_ssm_state_is_float32_on_avx512_bf16_hosts_only() -> None:
    cfg = config("granite-hybrid-mamba2")
    per_token = 2 * cfg["num_key_value_heads"] * (cfg["hidden_size"] // cfg["num_attention_heads"]) * 2
    heads, head_dim, ds = cfg["mamba_n_heads"], cfg["mamba_d_head"], cfg["mamba_d_state"]
    inner = cfg["mamba_expand"] * cfg["hidden_size"]
    conv = (inner + 2 * cfg["mamba_n_groups"] * ds) * (cfg["mamba_d_conv"] - 1) * 2
    for host_bf16, ssm_bytes in ((True, 4), (False, 2)):
        state = conv + heads * head_dim * ds * ssm_bytes
        result = plan(request(cfg, cpu_avx512_bf16=host_bf16))
        assert result.kv_cache.block_size == 128 * cdiv(state, 128 * per_token), host_bf16
    # an explicit --mamba-ssm-cache-dtype is kept on GPUs, and float16 halves the SSM state there
    on_gpu = plan(request(cfg, device="cuda", block_size=16, mamba_ssm_cache_dtype="float16"))
    state = conv + heads * head_dim * ds * 2
    assert on_gpu.kv_cache.block_size == 16 * cdiv(state, 16 * per_token)


def test_an_unknown_mamba_cache_dtype_is_refused_naming_the_flag() -> None:
    from service.core.errors import InvalidSpec

    with pytest.raises(InvalidSpec) as exc:
        plan(request(config("granite-hybrid-mamba2"), mamba_ssm_cache_dtype="fp8"))
    assert exc.value.field == "mamba_ssm_cache_dtype"


def test_cpu_attention_kernels_refuse_blocks_that_are_not_multiples_of_32() -> None:
    cfg = config("llama-gqa")
    refused = plan(request(cfg, block_size=48, max_model_len=2048))
    assert not refused.fits
    assert [m.text for m in refused.errors] == ["No common block size for 48 (CPU_ATTN: [MultipleOf(32)])."]
    assert plan(request(cfg, block_size=64, max_model_len=2048)).fits
    assert plan(request(cfg, device="cuda", block_size=48, max_model_len=2048)).fits
