"""The ``kvcap`` entry point answers offline `plan` / `check` before typer loads, exactly as the typer app does.

Each command line runs twice in fresh interpreters: through the entry point (``service.cli_fast``) and through
the typer app (``service.cli``); the exit code, stdout and stderr must be the same. Command lines the fast path
does not read (help, a typo, a value typer refuses) are handed to the typer app, so they exit as it does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from service.cli_fast import PlanOptions, _NotPlain, _plain_check, _plain_plan

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "admission" / "data"
RENDERED = str(DATA / "rendered-chart.yaml")
DENIED = str(DATA / "denied.yaml")
ENV = {**os.environ, "COLUMNS": "150"}


def _run(module: str, *args: str, stdin: str | None = None) -> tuple[int, str, str]:
    done = subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=120,
        **({"input": stdin} if stdin is not None else {"stdin": subprocess.DEVNULL}),
    )
    return done.returncode, done.stdout, done.stderr


@pytest.mark.parametrize(
    "args",
    [
        ("plan", "--model", "llama-3.1-8b", "--gpu", "h100-sxm-80gb"),  # text, with the capacity table
        ("plan", "-m", "llama-3.1-70b", "-g", "l4", "--json"),  # refused: exit 1, suggestions
        ("plan", "--model=qwen3-30b-a3b", "--gpu=h200", "-tp", "2", "--max-model-len", "auto", "--json"),
        ("plan", "--model", "no-such-model", "--gpu", "h100-sxm-80gb"),  # exit 2 with the message
        ("plan", "--gpu", "h100-sxm-80gb"),  # neither --model nor --hf-config
        ("plan", "-m", "qwen2.5-7b", "-g", "a100-sxm4-80gb", "-q", "awq", "--kv-cache-dtype", "fp8"),
        ("plan", "-m", "llama-3.1-70b", "-g", "h100-sxm-80gb", "-tp", "4", "-pp", "2", "--json"),
        (
            "plan",
            "-m",
            "llama-3.1-8b",
            "-g",
            "l4",
            "--kv-cache-dtype=fp8",
            "--max-model-len",
            "32,768",
            "--json",
        ),
        ("plan", "-m", "llama-3.1-8b", "-g", "h100-sxm-80gb", "--quantization", "fp8", "--enforce-eager"),
        ("plan", "-m", "mistral-7b-v0.1", "-g", "h100-sxm-80gb", "--disable-sliding-window", "--json"),
        (
            "plan",
            "-m",
            "llama-3.1-8b",
            "--kv-cache-memory-bytes",
            "8589934592",
            "--json",
        ),  # no GPU: a KV budget
        # bad input: exit 2 with the validated path's message
        ("plan", "--model", "llama-3.1-8b", "--gpu", "no-such-gpu"),
        ("plan", "--model", "llama-3.1-8b", "--gpu", "h100-sxm-80gb", "-tp", "0"),
        ("plan", "--model", "llama-3.1-8b", "--gpu", "h100-sxm-80gb", "--gpu-memory-utilization", "1.5"),
        ("plan", "--model", "llama-3.1-8b", "--gpu", "h100-sxm-80gb", "--dtype", "float8"),
        ("plan", "--model", "llama-3.1-8b", "--gpu", "h100-sxm-80gb", "--max-model-len", "lots"),
        ("check", "-f", RENDERED, "--json"),
        ("check", "--filename", RENDERED),
        ("check", "-f", DENIED),  # one denied: exit 1
        ("check", "-f", DENIED, "--json"),
        ("check", "-f", str(DATA)),  # a directory of fixtures
        ("check", "-f", RENDERED, "-f", DENIED),
        ("check", "-f", str(DATA / "no-such-file.yaml")),  # unreadable: exit 2
    ],
)
def test_the_entry_point_answers_as_the_typer_app_does(args: tuple[str, ...]) -> None:
    assert _run("service.cli_fast", *args) == _run("service.cli", *args)


def test_check_reads_stdin_as_the_typer_app_does() -> None:
    text = Path(RENDERED).read_text() + "\n---\n" + Path(DENIED).read_text()  # multi-document, one denied
    answered = _run("service.cli_fast", "check", "-f", "-", stdin=text)
    assert answered == _run("service.cli", "check", "-f", "-", stdin=text)
    assert answered[0] == 1


@pytest.mark.parametrize(
    "args",
    [
        ("plan", "--help"),
        ("plan", "--model", "llama-3.1-8b", "--tensor-parallel-size", "two"),  # typer's "not a valid integer"
        ("plan", "--model", "llama-3.1-8b", "--no-such-flag"),
        ("check",),  # missing --filename
    ],
)
def test_command_lines_it_does_not_read_exit_as_the_typer_app_does(args: tuple[str, ...]) -> None:
    fast_code, _, _ = _run("service.cli_fast", *args)
    typer_code, _, _ = _run("service.cli", *args)
    assert fast_code == typer_code
    assert typer_code in (0, 2)


_PROBE = """
import json, sys
heavy = set(json.loads(sys.argv[2]))
sys.argv = ["kvcap", *json.loads(sys.argv[1])]
from service.cli_fast import fast_path
code = fast_path(sys.argv[1:])
print(json.dumps({"code": code, "loaded": sorted(heavy & {m.split(".")[0] for m in sys.modules})}), file=sys.stderr)
"""


# What an offline plan or check never needs: the typer app, the schemas, the web and database stacks, the HTTP
# client, logging; rich only to draw a plan's tables, yaml only to read manifests.
_HEAVY = {
    "typer", "click", "pydantic", "fastapi", "starlette", "uvicorn", "sqlalchemy", "alembic", "psycopg", "aiosqlite",
    "httpx", "logging", "rich", "yaml",
}  # fmt: skip


@pytest.mark.parametrize(
    ("args", "needed"),
    [
        (["plan", "--model", "llama-3.1-8b", "--gpu", "h100-sxm-80gb", "--json"], []),
        (
            ["plan", "-m", "llama-3.1-70b", "-g", "h100-sxm-80gb", "-tp", "4", "--kv-cache-dtype", "fp8"],
            ["rich"],
        ),
        (["check", "-f", RENDERED], ["yaml"]),  # lines to a pipe: written without rich
        (["check", "-f", RENDERED, "--json"], ["yaml"]),
    ],
)
def test_an_offline_plan_or_check_loads_only_what_it_needs(args: list[str], needed: list[str]) -> None:
    env = {k: v for k, v in ENV.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE")}
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(args), json.dumps(sorted(_HEAVY))],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    report = json.loads(done.stderr.strip().splitlines()[-1])
    assert report == {"code": 0, "loaded": needed}


def test_the_reader_takes_the_declared_spellings_and_types() -> None:
    options = _plain_plan(
        ["-m", "x", "--gpu=l4", "-tp", "4", "--gpu-memory-utilization", "0.8", "--enforce-eager", "--json"]
    )
    assert options == PlanOptions(
        model="x",
        gpu="l4",
        tensor_parallel_size=4,
        gpu_memory_utilization=0.8,
        enforce_eager=True,
        as_json=True,
    )
    assert _plain_check(["-f", "a.yaml", "--file", "-", "--filename", "dir"]) == (
        ["a.yaml", "-", "dir"],
        False,
    )


@pytest.mark.parametrize(
    "args",
    [
        ["--model"],  # no value
        ["--model", "--gpu"],  # a value that looks like an option: typer decides
        ["--json=yes"],  # a flag with a value
        ["--block-size", "16.5"],  # not an int
        ["-m", "a", "-m", "b"],  # repeated
        ["--server", "http://kvcap"],  # online: the typer app
        ["-mllama"],  # a short option glued to its value
    ],
)
def test_anything_else_is_left_to_the_typer_app(args: list[str]) -> None:
    with pytest.raises(_NotPlain):
        _plain_plan(args)
