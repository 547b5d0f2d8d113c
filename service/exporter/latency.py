"""Predicted against observed latency for registered deployments, and the step-time fit it feeds.

Every refresh, for each owned deployment whose vLLM histograms show finished requests since the previous
refresh (``DeploymentObservation.latency``):

1. the observed load of one replica: finished requests/s ÷ replicas read, mean prompt and output tokens;
2. the serving simulator at that load (``LATENCY_NUM_PROMPTS`` Poisson requests of the mean lengths) with the
   configuration's stored step-time scale → ``kvcap_predicted_ttft_seconds``/``…_tpot_seconds``, so the drift
   ratio measures the model as kvcap currently uses it;
3. the same simulation at scale 1 → ``time_scale = observed mean TPOT / simulated mean TPOT``
   (``service.planning.step_time_calibration``), stored per configuration.

With speculative decoding both simulations use the mean acceptance length vLLM's counters show for that
window (``DeploymentObservation.spec_mean_acceptance_length``), else the registered workload's.

Loads are rounded (rate to two significant digits, lengths to 8 tokens) and predictions cached on them, and
at most ``LATENCY_BUDGET`` deployments are simulated per refresh (the others keep their last prediction), so a
large fleet costs a bounded amount of CPU per refresh; the caller runs this in a worker thread.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from service.catalog.snapshot import CatalogSnapshot
from service.core.errors import InvalidSpec
from service.core.serving import BenchmarkSpec, simulate
from service.deployments.schemas import DeploymentRead
from service.deployments.service import plan_body
from service.errors import ServiceError
from service.exporter.collector import PredictedLatency
from service.live.manager import DeploymentKey, DeploymentObservation
from service.planning.calibration import calibration_key
from service.planning.schemas import PlanResponse
from service.planning.simulations import Replica, resolve_replica, scaled_coefficients
from service.planning.step_time_calibration import StepTimeScales, fit_time_scale, record_step_time

logger = logging.getLogger("kvcap.live")

LATENCY_NUM_PROMPTS = 100
LATENCY_BUDGET = 64


@dataclass(frozen=True, slots=True, kw_only=True)
class ObservedLoad:
    """What one replica served since the previous refresh (rounded; see module docstring)."""

    request_rate: float
    prompt_tokens: int
    output_tokens: int
    tpot_seconds: float | None

    @classmethod
    def of(cls, observation: DeploymentObservation) -> ObservedLoad | None:
        latency = observation.latency
        if latency is None or observation.replicas < 1:
            return None
        rate = latency.request_rate
        prompt = latency.prompt_tokens.mean if latency.prompt_tokens else None
        output = latency.generation_tokens.mean if latency.generation_tokens else None
        if not rate or not prompt or not output:
            return None
        per_replica = rate / observation.replicas
        digits = 1 - math.floor(math.log10(per_replica))
        return cls(
            request_rate=round(per_replica, digits),
            prompt_tokens=max(1, 8 * round(prompt / 8)),
            output_tokens=max(1, 8 * round(output / 8)),
            tpot_seconds=latency.tpot.mean if latency.tpot else None,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class LatencyFit:
    """One deployment's step-time observation, to store (``record_step_times``)."""

    source: str
    plan: PlanResponse
    observation: Mapping[str, Any]


def _simulated_means(
    replica: Replica, load: ObservedLoad, scale: float, acceptance: float | None = None
) -> tuple[float, float]:
    """Mean TTFT and TPOT at the observed load; ``acceptance``: the registered workload's mean acceptance
    length under speculative decoding (None: the method's default; ignored without speculative decoding)."""
    spec = BenchmarkSpec(
        dataset_name="random",
        num_prompts=LATENCY_NUM_PROMPTS,
        request_rate=load.request_rate,
        random_input_len=load.prompt_tokens,
        random_output_len=load.output_tokens,
        ready_check_timeout_sec=0,  # live traffic: no benchmark client primes the prefix cache
        spec_mean_acceptance_length=acceptance,
    )
    result = simulate(
        replica.request, spec, plan=replica.plan, coefficients=scaled_coefficients(scale)
    ).result
    return result.mean_ttft_ms / 1e3, result.mean_tpot_ms / 1e3


def _acceptance(
    replica: Replica, observation: DeploymentObservation | None, deployment: DeploymentRead
) -> float | None:
    """The mean acceptance length the prediction simulates with, for a plan with speculative decoding: the
    one vLLM's counters show since the previous refresh (to two decimals), else the registered workload's,
    else None (the method's default). Acceptance is a property of the traffic, not of the engine: simulating
    with the observed one keeps the TPOT drift and the step-time fit from absorbing a different acceptance."""
    features = replica.request.features
    if features is None or features.speculative is None:
        return None
    observed = observation.spec_mean_acceptance_length if observation is not None else None
    if observed is not None:
        return round(observed, 2)
    workload = deployment.workload
    return workload.spec_mean_acceptance_length if workload is not None else None


class LatencyPredictions:
    """Predicted latency per deployment, kept between refreshes, with a cache keyed by configuration and load."""

    def __init__(self) -> None:
        self.latency: Mapping[DeploymentKey, PredictedLatency] = {}
        self._cache: dict[tuple[str, ObservedLoad, float, float | None], tuple[float, float]] = {}

    def _means(
        self, replica: Replica, load: ObservedLoad, scale: float, acceptance: float | None = None
    ) -> tuple[float, float]:
        key = (calibration_key(replica.response), load, scale, acceptance)
        found = self._cache.get(key)
        if found is None:
            if len(self._cache) > 4096:
                self._cache.clear()
            found = self._cache[key] = _simulated_means(replica, load, scale, acceptance)
        return found

    def update(
        self,
        snapshot: CatalogSnapshot,
        deployments: Sequence[DeploymentRead],
        observations: Mapping[DeploymentKey, DeploymentObservation],
        scales: StepTimeScales,
    ) -> list[LatencyFit]:
        """New predictions for the observed deployments (pure CPU: run in a worker thread); the fits to store."""
        fresh: dict[DeploymentKey, PredictedLatency] = {}
        fits: list[LatencyFit] = []
        simulated = 0
        for deployment in deployments:
            key = (deployment.namespace, deployment.name)
            observation = observations.get(key)
            load = ObservedLoad.of(observation) if observation is not None else None
            if load is None or deployment.gpu is None:
                continue
            if simulated >= LATENCY_BUDGET:
                if key in self.latency:
                    fresh[key] = self.latency[key]
                continue
            try:
                replica = resolve_replica(snapshot, plan_body(deployment))
                scale = scales.scale_for(replica.response)
                acceptance = _acceptance(replica, observation, deployment)
                ttft, tpot = self._means(replica, load, scale, acceptance)
                _, model_tpot = self._means(replica, load, 1.0, acceptance) if scale != 1.0 else (ttft, tpot)
            except (ServiceError, InvalidSpec, ValidationError, ValueError) as exc:
                logger.info("no latency prediction for %s/%s: %s", *key, exc)
                continue
            simulated += 1
            fresh[key] = PredictedLatency(
                ttft_seconds=ttft, tpot_seconds=tpot, step_time_scale=scale if scale != 1.0 else None
            )
            fitted = (
                fit_time_scale(observed_tpot_seconds=load.tpot_seconds, predicted_tpot_seconds=model_tpot)
                if load.tpot_seconds
                else None
            )
            if fitted is not None:
                fits.append(
                    LatencyFit(
                        source=f"{key[0]}/{key[1]}",
                        plan=replica.response,
                        observation={
                            "time_scale": fitted,
                            "observed_tpot_seconds": load.tpot_seconds,
                            "predicted_tpot_seconds": model_tpot,
                            "request_rate": load.request_rate,
                            "prompt_tokens": load.prompt_tokens,
                            "output_tokens": load.output_tokens,
                        },
                    )
                )
        self.latency = fresh
        return fits


async def record_step_times(
    sessionmaker: async_sessionmaker[AsyncSession], fits: Sequence[LatencyFit]
) -> int:
    """Store the fits (one per deployment and configuration); how many changed something."""
    if not fits:
        return 0
    changed = 0
    async with sessionmaker() as session:
        for fit in fits:
            changed += await record_step_time(
                session, fit.plan, source=fit.source, observation=dict(fit.observation)
            )
        await session.commit()
    return changed
