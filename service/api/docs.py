"""``/docs`` (Swagger UI) and ``/redoc`` that work without internet access.

FastAPI's default pages load their JavaScript and CSS from a CDN (jsDelivr) and a favicon from
fastapi.tiangolo.com, so in an air-gapped cluster they render blank. kvcap serves the assets itself: the
files come from the ``fastapi-offline`` package (MIT; it vendors Swagger UI 5 and ReDoc 2), mounted under
``/docs/static``, and the pages are FastAPI's own ``get_swagger_ui_html`` / ``get_redoc_html`` pointed at
them. Only the asset files of that package are used, not its ``FastAPIOffline`` app factory, so kvcap's app
stays a plain ``FastAPI``. URLs honour ``root_path`` (kvcap behind a path-prefix proxy).
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

STATIC_PATH = "/docs/static"
ASSETS = Path(str(files("fastapi_offline") / "static"))


def install_offline_docs(app: FastAPI) -> None:
    """Serve Swagger UI at ``/docs`` and ReDoc at ``/redoc`` from local assets (create the app with
    ``docs_url=None, redoc_url=None`` so FastAPI's CDN pages are not registered)."""
    app.mount(STATIC_PATH, StaticFiles(directory=ASSETS), name="docs-static")
    oauth2_redirect = "/docs/oauth2-redirect"

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return get_swagger_ui_html(
            openapi_url=f"{root}{app.openapi_url}",
            title=f"{app.title} - Swagger UI",
            oauth2_redirect_url=f"{root}{oauth2_redirect}",
            swagger_js_url=f"{root}{STATIC_PATH}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{STATIC_PATH}/swagger-ui.css",
            swagger_favicon_url=f"{root}{STATIC_PATH}/favicon.png",
        )

    @app.get(oauth2_redirect, include_in_schema=False)
    async def swagger_ui_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    @app.get("/redoc", include_in_schema=False)
    async def redoc(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return get_redoc_html(
            openapi_url=f"{root}{app.openapi_url}",
            title=f"{app.title} - ReDoc",
            redoc_js_url=f"{root}{STATIC_PATH}/redoc.standalone.js",
            redoc_favicon_url=f"{root}{STATIC_PATH}/favicon.png",
            with_google_fonts=False,
        )
