"""Deployment registry rules: validation against the catalog and the scrape policy, ETags, plans, autoscaling.

A deployment is accepted only when its model and GPU resolve in the catalog (or are given inline), its vLLM
settings are ones the planner understands, and every URL in its ``live`` source passes the scrape guard; a
deployment that would *not start* is still accepted (its plan says so) — registering is not deploying.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from service.api.etag import check_if_match
from service.api.pagination import Page, PageParams
from service.catalog.snapshot import CatalogSnapshot
from service.core.errors import InvalidSpec
from service.core.planner import plan
from service.core.recommend import speculative_of
from service.db.session import after_commit
from service.deployments.orm import DeploymentEntry
from service.deployments.repository import DeploymentRepository
from service.deployments.schemas import (
    DeploymentCreate,
    DeploymentPlan,
    DeploymentRead,
    DeploymentUpdate,
    settings_of,
)
from service.errors import Conflict, NotFound, Unprocessable
from service.live.guard import TargetGuard, TargetRefused
from service.live.schemas import parse_live_source, source_urls
from service.planning.calibration import CalibrationHolder
from service.planning.recommendations import make_recommendation, to_workload
from service.planning.request import build_request
from service.planning.schemas import PlanRequestBody, RecommendRequestBody
from service.planning.service import make_plan, resolve_gpu_ref, resolve_model_ref
from service.planning.step_time_calibration import StepTimeScales

logger = logging.getLogger("kvcap.deployments")

DeploymentKey = tuple[str, str]
_COLUMNS = ("model", "gpu", "replicas", "workload", "live", "labels")


def to_read(entry: DeploymentEntry) -> DeploymentRead:
    data: dict[str, Any] = {
        "namespace": entry.namespace,
        "name": entry.name,
        **(entry.settings or {}),
        **{key: getattr(entry, key) for key in _COLUMNS},
        "version": entry.version,
        "created_at": entry.created_at,
        "updated_at": entry.updated_at,
    }
    return DeploymentRead.model_validate(data)


def to_columns(data: DeploymentCreate) -> dict[str, Any]:
    dumped = data.model_dump(mode="json", exclude_none=False)
    columns = {key: dumped[key] for key in _COLUMNS}
    columns["settings"] = {key: value for key, value in settings_of(dumped).items() if value is not None}
    return columns


def validate_deployment(data: DeploymentCreate, catalog: CatalogSnapshot, guard: TargetGuard) -> None:
    """Check that kvcap can plan for and observe this deployment (see module docstring); 422 names the field."""
    model = resolve_model_ref(catalog, data.model)
    gpu, _ = resolve_gpu_ref(catalog, data.gpu)
    try:
        request = build_request(
            model.spec,
            gpu,
            data,
            implied_quantization=model.implied_quantization,
            snapshot=catalog,
            suggest=False,
            detail=False,
        )
        result = plan(request)
        if data.workload is not None:
            # The workload's acceptance must be one the plan's k drafts can reach (1 + k at most).
            speculative_of(request, result, to_workload(data.workload))
    except InvalidSpec as exc:
        raise Unprocessable.for_field(exc.field, exc.message) from None
    if data.live is not None:
        for index, url in enumerate(source_urls(data.live)):
            try:
                guard.check(url)
            except TargetRefused as exc:
                kind = "scrape_urls" if "scrape_urls" in data.live.model_dump() else "prometheus.url"
                field = f"live.scrape_urls.{index}" if kind == "scrape_urls" else "live.prometheus.url"
                raise Unprocessable.for_field(field, f"kvcap may not scrape {url}: {exc}") from None


def plan_body(deployment: DeploymentRead) -> PlanRequestBody:
    fields = {
        key: getattr(deployment, key) for key in PlanRequestBody.model_fields if hasattr(deployment, key)
    }
    return PlanRequestBody.model_validate(fields)


def deployment_plan(
    catalog: CatalogSnapshot,
    deployment: DeploymentRead,
    calibrations: CalibrationHolder | None = None,
    scales: StepTimeScales | None = None,
) -> DeploymentPlan:
    """The plan (block-calibrated when observed) and the recommendation for the registered workload, sized
    with the step-time scale fitted for the deployment's configuration when live latency gave one."""
    result = make_plan(catalog, plan_body(deployment), calibrations)
    recommendation = None
    if deployment.workload is not None and deployment.gpu is not None:
        body = {
            key: getattr(deployment, key)
            for key in RecommendRequestBody.model_fields
            if hasattr(deployment, key)
        }
        body["tensor_parallel_sizes"] = None
        recommendation = make_recommendation(
            catalog,
            RecommendRequestBody.model_validate(body),
            time_scale=scales.scale_for(result) if scales is not None else 1.0,
        )
    return DeploymentPlan(deployment=deployment, plan=result, recommendation=recommendation)


class DeploymentsHolder:
    """In-memory copy of the registry for the live-metrics loop and the exporter (refreshed like the catalog).

    Writes through this replica update it in place of a reload (``put``/``remove``: a copy of the key→entry
    mapping, about 10 µs per 1,000 deployments, instead of re-reading and re-validating every row); the periodic
    ``reload`` picks up other replicas' writes. Readers on any thread take ``deployments`` or ``by_key()``: each
    write swaps in a new mapping, so a reader never sees one half-changed.
    """

    def __init__(self, deployments: Sequence[DeploymentRead] = ()) -> None:
        self._lock = threading.Lock()  # writers only: readers take the current mapping without it
        self._by_key: Mapping[DeploymentKey, DeploymentRead] = {(d.namespace, d.name): d for d in deployments}
        self._sorted: tuple[DeploymentRead, ...] | None = None
        self._writes = 0  # bumped by put/remove, so a reload that raced a write does not undo it

    @property
    def deployments(self) -> tuple[DeploymentRead, ...]:
        """Every deployment, ordered by namespace and name (as the database lists them)."""
        cached = self._sorted
        if cached is None:
            current = self._by_key
            cached = tuple(current[key] for key in sorted(current))
            with self._lock:
                if current is self._by_key:
                    self._sorted = cached
        return cached

    def by_key(self) -> Mapping[DeploymentKey, DeploymentRead]:
        return self._by_key

    @property
    def writes(self) -> int:
        """Writes through ``put``/``remove`` so far (the live worker process reloads the registry after one)."""
        return self._writes

    def put(self, deployment: DeploymentRead) -> None:
        """Add or replace one deployment (after its write committed)."""
        with self._lock:
            updated = dict(self._by_key)
            updated[(deployment.namespace, deployment.name)] = deployment
            self._swap(updated)

    def remove(self, namespace: str, name: str) -> None:
        with self._lock:
            updated = dict(self._by_key)
            updated.pop((namespace, name), None)
            self._swap(updated)

    def _swap(self, updated: Mapping[DeploymentKey, DeploymentRead]) -> None:
        self._by_key = updated
        self._sorted = None
        self._writes += 1

    async def reload(self, sessionmaker: async_sessionmaker[AsyncSession]) -> None:
        writes_before = self._writes
        async with sessionmaker() as session:
            rows = await DeploymentRepository(session).all()
        readable = {}
        for row in rows:
            try:
                readable[(row.namespace, row.name)] = to_read(row)
            except ValidationError as exc:  # a row written by a newer kvcap must not stop the others
                logger.error("deployment %s/%s skipped: %s", row.namespace, row.name, exc.errors()[:1])
        with self._lock:
            if self._writes != writes_before:
                return  # a write landed while reading: this copy may predate it; the next reload is current
            self._by_key = readable
            self._sorted = None


class DeploymentService:
    def __init__(
        self,
        session: AsyncSession,
        *,
        catalog: CatalogSnapshot,
        guard: TargetGuard,
        holder: DeploymentsHolder | None = None,
        sessionmaker: async_sessionmaker[AsyncSession] | None = None,
    ) -> None:
        self.session = session
        self.repo = DeploymentRepository(session)
        self.catalog = catalog
        self.guard = guard
        self.holder = holder
        self.sessionmaker = sessionmaker

    def _put_after_commit(self, entry: DeploymentEntry) -> None:
        """Once the write is durable, update the in-memory registry with this one entry (no reload)."""
        holder = self.holder
        if holder is None:
            return

        async def _put() -> None:
            holder.put(to_read(entry))

        after_commit(self.session, _put)

    def _remove_after_commit(self, namespace: str, name: str) -> None:
        holder = self.holder
        if holder is None:
            return

        async def _remove() -> None:
            holder.remove(namespace, name)

        after_commit(self.session, _remove)

    async def list(
        self, *, page: PageParams, namespace: str | None, labels: Mapping[str, str]
    ) -> Page[DeploymentRead]:
        statement = self.repo.filtered(namespace=namespace)
        if not labels:
            rows, total = await self.repo.page(statement, limit=page.limit, offset=page.offset)
            return Page(items=[to_read(r) for r in rows], total=total, limit=page.limit, offset=page.offset)
        # Label selectors are evaluated here: JSON containment differs by database, and registries are small.
        matching = [
            r
            for r in await self.repo.all(statement)
            if all((r.labels or {}).get(k) == v for k, v in labels.items())
        ]
        items = [to_read(r) for r in matching[page.offset : page.offset + page.limit]]
        return Page(items=items, total=len(matching), limit=page.limit, offset=page.offset)

    async def get(self, namespace: str, name: str, *, for_update: bool = False) -> DeploymentEntry:
        entry = await self.repo.get(namespace, name, for_update=for_update)
        if entry is None:
            raise NotFound(f"deployment {namespace}/{name} is not registered")
        return entry

    async def create(self, data: DeploymentCreate) -> DeploymentEntry:
        validate_deployment(data, self.catalog, self.guard)
        if await self.repo.get(data.namespace, data.name) is not None:
            raise Conflict(f"deployment {data.namespace}/{data.name} already exists; PATCH it instead")
        entry = await self.repo.add(
            DeploymentEntry(namespace=data.namespace, name=data.name, **to_columns(data))
        )
        self._put_after_commit(entry)
        return entry

    async def update(
        self, namespace: str, name: str, patch: DeploymentUpdate, *, if_match: str | None
    ) -> DeploymentEntry:
        entry = await self.get(namespace, name, for_update=True)
        check_if_match(if_match, entry.etag)
        current = to_read(entry).model_dump(mode="json", exclude={"version", "created_at", "updated_at"})
        changes = patch.model_dump(mode="json", exclude_unset=True)
        try:
            candidate = DeploymentCreate.model_validate(current | changes)
        except ValidationError as exc:
            raise Unprocessable(
                f"the change would make the deployment invalid: {exc.errors()[0]['msg']}"
            ) from None
        validate_deployment(candidate, self.catalog, self.guard)
        await self.repo.update(entry, to_columns(candidate))
        self._put_after_commit(entry)
        return entry

    async def delete(self, namespace: str, name: str, *, if_match: str | None) -> None:
        entry = await self.get(namespace, name, for_update=True)
        check_if_match(if_match, entry.etag)
        await self.repo.delete(entry)
        self._remove_after_commit(namespace, name)


def parse_label_selector(selector: str | None) -> dict[str, str]:
    """``key=value,key2=value2`` (equality only) → dict; anything else is a 422."""
    if not selector:
        return {}
    labels: dict[str, str] = {}
    for part in selector.split(","):
        key, sep, value = part.partition("=")
        if not sep or not key.strip():
            raise Unprocessable.for_field(
                "label", f"expected key=value pairs separated by commas, got {part!r}", location="query"
            )
        labels[key.strip()] = value.strip().removeprefix("=")
    return labels


def live_source_of(deployment: DeploymentRead) -> Any:
    """The deployment's live source as the live package's model (already validated on the way in)."""
    return parse_live_source(deployment.live.model_dump()) if deployment.live is not None else None
