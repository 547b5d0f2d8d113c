"""Errors raised by the pure capacity core.

The core knows nothing of HTTP: the web edge (``service.api.errors``) maps these to status codes, the CLI to
exit codes. Every error names the input it is about, so a caller can point the user at the field to change.
"""

from __future__ import annotations


class CoreError(Exception):
    """Base class for every error the core raises."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field

    def __str__(self) -> str:
        return f"{self.field}: {self.message}" if self.field else self.message


class InvalidSpec(CoreError):
    """A model, GPU or engine setting is out of range or inconsistent (e.g. negative layers)."""


class StartRefusal(InvalidSpec):
    """Settings vLLM itself refuses before it serves (its own check, in its wording): a start that would fail,
    not a limit of kvcap's. Callers that judge a deployment (admission) deny these instead of passing them."""


class ConfigError(InvalidSpec):
    """A Hugging Face ``config.json`` could not be interpreted; ``field`` names the missing or odd key."""


class UnknownEngine(InvalidSpec):
    """The ``engine`` string names no engine profile (``ideal`` or ``vllm-<major>.<minor>`` from 0.8 on)."""
