"""``GET /v1/live/deployments``: the figures /metrics exports, as JSON, from the live loop's snapshots."""

from __future__ import annotations

from types import SimpleNamespace

import httpx
import pytest
from fastapi import FastAPI

from service.exporter.collector import PredictedCapacity
from service.live.manager import DeploymentObservation


@pytest.fixture
def watched(app: FastAPI) -> FastAPI:
    predicted = PredictedCapacity(
        num_gpu_blocks=1000,
        num_gpu_blocks_uncalibrated=1100,
        kv_cache_size_tokens=16000,
        max_concurrency=12.0,
        max_num_seqs=8,
        recommended_replicas=3,
        replicas=2,
    )
    observed = DeploymentObservation(
        namespace="llm",
        name="chat",
        source_kind="scrape",
        observed_at_s=1_700_000_000.0,
        duration_s=0.01,
        pods=(),
        num_gpu_blocks=800,
        kv_cache_usage_ratio=0.5,
        requests_running=6.0,
        requests_waiting=2.0,
        replicas=2,
    )
    app.state.predictions = SimpleNamespace(capacities={("llm", "chat"): predicted})
    app.state.live = SimpleNamespace(
        observations={("llm", "chat"): observed, ("llm", "unplanned"): observed},
        last_refresh_timestamp_s=1_700_000_001.0,
    )
    return app


async def test_predicted_and_observed_side_by_side(watched: FastAPI, client: httpx.AsyncClient) -> None:
    body = (await client.get("/v1/live/deployments")).json()
    chat = next(d for d in body["items"] if d["name"] == "chat")
    assert chat["predicted_kv_cache_blocks"] == 1000
    assert chat["observed_kv_cache_blocks"] == 800
    # predicted ÷ observed − 1 = 1000 / 800 − 1
    assert chat["prediction_error_ratio"] == pytest.approx(0.25)
    # capacity = min(KV concurrency 12, max_num_seqs 8) × 2 replicas = 16; load = 6 + 2 → 1 − 8/16
    assert chat["capacity_headroom_ratio"] == pytest.approx(0.5)
    assert body["last_refresh_timestamp_seconds"] == 1_700_000_001.0


async def test_an_observed_deployment_without_a_plan_has_no_ratios(
    watched: FastAPI, client: httpx.AsyncClient
) -> None:
    body = (await client.get("/v1/live/deployments")).json()
    other = next(d for d in body["items"] if d["name"] == "unplanned")
    assert other["observed_kv_cache_blocks"] == 800
    assert other["prediction_error_ratio"] is None and other["capacity_headroom_ratio"] is None


async def test_nothing_watched_is_an_empty_list(client: httpx.AsyncClient) -> None:
    assert (await client.get("/v1/live/deployments")).json()["items"] == []
