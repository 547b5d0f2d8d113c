"""``GET /ui``: the plan explorer page, and its two static assets.

Why this shape: the page is one HTML document, one stylesheet and one ES module of plain JavaScript that draws
SVG. There is no front-end build and no chart library, so nothing is fetched from a CDN or a registry at run time
and the page works in an air-gapped cluster; the three files ship inside the Python package.

Every number on the page comes from the public API (``/v1/plans``, ``/v1/plans/sweep``,
``/v1/plans/recommend``, ``/v1/simulations``, ``/v1/checks``, ``/v1/deployments``): the browser computes layout
only. The HTML carries the catalog's model and GPU names inline so the form renders without an API call.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from string import Template

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from service.catalog.snapshot import CatalogHolder

router = APIRouter(tags=["ui"])

STATIC = resources.files("service.ui") / "static"


@cache
def _page_template() -> Template:
    return Template((STATIC / "index.html").read_text(encoding="utf-8"))


def _inline_json(value: object) -> str:
    """JSON safe inside a ``<script>`` element: ``<``, ``>`` and ``&`` are escaped so no data closes it."""
    text = json.dumps(value, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def page_config(holder: CatalogHolder, grafana_url: str | None) -> dict[str, object]:
    snapshot = holder.snapshot
    models = sorted(snapshot.models)
    gpus = [
        {
            "name": gpu.name,
            "display_name": gpu.entry.display_name,
            "memory_bytes": gpu.spec.memory_bytes,
            "price_per_hour_usd": gpu.entry.price_per_hour_usd,
        }
        for gpu in sorted(snapshot.gpus.values(), key=lambda g: g.name)
    ]
    return {"models": models, "gpus": gpus, "grafana_url": grafana_url}


@router.get("/ui", response_class=HTMLResponse, summary="Plan explorer (web page)", include_in_schema=False)
async def ui_page(request: Request) -> HTMLResponse:
    holder: CatalogHolder = request.app.state.catalog
    grafana_url = getattr(request.app.state.settings, "ui_grafana_url", None)
    html = _page_template().substitute(config=_inline_json(page_config(holder, grafana_url)))
    return HTMLResponse(html, headers={"Cache-Control": "no-cache"})
