"""Serving features through POST /v1/plans, the endpoints that reuse its settings, and `kvcap plan`."""

from __future__ import annotations

import json

import httpx
import pytest
from typer.testing import CliRunner

from service.cli import app

runner = CliRunner()
BODY = {"model": "llama-3.1-8b", "gpu": "h100-sxm-80gb", "max_model_len": 8192}
LORA_4_X_16 = 335_544_320  # 32 layers × 4 adapters × rank 16 × 81,920 A+B elements × 2 B (base_linear.py)


async def test_lora_buffers_through_the_api(client: httpx.AsyncClient) -> None:
    base = (await client.post("/v1/plans", json=BODY)).json()
    assert base["features"] is None
    response = await client.post(
        "/v1/plans", json={**BODY, "enable_lora": True, "max_loras": 4, "max_lora_rank": 16}
    )
    assert response.status_code == 200, response.text
    plan = response.json()
    assert plan["features"]["lora_bytes"] == LORA_4_X_16
    assert plan["memory"]["weights_bytes"] - base["memory"]["weights_bytes"] == LORA_4_X_16
    assert any(t["name"] == "lora_buffers" for t in plan["breakdown"])


async def test_speculative_draft_from_the_catalog_and_dp_totals(client: httpx.AsyncClient) -> None:
    body = {
        **BODY,
        "engine": "vllm-0.13",
        "speculative_config": {"model": "llama-3.2-1b", "num_speculative_tokens": 4},
    }
    refused = (await client.post("/v1/plans", json=body)).json()
    assert refused["fits"] is False
    assert "Speculative decoding with draft model is not supported yet." in json.dumps(refused["messages"])
    accepted = (
        await client.post("/v1/plans", json={**body, "engine": "vllm-0.14", "data_parallel_size": 2})
    ).json()
    assert accepted["fits"] is True
    features = accepted["features"]
    assert features["speculative_method"] == "draft_model"
    assert features["speculative_kv_layers"] == 16  # Llama 3.2 1B's layers join the pool
    assert features["total_gpus"] == 2
    assert features["max_concurrency_all_ranks"] == pytest.approx(
        2 * features["effective_max_concurrency"], abs=1e-3
    )


async def test_recommend_reuses_the_feature_fields(client: httpx.AsyncClient) -> None:
    body = {
        **BODY,
        "enable_lora": True,
        "max_lora_rank": 17,
        "workload": {"requests_per_second": 1, "prompt_tokens": 256, "output_tokens": 32},
    }
    response = await client.post("/v1/plans/recommend", json=body)
    assert response.status_code == 422
    assert "max_lora_rank" in response.text


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"enable_lora": True, "max_lora_rank": 17}, "max_lora_rank"),
        ({"max_loras": 4}, "max_loras needs enable_lora"),
        ({"enable_lora": True, "max_loras": 4, "max_cpu_loras": 2}, "max_cpu_loras"),
        ({"enable_lora": True, "lora_extra_vocab_size": 256}, "lora_extra_vocab_size"),
        ({"cpu_offload_gb": -1}, "cpu_offload_gb"),
        ({"speculative_config": {}}, "speculative_config"),
        (
            {"speculative_config": {"method": "eagle", "num_speculative_tokens": 2}},
            "speculative_config.model",
        ),
        ({"speculative_config": {"model": "llama-3.2-1b"}}, "speculative_config.num_speculative_tokens"),
        (
            {"speculative_config": {"method": "medusa2", "num_speculative_tokens": 2}},
            "speculative_config.method",
        ),
        (
            {"speculative_config": {"model": "no-such-draft", "num_speculative_tokens": 2}},
            "speculative_config.model",
        ),
        ({"kv_offloading_size": 8, "kv_offloading_backend": "disk"}, "kv_offloading_backend"),
        ({"kv_offloading_size": 8, "engine": "vllm-0.11"}, "kv_offloading_size"),
        (
            {
                "kv_transfer_config": {
                    "kv_connector": "OffloadingConnector",
                    "kv_connector_extra_config": {"num_cpu_blocks": "x"},
                }
            },
            "num_cpu_blocks",
        ),
        ({"data_parallel_size": 0}, "data_parallel_size"),
        ({"limit_mm_per_prompt": {"image": -1}}, "limit_mm_per_prompt"),
        ({"mm_processor_kwargs": {"max_pixels": "big"}}, "mm_processor_kwargs.max_pixels"),
        ({"shared_prefix_tokens": 0}, "shared_prefix_tokens"),
    ],
)
async def test_bad_feature_values_are_a_422_naming_the_field(
    client: httpx.AsyncClient, extra: dict[str, object], field: str
) -> None:
    response = await client.post("/v1/plans", json={**BODY, **extra})
    assert response.status_code == 422, response.text
    assert field in response.text


def test_kvcap_plan_feature_flags() -> None:
    result = runner.invoke(
        app,
        [
            "plan",
            "-m",
            "llama-3.1-8b",
            "-g",
            "h100-sxm-80gb",
            "--max-model-len",
            "8192",
            "--enable-lora",
            "--max-loras",
            "4",
            "--shared-prefix-tokens",
            "4096",
            "--speculative-config",
            '{"method": "ngram", "num_speculative_tokens": 4}',
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    features = json.loads(result.output)["features"]
    assert features["lora_bytes"] == LORA_4_X_16
    assert features["speculative_method"] == "ngram"
    # 64-token blocks: the newest release's default (CacheConfig.DEFAULT_BLOCK_SIZE, vllm/config/cache.py, 0.34.0).
    assert features["blocks_per_request_with_lookahead"] == -(-(8192 + 4) // 64)
    text = runner.invoke(app, ["plan", "-m", "llama-3.1-8b", "-g", "h100-sxm-80gb", "--cpu-offload-gb", "4"])
    assert text.exit_code == 0, text.output
    assert "Serving features" in text.output and "cpu_offload" in text.output


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (["--speculative-config", "{not json"], "--speculative-config must be a JSON object"),
        (["--kv-transfer-config", "[1]"], "--kv-transfer-config must be a JSON object"),
        (["--enable-lora", "--max-lora-rank", "17"], "max_lora_rank"),
        (["--max-loras", "2"], "enable_lora"),
        (["--kv-offloading-size", "8", "--engine", "vllm-0.11"], "kv_offloading_size"),
    ],
)
def test_kvcap_plan_bad_feature_flags_exit_2(flags: list[str], words: str) -> None:
    result = runner.invoke(app, ["plan", "-m", "llama-3.1-8b", "-g", "h100-sxm-80gb", *flags])
    assert result.exit_code == 2, result.output
    assert words in result.output.replace("\n", " ")


async def test_sweep_recommend_and_simulations_plan_with_the_features(client: httpx.AsyncClient) -> None:
    workload = {"requests_per_second": 2, "prompt_tokens": 512, "output_tokens": 64}
    lora = {
        "enable_lora": True,
        "max_loras": 4,
        "speculative_config": {"method": "ngram", "num_speculative_tokens": 3},
    }
    sweep = await client.post(
        "/v1/plans/sweep",
        json={"model": "llama-3.1-8b", "gpus": ["h100-sxm-80gb"], "workload": workload, **lora},
    )
    assert sweep.status_code == 200, sweep.text
    recommend = await client.post(
        "/v1/plans/recommend",
        json={"model": "llama-3.1-8b", "gpu": "h100-sxm-80gb", "workload": workload, "cpu_offload_gb": 2},
    )
    assert recommend.status_code == 200, recommend.text
    simulation = await client.post(
        "/v1/simulations", json={**BODY, **lora, "benchmark": {"num_prompts": 20, "random_input_len": 256}}
    )
    assert simulation.status_code == 200, simulation.text
    planned = (await client.post("/v1/plans", json={**BODY, **lora})).json()
    base = (await client.post("/v1/plans", json=BODY)).json()
    # The simulated replica is the featured plan: fewer blocks than without the adapters' buffers.
    assert simulation.json()["plan"]["num_gpu_blocks"] == planned["kv_cache"]["num_gpu_blocks"]
    assert planned["kv_cache"]["num_gpu_blocks"] < base["kv_cache"]["num_gpu_blocks"]
