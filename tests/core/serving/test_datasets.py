"""Request lengths as vllm bench serve samples them (vllm/benchmarks/datasets/{random,sharegpt}.py)."""

from __future__ import annotations

import math

import pytest

from service.core.errors import InvalidSpec
from service.core.serving.datasets import (
    BenchmarkSpec,
    is_valid_sharegpt_pair,
    random_bounds,
    sample_requests,
    sharegpt_table,
)


def test_random_bounds_floor_the_low_end_and_ceil_the_high_end() -> None:
    # 1000 × (1 ± 0.25) = [750, 1250]; 7 × (1 ± 0.5) = [floor 3.5, ceil 10.5] = [3, 11].
    assert random_bounds(1000, 0.25) == (750, 1250)
    assert random_bounds(7, 0.5) == (3, 11)
    # Output lengths are at least 1 (vLLM clamps output_low/high to ≥ 1).
    assert random_bounds(1, 0.9, minimum=1) == (1, 2)


def test_random_lengths_stay_inside_the_range_and_cover_it() -> None:
    spec = BenchmarkSpec(num_prompts=2000, random_input_len=100, random_output_len=40, random_range_ratio=0.5)
    requests = sample_requests(spec)
    prompts = [r.prompt_tokens for r in requests]
    outputs = [r.output_tokens for r in requests]
    assert min(prompts) >= 50 and max(prompts) <= 150
    assert min(outputs) >= 20 and max(outputs) <= 60
    # Uniform integers: both ends are reached in 2,000 draws and the mean is the midpoint (±2 %).
    assert min(prompts) == 50 and max(prompts) == 150
    assert abs(sum(prompts) / len(prompts) - 100) < 2


def test_range_ratio_zero_gives_exact_lengths() -> None:
    requests = sample_requests(BenchmarkSpec(num_prompts=5, random_input_len=1024, random_output_len=128))
    assert {(r.prompt_tokens, r.output_tokens) for r in requests} == {(1024, 128)}


def test_random_prefix_is_prepended_to_every_prompt() -> None:
    spec = BenchmarkSpec(num_prompts=3, random_input_len=100, random_output_len=10, random_prefix_len=64)
    requests = sample_requests(spec)
    assert all(r.prompt_tokens == 164 and r.shared_prefix_tokens == 64 for r in requests)


def test_sampling_is_deterministic_for_a_seed_and_differs_across_seeds() -> None:
    spec = BenchmarkSpec(num_prompts=50, random_range_ratio=0.5)
    assert sample_requests(spec) == sample_requests(spec)
    other = BenchmarkSpec(num_prompts=50, random_range_ratio=0.5, seed=1)
    assert sample_requests(spec) != sample_requests(other)
    share = BenchmarkSpec(dataset_name="sharegpt", num_prompts=50)
    assert sample_requests(share) == sample_requests(share)


def test_sharegpt_table_rows_pass_vllms_filter() -> None:
    for prompt, output in sharegpt_table().rows:
        assert is_valid_sharegpt_pair(prompt, output)
    assert not is_valid_sharegpt_pair(3, 100)  # prompt < 4
    assert not is_valid_sharegpt_pair(100, 3)  # output < 4
    assert not is_valid_sharegpt_pair(1025, 10)  # prompt > 1024
    assert not is_valid_sharegpt_pair(1000, 1049)  # prompt + output > 2048
    assert is_valid_sharegpt_pair(1024, 1024)


def test_sharegpt_table_means_match_the_published_run_it_was_calibrated_to() -> None:
    # vLLM PR #18566: 229,711 input / 203,068 generated tokens over 1,000 ShareGPT requests (±1 %).
    rows = sharegpt_table().rows
    assert math.isclose(sum(p for p, _ in rows) / len(rows), 229.711, rel_tol=0.01)
    assert math.isclose(sum(o for _, o in rows) / len(rows), 203.068, rel_tol=0.01)
    assert "Reconstruction" in sharegpt_table().source


def test_explicit_requests_are_cycled_to_num_prompts() -> None:
    spec = BenchmarkSpec(dataset_name="explicit", num_prompts=5, requests=((10, 2), (20, 3)))
    assert [(r.prompt_tokens, r.output_tokens) for r in sample_requests(spec)] == [
        (10, 2),
        (20, 3),
        (10, 2),
        (20, 3),
        (10, 2),
    ]


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"dataset_name": "sonnet"}, "benchmark.dataset_name"),
        ({"num_prompts": 0}, "benchmark.num_prompts"),
        ({"request_rate": 0.0}, "benchmark.request_rate"),
        ({"request_rate": float("nan")}, "benchmark.request_rate"),
        ({"burstiness": 0.0}, "benchmark.burstiness"),
        ({"max_concurrency": 0}, "benchmark.max_concurrency"),
        ({"random_input_len": 0}, "benchmark.random_input_len"),
        ({"random_output_len": 0}, "benchmark.random_output_len"),
        ({"random_range_ratio": 1.0}, "benchmark.random_range_ratio"),
        ({"random_prefix_len": -1}, "benchmark.random_prefix_len"),
        ({"dataset_name": "explicit"}, "benchmark.requests"),
        ({"dataset_name": "explicit", "requests": ((0, 5),)}, "benchmark.requests"),
    ],
)
def test_bad_benchmark_values_name_the_field(changes: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidSpec) as error:
        BenchmarkSpec(**changes)  # type: ignore[arg-type]
    assert error.value.field == field
