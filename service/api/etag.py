"""HTTP optimistic concurrency: ETag / If-Match (RFC 9110 §13.1.1)."""

from __future__ import annotations

from service.errors import PreconditionFailed


def _tags(header: str) -> list[str]:
    return [tag.strip().removeprefix("W/") for tag in header.split(",") if tag.strip()]


def check_if_match(if_match: str | None, current_etag: str) -> None:
    """Raise 412 when ``If-Match`` is present and names neither ``*`` nor the current ETag."""
    if if_match is None:
        return
    tags = _tags(if_match)
    if "*" in tags or current_etag in tags:
        return
    raise PreconditionFailed(
        f"the resource changed: If-Match {if_match} does not match the current ETag {current_etag}; "
        "GET it again and retry with the new ETag"
    )


def none_match(if_none_match: str | None, current_etag: str) -> bool:
    """True when ``If-None-Match`` names the current ETag (the client's copy is fresh: answer 304)."""
    if if_none_match is None:
        return False
    tags = _tags(if_none_match)
    return "*" in tags or current_etag in tags
