"""Calibration: what real vLLM start-ups allocated, used to correct later predictions of the same configuration.

A configuration is everything that decides the allocation — the resolved model and GPU, TP × PP, the engine
release and every resolved vLLM setting (a plan's ``settings``) — hashed into a key. When a registered
deployment's live metrics report ``num_gpu_blocks`` for a configuration (and the block size vLLM reports is the
one kvcap predicted), the observation is stored; plans for the same key then report the median of the last
observations as ``num_gpu_blocks``, recompute concurrency and tokens from it, and say so in ``calibration`` —
with the uncalibrated figure beside it, so the model's own error stays measurable.
"""

from __future__ import annotations

import hashlib
import json
import statistics
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from service.core.engines import resolve_engine
from service.planning.schemas import CalibrationOut, MessageOut, PlanResponse, SettingsOut, Subject

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

    from service.core.planner import CapacityPlan


def configuration_of(plan: PlanResponse) -> dict[str, Any]:
    """The inputs that decide vLLM's allocation, as resolved by the plan."""
    return _configuration(plan.model, plan.gpu, plan.memory.total_bytes, plan.settings.model_dump())


def _configuration(
    model: Subject, gpu: Subject | None, total_bytes: int, settings: dict[str, Any]
) -> dict[str, Any]:
    return {
        "model": model.name if model.source == "catalog" else f"inline:{model.name}",
        "gpu": (gpu.name if gpu.source == "catalog" else f"inline:{total_bytes}") if gpu else None,
        **settings,
    }


_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"))
"""``json.dumps(..., sort_keys=True, separators=(",", ":"))`` without building an encoder on every call."""


def _key(configuration: dict[str, Any]) -> str:
    canonical = _CANONICAL.encode(configuration)
    return hashlib.sha256(canonical.encode()).hexdigest()[:32]


def calibration_key(plan: PlanResponse) -> str:
    return _key(configuration_of(plan))


_SETTINGS_FIELDS = tuple(SettingsOut.model_fields)


def calibration_key_of(result: CapacityPlan, *, model: Subject, gpu: Subject | None) -> str:
    """``calibration_key`` of the response the core's ``result`` becomes, read from the result itself.

    The response's settings are the core's ``ResolvedSettings`` field for field; only the utilisation is a
    float in the response whatever number the core holds, so it is made one here (the key hashes its JSON).
    """
    resolved = result.settings
    settings = {name: getattr(resolved, name) for name in _SETTINGS_FIELDS}
    if settings["gpu_memory_utilization"] is not None:
        settings["gpu_memory_utilization"] = float(settings["gpu_memory_utilization"])
    return _key(_configuration(model, gpu, result.memory.total_bytes, settings))


@dataclass(frozen=True, slots=True)
class Calibration:
    observed_num_gpu_blocks: int  # median of the kept observations
    samples: int
    updated_at: datetime | None


class CalibrationHolder:
    """In-memory calibrations by key (reloaded with the catalog; plans never wait on the database)."""

    def __init__(self, calibrations: dict[str, Calibration] | None = None) -> None:
        self.by_key: dict[str, Calibration] = calibrations or {}
        self.generation = 0  # bumped when a reload changes something; caches of plans key on it

    async def reload(self, sessionmaker: async_sessionmaker[AsyncSession]) -> None:
        from sqlalchemy import select

        from service.planning.calibration_store import CalibrationEntry

        async with sessionmaker() as session:
            rows = (await session.execute(select(CalibrationEntry))).scalars().all()
        by_key = {
            row.key: Calibration(
                observed_num_gpu_blocks=int(statistics.median(o["num_gpu_blocks"] for o in row.observations)),
                samples=row.samples,
                updated_at=row.updated_at,
            )
            for row in rows
            if row.observations
        }
        if by_key == self.by_key:  # nothing new: plans cached under this generation stay valid
            return
        self.by_key = by_key  # before the bump: a reader never sees the new generation with the old data
        self.generation += 1


def calibration_for(key: str, holder: CalibrationHolder | None, *, exact: bool) -> Calibration | None:
    """The observations that correct a plan of configuration ``key``; exact plans (KV budget given) never are."""
    found = holder.by_key.get(key) if holder else None
    return None if exact else found


def apply_calibration(
    plan: PlanResponse, holder: CalibrationHolder | None, *, key: str | None = None
) -> PlanResponse:
    """The plan with observed blocks for its configuration, or unchanged (with ``calibration.applied`` false).

    Exact plans (KV budget given) are never calibrated: their count is already what vLLM allocates.
    ``key`` is the plan's ``calibration_key`` when the caller has it already.
    """
    key = key or calibration_key(plan)
    found = holder.by_key.get(key) if holder else None
    if found is None or plan.exact:
        return plan.model_copy(update={"calibration": CalibrationOut(applied=False, key=key)})
    kv = plan.kv_cache
    blocks = found.observed_num_gpu_blocks
    concurrency = blocks / kv.blocks_per_request if kv.blocks_per_request else 0.0
    engine = resolve_engine(plan.settings.engine)
    if engine.v0:
        concurrency = (
            blocks * kv.block_size / plan.settings.max_model_len if plan.settings.max_model_len else 0.0
        )
        tokens = blocks * kv.block_size
    elif engine.tokens_from_concurrency:
        tokens = int(concurrency * plan.settings.max_model_len)
    else:
        tokens = blocks // max(1, kv.num_groups) * kv.block_size
    calibrated = kv.model_copy(
        update={
            "num_gpu_blocks": blocks,
            "usable_blocks": max(0, blocks - (0 if engine.profile == "ideal" else 1)),
            "kv_cache_size_tokens": tokens,
            "max_concurrency": concurrency,
            "max_concurrent_sequences": int(concurrency),
        }
    )
    note = MessageOut(
        level="info",
        code="calibrated",
        text=(
            f"calibrated from {found.samples} observed start-up(s) of this configuration: num_gpu_blocks "
            f"{blocks:,} (the model alone predicts {kv.num_gpu_blocks:,})"
        ),
    )
    return plan.model_copy(
        update={
            "kv_cache": calibrated,
            "messages": [*plan.messages, note],
            "calibration": CalibrationOut(
                applied=True,
                observed_num_gpu_blocks=blocks,
                uncalibrated_num_gpu_blocks=kv.num_gpu_blocks,
                samples=found.samples,
                key=key,
            ),
        }
    )


def __getattr__(name: str) -> Any:
    """The stored side (``CalibrationEntry``, ``record_observation``) lives in ``calibration_store``.

    It needs SQLAlchemy, which a plan does not: importing it only when asked keeps offline plans light, and the
    old names keep working from here.
    """
    if name in {"CalibrationEntry", "record_observation", "KEEP_OBSERVATIONS"}:
        from service.planning import calibration_store

        return getattr(calibration_store, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
