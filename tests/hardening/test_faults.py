"""Faults: PostgreSQL stopped under the running service, and a Prometheus live source that is down.

The database tests run the real service (``kvcap serve``: the real lifespan, pool, refresh task and live loop)
as a subprocess against a PostgreSQL of their own (``throwaway_postgres``), stop that server with
``pg_ctl stop -m fast`` and start it again, without restarting kvcap:

* plans, admission reviews and registered deployments' plans keep answering from the in-memory snapshot,
  with the same answers as before the outage;
* writes (and reads that need the database) fail fast with 503, the one error shape and a message saying
  the database is unavailable, never a 500 or a hang;
* ``/readyz`` is 503, ``/readyz?degraded_ok=true`` is 200 ``degraded``, ``/metrics`` keeps answering;
* once PostgreSQL is back, writes succeed again within seconds (``pool_pre_ping``) and ``/readyz`` is 200;
* nothing the service logged in the meantime contains the database password or the API token.

A server that hangs instead (SIGSTOP: the kernel accepts connections, nothing answers) must not hold up the
readiness probe either: ``/readyz?degraded_ok=true`` answers within its 3 s check, so the webhook stays in its
Service; plans and reviews are not touched at all.

vLLM targets that are down, hang, reset, send garbage, 50 MB or redirects are covered through real sockets in
``tests/exporter/test_resilience.py`` and ``tests/live/test_scraper.py``; the Prometheus source is here.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from service.db import migrate
from service.exporter.collector import AdmissionMetrics, PredictedCapacity, SelfMetrics, render_metrics
from service.live.guard import TargetGuard
from service.live.manager import LiveManager, LiveTarget
from service.live.schemas import parse_live_source
from service.live.scraper import make_client
from tests.hardening.throwaway_postgres import PASSWORD, ThrowawayPostgres, free_port
from tests.live.stub_server import StubServer, closed_port

TOKEN = "outage-token-5b1c9e"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
REVIEW = json.loads(
    (Path(__file__).parents[1] / "admission" / "data" / "statefulset-llama-8b-8k-one-l4.json").read_text()
)
PLAN = {"model": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "l4", "max_model_len": 8192}
DEPLOYMENT = {
    "namespace": "faults",
    "name": "chat",
    "model": "llama-3.1-8b",
    "gpu": "h100-sxm-80gb",
    "max_model_len": 8192,
    "replicas": 2,
    "workload": {"concurrent_users": 200, "prompt_tokens": 1500, "output_tokens": 300},
}
TINY_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "num_hidden_layers": 2,
    "hidden_size": 256,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 512,
    "vocab_size": 1000,
    "max_position_embeddings": 2048,
    "torch_dtype": "bfloat16",
}
# A request while the database is down must be answered within this (connect timeout 5 s, refused at once).
FAST_S = 5.0
# A write while the database is frozen must be answered within this: a bound on the timeouts (ping 1.5 s, then
# one connect of 2 s), generous for a loaded machine.
HUNG_BOUND_S = 10.0


@dataclass
class Service:
    url: str
    postgres: ThrowawayPostgres
    log: Path
    process: subprocess.Popen[bytes]


@pytest.fixture(scope="module")
def postgres() -> Iterator[ThrowawayPostgres]:
    root = Path(tempfile.mkdtemp(prefix="kvcap-pg-"))
    server = ThrowawayPostgres(root)
    try:
        server.init()
        server.start()
        migrate.upgrade(server.url())
        loaded = subprocess.run(
            [sys.executable, "-m", "service.cli", "catalog", "load", "--database-url", server.url()],
            capture_output=True,
            timeout=120,
            cwd=root,
        )
        assert loaded.returncode == 0, loaded.stderr.decode(errors="replace")
        yield server
    finally:
        if server.running():
            with contextlib.suppress(Exception):
                server.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def service(postgres: ThrowawayPostgres) -> Iterator[Service]:
    port = free_port()
    log = postgres.root / "kvcap.log"
    env = {key: value for key, value in os.environ.items() if not key.startswith("KVCAP_")}
    env |= {
        "KVCAP_DATABASE_URL": postgres.url(),
        "KVCAP_API_TOKENS": TOKEN,
        "KVCAP_CATALOG_REFRESH_SECONDS": "1",
        "KVCAP_SCRAPE_INTERVAL_SECONDS": "1",
        "KVCAP_LOG_LEVEL": "DEBUG",
    }
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "service.cli", "serve", "--host", "127.0.0.1", "--port", str(port)],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=postgres.root,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None:
                pytest.fail(f"kvcap exited with {process.returncode}:\n{log.read_text()[-3000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline:
                pytest.fail(f"kvcap did not become ready:\n{log.read_text()[-3000:]}")
            time.sleep(0.2)
        yield Service(url=url, postgres=postgres, log=log, process=process)
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture
async def http(service: Service) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=service.url, timeout=30) as client:
        yield client


async def timed(request: Any) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    response = await request
    return response, time.monotonic() - started


def assert_unavailable(response: httpx.Response) -> None:
    assert response.status_code == 503, response.text
    body = response.json()
    assert body["error"] == "ServiceUnavailable"
    assert "database is unavailable" in body["detail"]
    assert response.headers["retry-after"]


@pytest.mark.postgres
async def test_a_database_outage_degrades_then_recovers_without_a_restart(
    service: Service, http: httpx.AsyncClient
) -> None:
    created = await http.post("/v1/deployments", json=DEPLOYMENT, headers=AUTH)
    assert created.status_code == 201, created.text
    plan_path = f"/v1/deployments/{DEPLOYMENT['namespace']}/{DEPLOYMENT['name']}/plan"
    before = {
        "plan": (await http.post("/v1/plans", json=PLAN)).json(),
        "deployment plan": (await http.get(plan_path)).json(),
        "review": (await http.post("/admission/validate", json=REVIEW)).json(),
    }
    assert before["review"]["response"]["allowed"] is True

    await asyncio.to_thread(service.postgres.stop)
    try:
        await asyncio.sleep(1.5)  # let a catalog refresh and a live-loop tick fail in the background

        plan, seconds = await timed(http.post("/v1/plans", json=PLAN))
        assert plan.status_code == 200 and seconds < FAST_S
        assert plan.json() == before["plan"]

        review, seconds = await timed(http.post("/admission/validate", json=REVIEW))
        assert review.status_code == 200 and seconds < FAST_S
        assert review.json()["response"] == before["review"]["response"]

        deployment_plan, seconds = await timed(http.get(plan_path))
        assert deployment_plan.status_code == 200 and seconds < FAST_S, deployment_plan.text
        assert deployment_plan.json() == before["deployment plan"]
        autoscaling, seconds = await timed(http.get(plan_path.removesuffix("/plan") + "/autoscaling"))
        assert autoscaling.status_code == 200 and seconds < FAST_S, autoscaling.text

        gpu = {"name": "outage-gpu", "vendor": "nvidia", "memory_bytes": 2**34, "source": "fault test"}
        writes = [
            http.post("/v1/gpus", json=gpu, headers=AUTH),
            http.patch("/v1/gpus/l4", json={"notes": "during the outage"}, headers=AUTH),
            http.delete("/v1/models/phi-4", headers=AUTH),
            http.patch(
                f"/v1/deployments/{DEPLOYMENT['namespace']}/{DEPLOYMENT['name']}",
                json={"replicas": 3},
                headers=AUTH,
            ),
            http.post("/v1/models/import", json={"name": "tiny", "hf_config": TINY_CONFIG}, headers=AUTH),
        ]
        for write in writes:
            response, seconds = await timed(write)
            assert_unavailable(response)
            assert seconds < FAST_S
        for read in ("/v1/gpus", "/v1/models/llama-3.1-8b", "/v1/deployments"):
            response, seconds = await timed(http.get(read))
            assert_unavailable(response)
            assert seconds < FAST_S

        ready, seconds = await timed(http.get("/readyz"))
        assert ready.status_code == 503 and seconds < FAST_S
        assert ready.json()["database"] == "unavailable"
        degraded = await http.get("/readyz", params={"degraded_ok": "true"})
        assert degraded.status_code == 200
        assert degraded.json()["status"] == "degraded"
        assert degraded.json()["catalog"]["source"] == "database"  # the snapshot read before the outage
        metrics, seconds = await timed(http.get("/metrics"))
        assert metrics.status_code == 200 and seconds < FAST_S
        assert "kvcap_predicted_kv_cache_blocks" in metrics.text
        assert service.process.poll() is None
    finally:
        await asyncio.to_thread(service.postgres.start)

    deadline = time.monotonic() + 10
    while True:
        response = await http.post("/v1/gpus", json=gpu, headers=AUTH)
        if response.status_code == 201 or time.monotonic() > deadline:
            break
        assert_unavailable(response)
        await asyncio.sleep(0.25)
    assert response.status_code == 201, response.text
    assert (await http.get("/readyz")).status_code == 200
    assert (await http.get("/v1/gpus/outage-gpu")).status_code == 200
    patched = await http.patch(
        f"/v1/deployments/{DEPLOYMENT['namespace']}/{DEPLOYMENT['name']}", json={"replicas": 3}, headers=AUTH
    )
    assert patched.status_code == 200 and patched.json()["replicas"] == 3
    assert (await http.post("/v1/plans", json=PLAN)).json() == before["plan"]

    log = service.log.read_text()
    assert "database unavailable" in log  # the outage was logged …
    assert "Traceback" not in log  # … as a warning, never as an unhandled error
    assert PASSWORD not in log
    assert TOKEN not in log


@pytest.mark.postgres
async def test_a_hung_database_does_not_hold_up_readiness_plans_or_reviews(
    service: Service, http: httpx.AsyncClient
) -> None:
    """A server that accepts packets but never answers (SIGSTOP): writes and database reads get a 503 within
    the ping and connect timeouts (1.5 s + 2 s by default; bounded here by ``HUNG_BOUND_S``, a limit on a
    timeout, not a performance figure), readiness and the in-memory answers are not held up, and once the
    server runs again writes succeed without a restart."""
    assert (await http.get("/readyz")).status_code == 200
    gpu = {"name": "frozen-gpu", "vendor": "nvidia", "memory_bytes": 2**34, "source": "fault test"}
    await asyncio.to_thread(service.postgres.freeze)
    try:
        writes = [
            http.post("/v1/gpus", json=gpu, headers=AUTH),  # a pooled connection: its health check times out
            http.patch("/v1/gpus/l4", json={"notes": "while frozen"}, headers=AUTH),  # a fresh connection
            http.post("/v1/gpus", json=gpu, headers=AUTH),
        ]
        for write in writes:
            response, seconds = await timed(write)
            assert_unavailable(response)
            assert seconds < HUNG_BOUND_S, seconds
        read, seconds = await timed(http.get("/v1/gpus"))
        assert_unavailable(read)
        assert seconds < HUNG_BOUND_S, seconds
        for _ in range(2):  # the second probe finds the first check still hanging and waits on it again
            degraded, seconds = await timed(http.get("/readyz", params={"degraded_ok": "true"}))
            assert degraded.status_code == 200 and seconds < FAST_S, (seconds, degraded.text)
            assert degraded.json()["status"] == "degraded"
        ready, seconds = await timed(http.get("/readyz"))
        assert ready.status_code == 503 and seconds < FAST_S
        plan, seconds = await timed(http.post("/v1/plans", json=PLAN))
        assert plan.status_code == 200 and seconds < 1
        review, seconds = await timed(http.post("/admission/validate", json=REVIEW))
        assert review.status_code == 200 and seconds < 1
    finally:
        await asyncio.to_thread(service.postgres.thaw)
    deadline = time.monotonic() + 10
    while (await http.get("/readyz")).status_code != 200:
        assert time.monotonic() < deadline, "not ready again 10 s after the database thawed"
        await asyncio.sleep(0.25)
    created = await http.post("/v1/gpus", json=gpu, headers=AUTH)
    assert created.status_code == 201, created.text
    assert (await http.get("/v1/gpus/frozen-gpu")).status_code == 200
    log = service.log.read_text()
    assert "Traceback" not in log and PASSWORD not in log


async def test_a_prometheus_source_that_is_down_costs_only_its_own_deployment(vllm_metrics_dir: Path) -> None:
    busy = (vllm_metrics_dir / "vllm-0.32.0-cpu-busy.txt").read_bytes()
    stub = StubServer({"/chat/0": busy})
    await stub.start()
    hung: list[asyncio.StreamWriter] = []

    async def never_answer(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        hung.append(writer)  # accept, never answer

    hanging = await asyncio.start_server(never_answer, "127.0.0.1", 0)
    hang_port = hanging.sockets[0].getsockname()[1]
    match = '{namespace="llm"}'

    def prometheus(name: str, url: str) -> LiveTarget:
        source = parse_live_source({"prometheus": {"url": url, "match": match}})
        return LiveTarget(namespace="llm", name=name, source=source)

    down = f"http://127.0.0.1:{closed_port()}"
    targets = [
        LiveTarget(
            namespace="llm", name="chat", source=parse_live_source({"scrape_urls": [stub.url("/chat/0")]})
        ),
        prometheus("prom-down", down),
        prometheus("prom-hangs", f"http://127.0.0.1:{hang_port}"),
        prometheus("prom-404", stub.url("/not-prometheus")),
    ]
    manager = LiveManager(
        client=make_client(concurrency=8),
        guard=TargetGuard([]),
        timeout_s=1.0,
        max_bytes=1024 * 1024,
        concurrency=8,
        owns_client=True,
    )
    try:
        started = time.monotonic()
        await manager.refresh(targets)
        await manager.refresh(targets)  # errors accumulate as counters across refreshes
        elapsed = time.monotonic() - started
    finally:
        await manager.aclose()
        hanging.close()
        for writer in hung:
            writer.close()
        await stub.close()
    assert elapsed < 5  # the hanging server cost one timeout per refresh, not more

    prediction = PredictedCapacity(
        num_gpu_blocks=8192,
        num_gpu_blocks_uncalibrated=8192,
        kv_cache_size_tokens=131072,
        max_concurrency=16.0,
        max_num_seqs=256,
        recommended_replicas=1,
        replicas=1,
    )
    predictions = {("llm", name): prediction for name in ("chat", "prom-down", "prom-hangs", "prom-404")}
    body = render_metrics(
        predictions, manager.observations, SelfMetrics.of(manager), AdmissionMetrics()
    ).decode()
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(body)
        for s in family.samples
    }

    def value(name: str, deployment: str, **extra: str) -> float | None:
        labels = {"namespace": "llm", "deployment": deployment, **extra}
        return samples.get((name, tuple(sorted(labels.items()))))

    assert value("kvcap_observed_kv_cache_blocks", "chat") == 8192
    assert value("kvcap_target_up", "chat", target=stub.url("/chat/0")) == 1.0
    assert value("kvcap_target_up", "prom-down", target=down) == 0.0
    assert value("kvcap_target_up", "prom-hangs", target=f"http://127.0.0.1:{hang_port}") == 0.0
    assert value("kvcap_target_up", "prom-404", target=stub.url("/not-prometheus")) == 0.0
    assert value("kvcap_scrape_errors_total", "prom-down", reason="connect") == 2
    assert value("kvcap_scrape_errors_total", "prom-hangs", reason="timeout") == 2
    assert value("kvcap_scrape_errors_total", "prom-404", reason="http_status") == 2
    for name in ("prom-down", "prom-hangs", "prom-404"):
        assert value("kvcap_observed_kv_cache_blocks", name) is None
        assert value("kvcap_observed_replicas", name) == 0
        assert value("kvcap_predicted_kv_cache_blocks", name) == 8192  # predictions keep exporting
    assert samples[("kvcap_deployments_tracked", ())] == 4
