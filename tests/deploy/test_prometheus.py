"""The Prometheus side of the deployment: the alert rules parse, their promtool unit tests pass, they only use
metric names the exporter defines, and the demo's prometheus.yml is a valid configuration.

promtool is an external binary. Without it these tests skip, unless ``KVCAP_REQUIRE_TOOLS=1`` (CI), where a
missing tool fails the run instead of silently skipping it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from service.exporter.names import METRIC_NAMES, METRICS

ROOT = Path(__file__).resolve().parents[2]
PROMETHEUS = ROOT / "deploy" / "prometheus"
RULES = PROMETHEUS / "rules" / "kvcap-alerts.yaml"
RULE_TESTS = PROMETHEUS / "tests" / "kvcap-alerts.test.yaml"
CONFIG = PROMETHEUS / "prometheus.yml"

KVCAP_NAME = re.compile(r"\bkvcap_[a-z0-9_]+")
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


def require_tool(name: str) -> str:
    """Path of an external tool; skip without it, or fail when KVCAP_REQUIRE_TOOLS=1."""
    path = shutil.which(name)
    if path is None:
        message = f"{name} is not installed (needed to check deploy/prometheus)"
        if os.environ.get("KVCAP_REQUIRE_TOOLS") == "1":
            pytest.fail(f"{message}; KVCAP_REQUIRE_TOOLS=1 makes a missing tool an error")
        pytest.skip(message)
    return path


def run(*args: str | Path, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(a) for a in args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )


def exported_name(series: str) -> str:
    """The METRIC_NAMES entry a series name belongs to (a histogram's _bucket/_sum/_count map to the histogram)."""
    histograms = {m.name for m in METRICS if m.kind == "histogram"}
    for suffix in HISTOGRAM_SUFFIXES:
        base = series.removesuffix(suffix)
        if base != series and base in histograms:
            return base
    return series


def rules() -> list[dict]:
    document = yaml.safe_load(RULES.read_text())
    return [rule for group in document["groups"] for rule in group["rules"]]


def test_alert_rules_pass_promtool_check_rules():
    promtool = require_tool("promtool")
    result = run(promtool, "check", "rules", RULES)
    assert result.returncode == 0, result.stdout + result.stderr


def test_alert_rules_pass_their_promtool_unit_tests():
    promtool = require_tool("promtool")
    result = run(promtool, "test", "rules", RULE_TESTS)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_has_a_unit_test_that_makes_it_fire():
    tests = yaml.safe_load(RULE_TESTS.read_text())["tests"]
    fired = {
        case["alertname"]
        for test in tests
        for case in test.get("alert_rule_test", [])
        if case.get("exp_alerts")
    }
    alerts = {rule["alert"] for rule in rules() if "alert" in rule}
    assert alerts <= fired, f"alerts without a firing test: {sorted(alerts - fired)}"


def test_some_unit_test_proves_an_alert_stays_quiet_below_its_threshold():
    tests = yaml.safe_load(RULE_TESTS.read_text())["tests"]
    quiet = [case for test in tests for case in test.get("alert_rule_test", []) if not case.get("exp_alerts")]
    assert quiet


def test_rules_only_use_metrics_the_exporter_defines():
    for rule in rules():
        for name in KVCAP_NAME.findall(rule["expr"]):
            assert exported_name(name) in METRIC_NAMES, f"{rule.get('alert')}: {name} is not in METRIC_NAMES"


def test_every_alert_has_summary_description_runbook_and_severity():
    for rule in rules():
        annotations = rule["annotations"]
        assert {"summary", "description", "runbook_url"} <= set(annotations), rule["alert"]
        assert annotations["runbook_url"].startswith("https://github.com/kvcap/kvcap#"), rule["alert"]
        assert "$value" in annotations["description"], rule["alert"]
        assert "$labels.namespace" in annotations["description"], rule["alert"]
        assert rule["labels"]["severity"] in {"warning", "critical"}, rule["alert"]


def test_demo_prometheus_config_is_valid_and_loads_the_rules(tmp_path: Path):
    promtool = require_tool("promtool")
    config = yaml.safe_load(CONFIG.read_text())
    assert {job["job_name"] for job in config["scrape_configs"]} >= {"kvcap", "vllm"}
    # The config names the rules by their path inside the container; point it at the repository's copy so that
    # promtool also checks the rule files it loads.
    rule_dir = tmp_path / "rules"
    rule_dir.mkdir()
    shutil.copy(RULES, rule_dir / RULES.name)
    config["rule_files"] = [str(rule_dir / "*.yaml")]
    local = tmp_path / "prometheus.yml"
    local.write_text(yaml.safe_dump(config))
    result = run(promtool, "check", "config", local)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "rules found" in result.stdout + result.stderr, "promtool did not load the rule files"


def test_demo_prometheus_config_keeps_kvcaps_own_namespace_and_deployment_labels():
    config = yaml.safe_load(CONFIG.read_text())
    kvcap = next(job for job in config["scrape_configs"] if job["job_name"] == "kvcap")
    assert kvcap["honor_labels"] is True
