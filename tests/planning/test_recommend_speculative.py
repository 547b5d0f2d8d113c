"""``workload.spec_mean_acceptance_length`` on /v1/plans/recommend and /v1/plans/sweep, and ``kvcap recommend``
and ``kvcap sweep``'s --speculative-config / --spec-mean-acceptance-length: refused beyond [1, 1 + k], echoed
(given or the method's default) in every option, and a higher acceptance sizing fewer replicas."""

from __future__ import annotations

import json
import math
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from service.cli import app

# A Llama-3.2-1B draft model for Llama-3.1-8B, three drafts a step (vLLM's default method for a draft model).
SPEC = {"model": "llama-3.2-1b", "num_speculative_tokens": 3}
TPOT_BOUND = {
    "requests_per_second": 20,
    "prompt_tokens": 500,
    "output_tokens": 100,
    "tpot_seconds": 0.010,
    "slo_percentile": "mean",
}
DRAFT_DEFAULT = 1 + 0.6 + 0.6**2 + 0.6**3  # the draft_model default: 0.6 per position over three drafts


def body(length: float | None = None, *, spec: bool = True, **changes: Any) -> dict[str, Any]:
    workload = TPOT_BOUND | ({"spec_mean_acceptance_length": length} if length is not None else {})
    return {
        "model": "llama-3.1-8b",
        "gpu": "h100-sxm-80gb",
        "tensor_parallel_sizes": [1],
        "workload": workload,
        **({"speculative_config": SPEC} if spec else {}),
    } | changes


async def recommended(client: httpx.AsyncClient, payload: dict[str, Any]) -> dict[str, Any]:
    response = await client.post("/v1/plans/recommend", json=payload)
    assert response.status_code == 200, response.text
    chosen: dict[str, Any] = response.json()["recommended"]
    assert chosen is not None
    return chosen


@pytest.mark.parametrize("length", [0.99, 4.01])
async def test_an_acceptance_below_one_or_beyond_one_plus_k_is_a_422_naming_the_field(
    client: httpx.AsyncClient, length: float
) -> None:
    # Below 1 the schema refuses it; above 1 + num_speculative_tokens (4) the recommendation does.
    for path, payload in (
        ("/v1/plans/recommend", body(length)),
        (
            "/v1/plans/sweep",
            {k: v for k, v in body(length).items() if k != "gpu"} | {"gpus": ["h100-sxm-80gb"]},
        ),
    ):
        response = await client.post(path, json=payload)
        assert response.status_code == 422, response.text
        assert response.json()["errors"][0]["loc"][:3] == ["body", "workload", "spec_mean_acceptance_length"]


async def test_every_option_echoes_the_acceptance_it_was_sized_with(client: httpx.AsyncClient) -> None:
    given = await recommended(client, body(2.5, simulate=False))
    assert given["speculative"] == {
        "method": "draft_model",
        "num_speculative_tokens": 3,
        "mean_acceptance_length": 2.5,
        "source": "given",
        "position_acceptance": pytest.approx(given["speculative"]["position_acceptance"]),
        "proposes": True,
    }
    # α of the chain: 1 + α + α² + α³ = 2.5.
    alpha = given["speculative"]["position_acceptance"]
    assert 1 + alpha + alpha**2 + alpha**3 == pytest.approx(2.5, abs=1e-9)
    default = await recommended(client, body(simulate=False))
    assert default["speculative"]["source"] == "method default"
    assert default["speculative"]["mean_acceptance_length"] == pytest.approx(DRAFT_DEFAULT)
    assert any("the draft_model default, not measured" in line for line in default["assumptions"])
    # A plan without speculative_config: accepted, ignored, and said so.
    plain = await recommended(client, body(2.5, spec=False, simulate=False))
    assert plain["speculative"] is None
    assert any("spec_mean_acceptance_length ignored" in line for line in plain["assumptions"])
    sweep_body = {k: v for k, v in body(2.5).items() if k != "gpu"} | {
        "gpus": ["h100-sxm-80gb"],
        "kv_cache_dtypes": ["auto"],
        "quantizations": [None],
    }
    swept = await client.post("/v1/plans/sweep", json=sweep_body)
    assert swept.status_code == 200, swept.text
    feasible = [o for o in swept.json()["options"] if o["feasible"]]
    assert feasible and all(o["speculative"]["mean_acceptance_length"] == 2.5 for o in feasible)


async def test_a_higher_acceptance_raises_the_per_replica_rate_and_lowers_the_replicas(
    client: httpx.AsyncClient,
) -> None:
    # A TPOT target of 10 ms at the mean: each step gives a request L tokens for about the same time, so one
    # replica sustains more requests the more drafts are accepted.
    options = [await recommended(client, body(length)) for length in (1.5, 2.0, 2.5, 3.5)]
    simulated = [o["simulated_requests_per_second_per_replica"] for o in options]
    per_replica = [o["requests_per_second_per_replica"] for o in options]
    assert simulated == sorted(simulated) and len(set(simulated)) == len(simulated)
    assert per_replica == sorted(per_replica) and len(set(per_replica)) == len(per_replica)
    replicas = [o["replicas"] for o in options]
    assert replicas == sorted(replicas, reverse=True) and replicas[0] > replicas[-1]
    # 20 req/s × (1 + 0.2 headroom) ÷ the per-replica rate, rounded up: the replicas follow the rate.
    for option in options:
        assert option["replicas"] == math.ceil(24 / option["requests_per_second_per_replica"] - 1e-9)


runner = CliRunner()
CLI = [
    "-m",
    "llama-3.1-8b",
    "--rps",
    "20",
    "--prompt-tokens",
    "500",
    "--output-tokens",
    "100",
    "--tpot-slo",
    "0.008",
    "--slo-percentile",
    "mean",
    "--speculative-config",
    json.dumps(SPEC),
]


def test_kvcap_recommend_and_sweep_take_the_acceptance_and_refuse_an_impossible_one() -> None:
    ok = runner.invoke(
        app,
        [
            "recommend",
            *CLI,
            "-g",
            "h100-sxm-80gb",
            "--tp",
            "1",
            "--spec-mean-acceptance-length",
            "3.5",
            "--json",
        ],
    )
    assert ok.exit_code == 0, ok.output
    chosen = json.loads(ok.output)["recommended"]
    assert (
        chosen["speculative"]["mean_acceptance_length"] == 3.5 and chosen["speculative"]["source"] == "given"
    )
    text = runner.invoke(
        app, ["recommend", *CLI, "-g", "h100-sxm-80gb", "--tp", "1", "--spec-mean-acceptance-length", "3.5"]
    )
    # Rich wraps the line at the terminal's width: read it with the wrapping undone.
    assert text.exit_code == 0 and "mean acceptance length 3.50 (given)" in " ".join(text.output.split())
    for command in (["recommend", "-g", "h100-sxm-80gb", "--tp", "1"], ["sweep", "--gpus", "h100-sxm-80gb"]):
        for length in ("4.5", "0.5"):
            bad = runner.invoke(
                app, [command[0], *CLI, *command[1:], "--spec-mean-acceptance-length", length]
            )
            assert bad.exit_code == 2, bad.output
            assert "spec_mean_acceptance_length" in bad.output
    not_json = runner.invoke(
        app, ["recommend", "-m", "llama-3.1-8b", "-g", "l4", "--rps", "1", "--speculative-config", "{x"]
    )
    assert not_json.exit_code == 2 and "--speculative-config" in not_json.output
