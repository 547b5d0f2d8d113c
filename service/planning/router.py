"""``POST /v1/plans``: the capacity plan for one model, GPU and set of vLLM settings.

The cost of one request is bounded twice. Its inputs are: every architecture number and setting is inside the
core's plausible ranges (``service.core.bounds``), and a sweep plans at most ``MAX_SWEEP_OPTIONS`` options, so
the worst request costs well under a second of CPU. Sweeps, recommendations and plans of an inline config.json
run in a worker thread (``anyio.to_thread`` with a ``CapacityLimiter`` of ``PLAN_THREADS``), never on the event
loop: health probes, admission reviews and ``/metrics`` keep answering while they are computed, and a burst of
expensive requests queues for the limiter instead of multiplying threads. A plan of a catalog model is computed
on the loop, as the admission webhook's are: it costs less than the hand-off to a thread. A plan served from the
cache never leaves the loop.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from functools import partial
from typing import TypeVar

import anyio
import anyio.to_thread
from fastapi import APIRouter, Request, Response

from service.catalog.snapshot import CatalogHolder, CatalogSnapshot
from service.planning.calibration import CalibrationHolder
from service.planning.recommendations import make_recommendation, make_sweep
from service.planning.schemas import (
    PlanRequestBody,
    PlanResponse,
    RecommendationOut,
    RecommendRequestBody,
    SimulationOut,
    SimulationRequestBody,
    SweepOut,
    SweepRequestBody,
)
from service.planning.service import make_plan_json
from service.planning.simulations import SIMULATION_THREADS, make_simulation, simulation_limits

router = APIRouter(prefix="/v1", tags=["plans"])

# Worker threads for plans: enough to keep both cores of a small pod busy, few enough that a flood of sweeps
# cannot starve the thread pool that database drivers and the exporter also use.
PLAN_THREADS = 4
T = TypeVar("T")


async def off_loop(request: Request, compute: Callable[[], T]) -> T:
    """``compute()`` in a worker thread under the app's plan limiter (created on first use, in the loop)."""
    limiter: anyio.CapacityLimiter | None = getattr(request.app.state, "plan_limiter", None)
    if limiter is None:
        limiter = request.app.state.plan_limiter = anyio.CapacityLimiter(PLAN_THREADS)
    return await anyio.to_thread.run_sync(compute, limiter=limiter)


def catalog_snapshot(request: Request) -> CatalogHolder:
    holder: CatalogHolder = request.app.state.catalog
    return holder


@router.post(
    "/plans",
    response_model=PlanResponse,
    summary="Predict vLLM's KV-cache allocation and whether it will start",
    responses={422: {"description": "invalid settings, unknown model or GPU (the field is named)"}},
)
async def create_plan(request: Request, body: PlanRequestBody) -> Response:
    """Pure computation over the in-memory catalog: never touches the database.

    The response is serialised once (not re-validated against the response model) and kept in a small cache:
    a plan is a pure function of the request and of the in-memory catalog and calibrations.
    """
    holder = catalog_snapshot(request)
    snapshot = holder.snapshot
    calibrations = getattr(request.app.state, "calibrations", None)
    cache: PlanCache | None = getattr(request.app.state, "plan_cache", None)
    key = (request_key(body), holder.generation, calibrations.generation if calibrations else 0)
    cached = cache.get(key) if cache is not None else None
    if cached is None:
        compute = partial(plan_bytes, snapshot, body, calibrations)
        # A catalog model plans in a fraction of a millisecond (bounded settings, at most a handful of re-plans
        # for suggestions), less than handing it to a worker thread costs; an inline config.json is parsed
        # first, so that one goes to the worker.
        cached = compute() if isinstance(body.model, str) else await off_loop(request, compute)
        if cache is not None:
            cache.put(key, cached)
    return Response(cached, media_type="application/json")


def plan_bytes(
    snapshot: CatalogSnapshot, body: PlanRequestBody, calibrations: CalibrationHolder | None
) -> bytes:
    return make_plan_json(snapshot, body, calibrations)


_PLAIN = frozenset({str, int, float, bool, type(None)})


def request_key(body: PlanRequestBody) -> Hashable:
    """The plan cache's name for a validated request: equal for two bodies only when they validate alike.

    A body of plain values (names, numbers and switches, no nested object: an inline model or GPU, a
    ``speculative_config``, ...) is named by its field values and their types, in field order: ``1`` and
    ``1.0`` are equal in Python but not in the plan, hence the types, and a float is named by its ``repr``
    (``-0.0 == 0.0``). Any other body is named by its canonical JSON.
    """
    values = tuple(body.__dict__.values())
    types = tuple(map(type, values))
    if not _PLAIN.issuperset(types):
        return body.model_dump_json()
    if float in types:
        values = tuple(repr(v) if t is float else v for v, t in zip(values, types, strict=True))
    return values, types


class PlanCache:
    """The last few hundred plan responses, keyed by ``request_key`` and the catalog/calibration versions.

    Repeated requests (pipelines re-checking manifests, dashboards polling) are answered from here; a reloaded
    catalog or new calibrations are new objects with new identities, so their plans are computed afresh.
    """

    def __init__(self, capacity: int = 512) -> None:
        self.capacity = capacity
        self._entries: OrderedDict[tuple[Hashable, int, int], bytes] = OrderedDict()

    def get(self, key: tuple[Hashable, int, int]) -> bytes | None:
        value = self._entries.get(key)
        if value is not None:
            self._entries.move_to_end(key)
        return value

    def put(self, key: tuple[Hashable, int, int], value: bytes) -> None:
        self._entries[key] = value
        self._entries.move_to_end(key)
        while len(self._entries) > self.capacity:
            self._entries.popitem(last=False)


@router.post(
    "/plans/recommend",
    response_model=RecommendationOut,
    summary="Tensor-parallel size, max_num_seqs, replicas and cost for a workload on one GPU type",
    responses={422: {"description": "invalid workload or settings (the field is named)"}},
)
async def create_recommendation(request: Request, body: RecommendRequestBody) -> RecommendationOut:
    snapshot = catalog_snapshot(request).snapshot
    return await off_loop(request, lambda: make_recommendation(snapshot, body))


@router.post(
    "/plans/sweep",
    response_model=SweepOut,
    summary="Rank every catalog GPU × TP × KV dtype × quantization option for a model and workload by cost",
    responses={422: {"description": "invalid workload or settings (the field is named)"}},
)
async def create_sweep(request: Request, body: SweepRequestBody) -> SweepOut:
    snapshot = catalog_snapshot(request).snapshot
    return await off_loop(request, lambda: make_sweep(snapshot, body))


_SIMULATIONS = anyio.CapacityLimiter(SIMULATION_THREADS)


@router.post(
    "/simulations",
    response_model=SimulationOut,
    summary="Simulate `vllm bench serve` against one replica: vLLM's result keys, a timeline, an error band",
    responses={
        422: {
            "description": "invalid settings or benchmark, a replica that would not start, or a run larger "
            "than one request may simulate (the field is named)"
        }
    },
)
async def create_simulation(request: Request, body: SimulationRequestBody) -> SimulationOut:
    """Pure computation over the in-memory catalog, in a worker thread (at most a few run at once).

    The cost is bounded before anything runs: prompts, tokens and engine iterations are capped
    (``service.planning.simulations.API_LIMITS``), and a larger run is refused with a 422 naming
    ``benchmark.num_prompts``.
    """
    snapshot = catalog_snapshot(request).snapshot
    job = partial(
        make_simulation,
        snapshot,
        body,
        scales=getattr(request.app.state, "step_time_scales", None),
        limits=simulation_limits(request.app.state.settings),
    )
    return await anyio.to_thread.run_sync(job, limiter=_SIMULATIONS)
