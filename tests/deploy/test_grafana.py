"""The Grafana dashboard and its provisioning: portable JSON (no hard-coded data source, ``id`` null), every
panel queried, and every kvcap metric it plots defined by the exporter (service/exporter/names.py).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from service.exporter.names import METRIC_NAMES, METRICS

ROOT = Path(__file__).resolve().parents[2]
GRAFANA = ROOT / "deploy" / "grafana"
DASHBOARDS = sorted((GRAFANA / "dashboards").glob("*.json"))
PROVISIONING = sorted((GRAFANA / "provisioning").rglob("*.yaml"))

KVCAP_NAME = re.compile(r"\bkvcap_[a-z0-9_]+")
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}


def load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, including those nested in (collapsed) rows."""
    for panel in dashboard.get("panels", []):
        yield panel
        yield from panel.get("panels", [])


def query_panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in panels(dashboard) if p["type"] != "row"]


def exported_name(series: str) -> str:
    histograms = {m.name for m in METRICS if m.kind == "histogram"}
    for suffix in HISTOGRAM_SUFFIXES:
        base = series.removesuffix(suffix)
        if base != series and base in histograms:
            return base
    return series


def queries(dashboard: dict[str, Any]) -> Iterator[str]:
    for panel in query_panels(dashboard):
        for target in panel.get("targets", []):
            yield target["expr"]
    for variable in dashboard["templating"]["list"]:
        query = variable.get("query")
        if variable["type"] == "query":
            yield query["query"] if isinstance(query, dict) else query


def test_there_is_a_dashboard():
    assert [p.name for p in DASHBOARDS] == ["kvcap-capacity.json"]


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_dashboard_is_importable_anywhere(path: Path):
    dashboard = load(path)
    assert dashboard["id"] is None
    assert dashboard["uid"]
    assert dashboard["schemaVersion"] >= 39


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_dashboard_picks_its_data_source_through_a_variable(path: Path):
    variables = {v["name"]: v for v in load(path)["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for name in ("namespace", "deployment"):
        variable = variables[name]
        assert variable["type"] == "query"
        assert variable["datasource"] == DATASOURCE
        query = variable["query"]["query"] if isinstance(variable["query"], dict) else variable["query"]
        assert query.startswith("label_values(kvcap_"), query


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_no_panel_hard_codes_a_data_source_uid(path: Path):
    for panel in query_panels(load(path)):
        assert panel["datasource"] == DATASOURCE, panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == DATASOURCE, panel["title"]


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_every_panel_has_a_query(path: Path):
    for panel in query_panels(load(path)):
        assert panel.get("targets"), panel["title"]
        assert all(t.get("expr") for t in panel["targets"]), panel["title"]


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_dashboard_only_plots_metrics_the_exporter_defines(path: Path):
    for query in queries(load(path)):
        for name in KVCAP_NAME.findall(query):
            assert exported_name(name) in METRIC_NAMES, f"{name} in {query!r} is not in METRIC_NAMES"


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_panel_ids_are_unique_and_panels_fit_the_grid(path: Path):
    all_panels = list(panels(load(path)))
    ids = [p["id"] for p in all_panels]
    assert len(ids) == len(set(ids))
    for panel in all_panels:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]


def test_dashboard_covers_the_capacity_story():
    used = {
        exported_name(name)
        for path in DASHBOARDS
        for query in queries(load(path))
        for name in KVCAP_NAME.findall(query)
    }
    expected = {
        "kvcap_predicted_kv_cache_blocks",
        "kvcap_observed_kv_cache_blocks",
        "kvcap_observed_pod_kv_cache_blocks",
        "kvcap_prediction_error_ratio",
        "kvcap_observed_kv_cache_usage_ratio",
        "kvcap_capacity_headroom_ratio",
        "kvcap_observed_requests_running",
        "kvcap_observed_requests_waiting",
        "kvcap_observed_preemptions_total",
        "kvcap_recommended_replicas",
        "kvcap_deployment_replicas",
        "kvcap_target_up",
        "kvcap_scrape_duration_seconds",
        "kvcap_scrape_errors_total",
        "kvcap_admission_reviews_total",
    }
    assert expected <= used, f"not plotted: {sorted(expected - used)}"


def test_dashboard_queries_are_valid_promql(tmp_path: Path):
    """Each query, with Grafana's variables filled in, parses as PromQL (promtool checks it as a rule)."""
    promtool = shutil.which("promtool")
    if promtool is None:
        if os.environ.get("KVCAP_REQUIRE_TOOLS") == "1":
            pytest.fail("promtool is not installed; KVCAP_REQUIRE_TOOLS=1 makes a missing tool an error")
        pytest.skip("promtool is not installed (needed to parse the dashboard's PromQL)")
    substitutions = {"$__rate_interval": "5m", "$namespace": ".*", "$deployment": ".*"}
    rules = []
    for path in DASHBOARDS:
        for query in queries(load(path)):
            if query.startswith("label_values("):
                continue
            for variable, value in substitutions.items():
                query = query.replace(variable, value)
            rules.append({"record": f"dashboard:query_{len(rules)}:check", "expr": query})
    rule_file = tmp_path / "dashboard-queries.yaml"
    rule_file.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    result = subprocess.run(
        [promtool, "check", "rules", str(rule_file)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("path", PROVISIONING, ids=lambda p: p.name)
def test_provisioning_files_parse(path: Path):
    document = yaml.safe_load(path.read_text())
    assert document["apiVersion"] == 1


def test_provisioned_data_source_is_prometheus_and_dashboards_come_from_the_mounted_folder():
    datasources = yaml.safe_load((GRAFANA / "provisioning" / "datasources" / "prometheus.yaml").read_text())
    assert [d["type"] for d in datasources["datasources"]] == ["prometheus"]
    providers = yaml.safe_load((GRAFANA / "provisioning" / "dashboards" / "kvcap.yaml").read_text())
    assert providers["providers"][0]["type"] == "file"
    assert providers["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards"
