"""Service errors that carry their HTTP status.

One base class, one rendering (``service.api.errors``): every error response body is
``{"error": "<ErrorName>", "detail": "<what went wrong and what to do>"}``, plus ``"errors"`` — a list of
``{"loc", "msg", "type"}`` — when individual fields are at fault.
"""

from __future__ import annotations

from typing import Any


class ServiceError(Exception):
    status_code = 500

    def __init__(
        self,
        message: str,
        *,
        status_code: int | None = None,
        headers: dict[str, str] | None = None,
        errors: list[dict[str, Any]] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if status_code is not None:
            self.status_code = status_code
        self.headers = headers
        self.errors = errors


class BadRequest(ServiceError):
    status_code = 400


class Unauthorized(ServiceError):
    status_code = 401

    def __init__(self, message: str = "a bearer token is required for this request") -> None:
        super().__init__(message, headers={"WWW-Authenticate": 'Bearer realm="kvcap"'})


class Forbidden(ServiceError):
    status_code = 403


class NotFound(ServiceError):
    status_code = 404


class Conflict(ServiceError):
    status_code = 409


class PreconditionFailed(ServiceError):
    status_code = 412


class PayloadTooLarge(ServiceError):
    status_code = 413


class Unprocessable(ServiceError):
    status_code = 422

    @classmethod
    def for_field(cls, field: str | None, message: str, *, location: str = "body") -> Unprocessable:
        loc: list[str | int] = [location]
        if field:
            loc.extend(
                int(part) if part.isdigit() else part
                for part in field.replace("[", ".").replace("]", "").split(".")
            )
        detail = f"{field}: {message}" if field else message
        return cls(detail, errors=[{"loc": loc, "msg": message, "type": "value_error"}])


class ServiceUnavailable(ServiceError):
    status_code = 503
