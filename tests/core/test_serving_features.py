"""Serving features in the planner: each golden value is computed here from vLLM's formula and the config."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from service.core.errors import InvalidSpec
from service.core.hf_config import parse_hf_config
from service.core.planner import PlanRequest, plan
from service.core.planner.features import (
    KvTransferConfig,
    LoraConfig,
    MultimodalConfig,
    ServingFeatures,
    SpeculativeConfig,
)
from service.core.specs import GpuSpec, ModelSpec
from service.core.units import GIB

MODELS = Path(__file__).resolve().parents[2] / "service/catalog/builtin/models"


def record(name: str) -> dict[str, object]:
    data: dict[str, object] = json.loads((MODELS / f"{name}.json").read_text())
    return data


def spec(name: str) -> ModelSpec:
    data = record(name)
    return parse_hf_config(data["hf_config"], num_parameters=data.get("num_parameters"))  # type: ignore[arg-type]


LLAMA = record("llama-3.1-8b")["hf_config"]
assert isinstance(LLAMA, dict)
H100 = GpuSpec(name="h100", memory_bytes=80 * GIB, compute_capability="9.0")
H200 = GpuSpec(name="h200", memory_bytes=141 * GIB, compute_capability="9.0")


def llama_plan(features: ServingFeatures | None = None, **settings: object):  # type: ignore[no-untyped-def]
    values: dict[str, object] = {"max_model_len": 8192, "gpu": H100, **settings}
    return plan(PlanRequest(model=spec("llama-3.1-8b"), features=features, **values))  # type: ignore[arg-type]


def lora_bytes_by_hand(tp: int, rank: int, loras: int) -> int:
    """vllm/lora/layers/base_linear.py: A (max_loras, 1, rank, input) and B (max_loras, 1, output, rank) per slice."""
    hidden, heads, kv = LLAMA["hidden_size"], LLAMA["num_attention_heads"], LLAMA["num_key_value_heads"]
    inter, layers = LLAMA["intermediate_size"], LLAMA["num_hidden_layers"]
    head_dim = hidden // heads
    q, kv_out = heads * head_dim // tp, max(1, kv // tp) * head_dim
    qkv = 3 * rank * hidden + (q + 2 * kv_out) * rank  # column parallel, three slices
    o = rank * (heads * head_dim // tp) + hidden * rank  # row parallel
    gate_up = 2 * rank * hidden + 2 * (inter // tp) * rank  # column parallel, two slices
    down = rank * (inter // tp) + hidden * rank  # row parallel
    return (qkv + o + gate_up + down) * loras * 2 * layers  # bf16


@pytest.mark.parametrize("tp", [1, 2])
def test_lora_buffers_for_llama_8b_rank_16_times_4(tp: int) -> None:
    expected = lora_bytes_by_hand(tp, rank=16, loras=4)
    if tp == 1:
        assert expected == 335_544_320  # 320 MiB: 81,920 elements × 16 × 4 × 2 B × 32 layers
    base = llama_plan(tensor_parallel_size=tp)
    lora = llama_plan(
        ServingFeatures(lora=LoraConfig(max_loras=4, max_lora_rank=16)), tensor_parallel_size=tp
    )
    assert lora.features is not None and lora.features.lora_bytes == expected
    assert lora.memory.weights_bytes - base.memory.weights_bytes == expected
    assert base.memory.kv_cache_bytes - lora.memory.kv_cache_bytes == expected
    term = next(t for t in lora.breakdown if t.name == "lora_buffers")
    assert term.value == expected and "base_linear.py" in term.formula


def test_lora_extra_vocab_rows_exist_up_to_0_11_only() -> None:
    hidden = LLAMA["hidden_size"]
    lora = ServingFeatures(lora=LoraConfig(max_loras=2, max_lora_rank=8))
    old = llama_plan(lora, engine="vllm-0.11")
    new = llama_plan(lora, engine="vllm-0.12")
    assert old.features is not None and new.features is not None
    # Embedding and LM head each keep max_loras × 256 extra rows of hidden values (default before 0.12).
    assert old.features.lora_bytes - new.features.lora_bytes == 2 * 2 * 256 * hidden * 2
    with pytest.raises(InvalidSpec) as err:
        llama_plan(
            ServingFeatures(lora=LoraConfig(lora_extra_vocab_size=512)),
            engine="vllm-0.12",
        )
    assert err.value.field == "lora_extra_vocab_size"


@pytest.mark.parametrize(
    ("config", "field", "words"),
    [
        (LoraConfig(max_lora_rank=17), "max_lora_rank", "must be one of"),
        (LoraConfig(max_loras=4, max_cpu_loras=2), "max_cpu_loras", "must be >= max_loras (4)"),
        (LoraConfig(max_loras=0), "max_loras", "≥ 1"),
    ],
)
def test_lora_values_vllm_rejects(config: LoraConfig, field: str, words: str) -> None:
    with pytest.raises(InvalidSpec) as err:
        llama_plan(ServingFeatures(lora=config))
    assert err.value.field == field and words in err.value.message


def test_cpu_offload_moves_weights_per_gpu_and_at_most_all_of_them() -> None:
    base = llama_plan()
    offload = llama_plan(ServingFeatures(cpu_offload_gb=4))
    assert base.memory.weights_bytes - offload.memory.weights_bytes == 4 * GIB
    assert offload.memory.kv_cache_bytes - base.memory.kv_cache_bytes == 4 * GIB
    everything = llama_plan(ServingFeatures(cpu_offload_gb=100))
    assert everything.memory.weights_bytes == 0
    assert "cpu_offload_exceeds_weights" in {m.code for m in everything.messages}


def test_ngram_costs_nothing_but_reserves_lookahead_slots() -> None:
    base = llama_plan()
    ngram = llama_plan(
        ServingFeatures(speculative=SpeculativeConfig(method="ngram", num_speculative_tokens=4))
    )
    assert ngram.kv_cache.num_gpu_blocks == base.kv_cache.num_gpu_blocks
    assert ngram.memory.weights_bytes == base.memory.weights_bytes
    assert ngram.features is not None
    block = ngram.kv_cache.block_size  # the release's default GPU block (64 from 0.34, 16 before)
    assert ngram.features.blocks_per_request_with_lookahead == math.ceil((8192 + 4) / block)


EAGLE_HEAD = {  # one Llama decoder layer with the target's attention shape (EAGLE-LLaMA3.1-Instruct-8B)
    **LLAMA,
    "num_hidden_layers": 1,
}
VOCAB_HIDDEN = LLAMA["vocab_size"] * LLAMA["hidden_size"]
EAGLE_PARAMS = 252_000_000 + 2 * VOCAB_HIDDEN  # one decoder layer and fc, with an embedding and LM head


def test_eagle_head_weights_and_its_kv_layer_share_the_pool() -> None:
    head = parse_hf_config(EAGLE_HEAD, num_parameters=EAGLE_PARAMS)
    base = llama_plan(kv_cache_memory_bytes=40 * GIB)
    eagle = llama_plan(
        ServingFeatures(speculative=SpeculativeConfig(method="eagle", num_speculative_tokens=3, draft=head)),
        kv_cache_memory_bytes=40 * GIB,
    )
    per_layer = 2 * LLAMA["num_key_value_heads"] * (LLAMA["hidden_size"] // LLAMA["num_attention_heads"]) * 2
    assert base.kv_cache.bytes_per_token == 32 * per_layer
    assert eagle.kv_cache.bytes_per_token == 33 * per_layer  # the head's one attention layer joins the pool
    # 40 GiB over 33 layers' pages instead of 32.
    assert eagle.kv_cache.num_gpu_blocks == 40 * GIB // (eagle.kv_cache.block_size * per_layer) // 33
    assert eagle.features is not None and eagle.features.speculative_kv_layers == 1
    # Weights: the head's parameters in bf16 without the embedding and LM head it shares with the target
    # (v1/spec_decode/eagle.py); the vocab 128,256 is a multiple of 64, so nothing is padded.
    assert abs(eagle.features.speculative_weights_bytes - 2 * (EAGLE_PARAMS - 2 * VOCAB_HIDDEN)) <= 64
    eagle3 = llama_plan(
        ServingFeatures(speculative=SpeculativeConfig(method="eagle3", num_speculative_tokens=3, draft=head))
    )
    assert eagle3.features is not None  # EAGLE-3 keeps its own LM head
    assert abs(eagle3.features.speculative_weights_bytes - 2 * (EAGLE_PARAMS - VOCAB_HIDDEN)) <= 64


def test_draft_model_is_refused_before_0_14_in_vllms_words() -> None:
    draft = parse_hf_config(EAGLE_HEAD, num_parameters=EAGLE_PARAMS)
    features = ServingFeatures(
        speculative=SpeculativeConfig(method="draft_model", num_speculative_tokens=4, draft=draft)
    )
    old = llama_plan(features, engine="vllm-0.13")
    assert not old.fits
    assert any(
        m.code == "speculative_draft_model_unsupported"
        and m.text.startswith("Speculative decoding with draft model is not supported yet.")
        for m in old.errors
    )
    assert llama_plan(features, engine="vllm-0.14").fits


def test_speculative_values_vllm_rejects_in_its_words() -> None:
    with pytest.raises(InvalidSpec) as err:
        llama_plan(ServingFeatures(speculative=SpeculativeConfig(method="eagle", num_speculative_tokens=2)))
    assert err.value.field == "speculative_config.model"
    assert err.value.message == "num_speculative_tokens was provided but without speculative model."
    head = parse_hf_config(EAGLE_HEAD, num_parameters=EAGLE_PARAMS)
    with pytest.raises(InvalidSpec) as err:
        llama_plan(ServingFeatures(speculative=SpeculativeConfig(method="eagle", draft=head)))
    assert err.value.field == "speculative_config.num_speculative_tokens"
    assert "`num_speculative_tokens` was not provided" in err.value.message
    config = record("deepseek-v3")["hf_config"]
    assert isinstance(config, dict)
    two_mtp = parse_hf_config({**config, "num_nextn_predict_layers": 2}, num_parameters=671_000_000_000)
    with pytest.raises(InvalidSpec) as err:
        plan(
            PlanRequest(
                model=two_mtp,
                gpu=H200,
                tensor_parallel_size=8,
                features=ServingFeatures(
                    speculative=SpeculativeConfig(method="mtp", num_speculative_tokens=3)
                ),
            )
        )
    assert err.value.message == "num_speculative_tokens:3 must be divisible by n_predict=2"
    with pytest.raises(InvalidSpec) as err:
        llama_plan(
            ServingFeatures(speculative=SpeculativeConfig(method="lookahead", num_speculative_tokens=2))
        )
    assert err.value.field == "speculative_config.method"
    with pytest.raises(InvalidSpec) as err:
        llama_plan(ServingFeatures(speculative=SpeculativeConfig(method="deepseek_mtp")))
    assert err.value.field == "speculative_config.method"  # Llama has no MTP layers


def test_deepseek_mtp_adds_one_mla_layer_and_data_parallel_experts() -> None:
    ds = spec("deepseek-v3")
    config = record("deepseek-v3")["hf_config"]
    assert isinstance(config, dict)
    assert ds.num_nextn_predict_layers == config["num_nextn_predict_layers"] == 1
    common = {"gpu": H200, "tensor_parallel_size": 8, "max_model_len": 32768}
    base = plan(PlanRequest(model=ds, **common))  # type: ignore[arg-type]
    mtp = plan(
        PlanRequest(
            model=ds, features=ServingFeatures(speculative=SpeculativeConfig(method="deepseek_mtp")), **common
        )  # type: ignore[arg-type]
    )
    latent = (
        config["kv_lora_rank"] + config["qk_rope_head_dim"]
    ) * 2  # MLA: one latent per token, not split by TP
    assert base.kv_cache.bytes_per_token == config["num_hidden_layers"] * latent
    assert mtp.kv_cache.bytes_per_token == (config["num_hidden_layers"] + 1) * latent
    assert mtp.features is not None and mtp.features.num_speculative_tokens == 1
    # One MoE layer: 256 experts × 3 × hidden × moe width in fp8 over 8 GPUs dominates its weights.
    experts = config["n_routed_experts"] * 3 * config["hidden_size"] * config["moe_intermediate_size"]
    assert experts / 8 < mtp.features.speculative_weights_bytes < 1.2 * experts * (1 + 4 / 128**2) / 8

    dp = plan(
        PlanRequest(
            model=ds, features=ServingFeatures(data_parallel_size=2, enable_expert_parallel=True), **common
        )  # type: ignore[arg-type]
    )
    assert dp.features is not None
    assert dp.features.experts_per_gpu == math.ceil(256 / 16) == 16
    assert dp.features.total_gpus == 16
    moe_layers = config["num_hidden_layers"] - config["first_k_dense_replace"]
    expert_bytes_per_gpu_tp8 = experts * moe_layers * (1 + 4 / 128**2) / 8
    saved = base.memory.weights_bytes - dp.memory.weights_bytes
    assert saved == pytest.approx(expert_bytes_per_gpu_tp8 / 2, rel=0.01)
    assert dp.features.max_concurrency_all_ranks == pytest.approx(2 * dp.kv_cache.max_concurrency, rel=1e-3)


def test_dense_model_data_parallel_replicates_and_multiplies_concurrency() -> None:
    base = llama_plan()
    dp = llama_plan(ServingFeatures(data_parallel_size=4))
    assert dp.memory.weights_bytes == base.memory.weights_bytes
    assert dp.kv_cache.num_gpu_blocks == base.kv_cache.num_gpu_blocks
    assert dp.features is not None and dp.features.total_gpus == 4
    assert dp.features.max_concurrency_all_ranks == pytest.approx(4 * base.kv_cache.max_concurrency, abs=1e-3)


def test_native_kv_offloading_adds_cpu_capacity_split_over_ranks() -> None:
    base = llama_plan(tensor_parallel_size=2)
    offload = llama_plan(
        ServingFeatures(kv_transfer=KvTransferConfig(kv_offloading_size_gib=64)), tensor_parallel_size=2
    )
    assert offload.kv_cache.num_gpu_blocks == base.kv_cache.num_gpu_blocks  # the GPU pool is unchanged
    assert offload.features is not None
    assert offload.features.cpu_kv_cache_bytes == 32 * GIB  # 64 GiB in total over TP 2
    per_token = offload.kv_cache.bytes_per_token  # per rank: 4 KV heads of 8
    assert offload.features.cpu_kv_cache_tokens == 32 * GIB // per_token == 524_288
    with pytest.raises(InvalidSpec) as err:
        llama_plan(
            ServingFeatures(kv_transfer=KvTransferConfig(kv_offloading_size_gib=8)), engine="vllm-0.11"
        )
    assert err.value.field == "kv_offloading_size"


def test_lmcache_default_cpu_store_and_offloading_connector_blocks() -> None:
    lmcache = llama_plan(ServingFeatures(kv_transfer=KvTransferConfig(kv_connector="LMCacheConnectorV1")))
    assert lmcache.features is not None and lmcache.features.cpu_kv_cache_bytes == 5 * GIB
    blocks = llama_plan(
        ServingFeatures(
            kv_transfer=KvTransferConfig(kv_connector="OffloadingConnector", num_cpu_blocks=1000)
        ),
        engine="vllm-0.11",
    )
    assert blocks.features is not None
    assert blocks.features.cpu_kv_cache_bytes == 1000 * 16 * blocks.kv_cache.bytes_per_token


def test_shared_prefix_raises_effective_concurrency() -> None:
    shared = llama_plan(ServingFeatures(shared_prefix_tokens=4096))
    assert shared.features is not None
    blocks = shared.kv_cache.num_gpu_blocks
    block = shared.kv_cache.block_size
    expected = (blocks - 4096 // block) / (8192 // block - 4096 // block)
    assert shared.features.effective_max_concurrency == pytest.approx(expected, abs=1e-4)
    assert shared.features.effective_max_concurrency > 1.9 * shared.kv_cache.max_concurrency


def test_text_only_multimodal_skips_the_tower_and_images_charge_the_encoder_profile() -> None:
    gemma = spec("gemma-3-27b")
    vision = record("gemma-3-27b")["hf_config"]["vision_config"]  # type: ignore[index]
    h, i, p, size = (
        vision["hidden_size"],
        vision["intermediate_size"],
        vision["patch_size"],
        vision["image_size"],
    )
    tower = vision["num_hidden_layers"] * (4 * h * h + 2 * h * i) + 3 * p * p * h + (size // p) ** 2 * h
    tower += h * gemma.hidden_size  # projector into the text model
    assert gemma.encoder_parameters == tower
    common = {"gpu": H100, "max_model_len": 32768}
    base = plan(PlanRequest(model=gemma, **common))  # type: ignore[arg-type]
    text = plan(
        PlanRequest(
            model=gemma,
            features=ServingFeatures(multimodal=MultimodalConfig(limit_mm_per_prompt=(("image", 0),))),
            **common,
        )  # type: ignore[arg-type]
    )
    assert base.memory.weights_bytes - text.memory.weights_bytes == pytest.approx(tower * 2, abs=64)
    images = plan(
        PlanRequest(
            model=gemma,
            features=ServingFeatures(multimodal=MultimodalConfig(limit_mm_per_prompt=(("image", 4),))),
            **common,
        )  # type: ignore[arg-type]
    )
    # Encoder budget max(max_num_batched_tokens 8192, 256) // 256 tokens per image = 32 images in the profile.
    cache = 32 * 256 * gemma.hidden_size * 2
    assert images.memory.activation_bytes - base.memory.activation_bytes == cache
    # The default release (0.34) sizes the KV cache after warm-up: it keeps the activation peak free and a margin
    # of max(1 GiB, 0.75 × that peak) (``measure_kv_cache_bytes``, vllm/v1/worker/extensible_kv_cache.py), so the
    # encoder cache costs the KV cache itself plus its growth of the margin.
    assert images.settings.engine == "vllm-0.34"

    def margin(activation: int) -> int:
        return max(GIB, int(0.75 * activation))

    grown = margin(images.memory.activation_bytes) - margin(base.memory.activation_bytes)
    assert base.memory.kv_cache_bytes - images.memory.kv_cache_bytes == cache + grown
    # With a utilisation below 1 the budget binds instead (``min(budget − non-KV, headroom − margin)``): one charge.
    pinned = {"gpu_memory_utilization": 0.9, **common}
    base_09 = plan(PlanRequest(model=gemma, **pinned))  # type: ignore[arg-type]
    images_09 = plan(
        PlanRequest(
            model=gemma,
            features=ServingFeatures(multimodal=MultimodalConfig(limit_mm_per_prompt=(("image", 4),))),
            **pinned,
        )  # type: ignore[arg-type]
    )
    assert base_09.memory.kv_cache_bytes - images_09.memory.kv_cache_bytes == cache


def test_no_features_means_no_features_result() -> None:
    assert llama_plan().features is None


def test_cpu_offload_leaves_the_lora_stacks_on_the_gpu() -> None:
    lora = LoraConfig(max_loras=4, max_lora_rank=16)
    everything = llama_plan(ServingFeatures(cpu_offload_gb=100, lora=lora))
    assert everything.memory.weights_bytes == lora_bytes_by_hand(1, rank=16, loras=4)


def test_shared_prefix_counts_only_full_attention_groups_of_a_hybrid() -> None:
    gemma = spec("gemma-3-27b")
    common = {"gpu": H100, "max_model_len": 32768}
    shared = plan(PlanRequest(model=gemma, features=ServingFeatures(shared_prefix_tokens=8192), **common))  # type: ignore[arg-type]
    assert shared.layout is not None and shared.features is not None
    kinds = [g.spec.kind.value for g in shared.layout.groups]
    assert "sliding_attention" in kinds and "full_attention" in kinds
    full_groups = kinds.count("full_attention")
    block = shared.kv_cache.block_size
    shared_blocks = full_groups * (8192 // block)  # the sliding groups hold their window per request
    per_request = shared.kv_cache.blocks_per_request
    expected = (shared.kv_cache.num_gpu_blocks - shared_blocks) / (per_request - shared_blocks)
    assert shared.features.effective_max_concurrency == pytest.approx(expected, abs=1e-4)


def test_lora_cpu_cache_holds_max_cpu_loras_adapters_at_most() -> None:
    lora = llama_plan(ServingFeatures(lora=LoraConfig(max_loras=4, max_lora_rank=16, max_cpu_loras=10)))
    term = next(t for t in lora.breakdown if t.name == "lora_cpu_cache")
    assert term.value == 10 * lora_bytes_by_hand(1, rank=16, loras=1)


def test_draft_model_on_a_multimodal_target_is_refused() -> None:
    draft = spec("gemma-3-4b")
    features = ServingFeatures(
        speculative=SpeculativeConfig(method="draft_model", num_speculative_tokens=2, draft=draft)
    )
    refused = plan(PlanRequest(model=spec("gemma-3-27b"), gpu=H200, max_model_len=8192, features=features))
    assert not refused.fits
    assert "speculative_draft_model_multimodal" in {m.code for m in refused.errors}


QWEN25_VL_7B = {  # Qwen/Qwen2.5-VL-7B-Instruct config.json (the keys that decide memory)
    "architectures": ["Qwen2_5_VLForConditionalGeneration"],
    "model_type": "qwen2_5_vl",
    "hidden_size": 3584,
    "intermediate_size": 18944,
    "num_hidden_layers": 28,
    "num_attention_heads": 28,
    "num_key_value_heads": 4,
    "vocab_size": 152064,
    "max_position_embeddings": 128000,
    "torch_dtype": "bfloat16",
    "tie_word_embeddings": False,
    "vision_config": {
        "depth": 32,
        "hidden_size": 1280,
        "intermediate_size": 3420,
        "num_heads": 16,
        "in_chans": 3,
        "out_hidden_size": 3584,
        "patch_size": 14,
        "spatial_merge_size": 2,
        "spatial_patch_size": 14,
    },
}


def test_mm_processor_max_pixels_sizes_the_qwen_vl_encoder_profile() -> None:
    qwen = parse_hf_config(QWEN25_VL_7B, num_parameters=8_292_166_656)
    # Qwen2-VL's image processor: max_pixels 12,845,056 by default, one token per (14 × 2)² pixels.
    assert qwen.mm_tokens_per_item == 12_845_056 // 28**2 == 16_384
    common = {"gpu": H100, "max_model_len": 32768}
    base = plan(PlanRequest(model=qwen, **common))  # type: ignore[arg-type]
    mnbt = base.settings.max_num_batched_tokens

    def cache(features: MultimodalConfig) -> int:
        featured = plan(PlanRequest(model=qwen, features=ServingFeatures(multimodal=features), **common))  # type: ignore[arg-type]
        return featured.memory.activation_bytes - base.memory.activation_bytes

    # One 16,384-token image fills the encoder budget max(mnbt, 16,384).
    assert cache(MultimodalConfig(limit_mm_per_prompt=(("image", 2),))) == 1 * 16_384 * 3584 * 2
    small = 1_003_520 // 28**2  # 1,280 tokens
    items = max(mnbt, small) // small
    assert cache(MultimodalConfig(max_pixels=1_003_520)) == items * small * 3584 * 2
