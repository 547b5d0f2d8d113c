"""The plain Kubernetes manifests in deploy/kubernetes (a kustomize base): they render with
``kubectl kustomize``, every object is valid against the Kubernetes OpenAPI schemas shipped with
``kubernetes-validate`` (core kinds) or the vendored CRDs in tests/data/crds (cert-manager's Issuer/Certificate, the
Prometheus Operator's ServiceMonitor/PrometheusRule), and the admission webhook and the server are configured
safely.

kubectl is an external binary. Without it these tests skip, unless ``KVCAP_REQUIRE_TOOLS=1`` (CI), where a missing
tool fails the run instead.
"""

from __future__ import annotations

import json
import os
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests import crds
from tests.deploy.tools import require_tool

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "deploy" / "kubernetes"
MONITORING = BASE / "components" / "monitoring"
KUBERNETES_VERSION = "1.30"
SELECTOR_LABELS = {"app.kubernetes.io/name": "kvcap", "app.kubernetes.io/instance": "kvcap"}

Object = dict[str, Any]


@cache
def _kustomize(directory: Path) -> tuple[Object, ...]:
    kubectl = require_tool("kubectl", "render deploy/kubernetes")
    result = subprocess.run(
        [kubectl, "kustomize", str(directory)], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    return tuple(doc for doc in yaml.safe_load_all(result.stdout) if doc)


def rendered() -> tuple[Object, ...]:
    return _kustomize(BASE)


def one(kind: str, objects: tuple[Object, ...] | None = None) -> Object:
    matches = [o for o in (objects or rendered()) if o["kind"] == kind]
    assert len(matches) == 1, f"expected one {kind}, found {len(matches)}"
    return matches[0]


def validate(obj: Object) -> None:
    assert obj["metadata"]["name"]
    if (obj["apiVersion"], obj["kind"]) in crds.schemas():
        crds.validate(obj)
        return
    kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


def test_base_renders_the_expected_objects():
    kinds = sorted(o["kind"] for o in rendered())
    assert kinds == sorted(
        [
            "Namespace",
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "ConfigMap",
            "Service",
            "Deployment",
            "PodDisruptionBudget",
            "Job",
            "Issuer",
            "Issuer",
            "Certificate",
            "Certificate",
            "ValidatingWebhookConfiguration",
        ]
    )


def test_every_rendered_object_is_valid():
    for obj in rendered():
        try:
            validate(obj)
        except kubernetes_validate.ValidationError as error:
            pytest.fail(f"{obj['kind']}/{obj['metadata']['name']}: {error.message} at {list(error.path)}")


@cache
def with_monitoring(tmp: Path) -> tuple[Object, ...]:
    overlay = tmp / "overlay"
    overlay.mkdir(exist_ok=True)
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [os.path.relpath(BASE, overlay)],
                "components": [os.path.relpath(MONITORING, overlay)],
            }
        )
    )
    return _kustomize(overlay)


def test_monitoring_component_renders_a_valid_service_monitor_as_job_kvcap(tmp_path: Path):
    objects = with_monitoring(tmp_path)
    monitor = one("ServiceMonitor", objects)
    validate(monitor)
    assert monitor["spec"]["jobLabel"] == "app.kubernetes.io/name"
    assert one("Service", objects)["metadata"]["labels"]["app.kubernetes.io/name"] == "kvcap"
    endpoint = monitor["spec"]["endpoints"][0]
    assert endpoint["port"] == "metrics"
    assert endpoint["honorLabels"] is True
    assert endpoint["scheme"] == "https"
    assert endpoint["tlsConfig"]["ca"]["secret"] == {"name": "kvcap-webhook-tls", "key": "ca.crt"}
    assert monitor["spec"]["selector"]["matchLabels"] == SELECTOR_LABELS


def test_monitoring_component_ships_the_tested_alert_rules(tmp_path: Path):
    rule = one("PrometheusRule", with_monitoring(tmp_path))
    validate(rule)
    tested = yaml.safe_load((ROOT / "deploy" / "prometheus" / "rules" / "kvcap-alerts.yaml").read_text())
    assert rule["spec"] == tested, "run deploy/sync-copies"


def test_namespaced_objects_live_in_the_kvcap_namespace():
    cluster_scoped = {"Namespace", "ClusterRole", "ClusterRoleBinding", "ValidatingWebhookConfiguration"}
    for obj in rendered():
        if obj["kind"] not in cluster_scoped:
            assert obj["metadata"]["namespace"] == "kvcap", obj["kind"]


def test_webhook_is_v1_side_effect_free_and_fails_open_quickly():
    config = one("ValidatingWebhookConfiguration")
    assert config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == "kvcap/kvcap-webhook"
    (webhook,) = config["webhooks"]
    assert webhook["admissionReviewVersions"] == ["v1"]
    assert webhook["sideEffects"] == "None"
    assert webhook["failurePolicy"] == "Ignore"
    assert webhook["timeoutSeconds"] == 5
    assert webhook["clientConfig"]["service"] == {
        "name": "kvcap",
        "namespace": "kvcap",
        "path": "/admission/validate",
        "port": 443,
    }


def test_webhook_reviews_opted_in_namespaces_only_and_never_its_own_or_kube_system():
    (webhook,) = one("ValidatingWebhookConfiguration")["webhooks"]
    assert webhook["namespaceSelector"]["matchLabels"] == {"kvcap.io/admission": "enabled"}
    (expression,) = webhook["namespaceSelector"]["matchExpressions"]
    assert expression == {
        "key": "kubernetes.io/metadata.name",
        "operator": "NotIn",
        "values": ["kvcap", "kube-system"],
    }
    conditions = {c["name"]: c["expression"] for c in webhook["matchConditions"]}
    listed = conditions["not-an-excluded-namespace"].removeprefix("!(request.namespace in ").removesuffix(")")
    assert set(json.loads(listed)) == {"kvcap", "kube-system"}
    assert conditions["not-a-pod-of-a-reviewed-controller"].startswith(
        "request.resource.resource != 'pods' ||"
    )
    assert webhook["objectSelector"]["matchExpressions"] == [
        {"key": "kvcap.io/skip", "operator": "NotIn", "values": ["true"]}
    ]


@pytest.mark.parametrize(
    ("resource", "namespace", "obj", "sent"),
    [
        ("pods", "llm", {"metadata": {}}, True),
        (
            "pods",
            "llm",
            {"metadata": {"ownerReferences": [{"kind": "ReplicaSet", "controller": True}]}},
            False,
        ),
        ("deployments", "kube-system", {"metadata": {}}, False),
        ("deployments", "kvcap", {"metadata": {}}, False),
    ],
)
def test_match_conditions_send_kvcap_only_what_it_reviews(
    resource: str, namespace: str, obj: Object, sent: bool
):
    from tests.deploy.test_helm_chart import sent_to_webhook

    (webhook,) = one("ValidatingWebhookConfiguration")["webhooks"]
    assert sent_to_webhook(webhook["matchConditions"], resource, namespace, obj) is sent


def test_webhook_matches_the_helm_charts_defaults():
    from tests.deploy import test_helm_chart as chart

    (ours,) = one("ValidatingWebhookConfiguration")["webhooks"]
    theirs = chart.webhook(chart.render("defaults.yaml"))
    for key in (
        "failurePolicy",
        "timeoutSeconds",
        "sideEffects",
        "objectSelector",
        "rules",
        "admissionReviewVersions",
    ):
        assert ours[key] == theirs[key], key
    assert ours["namespaceSelector"]["matchLabels"] == theirs["namespaceSelector"]["matchLabels"]
    assert [c["name"] for c in ours["matchConditions"]] == [c["name"] for c in theirs["matchConditions"]]


def test_webhook_reviews_the_workload_kinds_that_run_vllm():
    (webhook,) = one("ValidatingWebhookConfiguration")["webhooks"]
    covered = set()
    for rule in webhook["rules"]:
        assert rule["operations"] == ["CREATE", "UPDATE"]
        covered |= {
            (g, v, r) for g in rule["apiGroups"] for v in rule["apiVersions"] for r in rule["resources"]
        }
    assert covered == {
        ("apps", "v1", "deployments"),
        ("apps", "v1", "statefulsets"),
        ("", "v1", "pods"),
        ("leaderworkerset.x-k8s.io", "v1", "leaderworkersets"),
        ("serving.kserve.io", "v1beta1", "inferenceservices"),
    }


def test_serving_certificate_comes_from_a_ca_chain_and_lands_in_the_mounted_secret():
    issuers = {o["metadata"]["name"]: o["spec"] for o in rendered() if o["kind"] == "Issuer"}
    certificates = {o["metadata"]["name"]: o["spec"] for o in rendered() if o["kind"] == "Certificate"}
    assert issuers["kvcap-selfsigned"] == {"selfSigned": {}}
    assert certificates["kvcap-ca"]["isCA"] is True
    assert certificates["kvcap-ca"]["issuerRef"]["name"] == "kvcap-selfsigned"
    assert issuers["kvcap-ca"] == {"ca": {"secretName": certificates["kvcap-ca"]["secretName"]}}
    leaf = certificates["kvcap-webhook"]
    assert leaf["issuerRef"] == {"group": "cert-manager.io", "kind": "Issuer", "name": "kvcap-ca"}
    assert "kvcap.kvcap.svc" in leaf["dnsNames"]
    volumes = one("Deployment")["spec"]["template"]["spec"]["volumes"]
    assert {"name": "webhook-tls", "secret": {"secretName": leaf["secretName"]}} in volumes


def test_selectors_use_only_name_and_instance():
    deployment = one("Deployment")
    assert deployment["spec"]["selector"]["matchLabels"] == SELECTOR_LABELS
    assert one("Service")["spec"]["selector"] == SELECTOR_LABELS
    assert one("PodDisruptionBudget")["spec"]["selector"]["matchLabels"] == SELECTOR_LABELS


def test_disruption_budget_lets_a_drain_progress():
    assert one("PodDisruptionBudget")["spec"]["maxUnavailable"] == 1


def test_migration_pods_are_not_selected_by_the_service():
    labels = one("Job")["spec"]["template"]["metadata"]["labels"]
    assert not SELECTOR_LABELS.items() <= labels.items()


def test_server_is_two_hardened_replicas_with_https_probes():
    deployment = one("Deployment")
    assert deployment["spec"]["replicas"] == 2
    pod = deployment["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "kvcap"
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (container,) = pod["containers"]
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["runAsNonRoot"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    assert container["resources"]["requests"] and container["resources"]["limits"]
    assert container["ports"] == [{"name": "https", "containerPort": 8443, "protocol": "TCP"}]
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz?degraded_ok=true")):
        get = container[probe]["httpGet"]
        assert (get["scheme"], get["path"], get["port"]) == ("HTTPS", path, "https")
    assert {e["configMapRef"]["name"] for e in container["envFrom"] if "configMapRef" in e} == {
        "kvcap-config"
    }
    assert {e["secretRef"]["name"] for e in container["envFrom"] if "secretRef" in e} == {"kvcap-secrets"}
    args = container["args"]
    assert args[:5] == ["serve", "--host", "0.0.0.0", "--port", "8443"]
    assert args[args.index("--ssl-certfile") + 1] == "/etc/kvcap/tls/tls.crt"
    assert args[args.index("--ssl-keyfile") + 1] == "/etc/kvcap/tls/tls.key"
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert mounts["/etc/kvcap/tls"]["readOnly"] is True
    assert [path for path, m in mounts.items() if not m.get("readOnly")] == ["/tmp"]


def test_service_exposes_https_443_and_metrics():
    ports = {p["name"]: p for p in one("Service")["spec"]["ports"]}
    assert (ports["https"]["port"], ports["https"]["targetPort"]) == (443, "https")
    assert ports["metrics"]["targetPort"] == "https"


def test_service_account_may_only_read_pods():
    (rule,) = one("ClusterRole")["rules"]
    assert rule == {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}
    binding = one("ClusterRoleBinding")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "kvcap", "namespace": "kvcap"}]


def test_migration_job_migrates_then_loads_the_catalog():
    pod = one("Job")["spec"]["template"]["spec"]
    assert [c["args"] for c in pod["initContainers"]] == [["migrate"]]
    assert [c["args"] for c in pod["containers"]] == [["catalog", "load"]]
    assert pod["restartPolicy"] == "Never"
    for container in pod["initContainers"] + pod["containers"]:
        assert container["securityContext"]["readOnlyRootFilesystem"] is True


def test_config_map_sets_only_non_secret_settings():
    data = one("ConfigMap")["data"]
    assert all(key.startswith("KVCAP_") for key in data)
    assert not {"KVCAP_DATABASE_URL", "KVCAP_API_TOKENS", "KVCAP_API_TOKEN_SHA256"} & set(data)


def test_no_secret_is_committed_in_the_base():
    assert not [o for o in rendered() if o["kind"] == "Secret"]
    example = yaml.safe_load((BASE / "secret.example.yaml").read_text())
    assert example["metadata"]["name"] == "kvcap-secrets"
    assert set(example["stringData"]) == {"KVCAP_DATABASE_URL", "KVCAP_API_TOKENS"}
    validate(example)
