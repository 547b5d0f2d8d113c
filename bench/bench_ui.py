"""The plan explorer's first render in Chromium, against a bare page from the same server making one API call.

First render is the moment the verdict and the memory bar are drawn (``performance.mark("kvcap-first-render")``
in ``app.js``), measured from navigation start; the baseline is a minimal HTML page that fetches ``/healthz``
and writes the answer, served by the same uvicorn in the same run. Needs Chromium and Playwright; without them
the row says so.

    python -m bench.bench_ui
"""

from __future__ import annotations

import shutil
import socket
import statistics
import tempfile
import threading
import time
from typing import Any

BARE = """<!doctype html><html><head><title>bare</title><link rel="icon" href="data:,"></head><body>
<script>fetch('/healthz').then(r => r.json()).then(d => { document.body.textContent = JSON.stringify(d);
performance.mark('bare-render'); });</script></body></html>"""


def _serve() -> tuple[str, Any]:
    import httpx
    import uvicorn
    from fastapi.responses import HTMLResponse

    from service.app import create_app
    from service.db import migrate
    from service.settings import Settings

    folder = tempfile.mkdtemp(prefix="kvcap-bench-ui-")
    url = f"sqlite+aiosqlite:///{folder}/ui.db"
    migrate.upgrade(url)
    app = create_app(Settings(database_url=url, scrape_enabled=False, log_level="WARNING"))

    @app.get("/bench-bare", response_class=HTMLResponse, include_in_schema=False)
    async def bare() -> HTMLResponse:
        return HTMLResponse(BARE)

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    threading.Thread(target=server.run, daemon=True).start()
    base = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            httpx.get(f"{base}/healthz", timeout=1)
            break
        except httpx.HTTPError:
            time.sleep(0.1)
    return base, server


def _mark_ms(page: Any, url: str, mark: str) -> float:
    page.goto(url)
    page.wait_for_function(f"performance.getEntriesByName('{mark}').length > 0", timeout=60_000)
    value: float = page.evaluate(f"performance.getEntriesByName('{mark}')[0].startTime")
    return value


def run(repeats: int = 9) -> dict[str, Any] | None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return None
    if chromium is None:
        return None
    base, server = _serve()
    page_url = f"{base}/ui?model=llama-3.1-8b&gpu=h100-sxm-80gb&max_model_len=8192"
    ui: list[float] = []
    bare: list[float] = []
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
            page = browser.new_page()
            _mark_ms(page, page_url, "kvcap-first-render")  # warm the server's caches and the browser
            for _ in range(repeats):  # interleaved, so drift affects both alike
                bare.append(_mark_ms(page, f"{base}/bench-bare", "bare-render"))
                ui.append(_mark_ms(page, page_url, "kvcap-first-render"))
            browser.close()
    finally:
        server.should_exit = True
    return {
        "ui_ms": statistics.median(ui),
        "bare_ms": statistics.median(bare),
        "ui_min_ms": min(ui),
        "repeats": repeats,
    }


if __name__ == "__main__":
    result = run()
    if result is None:
        print("Chromium or Playwright not installed: no measurement")
    else:
        print(
            f"/ui first render {result['ui_ms']:.1f} ms (min {result['ui_min_ms']:.1f}) vs bare page "
            f"{result['bare_ms']:.1f} ms: {result['ui_ms'] / result['bare_ms']:.2f}×"
        )
