"""`kvcap check`'s lines written without rich are the very bytes rich's console writes to a pipe or a file.

``LinePrinter`` writes a line itself only where rich would write it unchanged (a stream that is not a terminal, no
markup, emoji code or control character in it); every other line goes to rich. Each result below is printed
both ways, to a stream that is not a terminal, and the two texts must be equal.
"""

from __future__ import annotations

import io
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from service.admission.check import CheckResult
from service.admission.check_command import LinePrinter, check_lines, print_check, render_check

VERDICTS = ("allowed", "denied", "would_deny", "skipped", "unreadable")


def _result(
    verdict: str = "allowed", reason: str = "", warnings: tuple[str, ...] = (), name: str | None = "llama"
) -> CheckResult:
    return CheckResult(
        where="chart.yaml#4",
        kind="Deployment",
        namespace="team-a",
        name=name,
        verdict=verdict,
        reason=reason,
        warnings=warnings,
    )


def _by_rich(result: CheckResult) -> str:
    out = io.StringIO()
    render_check(Console(file=out, soft_wrap=True), result)
    return out.getvalue()


def _by_printer(result: CheckResult, monkeypatch: pytest.MonkeyPatch) -> tuple[str, bool]:
    """The text ``print_check`` writes, and whether it needed rich for it."""
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    printer = LinePrinter()
    print_check(printer, result)
    return out.getvalue(), printer._console is not None


@pytest.fixture(autouse=True)
def _no_forced_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("FORCE_COLOR", "TTY_COMPATIBLE"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize(
    "result",
    [
        _result(reason="llama-3.1-8b on 1 × l4 (TP 1, PP 1): 4.53 requests of 8,192 tokens at once"),
        _result("denied", "weights do not fit: 131.45 GiB per GPU", ("the GPU has 22.49 GiB",)),
        _result("skipped", "not a vLLM workload", name=None),
        _result("would_deny", "x" * 500),  # longer than any console: rich does not wrap it either
    ],
)
def test_plain_lines_are_written_without_rich_as_rich_writes_them(
    result: CheckResult, monkeypatch: pytest.MonkeyPatch
) -> None:
    text, used_rich = _by_printer(result, monkeypatch)
    assert not used_rich
    assert text == _by_rich(result)
    assert text.splitlines() == check_lines(result)


@pytest.mark.parametrize(
    "reason",
    [
        "see [bold]this[/bold]",  # markup
        r"a \[literal] bracket and a trailing backslash \\",
        "thumbs :thumbs_up: and :not_an_emoji:",  # emoji codes (one real)
        "tab\tseparated",  # tabs are expanded
        "carriage\rreturn and bell\x07",  # stripped control codes
        "two\nlines",
        "trailing space ",
    ],
)
def test_lines_rich_would_change_are_left_to_rich(reason: str, monkeypatch: pytest.MonkeyPatch) -> None:
    result = _result("denied", reason, (reason,))
    text, used_rich = _by_printer(result, monkeypatch)
    assert used_rich
    assert text == _by_rich(result)


def test_a_terminal_is_left_to_rich(monkeypatch: pytest.MonkeyPatch) -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr(sys, "stdout", Terminal())
    assert not LinePrinter().write(["allowed    Deployment team-a/llama (chart.yaml#4)"])
    assert sys.stdout.getvalue() == ""
    monkeypatch.setattr(sys, "stdout", io.StringIO())
    monkeypatch.setenv("FORCE_COLOR", "1")  # rich styles a pipe too when asked to
    assert not LinePrinter().write(["allowed    Deployment team-a/llama (chart.yaml#4)"])


def _text(max_size: int) -> st.SearchStrategy[str]:
    """Any text, weighted towards what rich reads specially (``:a:`` is an emoji code, ``[b]`` a tag)."""
    pieces = st.sampled_from([":a:", ":smile:", ":", "[b]", "[/b]", "\\", "\t", "\n", "\r", " ", "a", "×"])
    return st.lists(pieces | st.characters(), max_size=max_size).map("".join)


@settings(max_examples=300, deadline=None)
@given(
    verdict=st.sampled_from(VERDICTS),
    name=st.none() | _text(8),
    reason=_text(20),
    warnings=st.lists(_text(10), max_size=2).map(tuple),
)
def test_any_result_is_printed_as_rich_prints_it(
    verdict: str, name: str | None, reason: str, warnings: tuple[str, ...]
) -> None:
    result = _result(verdict, reason, warnings, name)
    with pytest.MonkeyPatch.context() as monkeypatch:
        for variable in ("FORCE_COLOR", "TTY_COMPATIBLE"):
            monkeypatch.delenv(variable, raising=False)
        text, _ = _by_printer(result, monkeypatch)
    assert text == _by_rich(result)
