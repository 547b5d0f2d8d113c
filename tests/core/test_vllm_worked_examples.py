"""Worked checks from shared/docs/vllm-kv-cache.md and vLLM's own source, through the exact-budget path."""

from __future__ import annotations

import pytest

from service.core.errors import InvalidSpec
from service.core.planner import PlanRequest, plan
from service.core.specs import GpuSpec, LayerType, ModelSpec
from service.core.units import GIB
from tests.core.model_cards import LLAMA_31_8B

# Gemma-3-27B text model: 62 layers, every 6th full attention, 16 KV heads × 128, sliding window 1024.
GEMMA_3_27B = ModelSpec(
    num_hidden_layers=62,
    hidden_size=5376,
    num_attention_heads=32,
    num_key_value_heads=16,
    head_dim=128,
    vocab_size=262_208,
    num_parameters=27_432_406_640,
    max_model_len=131_072,
    sliding_window=1024,
    layer_types=tuple(LayerType.FULL if (i + 1) % 6 == 0 else LayerType.SLIDING for i in range(62)),
)


@pytest.mark.parametrize("engine", ["vllm-0.15", "vllm-0.20", "vllm-0.33"])
def test_llama_31_8b_with_55_gib_has_28160_blocks(engine: str) -> None:
    result = plan(
        PlanRequest(model=LLAMA_31_8B, engine=engine, kv_cache_memory_bytes=55 * GIB, block_size=16)
    )
    kv = result.kv_cache
    assert kv.bytes_per_token == 128 * 1024
    assert kv.bytes_per_block == 2 * 1024 * 1024
    assert kv.num_gpu_blocks == 28_160
    assert kv.kv_cache_size_tokens == 450_560
    assert f"{kv.max_concurrency:.2f}" == "3.44"
    assert kv.usable_blocks == 28_159  # the null block
    assert result.exact


@pytest.mark.parametrize(
    ("engine", "tokens", "concurrency"),
    [
        # ≤0.20 logs num_blocks // groups × block_size; from 0.21 int(concurrency × max_model_len)
        ("vllm-0.19", 74_896, "2.81"),
        ("vllm-0.21", 368_540, "2.81"),
        # 0.28+: sliding layers keep 2 × max_num_batched_tokens in flight with async scheduling
        ("vllm-0.28", 291_658, "2.23"),
    ],
)
def test_gemma_3_27b_groups_and_tokens_follow_the_release(engine: str, tokens: int, concurrency: str) -> None:
    result = plan(
        PlanRequest(
            model=GEMMA_3_27B,
            engine=engine,
            kv_cache_memory_bytes=40 * GIB,
            block_size=16,
            max_num_batched_tokens=8192,
        )
    )
    kv = result.kv_cache
    assert kv.page_size_bytes == 16 * 16 * 2 * 128 * 2 == 131_072
    assert kv.group_size == 10
    assert kv.num_groups == 7  # six sliding groups (two padding layers) + one full group
    assert kv.padding_layers == 8
    assert kv.num_gpu_blocks == 32_768
    assert kv.kv_cache_size_tokens == tokens
    assert f"{kv.max_concurrency:.2f}" == concurrency
    assert any(
        "Add 8 padding layers, may waste at most 15.38% KV cache memory" in m.text for m in result.messages
    )


def test_group_size_is_the_smallest_bucket_before_0_12() -> None:
    # 13 sliding vs 11 full: 0.12+ would take 13 (13 < 1.25 × 11); 0.11 always takes the smallest.
    model = ModelSpec(
        num_hidden_layers=24,
        hidden_size=1024,
        num_attention_heads=8,
        num_key_value_heads=4,
        head_dim=128,
        vocab_size=1000,
        num_parameters=10**8,
        max_model_len=4096,
        sliding_window=512,
        layer_types=(LayerType.SLIDING,) * 13 + (LayerType.FULL,) * 11,
    )
    old = plan(
        PlanRequest(model=model, engine="vllm-0.11", kv_cache_memory_bytes=GIB, block_size=16)
    ).kv_cache
    new = plan(
        PlanRequest(model=model, engine="vllm-0.12", kv_cache_memory_bytes=GIB, block_size=16)
    ).kv_cache
    assert old.group_size == 11
    assert new.group_size == 13


def test_mla_keeps_one_latent_head_on_every_rank() -> None:
    deepseek_like = ModelSpec(
        num_hidden_layers=61,
        hidden_size=7168,
        num_attention_heads=128,
        num_key_value_heads=128,
        head_dim=576,
        vocab_size=129_280,
        num_parameters=671_000_000_000,
        max_model_len=163_840,
        kv_lora_rank=512,
        qk_rope_head_dim=64,
        layer_types=(LayerType.MLA,) * 61,
    )
    for tp in (1, 8):
        kv = plan(
            PlanRequest(
                model=deepseek_like,
                engine="vllm-0.33",
                kv_cache_memory_bytes=GIB,
                block_size=64,
                tensor_parallel_size=tp,
            )
        ).kv_cache
        assert kv.bytes_per_token == 61 * 576 * 2 == 70_272  # 1,152 B per layer in bf16
    fp8 = plan(
        PlanRequest(
            model=deepseek_like,
            engine="vllm-0.33",
            kv_cache_memory_bytes=GIB,
            block_size=64,
            kv_cache_dtype="fp8",
        )
    ).kv_cache
    assert fp8.bytes_per_token == 61 * 576


def test_kv_heads_replicate_when_tp_exceeds_them() -> None:
    mqa = ModelSpec(
        num_hidden_layers=32,
        hidden_size=4544,
        num_attention_heads=64,
        num_key_value_heads=1,
        head_dim=64,
        vocab_size=65_024,
        num_parameters=7 * 10**9,
        max_model_len=2048,
    )
    one = plan(PlanRequest(model=mqa, engine="vllm-0.33", kv_cache_memory_bytes=GIB, block_size=16)).kv_cache
    four = plan(
        PlanRequest(
            model=mqa, engine="vllm-0.33", kv_cache_memory_bytes=GIB, block_size=16, tensor_parallel_size=4
        )
    )
    assert four.kv_cache.bytes_per_token == one.bytes_per_token == 32 * 1 * 2 * 64 * 2
    assert any(m.code == "kv_head_replication" for m in four.messages)


def test_v0_concurrency_has_no_ceiling_division() -> None:
    gpu = GpuSpec(name="any", memory_bytes=80 * GIB)
    result = plan(
        PlanRequest(
            model=LLAMA_31_8B,
            gpu=gpu,
            engine="vllm-0.10-v0",
            num_gpu_blocks_override=1024,
            block_size=16,
            max_model_len=20_000,
        )
    )
    kv = result.kv_cache
    assert kv.num_gpu_blocks == 1024
    assert kv.max_concurrency == pytest.approx(1024 * 16 / 20_000)
    assert kv.kv_cache_size_tokens == 1024 * 16


def test_kv_cache_memory_bytes_is_refused_by_releases_that_lack_the_flag() -> None:
    with pytest.raises(InvalidSpec) as info:
        plan(PlanRequest(model=LLAMA_31_8B, engine="vllm-0.10", kv_cache_memory_bytes=GIB))
    assert info.value.field == "kv_cache_memory_bytes"


def test_pipeline_stages_split_layers_and_the_engine_takes_the_smallest_block_count() -> None:
    # 30 layers on 4 stages → 7, 8, 8, 7 (get_pp_indices); the 8-layer stages have the fewest blocks.
    model = ModelSpec(
        num_hidden_layers=30,
        hidden_size=4096,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=128,
        vocab_size=32_000,
        num_parameters=7_000_000_000,
        max_model_len=4096,
    )
    result = plan(
        PlanRequest(
            model=model,
            engine="vllm-0.33",
            kv_cache_memory_bytes=GIB,
            block_size=16,
            pipeline_parallel_size=4,
        )
    )
    assert [s.layers for s in result.stages] == [(0, 7), (7, 15), (15, 23), (23, 30)]
    per_block_8 = 8 * 16 * 8 * 2 * 128 * 2
    assert (
        result.kv_cache.num_gpu_blocks == GIB // per_block_8 == min(s.num_gpu_blocks for s in result.stages)
    )


def test_weights_that_do_not_fit_a_pipeline_stage_are_refused() -> None:
    model = ModelSpec(
        num_hidden_layers=8,
        hidden_size=8192,
        num_attention_heads=64,
        num_key_value_heads=8,
        head_dim=128,
        vocab_size=128_256,
        num_parameters=60_000_000_000,
        max_model_len=4096,
    )
    gpu = GpuSpec(name="small", memory_bytes=24 * GIB)
    result = plan(PlanRequest(model=model, gpu=gpu, engine="vllm-0.33", pipeline_parallel_size=2))
    assert not result.fits
    assert any(m.code == "weights_exceed_gpu" for m in result.messages)
