"""``kvcap check``'s body, typer-free: ``service.cli_fast`` runs it before typer is imported, and the typer
command (``service.admission.cli.check``) runs the same function, so both print and exit alike."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import httpx
    from rich.console import Console

    from service.admission.check import CheckResult
    from service.admission.policy import PolicyConfig

_STYLE = {
    "allowed": "green",
    "denied": "red",
    "would_deny": "yellow",
    "skipped": "dim",
    "unreadable": "red",
}


def policy_config() -> PolicyConfig:
    """Enforce mode always (a pipeline wants the real verdict); the headroom ratio from the environment."""
    from service.admission.policy import PolicyConfig

    # Settings (pydantic-settings) costs more to import than the whole check: read it only when a value could
    # differ from the default, i.e. the variable is set or a .env file is there (names match case-insensitively).
    variable = "KVCAP_ADMISSION_LOW_HEADROOM_RATIO"
    if not any(name.upper() == variable for name in os.environ) and not Path(".env").exists():
        return PolicyConfig(mode="enforce")
    try:
        from service.settings import get_settings

        return PolicyConfig(mode="enforce", low_headroom_ratio=get_settings().admission_low_headroom_ratio)
    except Exception:  # a broken KVCAP_* variable must not stop an offline check
        return PolicyConfig(mode="enforce")


def _console(*, stderr: bool = False) -> Console:
    from rich.console import Console

    return Console(stderr=stderr, soft_wrap=True)


def render_check(console: Console, result: CheckResult) -> None:
    from rich.markup import escape

    style = _STYLE.get(result.verdict, "bold")
    reason = f": {escape(result.reason)}" if result.reason else ""
    console.print(
        f"[{style}]{result.verdict:<10}[/{style}] {escape(result.ref)} [dim]({escape(result.where)})[/dim]{reason}",
        highlight=False,
        soft_wrap=True,
    )
    for warning in result.warnings:
        console.print(f"  [yellow]warning[/yellow] {escape(warning)}", highlight=False, soft_wrap=True)


def run_check(
    filename: Sequence[str],
    *,
    as_json: bool = False,
    server: str | None = None,
    http_client: Callable[[], httpx.Client] | None = None,
) -> int:
    """``kvcap check``: a verdict per object; 0 all pass, 1 any denied, 2 unreadable input or a server error.

    rich is imported only to print lines (``--json`` prints the report alone and never loads it)."""
    from service.admission.check import (
        Document,
        ServerError,
        check_offline,
        check_remote,
        exit_code,
        load,
        report_json,
        summary,
    )
    from service.admission.check import (
        unreadable as unreadable_result,
    )

    items = load(list(filename), sys.stdin)
    results: list[CheckResult] = []
    if server:
        assert http_client is not None
        with http_client() as client:
            for item in items:
                if not isinstance(item, Document):
                    results.append(unreadable_result(item))
                    continue
                try:
                    results.append(check_remote(item, client, server))
                except ServerError as exc:
                    from rich.markup import escape

                    _console(stderr=True).print(f"[red]error:[/red] {escape(str(exc))}", highlight=False)
                    return 2
    else:
        from service.catalog.offline import offline_snapshot  # builtin_snapshot's, without the schemas

        snapshot, config = offline_snapshot(), policy_config()
        results = [
            check_offline(item, snapshot, config) if isinstance(item, Document) else unreadable_result(item)
            for item in items
        ]
    if as_json:
        print(report_json(results), flush=True)  # noqa: T201 (the command's output)
    else:
        out = _console()
        for result in results:
            render_check(out, result)
        counts = summary(results)
        parts = [
            f"{counts[k]} {k.replace('_', ' ')}"
            for k in ("allowed", "denied", "would_deny", "skipped", "unreadable")
            if counts[k]
        ]
        _console(stderr=True).print(
            f"{counts['objects']} object(s): {', '.join(parts) or 'none'}", highlight=False
        )
    return exit_code(results)
