"""Text that may be stored: no NUL, no other control characters, no lone surrogates — on every database.

PostgreSQL refuses NUL in ``text`` and ``\\u0000`` in ``jsonb`` ("unsupported Unicode escape sequence"), and a
lone surrogate (``"\\ud800"`` is valid JSON) cannot be encoded to UTF-8 at all; SQLite stores both silently,
so the same request was a 500 on one database and a 201 on the other. Refusing them at the edge makes it a
422 naming the field on both. Tab, line feed and carriage return stay allowed: notes and sources are prose.

``SafeText`` is a mixin for request schemas: a ``field_validator("*")`` that walks every string of every field
— dictionary keys and values, list items, strings nested in ``hf_config`` — and names where the character is.
Nested models validate their own fields. ``RefuseControlCharacters`` does the same for paths and query
strings (``/v1/gpus/a%00b``, ``?q=%00``), which no schema sees.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import parse_qsl

from pydantic import BaseModel, field_validator

if TYPE_CHECKING:  # the CLI validates schemas offline without loading the web stack
    from starlette.types import ASGIApp, Receive, Scope, Send

# C0 controls except TAB, LF and CR; DEL; C1 controls; UTF-16 surrogates (never valid in UTF-8).
_FORBIDDEN = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff]")
_MAX_DEPTH = 64


def find_forbidden(value: object, path: str = "", depth: int = 0) -> tuple[str, str] | None:
    """``(where, character)`` of the first forbidden character in ``value`` (strings, dict keys, lists)."""
    if isinstance(value, str):
        match = _FORBIDDEN.search(value)
        return (path, match.group()) if match else None
    if depth > _MAX_DEPTH or isinstance(value, BaseModel):
        return None
    if isinstance(value, Mapping):
        for key, item in value.items():
            where = f"{path}.{key}" if path else str(key)
            found = find_forbidden(key, where, depth + 1) or find_forbidden(item, where, depth + 1)
            if found:
                return found
    elif isinstance(value, list | tuple | set | frozenset):
        for index, item in enumerate(value):
            found = find_forbidden(item, f"{path}[{index}]", depth + 1)
            if found:
                return found
    return None


def describe(character: str) -> str:
    return f"U+{ord(character):04X}"


class SafeText(BaseModel):
    """Refuses control characters and lone surrogates in every string field (see the module docstring).

    Response models that inherit a request schema set ``_check_text = False``: what was stored before this
    rule existed must stay readable.
    """

    _check_text: ClassVar[bool] = True

    @field_validator("*", mode="after")
    @classmethod
    def _no_control_characters(cls, value: Any) -> Any:
        if not cls._check_text or value is None or isinstance(value, bool | int | float):
            return value
        found = find_forbidden(value)
        if found:
            where, character = found
            inside = f" (at {where})" if where else ""
            raise ValueError(
                f"must not contain control characters or lone surrogates{inside}: found {describe(character)}"
            )
        return value


class RefuseControlCharacters:
    """422 for a request whose path or query string decodes to a forbidden character (pure ASGI)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            problem = _problem(scope)
            if problem is not None:
                await _reject(send, *problem)
                return
        await self.app(scope, receive, send)


def _problem(scope: Scope) -> tuple[list[str], str] | None:
    path = scope.get("path", "")
    match = _FORBIDDEN.search(path)
    if match:
        return ["path"], f"the path must not contain control characters: found {describe(match.group())}"
    query = scope.get("query_string", b"").decode("latin-1")
    if "%" not in query and not _FORBIDDEN.search(query):
        return None
    for name, value in parse_qsl(query, keep_blank_values=True, errors="surrogateescape"):
        found = _FORBIDDEN.search(name) or _FORBIDDEN.search(value)
        if found:
            return ["query", name], f"must not contain control characters: found {describe(found.group())}"
    return None


async def _reject(send: Send, loc: list[str], message: str) -> None:
    where = ".".join(loc)
    body = json.dumps(
        {
            "error": "RequestValidationError",
            "detail": f"{where}: {message}",
            "errors": [{"loc": loc, "msg": message, "type": "value_error"}],
        },
        ensure_ascii=True,
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 422,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})
