"""The live loop in a worker process: scraping, parsing and re-planning never share the serving process's GIL.

A thread (``LiveWorker``) keeps the live loop off the serving event loop but not off its interpreter: parsing a
thousand expositions and re-planning a thousand deployments is CPU work, and while the thread holds the GIL an
admission review waits for it. ``LiveProcess`` runs the same loop (``live_tick``) in a child process started
with ``spawn``, with its own database engine, HTTP client, coordinator and in-memory catalog, registry and
calibrations (reloaded from the database every ``KVCAP_CATALOG_REFRESH_SECONDS``, and the registry whenever
this replica writes to it). After each pass the child sends one ``LiveSnapshot`` over a pipe:

- the rendered ``/metrics`` blocks of every per-deployment family (``ExpositionCache``), as bytes;
- the predicted capacities and latencies, and the observations without what only the child needs (the pods'
  cumulative histograms, the baselines of the next latency window, and their ``cache_config_info`` labels,
  which calibration reads), for ``GET /v1/live/deployments`` and kvcap's own metrics;
- the refresh's timestamp and duration.

The snapshot travels as separately pickled pieces (``encode_snapshot``: a header with the rendered blocks, then
16 deployments a piece). In the serving process a supervisor thread receives it, unpickles it piece by piece
(``decode_snapshot``), giving up the GIL between pieces — one ``pickle.loads`` of a 1,000-deployment snapshot
held it for 35-57 ms on a loaded 2-core VM, and an admission review waited that long — and, once it holds the
whole snapshot, swaps the references the routes read (``app.state.live.observations``,
``app.state.predictions.capacities``, ``app.state.latency_predictions.latency`` and the exposition cache) at
once; a payload that is not a whole snapshot is rejected and the last one keeps serving. The serving loop parses
nothing and renders nothing per deployment.

If the child dies, the supervisor logs it, counts it (``kvcap_live_worker_restarts_total``) and starts a new one
after a back-off; the last snapshot keeps serving meanwhile. Shutdown sends ``stop``: the child cancels its loop,
releases its coordination leases and connections, and exits; one that does not within the timeout is
terminated, then killed. A child whose parent vanished sees its end of the pipe close and exits too.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import multiprocessing
import os
import pickle
import signal
import socket
import struct
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from types import MappingProxyType
from typing import Any, Protocol

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from service.catalog.builtin import builtin_snapshot
from service.catalog.snapshot import CatalogHolder
from service.db.session import create_engine, create_sessionmaker
from service.deployments.service import DeploymentsHolder
from service.exporter.collector import PredictedCapacity, PredictedLatency
from service.exporter.exposition import ExpositionCache
from service.exporter.latency import LatencyPredictions
from service.exporter.pipeline import WORKER_SWITCH_INTERVAL_S, Predictions, live_tick
from service.live.coordination import Coordinator, PostgresCoordinator, SingleCoordinator
from service.live.manager import DeploymentKey, DeploymentObservation, LiveManager
from service.logs import configure_logging
from service.planning.calibration import CalibrationHolder
from service.planning.step_time_calibration import StepTimeScales
from service.settings import Settings

logger = logging.getLogger("kvcap.live")

STOP = b"stop"
RELOAD_DEPLOYMENTS = b"reload-deployments"
WORKER_NICENESS = 10
"""Added to the worker process's nice value (``os.nice``): the scheduler favours the serving process."""
RESTART_BACKOFF_S = (1.0, 30.0)
"""First and longest wait before a dead worker process is started again (doubling in between)."""
HANDOVERS_KEPT = 1024


@dataclass(frozen=True, slots=True, kw_only=True)
class LiveSnapshot:
    """One pass of the live loop, as the worker process hands it to the serving process."""

    capacities: Mapping[DeploymentKey, PredictedCapacity]
    observations: Mapping[DeploymentKey, DeploymentObservation]
    """Without the pods' histograms and cache-config labels (see ``slim``)."""
    latency: Mapping[DeploymentKey, PredictedLatency]
    order: tuple[str, ...]
    """Every family of the per-deployment render, in exposition order."""
    blocks: Mapping[str, bytes]
    """The per-deployment families, rendered."""
    last_refresh_timestamp_s: float | None
    last_refresh_duration_s: float | None


def slim(observation: DeploymentObservation) -> DeploymentObservation:
    """The observation without what only the live loop reads: each pod's cumulative histograms (the baseline
    of the next latency window) and its ``cache_config_info`` labels (what calibration checks). Everything
    ``/metrics`` and ``/v1/live/deployments`` show is kept. (The deployment's ``cache_config`` goes too: it is
    the first healthy pod's.)"""
    return dataclasses.replace(
        observation,
        pods=tuple(dataclasses.replace(pod, histograms={}, cache_config=None) for pod in observation.pods),
        errors_total=dict(observation.errors_total),
        cache_config=None,
    )


SNAPSHOT_MAGIC = b"KVCS"
SNAPSHOT_FORMAT = 1
"""Bumped when the layout of the pieces changes (both processes run the same code, so it never differs in
practice; a mismatch is rejected like any other malformed payload)."""
SNAPSHOT_PIECE_DEPLOYMENTS = 16
"""Entries of each mapping per piece: unpickling 16 one-pod deployments takes ~0.1 ms on an idle 2-core VM,
where one ``pickle.loads`` of a whole 1,000-deployment snapshot took ~11 ms (35-57 ms with the VM loaded)."""
_FRAME = struct.Struct("<4sII")  # magic, format, pieces
_LENGTH = struct.Struct("<I")


class SnapshotError(ValueError):
    """A handed-over payload that is not a whole, well-formed snapshot (truncated, corrupt, or of another
    format); the serving process keeps the snapshot it has."""


@dataclass(frozen=True, slots=True)
class DecodedSnapshot:
    """A snapshot read back from its pieces, and how long reading it held the GIL."""

    snapshot: LiveSnapshot
    pieces: int
    """Pickles read: the header and one per ``SNAPSHOT_PIECE_DEPLOYMENTS`` deployments."""
    held_s: float
    """Time spent inside ``pickle.loads`` (which never releases the GIL), all pieces together."""
    longest_s: float
    """The longest single ``pickle.loads``: the longest the serving threads could wait on this one."""


@dataclass(frozen=True, slots=True)
class Handover:
    """One snapshot taken in by the serving process (``LiveProcess.handovers``)."""

    pieces: int
    held_s: float
    """GIL held to unpickle the pieces and swap the references (``DecodedSnapshot.held_s`` plus the swap)."""
    longest_s: float
    """The longest uninterrupted stretch of it (one piece, or the swap)."""
    wall_s: float
    """From the first piece to the swap, the pauses between pieces included."""


def encode_snapshot(snapshot: LiveSnapshot, *, per_piece: int = SNAPSHOT_PIECE_DEPLOYMENTS) -> bytes:
    """The snapshot as one payload of separately pickled pieces (see ``decode_snapshot``).

    Layout: ``magic, format, n`` (``_FRAME``), the ``n`` piece lengths, then the pieces. Piece 0 is the header
    ``(per_piece, sizes, order, blocks, last_refresh_timestamp_s, last_refresh_duration_s)``, where ``sizes`` is
    the length of the three mappings; piece ``i`` is ``(i, capacities, observations, latency)``, each the entries
    ``[(i - 1) * per_piece, i * per_piece)`` of that mapping as a list of ``(key, value)`` pairs, in its order.
    """
    mappings = (snapshot.capacities, snapshot.observations, snapshot.latency)
    items = [list(mapping.items()) for mapping in mappings]
    header = (
        per_piece,
        tuple(len(entries) for entries in items),
        snapshot.order,
        dict(snapshot.blocks),
        snapshot.last_refresh_timestamp_s,
        snapshot.last_refresh_duration_s,
    )
    pieces = [pickle.dumps(header, protocol=pickle.HIGHEST_PROTOCOL)]
    longest = max((len(entries) for entries in items), default=0)
    for index, start in enumerate(range(0, longest, per_piece), start=1):
        chunk = (index, *(entries[start : start + per_piece] for entries in items))
        pieces.append(pickle.dumps(chunk, protocol=pickle.HIGHEST_PROTOCOL))
    lengths = b"".join(_LENGTH.pack(len(piece)) for piece in pieces)
    return b"".join([_FRAME.pack(SNAPSHOT_MAGIC, SNAPSHOT_FORMAT, len(pieces)), lengths, *pieces])


def _yield_gil() -> None:
    time.sleep(0)  # releases the GIL: a thread waiting for it (the serving loop) can take it now


def decode_snapshot(payload: bytes, *, pause: Callable[[], None] = _yield_gil) -> DecodedSnapshot:
    """The snapshot ``encode_snapshot`` wrote, unpickled piece by piece with ``pause()`` between pieces.

    Each piece is one short ``pickle.loads``; between two, the serving threads get the GIL (the pause gives
    it up, and the interpreter's switch interval applies again). Nothing is published here: the caller swaps
    the whole snapshot in at once. Raises ``SnapshotError`` for a payload that is not a whole snapshot —
    truncated, with bytes past its last piece, a piece that does not unpickle, holds something else, is out of
    place or of another size than the header implies — so no half snapshot is ever returned.
    """
    view = memoryview(payload)
    if len(view) < _FRAME.size:
        raise SnapshotError(f"a snapshot payload of {len(view)} bytes has no frame")
    magic, version, count = _FRAME.unpack_from(view)
    if magic != SNAPSHOT_MAGIC or version != SNAPSHOT_FORMAT:
        raise SnapshotError(f"not a live snapshot of format {SNAPSHOT_FORMAT} ({magic!r}, {version})")
    offset = _FRAME.size + count * _LENGTH.size
    if count < 1 or len(view) < offset:
        raise SnapshotError(f"a snapshot payload of {len(view)} bytes cannot hold {count} pieces")
    lengths = [length for (length,) in _LENGTH.iter_unpack(view[_FRAME.size : offset])]
    if offset + sum(lengths) != len(view):
        raise SnapshotError(
            f"the snapshot's {count} pieces take {sum(lengths)} bytes; {len(view) - offset} came"
        )
    held = longest = 0.0

    def load(piece: memoryview) -> object:
        nonlocal held, longest
        started = time.perf_counter()
        try:
            value = pickle.loads(piece)  # our own child, over a private pipe
        except Exception as exc:
            raise SnapshotError(f"a snapshot piece does not unpickle: {type(exc).__name__}: {exc}") from exc
        took = time.perf_counter() - started
        held += took
        longest = max(longest, took)
        return value

    pieces = []
    for length in lengths:
        pieces.append(view[offset : offset + length])
        offset += length
    header = load(pieces[0])
    if not (
        isinstance(header, tuple)
        and len(header) == 6
        and isinstance(header[0], int)
        and header[0] > 0
        and isinstance(header[1], tuple)
        and len(header[1]) == 3
        and all(isinstance(size, int) and size >= 0 for size in header[1])
        and isinstance(header[2], tuple)
        and isinstance(header[3], dict)
    ):
        raise SnapshotError("the snapshot's header is not one")
    per_piece, sizes, order, blocks, timestamp_s, duration_s = header
    if count != 1 + -(-max(sizes) // per_piece):
        raise SnapshotError(f"{count} pieces for mappings of {sizes} entries, {per_piece} a piece")
    capacities: dict[DeploymentKey, PredictedCapacity] = {}
    observations: dict[DeploymentKey, DeploymentObservation] = {}
    latency: dict[DeploymentKey, PredictedLatency] = {}
    into: tuple[tuple[dict[DeploymentKey, Any], type], ...] = (
        (capacities, PredictedCapacity),
        (observations, DeploymentObservation),
        (latency, PredictedLatency),
    )
    for index, piece in enumerate(pieces[1:], start=1):
        pause()
        chunk = load(piece)
        start = (index - 1) * per_piece
        if not (
            isinstance(chunk, tuple)
            and len(chunk) == 4
            and chunk[0] == index
            and all(
                isinstance(entries, list) and len(entries) == max(0, min(per_piece, size - start))
                for entries, size in zip(chunk[1:], sizes, strict=True)
            )
        ):
            raise SnapshotError(f"snapshot piece {index} is not entries {start} to {start + per_piece - 1}")
        for (target, kind), entries in zip(into, chunk[1:], strict=True):
            for entry in entries:
                if not (
                    isinstance(entry, tuple)
                    and len(entry) == 2
                    and isinstance(entry[0], tuple)
                    and isinstance(entry[1], kind)
                ):
                    raise SnapshotError(f"a snapshot piece holds something other than a {kind.__name__}")
                target[entry[0]] = entry[1]
    got = (len(capacities), len(observations), len(latency))
    if got != sizes:
        raise SnapshotError(f"the snapshot's pieces hold {got} entries; its header says {sizes}")
    snapshot = LiveSnapshot(
        capacities=capacities,
        observations=observations,
        latency=latency,
        order=order,
        blocks=blocks,
        last_refresh_timestamp_s=timestamp_s,
        last_refresh_duration_s=duration_s,
    )
    return DecodedSnapshot(snapshot, pieces=len(pieces), held_s=held, longest_s=longest)


class LiveView:
    """The serving process's read side of a ``LiveManager`` whose refreshes run in the worker process."""

    def __init__(self) -> None:
        self.observations: Mapping[DeploymentKey, DeploymentObservation] = MappingProxyType({})
        self.last_refresh_timestamp_s: float | None = None
        self.last_refresh_duration_s: float | None = None
        self.worker_restarts = 0
        """Times the worker process died and was started again (``kvcap_live_worker_restarts_total``)."""

    @property
    def deployments_tracked(self) -> int:
        return len(self.observations)

    async def aclose(self) -> None:
        """Nothing to close: the worker process owns the connections."""


def process_supported(settings: Settings) -> bool:
    """Whether the live loop can run in a worker process: it needs a database both processes can open (an
    in-memory SQLite database exists in one process only)."""
    url = settings.database_url
    in_memory = url.startswith("sqlite") and (":memory:" in url or url.rstrip("/").endswith(":"))
    return not in_memory and "spawn" in multiprocessing.get_all_start_methods()


def use_process(settings: Settings) -> bool:
    """``KVCAP_LIVE_WORKER``: ``process`` (where supported), ``thread``, or ``auto`` (process where supported)."""
    if settings.live_worker == "thread":
        return False
    supported = process_supported(settings)
    if settings.live_worker == "process" and not supported:
        logger.warning(
            "KVCAP_LIVE_WORKER=process needs a database file or server; running the live loop on a thread"
        )
    return supported


class LiveProcess:
    """Starts, feeds and supervises the worker process; publishes its snapshots (see the module docstring)."""

    def __init__(
        self,
        settings: Settings,
        *,
        view: LiveView,
        deployments: DeploymentsHolder,
        predictions: Predictions,
        latency: LatencyPredictions,
        exposition: ExpositionCache,
    ) -> None:
        self._settings = settings
        self._view = view
        self._deployments = deployments
        self._predictions = predictions
        self._latency = latency
        self._exposition = exposition
        self._context = multiprocessing.get_context("spawn")
        self._stopping = threading.Event()
        self._send_lock = threading.Lock()
        self._process: BaseProcess | None = None
        self._conn: Connection | None = None
        self._thread = threading.Thread(target=self._supervise, name="kvcap-live-supervisor", daemon=True)
        self.snapshots = 0
        """Snapshots received, for tests and diagnostics."""
        self.rejected = 0
        """Payloads that were not a whole snapshot (``SnapshotError``): logged, and the last snapshot kept."""
        self.handovers: deque[Handover] = deque(maxlen=HANDOVERS_KEPT)
        """The latest snapshots' hand-over costs in this process, oldest first (diagnostics, the benchmark)."""

    @property
    def pid(self) -> int | None:
        process = self._process
        return process.pid if process is not None else None

    def start(self) -> None:
        if sys.getswitchinterval() > WORKER_SWITCH_INTERVAL_S:  # the unpickling thread yields the GIL sooner
            sys.setswitchinterval(WORKER_SWITCH_INTERVAL_S)
        self._spawn()
        self._thread.start()

    def is_alive(self) -> bool:
        process = self._process
        return self._thread.is_alive() or (process is not None and process.is_alive())

    async def stop(self, timeout_s: float = 10.0) -> None:
        """Ask the worker process to finish, wait for it (terminate, then kill, past ``timeout_s``) and for the
        supervisor thread, without blocking the caller's loop."""
        await asyncio.to_thread(self._stop, timeout_s)

    def _stop(self, timeout_s: float) -> None:
        self._stopping.set()
        self._send(STOP)
        process = self._process
        if process is not None:
            process.join(timeout_s)
            if process.is_alive():
                logger.warning("the live worker process did not stop in %gs; terminating it", timeout_s)
                process.terminate()
                process.join(2)
            if process.is_alive():
                process.kill()
                process.join(2)
        self._thread.join(timeout_s)
        if self._conn is not None:
            self._conn.close()
        if process is not None:
            process.close()
        self._process = None

    def _spawn(self) -> None:
        parent, child = self._context.Pipe(duplex=True)
        process = self._context.Process(
            target=worker_main, args=(self._settings, child), name="kvcap-live-worker", daemon=True
        )
        process.start()
        child.close()  # the child's end lives in the child only: its exit closes the pipe
        old = self._process
        self._process, self._conn = process, parent
        if old is not None:
            old.close()
        logger.info("live worker process started (pid %s)", process.pid)

    def _send(self, message: bytes) -> None:
        with self._send_lock, contextlib.suppress(OSError, ValueError):
            if self._conn is not None:
                self._conn.send_bytes(message)

    def _supervise(self) -> None:
        backoff = RESTART_BACKOFF_S[0]
        while True:
            started = time.monotonic()
            self._relay()
            if self._stopping.is_set():
                return
            process = self._process
            if process is not None:
                process.join(1)
            code = process.exitcode if process is not None else None
            self._view.worker_restarts += 1
            if time.monotonic() - started > 10 * RESTART_BACKOFF_S[1]:
                backoff = RESTART_BACKOFF_S[0]  # it had been running fine: a fresh failure
            logger.error(
                "the live worker process (pid %s) exited with code %s; starting a new one in %gs",
                process.pid if process is not None else None,
                code,
                backoff,
            )
            if self._stopping.wait(backoff):
                return
            backoff = min(backoff * 2, RESTART_BACKOFF_S[1])
            with self._send_lock:
                if self._conn is not None:
                    self._conn.close()
                if self._stopping.is_set():
                    return
                self._spawn()

    def _relay(self) -> None:
        """Publish snapshots and forward registry writes until the process exits or ``stop`` is asked."""
        process, conn = self._process, self._conn
        assert process is not None and conn is not None
        writes = self._deployments.writes
        while not self._stopping.is_set():
            ready = wait([conn, process.sentinel], timeout=0.25)
            if conn in ready:
                try:
                    payload = conn.recv_bytes()
                except (EOFError, OSError):
                    return
                self.receive(payload)
            elif ready:  # the sentinel alone: the process exited
                return
            if self._deployments.writes != writes:  # a registration through this replica: read it now
                writes = self._deployments.writes
                self._send(RELOAD_DEPLOYMENTS)

    def receive(self, payload: bytes) -> bool:
        """Read a payload of the worker process piece by piece and publish it whole; one that is not a whole
        snapshot is logged, counted (``rejected``) and dropped, and the last snapshot keeps serving."""
        started = time.perf_counter()
        try:
            decoded = decode_snapshot(payload)
        except SnapshotError as exc:
            self.rejected += 1
            logger.error(
                "a live snapshot from the worker process was rejected; keeping the last one: %s", exc
            )
            return False
        swap_started = time.perf_counter()
        self._publish(decoded.snapshot)
        finished = time.perf_counter()
        swap_s = finished - swap_started
        self.handovers.append(
            Handover(
                pieces=decoded.pieces,
                held_s=decoded.held_s + swap_s,
                longest_s=max(decoded.longest_s, swap_s),
                wall_s=finished - started,
            )
        )
        return True

    def _publish(self, snapshot: LiveSnapshot) -> None:
        """Swap the references the routes read; the exposition first, so a scrape finds it rendered."""
        self._exposition.install(
            snapshot.capacities, snapshot.observations, snapshot.latency, snapshot.order, snapshot.blocks
        )
        self._predictions.capacities = snapshot.capacities
        self._latency.latency = snapshot.latency
        self._view.observations = snapshot.observations
        self._view.last_refresh_duration_s = snapshot.last_refresh_duration_s
        self._view.last_refresh_timestamp_s = snapshot.last_refresh_timestamp_s
        self.snapshots += 1


def worker_main(settings: Settings, conn: Connection) -> None:
    """The worker process's entry point (``spawn``: a fresh interpreter that imports only what it runs)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group: the parent stops us
    with contextlib.suppress(OSError):
        # Background work: when the CPUs are short, the serving process's admission reviews go first.
        os.nice(WORKER_NICENESS)
    configure_logging(settings.log_level, settings.log_format)
    try:
        asyncio.run(_worker(settings, conn))
    finally:
        conn.close()


class _Reloadable(Protocol):
    async def reload(self, sessionmaker: async_sessionmaker[AsyncSession]) -> object: ...


class _Holders:
    """The worker process's own copies of what the serving process keeps in memory, read from the database."""

    def __init__(self) -> None:
        self.catalog = CatalogHolder(builtin_snapshot())
        self.deployments = DeploymentsHolder()
        self.calibrations = CalibrationHolder()
        self.scales = StepTimeScales()

    async def reload(
        self, sessionmaker: async_sessionmaker[AsyncSession], *, deployments_only: bool = False
    ) -> None:
        holders: tuple[_Reloadable, ...] = (
            (self.deployments,)
            if deployments_only
            else (self.catalog, self.deployments, self.calibrations, self.scales)
        )
        for holder in holders:
            try:
                await holder.reload(sessionmaker)
            except Exception as exc:  # the database is down: keep what was read last
                logger.warning("live worker: %s not reloaded: %s", type(holder).__name__, type(exc).__name__)


async def _worker(settings: Settings, conn: Connection) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    reload_deployments = asyncio.Event()

    def on_message() -> None:
        try:
            message = conn.recv_bytes()
        except (EOFError, OSError):  # the serving process is gone
            message = STOP
        if message == STOP:
            loop.remove_reader(conn.fileno())
            stop.set()
        elif message == RELOAD_DEPLOYMENTS:
            reload_deployments.set()

    loop.add_reader(conn.fileno(), on_message)
    engine = create_engine(settings.database_url, pool_size=2, timeouts=settings.database_timeouts)
    sessionmaker = create_sessionmaker(engine)
    coordinator: Coordinator
    if settings.database_url.startswith("postgresql"):
        coordinator = PostgresCoordinator(
            engine, f"{socket.gethostname()}-{os.getppid()}", settings.scrape_interval_seconds
        )
    else:
        coordinator = SingleCoordinator()
    holders = _Holders()
    live = LiveManager.from_settings(settings)
    jobs = [
        asyncio.create_task(_loop(settings, conn, holders, live, coordinator, sessionmaker)),
        asyncio.create_task(_refresh(settings, holders, sessionmaker, reload_deployments)),
    ]
    waiting = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait([waiting, *jobs], return_when=asyncio.FIRST_COMPLETED)
    finally:
        for job in [waiting, *jobs]:
            job.cancel()
        await asyncio.gather(waiting, *jobs, return_exceptions=True)
        for close in (coordinator.close, live.aclose, engine.dispose):
            try:
                await close()
            except Exception as exc:
                logger.warning("closing the live worker: %s: %s", type(exc).__name__, exc)


async def _refresh(
    settings: Settings,
    holders: _Holders,
    sessionmaker: async_sessionmaker[AsyncSession],
    reload_deployments: asyncio.Event,
) -> None:
    """The registry now when this replica wrote to it; everything every ``KVCAP_CATALOG_REFRESH_SECONDS``."""
    next_full = time.monotonic() + settings.catalog_refresh_seconds
    while True:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(reload_deployments.wait(), max(0.0, next_full - time.monotonic()))
        if reload_deployments.is_set():
            reload_deployments.clear()
            await holders.reload(sessionmaker, deployments_only=True)
        if time.monotonic() >= next_full:
            await holders.reload(sessionmaker)
            next_full = time.monotonic() + settings.catalog_refresh_seconds


async def _loop(
    settings: Settings,
    conn: Connection,
    holders: _Holders,
    live: LiveManager,
    coordinator: Coordinator,
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    await holders.reload(sessionmaker)
    predictions = Predictions()
    latency = LatencyPredictions()
    exposition = ExpositionCache()
    last_owned: set[str] = set()
    offered: set[tuple[str, str, int]] = set()
    interval_s = settings.scrape_interval_seconds
    while True:
        started = time.monotonic()
        try:
            await live_tick(
                deployments=holders.deployments,
                catalog=holders.catalog,
                calibrations=holders.calibrations,
                predictions=predictions,
                live=live,
                coordinator=coordinator,
                sessionmaker=sessionmaker,
                scales=holders.scales,
                latency=latency,
                last_owned=last_owned,
                offered=offered,
            )
        except Exception as exc:
            logger.warning("live refresh failed: %s: %s", type(exc).__name__, exc)
        try:
            snapshot = _snapshot(predictions, live, latency, exposition)
            payload = encode_snapshot(snapshot)
            await asyncio.to_thread(conn.send_bytes, payload)
        except (OSError, ValueError):  # the serving process is gone
            return
        except Exception as exc:
            logger.warning("handing over the live snapshot failed: %s: %s", type(exc).__name__, exc)
        await asyncio.sleep(max(0.0, interval_s - (time.monotonic() - started)))


def _snapshot(
    predictions: Predictions, live: LiveManager, latency: LatencyPredictions, exposition: ExpositionCache
) -> LiveSnapshot:
    capacities = dict(predictions.capacities)
    observations = {key: slim(o) for key, o in live.observations.items()}
    latencies = dict(latency.latency)
    order, blocks = exposition.fleet(capacities, observations, latencies)
    return LiveSnapshot(
        capacities=capacities,
        observations=observations,
        latency=latencies,
        order=order,
        blocks=blocks,
        last_refresh_timestamp_s=live.last_refresh_timestamp_s,
        last_refresh_duration_s=live.last_refresh_duration_s,
    )
