"""Rendering of every error in one JSON shape, and the mapping of core and database errors to statuses.

``{"error": "<ErrorName>", "detail": "<message>", "errors": [{"loc": [...], "msg": ..., "type": ...}]}``;
``errors`` appears when specific fields are at fault (validation), so a client can highlight them.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from sqlalchemy.exc import DBAPIError, IntegrityError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from sqlalchemy.orm.exc import StaleDataError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import compile_path

from service.core.errors import CoreError
from service.errors import ServiceError

logger = logging.getLogger("kvcap.api")


class FieldError(BaseModel):
    loc: list[str | int] = Field(description='where the problem is, e.g. ["body", "max_model_len"]')
    msg: str
    type: str


class ErrorBody(BaseModel):
    """The body of every error response (4xx and 5xx)."""

    error: str = Field(description="error name, e.g. NotFound, RequestValidationError, ServiceUnavailable")
    detail: str = Field(description="what went wrong and what to do")
    errors: list[FieldError] = Field(
        default_factory=list, description="the fields at fault (present when specific fields are)"
    )


def document_error_shape(app: FastAPI) -> None:
    """Declare ``ErrorBody`` for every 4xx/5xx response in the OpenAPI document.

    FastAPI documents 422 as its own ``HTTPValidationError`` (``detail`` a list) and other declared errors
    without a body; kvcap renders all of them as ``ErrorBody``, so the document says so. A response that
    declares its own body (``/readyz``'s 503) keeps it.
    """
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        schema = generate()  # FastAPI's own cache: the same dict until the routes change
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        if "ErrorBody" in components:
            return schema
        body = ErrorBody.model_json_schema(ref_template="#/components/schemas/{model}")
        components.update(body.pop("$defs", {}))
        components["ErrorBody"] = body
        content = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}
        for operations in schema.get("paths", {}).values():
            for operation in operations.values():
                for status, response in operation.get("responses", {}).items():
                    declared = json.dumps(response.get("content", {}))
                    if status[0] in "45" and (declared == "{}" or "HTTPValidationError" in declared):
                        response["content"] = content
        for name in ("HTTPValidationError", "ValidationError"):
            if f'"#/components/schemas/{name}"' not in json.dumps(schema):
                components.pop(name, None)
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


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


def _allowed_methods(request: Request) -> str | None:
    """Every method the API serves at the request's path (RFC 9110 §15.5.6), from the OpenAPI document.

    Starlette answers 405 from the first route whose path matches and lists only that route's methods (or
    none); kvcap serves GET, PATCH and DELETE of one path from separate routes.
    """
    paths: dict[str, dict[str, Any]] = request.app.openapi().get("paths", {})
    path = request.url.path
    # A literal path (``/v1/models/import``) is its own resource, not an instance of ``/v1/models/{name}``.
    matching = [path] if path in paths else [t for t in paths if compile_path(t)[0].match(path)]
    methods = {method.upper() for template in matching for method in paths[template]}
    if "GET" in methods:
        methods.add("HEAD")
    return ", ".join(sorted(methods)) or None


def install_error_handlers(app: FastAPI) -> None:
    document_error_shape(app)

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
    async def _stale(request: Request, _exc: StaleDataError) -> JSONResponse:
        # Writers lock the row they change (``for_update``), so this is a race the locks did not cover. 412
        # answers a precondition, and only a request that set one (If-Match) may be told it failed; without
        # one the write was simply not applied, a 409 to retry.
        if request.headers.get("if-match") is None:
            return _json(
                409,
                error_body(
                    "Conflict",
                    "the resource was changed by another request at the same time; retry the request",
                ),
            )
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
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        names = {
            404: "NotFound",
            405: "MethodNotAllowed",
            406: "NotAcceptable",
            413: "PayloadTooLarge",
            415: "UnsupportedMediaType",
        }
        headers = getattr(exc, "headers", None)
        if exc.status_code == 400 and isinstance(exc.__cause__, UnicodeDecodeError):
            # FastAPI's 400 for a JSON body that is not UTF-8; malformed JSON is a 422 everywhere else.
            message = "the body is not UTF-8 encoded JSON"
            errors = [{"loc": ["body"], "msg": message, "type": "json_invalid"}]
            return _json(422, error_body("RequestValidationError", f"body: {message}", errors))
        allowed = _allowed_methods(request) if exc.status_code == 405 else None
        if allowed:
            headers = {**(headers or {}), "Allow": allowed}
        return _json(
            exc.status_code, error_body(names.get(exc.status_code, "HTTPError"), str(exc.detail)), headers
        )

    @app.exception_handler(Exception)
    async def _unexpected(_request: Request, exc: Exception) -> JSONResponse:
        logger.exception("unhandled error: %s", type(exc).__name__)
        return _json(500, error_body("InternalServerError", "an unexpected error occurred"))
