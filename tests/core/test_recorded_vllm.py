"""Block counts against what a real vLLM reported (tests/data/vllm_recorded: vLLM 0.32.0, CPU build).

Each case holds the config.json, the CLI flags and the KV budget vLLM ran with, and the numbers vLLM logged and
exported in ``vllm:cache_config_info``. With the budget given, kvcap's numbers must be equal, not close.
Re-record with ``tests/e2e/record_vllm_cases.py``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from service.core.hf_config import parse_hf_config
from service.core.planner import PlanRequest, plan

CASES = sorted((Path(__file__).resolve().parents[1] / "data" / "vllm_recorded").glob("*.json"))


def _flag(args: list[str], flag: str) -> str | None:
    return args[args.index(flag) + 1] if flag in args else None


def _int_flag(args: list[str], flag: str) -> int | None:
    value = _flag(args, flag)
    return int(value) if value is not None else None


def request_for(case: dict[str, Any]) -> PlanRequest:
    args = case["args"]
    major, minor = case["vllm_version"].split(".")[:2]
    return PlanRequest(
        model=parse_hf_config(case["hf_config"]),
        engine=f"vllm-{major}.{minor}",
        device=case["device"],
        kv_cache_memory_bytes=case["kv_cache_memory_bytes"],
        max_model_len=case["max_model_len"],
        kv_cache_dtype=_flag(args, "--kv-cache-dtype"),
        dtype=_flag(args, "--dtype"),
        block_size=_int_flag(args, "--block-size"),
        tensor_parallel_size=_int_flag(args, "--tensor-parallel-size") or 1,
        max_num_batched_tokens=_int_flag(args, "--max-num-batched-tokens"),
        max_num_seqs=_int_flag(args, "--max-num-seqs"),
    )


def test_there_are_recorded_cases_for_every_layer_kind() -> None:
    ids = {path.stem for path in CASES}
    assert len(CASES) >= 15
    for needed in (
        "llama-mha",
        "llama-gqa",
        "llama-mqa",
        "falcon-mqa",
        "mistral-sliding",
        "gemma3-hybrid-6l",
        "deepseek-v2-mla",
        "qwen3-next-hybrid",
    ):
        assert needed in ids


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_block_counts_equal_what_vllm_reported(path: Path) -> None:
    case = json.loads(path.read_text())
    reported = case["reported"]
    kv = plan(request_for(case)).kv_cache
    assert kv.block_size == reported["block_size"]
    assert kv.num_gpu_blocks == reported["num_gpu_blocks"]
    assert kv.kv_cache_size_tokens == reported["kv_cache_size_tokens"]
    assert kv.max_concurrency == pytest.approx(reported["max_concurrency"], rel=1e-12)
    assert int(case["cache_config_info"]["num_gpu_blocks"]) == reported["num_gpu_blocks"]
