"""POST /v1/plans/recommend and /v1/plans/sweep, and the recommend/sweep CLI commands."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]


async def test_recommend_returns_the_option_and_every_tp_tried(client: httpx.AsyncClient) -> None:
    body = {
        "model": "llama-3.1-70b",
        "gpu": "h100-sxm-80gb",
        "workload": {"concurrent_users": 64, "prompt_tokens": 2000, "output_tokens": 500},
    }
    response = await client.post("/v1/plans/recommend", json=body)
    assert response.status_code == 200, response.text
    result = response.json()
    assert result["recommended"]["tensor_parallel_size"] >= 2
    assert {o["tensor_parallel_size"] for o in result["options"]} == {1, 2, 4, 8}
    tp1 = next(o for o in result["options"] if o["tensor_parallel_size"] == 1)
    assert tp1["feasible"] is False and tp1["rejection"] == "does not fit"


async def test_sweep_over_the_catalog_ranks_by_cost(client: httpx.AsyncClient) -> None:
    body = {
        "model": "llama-3.1-8b",
        "workload": {
            "requests_per_second": 5,
            "prompt_tokens": 1000,
            "output_tokens": 200,
            "tpot_seconds": 0.05,
        },
        "limit": 1000,
    }
    result = (await client.post("/v1/plans/sweep", json=body)).json()
    assert result["evaluated"] >= 20 * 2
    feasible = [o for o in result["options"] if o["feasible"]]
    # simulated options first, then the roofline bounds a sweep did not simulate; each group by cost
    tiers = [o["sizing"] == "roofline" for o in feasible]
    assert tiers == sorted(tiers) and not tiers[0]
    for roofline in (False, True):
        costs = [
            o["cost_per_hour_usd"]
            for o in feasible
            if o["cost_per_hour_usd"] is not None and (o["sizing"] == "roofline") == roofline
        ]
        assert costs == sorted(costs)
    assert all(o["reasons"] for o in result["options"] if not o["feasible"])


async def test_workload_needs_a_rate_or_users(client: httpx.AsyncClient) -> None:
    body = {"model": "llama-3.1-8b", "gpu": "l4", "workload": {"prompt_tokens": 100}}
    response = await client.post("/v1/plans/recommend", json=body)
    assert response.status_code == 422
    assert "workload" in response.json()["detail"]


def test_cli_recommend_and_sweep_exit_codes() -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "service.cli", *args],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=120,
            check=False,
        )

    ok = run("recommend", "-m", "llama-3.1-8b", "-g", "h100-sxm-80gb", "--rps", "2", "--json")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["recommended"]["replicas"] >= 1
    none = run("recommend", "-m", "llama-3.1-8b", "-g", "h100-sxm-80gb", "--rps", "2", "--tpot-slo", "0.0001")
    assert none.returncode == 1
    bad = run("sweep", "-m", "llama-3.1-8b")
    assert bad.returncode == 2
    assert "requests_per_second or concurrent_users" in " ".join(bad.stderr.split())
