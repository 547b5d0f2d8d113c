"""The plan explorer in a real browser: Playwright driving Debian's Chromium against a real kvcap server.

Skipped only when ``KVCAP_REQUIRE_BROWSER`` is unset and Chromium (or Playwright) is absent; CI sets the variable
and installs Chromium, so there a missing browser fails the run. Every number the page shows is compared with
what the API answers for the same request.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy.ext.asyncio import async_sessionmaker

from service.app import create_app
from service.catalog.builtin import load_builtin
from service.db import migrate
from service.db.session import create_engine as create_async_engine
from service.settings import Settings

CHROMIUM = os.environ.get("KVCAP_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
REQUIRED = bool(os.environ.get("KVCAP_REQUIRE_BROWSER"))

try:
    from playwright.sync_api import Browser, Page, sync_playwright
except ImportError:  # pragma: no cover - dev extra not installed
    sync_playwright = None  # type: ignore[assignment]

if CHROMIUM is None or sync_playwright is None:
    if REQUIRED:
        raise RuntimeError("KVCAP_REQUIRE_BROWSER is set but Chromium or Playwright is missing")
    pytest.skip(
        "Chromium or Playwright not installed (set KVCAP_REQUIRE_BROWSER=1 to fail instead)",
        allow_module_level=True,
    )

pytestmark = pytest.mark.browser

MANIFEST = (Path(__file__).resolve().parents[1] / "admission" / "data" / "denied.yaml").read_text()


async def _load_catalog(url: str) -> None:
    engine = create_async_engine(url)
    async with async_sessionmaker(engine)() as session:
        await load_builtin(session)
        await session.commit()
    await engine.dispose()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    import uvicorn

    folder = tempfile.mkdtemp(prefix="kvcap-ui-")
    url = f"sqlite+aiosqlite:///{folder}/ui.db"
    migrate.upgrade(url)
    asyncio.run(_load_catalog(url))  # as `kvcap catalog load` does: the periodic refresh reads the database
    settings = Settings(
        database_url=url, scrape_enabled=False, ui_grafana_url="http://grafana.invalid/d/kvcap"
    )
    port = _free_port()
    config = uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, log_level="warning")
    uv = uvicorn.Server(config)
    thread = threading.Thread(target=uv.run, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.2)
    else:
        pytest.fail("kvcap did not start")
    created = httpx.post(
        f"{base}/v1/deployments",
        json={
            "namespace": "llm",
            "name": "chat",
            "model": "llama-3.1-8b",
            "gpu": "l4",
            "max_model_len": 8192,
        },
    )
    assert created.status_code == 201, created.text
    yield base
    uv.should_exit = True
    thread.join(timeout=10)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    assert sync_playwright is not None and CHROMIUM is not None
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield browser
        browser.close()


class Watched:
    def __init__(self, page: Page) -> None:
        self.page = page
        self.problems: list[str] = []
        page.on("console", lambda m: self.problems.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: self.problems.append(str(e)))


@pytest.fixture
def watched(browser: Browser) -> Iterator[Watched]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    yield Watched(page)
    context.close()


def _ready(page: Page) -> None:
    page.wait_for_function("['ready', 'error'].includes(document.body.dataset.state)", timeout=120_000)


def _plan(base: str, **body: Any) -> dict[str, Any]:
    response = httpx.post(f"{base}/v1/plans", json=body, timeout=30)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def _segments(page: Page) -> dict[str, int]:
    return {
        rect.get_attribute("data-segment") or "": int(rect.get_attribute("data-bytes") or -1)
        for rect in page.locator("#memory-svg rect.segment").all()
    }


def _expected_segments(plan: dict[str, Any]) -> dict[str, int]:
    m = plan["memory"]
    parts = {
        "weights": m["weights_bytes"],
        "activation": m["activation_bytes"],
        "non_torch": m["non_torch_bytes"],
        "cudagraph": m["cudagraph_bytes"],
        "kv": m["kv_cache_bytes"],
    }
    parts["unused"] = m["total_bytes"] - sum(parts.values())
    return parts


@pytest.mark.parametrize("gpu", ["l4", "h100-sxm-80gb"])
def test_the_page_draws_what_the_api_answers(server: str, watched: Watched, gpu: str) -> None:
    page = watched.page
    page.goto(f"{server}/ui?model=llama-3.1-8b&gpu={gpu}&max_model_len=8192&requests_per_second=5")
    _ready(page)
    assert page.evaluate("document.body.dataset.state") == "ready"
    plan = _plan(server, model="llama-3.1-8b", gpu=gpu, max_model_len=8192)
    assert _segments(page) == _expected_segments(plan)
    assert page.locator("#verdict").get_attribute("data-fits") == "true"

    # Capacity curve: each point is /v1/plans's max_concurrency at that max_model_len.
    points = page.locator('#capacity-svg circle.point[data-series="kv_cache_dtype auto"]').all()
    assert len(points) >= 4
    for point in points[:3] + points[-1:]:
        length = int(point.get_attribute("data-x") or 0)
        shown = float(point.get_attribute("data-y") or 0)
        assert (
            shown
            == _plan(server, model="llama-3.1-8b", gpu=gpu, max_model_len=length)["kv_cache"][
                "max_concurrency"
            ]
        )
    current = page.locator("#capacity-svg circle.current-point")
    assert current.get_attribute("data-x") == "8192"

    # Load curve: each point is a /v1/simulations result for that concurrency.
    load = page.locator("#load-tpot-svg circle.point").all()
    assert load, "the load curve is drawn"
    first = load[0]
    simulated = httpx.post(
        f"{server}/v1/simulations",
        json={
            "model": "llama-3.1-8b",
            "gpu": gpu,
            "max_model_len": 8192,
            "benchmark": {
                "dataset_name": "random",
                "num_prompts": 20,
                "request_rate": "inf",
                "max_concurrency": 1,
                "random_input_len": 1024,
                "random_output_len": 256,
                "seed": 0,
            },
        },
        timeout=60,
    ).json()
    assert float(first.get_attribute("data-y") or 0) == simulated["result"]["median_tpot_ms"]
    assert page.locator("#load-tpot-svg line.slo").get_attribute("data-slo") == "50"

    # GPU comparison: the sweep's ranking, row for row (the page sends the plan fields and the workload).
    sweep = httpx.post(
        f"{server}/v1/plans/sweep",
        json={
            "model": "llama-3.1-8b",
            "max_model_len": 8192,
            "limit": 40,
            "workload": {
                "requests_per_second": 5,
                "prompt_tokens": 1024,
                "output_tokens": 256,
                "ttft_p95_seconds": 2.0,
                "tpot_seconds": 0.05,
            },
        },
        timeout=120,
    ).json()
    shown = [
        (r.get_attribute("data-gpu"), r.get_attribute("data-cost"))
        for r in page.locator("#compare-table tr[data-gpu]").all()
    ]
    expected = [
        (
            o["gpu"],
            ""
            if o["cost_per_million_output_tokens_usd"] is None
            else str(o["cost_per_million_output_tokens_usd"]),
        )
        for o in sweep["options"]
    ]
    assert [g for g, _ in shown] == [g for g, _ in expected]
    assert all(float(a or 0) == float(b or 0) for (_, a), (_, b) in zip(shown, expected, strict=True))
    assert page.locator("#compare-table tr.feasible").count() >= 1
    assert page.locator("#recommended").get_attribute("data-replicas") is not None
    assert watched.problems == []


def test_changing_the_gpu_redraws_without_a_reload(server: str, watched: Watched) -> None:
    page = watched.page
    page.goto(f"{server}/ui?model=llama-3.1-8b&gpu=l4&max_model_len=8192")
    _ready(page)
    page.evaluate("window.__same_document = true")
    before = _segments(page)
    page.select_option("#f-gpu", "h100-sxm-80gb")
    page.click("#plan-button")
    page.wait_for_function("new URLSearchParams(location.search).get('gpu') === 'h100-sxm-80gb'")
    _ready(page)
    page.wait_for_function(
        "(before) => document.querySelector('#memory-svg rect[data-segment=kv]').dataset.bytes !== before",
        arg=str(before["kv"]),
    )
    after = _segments(page)
    assert after != before
    assert after == _expected_segments(
        _plan(server, model="llama-3.1-8b", gpu="h100-sxm-80gb", max_model_len=8192)
    )
    assert page.evaluate("window.__same_document") is True
    assert watched.problems == []


def test_the_url_reproduces_the_view(server: str, watched: Watched, browser: Browser) -> None:
    page = watched.page
    page.goto(f"{server}/ui")
    _ready(page)
    page.fill("#f-model", "qwen2.5-7b")
    page.select_option("#f-gpu", "a100-sxm4-80gb")
    page.fill("#f-max_model_len", "16384")
    page.select_option("#f-kv_cache_dtype", "fp8")
    page.click("#plan-button")
    page.wait_for_function("new URLSearchParams(location.search).get('model') === 'qwen2.5-7b'")
    _ready(page)
    shown = _segments(page)
    other = browser.new_page()
    other.goto(page.url)
    _ready(other)
    assert other.input_value("#f-model") == "qwen2.5-7b"
    assert other.input_value("#f-kv_cache_dtype") == "fp8"
    assert _segments(other) == shown
    expected = _plan(
        server, model="qwen2.5-7b", gpu="a100-sxm4-80gb", max_model_len=16384, kv_cache_dtype="fp8"
    )
    assert shown == _expected_segments(expected)
    other.close()


def test_bad_input_names_the_field(server: str, watched: Watched) -> None:
    page = watched.page
    page.goto(f"{server}/ui?model=llama-3.1-8b&gpu=l4&max_model_len=8192")
    _ready(page)
    page.fill("#f-tensor_parallel_size", "0")
    page.click("#plan-button")
    page.wait_for_function("document.querySelector('#err-tensor_parallel_size').textContent !== ''")
    assert "greater than or equal to 1" in page.text_content("#err-tensor_parallel_size")
    assert page.get_attribute("#f-tensor_parallel_size", "aria-invalid") == "true"
    page.fill("#f-tensor_parallel_size", "1")
    page.fill("#f-model", "no-such-model")
    page.click("#plan-button")
    page.wait_for_function("document.querySelector('#err-model').textContent !== ''")
    assert "unknown model" in page.text_content("#err-model")
    # A 422 is an answer, not a console error the page caused; only the browser's own network line is logged.
    assert all("status of 422" in p for p in watched.problems), watched.problems


def test_a_pasted_manifest_shows_its_verdict_and_its_plan(server: str, watched: Watched) -> None:
    page = watched.page
    page.goto(f"{server}/ui?model=llama-3.1-8b&gpu=h100-sxm-80gb&max_model_len=8192")
    _ready(page)
    page.fill("#f-manifest", MANIFEST)
    page.click("#check-button")
    page.wait_for_selector(".check-result")
    verdicts = [r.get_attribute("data-verdict") for r in page.locator(".check-result").all()]
    assert verdicts == ["allowed", "denied"]
    page.click(".show-plan")
    page.wait_for_function("new URLSearchParams(location.search).get('gpu') === 'l4'")
    _ready(page)
    engine = page.input_value("#f-engine")
    assert engine == "vllm-0.11"  # from the image tag vllm/vllm-openai:v0.11.0
    expected = _plan(server, model="llama-3.1-8b", gpu="l4", max_model_len=8192, engine=engine)
    assert _segments(page) == _expected_segments(expected)
    assert watched.problems == []


def test_registered_deployments_are_listed_with_a_grafana_link(server: str, watched: Watched) -> None:
    page = watched.page
    page.goto(f"{server}/ui?model=llama-3.1-8b&gpu=l4&max_model_len=8192")
    page.wait_for_selector('#fleet-table tr[data-deployment="llm/chat"]')
    link = page.locator('#fleet-table tr[data-deployment="llm/chat"] a')
    assert (
        link.get_attribute("href") == "http://grafana.invalid/d/kvcap?var-namespace=llm&var-deployment=chat"
    )


def test_the_form_is_usable_from_the_keyboard_and_every_control_has_a_label(
    server: str, watched: Watched
) -> None:
    page = watched.page
    page.goto(f"{server}/ui?model=llama-3.1-8b&gpu=l4&max_model_len=8192")
    _ready(page)
    unlabeled = page.evaluate(
        """[...document.querySelectorAll('input, select, textarea')]
            .filter((c) => !c.labels || c.labels.length === 0).map((c) => c.id || c.name)"""
    )
    assert unlabeled == []
    page.focus("#f-model")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.tagName") in {"SUMMARY", "SELECT", "INPUT"}
    page.focus("#f-max_model_len")
    page.fill("#f-max_model_len", "4096")
    page.keyboard.press("Enter")
    page.wait_for_function("new URLSearchParams(location.search).get('max_model_len') === '4096'")
    _ready(page)
    narrow = page.context.new_page()
    narrow.set_viewport_size({"width": 380, "height": 800})
    narrow.goto(page.url)
    _ready(narrow)
    overflow = narrow.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
    assert overflow <= 1
    narrow.close()
