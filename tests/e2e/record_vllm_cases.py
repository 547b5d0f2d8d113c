"""Record what a real vLLM (CPU build) allocates for a set of shrunk architectures.

For each case this script writes a weightless model folder, starts vLLM's API
server with ``--load-format dummy``, reads the start-up log and the
``vllm:cache_config_info`` labels of ``/metrics``, stops the server, and writes
``tests/data/vllm_recorded/<case_id>.json``.

Usage (from the repository root)::

    python3 tests/e2e/record_vllm_cases.py                 # every case
    python3 tests/e2e/record_vllm_cases.py --only llama-gqa,mistral-sliding
    python3 tests/e2e/record_vllm_cases.py --list

Cases run one after another; each server is stopped (its process group killed)
before the next starts.  A case that fails to start is reported and skipped;
its log stays in the work folder.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.e2e import vllm_harness as harness

VLLM_VERSION = "0.32.0"
DEVICE = "cpu"
GIB = 2**30
OUT_DIR = harness.REPO_ROOT / "tests" / "data" / "vllm_recorded"

# Explicit scheduler limits for cases whose capacity depends on them (sliding
# window and hybrid models); they equal the CPU defaults of the API server.
SCHED_ARGS = ("--max-num-batched-tokens", "2048", "--max-num-seqs", "128")


@dataclass
class Case:
    """One recorded start-up."""

    case_id: str
    description: str
    hf_config: dict[str, Any]
    max_model_len: int
    kv_cache_space_gib: int | None = 1
    kv_cache_memory_bytes: int | None = None
    extra_args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    draft_config: dict[str, Any] | None = None  # a second weightless model; "{draft}" in extra_args names it
    expect_refusal: bool = False  # vLLM is expected to refuse to start: the record keeps its error

    @property
    def vocab_size(self) -> int:
        return int(self.hf_config["vocab_size"])

    @property
    def budget_bytes(self) -> int:
        if self.kv_cache_space_gib is not None:
            return int(self.kv_cache_space_gib) * GIB
        assert self.kv_cache_memory_bytes is not None
        return int(self.kv_cache_memory_bytes)


# --------------------------------------------------------------------------- configs


def llama(
    *,
    layers: int = 4,
    heads: int = 8,
    kv_heads: int = 2,
    head_dim: int = 32,
    hidden: int = 256,
    dtype: str = "bfloat16",
    vocab: int = 1024,
) -> dict[str, Any]:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": hidden,
        "intermediate_size": 2 * hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": 8192,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "vocab_size": vocab,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "tie_word_embeddings": False,
        "torch_dtype": dtype,
    }


def falcon_mqa() -> dict[str, Any]:
    return {
        "architectures": ["FalconForCausalLM"],
        "model_type": "falcon",
        "hidden_size": 256,
        "num_attention_heads": 8,
        "num_hidden_layers": 4,
        "multi_query": True,
        "new_decoder_architecture": False,
        "parallel_attn": True,
        "bias": False,
        "alibi": False,
        "layer_norm_epsilon": 1e-5,
        "max_position_embeddings": 8192,
        "rope_theta": 10000.0,
        "vocab_size": 1024,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "torch_dtype": "bfloat16",
    }


def mistral_sliding(window: int = 256) -> dict[str, Any]:
    cfg = llama(layers=4, heads=8, kv_heads=2, head_dim=32, hidden=256)
    cfg.update(
        {
            "architectures": ["MistralForCausalLM"],
            "model_type": "mistral",
            "sliding_window": window,
            "max_position_embeddings": 8192,
        }
    )
    return cfg


def gemma3_text(layers: int, window: int = 512) -> dict[str, Any]:
    return {
        "architectures": ["Gemma3ForCausalLM"],
        "model_type": "gemma3_text",
        "hidden_size": 128,
        "intermediate_size": 256,
        "num_hidden_layers": layers,
        "num_attention_heads": 4,
        "num_key_value_heads": 1,
        "head_dim": 32,
        "hidden_activation": "gelu_pytorch_tanh",
        "max_position_embeddings": 32768,
        "query_pre_attn_scalar": 32,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "rope_local_base_freq": 10000.0,
        "rope_scaling": None,
        "sliding_window": window,
        "sliding_window_pattern": 6,
        "final_logit_softcapping": None,
        "attn_logit_softcapping": None,
        "vocab_size": 1024,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pad_token_id": 0,
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
    }


def gemma2(layers: int, window: int = 512) -> dict[str, Any]:
    return {
        "architectures": ["Gemma2ForCausalLM"],
        "model_type": "gemma2",
        "hidden_size": 128,
        "intermediate_size": 256,
        "num_hidden_layers": layers,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "hidden_activation": "gelu_pytorch_tanh",
        "hidden_act": "gelu_pytorch_tanh",
        "max_position_embeddings": 8192,
        "query_pre_attn_scalar": 32,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "sliding_window": window,
        "final_logit_softcapping": 30.0,
        "attn_logit_softcapping": 50.0,
        "vocab_size": 1024,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pad_token_id": 0,
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
    }


def deepseek_v2_mla(kv_lora_rank: int = 512, rope_dim: int = 64) -> dict[str, Any]:
    return {
        "architectures": ["DeepseekV2ForCausalLM"],
        "model_type": "deepseek_v2",
        "hidden_size": 256,
        "intermediate_size": 512,
        "moe_intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "q_lora_rank": None,
        "kv_lora_rank": kv_lora_rank,
        "qk_nope_head_dim": 32,
        "qk_rope_head_dim": rope_dim,
        "v_head_dim": 32,
        "n_routed_experts": 4,
        "n_shared_experts": 1,
        "num_experts_per_tok": 2,
        "first_k_dense_replace": 2,
        "moe_layer_freq": 1,
        "n_group": 1,
        "topk_group": 1,
        "topk_method": "greedy",
        "scoring_func": "softmax",
        "norm_topk_prob": False,
        "routed_scaling_factor": 1.0,
        "hidden_act": "silu",
        "max_position_embeddings": 8192,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "rope_scaling": None,
        "attention_bias": False,
        "vocab_size": 1024,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }


def gpt_oss(layers: int = 4) -> dict[str, Any]:
    return {
        "architectures": ["GptOssForCausalLM"],
        "model_type": "gpt_oss",
        "hidden_size": 256,
        "intermediate_size": 256,
        "num_hidden_layers": layers,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "num_local_experts": 4,
        "num_experts_per_tok": 2,
        "experts_per_token": 2,
        "sliding_window": 128,
        "layer_types": ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(layers)],
        "hidden_act": "silu",
        "swiglu_limit": 7.0,
        "max_position_embeddings": 8192,
        "initial_context_length": 4096,
        "rms_norm_eps": 1e-5,
        "rope_theta": 150000.0,
        "rope_scaling": {
            "rope_type": "yarn",
            "factor": 2.0,
            "beta_fast": 32.0,
            "beta_slow": 1.0,
            "original_max_position_embeddings": 4096,
            "truncate": False,
        },
        "attention_bias": True,
        "router_aux_loss_coef": 0.9,
        "output_router_logits": False,
        "vocab_size": 1024,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pad_token_id": 0,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }


def qwen3_next(layers: int = 4) -> dict[str, Any]:
    return {
        "architectures": ["Qwen3NextForCausalLM"],
        "model_type": "qwen3_next",
        "hidden_size": 256,
        "intermediate_size": 512,
        "num_hidden_layers": layers,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 64,
        "full_attention_interval": 4,
        "layer_types": ["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(layers)],
        "linear_conv_kernel_dim": 4,
        "linear_key_head_dim": 32,
        "linear_value_head_dim": 32,
        "linear_num_key_heads": 4,
        "linear_num_value_heads": 8,
        "partial_rotary_factor": 0.25,
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 128,
        "shared_expert_intermediate_size": 128,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
        "norm_topk_prob": True,
        "hidden_act": "silu",
        "max_position_embeddings": 8192,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "rope_scaling": None,
        "attention_bias": False,
        "vocab_size": 1024,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }


def granite_hybrid(layer_types: list[str]) -> dict[str, Any]:
    """Granite 4.0 hybrid (GraniteMoeHybrid): Mamba2 layers with a few attention layers, dense MLP."""
    return {
        "architectures": ["GraniteMoeHybridForCausalLM"],
        "model_type": "granitemoehybrid",
        "hidden_size": 256,
        "intermediate_size": 512,
        "shared_intermediate_size": 512,
        "num_local_experts": 0,
        "num_experts_per_tok": 0,
        "num_hidden_layers": len(layer_types),
        "layer_types": layer_types,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "mamba_n_heads": 8,
        "mamba_d_head": 32,
        "mamba_n_groups": 1,
        "mamba_d_state": 64,
        "mamba_d_conv": 4,
        "mamba_expand": 1,
        "mamba_chunk_size": 256,
        "mamba_conv_bias": True,
        "mamba_proj_bias": False,
        "position_embedding_type": "nope",
        "hidden_act": "silu",
        "max_position_embeddings": 8192,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "attention_multiplier": 0.0078125,
        "embedding_multiplier": 12.0,
        "residual_multiplier": 0.22,
        "logits_scaling": 8.0,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "vocab_size": 1024,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pad_token_id": 0,
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
    }


def nemotron_h(pattern: str) -> dict[str, Any]:
    """Nemotron-H: ``hybrid_override_pattern`` M = Mamba2, * = attention, - = MLP only (no cache)."""
    return {
        "architectures": ["NemotronHForCausalLM"],
        "model_type": "nemotron_h",
        "hidden_size": 256,
        "intermediate_size": 512,
        "num_hidden_layers": len(pattern),
        "hybrid_override_pattern": pattern,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "mamba_num_heads": 8,
        "mamba_head_dim": 32,
        "n_groups": 1,
        "ssm_state_size": 64,
        "conv_kernel": 4,
        "expand": 1,
        "chunk_size": 256,
        "use_conv_bias": True,
        "use_bias": False,
        "mlp_bias": False,
        "mlp_hidden_act": "relu2",
        "mamba_hidden_act": "silu",
        "layer_norm_epsilon": 1e-5,
        "residual_in_fp32": False,
        "rescale_prenorm_residual": True,
        "max_position_embeddings": 8192,
        "attention_bias": False,
        "vocab_size": 1024,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pad_token_id": 0,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }


def llama4_text(layers: int = 4, chunk: int = 256) -> dict[str, Any]:
    """Llama 4 text: chunked local attention on RoPE layers, every 4th layer NoPE (``no_rope_layers`` empty)."""
    return {
        "architectures": ["Llama4ForCausalLM"],
        "model_type": "llama4_text",
        "hidden_size": 256,
        "intermediate_size": 256,
        "intermediate_size_mlp": 512,
        "num_hidden_layers": layers,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "num_local_experts": 4,
        "num_experts_per_tok": 1,
        "interleave_moe_layer_step": 1,
        "attention_chunk_size": chunk,
        "no_rope_layers": [],
        "no_rope_layer_interval": 4,
        "use_qk_norm": True,
        "attn_temperature_tuning": True,
        "floor_scale": 8192,
        "attn_scale": 0.1,
        "hidden_act": "silu",
        "max_position_embeddings": 8192,
        "rms_norm_eps": 1e-5,
        "rope_theta": 500000.0,
        "rope_scaling": None,
        "attention_bias": False,
        "vocab_size": 1024,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pad_token_id": 0,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }


def gemma3n_text(layers: int = 6, shared: int = 2) -> dict[str, Any]:
    """Gemma 3n text: sliding/full pattern, the last ``num_kv_shared_layers`` layers reuse earlier KV."""
    return {
        "architectures": ["Gemma3nForCausalLM"],
        "model_type": "gemma3n_text",
        "hidden_size": 128,
        "hidden_size_per_layer_input": 16,
        "intermediate_size": [256] * layers,
        "num_hidden_layers": layers,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "num_kv_shared_layers": shared,
        "layer_types": ["full_attention" if (i + 1) % 3 == 0 else "sliding_attention" for i in range(layers)],
        "sliding_window": 256,
        "activation_sparsity_pattern": [0.0] * layers,
        "altup_active_idx": 0,
        "altup_coef_clip": 120.0,
        "altup_correct_scale": True,
        "altup_num_inputs": 4,
        "laurel_rank": 16,
        "final_logit_softcapping": 30.0,
        "hidden_activation": "gelu_pytorch_tanh",
        "max_position_embeddings": 8192,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "rope_local_base_freq": 10000.0,
        "rope_scaling": None,
        "vocab_size": 1024,
        "vocab_size_per_layer_input": 1024,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pad_token_id": 0,
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
    }


def mamba2_pure(layers: int = 4) -> dict[str, Any]:
    """Mamba2 (attention-free): every layer a Mamba2 mixer (transformers' Mamba2Config field names)."""
    return {
        "architectures": ["Mamba2ForCausalLM"],
        "model_type": "mamba2",
        "hidden_size": 256,
        "num_hidden_layers": layers,
        "num_heads": 8,
        "head_dim": 32,
        "n_groups": 1,
        "state_size": 64,
        "expand": 1,
        "conv_kernel": 4,
        "chunk_size": 256,
        "use_bias": False,
        "use_conv_bias": True,
        "hidden_act": "silu",
        "layer_norm_epsilon": 1e-5,
        "residual_in_fp32": True,
        "time_step_rank": 16,
        "vocab_size": 1024,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pad_token_id": 0,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }


def jamba(layers: int = 4) -> dict[str, Any]:
    """Jamba: Mamba1 layers with attention every ``attn_layer_period`` (offset), MoE every other layer."""
    return {
        "architectures": ["JambaForCausalLM"],
        "model_type": "jamba",
        "hidden_size": 256,
        "intermediate_size": 512,
        "num_hidden_layers": layers,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "attn_layer_period": 4,
        "attn_layer_offset": 3,
        "expert_layer_period": 2,
        "expert_layer_offset": 1,
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "mamba_d_state": 16,
        "mamba_d_conv": 4,
        "mamba_expand": 2,
        "mamba_dt_rank": 16,
        "mamba_conv_bias": True,
        "mamba_proj_bias": False,
        "use_mamba_kernels": False,
        "hidden_act": "silu",
        "max_position_embeddings": 8192,
        "rms_norm_eps": 1e-6,
        "vocab_size": 1024,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pad_token_id": 0,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }


def qwen3_moe(layers: int = 4) -> dict[str, Any]:
    """Qwen3-MoE: every layer a sparse MoE block (decoder_sparse_step 1), q/k norm, head_dim 64."""
    return {
        "architectures": ["Qwen3MoeForCausalLM"],
        "model_type": "qwen3_moe",
        "hidden_size": 256,
        "intermediate_size": 512,
        "moe_intermediate_size": 128,
        "num_hidden_layers": layers,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 64,
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
        "norm_topk_prob": True,
        "hidden_act": "silu",
        "max_position_embeddings": 8192,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "rope_scaling": None,
        "attention_bias": False,
        "use_sliding_window": False,
        "sliding_window": None,
        "max_window_layers": layers,
        "vocab_size": 1024,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }


def qwen2(
    *, use_sliding_window: bool, max_window_layers: int, layers: int = 4, window: int = 256
) -> dict[str, Any]:
    """Qwen2: ``sliding_window`` only counts when ``use_sliding_window``; layers from ``max_window_layers`` on slide."""
    return {
        "architectures": ["Qwen2ForCausalLM"],
        "model_type": "qwen2",
        "hidden_size": 256,
        "intermediate_size": 512,
        "num_hidden_layers": layers,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "hidden_act": "silu",
        "max_position_embeddings": 8192,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "use_sliding_window": use_sliding_window,
        "sliding_window": window,
        "max_window_layers": max_window_layers,
        "vocab_size": 1024,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }


def qwen2_moe(*, use_sliding_window: bool, max_window_layers: int, layers: int = 4) -> dict[str, Any]:
    """Qwen2-MoE (Qwen1.5-MoE-style): every layer sparse, a gated shared expert."""
    return {
        **qwen2(use_sliding_window=use_sliding_window, max_window_layers=max_window_layers, layers=layers),
        "architectures": ["Qwen2MoeForCausalLM"],
        "model_type": "qwen2_moe",
        "moe_intermediate_size": 128,
        "shared_expert_intermediate_size": 256,
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
        "norm_topk_prob": False,
    }


def mixtral() -> dict[str, Any]:
    """Mixtral 8x7B-style: sliding_window null (full attention), 4 experts top-2."""
    cfg = llama(layers=4, heads=8, kv_heads=2, head_dim=32, hidden=256)
    cfg.update(
        {
            "architectures": ["MixtralForCausalLM"],
            "model_type": "mixtral",
            "num_local_experts": 4,
            "num_experts_per_tok": 2,
            "sliding_window": None,
            "rope_theta": 1000000.0,
        }
    )
    return cfg


def phi3(window: int = 255) -> dict[str, Any]:
    """Phi-3-mini-style: MHA, head_dim from hidden/heads, a bare sliding_window on every layer."""
    return {
        "architectures": ["Phi3ForCausalLM"],
        "model_type": "phi3",
        "hidden_size": 256,
        "intermediate_size": 512,
        "num_hidden_layers": 4,
        "num_attention_heads": 8,
        "num_key_value_heads": 8,
        "hidden_act": "silu",
        "max_position_embeddings": 8192,
        "original_max_position_embeddings": 8192,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "rope_scaling": None,
        "sliding_window": window,
        "resid_pdrop": 0.0,
        "embd_pdrop": 0.0,
        "attention_dropout": 0.0,
        "vocab_size": 1024,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pad_token_id": 0,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }


def cohere2(layers: int = 4, window: int = 256) -> dict[str, Any]:
    """Cohere 2 / Command R7B: sliding_window_pattern 4 (3 sliding : 1 full), 2 KV heads, head_dim 32."""
    return {
        "architectures": ["Cohere2ForCausalLM"],
        "model_type": "cohere2",
        "hidden_size": 256,
        "intermediate_size": 512,
        "num_hidden_layers": layers,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "hidden_act": "silu",
        "layer_norm_eps": 1e-5,
        "logit_scale": 0.25,
        "max_position_embeddings": 8192,
        "rope_theta": 50000.0,
        "rope_scaling": None,
        "sliding_window": window,
        "sliding_window_pattern": 4,
        "use_qk_norm": False,
        "attention_bias": False,
        "vocab_size": 1024,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pad_token_id": 0,
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
    }


def olmo2() -> dict[str, Any]:
    """OLMo 2: Llama-shaped with q/k norm after the projections, MHA (here 4 heads = 4 KV heads)."""
    return {
        "architectures": ["Olmo2ForCausalLM"],
        "model_type": "olmo2",
        "hidden_size": 256,
        "intermediate_size": 512,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "hidden_act": "silu",
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-6,
        "rope_theta": 500000.0,
        "rope_scaling": None,
        "attention_bias": False,
        "vocab_size": 1024,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pad_token_id": 0,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }


def glm4() -> dict[str, Any]:
    """GLM-4-0414: partial rotary (0.5), 2 KV heads, head_dim 64, bias on qkv."""
    return {
        "architectures": ["Glm4ForCausalLM"],
        "model_type": "glm4",
        "hidden_size": 256,
        "intermediate_size": 512,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 64,
        "partial_rotary_factor": 0.5,
        "attention_bias": True,
        "hidden_act": "silu",
        "max_position_embeddings": 8192,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "vocab_size": 1024,
        "bos_token_id": 1,
        "eos_token_id": [2],
        "pad_token_id": 0,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }


def gemma1() -> dict[str, Any]:
    """Gemma (v1, 2B-style): head_dim 256 with 1 KV head (MQA), 2 layers."""
    return {
        "architectures": ["GemmaForCausalLM"],
        "model_type": "gemma",
        "hidden_size": 256,
        "intermediate_size": 512,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "head_dim": 256,
        "hidden_act": "gelu_pytorch_tanh",
        "hidden_activation": "gelu_pytorch_tanh",
        "max_position_embeddings": 8192,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "vocab_size": 1024,
        "bos_token_id": 2,
        "eos_token_id": 1,
        "pad_token_id": 0,
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
    }


def deepseek_v2_lite(layers: int = 3) -> dict[str, Any]:
    """DeepSeek-V2-Lite-like: MLA (512 + 64), first layer dense, the rest MoE, q_lora_rank null."""
    cfg = deepseek_v2_mla()
    cfg.update({"num_hidden_layers": layers, "first_k_dense_replace": 1, "n_routed_experts": 4})
    return cfg


def gpt_bigcode() -> dict[str, Any]:
    """GPT-BigCode (StarCoder 1 / SantaCoder): GPT-2 key names, ``multi_query`` true → 1 KV head."""
    return {
        "architectures": ["GPTBigCodeForCausalLM"],
        "model_type": "gpt_bigcode",
        "n_embd": 256,
        "n_head": 8,
        "n_layer": 4,
        "n_inner": 1024,
        "n_positions": 8192,
        "multi_query": True,
        "activation_function": "gelu_pytorch_tanh",
        "layer_norm_epsilon": 1e-5,
        "scale_attn_weights": True,
        "vocab_size": 1024,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
    }


def olmo3(layers: int = 4, window: int = 256) -> dict[str, Any]:
    """OLMo 3 without ``layer_types`` in the file: transformers fills 3 sliding : 1 full."""
    cfg = olmo2()
    cfg.update(
        {
            "architectures": ["Olmo3ForCausalLM"],
            "model_type": "olmo3",
            "num_hidden_layers": layers,
            "sliding_window": window,
            "max_position_embeddings": 8192,
        }
    )
    return cfg


def starcoder2(window: int = 256) -> dict[str, Any]:
    """StarCoder 2: a bare ``sliding_window`` (no layer_types), GQA, bias, LayerNorm."""
    return {
        "architectures": ["Starcoder2ForCausalLM"],
        "model_type": "starcoder2",
        "hidden_size": 256,
        "intermediate_size": 1024,
        "num_hidden_layers": 4,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "hidden_act": "gelu_pytorch_tanh",
        "max_position_embeddings": 8192,
        "norm_epsilon": 1e-5,
        "rope_theta": 100000.0,
        "sliding_window": window,
        "use_bias": True,
        "vocab_size": 1024,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
    }


def exaone4(layers: int = 4, window: int = 256) -> dict[str, Any]:
    """EXAONE 4.0 with a sliding_window but neither sliding_window_pattern nor layer_types in the file."""
    return {
        "architectures": ["Exaone4ForCausalLM"],
        "model_type": "exaone4",
        "hidden_size": 256,
        "intermediate_size": 512,
        "num_hidden_layers": layers,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "hidden_act": "silu",
        "max_position_embeddings": 8192,
        "rms_norm_eps": 1e-5,
        "rope_theta": 1000000.0,
        "sliding_window": window,
        "vocab_size": 1024,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pad_token_id": 0,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }


# --- families recorded for issue #12 (2026-12-03, second batch) ---------------------------------------------------


def phimoe(window: int | None = 256) -> dict[str, Any]:
    """Phi-3.5-MoE: Mistral-shaped MoE (4 experts top-2), a bare sliding_window, bias on qkv and o."""
    return {
        "architectures": ["PhiMoEForCausalLM"],
        "model_type": "phimoe",
        "hidden_size": 256,
        "intermediate_size": 512,
        "num_hidden_layers": 4,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "num_local_experts": 4,
        "num_experts_per_tok": 2,
        "hidden_act": "silu",
        "max_position_embeddings": 8192,
        "original_max_position_embeddings": 8192,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "rope_scaling": None,
        "sliding_window": window,
        "attention_bias": True,
        "lm_head_bias": True,
        "router_jitter_noise": 0.01,
        "input_jitter_noise": 0.01,
        "vocab_size": 1024,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }


def granitemoe() -> dict[str, Any]:
    """Granite 3.0 MoE (GraniteMoeForCausalLM): 4 experts top-2, 2 KV heads, the Granite multipliers."""
    return {
        "architectures": ["GraniteMoeForCausalLM"],
        "model_type": "granitemoe",
        "hidden_size": 256,
        "intermediate_size": 128,
        "num_hidden_layers": 4,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "num_local_experts": 4,
        "num_experts_per_tok": 2,
        "hidden_act": "silu",
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "attention_multiplier": 0.0078125,
        "embedding_multiplier": 12.0,
        "residual_multiplier": 0.22,
        "logits_scaling": 6.0,
        "attention_bias": False,
        "vocab_size": 1024,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pad_token_id": 0,
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
    }


def dbrx() -> dict[str, Any]:
    """DBRX: MPT-style keys (d_model, n_heads, n_layers, max_seq_len), KV heads in attn_config.kv_n_heads."""
    return {
        "architectures": ["DbrxForCausalLM"],
        "model_type": "dbrx",
        "d_model": 256,
        "n_heads": 8,
        "n_layers": 4,
        "max_seq_len": 8192,
        "attn_config": {"kv_n_heads": 2, "clip_qkv": 8.0, "rope_theta": 500000.0, "attn_pdrop": 0.0},
        "ffn_config": {
            "ffn_hidden_size": 256,
            "moe_num_experts": 4,
            "moe_top_k": 2,
            "moe_jitter_eps": 0.0,
            "moe_loss_weight": 0.05,
            "moe_normalize_expert_weights": 1.0,
            "ffn_act_fn": {"name": "silu"},
        },
        "vocab_size": 1024,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }


def olmoe() -> dict[str, Any]:
    """OLMoE: every layer sparse (4 experts top-2), MHA, q/k norm."""
    return {
        "architectures": ["OlmoeForCausalLM"],
        "model_type": "olmoe",
        "hidden_size": 256,
        "intermediate_size": 128,
        "num_hidden_layers": 4,
        "num_attention_heads": 8,
        "num_key_value_heads": 8,
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "norm_topk_prob": False,
        "clip_qkv": None,
        "hidden_act": "silu",
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "attention_bias": False,
        "vocab_size": 1024,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pad_token_id": 0,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }


def glm4_moe() -> dict[str, Any]:
    """GLM-4.5 MoE: head_dim 64 with partial_rotary_factor 0.5, first layer dense, shared expert, an MTP layer."""
    return {
        "architectures": ["Glm4MoeForCausalLM"],
        "model_type": "glm4_moe",
        "hidden_size": 256,
        "intermediate_size": 512,
        "moe_intermediate_size": 128,
        "num_hidden_layers": 3,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "head_dim": 64,
        "partial_rotary_factor": 0.5,
        "n_routed_experts": 4,
        "n_shared_experts": 1,
        "num_experts_per_tok": 2,
        "first_k_dense_replace": 1,
        "n_group": 1,
        "topk_group": 1,
        "routed_scaling_factor": 1.0,
        "norm_topk_prob": True,
        "use_qk_norm": True,
        "num_nextn_predict_layers": 1,
        "attention_bias": True,
        "hidden_act": "silu",
        "max_position_embeddings": 8192,
        "rms_norm_eps": 1e-5,
        "rope_theta": 1000000.0,
        "vocab_size": 1024,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pad_token_id": 0,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }


def ernie45_moe() -> dict[str, Any]:
    """ERNIE 4.5 MoE (A3B-style): moe_* keys, first layer dense, 2 KV heads, head_dim 64, tied embeddings."""
    return {
        "architectures": ["Ernie4_5_MoeForCausalLM"],
        "model_type": "ernie4_5_moe",
        "hidden_size": 256,
        "intermediate_size": 512,
        "num_hidden_layers": 3,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 64,
        "moe_num_experts": 4,
        "moe_k": 2,
        "moe_intermediate_size": 128,
        "moe_num_shared_experts": 1,
        "moe_layer_start_index": 1,
        "moe_layer_end_index": 2,
        "moe_layer_interval": 1,
        "use_bias": False,
        "hidden_act": "silu",
        "max_position_embeddings": 8192,
        "rms_norm_eps": 1e-5,
        "rope_theta": 500000.0,
        "vocab_size": 1024,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pad_token_id": 0,
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
    }


def bloom() -> dict[str, Any]:
    """BLOOM: ALiBi positions (no RoPE, no length key), n_layer / n_head, MHA."""
    return {
        "architectures": ["BloomForCausalLM"],
        "model_type": "bloom",
        "hidden_size": 256,
        "n_layer": 4,
        "n_head": 8,
        "layer_norm_epsilon": 1e-5,
        "apply_residual_connection_post_layernorm": False,
        "vocab_size": 1024,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pad_token_id": 0,
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
    }


def gpt_neox() -> dict[str, Any]:
    """GPT-NeoX (Pythia-style): MHA, rotary_pct 0.25, parallel residual; vLLM runs it on the Transformers backend."""
    return {
        "architectures": ["GPTNeoXForCausalLM"],
        "model_type": "gpt_neox",
        "hidden_size": 256,
        "intermediate_size": 1024,
        "num_hidden_layers": 4,
        "num_attention_heads": 8,
        "rotary_pct": 0.25,
        "rotary_emb_base": 10000,
        "use_parallel_residual": True,
        "hidden_act": "gelu",
        "max_position_embeddings": 2048,
        "layer_norm_eps": 1e-5,
        "vocab_size": 1024,
        "bos_token_id": 0,
        "eos_token_id": 0,
        "tie_word_embeddings": False,
        "torch_dtype": "float16",
    }


def gptj() -> dict[str, Any]:
    """GPT-J: n_embd / n_head / n_layer / n_positions, rotary_dim 16 of head 32, MHA, fp16."""
    return {
        "architectures": ["GPTJForCausalLM"],
        "model_type": "gptj",
        "n_embd": 256,
        "n_head": 8,
        "n_layer": 4,
        "n_positions": 2048,
        "rotary_dim": 16,
        "n_inner": None,
        "activation_function": "gelu_new",
        "layer_norm_epsilon": 1e-5,
        "vocab_size": 1024,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "tie_word_embeddings": False,
        "torch_dtype": "float16",
    }


def opt() -> dict[str, Any]:
    """OPT: learned positions (max_position_embeddings 2048), ffn_dim, MHA, fp16."""
    return {
        "architectures": ["OPTForCausalLM"],
        "model_type": "opt",
        "hidden_size": 256,
        "num_hidden_layers": 4,
        "num_attention_heads": 8,
        "ffn_dim": 1024,
        "word_embed_proj_dim": 256,
        "do_layer_norm_before": True,
        "max_position_embeddings": 2048,
        "activation_function": "relu",
        "enable_bias": True,
        "vocab_size": 1024,
        "bos_token_id": 2,
        "eos_token_id": 2,
        "pad_token_id": 1,
        "tie_word_embeddings": True,
        "torch_dtype": "float16",
    }


def minicpm3() -> dict[str, Any]:
    """MiniCPM3: MLA-style projections (kv_lora_rank, qk_rope_head_dim) but vLLM caches full K and V per head."""
    return {
        "architectures": ["MiniCPM3ForCausalLM"],
        "model_type": "minicpm3",
        "hidden_size": 256,
        "intermediate_size": 512,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "head_dim": 32,
        "qk_nope_head_dim": 32,
        "qk_rope_head_dim": 32,
        "v_head_dim": 32,
        "q_lora_rank": 128,
        "kv_lora_rank": 64,
        "scale_emb": 12,
        "scale_depth": 1.4,
        "dim_model_base": 256,
        "hidden_act": "silu",
        "max_position_embeddings": 8192,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "rope_scaling": None,
        "vocab_size": 1024,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
    }


def hunyuan_dense() -> dict[str, Any]:
    """Hunyuan dense V1: q/k norm, 2 KV heads, head_dim 64 (Transformers backend in vLLM 0.32)."""
    return {
        "architectures": ["HunYuanDenseV1ForCausalLM"],
        "model_type": "hunyuan_v1_dense",
        "hidden_size": 256,
        "intermediate_size": 512,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 64,
        "use_qk_norm": True,
        "hidden_act": "silu",
        "max_position_embeddings": 8192,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "attention_bias": False,
        "vocab_size": 1024,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pad_token_id": 0,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }


def falcon_h1(layers: int = 4) -> dict[str, Any]:
    """Falcon-H1: every layer runs attention and a Mamba2 mixer side by side (parallel hybrid)."""
    return {
        "architectures": ["FalconH1ForCausalLM"],
        "model_type": "falcon_h1",
        "hidden_size": 256,
        "intermediate_size": 512,
        "num_hidden_layers": layers,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "mamba_d_ssm": 256,
        "mamba_n_heads": 8,
        "mamba_d_head": 32,
        "mamba_n_groups": 1,
        "mamba_d_state": 64,
        "mamba_d_conv": 4,
        "mamba_expand": 1,
        "mamba_chunk_size": 256,
        "mamba_conv_bias": True,
        "mamba_proj_bias": False,
        "mamba_norm_before_gate": False,
        "mamba_rms_norm": True,
        "hidden_act": "silu",
        "max_position_embeddings": 8192,
        "rms_norm_eps": 1e-5,
        "rope_theta": 100000.0,
        "vocab_size": 1024,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pad_token_id": 0,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }


def lfm2(layer_types: list[str]) -> dict[str, Any]:
    """LFM2: short-convolution layers ("conv", a constant conv state) with a few attention layers."""
    return {
        "architectures": ["Lfm2ForCausalLM"],
        "model_type": "lfm2",
        "hidden_size": 256,
        "intermediate_size": 512,
        "num_hidden_layers": len(layer_types),
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "layer_types": layer_types,
        "full_attn_idxs": [i for i, t in enumerate(layer_types) if t == "full_attention"],
        "conv_bias": False,
        "conv_L_cache": 3,
        "conv_dim": 256,  # published LFM2 configs carry it (vLLM's lfm2.py reads config.conv_dim)
        "conv_dim_out": 256,
        "block_dim": 256,  # likewise (vLLM's Lfm2MLP reads config.block_dim)
        "block_ff_dim": 512,
        "block_multiple_of": 256,
        "block_ffn_dim_multiplier": 1.0,
        "block_auto_adjust_ff_dim": False,
        "max_position_embeddings": 8192,
        "norm_eps": 1e-5,
        "rope_theta": 1000000.0,
        "vocab_size": 1024,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pad_token_id": 0,
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
    }


def zamba2(block_types: list[str]) -> dict[str, Any]:
    """Zamba2: Mamba2 layers; "hybrid" layers add the shared attention block (over 2 × hidden) beside the mixer."""
    return {
        "architectures": ["Zamba2ForCausalLM"],
        "model_type": "zamba2",
        "hidden_size": 256,
        "intermediate_size": 512,
        "num_hidden_layers": len(block_types),
        "layers_block_type": block_types,
        "num_attention_heads": 8,
        "num_key_value_heads": 8,
        "num_mem_blocks": 1,
        "use_shared_attention_adapter": False,
        "adapter_rank": 16,
        "use_mem_rope": True,
        "mamba_d_state": 64,
        "mamba_d_conv": 4,
        "mamba_expand": 1,
        "mamba_ngroups": 1,
        "n_mamba_heads": 8,
        "chunk_size": 256,
        "use_conv_bias": True,
        "add_bias_linear": False,
        "hidden_act": "gelu",
        "max_position_embeddings": 8192,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "vocab_size": 1024,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pad_token_id": 0,
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
    }


def bamba() -> dict[str, Any]:
    """Bamba (IBM's Mamba2 + attention hybrid): removed from vLLM after 0.23."""
    return {
        "architectures": ["BambaForCausalLM"],
        "model_type": "bamba",
        "hidden_size": 256,
        "intermediate_size": 512,
        "num_hidden_layers": 4,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "attn_layer_indices": [3],
        "mamba_n_heads": 8,
        "mamba_d_head": 32,
        "mamba_n_groups": 1,
        "mamba_d_state": 64,
        "mamba_d_conv": 4,
        "mamba_expand": 1,
        "mamba_chunk_size": 256,
        "mamba_conv_bias": True,
        "mamba_proj_bias": False,
        "hidden_act": "silu",
        "max_position_embeddings": 8192,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "vocab_size": 1024,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pad_token_id": 0,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }


def mpt() -> dict[str, Any]:
    """MPT (ALiBi): removed from vLLM after 0.28."""
    return {
        "architectures": ["MPTForCausalLM"],
        "model_type": "mpt",
        "d_model": 256,
        "n_heads": 8,
        "n_layers": 4,
        "expansion_ratio": 4,
        "max_seq_len": 2048,
        "attn_config": {"alibi": True, "attn_type": "multihead_attention", "kv_n_heads": 8},
        "no_bias": True,
        "vocab_size": 1024,
        "torch_dtype": "bfloat16",
    }


def chatglm(*, multi_query: bool) -> dict[str, Any]:
    """ChatGLM2/3 / GLM-4-9B-chat (vLLM's own ChatGLMConfig): num_layers, kv_channels, padded_vocab_size, seq_length."""
    return {
        "architectures": ["ChatGLMModel"],
        "model_type": "chatglm",
        "num_layers": 4,
        "hidden_size": 256,
        "ffn_hidden_size": 512,
        "kv_channels": 32,
        "num_attention_heads": 8,
        "multi_query_attention": multi_query,
        "multi_query_group_num": 2,
        "seq_length": 8192,
        "rmsnorm": True,
        "add_bias_linear": False,
        "add_qkv_bias": True,
        "post_layer_norm": True,
        "apply_residual_connection_post_layernorm": False,
        "layernorm_epsilon": 1e-5,
        "original_rope": True,
        "rope_ratio": 1,
        "padded_vocab_size": 1024,
        "vocab_size": 1024,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pad_token_id": 0,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }


def dense_decoder(arch: str, model_type: str, **extra: Any) -> dict[str, Any]:
    """A Llama-shaped dense decoder of another family (4 layers, 8 heads, 2 KV heads, hidden 256)."""
    cfg = llama(layers=4, heads=8, kv_heads=2, head_dim=32, hidden=256)
    del cfg["head_dim"]
    cfg.update({"architectures": [arch], "model_type": model_type, **extra})
    return cfg


def lfm2_moe(layer_types: list[str]) -> dict[str, Any]:
    """LFM2-MoE: LFM2's conv/attention layers, the first num_dense_layers dense, MoE after (conv over hidden)."""
    return {
        "architectures": ["Lfm2MoeForCausalLM"],
        "model_type": "lfm2_moe",
        "hidden_size": 256,
        "intermediate_size": 512,
        "moe_intermediate_size": 128,
        "num_hidden_layers": len(layer_types),
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "layer_types": layer_types,
        "conv_bias": False,
        "conv_L_cache": 3,
        "num_dense_layers": 1,
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "use_expert_bias": True,
        "routed_scaling_factor": 1.0,
        "norm_topk_prob": True,
        "max_position_embeddings": 8192,
        "norm_eps": 1e-5,
        "rope_theta": 1000000.0,
        "vocab_size": 1024,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pad_token_id": 0,
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
    }


def hunyuan_moe() -> dict[str, Any]:
    """Hunyuan MoE V1 (Transformers MoE backend): 4 experts top-2, 2 KV heads × 64, q/k norm."""
    return {
        **hunyuan_dense(),
        "architectures": ["HunYuanMoEV1ForCausalLM"],
        "model_type": "hunyuan_v1_moe",
        "num_experts": 4,
        "moe_topk": 2,
    }


def falcon_new_decoder() -> dict[str, Any]:
    """Falcon-40B-style: new_decoder_architecture, num_kv_heads 2 (multi_query ignored), parallel attention."""
    cfg = falcon_mqa()
    cfg.update({"new_decoder_architecture": True, "num_kv_heads": 2, "multi_query": True})
    return cfg


def with_head_dim(cfg: dict[str, Any], head_dim: int) -> dict[str, Any]:
    """``cfg`` with a ``head_dim`` key that disagrees with hidden_size // num_attention_heads."""
    return {**cfg, "head_dim": head_dim}


def cohere_v1() -> dict[str, Any]:
    """Command-R v1 (CohereForCausalLM): no sliding window, parallel attention + MLP, LayerNorm, logit_scale."""
    cfg = dense_decoder(
        "CohereForCausalLM",
        "cohere",
        logit_scale=0.0625,
        layer_norm_eps=1e-5,
        use_qk_norm=False,
        tie_word_embeddings=True,
    )
    del cfg["rms_norm_eps"]
    return cfg


def gpt2() -> dict[str, Any]:
    """GPT-2: n_embd / n_head / n_layer / n_positions, MHA, learned positions."""
    return {
        "architectures": ["GPT2LMHeadModel"],
        "model_type": "gpt2",
        "n_embd": 256,
        "n_head": 8,
        "n_layer": 4,
        "n_positions": 2048,
        "n_inner": None,
        "activation_function": "gelu_new",
        "layer_norm_epsilon": 1e-5,
        "vocab_size": 1024,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "tie_word_embeddings": True,
        "torch_dtype": "float16",
    }


def mamba1(arch: str = "MambaForCausalLM", model_type: str = "mamba", layers: int = 4) -> dict[str, Any]:
    """Mamba (v1) / FalconMamba: a selective-scan mixer in every layer, expand × hidden channels."""
    return {
        "architectures": [arch],
        "model_type": model_type,
        "hidden_size": 256,
        "num_hidden_layers": layers,
        "state_size": 16,
        "conv_kernel": 4,
        "expand": 2,
        "time_step_rank": 16,
        "use_conv_bias": True,
        "use_bias": False,
        "layer_norm_epsilon": 1e-5,
        "residual_in_fp32": True,
        "vocab_size": 1024,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pad_token_id": 0,
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
        **({"mixer_rms_eps": 1e-6} if model_type == "falcon_mamba" else {}),
    }


def gemma4_text(layers: int = 6) -> dict[str, Any]:
    """Gemma 4 text: 5 sliding : 1 full, sliding heads 32 wide, full layers global_head_dim 64."""
    return {
        "architectures": ["Gemma4ForCausalLM"],
        "model_type": "gemma4_text",
        "hidden_size": 128,
        "intermediate_size": 256,
        "num_hidden_layers": layers,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "global_head_dim": 64,
        "hidden_activation": "gelu_pytorch_tanh",
        "max_position_embeddings": 32768,
        "rms_norm_eps": 1e-6,
        "sliding_window": 512,
        "final_logit_softcapping": None,
        "hidden_size_per_layer_input": 0,
        "vocab_size_per_layer_input": 1024,
        "vocab_size": 1024,
        "bos_token_id": 2,
        "eos_token_id": 1,
        "pad_token_id": 0,
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
    }


def persimmon() -> dict[str, Any]:
    """Persimmon (Adept): removed from vLLM's own models after 0.25; partial rotary, MHA."""
    return {
        "architectures": ["PersimmonForCausalLM"],
        "model_type": "persimmon",
        "hidden_size": 256,
        "intermediate_size": 1024,
        "num_hidden_layers": 4,
        "num_attention_heads": 8,
        "hidden_act": "relu2",
        "max_position_embeddings": 4096,
        "layer_norm_eps": 1e-5,
        "rope_theta": 25000.0,
        "partial_rotary_factor": 0.5,
        "qk_layernorm": True,
        "vocab_size": 1024,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }


def dots1() -> dict[str, Any]:
    """dots.llm1 (Dots1ForCausalLM): removed from vLLM's own models after 0.23; DeepSeek-V3-style MoE on GQA."""
    return dense_decoder(
        "Dots1ForCausalLM",
        "dots1",
        head_dim=32,
        moe_intermediate_size=128,
        n_routed_experts=4,
        n_shared_experts=1,
        num_experts_per_tok=2,
        first_k_dense_replace=1,
        norm_topk_prob=True,
        routed_scaling_factor=1.0,
    )


CASES: list[Case] = [
    Case(
        "llama-mha",
        "Llama, 4 layers, 4 heads = 4 KV heads (MHA), head_dim 32, bf16: 2,048 B/token.",
        llama(layers=4, heads=4, kv_heads=4, head_dim=32, hidden=128),
        max_model_len=2048,
    ),
    Case(
        "llama-gqa",
        "Llama, 4 layers, 8 heads, 2 KV heads (GQA), head_dim 32, bf16: 1,024 B/token.",
        llama(),
        max_model_len=2048,
    ),
    Case(
        "falcon-mqa",
        "Falcon (old decoder architecture) with multi_query=true: 1 KV head, head_dim 32, 4 layers, bf16.",
        falcon_mqa(),
        max_model_len=2048,
    ),
    Case(
        "llama-mqa",
        "Llama with num_key_value_heads=1 (MQA), 8 heads, head_dim 32, 4 layers, bf16.",
        llama(kv_heads=1),
        max_model_len=2048,
    ),
    Case(
        "llama-gqa-fp8kv",
        "Case llama-gqa with --kv-cache-dtype fp8 (1 byte per element); the CPU backend needs AVX-512 or AMX.",
        llama(),
        max_model_len=2048,
        extra_args=("--kv-cache-dtype", "fp8"),
    ),
    Case(
        "llama-gqa-fp32",
        "Case llama-gqa with torch_dtype float32 and dtype auto: vLLM downcasts float32 to bfloat16.",
        llama(dtype="float32"),
        max_model_len=2048,
    ),
    Case(
        "llama-gqa-dtype-fp32",
        "Case llama-gqa with torch_dtype float32 and --dtype float32 (4 bytes per element).",
        llama(dtype="float32"),
        max_model_len=2048,
        extra_args=("--dtype", "float32"),
    ),
    Case(
        "mistral-sliding",
        "Mistral, 4 layers, all sliding_window=256, max_model_len 4096 > window.",
        mistral_sliding(256),
        max_model_len=4096,
        extra_args=SCHED_ARGS,
    ),
    Case(
        "gemma3-hybrid-6l",
        "Gemma 3 text, 6 layers, sliding_window_pattern 6 (5 sliding 512 : 1 full), 1 KV head, head_dim 32.",
        gemma3_text(6),
        max_model_len=8192,
        extra_args=SCHED_ARGS,
    ),
    Case(
        "gemma3-hybrid-12l",
        "Gemma 3 text, 12 layers (10 sliding 512 : 2 full), 1 KV head, head_dim 32.",
        gemma3_text(12),
        max_model_len=8192,
        extra_args=SCHED_ARGS,
    ),
    Case(
        "gemma3-hybrid-15l-padded",
        "Gemma 3 text, 15 layers (13 sliding : 2 full): sliding layers padded to a multiple of 2.",
        gemma3_text(15),
        max_model_len=8192,
        extra_args=SCHED_ARGS,
    ),
    Case(
        "gemma2-hybrid-4l",
        "Gemma 2, 4 layers alternating sliding 512 / full, 2 KV heads, head_dim 32.",
        gemma2(4),
        max_model_len=4096,
        extra_args=SCHED_ARGS,
    ),
    Case(
        "gemma2-hybrid-5l-padded",
        "Gemma 2, 5 layers (3 sliding : 2 full): sliding layers padded to a multiple of 2.",
        gemma2(5),
        max_model_len=4096,
        extra_args=SCHED_ARGS,
    ),
    Case(
        "deepseek-v2-mla",
        "DeepSeek-V2 MLA, 2 dense layers, kv_lora_rank 512 + qk_rope_head_dim 64 = 576-wide latent, bf16.",
        deepseek_v2_mla(),
        max_model_len=2048,
    ),
    Case(
        "gpt-oss-hybrid",
        "gpt-oss, 4 layers alternating sliding 128 / full, 2 KV heads, head_dim 32.",
        gpt_oss(4),
        max_model_len=4096,
        extra_args=SCHED_ARGS,
    ),
    Case(
        "qwen3-next-hybrid",
        "Qwen3-Next, 4 layers (3 gated-delta-net linear attention : 1 full attention).",
        qwen3_next(4),
        max_model_len=4096,
        extra_args=SCHED_ARGS,
    ),
    Case(
        "llama-gqa-block32",
        "Case llama-gqa with --block-size 32 (the CPU attention backend takes multiples of 32 only).",
        llama(),
        max_model_len=2048,
        extra_args=("--block-size", "32"),
    ),
    Case(
        "llama-gqa-kvbytes",
        "Case llama-gqa with --kv-cache-memory-bytes 1073741824 instead of VLLM_CPU_KVCACHE_SPACE.",
        llama(),
        max_model_len=2048,
        kv_cache_space_gib=None,
        kv_cache_memory_bytes=GIB,
    ),
    Case(
        "llama-gqa-kvbytes-odd",
        "Case llama-gqa with --kv-cache-memory-bytes 1000000007 (not a multiple of the 128 KiB block).",
        llama(),
        max_model_len=2048,
        kv_cache_space_gib=None,
        kv_cache_memory_bytes=1_000_000_007,
    ),
    Case(
        "llama-gqa-tp2",
        "Case llama-gqa with --tensor-parallel-size 2 (1 KV head per rank), one core per rank.",
        llama(),
        max_model_len=2048,
        extra_args=("--tensor-parallel-size", "2"),
        env={"VLLM_CPU_OMP_THREADS_BIND": "0|1", "VLLM_CPU_NUM_OF_RESERVED_CPU": "0"},
    ),
    Case(
        "llama-mqa-tp2",
        "Case llama-mqa with --tensor-parallel-size 2: 1 KV head < 2 ranks, so the head is replicated.",
        llama(kv_heads=1),
        max_model_len=2048,
        extra_args=("--tensor-parallel-size", "2"),
        env={"VLLM_CPU_OMP_THREADS_BIND": "0|1", "VLLM_CPU_NUM_OF_RESERVED_CPU": "0"},
    ),
    # --- newer families --------------------------------------------------------------------------------------
    Case(
        "granite-hybrid-mamba2",
        "Granite 4.0 hybrid: 3 Mamba2 layers (8 heads × 32, state 64, 1 group, conv 4) : 1 attention layer.",
        granite_hybrid(["mamba", "mamba", "mamba", "attention"]),
        max_model_len=4096,
        extra_args=SCHED_ARGS,
    ),
    Case(
        "nemotron-h-hybrid",
        "Nemotron-H, pattern M-M*- : 2 Mamba2 layers, 1 attention layer, 3 MLP-only layers (no cache).",
        nemotron_h("M-M*-"),
        max_model_len=4096,
        extra_args=SCHED_ARGS,
    ),
    Case(
        "llama4-chunked",
        "Llama 4 text, 4 layers: chunked attention (256) on the 3 RoPE layers, full attention on the NoPE one.",
        llama4_text(4, 256),
        max_model_len=4096,
        extra_args=SCHED_ARGS,
    ),
    Case(
        "gemma3n-kv-shared",
        "Gemma 3n text, 6 layers (sliding 256 / full every 3rd), the last 2 layers share earlier layers' KV.",
        gemma3n_text(6, 2),
        max_model_len=4096,
        extra_args=SCHED_ARGS,
    ),
    # --- serving features ------------------------------------------------------------------------------------
    Case(
        "llama-gqa-lora",
        "Case llama-gqa with --enable-lora --max-loras 2 --max-lora-rank 8 (the CPU KV budget is fixed).",
        llama(),
        max_model_len=2048,
        extra_args=("--enable-lora", "--max-loras", "2", "--max-lora-rank", "8"),
    ),
    Case(
        "llama-gqa-ngram",
        "Case llama-gqa with n-gram speculative decoding (2 speculative tokens): no weights, no KV layers.",
        llama(),
        max_model_len=2048,
        extra_args=(
            "--speculative-config",
            '{"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 3, "prompt_lookup_min": 1}',
        ),
    ),
    Case(
        "llama-gqa-draft",
        "Case llama-gqa with a 2-layer draft model (2 speculative tokens): its KV layers share the pool.",
        llama(),
        max_model_len=2048,
        extra_args=("--speculative-config", '{"model": "{draft}", "num_speculative_tokens": 2}'),
        draft_config=llama(layers=2),
    ),
    Case(
        "llama-gqa-eagle",
        "Case llama-gqa with an EAGLE head (1 Llama layer, 2 speculative tokens): its layer shares the pool.",
        llama(),
        max_model_len=2048,
        extra_args=(
            "--speculative-config",
            '{"method": "eagle", "model": "{draft}", "num_speculative_tokens": 2}',
        ),
        draft_config=llama(layers=1),
    ),
    Case(
        "mamba2-pure",
        "Mamba2, 4 layers, attention-free (8 heads × 32, state 64, 1 group, conv 4).",
        mamba2_pure(4),
        max_model_len=4096,
        extra_args=SCHED_ARGS,
    ),
    Case(
        "jamba-hybrid",
        "Jamba, 4 layers: 3 Mamba1 layers (expand 2, state 16, conv 4) and attention at layer 3; MoE every 2nd.",
        jamba(4),
        max_model_len=4096,
        extra_args=SCHED_ARGS,
    ),
    Case(
        "mistral-no-sliding",
        "Mistral, 4 layers, sliding_window 2048, with --disable-sliding-window: every layer full attention, "
        "max_model_len at the window.",
        mistral_sliding(2048),
        max_model_len=2048,
        extra_args=(*SCHED_ARGS, "--disable-sliding-window"),
    ),
    Case(
        "gemma2-no-sliding",
        "Gemma 2, 4 layers alternating sliding 512 / full, with --disable-sliding-window: four full layers, "
        "max_model_len at the window.",
        gemma2(4),
        max_model_len=512,
        extra_args=(*SCHED_ARGS, "--disable-sliding-window"),
    ),
    # --- refusals --------------------------------------------------------------------------------------------
    Case(
        "llama-gqa-maxlen-over-derived-refused",
        "Case llama-gqa (max_position_embeddings 8192) with --max-model-len 16384.",
        llama(),
        max_model_len=16384,
        expect_refusal=True,
    ),
    Case(
        "mistral-no-sliding-maxlen-refused",
        "Mistral, sliding_window 2048, --disable-sliding-window and --max-model-len 4096: above the capped length.",
        mistral_sliding(2048),
        max_model_len=4096,
        extra_args=(*SCHED_ARGS, "--disable-sliding-window"),
        expect_refusal=True,
    ),
    Case(
        "cohere2-no-sliding-refused",
        "Cohere 2, 4 layers (3 sliding : 1 full), --disable-sliding-window: its attention adds 1 to the removed window.",
        cohere2(4, 256),
        max_model_len=256,
        extra_args=(*SCHED_ARGS, "--disable-sliding-window"),
        expect_refusal=True,
    ),
    Case(
        "llama-gqa-no-chunked-prefill-refused",
        "Case llama-gqa without chunked prefill and --max-num-batched-tokens 1024 < max_model_len 2048.",
        llama(),
        max_model_len=2048,
        extra_args=("--no-enable-chunked-prefill", "--max-num-batched-tokens", "1024"),
        expect_refusal=True,
    ),
    Case(
        "llama-tp-heads-refused",
        "Llama with 6 attention heads (3 KV heads) and --tensor-parallel-size 4.",
        llama(heads=6, kv_heads=3, head_dim=32, hidden=192),
        max_model_len=2048,
        extra_args=("--tensor-parallel-size", "4"),
        expect_refusal=True,
    ),
    Case(
        "llama-gqa-block16-refused",
        "Case llama-gqa with --block-size 16: the CPU attention backend takes multiples of 32 only.",
        llama(),
        max_model_len=2048,
        extra_args=("--block-size", "16"),
        expect_refusal=True,
    ),
    Case(
        "llama-gqa-maxlen-refused",
        "Case llama-gqa with a 100,000,000-byte KV budget (97,656 tokens) and max_model_len 131,072.",
        {**llama(), "max_position_embeddings": 131072},
        max_model_len=131072,
        kv_cache_space_gib=None,
        kv_cache_memory_bytes=100_000_000,
        expect_refusal=True,
    ),
    # --- families and features recorded 2026-12-03 ------------------------------------------------------------
    Case(
        "qwen3-moe",
        "Qwen3-MoE, 4 layers all sparse (4 experts top-2), 2 KV heads, head_dim 64, bf16.",
        qwen3_moe(4),
        max_model_len=2048,
    ),
    Case(
        "qwen3-moe-sliding",
        "Qwen3-MoE with use_sliding_window true (window 256) and max_window_layers 2 of 4.",
        {**qwen3_moe(4), "use_sliding_window": True, "sliding_window": 256, "max_window_layers": 2},
        max_model_len=4096,
        extra_args=SCHED_ARGS,
    ),
    Case(
        "qwen2-no-sliding",
        "Qwen2 with sliding_window 256 but use_sliding_window false: full attention everywhere.",
        qwen2(use_sliding_window=False, max_window_layers=2),
        max_model_len=4096,
        extra_args=SCHED_ARGS,
    ),
    Case(
        "qwen2-sliding-all",
        "Qwen2 with use_sliding_window true and max_window_layers 0: every layer slides (256).",
        qwen2(use_sliding_window=True, max_window_layers=0),
        max_model_len=4096,
        extra_args=SCHED_ARGS,
    ),
    Case(
        "qwen2-sliding-partial-refused",
        "Qwen2 with use_sliding_window true and max_window_layers 2 of 4: vLLM's Qwen2 asserts all or none slide.",
        qwen2(use_sliding_window=True, max_window_layers=2),
        max_model_len=4096,
        extra_args=SCHED_ARGS,
        expect_refusal=True,
    ),
    Case(
        "qwen3-sliding-partial-refused",
        "Qwen3 (dense, head_dim 64, q/k norm) with use_sliding_window true and max_window_layers 2 of 4: Qwen3Model "
        "inherits Qwen2Model's assertion.",
        {
            **qwen2(use_sliding_window=True, max_window_layers=2),
            "architectures": ["Qwen3ForCausalLM"],
            "model_type": "qwen3",
            "head_dim": 64,
            "num_attention_heads": 4,
        },
        max_model_len=4096,
        extra_args=SCHED_ARGS,
        expect_refusal=True,
    ),
    Case(
        "mixtral-moe",
        "Mixtral, 4 layers (4 experts top-2), sliding_window null: full attention, 2 KV heads, head_dim 32.",
        mixtral(),
        max_model_len=4096,
        extra_args=SCHED_ARGS,
    ),
    Case(
        "phi3-sliding",
        "Phi-3, 4 layers MHA (8 heads × 32), sliding_window 255 on every layer.",
        phi3(255),
        max_model_len=4096,
        extra_args=SCHED_ARGS,
    ),
    Case(
        "cohere2-interleaved",
        "Cohere 2 (Command R7B), 4 layers, sliding_window_pattern 4: 3 sliding (256) : 1 full.",
        cohere2(4, 256),
        max_model_len=4096,
        extra_args=SCHED_ARGS,
    ),
    Case(
        "cohere2-window-edge",
        "Cohere 2, 4 layers (3 sliding : 1 full), sliding_window 257: vLLM's +1 (258) crosses a 128-token block edge.",
        cohere2(4, 257),
        max_model_len=4096,
        extra_args=SCHED_ARGS,
    ),
    Case(
        "qwen2-moe-sliding",
        "Qwen2-MoE, 4 layers, use_sliding_window true, max_window_layers 2: vLLM's model slides every layer (256).",
        qwen2_moe(use_sliding_window=True, max_window_layers=2),
        max_model_len=4096,
        extra_args=SCHED_ARGS,
    ),
    Case(
        "olmo2",
        "OLMo 2, 4 layers MHA (4 heads × 64), bf16.",
        olmo2(),
        max_model_len=2048,
    ),
    Case(
        "glm4-partial-rotary",
        "GLM-4-0414, 4 layers, partial_rotary_factor 0.5, 2 KV heads, head_dim 64.",
        glm4(),
        max_model_len=2048,
    ),
    Case(
        "gemma-mqa-hd256",
        "Gemma (v1), 2 layers, 1 KV head of head_dim 256 (MQA), bf16.",
        gemma1(),
        max_model_len=2048,
    ),
    Case(
        "deepseek-v2-lite-moe",
        "DeepSeek-V2-Lite-like MLA (512 + 64), 3 layers: first_k_dense_replace 1, then 2 MoE layers.",
        deepseek_v2_lite(3),
        max_model_len=2048,
    ),
    Case(
        "deepseek-v2-mla-latent320",
        "DeepSeek-V2 MLA, 2 dense layers, kv_lora_rank 256 + qk_rope_head_dim 64 = a 320-wide latent.",
        deepseek_v2_mla(kv_lora_rank=256, rope_dim=64),
        max_model_len=2048,
    ),
    Case(
        "deepseek-v2-mla-fp8",
        "Case deepseek-v2-mla with --kv-cache-dtype fp8 (the CPU MLA backend lists only auto).",
        deepseek_v2_mla(),
        max_model_len=2048,
        extra_args=("--kv-cache-dtype", "fp8"),
    ),
    Case(
        "phi3-sliding-cpu-defaults",
        "Case phi3-sliding without scheduler flags: the CPU defaults of max_num_batched_tokens and max_num_seqs.",
        phi3(255),
        max_model_len=4096,
    ),
    Case(
        "mistral-sliding-mnbt512",
        "Case mistral-sliding with --max-num-batched-tokens 512 --max-num-seqs 64 (a shorter in-flight span).",
        mistral_sliding(256),
        max_model_len=4096,
        extra_args=("--max-num-batched-tokens", "512", "--max-num-seqs", "64"),
    ),
    Case(
        "gpt-bigcode-mqa",
        "GPT-BigCode, 4 layers, 8 heads × 32, multi_query true (transformers sets 1 KV head), bf16.",
        gpt_bigcode(),
        max_model_len=2048,
    ),
    Case(
        "olmo3-interleaved",
        "OLMo 3, 4 layers, sliding_window 256 and no layer_types: transformers fills 3 sliding : 1 full.",
        olmo3(4, 256),
        max_model_len=4096,
        extra_args=SCHED_ARGS,
    ),
    Case(
        "starcoder2-sliding",
        "StarCoder 2, 4 layers, a bare sliding_window 256 (every layer slides), 2 KV heads × 32.",
        starcoder2(256),
        max_model_len=4096,
        extra_args=SCHED_ARGS,
    ),
    Case(
        "exaone4-default-pattern",
        "EXAONE 4.0, 4 layers, sliding_window 256 with no pattern in the file: transformers' default of 4 (3 : 1).",
        exaone4(4, 256),
        max_model_len=4096,
        extra_args=SCHED_ARGS,
    ),
    Case(
        "mistral-window-over-len",
        "Mistral, 4 layers, sliding_window 4096 with max_model_len 2048 (the window spans every request).",
        mistral_sliding(4096),
        max_model_len=2048,
        extra_args=SCHED_ARGS,
    ),
    Case(
        "llama-hd80",
        "Llama, 4 layers, 4 heads, 2 KV heads of head_dim 80 (not a multiple of 32: the CPU kernel's vec16 path).",
        llama(heads=4, kv_heads=2, head_dim=80, hidden=320),
        max_model_len=2048,
    ),
    Case(
        "llama-hd80-fp8-refused",
        "Case llama-hd80 with --kv-cache-dtype fp8: the CPU backend's fp8 KV needs head_size divisible by 32.",
        llama(heads=4, kv_heads=2, head_dim=80, hidden=320),
        max_model_len=2048,
        extra_args=("--kv-cache-dtype", "fp8"),
        expect_refusal=True,
    ),
    Case(
        "llama-gqa-block48-refused",
        "Case llama-gqa with --block-size 48: over 32 but not a multiple of 32.",
        llama(),
        max_model_len=2048,
        extra_args=("--block-size", "48"),
        expect_refusal=True,
    ),
    Case(
        "llama-gqa-seqs-over-batched-refused",
        "Case llama-gqa with --max-num-seqs 256 and --max-num-batched-tokens 128 (fewer tokens than sequences).",
        llama(),
        max_model_len=2048,
        extra_args=("--max-num-batched-tokens", "128", "--max-num-seqs", "256"),
        expect_refusal=True,
    ),
    # --- families and features recorded for issue #12 ----------------------------------------------------------
    Case(
        "phimoe-sliding",
        "Phi-3.5-MoE-style PhiMoE, 4 layers (4 experts top-2), a bare sliding_window 256 on every layer.",
        phimoe(256),
        max_model_len=4096,
        extra_args=SCHED_ARGS,
    ),
    Case(
        "granitemoe",
        "Granite 3.0 MoE (GraniteMoeForCausalLM), 4 layers (4 experts top-2), 2 KV heads × 32.",
        granitemoe(),
        max_model_len=2048,
    ),
    Case(
        "dbrx-moe",
        "DBRX, 4 layers (4 experts top-2), 8 heads, attn_config.kv_n_heads 2, d_model 256: head 32.",
        dbrx(),
        max_model_len=2048,
    ),
    Case(
        "olmoe",
        "OLMoE, 4 layers all sparse (4 experts top-2), MHA 8 heads × 32.",
        olmoe(),
        max_model_len=2048,
    ),
    Case(
        "glm4-moe",
        "GLM-4.5 MoE, 3 layers (first dense), 2 KV heads × 64, partial rotary 0.5, one MTP layer not served.",
        glm4_moe(),
        max_model_len=2048,
    ),
    Case(
        "ernie45-moe",
        "ERNIE 4.5 MoE, 3 layers (moe_layer_start_index 1), 2 KV heads × 64.",
        ernie45_moe(),
        max_model_len=2048,
    ),
    Case(
        "bloom-alibi",
        "BLOOM, 4 layers MHA 8 × 32 with ALiBi, no length key in the config (vLLM's 2048 default).",
        bloom(),
        max_model_len=2048,
    ),
    Case(
        "gpt-neox",
        "GPT-NeoX (Pythia-style), 4 layers MHA 8 × 32, rotary_pct 0.25, fp16.",
        gpt_neox(),
        max_model_len=2048,
    ),
    Case(
        "gptj",
        "GPT-J, 4 layers MHA 8 × 32, rotary_dim 16, fp16.",
        gptj(),
        max_model_len=2048,
    ),
    Case(
        "opt",
        "OPT, 4 layers MHA 8 × 32, learned positions (2048), fp16.",
        opt(),
        max_model_len=2048,
    ),
    Case(
        "minicpm3-mla-like",
        "MiniCPM3, 4 layers, 4 heads: MLA-style projections (kv_lora_rank 64) but K and V cached per head (32 + 32).",
        minicpm3(),
        max_model_len=2048,
    ),
    Case(
        "hunyuan-dense",
        "Hunyuan dense V1, 4 layers, 2 KV heads × 64, q/k norm.",
        hunyuan_dense(),
        max_model_len=2048,
    ),
    Case(
        "falcon-h1-parallel-hybrid",
        "Falcon-H1, 4 layers each with attention (2 KV heads × 32) and a Mamba2 mixer (8 heads × 32, state 64).",
        falcon_h1(4),
        max_model_len=4096,
        extra_args=SCHED_ARGS,
    ),
    Case(
        "lfm2-conv-hybrid",
        "LFM2, 4 layers: 3 short-convolution layers (L_cache 3) : 1 attention layer (2 KV heads × 32).",
        lfm2(["conv", "conv", "full_attention", "conv"]),
        max_model_len=4096,
        extra_args=SCHED_ARGS,
    ),
    Case(
        "llama-gqa-fp8-e5m2",
        "Case llama-gqa with --kv-cache-dtype fp8_e5m2.",
        llama(),
        max_model_len=2048,
        extra_args=("--kv-cache-dtype", "fp8_e5m2"),
    ),
    Case(
        "llama-gqa-fp8-e4m3",
        "Case llama-gqa with --kv-cache-dtype fp8_e4m3.",
        llama(),
        max_model_len=2048,
        extra_args=("--kv-cache-dtype", "fp8_e4m3"),
    ),
    Case(
        "llama-gqa-maxlen-null-block-edge",
        "Case llama-gqa-maxlen-refused with max_model_len 97,408: 762 blocks of 128, one is the null block, 761 hold it.",
        {**llama(), "max_position_embeddings": 131072},
        max_model_len=97408,
        kv_cache_space_gib=None,
        kv_cache_memory_bytes=100_000_000,
    ),
    Case(
        "llama-gqa-maxlen-all-blocks-refused",
        "Case llama-gqa-maxlen-null-block-edge with max_model_len 97,536: all 762 blocks, but one is the null block.",
        {**llama(), "max_position_embeddings": 131072},
        max_model_len=97536,
        kv_cache_space_gib=None,
        kv_cache_memory_bytes=100_000_000,
        expect_refusal=True,
    ),
    Case(
        "mistral-sliding-small-budget-long-len",
        "Mistral (all layers sliding 256) with a 16 MiB budget and max_model_len 65,536: the window, not the length, sizes a request.",
        {**mistral_sliding(256), "max_position_embeddings": 65536},
        max_model_len=65536,
        kv_cache_space_gib=None,
        kv_cache_memory_bytes=16 * 2**20,
        extra_args=SCHED_ARGS,
    ),
    Case(
        "granite-hybrid-no-prefix-caching",
        "Case granite-hybrid-mamba2 with --no-enable-prefix-caching (mamba cache mode none).",
        granite_hybrid(["mamba", "mamba", "mamba", "attention"]),
        max_model_len=4096,
        extra_args=(*SCHED_ARGS, "--no-enable-prefix-caching"),
    ),
    Case(
        "granite-hybrid-block256",
        "Case granite-hybrid-mamba2 with --block-size 256.",
        granite_hybrid(["mamba", "mamba", "mamba", "attention"]),
        max_model_len=4096,
        extra_args=(*SCHED_ARGS, "--block-size", "256"),
    ),
    Case(
        "qwen3-next-block64",
        "Case qwen3-next-hybrid with --block-size 64.",
        qwen3_next(4),
        max_model_len=4096,
        extra_args=(*SCHED_ARGS, "--block-size", "64"),
    ),
    Case(
        "gemma3-hybrid-6l-fp8",
        "Case gemma3-hybrid-6l with --kv-cache-dtype fp8.",
        gemma3_text(6),
        max_model_len=8192,
        extra_args=(*SCHED_ARGS, "--kv-cache-dtype", "fp8"),
    ),
    Case(
        "granite-hybrid-fp8kv",
        "Case granite-hybrid-mamba2 with --kv-cache-dtype fp8 (attention pages halve; the Mamba state keeps its dtypes).",
        granite_hybrid(["mamba", "mamba", "mamba", "attention"]),
        max_model_len=4096,
        extra_args=(*SCHED_ARGS, "--kv-cache-dtype", "fp8"),
    ),
    Case(
        "zamba2-hybrid",
        "Zamba2, 4 Mamba2 layers (8 heads × 32, state 64), the 3rd a hybrid one with shared attention (8 KV heads × 64).",
        zamba2(["mamba", "mamba", "hybrid", "mamba"]),
        max_model_len=4096,
        extra_args=SCHED_ARGS,
    ),
    Case(
        "bamba-removed-refused",
        "Bamba (BambaForCausalLM): gone from vLLM's models after v0.23.0, the Transformers backend refuses its Mamba2 layers.",
        bamba(),
        max_model_len=2048,
        expect_refusal=True,
    ),
    Case(
        "mpt-alibi-removed-refused",
        "MPT with ALiBi (MPTForCausalLM): vLLM's registry lists it as supported until v0.28.0.",
        mpt(),
        max_model_len=2048,
        expect_refusal=True,
    ),
    Case(
        "chatglm-mqa",
        "ChatGLM (GLM-4-9B-chat-style), 4 layers, multi_query_attention with multi_query_group_num 2, head 32.",
        chatglm(multi_query=True),
        max_model_len=2048,
    ),
    Case(
        "chatglm-mha-group-ignored",
        "ChatGLM with multi_query_group_num 2 but multi_query_attention false: every one of 8 heads is cached.",
        chatglm(multi_query=False),
        max_model_len=2048,
    ),
    Case(
        "qwen3-dense-hd64",
        "Qwen3 dense, 4 layers, 4 heads, 2 KV heads of head_dim 64 (wider than hidden / heads = 32), q/k norm.",
        dense_decoder(
            "Qwen3ForCausalLM",
            "qwen3",
            num_attention_heads=4,
            head_dim=64,
            use_sliding_window=False,
            sliding_window=None,
            max_window_layers=4,
            rope_theta=1000000.0,
        ),
        max_model_len=2048,
    ),
    Case(
        "stablelm-partial-rotary",
        "StableLM 2, 4 layers, 2 KV heads × 32, partial_rotary_factor 0.25, qkv bias.",
        dense_decoder(
            "StableLmForCausalLM",
            "stablelm",
            partial_rotary_factor=0.25,
            use_qkv_bias=True,
            qk_layernorm=False,
            use_parallel_residual=False,
            layer_norm_eps=1e-5,
            hidden_act="silu",
        ),
        max_model_len=2048,
    ),
    Case(
        "phi2-mha",
        "Phi-2 (PhiForCausalLM, Transformers backend), 4 layers MHA 8 × 32, partial_rotary_factor 0.5, fp16.",
        {
            **dense_decoder(
                "PhiForCausalLM",
                "phi",
                partial_rotary_factor=0.5,
                hidden_act="gelu_new",
                layer_norm_eps=1e-5,
                qk_layernorm=False,
                max_position_embeddings=2048,
                torch_dtype="float16",
            ),
            "num_key_value_heads": None,
        },
        max_model_len=2048,
    ),
    Case(
        "nemotron-dense",
        "Nemotron (Minitron-style), 4 layers, 2 KV heads × head_dim 48, partial_rotary_factor 0.5, relu2.",
        dense_decoder(
            "NemotronForCausalLM",
            "nemotron",
            head_dim=48,
            partial_rotary_factor=0.5,
            hidden_act="relu2",
            norm_eps=1e-5,
        ),
        max_model_len=2048,
    ),
    Case(
        "granite-dense",
        "Granite 3 dense (GraniteForCausalLM), 4 layers, 2 KV heads × 32, the Granite multipliers.",
        dense_decoder(
            "GraniteForCausalLM",
            "granite",
            attention_multiplier=0.0078125,
            embedding_multiplier=12.0,
            residual_multiplier=0.22,
            logits_scaling=8.0,
            tie_word_embeddings=True,
        ),
        max_model_len=2048,
    ),
    Case(
        "seed-oss",
        "Seed-OSS (Transformers backend), 4 layers, 4 heads, 2 KV heads of head_dim 64, attention bias.",
        dense_decoder(
            "SeedOssForCausalLM",
            "seed_oss",
            num_attention_heads=4,
            head_dim=64,
            attention_bias=True,
            attention_out_bias=False,
        ),
        max_model_len=2048,
    ),
    Case(
        "qwen3-next-no-prefix-caching",
        "Case qwen3-next-hybrid with --no-enable-prefix-caching: one gated-DeltaNet state page per request.",
        qwen3_next(4),
        max_model_len=4096,
        extra_args=(*SCHED_ARGS, "--no-enable-prefix-caching"),
    ),
    Case(
        "jamba-no-prefix-caching",
        "Case jamba-hybrid with --no-enable-prefix-caching (Mamba1 state, mamba cache mode none).",
        jamba(4),
        max_model_len=4096,
        extra_args=(*SCHED_ARGS, "--no-enable-prefix-caching"),
    ),
    Case(
        "mistral-sliding-budget-edge",
        "Mistral (sliding 256), max_model_len 65,536, a budget of 20 blocks: 19 hold one request's window, 1 is the null block.",
        {**mistral_sliding(256), "max_position_embeddings": 65536},
        max_model_len=65536,
        kv_cache_space_gib=None,
        kv_cache_memory_bytes=20 * 131072,
        extra_args=SCHED_ARGS,
    ),
    Case(
        "mistral-sliding-budget-edge-refused",
        "Case mistral-sliding-budget-edge with one byte less: 19 blocks, one the null block, 18 < the window's 19.",
        {**mistral_sliding(256), "max_position_embeddings": 65536},
        max_model_len=65536,
        kv_cache_space_gib=None,
        kv_cache_memory_bytes=20 * 131072 - 1,
        extra_args=SCHED_ARGS,
        expect_refusal=True,
    ),
    Case(
        "granite-hybrid-maxlen-edge",
        "Granite 4.0 hybrid (3 Mamba2 : 1 attention) with an 8 MiB budget and max_model_len 28,800, the longest that fits.",
        {**granite_hybrid(["mamba", "mamba", "mamba", "attention"]), "max_position_embeddings": 65536},
        max_model_len=28800,
        kv_cache_space_gib=None,
        kv_cache_memory_bytes=8 * 2**20,
        extra_args=SCHED_ARGS,
    ),
    Case(
        "granite-hybrid-maxlen-edge-refused",
        "Case granite-hybrid-maxlen-edge with max_model_len 28,801.",
        {**granite_hybrid(["mamba", "mamba", "mamba", "attention"]), "max_position_embeddings": 65536},
        max_model_len=28801,
        kv_cache_space_gib=None,
        kv_cache_memory_bytes=8 * 2**20,
        extra_args=SCHED_ARGS,
        expect_refusal=True,
    ),
    Case(
        "lfm2-moe-conv-hybrid",
        "LFM2-MoE, 4 layers (conv, conv, attention, conv), the first dense, then 4 experts top-2; conv state over hidden.",
        lfm2_moe(["conv", "conv", "full_attention", "conv"]),
        max_model_len=4096,
        extra_args=SCHED_ARGS,
    ),
    Case(
        "hunyuan-moe",
        "Hunyuan MoE V1, 4 layers (4 experts top-2), 2 KV heads × 64.",
        hunyuan_moe(),
        max_model_len=2048,
    ),
    Case(
        "falcon-new-decoder-gqa",
        "Falcon with new_decoder_architecture: num_kv_heads 2 (multi_query ignored), head 32, 4 layers.",
        falcon_new_decoder(),
        max_model_len=2048,
    ),
    Case(
        "granite-hybrid-tp2",
        "Case granite-hybrid-mamba2 with --tensor-parallel-size 2: 1 KV head and 4 Mamba2 heads per rank, the group replicated.",
        granite_hybrid(["mamba", "mamba", "mamba", "attention"]),
        max_model_len=4096,
        extra_args=(*SCHED_ARGS, "--tensor-parallel-size", "2"),
        env={"VLLM_CPU_OMP_THREADS_BIND": "0|1", "VLLM_CPU_NUM_OF_RESERVED_CPU": "0"},
    ),
    Case(
        "deepseek-v2-mla-tp2",
        "Case deepseek-v2-mla with --tensor-parallel-size 2: the 576-wide latent is not split by TP.",
        deepseek_v2_mla(),
        max_model_len=2048,
        extra_args=("--tensor-parallel-size", "2"),
        env={"VLLM_CPU_OMP_THREADS_BIND": "0|1", "VLLM_CPU_NUM_OF_RESERVED_CPU": "0"},
    ),
    Case(
        "lfm2-conv-state-fp32",
        "Case lfm2-conv-hybrid with --mamba-cache-dtype float32 (the conv state in 4 bytes).",
        lfm2(["conv", "conv", "full_attention", "conv"]),
        max_model_len=4096,
        extra_args=(*SCHED_ARGS, "--mamba-cache-dtype", "float32"),
    ),
    Case(
        "falcon-h1-fp8kv",
        "Case falcon-h1-parallel-hybrid with --kv-cache-dtype fp8 (attention pages halve, the Mamba2 state does not).",
        falcon_h1(4),
        max_model_len=4096,
        extra_args=(*SCHED_ARGS, "--kv-cache-dtype", "fp8"),
    ),
    Case(
        "zamba2-no-prefix-caching",
        "Case zamba2-hybrid with --no-enable-prefix-caching.",
        zamba2(["mamba", "mamba", "hybrid", "mamba"]),
        max_model_len=4096,
        extra_args=(*SCHED_ARGS, "--no-enable-prefix-caching"),
    ),
    Case(
        "cohere-command-r-v1",
        "Command-R v1 (CohereForCausalLM), 4 layers, 2 KV heads × 32, no sliding window.",
        cohere_v1(),
        max_model_len=2048,
    ),
    Case(
        "gpt2-mha",
        "GPT-2, 4 layers, 8 heads = 8 KV heads × 32 (MHA), n_positions 2,048, fp16.",
        gpt2(),
        max_model_len=2048,
    ),
    Case(
        "mamba1-pure",
        "Mamba (v1), 4 layers, expand 2 × hidden 256, state 16, conv 4: one constant state page per request.",
        mamba1(),
        max_model_len=4096,
        extra_args=SCHED_ARGS,
    ),
    Case(
        "falcon-mamba-pure",
        "FalconMamba (Mamba v1 mixer with RMS-normed B/C/dt), 4 layers, expand 2 × 256, state 16.",
        mamba1("FalconMambaForCausalLM", "falcon_mamba"),
        max_model_len=4096,
        extra_args=SCHED_ARGS,
    ),
    Case(
        "olmo1",
        "OLMo 1 (OlmoForCausalLM, Transformers backend), 4 layers, MHA 8 × 32, clip_qkv.",
        dense_decoder("OlmoForCausalLM", "olmo", num_key_value_heads=8, clip_qkv=8.0, attention_bias=False),
        max_model_len=2048,
    ),
    Case(
        "glm-dense-partial-rotary",
        "GLM (GlmForCausalLM, Transformers backend), 4 layers, 2 KV heads × head_dim 64, partial_rotary_factor 0.5.",
        dense_decoder(
            "GlmForCausalLM",
            "glm",
            num_attention_heads=4,
            head_dim=64,
            partial_rotary_factor=0.5,
            attention_bias=True,
            pad_token_id=0,  # GlmConfig's default (151329) is outside the shrunk vocabulary
        ),
        max_model_len=2048,
    ),
    Case(
        "arcee",
        "Arcee (AFM, ArceeForCausalLM, Transformers backend), 4 layers, 2 KV heads × 32, relu2 MLP.",
        dense_decoder("ArceeForCausalLM", "arcee", hidden_act="relu2"),
        max_model_len=2048,
    ),
    Case(
        "apertus",
        "Apertus (ApertusForCausalLM), 4 layers, 2 KV heads × head_dim 48, xIELU, q/k norm.",
        dense_decoder("ApertusForCausalLM", "apertus", head_dim=48, hidden_act="xielu", qk_norm=True),
        max_model_len=2048,
    ),
    Case(
        "ernie45-dense",
        "ERNIE 4.5 dense (Ernie4_5ForCausalLM), 4 layers, 2 KV heads × head_dim 64.",
        dense_decoder("Ernie4_5ForCausalLM", "ernie4_5", num_attention_heads=4, head_dim=64, use_bias=False),
        max_model_len=2048,
    ),
    Case(
        "persimmon-transformers-fallback",
        "Persimmon (removed from vLLM's own models after 0.25) starts on the Transformers backend: MHA 8 × 32.",
        persimmon(),
        max_model_len=2048,
    ),
    Case(
        "dots1-transformers-fallback",
        "dots.llm1 (removed from vLLM's own models after 0.23) starts on the Transformers MoE backend: 2 KV heads × 32.",
        dots1(),
        max_model_len=2048,
    ),
    Case(
        "gemma4-hybrid-6l",
        "Gemma 4 text, 6 layers (5 sliding 512 with heads of 32 : 1 full with global_head_dim 64), 2 KV heads.",
        gemma4_text(6),
        max_model_len=4096,
        extra_args=SCHED_ARGS,
    ),
    Case(
        "gemma4-k-eq-v",
        "Gemma 4 text, 6 layers, attention_k_eq_v: the full layer keeps num_global_key_value_heads 1 × 64, sliding 2 × 32.",
        {**gemma4_text(6), "attention_k_eq_v": True, "num_global_key_value_heads": 1},
        max_model_len=4096,
        extra_args=SCHED_ARGS,
    ),
    Case(
        "gemma4-kv-shared",
        "Gemma 4 text, 8 layers (the last forced full), the last 2 reuse earlier layers' KV (num_kv_shared_layers 2).",
        {**gemma4_text(8), "num_kv_shared_layers": 2},
        max_model_len=4096,
        extra_args=SCHED_ARGS,
    ),
    Case(
        "afmoe-default-pattern",
        "AfMoE (Arcee Trinity) without layer_types: global_attn_every_n_layers 2 makes layers 1 and 3 full, 0 and 2 slide (256).",
        dense_decoder(
            "AfmoeForCausalLM",
            "afmoe",
            head_dim=32,
            sliding_window=256,
            global_attn_every_n_layers=2,
            num_dense_layers=1,
            moe_intermediate_size=128,
            num_experts=4,
            num_experts_per_tok=2,
            num_shared_experts=1,
            score_func="sigmoid",  # read by vLLM's afmoe.py; published Trinity configs carry these
            route_norm=True,
            n_group=1,
            topk_group=1,
            pad_token_id=0,
        ),
        max_model_len=4096,
        extra_args=SCHED_ARGS,
    ),
    Case(
        "laguna-default-full",
        "Laguna without layer_types: transformers fills full attention everywhere, so sliding_window 256 is unused.",
        dense_decoder(
            "LagunaForCausalLM",
            "laguna",
            head_dim=32,
            sliding_window=256,
            moe_intermediate_size=128,
            shared_expert_intermediate_size=128,
            num_experts=4,
            num_experts_per_tok=2,
            pad_token_id=0,
        ),
        max_model_len=4096,
        extra_args=SCHED_ARGS,
    ),
    Case(
        "cwm-default-pattern",
        "CWM (Transformers backend) without layer_types: layer 0 full (i % 4 == 0), layers 1-3 slide (256).",
        dense_decoder("CwmForCausalLM", "cwm", head_dim=32, sliding_window=256, pad_token_id=0),
        max_model_len=4096,
        extra_args=SCHED_ARGS,
    ),
    Case(
        "smollm3-nope-sliding",
        "SmolLM3 (Transformers backend) with use_sliding_window and no layer_types: only the NoPE layer (every 4th) slides.",
        dense_decoder(
            "SmolLM3ForCausalLM",
            "smollm3",
            use_sliding_window=True,
            sliding_window=256,
            no_rope_layer_interval=4,
            pad_token_id=0,
        ),
        max_model_len=4096,
        extra_args=SCHED_ARGS,
    ),
    Case(
        "ministral3",
        "Ministral 3 text (Ministral3ForCausalLM → mistral.py), 4 layers, 2 KV heads × head_dim 64, no window.",
        dense_decoder(
            "Ministral3ForCausalLM", "ministral3", num_attention_heads=4, head_dim=64, pad_token_id=0
        ),
        max_model_len=2048,
    ),
    Case(
        "gemma4-moe",
        "Gemma 4 MoE text (enable_moe_block, 4 experts top_k_experts 2), 6 layers, sliding heads 32, full 64.",
        {
            **gemma4_text(6),
            "enable_moe_block": True,
            "num_experts": 4,
            "top_k_experts": 2,
            "moe_intermediate_size": 128,
        },
        max_model_len=4096,
        extra_args=SCHED_ARGS,
    ),
    Case(
        "qwen2-head-dim-ignored",
        "Qwen2 with head_dim 64 in config.json; qwen2.py sizes heads as hidden 256 // 8 heads = 32.",
        with_head_dim(qwen2(use_sliding_window=False, max_window_layers=4), 64),
        max_model_len=2048,
    ),
    Case(
        "granitemoe-head-dim-ignored",
        "Granite 3.0 MoE with head_dim 64 in config.json; granitemoe.py uses hidden // heads = 32.",
        with_head_dim(granitemoe(), 64),
        max_model_len=2048,
    ),
    Case(
        "olmoe-head-dim-ignored",
        "OLMoE with head_dim 64 in config.json; olmoe.py uses hidden // heads = 32.",
        with_head_dim(olmoe(), 64),
        max_model_len=2048,
    ),
    Case(
        "gptj-head-dim-ignored",
        "GPT-J with head_dim 64 in config.json; gpt_j.py uses n_embd // n_head = 32.",
        with_head_dim(gptj(), 64),
        max_model_len=2048,
    ),
    Case(
        "opt-head-dim-ignored",
        "OPT with head_dim 64 in config.json; opt.py uses hidden // heads = 32.",
        with_head_dim(opt(), 64),
        max_model_len=2048,
    ),
    Case(
        "stablelm-head-dim-ignored",
        "StableLM 2 with head_dim 64 in config.json; stablelm.py uses hidden // heads = 32.",
        with_head_dim(
            dense_decoder("StableLmForCausalLM", "stablelm", partial_rotary_factor=0.25, use_qkv_bias=True),
            64,
        ),
        max_model_len=2048,
    ),
    Case(
        "granite-hybrid-head-dim-ignored",
        "Granite 4.0 hybrid with head_dim 64 in config.json; granitemoehybrid.py's attention uses hidden // heads = 32.",
        with_head_dim(granite_hybrid(["mamba", "mamba", "mamba", "attention"]), 64),
        max_model_len=4096,
        extra_args=SCHED_ARGS,
    ),
    Case(
        "mixtral-head-dim-64",
        "Mixtral with head_dim 64 (hidden 256 // 8 = 32): mixtral.py honours head_dim.",
        with_head_dim(mixtral(), 64),
        max_model_len=2048,
    ),
    Case(
        "granite-hybrid-ssm-fp32",
        "Case granite-hybrid-mamba2 with --mamba-ssm-cache-dtype float32.",
        granite_hybrid(["mamba", "mamba", "mamba", "attention"]),
        max_model_len=4096,
        extra_args=(*SCHED_ARGS, "--mamba-ssm-cache-dtype", "float32"),
    ),
    Case(
        "granite-hybrid-ssm-bf16",
        "Case granite-hybrid-mamba2 with --mamba-ssm-cache-dtype bfloat16 (against the CPU host's float32 default).",
        granite_hybrid(["mamba", "mamba", "mamba", "attention"]),
        max_model_len=4096,
        extra_args=(*SCHED_ARGS, "--mamba-ssm-cache-dtype", "bfloat16"),
    ),
    Case(
        "falcon-h1-ssm-bf16",
        "Case falcon-h1-parallel-hybrid with --mamba-ssm-cache-dtype bfloat16 (Falcon-H1 lists no linear_attention layer).",
        falcon_h1(4),
        max_model_len=4096,
        extra_args=(*SCHED_ARGS, "--mamba-ssm-cache-dtype", "bfloat16"),
    ),
    Case(
        "jamba-ssm-bf16",
        "Case jamba-hybrid with --mamba-ssm-cache-dtype bfloat16 (transformers 5 lists Jamba's Mamba layers as linear_attention).",
        jamba(4),
        max_model_len=4096,
        extra_args=(*SCHED_ARGS, "--mamba-ssm-cache-dtype", "bfloat16"),
    ),
    Case(
        "qwen3-next-ssm-bf16",
        "Case qwen3-next-hybrid with --mamba-ssm-cache-dtype bfloat16 (the accelerated gated-DeltaNet state).",
        qwen3_next(4),
        max_model_len=4096,
        extra_args=(*SCHED_ARGS, "--mamba-ssm-cache-dtype", "bfloat16"),
    ),
    Case(
        "nemotron-h-ssm-bf16",
        "Case nemotron-h-hybrid with --mamba-ssm-cache-dtype bfloat16 (transformers 5 maps its M layers to linear_attention).",
        nemotron_h("M-M*-"),
        max_model_len=4096,
        extra_args=(*SCHED_ARGS, "--mamba-ssm-cache-dtype", "bfloat16"),
    ),
    Case(
        "zamba2-ssm-bf16",
        "Case zamba2-hybrid with --mamba-ssm-cache-dtype bfloat16.",
        zamba2(["mamba", "mamba", "hybrid", "mamba"]),
        max_model_len=4096,
        extra_args=(*SCHED_ARGS, "--mamba-ssm-cache-dtype", "bfloat16"),
    ),
    Case(
        "mamba2-ssm-bf16",
        "Case mamba2-pure with --mamba-ssm-cache-dtype bfloat16.",
        mamba2_pure(4),
        max_model_len=4096,
        extra_args=(*SCHED_ARGS, "--mamba-ssm-cache-dtype", "bfloat16"),
    ),
    Case(
        "granite-hybrid-mamba-cache-fp32",
        "Case granite-hybrid-mamba2 with --mamba-cache-dtype float32 (conv and SSM state).",
        granite_hybrid(["mamba", "mamba", "mamba", "attention"]),
        max_model_len=4096,
        extra_args=(*SCHED_ARGS, "--mamba-cache-dtype", "float32"),
    ),
    Case(
        "qwen3-next-fp8kv",
        "Case qwen3-next-hybrid with --kv-cache-dtype fp8 (attention pages halve, the DeltaNet state does not).",
        qwen3_next(4),
        max_model_len=4096,
        extra_args=(*SCHED_ARGS, "--kv-cache-dtype", "fp8"),
    ),
    Case(
        "llama-gqa-blocks-override",
        "Case llama-gqa with --num-gpu-blocks-override 100.",
        llama(),
        max_model_len=2048,
        extra_args=("--num-gpu-blocks-override", "100"),
    ),
]


# --------------------------------------------------------------------------- recording


def _float(value: str | None) -> float | None:
    if value in (None, "None", ""):
        return None
    return float(value)


def _int(value: str | None) -> int | None:
    if value in (None, "None", ""):
        return None
    return int(float(value))


def record_case(case: Case, workdir: Path, port: int, timeout_s: float) -> dict[str, Any]:
    """Start vLLM for ``case`` and return the record to write."""
    model_dir = harness.make_model_dir(workdir / case.case_id, case.hf_config, case.vocab_size)
    draft_dir: Path | None = None
    if case.draft_config is not None:
        draft_dir = harness.make_model_dir(
            workdir / f"{case.case_id}-draft", case.draft_config, case.vocab_size
        )
    case_args = tuple(a.replace("{draft}", str(draft_dir)) if draft_dir else a for a in case.extra_args)
    extra = ("--enforce-eager", "--max-model-len", str(case.max_model_len), *case_args)
    try:
        server = harness.start_vllm(
            model_dir,
            port=port,
            kv_cache_space_gib=case.kv_cache_space_gib,
            kv_cache_memory_bytes=case.kv_cache_memory_bytes,
            extra_args=extra,
            env=case.env,
            timeout_s=timeout_s,
            log_path=workdir / f"{case.case_id}.log",
        )
    except harness.VllmStartupError as exc:
        if not case.expect_refusal:
            raise
        return _refusal_record(case, model_dir, draft_dir, exc.log)
    if case.expect_refusal:
        server.stop()
        raise RuntimeError(f"{case.case_id}: vLLM started although a refusal was expected")
    try:
        info = server.cache_config_info()
        # The one-line capacity message can lag /health by a moment.
        deadline = time.monotonic() + 10
        startup = server.startup_report()
        while startup.kv_cache_size_tokens is None and time.monotonic() < deadline:
            time.sleep(0.5)
            startup = server.startup_report()
    finally:
        server.stop()

    # Everything passed besides the interpreter, module, --model and --port.
    cli = server.args[3:]
    args: list[str] = []
    skip = False
    for item in cli:
        if skip:
            skip = False
            continue
        if item in ("--model", "--port"):
            skip = True
            continue
        args.append(item.replace(str(draft_dir), "{draft}") if draft_dir else item)

    env: dict[str, str] = {}
    for key in ("VLLM_CPU_KVCACHE_SPACE", "HF_HUB_OFFLINE"):
        if key in server.env:
            env[key] = server.env[key]
    env.update(case.env)

    num_blocks = _int(info.get("num_gpu_blocks")) if info else startup.num_gpu_blocks
    size_tokens = _int(info.get("kv_cache_size_tokens")) if info else None
    if size_tokens is None:
        size_tokens = startup.kv_cache_size_tokens
    concurrency = _float(info.get("kv_cache_max_concurrency")) if info else None
    if concurrency is None:
        concurrency = startup.max_concurrency

    if startup.kv_cache_size_tokens is not None and size_tokens != startup.kv_cache_size_tokens:
        raise RuntimeError(
            f"{case.case_id}: log says {startup.kv_cache_size_tokens} tokens, metrics say {size_tokens}"
        )
    reported_budget = _int(info.get("kv_cache_memory_bytes"))
    if reported_budget is not None and reported_budget != case.budget_bytes:
        raise RuntimeError(
            f"{case.case_id}: expected a budget of {case.budget_bytes} B, vLLM reports {reported_budget}"
        )

    return {
        "case_id": case.case_id,
        "description": case.description,
        "vllm_version": VLLM_VERSION,
        "device": DEVICE,
        "hf_config": json.loads((model_dir / "config.json").read_text()),
        **({"draft_hf_config": case.draft_config} if case.draft_config is not None else {}),
        "args": args,
        "env": env,
        "kv_cache_memory_bytes": case.budget_bytes,
        "max_model_len": case.max_model_len,
        "reported": {
            "num_gpu_blocks": num_blocks,
            "block_size": _int(info.get("block_size")),
            "kv_cache_size_tokens": size_tokens,
            "max_concurrency": concurrency,
            "cache_dtype": info.get("cache_dtype"),
        },
        "cache_config_info": dict(info),
        "host": host_info(),
        "log_lines": startup.lines,
    }


def _refusal_record(case: Case, model_dir: Path, draft_dir: Path | None, log: str) -> dict[str, Any]:
    """What vLLM said when it refused to start: the root-cause line and the error lines around it."""
    args = ["--load-format", "dummy", "--enforce-eager", "--max-model-len", str(case.max_model_len)]
    if case.kv_cache_memory_bytes is not None:
        args += ["--kv-cache-memory-bytes", str(case.kv_cache_memory_bytes)]
    args += [a.replace(str(draft_dir), "{draft}") if draft_dir else a for a in case.extra_args]
    errors = [line.strip() for line in log.splitlines() if re.search(r"(Error|Exception): ", line)]
    return {
        "case_id": case.case_id,
        "description": case.description,
        "vllm_version": VLLM_VERSION,
        "device": DEVICE,
        "hf_config": json.loads((model_dir / "config.json").read_text()),
        **({"draft_hf_config": case.draft_config} if case.draft_config is not None else {}),
        "args": args,
        "env": {
            **({"VLLM_CPU_KVCACHE_SPACE": str(case.kv_cache_space_gib)} if case.kv_cache_space_gib else {})
        },
        "kv_cache_memory_bytes": case.budget_bytes,
        "max_model_len": case.max_model_len,
        "host": host_info(),
        "started": False,
        "error": _root_cause_line(log),
        "log_lines": errors[:20],
    }


def host_info() -> dict[str, Any]:
    """The CPU vLLM ran on: the CPU backend keeps Mamba SSM state in float32 on AVX512-BF16 hosts (0.32)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return {}
    model = next(
        (line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("model name")), ""
    )
    flags = next(
        (line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), []
    )
    return {"cpu": model, "avx512_bf16": "avx512_bf16" in flags}


def _root_cause_line(log: str) -> str:
    """The first exception line of a failed start-up (the root cause), else the last line.

    A pydantic ``ValidationError`` names only the config class; vLLM's own words follow on a ``Value error, …``
    line, which is returned instead.
    """
    pattern = re.compile(r"\b[A-Z][A-Za-z]*(?:Error|Exception): ")
    lines = log.splitlines()
    for index, line in enumerate(lines):
        if " WARNING " not in line and pattern.search(line):
            if "validation error for" in line:
                detail = next((x for x in lines[index + 1 : index + 4] if "Value error, " in x), None)
                if detail is not None:
                    return detail.split("Value error, ", 1)[1].split(" [type=")[0].strip()
            return line.strip()
    return log.strip().splitlines()[-1] if log.strip() else "(empty log)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help="comma-separated case ids to run")
    parser.add_argument("--list", action="store_true", help="list the case ids and exit")
    parser.add_argument("--out", type=Path, default=OUT_DIR, help="folder for <case_id>.json")
    parser.add_argument("--workdir", type=Path, help="folder for model dirs and logs (default: a temp dir)")
    parser.add_argument("--port", type=int, default=18231)
    parser.add_argument("--timeout", type=float, default=420.0, help="start-up limit per case, seconds")
    opts = parser.parse_args(argv)

    if opts.list:
        for case in CASES:
            print(f"{case.case_id:28s} {case.description}")
        return 0

    selected = CASES
    if opts.only:
        wanted = [c.strip() for c in opts.only.split(",") if c.strip()]
        known = {c.case_id for c in CASES}
        unknown = [w for w in wanted if w not in known]
        if unknown:
            parser.error(f"unknown case ids: {', '.join(unknown)}")
        selected = [c for c in CASES if c.case_id in wanted]

    workdir = opts.workdir or Path(tempfile.mkdtemp(prefix="vllm-record-"))
    workdir.mkdir(parents=True, exist_ok=True)
    opts.out.mkdir(parents=True, exist_ok=True)
    print(f"work folder: {workdir}", flush=True)

    failures = 0
    for case in selected:
        started = time.monotonic()
        print(f"[{case.case_id}] starting ...", flush=True)
        try:
            record = record_case(case, workdir, opts.port, opts.timeout)
        except harness.VllmStartupError as exc:
            failures += 1
            print(f"[{case.case_id}] FAILED: {exc}: {_root_cause_line(exc.log)}", flush=True)
            continue
        except Exception as exc:
            failures += 1
            print(f"[{case.case_id}] FAILED: {type(exc).__name__}: {exc}", flush=True)
            continue
        path = opts.out / f"{case.case_id}.json"
        path.write_text(json.dumps(record, indent=2) + "\n")
        if record.get("started") is False:
            print(f"[{case.case_id}] refused as expected: {record['error']} -> {path}", flush=True)
            continue
        rep = record["reported"]
        print(
            f"[{case.case_id}] ok in {time.monotonic() - started:.0f} s: blocks={rep['num_gpu_blocks']} "
            f"block_size={rep['block_size']} tokens={rep['kv_cache_size_tokens']} "
            f"concurrency={rep['max_concurrency']} dtype={rep['cache_dtype']} -> {path}",
            flush=True,
        )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
