"""The seed article's worked figures (shared/docs/seed-figures.md), reproduced exactly by the core."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from service.core.hf_config import parse_hf_config
from service.core.planner import PlanRequest, plan, projection_counts
from service.core.specs import GpuSpec, ModelSpec

CATALOG = Path(__file__).resolve().parents[2] / "service" / "catalog" / "builtin" / "models"
SEED_GPU = GpuSpec(name="seed-80gb", memory_bytes=80 * 10**9)  # "an 80 GB card", decimal as in the article
LLAMA2_7B_PARAMS = 6_738_415_616


def llama2_7b(num_key_value_heads: int = 32) -> ModelSpec:
    config = json.loads((CATALOG / "llama-2-7b.json").read_text())["hf_config"]
    return parse_hf_config(
        {**config, "num_key_value_heads": num_key_value_heads}, num_parameters=LLAMA2_7B_PARAMS
    )


def ideal(model: ModelSpec, **settings: object) -> PlanRequest:
    base: dict[str, object] = {"engine": "ideal", "gpu_memory_utilization": 1.0, "max_model_len": 4096}
    return PlanRequest(model=model, gpu=SEED_GPU, **(base | settings))  # type: ignore[arg-type]


def test_kv_bytes_per_token_is_half_a_mebibyte() -> None:
    # 2 (K and V) × 32 layers × 32 KV heads × 128 head dim × 2 bytes
    assert plan(ideal(llama2_7b())).kv_cache.bytes_per_token == 2 * 32 * 32 * 128 * 2 == 524_288


@pytest.mark.parametrize(
    ("context", "sequences", "expected_bytes"),
    [(4_096, 1, 2_147_483_648), (32_768, 1, 17_179_869_184), (4_096, 32, 68_719_476_736)],
)
def test_kv_cache_for_one_or_many_sequences(context: int, sequences: int, expected_bytes: int) -> None:
    result = plan(ideal(llama2_7b(), max_model_len=context, max_num_seqs=sequences))
    assert result.kv_cache.bytes_per_sequence * sequences == expected_bytes
    assert result.kv_cache.bytes_for_max_num_seqs == expected_bytes
    assert (
        round(expected_bytes / 1e9, 1)
        == {2_147_483_648: 2.1, 17_179_869_184: 17.2, 68_719_476_736: 68.7}[expected_bytes]
    )


def test_weights_are_about_13_5_gb() -> None:
    result = plan(ideal(llama2_7b()))
    assert result.memory.weights_bytes == LLAMA2_7B_PARAMS * 2
    assert round(result.memory.weights_bytes / 1e9, 1) == 13.5
    # 80 − 13.5 = 66.5 GB left for the cache, before any runtime overhead (the ideal profile has none)
    assert round(result.memory.kv_cache_bytes / 1e9, 1) == 66.5


@pytest.mark.parametrize(
    ("kv_heads", "kv_dtype", "bytes_per_token", "sequences"),
    [(32, None, 524_288, 30), (8, None, 131_072, 123), (8, "int8", 65_536, 247)],
)
def test_users_that_fit_on_an_80gb_card(
    kv_heads: int, kv_dtype: str | None, bytes_per_token: int, sequences: int
) -> None:
    result = plan(ideal(llama2_7b(kv_heads), kv_cache_dtype=kv_dtype))
    assert result.kv_cache.bytes_per_token == bytes_per_token
    assert result.kv_cache.max_concurrent_sequences == sequences
    assert int(result.kv_cache.max_concurrency) == sequences
    assert result.fits


def test_projection_counts_with_and_without_a_cache() -> None:
    counts = projection_counts(5, 64)
    assert counts.without_cache_per_layer == sum(5 + t for t in range(64)) == 2_336
    assert counts.with_cache_per_layer == 5 + 63 == 68
    assert round(counts.ratio) == 34
