"""``POST /v1/plans`` latency against a bare FastAPI endpoint served the same way in the same run.

Both apps run in this process under uvicorn on loopback; the load comes from a child process (the raw asyncio
HTTP/1.1 client of ``bench.bench_admission``) at a steady rate, so the rows differ only in the handler; the loads take turns in short rounds.
Two plan rows: requests rotating through six configurations (after the first round they are answered from
the plan cache, as repeated pipeline checks and dashboard polls are), and requests that each ask for a
configuration never planned before (resolving names, the planner, validation and serialising the response).

The baseline is the floor of the framework for the same exchange: a bare FastAPI endpoint (no kvcap
middleware) that parses the same body into the same request model (``PlanRequestBody``) and answers with a
plan-sized JSON (the bytes of a real plan, serialised once at start-up). A plan row's ratio against it is what
kvcap adds on top of FastAPI: names resolved, the planner, the response, the middleware.

Run: ``python -m bench.bench_api [--rate 100] [--seconds 8]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
from concurrent.futures import ProcessPoolExecutor
from functools import partial
from typing import Any

from fastapi import FastAPI, Response

from bench.bench_admission import STOPPED_POSTGRES, drive, serve
from service.app import create_app
from service.catalog.builtin import builtin_snapshot
from service.planning.schemas import PlanRequestBody
from service.planning.service import make_plan
from service.settings import Settings

PLANS: list[dict[str, Any]] = [
    {"model": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "NVIDIA-H100-80GB-HBM3", "max_model_len": 32768},
    {"model": "llama-3.1-70b", "gpu": "h100-sxm-80gb", "tensor_parallel_size": 4, "kv_cache_dtype": "fp8"},
    {"model": "gemma-3-27b", "gpu": "l40s", "max_model_len": 16384},
    {"model": "Qwen/Qwen2.5-72B-Instruct-AWQ", "gpu": "a100-sxm4-80gb", "max_model_len": 8192},
    {"model": "qwen3-30b-a3b", "gpu": "h200", "engine": "vllm-0.19"},
    {"model": "mistral-7b-v0.1", "gpu": "l4", "max_model_len": 8192},
]


def plan_body(i: int, _unused: list[dict[str, Any]]) -> dict[str, Any]:
    return PLANS[i % len(PLANS)]


def new_plan_body(i: int, _unused: list[dict[str, Any]], offset: int = 0) -> dict[str, Any]:
    """Every request a configuration never planned before (a different context length), so nothing is cached."""
    return {**PLANS[i % len(PLANS)], "max_model_len": 2048 + offset + i}


def bare_plan_app() -> FastAPI:
    """FastAPI's floor for a plan exchange: the same body parsed into ``PlanRequestBody``, a plan-sized answer."""
    app = FastAPI()
    answer = (
        make_plan(builtin_snapshot(), PlanRequestBody.model_validate(PLANS[0])).model_dump_json().encode()
    )

    @app.post("/bare")
    async def bare(body: PlanRequestBody) -> Response:  # noqa: ARG001 (parsed, as a plan is)
        return Response(answer, media_type="application/json")

    return app


def _load(url: str, rate: float, seconds: float, kind: str = "repeated", offset: int = 0) -> dict[str, Any]:
    if kind == "new":
        return asyncio.run(
            drive(url, partial(new_plan_body, offset=offset), [], rate=rate, seconds=seconds, client="raw")
        )
    return asyncio.run(drive(url, plan_body, [], rate=rate, seconds=seconds, client="raw"))


ROWS = {
    "repeated": "POST /v1/plans (repeated requests)",
    "new": "POST /v1/plans (every request new)",
    "bare": "bare FastAPI endpoint",
}


def run(*, rate: float = 100.0, seconds: float = 8.0, rounds: int = 4) -> list[dict[str, Any]]:
    """The three loads in turn, ``rounds`` times (``seconds`` in all per row), so that a drift in the machine's
    speed reaches every row alike; each ratio is the median of the per-round ratios against the bare endpoint."""
    app = create_app(Settings(database_url=STOPPED_POSTGRES, scrape_enabled=False, log_level="WARNING"))
    phases: dict[str, list[dict[str, Any]]] = {kind: [] for kind in ROWS}
    with ProcessPoolExecutor(max_workers=1) as pool, serve(app) as base, serve(bare_plan_app()) as bare_base:
        urls = {"repeated": f"{base}/v1/plans", "new": f"{base}/v1/plans", "bare": f"{bare_base}/bare"}
        for round_ in range(rounds):
            for kind in ROWS:
                offset = round_ * int(rate * (seconds + 2))  # new configurations in every round
                phases[kind].append(
                    pool.submit(_load, urls[kind], rate, seconds / rounds, kind, offset).result()
                )
    rows = []
    bare = phases["bare"]
    for kind, name in ROWS.items():
        mine = phases[kind]
        rows.append(
            {
                "name": name,
                "p50_ms": statistics.median(r["p50_ms"] for r in mine),
                "p99_ms": statistics.median(r["p99_ms"] for r in mine),
                "errors": sum(r["errors"] for r in mine),
                "dropped": sum(r["dropped"] for r in mine),
                "baseline_p50_ms": statistics.median(r["p50_ms"] for r in bare),
                "baseline_p99_ms": statistics.median(r["p99_ms"] for r in bare),
                "p50_ratio": statistics.median(
                    m["p50_ms"] / b["p50_ms"] for m, b in zip(mine, bare, strict=True)
                ),
                "p99_ratio": statistics.median(
                    m["p99_ms"] / b["p99_ms"] for m, b in zip(mine, bare, strict=True)
                ),
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=100.0)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = run(rate=args.rate, seconds=args.seconds)
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    for row in rows:
        print(
            f"{row['name']:<38} p50 {row['p50_ms']:7.3f} ms ({row['p50_ratio']:.2f}× bare)  "
            f"p99 {row['p99_ms']:7.3f} ms ({row['p99_ratio']:.2f}× bare)  errors {row['errors']}"
        )


if __name__ == "__main__":
    main()
