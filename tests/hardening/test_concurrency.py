"""Concurrent writers, on PostgreSQL and on SQLite alike: nothing is lost or half-applied, a lost race with a
stale ``If-Match`` is a 412 (never a 503, never "database is locked"), and a write without ``If-Match`` is
never told 412: it is applied on top of the writes before it (last writer wins, field by field).

Writers serialise on the row they change: ``SELECT … FOR UPDATE`` on PostgreSQL, ``BEGIN IMMEDIATE`` on
SQLite. These tests commit for real (each request is its own transaction on its own connection), so they
build an app on a real engine and clean up what they create.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from service.app import create_app
from service.catalog.snapshot import CatalogHolder, read_snapshot
from service.db.session import create_engine, create_sessionmaker
from service.deployments.service import DeploymentsHolder
from service.settings import Settings

N = 12


@pytest.fixture
async def live_client(database_url: str, engine: AsyncEngine) -> AsyncIterator[httpx.AsyncClient]:
    real = create_engine(database_url, pool_size=N)
    app = create_app(Settings(database_url=database_url), with_lifespan=False)
    app.state.engine = real
    app.state.sessionmaker = create_sessionmaker(real)
    async with app.state.sessionmaker() as session:
        app.state.catalog = CatalogHolder(await read_snapshot(session))
    app.state.deployments = DeploymentsHolder()
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
        yield client
    await real.dispose()


def gpu_body(name: str) -> dict[str, object]:
    return {
        "name": name,
        "vendor": "nvidia",
        "memory_bytes": 80 * 2**30,
        "memory_bandwidth_bytes_per_second": 2 * 10**12,
        "source": "test",
    }


async def test_concurrent_patches_with_the_same_etag_let_exactly_one_win(
    live_client: httpx.AsyncClient,
) -> None:
    name = f"conc-{uuid.uuid4().hex[:8]}"
    created = await live_client.post("/v1/gpus", json=gpu_body(name))
    etag = created.headers["etag"]
    try:
        responses = await asyncio.gather(
            *(
                live_client.patch(
                    f"/v1/gpus/{name}",
                    json={"notes": f"writer {i}", "price_per_hour_usd": float(i)},
                    headers={"If-Match": etag},
                )
                for i in range(N)
            )
        )
        codes = sorted(r.status_code for r in responses)
        # One writer read the version the ETag names; every other one read the winner's version after it
        # committed, so its precondition failed.
        assert codes == [200] + [412] * (N - 1), codes
        winner = next(r for r in responses if r.status_code == 200).json()
        final = (await live_client.get(f"/v1/gpus/{name}")).json()
        assert final["version"] == 2
        # both fields come from the same write: never half-applied
        assert final["notes"] == f"writer {int(final['price_per_hour_usd'])}"
        assert final["notes"] == winner["notes"]
    finally:
        await live_client.delete(f"/v1/gpus/{name}")


async def test_concurrent_patches_without_if_match_all_apply_one_after_another(
    live_client: httpx.AsyncClient,
) -> None:
    name = f"conc-{uuid.uuid4().hex[:8]}"
    await live_client.post("/v1/gpus", json=gpu_body(name))
    try:
        responses = await asyncio.gather(
            *(
                live_client.patch(
                    f"/v1/gpus/{name}", json={"notes": f"writer {i}", "price_per_hour_usd": float(i)}
                )
                for i in range(N)
            )
        )
        codes = [r.status_code for r in responses]
        # No precondition was given, so none can fail: each PATCH applies to the version before it.
        assert codes == [200] * N, codes
        versions = sorted(r.json()["version"] for r in responses)
        assert versions == list(range(2, N + 2))
        final = (await live_client.get(f"/v1/gpus/{name}")).json()
        assert final["version"] == 1 + N
        assert final["notes"] == f"writer {int(final['price_per_hour_usd'])}"
    finally:
        await live_client.delete(f"/v1/gpus/{name}")


async def test_concurrent_creates_of_one_name_let_exactly_one_win(live_client: httpx.AsyncClient) -> None:
    name = f"conc-{uuid.uuid4().hex[:8]}"
    try:
        responses = await asyncio.gather(
            *(live_client.post("/v1/gpus", json=gpu_body(name) | {"notes": f"creator {i}"}) for i in range(N))
        )
        codes = sorted(r.status_code for r in responses)
        assert codes == [201] + [409] * (N - 1), codes
        winner = next(r for r in responses if r.status_code == 201).json()
        assert (await live_client.get(f"/v1/gpus/{name}")).json()["notes"] == winner["notes"]
    finally:
        await live_client.delete(f"/v1/gpus/{name}")


async def test_concurrent_deployment_patches_and_creates(live_client: httpx.AsyncClient) -> None:
    namespace, name = "conc", f"d-{uuid.uuid4().hex[:8]}"
    body = {
        "namespace": namespace,
        "name": name,
        "model": "llama-3.1-8b",
        "gpu": "h100-sxm-80gb",
        "max_model_len": 8192,
    }
    try:
        creates = await asyncio.gather(
            *(live_client.post("/v1/deployments", json=body | {"replicas": i + 1}) for i in range(N))
        )
        assert sorted(r.status_code for r in creates) == [201] + [409] * (N - 1)
        etag = (await live_client.get(f"/v1/deployments/{namespace}/{name}")).headers["etag"]
        patches = await asyncio.gather(
            *(
                live_client.patch(
                    f"/v1/deployments/{namespace}/{name}",
                    json={"replicas": 100 + i, "labels": {"writer": str(i)}},
                    headers={"If-Match": etag},
                )
                for i in range(N)
            )
        )
        codes = sorted(r.status_code for r in patches)
        assert codes == [200] + [412] * (N - 1), codes
        final = (await live_client.get(f"/v1/deployments/{namespace}/{name}")).json()
        assert final["replicas"] == 100 + int(final["labels"]["writer"])
        assert final["version"] == 2
    finally:
        await live_client.delete(f"/v1/deployments/{namespace}/{name}")


async def test_concurrent_deletes_without_if_match_delete_once_and_find_nothing_after(
    live_client: httpx.AsyncClient,
) -> None:
    name = f"conc-{uuid.uuid4().hex[:8]}"
    await live_client.post("/v1/gpus", json=gpu_body(name))
    responses = await asyncio.gather(*(live_client.delete(f"/v1/gpus/{name}") for _ in range(N)))
    codes = sorted(r.status_code for r in responses)
    assert codes == [204] + [404] * (N - 1), codes
