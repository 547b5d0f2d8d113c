"""The configurations of the simulator refactor check (``test_simulator_golden.py``).

A varied set: saturated and Poisson/bursty rates, the client's ``--max-concurrency`` gate, small token budgets
(chunked prefill), a KV pool small enough to preempt, the V0 scheduler, synchronous scheduling, sliding-window,
MoE, MLA and hybrid (Mamba) layouts, tensor parallelism, ShareGPT and random lengths with a shared prefix, and
requests longer than ``max_model_len``; plus rate searches and a simulated sweep, whose paths depend on every
simulated figure. ``python -m tests.core.serving.simulator_golden_cases`` re-records the golden file.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from pathlib import Path
from typing import Any

from service.catalog.builtin import builtin_snapshot
from service.core.planner import PlanRequest
from service.core.recommend import Workload, _rate_search, sweep
from service.core.serving import BenchmarkSpec, SloTarget, max_rate_within_slo, simulate

GOLDEN = Path(__file__).resolve().parents[2] / "data" / "simulator-golden.json"


def _request(model: str, gpu: str, **changes: Any) -> PlanRequest:
    catalog = builtin_snapshot()
    m, g = catalog.find_model(model), catalog.find_gpu(gpu)
    assert m is not None and g is not None
    return PlanRequest(model=m.spec, gpu=g.spec, **changes)


def _spec(**changes: Any) -> BenchmarkSpec:
    values: dict[str, Any] = {"num_prompts": 120, "random_input_len": 700, "random_output_len": 150}
    values.update(changes)
    return BenchmarkSpec(**values)


def simulation_cases() -> list[tuple[str, PlanRequest, BenchmarkSpec]]:
    llama = _request("llama-3.1-8b", "h100-sxm-80gb", max_model_len=8192)
    small_pool = _request(
        "llama-3.1-8b", "h100-sxm-80gb", max_model_len=4096, kv_cache_memory_bytes=2 * 2**30
    )
    return [
        ("saturated", llama, _spec(request_rate=math.inf)),
        ("poisson", llama, _spec(request_rate=12.0)),
        ("bursty", llama, _spec(request_rate=8.0, burstiness=0.5, seed=3)),
        ("max-concurrency", llama, _spec(max_concurrency=16, random_range_ratio=0.5)),
        ("max-concurrency-poisson", llama, _spec(request_rate=30.0, max_concurrency=8)),
        (
            "chunked-prefill",
            _request("llama-3.1-8b", "h100-sxm-80gb", max_model_len=8192, max_num_batched_tokens=512),
            _spec(request_rate=20.0, random_input_len=2000),
        ),
        (
            "shared-prefix-max-num-seqs",
            _request("llama-3.1-8b", "a100-sxm4-80gb", max_model_len=8192, max_num_seqs=32),
            _spec(request_rate=15.0, random_prefix_len=512, random_range_ratio=0.3),
        ),
        ("preemption-small-pool", small_pool, _spec(random_input_len=1500, random_output_len=600)),
        ("preemption-small-pool-poisson", small_pool, _spec(request_rate=40.0, random_output_len=800)),
        ("sharegpt", llama, _spec(dataset_name="sharegpt", num_prompts=200, request_rate=20.0)),
        ("sharegpt-saturated", llama, _spec(dataset_name="sharegpt", num_prompts=200, request_rate=math.inf)),
        (
            "v0-engine",
            _request("llama-3.1-8b", "a100-sxm4-80gb", engine="vllm-0.6", max_model_len=4096),
            _spec(request_rate=10.0),
        ),
        (
            "v0-engine-small-pool",
            _request("llama-2-7b", "l4", engine="vllm-0.10-v0", max_model_len=4096),
            _spec(random_input_len=1200, random_output_len=400),
        ),
        (
            "synchronous",
            _request("qwen3-8b", "l40s", max_model_len=8192, async_scheduling=False),
            _spec(request_rate=6.0),
        ),
        (
            "older-v1-release",
            _request("llama-3.1-8b", "h100-sxm-80gb", engine="vllm-0.11", max_model_len=8192),
            _spec(request_rate=25.0, max_concurrency=48),
        ),
        (
            "sliding-window",
            _request("gemma-2-9b", "h100-sxm-80gb", max_model_len=8192),
            _spec(request_rate=9.0),
        ),
        (
            # Releases before the hybrid KV manager allocate sliding-window layers as full ones: simple block
            # demand, windowed reads.
            "sliding-window-full-blocks",
            _request("gemma-2-9b", "h100-sxm-80gb", engine="vllm-0.11", max_model_len=8192),
            _spec(request_rate=9.0, random_input_len=3000, random_output_len=1200),
        ),
        ("sliding-window-gpt-oss", _request("gpt-oss-20b", "h100-sxm-80gb"), _spec(request_rate=math.inf)),
        ("moe", _request("qwen3-30b-a3b", "h200", max_model_len=16384), _spec(request_rate=14.0)),
        (
            "mla-tp",
            _request("deepseek-v2-lite", "a100-sxm4-80gb", tensor_parallel_size=2, max_model_len=8192),
            _spec(request_rate=11.0),
        ),
        (
            "hybrid-mamba",
            _request("granite-4.0-h-small", "h100-sxm-80gb", max_model_len=8192),
            _spec(request_rate=7.0),
        ),
        (
            "tp-fp8",
            _request(
                "llama-3.1-70b",
                "h100-sxm-80gb",
                tensor_parallel_size=4,
                quantization="fp8",
                max_model_len=8192,
            ),
            _spec(request_rate=5.0, random_output_len=300),
        ),
        (
            "too-long-for-max-model-len",
            _request("llama-3.1-8b", "l4", max_model_len=1024),
            _spec(request_rate=4.0, random_input_len=800, random_output_len=200, random_range_ratio=0.4),
        ),
    ]


def simulation_figures(request: PlanRequest, spec: BenchmarkSpec) -> dict[str, Any]:
    sim = simulate(request, spec)
    return {
        "result": sim.result.as_dict(),
        # 200 points of 5 figures each: kept as a digest of their exact repr.
        "timeline_sha256": hashlib.sha256(
            repr([dataclasses.astuple(p) for p in sim.timeline]).encode()
        ).hexdigest(),
        "num_preemptions": sim.num_preemptions,
        "num_steps": sim.num_steps,
        "num_steps_with_output": sim.num_steps_with_output,
        "prefix_cache_hit_tokens": sim.prefix_cache_hit_tokens,
        "peak_running": sim.peak_running,
        "messages": list(sim.messages),
    }


def search_cases() -> list[tuple[str, PlanRequest, SloTarget]]:
    return [
        (
            "search-p99",
            _request("llama-3.1-8b", "h100-sxm-80gb", max_model_len=8192),
            SloTarget(ttft_seconds=1.0, tpot_seconds=0.05, percentile="p99"),
        ),
        (
            "search-tight-tpot",
            _request("qwen3-8b", "l40s", max_model_len=8192),
            SloTarget(ttft_seconds=0.5, tpot_seconds=0.02, percentile="p50"),
        ),
    ]


def search_figures(request: PlanRequest, slo: SloTarget) -> dict[str, Any]:
    found = max_rate_within_slo(request, slo, prompt_tokens=1024, output_tokens=200, num_prompts=150)
    return {
        "max_request_rate": found.max_request_rate,
        "ceiling_request_rate": found.ceiling_request_rate,
        "simulations": found.simulations,
        "at_rate": found.at_rate.result.as_dict() if found.at_rate else None,
    }


def sweep_figures() -> list[dict[str, Any]]:
    catalog = builtin_snapshot()
    model = catalog.find_model("llama-3.1-8b")
    assert model is not None
    gpus = [catalog.find_gpu(name) for name in ("h100-sxm-80gb", "l4", "a100-sxm4-40gb")]
    workload = Workload(requests_per_second=5, prompt_tokens=1000, output_tokens=200, tpot_seconds=0.05)
    _rate_search.cache_clear()
    options = sweep(
        PlanRequest(model=model.spec), workload, [g.spec for g in gpus if g], simulate_every_option=True
    )
    # No option has speculative decoding (``Option.speculative`` is None): its figures are those recorded.
    assert all(o.speculative is None for o in options)
    return [
        json.loads(
            json.dumps(
                {
                    f.name: getattr(o, f.name)
                    for f in dataclasses.fields(o)
                    if f.name not in ("plan", "speculative")
                }
            )
        )
        for o in options
    ]


def record() -> dict[str, Any]:
    return {
        "simulations": {name: simulation_figures(r, s) for name, r, s in simulation_cases()},
        "searches": {name: search_figures(r, slo) for name, r, slo in search_cases()},
        "sweep": sweep_figures(),
    }


if __name__ == "__main__":
    GOLDEN.write_text(json.dumps(record(), indent=1, sort_keys=True) + "\n")
