"""``POST /v1/checks``: the verdict ``kvcap check --json`` gives, for a manifest sent as text."""

from __future__ import annotations

from pathlib import Path

import httpx

DATA = Path(__file__).resolve().parents[1] / "admission" / "data"


async def test_a_70b_model_on_one_l4_is_denied_and_the_8b_allowed(client: httpx.AsyncClient) -> None:
    # Llama-3.1-70B in bf16 is ~141 GB of weights; one L4 has 24 GB. The 8B model at 8,192 tokens fits.
    response = await client.post("/v1/checks", json={"manifest": (DATA / "denied.yaml").read_text()})
    assert response.status_code == 200
    report = response.json()
    verdicts = {r["name"]: r["verdict"] for r in report["results"]}
    assert verdicts == {"llama-8b": "allowed", "llama-70b": "denied"}
    assert report["exit_code"] == 1
    assert report["summary"]["denied"] == 1 and report["summary"]["allowed"] == 1
    small = next(r for r in report["results"] if r["name"] == "llama-8b")
    (plan,) = small["plans"]
    assert (plan["model"], plan["gpu"], plan["max_model_len"]) == ("llama-3.1-8b", "l4", 8192)


async def test_the_endpoint_agrees_with_the_offline_check(client: httpx.AsyncClient) -> None:
    from service.admission.check import Document as ManifestDocument
    from service.admission.check import check_offline, parse_text
    from service.admission.policy import PolicyConfig
    from service.catalog.builtin import builtin_snapshot

    text = (DATA / "rendered-chart.yaml").read_text()
    response = await client.post("/v1/checks", json={"manifest": text})
    offline = [
        check_offline(d, builtin_snapshot(), PolicyConfig()).verdict
        for d in parse_text(text, "manifest")
        if isinstance(d, ManifestDocument)
    ]
    assert [r["verdict"] for r in response.json()["results"]] == offline


async def test_broken_yaml_is_reported_as_unreadable_not_an_error(client: httpx.AsyncClient) -> None:
    response = await client.post("/v1/checks", json={"manifest": "kind: Deployment\n  bad: [indent"})
    assert response.status_code == 200
    report = response.json()
    assert report["exit_code"] == 2
    assert report["results"][0]["verdict"] == "unreadable"
    assert "not valid YAML" in report["results"][0]["reason"]


async def test_an_empty_manifest_is_a_422_naming_the_field(client: httpx.AsyncClient) -> None:
    response = await client.post("/v1/checks", json={"manifest": ""})
    assert response.status_code == 422
    assert response.json()["errors"][0]["loc"] == ["body", "manifest"]
