"""/metrics rendered once per snapshot: the spliced exposition is byte-for-byte the single render, the
per-deployment part is rendered once per snapshot, and the per-scrape part (admission, health) stays current."""

from __future__ import annotations

from pathlib import Path
from types import MappingProxyType

import pytest

from service.exporter.collector import AdmissionMetrics, SelfMetrics, render_metrics
from service.exporter.exposition import FLEET_FAMILIES, ExpositionCache, family_blocks

from .test_collector import KEY, observe, prediction, result


@pytest.fixture(scope="module")
def busy_text(vllm_metrics_dir: Path) -> str:
    return (vllm_metrics_dir / "vllm-0.32.0-cpu-busy.txt").read_text()


def snapshots(busy_text: str, deployments: int = 3) -> tuple[MappingProxyType, MappingProxyType]:  # type: ignore[type-arg]
    observation = observe(
        [result("http://a:8000/metrics", busy_text), result("http://b:8000/metrics", None, reason="timeout")],
        errors={"timeout": 1},
    )
    keys = [KEY, *((f"ns-{i}", f"d-{i}") for i in range(deployments - 1))]
    return (
        MappingProxyType(dict.fromkeys(keys, prediction())),
        MappingProxyType(dict.fromkeys(keys, observation)),
    )


def test_the_spliced_exposition_is_exactly_the_single_render(busy_text: str) -> None:
    predictions, observations = snapshots(busy_text)
    admission = AdmissionMetrics()
    admission.observe(verdict="denied", kind="Deployment", duration_seconds=0.004)
    health = SelfMetrics(
        last_refresh_timestamp_seconds=1.7e9, refresh_duration_seconds=0.8, deployments_tracked=3
    )
    expected = render_metrics(predictions, observations, health, admission)
    assert ExpositionCache().render(predictions, observations, health, admission) == expected
    assert ExpositionCache().render(predictions, observations, None, admission) == render_metrics(
        predictions, observations, None, admission
    )
    assert ExpositionCache().render({}, {}, None, admission) == render_metrics({}, {}, None, admission)


def test_the_fleet_part_is_rendered_once_per_snapshot_and_admission_stays_current(busy_text: str) -> None:
    predictions, observations = snapshots(busy_text)
    admission = AdmissionMetrics()
    cache = ExpositionCache()
    cache.prepare(predictions, observations)  # what the live worker does after a refresh
    first = cache.render(predictions, observations, None, admission)
    admission.observe(verdict="allowed", kind="Deployment", duration_seconds=0.002)
    second = cache.render(predictions, observations, None, admission)
    assert cache.renders == 1
    assert b'kvcap_admission_reviews_total{kind="Deployment",verdict="allowed"} 1.0' in second
    assert b"kvcap_admission_reviews_total{" not in first
    assert second == render_metrics(predictions, observations, None, admission)

    newer_predictions, newer_observations = snapshots(busy_text, deployments=5)  # the next refresh
    third = cache.render(newer_predictions, newer_observations, None, admission)
    assert cache.renders == 2
    assert third == render_metrics(newer_predictions, newer_observations, None, admission)
    assert b'deployment="d-3"' in third and b'deployment="d-3"' not in second


def test_every_per_deployment_family_is_cached_and_no_process_wide_one(busy_text: str) -> None:
    predictions, observations = snapshots(busy_text)
    names = [name for name, _ in family_blocks(render_metrics(predictions, observations))]
    assert "kvcap_predicted_kv_cache_blocks" in FLEET_FAMILIES and "kvcap_target_up" in FLEET_FAMILIES
    assert (
        not {n for n in names if n.startswith("kvcap_admission_") or n.endswith("_tracked")} & FLEET_FAMILIES
    )
    assert len(names) == len(set(names))
