"""Stage 1 keeps what it resolves without the length (``settings.length_free``) and changes nothing by it.

Every request below is resolved twice: once after emptying the cache (every check made, in vLLM's order) and
once after the same configuration was resolved at other lengths (only the length's checks made again). The
settings are equal, and a refused request names the same field with the same words — including requests that
break a length rule and another rule at once, where the first rule in vLLM's order must be the one reported.
"""

from __future__ import annotations

import itertools
from typing import Any

from service.catalog.builtin import builtin_snapshot
from service.core.errors import InvalidSpec
from service.core.planner import PlanRequest
from service.core.planner import settings as stage

SNAPSHOT = builtin_snapshot()
MODELS = [m.spec for m in list(SNAPSHOT.models.values())[::6]]
GPUS = [*(g.spec for g in list(SNAPSHOT.gpus.values())[::9]), None]
LENGTHS = [None, 0, 1, 2049, 40_000, 10**9]  # unset, too short, the smallest, V0's chunking bound, too long
OTHERS: list[dict[str, Any]] = [
    {},
    {"engine": "vllm-0.6.3"},  # V0: the batch defaults follow the length
    {"tensor_parallel_size": 0},  # refused before the length's minimum
    {"block_size": 0},  # refused after it
    {"max_num_seqs": 10**9},  # out of range after the length's range
    {"kv_cache_dtype": "int8", "engine": "vllm-0.19"},  # refused after the length's checks
    {"quantization": "no-such-scheme"},
    {"gpu_memory_utilization": 1},  # an int: kept apart from 1.0
    {"gpu_memory_utilization": 1.0},
    {"device": "cpu", "kv_cache_memory_bytes": 10**10, "engine": "vllm-0.32", "block_size": 48},
    {"max_num_batched_tokens": 100, "enable_chunked_prefill": False},
    {"detail": False, "suggest": False},
]


def resolved(request: PlanRequest) -> stage.Settings | tuple[str | None, str]:
    try:
        return stage.resolve_settings(request)
    except InvalidSpec as exc:
        return (exc.field, str(exc))


def test_settings_resolved_from_the_kept_part_are_the_settings_resolved_afresh() -> None:
    requests = [
        PlanRequest(model=model, gpu=gpu, max_model_len=length, **others)
        for model, gpu, others, length in itertools.product(MODELS, GPUS, OTHERS, LENGTHS)
    ]
    fresh = []
    for request in requests:
        stage._LENGTH_FREE.clear()
        fresh.append(resolved(request))
    stage._LENGTH_FREE.clear()
    for request in requests:  # every configuration at every length, in turn: most are resolved from the cache
        resolved(request)
    kept = len(stage._LENGTH_FREE)
    warm = [resolved(request) for request in requests]
    assert len(stage._LENGTH_FREE) == kept  # nothing new: all read from what was kept
    assert 0 < kept < len(requests) // 2
    refusals = 0
    for request, before, after in zip(requests, fresh, warm, strict=True):
        assert after == before, (request.model.architecture, request.gpu, request.max_model_len)
        refusals += not isinstance(before, stage.Settings)
    assert 0 < refusals < len(requests)
    # a length refused together with an earlier rule reports the earlier rule; with a later one, the length
    first: dict[tuple[int | None, int, int | None], str] = {
        (0, 0, None): "tensor_parallel_size",
        (0, 1, 0): "max_model_len",
        (10**9, 1, 0): "block_size",  # the minimums come before the ranges
        (10**9, 1, None): "max_model_len",
    }
    for request, after in zip(requests, warm, strict=True):
        wanted = first.get((request.max_model_len, request.tensor_parallel_size, request.block_size))
        if wanted is not None and request.gpu is not None:
            assert not isinstance(after, stage.Settings) and after[0] == wanted, (
                request.max_model_len,
                after,
            )


def test_a_request_with_an_unhashable_field_is_resolved_without_being_kept() -> None:
    tupled = PlanRequest(
        model=MODELS[0], gpu=GPUS[0], pipeline_parallel_size=2, pipeline_layer_partition=(16, 16)
    )
    listed = PlanRequest(model=MODELS[0], gpu=GPUS[0], pipeline_parallel_size=2)
    object.__setattr__(listed, "pipeline_layer_partition", [16, 16])  # a caller's list: not a key
    stage._LENGTH_FREE.clear()
    settings = stage.resolve_settings(listed)
    assert not stage._LENGTH_FREE
    assert settings._replace(layer_partition=(16, 16)) == stage.resolve_settings(tupled)
    assert len(stage._LENGTH_FREE) == 1
