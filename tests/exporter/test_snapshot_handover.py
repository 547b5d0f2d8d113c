"""The snapshot handed from the worker process in pieces: read back, it is the snapshot a single pickle round trip
gives (same mappings, same order, same rendered fleet), and a payload that is not a whole snapshot is rejected
before anything is published."""

from __future__ import annotations

import math
import pickle
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from service.deployments.service import DeploymentsHolder
from service.exporter.collector import PredictedCapacity, PredictedLatency, render_metrics
from service.exporter.exposition import ExpositionCache
from service.exporter.latency import LatencyPredictions
from service.exporter.pipeline import Predictions
from service.exporter.worker_process import (
    SNAPSHOT_PIECE_DEPLOYMENTS,
    LiveProcess,
    LiveSnapshot,
    LiveView,
    SnapshotError,
    decode_snapshot,
    encode_snapshot,
    slim,
)
from service.live.manager import DeploymentKey, DeploymentObservation, LiveTarget, aggregate
from service.live.parser import VllmMetrics, parse_vllm_metrics
from service.live.schemas import parse_live_source
from service.live.scraper import TargetResult
from service.settings import Settings

DEPLOYMENTS = 150  # 9 full pieces of 16 and one of 6
FRAME = struct.Struct("<4sII")


def results(target: LiveTarget, urls: list[str], metrics: VllmMetrics, down: bool) -> list[TargetResult]:
    """Each pod's read; with ``down`` the first pod's read timed out."""
    return [
        TargetResult(
            url=url,
            ok=not (down and pod == 0),
            reason="timeout" if down and pod == 0 else None,
            duration_s=0.01 * (pod + 1),
            metrics=None if down and pod == 0 else metrics,
            pod=f"{target.name}-{pod}",
        )
        for pod, url in enumerate(urls)
    ]


def fleet_snapshot(vllm_metrics_dir: Path, count: int = DEPLOYMENTS) -> LiveSnapshot:
    """``count`` deployments of 1-3 pods (some down, some with a latency window), predictions for most of them
    in another order, latency predictions for some: three mappings of different sizes and orders."""
    idle = parse_vllm_metrics((vllm_metrics_dir / "vllm-0.32.0-cpu-idle.txt").read_text())
    busy = parse_vllm_metrics((vllm_metrics_dir / "vllm-0.32.0-cpu-busy.txt").read_text())
    observations: dict[DeploymentKey, DeploymentObservation] = {}
    for i in range(count):
        urls = [f"http://10.1.{i % 250}.{pod}:8000/metrics" for pod in range(1 + i % 3)]
        target = LiveTarget(
            namespace=f"ns-{i % 7}", name=f"deployment-{i}", source=parse_live_source({"scrape_urls": urls})
        )
        before = aggregate(target, results(target, urls, idle, False), observed_at_s=100.0, duration_s=0.02)
        observations[target.namespace, target.name] = slim(
            aggregate(
                target,
                results(target, urls, busy, i % 5 == 0),
                observed_at_s=115.0 + i / 1000,
                duration_s=0.03,
                errors_total={"timeout": i % 4} if i % 5 == 0 else {},
                previous=before if i % 2 else None,
            )
        )
    keys = list(observations)
    capacities = {
        key: PredictedCapacity(
            num_gpu_blocks=1000 + i,
            num_gpu_blocks_uncalibrated=1100 + i,
            kv_cache_size_tokens=16 * (1000 + i),
            max_concurrency=(16 * (1000 + i)) / 8192,
            max_num_seqs=256,
            recommended_replicas=None if i % 3 else 2,
            replicas=1 + i % 3,
        )
        for i, key in reversed(list(enumerate(keys))[: count - 7])
    }
    latency = {
        key: PredictedLatency(ttft_seconds=0.05 + i / 1e4, tpot_seconds=None if i % 4 else 0.012)
        for i, key in enumerate(keys)
        if i % 3 == 0
    }
    order, blocks = ExpositionCache().fleet(capacities, observations, latency)
    return LiveSnapshot(
        capacities=capacities,
        observations=observations,
        latency=latency,
        order=order,
        blocks=blocks,
        last_refresh_timestamp_s=1_764_000_000.25,
        last_refresh_duration_s=2.5,
    )


@pytest.fixture(scope="module")
def snapshot(vllm_metrics_dir: Path) -> LiveSnapshot:
    return fleet_snapshot(vllm_metrics_dir)


def test_the_fixture_is_a_many_deployment_snapshot_with_every_kind_of_entry(snapshot: LiveSnapshot) -> None:
    observations = list(snapshot.observations.values())
    assert len(observations) == DEPLOYMENTS > 8 * SNAPSHOT_PIECE_DEPLOYMENTS
    assert len(snapshot.capacities) == DEPLOYMENTS - 7 and len(snapshot.latency) == DEPLOYMENTS // 3
    windows = [o.latency.interval_seconds for o in observations if o.latency is not None]
    assert None in windows and any(w is not None for w in windows)  # since start, and since the last scrape
    assert any(not pod.up for o in observations for pod in o.pods)
    assert snapshot.blocks and set(snapshot.blocks) <= set(snapshot.order)


def test_the_pieced_snapshot_is_what_one_pickle_round_trip_gives(snapshot: LiveSnapshot) -> None:
    whole = pickle.loads(pickle.dumps(snapshot, protocol=pickle.HIGHEST_PROTOCOL))
    pauses: list[None] = []
    decoded = decode_snapshot(encode_snapshot(snapshot), pause=lambda: pauses.append(None))
    pieced = decoded.snapshot
    assert pieced == whole == snapshot
    for field in ("capacities", "observations", "latency", "blocks"):  # dict equality ignores the order
        assert list(getattr(pieced, field).items()) == list(getattr(whole, field).items()), field
        assert type(getattr(pieced, field)) is type(getattr(whole, field)) is dict
    assert pieced.order == whole.order
    # One header, then a piece per 16 entries of the largest mapping; the GIL given up between pieces.
    assert decoded.pieces == 1 + math.ceil(DEPLOYMENTS / SNAPSHOT_PIECE_DEPLOYMENTS) == 11
    assert len(pauses) == decoded.pieces - 1
    assert decoded.held_s >= decoded.longest_s > 0
    # What the serving process publishes renders the same /metrics.
    assert render_metrics(pieced.capacities, pieced.observations, latency=pieced.latency) == render_metrics(
        whole.capacities, whole.observations, latency=whole.latency
    )


@pytest.mark.parametrize("per_piece", [1, 7, DEPLOYMENTS, 1000])
def test_any_piece_size_reads_back_the_same_snapshot(snapshot: LiveSnapshot, per_piece: int) -> None:
    decoded = decode_snapshot(encode_snapshot(snapshot, per_piece=per_piece), pause=lambda: None)
    assert decoded.pieces == 1 + math.ceil(DEPLOYMENTS / per_piece)
    assert decoded.snapshot == snapshot
    assert list(decoded.snapshot.observations) == list(snapshot.observations)


def test_an_empty_snapshot_is_its_header_alone() -> None:
    empty = LiveSnapshot(
        capacities={},
        observations={},
        latency={},
        order=(),
        blocks={},
        last_refresh_timestamp_s=None,
        last_refresh_duration_s=None,
    )
    decoded = decode_snapshot(encode_snapshot(empty))
    assert decoded.pieces == 1 and decoded.snapshot == empty


def pieces_of(payload: bytes) -> list[bytes]:
    _, _, count = FRAME.unpack_from(payload)
    offset = FRAME.size + 4 * count
    lengths = struct.unpack_from(f"<{count}I", payload, FRAME.size)
    pieces = []
    for length in lengths:
        pieces.append(payload[offset : offset + length])
        offset += length
    return pieces


def framed(pieces: list[bytes], *, magic: bytes = b"KVCS", version: int = 1) -> bytes:
    lengths = struct.pack(f"<{len(pieces)}I", *(len(p) for p in pieces))
    return FRAME.pack(magic, version, len(pieces)) + lengths + b"".join(pieces)


def replaced(index: int, piece: bytes) -> Callable[[bytes], bytes]:
    def change(payload: bytes) -> bytes:
        pieces = pieces_of(payload)
        pieces[index] = piece
        return framed(pieces)

    return change


def junk(index: int) -> Callable[[bytes], bytes]:
    def change(payload: bytes) -> bytes:
        pieces = pieces_of(payload)
        pieces[index] = b"\xff" * len(pieces[index])  # same length: only unpickling can tell
        return framed(pieces)

    return change


BAD_PAYLOADS: dict[str, Callable[[bytes], bytes]] = {
    "empty": lambda payload: b"",
    "the frame cut short": lambda payload: payload[:6],
    "the lengths cut short": lambda payload: payload[: FRAME.size + 8],
    "cut in the middle of a piece": lambda payload: payload[: len(payload) // 2],
    "the last byte missing": lambda payload: payload[:-1],
    "bytes after the last piece": lambda payload: payload + b"\x00",
    "another magic": lambda payload: framed(pieces_of(payload), magic=b"JUNK"),
    "another format": lambda payload: framed(pieces_of(payload), version=2),
    "no pieces": lambda payload: framed([]),
    "a junk header": junk(0),
    "a junk piece in the middle": junk(5),
    "a junk last piece": junk(-1),
    "the last piece missing": lambda payload: framed(pieces_of(payload)[:-1]),
    "a piece twice, another missing": lambda payload: framed(
        [*pieces_of(payload)[:4], pieces_of(payload)[3], *pieces_of(payload)[5:]]
    ),
    "a piece repeated at the end": lambda payload: framed([*pieces_of(payload), pieces_of(payload)[1]]),
    "two pieces swapped": lambda payload: framed(
        [*pieces_of(payload)[:2], pieces_of(payload)[3], pieces_of(payload)[2], *pieces_of(payload)[4:]]
    ),
    "a header of another shape": replaced(0, pickle.dumps(("order", {}))),
    "a header announcing fewer entries": lambda payload: replaced(0, reheaded(payload, sizes=(143, 145, 50)))(
        payload
    ),
    "a piece of another shape": replaced(3, pickle.dumps(["x"])),
    "a piece one entry short": lambda payload: replaced(3, altered(payload, 3, lambda c: c[2].pop()))(
        payload
    ),
    "a piece holding other objects": lambda payload: replaced(
        3, altered(payload, 3, lambda c: c[1].__setitem__(0, (c[1][0][0], 1.0)))
    )(payload),
}


def reheaded(payload: bytes, *, sizes: tuple[int, int, int]) -> bytes:
    header = pickle.loads(pieces_of(payload)[0])
    return pickle.dumps((header[0], sizes, *header[2:]))


def altered(payload: bytes, index: int, change: Callable[[Any], object]) -> bytes:
    """Piece ``index`` unpickled, changed in place, pickled again (a well-formed pickle of the wrong content)."""
    chunk = pickle.loads(pieces_of(payload)[index])
    change(chunk)
    return pickle.dumps(chunk)


@pytest.mark.parametrize("change", BAD_PAYLOADS.values(), ids=BAD_PAYLOADS.keys())
def test_a_payload_that_is_not_a_whole_snapshot_is_rejected(
    snapshot: LiveSnapshot, change: Callable[[bytes], bytes]
) -> None:
    payload = encode_snapshot(snapshot)
    bad = change(payload)
    assert bad != payload
    with pytest.raises(SnapshotError):
        decode_snapshot(bad, pause=lambda: None)


def test_a_rejected_payload_publishes_nothing_and_the_last_snapshot_keeps_serving(
    snapshot: LiveSnapshot, caplog: pytest.LogCaptureFixture
) -> None:
    view, predictions, latency, exposition = (
        LiveView(),
        Predictions(),
        LatencyPredictions(),
        ExpositionCache(),
    )
    worker = LiveProcess(  # never started: what its supervisor thread does with each payload received
        Settings(database_url="sqlite+aiosqlite:////tmp/unused.db"),
        view=view,
        deployments=DeploymentsHolder(),
        predictions=predictions,
        latency=latency,
        exposition=exposition,
    )
    assert worker.receive(encode_snapshot(snapshot))
    published = (view.observations, predictions.capacities, latency.latency)
    assert published[0] == snapshot.observations and len(published[0]) == DEPLOYMENTS
    handover = worker.handovers[-1]
    assert handover.pieces == 11 and handover.wall_s >= handover.held_s >= handover.longest_s > 0

    # The next refresh's payload breaks off in its last piece: every earlier piece unpickled, none published.
    fewer = LiveSnapshot(
        capacities={},
        observations=dict(list(snapshot.observations.items())[:40]),
        latency={},
        order=snapshot.order,
        blocks=snapshot.blocks,
        last_refresh_timestamp_s=2.0,
        last_refresh_duration_s=1.0,
    )
    assert not worker.receive(junk(-1)(encode_snapshot(fewer)))
    assert not worker.receive(encode_snapshot(fewer)[:-3])
    assert (view.observations, predictions.capacities, latency.latency) == published
    assert all(
        now is then
        for now, then in zip(
            (view.observations, predictions.capacities, latency.latency), published, strict=True
        )
    )
    assert view.last_refresh_timestamp_s == snapshot.last_refresh_timestamp_s
    assert worker.rejected == 2 and worker.snapshots == 1 and len(worker.handovers) == 1
    assert sum("rejected" in r.getMessage() for r in caplog.records) == 2
    body = exposition.render(predictions.capacities, view.observations, None, None, latency=latency.latency)
    assert body == render_metrics(snapshot.capacities, snapshot.observations, latency=snapshot.latency)

    assert worker.receive(encode_snapshot(fewer))  # a whole one after them is taken as usual
    assert view.observations == fewer.observations and worker.snapshots == 2
