"""``/metrics`` rendered once per refresh, not once per scrape.

The per-deployment families (every metric whose labels name a ``deployment``) change only when the live loop
publishes a new snapshot: for 1,000 deployments they are ~10^4 samples and the bulk of a render. They are
rendered once per snapshot — by the live worker right after each tick, so no scrape pays for it — and kept as
bytes keyed by the snapshot objects themselves (each refresh swaps in new ones, so identity is the version).
Every other family (kvcap's own health, the admission counters, anything process-wide) is rendered fresh on
each scrape from empty fleet snapshots, which costs next to nothing, and spliced in.

The exposition text format is a sequence of family blocks, each starting with its ``# HELP`` line, in the
collector's order (prometheus client_python, ``exposition.generate_latest``); both renders come from the same
collector, so the blocks line up by name and the result is byte-for-byte the single render it replaces.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass

from service.exporter.collector import (
    AdmissionMetrics,
    PredictedCapacity,
    PredictedLatency,
    SelfMetrics,
    render_metrics,
)
from service.exporter.names import METRICS
from service.exporter.service_metrics import ServiceMetrics
from service.live.manager import DeploymentKey, DeploymentObservation

FLEET_FAMILIES: frozenset[str] = frozenset(m.name for m in METRICS if "deployment" in m.labels)
"""Families rendered once per snapshot; all others are rendered on every scrape."""

_HELP = re.compile(rb"^# HELP (\S+) ", re.MULTILINE)


def family_blocks(text: bytes) -> list[tuple[str, bytes]]:
    """``[(family name, its HELP/TYPE/sample lines)]`` in the order of the exposition."""
    starts = [(m.start(), m.group(1).decode()) for m in _HELP.finditer(text)]
    ends = [start for start, _ in starts[1:]] + [len(text)]
    return [(name, text[start:end]) for (start, name), end in zip(starts, ends, strict=True)]


@dataclass(frozen=True, slots=True)
class _Rendered:
    predictions: Mapping[DeploymentKey, PredictedCapacity]
    observations: Mapping[DeploymentKey, DeploymentObservation]
    latency: Mapping[DeploymentKey, PredictedLatency] | None
    order: tuple[str, ...]
    """Every family of the snapshot's render, in order (a family yielded only when there is data is in it)."""
    blocks: Mapping[str, bytes]
    """The fleet families' blocks."""


class ExpositionCache:
    """The fleet families of the latest snapshot as bytes; ``render`` splices in the per-scrape ones."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # one render of a new snapshot at a time (worker and a scrape may race)
        self._rendered: _Rendered | None = None
        self.renders = 0
        """Fleet renders done (once per snapshot), for tests and diagnostics."""

    def prepare(
        self,
        predictions: Mapping[DeploymentKey, PredictedCapacity],
        observations: Mapping[DeploymentKey, DeploymentObservation],
        latency: Mapping[DeploymentKey, PredictedLatency] | None = None,
    ) -> None:
        """Render the fleet families of this snapshot, unless it was rendered before (the live worker calls this
        after each refresh, so no scrape pays for it)."""
        self._rendered_for(predictions, observations, latency)

    def _rendered_for(
        self,
        predictions: Mapping[DeploymentKey, PredictedCapacity],
        observations: Mapping[DeploymentKey, DeploymentObservation],
        latency: Mapping[DeploymentKey, PredictedLatency] | None = None,
    ) -> _Rendered:
        current = self._rendered
        if (
            current is not None
            and current.predictions is predictions
            and current.observations is observations
            and current.latency is latency
        ):
            return current
        with self._lock:
            current = self._rendered
            if (
                current is not None
                and current.predictions is predictions
                and current.observations is observations
                and current.latency is latency
            ):
                return current
            blocks = family_blocks(
                render_metrics(predictions, observations, SelfMetrics(), AdmissionMetrics(), latency=latency)
            )
            current = _Rendered(
                predictions,
                observations,
                latency,
                order=tuple(name for name, _ in blocks),
                blocks={name: block for name, block in blocks if name in FLEET_FAMILIES},
            )
            self._rendered = current
            self.renders += 1
            return current

    def fleet(
        self,
        predictions: Mapping[DeploymentKey, PredictedCapacity],
        observations: Mapping[DeploymentKey, DeploymentObservation],
        latency: Mapping[DeploymentKey, PredictedLatency] | None = None,
    ) -> tuple[tuple[str, ...], Mapping[str, bytes]]:
        r"""The family order and the rendered per-deployment blocks of this snapshot (what the live worker
        process hands to the serving process, which ``install``\ s them)."""
        rendered = self._rendered_for(predictions, observations, latency)
        return rendered.order, rendered.blocks

    def install(
        self,
        predictions: Mapping[DeploymentKey, PredictedCapacity],
        observations: Mapping[DeploymentKey, DeploymentObservation],
        latency: Mapping[DeploymentKey, PredictedLatency] | None,
        order: tuple[str, ...],
        blocks: Mapping[str, bytes],
    ) -> None:
        """Take the blocks ``fleet`` rendered elsewhere as the render of this snapshot (the same objects the
        routes will pass to ``render``)."""
        with self._lock:
            self._rendered = _Rendered(predictions, observations, latency, order=order, blocks=blocks)

    def render(
        self,
        predictions: Mapping[DeploymentKey, PredictedCapacity],
        observations: Mapping[DeploymentKey, DeploymentObservation],
        self_metrics: SelfMetrics | None,
        admission: AdmissionMetrics | None,
        service: ServiceMetrics | None = None,
        latency: Mapping[DeploymentKey, PredictedLatency] | None = None,
    ) -> bytes:
        """What ``render_metrics`` returns for these arguments, rendering the fleet part once per snapshot;
        kvcap's own metrics (``service``: HTTP, TLS, build, process) are per scrape."""
        rendered = self._rendered_for(predictions, observations, latency)
        fresh = dict(
            family_blocks(
                render_metrics(
                    {},
                    {},
                    self_metrics or SelfMetrics(deployments_tracked=len(observations)),
                    admission,
                    service=service,
                )
            )
        )
        parts = [
            rendered.blocks[name] if name in rendered.blocks else fresh.pop(name, b"")
            for name in rendered.order
        ]
        # Families only a per-scrape render has (process-wide ones yielded only sometimes) go last.
        parts += [block for name, block in fresh.items() if name not in rendered.blocks]
        return b"".join(parts)
