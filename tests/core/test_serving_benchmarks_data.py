"""The public `vllm bench serve` measurements in tests/data/serving-benchmarks.json are well formed.

The file is the ground truth the serving simulator is fitted on and checked against, so every case must name a
GPU and a model kvcap can plan for, carry its source and the exact lines its numbers were read from, and keep
the measured values under the keys `vllm bench serve --save-result` writes (vllm/benchmarks/serve.py; the same
keys as the older benchmarks/benchmark_serving.py). How the file was collected: tests/data/serving-benchmarks.md.
"""

from __future__ import annotations

import json
import math
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from service.catalog.builtin import builtin_gpus, builtin_model_records
from service.core.hf_config import parse_hf_config

DATA = Path(__file__).resolve().parent.parent / "data" / "serving-benchmarks.json"
NOTES = DATA.with_suffix(".md")

# Keys of the result JSON of `vllm bench serve --save-result` (vllm/benchmarks/serve.py, 0.10.x): the totals and
# throughputs, then mean/median/std/p99 of each per-request latency.
RESULT_KEYS = frozenset(
    {
        "duration",
        "completed",
        "total_input_tokens",
        "total_output_tokens",
        "request_throughput",
        "output_throughput",
        "total_token_throughput",
    }
    | {
        f"{stat}_{metric}_ms"
        for stat in ("mean", "median", "std", "p99")
        for metric in ("ttft", "tpot", "itl", "e2el")
    }
)
COUNT_KEYS = frozenset({"completed", "total_input_tokens", "total_output_tokens"})
REQUIRED = {
    "id": str,
    "split": str,
    "source_group": str,
    "source_seq": int,
    "source": str,
    "source_title": str,
    "quote": str,
    "gpu": str,
    "tensor_parallel_size": int,
    "pipeline_parallel_size": int,
    "dtype": str,
    "kv_cache_dtype": str,
    "benchmark": dict,
    "measured": dict,
    "confidence": str,
    "notes": str,
}
OPTIONAL_INT = ("max_num_seqs", "max_num_batched_tokens", "max_model_len")
NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


def _load() -> dict[str, Any]:
    return json.loads(DATA.read_text())


DOC = _load()
CASES: list[dict[str, Any]] = DOC["cases"]
IDS = [case["id"] for case in CASES]


def test_the_file_has_a_description_and_cases() -> None:
    assert DOC["description"].strip()
    assert isinstance(CASES, list) and CASES
    assert NOTES.exists(), "the sources and reading method are described next to the data"


def test_case_ids_are_unique() -> None:
    assert len(IDS) == len(set(IDS))


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_every_case_has_the_schema_fields_with_their_types(case: dict[str, Any]) -> None:
    for key, kind in REQUIRED.items():
        assert isinstance(case.get(key), kind), f"{key} must be a {kind.__name__}"
        assert not isinstance(case[key], bool), key
    assert case["split"] in ("fit", "held_back")
    assert case["confidence"] in ("high", "medium", "low")
    assert case["tensor_parallel_size"] >= 1 and case["pipeline_parallel_size"] >= 1
    assert case.get("vllm_version") is None or re.fullmatch(r"\d+\.\d+(\.\d+)?\S*", case["vllm_version"])
    for key in OPTIONAL_INT:
        value = case.get(key)
        assert value is None or (isinstance(value, int) and value > 0), key
    assert ("model" in case) != ("hf_config" in case), "exactly one of a catalog model or an hf_config"


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_every_gpu_is_a_kvcap_catalog_gpu(case: dict[str, Any]) -> None:
    names = {gpu.name for gpu in builtin_gpus()}
    assert case["gpu"] in names


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_every_model_is_a_catalog_model_or_carries_a_config_kvcap_can_parse(case: dict[str, Any]) -> None:
    if "model" in case:
        assert case["model"] in {record["name"] for record in builtin_model_records()}
    else:
        spec = parse_hf_config(case["hf_config"])
        assert spec.num_hidden_layers > 0
        assert case.get("hf_config_source", "").startswith("https://"), "an hf_config cites its model card"


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_every_case_cites_an_https_source_and_quotes_it(case: dict[str, Any]) -> None:
    assert case["source"].startswith("https://")
    assert case["source_title"].strip()
    assert len(case["quote"].strip()) >= 20


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_the_benchmark_is_a_valid_vllm_bench_serve_setting(case: dict[str, Any]) -> None:
    bench = case["benchmark"]
    assert bench["dataset_name"] in ("random", "sharegpt")
    assert isinstance(bench["num_prompts"], int) and bench["num_prompts"] > 0
    rate = bench["request_rate"]
    assert rate == "inf" or (isinstance(rate, (int, float)) and not isinstance(rate, bool) and rate > 0)
    concurrency = bench.get("max_concurrency")
    assert concurrency is None or (isinstance(concurrency, int) and concurrency > 0)
    if bench["dataset_name"] == "random":
        assert isinstance(bench["random_input_len"], int) and bench["random_input_len"] > 0
        assert isinstance(bench["random_output_len"], int) and bench["random_output_len"] > 0
        assert 0.0 <= bench.get("random_range_ratio", 0.0) < 1.0


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_measured_values_are_positive_finite_and_keyed_like_vllm_results(case: dict[str, Any]) -> None:
    measured = case["measured"]
    assert measured, "at least one measured value"
    assert set(measured) <= RESULT_KEYS, sorted(set(measured) - RESULT_KEYS)
    assert {"output_throughput", "mean_tpot_ms", "median_tpot_ms", "mean_ttft_ms", "median_ttft_ms"} & set(
        measured
    )
    for key, value in measured.items():
        assert isinstance(value, (int, float)) and not isinstance(value, bool), key
        assert math.isfinite(value) and value > 0, key
        if key in COUNT_KEYS:
            assert isinstance(value, int), key


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_every_measured_value_is_written_in_the_quote(case: dict[str, Any]) -> None:
    quoted = {float(number) for number in NUMBER.findall(case["quote"])}
    missing = {key: value for key, value in case["measured"].items() if float(value) not in quoted}
    assert not missing, f"values not in the quoted lines: {missing}"


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_the_prompt_count_and_lengths_are_written_in_the_quote(case: dict[str, Any]) -> None:
    quoted = {float(number) for number in NUMBER.findall(case["quote"])}
    bench = case["benchmark"]
    settings = {"num_prompts": bench["num_prompts"]}
    if bench["dataset_name"] == "random":
        settings |= {
            "random_input_len": bench["random_input_len"],
            "random_output_len": bench["random_output_len"],
        }
    missing = {key: value for key, value in settings.items() if float(value) not in quoted}
    assert not missing, f"settings not in the quoted lines: {missing}"


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_completed_requests_do_not_exceed_the_prompts_sent(case: dict[str, Any]) -> None:
    completed = case["measured"].get("completed")
    assert completed is None or completed <= case["benchmark"]["num_prompts"]


def test_the_split_follows_the_recorded_order_rule() -> None:
    """Within each source group cases are numbered 0, 1, 2… in the order they were recorded; even → fit."""
    by_group: dict[str, list[int]] = defaultdict(list)
    for case in CASES:
        by_group[case["source_group"]].append(case["source_seq"])
        assert case["split"] == ("fit" if case["source_seq"] % 2 == 0 else "held_back"), case["id"]
    for group, seqs in by_group.items():
        assert sorted(seqs) == list(range(len(seqs))), f"{group}: source_seq must be 0..n-1 without gaps"


def test_both_splits_are_non_empty_and_every_source_with_two_cases_is_in_both() -> None:
    splits: dict[str, set[str]] = defaultdict(set)
    for case in CASES:
        splits[case["source_group"]].add(case["split"])
    assert {case["split"] for case in CASES} == {"fit", "held_back"}
    counts: dict[str, int] = defaultdict(int)
    for case in CASES:
        counts[case["source_group"]] += 1
    for group, seen in splits.items():
        if counts[group] >= 2:
            assert seen == {"fit", "held_back"}, group
