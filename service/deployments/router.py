"""``/v1/deployments``: the registry (CRUD with ETags), each deployment's plan, and its KEDA autoscaler."""

from __future__ import annotations

import json
import math
from typing import Annotated, Literal

import yaml
from fastapi import APIRouter, Header, Query, Request, Response, status
from sqlalchemy.exc import DBAPIError

from service.api.deps import SessionDep, SettingsDep, WriterDep
from service.api.etag import none_match
from service.api.pagination import Page, PageDep
from service.catalog.snapshot import CatalogHolder
from service.deployments.autoscaling import AutoscalingInputs, scaled_object
from service.deployments.schemas import DeploymentCreate, DeploymentPlan, DeploymentRead, DeploymentUpdate
from service.deployments.service import (
    DeploymentService,
    DeploymentsHolder,
    deployment_plan,
    parse_label_selector,
    to_read,
)
from service.errors import NotFound, Unprocessable
from service.live.guard import TargetGuard
from service.live.schemas import PrometheusSource, check_promql_match
from service.settings import Settings

router = APIRouter(prefix="/v1/deployments", tags=["deployments"])

ERRORS = {
    401: {"description": "a bearer token is required"},
    403: {"description": "the token may not write"},
    404: {"description": "no such deployment"},
    409: {"description": "a deployment with that namespace and name exists"},
    412: {"description": "If-Match does not match the current ETag"},
    422: {"description": "invalid fields (the field is named)"},
    503: {"description": "the database is unavailable"},
}
IfMatch = Annotated[str | None, Header(description="ETag from a previous GET; a stale one gets 412")]


def _service(request: Request, session: SessionDep, settings: Settings) -> DeploymentService:
    catalog: CatalogHolder = request.app.state.catalog
    return DeploymentService(
        session,
        catalog=catalog.snapshot,
        guard=TargetGuard(settings.scrape_allowed_hosts),
        holder=getattr(request.app.state, "deployments", None),
        sessionmaker=getattr(request.app.state, "sessionmaker", None),
    )


@router.get("", response_model=Page[DeploymentRead], summary="List registered deployments")
async def list_deployments(
    request: Request,
    session: SessionDep,
    settings: SettingsDep,
    page: PageDep,
    namespace: Annotated[str | None, Query(max_length=63)] = None,
    label: Annotated[
        str | None, Query(max_length=1024, description="label selector, e.g. team=search,tier=prod")
    ] = None,
) -> Page[DeploymentRead]:
    return await _service(request, session, settings).list(
        page=page, namespace=namespace, labels=parse_label_selector(label)
    )


@router.post(
    "",
    response_model=DeploymentRead,
    status_code=status.HTTP_201_CREATED,
    dependencies=[WriterDep],
    responses={k: ERRORS[k] for k in (401, 403, 409, 422, 503)},
)
async def create_deployment(
    request: Request, session: SessionDep, settings: SettingsDep, body: DeploymentCreate, response: Response
) -> DeploymentRead:
    entry = await _service(request, session, settings).create(body)
    response.headers["ETag"] = entry.etag
    response.headers["Location"] = f"/v1/deployments/{entry.namespace}/{entry.name}"
    return to_read(entry)


@router.get(
    "/{namespace}/{name}",
    response_model=DeploymentRead,
    responses={404: ERRORS[404], 304: {"description": "not modified"}},
)
async def get_deployment(
    request: Request,
    session: SessionDep,
    settings: SettingsDep,
    namespace: str,
    name: str,
    response: Response,
    if_none_match: Annotated[str | None, Header()] = None,
) -> DeploymentRead | Response:
    entry = await _service(request, session, settings).get(namespace, name)
    if none_match(if_none_match, entry.etag):
        return Response(status_code=304, headers={"ETag": entry.etag})
    response.headers["ETag"] = entry.etag
    return to_read(entry)


@router.patch(
    "/{namespace}/{name}",
    response_model=DeploymentRead,
    dependencies=[WriterDep],
    responses={k: ERRORS[k] for k in (401, 403, 404, 412, 422, 503)},
)
async def update_deployment(
    request: Request,
    session: SessionDep,
    settings: SettingsDep,
    namespace: str,
    name: str,
    body: DeploymentUpdate,
    response: Response,
    if_match: IfMatch = None,
) -> DeploymentRead:
    entry = await _service(request, session, settings).update(namespace, name, body, if_match=if_match)
    response.headers["ETag"] = entry.etag
    return to_read(entry)


@router.delete(
    "/{namespace}/{name}",
    status_code=status.HTTP_204_NO_CONTENT,
    dependencies=[WriterDep],
    responses={k: ERRORS[k] for k in (401, 403, 404, 412, 503)},
)
async def delete_deployment(
    request: Request,
    session: SessionDep,
    settings: SettingsDep,
    namespace: str,
    name: str,
    if_match: IfMatch = None,
) -> Response:
    await _service(request, session, settings).delete(namespace, name, if_match=if_match)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


async def _read(
    request: Request, session: SessionDep, settings: Settings, namespace: str, name: str
) -> DeploymentRead:
    """The registered deployment; from the in-memory registry when the database cannot be reached."""
    try:
        return to_read(await _service(request, session, settings).get(namespace, name))
    except (DBAPIError, OSError):
        holder: DeploymentsHolder | None = getattr(request.app.state, "deployments", None)
        cached = holder.by_key().get((namespace, name)) if holder else None
        if cached is None:
            raise
        return cached


@router.get(
    "/{namespace}/{name}/plan",
    response_model=DeploymentPlan,
    responses={404: ERRORS[404]},
    summary="Capacity plan and recommendation for a registered deployment",
)
async def get_deployment_plan(
    request: Request, session: SessionDep, settings: SettingsDep, namespace: str, name: str
) -> DeploymentPlan:
    deployment = await _read(request, session, settings, namespace, name)
    catalog: CatalogHolder = request.app.state.catalog
    return deployment_plan(
        catalog.snapshot,
        deployment,
        getattr(request.app.state, "calibrations", None),
        getattr(request.app.state, "step_time_scales", None),
    )


_TARGETS = {
    "Deployment": "apps/v1",
    "StatefulSet": "apps/v1",
    "LeaderWorkerSet": "leaderworkerset.x-k8s.io/v1",
}


@router.get(
    "/{namespace}/{name}/autoscaling",
    summary="KEDA ScaledObject with thresholds derived from the predicted capacity",
    responses={
        200: {"content": {"application/yaml": {}, "application/json": {}}},
        404: ERRORS[404],
        422: ERRORS[422],
    },
)
async def get_autoscaling(
    request: Request,
    session: SessionDep,
    settings: SettingsDep,
    namespace: str,
    name: str,
    format: Annotated[Literal["yaml", "json"], Query(description="response format")] = "yaml",
    trigger: Annotated[
        Literal["requests", "kv_usage"], Query(description="scale on queued+running requests or KV usage")
    ] = "requests",
    target_kind: Annotated[Literal["Deployment", "StatefulSet", "LeaderWorkerSet"], Query()] = "Deployment",
    prometheus_url: Annotated[
        str, Query(max_length=512, description="KEDA's Prometheus serverAddress")
    ] = "http://prometheus-operated.monitoring.svc:9090",
    match: Annotated[
        str | None, Query(max_length=1024, description="PromQL selector of the deployment's vLLM series")
    ] = None,
    max_factor: Annotated[float, Query(ge=1, le=100)] = 2.0,
) -> Response:
    deployment = await _read(request, session, settings, namespace, name)
    catalog: CatalogHolder = request.app.state.catalog
    planned = deployment_plan(catalog.snapshot, deployment, getattr(request.app.state, "calibrations", None))
    if not planned.plan.fits:
        raise NotFound(
            f"deployment {namespace}/{name} would not start ({planned.plan.messages[0].text if planned.plan.messages else 'see its plan'}); nothing to autoscale"
        )
    headroom = deployment.workload.headroom_ratio if deployment.workload else 0.2
    chosen = planned.recommendation.recommended if planned.recommendation else None
    if chosen is not None:
        capacity = float(chosen.max_num_seqs)
        recommended = chosen.replicas
        workload = deployment.workload
        if workload and workload.concurrent_users:
            minimum = math.ceil(workload.concurrent_users / max(1, chosen.max_num_seqs))
        elif workload and workload.requests_per_second and chosen.requests_per_second_per_replica:
            minimum = math.ceil(workload.requests_per_second / chosen.requests_per_second_per_replica)
        else:
            minimum = deployment.replicas or 1
    else:
        capacity = float(min(planned.plan.kv_cache.max_concurrency, planned.plan.settings.max_num_seqs))
        recommended = max(1, deployment.replicas)
        minimum = max(1, deployment.replicas)
    if match is not None:
        try:
            match = check_promql_match(match)
        except ValueError as exc:
            raise Unprocessable.for_field("match", str(exc), location="query") from None
    else:
        match = (
            deployment.live.prometheus.match
            if isinstance(deployment.live, PrometheusSource)
            else f'{{namespace="{namespace}",pod=~"{name}-.*"}}'
        )
    manifest = scaled_object(
        AutoscalingInputs(
            namespace=namespace,
            name=name,
            target_kind=target_kind,
            target_api_version=_TARGETS[target_kind],
            per_replica_capacity=capacity,
            headroom_ratio=headroom,
            min_replicas=minimum,
            recommended_replicas=recommended,
            max_factor=max_factor,
            selector=match,
            server_address=prometheus_url,
            trigger=trigger,
        )
    )
    if format == "json":
        return Response(json.dumps(manifest, indent=2), media_type="application/json")
    return Response(yaml.safe_dump(manifest, sort_keys=False), media_type="application/yaml")
