"""FastAPI dependencies shared by every router: settings, the per-request session and write authorisation."""

from __future__ import annotations

import hmac
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.ext.asyncio import AsyncSession

from service.db.session import begin_write, unit_of_work
from service.errors import Forbidden, ServiceUnavailable, Unauthorized
from service.settings import Settings, hash_token


def get_app_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


SettingsDep = Annotated[Settings, Depends(get_app_settings)]


async def get_session(request: Request) -> AsyncIterator[AsyncSession]:
    """One unit of work per request: commit when the handler returns, roll back when it raises."""
    maker = getattr(request.app.state, "sessionmaker", None)
    if maker is None:
        raise ServiceUnavailable("the database is not configured")
    async with maker() as session:
        if request.method not in ("GET", "HEAD", "OPTIONS"):
            await begin_write(session)
        async for unit in unit_of_work(session):
            yield unit


# scope="function": the commit happens before the response is sent, so a failed commit is never reported as
# success to the client.
SessionDep = Annotated[AsyncSession, Depends(get_session, scope="function")]


# Declares the scheme in the OpenAPI document (``securitySchemes.bearer``, and ``security`` on every write) so
# clients and the schemathesis fuzz test know which operations need a token; the check itself is below.
bearer_scheme = HTTPBearer(
    auto_error=False, scheme_name="bearer", description="a token from KVCAP_API_TOKENS"
)
BearerDep = Annotated[HTTPAuthorizationCredentials | None, Depends(bearer_scheme)]


def require_writer(settings: SettingsDep, credentials: BearerDep) -> None:
    """Writes need a configured bearer token (401 without one, 403 for a wrong one); reads stay open.

    Tokens are held only as SHA-256 digests and compared with ``hmac.compare_digest`` against every digest, so
    neither the comparison time nor an early exit tells an attacker how close a guess was.
    """
    if not settings.auth_enabled:
        return
    token = credentials.credentials.strip() if credentials is not None else ""
    if not token:
        raise Unauthorized()
    presented = hash_token(token)
    matched = False
    for digest in settings.token_hashes:
        matched |= hmac.compare_digest(presented, digest)
    if not matched:
        raise Forbidden("the bearer token is not allowed to write")


WriterDep = Depends(require_writer)
