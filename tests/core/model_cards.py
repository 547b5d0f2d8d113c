"""Architectures written from public model cards, shared by the core tests."""

from __future__ import annotations

from service.core.specs import ModelSpec

# meta-llama/Llama-3.1-8B config.json: 32 layers, 32 heads, 8 KV heads × 128, 128K context.
LLAMA_31_8B = ModelSpec(
    num_hidden_layers=32,
    hidden_size=4096,
    num_attention_heads=32,
    num_key_value_heads=8,
    head_dim=128,
    vocab_size=128_256,
    num_parameters=8_030_261_248,
    max_model_len=131_072,
    intermediate_size=14_336,
)
