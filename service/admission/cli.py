"""``kvcap check -f <file|dir|->``: the command function; ``service.cli`` registers it on the ``kvcap`` app."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape

if TYPE_CHECKING:  # imported when the command runs: `kvcap --help` and the other commands never load them
    import httpx

    from service.admission.check import CheckResult
    from service.admission.policy import PolicyConfig

_STYLE = {
    "allowed": "green",
    "denied": "red",
    "would_deny": "yellow",
    "skipped": "dim",
    "unreadable": "red",
}


def _default_client() -> httpx.Client:
    import httpx

    return httpx.Client(timeout=30)


# How ``--server`` talks HTTP; tests swap in a client bound to an in-process app.
http_client: Callable[[], httpx.Client] = _default_client


def _config() -> PolicyConfig:
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


def render(console: Console, result: CheckResult) -> None:
    style = _STYLE.get(result.verdict, "bold")
    reason = f": {escape(result.reason)}" if result.reason else ""
    console.print(
        f"[{style}]{result.verdict:<10}[/{style}] {escape(result.ref)} [dim]({escape(result.where)})[/dim]{reason}",
        highlight=False,
        soft_wrap=True,
    )
    for warning in result.warnings:
        console.print(f"  [yellow]warning[/yellow] {escape(warning)}", highlight=False, soft_wrap=True)


def check(
    filename: Annotated[
        list[str],
        typer.Option(
            "--filename",
            "-f",
            "--file",
            help="a YAML/JSON file, a directory (searched recursively) or - for stdin; repeatable",
        ),
    ],
    as_json: Annotated[bool, typer.Option("--json", help="print the results as JSON")] = False,
    server: Annotated[
        str | None,
        typer.Option(help="ask a kvcap server's /admission/validate instead of the built-in catalog"),
    ] = None,
) -> None:
    """Admission verdict per object. Exit 0 when all pass, 1 when any is denied, 2 for unreadable input."""
    from service.admission.check import (
        Document,
        ServerError,
        check_offline,
        check_remote,
        exit_code,
        load,
        report_json,
        summary,
        unreadable,
    )

    out = Console(soft_wrap=True)
    err = Console(stderr=True, soft_wrap=True)
    items = load(filename, sys.stdin)
    results: list[CheckResult] = []
    if server:
        with http_client() as client:
            for item in items:
                if not isinstance(item, Document):
                    results.append(unreadable(item))
                    continue
                try:
                    results.append(check_remote(item, client, server))
                except ServerError as exc:
                    err.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False)
                    raise typer.Exit(2) from None
    else:
        from service.catalog.builtin import builtin_snapshot

        snapshot, config = builtin_snapshot(), _config()
        results = [
            check_offline(item, snapshot, config) if isinstance(item, Document) else unreadable(item)
            for item in items
        ]
    if as_json:
        typer.echo(report_json(results))
    else:
        for result in results:
            render(out, result)
        counts = summary(results)
        parts = [
            f"{counts[k]} {k.replace('_', ' ')}"
            for k in ("allowed", "denied", "would_deny", "skipped", "unreadable")
            if counts[k]
        ]
        err.print(f"{counts['objects']} object(s): {', '.join(parts) or 'none'}", highlight=False)
    raise typer.Exit(exit_code(results))
