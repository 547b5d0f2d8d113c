"""Calibration: observed start-ups correct later plans of the same configuration, and only of it."""

from __future__ import annotations

import httpx
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from service.catalog.builtin import builtin_snapshot
from service.planning.calibration import CalibrationHolder, calibration_key
from service.planning.calibration_store import record_observation
from service.planning.schemas import PlanRequestBody
from service.planning.service import make_plan

BODY = {"model": "llama-3.1-8b", "gpu": "h100-sxm-80gb", "max_model_len": 32768, "engine": "vllm-0.33"}


async def test_an_observation_calibrates_the_same_configuration(
    session: AsyncSession, sessionmaker: async_sessionmaker[AsyncSession]
) -> None:
    catalog = builtin_snapshot()
    plan = make_plan(catalog, PlanRequestBody.model_validate(BODY))
    assert plan.calibration is not None and plan.calibration.applied is False
    observed = plan.kv_cache.num_gpu_blocks - 500
    assert await record_observation(session, plan, observed_num_gpu_blocks=observed, source="llm/llama/pod-a")
    assert not await record_observation(
        session, plan, observed_num_gpu_blocks=observed, source="llm/llama/pod-a"
    )  # same start-up
    await session.commit()
    holder = CalibrationHolder()
    await holder.reload(sessionmaker)

    calibrated = make_plan(catalog, PlanRequestBody.model_validate(BODY), holder)
    assert calibrated.calibration is not None and calibrated.calibration.applied
    assert calibrated.kv_cache.num_gpu_blocks == observed
    assert calibrated.calibration.uncalibrated_num_gpu_blocks == plan.kv_cache.num_gpu_blocks
    # concurrency follows the calibrated blocks: blocks / blocks one 32,768-token request needs (2,048)
    assert calibrated.kv_cache.max_concurrency == observed / 2048
    assert calibrated.kv_cache.kv_cache_size_tokens == int(observed / 2048 * 32768)
    assert any(m.code == "calibrated" for m in calibrated.messages)

    other = make_plan(
        catalog, PlanRequestBody.model_validate(BODY | {"gpu_memory_utilization": 0.85}), holder
    )
    assert other.calibration is not None and other.calibration.applied is False
    assert calibration_key(other) != calibration_key(plan)


async def test_the_median_of_replicas_is_used(
    session: AsyncSession, sessionmaker: async_sessionmaker[AsyncSession]
) -> None:
    catalog = builtin_snapshot()
    plan = make_plan(catalog, PlanRequestBody.model_validate(BODY))
    for pod, blocks in (("a", 25_000), ("b", 25_100), ("c", 31_000)):
        await record_observation(session, plan, observed_num_gpu_blocks=blocks, source=f"llm/llama/{pod}")
    await session.commit()
    holder = CalibrationHolder()
    await holder.reload(sessionmaker)
    assert holder.by_key[calibration_key(plan)].observed_num_gpu_blocks == 25_100
    assert holder.by_key[calibration_key(plan)].samples == 3


async def test_exact_plans_are_never_calibrated(session: AsyncSession) -> None:
    plan = make_plan(
        builtin_snapshot(),
        PlanRequestBody.model_validate({"model": "llama-3.1-8b", "kv_cache_memory_bytes": 2**30}),
    )
    assert not await record_observation(session, plan, observed_num_gpu_blocks=123, source="x/y/z")


async def test_the_api_reports_calibration(client: httpx.AsyncClient) -> None:
    response = (await client.post("/v1/plans", json=BODY)).json()
    assert response["calibration"]["applied"] is False
    assert len(response["calibration"]["key"]) == 32


def test_the_key_read_from_the_core_result_is_the_key_of_the_response() -> None:
    """Plans compute the calibration key before building the response; it must hash the same configuration as
    ``calibration_key(response)`` does (the stored observations are looked up by it)."""
    catalog = builtin_snapshot()
    bodies = [
        BODY,
        {
            "model": "llama-3.1-70b",
            "gpu": "h100-sxm-80gb",
            "tensor_parallel_size": 4,
            "kv_cache_dtype": "fp8",
        },
        {"model": "qwen3-30b-a3b", "gpu": "l4", "engine": "vllm-0.10-v0"},  # refused: suggestions, V0
        {"model": "gemma-3-27b", "gpu": "l40s", "gpu_memory_utilization": 1, "max_model_len": "auto"},
        {"model": "llama-3.1-8b", "gpu": {"memory_bytes": 48 * 2**30, "name": "lab"}, "device": "rocm"},
        {"model": "mistral-7b-v0.1", "kv_cache_memory_bytes": 2**33, "engine": "vllm-0.20"},
    ]
    for body in bodies:
        plan = make_plan(catalog, PlanRequestBody.model_validate(body))
        assert plan.calibration is not None
        assert plan.calibration.key == calibration_key(plan), body


def test_keys_written_from_a_configuration_template_are_the_keys_of_the_responses() -> None:
    """A configuration planned at many lengths takes its key from one template of the canonical JSON
    (``calibration_key.key_template``); every key is still ``calibration_key(response)``, and the lengths, the
    batch sizes they imply and an integer utilisation (``1`` is written ``1.0``) still tell keys apart."""
    from service.planning import calibration_key as keys

    catalog = builtin_snapshot()
    configurations = [
        {"model": "llama-3.1-8b", "gpu": "h100-sxm-80gb"},
        {"model": "llama-3.1-8b", "gpu": "l4", "gpu_memory_utilization": 1},
        {"model": "llama-3.1-8b", "gpu": "l4", "gpu_memory_utilization": 1.0},
        {"model": "qwen3-30b-a3b", "gpu": "l4", "engine": "vllm-0.10-v0"},  # V0: the batch follows the length
        {"model": "llama-3.1-8b", "gpu": {"memory_bytes": 48 * 2**30, "name": "lab"}},
        {"model": "mistral-7b-v0.1", "kv_cache_memory_bytes": 2**33, "engine": "vllm-0.20"},
        {
            "model": "llama-3.1-8b",
            "gpu": "l4",
            "pipeline_parallel_size": 2,
            "pipeline_layer_partition": [8, 24],
        },
    ]
    keys._TEMPLATES.clear()
    seen: dict[str, object] = {}
    for configuration in configurations:
        for length in (1, 40, 2048, 2049, 40_000, 131_072):
            for max_num_seqs in (None, 3):
                body = {**configuration, "max_model_len": length}
                if max_num_seqs:
                    body["max_num_seqs"] = max_num_seqs
                plan = make_plan(catalog, PlanRequestBody.model_validate(body))
                assert plan.calibration is not None
                assert plan.calibration.key == calibration_key(plan), body
                settings = plan.settings
                configured = (
                    plan.model.name,
                    plan.gpu.name if plan.gpu else None,
                    settings.model_dump_json(),
                )
                assert seen.setdefault(plan.calibration.key, configured) == configured, body
    assert 0 < len(keys._TEMPLATES) < len(seen)  # templates were made, and shared across lengths
    assert None not in keys._TEMPLATES.values()


def test_settings_added_later_keep_the_keys_stored_before_them() -> None:
    """``enable_prefix_caching`` and ``disable_sliding_window`` are echoed in the settings but keyed as before:
    a configuration without ``--disable-sliding-window`` keeps the key it had when the field did not exist (the
    canonical JSON of the fields it had then), and prefix caching, which leaves the pool's size alone, never
    splits a key; ``--disable-sliding-window`` changes the pool's layout, so it is a different configuration."""
    import hashlib
    import json

    catalog = builtin_snapshot()
    body = {"model": "mistral-7b-v0.1", "gpu": "a100-sxm4-80gb", "max_model_len": 4096, "engine": "vllm-0.33"}
    plan = make_plan(catalog, PlanRequestBody.model_validate(body))
    settings = plan.settings.model_dump()
    assert settings["enable_prefix_caching"] is True and settings["disable_sliding_window"] is False
    before = {
        k: v for k, v in settings.items() if k not in ("enable_prefix_caching", "disable_sliding_window")
    }
    before = {k: v for k, v in before.items() if v is not None or not k.startswith("pipeline_")}
    canonical = json.dumps(
        {"model": "mistral-7b-v0.1", "gpu": "a100-sxm4-80gb", **before}, sort_keys=True, separators=(",", ":")
    )
    assert calibration_key(plan) == hashlib.sha256(canonical.encode()).hexdigest()[:32]
    assert plan.calibration is not None and plan.calibration.key == calibration_key(plan)

    no_prefix = make_plan(catalog, PlanRequestBody.model_validate(body | {"enable_prefix_caching": False}))
    assert no_prefix.settings.enable_prefix_caching is False
    assert calibration_key(no_prefix) == calibration_key(plan)

    full = make_plan(catalog, PlanRequestBody.model_validate(body | {"disable_sliding_window": True}))
    assert full.settings.disable_sliding_window is True
    assert calibration_key(full) != calibration_key(plan)
    assert full.calibration is not None and full.calibration.key == calibration_key(full)
