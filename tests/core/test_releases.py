"""Which engine a release runs, the V0 rules of 0.5 – 0.7, and the checks ``vllm serve`` makes before serving.

Every expectation comes from the release's own source: ``vllm/envs.py`` (V1 the default from 0.8.0; 0.7.3 still
defaults to V0), ``vllm/engine/arg_utils.py`` (``--block-size`` choices, chunked prefill for contexts over 32K),
``vllm/config.py::SchedulerConfig`` (batched-token defaults and ``_verify_args``), ``vllm/worker/worker.py``
(``determine_num_available_blocks``, ``_check_if_gpu_supports_dtype``) and the quantization methods'
``get_min_capability`` — read from the 0.5.5, 0.6.3, 0.6.4 and 0.7.3 wheels.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from service.catalog.builtin import builtin_snapshot
from service.core.engines import parse_engine, resolve_engine
from service.core.errors import InvalidSpec, UnknownEngine
from service.core.overheads import DEFAULT_COEFFICIENTS
from service.core.planner import PlanRequest, plan
from service.core.planner.features import ServingFeatures, SpeculativeConfig
from service.core.planner.settings import resolve_settings
from service.core.specs import GpuSpec, ModelSpec
from service.core.units import GIB
from tests.core.model_cards import LLAMA_31_8B
from tests.core.test_vllm_worked_examples import GEMMA_3_27B

H100 = GpuSpec(name="H100", memory_bytes=80 * GIB, compute_capability="9.0")
T4 = GpuSpec(
    name="Tesla T4", memory_bytes=15 * GIB, compute_capability="7.5", supports_bf16=False, supports_fp8=False
)


@pytest.mark.parametrize("engine", ["vllm-0.8", "vllm-0.9", "vllm-0.10", "0.10.1", "vllm-0.10-v1"])
def test_releases_0_8_to_0_10_mean_the_v1_engine_they_ran_by_default(engine: str) -> None:
    profile = resolve_engine(engine)
    assert not profile.v0
    assert profile.profile == "vllm-0.11"
    assert not profile.engine.endswith("-v1")


@pytest.mark.parametrize("engine", ["vllm-0.8-v0", "vllm-0.9-v0", "vllm-0.10-v0"])
def test_v0_of_0_8_to_0_10_is_an_explicit_choice(engine: str) -> None:
    profile = resolve_engine(engine)
    assert profile.v0
    assert profile.engine == engine
    assert profile.profile == "vllm-0.10"


@pytest.mark.parametrize("engine", ["vllm-0.5", "vllm-0.6", "v0.6.3", "vllm-0.7"])
def test_releases_before_0_8_are_v0(engine: str) -> None:
    assert resolve_engine(engine).v0


@pytest.mark.parametrize("engine", ["vllm-0.4", "vllm-0.7-v1", "vllm-0.12-v0"])
def test_engines_that_never_existed_are_refused(engine: str) -> None:
    with pytest.raises(UnknownEngine):
        parse_engine(engine)


def test_a_patch_release_is_kept_only_where_the_rules_change_inside_the_line() -> None:
    assert parse_engine("0.6.3")[0] == "vllm-0.6.3"  # profiler and block sizes before 0.6.4
    assert parse_engine("0.6.4")[0] == "vllm-0.6"
    assert parse_engine("0.7.0")[0] == "vllm-0.7.0"  # DeepSeek's MLA layers cached per head before 0.7.1
    assert parse_engine("0.7.1")[0] == "vllm-0.7"
    assert parse_engine("0.7.3")[0] == "vllm-0.7"


@pytest.mark.parametrize(
    ("engine", "per_layer", "first_group", "whole_model"),
    [
        # vllm/v1/core/kv_cache_utils.py: 0.13.0 check_enough_kv_cache_memory sums max_memory_usage_bytes over
        # each worker's layer specs; 0.14.0 _max_memory_usage_bytes_from_groups over the merged specs against
        # min(available_memory); 0.17.0 projects the groups onto each worker again.
        ("vllm-0.12", True, False, False),
        ("vllm-0.13", True, False, False),
        ("vllm-0.14", False, True, True),
        ("vllm-0.16", False, True, True),
        ("vllm-0.17", False, True, False),
        ("vllm-0.19", False, False, False),
    ],
)
def test_the_one_request_check_follows_the_release(
    engine: str, per_layer: bool, first_group: bool, whole_model: bool
) -> None:
    profile = resolve_engine(engine)
    assert profile.refusal_per_layer is per_layer
    assert profile.refusal_counts_first_group_only is first_group
    assert profile.refusal_over_whole_model is whole_model


@pytest.mark.parametrize(
    ("engine", "per_token", "block"),
    [
        # ModelConfig.get_head_size of 0.5.1 / 0.6.6.post1: deepseek_v2 → 256 (192 padded for FlashAttention);
        # K and V of num_key_value_heads // TP = 16 // 2 heads on each of the 27 layers, fp16.
        ("vllm-0.5", 27 * 2 * (16 // 2) * 256 * 2, 16),
        ("vllm-0.6", 27 * 2 * (16 // 2) * 256 * 2, 16),
        # 0.7.0: qk_nope_head_dim + qk_rope_head_dim = 128 + 64, unpadded.
        ("vllm-0.7.0", 27 * 2 * (16 // 2) * (128 + 64) * 2, 16),
        # 0.7.1+: one latent head of kv_lora_rank + qk_rope_head_dim = 576, not split by TP.
        ("vllm-0.7", 27 * (512 + 64) * 2, None),
        ("vllm-0.19", 27 * (512 + 64) * 2, None),
    ],
)
def test_deepseek_mla_layers_are_cached_per_head_before_0_7_1(
    engine: str, per_token: int, block: int | None
) -> None:
    snapshot = builtin_snapshot()
    request = PlanRequest(
        model=snapshot.models["deepseek-v2-lite"].spec,
        gpu=snapshot.gpus["l40"].spec,
        engine=engine,
        tensor_parallel_size=2,
        dtype="float16",
        max_model_len=32768,
        suggest=False,
    )
    kv = plan(request).kv_cache
    assert kv.bytes_per_token == per_token
    if block is not None:  # no MLA backend before 0.7.1: FlashAttention's default block, not FlashMLA's 64
        assert kv.block_size == block


def test_vllm_0_10_now_reports_v1_concurrency_and_v0_the_block_formula() -> None:
    # Same 1000 blocks of 16 tokens and a 20,000-token request: V1 divides by the blocks one request needs,
    # cdiv(20000, 16) = 1250, V0 by the request's tokens (1000 × 16 / 20000).
    common = {"model": LLAMA_31_8B, "gpu": H100, "num_gpu_blocks_override": 1000, "max_model_len": 20_000}
    v1 = plan(PlanRequest(engine="vllm-0.10", **common)).kv_cache  # type: ignore[arg-type]
    v0 = plan(PlanRequest(engine="vllm-0.10-v0", **common)).kv_cache  # type: ignore[arg-type]
    assert v1.max_concurrency == pytest.approx(1000 / math.ceil(20_000 / 16))
    assert v0.max_concurrency == pytest.approx(1000 * 16 / 20_000)


@pytest.mark.parametrize(
    ("engine", "max_model_len", "expected"),
    [
        ("vllm-0.6", 65_536, 512),  # chunked prefill turned on above 32K: SchedulerConfig's 512 before 0.7
        ("vllm-0.5", 65_536, 512),
        ("vllm-0.7", 65_536, 2048),  # 0.7.3 raised the chunked-prefill default to 2048
        ("vllm-0.6", 8192, 8192),  # no chunked prefill: a batch holds a whole prompt, max(len, 2048)
        ("vllm-0.6", 1024, 2048),
    ],
)
def test_v0_batched_tokens_default_follows_the_release(
    engine: str, max_model_len: int, expected: int
) -> None:
    result = plan(PlanRequest(model=LLAMA_31_8B, gpu=H100, engine=engine, max_model_len=max_model_len))
    assert result.settings.max_num_batched_tokens == expected
    assert result.settings.enable_chunked_prefill is (max_model_len > 32_768)


def test_v0_does_not_chunk_prefill_for_sliding_window_models() -> None:
    # EngineArgs turns chunked prefill on only "if is_gpu and not use_sliding_window and ...".
    result = plan(PlanRequest(model=GEMMA_3_27B, gpu=H100, engine="vllm-0.6", max_model_len=65_536))
    assert result.settings.enable_chunked_prefill is False
    assert result.settings.max_num_batched_tokens == 65_536


def test_v0_before_0_6_4_charges_the_drop_in_free_memory() -> None:
    # 0.6.3: peak = init free − free after the profile run, so the caching allocator's residue is charged;
    # 0.6.4 counts torch's allocated peak. Everything else is equal, so the budgets differ by that residue.
    old = plan(PlanRequest(model=LLAMA_31_8B, gpu=H100, engine="vllm-0.6.3", max_model_len=8192))
    new = plan(PlanRequest(model=LLAMA_31_8B, gpu=H100, engine="vllm-0.6", max_model_len=8192))
    assert new.memory.kv_cache_bytes - old.memory.kv_cache_bytes == DEFAULT_COEFFICIENTS.consumed_extra_bytes


@pytest.mark.parametrize(
    ("engine", "block_size", "refused"),
    [
        ("vllm-0.6.3", 64, True),  # choices=[8, 16, 32]
        ("vllm-0.6.3", 32, False),
        ("vllm-0.6", 64, False),  # 0.6.4: choices=[8, 16, 32, 64, 128]
        ("vllm-0.7", 256, True),
        ("vllm-0.5", 256, False),  # 0.5.5: choices=[8, 16, 32, 128, 256, 512, 1024, 2048]
    ],
)
def test_block_sizes_outside_the_release_choices_are_refused(
    engine: str, block_size: int, refused: bool
) -> None:
    result = plan(
        PlanRequest(model=LLAMA_31_8B, gpu=H100, engine=engine, block_size=block_size, max_model_len=8192)
    )
    codes = {m.code for m in result.errors}
    assert ("block_size_unsupported" in codes) is refused
    if refused:
        text = next(m.text for m in result.errors if m.code == "block_size_unsupported")
        assert text.startswith(f"argument --block-size: invalid choice: {block_size} (choose from 8, 16, 32")


def test_batched_tokens_below_max_model_len_without_chunked_prefill_is_refused() -> None:
    result = plan(
        PlanRequest(
            model=LLAMA_31_8B,
            gpu=H100,
            engine="vllm-0.33",
            max_model_len=8192,
            max_num_batched_tokens=4096,
            enable_chunked_prefill=False,
        )
    )
    assert not result.fits
    assert any(
        m.text.startswith("max_num_batched_tokens (4096) is smaller than max_model_len (8192).")
        for m in result.errors
    )
    chunked = plan(
        PlanRequest(
            model=LLAMA_31_8B, gpu=H100, engine="vllm-0.33", max_model_len=8192, max_num_batched_tokens=4096
        )
    )
    assert chunked.fits  # V1 always chunks prefill unless told not to


def test_more_sequences_than_batched_tokens_is_refused() -> None:
    result = plan(
        PlanRequest(
            model=LLAMA_31_8B,
            gpu=H100,
            engine="vllm-0.33",
            max_model_len=8192,
            max_num_seqs=512,
            max_num_batched_tokens=256,
        )
    )
    assert [m.text for m in result.errors if m.code == "max_num_batched_tokens_below_max_num_seqs"] == [
        "max_num_batched_tokens (256) must be greater than or equal to max_num_seqs (512)."
    ]


def test_bf16_on_a_gpu_below_compute_capability_8_is_refused_where_vllm_refuses_it() -> None:
    small = {"model": LLAMA_31_8B, "gpu": T4, "max_model_len": 2048, "quantization": "awq"}
    v0_auto = plan(PlanRequest(engine="vllm-0.7", **small))  # type: ignore[arg-type]
    v1_auto = plan(PlanRequest(engine="vllm-0.33", **small))  # type: ignore[arg-type]
    v1_explicit = plan(PlanRequest(engine="vllm-0.33", dtype="bfloat16", **small))  # type: ignore[arg-type]
    expected = (
        "Bfloat16 is only supported on GPUs with compute capability of at least 8.0. Your Tesla T4 GPU has "
        "compute capability 7.5. You can use float16 instead by explicitly setting the`dtype` flag in CLI, "
        "for example: --dtype=half."
    )
    assert [m.text for m in v0_auto.errors if m.code == "dtype_unsupported"] == [expected]
    assert [m.text for m in v1_explicit.errors if m.code == "dtype_unsupported"] == [expected]
    assert v1_auto.settings.dtype == "float16"
    assert not any(m.code == "dtype_unsupported" for m in v1_auto.messages)


@pytest.mark.parametrize(("method", "minimum"), [("fp8", 80), ("gptq_marlin", 80), ("modelopt", 89)])
def test_quantization_below_its_minimum_capability_is_refused(method: str, minimum: int) -> None:
    result = plan(
        PlanRequest(
            model=LLAMA_31_8B,
            gpu=T4,
            engine="vllm-0.7",
            dtype="float16",
            quantization=method,
            max_model_len=2048,
        )
    )
    assert (
        f"The quantization method {method} is not supported for the current GPU. "
        f"Minimum capability: {minimum}. Current capability: 75."
    ) in [m.text for m in result.errors]


def test_awq_runs_on_turing() -> None:  # AWQConfig.get_min_capability() == 75
    result = plan(
        PlanRequest(
            model=LLAMA_31_8B,
            gpu=T4,
            engine="vllm-0.7",
            dtype="float16",
            quantization="awq",
            max_model_len=2048,
        )
    )
    assert not any(m.code == "quantization_unsupported_gpu" for m in result.messages)


L4 = GpuSpec(name="L4", memory_bytes=22 * GIB, compute_capability="8.9")


@pytest.mark.parametrize(
    ("engine", "utilisation", "enforce_eager", "outcome"),
    [
        # V1 before 0.20: graphs captured after the KV cache, then the sampler warmed up; 0.5 % left over plus the
        # freed activation peak cannot hold the graphs (test_failed_starts: the warm-up check)
        ("vllm-0.19", 0.995, False, "cudagraph_capture_oom"),
        ("vllm-0.7", 0.995, False, "cudagraph_capture_may_oom"),  # V0: no sampler warm-up after the capture
        ("vllm-0.19", 0.9, False, None),  # 2.2 GiB of headroom holds them
        ("vllm-0.19", 0.995, True, None),  # --enforce-eager captures nothing
        ("vllm-0.20", 0.995, False, None),  # 0.20+ subtracts the estimate from the budget instead
    ],
)
def test_cuda_graph_capture_that_cannot_fit_the_headroom_is_flagged(
    engine: str, utilisation: float, enforce_eager: bool, outcome: str | None
) -> None:
    result = plan(
        PlanRequest(
            model=LLAMA_31_8B,
            gpu=L4,
            engine=engine,
            gpu_memory_utilization=utilisation,
            max_model_len=4096,
            enforce_eager=enforce_eager,
        )
    )
    flagged = [
        m.code
        for m in result.messages
        if m.code in ("cudagraph_capture_may_oom", "cudagraph_capture_oom", "sampler_warmup_oom")
    ]
    assert flagged == ([outcome] if outcome else [])
    assert result.fits is (outcome != "cudagraph_capture_oom")


# Qwen2.5-72B-Instruct config.json: intermediate_size 29,568 = 231 groups of 128; its AWQ / GPTQ checkpoints
# publish 29,696 (232 groups) so that every TP up to 8 gets whole groups.
QWEN_25_72B = ModelSpec(
    num_hidden_layers=80,
    hidden_size=8192,
    num_attention_heads=64,
    num_key_value_heads=8,
    head_dim=128,
    vocab_size=152_064,
    num_parameters=72_706_203_648,
    max_model_len=32_768,
    intermediate_size=29_568,
)


@pytest.mark.parametrize(
    ("intermediate", "tp", "refused"),
    [(29_568, 2, True), (29_568, 1, False), (29_696, 8, False), (29_696, 2, False)],
)
def test_a_group_quantised_checkpoint_needs_whole_groups_per_gpu(
    intermediate: int, tp: int, refused: bool
) -> None:
    model = replace(QWEN_25_72B, quantization="awq", intermediate_size=intermediate)
    result = plan(
        PlanRequest(model=model, gpu=H100, engine="vllm-0.33", tensor_parallel_size=tp, max_model_len=8192)
    )
    texts = [m.text for m in result.errors if m.code == "quantized_shape_unaligned"]
    assert texts == (
        [
            "The input size is not aligned with the quantized weight shape. This can be caused by too large "
            "tensor parallel size."
        ]
        if refused
        else []
    )


def test_marlin_names_the_shard_that_is_not_whole_groups() -> None:
    # 29,568 / 4 = 7,392 inputs per GPU, 7,392 % 128 = 96: Marlin (compute capability ≥ 8.0) says so.
    model = replace(QWEN_25_72B, quantization="awq")
    result = plan(
        PlanRequest(model=model, gpu=H100, engine="vllm-0.7", tensor_parallel_size=4, max_model_len=8192)
    )
    assert any(
        m.text.startswith("Weight input_size_per_partition = 7392 is not divisible by group_size = 128.")
        for m in result.errors
    )


def test_a_what_if_quantisation_of_a_bf16_config_is_not_held_to_the_checkpoint_shape() -> None:
    result = plan(
        PlanRequest(
            model=QWEN_25_72B,
            gpu=H100,
            engine="vllm-0.33",
            quantization="awq",
            tensor_parallel_size=8,
            max_model_len=8192,
        )
    )
    assert not any(m.code == "quantized_shape_unaligned" for m in result.messages)


@pytest.mark.parametrize(("blocks", "longest"), [(1030, (1030 - 10) * 16), (1100, None)])
def test_v0_starts_but_never_schedules_a_prompt_that_eats_its_watermark(
    blocks: int, longest: int | None
) -> None:
    # 16,384 tokens need 1,024 blocks of 16; the block manager keeps int(0.01 × blocks) free: 10 of 1,030
    # (1,030 − 1,024 = 6 < 10, so the longest prompt is (1,030 − 10) × 16), 11 of 1,100 (76 left: fine).
    result = plan(
        PlanRequest(
            model=LLAMA_31_8B,
            gpu=H100,
            engine="vllm-0.6",
            num_gpu_blocks_override=blocks,
            max_model_len=16_384,
        )
    )
    assert result.fits
    warned = [m.text for m in result.messages if m.code == "v0_watermark_rejects_long_prompts"]
    if longest is None:
        assert warned == []
    else:
        assert len(warned) == 1
        assert f"never schedules a prompt longer than {longest:,} tokens" in warned[0]
        assert "exceeds the capacity of block_manager" in warned[0]


@pytest.mark.parametrize(
    ("engine", "pp", "expected"),
    [
        ("vllm-0.13", 1, False),
        ("vllm-0.14", 1, True),  # v0.14.0 release notes: "Async scheduling is now enabled by default"
        ("vllm-0.14", 2, False),  # … "Excludes some not-yet-supported configurations: pipeline parallel, …"
        ("vllm-0.15", 1, True),
        ("vllm-0.33", 2, True),
    ],
)
def test_async_scheduling_is_the_default_from_0_14_except_with_pipeline_parallelism_in_0_14(
    engine: str, pp: int, expected: bool
) -> None:
    request = PlanRequest(
        model=LLAMA_31_8B, gpu=H100, engine=engine, max_model_len=4096, pipeline_parallel_size=pp
    )
    assert plan(request).settings.async_scheduling is expected
    cpu = PlanRequest(
        model=LLAMA_31_8B, engine=engine, max_model_len=4096, device="cpu", kv_cache_memory_bytes=4 * GIB
    )
    assert resolve_settings(cpu).async_scheduling is False  # the CPU backend is excluded in every release


@pytest.mark.parametrize(
    ("engine", "batched"), [("vllm-0.5.1", 163840), ("vllm-0.5.2", 163840), ("vllm-0.5", 512)]
)
def test_long_context_chunked_prefill_is_a_default_from_0_5_3(engine: str, batched: int) -> None:
    # vllm PR #6666 (merged 2024-07-23, after 0.5.2): V0 turns chunked prefill on above 32K tokens (512 batched
    # tokens before 0.7); before it a batch holds a whole max_model_len prompt, max(max_model_len, 2048).
    snapshot = builtin_snapshot()
    settings = resolve_settings(
        PlanRequest(
            model=snapshot.models["deepseek-v2-lite"].spec,
            gpu=snapshot.gpus["l40"].spec,
            engine=engine,
            max_model_len=163840,
        )
    )
    assert settings.max_num_batched_tokens == batched
    assert resolve_engine("vllm-0.5.3").engine == resolve_engine("vllm-0.5").engine == "vllm-0.5"


def _speculative(method: str, engine: str, **changes: object) -> PlanRequest:
    draft = None if method in ("ngram", "ngram_gpu", "suffix") else LLAMA_31_8B
    features = ServingFeatures(
        speculative=SpeculativeConfig(method=method, num_speculative_tokens=3, draft=draft)
    )
    return PlanRequest(
        model=LLAMA_31_8B,
        gpu=H100,
        engine=engine,
        max_model_len=4096,
        features=features,
        **changes,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize(
    ("method", "engine", "expected"),
    [
        ("ngram", "vllm-0.19", False),  # logged by 0.19.1, 0.28.0 and 0.32.0
        ("ngram", "vllm-0.32", False),
        ("suffix", "vllm-0.32", False),
        ("draft_model", "vllm-0.14", False),  # logged by 0.14.0 and 0.20.0; in the default list from 0.28
        ("draft_model", "vllm-0.27", False),
        ("draft_model", "vllm-0.28", True),
        ("ngram_gpu", "vllm-0.19", False),  # NgramGPUTypes joined the default list in 0.20
        ("ngram_gpu", "vllm-0.20", True),
        ("ngram_gpu", "vllm-0.32", True),
        ("eagle3", "vllm-0.32", True),
    ],
)
def test_speculative_methods_outside_eagle_and_mtp_turn_default_async_scheduling_off(
    method: str, engine: str, expected: bool
) -> None:
    # vllm/config/vllm.py (VllmConfig.__post_init__): "Async scheduling not supported with ngram-based speculative
    # decoding and will be disabled." when --async-scheduling is not given.
    result = plan(_speculative(method, engine))
    assert result.settings.async_scheduling is expected
    texts = [m.text for m in result.messages if m.code == "async_scheduling_disabled"]
    if expected:
        assert texts == []
    else:
        assert texts == [
            f"Async scheduling not supported with {method}-based speculative decoding and will be disabled."
        ]
    # Before 0.14 async scheduling is off by default: nothing to disable, nothing said.
    earlier = plan(_speculative(method, "vllm-0.13"))
    assert earlier.settings.async_scheduling is False
    assert not any(m.code == "async_scheduling_disabled" for m in earlier.messages)


def test_explicit_async_scheduling_with_a_method_outside_vllms_list_is_refused_from_0_14() -> None:
    # The refusal's list grew with the releases (vllm/config/vllm.py of 0.14.1, 0.16.0, 0.17.0, 0.20.0, 0.25.0 and
    # 0.32.0).
    for engine, kinds in (
        ("vllm-0.14", "EAGLE/MTP kind"),
        ("vllm-0.16", "EAGLE/MTP/Draft Model kind"),
        ("vllm-0.17", "EAGLE/MTP/Draft Model kind"),
        ("vllm-0.20", "EAGLE/MTP/Draft Model/NGram GPU kind"),
        ("vllm-0.25", "EAGLE/MTP/Draft Model/NGram GPU/DSpark kind"),
        ("vllm-0.32", "EAGLE/MTP/Draft Model/NGram GPU/DSpark/DFlash kind"),
    ):
        with pytest.raises(
            InvalidSpec, match=f"only supported with {kinds} of speculative decoding"
        ) as found:
            plan(_speculative("ngram", engine, async_scheduling=True))
        assert found.value.field == "async_scheduling"
    with pytest.raises(InvalidSpec, match="NGram GPU/DSpark/DFlash kind"):
        plan(_speculative("suffix", "vllm-0.32", async_scheduling=True))
    for method in ("eagle3", "draft_model", "ngram_gpu"):
        assert (
            plan(_speculative(method, "vllm-0.20", async_scheduling=True)).settings.async_scheduling is True
        )
    with pytest.raises(
        InvalidSpec, match="EAGLE/MTP/Draft Model kind"
    ):  # no GPU n-gram proposer in 0.17's list
        plan(_speculative("ngram_gpu", "vllm-0.17", async_scheduling=True))
    with pytest.raises(InvalidSpec, match="only supported with EAGLE/MTP kind"):  # draft models from 0.16
        plan(_speculative("draft_model", "vllm-0.14", async_scheduling=True))
    # Before 0.14 async scheduling was an opt-in whose speculative rules were not read: as asked.
    assert plan(_speculative("ngram", "vllm-0.13", async_scheduling=True)).settings.async_scheduling is True
    assert plan(_speculative("ngram", "vllm-0.32", async_scheduling=False)).settings.async_scheduling is False
