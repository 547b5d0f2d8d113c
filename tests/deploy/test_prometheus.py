"""The Prometheus side of the deployment: the alert rules parse, their promtool unit tests pass, they only use
metric names the exporter defines, the demo's prometheus.yml is a valid configuration, and the promtool that checks
them is the Prometheus release the compose demo runs.

promtool is an external binary. Without it these tests skip, unless ``KVCAP_REQUIRE_TOOLS=1`` (CI), where a
missing tool fails the run instead of silently skipping it.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import yaml

from service.exporter.names import METRIC_NAMES, METRICS
from tests.deploy.tools import require_tool
from tests.deploy.tools import run as run_tool

ROOT = Path(__file__).resolve().parents[2]
PROMETHEUS = ROOT / "deploy" / "prometheus"
RULES = PROMETHEUS / "rules" / "kvcap-alerts.yaml"
RULE_TESTS = PROMETHEUS / "tests" / "kvcap-alerts.test.yaml"
CONFIG = PROMETHEUS / "prometheus.yml"

KVCAP_NAME = re.compile(r"\bkvcap_[a-z0-9_]+")
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


def run(*args: str | Path, cwd: Path = ROOT):
    return run_tool(args, cwd=cwd)


def promtool() -> str:
    return require_tool("promtool", "check deploy/prometheus (Debian package 'prometheus')")


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
    result = run(promtool(), "check", "rules", RULES)
    assert result.returncode == 0, result.stdout + result.stderr


def test_alert_rules_pass_their_promtool_unit_tests():
    result = run(promtool(), "test", "rules", RULE_TESTS)
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
    tool = promtool()
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
    result = run(tool, "check", "config", local)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "rules found" in result.stdout + result.stderr, "promtool did not load the rule files"


def test_demo_prometheus_config_keeps_kvcaps_own_namespace_and_deployment_labels():
    config = yaml.safe_load(CONFIG.read_text())
    kvcap = next(job for job in config["scrape_configs"] if job["job_name"] == "kvcap")
    assert kvcap["honor_labels"] is True


SELF_ALERTS = {
    # kvcap down: a replica that does not answer scrapes, and no replica scraped at all.
    "KvcapDown": "up",
    "KvcapAbsent": "up",
    "KvcapWebhookErrors": "kvcap_admission_errors_total",
    "KvcapWebhookSlow": "kvcap_admission_review_duration_seconds_bucket",
    "KvcapCertificateExpiresSoon": "kvcap_tls_certificate_expiry_timestamp_seconds",
    "KvcapTargetDown": "kvcap_target_up",
    "KvcapLiveDataStale": "kvcap_last_refresh_timestamp_seconds",
    "KvcapCatalogRefreshStale": "kvcap_catalog_refresh_timestamp_seconds",
}


def test_kvcap_watches_itself():
    by_name = {rule["alert"]: rule for rule in rules() if "alert" in rule}
    for alert, series in SELF_ALERTS.items():
        assert re.search(rf"\b{series}\b", by_name[alert]["expr"]), alert


def test_webhook_latency_alert_fires_at_80_percent_of_the_charts_default_timeout():
    chart_values = yaml.safe_load((ROOT / "helm" / "kvcap" / "values.yaml").read_text())
    timeout_seconds = chart_values["webhook"]["timeoutSeconds"]
    (slow,) = [rule for rule in rules() if rule.get("alert") == "KvcapWebhookSlow"]
    assert slow["expr"].startswith("histogram_quantile(0.99, ")
    assert slow["expr"].endswith(f"> 0.8 * {timeout_seconds}")


def test_promtool_is_the_prometheus_release_the_compose_demo_runs():
    """Rules checked by one Prometheus release and loaded by another can disagree (PromQL and rule-file syntax
    change between releases), so CI's promtool and the compose image are the same version."""
    result = run(promtool(), "--version")
    match = re.search(r"promtool, version (\d+\.\d+\.\d+)", result.stdout + result.stderr)
    assert match, result.stdout + result.stderr
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    image = compose["services"]["prometheus"]["image"]
    assert image == f"prom/prometheus:v{match.group(1)}"
