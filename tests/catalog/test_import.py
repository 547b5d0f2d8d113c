"""Importing real config.json files (as published for each family) through POST /v1/models/import.

Expected values are the model cards' numbers, written out by hand: KV heads, head dim and the layer pattern.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

MODELS = Path(__file__).resolve().parents[2] / "service" / "catalog" / "builtin" / "models"

F, S, M, L, MAMBA = "full_attention", "sliding_attention", "mla", "linear_attention", "mamba"

# name: (layers, kv heads, head dim, {layer kind: count}, sliding window)
EXPECTED: dict[str, tuple[int, int, int, dict[str, int], int | None]] = {
    "llama-2-7b": (32, 32, 128, {F: 32}, None),
    "llama-2-13b": (40, 40, 128, {F: 40}, None),
    "llama-2-70b": (80, 8, 128, {F: 80}, None),
    "llama-3.1-8b": (32, 8, 128, {F: 32}, None),
    "llama-3.1-70b": (80, 8, 128, {F: 80}, None),
    "llama-3.1-405b": (126, 8, 128, {F: 126}, None),
    "llama-3.2-1b": (16, 8, 64, {F: 16}, None),
    "llama-3.2-3b": (28, 8, 128, {F: 28}, None),
    "mistral-7b-v0.1": (32, 8, 128, {S: 32}, 4096),
    "mistral-7b-v0.3": (32, 8, 128, {F: 32}, None),
    "mixtral-8x7b": (32, 8, 128, {F: 32}, None),
    "mixtral-8x22b": (56, 8, 128, {F: 56}, None),
    "qwen2.5-7b": (28, 4, 128, {F: 28}, None),
    "qwen2.5-32b": (64, 8, 128, {F: 64}, None),
    "qwen2.5-72b": (80, 8, 128, {F: 80}, None),
    "qwen3-8b": (36, 8, 128, {F: 36}, None),
    "qwen3-32b": (64, 8, 128, {F: 64}, None),
    "qwen3-30b-a3b": (48, 4, 128, {F: 48}, None),
    "qwen3-235b-a22b": (94, 4, 128, {F: 94}, None),
    "gemma-2-9b": (42, 8, 256, {S: 21, F: 21}, 4096),
    "gemma-2-27b": (46, 16, 128, {S: 23, F: 23}, 4096),
    "gemma-3-4b": (34, 4, 256, {S: 29, F: 5}, 1024),
    "gemma-3-27b": (62, 16, 128, {S: 52, F: 10}, 1024),
    "phi-4": (40, 10, 128, {F: 40}, None),
    "deepseek-v3": (61, 128, 576, {M: 61}, None),
    "deepseek-r1": (61, 128, 576, {M: 61}, None),
    "deepseek-v2-lite": (27, 16, 576, {M: 27}, None),
    "gpt-oss-20b": (24, 8, 64, {S: 12, F: 12}, 128),
    "gpt-oss-120b": (36, 8, 64, {S: 18, F: 18}, 128),
    "falcon-7b": (32, 1, 64, {F: 32}, None),
    "qwen3-next-80b-a3b": (48, 2, 256, {L: 36, F: 12}, None),
    "granite-4.0-h-small": (40, 8, 128, {MAMBA: 36, F: 4}, None),
}


def _record(name: str) -> dict[str, object]:
    return json.loads((MODELS / f"{name}.json").read_text())


@pytest.mark.parametrize("name", sorted(EXPECTED))
async def test_import_reads_kv_heads_head_dim_and_layer_types(client: httpx.AsyncClient, name: str) -> None:
    layers, kv_heads, head_dim, kinds, window = EXPECTED[name]
    body = {"name": f"imported-{name}", "hf_config": _record(name)["hf_config"]}
    response = await client.post("/v1/models/import", json=body, params={"dry_run": True})
    assert response.status_code == 200, response.text
    model = response.json()["model"]
    assert model["num_hidden_layers"] == layers
    assert model["num_key_value_heads"] == kv_heads
    assert model["head_dim"] == head_dim
    counted: dict[str, int] = {}
    for kind in model["layer_types"]:
        counted[kind] = counted.get(kind, 0) + 1
    assert counted == kinds
    assert model["sliding_window"] == window


async def test_gemma_3_full_layers_are_every_sixth(client: httpx.AsyncClient) -> None:
    body = {"name": "g3", "hf_config": _record("gemma-3-27b")["hf_config"]}
    kinds = (await client.post("/v1/models/import", json=body, params={"dry_run": True})).json()["model"][
        "layer_types"
    ]
    assert [i for i, kind in enumerate(kinds) if kind == F] == [5, 11, 17, 23, 29, 35, 41, 47, 53, 59]


async def test_import_stores_the_model_with_its_config_and_origin(client: httpx.AsyncClient) -> None:
    body = {"name": "my-llama", "hf_id": "acme/my-llama", "hf_config": _record("llama-3.1-8b")["hf_config"]}
    response = await client.post("/v1/models/import", json=body)
    assert response.status_code == 201, response.text
    assert response.json()["stored"] is True
    stored = (await client.get("/v1/models/my-llama")).json()
    assert stored["origin"] == "import"
    assert stored["source"] == "https://huggingface.co/acme/my-llama"
    assert stored["num_parameters"] == 8_030_261_248  # derived from the shapes: matches the published count


@pytest.mark.parametrize(
    ("mutation", "field"),
    [
        (lambda c: c.pop("num_hidden_layers"), "num_hidden_layers"),
        (lambda c: c.update(num_hidden_layers=-4), "num_hidden_layers"),
        (lambda c: c.update(num_key_value_heads="eight"), "num_key_value_heads"),
        (lambda c: c.update(num_key_value_heads=64), "num_key_value_heads"),
        (lambda c: c.update(torch_dtype="float12"), "torch_dtype"),
        (lambda c: c.update(layer_types=["full_attention"] * 3), "layer_types"),
        (lambda c: c.update(layer_types=["full_attention"] * 31 + ["gated_attention"]), "layer_types[31]"),
    ],
)
async def test_import_refuses_configs_it_cannot_read_and_names_the_key(
    client: httpx.AsyncClient, mutation: object, field: str
) -> None:
    config = dict(_record("llama-3.1-8b")["hf_config"])  # type: ignore[arg-type]
    mutation(config)  # type: ignore[operator]
    response = await client.post("/v1/models/import", json={"name": "broken", "hf_config": config})
    assert response.status_code == 422, response.text
    assert field in response.json()["detail"]
    assert (await client.get("/v1/models/broken")).status_code == 404


async def test_importing_an_existing_name_is_a_conflict(client: httpx.AsyncClient) -> None:
    body = {"name": "llama-3.1-8b", "hf_config": _record("llama-3.1-8b")["hf_config"]}
    assert (await client.post("/v1/models/import", json=body)).status_code == 409


async def test_a_stored_model_keeps_the_head_sizes_of_its_full_layers(client: httpx.AsyncClient) -> None:
    """Gemma 4's full-attention layers page ``global_head_dim``-wide heads (and, under ``attention_k_eq_v``,
    ``num_global_key_value_heads``): a model imported, stored and read back plans as the config does."""
    config = {
        "architectures": ["Gemma4ForCausalLM"],
        "model_type": "gemma4_text",
        "hidden_size": 512,
        "intermediate_size": 1024,
        "num_hidden_layers": 8,
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
        "head_dim": 32,
        "global_head_dim": 64,
        "attention_k_eq_v": True,
        "num_global_key_value_heads": 1,
        "sliding_window": 512,
        "max_position_embeddings": 4096,
        "vocab_size": 1024,
        "torch_dtype": "bfloat16",
    }
    response = await client.post("/v1/models/import", json={"name": "tiny-gemma4", "hf_config": config})
    assert response.status_code == 201, response.text
    stored = (await client.get("/v1/models/tiny-gemma4")).json()
    assert (stored["head_dim"], stored["full_attention_head_dim"], stored["full_attention_kv_heads"]) == (
        32,
        64,
        1,
    )
    body = {"gpu": "h100-sxm-80gb", "max_model_len": 4096, "kv_cache_memory_bytes": 2**30}
    by_name = (await client.post("/v1/plans", json=body | {"model": "tiny-gemma4"})).json()
    inline = (await client.post("/v1/plans", json=body | {"model": {"hf_config": config}})).json()
    assert by_name["kv_cache"]["num_gpu_blocks"] == inline["kv_cache"]["num_gpu_blocks"]
    # 6 sliding layers of 4 × 32-wide KV heads and 2 full ones of 1 × 64-wide: 2 × 2 B × (6·128 + 2·64) per token
    assert inline["kv_cache"]["bytes_per_token"] == 2 * 2 * (6 * 4 * 32 + 2 * 1 * 64)
