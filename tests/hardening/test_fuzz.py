"""Fuzzing: schemathesis against kvcap's own OpenAPI document, every operation, writes with a bearer token.

Each operation runs against the in-process app on the test database inside one transaction that is rolled
back afterwards (writes land in SAVEPOINTs), so fuzzed creates and deletes leave nothing behind. The app runs
in schemathesis' own event-loop thread, so its engine and connection are made there, in the app's lifespan.

Checks: every default schemathesis check (no 5xx, status codes, content types, headers and bodies as declared,
405s with a correct ``Allow``, writes that ignore auth) except two that judge input strictness rather than the
API contract: ``negative_data_rejection`` (pydantic's lax mode accepts ``false`` for a number and ``0`` for a
boolean, on purpose) and ``positive_data_acceptance`` (a schema-valid body may still name an unknown model or
an impossible configuration: a 422 naming the field is the documented answer).

Purely random names would only ever meet 404 and "unknown model": hooks swap in catalog names, the seeded
deployment and recorded admission objects often enough that plans, sweeps, PATCHes and webhook verdicts are
really computed.

Bounded for CI: ``max_examples`` per operation (``KVCAP_FUZZ_EXAMPLES``, default 40) on top of schemathesis'
deterministic coverage phase, derandomized; about 90 s on two cores.
Every finding is kept as a plain regression test in ``test_fuzz_regressions.py``.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from fastapi import FastAPI
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from schemathesis.python import asgi
from schemathesis.specs.openapi.checks import negative_data_rejection, positive_data_acceptance
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker

from service.app import create_app
from service.catalog.builtin import builtin_snapshot
from service.catalog.snapshot import CatalogHolder, read_snapshot
from service.db.session import create_engine
from service.deployments.schemas import DeploymentCreate
from service.deployments.service import DeploymentService, DeploymentsHolder
from service.live.guard import TargetGuard
from service.settings import Settings

TOKEN = "fuzz-token"
MAX_EXAMPLES = int(os.environ.get("KVCAP_FUZZ_EXAMPLES", "40"))
SEEDED = DeploymentCreate(
    namespace="fuzz",
    name="chat",
    model="llama-3.1-8b",
    gpu="h100-sxm-80gb",
    max_model_len=8192,
    replicas=2,
    workload={"concurrent_users": 64, "prompt_tokens": 1000, "output_tokens": 200},
)
_CATALOG = builtin_snapshot()
MODELS = sorted(_CATALOG.models)
GPUS = sorted(_CATALOG.gpus)
REVIEW_OBJECTS = [
    json.loads(path.read_text())["request"]["object"]
    for path in sorted((Path(__file__).parents[1] / "admission" / "data").glob("*.json"))
    if json.loads(path.read_text()).get("request", {}).get("object")
]


@asynccontextmanager
async def rolled_back(app: FastAPI) -> AsyncIterator[None]:
    """The lifespan: the test database (``app.state.database_url``) inside one transaction, rolled back at
    shutdown; sessions commit into SAVEPOINTs."""
    engine = create_engine(app.state.database_url)
    conn = await engine.connect()
    outer = await conn.begin()
    maker = async_sessionmaker(bind=conn, expire_on_commit=False, join_transaction_mode="create_savepoint")
    app.state.engine = engine
    app.state.sessionmaker = maker
    async with maker() as session:
        app.state.catalog = CatalogHolder(await read_snapshot(session))
    async with maker() as session:
        await DeploymentService(session, catalog=app.state.catalog.snapshot, guard=TargetGuard([])).create(
            SEEDED
        )
        await session.commit()
    app.state.deployments = DeploymentsHolder()
    await app.state.deployments.reload(maker)
    try:
        yield
    finally:
        await outer.rollback()
        await conn.close()
        await engine.dispose()


# Simulations are bounded smaller than the default so that ~40 fuzzed runs stay within the CI budget: larger
# benchmarks meet the documented 422 instead.
APP = create_app(
    Settings(
        api_tokens=[TOKEN],
        scrape_enabled=False,
        simulation_max_total_tokens=400_000,
        simulation_max_steps=20_000,
    ),
    with_lifespan=False,
)
APP.router.lifespan_context = rolled_back
schema = schemathesis.openapi.from_dict(APP.openapi())
schema.app = APP  # as ``from_asgi`` does: requests (and the checks' probes) go to the app in-process


def _sometimes(value: Any, real: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(real, st.just(value))


def _plannable(body: dict[str, Any], path: str, model: str, gpu: str, keep: set[str]) -> dict[str, Any]:
    out = {key: body[key] for key in keep} | {"model": model}
    if path != "/v1/plans/sweep":  # a sweep takes ``gpus`` and refuses ``gpu``
        out["gpu"] = gpu
    if path == "/v1/deployments":
        out |= {"namespace": SEEDED.namespace, "name": f"d{len(keep)}"}
    workload = out.get("workload")
    if isinstance(workload, dict):
        load = {"concurrent_users": 32} if "concurrent_users" in workload else {"requests_per_second": 5.0}
        out["workload"] = {
            key: value
            for key, value in workload.items()
            if key not in ("concurrent_users", "requests_per_second")
        } | load
    return out


@schema.hook
def flatmap_body(context: schemathesis.HookContext, body: Any) -> st.SearchStrategy[Any]:
    """Catalog model and GPU names in plan and deployment bodies; recorded workloads in admission reviews."""
    if not isinstance(body, dict):
        return st.just(body)
    path = context.operation.path if context.operation is not None else ""
    if path == "/admission/validate":
        request = body.get("request")
        if not isinstance(request, dict):
            return st.just(body)
        return _sometimes(
            body,
            st.sampled_from(REVIEW_OBJECTS).map(lambda obj: {**body, "request": {**request, "object": obj}}),
        )
    if "model" not in body:
        return st.just(body)
    # Catalog names, a random subset of the other generated fields (random engine, dtype or quantization
    # strings are rejected before any planning happens) and a workload with exactly one load figure.
    real = st.tuples(
        st.sampled_from(MODELS), st.sampled_from(GPUS), st.sets(st.sampled_from(sorted(body)))
    ).map(lambda chosen: _plannable(body, path, *chosen))
    return _sometimes(body, real)


@schema.hook
def flatmap_path_parameters(
    context: schemathesis.HookContext, params: dict[str, Any] | None
) -> st.SearchStrategy[Any]:
    """Existing entries in paths: catalog names, and the seeded deployment."""
    path = context.operation.path if context.operation is not None else ""
    if not isinstance(params, dict):
        return st.just(params)
    if path.startswith("/v1/deployments/"):
        return _sometimes(params, st.just({**params, "namespace": SEEDED.namespace, "name": SEEDED.name}))
    for prefix, names in (("/v1/gpus/", GPUS), ("/v1/models/", MODELS)):
        if path.startswith(prefix) and "name" in params:
            return _sometimes(params, st.sampled_from(names).map(lambda n: {**params, "name": n}))
    return st.just(params)


@pytest.fixture
def fuzz_app(database_url: str, engine: AsyncEngine) -> Iterator[FastAPI]:
    """A fresh lifespan (and transaction) per operation; ``engine`` makes sure the database is migrated and
    holds the built-in catalog."""
    APP.state.database_url = database_url
    try:
        yield APP
    finally:
        asgi.shutdown_lifespans()


@schema.parametrize()
@settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.filter_too_much,
    ],
)
def test_every_operation_keeps_its_contract(case: schemathesis.Case, fuzz_app: FastAPI) -> None:
    case.call_and_validate(
        base_url="http://testserver",
        headers={"Authorization": f"Bearer {TOKEN}"},
        excluded_checks=[negative_data_rejection, positive_data_acceptance],
    )
