"""Step-time calibration: how much slower (or faster) a configuration's engine steps run than the simulator models.

Trace-only: nothing is added to vLLM. A registered deployment's histograms give its mean time per output token
over the last refresh, its request rate and its mean prompt and output lengths (``service.live.histograms``).
The serving simulator, run at that load with the model's own coefficients, predicts a mean TPOT; decode steps
dominate TPOT, and a step's modelled time scales linearly with ``StepCoefficients.time_scale``, so

    time_scale = observed mean TPOT / simulated mean TPOT (at time_scale 1)

is the multiplier that makes the simulator match this fleet. Like the block calibration
(``service.planning.calibration``), observations are stored per configuration key (model, GPU and every
resolved vLLM setting), one per deployment, the last ``KEEP_OBSERVATIONS`` kept, and the median is used: by
``POST /v1/simulations`` for that configuration, and for the predicted latency the exporter shows next to the
observed one. A ratio outside ``[MIN_TIME_SCALE, MAX_TIME_SCALE]`` says the registration does not describe what
runs (another GPU, another model) and is not stored.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

from sqlalchemy import JSON, Integer, String, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlalchemy.orm import Mapped, mapped_column

from service.db.base import Base, VersionedMixin
from service.planning.calibration import calibration_key, configuration_of
from service.planning.schemas import PlanResponse

KEEP_OBSERVATIONS = 10
MIN_TIME_SCALE = 0.25
MAX_TIME_SCALE = 4.0
RECORD_CHANGE_RATIO = 0.02
"""A deployment's stored scale is rewritten only when its new fit differs by more than this (fewer writes)."""


class StepTimeCalibrationEntry(VersionedMixin, Base):
    __tablename__ = "step_time_calibrations"

    key: Mapped[str] = mapped_column(String(64), unique=True, nullable=False)
    model: Mapped[str] = mapped_column(String(200), nullable=False)
    gpu: Mapped[str] = mapped_column(String(200), nullable=False)
    configuration: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False)
    # One per deployment: [{"source": "ns/name", "time_scale": 1.12, "observed_tpot_seconds": …,
    #   "predicted_tpot_seconds": …, "request_rate": …, "prompt_tokens": …, "output_tokens": …}, …]
    observations: Mapped[list[dict[str, Any]]] = mapped_column(JSON, nullable=False, default=list)
    samples: Mapped[int] = mapped_column(Integer, nullable=False, default=0)


def fit_time_scale(*, observed_tpot_seconds: float, predicted_tpot_seconds: float) -> float | None:
    """``observed / predicted`` mean TPOT, or None when it is not a plausible correction (see module docstring)."""
    if not (observed_tpot_seconds > 0 and predicted_tpot_seconds > 0):
        return None
    scale = observed_tpot_seconds / predicted_tpot_seconds
    if not math.isfinite(scale) or not MIN_TIME_SCALE <= scale <= MAX_TIME_SCALE:
        return None
    return scale


@dataclass(frozen=True, slots=True)
class StepTimeScale:
    time_scale: float  # median of the kept observations
    samples: int


class StepTimeScales:
    """In-memory step-time scales by configuration key (reloaded with the catalog; simulations never wait)."""

    def __init__(self, scales: dict[str, StepTimeScale] | None = None) -> None:
        self.by_key: dict[str, StepTimeScale] = scales or {}
        self.generation = 0

    def scale_for(self, plan: PlanResponse) -> float:
        found = self.by_key.get(calibration_key(plan))
        return found.time_scale if found else 1.0

    async def reload(self, sessionmaker: async_sessionmaker[AsyncSession]) -> None:
        async with sessionmaker() as session:
            rows = (await session.execute(select(StepTimeCalibrationEntry))).scalars().all()
        by_key = {
            row.key: StepTimeScale(
                time_scale=statistics.median(float(o["time_scale"]) for o in row.observations),
                samples=row.samples,
            )
            for row in rows
            if row.observations
        }
        if (
            by_key == self.by_key
        ):  # nothing new: plans and simulations cached under this generation stay valid
            return
        self.by_key = by_key  # before the bump: a reader never sees the new generation with the old data
        self.generation += 1


async def record_step_time(
    session: AsyncSession, plan: PlanResponse, *, source: str, observation: dict[str, Any]
) -> bool:
    """Store one deployment's fitted ``time_scale`` for the plan's configuration; True when something changed.

    ``observation`` holds ``time_scale`` and what it was fitted from. A deployment's previous observation is
    replaced only when the new scale moved by more than ``RECORD_CHANGE_RATIO``. The caller commits.
    """
    scale = float(observation["time_scale"])
    key = calibration_key(plan)
    entry = (
        await session.execute(select(StepTimeCalibrationEntry).where(StepTimeCalibrationEntry.key == key))
    ).scalar_one_or_none()
    record = {"source": source, **observation}
    if entry is None:
        session.add(
            StepTimeCalibrationEntry(
                key=key,
                model=plan.model.name,
                gpu=plan.gpu.name if plan.gpu else "",
                configuration=configuration_of(plan),
                observations=[record],
                samples=1,
            )
        )
        await session.flush()
        return True
    previous = next((o for o in entry.observations if o.get("source") == source), None)
    if previous is not None and abs(float(previous["time_scale"]) / scale - 1) <= RECORD_CHANGE_RATIO:
        return False
    others = [o for o in entry.observations if o.get("source") != source]
    entry.observations = [*others, record][-KEEP_OBSERVATIONS:]
    entry.samples += 1
    await session.flush()
    return True
