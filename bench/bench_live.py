"""Live-metrics benchmark: refreshing 1,000 vLLM targets and rendering ``/metrics`` for 1,000 deployments.

Absolute times depend on the machine, so each is printed next to a baseline measured in the same run:

- refresh of 1,000 targets (one local stub HTTP server on 127.0.0.1 serving the real vLLM 0.32 busy
  exposition, a different path per target, through the real ``LiveManager``, guard and parser) against the
  ideal ``single scrape × 1000 / concurrency`` — above 1 means the refresh is CPU-bound (parsing and HTTP
  run on one event loop) rather than limited by the concurrency bound;
- ``render_metrics`` for 1,000 deployments (3 pods each, with predictions) against ``1,000 × render of one``;
- a scrape of ``/metrics`` for the same 1,000 deployments as the server answers it (``ExpositionCache``: the
  per-deployment part rendered once per refresh, the process-wide part per scrape) against the full render.

Memory (``memory()``, in a fresh process so that nothing else is counted): what the live worker process holds
for 1,000 registered deployments of 10 pods each — the registry, the cached plans and the last observation of
every pod (its histograms are the baseline of the next latency window) — measured with ``tracemalloc`` per
deployment, and the process's resident size with all of it; plus what the serving process holds of it (the
snapshot handed over: observations without histograms, predictions, the rendered fleet) and what unpickling
that snapshot costs.

Run: ``python -m bench.bench_live`` (``--memory`` for the memory figures alone).
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

from service.exporter.collector import AdmissionMetrics, PredictedCapacity, SelfMetrics, render_metrics
from service.exporter.exposition import ExpositionCache
from service.live.guard import TargetGuard
from service.live.manager import DeploymentKey, DeploymentObservation, LiveManager, LiveTarget, aggregate
from service.live.parser import parse_vllm_metrics
from service.live.schemas import parse_live_source
from service.live.scraper import TargetResult, make_client, scrape

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "data" / "vllm-metrics" / "vllm-0.32.0-cpu-busy.txt"
TARGETS = 1000
DEPLOYMENTS = 1000
CONCURRENCY = 32  # KVCAP_SCRAPE_CONCURRENCY's default


async def _serve_forever(body: bytes) -> tuple[asyncio.Server, int]:
    """A keep-alive HTTP/1.1 server answering every GET with ``body`` (like a fleet of identical vLLMs)."""
    head = f"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {len(body)}\r\n\r\n".encode()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(
            ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError, OSError
        ):
            while True:
                await reader.readuntil(b"\r\n\r\n")
                writer.write(head + body)
                await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, backlog=1024)
    return server, server.sockets[0].getsockname()[1]


async def _stub_main(body: bytes) -> None:
    server, port = await _serve_forever(body)
    print(port, flush=True)
    async with server:
        await server.serve_forever()


@contextlib.asynccontextmanager
async def _stub_process(path: Path) -> AsyncIterator[int]:
    """The stub in its own process, so its CPU time is not charged to kvcap's event loop."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bench.bench_live",
        "--serve",
        str(path),
        stdout=asyncio.subprocess.PIPE,
        cwd=ROOT,
    )
    assert process.stdout is not None
    try:
        line = await asyncio.wait_for(process.stdout.readline(), timeout=30)
        yield int(line)
    finally:
        process.terminate()
        await process.wait()


def _best_of(samples: list[float]) -> float:
    return statistics.median(samples)


async def _refresh_benchmark(body: bytes) -> list[tuple[str, float, str]]:
    async with _stub_process(FIXTURE) as port:
        guard = TargetGuard([])
        async with make_client(concurrency=CONCURRENCY) as client:
            url = f"http://127.0.0.1:{port}/warmup/metrics"
            await scrape(client, url, guard=guard, timeout_s=10, max_bytes=8 << 20)
            singles = []
            for i in range(30):
                started = time.perf_counter()
                await scrape(
                    client,
                    f"http://127.0.0.1:{port}/single/{i}/metrics",
                    guard=guard,
                    timeout_s=10,
                    max_bytes=8 << 20,
                )
                singles.append(time.perf_counter() - started)
        single = _best_of(singles)

        targets = [
            LiveTarget(
                namespace=f"ns-{i % 20}",
                name=f"deployment-{i}",
                source=parse_live_source({"scrape_urls": [f"http://127.0.0.1:{port}/target/{i}/metrics"]}),
            )
            for i in range(TARGETS)
        ]
        manager = LiveManager(
            client=make_client(concurrency=CONCURRENCY),
            guard=guard,
            timeout_s=10,
            max_bytes=8 << 20,
            concurrency=CONCURRENCY,
            owns_client=True,
        )
        try:
            await manager.refresh(targets[:CONCURRENCY])  # open the pooled connections
            started = time.perf_counter()
            await manager.refresh(targets)
            refresh = time.perf_counter() - started
        finally:
            await manager.aclose()
        ok = sum(o.replicas for o in manager.observations.values())

    text = body.decode()
    parses = []
    for _ in range(50):
        started = time.perf_counter()
        parse_vllm_metrics(text)
        parses.append(time.perf_counter() - started)
    parse = _best_of(parses)
    ideal = single * TARGETS / CONCURRENCY
    return [
        ("scrape 1 target (baseline)", single, f"median of 30, {len(body) // 1024} KiB exposition"),
        ("parse 1 exposition", parse, f"{parse * TARGETS:.2f}s of CPU per {TARGETS} targets"),
        (
            f"refresh {TARGETS} targets",
            refresh,
            f"{refresh / ideal:.2f}x baseline×{TARGETS}/{CONCURRENCY}; {ok}/{TARGETS} up",
        ),
    ]


def _observations(count: int, body: str) -> dict[DeploymentKey, DeploymentObservation]:
    metrics = parse_vllm_metrics(body)
    observations: dict[DeploymentKey, DeploymentObservation] = {}
    for i in range(count):
        urls = [f"http://10.{i // 250}.{i % 250}.{pod}:8000/metrics" for pod in range(3)]
        target = LiveTarget(
            namespace=f"ns-{i % 20}", name=f"deployment-{i}", source=parse_live_source({"scrape_urls": urls})
        )
        results = [
            TargetResult(
                url=url, ok=True, reason=None, duration_s=0.01, metrics=metrics, pod=f"deployment-{i}-{p}"
            )
            for p, url in enumerate(urls)
        ]
        observations[(target.namespace, target.name)] = aggregate(
            target, results, observed_at_s=time.time(), duration_s=0.02, errors_total={"timeout": 1}
        )
    return observations


def _predictions(keys: list[DeploymentKey]) -> dict[DeploymentKey, PredictedCapacity]:
    prediction = PredictedCapacity(
        num_gpu_blocks=8192,
        num_gpu_blocks_uncalibrated=8000,
        kv_cache_size_tokens=1_048_576,
        max_concurrency=512.0,
        max_num_seqs=256,
        recommended_replicas=3,
        replicas=3,
    )
    return dict.fromkeys(keys, prediction)


def _render_time(observations: dict[DeploymentKey, DeploymentObservation], repeats: int) -> tuple[float, int]:
    predictions = _predictions(list(observations))
    self_metrics = SelfMetrics(deployments_tracked=len(observations))
    admission = AdmissionMetrics()
    times = []
    size = 0
    for _ in range(repeats):
        started = time.perf_counter()
        size = len(render_metrics(predictions, observations, self_metrics, admission))
        times.append(time.perf_counter() - started)
    return _best_of(times), size


def _scrape_time(
    observations: dict[DeploymentKey, DeploymentObservation], repeats: int
) -> tuple[float, float]:
    """(median per scrape with the snapshot already rendered, time of the once-per-refresh render)."""
    predictions = _predictions(list(observations))
    self_metrics = SelfMetrics(deployments_tracked=len(observations))
    admission = AdmissionMetrics()
    cache = ExpositionCache()
    started = time.perf_counter()
    cache.prepare(predictions, observations)  # the live worker, right after a refresh
    prepare = time.perf_counter() - started
    times = []
    for i in range(repeats):
        admission.observe(verdict="allowed", kind="Deployment", duration_seconds=0.001 * i)
        started = time.perf_counter()
        cache.render(predictions, observations, self_metrics, admission)
        times.append(time.perf_counter() - started)
    return _best_of(times), prepare


def _render_benchmark(body: str) -> list[tuple[str, float, str]]:
    one, _ = _render_time(_observations(1, body), 200)
    fleet = _observations(DEPLOYMENTS, body)
    many, size = _render_time(fleet, 5)
    scrape, prepare = _scrape_time(fleet, 50)
    return [
        ("render /metrics, 1 deployment (baseline)", one, "3 pods, with prediction"),
        (
            f"render /metrics, {DEPLOYMENTS} deployments",
            many,
            f"{many / (one * DEPLOYMENTS):.2f}x baseline×{DEPLOYMENTS}; {size // 1024} KiB",
        ),
        (
            f"GET /metrics, {DEPLOYMENTS} deployments (rendered once per refresh)",
            scrape,
            f"{scrape / many:.3f}x the full render above; the once-per-refresh render took {prepare:.3f}s",
        ),
    ]


MEMORY_DEPLOYMENTS = 1000
MEMORY_PODS = 10


def _rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _memory_main() -> dict[str, float]:
    """The figures of ``memory()``; run in a process of its own (``--memory``)."""
    import gc
    import json
    import pickle
    import tracemalloc

    from bench.bench_admission import fleet_deployments
    from service.catalog.builtin import builtin_snapshot
    from service.catalog.snapshot import CatalogHolder
    from service.deployments.service import DeploymentsHolder
    from service.exporter.pipeline import Predictions
    from service.exporter.worker_process import LiveSnapshot, slim
    from service.planning.calibration import CalibrationHolder

    text = FIXTURE.read_text()
    catalog, calibrations = CatalogHolder(builtin_snapshot()), CalibrationHolder()
    gc.collect()
    rss_start = _rss_mib()
    tracemalloc.start()
    step = [tracemalloc.get_traced_memory()[0]]

    def took() -> float:
        gc.collect()
        now = tracemalloc.get_traced_memory()[0]
        used, step[0] = now - step[0], now
        return used / MEMORY_DEPLOYMENTS / 1024

    deployments = fleet_deployments(8000, MEMORY_DEPLOYMENTS)
    holder = DeploymentsHolder(deployments)
    registry_kib = took()
    predictions = Predictions()
    predictions.update(catalog, holder.deployments, calibrations)
    plans_kib = took()
    observations: dict[DeploymentKey, DeploymentObservation] = {}
    for i, deployment in enumerate(holder.deployments):
        urls = [f"http://10.{i // 250}.{i % 250}.{pod}:8000/metrics" for pod in range(MEMORY_PODS)]
        target = LiveTarget(
            namespace=deployment.namespace,
            name=deployment.name,
            source=parse_live_source({"scrape_urls": urls}),
        )
        results = [  # each pod's exposition parsed on its own, as a refresh reads them
            TargetResult(
                url=url,
                ok=True,
                reason=None,
                duration_s=0.01,
                metrics=parse_vllm_metrics(text),
                pod=f"p-{pod}",
            )
            for pod, url in enumerate(urls)
        ]
        observations[target.namespace, target.name] = aggregate(
            target, results, observed_at_s=time.time(), duration_s=0.02
        )
    del results
    observations_kib = took()
    tracemalloc.stop()
    gc.collect()
    rss_worker = _rss_mib()
    cache = ExpositionCache()
    light = {key: slim(o) for key, o in observations.items()}
    order, blocks = cache.fleet(predictions.capacities, light, {})
    payload = pickle.dumps(
        LiveSnapshot(
            capacities=dict(predictions.capacities),
            observations=light,
            latency={},
            order=order,
            blocks=blocks,
            last_refresh_timestamp_s=time.time(),
            last_refresh_duration_s=1.0,
        ),
        protocol=pickle.HIGHEST_PROTOCOL,
    )
    loads = []
    for _ in range(5):
        started = time.perf_counter()
        pickle.loads(payload)
        loads.append(time.perf_counter() - started)
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    kept = pickle.loads(payload)
    gc.collect()
    snapshot_kib = (tracemalloc.get_traced_memory()[0] - before) / MEMORY_DEPLOYMENTS / 1024
    del kept
    figures = {
        "registry_kib": registry_kib,
        "plans_kib": plans_kib,
        "observations_kib": observations_kib,
        "per_deployment_kib": registry_kib + plans_kib + observations_kib,
        "rss_start_mib": rss_start,
        "rss_worker_mib": rss_worker,
        "snapshot_kib": snapshot_kib,
        "snapshot_bytes": float(len(payload)),
        "unpickle_s": statistics.median(loads),
    }
    print(json.dumps(figures), flush=True)
    return figures


def memory() -> dict[str, float]:
    """``_memory_main``'s figures, measured in a fresh interpreter."""
    import json
    import subprocess

    out = subprocess.run(
        [sys.executable, "-m", "bench.bench_live", "--memory"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    figures: dict[str, float] = json.loads(out.strip().splitlines()[-1])
    return figures


def memory_rows(figures: dict[str, float]) -> list[tuple[str, str, str]]:
    """(name, value, note) rows of ``memory()``."""
    pods = MEMORY_PODS
    return [
        (
            f"live state per deployment ({pods} pods), worker process",
            f"{figures['per_deployment_kib']:.1f} KiB",
            f"registry {figures['registry_kib']:.1f} + plans {figures['plans_kib']:.1f} + "
            f"observations {figures['observations_kib']:.1f} KiB (tracemalloc)",
        ),
        (
            f"worker process RSS with {MEMORY_DEPLOYMENTS:,} deployments, {MEMORY_DEPLOYMENTS * pods:,} pods",
            f"{figures['rss_worker_mib']:.0f} MiB",
            f"{figures['rss_start_mib']:.0f} MiB after imports and the catalog",
        ),
        (
            "snapshot the serving process holds, per deployment",
            f"{figures['snapshot_kib']:.1f} KiB",
            f"{figures['snapshot_bytes'] / 1024:.0f} KiB pickled for {MEMORY_DEPLOYMENTS:,}; unpickling "
            f"{figures['unpickle_s'] * 1e3:.1f} ms",
        ),
    ]


def run() -> list[tuple[str, float, str]]:
    """(name, seconds, note) rows."""
    body = FIXTURE.read_bytes()
    rows = asyncio.run(_refresh_benchmark(body))
    rows += _render_benchmark(body.decode())
    return rows


def main() -> None:
    if "--memory" in sys.argv:
        _memory_main()
        return
    for name, value, note in memory_rows(memory()):
        print(f"{name:<62}  {value:>10}  {note}")
    rows = run()
    width = max(len(name) for name, _, _ in rows)
    print(f"{'benchmark':<{width}}  {'seconds':>10}  note")
    for name, seconds, note in rows:
        print(f"{name:<{width}}  {seconds:>10.4f}  {note}")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--serve":
        asyncio.run(_stub_main(Path(sys.argv[2]).read_bytes()))
    else:
        main()
