"""Logging: one JSON object per line (or readable text) for kvcap's, uvicorn's and every library's loggers.

Every logger stays a standard-library logger; one handler on the root logger formats all records through
structlog's ``ProcessorFormatter`` (structlog docs, "Rendering Using structlog-based Formatters Within
logging"), so uvicorn's access and error logs and kvcap's own lines share one shape:

    {"event": "GET /v1/gpus 200", "level": "info", "logger": "uvicorn.access", "timestamp": "…Z",
     "request_id": "9f1c…", "client": "10.0.0.7:51234", "method": "GET", "path": "/v1/gpus", "status": 200}

``request_id`` comes from ``structlog.contextvars``, bound per request by ``service.api.request_id``; it is in
every line logged while that request runs, uvicorn's access line included (uvicorn writes it from the
response's ``send``, inside the request's context).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from typing import Any

import structlog
from structlog.typing import Processor

EXTRA_FIELDS = ("uid", "namespace", "deployment", "target", "verdict")
"""``extra=`` keys kvcap's log calls attach (admission uid, deployment, scrape target …), copied to the object."""

OWNED_LOGGERS = ("kvcap", "uvicorn", "uvicorn.error", "uvicorn.access")


def _uvicorn_access_fields(
    _logger: Any, _method: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """uvicorn's access record carries (client, method, path, HTTP version, status) as its ``args``
    (``uvicorn/protocols/http/*_impl.py``): keep them as fields, not only inside the message. The formatter
    passes every foreign record's args as ``positional_args`` (``pass_foreign_args``); they are dropped here
    for all other records, whose message already has them."""
    args = event_dict.pop("positional_args", None)
    record = event_dict.get("_record")
    if record is None or record.name != "uvicorn.access":
        return event_dict
    if isinstance(args, tuple) and len(args) == 5:
        client, method, path, http_version, status = args
        event_dict.update(
            client=client, method=method, path=path, http_version=http_version, status=int(status)
        )
    return event_dict


def _shared_processors() -> list[Processor]:
    return [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.stdlib.ExtraAdder(allow=EXTRA_FIELDS),
        _uvicorn_access_fields,
    ]


def formatter(fmt: str = "json") -> logging.Formatter:
    renderer: Processor = (
        structlog.processors.JSONRenderer() if fmt == "json" else structlog.dev.ConsoleRenderer(colors=False)
    )
    return structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=_shared_processors(),
        pass_foreign_args=True,
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            renderer,
        ],
    )


class KvcapHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """The handler ``configure_logging`` installs; a later call replaces it, and leaves others' handlers alone."""


def configure_logging(level: str = "INFO", fmt: str = "text", *, stream: Any = None) -> None:
    """Route every logger through one handler on the root logger (idempotent: replaces an earlier set-up).

    kvcap's and uvicorn's loggers log at ``level`` and propagate to it; other libraries keep the root logger's
    level (WARNING unless something else set it), so a DEBUG kvcap does not print every SQL statement.
    """
    handler = KvcapHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(formatter(fmt))
    root = logging.getLogger()
    root.handlers[:] = [h for h in root.handlers if not isinstance(h, KvcapHandler)] + [handler]
    for name in OWNED_LOGGERS:
        logger = logging.getLogger(name)
        logger.handlers[:] = [h for h in logger.handlers if not isinstance(h, KvcapHandler)]
        logger.setLevel(level)
        logger.propagate = True
