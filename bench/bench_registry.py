"""Registry writes as the registry grows: registering the 1st deployment against registering the 1,000th.

The real app (lifespan included) on a scratch SQLite database, driven in-process through httpx's ASGI
transport, registers deployments one ``POST /v1/deployments`` at a time. A write commits one row and puts that
one entry into the in-memory registry, so its cost should not depend on how many are registered; the row to
compare with is a full reload of the registry at ``COUNT`` entries, which is what every write used to add.

Two apps on two scratch databases: one is filled with ``COUNT - WINDOW`` registrations first; then the first
``WINDOW`` registrations of the empty one and the last ``WINDOW`` of the full one (up to ``COUNT``) are made in
turn, one of each at a time. Each figure is the median over its window, in CPU time of this process (the
database is in-process SQLite, so its work is counted too, and neighbours on the machine are not). Taking the
two windows in turn matters on a shared machine: measured ten seconds apart (the first writes, then the
last), the CPU cost of the very same write wandered by ±30 % from one stretch of a run to the next, so the
ratio of the two windows read between 0.45× and 2.3× with no growth in the writes themselves.

Run: ``python -m bench.bench_registry``.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
from fastapi import FastAPI

from service.app import create_app
from service.db.migrate import upgrade
from service.deployments.service import DeploymentsHolder
from service.settings import Settings

COUNT = 1000
WINDOW = 20


@dataclass(frozen=True, slots=True, kw_only=True)
class RegistryResult:
    first_seconds: float
    last_seconds: float
    reload_seconds: float
    count: int

    @property
    def growth_ratio(self) -> float:
        return self.last_seconds / self.first_seconds


def _body(i: int) -> dict[str, Any]:
    return {
        "namespace": f"ns-{i % 20}",
        "name": f"deployment-{i}",
        "model": "llama-3.1-8b",
        "gpu": "l4",
        "max_model_len": 8192,
        "replicas": 1,
        "live": {"scrape_urls": [f"http://10.0.{i // 250}.{i % 250}:8000/metrics"]},
    }


@contextlib.asynccontextmanager
async def _registry(database_url: str) -> AsyncIterator[tuple[FastAPI, httpx.AsyncClient]]:
    settings = Settings(
        database_url=database_url, scrape_enabled=False, catalog_refresh_seconds=3600, log_level="WARNING"
    )
    app = create_app(settings)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://bench") as client,
    ):
        yield app, client


async def _register(client: httpx.AsyncClient, i: int) -> float:
    """CPU seconds of registering deployment ``i``."""
    started = time.process_time()
    response = await client.post("/v1/deployments", json=_body(i))
    cost = time.process_time() - started
    if response.status_code != 201:
        raise RuntimeError(f"registration {i} failed: {response.status_code} {response.text[:200]}")
    return cost


async def _measure(empty_url: str, full_url: str, count: int) -> RegistryResult:
    async with _registry(empty_url) as (_, empty), _registry(full_url) as (app, full):
        for i in range(count - WINDOW):
            await _register(full, i)
        first, last = [], []
        for i in range(WINDOW):  # in turn, so that a drift in the machine's speed reaches both windows alike
            first.append(await _register(empty, i))
            last.append(await _register(full, count - WINDOW + i))
        holder: DeploymentsHolder = app.state.deployments
        if len(holder.deployments) != count:
            raise RuntimeError(f"the in-memory registry holds {len(holder.deployments)} of {count}")
        reloads = []
        for _ in range(5):
            started = time.process_time()
            await DeploymentsHolder().reload(app.state.sessionmaker)
            reloads.append(time.process_time() - started)
    return RegistryResult(
        first_seconds=statistics.median(first),
        last_seconds=statistics.median(last),
        reload_seconds=statistics.median(reloads),
        count=count,
    )


def run(count: int = COUNT) -> RegistryResult:
    with tempfile.TemporaryDirectory(prefix="kvcap-bench-registry-") as scratch:
        empty_url = f"sqlite+aiosqlite:///{scratch}/empty.db"
        full_url = f"sqlite+aiosqlite:///{scratch}/full.db"
        upgrade(empty_url)
        upgrade(full_url)
        return asyncio.run(_measure(empty_url, full_url, count))


def main() -> None:
    r = run()
    print(f"register deployment 1..{WINDOW} (median)        {r.first_seconds * 1e3:8.2f} ms")
    print(
        f"register deployment {r.count - WINDOW + 1}..{r.count} (median)  {r.last_seconds * 1e3:8.2f} ms  "
        f"({r.growth_ratio:.2f}× the first)"
    )
    print(
        f"full registry reload at {r.count} entries     {r.reload_seconds * 1e3:8.2f} ms  (what each write used to add)"
    )


if __name__ == "__main__":
    main()
