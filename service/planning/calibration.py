"""Calibration: what real vLLM start-ups allocated, used to correct later predictions of the same configuration.

A configuration is everything that decides the allocation — the resolved model and GPU, TP × PP, the engine
release and every resolved vLLM setting (a plan's ``settings``) — hashed into a key. When a registered
deployment's live metrics report ``num_gpu_blocks`` for a configuration (and the block size vLLM reports is the
one kvcap predicted), the observation is stored; plans for the same key then report the median of the last
observations as ``num_gpu_blocks``, recompute concurrency and tokens from it, and say so in ``calibration`` —
with the uncalibrated figure beside it, so the model's own error stays measurable.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from service.core.engines import resolve_engine
from service.planning.calibration_key import configuration as _configuration
from service.planning.calibration_key import hash_key as _key
from service.planning.schemas import CalibrationOut, MessageOut, PlanResponse

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker


def configuration_of(plan: PlanResponse) -> dict[str, Any]:
    """The inputs that decide vLLM's allocation, as resolved by the plan."""
    return _configuration(plan.model, plan.gpu, plan.memory.total_bytes, plan.settings.model_dump())


def calibration_key(plan: PlanResponse) -> str:
    return _key(configuration_of(plan))


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
