"""``kvcap replan --url``: the streamed answer assembled into the endpoint's JSON, a progress trace on stderr, a
delta table, and exit codes 0/1/2. The server is the test app, reached in-process through a mock transport."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from typer.testing import CliRunner

from service.cli import app as kvcap
from service.deployments import replan_cli
from tests.deployments.test_replan import deployment, register

runner = CliRunner()


def in_process(app: FastAPI, loop: asyncio.AbstractEventLoop) -> Callable[[float], httpx.Client]:
    """A sync client (used from the CLI's thread) whose requests the test's event loop serves with ``app``."""

    async def call(request: httpx.Request) -> httpx.Response:
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://kvcap.test"
        ) as client:
            answer = await client.request(
                request.method, request.url.path, content=request.content, headers=request.headers
            )
            return httpx.Response(answer.status_code, content=answer.content, headers=answer.headers)

    def handler(request: httpx.Request) -> httpx.Response:
        request.read()
        return asyncio.run_coroutine_threadsafe(call(request), loop).result(timeout=120)

    return lambda timeout: httpx.Client(transport=httpx.MockTransport(handler))


async def run(app: FastAPI, monkeypatch: pytest.MonkeyPatch, *args: str) -> tuple[int, str, str]:
    monkeypatch.setattr(replan_cli, "http_client", in_process(app, asyncio.get_running_loop()))
    result = await asyncio.to_thread(runner.invoke, kvcap, ["replan", "--url", "http://kvcap.test", *args])
    return result.exit_code, result.stdout, result.stderr


async def test_json_is_the_endpoints_answer_and_progress_goes_to_stderr(
    app: FastAPI, client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    await register(
        client, deployment("a"), deployment("b", workload=None), deployment("c", namespace="other")
    )
    code, out, err = await run(
        app, monkeypatch, "--traffic", "2", "--no-simulate", "--json", "-l", "team=search"
    )
    assert code == 0, err
    printed = json.loads(out)
    direct = (
        await client.post(
            "/v1/deployments/replan",
            json={"traffic_multiplier": 2, "simulate": False, "labels": {"team": "search"}},
        )
    ).json()
    assert printed["deployments"] == direct["deployments"]
    assert {k: v for k, v in printed["summary"].items() if k != "elapsed_seconds"} == {
        k: v for k, v in direct["summary"].items() if k != "elapsed_seconds"
    }
    assert printed["change"]["traffic_multiplier"] == 2
    # stderr is not a terminal here: plain progress lines, ending at 3 of 3.
    lines = err.strip().splitlines()
    assert lines[0] == "replan: 3 deployment(s)"
    assert lines[-1].startswith("replan: 3/3 (")


async def test_the_table_shows_each_change(
    app: FastAPI, client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    await register(client, deployment("chat", workload=None, replicas=2))
    code, out, _ = await run(app, monkeypatch, "--traffic", "1.5", "--no-simulate")
    assert code == 0
    assert "llm/chat" in out
    assert "2 → 3" in out  # replicas: ceil(2 × 1.5), no workload to size
    assert "GPUs 2 → 3 (+1 / -0)" in out


async def test_exit_1_when_a_deployment_is_not_served_under_the_change(
    app: FastAPI, client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    await register(client, deployment("big", model="llama-3.1-70b", tensor_parallel_size=4, replicas=1))
    code, out, _ = await run(app, monkeypatch, "--gpu", "l4", "--no-simulate", "--json")
    assert code == 1
    assert json.loads(out)["summary"]["does_not_fit"] == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--traffic", "0"), "traffic_multiplier"),
        (("--slo-percentile", "p95"), "slo_percentile"),
        (("--label", "no-equals-sign"), "--label"),
        (("--gpu", "no-such-gpu"), "answered 422"),
        (("--engine", "vllm-0.4"), "answered 422"),
    ],
)
async def test_bad_input_is_exit_2_with_a_message(
    app: FastAPI, monkeypatch: pytest.MonkeyPatch, args: tuple[str, ...], message: str
) -> None:
    code, out, err = await run(app, monkeypatch, *args)
    assert code == 2
    assert message in err
    assert out == ""


def test_an_unreachable_server_is_exit_2() -> None:
    result = runner.invoke(kvcap, ["replan", "--url", "http://127.0.0.1:1", "--timeout", "5"])
    assert result.exit_code == 2
    assert "cannot reach http://127.0.0.1:1" in result.stderr


def test_the_request_sent_names_only_what_changes() -> None:
    body: dict[str, Any] = replan_cli.request_body(
        traffic=1.0,
        ttft_slo=None,
        tpot_slo=0.04,
        slo_percentile=None,
        engine=None,
        gpu=None,
        namespace=None,
        labels={},
        simulate=True,
    )
    assert body == {"traffic_multiplier": 1.0, "slo": {"tpot_seconds": 0.04}, "labels": {}, "simulate": True}
