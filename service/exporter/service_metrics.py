"""kvcap's metrics about itself: build, HTTP requests, catalog refresh, TLS certificate, and the process.

prometheus-client metric objects owned by one ``ServiceMetrics`` instance (``registry=None``, so nothing is
registered on the global default registry and each app or test has its own), plus the library's own
ProcessCollector, PlatformCollector and GCCollector. ``collect()`` yields all of them for the registry a
``/metrics`` scrape renders into.

``route`` is the route *template* (``/v1/models/{name}``), never the raw path, so a client cannot create a
series per URL it invents; requests no route matched share ``route="unmatched"``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info, disable_created_metrics
from prometheus_client.core import Metric
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector

from service.exporter.names import METRICS, MetricName
from service.version import kvcap_revision, kvcap_version, python_version

_SPECS: Mapping[str, MetricName] = {m.name: m for m in METRICS}

# No ``*_created`` series: one extra gauge per label set that no dashboard or rule reads (Prometheus derives
# resets itself). A process-wide switch of prometheus-client; kvcap exposes nothing else through it.
disable_created_metrics()  # type: ignore[no-untyped-call]  # prometheus-client leaves it unannotated

HTTP_BUCKETS: tuple[float, ...] = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
"""prometheus-client's default buckets, extended to 30 s: the database timeouts answer 503 within seconds,
and those slow answers should land in a bucket of their own, not only in +Inf."""

UNMATCHED_ROUTE = "unmatched"
KNOWN_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def _labels(name: str) -> list[str]:
    return list(_SPECS[name].labels)


class ServiceMetrics(Collector):
    """Everything kvcap measures about its own process; one instance per app."""

    def __init__(
        self,
        *,
        version: str | None = None,
        revision: str | None = None,
        http_buckets: tuple[float, ...] = HTTP_BUCKETS,
    ) -> None:
        self._build = Info("kvcap_build", _SPECS["kvcap_build_info"].help, registry=None)
        self._build.info(
            {
                "version": version or kvcap_version(),
                "revision": revision or kvcap_revision(),
                "python_version": python_version(),
            }
        )
        self._requests = Counter(
            "kvcap_http_requests",
            _SPECS["kvcap_http_requests_total"].help,
            _labels("kvcap_http_requests_total"),
            registry=None,
        )
        self._durations = Histogram(
            "kvcap_http_request_duration_seconds",
            _SPECS["kvcap_http_request_duration_seconds"].help,
            _labels("kvcap_http_request_duration_seconds"),
            registry=None,
            buckets=http_buckets,
        )
        self._children: dict[tuple[str, str | None, int], tuple[Counter, Histogram]] = {}
        self._catalog_refresh = Gauge(
            "kvcap_catalog_refresh_timestamp_seconds",
            _SPECS["kvcap_catalog_refresh_timestamp_seconds"].help,
            registry=None,
        )
        self._catalog_refreshed = False
        self._tls_expiry = Gauge(
            "kvcap_tls_certificate_expiry_timestamp_seconds",
            _SPECS["kvcap_tls_certificate_expiry_timestamp_seconds"].help,
            registry=None,
        )
        self._tls_loaded = False
        self._tls_reloads = Counter(
            "kvcap_tls_certificate_reloads",
            _SPECS["kvcap_tls_certificate_reloads_total"].help,
            _labels("kvcap_tls_certificate_reloads_total"),
            registry=None,
        )
        # GCCollector insists on a registry: the three share a private one, rendered through ``collect()``.
        self._library = CollectorRegistry(auto_describe=True)
        ProcessCollector(registry=self._library)
        PlatformCollector(registry=self._library)
        GCCollector(registry=self._library)

    def observe_request(
        self, *, method: str, route: str | None, status: int, duration_seconds: float
    ) -> None:
        method = method if method in KNOWN_METHODS else "other"
        key = (method, route, status)
        children = self._children.get(key)
        if children is None:  # the label children are looked up once per label set, not once per request
            labels = {"method": method, "route": route or UNMATCHED_ROUTE, "status": str(status)}
            children = self._children[key] = (
                self._requests.labels(**labels),
                self._durations.labels(**labels),
            )
        children[0].inc()
        children[1].observe(duration_seconds)

    def catalog_refreshed(self, timestamp_seconds: float | None = None) -> None:
        self._catalog_refresh.set(time.time() if timestamp_seconds is None else timestamp_seconds)
        self._catalog_refreshed = True

    def certificate_loaded(self, *, expiry_timestamp_seconds: float, reload: bool) -> None:
        """A certificate is being served (at start-up, or after a rotation when ``reload``)."""
        self._tls_expiry.set(expiry_timestamp_seconds)
        self._tls_loaded = True
        if reload:
            self._tls_reloads.labels(result="success").inc()

    def certificate_reload_failed(self) -> None:
        self._tls_reloads.labels(result="error").inc()

    def collect(self) -> Iterator[Metric]:
        yield from self._build.collect()
        yield from self._requests.collect()
        yield from self._durations.collect()
        # Absent rather than 0 until known: an alert on "refresh older than 5 min" or "certificate expires within
        # a week" must not fire for the epoch; ``absent()`` covers "never happened".
        if self._catalog_refreshed:
            yield from self._catalog_refresh.collect()
        if self._tls_loaded:
            yield from self._tls_expiry.collect()
        yield from self._tls_reloads.collect()
        yield from self._library.collect()
