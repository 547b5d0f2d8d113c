"""The latest live observation of every deployment this replica owns, refreshed in the background.

``LiveManager.run`` is the background task: every interval it asks a provider for the registered deployments
(``LiveTarget``: namespace, name and ``live`` source), keeps those the ``Coordinator`` gives this replica, reads
them all concurrently under one bound, and swaps the new observations in with a single assignment. Readers
(``/metrics``, calibration) take ``observations`` — an immutable mapping — and never wait on a target: a
slow or broken target delays only the next snapshot, and costs nothing but its own ``up = 0``.

Aggregation over a deployment's pods follows what each number means: ``num_gpu_blocks`` is a per-replica
property, so the deployment value is the median (the low median, always a value some pod reports) and each
pod's own value is kept, so one odd pod stands out; usage is a per-replica fraction, so it is averaged;
request and preemption counts are additive, so they are summed. Latency and token histograms are additive
too: each pod's histograms are differenced against that pod's previous read (what happened since the last
refresh) and the differences summed; when any pod has no usable previous read (first read, a restart, a new
pod) the deployment falls back to the pods' cumulative histograms, and says so (``window``).
"""

from __future__ import annotations

import asyncio
import logging
import statistics
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal

import httpx

from service.live.coordination import Coordinator
from service.live.guard import TargetGuard
from service.live.histograms import Histogram, LatencyObservation, observe_latency, sum_histograms
from service.live.kubernetes import DiscoveryError, KubernetesDiscovery
from service.live.prometheus import query_prometheus
from service.live.schemas import KubernetesSource, LiveSource, ScrapeUrlsSource
from service.live.scraper import ScrapeReason, ScrapeTarget, TargetResult, make_client, scrape_many
from service.settings import Settings

logger = logging.getLogger("kvcap.live")

DeploymentKey = tuple[str, str]
SourceKind = Literal["scrape_urls", "kubernetes", "prometheus"]


@dataclass(frozen=True, slots=True, kw_only=True)
class LiveTarget:
    """A registered deployment and where its live data comes from."""

    namespace: str
    name: str
    source: LiveSource

    @property
    def key(self) -> str:
        """The coordination key (``namespace/name``)."""
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True, kw_only=True)
class PodObservation:
    """One target's last read: a vLLM pod, or a source that failed as a whole (empty ``pod``)."""

    pod: str
    target: str
    up: bool
    reason: ScrapeReason | None = None
    detail: str = ""
    duration_s: float = 0.0
    num_gpu_blocks: int | None = None
    kv_cache_usage_ratio: float | None = None
    requests_running: float = 0.0
    requests_waiting: float = 0.0
    preemptions_total: float = 0.0
    spec_drafts_total: float | None = None  # speculative decoding's counters (None: not reported)
    spec_accepted_tokens_total: float | None = None
    data_parallel_size: int = 1
    model_names: tuple[str, ...] = ()
    cache_config: Mapping[str, str] | None = None
    histograms: Mapping[str, Histogram] = field(default_factory=dict)
    """vLLM's cumulative latency and token histograms as read (see ``service.live.histograms``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DeploymentObservation:
    """What the last refresh saw of one deployment, aggregated over its pods."""

    namespace: str
    name: str
    source_kind: SourceKind
    observed_at_s: float
    """Unix time the refresh that produced this observation finished."""
    duration_s: float
    """Time reading this deployment's targets took."""
    pods: tuple[PodObservation, ...]
    errors_total: Mapping[str, int] = field(default_factory=dict)
    """Failed reads by reason, cumulative since this replica began tracking the deployment."""
    num_gpu_blocks: int | None = None
    """Low median of the pods' ``num_gpu_blocks``."""
    kv_cache_usage_ratio: float | None = None
    requests_running: float = 0.0
    requests_waiting: float = 0.0
    preemptions_total: float = 0.0
    replicas: int = 0
    """Pods read successfully in the last refresh."""
    cache_config: Mapping[str, str] | None = None
    """Every ``vllm:cache_config_info`` label of the first healthy pod (by name), for calibration."""
    latency: LatencyObservation | None = None
    """Mean, median and p99 of TTFT, TPOT, ITL, E2E and token counts since the previous refresh."""
    spec_mean_acceptance_length: float | None = None
    """Speculative decoding: 1 + accepted tokens ÷ drafts over the pods since the previous refresh (since the
    pods started when some pod has no usable baseline); None without drafts in that window."""

    @property
    def key(self) -> DeploymentKey:
        return (self.namespace, self.name)

    @property
    def targets_up(self) -> dict[str, bool]:
        return {pod.target: pod.up for pod in self.pods}


def _source_kind(source: LiveSource) -> SourceKind:
    if isinstance(source, ScrapeUrlsSource):
        return "scrape_urls"
    if isinstance(source, KubernetesSource):
        return "kubernetes"
    return "prometheus"


_CONFIGS: dict[frozenset[tuple[str, str]], Mapping[str, str]] = {}


def _shared_config(labels: Mapping[str, str]) -> Mapping[str, str]:
    """One read-only copy per distinct ``cache_config_info`` label set: the pods of a deployment (and most of
    a fleet) report the same one, and each pod's copy is held until its next read."""
    key = frozenset(labels.items())
    if len(_CONFIGS) > 4096:  # a fleet of distinct configurations: start over rather than grow forever
        _CONFIGS.clear()
    return _CONFIGS.setdefault(key, MappingProxyType(dict(labels)))


def _pod_observation(result: TargetResult, pod: str) -> PodObservation:
    metrics = result.metrics
    if not result.ok or metrics is None:
        return PodObservation(
            pod=pod,
            target=result.target,
            up=False,
            reason=result.reason or "error",
            detail=result.detail,
            duration_s=result.duration_s,
        )
    config = metrics.cache_config
    return PodObservation(
        pod=pod,
        target=result.target,
        up=True,
        duration_s=result.duration_s,
        num_gpu_blocks=metrics.num_gpu_blocks,
        kv_cache_usage_ratio=metrics.kv_cache_usage_ratio,
        requests_running=metrics.requests_running,
        requests_waiting=metrics.requests_waiting,
        preemptions_total=metrics.preemptions_total,
        spec_drafts_total=metrics.spec_drafts_total,
        spec_accepted_tokens_total=metrics.spec_accepted_tokens_total,
        data_parallel_size=metrics.data_parallel_size,
        model_names=metrics.model_names,
        cache_config=_shared_config(config.labels) if config is not None else None,
        histograms=metrics.histograms,
    )


def _unique_pod_names(results: Sequence[TargetResult]) -> list[str]:
    """Pod labels, made unique: two static URLs on one host:port (different paths) are two series."""
    counts = Counter(r.pod for r in results)
    return [r.pod if counts[r.pod] == 1 or not r.pod else f"{r.pod} {r.target}" for r in results]


def aggregate(
    target: LiveTarget,
    results: Sequence[TargetResult],
    *,
    observed_at_s: float,
    duration_s: float,
    errors_total: Mapping[str, int] | None = None,
    previous: DeploymentObservation | None = None,
) -> DeploymentObservation:
    """One deployment's observation from its targets' results (pure; see the module docstring).

    ``previous`` is the deployment's observation from the last refresh; its pods' histograms are the baseline
    of the latency window.
    """
    pods = tuple(
        sorted(
            (_pod_observation(r, pod) for r, pod in zip(results, _unique_pod_names(results), strict=True)),
            key=lambda p: (p.pod, p.target),
        )
    )
    healthy = [p for p in pods if p.up]
    blocks = [p.num_gpu_blocks for p in healthy if p.num_gpu_blocks is not None]
    usages = [p.kv_cache_usage_ratio for p in healthy if p.kv_cache_usage_ratio is not None]
    first_config = next((p.cache_config for p in healthy if p.cache_config is not None), None)
    return DeploymentObservation(
        namespace=target.namespace,
        name=target.name,
        source_kind=_source_kind(target.source),
        observed_at_s=observed_at_s,
        duration_s=duration_s,
        pods=pods,
        errors_total=MappingProxyType(dict(errors_total or {})),
        num_gpu_blocks=statistics.median_low(blocks) if blocks else None,
        kv_cache_usage_ratio=sum(usages) / len(usages) if usages else None,
        requests_running=sum(p.requests_running for p in healthy),
        requests_waiting=sum(p.requests_waiting for p in healthy),
        preemptions_total=sum(p.preemptions_total for p in healthy),
        replicas=len(healthy),
        cache_config=first_config,
        latency=_latency(healthy, previous, observed_at_s),
        spec_mean_acceptance_length=_acceptance(healthy, previous),
    )


def _acceptance(healthy: Sequence[PodObservation], previous: DeploymentObservation | None) -> float | None:
    """vLLM's mean acceptance length (``SpecDecodingLogging``: 1 + accepted ÷ drafts) of the drafts the pods
    made since the previous refresh; since they started when a pod is new or its counters went back (a
    restart)."""
    counts = {
        (p.pod, p.target): (p.spec_drafts_total, p.spec_accepted_tokens_total)
        for p in healthy
        if p.spec_drafts_total is not None and p.spec_accepted_tokens_total is not None
    }
    if not counts:
        return None
    before = {
        (p.pod, p.target): (p.spec_drafts_total, p.spec_accepted_tokens_total)
        for p in (previous.pods if previous is not None else ())
        if p.up and p.spec_drafts_total is not None and p.spec_accepted_tokens_total is not None
    }
    totals = [(drafts or 0.0, accepted or 0.0) for drafts, accepted in counts.values()]
    baselines = [before.get(key) for key in counts]
    window = [
        (drafts - (base[0] or 0.0), accepted - (base[1] or 0.0))
        for (drafts, accepted), base in zip(totals, baselines, strict=True)
        if base is not None
    ]
    if len(window) < len(totals) or any(d < 0 or a < 0 for d, a in window):
        window = totals  # a new pod or a restart: since the pods started
    drafts = sum(d for d, _ in window)
    accepted = sum(a for _, a in window)
    return 1.0 + accepted / drafts if drafts > 0 else None


def _latency(
    healthy: Sequence[PodObservation], previous: DeploymentObservation | None, observed_at_s: float
) -> LatencyObservation | None:
    """Latency since the previous refresh when every healthy pod has a baseline, else since start."""
    cumulative = sum_histograms(p.histograms for p in healthy)
    if not cumulative:
        return None
    deltas = _pod_deltas(healthy, previous)
    if deltas is None or previous is None:
        return observe_latency(cumulative, window="since_start")
    return observe_latency(
        sum_histograms(deltas),
        window="since_last_scrape",
        interval_seconds=observed_at_s - previous.observed_at_s,
    )


def _pod_deltas(
    healthy: Sequence[PodObservation], previous: DeploymentObservation | None
) -> list[dict[str, Histogram]] | None:
    """Each pod's histograms minus its previous read; None when some pod has no usable baseline."""
    if previous is None:
        return None
    before = {(p.pod, p.target): p for p in previous.pods if p.up}
    deltas: list[dict[str, Histogram]] = []
    for pod in healthy:
        baseline = before.get((pod.pod, pod.target))
        if baseline is None:
            return None
        delta: dict[str, Histogram] = {}
        for name, histogram in pod.histograms.items():
            earlier = baseline.histograms.get(name)
            difference = histogram.minus(earlier) if earlier is not None else None
            if difference is None:  # a restart, new bounds, or a histogram the last read lacked
                return None
            delta[name] = difference
        deltas.append(delta)
    return deltas


def _failed(url: str, reason: ScrapeReason, detail: str, duration_s: float = 0.0) -> TargetResult:
    return TargetResult(
        url=url, ok=False, reason=reason, duration_s=duration_s, metrics=None, pod="", detail=detail
    )


TargetProvider = Callable[[], Awaitable[Sequence[LiveTarget]]]


class LiveManager:
    """Holds and refreshes the latest ``DeploymentObservation`` per (namespace, name)."""

    def __init__(
        self,
        *,
        client: httpx.AsyncClient,
        guard: TargetGuard | None,
        timeout_s: float,
        max_bytes: int,
        concurrency: int,
        kubernetes: KubernetesDiscovery | None = None,
        kubernetes_error: str = "Kubernetes discovery is not configured",
        owns_client: bool = False,
    ) -> None:
        self._client = client
        self._guard = guard
        self._timeout_s = timeout_s
        self._max_bytes = max_bytes
        self._concurrency = concurrency
        self._kubernetes = kubernetes
        self._kubernetes_error = kubernetes_error
        self._owns_client = owns_client
        self._observations: Mapping[DeploymentKey, DeploymentObservation] = MappingProxyType({})
        self._errors: dict[DeploymentKey, Counter[str]] = {}
        self.last_refresh_timestamp_s: float | None = None
        self.last_refresh_duration_s: float | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> LiveManager:
        """The production wiring: one pooled client, the allowlist guard, in-cluster discovery if available."""
        kubernetes: KubernetesDiscovery | None = None
        kubernetes_error = ""
        try:
            kubernetes = KubernetesDiscovery.from_environment(timeout_s=settings.scrape_timeout_seconds)
        except DiscoveryError as exc:
            kubernetes_error = str(exc)
        return cls(
            client=make_client(concurrency=settings.scrape_concurrency),
            guard=TargetGuard(settings.scrape_allowed_hosts),
            timeout_s=settings.scrape_timeout_seconds,
            max_bytes=settings.scrape_max_body_bytes,
            concurrency=settings.scrape_concurrency,
            kubernetes=kubernetes,
            kubernetes_error=kubernetes_error,
            owns_client=True,
        )

    async def aclose(self) -> None:
        if self._owns_client:
            await self._client.aclose()
        if self._kubernetes is not None:
            await self._kubernetes.aclose()

    @property
    def observations(self) -> Mapping[DeploymentKey, DeploymentObservation]:
        """The latest snapshot (immutable; replaced as a whole by each refresh)."""
        return self._observations

    @property
    def deployments_tracked(self) -> int:
        return len(self._observations)

    async def refresh(self, targets: Sequence[LiveTarget]) -> None:
        """Read every target concurrently (bounded) and swap in the new snapshot; never raises for a target.

        Deployments not in ``targets`` leave the snapshot (deleted, or now owned by another replica).
        """
        started = time.perf_counter()
        limit = asyncio.Semaphore(self._concurrency)
        unique = list({(t.namespace, t.name): t for t in targets}.values())
        outcomes = await asyncio.gather(*(self._timed_read(t, limit) for t in unique))
        finished_at = time.time()
        errors: dict[DeploymentKey, Counter[str]] = {}
        fresh: dict[DeploymentKey, DeploymentObservation] = {}
        failures: Counter[str] = Counter()
        for target, (results, duration_s) in zip(unique, outcomes, strict=True):
            key = (target.namespace, target.name)
            counter = self._errors.get(key, Counter())
            for result in results:
                if not result.ok:
                    counter[result.reason or "error"] += 1
                    failures[result.reason or "error"] += 1
            errors[key] = counter
            fresh[key] = aggregate(
                target,
                results,
                observed_at_s=finished_at,
                duration_s=duration_s,
                errors_total=counter,
                previous=self._observations.get(key),
            )
        self._errors = errors
        self._observations = MappingProxyType(fresh)
        self.last_refresh_timestamp_s = finished_at
        self.last_refresh_duration_s = time.perf_counter() - started
        if failures:
            logger.info(
                "live refresh: %d deployments in %.2fs; failed reads: %s",
                len(fresh),
                self.last_refresh_duration_s,
                ", ".join(f"{reason}={count}" for reason, count in sorted(failures.items())),
            )

    async def _timed_read(
        self, target: LiveTarget, limit: asyncio.Semaphore
    ) -> tuple[list[TargetResult], float]:
        started = time.perf_counter()
        try:
            results = await self._read(target, limit)
        except Exception as exc:  # a bug must cost one deployment, not the refresh
            logger.exception("reading live data of %s failed", target.key)
            results = [_failed(target.key, "error", f"{type(exc).__name__}: {exc}"[:200])]
        return results, time.perf_counter() - started

    async def _read(self, target: LiveTarget, limit: asyncio.Semaphore) -> list[TargetResult]:
        source = target.source
        if isinstance(source, ScrapeUrlsSource):
            return await self._scrape([ScrapeTarget(url) for url in source.scrape_urls], limit)
        if isinstance(source, KubernetesSource):
            selector = source.kubernetes
            where = f"kubernetes:{selector.namespace}/{selector.label_selector}"
            if self._kubernetes is None:
                return [_failed(where, "discovery", self._kubernetes_error)]
            started = time.perf_counter()
            try:
                async with limit:
                    pods = await self._kubernetes.pods(selector)
            except DiscoveryError as exc:
                return [_failed(where, "discovery", str(exc), time.perf_counter() - started)]
            return await self._scrape([ScrapeTarget(p.url, pod=p.name) for p in pods], limit)
        async with limit:
            return await query_prometheus(
                self._client,
                source.prometheus,
                guard=self._guard,
                timeout_s=self._timeout_s,
                max_bytes=self._max_bytes,
            )

    async def _scrape(self, targets: list[ScrapeTarget], limit: asyncio.Semaphore) -> list[TargetResult]:
        return await scrape_many(
            self._client,
            targets,
            guard=self._guard,
            timeout_s=self._timeout_s,
            max_bytes=self._max_bytes,
            concurrency=limit,
        )

    async def run(self, provider: TargetProvider, interval_s: float, coordinator: Coordinator) -> None:
        """Refresh forever: provider → ``coordinator.owned`` → ``refresh`` → sleep the rest of the interval.

        Cancelling the task is safe at any point: the snapshot is replaced only by a completed refresh. When
        the provider fails (database down) the previous snapshot keeps serving and the tick is retried.
        """
        while True:
            started = time.monotonic()
            try:
                targets = await provider()
                owned = await coordinator.owned([t.key for t in targets])
                await self.refresh([t for t in targets if t.key in owned])
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                logger.warning("live refresh skipped: %s: %s", type(exc).__name__, exc)
            await asyncio.sleep(max(0.0, interval_s - (time.monotonic() - started)))
