"""A registered workload's ``spec_mean_acceptance_length``: refused beyond [1, 1 + k] on create and patch, stored
with the deployment (read back after a reload from the database), used by its plan's recommendation, and in
``POST /v1/deployments/replan`` and ``kvcap replan`` kept or overridden by ``slo.spec_mean_acceptance_length``."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from service.deployments.service import DeploymentsHolder
from tests.deployments.test_replan import register, replan
from tests.deployments.test_replan_cli import run

SPEC = {"model": "llama-3.2-1b", "num_speculative_tokens": 3}  # a draft model, three drafts a step
WORKLOAD = {
    "requests_per_second": 20.0,
    "prompt_tokens": 500,
    "output_tokens": 100,
    "tpot_seconds": 0.010,
    "slo_percentile": "mean",
}


def spec_deployment(name: str, length: float | None = 2.0, **changes: Any) -> dict[str, Any]:
    workload = WORKLOAD | ({"spec_mean_acceptance_length": length} if length is not None else {})
    return {
        "namespace": "llm",
        "name": name,
        "model": "llama-3.1-8b",
        "gpu": "h100-sxm-80gb",
        "tensor_parallel_size": 1,
        "max_model_len": 2048,
        "replicas": 2,
        "speculative_config": SPEC,
        "workload": workload,
    } | changes


def acceptance_loc(response: httpx.Response) -> list[Any]:
    loc: list[Any] = response.json()["errors"][0]["loc"]
    return loc[:3]


async def test_an_acceptance_beyond_one_plus_k_is_refused_on_create_and_patch(
    client: httpx.AsyncClient,
) -> None:
    for length in (0.5, 4.5):
        refused = await client.post("/v1/deployments", json=spec_deployment("chat", length))
        assert refused.status_code == 422, refused.text
        assert acceptance_loc(refused) == ["body", "workload", "spec_mean_acceptance_length"]
    await register(client, spec_deployment("chat", 4.0))  # 1 + k: every draft accepted
    patched = await client.patch(
        "/v1/deployments/llm/chat",
        json={"workload": WORKLOAD | {"spec_mean_acceptance_length": 4.5}},
        headers={"If-Match": "*"},
    )
    assert patched.status_code == 422, patched.text
    assert acceptance_loc(patched) == ["body", "workload", "spec_mean_acceptance_length"]
    kept = (await client.get("/v1/deployments/llm/chat")).json()
    assert kept["workload"]["spec_mean_acceptance_length"] == 4.0


async def test_the_acceptance_is_stored_and_sizes_the_deployments_plan(
    client: httpx.AsyncClient, app: FastAPI, sessionmaker: async_sessionmaker[AsyncSession]
) -> None:
    await register(
        client, spec_deployment("chat", 3.5), spec_deployment("plain", 3.5, speculative_config=None)
    )
    read = (await client.get("/v1/deployments/llm/chat")).json()
    assert read["workload"]["spec_mean_acceptance_length"] == 3.5
    reloaded = DeploymentsHolder()
    await reloaded.reload(sessionmaker)  # read back from the database, not the in-memory copy
    stored = reloaded.by_key()[("llm", "chat")].workload
    assert stored is not None and stored.spec_mean_acceptance_length == 3.5
    plan = (await client.get("/v1/deployments/llm/chat/plan")).json()
    chosen = plan["recommendation"]["recommended"]
    assert chosen["speculative"]["mean_acceptance_length"] == 3.5
    assert chosen["speculative"]["source"] == "given"
    # The same body straight to /v1/plans/recommend sizes the same replicas.
    fields = {
        k: v for k, v in spec_deployment("chat", 3.5).items() if k not in ("namespace", "name", "replicas")
    }
    direct = await client.post("/v1/plans/recommend", json=fields | {"tensor_parallel_size": 1})
    assert direct.status_code == 200, direct.text
    assert direct.json()["recommended"]["replicas"] == chosen["replicas"]
    plain = (await client.get("/v1/deployments/llm/plain/plan")).json()["recommendation"]["recommended"]
    assert plain["speculative"] is None
    assert any("spec_mean_acceptance_length ignored" in line for line in plain["assumptions"])


async def test_replan_keeps_each_deployments_acceptance_or_applies_the_changes(
    client: httpx.AsyncClient,
) -> None:
    await register(
        client, spec_deployment("low", 1.5), spec_deployment("plain", None, speculative_config=None)
    )
    kept = {d["name"]: d for d in (await replan(client))["deployments"]}
    low = kept["low"]["new"]
    assert low["speculative"]["mean_acceptance_length"] == 1.5 and low["speculative"]["source"] == "given"
    assert kept["plain"]["new"]["speculative"] is None
    changed = {
        d["name"]: d for d in (await replan(client, slo={"spec_mean_acceptance_length": 3.5}))["deployments"]
    }
    high = changed["low"]["new"]
    assert high["speculative"]["mean_acceptance_length"] == 3.5
    # More tokens per step: fewer GPUs in all for the same TPOT target (replicas × the TP each side chose).
    assert high["gpus"] < low["gpus"]
    assert "spec_mean_acceptance_length ignored" in (changed["plain"]["new"]["reason"] or "")
    beyond = {
        d["name"]: d for d in (await replan(client, slo={"spec_mean_acceptance_length": 4.5}))["deployments"]
    }
    assert beyond["low"]["status"] == "error"
    assert "workload.spec_mean_acceptance_length" in beyond["low"]["error"]
    assert beyond["plain"]["status"] == "ok"
    below = await client.post("/v1/deployments/replan", json={"slo": {"spec_mean_acceptance_length": 0.5}})
    assert below.status_code == 422
    assert below.json()["errors"][0]["loc"][:3] == ["body", "slo", "spec_mean_acceptance_length"]


async def test_kvcap_replan_takes_the_acceptance(
    app: FastAPI, client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    await register(client, spec_deployment("low", 1.5))
    code, out, err = await run(app, monkeypatch, "--spec-mean-acceptance-length", "3.5", "--json")
    assert code == 0, err
    printed = json.loads(out)
    assert printed["change"]["slo"]["spec_mean_acceptance_length"] == 3.5
    assert printed["deployments"][0]["new"]["speculative"]["mean_acceptance_length"] == 3.5
    code, _, err = await run(app, monkeypatch, "--spec-mean-acceptance-length", "0.5")
    assert code == 2 and "spec_mean_acceptance_length" in err
