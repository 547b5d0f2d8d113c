"""Admission webhook latency at a steady request rate, with the database stopped.

Starts the real app (``service.app.create_app``, lifespan included) in this process with uvicorn on a free
loopback port; the load generator runs in a child process so that it does not share the server's GIL. The
database URL points at a closed port (PostgreSQL "stopped"), so start-up falls back to the built-in catalog
snapshot, and any database access on the hot path would show up as errors or multi-second latencies. Then it
drives ``POST /admission/validate`` open-loop: request *i* is sent at ``t0 + i / rate`` whether or not earlier
ones have answered (a bounded number in flight; the rest are counted as dropped), over a few keep-alive
connections as the API server uses. ``--client httpx`` uses an ``httpx.AsyncClient`` instead of the default
minimal asyncio client (see ``RawPoster`` for why the default is not httpx).

Three rows, measured the same way in the same run:

* ``webhook, recorded reviews``: the AdmissionReview fixtures (Deployment, StatefulSet, LWS, InferenceService,
  Pod, denials and allows), a fresh ``uid`` each time; repeated manifests hit the plan memo as re-applies do;
* ``webhook, every review a new plan``: ``--max-model-len`` differs on every request (within what fits), so
  every review runs the planner. A *denied* new configuration costs more (the planner re-plans each suggestion
  it offers, up to ~6 plans), but 200 distinct denials a second is not a load a cluster produces;
* ``bare FastAPI endpoint``: a POST that returns a constant body: the floor of this HTTP stack and client;
* with ``fleet=True``, the recorded reviews again while 1,000 registered deployments are scraped back to back
  (one stub process serving a real vLLM exposition on a path per deployment; a SQLite database so that this
  replica owns them all): with the live loop in its worker process (the default), on a worker thread
  (``KVCAP_LIVE_WORKER=thread``), and on the serving event loop (where it first ran), to show what each keeps
  off the webhook. Each of these servers runs in a fresh interpreter of its own (``--serve-fleet``, see
  ``fleet_server``), so that nothing this process built or imported before (the other rows' servers, the load
  pool, the stub's seeding) is in its heap, its collector's generations or its GIL. For the worker process the
  row also gives what taking in its snapshots cost the serving process during the load: the GIL held per
  refresh to unpickle the pieces and swap them in (median and max), and the longest single stretch of it.

Every decision is logged at INFO through the production handler and formatter, into /dev/null
(``_quiet_decision_logs``). The result is a ratio of p99 against the bare endpoint, plus the absolute p99 against
the 10 ms target; no timing is asserted anywhere in the tests.

    python -m bench.bench_admission [--rate 200] [--seconds 10] [--client raw|httpx] [--fleet] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import gc
import json
import logging
import multiprocessing
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Literal

import httpx
import uvicorn
from fastapi import FastAPI, Response

from service.admission.router import router as admission_router
from service.app import create_app
from service.db.migrate import upgrade
from service.db.session import create_engine, create_sessionmaker
from service.deployments.orm import DeploymentEntry
from service.deployments.schemas import DeploymentCreate, DeploymentRead
from service.deployments.service import to_columns
from service.exporter.pipeline import run_live_loop
from service.exporter.worker_process import LiveProcess
from service.live.coordination import SingleCoordinator
from service.logs import configure_logging
from service.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "admission" / "data"
STOPPED_POSTGRES = "postgresql+psycopg://kvcap@127.0.0.1:1/kvcap"
MAX_IN_FLIGHT = 256
CONNECTIONS = 8
FLEET = 1000
FLEET_SCRAPE_INTERVAL_S = 1.0  # shorter than one refresh of 1,000 targets: the fleet is read back to back
DEPLOYMENT_FIELDS = {"namespace", "name", "model", "gpu", "max_model_len", "replicas", "live"}
EXPOSITION = ROOT / "tests" / "data" / "vllm-metrics" / "vllm-0.32.0-cpu-busy.txt"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextlib.contextmanager
def serve(app: FastAPI) -> Iterator[str]:
    """Run ``app`` with uvicorn in a background thread; yield its base URL."""
    port = _free_port()
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_level="warning", access_log=False, lifespan="on"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name=f"uvicorn-{port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def webhook_app() -> FastAPI:
    settings = Settings(database_url=STOPPED_POSTGRES, log_level="INFO")
    app = create_app(settings)
    if not any(getattr(route, "path", None) == "/admission/validate" for route in app.routes):
        app.include_router(admission_router)  # until service/app.py wires it in
    _quiet_decision_logs(settings)
    return app


def _quiet_decision_logs(settings: Settings) -> None:
    """Keep the INFO decision logs (formatting one is part of the hot path) but write them to /dev/null: the
    production set-up (``configure_logging``: one handler on the root logger) with /dev/null for its stream,
    in place of the terminal that ``create_app`` gave it."""
    sink = open(os.devnull, "w")  # noqa: SIM115 - lives as long as the process
    configure_logging(settings.log_level, settings.log_format, stream=sink)
    logging.getLogger("kvcap").handlers[:] = []


def fleet_deployments(stub_port: int, count: int = FLEET) -> list[DeploymentRead]:
    return [
        DeploymentRead.model_validate(
            {
                "namespace": f"ns-{i % 20}",
                "name": f"deployment-{i}",
                "model": "llama-3.1-8b",
                "gpu": "l4",
                "max_model_len": 8192,
                "replicas": 1,
                "live": {"scrape_urls": [f"http://127.0.0.1:{stub_port}/d/{i}/metrics"]},
                "version": 1,
                "created_at": "2026-01-01T00:00:00Z",
                "updated_at": "2026-01-01T00:00:00Z",
            }
        )
        for i in range(count)
    ]


FleetWorker = Literal["process", "thread", "loop"]
FLEET_WORKERS: tuple[tuple[FleetWorker, str], ...] = (
    ("process", "worker process"),
    ("thread", "worker thread"),
    ("loop", "serving event loop"),
)


def seed_fleet(database_url: str, stub_port: int, count: int = FLEET) -> None:
    """Register the fleet in the scratch database, as ``POST /v1/deployments`` would (both processes read it)."""

    async def insert() -> None:
        engine = create_engine(database_url)
        try:
            async with create_sessionmaker(engine)() as session:
                for deployment in fleet_deployments(stub_port, count):
                    body = DeploymentCreate.model_validate(deployment.model_dump(include=DEPLOYMENT_FIELDS))
                    session.add(DeploymentEntry(namespace=body.namespace, name=body.name, **to_columns(body)))
                await session.commit()
        finally:
            await engine.dispose()

    asyncio.run(insert())


def fleet_app(database_url: str, *, worker: FleetWorker) -> FastAPI:
    """The real app with the ``FLEET`` deployments of the database registered, the live loop in its worker
    process (the default), on its worker thread, or (for comparison) on the serving event loop."""
    settings = Settings(
        database_url=database_url,
        log_level="INFO",
        scrape_interval_seconds=FLEET_SCRAPE_INTERVAL_S,
        scrape_enabled=worker != "loop",
        live_worker="thread" if worker == "thread" else "process",
        scrape_allowed_hosts=["127.0.0.1"],
        catalog_refresh_seconds=3600,
    )
    app = create_app(settings)
    _quiet_decision_logs(settings)
    original = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with original(app):
            task = None
            if worker == "loop":
                task = asyncio.create_task(
                    run_live_loop(app, app.state.live, SingleCoordinator(), FLEET_SCRAPE_INTERVAL_S)
                )
            yield
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    app.router.lifespan_context = lifespan
    return app


@contextlib.contextmanager
def stub_fleet() -> Iterator[int]:
    """One process answering every GET with a real vLLM exposition (bench.bench_live's stub); yields its port."""
    with subprocess.Popen(
        [sys.executable, "-m", "bench.bench_live", "--serve", str(EXPOSITION)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    ) as process:
        assert process.stdout is not None
        try:
            yield int(process.stdout.readline())
        finally:
            process.terminate()


def _wait_until_scraped(app: FastAPI, timeout_s: float = 300) -> None:
    live = app.state.live
    deadline = time.monotonic() + timeout_s
    while live.deployments_tracked < FLEET or live.last_refresh_duration_s is None:
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {live.deployments_tracked} of {FLEET} deployments scraped")
        time.sleep(0.2)


def _fleet_state(app: FastAPI, *, handovers_since: int = 0) -> dict[str, Any]:
    """What the fleet row reports of its server: the live state, and for the worker process the hand-overs of
    its snapshots after the ``handovers_since``-th (``LiveProcess.handovers``)."""
    live, worker = app.state.live, getattr(app.state, "live_worker", None)
    state: dict[str, Any] = {
        "deployments": live.deployments_tracked,
        "up": sum(o.replicas for o in live.observations.values()),
        "refresh_s": live.last_refresh_duration_s,
        "refreshed_at_s": live.last_refresh_timestamp_s,
    }
    if isinstance(worker, LiveProcess):
        kept = list(worker.handovers)
        new = max(0, min(len(kept), worker.snapshots - handovers_since))
        state["snapshots"] = worker.snapshots
        state["handovers"] = [[h.held_s, h.longest_s, h.wall_s, h.pieces] for h in kept[len(kept) - new :]]
    return state


def _emit(message: dict[str, Any]) -> None:
    print(json.dumps(message), flush=True)


def serve_fleet_main(worker: FleetWorker, database_url: str) -> None:
    """``--serve-fleet WORKER DATABASE_URL``: one fleet row's server in this (fresh) interpreter.

    Prints one JSON line with its URL and state once the fleet has been scraped; then, for each ``report``
    line on stdin, one with its state and the snapshot hand-overs since that first line; at the end of stdin
    it stops (the lifespan's shutdown: the worker process stopped, nothing left behind).
    """
    app = fleet_app(database_url, worker=worker)
    with serve(app) as url:
        _wait_until_scraped(app)
        ready = _fleet_state(app)
        _emit({"url": url, **ready})
        for line in sys.stdin:
            if line.strip() == "report":
                _emit(_fleet_state(app, handovers_since=ready.get("snapshots", 0)))


class FleetServer:
    """A ``serve_fleet_main`` process: its URL and state when ready, and ``report()`` on request."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self._process = process
        self.ready = self._read()
        self.url: str = self.ready["url"]

    def _read(self) -> dict[str, Any]:
        assert self._process.stdout is not None
        for line in self._process.stdout:
            if line.startswith("{"):
                message: dict[str, Any] = json.loads(line)
                return message
        raise RuntimeError(f"the fleet server exited with code {self._process.wait()} before answering")

    def report(self) -> dict[str, Any]:
        assert self._process.stdin is not None
        self._process.stdin.write("report\n")
        self._process.stdin.flush()
        return self._read()


@contextlib.contextmanager
def fleet_server(database_url: str, worker: FleetWorker) -> Iterator[FleetServer]:
    """The fleet app with ``worker``, served by a fresh interpreter (``--serve-fleet``); stopped on exit."""
    command = [sys.executable, "-m", "bench.bench_admission", "--serve-fleet", worker, database_url]
    with subprocess.Popen(
        command, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as process:
        try:
            yield FleetServer(process)
        finally:
            assert process.stdin is not None
            with contextlib.suppress(OSError):
                process.stdin.close()
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()


def _ms(values: list[float]) -> tuple[float, float]:
    """Median and max of ``values`` (seconds), in milliseconds."""
    return round(statistics.median(values) * 1e3, 3), round(max(values) * 1e3, 3)


def _fleet_row(
    pool: ProcessPoolExecutor,
    database_url: str,
    *,
    worker: FleetWorker,
    rate: float,
    seconds: float,
) -> dict[str, Any]:
    with fleet_server(database_url, worker) as server:
        before = server.ready
        result = pool.submit(load, f"{server.url}/admission/validate", "recorded", rate, seconds).result()
        after = server.report()
    result["refresh_s"] = after["refresh_s"]
    result["fleet_note"] = (
        f"{after['deployments']} deployments, {after['up']} up; a refresh takes {after['refresh_s']:.2f} s "
        f"and they run back to back (interval {FLEET_SCRAPE_INTERVAL_S:g} s); "
        f"{'one completed' if after['refreshed_at_s'] != before['refreshed_at_s'] else 'one was in progress'} "
        "during the load"
    )
    handovers = after.get("handovers")
    if handovers:
        held_median, held_max = _ms([h[0] for h in handovers])
        _, longest_max = _ms([h[1] for h in handovers])
        wall_median, _ = _ms([h[2] for h in handovers])
        result.update(
            handovers=len(handovers),
            handover_held_ms_median=held_median,
            handover_held_ms_max=held_max,
            handover_longest_ms_max=longest_max,
            handover_wall_ms_median=wall_median,
            handover_pieces=handovers[-1][3],
        )
        result["handover_note"] = (
            f"taking in a snapshot held the serving process's GIL {held_median:.2f} ms per refresh (median; "
            f"max {held_max:.2f} ms) over {len(handovers)} refreshes during the load, in {handovers[-1][3]} "
            f"pieces: at most {longest_max:.2f} ms at a stretch (spread over {wall_median:.1f} ms, median)"
        )
    return result


def bare_app() -> FastAPI:
    app = FastAPI()
    body = json.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "response": {"uid": "x", "allowed": True},
        }
    ).encode()

    @app.post("/bare")
    async def bare() -> Response:
        return Response(body, media_type="application/json")

    return app


def recorded_reviews() -> list[dict[str, Any]]:
    reviews = [json.loads(p.read_text()) for p in sorted(FIXTURES.glob("*.json"))]
    if not reviews:
        raise SystemExit(f"no AdmissionReview fixtures in {FIXTURES}")
    return reviews


def recorded_mix(i: int, reviews: list[dict[str, Any]]) -> dict[str, Any]:
    review = copy.deepcopy(reviews[i % len(reviews)])
    review["request"]["uid"] = str(uuid.uuid4())
    return review


def new_plan_each_time(base: dict[str, Any]) -> Callable[[int, list[dict[str, Any]]], dict[str, Any]]:
    def make(i: int, _reviews: list[dict[str, Any]]) -> dict[str, Any]:
        review = copy.deepcopy(base)
        review["request"]["uid"] = str(uuid.uuid4())
        container = review["request"]["object"]["spec"]["template"]["spec"]["containers"][0]
        container["args"] = [a for a in container["args"] if not a.startswith("--max-model-len")]
        # distinct lengths that all fit (one L4 holds ~35k tokens of Llama-3.1-8B): a plan per review, no denial
        container["args"].append(f"--max-model-len={2049 + (8 * i) % 30_000}")
        return review

    return make


class HttpxPoster:
    """httpx.AsyncClient over a few keep-alive connections (as the API server keeps to a webhook)."""

    def __init__(self, url: str) -> None:
        limits = httpx.Limits(max_connections=CONNECTIONS, max_keepalive_connections=CONNECTIONS)
        self.url = url
        self.client = httpx.AsyncClient(
            limits=limits, timeout=10, headers={"content-type": "application/json"}
        )

    async def post(self, body: bytes) -> int:
        try:
            return (await self.client.post(self.url, content=body)).status_code
        except httpx.HTTPError:
            return 0

    async def aclose(self) -> None:
        await self.client.aclose()


class RawPoster:
    """HTTP/1.1 keep-alive POSTs on plain asyncio streams: ~0.1 ms of client CPU per request.

    httpx costs several milliseconds of CPU per request on a small machine (2 vCPUs here), so at 200
    requests/s an httpx client saturates its own core and the numbers describe the client, not the server.
    The API server's Go client is closer to this one.
    """

    def __init__(self, url: str) -> None:
        parsed = httpx.URL(url)
        self.host, self.port, self.path = parsed.host, parsed.port or 80, parsed.raw_path.decode()
        self.idle: asyncio.Queue[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = asyncio.Queue()
        self.opened = 0

    async def _connection(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self.idle.empty() and self.opened < CONNECTIONS:
            self.opened += 1
            return await asyncio.open_connection(self.host, self.port)
        return await self.idle.get()

    async def post(self, body: bytes) -> int:
        reader, writer = await self._connection()
        head = (
            f"POST {self.path} HTTP/1.1\r\nHost: {self.host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode()
        try:
            writer.write(head + body)
            status_line = await reader.readline()
            length = 0
            while (line := await reader.readline()) not in (b"\r\n", b""):
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            await reader.readexactly(length)
        except (OSError, asyncio.IncompleteReadError, ValueError):
            writer.close()
            self.opened -= 1
            return 0
        self.idle.put_nowait((reader, writer))
        return int(status_line.split()[1])

    async def aclose(self) -> None:
        while not self.idle.empty():
            self.idle.get_nowait()[1].close()


async def drive(
    url: str,
    make: Callable[[int, list[dict[str, Any]]], dict[str, Any]],
    reviews: list[dict[str, Any]],
    *,
    rate: float,
    seconds: float,
    client: str = "raw",
    warmup_seconds: float = 1.0,
) -> dict[str, Any]:
    """Open-loop load: request i is due at t0 + i / rate; latency is measured from its actual send."""
    latencies: list[float] = []
    errors = dropped = 0
    in_flight = 0
    total = int(rate * (seconds + warmup_seconds))
    warm = int(rate * warmup_seconds)
    bodies = [json.dumps(make(i, reviews)).encode() for i in range(total)]
    poster: HttpxPoster | RawPoster = HttpxPoster(url) if client == "httpx" else RawPoster(url)

    async def one(i: int) -> None:
        nonlocal errors, in_flight
        started = time.perf_counter()
        status = await poster.post(bodies[i])
        elapsed = time.perf_counter() - started
        in_flight -= 1
        if i < warm:
            return
        if status == 200:
            latencies.append(elapsed)
        else:
            errors += 1

    tasks = []
    t0 = time.perf_counter()
    for i in range(total):
        delay = t0 + i / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        if in_flight >= MAX_IN_FLIGHT:
            dropped += i >= warm
            continue
        in_flight += 1
        tasks.append(asyncio.create_task(one(i)))
    await asyncio.gather(*tasks)
    await poster.aclose()
    return _stats(latencies, errors=errors, dropped=dropped, sent=total - warm)


def _stats(latencies: list[float], *, errors: int, dropped: int, sent: int) -> dict[str, Any]:
    ms = sorted(x * 1000 for x in latencies)

    def pct(p: float) -> float:
        if not ms:
            return float("nan")
        return ms[min(len(ms) - 1, int(p * len(ms)))]

    return {
        "sent": sent,
        "ok": len(ms),
        "errors": errors,
        "dropped": dropped,
        "p50_ms": round(pct(0.50), 3),
        "p99_ms": round(pct(0.99), 3),
        "max_ms": round(ms[-1], 3) if ms else float("nan"),
        "mean_ms": round(statistics.fmean(ms), 3) if ms else float("nan"),
    }


def load(url: str, workload: str, rate: float, seconds: float, client: str = "raw") -> dict[str, Any]:
    """One row's load, run in a separate process (see ``run``)."""
    reviews = recorded_reviews()
    if workload == "new-plan":
        statefulset = next(r for r in reviews if r["request"]["kind"]["kind"] == "StatefulSet")
        make = new_plan_each_time(statefulset)
    else:
        make = recorded_mix
    return asyncio.run(drive(url, make, reviews, rate=rate, seconds=seconds, client=client))


def run(
    *, rate: float = 200.0, seconds: float = 10.0, client: str = "raw", fleet: bool = False
) -> list[dict[str, Any]]:
    """Measure the three rows (see the module docstring); ``p99_vs_bare`` is p99 / the bare endpoint's p99.

    The servers run in this process; the load generator runs in a child process, so the client's own CPU time
    (httpx costs about a millisecond per request) does not compete with the server for this process's GIL, as
    it would not in a cluster where the API server is the client.
    """
    notes: list[str] = []
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
        pool.submit(time.sleep, 0).result()  # start the child before anything is timed
        with serve(bare_app()) as bare_url:
            bare = pool.submit(load, f"{bare_url}/bare", "recorded", rate, seconds, client).result()
        with serve(webhook_app()) as url:
            if gc.get_freeze_count() == 0:
                # A full collection walks ~10^5 start-up objects (~100 ms on a small VM); a server moves them out
                # of the collector's way after start-up. Done here when the app's lifespan does not do it itself.
                gc.collect()
                gc.freeze()
                notes.append(
                    "gc.freeze() after start-up was applied by the benchmark, not by the app's lifespan"
                )
            target = f"{url}/admission/validate"
            recorded = pool.submit(load, target, "recorded", rate, seconds, client).result()
            fresh = pool.submit(load, target, "new-plan", rate, seconds, client).result()
        measured = [
            ("webhook, recorded reviews", recorded),
            ("webhook, every review a new plan", fresh),
            ("bare FastAPI endpoint", bare),
        ]
        if fleet:
            with tempfile.TemporaryDirectory(prefix="kvcap-bench-") as scratch, stub_fleet() as port:
                database_url = f"sqlite+aiosqlite:///{scratch}/fleet.db"
                upgrade(database_url)
                seed_fleet(database_url, port)
                for worker, label in FLEET_WORKERS:
                    row = _fleet_row(pool, database_url, worker=worker, rate=rate, seconds=seconds)
                    measured.append(
                        (f"webhook, recorded reviews, {FLEET:,} live deployments scraped on the {label}", row)
                    )
    rows: list[dict[str, Any]] = []
    for name, result in measured:
        rows.append(
            {
                "name": name,
                "rate_rps": rate,
                "seconds": seconds,
                "client": client,
                **result,
                "p99_vs_bare": round(result["p99_ms"] / bare["p99_ms"], 2) if bare["p99_ms"] else None,
                "notes": notes if name.startswith("webhook") else [],
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=200.0, help="requests per second (default 200)")
    parser.add_argument("--seconds", type=float, default=10.0, help="measured seconds per row (default 10)")
    parser.add_argument(
        "--client", choices=("raw", "httpx"), default="raw", help="load client (default raw: see RawPoster)"
    )
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    parser.add_argument(
        "--fleet", action="store_true", help=f"add the rows with {FLEET:,} live deployments being scraped"
    )
    parser.add_argument(
        "--serve-fleet", nargs=2, metavar=("WORKER", "DATABASE_URL"), help=argparse.SUPPRESS
    )  # a fleet row's server (see fleet_server)
    args = parser.parse_args()
    if args.serve_fleet:
        worker, database_url = args.serve_fleet
        serve_fleet_main(worker, database_url)
        return
    rows = run(rate=args.rate, seconds=args.seconds, client=args.client, fleet=args.fleet)
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(
        f"admission webhook, {args.rate:g} requests/s open-loop for {args.seconds:g} s, database stopped, "
        f"{args.client} client over {CONNECTIONS} keep-alive connections"
    )
    width = max(len(row["name"]) for row in rows)
    header = f"{'':{width}} {'ok':>6} {'err':>4} {'drop':>4} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'p99/bare':>9}"
    print(header)
    for row in rows:
        print(
            f"{row['name']:{width}} {row['ok']:>6} {row['errors']:>4} {row['dropped']:>4} {row['p50_ms']:>8.2f} "
            f"{row['p99_ms']:>8.2f} {row['max_ms']:>8.2f} {row['p99_vs_bare']:>9.2f}"
        )
        if "fleet_note" in row:
            print(f"{'':{width}}   ({row['fleet_note']})")
        if "handover_note" in row:
            print(f"{'':{width}}   ({row['handover_note']})")
    counted = [
        row
        for row in rows
        if not any(other in row["name"] for other in ("serving event loop", "worker thread", "bare"))
    ]
    worst = max(row["p99_ms"] for row in counted)
    lost = sum(row["dropped"] + row["errors"] for row in counted)
    print(
        f"p99 < 10 ms, nothing dropped: {'yes' if worst < 10 and not lost else 'NO'} "
        f"(worst webhook p99 {worst:.2f} ms; {lost} dropped or failed)"
    )
    for note in rows[0]["notes"]:
        print(f"note: {note}")


if __name__ == "__main__":
    main()
