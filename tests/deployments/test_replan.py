"""``POST /v1/deployments/replan``: every delta is checked against independent calls — the registry as written,
``GET /v1/gpus/{name}`` for prices, ``POST /v1/plans`` for "will it start" and ``POST /v1/plans/recommend`` with
the changed workload for the new side — never against what the replan itself printed."""

from __future__ import annotations

import json
import math
import threading
from typing import Any

import httpx
import pytest

from service.deployments import replan as replan_module

H100 = "h100-sxm-80gb"
WORKLOAD = {"requests_per_second": 6.0, "prompt_tokens": 1500, "output_tokens": 300, "tpot_seconds": 0.05}


def deployment(name: str, **changes: Any) -> dict[str, Any]:
    return {
        "namespace": "llm",
        "name": name,
        "model": "meta-llama/Llama-3.1-8B-Instruct",
        "gpu": H100,
        "max_model_len": 8192,
        "replicas": 2,
        "workload": WORKLOAD,
        "labels": {"team": "search"},
    } | changes


async def register(client: httpx.AsyncClient, *bodies: dict[str, Any]) -> None:
    for body in bodies:
        created = await client.post("/v1/deployments", json=body)
        assert created.status_code == 201, created.text


async def price(client: httpx.AsyncClient, gpu: str) -> float:
    found = await client.get(f"/v1/gpus/{gpu}")
    assert found.status_code == 200, found.text
    value = found.json()["price_per_hour_usd"]
    assert value is not None
    return float(value)


async def recommend(client: httpx.AsyncClient, body: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """The independent recommendation for a deployment body (registry fields → /v1/plans/recommend)."""
    fields = {k: v for k, v in body.items() if k not in ("namespace", "name", "replicas", "labels", "live")}
    answer = await client.post("/v1/plans/recommend", json=fields | changes)
    assert answer.status_code == 200, answer.text
    recommended: dict[str, Any] = answer.json()["recommended"]
    return recommended


async def replan(client: httpx.AsyncClient, **change: Any) -> dict[str, Any]:
    answer = await client.post("/v1/deployments/replan", json=change)
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("application/json")
    result: dict[str, Any] = answer.json()
    return result


def by_name(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {d["name"]: d for d in result["deployments"]}


async def test_traffic_multiplier_deltas_match_independent_recommendations(client: httpx.AsyncClient) -> None:
    a = deployment("chat-a")
    b = deployment("chat-b", workload=WORKLOAD | {"requests_per_second": 11.0})  # same configuration as a
    c = deployment("batch-c", workload=None, replicas=3, tensor_parallel_size=2)
    await register(client, a, b, c)
    result = await replan(client, traffic_multiplier=2.5, simulate=False)
    got = by_name(result)
    assert [d["name"] for d in result["deployments"]] == ["batch-c", "chat-a", "chat-b"]
    h100 = await price(client, H100)

    for body in (a, b):
        delta = got[body["name"]]
        workload = body["workload"] | {"requests_per_second": body["workload"]["requests_per_second"] * 2.5}
        expected = await recommend(client, body, workload=workload, simulate=False)
        assert expected["sizing"] == "roofline"
        current, new = delta["current"], delta["new"]
        assert delta["status"] == "ok"
        assert current == {
            "gpu": H100,
            "engine": current["engine"],
            "tensor_parallel_size": 1,
            "pipeline_parallel_size": 1,
            "replicas": 2,
            "gpus": 2,
            "cost_per_hour_usd": pytest.approx(2 * h100),
            "fits": True,
            "sizing": "registered",
            "reason": None,
            "speculative": None,  # the registered side sizes nothing (and has no speculative_config here)
        }
        assert new["gpu"] == expected["gpu"] == H100
        assert new["tensor_parallel_size"] == expected["tensor_parallel_size"]
        assert new["replicas"] == expected["replicas"]
        assert new["gpus"] == expected["gpus"] == expected["replicas"] * expected["tensor_parallel_size"]
        assert new["cost_per_hour_usd"] == pytest.approx(expected["gpus"] * h100)
        assert new["fits"] is True
        assert new["sizing"] == "roofline"
        assert f"→ {expected['replicas']} replica(s)" in new["reason"]
        assert delta["gpus_delta"] == expected["gpus"] - 2
        assert delta["cost_per_hour_delta_usd"] == pytest.approx((expected["gpus"] - 2) * h100)
        assert delta["changed"] is (expected["gpus"] != 2 or expected["tensor_parallel_size"] != 1)

    # No workload: replicas scale with the traffic (ceil(3 × 2.5) = 8) at the registered TP 2 → 16 GPUs.
    scaled = got["batch-c"]["new"]
    assert (scaled["replicas"], scaled["tensor_parallel_size"], scaled["gpus"]) == (8, 2, 16)
    assert scaled["sizing"] == "scaled"
    assert got["batch-c"]["gpus_delta"] == 16 - 6

    summary = result["summary"]
    deltas = [d["gpus_delta"] for d in result["deployments"]]
    assert summary["deployments"] == 3 and summary["ok"] == 3 and summary["errors"] == 0
    assert summary["gpus_added"] == sum(x for x in deltas if x > 0)
    assert summary["gpus_freed"] == sum(-x for x in deltas if x < 0)
    assert summary["gpus_current"] == 2 + 2 + 6
    assert summary["gpus_new"] - summary["gpus_current"] == summary["gpus_added"] - summary["gpus_freed"]
    assert summary["cost_per_hour_delta_usd"] == pytest.approx(
        sum(d["cost_per_hour_delta_usd"] for d in result["deployments"])
    )
    # a and b share one configuration (they differ only in demand); c has no workload to size.
    assert summary["configurations"] == 1
    # Six plans asked for (current and new per deployment, equal here), two distinct bodies: a/b and c.
    assert (summary["plans_computed"], summary["plans_reused"]) == (2, 4)
    assert summary["recommendations_computed"] == 2


async def test_simulated_replan_with_new_slos_matches_the_simulated_recommendation(
    client: httpx.AsyncClient,
) -> None:
    a = deployment("chat-a")
    await register(client, a)
    result = await replan(client, slo={"tpot_seconds": 0.03, "slo_percentile": "p50"})
    delta = by_name(result)["chat-a"]
    expected = await recommend(client, a, workload=WORKLOAD | {"tpot_seconds": 0.03, "slo_percentile": "p50"})
    assert expected["sizing"] == "simulated"
    new = delta["new"]
    assert (new["tensor_parallel_size"], new["replicas"], new["gpus"], new["sizing"]) == (
        expected["tensor_parallel_size"],
        expected["replicas"],
        expected["gpus"],
        "simulated",
    )
    assert new["cost_per_hour_usd"] == pytest.approx(expected["cost_per_hour_usd"])
    assert result["summary"]["simulate"] is True


async def test_another_gpu_and_vllm_release(client: httpx.AsyncClient) -> None:
    a = deployment("chat-a")
    big = deployment("big", model="llama-3.1-70b", tensor_parallel_size=4, replicas=1, workload=WORKLOAD)
    await register(client, a, big)
    result = await replan(client, gpu="l4", engine="vllm-0.11", simulate=False)
    got = by_name(result)
    expected = await recommend(client, a, gpu="l4", engine="vllm-0.11", simulate=False)
    new = got["chat-a"]["new"]
    assert (new["gpu"], new["engine"]) == ("l4", "vllm-0.11")
    assert (new["tensor_parallel_size"], new["replicas"], new["gpus"]) == (
        expected["tensor_parallel_size"],
        expected["replicas"],
        expected["gpus"],
    )
    l4 = await price(client, "l4")
    assert new["cost_per_hour_usd"] == pytest.approx(expected["gpus"] * l4)
    assert got["chat-a"]["current"]["gpu"] == H100
    # 70B in bf16 is ~140 GB of weights: 8 × L4 (24 GB each) cannot hold it at any TP kvcap tries.
    no = got["big"]
    assert no["status"] == "does_not_fit"
    assert no["new"]["fits"] is False and no["new"]["replicas"] is None
    assert no["gpus_delta"] is None and no["cost_per_hour_delta_usd"] is None
    assert "does not fit" in no["new"]["reason"]
    plan = await client.post(
        "/v1/plans",
        json={"model": "llama-3.1-70b", "gpu": "l4", "tensor_parallel_size": 8, "engine": "vllm-0.11"},
    )
    assert plan.json()["fits"] is False
    summary = result["summary"]
    assert summary["does_not_fit"] == 1
    assert (
        summary["gpus_current"] == got["chat-a"]["current"]["gpus"]
    )  # "big" has no delta: left out of totals


async def test_namespace_and_label_filters(client: httpx.AsyncClient) -> None:
    await register(
        client,
        deployment("a"),
        deployment("b", labels={"team": "ads"}),
        deployment("c", namespace="other"),
    )
    assert [
        d["name"] for d in (await replan(client, labels={"team": "search"}, simulate=False))["deployments"]
    ] == [
        "a",
        "c",
    ]
    only = await replan(client, namespace="llm", labels={"team": "search"}, simulate=False)
    assert [(d["namespace"], d["name"]) for d in only["deployments"]] == [("llm", "a")]
    assert (await replan(client, namespace="nobody", simulate=False))["summary"]["deployments"] == 0


async def test_a_multiplied_workload_out_of_range_is_an_error_line_not_a_failure(
    client: httpx.AsyncClient,
) -> None:
    await register(
        client,
        deployment("hot", workload=WORKLOAD | {"requests_per_second": 900_000.0}),
        deployment("cold"),
    )
    result = await replan(client, traffic_multiplier=2, simulate=False)
    got = by_name(result)
    assert got["hot"]["status"] == "error"
    assert "workload.requests_per_second" in got["hot"]["error"]
    assert got["hot"]["current"]["replicas"] == 2
    assert got["cold"]["status"] == "ok"
    assert result["summary"]["errors"] == 1


async def test_ndjson_streams_the_same_deltas_with_progress_and_a_summary(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(replan_module, "CHUNK", 2)
    bodies = [deployment(f"d-{i}", workload=WORKLOAD | {"requests_per_second": 2.0 + i}) for i in range(5)]
    await register(client, *bodies)
    change = {"traffic_multiplier": 1.5, "simulate": False}
    plain = await replan(client, **change)
    lines: list[dict[str, Any]] = []
    async with client.stream(
        "POST", "/v1/deployments/replan", json=change, headers={"Accept": "application/x-ndjson"}
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("application/x-ndjson")
        async for raw in response.aiter_lines():
            if raw:
                lines.append(json.loads(raw))
    kinds = [line["type"] for line in lines]
    assert kinds[0] == "start" and kinds[-1] == "summary"
    assert lines[0]["deployments"] == 5 and lines[0]["simulate"] is False
    progress = [line for line in lines if line["type"] == "progress"]
    assert [p["done"] for p in progress] == [2, 4, 5]  # one line per chunk of 2
    assert all(p["total"] == 5 for p in progress)
    streamed = sorted(
        ({k: v for k, v in line.items() if k != "type"} for line in lines if line["type"] == "deployment"),
        key=lambda d: d["name"],
    )
    assert streamed == plain["deployments"]
    summary = {k: v for k, v in lines[-1].items() if k not in ("type", "elapsed_seconds")}
    assert summary == {k: v for k, v in plain["summary"].items() if k != "elapsed_seconds"}


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"traffic_multiplier": 0}, "traffic_multiplier"),
        ({"traffic_multiplier": 5000}, "traffic_multiplier"),
        ({"slo": {"tpot_seconds": -1}}, "tpot_seconds"),
        ({"slo": {"slo_percentile": "p95"}}, "slo_percentile"),
        ({"engine": "vllm-9x"}, "engine"),
        ({"engine": "vllm-0.4"}, "engine"),
        ({"gpu": "no-such-gpu"}, "gpu"),
        ({"namespace": "Bad_NS"}, "namespace"),
        ({"labels": {"bad key!": "x"}}, "labels"),
        ({"replicas": 3}, "replicas"),
    ],
)
async def test_bad_changes_are_422_naming_the_field(
    client: httpx.AsyncClient, change: dict[str, Any], field: str
) -> None:
    await register(client, deployment("a"))
    for accept in ("application/json", "application/x-ndjson"):
        answer = await client.post("/v1/deployments/replan", json=change, headers={"Accept": accept})
        assert answer.status_code == 422, answer.text
        assert field in json.dumps(answer.json())


async def test_caps_are_422_before_any_work(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    await register(client, deployment("a"), deployment("b", max_model_len=4096), deployment("c"))
    monkeypatch.setattr(replan_module, "MAX_SIMULATED_CONFIGURATIONS", 1)
    answer = await client.post("/v1/deployments/replan", json={})
    assert answer.status_code == 422
    assert "simulate" in json.dumps(answer.json()) and "2 distinct configurations" in answer.text
    # The roofline-only replan is not capped by configurations.
    assert (await client.post("/v1/deployments/replan", json={"simulate": False})).status_code == 200
    monkeypatch.setattr(replan_module, "MAX_DEPLOYMENTS", 2)
    answer = await client.post("/v1/deployments/replan", json={"simulate": False})
    assert answer.status_code == 422
    assert "3 deployments match" in answer.text and "namespace or labels" in answer.text
    narrowed = await client.post("/v1/deployments/replan", json={"simulate": False, "labels": {"team": "x"}})
    assert narrowed.status_code == 200


async def test_concurrent_users_round_up(client: httpx.AsyncClient) -> None:
    body = deployment("users", workload={"concurrent_users": 33, "prompt_tokens": 1000, "output_tokens": 200})
    await register(client, body)
    result = await replan(client, traffic_multiplier=1.5, simulate=False)
    expected = await recommend(
        client, body, workload=body["workload"] | {"concurrent_users": math.ceil(33 * 1.5)}, simulate=False
    )
    assert by_name(result)["users"]["new"]["replicas"] == expected["replicas"]


async def test_the_work_runs_off_the_event_loop_in_chunks(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    await register(client, *(deployment(f"d-{i}") for i in range(5)))
    monkeypatch.setattr(replan_module, "CHUNK", 2)
    loop_thread = threading.get_ident()
    threads: list[tuple[str, int, int]] = []
    run_all = replan_module.Replanner.run_all

    def recording(self: replan_module.Replanner, jobs: Any) -> Any:
        threads.append(("run_all", threading.get_ident(), len(jobs)))
        return run_all(self, jobs)

    monkeypatch.setattr(replan_module.Replanner, "run_all", recording)
    for accept in ("application/json", "application/x-ndjson"):
        threads.clear()
        answer = await client.post(
            "/v1/deployments/replan", json={"simulate": False}, headers={"Accept": accept}
        )
        assert answer.status_code == 200
        assert [n for _, _, n in threads] == [2, 2, 1]
        assert all(ident != loop_thread for _, ident, _ in threads)


async def test_another_gpu_moves_a_mixed_gpu_pipeline_onto_that_gpu(client: httpx.AsyncClient) -> None:
    # A pipeline over different GPUs has no workload recommendation (one GPU kind is timed and priced), so its
    # replan re-plans the same shape; another GPU puts every stage on that GPU.
    mixed = deployment(
        "mixed",
        model="llama-3.1-70b",
        gpu="a100-sxm4-40gb",
        tensor_parallel_size=2,
        pipeline_parallel_size=2,
        pipeline_stage_gpus=["a100-sxm4-40gb", "a100-sxm4-80gb"],
        replicas=1,
        workload=None,
    )
    await register(client, mixed)
    result = await replan(client, gpu=H100, simulate=False)
    got = by_name(result)["mixed"]
    assert got["status"] != "error", json.dumps(got)
    plan = await client.post(
        "/v1/plans",
        json={
            "model": "llama-3.1-70b",
            "gpu": H100,
            "tensor_parallel_size": 2,
            "pipeline_parallel_size": 2,
            "max_model_len": 8192,
        },
    )
    assert plan.status_code == 200, plan.text
    assert got["new"]["gpu"] == H100 and got["new"]["fits"] is plan.json()["fits"] is True
    assert got["new"]["gpus"] == 1 * 2 * 2 and got["current"]["gpus"] == 4
    assert got["new"]["cost_per_hour_usd"] == pytest.approx(4 * await price(client, H100))
    current = await client.get("/v1/deployments/llm/mixed")
    assert current.json()["pipeline_stage_gpus"] == ["a100-sxm4-40gb", "a100-sxm4-80gb"]  # nothing stored
