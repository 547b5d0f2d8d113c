"""``POST /v1/plans``: the capacity plan for one model, GPU and set of vLLM settings."""

from __future__ import annotations

from fastapi import APIRouter, Request

from service.catalog.snapshot import CatalogHolder
from service.planning.recommendations import make_recommendation, make_sweep
from service.planning.schemas import (
    PlanRequestBody,
    PlanResponse,
    RecommendationOut,
    RecommendRequestBody,
    SweepOut,
    SweepRequestBody,
)
from service.planning.service import make_plan

router = APIRouter(prefix="/v1", tags=["plans"])


def catalog_snapshot(request: Request) -> CatalogHolder:
    holder: CatalogHolder = request.app.state.catalog
    return holder


@router.post(
    "/plans",
    response_model=PlanResponse,
    summary="Predict vLLM's KV-cache allocation and whether it will start",
    responses={422: {"description": "invalid settings, unknown model or GPU (the field is named)"}},
)
async def create_plan(request: Request, body: PlanRequestBody) -> PlanResponse:
    """Pure computation over the in-memory catalog: never touches the database."""
    return make_plan(
        catalog_snapshot(request).snapshot, body, getattr(request.app.state, "calibrations", None)
    )


@router.post(
    "/plans/recommend",
    response_model=RecommendationOut,
    summary="Tensor-parallel size, max_num_seqs, replicas and cost for a workload on one GPU type",
    responses={422: {"description": "invalid workload or settings (the field is named)"}},
)
async def create_recommendation(request: Request, body: RecommendRequestBody) -> RecommendationOut:
    return make_recommendation(catalog_snapshot(request).snapshot, body)


@router.post(
    "/plans/sweep",
    response_model=SweepOut,
    summary="Rank every catalog GPU × TP × KV dtype × quantization option for a model and workload by cost",
    responses={422: {"description": "invalid workload or settings (the field is named)"}},
)
async def create_sweep(request: Request, body: SweepRequestBody) -> SweepOut:
    return make_sweep(catalog_snapshot(request).snapshot, body)
