"""``kvcap check``'s body, typer-free: ``service.cli_fast`` runs it before typer is imported, and the typer
command (``service.admission.cli.check``) runs the same function, so both print and exit alike."""

from __future__ import annotations

import builtins
import os
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

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


def check_lines(result: CheckResult) -> list[str]:
    """``render_check``'s lines as text, without their styles."""
    reason = f": {result.reason}" if result.reason else ""
    lines = [f"{result.verdict:<10} {result.ref} ({result.where}){reason}"]
    lines.extend(f"  warning {warning}" for warning in result.warnings)
    return lines


# What rich could print otherwise than as given (such a line goes to rich): markup or an escape (``[``, a
# backslash), an emoji code (``:name:``), control characters (stripped, tab-expanded or split into lines), and,
# to be safe, whitespace at a line's end (which rich's wrapping trims when a line is wrapped).
_NOT_VERBATIM = r"[\[\\\x00-\x1f\x7f-\x9f]|:\S*:|\s$"


def plain_stream(stream: TextIO) -> bool:
    """Whether rich's ``Console`` writes to ``stream`` no escape codes at all: not a terminal by each of its tests
    (``Console.is_terminal``: no ``FORCE_COLOR`` or ``TTY_COMPATIBLE``, not Jupyter, ``isatty()`` false), and not
    Windows, where it has renderers of its own. ``False`` when unsure: rich then prints as before."""
    if sys.platform == "win32" or hasattr(builtins, "get_ipython"):
        return False
    if "FORCE_COLOR" in os.environ or "TTY_COMPATIBLE" in os.environ:
        return False
    try:
        return not stream.isatty()
    except (AttributeError, ValueError):
        return False


class LinePrinter:
    """Prints ``kvcap check``'s lines to stdout or stderr byte for byte as a ``Console(soft_wrap=True)`` prints
    them, importing rich only for lines it would change or a stream it would style (a terminal).

    To a stream that is not a terminal rich writes a line with no markup, emoji code, control character or
    trailing whitespace as it is, then a newline, and flushes; a broken pipe ends the process with exit code 1
    and stdout sent to ``/dev/null`` (``Console.on_broken_pipe``)."""

    def __init__(self, *, stderr: bool = False) -> None:
        self.stderr = stderr
        self._console: Console | None = None

    def write(self, lines: Sequence[str]) -> bool:
        """Write ``lines`` as rich would and ``True``; ``False``, having written nothing, if rich must."""
        stream = sys.stderr if self.stderr else sys.stdout
        if not all(_verbatim(stream, line) for line in lines):
            return False
        try:
            for line in lines:
                stream.write(line + "\n")
                stream.flush()
        except BrokenPipeError:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            raise SystemExit(1) from None
        return True

    def console(self) -> Console:
        """The rich console for what ``write`` refuses (made once, when first needed)."""
        if self._console is None:
            self._console = _console(stderr=self.stderr)
        return self._console


def _verbatim(stream: TextIO, text: str) -> bool:
    if re.search(_NOT_VERBATIM, text) or not plain_stream(stream):
        return False
    try:
        text.encode(getattr(stream, "encoding", None) or "utf-8", getattr(stream, "errors", None) or "strict")
    except (LookupError, UnicodeError):  # rich's write would raise, with its own message
        return False
    return True


def print_check(printer: LinePrinter, result: CheckResult) -> None:
    """``render_check``'s lines, written as plain text where rich would write them so."""
    if not printer.write(check_lines(result)):
        render_check(printer.console(), result)


def run_check(
    filename: Sequence[str],
    *,
    as_json: bool = False,
    server: str | None = None,
    http_client: Callable[[], httpx.Client] | None = None,
) -> int:
    """``kvcap check``: a verdict per object; 0 all pass, 1 any denied, 2 unreadable input or a server error.

    rich is imported only for a line it would print otherwise than as plain text (to a terminal, say): ``--json``
    and the lines of a pipeline's check never load it."""
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
        out, err = LinePrinter(), LinePrinter(stderr=True)
        for result in results:
            print_check(out, result)
        counts = summary(results)
        parts = [
            f"{counts[k]} {k.replace('_', ' ')}"
            for k in ("allowed", "denied", "would_deny", "skipped", "unreadable")
            if counts[k]
        ]
        line = f"{counts['objects']} object(s): {', '.join(parts) or 'none'}"
        if not err.write([line]):
            err.console().print(line, highlight=False)
    return exit_code(results)
