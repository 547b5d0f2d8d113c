"""Logs: one JSON object per line from kvcap's and uvicorn's loggers alike, each line of a request carrying its
``X-Request-ID`` (taken from the request, or generated and returned)."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from service.logs import configure_logging
from tests.hardening.throwaway_postgres import free_port

REVIEW = json.loads(
    (Path(__file__).parents[1] / "admission" / "data" / "statefulset-llama-8b-8k-one-l4.json").read_text()
)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    root = tmp_path_factory.mktemp("logs")
    port = free_port()
    log = root / "kvcap.log"
    env = {key: value for key, value in os.environ.items() if not key.startswith("KVCAP_")}
    env |= {
        "KVCAP_DATABASE_URL": f"sqlite+aiosqlite:///{root}/kvcap.db",
        "KVCAP_SCRAPE_ENABLED": "false",
        "KVCAP_LOG_FORMAT": "json",
    }
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "service.cli", "serve", "--host", "127.0.0.1", "--port", str(port)],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=root,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, log.read_text()[-3000:]
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                    break
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
        yield url, log
    finally:
        process.terminate()
        process.wait(timeout=15)


def lines_of(log: Path, request_id: str) -> list[dict[str, object]]:
    """Every line logged (each must parse as one JSON object), those of ``request_id`` returned."""
    deadline = time.monotonic() + 5
    while True:
        parsed = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
        assert all(isinstance(entry, dict) for entry in parsed)
        mine = [entry for entry in parsed if entry.get("request_id") == request_id]
        if any(entry["logger"] == "uvicorn.access" for entry in mine) or time.monotonic() > deadline:
            return mine
        time.sleep(0.1)


def test_a_requests_log_lines_are_json_and_carry_its_request_id(served: tuple[str, Path]) -> None:
    url, log = served
    response = httpx.post(f"{url}/admission/validate", json=REVIEW, headers={"X-Request-ID": "req-7f3e-1"})
    assert response.status_code == 200
    assert response.headers["x-request-id"] == "req-7f3e-1"
    mine = lines_of(log, "req-7f3e-1")
    by_logger = {entry["logger"]: entry for entry in mine}
    assert set(by_logger) == {"kvcap.admission", "uvicorn.access"}
    review = by_logger["kvcap.admission"]
    assert review["level"] == "info" and "admission" in str(review["event"])
    assert review["uid"] == REVIEW["request"]["uid"]
    access = by_logger["uvicorn.access"]
    assert access["method"] == "POST" and access["path"] == "/admission/validate" and access["status"] == 200
    for entry in mine:
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z", str(entry["timestamp"]))
    startup = [json.loads(line) for line in log.read_text().splitlines()][:3]
    assert any(entry["logger"] == "uvicorn.error" for entry in startup)  # uvicorn's own lines too


def test_a_request_without_a_usable_id_gets_a_generated_one(served: tuple[str, Path]) -> None:
    url, log = served
    for headers in ({}, {"X-Request-ID": 'x" injected="1'}, {"X-Request-ID": "a" * 500}):
        response = httpx.get(f"{url}/healthz", headers=headers)
        generated = response.headers["x-request-id"]
        assert re.fullmatch(r"[0-9a-f]{32}", generated), generated
        access = [entry for entry in lines_of(log, generated) if entry["logger"] == "uvicorn.access"]
        assert len(access) == 1


def test_exceptions_and_extra_fields_stay_inside_one_json_line() -> None:
    stream = io.StringIO()
    configure_logging("INFO", "json", stream=stream)
    logger = logging.getLogger("kvcap.test")
    try:
        raise ValueError("multi\nline")
    except ValueError:
        logger.exception("it failed", extra={"namespace": "llm", "color_message": "not copied"})
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1
    entry = json.loads(lines[0])
    assert entry["event"] == "it failed" and entry["level"] == "error" and entry["namespace"] == "llm"
    assert "ValueError: multi\nline" in entry["exception"] and "color_message" not in entry
