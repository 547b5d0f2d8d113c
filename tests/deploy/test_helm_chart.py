"""The Helm chart in helm/kvcap, checked without Helm.

No helm binary is available on the machines that run this suite, so these tests do not render templates. They
check what can be checked statically: values.yaml validates against values.schema.json (and a typo'd key does
not), the template text carries the settings a safe install depends on (hook annotations on the migration Job,
webhook fields taken from values, the release namespace excluded from the webhook, selector labels limited to
name/instance, a non-root pod with probes, the Grafana sidecar label), and the rule and dashboard files the
chart ships are byte-identical to the tested originals under deploy/.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "kvcap"
TEMPLATES = CHART / "templates"

EXPECTED_TEMPLATES = {
    "_helpers.tpl",
    "deployment.yaml",
    "service.yaml",
    "serviceaccount.yaml",
    "rbac.yaml",
    "configmap.yaml",
    "secret.yaml",
    "job-migrate.yaml",
    "validatingwebhookconfiguration.yaml",
    "certificate.yaml",
    "servicemonitor.yaml",
    "prometheusrule.yaml",
    "dashboards-configmap.yaml",
    "pdb.yaml",
    "NOTES.txt",
}

# Files the chart ships, and the originals under deploy/ that the promtool and dashboard tests cover.
SHIPPED_COPIES = {
    CHART / "files" / "kvcap-alerts.yaml": ROOT / "deploy" / "prometheus" / "rules" / "kvcap-alerts.yaml",
    CHART / "files" / "dashboards" / "kvcap-capacity.json": ROOT
    / "deploy"
    / "grafana"
    / "dashboards"
    / "kvcap-capacity.json",
}


def values() -> dict[str, Any]:
    return yaml.safe_load((CHART / "values.yaml").read_text())


def schema() -> dict[str, Any]:
    return json.loads((CHART / "values.schema.json").read_text())


def template(name: str) -> str:
    return (TEMPLATES / name).read_text()


def errors(document: dict[str, Any]) -> list[str]:
    validator = jsonschema.Draft7Validator(schema())
    return [error.message for error in validator.iter_errors(document)]


def test_chart_metadata():
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["apiVersion"] == "v2"
    assert chart["type"] == "application"
    assert chart["name"] == "kvcap"
    assert chart["version"] == "0.1.0"
    assert str(chart["appVersion"]) == "0.1.0"


def test_chart_has_every_template():
    present = {p.name for p in TEMPLATES.iterdir()}
    assert present >= EXPECTED_TEMPLATES, f"missing: {sorted(EXPECTED_TEMPLATES - present)}"


def test_schema_is_draft_07_and_closed_at_the_top_level():
    document = schema()
    assert document["$schema"] == "http://json-schema.org/draft-07/schema#"
    jsonschema.Draft7Validator.check_schema(document)
    assert document["additionalProperties"] is False


def test_values_yaml_validates_against_the_schema():
    assert errors(values()) == []


def test_every_top_level_value_is_described_by_the_schema():
    assert set(values()) <= set(schema()["properties"])


@pytest.mark.parametrize("typo", ["replicaCounts", "webhooks", "imag", "databse"])
def test_a_typod_top_level_key_fails_validation(typo: str):
    document = values()
    document[typo] = document.get(typo.rstrip("s"), 1)
    assert any(typo in message for message in errors(document))


@pytest.mark.parametrize(
    ("path", "bad"),
    [
        (("webhook", "failurePolicy"), "Sometimes"),
        (("webhook", "timeoutSeconds"), 31),
        (("config", "admissionMode"), "block"),
        (("config", "logLevel"), "TRACE"),
        (("image", "pullPolicy"), "Sometimes"),
    ],
)
def test_schema_rejects_out_of_range_settings(path: tuple[str, str], bad: object):
    document = copy.deepcopy(values())
    document[path[0]][path[1]] = bad
    assert errors(document)


def test_values_document_every_key_with_helm_docs_comments():
    text = (CHART / "values.yaml").read_text()
    assert text.count("# --") >= 40
    for key in (
        "replicaCount",
        "failurePolicy",
        "timeoutSeconds",
        "namespaceSelector",
        "objectSelector",
        "existingSecret",
    ):
        assert re.search(rf"# -- .*\n(#.*\n)*\s*{key}:", text), key


def test_values_cover_the_documented_settings():
    v = values()
    assert {"repository", "tag", "pullPolicy"} <= set(v["image"])
    assert {"url", "existingSecret"} <= set(v["database"])
    assert {"tokens", "existingSecret"} <= set(v["auth"])
    assert {
        "scrapeIntervalSeconds",
        "scrapeAllowedHosts",
        "logLevel",
        "logFormat",
        "admissionMode",
        "admissionFailurePolicy",
    } <= set(v["config"])
    webhook = v["webhook"]
    assert webhook["enabled"] is True
    assert webhook["failurePolicy"] == "Fail"
    assert webhook["timeoutSeconds"] == 5
    assert webhook["certManager"]["enabled"] is True
    assert "secretName" in webhook["tls"]
    assert webhook["objectSelector"]["matchExpressions"][0]["key"] == "kvcap.io/skip"
    assert v["migrations"]["enabled"] is True
    assert v["rbac"]["create"] is True
    assert {"create", "name"} <= set(v["serviceAccount"])
    assert "enabled" in v["pdb"]
    assert v["metrics"]["serviceMonitor"]["enabled"] is False
    assert v["metrics"]["prometheusRule"]["enabled"] is False
    assert v["grafana"]["dashboards"]["enabled"] is False
    assert {"nodeSelector", "tolerations", "affinity"} <= set(v)


def test_migration_job_is_a_pre_install_and_pre_upgrade_hook_that_cleans_up():
    text = template("job-migrate.yaml")
    assert "{{- if .Values.migrations.enabled }}" in text
    assert '"helm.sh/hook": pre-install,pre-upgrade' in text
    assert '"helm.sh/hook-delete-policy": before-hook-creation,hook-succeeded' in text
    assert 'args: ["migrate"]' in text
    assert 'args: ["catalog", "load"]' in text


def test_migration_pods_are_not_picked_by_the_servers_selectors():
    text = template("job-migrate.yaml")
    pod_labels = text.split("template:", 1)[1]
    assert 'include "kvcap.selectorLabels"' not in pod_labels
    assert 'app.kubernetes.io/name: {{ include "kvcap.name" . }}-migrate' in pod_labels


def test_webhook_is_side_effect_free_v1_and_configured_from_values():
    text = template("validatingwebhookconfiguration.yaml")
    assert "{{- if .Values.webhook.enabled }}" in text
    assert 'admissionReviewVersions: ["v1"]' in text
    assert "sideEffects: None" in text
    assert "failurePolicy: {{ .Values.webhook.failurePolicy }}" in text
    assert "timeoutSeconds: {{ .Values.webhook.timeoutSeconds }}" in text
    assert "path: /admission/validate" in text
    assert "cert-manager.io/inject-ca-from: {{ .Release.Namespace }}/" in text
    assert ".Values.webhook.objectSelector" in text


def test_webhook_never_reviews_the_release_namespace():
    text = template("validatingwebhookconfiguration.yaml")
    selector = text.split("namespaceSelector:", 1)[1].split("objectSelector", 1)[0]
    assert "key: kubernetes.io/metadata.name" in selector
    assert "operator: NotIn" in selector
    assert "(list .Release.Namespace)" in selector


def test_webhook_rules_cover_the_served_workload_kinds():
    rules = values()["webhook"]["rules"]
    covered = {
        (group, version, resource)
        for r in rules
        for group in r["apiGroups"]
        for version in r["apiVersions"]
        for resource in r["resources"]
    }
    assert covered == {
        ("apps", "v1", "deployments"),
        ("apps", "v1", "statefulsets"),
        ("", "v1", "pods"),
        ("leaderworkerset.x-k8s.io", "v1", "leaderworkersets"),
        ("serving.kserve.io", "v1beta1", "inferenceservices"),
    }
    text = template("validatingwebhookconfiguration.yaml")
    assert '(list "CREATE" "UPDATE")' in text


def test_selector_labels_are_only_name_and_instance():
    helpers = template("_helpers.tpl")
    block = helpers.split('{{- define "kvcap.selectorLabels" -}}', 1)[1].split("{{- end }}", 1)[0]
    keys = [line.split(":", 1)[0].strip() for line in block.strip().splitlines()]
    assert keys == ["app.kubernetes.io/name", "app.kubernetes.io/instance"]
    for name in ("deployment.yaml", "service.yaml", "pdb.yaml", "servicemonitor.yaml"):
        text = template(name)
        selector = "\n".join(text.split("selector:", 1)[1].splitlines()[:4])
        assert 'include "kvcap.selectorLabels"' in selector, name
        assert 'include "kvcap.labels"' not in selector, name


def test_server_runs_as_non_root_with_a_read_only_root_filesystem_and_probes():
    text = template("deployment.yaml")
    for probe, path in (
        ("livenessProbe", "/healthz"),
        ("readinessProbe", "/readyz?degraded_ok=true"),
        ("startupProbe", "/healthz"),
    ):
        assert probe in text
        assert f"path: {path}" in text.split(probe, 1)[1].split("Probe", 1)[0]
    assert 'scheme: {{ include "kvcap.scheme" . }}' in text
    assert "toYaml .Values.podSecurityContext" in text
    assert "toYaml .Values.securityContext" in text
    security = values()["securityContext"]
    assert security["runAsNonRoot"] is True
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    assert values()["podSecurityContext"]["runAsNonRoot"] is True
    assert values()["podSecurityContext"]["seccompProfile"]["type"] == "RuntimeDefault"


def test_secrets_come_from_a_secret_or_an_existing_one():
    deployment = template("deployment.yaml")
    assert "secretKeyRef" in deployment
    assert "KVCAP_DATABASE_URL" not in template("configmap.yaml")
    assert ".Values.database.existingSecret" in template("secret.yaml")
    assert ".Values.auth.existingSecret" in deployment


def test_optional_integrations_are_gated_by_their_values():
    assert "{{- if .Values.metrics.serviceMonitor.enabled }}" in template("servicemonitor.yaml")
    assert "{{- if .Values.metrics.prometheusRule.enabled }}" in template("prometheusrule.yaml")
    assert "{{- if .Values.grafana.dashboards.enabled }}" in template("dashboards-configmap.yaml")
    assert "{{- if .Values.webhook.certManager.enabled }}" in template("certificate.yaml")
    assert "{{- if .Values.rbac.create }}" in template("rbac.yaml")
    assert "{{- if .Values.serviceAccount.create }}" in template("serviceaccount.yaml")
    assert "{{- if .Values.pdb.enabled }}" in template("pdb.yaml")


def test_rbac_only_reads_pods():
    text = template("rbac.yaml")
    assert 'resources: ["pods"]' in text
    assert 'verbs: ["get", "list", "watch"]' in text


def test_dashboards_config_map_carries_the_grafana_sidecar_label():
    text = template("dashboards-configmap.yaml")
    assert 'grafana_dashboard: "1"' in text
    assert '.Files.Glob "files/dashboards/*.json"' in text


def test_prometheus_rule_reads_the_shipped_rule_file():
    assert '.Files.Get "files/kvcap-alerts.yaml"' in template("prometheusrule.yaml")


@pytest.mark.parametrize(("copy_path", "original"), SHIPPED_COPIES.items(), ids=lambda p: p.name)
def test_chart_files_are_byte_identical_to_the_tested_originals(copy_path: Path, original: Path):
    assert copy_path.read_bytes() == original.read_bytes(), (
        f"{copy_path.relative_to(ROOT)} differs from {original.relative_to(ROOT)}: cp {original.relative_to(ROOT)} "
        f"{copy_path.relative_to(ROOT)}"
    )
