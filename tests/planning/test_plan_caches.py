"""The caches behind ``POST /v1/plans`` change no byte of an answer, and never outlive the spec they came from.

A plan keeps these things between requests: the per-configuration stages of the core (``fixed_stages``, keyed
by the resolved settings, specs included, and kept again with the settings' length-free part,
``settings.length_free`` and ``pipeline.fixed_for``), what catalog names resolve to (with the subjects' JSON,
per snapshot), calibration-key templates, the JSON of the terms a configuration shares, and whole answers
(``PlanCache`` by ``request_key``, the lane by body bytes). Here every plan
computed with warm caches is compared byte for byte with the same plan computed after emptying them, and a
catalog that swaps a model's spec under the same name is planned from the new spec.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
from typing import Any

import httpx
from fastapi import FastAPI

from service.catalog.builtin import builtin_snapshot
from service.catalog.snapshot import CatalogModel, CatalogSnapshot
from service.core.planner import settings as settings_stage
from service.core.planner.pipeline import _fixed
from service.errors import Unprocessable
from service.planning import calibration_key, service
from service.planning.router import PlanCache, request_key
from service.planning.schemas import PlanRequestBody
from service.planning.service import make_plan_json

MODEL = "llama-3.1-8b"

VARIANTS: list[dict[str, Any]] = [
    {},
    {"max_model_len": 2049},
    {"max_model_len": 2050, "kv_cache_dtype": "fp8", "prompt_tokens": 5, "output_tokens": 64},
    {"max_model_len": 100_000, "gpu_memory_utilization": 0.5},  # refused: suggestions re-plan
    {"tensor_parallel_size": 2, "pipeline_parallel_size": 2, "engine": "vllm-0.10-v0"},
    {"engine": "ideal", "gpu_memory_utilization": 1, "max_model_len": "auto"},
    {"engine": "ideal", "gpu_memory_utilization": 1.0, "max_model_len": "auto"},
    {"kv_cache_memory_bytes": 10**10, "device": "cpu", "engine": "vllm-0.12"},
    {"enable_lora": True, "speculative_config": {"method": "ngram", "num_speculative_tokens": 3}},
    {"engine": "vllm-0.6.3", "max_model_len": 40_000, "enforce_eager": True},
]


def empty_caches() -> None:
    _fixed.cache_clear()
    settings_stage._LENGTH_FREE.clear()
    service._RESOLVED.clear()
    service._SHARED_TERMS.clear()
    calibration_key._TEMPLATES.clear()


def test_plans_with_warm_caches_are_the_bytes_of_plans_without_them() -> None:
    snapshot = builtin_snapshot()
    bodies = [
        PlanRequestBody.model_validate({"model": model, "gpu": gpu, **variant})
        for model, gpu, variant in itertools.product(
            list(snapshot.models)[::4], list(snapshot.gpus)[::6], VARIANTS
        )
    ]
    empty_caches()
    for body in bodies:  # warm every cache with each configuration once
        with contextlib.suppress(Unprocessable):
            make_plan_json(snapshot, body)
    computed = _fixed.cache_info().misses
    warm: list[bytes | str] = []
    for body in bodies:
        try:
            warm.append(make_plan_json(snapshot, body))
        except Unprocessable as exc:
            warm.append(str(exc))
    assert _fixed.cache_info().misses == computed  # the warm plans read every configuration's stages kept
    compared = 0
    for body, cached in zip(bodies, warm, strict=True):
        empty_caches()
        try:
            fresh: bytes | str = make_plan_json(snapshot, body)
        except Unprocessable as exc:
            fresh = str(exc)
        assert cached == fresh, body.model_dump(exclude_defaults=True)
        compared += isinstance(fresh, bytes)
    assert compared > 300


def test_request_keys_tell_apart_what_plans_apart() -> None:
    def key(**fields: Any) -> object:
        return request_key(PlanRequestBody.model_validate({"model": MODEL, "gpu": "l4", **fields}))

    assert key(max_model_len=4096) == key(max_model_len=4096)
    assert key(max_model_len=4096) != key(max_model_len=4097)
    assert key(gpu_memory_utilization=0.9) != key(gpu_memory_utilization=0.95)
    assert key(cpu_offload_gb=0.0) != key(cpu_offload_gb=-0.0)  # equal floats, different JSON
    assert key(enforce_eager=False) == key()  # a default given or left out: the same request
    assert key(enforce_eager=True) != key()
    nested = key(speculative_config={"method": "ngram", "num_speculative_tokens": 3})
    assert isinstance(nested, str)  # a nested object: named by the canonical JSON


def swapped(snapshot: CatalogSnapshot, name: str, **changes: Any) -> CatalogSnapshot:
    """``snapshot`` with ``name``'s spec changed, under the same name (a catalog row edited in place)."""
    models = dict(snapshot.models)
    old = models[name]
    models[name] = CatalogModel(entry=old.entry, spec=dataclasses.replace(old.spec, **changes))
    return CatalogSnapshot.of(models, {g.name: g for g in snapshot.gpus.values()}, source="test")


async def test_a_spec_swapped_under_the_same_name_is_planned_from_the_new_spec(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    body = {"model": MODEL, "gpu": "h100-sxm-80gb", "max_model_len": 8192}
    raw = json.dumps(body).encode()
    headers = {"content-type": "application/json"}
    before = await client.post("/v1/plans", content=raw, headers=headers)
    assert before.status_code == 200, before.text
    computed = _fixed.cache_info().misses
    shorter = {**body, "max_model_len": 4096}  # the same configuration: its stages come from the cache
    assert (await client.post("/v1/plans", json=shorter)).status_code == 200
    assert _fixed.cache_info().misses == computed

    holder = app.state.catalog
    old = holder.snapshot.models[MODEL].spec
    layers = old.num_hidden_layers // 2
    kinds = old.layer_types[:layers] if old.layer_types else ()
    holder.replace(swapped(holder.snapshot, MODEL, num_hidden_layers=layers, layer_types=kinds))
    after = await client.post("/v1/plans", content=raw, headers=headers)
    assert after.status_code == 200, after.text
    old_kv, new_kv = before.json()["kv_cache"], after.json()["kv_cache"]
    assert new_kv["bytes_per_token"] * 2 == old_kv["bytes_per_token"]  # half the layers, half the KV
    assert after.json()["calibration"]["key"] == before.json()["calibration"]["key"]  # the same configuration

    empty_caches()  # the same plan with nothing remembered
    app.state.plan_cache = PlanCache()
    fresh = make_plan_json(holder.snapshot, PlanRequestBody.model_validate(body))
    assert after.content == fresh
