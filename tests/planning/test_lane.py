"""``POST /v1/plans`` answered at the edge (``service.planning.lane``): the route's answer, byte for byte.

The route still answers whatever the lane leaves to it; a ``+json`` content type is parsed as JSON by the
route but never taken by the lane, so the same body sent both ways compares the lane with the route.
"""

from __future__ import annotations

import itertools
import json
import warnings
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from prometheus_client.parser import text_string_to_metric_families

from service.api.edge import Edge
from service.catalog.builtin import builtin_snapshot
from service.catalog.snapshot import CatalogSnapshot
from service.errors import Unprocessable
from service.planning import service
from service.planning.lane import PlanLane
from service.planning.router import PlanCache
from service.planning.schemas import PlanRequestBody
from service.planning.service import make_plan, make_plan_json

ROUTE_ONLY = "application/vnd.kvcap+json"  # JSON to the route, not taken by the lane

BODIES: list[dict[str, Any]] = [
    {"model": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "NVIDIA-H100-80GB-HBM3", "max_model_len": 32768},
    {"model": "llama-3.1-70b", "gpu": "h100-sxm-80gb", "tensor_parallel_size": 4, "kv_cache_dtype": "fp8"},
    {"model": "gemma-3-27b", "gpu": "l40s", "max_model_len": 16384},  # refused: suggestions re-planned
    {"model": "llama-3.1-8b", "gpu": "l4", "prompt_tokens": 5, "output_tokens": 64, "enable_lora": True},
    {"model": "qwen3-30b-a3b", "gpu": "h200", "engine": "vllm-0.19", "pipeline_parallel_size": 2},
]


def lane_of(app: FastAPI) -> PlanLane:
    (edge,) = [m for m in app.user_middleware if m.cls is Edge]
    lane: PlanLane = edge.kwargs["lanes"][PlanLane.route]
    return lane


async def post(client: httpx.AsyncClient, body: bytes, content_type: str, **headers: str) -> httpx.Response:
    return await client.post("/v1/plans", content=body, headers={"content-type": content_type, **headers})


def without_id(response: httpx.Response) -> list[tuple[str, str]]:
    return [(k, v) for k, v in response.headers.multi_items() if k != "x-request-id"]


@pytest.mark.parametrize("body", BODIES, ids=lambda b: str(b["model"]))
async def test_the_lane_answers_exactly_what_the_route_answers(
    app: FastAPI, client: httpx.AsyncClient, body: dict[str, Any]
) -> None:
    raw = json.dumps(body).encode()
    lane = lane_of(app)
    answered = await post(client, raw, "application/json", **{"x-request-id": "lane-1"})
    assert answered.status_code == 200, answered.text
    assert any(key[0] == raw for key in lane._by_body)  # the lane answered it, not the route
    app.state.plan_cache = PlanCache()  # the route plans it afresh
    routed = await post(client, raw, ROUTE_ONLY, **{"x-request-id": "route-1"})
    assert routed.status_code == 200, routed.text
    assert answered.content == routed.content
    assert without_id(answered) == without_id(routed)
    assert answered.headers["x-request-id"] == "lane-1"
    assert routed.headers["x-request-id"] == "route-1"
    again = await post(client, raw, "application/json")  # from the remembered bytes
    assert again.content == routed.content
    assert len(again.headers["x-request-id"]) == 32  # generated


async def test_a_reloaded_catalog_is_not_answered_from_the_old_one(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    raw = json.dumps(BODIES[0]).encode()
    assert (await post(client, raw, "application/json")).status_code == 200
    app.state.catalog.replace(CatalogSnapshot.build((), (), source="inline"))  # a catalog without the model
    response = await post(client, raw, "application/json")
    assert response.status_code == 422  # the route's unknown-model answer
    assert "unknown model" in response.text


@pytest.mark.parametrize(
    ("content", "content_type", "status", "reason"),
    [
        (
            b'{"model": "llama-3.1-8b", "gpu": "l4", "max_model_len": 0}',
            "application/json",
            422,
            "max_model_len",
        ),
        (b'{"model": "llama-3.1-8b", "gpu": "l4"', "application/json", 422, "JSON decode error"),
        (b'{"model": "no-such-model", "gpu": "l4"}', "application/json", 422, "unknown model"),
        (b'{"model": "llama-3.1-8b", "gpu": "l4"}', "text/plain", 422, "model_attributes_type"),
        (b"", "application/json", 422, "missing"),
    ],
)
async def test_what_the_lane_does_not_answer_the_route_words_as_before(
    app: FastAPI, client: httpx.AsyncClient, content: bytes, content_type: str, status: int, reason: str
) -> None:
    lane = lane_of(app)
    response = await post(client, content, content_type)
    assert response.status_code == status, response.text
    assert reason in response.text
    assert response.headers["x-request-id"]
    assert not lane._by_body  # nothing remembered


async def test_an_inline_config_is_left_to_the_route(app: FastAPI, client: httpx.AsyncClient) -> None:
    from tests.planning.test_router import seed_body

    response = await client.post("/v1/plans", json=seed_body())
    assert response.status_code == 200, response.text
    assert response.json()["kv_cache"]["bytes_per_token"] == 524_288  # the seed article's 0.5 MiB per token
    assert not lane_of(app)._by_body


async def test_lane_answers_are_counted_under_the_route_template(client: httpx.AsyncClient) -> None:
    def count(text: str) -> float:
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                wanted = {"method": "POST", "route": "/v1/plans", "status": "200"}
                if s.name == "kvcap_http_request_duration_seconds_count" and s.labels == wanted:
                    return s.value
        return 0.0

    before = count((await client.get("/metrics")).text)
    raw = json.dumps(BODIES[1]).encode()
    for _ in range(3):
        assert (await post(client, raw, "application/json")).status_code == 200
    assert count((await client.get("/metrics")).text) - before == 3


VARIANTS: list[dict[str, Any]] = [
    {},
    {"max_model_len": 4096, "kv_cache_dtype": "fp8", "prompt_tokens": 5, "output_tokens": 64},
    {"tensor_parallel_size": 2, "pipeline_parallel_size": 2, "engine": "vllm-0.10-v0"},
    {"engine": "ideal", "gpu_memory_utilization": 1, "max_model_len": "auto"},
    {"kv_cache_memory_bytes": 10**10, "device": "cpu", "engine": "vllm-0.12"},
    {
        "enable_lora": True,
        "speculative_config": {"method": "ngram", "num_speculative_tokens": 3},
        "data_parallel_size": 2,
        "kv_offloading_size": 8.0,
        "shared_prefix_tokens": 100,
    },
]


def test_plans_written_from_the_core_are_the_response_models_bytes() -> None:
    """``make_plan_json`` writes the core's dataclasses directly (a plan without serving features in pieces
    around the JSON its configuration shares, ``write_shared_plan``); ``make_plan`` validates them into
    ``PlanResponse`` first. Over every catalog model, a spread of GPUs and settings (refusals, pipeline
    stages, V0, exact budgets, serving features) the bytes are the same, and no serialiser warns."""
    snapshot = builtin_snapshot()
    service._SHARED_TERMS.clear()
    compared = 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a type the serialiser did not expect warns: fail on it
        for model, gpu, variant in itertools.product(snapshot.models, list(snapshot.gpus)[::5], VARIANTS):
            body = PlanRequestBody.model_validate({"model": model, "gpu": gpu, **variant})
            try:
                expected = make_plan(snapshot, body).model_dump_json().encode()
            except Unprocessable:
                continue
            assert make_plan_json(snapshot, body) == expected, (model, gpu, variant)
            compared += 1
    assert compared > 1000
    assert len(service._SHARED_TERMS) > compared // 2  # most were written around shared pieces


def test_plans_of_one_configuration_share_their_pieces_and_keep_their_bytes() -> None:
    """Lengths of one configuration share the memory, stages and leading terms (one ``SharedResults``); each
    plan's bytes are still its response model's, refused ones (suggestions, an over-long length) included."""
    snapshot = builtin_snapshot()
    shared = set()
    for length in (1, 16, 2048, 4097, 131_072, 1_000_000):
        body = PlanRequestBody.model_validate(
            {"model": "gemma-3-27b", "gpu": "l40s", "max_model_len": length}
        )
        expected = make_plan(snapshot, body).model_dump_json().encode()
        assert make_plan_json(snapshot, body) == expected, length
        planned = service._plan_for(snapshot, body)
        assert planned.result.shared is not None
        assert planned.result.breakdown[: len(planned.result.shared.terms)] == planned.result.shared.terms
        shared.add(id(planned.result.shared))
    assert len(shared) <= 2  # the batch defaults follow the shortest lengths: at most one more configuration
