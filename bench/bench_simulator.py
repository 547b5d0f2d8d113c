"""Serving-simulator speed: closed-form decode stretches against stepping every engine step.

Each figure is the fastest CPU time of a few runs (``time.process_time``: the simulator is single-threaded
pure Python, and CPU time does not grow when neighbours share the machine), printed with a baseline measured in
the same run — the same simulation with the stretches switched off (``simulate(..., step_by_step=True)``,
the reference the fast path is tested against). The issue's bar: 1,000 requests of ~200 output tokens well
under a second on one core; the target here is ≤ 0.2 s.

Run: ``python -m bench.bench_simulator``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

from service.catalog.builtin import builtin_snapshot
from service.core.planner import PlanRequest, plan
from service.core.serving import BenchmarkSpec, SloTarget, max_rate_within_slo, simulate


def _min_cpu_seconds(fn: Callable[[], Any], *, repeat: int) -> float:
    best = math.inf
    for _ in range(repeat):
        start = time.process_time()
        fn()
        best = min(best, time.process_time() - start)
    return best


def run(*, repeat: int = 3) -> list[dict[str, Any]]:
    catalog = builtin_snapshot()
    model = catalog.find_model("llama-3.1-8b")
    gpu = catalog.find_gpu("h100-sxm-80gb")
    assert model is not None and gpu is not None
    request = PlanRequest(model=model.spec, gpu=gpu.spec, max_model_len=8192)
    capacity = plan(request)
    workloads = {
        "1,000 × (1,024 in, 200 out), all at once": BenchmarkSpec(
            num_prompts=1000, random_input_len=1024, random_output_len=200
        ),
        "1,000 × (1,024 in, 200 out), max_concurrency 64": BenchmarkSpec(
            num_prompts=1000, random_input_len=1024, random_output_len=200, max_concurrency=64
        ),
        "1,000 × (1,024 in, 200 out), Poisson 10 req/s": BenchmarkSpec(
            num_prompts=1000, random_input_len=1024, random_output_len=200, request_rate=10.0
        ),
        "1,000 ShareGPT requests, Poisson 20 req/s": BenchmarkSpec(
            dataset_name="sharegpt", num_prompts=1000, request_rate=20.0
        ),
    }
    rows: list[dict[str, Any]] = []
    for name, spec in workloads.items():
        fast = _min_cpu_seconds(lambda spec=spec: simulate(request, spec, plan=capacity), repeat=repeat)
        slow = _min_cpu_seconds(
            lambda spec=spec: simulate(request, spec, plan=capacity, step_by_step=True), repeat=1
        )
        rows.append(
            {
                "name": f"simulate {name}",
                "seconds": fast,
                "baseline": slow,
                "note": f"step by step {slow * 1e3:,.1f} ms",
                "target": "≤ 200 ms",
            }
        )
    slo = SloTarget(ttft_seconds=1.0, tpot_seconds=0.05, percentile="p99")
    search = _min_cpu_seconds(
        lambda: max_rate_within_slo(request, slo, prompt_tokens=1024, output_tokens=200, plan=capacity),
        repeat=repeat,
    )
    one = _min_cpu_seconds(
        lambda: simulate(
            request,
            BenchmarkSpec(num_prompts=300, random_input_len=1024, random_output_len=200, request_rate=20.0),
            plan=capacity,
        ),
        repeat=repeat,
    )
    found = max_rate_within_slo(request, slo, prompt_tokens=1024, output_tokens=200, plan=capacity)
    rows.append(
        {
            "name": "max_rate_within_slo (300 prompts, p99 TTFT 1 s / TPOT 50 ms)",
            "seconds": search,
            "baseline": one,
            "note": f"one 300-prompt simulation {one * 1e3:,.1f} ms; {found.simulations} simulations",
            "target": "",
        }
    )
    return rows


def main() -> None:
    for row in run():
        ratio = row["seconds"] / row["baseline"] if row["baseline"] else math.nan
        print(f"{row['name']:<72} {row['seconds'] * 1e3:9.1f} ms  {ratio:6.3f}×  {row['note']}")


if __name__ == "__main__":
    main()
