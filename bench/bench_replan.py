"""Fleet what-if: ``POST /v1/deployments/replan`` over 1,000 registered deployments, simulated and roofline-only.

The fleet: 1,000 deployments over 5 models × 3 GPUs × 2 token-length profiles (30 configurations, every
deployment with its own request rate; one in ten has no workload), registered in a scratch SQLite database
behind the real app (lifespan included), asked through httpx's ASGI transport with ``Accept:
application/x-ndjson`` (the time to the summary line). The change: 1.5× the traffic and a tighter TPOT SLO
(40 ms), so every rate search is new. The core's rate-search cache is cleared before every timed run.

The wall time is the figure against the budget (30 s simulated, 2 s roofline-only on the 2-core development
machine); CPU time (this process, worker threads included) is compared with baselines measured in the same run:

- the same replan computed directly in-process (``service.deployments.replan.replan``, no HTTP, no threads,
  no database read): the ratio is what the endpoint adds;
- 1,000 independent recommendations, one per deployment with nothing shared (``make_recommendation`` with
  the cache cleared before each, timed on a sample of ``SAMPLE`` and scaled to 1,000): the ratio is what
  sharing work between deployments of one configuration saves.

Run: ``python -m bench.bench_replan``.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
from datetime import UTC, datetime
from typing import Any

import httpx

from service.app import create_app
from service.core.recommend import _rate_search
from service.db.migrate import upgrade
from service.deployments.orm import DeploymentEntry
from service.deployments.replan import prepare, replan
from service.deployments.schemas import DeploymentCreate, DeploymentRead, ReplanRequest
from service.deployments.service import DeploymentsHolder, to_columns
from service.planning.recommendations import make_recommendation
from service.settings import Settings

COUNT = 1000
SAMPLE = 8
MODELS = ("llama-3.1-8b", "mistral-7b-v0.3", "qwen2-7b", "gemma-2-9b", "llama-3.1-70b")
GPUS = ("h100-sxm-80gb", "l40s", "a100-sxm4-80gb")
LENGTHS = ((1024, 256), (2000, 400))
CHANGE = {"traffic_multiplier": 1.5, "slo": {"tpot_seconds": 0.04}}


def fleet(count: int = COUNT) -> list[DeploymentCreate]:
    deployments = []
    for i in range(count):
        model, gpu = MODELS[i % len(MODELS)], GPUS[(i // len(MODELS)) % len(GPUS)]
        prompt, output = LENGTHS[(i // (len(MODELS) * len(GPUS))) % len(LENGTHS)]
        workload = (
            None
            if i % 10 == 9
            else {
                "requests_per_second": 1.0 + (i % 23),
                "prompt_tokens": prompt,
                "output_tokens": output,
                "tpot_seconds": 0.05,
            }
        )
        deployments.append(
            DeploymentCreate.model_validate(
                {
                    "namespace": f"team-{i % 20}",
                    "name": f"deployment-{i}",
                    "model": model,
                    "gpu": gpu,
                    "tensor_parallel_size": 4 if model == "llama-3.1-70b" else 1,
                    "max_model_len": 8192,
                    "replicas": 1 + i % 4,
                    "workload": workload,
                    "labels": {"tier": "prod" if i % 2 else "dev"},
                }
            )
        )
    return deployments


def _read(created: DeploymentCreate) -> DeploymentRead:
    now = datetime.now(UTC)
    return DeploymentRead.model_validate(
        created.model_dump() | {"version": 1, "created_at": now, "updated_at": now}
    )


async def _api(database_url: str, bodies: list[DeploymentCreate], change: dict[str, Any]) -> dict[str, float]:
    """Wall and CPU seconds of the streamed replan (CPU of the whole process: the worker threads included)."""
    settings = Settings(
        database_url=database_url, scrape_enabled=False, catalog_refresh_seconds=3600, log_level="WARNING"
    )
    app = create_app(settings)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://bench", timeout=600
        ) as client,
    ):
        async with app.state.sessionmaker() as session:
            for body in bodies:
                session.add(DeploymentEntry(namespace=body.namespace, name=body.name, **to_columns(body)))
            await session.commit()
        holder: DeploymentsHolder = app.state.deployments
        await holder.reload(app.state.sessionmaker)
        _rate_search.cache_clear()
        started, cpu = time.perf_counter(), time.process_time()
        summary: dict[str, Any] = {}
        lines = 0
        async with client.stream(
            "POST", "/v1/deployments/replan", json=change, headers={"Accept": "application/x-ndjson"}
        ) as response:
            if response.status_code != 200:
                await response.aread()
                raise RuntimeError(f"replan failed: {response.status_code} {response.text[:300]}")
            async for raw in response.aiter_lines():
                if raw:
                    line = json.loads(raw)
                    lines += line["type"] == "deployment"
                    if line["type"] == "summary":
                        summary = line
        seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    if lines != len(bodies) or summary.get("deployments") != len(bodies):
        raise RuntimeError(f"streamed {lines} deployment lines of {len(bodies)}: {summary}")
    return {
        "seconds": seconds,
        "cpu": cpu,
        "configurations": float(summary["configurations"]),
        "ok": float(summary["ok"]),
    }


def _in_process(deployments: list[DeploymentRead], change: dict[str, Any]) -> float:
    """CPU seconds of the same replan called directly."""
    from service.catalog.builtin import builtin_snapshot

    snapshot = builtin_snapshot()
    _rate_search.cache_clear()
    started = time.process_time()
    replan(snapshot, deployments, ReplanRequest.model_validate(change))
    return time.process_time() - started


def _independent(deployments: list[DeploymentRead], change: dict[str, Any]) -> float:
    """Seconds for every deployment's recommendation with nothing cached: the mean over a sample spread across the
    configurations, times the deployments with a workload."""
    from service.catalog.builtin import builtin_snapshot

    snapshot = builtin_snapshot()
    request = ReplanRequest.model_validate(change)
    jobs = [job for job in prepare(snapshot, deployments, request).jobs if job.recommend is not None]
    sample = jobs[:: max(1, len(jobs) // SAMPLE)][:SAMPLE]
    total = 0.0
    for job in sample:
        assert job.recommend is not None
        _rate_search.cache_clear()
        started = time.process_time()
        make_recommendation(snapshot, job.recommend)
        total += time.process_time() - started
    return total / len(sample) * len(jobs)


def run(count: int = COUNT) -> list[dict[str, Any]]:
    bodies = fleet(count)
    deployments = [_read(b) for b in bodies]
    rows = []
    with tempfile.TemporaryDirectory(prefix="kvcap-bench-replan-") as scratch:
        database_url = f"sqlite+aiosqlite:///{scratch}/replan.db"
        upgrade(database_url)
        for simulate in (True, False):
            change = CHANGE | {"simulate": simulate}
            api = asyncio.run(_api(database_url, bodies, change))
            direct = _in_process(deployments, change)
            label = "simulated" if simulate else "roofline only"
            rows.append(
                {
                    "name": f"replan {count:,} deployments, {label} (POST, NDJSON to the summary line), wall",
                    "seconds": api["seconds"],
                    "baseline": None,
                    "note": f"{api['configurations']:.0f} configurations, {api['ok']:.0f} served",
                    "target": "< 30 s" if simulate else "< 2 s",
                }
            )
            rows.append(
                {
                    "name": f"replan {count:,} deployments, {label}, CPU vs the same replan in-process",
                    "seconds": api["cpu"],
                    "baseline": direct,
                    "note": f"in-process (no HTTP, threads or database read) {direct * 1e3:,.0f} ms CPU",
                    "target": "≤ 1.2×" if simulate else "≤ 2×",
                }
            )
            if simulate:
                independent = _independent(deployments, change)
                rows.append(
                    {
                        "name": f"replan {count:,} deployments, simulated, CPU vs nothing shared",
                        "seconds": api["cpu"],
                        "baseline": independent,
                        "note": f"{count:,} independent cold recommendations ≈ {independent:,.1f} s CPU "
                        f"(sample of {SAMPLE})",
                        "target": "",
                    }
                )
            # a fresh database for the next run
            database_url = f"sqlite+aiosqlite:///{scratch}/replan-{int(simulate)}.db"
            upgrade(database_url)
    return rows


def main() -> None:
    for row in run():
        ratio = row["seconds"] / row["baseline"] if row["baseline"] else float("nan")
        print(
            f"{row['name']:<72} {row['seconds'] * 1e3:>10,.0f} ms  {ratio:6.2f}×  {row['target']:<7} {row['note']}"
        )


if __name__ == "__main__":
    main()
