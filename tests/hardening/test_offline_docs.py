"""``/docs`` and ``/redoc`` work without internet access: every asset they load is served by kvcap itself."""

from __future__ import annotations

import re

import httpx
import pytest

# src="…", href="…", ReDoc's spec-url="…", and the JavaScript string literals Swagger UI's page passes URLs
# in (url: '…', oauth2RedirectUrl: …).
_URL = re.compile(
    r"""(?:src|href|spec-url)\s*=\s*["']([^"']+)["']|\b(?:url|oauth2RedirectUrl)\s*:\s*["']([^"']+)["']"""
)


def referenced_urls(html: str) -> list[str]:
    return [a or b for a, b in _URL.findall(html)]


@pytest.mark.parametrize(
    ("page", "marker"),
    [("/docs", "SwaggerUIBundle"), ("/redoc", "Redoc")],
)
async def test_the_docs_pages_load_only_assets_kvcap_serves(
    client: httpx.AsyncClient, page: str, marker: str
) -> None:
    response = await client.get(page)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    urls = referenced_urls(response.text)
    assert "/openapi.json" in urls
    assets = [url for url in urls if url.startswith("/docs/static/")]
    assert assets, response.text
    for url in urls:
        assert url.startswith("/") and not url.startswith("//"), f"{page} loads {url} from elsewhere"
    assert "cdn." not in response.text and "fonts.googleapis" not in response.text
    scripts = []
    for url in assets:
        asset = await client.get(url)
        assert asset.status_code == 200, url
        assert len(asset.content) > 1000, url
        if url.endswith(".js"):
            assert "javascript" in asset.headers["content-type"], url
            scripts.append(asset.text)
    assert any(marker in script for script in scripts)


async def test_the_swagger_oauth2_redirect_page_is_served(client: httpx.AsyncClient) -> None:
    response = await client.get("/docs/oauth2-redirect")
    assert response.status_code == 200
    assert "oauth2" in response.text.lower()


async def test_the_docs_honour_a_path_prefix(client: httpx.AsyncClient) -> None:
    app = client._transport.app  # type: ignore[attr-defined]
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app, root_path="/kvcap"), base_url="http://test"
    ) as prefixed:
        html = (await prefixed.get("/docs")).text
    assert all(url.startswith("/kvcap/") for url in referenced_urls(html))
