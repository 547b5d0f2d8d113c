"""An offline `kvcap plan` / `kvcap check` loads neither the web nor the database stack.

Pipelines run `kvcap check` once per manifest, so what a command imports is its start-up cost. This is a property of
the import graph (checked in a fresh interpreter), not a timing: the figures live in `make bench`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RENDERED = ROOT / "tests" / "admission" / "data" / "rendered-chart.yaml"
HEAVY = ("fastapi", "starlette", "sqlalchemy", "alembic", "httpx", "uvicorn", "psycopg", "aiosqlite")

# Runs the real entry point, then reports which of the heavy top-level packages ended up in sys.modules.
_PROBE = """
import json, runpy, sys
HEAVY = json.loads(sys.argv[2])
sys.argv = ["kvcap", *json.loads(sys.argv[1])]
code = 0
try:
    runpy.run_module("service.cli", run_name="__main__")
except SystemExit as exc:
    code = exc.code
loaded = sorted({m.split(".")[0] for m in sys.modules} & set(HEAVY))
print(json.dumps({"code": code, "loaded": loaded}), file=sys.stderr)
"""


def _loaded_by(*args: str) -> tuple[int, list[str]]:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(list(args)), json.dumps(HEAVY)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    report = json.loads(done.stderr.strip().splitlines()[-1])
    return int(report["code"] or 0), list(report["loaded"])


def test_an_offline_plan_imports_no_web_http_or_database_package() -> None:
    code, loaded = _loaded_by("plan", "--model", "llama-3.1-8b", "--gpu", "h100-sxm-80gb", "--json")
    assert code == 0
    assert loaded == []


def test_an_offline_check_imports_no_web_http_or_database_package() -> None:
    code, loaded = _loaded_by("check", "-f", str(RENDERED))
    assert code == 0
    assert loaded == []


@pytest.mark.parametrize("command", ["recommend", "sweep"])
def test_offline_recommend_and_sweep_import_no_web_http_or_database_package(command: str) -> None:
    args = ["--model", "llama-3.1-8b", "--rps", "2", "--json"]
    code, loaded = _loaded_by(command, *args, *(["--gpu", "l4"] if command == "recommend" else []))
    assert code in (0, 1)
    assert loaded == []


def test_the_probe_sees_a_heavy_import_when_one_happens() -> None:
    # `kvcap serve --help` is answered by typer before uvicorn is imported, so ask the probe about a command
    # that genuinely needs the database stack: a failing `migrate` still imports SQLAlchemy and Alembic.
    code, loaded = _loaded_by("migrate", "--database-url", "not-a-scheme://")
    assert code == 2
    assert "sqlalchemy" in loaded


def test_replan_refusing_bad_input_loads_no_web_http_or_database_package() -> None:
    # `kvcap replan` is a client: it validates the change before opening a connection, so a typo costs no HTTP stack.
    code, loaded = _loaded_by("replan", "--traffic", "0")
    assert code == 2
    assert loaded == []
