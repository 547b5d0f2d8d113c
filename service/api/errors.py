"""Rendering of every error in one JSON shape, and the mapping of core and database errors to statuses.

``{"error": "<ErrorName>", "detail": "<message>", "errors": [{"loc": [...], "msg": ..., "type": ...}]}``;
``errors`` appears when specific fields are at fault (validation), so a client can highlight them.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DBAPIError, IntegrityError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from sqlalchemy.orm.exc import StaleDataError
from starlette.exceptions import HTTPException as StarletteHTTPException

from service.core.errors import CoreError
from service.errors import ServiceError

logger = logging.getLogger("kvcap.api")


def error_body(error: str, detail: str, errors: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"error": error, "detail": detail}
    if errors:
        body["errors"] = errors
    return body


def _json(status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(status_code=status, content=jsonable_encoder(body), headers=headers)


def _describe_validation(errors: list[dict[str, Any]]) -> str:
    parts = []
    for err in errors[:5]:
        loc = ".".join(str(p) for p in err.get("loc", ()) if p not in ("body",))
        parts.append(f"{loc or 'body'}: {err.get('msg')}")
    more = f" (+{len(errors) - 5} more)" if len(errors) > 5 else ""
    return "; ".join(parts) + more


def _clean(errors: list[Any]) -> list[dict[str, Any]]:
    cleaned = []
    for err in errors:
        item = {
            "loc": list(err.get("loc", ())),
            "msg": str(err.get("msg", "")),
            "type": str(err.get("type", "")),
        }
        cleaned.append(item)
    return cleaned


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ServiceError)
    async def _service_error(_request: Request, exc: ServiceError) -> JSONResponse:
        return _json(exc.status_code, error_body(type(exc).__name__, exc.message, exc.errors), exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = _clean(list(exc.errors()))
        return _json(422, error_body("RequestValidationError", _describe_validation(errors), errors))

    @app.exception_handler(CoreError)
    async def _core_error(_request: Request, exc: CoreError) -> JSONResponse:
        errors = None
        if exc.field:
            errors = [{"loc": ["body", *exc.field.split(".")], "msg": exc.message, "type": "value_error"}]
        return _json(422, error_body(type(exc).__name__, str(exc), errors))

    @app.exception_handler(StaleDataError)
    async def _stale(_request: Request, _exc: StaleDataError) -> JSONResponse:
        return _json(
            412,
            error_body(
                "PreconditionFailed", "the resource was changed by another request; GET it again and retry"
            ),
        )

    @app.exception_handler(IntegrityError)
    async def _integrity(_request: Request, exc: IntegrityError) -> JSONResponse:
        logger.info("integrity error: %s", exc.orig)
        return _json(409, error_body("Conflict", "the change conflicts with stored data (duplicate name?)"))

    async def _unavailable(_request: Request, exc: Exception) -> JSONResponse:
        logger.warning("database unavailable: %s", type(exc).__name__)
        return _json(
            503,
            error_body(
                "ServiceUnavailable", "the database is unavailable; the change was not stored, retry later"
            ),
            {"Retry-After": "5"},
        )

    for exc_type in (OperationalError, InterfaceError, PoolTimeoutError, ConnectionError, OSError):
        app.add_exception_handler(exc_type, _unavailable)

    @app.exception_handler(DBAPIError)
    async def _dbapi(request: Request, exc: DBAPIError) -> JSONResponse:
        if exc.connection_invalidated:
            return await _unavailable(request, exc)
        logger.exception("database error")
        return _json(500, error_body("InternalServerError", "an unexpected database error occurred"))

    @app.exception_handler(StarletteHTTPException)
    async def _http(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        names = {404: "NotFound", 405: "MethodNotAllowed", 406: "NotAcceptable", 413: "PayloadTooLarge"}
        return _json(
            exc.status_code,
            error_body(names.get(exc.status_code, "HTTPError"), str(exc.detail)),
            getattr(exc, "headers", None),
        )

    @app.exception_handler(Exception)
    async def _unexpected(_request: Request, exc: Exception) -> JSONResponse:
        logger.exception("unhandled error: %s", type(exc).__name__)
        return _json(500, error_body("InternalServerError", "an unexpected error occurred"))
