"""``enable_prefix_caching`` through the plan schema: the recorded vLLM 0.32 start-ups of one hybrid, with and
without prefix caching (tests/data/vllm_recorded/granite-hybrid-*.json), give the concurrency vLLM reported."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from service.catalog.builtin import builtin_snapshot
from service.planning.schemas import PlanRequestBody
from service.planning.service import make_plan

RECORDED = Path(__file__).resolve().parents[1] / "data" / "vllm_recorded"


@pytest.mark.parametrize(
    ("case", "setting"),
    [("granite-hybrid-mamba2", {}), ("granite-hybrid-no-prefix-caching", {"enable_prefix_caching": False})],
)
def test_prefix_caching_sets_the_state_pages_of_a_request(case: str, setting: dict[str, bool]) -> None:
    record = json.loads((RECORDED / f"{case}.json").read_text())
    body = PlanRequestBody.model_validate(
        {
            "model": {"hf_config": record["hf_config"]},
            "device": "cpu",
            "engine": "vllm-0.32",
            "kv_cache_memory_bytes": record["kv_cache_memory_bytes"],
            "max_model_len": record["max_model_len"],
            "max_num_batched_tokens": 2048,
            "max_num_seqs": 128,
            **setting,
        }
    )
    kv = json.loads(make_plan(builtin_snapshot(), body).model_dump_json())["kv_cache"]
    assert kv["num_gpu_blocks"] == record["reported"]["num_gpu_blocks"]
    assert kv["max_concurrency"] == pytest.approx(record["reported"]["max_concurrency"], rel=1e-12)
