"""Bad input never reaches a 500 or a long computation: each finding of the attacker-minded run, as a test.

1. Non-finite or huge numbers inside ``hf_config`` (``1e309`` is JSON for infinity) were 500s; ten million
   layers took seconds of CPU on the event loop for an unauthenticated ``/v1/plans``.
2. NUL (and other control characters, lone surrogates) were a 500 on PostgreSQL and stored on SQLite.
3. ``?q=`` passed ``%`` and ``_`` to ``LIKE`` as wildcards.
4. A chunked body over the limit was a 400 ("error parsing the body"), not a 413.
5. The webhook: ``kvcap.io/min-concurrency: "inf"`` crashed the policy (fail-open admitted it unchecked),
   a malformed review lost its ``uid``, unevaluated objects were not counted, unknown image tags were silent.

Every case runs on the suite's database (SQLite, or PostgreSQL with ``KVCAP_TEST_DATABASE_URL``).
"""

from __future__ import annotations

import copy
import gzip
import json
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from service.admission.router import get_policy
from service.app import create_app
from service.catalog.builtin import builtin_snapshot
from service.catalog.snapshot import CatalogHolder
from service.core import bounds
from service.exporter.collector import AdmissionMetrics
from service.planning import router
from service.settings import Settings

REVIEWS = Path(__file__).parents[1] / "admission" / "data"
LLAMA = {
    "model_type": "llama",
    "num_hidden_layers": 32,
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "intermediate_size": 14336,
    "max_position_embeddings": 8192,
}


def post_json(client: httpx.AsyncClient, path: str, body: Any, **headers: str) -> Any:
    """The body as raw JSON text, so ``1e309`` and ``NaN`` reach the server as written."""
    text = json.dumps(body, allow_nan=True).replace("Infinity", "1e309")
    return client.post(path, content=text, headers={"content-type": "application/json", **headers})


def loc(response: httpx.Response) -> list[Any]:
    errors = response.json().get("errors") or [{}]
    return list(errors[0].get("loc", []))


# 1. Numbers in hf_config --------------------------------------------------------------------------------------
BAD_NUMBERS = [
    ("num_hidden_layers", 10_000_000),  # the ten million layers
    ("num_hidden_layers", float("inf")),
    ("num_hidden_layers", float("nan")),
    ("hidden_size", float("inf")),
    ("hidden_size", 10**400),
    ("num_attention_heads", 2**70),
    ("vocab_size", 1e300),
    ("vocab_size", bounds.MAX_VOCAB + 1),
    ("max_position_embeddings", 10**18),
    ("intermediate_size", 10**15),
    ("head_dim", 10**9),
    ("num_hidden_layers", 12.5),
    ("num_hidden_layers", True),
    ("num_hidden_layers", -3),
]


@pytest.mark.parametrize(("key", "value"), BAD_NUMBERS)
async def test_an_implausible_number_in_hf_config_is_a_422_naming_the_key(
    client: httpx.AsyncClient, key: str, value: Any
) -> None:
    plan = await post_json(client, "/v1/plans", {"model": {"hf_config": LLAMA | {key: value}}, "gpu": "l4"})
    assert plan.status_code == 422, plan.text
    assert loc(plan) == ["body", "model", "hf_config", key]
    imported = await post_json(
        client, "/v1/models/import", {"name": "imp", "hf_config": LLAMA | {key: value}}
    )
    assert imported.status_code == 422, imported.text
    assert loc(imported) == ["body", "hf_config", key]


@pytest.mark.parametrize(
    ("patch", "where"),
    [
        ({"rope_scaling": {"type": "linear", "factor": float("inf")}}, ["rope_scaling", "factor"]),
        ({"rope_scaling": {"type": "linear", "factor": 1e300}}, ["rope_scaling", "factor"]),
        ({"rope_scaling": {"type": "dynamic", "factor": 5000.0}}, ["rope_scaling", "factor"]),
        (
            {"rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 10**12}},
            ["rope_scaling", "original_max_position_embeddings"],
        ),
        ({"quantization_config": {"quant_method": "compressed-tensors", "config_groups": [1]}}, None),
        ({"num_local_experts": 10**12, "num_experts_per_tok": 2}, ["num_local_experts"]),
        ({"sliding_window": 10**15}, ["sliding_window"]),
    ],
)
async def test_nested_hf_config_numbers_are_checked_too(
    client: httpx.AsyncClient, patch: dict[str, Any], where: list[str] | None
) -> None:
    response = await post_json(client, "/v1/plans", {"model": {"hf_config": LLAMA | patch}, "gpu": "l4"})
    assert response.status_code == 422, response.text
    if where is not None:
        assert loc(response) == ["body", "model", "hf_config", *where]


async def test_the_largest_published_shapes_still_plan(client: httpx.AsyncClient) -> None:
    """Llama 3.1 405B's shapes with Llama 4 Scout's 10 Mi-token context: inside every range."""
    config = LLAMA | {
        "num_hidden_layers": 126,
        "hidden_size": 16384,
        "num_attention_heads": 128,
        "intermediate_size": 53248,
        "max_position_embeddings": 10_485_760,
    }
    response = await client.post(
        "/v1/plans", json={"model": {"hf_config": config}, "gpu": "h100-sxm-80gb", "tensor_parallel_size": 8}
    )
    assert response.status_code == 200, response.text


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_model_len", bounds.MAX_CONTEXT_TOKENS + 1),
        ("tensor_parallel_size", 1025),
        ("max_num_seqs", bounds.MAX_NUM_SEQS + 1),
        ("prompt_tokens", bounds.MAX_CONTEXT_TOKENS + 1),
    ],
)
async def test_settings_outside_their_range_are_a_422(
    client: httpx.AsyncClient, field: str, value: int
) -> None:
    response = await client.post("/v1/plans", json={"model": "llama-3.1-8b", "gpu": "l4", field: value})
    assert response.status_code == 422
    assert loc(response)[:2] == ["body", field]


async def test_catalog_entries_are_held_to_the_same_ranges(client: httpx.AsyncClient) -> None:
    model = (await client.get("/v1/models/llama-3.1-8b")).json()
    body = {k: v for k, v in model.items() if k not in ("version", "origin", "created_at", "updated_at")}
    response = await client.post(
        "/v1/models", json=body | {"name": "huge", "num_hidden_layers": bounds.MAX_LAYERS + 1}
    )
    assert response.status_code == 422
    assert loc(response) == ["body", "num_hidden_layers"]
    patched = await client.patch("/v1/models/llama-3.1-8b", json={"vocab_size": bounds.MAX_VOCAB + 1})
    assert patched.status_code == 422
    assert (await client.get("/v1/models/llama-3.1-8b")).json()["vocab_size"] == model["vocab_size"]


async def test_a_sweep_that_would_plan_too_many_options_is_a_422_naming_the_largest_list(
    client: httpx.AsyncClient,
) -> None:
    body = {
        "model": "llama-3.1-8b",
        "workload": {"concurrent_users": 8},
        "tensor_parallel_sizes": [1, 2, 4, 8, 16, 32, 3, 5, 6, 7, 9, 10, 11, 12, 13, 14],
        "kv_cache_dtypes": ["auto", "fp8", "fp8_e4m3", "fp8_e5m2", "bfloat16", "float16"],
        "quantizations": [None, "fp8", "awq", "gptq", "int8", "int4"],
    }
    response = await client.post("/v1/plans/sweep", json=body)
    assert response.status_code == 422, response.text
    assert loc(response) == ["body", "gpus"]  # ~26 catalog GPUs: the largest factor
    assert "at most 1,536" in response.json()["detail"]


# 2. Control characters ----------------------------------------------------------------------------------------
GPU = {"name": "nul-test", "vendor": "nvidia", "memory_bytes": 2**34, "source": "datasheet"}
DEPLOYMENT = {"namespace": "bad", "name": "chat", "model": "llama-3.1-8b", "gpu": "l4", "max_model_len": 4096}


@pytest.mark.parametrize("character", ["\x00", "\x01", "\x1b", "\x7f", "\x85", "\ud800"])
async def test_control_characters_in_a_body_are_a_422_and_nothing_is_stored(
    client: httpx.AsyncClient, character: str
) -> None:
    response = await post_json(client, "/v1/gpus", GPU | {"source": f"data{character}sheet"})
    assert response.status_code == 422, response.text
    assert loc(response) == ["body", "source"]
    assert (await client.get("/v1/gpus/nul-test")).status_code == 404


@pytest.mark.parametrize(
    ("body", "where"),
    [
        (DEPLOYMENT | {"model": {"hf_config": LLAMA | {"model_type": "lla\x00ma"}}}, "model_type"),
        (DEPLOYMENT | {"model": {"hf_config": LLAMA | {"archi\x00": ["x"]}}}, "archi"),
        (DEPLOYMENT | {"labels": {"team": "a\nb"}}, None),  # Python's "$" matched before a trailing newline
        (DEPLOYMENT | {"namespace": "bad\n"}, None),
    ],
)
async def test_control_characters_anywhere_in_a_deployment_are_refused(
    client: httpx.AsyncClient, body: dict[str, Any], where: str | None
) -> None:
    response = await client.post("/v1/deployments", json=body)
    assert response.status_code == 422, response.text
    if where:
        assert where in response.json()["detail"]


@pytest.mark.parametrize(
    ("path", "expected_loc"),
    [
        ("/v1/models?q=%00", ["query", "q"]),
        ("/v1/gpus?vendor=nvidia&q=a%01b", ["query", "q"]),
        ("/v1/deployments?namespace=%00", ["query", "namespace"]),
        ("/v1/gpus/h100%00", ["path"]),
        ("/v1/deployments/a%00/b", ["path"]),
    ],
)
async def test_control_characters_in_paths_and_queries_are_a_422(
    client: httpx.AsyncClient, path: str, expected_loc: list[str]
) -> None:
    response = await client.get(path)
    assert response.status_code == 422, response.text
    assert loc(response) == expected_loc


async def test_tabs_and_newlines_in_prose_fields_are_kept(client: httpx.AsyncClient) -> None:
    response = await client.post("/v1/gpus", json=GPU | {"notes": "line one\n\tline two"})
    assert response.status_code == 201, response.text
    assert (await client.get("/v1/gpus/nul-test")).json()["notes"] == "line one\n\tline two"


# 3. LIKE wildcards --------------------------------------------------------------------------------------------
async def test_search_treats_like_wildcards_and_the_escape_character_literally(
    client: httpx.AsyncClient,
) -> None:
    for name in ("wild_card", "wildxcard"):
        assert (await client.post("/v1/gpus", json=GPU | {"name": name})).status_code == 201

    async def names(path: str, q: str) -> list[str]:
        response = await client.get(path, params={"q": q, "limit": 500})
        assert response.status_code == 200
        return [item["name"] for item in response.json()["items"]]

    assert await names("/v1/gpus", "wild_card") == ["wild_card"]
    assert await names("/v1/gpus", "_") == ["wild_card"]
    assert await names("/v1/gpus", "%") == []
    assert await names("/v1/models", "%") == []
    assert await names("/v1/models", "/") != []  # hf_id "meta-llama/…": "/" is SQLAlchemy's escape character
    assert "llama-3.1-8b" in await names("/v1/models", "meta-llama/llama-3.1-8b")
    assert await names("/v1/models", "meta-llama%8b") == []


# 4. Body limit ------------------------------------------------------------------------------------------------
@pytest.fixture
async def small_limit(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    limited = create_app(Settings(max_request_body_bytes=4096), with_lifespan=False)
    limited.state.catalog = app.state.catalog
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=limited), base_url="http://t") as client:
        yield client


async def chunks(data: bytes, size: int = 1000) -> AsyncIterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


@pytest.mark.parametrize("path", ["/v1/plans", "/admission/validate"])
async def test_a_body_over_the_limit_is_a_413_with_or_without_a_content_length(
    small_limit: httpx.AsyncClient, path: str
) -> None:
    big = json.dumps({"model": "x" * 10_000, "gpu": "l4"}).encode()
    declared = await small_limit.post(path, content=big, headers={"content-type": "application/json"})
    streamed = await small_limit.post(path, content=chunks(big), headers={"content-type": "application/json"})
    assert "content-length" not in streamed.request.headers  # sent chunked
    for response in (declared, streamed):
        assert response.status_code == 413, response.text
        assert response.json()["error"] == "PayloadTooLarge"


async def test_a_compressed_body_is_refused_with_415_not_inflated(small_limit: httpx.AsyncClient) -> None:
    bomb = gzip.compress(b'{"model": "' + b"x" * 1_000_000 + b'"}')
    assert len(bomb) < 4096
    response = await small_limit.post(
        "/v1/plans", content=bomb, headers={"content-type": "application/json", "content-encoding": "gzip"}
    )
    assert response.status_code == 415
    assert response.json()["error"] == "UnsupportedMediaType"


# 5. The webhook -----------------------------------------------------------------------------------------------
@pytest.fixture
def webhook_app() -> FastAPI:
    app = create_app(
        Settings(database_url="postgresql+psycopg://kvcap@127.0.0.1:1/none"), with_lifespan=False
    )
    app.state.catalog = CatalogHolder(builtin_snapshot())
    app.state.admission_observer = AdmissionMetrics()
    return app


async def review(app: FastAPI, body: Any) -> httpx.Response:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="https://k") as client:
        return await post_json(client, "/admission/validate", body)


def promising(value: str) -> dict[str, Any]:
    body: dict[str, Any] = json.loads((REVIEWS / "deployment-llama-8b-promise-64-one-l4.json").read_text())
    body["request"]["object"]["metadata"]["annotations"]["kvcap.io/min-concurrency"] = value
    return body


@pytest.mark.parametrize("value", ["inf", "Infinity", "-inf", "nan", "1e309", "1e30", "-5", "0"])
@pytest.mark.parametrize("failure_policy", ["fail-open", "fail-closed"])
async def test_a_min_concurrency_that_is_not_a_finite_promise_is_denied_as_malformed(
    value: str, failure_policy: str
) -> None:
    app = create_app(
        Settings(database_url="sqlite+aiosqlite://", admission_failure_policy=failure_policy),
        with_lifespan=False,
    )
    app.state.catalog = CatalogHolder(builtin_snapshot())
    response = (await review(app, promising(value))).json()["response"]
    assert response["allowed"] is False
    assert response["status"]["code"] == 403  # a verdict on the object, not kvcap failing (500)
    assert "kvcap.io/min-concurrency" in response["status"]["message"]


async def test_a_malformed_review_with_a_readable_uid_echoes_it_in_its_400(webhook_app: FastAPI) -> None:
    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": "u-42"}}
    response = await review(webhook_app, body)
    assert response.status_code == 400
    payload = response.json()
    assert payload["error"] == "BadRequest"
    assert payload["response"]["uid"] == "u-42"
    assert payload["response"]["allowed"] is False
    assert payload["response"]["status"]["code"] == 400
    unreadable = await review(webhook_app, {"kind": "AdmissionReview", "request": {"uid": 7}})
    assert unreadable.status_code == 400 and "response" not in unreadable.json()


async def test_an_object_kvcap_cannot_evaluate_is_allowed_with_a_warning_and_counted(
    webhook_app: FastAPI,
) -> None:
    body = promising("8")
    container = body["request"]["object"]["spec"]["template"]["spec"]["containers"][0]
    container["args"] = ["--model", "someone/unknown-model-7b"]
    body["request"]["object"]["metadata"]["annotations"].pop("kvcap.io/model", None)
    response = (await review(webhook_app, body)).json()["response"]
    assert response["allowed"] is True
    assert any("kvcap cannot check" in w for w in response["warnings"])
    assert webhook_app.state.admission_observer.unevaluated_counts() == {"unknown_model": 1}


async def test_fail_open_allows_an_evaluation_error_only_with_a_warning_and_a_count() -> None:
    app = create_app(
        Settings(database_url="sqlite+aiosqlite://", admission_failure_policy="fail-open"),
        with_lifespan=False,
    )
    app.state.catalog = CatalogHolder(builtin_snapshot())
    app.state.admission_observer = AdmissionMetrics()

    def broken(*_: Any) -> Any:
        raise RuntimeError("boom")

    app.dependency_overrides[get_policy] = lambda: broken
    response = (await review(app, promising("8"))).json()["response"]
    assert response["allowed"] is True
    assert any("allowed unchecked (fail-open)" in w for w in response["warnings"])
    assert app.state.admission_observer.unevaluated_counts() == {"error": 1}


@pytest.mark.parametrize(
    ("image", "warning"),
    [
        ("vllm/vllm-openai:latest", "names no vLLM release"),
        ("vllm/vllm-openai@sha256:" + "a" * 64, "names no vLLM release"),
        ("vllm/vllm-openai:v0.99.0", "newer than the releases kvcap models"),
    ],
)
async def test_unknown_releases_and_image_tags_warn(webhook_app: FastAPI, image: str, warning: str) -> None:
    body = copy.deepcopy(promising("8"))
    body["request"]["object"]["spec"]["template"]["spec"]["containers"][0]["image"] = image
    response = (await review(webhook_app, body)).json()["response"]
    assert any(warning in w for w in response.get("warnings", [])), response


@pytest.mark.parametrize("image", ["vllm/vllm-openai:v0.34.0", "vllm/vllm-openai:v0.34.1"])
async def test_the_newest_modelled_release_does_not_warn(webhook_app: FastAPI, image: str) -> None:
    # 0.34 is the newest release kvcap models (``engines.NEWEST_VERSION``): checked with its own rules, no warning.
    body = copy.deepcopy(promising("8"))
    body["request"]["object"]["spec"]["template"]["spec"]["containers"][0]["image"] = image
    response = (await review(webhook_app, body)).json()["response"]
    assert not any("newer than" in w for w in response.get("warnings", [])), response


# A cap on the work of one request ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("path", "function", "body"),
    [
        # A catalog model plans on the loop (cheaper than the hand-off); an inline config.json goes to a thread.
        ("/v1/plans", "make_plan_json", {"model": {"hf_config": LLAMA}, "gpu": "l4", "max_model_len": 4097}),
        (
            "/v1/plans/recommend",
            "make_recommendation",
            {"model": "llama-3.1-8b", "gpu": "l4", "workload": {"concurrent_users": 8}},
        ),
        ("/v1/plans/sweep", "make_sweep", {"model": "llama-3.1-8b", "workload": {"concurrent_users": 8}}),
    ],
)
async def test_expensive_plans_are_computed_in_a_worker_thread_not_on_the_event_loop(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch, path: str, function: str, body: Any
) -> None:
    real = getattr(router, function)
    threads: list[int] = []

    def spy(*args: Any, **kwargs: Any) -> Any:
        threads.append(threading.get_ident())
        return real(*args, **kwargs)

    monkeypatch.setattr(router, function, spy)
    response = await client.post(path, json=body)
    assert response.status_code == 200, response.text
    assert threads and threads[0] != threading.get_ident()


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--max-model-len", "1e309"),
        ("--max-model-len", "9" * 400 + "k"),  # float() of 400 digits is inf: OverflowError before
        ("--max-model-len", "100000000"),
        ("--tensor-parallel-size", "100000"),
        ("--gpu-memory-utilization", "nan"),
        ("--gpu-memory-utilization", "inf"),
        ("--max-num-seqs", "-1"),
        ("--data-parallel-size", "100000"),
    ],
)
async def test_vllm_flags_outside_their_range_are_denied_naming_the_flag(
    webhook_app: FastAPI, flag: str, value: str
) -> None:
    body = promising("8")
    container = body["request"]["object"]["spec"]["template"]["spec"]["containers"][0]
    container["args"] = ["meta-llama/Llama-3.1-8B-Instruct", flag, value]
    response = await review(webhook_app, body)
    assert response.status_code == 200
    verdict = response.json()["response"]
    assert verdict["allowed"] is False
    assert flag in verdict["status"]["message"], verdict["status"]["message"]
    assert verdict["status"]["code"] == 403
