"""POST /v1/plans and `kvcap plan`: the seed figures through the public surfaces, and bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
SEED_GPU = {"memory_bytes": 80 * 10**9, "name": "seed-80gb"}
LLAMA2 = json.loads((ROOT / "service/catalog/builtin/models/llama-2-7b.json").read_text())["hf_config"]


def seed_body(kv_heads: int = 32, **extra: object) -> dict[str, object]:
    model = {"hf_config": {**LLAMA2, "num_key_value_heads": kv_heads}, "num_parameters": 6_738_415_616}
    return {
        "model": model,
        "gpu": SEED_GPU,
        "engine": "ideal",
        "gpu_memory_utilization": 1.0,
        "max_model_len": 4096,
        **extra,
    }


@pytest.mark.parametrize(
    ("kv_heads", "kv_dtype", "per_token", "users"),
    [(32, None, 524_288, 30), (8, None, 131_072, 123), (8, "int8", 65_536, 247)],
)
async def test_seed_figures_through_the_api(
    client: httpx.AsyncClient, kv_heads: int, kv_dtype: str | None, per_token: int, users: int
) -> None:
    body = seed_body(kv_heads, **({"kv_cache_dtype": kv_dtype} if kv_dtype else {}))
    response = await client.post("/v1/plans", json=body)
    assert response.status_code == 200, response.text
    plan = response.json()
    assert plan["kv_cache"]["bytes_per_token"] == per_token
    assert plan["kv_cache"]["max_concurrent_sequences"] == users
    assert plan["memory"]["weights_bytes"] == 13_476_831_232
    assert plan["fits"] is True
    assert plan["settings"]["profile"] == "ideal"


async def test_seed_projection_counts_through_the_api(client: httpx.AsyncClient) -> None:
    plan = (await client.post("/v1/plans", json=seed_body(prompt_tokens=5, output_tokens=64))).json()
    assert plan["projections"]["without_cache_per_layer"] == 2_336
    assert plan["projections"]["with_cache_per_layer"] == 68


async def test_plan_resolves_hf_ids_and_gpu_operator_labels(client: httpx.AsyncClient) -> None:
    body = {
        "model": "meta-llama/Llama-3.1-8B-Instruct",
        "gpu": "NVIDIA-H100-80GB-HBM3",
        "max_model_len": 8192,
    }
    plan = (await client.post("/v1/plans", json=body)).json()
    assert plan["model"] == {"name": "llama-3.1-8b", "source": "catalog", "matched_by": "hf_id"}
    assert plan["gpu"]["name"] == "h100-sxm-80gb"
    # The newest release (0.34) on a GPU: the extensible KV cache's unset utilisation, 1.0
    # (CacheConfig.resolved_gpu_memory_utilization, vllm/config/cache.py, 0.34.0).
    assert plan["settings"]["gpu_memory_utilization"] == 1.0
    assert plan["settings"]["max_num_seqs"] == 1024  # H100-class batch default


async def test_disable_sliding_window_serves_full_attention_up_to_the_window(
    client: httpx.AsyncClient,
) -> None:
    # Mistral-7B-v0.1: 32768 positions, a 4096-token window on all 32 layers (its published config.json).
    body = {"model": "mistral-7b-v0.1", "gpu": "h100-sxm-80gb"}
    windowed = (await client.post("/v1/plans", json=body)).json()
    flagged = (await client.post("/v1/plans", json={**body, "disable_sliding_window": True})).json()
    assert windowed["settings"]["max_model_len"] == 32768
    assert flagged["settings"]["max_model_len"] == 4096
    # A 4096-token request holds 4096 / 64 = 64 full-attention blocks (64-token blocks: 0.34's default).
    assert flagged["kv_cache"]["block_size"] == 64
    assert flagged["kv_cache"]["blocks_per_request"] == 64
    refused = (
        await client.post("/v1/plans", json={**body, "disable_sliding_window": True, "max_model_len": 8192})
    ).json()
    assert refused["fits"] is False
    error = next(m for m in refused["messages"] if m["level"] == "error")
    assert "sliding_window=4096.0" in error["text"]


async def test_without_the_flashinfer_sampler_the_profile_sorts_the_vocabulary(
    client: httpx.AsyncClient,
) -> None:
    # vLLM 0.10's V1 sampler falls back to PyTorch's top-k/top-p without FlashInfer: the dummy sampler run then
    # also holds the sort's workspaces, 24 B per logit of max_num_seqs × vocab (Qwen2.5-7B: 152,064).
    body = {"model": "qwen2.5-7b", "gpu": "a100-sxm4-80gb", "engine": "vllm-0.10"}
    installed = (await client.post("/v1/plans", json=body)).json()
    native = (await client.post("/v1/plans", json={**body, "flashinfer_sampler": False})).json()
    rows = installed["settings"]["max_num_seqs"]
    assert (
        native["memory"]["activation_bytes"] - installed["memory"]["activation_bytes"] == rows * 152_064 * 24
    )
    assert native["kv_cache"]["num_gpu_blocks"] < installed["kv_cache"]["num_gpu_blocks"]


async def test_exact_budget_gives_exact_blocks(client: httpx.AsyncClient) -> None:
    body = {
        "model": "llama-3.1-8b",
        "kv_cache_memory_bytes": 55 * 2**30,
        "block_size": 16,
        "max_model_len": 131072,
    }
    plan = (await client.post("/v1/plans", json=body)).json()
    assert plan["kv_cache"]["num_gpu_blocks"] == 28_160
    assert plan["kv_cache"]["kv_cache_size_tokens"] == 450_560
    assert plan["exact"] is True


async def test_chunked_prefill_off_with_a_short_batch_is_refused_in_vllms_words(
    client: httpx.AsyncClient,
) -> None:
    body = {
        "model": "llama-3.1-8b",
        "gpu": "h100-sxm-80gb",
        "max_model_len": 8192,
        "max_num_batched_tokens": 4096,
        "enable_chunked_prefill": False,
    }
    plan = (await client.post("/v1/plans", json=body)).json()
    assert plan["fits"] is False
    assert plan["settings"]["enable_chunked_prefill"] is False
    assert any(
        m["text"].startswith("max_num_batched_tokens (4096) is smaller than max_model_len (8192).")
        for m in plan["messages"]
        if m["level"] == "error"
    )


async def test_a_deployment_that_will_not_start_says_why_and_how_to_fix_it(client: httpx.AsyncClient) -> None:
    body = {"model": "llama-3.1-8b", "gpu": "l4", "max_model_len": 131072}
    plan = (await client.post("/v1/plans", json=body)).json()
    assert plan["fits"] is False
    error = next(m for m in plan["messages"] if m["level"] == "error")
    assert "To serve at least one request with the model's max seq len (131072)" in error["text"]
    assert plan["max_model_len_that_fits"] < 131072
    settings = {s["setting"] for s in plan["suggestions"]}
    assert "max_model_len" in settings


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"model": "no-such-model", "gpu": "l4"}, "model"),
        ({"model": "llama-3.1-8b", "gpu": "no-such-gpu"}, "gpu"),
        ({"model": "llama-3.1-8b", "gpu": "l4", "gpu_memory_utilization": 1.5}, "gpu_memory_utilization"),
        ({"model": "llama-3.1-8b", "gpu": "l4", "kv_cache_dtype": "fp9"}, "kv_cache_dtype"),
        ({"model": "llama-3.1-8b", "gpu": "l4", "engine": "tgi-2"}, "engine"),
        ({"model": "llama-3.1-8b", "gpu": "l4", "engine": "vllm-0.4"}, "engine"),
        ({"model": "llama-3.1-8b", "gpu": "l4", "tensor_parallel_size": 0}, "tensor_parallel_size"),
        ({"model": "llama-3.1-8b", "gpu": "l4", "quantization": "magic"}, "quantization"),
        ({"model": "llama-3.1-8b"}, "gpu"),
        ({"model": {"hf_config": {"num_hidden_layers": 2}}, "gpu": "l4"}, "num_attention_heads"),
        ({"model": "llama-3.1-8b", "gpu": "l4", "mamba_ssm_cache_dtype": "fp8"}, "mamba_ssm_cache_dtype"),
        ({"model": "llama-3.1-8b", "gpu": "l4", "mamba_cache_dtype": "int4"}, "mamba_cache_dtype"),
        ({"model": "llama-3.1-8b", "gpu": "l4", "cpu_avx512_bf16": "maybe"}, "cpu_avx512_bf16"),
    ],
)
async def test_bad_input_is_a_422_naming_the_field(
    client: httpx.AsyncClient, body: dict[str, object], field: str
) -> None:
    response = await client.post("/v1/plans", json=body)
    assert response.status_code == 422, response.text
    assert field in json.dumps(response.json())


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "service.cli", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=False,
    )


def test_cli_reproduces_the_seed_figures(tmp_path: Path) -> None:
    for kv_heads, kv_dtype, users in ((32, None, 30), (8, None, 123), (8, "int8", 247)):
        config = tmp_path / f"llama-{kv_heads}.json"
        config.write_text(json.dumps({**LLAMA2, "num_key_value_heads": kv_heads}))
        args = [
            "plan",
            "--hf-config",
            str(config),
            "--num-parameters",
            "6738415616",
            "--gpu-memory-bytes",
            str(80 * 10**9),
            "--engine",
            "ideal",
            "--gpu-memory-utilization",
            "1.0",
            "--max-model-len",
            "4096",
            "--json",
        ]
        if kv_dtype:
            args += ["--kv-cache-dtype", kv_dtype]
        result = run_cli(*args)
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)["kv_cache"]["max_concurrent_sequences"] == users


def test_cli_exit_codes() -> None:
    assert (
        run_cli("plan", "-m", "llama-3.1-8b", "-g", "h100-sxm-80gb", "--max-model-len", "8192").returncode
        == 0
    )
    refused = run_cli("plan", "-m", "llama-3.1-8b", "-g", "l4", "--max-model-len", "131072")
    assert refused.returncode == 1
    assert "will NOT start" in refused.stdout
    bad = run_cli("plan", "-m", "no-such-model", "-g", "l4")
    assert bad.returncode == 2
    assert "unknown model" in bad.stderr
