"""Built-in entries read from their published config.json: the shapes KV memory depends on, checked against the
numbers in each file (golden values worked out by hand from the config, not read back from the parser)."""

from __future__ import annotations

import pytest

from service.catalog.builtin import builtin_model_records, builtin_snapshot
from service.catalog.resolve import resolve_model
from service.core.specs import LayerType, ModelSpec


def _spec(name: str) -> ModelSpec:
    return builtin_snapshot().models[name].spec


@pytest.mark.parametrize(
    ("name", "layers", "kv_heads", "head_dim"),
    [
        ("phi-2", 32, 32, 2560 // 32),  # multi-head: no KV-head key, head_dim = hidden / heads
        ("codellama-7b", 32, 32, 128),
        ("llama-3-8b", 32, 8, 128),
        ("qwen1.5-moe-a2.7b", 24, 16, 128),
        ("mistral-small-3.1-24b", 40, 8, 128),  # text_config of Mistral3ForConditionalGeneration
        ("qwen3-coder-480b-a35b", 62, 8, 128),
        ("granite-3.3-8b", 40, 8, 128),
        ("kimi-k2", 61, 64, 512 + 64),  # MLA: kv_lora_rank + qk_rope_head_dim
        ("qwen3-coder-30b-a3b", 48, 4, 128),
        ("deepseek-r1-distill-qwen-32b", 64, 8, 5120 // 40),  # no head_dim key: hidden / heads
        ("qwen2.5-7b-instruct-1m", 28, 4, 3584 // 28),
    ],
)
def test_kv_shapes_come_from_the_published_config(
    name: str, layers: int, kv_heads: int, head_dim: int
) -> None:
    spec = _spec(name)
    assert (spec.num_hidden_layers, spec.num_key_value_heads, spec.head_dim) == (layers, kv_heads, head_dim)


def test_gemma_3_12b_has_one_global_layer_in_six() -> None:
    kinds = _spec("gemma-3-12b").resolved_layer_types
    assert [i for i, k in enumerate(kinds) if k is LayerType.FULL] == list(range(5, 48, 6))
    assert _spec("gemma-3-12b").sliding_window == 1024


def test_llama_4_scout_attends_in_chunks_except_every_fourth_layer() -> None:
    spec = _spec("llama-4-scout-17b-16e")
    kinds = spec.resolved_layer_types
    assert [i for i, k in enumerate(kinds) if k is LayerType.FULL] == list(range(3, 48, 4))
    assert spec.attention_chunk_size == 8192
    assert spec.num_shared_experts == 1


def test_qwen3_5_layers_are_three_linear_to_one_full() -> None:
    kinds = _spec("qwen3.5-27b").resolved_layer_types
    assert [i for i, k in enumerate(kinds) if k is LayerType.FULL] == list(range(3, 64, 4))
    assert sum(k is LayerType.LINEAR for k in kinds) == 48


def test_multimodal_counts_include_the_vision_tower() -> None:
    # Repository totals: Mistral-Small-3.1-24B 24,011,361,280; gemma-3-12b-it 12,187,325,040.
    assert _spec("mistral-small-3.1-24b").num_parameters == 24_011_361_280
    assert _spec("gemma-3-12b").num_parameters == 12_187_325_040


def test_distilled_and_coder_entries_keep_their_base_shapes_and_context() -> None:
    # DeepSeek-R1-Distill-Qwen-32B: the Hub's 32,763,876,352 BF16 parameters are Qwen2.5-32B's, shape for shape;
    # Qwen3-Coder-30B-A3B: Qwen3-30B-A3B's experts with a 262144 native context.
    assert _spec("deepseek-r1-distill-qwen-32b").num_parameters == _spec("qwen2.5-32b").num_parameters
    assert _spec("deepseek-r1-distill-qwen-32b").max_position_embeddings == 131072
    coder, base = _spec("qwen3-coder-30b-a3b"), _spec("qwen3-30b-a3b")
    assert (coder.num_experts, coder.moe_intermediate_size) == (base.num_experts, base.moe_intermediate_size)
    assert coder.max_position_embeddings == 262144
    # Qwen2.5-7B-Instruct-1M: Qwen2.5-7B's parameters, a 1,010,000-token context, the declared 32768 window off.
    long = _spec("qwen2.5-7b-instruct-1m")
    assert long.num_parameters == _spec("qwen2.5-7b").num_parameters
    assert long.max_position_embeddings == 1_010_000
    assert long.sliding_window is None


def test_deepseek_coder_v2_lite_has_deepseek_v2_lites_shapes() -> None:
    # config.json of DeepSeek-Coder-V2-Lite-Instruct (copies cited in the entry): MLA 512 + 64, 27 layers, 64 routed +
    # 2 shared experts of 1408, top-6, one dense layer of 10944, 163840 positions (yarn 40 × 4096).
    coder, base = _spec("deepseek-coder-v2-lite"), _spec("deepseek-v2-lite")
    assert (coder.kv_lora_rank, coder.qk_rope_head_dim, coder.num_hidden_layers) == (512, 64, 27)
    assert (coder.num_experts, coder.num_shared_experts, coder.num_experts_per_tok) == (64, 2, 6)
    assert (coder.moe_intermediate_size, coder.intermediate_size) == (1408, 10944)
    assert coder.max_position_embeddings == 163840 == 4096 * 40
    assert coder.num_parameters == base.num_parameters


def test_every_built_in_record_names_its_source() -> None:
    for record in builtin_model_records():
        assert str(record.get("source", "")).startswith("https://"), record["name"]


@pytest.mark.parametrize(
    ("ref", "name", "quantization"),
    [
        ("meta-llama/Meta-Llama-3-8B-Instruct", "llama-3-8b", None),
        ("mistralai/Mistral-Small-3.2-24B-Instruct-2506", "mistral-small-3.1-24b", None),
        ("RedHatAI/Mistral-Small-3.1-24B-Instruct-2503-quantized.w8a8", "mistral-small-3.1-24b", "int8"),
        ("Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8", "qwen3-coder-480b-a35b", "fp8"),
        ("TheBloke/CodeLlama-13B-Instruct-fp16", "codellama-13b", None),
        ("Qwen/Qwen1.5-MoE-A2.7B-Chat", "qwen1.5-moe-a2.7b", None),
        ("Qwen/Qwen3-Coder-30B-A3B-Instruct-FP8", "qwen3-coder-30b-a3b", "fp8"),
        ("deepseek-ai/DeepSeek-R1-Distill-Qwen-32B", "deepseek-r1-distill-qwen-32b", None),
        ("Qwen/Qwen2.5-7B-Instruct-1M", "qwen2.5-7b-instruct-1m", None),
        ("deepseek-ai/DeepSeek-Coder-V2-Lite-Instruct", "deepseek-coder-v2-lite", None),
    ],
)
def test_published_names_resolve(ref: str, name: str, quantization: str | None) -> None:
    match = resolve_model(builtin_snapshot(), ref)
    assert match is not None and match.model.name == name and match.quantization == quantization


def test_a_different_model_of_the_same_family_does_not_resolve() -> None:
    assert resolve_model(builtin_snapshot(), "microsoft/Phi-4-mini-instruct") is None


def test_rope_caches_load_with_the_weights_on_every_rank() -> None:
    from service.core.weights import weight_shares

    scout = _spec("llama-4-scout-17b-16e")
    assert scout.rope_cache_bytes == 10485760 * 128 * 2  # 2.5 GiB: vLLM logs 53.12 GiB per GPU at TP4
    with_cache = weight_shares(scout, quantization=None, tensor_parallel_size=4)[0].total_bytes
    without = weight_shares(scout, quantization=None, tensor_parallel_size=4, runtime_buffers=False)[0]
    assert with_cache - without.total_bytes == scout.rope_cache_bytes  # replicated, not split by TP


def test_metas_fp8_405b_keeps_attention_and_the_outer_layers_in_bf16() -> None:
    from service.core.weights import resolve_quantization, weight_shares

    spec = _spec("llama-3.1-405b-fp8")
    h, inter, q, kv = 16384, 53248, 128 * 128, 8 * 128
    attention = 2 * h * q + 2 * h * kv
    assert spec.unquantized_parameters == 126 * attention + 2 * 3 * h * inter  # 77.1B
    per_gpu = weight_shares(spec, quantization=resolve_quantization("fp8"), tensor_parallel_size=8)[0]
    assert 56.5 < per_gpu.total_bytes / 2**30 < 57.0  # vLLM logged 57.75 GiB per GPU (issue #6746)


def test_other_405b_fp8_checkpoints_resolve_to_the_base_architecture() -> None:
    snapshot = builtin_snapshot()
    exact = resolve_model(snapshot, "meta-llama/Meta-Llama-3.1-405B-Instruct-FP8")
    other = resolve_model(snapshot, "neuralmagic/Meta-Llama-3.1-405B-Instruct-FP8")
    assert exact is not None and exact.model.name == "llama-3.1-405b-fp8"
    assert other is not None and other.model.name == "llama-3.1-405b" and other.quantization == "fp8"
