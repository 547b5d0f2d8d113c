"""The Helm chart in helm/kvcap, linted and rendered by the real helm 3 and helm 4.

Every values file in tests/deploy/values passes ``helm lint --strict`` and renders (``helm template``) to objects
that are valid: core kinds against the Kubernetes OpenAPI schemas of kubernetes-validate (strict: unknown fields
fail), custom resources against the vendored CRDs of cert-manager and the Prometheus Operator (tests/crds.py).
Every file in tests/deploy/values/invalid is refused by ``helm lint --strict``. The assertions below read the
rendered manifests, not the template text.

helm is an external binary (``.ci/install-tools`` installs both majors). Without it these tests skip, unless
``KVCAP_REQUIRE_TOOLS=1`` (CI), where a missing helm fails them.
"""

from __future__ import annotations

import copy
import json
import re
from functools import cache
from pathlib import Path
from typing import Any

import celpy
import jsonschema
import kubernetes_validate
import pytest
import yaml

from tests import crds
from tests.deploy.tools import helm, run

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "kvcap"
VALUES_DIR = Path(__file__).resolve().parent / "values"
VALUES = sorted(p.name for p in VALUES_DIR.glob("*.yaml"))
INVALID = sorted(p.name for p in (VALUES_DIR / "invalid").glob("*.yaml"))
HELM_MAJORS = (3, 4)
RELEASE, NAMESPACE = "kv", "inference"
FULLNAME = "kv-kvcap"
# The oldest Kubernetes the chart supports (Chart.yaml kubeVersion: matchConditions are on by default from 1.28)
# and the newest kubernetes-validate knows.
KUBERNETES_VERSIONS = ("1.28", kubernetes_validate.latest_version())
SELECTOR_LABELS = {"app.kubernetes.io/name": "kvcap", "app.kubernetes.io/instance": RELEASE}
REVIEWED = {
    ("apps", "v1", "deployments"),
    ("apps", "v1", "statefulsets"),
    ("", "v1", "pods"),
    ("leaderworkerset.x-k8s.io", "v1", "leaderworkersets"),
    ("serving.kserve.io", "v1beta1", "inferenceservices"),
}
# The key each invalid values file gets wrong, as helm's schema error names it.
INVALID_KEY = {
    "bad-cpu.yaml": "cpu",
    "bad-duration.yaml": "duration",
    "bad-quantity.yaml": "memory",
    "bad-scrape-interval.yaml": "interval",
    "fail-with-one-replica.yaml": "replicaCount",
    "negative-replicas.yaml": "replicaCount",
    "pdb-blocking-drains.yaml": "maxUnavailable",
    "timeout-near-the-api-server.yaml": "timeoutSeconds",
    "unknown-key.yaml": "replicas",
    "zero-replicas.yaml": "replicaCount",
}

Object = dict[str, Any]


@cache
def render(values: str, *sets: str, major: int = 4) -> tuple[Object, ...]:
    """`helm template` of the chart with one values file (and --set-json overrides), parsed."""
    args = [helm(major), "template", RELEASE, CHART, "--namespace", NAMESPACE, "-f", VALUES_DIR / values]
    for assignment in sets:
        args += ["--set-json", assignment]
    result = run(args)
    assert result.returncode == 0, result.stderr
    return tuple(doc for doc in yaml.safe_load_all(result.stdout) if doc)


def of_kind(kind: str, objects: tuple[Object, ...]) -> list[Object]:
    return [o for o in objects if o["kind"] == kind]


def one(kind: str, objects: tuple[Object, ...], name: str | None = None) -> Object:
    matches = [o for o in of_kind(kind, objects) if name is None or o["metadata"]["name"] == name]
    assert len(matches) == 1, f"expected one {kind} {name or ''}, found {len(matches)}"
    return matches[0]


def webhook(objects: tuple[Object, ...]) -> Object:
    (entry,) = one("ValidatingWebhookConfiguration", objects)["webhooks"]
    return entry


def server_container(objects: tuple[Object, ...]) -> Object:
    (container,) = one("Deployment", objects)["spec"]["template"]["spec"]["containers"]
    return container


def values_yaml() -> dict[str, Any]:
    return yaml.safe_load((CHART / "values.yaml").read_text())


def schema() -> dict[str, Any]:
    return json.loads((CHART / "values.schema.json").read_text())


# --- helm lint ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("major", HELM_MAJORS)
@pytest.mark.parametrize("values", VALUES)
def test_helm_lint_strict_passes_for_every_values_file(major: int, values: str) -> None:
    result = run([helm(major), "lint", "--strict", CHART, "-f", VALUES_DIR / values])
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("major", HELM_MAJORS)
@pytest.mark.parametrize("values", INVALID)
def test_helm_lint_strict_refuses_a_bad_values_file_naming_the_key(major: int, values: str) -> None:
    result = run([helm(major), "lint", "--strict", CHART, "-f", VALUES_DIR / "invalid" / values])
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert INVALID_KEY[values] in output, output


def test_every_invalid_values_file_says_which_key_it_breaks() -> None:
    assert set(INVALID) == set(INVALID_KEY)


# --- what renders is valid -------------------------------------------------------------------------------------


@pytest.mark.parametrize("values", VALUES)
def test_every_rendered_object_is_valid_against_kubernetes_and_crd_schemas(values: str) -> None:
    for obj in render(values):
        name = f"{obj['kind']} {obj['metadata']['name']}"
        if (obj["apiVersion"], obj["kind"]) in crds.schemas():
            crds.validate(obj)
            continue
        for version in KUBERNETES_VERSIONS:
            try:
                kubernetes_validate.validate(obj, version, strict=True)
            except kubernetes_validate.ValidationError as error:
                pytest.fail(
                    f"{values}: {name} on Kubernetes {version}: {error.message} at {list(error.path)}"
                )


@pytest.mark.parametrize("values", VALUES)
def test_helm_3_and_helm_4_render_the_same_objects(values: str) -> None:
    # The same objects; only the order (each major's install order of kinds) may differ.
    def by_name(objects: tuple[Object, ...]) -> list[Object]:
        return sorted(objects, key=lambda o: (o["kind"], o["metadata"]["name"]))

    assert by_name(render(values, major=3)) == by_name(render(values, major=4))


def test_each_optional_resource_appears_only_when_its_values_ask_for_it() -> None:
    kinds = {values: sorted(o["kind"] for o in render(values)) for values in VALUES}
    core = ["ClusterRole", "ClusterRoleBinding", "ConfigMap", "Deployment", "Job", "Secret", "Service"]
    core += ["ServiceAccount"]
    # The default: the webhook with cert-manager's CA chain and a PDB for the two replicas; the migration Job's
    # hook Secret besides the release's own.
    chain = ["Issuer", "Issuer", "Certificate", "Certificate"]
    defaults = sorted([*core, *chain, "Secret", "PodDisruptionBudget", "ValidatingWebhookConfiguration"])
    assert kinds["defaults.yaml"] == defaults
    assert "PodDisruptionBudget" not in kinds["single-replica.yaml"]
    assert {"ServiceMonitor", "PrometheusRule"} <= set(kinds["monitoring.yaml"])
    assert kinds["monitoring.yaml"].count("ConfigMap") == 2  # settings and dashboards
    assert not {"Issuer", "Certificate", "ValidatingWebhookConfiguration"} & set(kinds["tls-off.yaml"])
    assert "Secret" not in kinds["tls-off.yaml"]  # database.existingSecret, no tokens
    assert not {"Issuer", "Certificate"} & set(kinds["existing-tls.yaml"])
    assert kinds["cluster-issuer.yaml"].count("Issuer") == 0
    assert kinds["cluster-issuer.yaml"].count("Certificate") == 1


@pytest.mark.parametrize("major", HELM_MAJORS)
def test_clusters_older_than_1_28_are_refused(major: int) -> None:
    """The webhook's matchConditions are on by default from Kubernetes 1.28; older API servers would drop them."""
    args = [helm(major), "template", RELEASE, CHART, "-f", VALUES_DIR / "defaults.yaml", "--kube-version"]
    assert run([*args, "1.28.0"]).returncode == 0
    refused = run([*args, "1.27.9"])
    assert refused.returncode != 0
    assert "kubeVersion" in refused.stderr


def test_rendering_fails_without_a_database() -> None:
    result = run([helm(4), "template", RELEASE, CHART])
    assert result.returncode != 0
    assert "database.url" in result.stderr


# --- the webhook fails safe ------------------------------------------------------------------------------------


def test_webhook_fails_open_quickly_without_side_effects_by_default() -> None:
    entry = webhook(render("defaults.yaml"))
    assert entry["failurePolicy"] == "Ignore"
    assert entry["timeoutSeconds"] == 5
    assert entry["sideEffects"] == "None"
    assert entry["admissionReviewVersions"] == ["v1"]
    assert entry["clientConfig"]["service"] == {
        "name": FULLNAME,
        "namespace": NAMESPACE,
        "path": "/admission/validate",
        "port": 443,
    }


def test_fail_is_an_explicit_choice() -> None:
    assert webhook(render("webhook-fail.yaml"))["failurePolicy"] == "Fail"
    assert webhook(render("webhook-fail.yaml"))["timeoutSeconds"] == 3


def test_webhook_reviews_only_namespaces_that_opted_in() -> None:
    selector = webhook(render("defaults.yaml"))["namespaceSelector"]
    assert selector["matchLabels"] == {"kvcap.io/admission": "enabled"}


def excluded_by_selector(entry: Object) -> set[str]:
    (name_rule,) = [
        e for e in entry["namespaceSelector"]["matchExpressions"] if e["key"] == "kubernetes.io/metadata.name"
    ]
    assert name_rule["operator"] == "NotIn"
    return set(name_rule["values"])


def excluded_by_match_condition(entry: Object) -> set[str]:
    (condition,) = [c for c in entry["matchConditions"] if c["name"] == "not-an-excluded-namespace"]
    expression = condition["expression"]
    assert expression.startswith("!(request.namespace in [") and expression.endswith("])")
    return set(json.loads(expression.removeprefix("!(request.namespace in ").removesuffix(")")))


@pytest.mark.parametrize(
    ("values", "sets"),
    [
        ("defaults.yaml", ()),
        ("webhook-fail.yaml", ()),
        # Even with the opt-in label and every exclusion removed from the values.
        ("defaults.yaml", ("webhook.namespaceSelector={}", "webhook.excludedNamespaces=[]")),
    ],
)
def test_release_namespace_and_kube_system_are_never_reviewed(values: str, sets: tuple[str, ...]) -> None:
    entry = webhook(render(values, *sets))
    for excluded in (excluded_by_selector(entry), excluded_by_match_condition(entry)):
        assert {NAMESPACE, "kube-system"} <= excluded


def test_extra_exclusions_and_selector_terms_are_added_to_the_fixed_ones() -> None:
    entry = webhook(render("webhook-fail.yaml"))
    expected = {NAMESPACE, "kube-system", "monitoring", "cert-manager"}
    assert excluded_by_selector(entry) == expected == excluded_by_match_condition(entry)
    assert {"key": "team", "operator": "In", "values": ["inference"]} in entry["namespaceSelector"][
        "matchExpressions"
    ]


def test_objects_labelled_skip_are_not_sent_to_the_webhook() -> None:
    assert webhook(render("defaults.yaml"))["objectSelector"] == {
        "matchExpressions": [{"key": "kvcap.io/skip", "operator": "NotIn", "values": ["true"]}]
    }


def test_webhook_reviews_only_the_kinds_kvcap_understands_on_create_and_update() -> None:
    covered = set()
    for rule in webhook(render("defaults.yaml"))["rules"]:
        assert rule["operations"] == ["CREATE", "UPDATE"]
        assert rule["scope"] == "Namespaced"
        covered |= {
            (g, v, r) for g in rule["apiGroups"] for v in rule["apiVersions"] for r in rule["resources"]
        }
    assert covered == REVIEWED


def test_pods_of_controllers_kvcap_reviews_never_reach_the_webhook() -> None:
    conditions = {c["name"]: c["expression"] for c in webhook(render("defaults.yaml"))["matchConditions"]}
    expression = conditions["not-a-pod-of-a-reviewed-controller"]
    assert expression.startswith("request.resource.resource != 'pods' ||")
    # The controllers whose pods service/admission/extract.py skips (_REVIEWED_OWNERS).
    from service.admission import extract

    assert all(f"'{kind}'" in expression for kind in extract._REVIEWED_OWNERS)


def owned_pod(kind: str, *, controller: bool = True) -> Object:
    return {"metadata": {"ownerReferences": [{"kind": kind, "name": "x", "controller": controller}]}}


# (resource, namespace, object) → whether the API server sends the request to kvcap at all.
MATCH_CASES = [
    ("pods", "llm", {"metadata": {"name": "bare"}}, True),
    ("pods", "llm", owned_pod("ReplicaSet"), False),
    ("pods", "llm", owned_pod("StatefulSet"), False),
    ("pods", "llm", owned_pod("LeaderWorkerSet"), False),
    ("pods", "llm", owned_pod("Job"), True),
    ("pods", "llm", owned_pod("ReplicaSet", controller=False), True),
    ("deployments", "llm", owned_pod("ReplicaSet"), True),
    ("inferenceservices", "llm", {"metadata": {}}, True),
    ("deployments", "kube-system", {"metadata": {}}, False),
    ("pods", NAMESPACE, {"metadata": {}}, False),
]


def sent_to_webhook(conditions: list[Object], resource: str, namespace: str, obj: Object) -> bool:
    """Evaluates matchConditions as the API server does: the webhook is called only if every one is true.

    cel-python implements standard CEL (has(), exists(), in), which is all these expressions use."""
    environment = celpy.Environment()
    activation = {
        "request": celpy.json_to_cel({"resource": {"resource": resource}, "namespace": namespace}),
        "object": celpy.json_to_cel(obj),
    }
    return all(
        bool(environment.program(environment.compile(c["expression"])).evaluate(activation))
        for c in conditions
    )


@pytest.mark.parametrize(("resource", "namespace", "obj", "sent"), MATCH_CASES)
def test_match_conditions_send_kvcap_only_what_it_reviews(
    resource: str, namespace: str, obj: Object, sent: bool
) -> None:
    conditions = webhook(render("defaults.yaml"))["matchConditions"]
    assert sent_to_webhook(conditions, resource, namespace, obj) is sent


# --- cert-manager: a CA chain and caBundle injection -----------------------------------------------------------


def test_cert_manager_builds_a_ca_chain_and_injects_its_ca_into_the_webhook() -> None:
    objects = render("defaults.yaml")
    issuers = {o["metadata"]["name"]: o["spec"] for o in of_kind("Issuer", objects)}
    certificates = {o["metadata"]["name"]: o["spec"] for o in of_kind("Certificate", objects)}
    assert issuers[f"{FULLNAME}-selfsigned"] == {"selfSigned": {}}
    ca = certificates[f"{FULLNAME}-ca"]
    assert ca["isCA"] is True
    assert ca["issuerRef"] == {"name": f"{FULLNAME}-selfsigned", "kind": "Issuer", "group": "cert-manager.io"}
    assert issuers[f"{FULLNAME}-ca"] == {"ca": {"secretName": ca["secretName"]}}
    leaf = certificates[f"{FULLNAME}-webhook"]
    assert "isCA" not in leaf
    assert leaf["issuerRef"] == {"name": f"{FULLNAME}-ca", "kind": "Issuer", "group": "cert-manager.io"}
    assert f"{FULLNAME}.{NAMESPACE}.svc" in leaf["dnsNames"]
    assert "server auth" in leaf["usages"]
    annotations = one("ValidatingWebhookConfiguration", objects)["metadata"]["annotations"]
    assert annotations["cert-manager.io/inject-ca-from"] == f"{NAMESPACE}/{FULLNAME}-webhook"
    assert "caBundle" not in webhook(objects)["clientConfig"]


def test_an_existing_cluster_issuer_signs_the_serving_certificate_instead() -> None:
    objects = render("cluster-issuer.yaml")
    certificate = one("Certificate", objects)
    assert certificate["spec"]["issuerRef"] == {
        "name": "internal-ca",
        "kind": "ClusterIssuer",
        "group": "cert-manager.io",
    }


def test_a_certificate_managed_elsewhere_comes_with_its_ca_bundle() -> None:
    objects = render("existing-tls.yaml")
    config = one("ValidatingWebhookConfiguration", objects)
    assert "annotations" not in config["metadata"]
    assert webhook(objects)["clientConfig"]["caBundle"] == "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg=="
    volumes = one("Deployment", objects)["spec"]["template"]["spec"]["volumes"]
    assert {"name": "tls", "secret": {"secretName": "kvcap-serving-cert"}} in volumes


# --- the server serves HTTPS from the mounted secret -----------------------------------------------------------


def flag(args: list[str], name: str) -> str | None:
    return args[args.index(name) + 1] if name in args else None


@pytest.mark.parametrize("values", ["defaults.yaml", "existing-tls.yaml", "cluster-issuer.yaml"])
def test_server_serves_https_from_the_mounted_certificate(values: str) -> None:
    objects = render(values)
    container = server_container(objects)
    args = container["args"]
    assert args[0] == "serve"
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert mounts["tls"]["readOnly"] is True
    directory = mounts["tls"]["mountPath"]
    assert flag(args, "--ssl-certfile") == f"{directory}/tls.crt"
    assert flag(args, "--ssl-keyfile") == f"{directory}/tls.key"
    assert flag(args, "--port") == str(container["ports"][0]["containerPort"])
    volumes = {v["name"]: v for v in one("Deployment", objects)["spec"]["template"]["spec"]["volumes"]}
    secret = volumes["tls"]["secret"]["secretName"]
    certificates = [c for c in of_kind("Certificate", objects) if not c["spec"].get("isCA")]
    if certificates:
        assert secret == certificates[0]["spec"]["secretName"]
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        get = container[probe]["httpGet"]
        assert (get["scheme"], get["port"]) == ("HTTPS", "https"), probe
    assert container["ports"][0]["name"] == "https"


def test_webhook_and_metrics_service_ports_lead_to_the_https_listener() -> None:
    objects = render("defaults.yaml")
    ports = {p["name"]: p for p in one("Service", objects)["spec"]["ports"]}
    assert ports["https"]["port"] == webhook(objects)["clientConfig"]["service"]["port"]
    assert ports["https"]["targetPort"] == ports["metrics"]["targetPort"] == "https"


def test_without_a_webhook_or_certificate_the_server_speaks_plain_http() -> None:
    container = server_container(render("tls-off.yaml"))
    assert "--ssl-certfile" not in container["args"]
    assert container["readinessProbe"]["httpGet"]["scheme"] == "HTTP"
    assert container["ports"][0]["name"] == "http"


def test_a_webhook_without_any_certificate_is_refused() -> None:
    result = run(
        [
            helm(4),
            "template",
            RELEASE,
            CHART,
            "-f",
            VALUES_DIR / "tls-off.yaml",
            "--set",
            "webhook.enabled=true",
        ]
    )
    assert result.returncode != 0
    assert "needs HTTPS" in result.stderr


# --- hardening and availability --------------------------------------------------------------------------------


def containers_of(obj: Object) -> list[Object]:
    pod = obj["spec"]["template"]["spec"]
    return [*pod.get("initContainers", []), *pod["containers"]]


@pytest.mark.parametrize("kind", ["Deployment", "Job"])
def test_every_container_is_non_root_read_only_and_without_capabilities(kind: str) -> None:
    obj = one(kind, render("defaults.yaml"))
    pod = obj["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    volumes = {v["name"]: v for v in pod["volumes"]}
    for container in containers_of(obj):
        security = container["securityContext"]
        assert security["readOnlyRootFilesystem"] is True
        assert security["runAsNonRoot"] is True
        assert security["allowPrivilegeEscalation"] is False
        assert security["capabilities"] == {"drop": ["ALL"]}
        assert security["seccompProfile"] == {"type": "RuntimeDefault"}
        assert container["resources"]["requests"] and container["resources"]["limits"]
        # The only writable place is /tmp, an emptyDir with a size limit.
        writable = [m for m in container["volumeMounts"] if not m.get("readOnly")]
        assert [m["mountPath"] for m in writable] == ["/tmp"]
        assert volumes[writable[0]["name"]]["emptyDir"]["sizeLimit"]


@pytest.mark.parametrize(
    ("values", "replicas"), [("defaults.yaml", 2), ("ha.yaml", 3), ("webhook-fail.yaml", 3)]
)
def test_disruption_budget_always_lets_a_drain_progress(values: str, replicas: int) -> None:
    objects = render(values)
    assert one("Deployment", objects)["spec"]["replicas"] == replicas
    budget = one("PodDisruptionBudget", objects)["spec"]
    assert budget == {"maxUnavailable": 1, "selector": {"matchLabels": SELECTOR_LABELS}}


def test_a_single_replica_gets_no_disruption_budget_that_would_block_drains() -> None:
    objects = render("single-replica.yaml")
    assert one("Deployment", objects)["spec"]["replicas"] == 1
    assert not of_kind("PodDisruptionBudget", objects)


def test_rolling_updates_never_take_a_replica_away_first() -> None:
    strategy = one("Deployment", render("defaults.yaml"))["spec"]["strategy"]
    assert strategy == {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}


def test_selectors_use_only_name_and_instance_and_miss_the_migration_pods() -> None:
    objects = render("ha.yaml")
    assert one("Deployment", objects)["spec"]["selector"]["matchLabels"] == SELECTOR_LABELS
    assert one("Service", objects)["spec"]["selector"] == SELECTOR_LABELS
    labels = one("Job", objects)["spec"]["template"]["metadata"]["labels"]
    assert not SELECTOR_LABELS.items() <= labels.items()


def test_migration_job_is_a_hook_that_migrates_then_loads_the_catalog() -> None:
    job = one("Job", render("defaults.yaml"))
    annotations = job["metadata"]["annotations"]
    assert annotations["helm.sh/hook"] == "pre-install,pre-upgrade"
    assert annotations["helm.sh/hook-delete-policy"] == "before-hook-creation,hook-succeeded"
    pod = job["spec"]["template"]["spec"]
    assert [c["args"] for c in pod["initContainers"]] == [["migrate"]]
    assert [c["args"] for c in pod["containers"]] == [["catalog", "load"]]


def test_secrets_stay_out_of_the_config_map() -> None:
    objects = render("ha.yaml")
    data = one("ConfigMap", objects)["data"]
    assert not {"KVCAP_DATABASE_URL", "KVCAP_API_TOKENS", "KVCAP_API_TOKEN_SHA256"} & set(data)
    env = {e["name"]: e for e in server_container(objects)["env"]}
    assert env["KVCAP_DATABASE_URL"]["valueFrom"]["secretKeyRef"]["name"] == FULLNAME
    assert "KVCAP_API_TOKEN_SHA256" in env


# --- monitoring ------------------------------------------------------------------------------------------------


def deploy_rules() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(
        (ROOT / "deploy/prometheus/rules/kvcap-alerts.yaml").read_text()
    )
    return document


def test_prometheus_rule_carries_the_tested_rules_with_the_webhook_threshold_following_the_timeout() -> None:
    spec = one("PrometheusRule", render("monitoring.yaml"))["spec"]
    expected = copy.deepcopy(deploy_rules())
    changed = 0
    for group in expected["groups"]:
        for rule in group["rules"]:
            if rule.get("alert") == "KvcapWebhookSlow":
                assert rule["expr"].endswith("> 0.8 * 5")
                rule["expr"] = rule["expr"].removesuffix("5") + "10"  # monitoring.yaml: timeoutSeconds 10
                changed += 1
    assert changed == 1
    assert spec == expected


def test_prometheus_rule_with_the_default_timeout_is_the_rule_file_unchanged() -> None:
    rule = one("PrometheusRule", render("defaults.yaml", 'metrics.prometheusRule={"enabled": true}'))
    assert rule["spec"] == deploy_rules()


def test_service_monitor_scrapes_https_trusting_the_release_ca_as_job_kvcap() -> None:
    objects = render("monitoring.yaml")
    monitor = one("ServiceMonitor", objects)
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    spec = monitor["spec"]
    assert spec["jobLabel"] == "app.kubernetes.io/name"
    assert one("Service", objects)["metadata"]["labels"][spec["jobLabel"]] == "kvcap"  # up{job="kvcap"}
    assert spec["selector"]["matchLabels"] == SELECTOR_LABELS
    (endpoint,) = spec["endpoints"]
    assert (endpoint["port"], endpoint["scheme"], endpoint["interval"]) == ("metrics", "https", "30s")
    assert endpoint["tlsConfig"]["serverName"] == f"{FULLNAME}.{NAMESPACE}.svc"
    leaf = one("Certificate", objects, f"{FULLNAME}-webhook")
    assert endpoint["tlsConfig"]["ca"]["secret"] == {"name": leaf["spec"]["secretName"], "key": "ca.crt"}


def test_dashboards_config_map_carries_the_dashboard_for_grafanas_sidecar() -> None:
    (dashboards,) = [
        o for o in of_kind("ConfigMap", render("monitoring.yaml")) if "dashboards" in o["metadata"]["name"]
    ]
    assert dashboards["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert dashboards["metadata"]["annotations"] == {"grafana_folder": "kvcap"}
    original = (ROOT / "deploy/grafana/dashboards/kvcap-capacity.json").read_text()
    assert json.loads(dashboards["data"]["kvcap-capacity.json"]) == json.loads(original)


@pytest.mark.parametrize(
    ("copy_path", "original"),
    [
        ("files/kvcap-alerts.yaml", "deploy/prometheus/rules/kvcap-alerts.yaml"),
        ("files/dashboards/kvcap-capacity.json", "deploy/grafana/dashboards/kvcap-capacity.json"),
    ],
)
def test_chart_files_are_byte_identical_to_the_tested_originals(copy_path: str, original: str) -> None:
    assert (CHART / copy_path).read_bytes() == (ROOT / original).read_bytes(), "run deploy/sync-copies"


# --- the values schema (no helm needed) ------------------------------------------------------------------------


def schema_errors(document: dict[str, Any]) -> list[str]:
    return [error.message for error in jsonschema.Draft7Validator(schema()).iter_errors(document)]


def test_values_yaml_validates_against_a_closed_draft_07_schema() -> None:
    document = schema()
    jsonschema.Draft7Validator.check_schema(document)
    assert document["additionalProperties"] is False
    assert schema_errors(values_yaml()) == []


def paths(node: Any, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every key path of values.yaml, sections included (maps are walked; lists and scalars end a path)."""
    here = [path] if path else []
    if isinstance(node, dict) and node:
        return here + [p for key, value in node.items() for p in paths(value, (*path, key))]
    return here


def leaves(node: Any) -> list[tuple[str, ...]]:
    """The key paths that hold a value rather than a section of further keys."""
    every = paths(node)
    return [p for p in every if not any(q[: len(p)] == p and q != p for q in every)]


def schema_at(path: tuple[str, ...]) -> dict[str, Any] | None:
    """The schema of a key path; None inside a free-form map (labels, resources, selectors) the schema types."""
    node = schema()
    for key in path:
        if key not in node.get("properties", {}):
            return None
        node = node["properties"][key]
    return node


def test_every_value_is_described_in_the_schema() -> None:
    undocumented = []
    for path in paths(values_yaml()):
        node = schema_at(path)
        if node is None:
            parent = schema_at(path[:-1])
            # A key the schema does not know is only fine inside a map with its own value schema.
            if parent is not None and parent.get("additionalProperties") is False:
                undocumented.append(".".join(path) + " (not in the schema)")
        elif not node.get("description"):
            undocumented.append(".".join(path))
    assert undocumented == []


def commented_paths() -> set[tuple[str, ...]]:
    """Key paths of values.yaml with a helm-docs `# --` comment right above them."""
    found: set[tuple[str, ...]] = set()
    stack: list[tuple[int, str]] = []
    in_comment = False
    for line in (CHART / "values.yaml").read_text().splitlines():
        stripped = line.strip()
        if stripped.startswith("# --"):
            in_comment = True
            continue
        if stripped.startswith("#") or not stripped:
            in_comment = in_comment and stripped.startswith("#")
            continue
        match = re.match(r"^( *)([A-Za-z0-9_]+):", line)
        if match:
            indent = len(match.group(1))
            while stack and stack[-1][0] >= indent:
                stack.pop()
            stack.append((indent, match.group(2)))
            if in_comment:
                found.add(tuple(key for _, key in stack))
        in_comment = False
    return found


def test_every_value_has_a_helm_docs_comment_in_values_yaml() -> None:
    commented = commented_paths()
    uncommented = [
        ".".join(path)
        for path in leaves(values_yaml())
        if not any(path[:n] in commented for n in range(1, len(path) + 1))
    ]
    assert uncommented == []


@pytest.mark.parametrize(
    ("change", "bad"),
    [
        (("replicaCount",), -1),
        (("replicaCount",), 0),
        (("resources", "requests", "memory"), "256MB"),
        (("resources", "limits", "cpu"), "1 core"),
        (("webhook", "certManager", "renewBefore"), "15 days"),
        (("metrics", "serviceMonitor", "interval"), "15"),
        (("webhook", "failurePolicy"), "Sometimes"),
        (("webhook", "timeoutSeconds"), 30),
        (("pdb", "maxUnavailable"), 0),
        (("config", "admissionMode"), "block"),
    ],
)
def test_schema_refuses_nonsense(change: tuple[str, ...], bad: object) -> None:
    document = copy.deepcopy(values_yaml())
    node = document
    for key in change[:-1]:
        node = node[key]
    node[change[-1]] = bad
    assert schema_errors(document)


@pytest.mark.parametrize("good", ["100m", "0.5", 2, "1.5Gi", "256Mi", "1"])
def test_schema_accepts_kubernetes_quantities(good: object) -> None:
    document = copy.deepcopy(values_yaml())
    document["resources"]["limits"]["cpu"] = good
    assert schema_errors(document) == []


def test_fail_with_a_single_replica_is_refused_but_ignore_is_not() -> None:
    document = copy.deepcopy(values_yaml())
    document["replicaCount"] = 1
    assert schema_errors(document) == []
    document["webhook"]["failurePolicy"] = "Fail"
    assert schema_errors(document)
