"""The deployment registry: CRUD with ETags, validation, plans with recommendations, and KEDA autoscaling."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import httpx
import pytest
import yaml

from service.deployments.autoscaling import VLLM_METRICS_USED
from tests import crds

FIXTURES = Path(__file__).resolve().parents[1] / "data" / "vllm-metrics"

BODY = {
    "namespace": "llm",
    "name": "llama-8b",
    "model": "meta-llama/Llama-3.1-8B-Instruct",
    "gpu": "h100-sxm-80gb",
    "max_model_len": 8192,
    "replicas": 2,
    "workload": {"concurrent_users": 400, "prompt_tokens": 1500, "output_tokens": 300},
    "live": {"scrape_urls": ["http://10.0.0.5:8000/metrics", "http://10.0.0.6:8000/metrics"]},
    "labels": {"team": "search", "tier": "prod"},
}


async def create(client: httpx.AsyncClient, **changes: object) -> httpx.Response:
    return await client.post("/v1/deployments", json=BODY | changes)


async def test_create_get_and_list_a_deployment(client: httpx.AsyncClient) -> None:
    created = await create(client)
    assert created.status_code == 201, created.text
    assert created.headers["location"] == "/v1/deployments/llm/llama-8b"
    got = await client.get("/v1/deployments/llm/llama-8b")
    assert got.headers["etag"] == created.headers["etag"]
    body = got.json()
    assert body["model"] == BODY["model"]
    assert body["max_model_len"] == 8192
    assert body["live"] == BODY["live"]
    listed = (await client.get("/v1/deployments", params={"namespace": "llm"})).json()
    assert [d["name"] for d in listed["items"]] == ["llama-8b"]
    by_label = (await client.get("/v1/deployments", params={"label": "team=search"})).json()
    assert by_label["total"] == 1
    assert (await client.get("/v1/deployments", params={"label": "team=ads"})).json()["total"] == 0


async def test_namespace_and_name_are_unique_together(client: httpx.AsyncClient) -> None:
    assert (await create(client)).status_code == 201
    assert (await create(client)).status_code == 409
    assert (await create(client, namespace="other")).status_code == 201


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"namespace": "Bad_NS"}, "namespace"),
        ({"model": "no-such-model"}, "model"),
        ({"gpu": "no-such-gpu"}, "gpu"),
        ({"kv_cache_dtype": "fp9"}, "kv_cache_dtype"),
        ({"replicas": -1}, "replicas"),
        ({"labels": {"bad key!": "x"}}, "labels"),
        ({"live": {"scrape_urls": ["ftp://10.0.0.5/metrics"]}}, "live"),
        ({"live": {"scrape_urls": ["http://169.254.169.254/latest/meta-data"]}}, "live.scrape_urls.0"),
        ({"live": {"prometheus": {"url": "http://prom:9090", "match": 'x} or vector(1) or {y="z"'}}}, "live"),
        ({"workload": {"prompt_tokens": 10}}, "workload"),
    ],
)
async def test_invalid_deployments_are_refused_with_the_field_named(
    client: httpx.AsyncClient, changes: dict[str, object], field: str
) -> None:
    response = await create(client, **changes)
    assert response.status_code == 422, response.text
    assert field in json.dumps(response.json())
    assert (await client.get("/v1/deployments")).json()["total"] == 0


async def test_patch_is_guarded_by_if_match(client: httpx.AsyncClient) -> None:
    etag = (await create(client)).headers["etag"]
    ok = await client.patch("/v1/deployments/llm/llama-8b", json={"replicas": 3}, headers={"If-Match": etag})
    assert ok.status_code == 200 and ok.json()["replicas"] == 3
    stale = await client.patch(
        "/v1/deployments/llm/llama-8b", json={"replicas": 9}, headers={"If-Match": etag}
    )
    assert stale.status_code == 412
    assert (await client.get("/v1/deployments/llm/llama-8b")).json()["replicas"] == 3


async def test_patch_that_would_break_the_deployment_changes_nothing(client: httpx.AsyncClient) -> None:
    await create(client)
    response = await client.patch("/v1/deployments/llm/llama-8b", json={"gpu": "no-such-gpu"})
    assert response.status_code == 422
    assert (await client.get("/v1/deployments/llm/llama-8b")).json()["gpu"] == "h100-sxm-80gb"


async def test_delete(client: httpx.AsyncClient) -> None:
    await create(client)
    assert (
        await client.delete("/v1/deployments/llm/llama-8b", headers={"If-Match": '"0-0"'})
    ).status_code == 412
    assert (await client.delete("/v1/deployments/llm/llama-8b")).status_code == 204
    assert (await client.get("/v1/deployments/llm/llama-8b")).status_code == 404


async def test_plan_of_a_registered_deployment_includes_its_recommendation(client: httpx.AsyncClient) -> None:
    await create(client)
    result = (await client.get("/v1/deployments/llm/llama-8b/plan")).json()
    assert result["plan"]["model"]["name"] == "llama-3.1-8b"
    assert result["plan"]["settings"]["max_model_len"] == 8192
    assert result["plan"]["fits"] is True
    recommended = result["recommendation"]["recommended"]
    # sized by the serving simulator: 400 users × 1.2 headroom over the requests one replica holds in flight,
    # which is at most max_num_seqs, so never fewer replicas than that bound
    assert recommended["sizing"] == "simulated"
    assert recommended["replicas"] >= math.ceil(400 * 1.2 / recommended["max_num_seqs"])
    assert any("serving simulator" in a for a in recommended["assumptions"])


async def test_autoscaling_is_a_valid_keda_scaled_object_using_vllm_metrics(
    client: httpx.AsyncClient,
) -> None:
    await create(client)
    response = await client.get("/v1/deployments/llm/llama-8b/autoscaling")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/yaml")
    manifest = yaml.safe_load(response.text)
    crds.validate(manifest)  # KEDA's own ScaledObject CRD (tests/data/crds)
    spec = manifest["spec"]
    assert spec["minReplicaCount"] <= spec["maxReplicaCount"]  # the CRD's CEL rule
    trigger = spec["triggers"][0]
    assert trigger["type"] == "prometheus" and trigger["metricType"] == "AverageValue"
    plan = (await client.get("/v1/deployments/llm/llama-8b/plan")).json()
    per_replica = plan["recommendation"]["recommended"]["max_num_seqs"]
    assert int(trigger["metadata"]["threshold"]) == math.floor(per_replica / 1.2)
    assert spec["minReplicaCount"] == math.ceil(400 / per_replica)
    # Every metric the query names is one vLLM really exports (see the captured exposition).
    exposition = (FIXTURES / "vllm-0.32.0-cpu-busy.txt").read_text()
    names = set(re.findall(r"vllm:[a-z_]+", trigger["metadata"]["query"]))
    assert names and names <= set(VLLM_METRICS_USED)
    assert all(f"\n{name}{{" in exposition for name in names)


async def test_kv_usage_trigger_and_json_format(client: httpx.AsyncClient) -> None:
    await create(client)
    response = await client.get(
        "/v1/deployments/llm/llama-8b/autoscaling",
        params={"format": "json", "trigger": "kv_usage", "target_kind": "LeaderWorkerSet"},
    )
    manifest = response.json()
    crds.validate(manifest)  # KEDA's own ScaledObject CRD (tests/data/crds)
    assert manifest["spec"]["scaleTargetRef"]["apiVersion"] == "leaderworkerset.x-k8s.io/v1"
    trigger = manifest["spec"]["triggers"][0]
    assert trigger["metadata"]["query"].startswith("avg(vllm:kv_cache_usage_perc{")
    assert float(trigger["metadata"]["threshold"]) == pytest.approx(1 / 1.2, abs=1e-3)


async def test_autoscaling_refuses_an_injected_selector(client: httpx.AsyncClient) -> None:
    await create(client)
    response = await client.get(
        "/v1/deployments/llm/llama-8b/autoscaling", params={"match": '{a="b"}) or vector(1'}
    )
    assert response.status_code == 422
