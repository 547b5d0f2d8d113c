"""``kvcap check -f <file|dir|->``: the command function; ``service.cli`` registers it on the ``kvcap`` app."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated

import typer

from service.admission.check_command import policy_config, render_check, run_check

if TYPE_CHECKING:  # imported when the command runs: `kvcap --help` and the other commands never load them
    import httpx


def _default_client() -> httpx.Client:
    import httpx

    return httpx.Client(timeout=30)


# How ``--server`` talks HTTP; tests swap in a client bound to an in-process app.
http_client: Callable[[], httpx.Client] = _default_client


# The command's body and its helpers are typer-free (``check_command``), so ``kvcap check`` can run them before
# typer is imported (``service.cli_fast``); the names stay importable from here.
_config = policy_config
render = render_check


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
    raise typer.Exit(run_check(filename, as_json=as_json, server=server, http_client=http_client))
