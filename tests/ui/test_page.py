"""``GET /ui``: the page, its inline catalog, and assets that never leave the kvcap server."""

from __future__ import annotations

import json
import re
from importlib import resources

import httpx

from service.catalog.builtin import builtin_snapshot
from service.catalog.snapshot import CatalogHolder
from service.ui.router import _inline_json, page_config

STATIC = resources.files("service.ui") / "static"


def _inline_config(html: str) -> dict[str, object]:
    match = re.search(r'<script id="kvcap-config" type="application/json">(.*?)</script>', html, re.S)
    assert match, "the page carries its catalog inline"
    value: dict[str, object] = json.loads(match.group(1))
    return value


async def test_the_page_lists_every_catalog_model_and_gpu_inline(
    client: httpx.AsyncClient, app: object
) -> None:
    response = await client.get("/ui")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    config = _inline_config(response.text)
    snapshot = app.state.catalog.snapshot  # type: ignore[attr-defined]
    assert config["models"] == sorted(snapshot.models)
    gpus = config["gpus"]
    assert isinstance(gpus, list)
    assert [g["name"] for g in gpus] == sorted(snapshot.gpus)
    l4 = next(g for g in gpus if g["name"] == "l4")
    assert l4["memory_bytes"] == snapshot.gpus["l4"].spec.memory_bytes


async def test_the_scripts_and_styles_are_served_by_kvcap(client: httpx.AsyncClient) -> None:
    for path, kind in (("/ui/static/app.js", "javascript"), ("/ui/static/app.css", "css")):
        response = await client.get(path)
        assert response.status_code == 200, path
        assert kind in response.headers["content-type"]


def test_nothing_on_the_page_is_fetched_from_another_host() -> None:
    """Air-gapped clusters: no CDN, no font service, no absolute URL to load from (links in text are fine)."""
    for name in ("index.html", "app.js", "app.css"):
        text = (STATIC / name).read_text()
        loads = re.findall(r'(?:src|href)\s*=\s*["\'](https?:)?//', text) + re.findall(
            r"@import|url\(\s*['\"]?https?:", text
        )
        assert not loads, f"{name} loads from another host"
        assert 'fetch("http' not in text and "fetch('http" not in text


def test_inline_data_cannot_close_the_script_element() -> None:
    text = _inline_json({"models": ["</script><script>alert(1)</script>"], "note": "a & b"})
    assert "</script>" not in text and "<" not in text and "&" not in text
    assert json.loads(text)["models"] == ["</script><script>alert(1)</script>"]


def test_the_page_config_says_where_grafana_is() -> None:
    config = page_config(CatalogHolder(builtin_snapshot()), "https://grafana.example/d/kvcap")
    assert config["grafana_url"] == "https://grafana.example/d/kvcap"
