"""Security: secrets stay out of logs, bearer tokens are digests compared in constant time, every write needs
a token, and registered metric URLs cannot point kvcap at credentials, link-local services or other hosts.

Already covered elsewhere: 401/403 and hashed tokens on ``/v1/gpus`` (``tests/catalog/test_router.py``), the
413 body limit (same file), the guard's rules one by one (``tests/live/test_guard.py``), redirects to the
metadata address and 50 MB bodies (``tests/live/test_scraper.py``), the non-root container
(``tests/deploy``), and ``pip-audit`` in ``.ci/run``.
"""

from __future__ import annotations

import asyncio
import gc
import hashlib
import hmac
import logging
import re
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from service.app import create_app
from service.live.guard import TargetGuard
from service.live.manager import LiveManager, LiveTarget
from service.live.schemas import parse_live_source
from service.live.scraper import make_client
from service.settings import Settings, hash_token
from tests.conftest import build_app
from tests.live.stub_server import StubServer, response

TOKEN = "kvcap-token-Zq81xV3mP0"
OTHER = "second-token-77Hq"
DB_PASSWORD = "db-Pa55-9d1f2e"
WRITE_METHODS = {"POST", "PUT", "PATCH", "DELETE"}
# POST endpoints that change nothing, so they are open like reads. Anything else that accepts POST, PUT, PATCH
# or DELETE must need a token: adding an endpoint to this set is a decision, not an accident.
NO_TOKEN_WRITES = {
    # The API server calls the webhook with its TLS client identity (``clientConfig`` + the serving
    # certificate), never with a bearer token: requiring one would fail every review. It only computes a
    # verdict over the in-memory catalog; it writes nothing.
    ("POST", "/admission/validate"),
    # Pure computations over the in-memory catalog (POST only because the request is a JSON document).
    ("POST", "/v1/plans"),
    ("POST", "/v1/plans/recommend"),
    ("POST", "/v1/plans/sweep"),
    ("POST", "/v1/simulations"),  # the serving simulator over the in-memory catalog
    ("POST", "/v1/checks"),  # the admission verdict for a pasted manifest, what `kvcap check` computes
    # The fleet what-if: reads the registry (reads are open) and the in-memory catalog, stores nothing.
    ("POST", "/v1/deployments/replan"),
}
DEPLOYMENT = {"namespace": "sec", "name": "chat", "model": "llama-3.1-8b", "gpu": "l4", "max_model_len": 4096}


class Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))  # the formatted line, with any traceback

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


@pytest.fixture
def logs() -> Iterator[Collect]:
    """Everything logged: ``kvcap`` (which does not propagate) and the root logger (SQLAlchemy, psycopg, …)."""
    handler = Collect()
    loggers = [logging.getLogger("kvcap"), logging.getLogger()]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.addHandler(handler)
        lg.setLevel(logging.DEBUG)
    yield handler
    for lg, level in zip(loggers, levels, strict=True):
        lg.removeHandler(handler)
        lg.setLevel(level)


@pytest.fixture
async def secured(
    database_url: str, engine: AsyncEngine, sessionmaker: async_sessionmaker[AsyncSession]
) -> AsyncIterator[httpx.AsyncClient]:
    app = await build_app(
        Settings(database_url=database_url, api_tokens=[TOKEN, OTHER], log_level="DEBUG"),
        engine,
        sessionmaker,
    )
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
        yield client


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


# Logs ---------------------------------------------------------------------------------------------------------
async def test_start_up_outage_and_refused_writes_never_log_the_password_or_a_token(logs: Collect) -> None:
    """The real lifespan on a database that refuses connections: start-up, a failing catalog refresh and live
    tick, a 401, a 403, a 503 and a failed readiness check, all logged at DEBUG."""
    settings = Settings(
        database_url=f"postgresql+psycopg://kvcap:{DB_PASSWORD}@127.0.0.1:1/kvcap",
        api_tokens=[TOKEN],
        log_level="DEBUG",
        catalog_refresh_seconds=0.1,
        scrape_interval_seconds=0.1,
    )
    app = create_app(settings)
    logging.getLogger("kvcap").addHandler(logs)  # create_app replaced the kvcap handlers
    try:
        async with app.router.lifespan_context(app):
            async with httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app), base_url="http://t"
            ) as client:
                gpu = {"name": "g", "vendor": "nvidia", "memory_bytes": 2**34, "source": "t"}
                assert (await client.post("/v1/gpus", json=gpu)).status_code == 401
                assert (
                    await client.post("/v1/gpus", json=gpu, headers=bearer(TOKEN + "x"))
                ).status_code == 403
                unavailable = await client.post("/v1/gpus", json=gpu, headers=bearer(TOKEN))
                assert unavailable.status_code == 503
                assert (await client.get("/readyz")).status_code == 503
                assert (
                    await client.post("/v1/plans", json={"model": "llama-3.1-8b", "gpu": "l4"})
                ).status_code == 200
            await asyncio.sleep(0.3)  # a few failing refreshes and live ticks
    finally:
        gc.unfreeze()  # the lifespan froze the test process's objects; hand them back to the collector
    text = logs.text
    assert "kvcap:***@127.0.0.1:1/kvcap" in text  # the start-up line names the database, masked
    assert "database unavailable" in text and "catalog refresh failed" in text
    for secret in (DB_PASSWORD, TOKEN, TOKEN + "x", hash_token(TOKEN)):
        assert secret not in text
    assert DB_PASSWORD not in unavailable.text


async def test_failed_and_successful_authentication_never_log_the_token(
    secured: httpx.AsyncClient, logs: Collect
) -> None:
    logging.getLogger("kvcap").addHandler(logs)
    body = DEPLOYMENT | {"name": "logged"}
    assert (
        await secured.post("/v1/deployments", json=body, headers=bearer("guess-" + TOKEN))
    ).status_code == 403
    assert (
        await secured.post("/v1/deployments", json=body, headers={"Authorization": TOKEN})
    ).status_code == 401
    assert (await secured.post("/v1/deployments", json=body, headers=bearer(TOKEN))).status_code == 201
    assert TOKEN not in logs.text


# Tokens -------------------------------------------------------------------------------------------------------
def test_settings_hold_tokens_only_as_sha256_digests() -> None:
    settings = Settings(
        api_tokens=[TOKEN, OTHER], api_token_sha256=[hashlib.sha256(b"third").hexdigest().upper()]
    )
    expected = {hashlib.sha256(t.encode()).hexdigest() for t in (TOKEN, OTHER, "third")}
    assert settings.token_hashes == expected
    assert all(re.fullmatch(r"[0-9a-f]{64}", digest) for digest in settings.token_hashes)
    assert settings.auth_enabled
    dumped = repr(settings) + str(settings.model_dump()) + settings.model_dump_json()
    assert TOKEN not in dumped and OTHER not in dumped
    assert settings.api_tokens == []


def test_tokens_from_the_environment_are_hashed_at_load(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KVCAP_API_TOKENS", f"{TOKEN},{OTHER}")
    settings = Settings()
    assert settings.token_hashes == {hash_token(TOKEN), hash_token(OTHER)}
    assert TOKEN not in settings.model_dump_json()


@pytest.mark.parametrize(
    ("authorization", "status"),
    [
        (None, 401),
        ("", 401),
        ("Bearer", 401),
        ("Bearer    ", 401),
        (f"Basic {TOKEN}", 401),
        (TOKEN, 401),
        (f"Bearer {TOKEN[:-1]}", 403),  # a prefix of the token
        (f"Bearer {TOKEN}x", 403),  # the token plus a character
        (f"Bearer {TOKEN.upper()}", 403),
        (f"Bearer {hash_token(TOKEN)}", 403),  # the stored digest is not a credential
        (f"bearer {TOKEN}", 201),  # the scheme is case-insensitive (RFC 9110 §11.1)
        (f"Bearer {OTHER}", 201),
    ],
)
async def test_only_an_exact_configured_token_may_write(
    secured: httpx.AsyncClient, authorization: str | None, status: int
) -> None:
    headers = {"Authorization": authorization} if authorization is not None else {}
    response = await secured.post("/v1/deployments", json=DEPLOYMENT, headers=headers)
    assert response.status_code == status, response.text
    if status == 401:
        assert response.headers["www-authenticate"].startswith("Bearer")


async def test_tokens_are_compared_as_digests_with_compare_digest_against_every_digest(
    secured: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[Any, Any]] = []
    real = hmac.compare_digest

    def spy(a: Any, b: Any) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)
    for token in (TOKEN, "wrong"):
        calls.clear()
        await secured.post("/v1/deployments", json=DEPLOYMENT, headers=bearer(token))
        # one comparison per configured digest — no early exit on the first match …
        assert len(calls) == 2
        # … of digests, never of the plaintext
        assert all(re.fullmatch(r"[0-9a-f]{64}", side) for pair in calls for side in pair)
        assert {a for a, _ in calls} == {hash_token(token)}
        assert {b for _, b in calls} == {hash_token(TOKEN), hash_token(OTHER)}


# Every write needs a token ------------------------------------------------------------------------------------
def _write_routes(app: FastAPI) -> list[tuple[str, str]]:
    """(method, path) of every route that accepts a write method, from the router itself (not the OpenAPI
    document, which a route can leave out with ``include_in_schema=False``)."""
    try:
        from fastapi.routing import iter_route_contexts  # FastAPI ≥ 0.13x: included routers stay nested

        routes: list[Any] = list(iter_route_contexts(app.routes))
    except ImportError:  # pragma: no cover - older FastAPI flattens routes
        routes = list(app.routes)
    found = set()
    for route in routes:
        path = getattr(route, "path_format", None) or getattr(route, "path", None)
        for method in getattr(route, "methods", None) or ():
            if method in WRITE_METHODS and path:
                found.add((method, path))
    return sorted(found)


async def test_every_write_endpoint_without_a_token_is_401(secured: httpx.AsyncClient) -> None:
    app = secured._transport.app  # type: ignore[attr-defined]
    routes = _write_routes(app)
    assert len(routes) >= 14, routes  # gpus (3), models (3), import, deployments (3), webhook, plans (3)
    assert set(routes) >= NO_TOKEN_WRITES
    for method, path in routes:
        if (method, path) in NO_TOKEN_WRITES:
            continue
        concrete = re.sub(r"\{[^}]+\}", "x", path)
        for headers in ({}, {"Authorization": "Basic dXNlcjpwYXNz"}):
            response = await secured.request(method, concrete, json={}, headers=headers)
            assert response.status_code == 401, (method, path, response.status_code, response.text)


async def test_the_token_free_posts_change_nothing(secured: httpx.AsyncClient) -> None:
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "u1",
            "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
            "resource": {"group": "", "version": "v1", "resource": "configmaps"},
            "operation": "CREATE",
            "object": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}},
        },
    }
    workload = {"concurrent_users": 8}
    bodies = {
        "/admission/validate": review,
        "/v1/plans": {"model": "llama-3.1-8b", "gpu": "l4"},
        "/v1/plans/recommend": {"model": "llama-3.1-8b", "gpu": "l4", "workload": workload},
        "/v1/plans/sweep": {"model": "llama-3.1-8b", "workload": workload},
        "/v1/simulations": {
            "model": "llama-3.1-8b",
            "gpu": "l4",
            "max_model_len": 4096,
            "benchmark": {"num_prompts": 8, "random_input_len": 128, "random_output_len": 16},
        },
        "/v1/checks": {"manifest": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n"},
        "/v1/deployments/replan": {"traffic_multiplier": 2},
    }

    async def state() -> list[Any]:
        return [
            (await secured.get(p, params={"limit": 500})).json()
            for p in ("/v1/gpus", "/v1/models", "/v1/deployments")
        ]

    before = await state()
    for method, path in sorted(NO_TOKEN_WRITES):
        response = await secured.request(method, path, json=bodies[path])
        assert response.status_code == 200, (path, response.text)
    assert await state() == before


def test_the_openapi_document_declares_bearer_auth_on_exactly_the_protected_writes() -> None:
    document = create_app(Settings(), with_lifespan=False).openapi()
    assert document["components"]["securitySchemes"]["bearer"] == {
        "type": "http",
        "scheme": "bearer",
        "description": "a token from KVCAP_API_TOKENS",
    }
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            protected = method.upper() in WRITE_METHODS and (method.upper(), path) not in NO_TOKEN_WRITES
            assert ("security" in operation) == protected, (method, path)


# Registered metric URLs ---------------------------------------------------------------------------------------
BAD_URLS = [
    ("file:///etc/passwd", "scheme"),
    ("ftp://vllm.llm:8000/metrics", "scheme"),
    ("gopher://vllm.llm:70/", "scheme"),
    ("http://admin:hunter2@vllm.llm:8000/metrics", "credentials"),
    ("http://token@vllm.llm:8000/metrics", "credentials"),
    ("http://169.254.169.254/latest/meta-data/", "metadata"),
    ("http://169.254.10.1:8000/metrics", "link-local"),
    ("http://[fe80::1]:8000/metrics", "link-local"),
    ("http://[fd00:ec2::254]/latest/meta-data/", "metadata"),
    ("http://metadata.google.internal/computeMetadata/v1/", "metadata"),
    ("http://0.0.0.0:8000/metrics", "unspecified"),
]


@pytest.mark.parametrize(("url", "kind"), BAD_URLS)
@pytest.mark.parametrize("shape", ["scrape_urls", "prometheus"])
async def test_registered_urls_are_refused_on_create_and_on_patch(
    client: httpx.AsyncClient, url: str, kind: str, shape: str
) -> None:
    live: dict[str, Any] = (
        {"scrape_urls": [url]}
        if shape == "scrape_urls"
        else {"prometheus": {"url": url, "match": '{app="x"}'}}
    )
    created = await client.post("/v1/deployments", json=DEPLOYMENT | {"live": live})
    assert created.status_code == 422, (kind, created.text)
    assert created.json()["errors"][0]["loc"][:2] == ["body", "live"]
    assert (await client.post("/v1/deployments", json=DEPLOYMENT)).status_code == 201
    patched = await client.patch("/v1/deployments/sec/chat", json={"live": live})
    assert patched.status_code == 422, (kind, patched.text)
    assert (await client.get("/v1/deployments/sec/chat")).json()["live"] is None


@pytest.mark.parametrize(
    ("allowed", "url", "status"),
    [
        (["*.svc.cluster.local"], "http://vllm.llm.svc.cluster.local:8000/metrics", 201),
        (["*.svc.cluster.local"], "http://vllm.example.com:8000/metrics", 422),
        (["*.svc.cluster.local"], "http://svc.cluster.local.evil.com/metrics", 422),
        (["*.svc.cluster.local"], "http://10.8.3.4:8000/metrics", 422),
        (["10.8.0.0/16"], "http://10.8.3.4:8000/metrics", 201),
        (["10.8.0.0/16"], "http://10.9.3.4:8000/metrics", 422),
        (["0.0.0.0/0"], "http://169.254.169.254/latest/meta-data/", 422),
    ],
)
async def test_an_allowlist_confines_registered_urls_to_its_hosts(
    database_url: str,
    engine: AsyncEngine,
    sessionmaker: async_sessionmaker[AsyncSession],
    allowed: list[str],
    url: str,
    status: int,
) -> None:
    """Names are matched at registration; a name under a CIDR-only allowlist is checked against the addresses
    it resolves to before each scrape (``TargetGuard.check_resolved``, tested in ``tests/live``)."""
    settings = Settings(database_url=database_url, scrape_allowed_hosts=allowed)
    app = await build_app(settings, engine, sessionmaker)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        body = DEPLOYMENT | {"live": {"scrape_urls": [url]}}
        response = await client.post("/v1/deployments", json=body)
    assert response.status_code == status, response.text


async def test_a_redirect_to_another_host_is_not_followed(vllm_metrics_dir: Any) -> None:
    """A scrape target (or Prometheus server) answering 302 to another, perfectly healthy host: kvcap records a
    ``redirect`` failure and never contacts the other host."""
    busy = (vllm_metrics_dir / "vllm-0.32.0-cpu-busy.txt").read_bytes()
    elsewhere = StubServer({"/metrics": busy, "/api/v1/query": b"{}"})
    await elsewhere.start()
    location = f"http://localhost:{elsewhere.port}/metrics"

    async def redirect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(response("302 Found", b"", headers={"Location": location}))
        await writer.drain()
        writer.close()

    redirector = await asyncio.start_server(redirect, "127.0.0.1", 0)
    here = f"http://127.0.0.1:{redirector.sockets[0].getsockname()[1]}"
    targets = [
        LiveTarget(
            namespace="llm", name="scraped", source=parse_live_source({"scrape_urls": [f"{here}/metrics"]})
        ),
        LiveTarget(
            namespace="llm",
            name="queried",
            source=parse_live_source({"prometheus": {"url": here, "match": '{app="vllm"}'}}),
        ),
    ]
    manager = LiveManager(
        client=make_client(concurrency=4),
        guard=TargetGuard([]),
        timeout_s=2.0,
        max_bytes=1 << 20,
        concurrency=4,
        owns_client=True,
    )
    try:
        await manager.refresh(targets)
    finally:
        await manager.aclose()
        redirector.close()
        await elsewhere.close()
    for name in ("scraped", "queried"):
        observation = manager.observations[("llm", name)]
        assert not any(observation.targets_up.values())
        assert observation.errors_total == {"redirect": 1}
    assert elsewhere.requests == []
