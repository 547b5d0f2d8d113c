"""``/v1/deployments``: the registry (CRUD with ETags), each deployment's plan, and its KEDA autoscaler."""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from functools import partial
from typing import Annotated, Literal, TypeVar

import anyio
import anyio.to_thread
import yaml
from fastapi import APIRouter, Header, Query, Request, Response, status
from fastapi.responses import StreamingResponse
from pydantic import ValidationError
from sqlalchemy.exc import DBAPIError

from service.api.deps import SessionDep, SettingsDep, WriterDep
from service.api.etag import none_match
from service.api.pagination import Page, PageDep
from service.catalog.snapshot import CatalogHolder
from service.deployments.autoscaling import AutoscalingInputs, scaled_object
from service.deployments.orm import DeploymentEntry
from service.deployments.replan import ReplanBatch, ReplanJob, Replanner, matching, prepare, summarize
from service.deployments.repository import DeploymentRepository
from service.deployments.schemas import (
    DeploymentCreate,
    DeploymentPlan,
    DeploymentRead,
    DeploymentUpdate,
    ReplanDelta,
    ReplanRequest,
    ReplanResponse,
)
from service.deployments.service import (
    DeploymentService,
    DeploymentsHolder,
    deployment_plan,
    parse_label_selector,
    to_read,
)
from service.errors import NotFound, ServiceUnavailable, Unprocessable
from service.live.guard import TargetGuard
from service.live.schemas import PrometheusSource, check_promql_match
from service.settings import Settings

router = APIRouter(prefix="/v1/deployments", tags=["deployments"])
logger = logging.getLogger("kvcap.deployments")

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


NDJSON = "application/x-ndjson"
T = TypeVar("T")


async def _replan_thread(request: Request, compute: Callable[[], T]) -> T:
    """``compute()`` in the one worker thread all replans of this process share (``app.state.replan_limiter``):
    concurrent replans take turns chunk by chunk, and never hold more than one of the threads plans use."""
    limiter: anyio.CapacityLimiter | None = getattr(request.app.state, "replan_limiter", None)
    if limiter is None:
        limiter = request.app.state.replan_limiter = anyio.CapacityLimiter(1)
    return await anyio.to_thread.run_sync(compute, limiter=limiter)


async def _replan_deployments(request: Request, change: ReplanRequest) -> list[DeploymentRead]:
    """The matching deployments from the database (a read-only session, no write lock), else the in-memory copy.

    Rows become ``DeploymentRead`` in the worker thread (about 0.1 ms each), so a large registry does not hold
    the event loop; a row this version cannot read is skipped with a log line, as the registry reload does."""
    holder: DeploymentsHolder | None = getattr(request.app.state, "deployments", None)
    maker = getattr(request.app.state, "sessionmaker", None)
    if maker is not None:
        try:
            async with maker() as session:
                repository = DeploymentRepository(session)
                rows = await repository.all(repository.filtered(namespace=change.namespace))
            return await _replan_thread(request, partial(_readable, rows, change.labels))
        except (DBAPIError, OSError):
            if holder is None:
                raise
    if holder is None:
        raise ServiceUnavailable("the database is not configured")
    listed = [d for d in holder.deployments if change.namespace in (None, d.namespace)]
    return matching(listed, change.labels)


def _readable(rows: Sequence[DeploymentEntry], labels: Mapping[str, str]) -> list[DeploymentRead]:
    found = []
    for row in rows:
        if not all((row.labels or {}).get(k) == v for k, v in labels.items()):
            continue
        try:
            found.append(to_read(row))
        except ValidationError as exc:
            logger.error("deployment %s/%s skipped: %s", row.namespace, row.name, exc.errors()[:1])
    return found


@router.post(
    "/replan",
    response_model=ReplanResponse,
    summary="What-if: every registered deployment's plan and replicas under more traffic, new SLOs, another "
    "vLLM release or GPU type (nothing is stored)",
    responses={
        200: {
            "description": f"JSON, or with `Accept: {NDJSON}` one line per deployment, progress lines and a "
            "summary line, streamed as they are computed",
            "content": {NDJSON: {}},
        },
        422: {"description": "invalid change, or more work than one replan may do (the field is named)"},
        503: ERRORS[503],
    },
)
async def replan_deployments(request: Request, body: ReplanRequest) -> Response:
    """Reads the registry, then plans in a worker thread, ``CHUNK`` deployments at a time (the event loop keeps
    serving between chunks). Caps and an invalid change are refused with a 422 before any work starts."""
    started = time.perf_counter()
    deployments = await _replan_deployments(request, body)
    catalog: CatalogHolder = request.app.state.catalog
    snapshot = catalog.snapshot
    batch = await _replan_thread(request, partial(prepare, snapshot, deployments, body))
    replanner = Replanner(
        snapshot,
        body,
        getattr(request.app.state, "calibrations", None),
        getattr(request.app.state, "step_time_scales", None),
    )
    if NDJSON in request.headers.get("accept", ""):
        return StreamingResponse(
            _replan_lines(request, batch, replanner, started),
            media_type=NDJSON,
            headers={"Cache-Control": "no-store"},
        )
    deltas: list[ReplanDelta] = []
    for chunk in batch.chunks():
        deltas.extend(await _replan_thread(request, partial(replanner.run_all, chunk)))
    deltas.sort(key=lambda d: (d.namespace, d.name))
    summary = summarize(
        deltas, replanner, configurations=batch.configurations, elapsed_seconds=time.perf_counter() - started
    )
    response = ReplanResponse(change=body, deployments=deltas, summary=summary)
    return Response(response.model_dump_json(), media_type="application/json")


def _line(kind: str, payload: dict[str, object]) -> bytes:
    return json.dumps({"type": kind, **payload}, separators=(",", ":")).encode() + b"\n"


def _run_chunk(replanner: Replanner, chunk: Sequence[ReplanJob]) -> tuple[list[ReplanDelta], bytes]:
    """One chunk's deltas and their NDJSON lines, both made in the worker thread."""
    done = replanner.run_all(chunk)
    return done, b"".join(b'{"type":"deployment",' + d.model_dump_json().encode()[1:] + b"\n" for d in done)


async def _replan_lines(
    request: Request, batch: ReplanBatch, replanner: Replanner, started: float
) -> AsyncIterator[bytes]:
    """``start``, then per chunk its ``deployment`` lines and a ``progress`` line, then ``summary`` (or ``error``)."""
    total = len(batch.jobs)
    yield _line(
        "start",
        {
            "deployments": total,
            "configurations": batch.configurations,
            "simulate": batch.change.simulate,
            "change": batch.change.model_dump(mode="json"),
        },
    )
    deltas: list[ReplanDelta] = []
    try:
        for chunk in batch.chunks():
            done, lines = await _replan_thread(request, partial(_run_chunk, replanner, chunk))
            yield lines
            deltas.extend(done)
            yield _line(
                "progress",
                {
                    "done": len(deltas),
                    "total": total,
                    "elapsed_seconds": round(time.perf_counter() - started, 3),
                },
            )
    except Exception as exc:  # the status line is sent already: report on the stream itself
        logger.exception("replan failed after %d of %d deployments", len(deltas), total)
        yield _line(
            "error", {"message": f"replan failed after {len(deltas)} of {total}: {type(exc).__name__}"}
        )
        return
    summary = summarize(
        deltas, replanner, configurations=batch.configurations, elapsed_seconds=time.perf_counter() - started
    )
    yield _line("summary", summary.model_dump(mode="json"))
