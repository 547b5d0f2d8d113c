"""A pipeline over different GPUs (``pipeline_stage_gpus``) and ``VLLM_PP_LAYER_PARTITION``
(``pipeline_layer_partition``) through POST /v1/plans, the endpoints that take its settings, and `kvcap plan`."""

from __future__ import annotations

import json
import math

import httpx
import pytest
from typer.testing import CliRunner

from service.catalog.builtin import builtin_snapshot
from service.cli import app

runner = CliRunner()
SMALL, LARGE = "a100-sxm4-40gb", "a100-sxm4-80gb"  # the same chip (8.0), 40 and 80 GB
BODY = {
    "model": "llama-3.1-8b",
    "engine": "vllm-0.19",
    "max_model_len": 8192,
    "pipeline_parallel_size": 2,
    "pipeline_layer_partition": [12, 20],
}
# Llama 3.1 8B: 8 KV heads × 128 × K and V × 2 B (bf16) = 4,096 B per token and layer; 16-token blocks.
BLOCK_BYTES_PER_LAYER = 8 * 128 * 2 * 2 * 16


def budget(gpu: str) -> int:
    """``gpu_worker.determine_available_memory``: ``requested_memory`` = the worker's device total × 0.9,
    rounded up from vLLM 0.15."""
    return math.ceil(builtin_snapshot().gpus[gpu].spec.memory_bytes * 0.9)


async def plan(client: httpx.AsyncClient, **changes: object) -> dict[str, object]:
    response = await client.post("/v1/plans", json=BODY | changes)
    assert response.status_code == 200, response.text
    data: dict[str, object] = response.json()
    return data


async def test_each_stage_is_budgeted_on_its_own_gpu(client: httpx.AsyncClient) -> None:
    mixed = await plan(client, pipeline_stage_gpus=[SMALL, LARGE])
    uniform = await plan(client, gpu=SMALL)
    stages, same = mixed["stages"], uniform["stages"]
    assert isinstance(stages, list) and isinstance(same, list)
    assert [s["layers"] for s in stages] == [[0, 12], [12, 32]]  # as VLLM_PP_LAYER_PARTITION=12,20 says
    assert mixed["gpu"] == {"name": SMALL, "source": "catalog", "matched_by": None}  # gpu: the first stage's
    # Stage 0 runs on the same GPU in both plans; stage 1's budget grows by the larger GPU's extra memory.
    assert stages[0] == same[0]
    assert stages[1]["weights_bytes"] == same[1]["weights_bytes"]
    assert stages[1]["kv_cache_bytes"] - same[1]["kv_cache_bytes"] == budget(LARGE) - budget(SMALL)
    for stage in stages:
        layers = stage["layers"][1] - stage["layers"][0]
        assert stage["num_gpu_blocks"] == stage["kv_cache_bytes"] // (layers * BLOCK_BYTES_PER_LAYER)
    # The plan holds what its smallest stage holds (vLLM takes the minimum over the workers).
    assert mixed["kv_cache"]["num_gpu_blocks"] == min(s["num_gpu_blocks"] for s in stages)


async def test_the_settings_echo_the_stages_and_key_the_calibration(client: httpx.AsyncClient) -> None:
    # A calibration observed on one layout must not correct another: the stage lists are part of the key.
    mixed = await plan(client, pipeline_stage_gpus=[SMALL, LARGE])
    uniform = await plan(client, gpu=SMALL)
    even = await plan(client, gpu=SMALL, pipeline_layer_partition=None)
    assert mixed["settings"]["pipeline_stage_gpus"] == [SMALL, LARGE]
    assert mixed["settings"]["pipeline_layer_partition"] == [12, 20]
    assert uniform["settings"]["pipeline_stage_gpus"] is None
    assert even["settings"]["pipeline_layer_partition"] is None
    keys = {p["calibration"]["key"] for p in (mixed, uniform, even)}
    assert len(keys) == 3


async def test_the_first_stage_s_gpu_may_be_named_as_gpu_too(client: httpx.AsyncClient) -> None:
    named = await plan(client, gpu=SMALL, pipeline_stage_gpus=[SMALL, LARGE])
    implied = await plan(client, pipeline_stage_gpus=[SMALL, LARGE])
    assert named["stages"] == implied["stages"]


async def test_an_inline_stage_gpu_is_budgeted_on_its_memory(client: httpx.AsyncClient) -> None:
    inline = {"name": "a100-80-inline", "memory_bytes": builtin_snapshot().gpus[LARGE].spec.memory_bytes}
    catalog = await plan(client, pipeline_stage_gpus=[SMALL, LARGE])
    custom = await plan(client, pipeline_stage_gpus=[SMALL, {**inline, "compute_capability": "8.0"}])
    assert custom["stages"][1]["kv_cache_bytes"] == catalog["stages"][1]["kv_cache_bytes"]


async def test_the_even_split_without_a_partition(client: httpx.AsyncClient) -> None:
    body = {k: v for k, v in BODY.items() if k != "pipeline_layer_partition"}
    response = await client.post("/v1/plans", json=body | {"gpu": SMALL, "pipeline_parallel_size": 3})
    assert response.status_code == 200, response.text
    # get_pp_indices: 32 layers over 3 stages → 10 each, the remainder to the stages before the last
    assert [s["layers"] for s in response.json()["stages"]] == [[0, 11], [11, 22], [22, 32]]


@pytest.mark.parametrize(
    ("changes", "field", "reason"),
    [
        (
            {"pipeline_stage_gpus": [SMALL, "no-such-gpu"]},
            ["body", "pipeline_stage_gpus", 1],
            "unknown GPU 'no-such-gpu'",
        ),
        (
            {"pipeline_stage_gpus": [SMALL]},
            ["body", "pipeline_stage_gpus"],
            "names 1 GPUs for 2 pipeline stages",
        ),
        (
            {"gpu": LARGE, "pipeline_stage_gpus": [SMALL, LARGE]},
            ["body", "gpu"],
            "gpu must be the first pipeline stage's GPU",
        ),
        (
            {"pipeline_layer_partition": [12, 20, 0], "gpu": SMALL},
            ["body", "pipeline_layer_partition"],
            "len(partitions)=3 does not match pp_size=2.",
        ),
        (
            {"pipeline_layer_partition": [12, 21], "gpu": SMALL},
            ["body", "pipeline_layer_partition"],
            "sum(partitions)=33 does not match num_hidden_layers=32.",
        ),
        (
            {"pipeline_layer_partition": [0, 32], "gpu": SMALL},
            ["body", "pipeline_layer_partition"],
            "every stage needs at least one layer",
        ),
        (
            {"pipeline_layer_partition": [-1, 33], "gpu": SMALL},
            ["body", "pipeline_layer_partition", 0],
            "greater than or equal to 0",
        ),
    ],
)
async def test_bad_stage_lists_are_a_422_naming_the_field(
    client: httpx.AsyncClient, changes: dict[str, object], field: list[object], reason: str
) -> None:
    response = await client.post("/v1/plans", json=BODY | changes)
    assert response.status_code == 422, response.text
    errors = response.json()["errors"]
    assert any(e["loc"] == field and reason in e["msg"] for e in errors), errors


async def test_searches_over_one_gpu_kind_refuse_stage_gpus(client: httpx.AsyncClient) -> None:
    workload = {"requests_per_second": 1, "prompt_tokens": 256, "output_tokens": 32}
    stages = {"pipeline_stage_gpus": [SMALL, LARGE]}
    for path, body in (
        ("/v1/plans/recommend", BODY | stages | {"gpu": SMALL, "workload": workload}),
        ("/v1/plans/sweep", BODY | stages | {"workload": workload}),
        ("/v1/simulations", BODY | stages),
    ):
        response = await client.post(path, json=body)
        assert response.status_code == 422, (path, response.text)
        assert "pipeline_stage_gpus" in response.text, path


async def test_a_deployment_plans_its_stages_on_their_gpus(client: httpx.AsyncClient) -> None:
    body = {"namespace": "llm", "name": "mixed", **BODY, "pipeline_stage_gpus": [SMALL, LARGE]}
    created = await client.post("/v1/deployments", json=body)
    assert created.status_code == 201, created.text
    planned = (await client.get("/v1/deployments/llm/mixed/plan")).json()
    assert planned["plan"]["stages"] == (await plan(client, pipeline_stage_gpus=[SMALL, LARGE]))["stages"]
    refused = await client.post(
        "/v1/deployments", json=body | {"name": "unknown", "pipeline_stage_gpus": [SMALL, "no-such-gpu"]}
    )
    assert refused.status_code == 422 and "pipeline_stage_gpus[1]" in refused.text


def test_kvcap_plan_stage_flags() -> None:
    flags = ["plan", "-m", "llama-3.1-8b", "--engine", "vllm-0.19", "--max-model-len", "8192", "-pp", "2"]
    stages = ["--pipeline-stage-gpus", f"{SMALL},{LARGE}", "--pipeline-layer-partition", "12,20"]
    result = runner.invoke(app, [*flags, *stages, "--json"])
    assert result.exit_code == 0, result.output
    mixed = json.loads(result.output)
    uniform = json.loads(runner.invoke(app, [*flags, "-g", SMALL, *stages[2:], "--json"]).output)
    assert [s["layers"] for s in mixed["stages"]] == [[0, 12], [12, 32]]
    text = runner.invoke(app, [*flags, *stages])
    assert text.exit_code == 0, text.output
    assert f"llama-3.1-8b on {SMALL} → {LARGE} × TP 1 × PP 2" in text.output
    assert mixed["stages"][1]["kv_cache_bytes"] - uniform["stages"][1]["kv_cache_bytes"] == budget(
        LARGE
    ) - budget(SMALL)


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (["--pipeline-stage-gpus", f"{SMALL},no-such-gpu"], "pipeline_stage_gpus[1]: unknown GPU"),
        (["--pipeline-stage-gpus", f"{SMALL},"], "--pipeline-stage-gpus must be GPU names"),
        (
            ["-g", SMALL, "--pipeline-layer-partition", "12,2x"],
            "--pipeline-layer-partition must be layer counts",
        ),
        (["-g", SMALL, "--pipeline-layer-partition", "12,21"], "sum(partitions)=33"),
    ],
)
def test_kvcap_plan_bad_stage_flags_exit_2(flags: list[str], words: str) -> None:
    result = runner.invoke(app, ["plan", "-m", "llama-3.1-8b", "-pp", "2", *flags])
    assert result.exit_code == 2, result.output
    assert words in result.output.replace("\n", " ")
