"""Calibration's stored side: the ``calibrations`` table and recording one replica's observed start-up.

Split from ``service.planning.calibration`` so that planning (which only reads the in-memory holder) never
imports SQLAlchemy.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, Integer, String, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Mapped, mapped_column

from service.db.base import Base, VersionedMixin
from service.planning.calibration import calibration_key, configuration_of
from service.planning.schemas import PlanResponse

KEEP_OBSERVATIONS = 10


class CalibrationEntry(VersionedMixin, Base):
    __tablename__ = "calibrations"

    key: Mapped[str] = mapped_column(String(64), unique=True, nullable=False)
    model: Mapped[str] = mapped_column(String(200), nullable=False)
    gpu: Mapped[str] = mapped_column(String(200), nullable=False)
    configuration: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False)
    # The last few observations, one per replica start-up: [{"source": "ns/name/pod", "num_gpu_blocks": n}, …]
    observations: Mapped[list[dict[str, Any]]] = mapped_column(JSON, nullable=False, default=list)
    uncalibrated_num_gpu_blocks: Mapped[int] = mapped_column(Integer, nullable=False)
    samples: Mapped[int] = mapped_column(Integer, nullable=False, default=0)


async def record_observation(
    session: AsyncSession, plan: PlanResponse, *, observed_num_gpu_blocks: int, source: str
) -> bool:
    """Store one replica's start-up for the plan's configuration; the same replica is recorded once.

    ``source`` names the replica (``namespace/deployment/pod``); its observation is replaced when the replica
    reports a different count (it restarted with other settings), and the last ``KEEP_OBSERVATIONS`` replicas
    are kept. Returns True when something changed. The caller commits.
    """
    if plan.exact or observed_num_gpu_blocks <= 0:
        return False
    key = calibration_key(plan)
    entry = (
        await session.execute(select(CalibrationEntry).where(CalibrationEntry.key == key))
    ).scalar_one_or_none()
    observation = {"source": source, "num_gpu_blocks": observed_num_gpu_blocks}
    if entry is None:
        session.add(
            CalibrationEntry(
                key=key,
                model=plan.model.name,
                gpu=plan.gpu.name if plan.gpu else "",
                configuration=configuration_of(plan),
                observations=[observation],
                uncalibrated_num_gpu_blocks=plan.kv_cache.num_gpu_blocks,
                samples=1,
            )
        )
        await session.flush()
        return True
    if observation in entry.observations:
        return False
    others = [o for o in entry.observations if o["source"] != source]
    entry.observations = [*others, observation][-KEEP_OBSERVATIONS:]
    entry.uncalibrated_num_gpu_blocks = plan.kv_cache.num_gpu_blocks
    entry.samples += 1
    await session.flush()
    return True
