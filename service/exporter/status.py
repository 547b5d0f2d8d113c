"""``GET /v1/live/deployments``: predicted against observed capacity for the deployments this replica watches.

The same numbers ``/metrics`` exports (``kvcap_predicted_kv_cache_blocks``, ``kvcap_observed_kv_cache_blocks``,
``kvcap_prediction_error_ratio``, ``kvcap_capacity_headroom_ratio`` …), as JSON for the plan explorer and for
scripts. It reads only the in-memory snapshots of the live loop; with several kvcap replicas each one lists the
deployments it owns (``owned_by_this_replica``), as each exports only those series.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field

from service.exporter.collector import PredictedCapacity
from service.live.manager import DeploymentObservation

router = APIRouter(prefix="/v1/live", tags=["live"])


class LiveDeployment(BaseModel):
    namespace: str
    name: str
    predicted_kv_cache_blocks: int | None = None
    predicted_kv_cache_blocks_uncalibrated: int | None = None
    predicted_max_concurrency: float | None = None
    max_num_seqs: int | None = None
    replicas: int | None = Field(default=None, description="replicas registered")
    recommended_replicas: int | None = None
    observed_kv_cache_blocks: int | None = None
    observed_kv_cache_usage_ratio: float | None = None
    observed_requests_running: float | None = None
    observed_requests_waiting: float | None = None
    observed_replicas: int | None = None
    targets_up: dict[str, bool] = Field(default_factory=dict)
    observed_at_seconds: float | None = None
    prediction_error_ratio: float | None = Field(
        default=None, description="predicted ÷ observed blocks − 1 (kvcap_prediction_error_ratio)"
    )
    capacity_headroom_ratio: float | None = Field(
        default=None, description="1 − (running + waiting) ÷ capacity of the observed replicas"
    )


class LiveDeployments(BaseModel):
    items: list[LiveDeployment]
    last_refresh_timestamp_seconds: float | None


def prediction_error_ratio(predicted: PredictedCapacity, observed: DeploymentObservation) -> float | None:
    if observed.num_gpu_blocks is None or observed.num_gpu_blocks <= 0:
        return None
    return predicted.num_gpu_blocks / observed.num_gpu_blocks - 1


def capacity_headroom_ratio(predicted: PredictedCapacity, observed: DeploymentObservation) -> float | None:
    capacity = predicted.concurrent_capacity * observed.replicas
    if observed.replicas < 1 or capacity <= 0:
        return None
    return 1 - (observed.requests_running + observed.requests_waiting) / capacity


def live_deployment(
    namespace: str,
    name: str,
    predicted: PredictedCapacity | None,
    observed: DeploymentObservation | None,
) -> LiveDeployment:
    out = LiveDeployment(namespace=namespace, name=name)
    if predicted is not None:
        out.predicted_kv_cache_blocks = predicted.num_gpu_blocks
        out.predicted_kv_cache_blocks_uncalibrated = predicted.num_gpu_blocks_uncalibrated
        out.predicted_max_concurrency = predicted.max_concurrency
        out.max_num_seqs = predicted.max_num_seqs
        out.replicas = predicted.replicas
        out.recommended_replicas = predicted.recommended_replicas
    if observed is not None:
        out.observed_kv_cache_blocks = observed.num_gpu_blocks
        out.observed_kv_cache_usage_ratio = observed.kv_cache_usage_ratio
        out.observed_requests_running = observed.requests_running
        out.observed_requests_waiting = observed.requests_waiting
        out.observed_replicas = observed.replicas
        out.targets_up = observed.targets_up
        out.observed_at_seconds = observed.observed_at_s
        if predicted is not None:
            out.prediction_error_ratio = prediction_error_ratio(predicted, observed)
            out.capacity_headroom_ratio = capacity_headroom_ratio(predicted, observed)
    return out


@router.get("/deployments", response_model=LiveDeployments, summary="Predicted vs observed, per deployment")
async def list_live_deployments(request: Request) -> LiveDeployments:
    predictions = getattr(request.app.state, "predictions", None)
    live = getattr(request.app.state, "live", None)
    capacities = predictions.capacities if predictions is not None else {}
    observations = live.observations if live is not None else {}
    keys = sorted(set(capacities) | set(observations))
    return LiveDeployments(
        items=[
            live_deployment(ns, name, capacities.get((ns, name)), observations.get((ns, name)))
            for ns, name in keys
        ],
        last_refresh_timestamp_seconds=getattr(live, "last_refresh_timestamp_s", None),
    )
