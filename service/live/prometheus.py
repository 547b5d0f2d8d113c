"""Live data from a Prometheus server that already scrapes the fleet (``{"prometheus": {"url", "match"}}``).

For fleets beyond one kvcap's reach kvcap does not scrape the pods itself; it runs a handful of instant
queries (``GET /api/v1/query``, https://prometheus.io/docs/prometheus/latest/querying/api/) — one for every
vLLM gauge and counter it reads and one for all the latency/token histogram series (each a ``__name__`` regex),
restricted by the deployment's ``match`` selector; with ``up`` three queries, so a Prometheus that accepts and never
answers holds three of the refresh's connections until its timeout — and regroups the series by pod
(label ``pod``, else ``instance``) into the same ``TargetResult`` a direct scrape gives, so nothing downstream
knows the difference. ``up{match}`` marks pods whose own scrape fails (reason ``down``).

The Prometheus URL is user input like any scrape URL: it goes through the guard, the same timeout (for all
queries together) and the same body cap (per query).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping
from typing import Any

import httpx

from service.live.guard import TargetGuard
from service.live.histograms import HISTOGRAM_NAMES, HISTOGRAM_SUFFIXES
from service.live.parser import SAMPLE_NAMES, Sample, metrics_from_samples
from service.live.schemas import PrometheusQuery
from service.live.scraper import FetchError, TargetResult, classify, fetch_capped, pod_from_url

# Labels Prometheus adds when it scrapes (target and service-discovery labels): not part of vLLM's CacheConfig.
TARGET_LABELS = frozenset(
    {
        "__name__",
        "instance",
        "job",
        "pod",
        "pod_name",
        "namespace",
        "container",
        "service",
        "endpoint",
        "node",
        "cluster",
        "prometheus",
        "prometheus_replica",
    }
)
# The gauges and counters the parser reads, the pre-0.11 usage name among them (``metrics_from_samples`` prefers
# the new one), in a stable order for the query text.
QUERIED = tuple(sorted(SAMPLE_NAMES))
HISTOGRAMS_REGEX = "({})({})".format("|".join(HISTOGRAM_NAMES), "|".join(HISTOGRAM_SUFFIXES))


def samples_query(match: str) -> str:
    """Every gauge and counter series kvcap reads (``QUERIED``), restricted by ``match``."""
    return '{__name__=~"' + "|".join(QUERIED) + '",' + match.strip()[1:]


def histograms_query(match: str) -> str:
    """Every histogram series kvcap reads, restricted by ``match`` (a validated ``{...}`` selector)."""
    return '{__name__=~"' + HISTOGRAMS_REGEX + '",' + match.strip()[1:]


def _pod_of(metric: Mapping[str, str]) -> str:
    return metric.get("pod") or metric.get("pod_name") or metric.get("instance") or ""


def _vector(body: bytes) -> list[dict[str, Any]]:
    """The ``result`` of an instant-vector answer; ``FetchError("parse")`` for anything else."""
    try:
        payload = json.loads(body)
    except ValueError as exc:
        raise FetchError("parse", f"the Prometheus API answered with invalid JSON: {exc}") from None
    if not isinstance(payload, dict) or payload.get("status") != "success":
        error = payload.get("error") if isinstance(payload, dict) else None
        raise FetchError("parse", f"the Prometheus query failed: {error or 'unexpected answer'}")
    data = payload.get("data")
    if (
        not isinstance(data, dict)
        or data.get("resultType") != "vector"
        or not isinstance(data.get("result"), list)
    ):
        raise FetchError("parse", "the Prometheus API did not answer with an instant vector")
    return [item for item in data["result"] if isinstance(item, dict)]


def _samples(name: str, result: list[dict[str, Any]]) -> list[tuple[str, Sample]]:
    """(pod, sample) pairs; the sample keeps vLLM's own labels only."""
    pairs: list[tuple[str, Sample]] = []
    for item in result:
        metric = item.get("metric")
        value = item.get("value")
        if not isinstance(metric, dict) or not isinstance(value, list) or len(value) != 2:
            continue
        labels = {str(k): str(v) for k, v in metric.items()}
        try:
            number = float(value[1])
        except (TypeError, ValueError):
            continue
        own = {k: v for k, v in labels.items() if k not in TARGET_LABELS}
        pairs.append((_pod_of(labels), (labels.get("__name__", name), own, number)))
    return pairs


async def query_prometheus(
    client: httpx.AsyncClient,
    source: PrometheusQuery,
    *,
    guard: TargetGuard | None,
    timeout_s: float,
    max_bytes: int,
) -> list[TargetResult]:
    """One ``TargetResult`` per pod the selector matches (an empty list when it matches none), or a single
    failed result naming the Prometheus server when the queries fail."""
    started = time.perf_counter()
    base = source.url.rstrip("/")
    endpoint = f"{base}/api/v1/query"

    async def instant(expr: str) -> list[dict[str, Any]]:
        body = await fetch_capped(
            client,
            endpoint,
            max_bytes=max_bytes,
            guard=guard,
            params={"query": expr},
            headers={"Accept": "application/json"},
            timeout_s=timeout_s,
        )
        return _vector(body)

    try:
        async with asyncio.timeout(timeout_s):
            if guard is not None:
                await guard.check_resolved(endpoint)
            answers = await asyncio.gather(
                instant(samples_query(source.match)),
                instant(histograms_query(source.match)),
                instant("up" + source.match),
            )
            by_name = {"samples": answers[0], "histograms": answers[1]}
    except Exception as exc:
        reason, detail = classify(exc)
        return [
            TargetResult(
                url=base,
                ok=False,
                reason=reason,
                duration_s=time.perf_counter() - started,
                metrics=None,
                pod=pod_from_url(base),
                detail=detail,
            )
        ]
    duration = time.perf_counter() - started
    per_pod: dict[str, list[Sample]] = {}
    for name, result in by_name.items():
        for pod, sample in _samples(name, result):
            per_pod.setdefault(pod, []).append(sample)
    down = {pod for pod, (_n, _l, value) in _samples("up", answers[-1]) if value == 0}
    results = [
        TargetResult(
            url=base,
            ok=True,
            reason=None,
            duration_s=duration,
            metrics=metrics_from_samples(samples),
            pod=pod,
            target=pod or base,
        )
        for pod, samples in sorted(per_pod.items())
        if pod not in down
    ]
    results.extend(
        TargetResult(
            url=base,
            ok=False,
            reason="down",
            duration_s=duration,
            metrics=None,
            pod=pod,
            target=pod or base,
            detail="Prometheus reports up == 0 for this target",
        )
        for pod in sorted(down)
    )
    return results
