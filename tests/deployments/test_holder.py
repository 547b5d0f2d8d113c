"""The in-memory registry: writes update it one entry at a time, and a reload never undoes a write it raced."""

from __future__ import annotations

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from service.deployments.schemas import DeploymentRead
from service.deployments.service import DeploymentsHolder

from .test_router import BODY


def names(holder: DeploymentsHolder) -> list[tuple[str, str]]:
    return [(d.namespace, d.name) for d in holder.deployments]


async def test_create_patch_and_delete_update_the_registry_without_reloading_it(
    client: httpx.AsyncClient, app: FastAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def no_reload(self: DeploymentsHolder, sessionmaker: object) -> None:
        raise AssertionError("a write reloaded the whole registry")

    monkeypatch.setattr(DeploymentsHolder, "reload", no_reload)
    holder: DeploymentsHolder = app.state.deployments
    assert (await client.post("/v1/deployments", json=BODY)).status_code == 201
    second = BODY | {"namespace": "a-team", "name": "zeta"}
    created = await client.post("/v1/deployments", json=second)
    assert created.status_code == 201
    assert names(holder) == [("a-team", "zeta"), ("llm", "llama-8b")]  # ordered as the database lists them
    assert holder.by_key()[("llm", "llama-8b")].replicas == 2

    patched = await client.patch(
        "/v1/deployments/llm/llama-8b", json={"replicas": 5}, headers={"If-Match": "*"}
    )
    assert patched.status_code == 200, patched.text
    kept = holder.by_key()[("llm", "llama-8b")]
    assert kept.replicas == 5
    assert kept.version == patched.json()["version"]

    assert (await client.delete("/v1/deployments/a-team/zeta")).status_code == 204
    assert names(holder) == [("llm", "llama-8b")]


async def test_a_failed_write_leaves_the_registry_as_it_was(client: httpx.AsyncClient, app: FastAPI) -> None:
    holder: DeploymentsHolder = app.state.deployments
    assert (await client.post("/v1/deployments", json=BODY)).status_code == 201
    assert (await client.post("/v1/deployments", json=BODY)).status_code == 409
    assert (
        await client.post("/v1/deployments", json=BODY | {"name": "x", "gpu": "no-such"})
    ).status_code == 422
    assert names(holder) == [("llm", "llama-8b")]


async def test_the_in_memory_entry_equals_what_a_reload_reads(
    client: httpx.AsyncClient, app: FastAPI, sessionmaker: async_sessionmaker[AsyncSession]
) -> None:
    holder: DeploymentsHolder = app.state.deployments
    assert (await client.post("/v1/deployments", json=BODY)).status_code == 201
    written = holder.by_key()[("llm", "llama-8b")]
    reloaded = DeploymentsHolder()
    await reloaded.reload(sessionmaker)
    assert reloaded.by_key()[("llm", "llama-8b")] == written


async def test_a_reload_that_raced_a_write_does_not_undo_it(
    client: httpx.AsyncClient, app: FastAPI, sessionmaker: async_sessionmaker[AsyncSession]
) -> None:
    holder: DeploymentsHolder = app.state.deployments
    assert (await client.post("/v1/deployments", json=BODY)).status_code == 201
    landed = holder.by_key()[("llm", "llama-8b")].model_copy(update={"name": "written-meanwhile"})

    def racing() -> AsyncSession:
        holder.put(landed)  # a write commits while the reload is reading the database
        return sessionmaker()

    await holder.reload(racing)  # type: ignore[arg-type]
    assert ("llm", "written-meanwhile") in holder.by_key()
    await holder.reload(sessionmaker)  # the next reload is current again: only what the database holds
    assert names(holder) == [("llm", "llama-8b")]


def test_readers_get_a_stable_copy_while_writes_go_on() -> None:
    holder = DeploymentsHolder()
    entry = DeploymentRead.model_validate(
        {
            "namespace": "llm",
            "name": "a",
            "model": "llama-3.1-8b",
            "gpu": "l4",
            "replicas": 1,
            "version": 1,
            "created_at": "2026-01-01T00:00:00Z",
            "updated_at": "2026-01-01T00:00:00Z",
        }
    )
    holder.put(entry)
    before = holder.by_key()
    listed = holder.deployments
    holder.put(entry.model_copy(update={"name": "b"}))
    holder.remove("llm", "a")
    assert list(before) == [("llm", "a")] and [d.name for d in listed] == ["a"]
    assert [d.name for d in holder.deployments] == ["b"]
