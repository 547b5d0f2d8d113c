"""kvcap's metrics about itself on ``/metrics``: build info, per-route HTTP histograms, admission errors, the
catalog refresh time and prometheus-client's process/platform collectors."""

from __future__ import annotations

import asyncio
import gc
import json
import platform
import time
from importlib.metadata import version
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from service.app import create_app
from service.settings import Settings

REVIEW = json.loads((Path(__file__).parents[1] / "admission" / "data" / "configmap.json").read_text())


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(
    found: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str
) -> float | None:
    return found.get((name, tuple(sorted(labels.items()))))


async def test_requests_are_counted_and_timed_by_route_template_not_raw_path(
    client: httpx.AsyncClient,
) -> None:
    before = samples((await client.get("/metrics")).text)
    for _ in range(2):
        assert (await client.get("/v1/models/llama-3.1-8b")).status_code == 200
    assert (await client.get("/v1/models/no-such-model")).status_code == 404
    assert (await client.get("/no/such/path/4711")).status_code == 404
    found = samples((await client.get("/metrics")).text)

    def delta(name: str, **labels: str) -> float:
        return (value(found, name, **labels) or 0) - (value(before, name, **labels) or 0)

    route = "/v1/models/{name}"
    assert delta("kvcap_http_requests_total", method="GET", route=route, status="200") == 2
    assert delta("kvcap_http_requests_total", method="GET", route=route, status="404") == 1
    assert delta("kvcap_http_requests_total", method="GET", route="unmatched", status="404") == 1
    count = "kvcap_http_request_duration_seconds_count"
    assert delta(count, method="GET", route=route, status="200") == 2
    inf = delta(
        "kvcap_http_request_duration_seconds_bucket", method="GET", route=route, status="200", le="+Inf"
    )
    assert inf == 2
    routes = {dict(labels).get("route") for name, labels in found if name == "kvcap_http_requests_total"}
    assert not any("llama" in r or "4711" in r for r in routes if r)  # no raw paths, bounded cardinality


async def test_build_info_and_the_process_collectors_are_exported(client: httpx.AsyncClient) -> None:
    text = (await client.get("/metrics")).text
    found = samples(text)
    build = [dict(labels) for name, labels in found if name == "kvcap_build_info"]
    assert build == [
        {"version": version("kvcap"), "revision": "unknown", "python_version": platform.python_version()}
    ]
    names = {name for name, _ in found}
    assert {
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "process_start_time_seconds",
    } <= names
    assert any(name == "python_info" for name in names)
    assert not any(name.endswith("_created") for name in names)


async def test_malformed_reviews_count_as_admission_errors(client: httpx.AsyncClient) -> None:
    def errors(text: str) -> float:
        return value(samples(text), "kvcap_admission_errors_total", reason="malformed") or 0

    before = errors((await client.get("/metrics")).text)
    assert (await client.post("/admission/validate", content=b"{not json")).status_code == 400
    assert (await client.post("/admission/validate", json={"kind": "AdmissionReview"})).status_code == 400
    answered = await client.post("/admission/validate", json=REVIEW)
    assert answered.status_code == 200
    assert errors((await client.get("/metrics")).text) - before == 2


async def test_the_catalog_refresh_time_is_exported_once_a_refresh_succeeded(
    engine: object, database_url: str
) -> None:
    settings = Settings(database_url=database_url, catalog_refresh_seconds=0.1, scrape_enabled=False)
    app = create_app(settings)
    started = time.time()
    try:
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c,
        ):
            first = value(samples((await c.get("/metrics")).text), "kvcap_catalog_refresh_timestamp_seconds")
            await _wait_past(c, first)
            later = value(samples((await c.get("/metrics")).text), "kvcap_catalog_refresh_timestamp_seconds")
    finally:
        gc.unfreeze()  # the lifespan froze the test process's objects
    assert first is not None and started <= first <= time.time()  # set by the start-up load
    assert later is not None and later > first  # and moved by the periodic refresh


async def _wait_past(client: httpx.AsyncClient, first: float | None) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        current = value(
            samples((await client.get("/metrics")).text), "kvcap_catalog_refresh_timestamp_seconds"
        )
        if current is not None and first is not None and current > first:
            return
        await asyncio.sleep(0.1)
