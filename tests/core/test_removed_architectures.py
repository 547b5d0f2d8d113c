"""Architectures vLLM's registry removed (registry.py ``_PREVIOUSLY_SUPPORTED_MODELS``, 0.32.0)."""

from __future__ import annotations

from service.core.hf_config import parse_hf_config
from service.core.planner import PlanRequest, plan

LLAMA_SHAPED = {
    "num_hidden_layers": 4,
    "hidden_size": 256,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "vocab_size": 1024,
    "max_position_embeddings": 4096,
    "torch_dtype": "bfloat16",
}


def _codes(architecture: str, engine: str, **config: object) -> set[str]:
    model = parse_hf_config({**LLAMA_SHAPED, "architectures": [architecture], **config})
    request = PlanRequest(
        model=model, engine=engine, device="cpu", kv_cache_memory_bytes=2**30, max_model_len=2048
    )
    return {m.code for m in plan(request).errors}


def test_an_architecture_without_a_transformers_class_is_refused_after_its_last_release() -> None:
    assert "architecture_removed" in _codes("BaichuanForCausalLM", "vllm-0.32")
    assert "architecture_removed" not in _codes("BaichuanForCausalLM", "vllm-0.23")  # its last release


def test_an_attention_only_architecture_runs_on_the_transformers_backend() -> None:
    codes = _codes("Dots1ForCausalLM", "vllm-0.32")
    assert not codes & {"architecture_removed", "transformers_backend_layer"}


def test_the_transformers_backend_refuses_mamba_layers() -> None:
    bamba = {
        "model_type": "bamba",
        "attn_layer_indices": [3],
        "mamba_n_heads": 8,
        "mamba_d_head": 32,
        "mamba_d_state": 64,
        "mamba_d_conv": 4,
        "mamba_expand": 1,
    }
    assert "transformers_backend_layer" in _codes("BambaForCausalLM", "vllm-0.32", **bamba)
    assert "transformers_backend_layer" not in _codes("BambaForCausalLM", "vllm-0.23", **bamba)
