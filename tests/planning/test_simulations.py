"""POST /v1/simulations: vLLM's result keys and their arithmetic, determinism per seed, the same answer as the core,
bad input named by field, bounded cost, and the simulation kept off the event loop."""

from __future__ import annotations

import math
import threading
from dataclasses import replace

import httpx
import pytest

from service.catalog.builtin import builtin_snapshot
from service.core.serving import BenchmarkSpec, simulate
from service.planning import router as planning_router
from service.planning.request import build_request
from service.planning.schemas import PlanRequestBody

# The scalar keys vLLM's `vllm bench serve --save-result` writes (vllm/benchmarks/serve.py::benchmark, 0.11+).
VLLM_RESULT_KEYS = {
    "duration",
    "completed",
    "failed",
    "total_input_tokens",
    "total_output_tokens",
    "request_throughput",
    "output_throughput",
    "total_token_throughput",
    "max_output_tokens_per_s",
    "max_concurrent_requests",
    *(
        f"{stat}_{metric}_ms"
        for stat in ("mean", "median", "std", "p99")
        for metric in ("ttft", "tpot", "itl", "e2el")
    ),
}

BASE = {"model": "llama-3.1-8b", "gpu": "h100-sxm-80gb", "max_model_len": 8192}


def body(**benchmark: object) -> dict[str, object]:
    return {
        **BASE,
        "benchmark": {"num_prompts": 60, "random_input_len": 512, "random_output_len": 64, **benchmark},
    }


async def test_the_result_has_exactly_vllms_keys_and_their_arithmetic_holds(
    client: httpx.AsyncClient,
) -> None:
    response = await client.post("/v1/simulations", json=body(request_rate=4))
    assert response.status_code == 200, response.text
    data = response.json()
    result = data["result"]
    assert set(result) == VLLM_RESULT_KEYS
    # random dataset with range ratio 0: every prompt has exactly 512 tokens and (ignore-eos) 64 output tokens
    assert result["completed"] == 60 and result["failed"] == 0
    assert result["total_input_tokens"] == 60 * 512
    assert result["total_output_tokens"] == 60 * 64
    assert result["request_throughput"] == pytest.approx(60 / result["duration"])
    assert result["output_throughput"] == pytest.approx(60 * 64 / result["duration"])
    assert result["total_token_throughput"] == pytest.approx(60 * (512 + 64) / result["duration"])
    band = data["error_band"]
    ratio = band["ratio"]
    assert 0 < ratio < 1
    assert band["output_throughput"] == pytest.approx(
        [result["output_throughput"] * (1 - ratio), result["output_throughput"] * (1 + ratio)]
    )
    assert data["benchmark"]["request_rate"] == 4
    assert data["plan"]["settings"]["max_model_len"] == 8192
    assert data["step_time_scale"] == 1.0
    assert 0 < len(data["timeline"]) <= 200
    assert all(p["kv_cache_usage_ratio"] <= 1 for p in data["timeline"])


async def test_the_endpoint_answers_what_the_core_simulator_computes(client: httpx.AsyncClient) -> None:
    response = await client.post("/v1/simulations", json=body(request_rate="inf", max_concurrency=8, seed=3))
    assert response.status_code == 200, response.text
    snapshot = builtin_snapshot()
    request = build_request(
        snapshot.models["llama-3.1-8b"].spec,
        snapshot.gpus["h100-sxm-80gb"].spec,
        PlanRequestBody.model_validate(BASE),
        suggest=False,
    )
    spec = BenchmarkSpec(
        num_prompts=60,
        random_input_len=512,
        random_output_len=64,
        max_concurrency=8,
        seed=3,
        request_rate=math.inf,
    )
    assert response.json()["result"] == pytest.approx(simulate(request, spec).result.as_dict())


async def test_gpu_peer_to_peer_false_is_passed_to_the_core_simulator(client: httpx.AsyncClient) -> None:
    tp2 = {**body(max_concurrency=16), "tensor_parallel_size": 2}
    p2p = await client.post("/v1/simulations", json=tp2)
    shm = await client.post("/v1/simulations", json={**tp2, "gpu_peer_to_peer": False})
    assert p2p.status_code == 200 and shm.status_code == 200, shm.text
    snapshot = builtin_snapshot()
    request = build_request(
        snapshot.models["llama-3.1-8b"].spec,
        snapshot.gpus["h100-sxm-80gb"].spec,
        PlanRequestBody.model_validate({**BASE, "tensor_parallel_size": 2}),
        suggest=False,
    )
    spec = BenchmarkSpec(num_prompts=60, random_input_len=512, random_output_len=64, max_concurrency=16)
    core = simulate(request, spec, gpu_peer_to_peer=False).result.as_dict()
    assert shm.json()["result"] == pytest.approx(core)
    assert shm.json()["result"]["mean_tpot_ms"] > p2p.json()["result"]["mean_tpot_ms"]
    bad = await client.post("/v1/simulations", json={**tp2, "gpu_peer_to_peer": "sometimes"})
    assert bad.status_code == 422 and "gpu_peer_to_peer" in bad.text


async def test_the_clients_readiness_probe_is_a_benchmark_field_with_the_releases_default(
    client: httpx.AsyncClient,
) -> None:
    old = {**body(), "engine": "vllm-0.12"}
    default = (await client.post("/v1/simulations", json=old)).json()
    skipped = await client.post(
        "/v1/simulations", json={**old, "benchmark": {**old["benchmark"], "ready_check_timeout_sec": 0}}
    )
    assert skipped.status_code == 200, skipped.text
    snapshot = builtin_snapshot()
    request = build_request(
        snapshot.models["llama-3.1-8b"].spec,
        snapshot.gpus["h100-sxm-80gb"].spec,
        PlanRequestBody.model_validate({**BASE, "engine": "vllm-0.12"}),
        suggest=False,
    )
    spec = BenchmarkSpec(num_prompts=60, random_input_len=512, random_output_len=64)
    assert default["result"] == pytest.approx(simulate(request, spec).result.as_dict())
    cold = simulate(request, replace(spec, ready_check_timeout_sec=0)).result.as_dict()
    assert skipped.json()["result"] == pytest.approx(cold)
    assert default["result"]["mean_ttft_ms"] < skipped.json()["result"]["mean_ttft_ms"]
    assert any("readiness probe" in line for line in default["assumptions"])
    assert not any("readiness probe" in line for line in skipped.json()["assumptions"])


async def test_a_seed_makes_the_run_repeatable_and_another_seed_changes_it(client: httpx.AsyncClient) -> None:
    args = {"request_rate": 6, "random_range_ratio": 0.5}
    first = (await client.post("/v1/simulations", json=body(seed=1, **args))).json()["result"]
    again = (await client.post("/v1/simulations", json=body(seed=1, **args))).json()["result"]
    other = (await client.post("/v1/simulations", json=body(seed=2, **args))).json()["result"]
    assert first == again
    assert first["total_input_tokens"] != other["total_input_tokens"]


@pytest.mark.parametrize(
    ("benchmark", "loc"),
    [
        ({"num_prompts": 0}, ["body", "benchmark", "num_prompts"]),
        ({"request_rate": -1}, ["body", "benchmark", "request_rate"]),
        ({"request_rate": "fast"}, ["body", "benchmark", "request_rate"]),
        ({"random_range_ratio": 1.0}, ["body", "benchmark", "random_range_ratio"]),
        ({"burstiness": 0}, ["body", "benchmark", "burstiness"]),
        ({"dataset_name": "sonnet"}, ["body", "benchmark", "dataset_name"]),
        ({"max_concurrency": 0}, ["body", "benchmark", "max_concurrency"]),
        ({"dataset_name": "explicit"}, ["body", "benchmark"]),
        ({"unknown_flag": 1}, ["body", "benchmark", "unknown_flag"]),
        ({"ready_check_timeout_sec": -1}, ["body", "benchmark", "ready_check_timeout_sec"]),
        ({"num_warmups": -1}, ["body", "benchmark", "num_warmups"]),
    ],
)
async def test_bad_benchmark_input_is_a_422_naming_the_field(
    client: httpx.AsyncClient, benchmark: dict[str, object], loc: list[object]
) -> None:
    response = await client.post("/v1/simulations", json={**BASE, "benchmark": benchmark})
    assert response.status_code == 422, response.text
    # a union's member may follow the field in ``loc`` (pydantic names which alternative failed)
    assert response.json()["errors"][0]["loc"][: len(loc)] == loc


async def test_a_run_larger_than_one_request_may_simulate_is_refused_naming_num_prompts(
    client: httpx.AsyncClient,
) -> None:
    # 20,000 prompts × 6,000 tokens = 120 M tokens, above the API's cap on simulated tokens.
    big = {"num_prompts": 20_000, "random_input_len": 4000, "random_output_len": 2000}
    response = await client.post("/v1/simulations", json={**BASE, "max_model_len": 8192, "benchmark": big})
    assert response.status_code == 422
    error = response.json()["errors"][0]
    assert error["loc"] == ["body", "benchmark", "num_prompts"]
    assert "at most" in error["msg"]


async def test_a_model_gpu_or_setting_problem_is_named_like_in_plans(client: httpx.AsyncClient) -> None:
    no_gpu = await client.post("/v1/simulations", json={"model": "llama-3.1-8b", "benchmark": {}})
    assert no_gpu.status_code == 422 and no_gpu.json()["errors"][0]["loc"] == ["body", "gpu"]
    unknown = await client.post("/v1/simulations", json={**BASE, "model": "no-such-model"})
    assert unknown.status_code == 422 and unknown.json()["errors"][0]["loc"] == ["body", "model"]
    too_big = await client.post(
        "/v1/simulations",
        json={**BASE, "model": "llama-3.1-70b", "gpu": "l4", "benchmark": {"num_prompts": 5}},
    )
    assert too_big.status_code == 422, too_big.text


async def test_explicit_lengths_longer_than_max_model_len_fail_as_vllm_answers_them(
    client: httpx.AsyncClient,
) -> None:
    requests = [[100, 20], [9000, 10], [200, 30]]
    response = await client.post("/v1/simulations", json=body(dataset_name="explicit", requests=requests))
    assert response.status_code == 200, response.text
    data = response.json()
    assert data["result"]["completed"] == 2 and data["result"]["failed"] == 1
    assert data["result"]["total_input_tokens"] == 300
    assert any("max_model_len" in m for m in data["messages"])


async def test_the_simulation_runs_in_a_worker_thread_not_on_the_event_loop(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    loop_thread = threading.get_ident()
    seen: list[int] = []
    real = planning_router.make_simulation

    def spy(*args: object, **kwargs: object) -> object:
        seen.append(threading.get_ident())
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(planning_router, "make_simulation", spy)
    response = await client.post("/v1/simulations", json=body(num_prompts=5))
    assert response.status_code == 200
    assert seen and seen[0] != loop_thread


async def test_the_openapi_document_describes_the_endpoint(client: httpx.AsyncClient) -> None:
    spec = (await client.get("/openapi.json")).json()
    operation = spec["paths"]["/v1/simulations"]["post"]
    assert "422" in operation["responses"]
    schema = spec["components"]["schemas"]["SimulationRequestBody"]
    assert {"model", "gpu", "max_num_seqs", "benchmark"} <= set(schema["properties"])


SPEC_DRAFT = {"speculative_config": {"model": "llama-3.2-1b", "num_speculative_tokens": 3}}


async def test_speculative_decoding_is_simulated_with_the_benchmarks_acceptance(
    client: httpx.AsyncClient,
) -> None:
    given = {**body(spec_mean_acceptance_length=2.0), **SPEC_DRAFT}
    response = await client.post("/v1/simulations", json=given)
    assert response.status_code == 200, response.text
    data = response.json()
    spec = data["speculative"]
    assert spec["method"] == "draft_model" and spec["num_speculative_tokens"] == 3
    assert spec["assumed_mean_acceptance_length"] == 2.0
    # 1 + accepted / drafts over the run: each request's accumulator is within one token of 1 × its drafts.
    assert abs(spec["mean_acceptance_length"] - 2.0) <= 60 / spec["num_drafts"]
    assert spec["num_draft_tokens"] == 3 * spec["num_drafts"]
    assert any("mean acceptance length 2.00 (given" in line for line in data["assumptions"])
    assert data["result"]["total_output_tokens"] == 60 * 64
    default = (await client.post("/v1/simulations", json={**body(), **SPEC_DRAFT})).json()
    assert default["speculative"]["assumed_mean_acceptance_length"] == pytest.approx(1 + 0.6 + 0.36 + 0.216)
    plain = (await client.post("/v1/simulations", json=body(spec_mean_acceptance_length=2.0))).json()
    assert plain["speculative"] is None
    assert any("spec_mean_acceptance_length ignored" in line for line in plain["assumptions"])


@pytest.mark.parametrize("length", [0.5, 4.5])
async def test_an_impossible_acceptance_length_is_a_422_naming_the_field(
    client: httpx.AsyncClient, length: float
) -> None:
    # Below 1 the schema refuses it; above 1 + num_speculative_tokens (3) the simulator does.
    response = await client.post(
        "/v1/simulations", json={**body(spec_mean_acceptance_length=length), **SPEC_DRAFT}
    )
    assert response.status_code == 422, response.text
    assert response.json()["errors"][0]["loc"][:3] == ["body", "benchmark", "spec_mean_acceptance_length"]
