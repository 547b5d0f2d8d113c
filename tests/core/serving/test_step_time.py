"""The step-time model against roofline numbers worked out by hand (service/core/serving/step_time.py)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from service.core.errors import InvalidSpec
from service.core.planner import PlanRequest, plan
from service.core.serving.step_time import (
    EAGER_LAUNCH_SECONDS_PER_LAYER,
    SHM_ALLREDUCE_BUS_BYTES_PER_SECOND,
    StepCoefficients,
    StepLoad,
    StepTimeModel,
)
from service.core.specs import GpuSpec
from service.core.throughput import ALLREDUCE_LATENCY_SECONDS, INTERCONNECT_EFFICIENCY
from service.core.units import GIB
from tests.core.model_cards import LLAMA_31_8B

H100 = GpuSpec(
    name="h100",
    memory_bytes=int(79.22 * GIB),
    memory_bandwidth_bytes_per_second=3_350_000_000_000,
    bf16_dense_flops_per_second=989_500_000_000_000,
    interconnect_bandwidth_bytes_per_second=900_000_000_000,
    compute_capability="9.0",
)
# Round numbers so the hand arithmetic below is easy to follow.
COEFFS = StepCoefficients(
    bandwidth_efficiency=0.8,
    compute_efficiency=0.5,
    gemm_half_tokens=100.0,
    attention_efficiency=0.4,
    step_overhead_seconds=0.002,
    per_request_seconds=10e-6,
    layer_dispatch_seconds=300e-6,
    kernel_floor_seconds=5e-6,
)
# Llama-3.1-8B's 32 layers × 10 kernels (2 norms, 5 attention, 3 MLP) × 5 µs of fixed cost each.
FLOOR = 32 * 10 * 5e-6
# Llama-3.1-8B: 8,030,261,248 parameters, of which embedding and LM head are 2 × 128,256 × 4,096.
LINEAR_PARAMS = 8_030_261_248 - 2 * 128_256 * 4_096
LM_HEAD_FLOPS = 2 * 4_096 * 128_256
KV_BYTES_PER_TOKEN = 32 * 8 * 128 * 2 * 2  # layers × KV heads × head dim × (K, V) × bf16 = 131,072


def _model(**changes: object) -> tuple[StepTimeModel, int]:
    request = PlanRequest(model=LLAMA_31_8B, gpu=H100, max_model_len=8192, **changes)  # type: ignore[arg-type]
    p = plan(request)
    return StepTimeModel.build(
        model=LLAMA_31_8B, gpu=H100, plan=p, coefficients=COEFFS
    ), p.memory.weights_bytes


def _decode(batch: int, context: int) -> StepLoad:
    return StepLoad(
        num_tokens=batch,
        num_requests=batch,
        decode_context_tokens=batch * context,
        prefill_attention_pairs=0.0,
        prefill_kv_tokens=0,
    )


def test_the_plan_supplies_weights_and_kv_bytes() -> None:
    model, weights = _model()
    assert model.kv_bytes_per_token == KV_BYTES_PER_TOKEN
    assert model.weight_bytes == weights
    assert math.isclose(model.linear_flops_per_token, 2 * LINEAR_PARAMS)


def test_batch_one_decode_is_the_weight_read_plus_the_kv_read() -> None:
    model, weights = _model(async_scheduling=False)
    bandwidth = 3.35e12 * 0.8
    # Memory: all weights once. Compute at 1 token: η = 0.5 × 1/101 of peak — still below the memory time.
    memory = weights / bandwidth
    compute = (2 * LINEAR_PARAMS + LM_HEAD_FLOPS) / (989.5e12 * 0.5 / 101)
    assert compute < memory
    kv = 1000 * KV_BYTES_PER_TOKEN / bandwidth
    cpu = 0.002 + 10e-6
    assert math.isclose(model.step_seconds(_decode(1, 1000)), memory + kv + FLOOR + cpu, rel_tol=1e-9)


def test_async_scheduling_overlaps_cpu_with_the_gpu() -> None:
    sync, weights = _model(async_scheduling=False)
    overlapped, _ = _model(async_scheduling=True)
    gpu = weights / (3.35e12 * 0.8) + 1000 * KV_BYTES_PER_TOKEN / (3.35e12 * 0.8) + FLOOR
    assert math.isclose(overlapped.step_seconds(_decode(1, 1000)), max(gpu, 0.002 + 10e-6), rel_tol=1e-9)
    assert sync.step_seconds(_decode(1, 1000)) > overlapped.step_seconds(_decode(1, 1000))


def test_a_large_prefill_is_compute_bound_with_causal_attention_flops() -> None:
    model, weights = _model(async_scheduling=False)
    q = 4096
    load = StepLoad(
        num_tokens=q,
        num_requests=1,
        decode_context_tokens=0,
        prefill_attention_pairs=q * (0 + q / 2),
        prefill_kv_tokens=q,
    )
    efficiency = 0.5 * q / (q + 100)
    linear = (2 * LINEAR_PARAMS * q + LM_HEAD_FLOPS) / (989.5e12 * efficiency)
    assert linear > weights / (3.35e12 * 0.8)  # compute-bound
    # 4 × heads × head_dim FLOPs per (query, key) pair per layer, 32 layers, q²/2 causal pairs.
    attention = 4 * 32 * 128 * 32 * (q * q / 2) / (989.5e12 * 0.4) + q * KV_BYTES_PER_TOKEN / (3.35e12 * 0.8)
    # 4,096 tokens exceed the CUDA-graph capture size, so every kernel is launched from Python — but the
    # host's 32 × (300 µs + 14 × 4 µs) ≈ 11 ms is far below the GPU's ≈ 130 ms, and only the slower one counts.
    dispatch = 32 * (300e-6 + EAGER_LAUNCH_SECONDS_PER_LAYER)
    assert dispatch < linear + attention
    expected = linear + attention + FLOOR + 0.002 + 10e-6
    assert math.isclose(model.step_seconds(load), expected, rel_tol=1e-9)


def test_a_full_cuda_graph_decode_has_no_dispatch_floor() -> None:
    model, weights = _model(async_scheduling=False)  # the newest release: FULL_AND_PIECEWISE graphs
    fixed, _ = model.gpu_seconds_parts(_decode(1, 0))
    assert math.isclose(fixed, weights / (3.35e12 * 0.8) + FLOOR, rel_tol=1e-9)


def test_piecewise_graphs_make_a_small_decode_step_dispatch_bound() -> None:
    # V1 0.10: piecewise CUDA graphs, one eager attention call per layer: 32 × 300 µs = 9.6 ms on the host
    # against 16 GB / 2.68 TB/s ≈ 6 ms of weight reads (+ 1.6 ms of kernel floor) on the GPU — the host is
    # the bottleneck.
    model, weights = _model(async_scheduling=False, engine="vllm-0.10")
    memory = weights / (3.35e12 * 0.8)
    assert memory + FLOOR < 32 * 300e-6
    fixed, per_context = model.gpu_seconds_parts(_decode(1, 0))
    assert math.isclose(fixed, 32 * 300e-6, rel_tol=1e-9)
    # A large batch is GPU-bound again: the dispatch floor no longer shows.
    big, _ = model.gpu_seconds_parts(_decode(256, 0))
    assert big > 32 * 300e-6
    assert per_context == pytest.approx(KV_BYTES_PER_TOKEN / (3.35e12 * 0.8))


def test_from_0_11_only_steps_with_a_prefill_chunk_run_piecewise() -> None:
    model, _ = _model(async_scheduling=False)
    chunk = StepLoad(
        num_tokens=17,
        num_requests=2,
        decode_context_tokens=100,
        prefill_attention_pairs=16 * 8.0,
        prefill_kv_tokens=16,
    )
    assert model.dispatch_seconds(chunk) == pytest.approx(32 * 300e-6)
    assert model.dispatch_seconds(_decode(17, 100)) == 0.0


def test_enforce_eager_launches_every_kernel_from_python() -> None:
    # One launch from Python costs d / 3 (d covers the attention piece's 2 launches + 1 replay); eager mode
    # launches all 32 × 10 kernels that way: 320 × 100 µs = 32 ms against ≈ 7.6 ms of GPU work.
    eager, weights = _model(async_scheduling=False, enforce_eager=True)
    assert eager.dispatch_seconds(_decode(8, 500)) == pytest.approx(320 * 300e-6 / 3)
    fixed, _ = eager.gpu_seconds_parts(_decode(8, 500))
    assert math.isclose(fixed, max(weights / (3.35e12 * 0.8) + FLOOR, 320 * 100e-6), rel_tol=1e-9)
    assert fixed == pytest.approx(320 * 100e-6)


def test_above_the_capture_size_v1_runs_its_compiled_pieces_without_graphs() -> None:
    model, _ = _model(async_scheduling=False)
    big = StepLoad(
        num_tokens=600,
        num_requests=600,
        decode_context_tokens=600 * 100,
        prefill_attention_pairs=0.0,
        prefill_kv_tokens=0,
    )
    assert model.dispatch_seconds(big) == pytest.approx(32 * (300e-6 + EAGER_LAUNCH_SECONDS_PER_LAYER))


def test_tensor_parallel_adds_two_ring_all_reduces_per_layer() -> None:
    tp1, _ = _model(async_scheduling=False)
    tp2, _ = _model(async_scheduling=False, tensor_parallel_size=2)
    batch = 64
    message = batch * 4096 * 2  # tokens × hidden × bf16
    per_call = ALLREDUCE_LATENCY_SECONDS + 2 * (2 - 1) / 2 * message / (900e9 / 2 * INTERCONNECT_EFFICIENCY)
    fixed, _ = tp2.gpu_seconds_parts(_decode(batch, 0))
    fixed1, _ = tp1.gpu_seconds_parts(_decode(batch, 0))
    # Each of the 64 requests' logits row (128,256 vocab × bf16) is gathered: half of it crosses the link.
    logits = ALLREDUCE_LATENCY_SECONDS + batch * (2 - 1) / 2 * 128_256 * 2 / (
        900e9 / 2 * INTERCONNECT_EFFICIENCY
    )
    # TP 2 halves the weights per GPU (memory-bound at 64 tokens) and adds 64 all-reduces and the gather.
    memory2 = tp2.weight_bytes / (3.35e12 * 0.8)
    assert math.isclose(fixed, memory2 + 2 * 32 * per_call + logits + FLOOR, rel_tol=1e-9)
    assert fixed < fixed1


def test_the_logits_gather_is_paid_once_per_step_per_scheduled_request() -> None:
    # LogitsProcessor._gather_logits: (n − 1)/n × requests × vocab × bytes, once per step, on the last PP stage.
    for pp in (1, 2):
        p = plan(
            PlanRequest(
                model=LLAMA_31_8B,
                gpu=H100,
                max_model_len=8192,
                tensor_parallel_size=2,
                pipeline_parallel_size=pp,
            )
        )
        shm = StepTimeModel.build(
            model=LLAMA_31_8B, gpu=H100, plan=p, coefficients=COEFFS, gpu_peer_to_peer=False
        )
        assert shm.logits_gather_fixed_seconds == ALLREDUCE_LATENCY_SECONDS
        assert math.isclose(shm.logits_gather_seconds_per_request, 0.5 * 128_256 * 2 / 7.8e9, rel_tol=1e-12)
        without = replace(shm, logits_gather_fixed_seconds=0.0, logits_gather_seconds_per_request=0.0)
        for batch in (1, 64):
            with_gather, _ = shm.gpu_seconds_parts(_decode(batch, 0))
            bare, _ = without.gpu_seconds_parts(_decode(batch, 0))
            gather = ALLREDUCE_LATENCY_SECONDS + batch * 0.5 * 128_256 * 2 / 7.8e9
            assert math.isclose(with_gather - bare, gather, rel_tol=1e-9), (pp, batch)
    tp1, _ = _model()
    assert tp1.logits_gather_fixed_seconds == 0 and tp1.logits_gather_seconds_per_request == 0


def test_without_gpu_p2p_the_all_reduces_run_at_nccls_shared_memory_bandwidth() -> None:
    # NCCL issue #384: 3.9 GB/s all-reduce bus bandwidth through host memory on PCIe Gen3, ×2 for Gen4.
    assert SHM_ALLREDUCE_BUS_BYTES_PER_SECOND == 7.8e9
    p = plan(PlanRequest(model=LLAMA_31_8B, gpu=H100, max_model_len=8192, tensor_parallel_size=2))
    nvlink = StepTimeModel.build(model=LLAMA_31_8B, gpu=H100, plan=p, coefficients=COEFFS)
    shm = StepTimeModel.build(
        model=LLAMA_31_8B, gpu=H100, plan=p, coefficients=COEFFS, gpu_peer_to_peer=False
    )
    batch = 64
    message = batch * 4096 * 2  # tokens × hidden × bf16
    per_call = {
        "nvlink": ALLREDUCE_LATENCY_SECONDS + message / (900e9 / 2 * INTERCONNECT_EFFICIENCY),
        "shm": ALLREDUCE_LATENCY_SECONDS + message / 7.8e9,  # 2(n−1)/n = 1 for two GPUs
    }
    fixed_nvlink, _ = nvlink.gpu_seconds_parts(_decode(batch, 0))
    fixed_shm, _ = shm.gpu_seconds_parts(_decode(batch, 0))
    gather = {
        "nvlink": batch * 0.5 * 128_256 * 2 / (900e9 / 2 * INTERCONNECT_EFFICIENCY),
        "shm": batch * 0.5 * 128_256 * 2 / 7.8e9,
    }
    # Same weights, kernels and dispatch: the steps differ only by 64 all-reduces and one logits gather.
    assert math.isclose(
        fixed_shm - fixed_nvlink,
        2 * 32 * (per_call["shm"] - per_call["nvlink"]) + gather["shm"] - gather["nvlink"],
        rel_tol=1e-9,
    )
    assert fixed_shm - fixed_nvlink > 60e-6 * batch  # 64 × 8,192 B / 7.8 GB/s ≈ 67 µs per token


def test_without_tensor_parallelism_p2p_changes_nothing() -> None:
    p = plan(PlanRequest(model=LLAMA_31_8B, gpu=H100, max_model_len=8192))
    a = StepTimeModel.build(model=LLAMA_31_8B, gpu=H100, plan=p, coefficients=COEFFS)
    b = StepTimeModel.build(model=LLAMA_31_8B, gpu=H100, plan=p, coefficients=COEFFS, gpu_peer_to_peer=False)
    assert a == b


def test_moe_reads_only_the_experts_a_batch_touches() -> None:
    from service.catalog.builtin import builtin_snapshot

    mixtral = builtin_snapshot().find_model("mixtral-8x7b")
    assert mixtral is not None
    spec = mixtral.spec
    p = plan(PlanRequest(model=spec, gpu=H100, tensor_parallel_size=2, max_model_len=4096))
    model = StepTimeModel.build(model=spec, gpu=H100, plan=p, coefficients=COEFFS)
    weights = p.memory.weights_bytes
    active = spec.num_active_parameters / spec.num_parameters  # type: ignore[operator]
    experts, top_k = spec.num_experts, spec.num_experts_per_tok
    assert experts == 8 and top_k == 2
    per_expert = weights * (1 - active) / (experts - top_k)
    for tokens in (1, 2, 8, 64):
        touched = experts * (1 - (1 - top_k / experts) ** tokens)  # E·(1 − (1 − k/E)^T)
        expected = weights * active + per_expert * (touched - top_k)
        assert math.isclose(model.weight_bytes_touched(tokens), expected, rel_tol=1e-6)
    assert math.isclose(model.weight_bytes_touched(10_000), weights, rel_tol=1e-6)


def test_coefficients_are_validated_with_their_field() -> None:
    with pytest.raises(InvalidSpec) as error:
        replace(COEFFS, bandwidth_efficiency=1.5)
    assert error.value.field == "coefficients.bandwidth_efficiency"
    with pytest.raises(InvalidSpec) as error:
        replace(COEFFS, time_scale=0.0)
    assert error.value.field == "coefficients.time_scale"


def test_time_scale_multiplies_every_term() -> None:
    model, _ = _model(async_scheduling=False)
    scaled = replace(model, coefficients=replace(COEFFS, time_scale=2.0))
    assert math.isclose(scaled.step_seconds(_decode(4, 100)), 2 * model.step_seconds(_decode(4, 100)))


def test_which_releases_replay_a_full_decode_graph() -> None:
    from service.core.engines import resolve_engine

    # V1 0.8 – 0.10: piecewise only; FULL_AND_PIECEWISE is the default from 0.11; V0 captured whole decode
    # batches up to 256 (CUDAGraphRunner).
    assert not resolve_engine("vllm-0.9-v1").full_cudagraph_decode
    assert not resolve_engine("vllm-0.10").full_cudagraph_decode
    assert resolve_engine("vllm-0.11").full_cudagraph_decode
    v0 = resolve_engine("vllm-0.5")
    assert v0.full_cudagraph_decode and v0.cudagraph_max_batch == 256
    assert resolve_engine("vllm-0.33").cudagraph_max_batch == 512


def test_the_kernel_floor_counts_each_layers_kernels() -> None:
    from service.catalog.builtin import builtin_snapshot

    catalog = builtin_snapshot()
    dense, _ = _model()
    assert dense.kernels_per_stage == 32 * (2 + 5 + 3)
    mixtral = catalog.find_model("mixtral-8x7b")
    assert mixtral is not None and not mixtral.spec.num_shared_experts
    p = plan(PlanRequest(model=mixtral.spec, gpu=H100, tensor_parallel_size=2, max_model_len=4096))
    moe = StepTimeModel.build(model=mixtral.spec, gpu=H100, plan=p, coefficients=COEFFS)
    assert moe.kernels_per_stage == 32 * (2 + 5 + 7)  # norms, attention, router … combine
    # Pipeline stages each count their own layers.
    p2 = plan(PlanRequest(model=LLAMA_31_8B, gpu=H100, pipeline_parallel_size=2, max_model_len=8192))
    staged = StepTimeModel.build(model=LLAMA_31_8B, gpu=H100, plan=p2, coefficients=COEFFS)
    assert staged.kernels_per_stage == 16 * 10


def test_an_mla_moe_layer_runs_more_kernels() -> None:
    from service.catalog.builtin import builtin_snapshot

    entry = builtin_snapshot().find_model("deepseek-r1")
    assert entry is not None
    spec = entry.spec
    assert spec.uses_mla and spec.num_shared_experts and spec.first_k_dense_replace == 3
    h200 = replace(H100, name="h200", memory_bytes=int(139.8 * GIB))
    p = plan(PlanRequest(model=spec, gpu=h200, tensor_parallel_size=8, max_model_len=8192))
    model = StepTimeModel.build(model=spec, gpu=h200, plan=p, coefficients=COEFFS)
    # 3 dense layers (2 + 11 + 3) and 58 MoE layers with a shared expert (2 + 11 + 7 + 3).
    assert model.kernels_per_stage == 3 * 16 + 58 * 23


def test_an_mla_attention_piece_costs_twice_the_host_time() -> None:
    from service.catalog.builtin import builtin_snapshot

    # MLACommonImpl.forward launches 5 kernels + the next graph replay, FlashAttention 2 + 1: 6 against 3.
    entry = builtin_snapshot().find_model("deepseek-r1")
    assert entry is not None
    h200 = replace(H100, name="h200", memory_bytes=int(139.8 * GIB))
    request = PlanRequest(
        model=entry.spec, gpu=h200, tensor_parallel_size=8, max_model_len=8192, engine="vllm-0.10"
    )
    mla = StepTimeModel.build(model=entry.spec, gpu=h200, plan=plan(request), coefficients=COEFFS)
    assert mla.dispatch_seconds(_decode(1, 100)) == pytest.approx(61 * 2 * 300e-6)
    dense, _ = _model(engine="vllm-0.10")
    assert dense.dispatch_seconds(_decode(1, 100)) == pytest.approx(32 * 300e-6)


def test_v0_runs_steps_with_a_prefill_eagerly() -> None:
    # V0's CUDAGraphRunner covers decode batches only; a prompt step launches every kernel from Python.
    v0, _ = _model(async_scheduling=False, engine="vllm-0.5")
    prompt = StepLoad(
        num_tokens=200,
        num_requests=1,
        decode_context_tokens=0,
        prefill_attention_pairs=200 * 100.0,
        prefill_kv_tokens=200,
    )
    # V0 has no torch.compile either: plain PyTorch eager, 32 × 10 kernels at d / 3 each.
    assert v0.dispatch_seconds(prompt) == pytest.approx(320 * 100e-6)
    assert v0.dispatch_seconds(_decode(200, 100)) == 0.0
    assert v0.dispatch_seconds(_decode(300, 100)) == pytest.approx(320 * 100e-6)


def test_weight_only_quantised_gemms_stay_memory_bound_at_small_batches() -> None:
    # Marlin's 16-row tiles: T½ · 16 / 128 = 12.5 rows instead of 100 for the 16-bit GEMMs.
    bf16, _ = _model(async_scheduling=False)
    awq, awq_weights = _model(async_scheduling=False, quantization="awq")
    assert awq.weight_only_gemm and not bf16.weight_only_gemm
    assert awq._gemm_efficiency(8) == pytest.approx(0.5 * 8 / (8 + 12.5))
    assert bf16._gemm_efficiency(8) == pytest.approx(0.5 * 8 / (8 + 100))
    # A batch-8 AWQ decode step is the 4-bit weight read, not a compute floor.
    fixed, _ = awq.gpu_seconds_parts(_decode(8, 0))
    compute = (2 * LINEAR_PARAMS * 8 + 8 * LM_HEAD_FLOPS) / (989.5e12 * 0.5 * 8 / 20.5)
    memory = awq_weights / (3.35e12 * 0.8)
    assert compute < memory
    assert math.isclose(fixed, memory + FLOOR, rel_tol=1e-9)
    # fp8 weights run W8A8 on a GPU with fp8 tensor cores, weight-only (Marlin W8A16) on one without.
    without, _ = _model(async_scheduling=False, quantization="fp8")
    assert without.weight_only_gemm
    hopper = replace(H100, fp8_dense_flops_per_second=1_979_000_000_000_000)
    p = plan(PlanRequest(model=LLAMA_31_8B, gpu=hopper, max_model_len=8192, quantization="fp8"))
    w8a8 = StepTimeModel.build(model=LLAMA_31_8B, gpu=hopper, plan=p, coefficients=COEFFS)
    assert not w8a8.weight_only_gemm


def test_expert_parallel_imbalance_is_the_busiest_ranks_share() -> None:
    from service.core.serving.step_time import expert_parallel_imbalance

    assert expert_parallel_imbalance(8, 2, 1, 16) == (1.0, 1.0)  # one rank: nothing to balance
    # E = 4 experts, top-1, 2 ranks of 2 experts, one token: each expert touched with p = 1/4, a rank's
    # touched experts ~ Binomial(2, 1/4): F(0) = 9/16, F(1) = 15/16, E[max of 2] = (1 − F(0)²) + (1 − F(1)²).
    e_max = (1 - (9 / 16) ** 2) + (1 - (15 / 16) ** 2)
    memory, flops = expert_parallel_imbalance(4, 1, 2, 1)
    assert math.isclose(memory, 2 * e_max / (4 * 0.25), rel_tol=1e-12)
    # Its one token-expert pair lands on either rank: E[max of 2 Binomial(1, 1/2)] = 3/4, against 1/2 each.
    assert math.isclose(flops, 2 * 0.75 / 1, rel_tol=1e-12)
    # Large batches touch every expert on every rank and spread their pairs evenly.
    assert expert_parallel_imbalance(256, 8, 8, 4096)[0] == 1.0
    assert 1.0 < expert_parallel_imbalance(256, 8, 8, 4096)[1] < 1.03
    # The normal approximation above 512 pairs continues the exact sum.
    exact = expert_parallel_imbalance(8, 8, 8, 64)[1]  # 512 pairs: exact
    approx = expert_parallel_imbalance(8, 8, 8, 65)[1]  # 520 pairs: approximation
    assert math.isclose(exact, approx, rel_tol=0.02)


def test_expert_parallelism_times_the_moe_at_its_busiest_rank() -> None:
    from service.catalog.builtin import builtin_snapshot
    from service.core.planner.features import ServingFeatures
    from service.core.serving.step_time import expert_parallel_imbalance

    spec = builtin_snapshot().find_model("qwen3-30b-a3b").spec  # type: ignore[union-attr]
    base = PlanRequest(model=spec, gpu=H100, tensor_parallel_size=2, max_model_len=8192)
    tp = StepTimeModel.build(model=spec, gpu=H100, plan=plan(base), coefficients=COEFFS)
    ep_plan = plan(replace(base, features=ServingFeatures(enable_expert_parallel=True)))
    ep = StepTimeModel.build(model=spec, gpu=H100, plan=ep_plan, coefficients=COEFFS)
    assert (tp.expert_parallel_ranks, ep.expert_parallel_ranks) == (1, 2)
    weights = ep_plan.memory.weights_bytes
    experts, top_k = spec.num_experts, spec.num_experts_per_tok
    dense = weights * spec.num_active_parameters / spec.num_parameters  # type: ignore[operator]
    per_expert = (weights - dense) / (experts - top_k)  # type: ignore[operator]
    for tokens in (1, 16, 256):
        touched = experts * (1 - (1 - top_k / experts) ** tokens)  # type: ignore[operator]
        factor, _ = expert_parallel_imbalance(experts, top_k, 2, tokens)  # type: ignore[arg-type]
        expected = dense + per_expert * max(0.0, touched * factor - top_k)
        assert math.isclose(ep.weight_bytes_touched(tokens), expected, rel_tol=1e-9)
        assert ep.weight_bytes_touched(tokens) >= tp.weight_bytes_touched(tokens)
    assert ep.step_seconds(_decode(1, 100)) > tp.step_seconds(_decode(1, 100))
    dense_plan = plan(PlanRequest(model=LLAMA_31_8B, gpu=H100, tensor_parallel_size=2, max_model_len=8192))
    assert (
        StepTimeModel.build(
            model=LLAMA_31_8B, gpu=H100, plan=dense_plan, coefficients=COEFFS
        ).expert_parallel_ranks
        == 1
    )
