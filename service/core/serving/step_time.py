"""How long one vLLM engine step takes, from what the step holds (stage 4 of the serving simulator).

One V1 engine step runs the whole model once over every token the scheduler picked (decode tokens and prefill
chunks together, ``vllm/v1/worker/gpu_model_runner.py::execute_model``), samples one token per request whose
prompt is complete, and hands the outputs to the API server. Its time is modelled term by term, per GPU of the
heaviest pipeline stage:

``linear``      max(weight bytes touched / (bandwidth × η_bw), linear FLOPs / (peak × η_gemm(T)))
                — the roofline of the GEMMs; weights are read once per step whatever the batch. MoE layers
                touch only the experts the batch routes to: E·(1 − (1 − k/E)^T) of E experts for T tokens
                (uniform routing; ``throughput.decode_bytes_read``). Small GEMMs do not reach peak:
                η_gemm(T) = η_compute · T / (T + T½) (a saturating curve: cuBLAS tiles are 64–256 rows, so a
                GEMM with few rows wastes most of each tile); an expert GEMM has only the T·k/touched rows
                routed to that expert, so MoE layers run at η_gemm of that row count.
                Expert parallelism (``--enable-expert-parallel``: the E experts split E/R per rank over the
                R = TP × DP ranks instead of every expert sharded R ways; ``vllm/model_executor/layers/
                fused_moe/layer.py::determine_expert_map``, 0.6 – 0.33) makes the MoE layer as slow as its
                busiest rank: each rank reads whole local experts and multiplies the rows routed to them, and
                the combine waits for every rank. With uniform routing each expert is touched with
                p = 1 − (1 − k/E)^T, a rank's touched experts ~ Binomial(E/R, p) and its token-expert pairs
                ~ Binomial(T·k, 1/R); the routed experts' bytes scale by R·E[max of R touched counts]/(E·p)
                and their FLOPs by R·E[max of R pair counts]/(T·k) (``expert_parallel_imbalance``). A batch-1
                decode of DeepSeek-R1 on 8 ranks (k = 8 of 256) reads ≈ 2.5× the expert bytes of the
                tensor-parallel split; a 2,048-token prefill's FLOPs ≈ 1.03×. The MoE output still needs the
                same reduction over the TP group, so the communication terms are unchanged.
                Weight-only quantised GEMMs (AWQ/GPTQ, fp8 weights without fp8 tensor cores) run on
                Marlin-style kernels with 16-row tiles, 8× shorter than the 128-row tiles the fitted T½
                stands for: their curve uses T½ · 16/128, so they stay memory-bound to T ≈ 16. Not the
                routed experts': quantised fused-MoE kernels pad every expert's few rows to a block
                (``moe_align_block_size``) and keep the dense curve.
``attention``   KV bytes read / (bandwidth × η_bw) + prefill attention FLOPs / (peak × η_attn): decode reads
                each running request's whole context once per layer (``Σ context × KV bytes per token``;
                sliding-window and chunked layers only ``min(context, window)``);
                a prefill chunk of q new tokens after c cached ones does ≈ 4·heads·head_dim·q·(c + q/2)
                FLOPs per layer (QKᵀ and PV, causal) and reads its c + q tokens of KV.
``all-reduce``  TP: 2 per layer (after attention and after the MLP, ``RowParallelLinear``), ring cost
                2(n−1)/n × T·hidden·bytes over the link plus a latency floor (``throughput`` constants).
                GPUs that cannot reach each other peer-to-peer (``gpu_peer_to_peer=False``: no NVLink and no
                PCIe P2P between them, as in some VMs and containers) lose both fast paths: vLLM disables its
                custom all-reduce ("Custom allreduce is disabled because your platform lacks GPU P2P
                capability", ``vllm/distributed/device_communicators/custom_all_reduce.py``, 0.5 – 0.33), and
                NCCL, finding no P2P path, stages every transfer through host shared memory (its SHM
                transport). The ring cost is then 2(n−1)/n × T·hidden·bytes at the SHM all-reduce bus
                bandwidth (``SHM_ALLREDUCE_BUS_BYTES_PER_SECOND``) plus the same latency floor.
``logits``      TP: the LM head is split by vocabulary (``ParallelLMHead``), so every step gathers each
                scheduled request's logits row across the TP group before sampling
                (``LogitsProcessor._gather_logits``: an all-gather in V1 — ``Platform.use_all_gather`` — a
                gather to rank 0 in V0; ``vllm/model_executor/layers/logits_processor.py``): one collective
                per step of (n−1)/n × requests × vocab × bytes over the same path as the all-reduces. It is
                paid once per step, on the last pipeline stage. Negligible over NVLink (TP=2, 152k vocabulary:
                ≈ 0.5 µs per request on H100, 0.7 µs on A100), it is a fifth to a quarter of a decode step's
                communication without P2P (Llama-3.1-8B, Qwen2-7B).
``kernels``     every kernel a decoder layer runs has a fixed cost besides its bytes and FLOPs (block scheduling,
                ramp-up and tail, the gap between dependent kernels inside a CUDA graph): t_k per kernel
                (fitted, ``kernel_floor_seconds``) × the kernels of one layer — 2 fused residual+RMSNorm,
                attention 5 (QKV GEMM, rotary, KV-cache write, attention, O GEMM; MLA 11: q_a, q_a norm,
                q_b, kv_a, kv norm, rotary, cache write, W_UK bmm, attention, W_UV bmm, O, the absorbed path
                of ``vllm/model_executor/layers/attention/mla_attention.py`` / V1 ``MLACommonImpl``), a dense
                MLP 3 (gate-up GEMM, SiLU-and-mul, down GEMM), an MoE layer 7 (router GEMM, top-k softmax,
                ``moe_align_block_size``, two grouped GEMMs, activation, combine; ``fused_moe.py``) plus 3 for
                shared experts. Invisible in large steps, it is most of a batch-1 decode step of a model with
                many layers and few active weights (gpt-oss-120b on 8 × H200 at concurrency 8: 2.7 GB of
                weights read per GPU per step, 0.6 ms, yet ≈ 4 ms per output token measured).
``pipeline``    PP: the stages run one after another for one batch (no micro-batch overlap is modelled), so
                a step is pp × the heaviest stage plus one activation hand-off per boundary.
``dispatch``    the host issues the forward's kernels while the GPU runs them, so a step's GPU part is
                max(kernel time above, host dispatch time): the GPU idles only when the host is slower. A
                decode-only step with a full CUDA graph is one replay (dispatch ≈ 0): V0's
                ``CUDAGraphRunner`` (batches ≤ 256) and V1 from 0.11 (``cudagraph_mode`` FULL_AND_PIECEWISE,
                ``vllm/config/compilation.py``; batches ≤ 512 tokens, ``max_cudagraph_capture_size``).
                Piecewise graphs (V1 0.8 – 0.10 for every step; 0.11+ for steps with a prefill chunk) split
                the forward at each attention op (``splitting_ops`` = ``vllm.unified_attention*``), which runs
                eagerly from Python between two graph replays: d per decoder layer (fitted,
                ``layer_dispatch_seconds``) for an attention piece that launches 2 kernels (KV-cache write,
                attention: ``FlashAttentionImpl.forward``) plus the next replay, 2·d for MLA's, which launches
                5 (cache write, W_UK bmm, attention, W_UV bmm, output copy: ``MLACommonImpl.forward``) plus
                the replay — d scales with the launches, 3 against 6, so one launch from Python costs d / 3.
                Plain PyTorch eager (``--enforce-eager``; V0 outside its decode graphs: steps with a prefill,
                batches above 256) launches every kernel of the layer from Python: kernels per layer × d / 3
                (the ``kernels`` count below). V1 steps above the capture size still run the compiled
                pieces, without graphs: d + ≈ 14 launches × 4 µs per layer (≈ 4 µs CUDA launch latency on
                H100/A100 from Inductor's wrapper; a Llama layer runs ≈ 14 kernels). At
                batch 1 a model with many layers and few active weights (MoE, MLA) is dispatch-bound.
                vLLM's CPU backend (``--device cpu``) runs each op on the calling thread: nothing overlaps,
                so there the 14 × 4 µs per layer are added to the kernel time and d does not apply (its
                per-op cost is part of the CPU replay's fitted c₀).
``cpu``         scheduling, sampling, detokenisation and output processing: c₀ + c₁ × requests in the batch.
                With async scheduling (vLLM 0.14+ default; ``planner`` resolves it) the CPU work of step n+1
                overlaps the GPU work of step n, so a step takes max(GPU, CPU); otherwise GPU + CPU.

``spec``        speculative decoding (``speculative.py``; ``engine.Engine._spec_step``): a decoding request brings
                1 + d tokens (its sampled token and d drafts), so the linear layers and the all-reduces see
                n(1 + d) rows, and logits are computed at 1 + d positions per request (``num_requests`` of
                ``gpu_seconds_parts_of`` counts logits rows there). Its attention reads its context once for its
                1 + d queries: the KV read is the decode term above, and the queries' FLOPs are left out — at
                1 + d = 4 queries Llama-3.1-8B does 4 · 4 · heads · head_dim = 64 Ki FLOPs per 4 KiB of KV per
                layer, 16 FLOPs/byte, a fifth of H100's ridge at η_attn (≈ 80), so the read bounds it. A decode-
                only step of n(1 + d) ≤ ``max_cudagraph_capture_size`` tokens still replays one full CUDA graph
                (FULL_AND_PIECEWISE captures uniform decode batches of 1 + k queries per request). The
                proposer's k passes add to the GPU part (``DraftCost``: piecewise graphs only).

The eight fitted coefficients live in ``StepCoefficients``; everything else comes from the model, the GPU
catalog and the capacity plan (weights per GPU, KV bytes per token).
"""

from __future__ import annotations

import functools
import math
import statistics
from dataclasses import dataclass, field, replace

from service.core.engines import resolve_engine
from service.core.errors import InvalidSpec
from service.core.planner import CapacityPlan
from service.core.specs import GpuSpec, LayerType, ModelSpec
from service.core.throughput import ALLREDUCE_LATENCY_SECONDS, INTERCONNECT_EFFICIENCY, decode_bytes_read

CUDA_GRAPH_MAX_TOKENS = 512  # CompilationConfig.max_cudagraph_capture_size default (vLLM 0.11 – 0.33)
EAGER_LAUNCH_SECONDS_PER_LAYER = 14 * 4e-6  # ≈ 14 kernels per decoder layer × ≈ 4 µs launch latency
PIPELINE_HANDOFF_SECONDS = 30e-6  # one send/recv of the activations between stages (NCCL p2p latency floor)
DEFAULT_LINK_BYTES_PER_SECOND = 64 * 10**9  # PCIe 5 ×16 when the catalog has no interconnect figure
# NCCL all-reduce bus bandwidth (nccl-tests ``busbw``) between two GPUs without P2P, through host shared memory:
# 3.9 GB/s measured with NCCL_P2P_DISABLE=1 on PCIe Gen3 ×16 (NVIDIA/nccl issue #384, "Large performance gap
# when using SHM"), doubled for the PCIe Gen4 ×16 host link of A100-class GPUs (16 against 8 GT/s per lane; NCCL's
# topology counts the two links as 24 and 12 GB/s, ``src/graph/topo.cc`` ``kvDictPciGen``). Not derived from
# any serving case. Gen5 hosts (H100/H200) may reach more; kvcap has no per-GPU host-link figure to scale by.
SHM_ALLREDUCE_BUS_BYTES_PER_SECOND = 2 * 3.9e9


@dataclass(frozen=True, slots=True, kw_only=True)
class StepCoefficients:
    """The few fitted numbers of the step-time model.

    Defaults fitted on 2026-12-03 (``python -m bench.fit_step_coefficients``, starting from the 2026-12-02
    values) on the 21 *fit* cases of ``tests/data/serving-benchmarks.json`` that are V1 engines with their GPUs
    in one host (A100 80GB and H100/H200: Qwen2-7B, Qwen2.5-32B, Qwen3-14B/30B-A3B, DeepSeek-R1 AWQ TP8 and FP8
    EP, gpt-oss-120b TP8; vLLM 0.9–0.16; concurrency 1–500), in two passes: once the simulator primed the
    prefix cache with the first prompt as the benchmark client's readiness probe does
    (``simulate.client_primes_first_prompt``; η_attn 0.367 → 0.262, c₁ 0.85 → 0.1 µs, the bottom of its range:
    per-request CPU time is not determined by these cases), then with the request latency r added (r 5.6 ms,
    c₀ 0.79 → 1.11 ms, t_k 4.2 → 4.4 µs; fit loss 0.199 → 0.163, held-back loss 0.207 → 0.198, never fitted).
    ``make accuracy`` on the 86 cases, median |error| of output_throughput / mean TPOT / mean TTFT: V1 one-host
    held-back cases 5.1 % / 3.2 % / 21.2 % (4.5 % / 3.8 % / 26.6 % with the 2026-12-02 values), every held-back
    case 14.5 % / 14.1 % / 24.2 % (14.9 % / 14.5 % / 34.2 %), every fit case 10.9 % / 12.0 % / 35.2 %.
    η_bw sits at the top of its physical range (0.95): read η_bw, c₀ and t_k together. Each value lies inside
    the physical range the fit allows (``bench/fit_step_coefficients.py::BOUNDS``).
    """

    bandwidth_efficiency: float = 0.95  # η_bw: fraction of datasheet HBM bandwidth weights and KV stream at
    compute_efficiency: float = 0.63  # η_compute: fraction of dense peak a large GEMM reaches
    gemm_half_tokens: float = 126.7  # T½: rows at which a GEMM reaches half of η_compute
    attention_efficiency: float = 0.262  # η_attn: fraction of dense peak prefill attention reaches
    step_overhead_seconds: float = 0.001106  # c₀: CPU time per step (schedule, prepare inputs, sample)
    per_request_seconds: float = 1e-7  # c₁: CPU time per request in the batch (bookkeeping, output)
    layer_dispatch_seconds: float = 125e-6  # d: host time per decoder layer under piecewise CUDA graphs
    kernel_floor_seconds: float = 4.41e-6  # t_k: fixed GPU time of one kernel of a decoder layer
    # r: the API server's part of a request's round trip, outside the engine steps — HTTP and SSE, tokenising
    # the prompt, the hand-off to the engine core process and detokenising (``vllm/entrypoints/openai``,
    # ``vllm/v1/engine/async_llm.py``): added once to each request's TTFT and E2EL.
    request_latency_seconds: float = 0.0056
    # Not fitted here: a per-deployment multiplier of every step's time (GPU and CPU), fitted by the live
    # pipeline from one deployment's observed latencies (observed ÷ simulated TPOT). 1.0 = the model as is.
    time_scale: float = 1.0

    def __post_init__(self) -> None:
        for name in ("bandwidth_efficiency", "compute_efficiency", "attention_efficiency"):
            value = getattr(self, name)
            if not 0 < value <= 1:
                raise InvalidSpec(f"must be in (0, 1], got {value}", field=f"coefficients.{name}")
        if not self.time_scale > 0:
            raise InvalidSpec(f"must be > 0, got {self.time_scale}", field="coefficients.time_scale")
        for name in (
            "request_latency_seconds",
            "gemm_half_tokens",
            "step_overhead_seconds",
            "per_request_seconds",
            "layer_dispatch_seconds",
            "kernel_floor_seconds",
        ):
            if getattr(self, name) < 0:
                raise InvalidSpec("must not be negative", field=f"coefficients.{name}")

    def as_dict(self) -> dict[str, float]:
        return {
            "bandwidth_efficiency": self.bandwidth_efficiency,
            "compute_efficiency": self.compute_efficiency,
            "gemm_half_tokens": self.gemm_half_tokens,
            "attention_efficiency": self.attention_efficiency,
            "step_overhead_seconds": self.step_overhead_seconds,
            "per_request_seconds": self.per_request_seconds,
            "layer_dispatch_seconds": self.layer_dispatch_seconds,
            "kernel_floor_seconds": self.kernel_floor_seconds,
            "time_scale": self.time_scale,
            "request_latency_seconds": self.request_latency_seconds,
        }


DEFAULT_STEP_COEFFICIENTS = StepCoefficients()


@dataclass(frozen=True, slots=True, kw_only=True)
class StepLoad:
    """What one engine step holds."""

    num_tokens: int  # scheduled tokens (decode tokens + prefill chunk tokens)
    num_requests: int  # requests in the batch
    decode_context_tokens: int  # Σ context of the decode requests (KV tokens their attention reads)
    prefill_attention_pairs: float  # Σ over prefill chunks of q·(c + q/2): causal (query, key) pairs
    prefill_kv_tokens: int  # Σ over prefill chunks of c + q: KV tokens the chunks' attention reads
    # Σ over decode requests of min(context, window): what sliding-window layers read (0 without them).
    decode_windowed_tokens: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class StepTimeModel:
    """Per-deployment constants of the step-time formula, computed once per simulation (``build``)."""

    coefficients: StepCoefficients
    weight_bytes: int  # per GPU, heaviest stage
    model: ModelSpec
    bandwidth_bytes_per_second: float
    peak_flops_per_second: float
    linear_flops_per_token: (
        float  # per GPU: 2 × active linear parameters / (tp × pp), routed experts included
    )
    expert_flops_per_token: float  # per GPU: the routed experts' part of ``linear_flops_per_token`` (MoE)
    lm_head_flops_per_request: float  # per GPU: 2 × hidden × vocab / tp (logits only for sampled positions)
    attention_flops_per_pair: float  # per GPU and stage: 4 × query heads / tp × head dim × layers / pp
    kv_bytes_per_token: int  # per GPU (the plan's bytes per token of the rank), every layer
    windowed_kv_bytes_per_token: (
        int  # the part of it in sliding-window / chunked layers (read up to a window)
    )
    attention_window_tokens: int  # their window (0: no such layers)
    allreduce_fixed_seconds: float  # per step: 2 × layers/pp × latency (0 without TP)
    allreduce_seconds_per_token: float  # per step and token
    logits_gather_fixed_seconds: float = 0.0  # TP: one gather of the logits per step (latency floor)
    logits_gather_seconds_per_request: float = 0.0  # TP: its (n−1)/n × vocab × bytes per scheduled request
    layers_per_stage: int
    pipeline_parallel_size: int
    enforce_eager: bool
    async_scheduling: bool
    full_cudagraph_decode: bool = True  # decode-only steps replay one full CUDA graph (engine profile)
    cudagraph_max_batch: int = CUDA_GRAPH_MAX_TOKENS  # largest captured batch (tokens)
    host_synchronous: bool = False  # the CPU backend: ops run on the host thread, no dispatch overlap
    kernels_per_stage: int = 0  # kernels the decoder layers of one stage run per step (``kernels`` term)
    attention_dispatch_weight: float = 1.0  # the eager attention piece's host time in units of d (MLA: 2)
    piecewise_cudagraphs: bool = True  # V1 captures piecewise graphs for mixed steps; V0 runs them eagerly
    weight_only_gemm: bool = False  # 4/8-bit weights with 16-bit activations (Marlin-style kernels)
    expert_parallel_ranks: int = 1  # R of expert parallelism (1: experts sharded by TP, no imbalance)
    expert_parallel_token_scale: int = 1  # DP ranks whose batches meet in each MoE layer (tokens × this)
    # The step-independent factors of ``gpu_seconds_parts_of``, each computed once here by the expression it
    # stands for there (so every step's terms are the same numbers): derived, not inputs.
    _bandwidth: float = field(init=False, repr=False, compare=False)
    _moe: bool = field(init=False, repr=False, compare=False)
    _dense_memory_seconds: float = field(init=False, repr=False, compare=False)  # dense models' weights
    _dense_linear_flops_per_token: float = field(init=False, repr=False, compare=False)
    _gemm_half_tokens: float = field(init=False, repr=False, compare=False)
    _attention_flops_per_second: float = field(init=False, repr=False, compare=False)
    _kernel_floor_seconds: float = field(init=False, repr=False, compare=False)
    _per_context_token_seconds: float = field(init=False, repr=False, compare=False)
    _dispatch: tuple[float, float, float, float] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        c = self.coefficients
        bandwidth = self.bandwidth_bytes_per_second * c.bandwidth_efficiency
        half = c.gemm_half_tokens
        if self.weight_only_gemm:
            half *= MARLIN_TILE_ROWS / DENSE_TILE_ROWS
        derived = {
            "_bandwidth": bandwidth,
            "_moe": self.model.is_moe,
            "_dense_memory_seconds": float(self.weight_bytes) / bandwidth,
            "_dense_linear_flops_per_token": self.linear_flops_per_token - self.expert_flops_per_token,
            "_gemm_half_tokens": half,
            "_attention_flops_per_second": self.peak_flops_per_second * c.attention_efficiency,
            "_kernel_floor_seconds": self.kernels_per_stage * c.kernel_floor_seconds,
            "_per_context_token_seconds": self.pipeline_parallel_size
            * (self.kv_bytes_per_token - self.windowed_kv_bytes_per_token)
            / bandwidth
            * c.time_scale,
            # dispatch_seconds_of by (above the capture size, decode only): all it depends on.
            "_dispatch": tuple(
                self._dispatch_of(above_capture=above, decode_only=decode)
                for above in (False, True)
                for decode in (False, True)
            ),
        }
        for name, value in derived.items():
            object.__setattr__(self, name, value)

    @classmethod
    def build(
        cls,
        *,
        model: ModelSpec,
        gpu: GpuSpec,
        plan: CapacityPlan,
        coefficients: StepCoefficients,
        gpu_peer_to_peer: bool = True,
    ) -> StepTimeModel:
        """``gpu_peer_to_peer=False``: the TP GPUs have no P2P path (see the module docstring's ``all-reduce``)."""
        settings = plan.settings
        profile = resolve_engine(settings.engine)
        if not gpu.memory_bandwidth_bytes_per_second:
            raise InvalidSpec(f"GPU {gpu.name} has no memory bandwidth figure; cannot simulate", field="gpu")
        quant = settings.quantization
        fp8 = quant in ("fp8", "nvfp4") and gpu.fp8_dense_flops_per_second is not None
        peak = (gpu.fp8_dense_flops_per_second if fp8 else None) or gpu.bf16_dense_flops_per_second
        if not peak:
            raise InvalidSpec(f"GPU {gpu.name} has no dense FLOP/s figure; cannot simulate", field="gpu")
        tp, pp = settings.tensor_parallel_size, settings.pipeline_parallel_size
        active = model.num_active_parameters or model.num_parameters
        embedding = model.vocab_size * model.hidden_size
        lm_head = 0 if model.tie_word_embeddings else embedding
        linear_params = max(1, active - embedding - lm_head)
        layers = model.num_hidden_layers
        per_stage_layers = max(1, layers // pp)
        expert_params = 0
        if model.is_moe and model.num_experts_per_tok:
            moe_layers = layers - (model.first_k_dense_replace or 0)
            width = model.moe_intermediate_size or model.intermediate_size or 0
            expert_params = min(
                linear_params, 3 * model.hidden_size * width * model.num_experts_per_tok * moe_layers
            )
        if model.uses_mla and model.kv_lora_rank and model.qk_rope_head_dim:
            # MLA (absorbed): scores over kv_lora_rank + rope dims, values over kv_lora_rank.
            pair_flops_per_head = 2 * (model.kv_lora_rank + model.qk_rope_head_dim) + 2 * model.kv_lora_rank
        else:
            pair_flops_per_head = 4 * model.head_dim
        attention_layers = sum(1 for kind in model.resolved_layer_types if kind.is_attention)
        attention_flops = (
            pair_flops_per_head * max(1, model.num_attention_heads // tp) * attention_layers / pp
        )
        act_bytes = 2 if settings.dtype in ("bfloat16", "float16") else 4
        if tp > 1:
            calls = 2 * per_stage_layers
            fixed = calls * ALLREDUCE_LATENCY_SECONDS
            # Ring all-reduce moves 2(n−1)/n of the message per GPU at the path's bus bandwidth.
            bus = _allreduce_bus_bandwidth(gpu, peer_to_peer=gpu_peer_to_peer)
            per_token = calls * 2 * (tp - 1) / tp * model.hidden_size * act_bytes / bus
            logits_fixed = ALLREDUCE_LATENCY_SECONDS
            logits_per_request = (tp - 1) / tp * model.vocab_size * act_bytes / bus
        else:
            fixed, per_token = 0.0, 0.0
            logits_fixed, logits_per_request = 0.0, 0.0
        windowed, window = _windowed_kv(model, plan)
        features = plan.features
        ep_ranks, ep_scale = 1, 1
        if features is not None and features.enable_expert_parallel and model.is_moe and model.num_experts:
            ep_scale = max(1, features.data_parallel_size)
            ep_ranks = tp * ep_scale
        return cls(
            expert_parallel_ranks=ep_ranks,
            expert_parallel_token_scale=ep_scale,
            coefficients=coefficients,
            weight_bytes=plan.memory.weights_bytes,
            model=model,
            bandwidth_bytes_per_second=float(gpu.memory_bandwidth_bytes_per_second),
            peak_flops_per_second=float(peak),
            linear_flops_per_token=2.0 * linear_params / (tp * pp),
            expert_flops_per_token=2.0 * expert_params / (tp * pp),
            lm_head_flops_per_request=2.0 * model.hidden_size * model.vocab_size / tp,
            attention_flops_per_pair=float(attention_flops),
            kv_bytes_per_token=plan.kv_cache.bytes_per_token,
            windowed_kv_bytes_per_token=windowed,
            attention_window_tokens=window,
            allreduce_fixed_seconds=fixed,
            allreduce_seconds_per_token=per_token,
            logits_gather_fixed_seconds=logits_fixed,
            logits_gather_seconds_per_request=logits_per_request,
            layers_per_stage=per_stage_layers,
            pipeline_parallel_size=pp,
            enforce_eager=settings.enforce_eager,
            async_scheduling=settings.async_scheduling,
            full_cudagraph_decode=profile.full_cudagraph_decode,
            cudagraph_max_batch=profile.cudagraph_max_batch,
            host_synchronous=settings.device == "cpu",
            # A GPU kernel's fixed cost; on the CPU backend each op's is part of the fitted c₀ instead.
            kernels_per_stage=0 if settings.device == "cpu" else _kernels_per_stage(model, per_stage_layers),
            attention_dispatch_weight=MLA_DISPATCH_WEIGHT if model.uses_mla else 1.0,
            piecewise_cudagraphs=not profile.v0,
            weight_only_gemm=quant in WEIGHT_ONLY_QUANTIZATIONS or (quant in ("fp8", "nvfp4") and not fp8),
        )

    def weight_bytes_touched(self, num_tokens: int) -> float:
        """Weight bytes one step reads: all of them for dense models, the routed experts' share for MoE
        (on the busiest rank under expert parallelism)."""
        if not self.model.is_moe:
            return float(self.weight_bytes)
        tokens = max(1, num_tokens)
        split = float(
            decode_bytes_read(
                self.model,
                weights_bytes=self.weight_bytes,
                kv_bytes_per_token=0,
                batch=tokens,
                context_tokens=0,
            )
        )
        if self.expert_parallel_ranks <= 1:
            return split
        model = self.model
        experts, top_k = model.num_experts or 1, model.num_experts_per_tok or 1
        # decode_bytes_read's split: a dense part (attention, shared experts, embeddings and k routed experts'
        # worth, the active parameters) plus one expert's share per touched expert beyond those k.
        dense = (
            self.weight_bytes * (model.num_active_parameters or model.num_parameters) / model.num_parameters
        )
        per_expert = (self.weight_bytes - dense) / max(1, experts - top_k)
        touched = experts * (1 - (1 - top_k / experts) ** tokens)
        memory_factor, _ = expert_parallel_imbalance(
            experts, top_k, self.expert_parallel_ranks, tokens * self.expert_parallel_token_scale
        )
        return dense + per_expert * max(0.0, touched * memory_factor - top_k)

    def _gemm_efficiency(self, rows: float, *, experts: bool = False) -> float:
        """η_gemm(T) = η_compute · T / (T + T½); dense weight-only quantised GEMMs: T½ · 16 / 128."""
        c = self.coefficients
        half = c.gemm_half_tokens if experts else self._gemm_half_tokens
        return c.compute_efficiency * rows / (rows + half)

    def gpu_seconds_parts(self, load: StepLoad) -> tuple[float, float]:
        """(context-independent GPU seconds, seconds per decode context token) of one step.

        Splitting out the term linear in ``decode_context_tokens`` lets the engine sum a decode stretch —
        where only contexts grow — in closed form.
        """
        return self.gpu_seconds_parts_of(
            load.num_tokens, load.num_requests, load.prefill_attention_pairs, load.prefill_kv_tokens
        )

    def gpu_seconds_parts_of(
        self, num_tokens: int, num_requests: int, prefill_attention_pairs: float, prefill_kv_tokens: int
    ) -> tuple[float, float]:
        """``gpu_seconds_parts`` from the load's figures (the engine's hot path: no ``StepLoad`` per step).

        A pure function of its arguments, so the engine may keep its answers by argument.
        """
        c = self.coefficients
        tokens = max(1, num_tokens)
        bandwidth = self._bandwidth
        memory = self.weight_bytes_touched(tokens) / bandwidth if self._moe else self._dense_memory_seconds
        peak = self.peak_flops_per_second
        dense_flops = (
            self._dense_linear_flops_per_token * tokens + self.lm_head_flops_per_request * num_requests
        )
        # ``_gemm_efficiency(tokens)``, inline.
        compute = dense_flops / (peak * (c.compute_efficiency * tokens / (tokens + self._gemm_half_tokens)))
        if self.expert_flops_per_token:
            # Each touched expert multiplies only the rows routed to it: T·k / experts touched.
            model = self.model
            experts = model.num_experts or 1
            top_k = model.num_experts_per_tok or 1
            touched = experts * (1 - (1 - top_k / experts) ** tokens)
            rows = tokens * top_k / touched
            expert_flops = self.expert_flops_per_token * tokens
            if self.expert_parallel_ranks > 1:
                _, flops_factor = expert_parallel_imbalance(
                    experts, top_k, self.expert_parallel_ranks, tokens * self.expert_parallel_token_scale
                )
                expert_flops *= flops_factor
            compute += expert_flops / (peak * self._gemm_efficiency(rows, experts=True))
        linear = max(memory, compute)
        attention = (
            prefill_kv_tokens * self.kv_bytes_per_token / bandwidth
            + prefill_attention_pairs * self.attention_flops_per_pair / self._attention_flops_per_second
        )
        comm = self.allreduce_fixed_seconds + self.allreduce_seconds_per_token * tokens
        kernels = linear + attention + comm + self._kernel_floor_seconds
        pp = self.pipeline_parallel_size
        logits = 0.0
        if self.logits_gather_seconds_per_request:
            logits = self.logits_gather_fixed_seconds + self.logits_gather_seconds_per_request * num_requests
        if self.host_synchronous:
            stage = kernels + self.layers_per_stage * EAGER_LAUNCH_SECONDS_PER_LAYER
            last = stage + logits
        else:
            dispatch = self._dispatch[2 * (num_tokens > self.cudagraph_max_batch) + (prefill_kv_tokens == 0)]
            stage = max(kernels, dispatch)
            last = max(kernels + logits, dispatch)  # the last stage also gathers the logits
        fixed = (pp - 1) * stage + last + (pp - 1) * PIPELINE_HANDOFF_SECONDS
        return fixed * c.time_scale, self._per_context_token_seconds

    def dispatch_seconds(self, load: StepLoad) -> float:
        """Host time to issue one stage's forward (see the module docstring's ``dispatch``).

        Compared with the stage's context-independent kernel time only: the decode attention reads that grow
        with context are left outside the max, which keeps a decode stretch's step time linear in its steps.
        """
        return self.dispatch_seconds_of(load.num_tokens, decode_only=load.prefill_kv_tokens == 0)

    def dispatch_seconds_of(self, num_tokens: int, *, decode_only: bool) -> float:
        """``dispatch_seconds`` from the step's token count and whether it holds only decodes."""
        return self._dispatch[2 * (num_tokens > self.cudagraph_max_batch) + decode_only]

    def _dispatch_of(self, *, above_capture: bool, decode_only: bool) -> float:
        d = self.coefficients.layer_dispatch_seconds
        v0 = not self.piecewise_cudagraphs
        if self.enforce_eager or (v0 and (above_capture or not decode_only)):
            # Plain PyTorch eager: every kernel is one Python launch, d / 3 each (d covers 3 launches).
            return self.kernels_per_stage * d / PIECE_LAUNCHES
        if decode_only and self.full_cudagraph_decode and not above_capture:
            return 0.0
        piece = d * self.attention_dispatch_weight
        if above_capture:  # compiled pieces without graphs: their kernels launched by Inductor's wrapper
            return self.layers_per_stage * (piece + EAGER_LAUNCH_SECONDS_PER_LAYER)
        return self.layers_per_stage * piece

    def seconds_per_windowed_token(self) -> float:
        """Seconds per token of ``decode_windowed_tokens`` (sliding-window layers' KV reads)."""
        c = self.coefficients
        bandwidth = self.bandwidth_bytes_per_second * c.bandwidth_efficiency
        return self.pipeline_parallel_size * self.windowed_kv_bytes_per_token / bandwidth * c.time_scale

    def cpu_seconds(self, num_requests: int) -> float:
        c = self.coefficients
        return (c.step_overhead_seconds + c.per_request_seconds * num_requests) * c.time_scale

    def step_seconds(self, load: StepLoad) -> float:
        """Wall time of one step: GPU and CPU parts, overlapped under async scheduling."""
        fixed, per_context = self.gpu_seconds_parts(load)
        gpu = fixed + per_context * load.decode_context_tokens
        if load.decode_windowed_tokens:
            gpu += self.seconds_per_windowed_token() * load.decode_windowed_tokens
        cpu = self.cpu_seconds(load.num_requests)
        return max(gpu, cpu) if self.async_scheduling else gpu + cpu


# ngram/suffix proposers match on the host (``vllm/v1/spec_decode/ngram_proposer.py``: a numba KMP scan of each
# request's tokens, after sampling, before the step returns). Not fitted: an order-of-magnitude estimate of one
# request's scan over a few thousand tokens, paid on the step's critical path.
NGRAM_HOST_SECONDS_PER_REQUEST = 5e-6


@dataclass(frozen=True, slots=True, kw_only=True)
class DraftCost:
    """The proposer's share of a speculative-decoding step (``vllm/v1/spec_decode/``, read on main after 0.11).

    ``gpu_model_runner.py::propose_draft_token_ids`` runs the proposer in the same step, after the target's
    forward and the rejection sampler, on the same GPU: its time adds to the step's GPU part.

    * EAGLE, EAGLE-3, MTP and draft models (``EagleProposer.propose`` and its draft-model subclass): one forward
      of the draft over every token the target computed in the step (its hidden states and KV for each), the
      logits of each request's last position, then ``k − 1`` more forwards of one token per request — ``k``
      sequential passes in all, each timed by the draft's own ``StepTimeModel`` (its weights read once per
      pass, its attention reading the requests' context in its own KV layers). "Currently the eagle proposer
      only supports cudagraph_mode PIECEWISE" (``eagle.py``): its passes replay piecewise graphs up to
      ``max_cudagraph_capture_size`` tokens, never one full graph, so each pays the piecewise host dispatch of
      its layers even where the target's decode step is a single full-graph replay.
    * Medusa / MLP speculator heads: one pass of the heads over each request's last hidden state.
    * ngram / suffix: no GPU work; a host-side match per request (``NGRAM_HOST_SECONDS_PER_REQUEST``).
    """

    method: str
    num_passes: int  # sequential draft forwards per step (k, 1 for Medusa, 0 without a GPU proposer)
    model: StepTimeModel | None = None  # the draft's step-time model (None: no GPU proposer)
    host_seconds_per_request: float = 0.0  # ngram/suffix matching, on the step's critical path

    def seconds_parts_of(
        self, num_tokens: int, num_requests: int, prefill_attention_pairs: float, prefill_kv_tokens: int
    ) -> tuple[float, float]:
        """(context-independent seconds, seconds per decode context token) of the proposer in one step of
        ``num_tokens`` target tokens over ``num_requests`` requests; a pure function of its arguments."""
        fixed = self.host_seconds_per_request * num_requests
        model = self.model
        if model is None or self.num_passes <= 0:
            return fixed, 0.0
        if self.num_passes == 1 and self.method in ("medusa", "mlp_speculator"):
            head_fixed, _ = model.gpu_seconds_parts_of(num_requests, num_requests, 0.0, 0)
            return fixed + head_fixed, 0.0
        first_fixed, first_context = model.gpu_seconds_parts_of(
            num_tokens, num_requests, prefill_attention_pairs, prefill_kv_tokens
        )
        later = self.num_passes - 1
        fixed += first_fixed
        per_context = first_context
        if later:
            next_fixed, next_context = model.gpu_seconds_parts_of(num_requests, num_requests, 0.0, 0)
            # The later passes read every request's context, prefill chunks' included, once each.
            fixed += later * (next_fixed + next_context * prefill_kv_tokens)
            per_context += later * next_context
        return fixed, per_context


def draft_cost(
    target: StepTimeModel,
    *,
    method: str,
    num_speculative_tokens: int,
    draft: ModelSpec | None,
    draft_weight_bytes: int,
    draft_kv_bytes_per_token: int,
    draft_tensor_parallel_size: int,
    tensor_parallel_size: int,
    lm_head_bytes: int,
) -> DraftCost:
    """The proposer of ``method`` timed with the target's step-time machinery and the draft's own shape.

    ``draft_weight_bytes`` is what the planner loads for the draft on one GPU (``speculative_weights_bytes``);
    a head that shares the target's LM head (EAGLE, MTP) still reads it every pass, so ``lm_head_bytes`` (the
    target's LM head on one GPU) is added to each pass's reads. MTP passes run one of the target's
    ``num_nextn_predict_layers`` decoder layers each (reused when k exceeds them), with the target's widths.
    """
    family = "mtp" if method.endswith("mtp") else method
    if family in ("ngram", "ngram_gpu", "suffix"):
        return DraftCost(method=method, num_passes=0, host_seconds_per_request=NGRAM_HOST_SECONDS_PER_REQUEST)
    target_tp = max(1, tensor_parallel_size)
    pp = target.pipeline_parallel_size
    if family == "mtp" or draft is None:
        model = target.model
        layers_in_model = max(1, model.num_hidden_layers)
        mtp_layers = max(1, model.num_nextn_predict_layers)
        per_pass_layers = 1
        weight_bytes = draft_weight_bytes // mtp_layers + lm_head_bytes
        scale = pp / layers_in_model  # one decoder layer's share of the target's per-stage figures
        attention_layers = max(1, sum(1 for kind in model.resolved_layer_types if kind.is_attention))
        fields = {
            "model": model,
            "linear_flops_per_token": target.linear_flops_per_token * scale,
            "expert_flops_per_token": target.expert_flops_per_token * scale,
            "lm_head_flops_per_request": target.lm_head_flops_per_request,
            "attention_flops_per_pair": target.attention_flops_per_pair * pp / attention_layers,
        }
        tp = target_tp
    else:
        model = draft
        tp = max(1, draft_tensor_parallel_size)
        per_pass_layers = max(1, model.num_hidden_layers)
        weight_bytes = draft_weight_bytes + (lm_head_bytes if family == "eagle" else 0)
        embedding = model.vocab_size * model.hidden_size
        lm_head = 0 if model.tie_word_embeddings else embedding
        linear_params = max(1, (model.num_active_parameters or model.num_parameters) - embedding - lm_head)
        if model.uses_mla and model.kv_lora_rank and model.qk_rope_head_dim:
            pair_flops_per_head = 2 * (model.kv_lora_rank + model.qk_rope_head_dim) + 2 * model.kv_lora_rank
        else:
            pair_flops_per_head = 4 * model.head_dim
        attention_layers = sum(1 for kind in model.resolved_layer_types if kind.is_attention)
        fields = {
            "model": model,
            "linear_flops_per_token": 2.0 * linear_params / tp,
            "expert_flops_per_token": 0.0,  # (a dense draft; an MoE draft's routed share is not split out)
            "lm_head_flops_per_request": 2.0 * model.hidden_size * model.vocab_size / tp,
            "attention_flops_per_pair": float(
                pair_flops_per_head * max(1, model.num_attention_heads // tp) * attention_layers
            ),
        }
    shared_tp = tp > 1 and tp == target_tp
    per_layer = per_pass_layers / max(1, target.layers_per_stage)
    draft_model = replace(
        target,
        **fields,  # type: ignore[arg-type]
        weight_bytes=weight_bytes,
        kv_bytes_per_token=draft_kv_bytes_per_token,
        windowed_kv_bytes_per_token=0,
        attention_window_tokens=0,
        allreduce_fixed_seconds=target.allreduce_fixed_seconds * per_layer if shared_tp else 0.0,
        allreduce_seconds_per_token=target.allreduce_seconds_per_token * per_layer if shared_tp else 0.0,
        logits_gather_fixed_seconds=target.logits_gather_fixed_seconds if shared_tp else 0.0,
        logits_gather_seconds_per_request=target.logits_gather_seconds_per_request if shared_tp else 0.0,
        layers_per_stage=per_pass_layers,
        pipeline_parallel_size=1,  # the proposer runs on the last stage only
        full_cudagraph_decode=False,  # piecewise graphs only (see ``DraftCost``)
        kernels_per_stage=0 if target.host_synchronous else _kernels_per_stage(model, per_pass_layers),
        attention_dispatch_weight=MLA_DISPATCH_WEIGHT if model.uses_mla else 1.0,
        weight_only_gemm=False,
        expert_parallel_ranks=1,
        expert_parallel_token_scale=1,
    )
    passes = 1 if family in ("medusa", "mlp_speculator") else num_speculative_tokens
    return DraftCost(method=method, num_passes=passes, model=draft_model)


NORM_KERNELS = 2  # fused residual-add + RMSNorm before attention and before the MLP
ATTENTION_KERNELS = 5  # QKV GEMM, rotary embedding, KV-cache write, attention, O GEMM
MLA_ATTENTION_KERNELS = 11  # q_a, q_a norm, q_b, kv_a, kv norm, rotary, cache write, W_UK, attention, W_UV, O
DENSE_MLP_KERNELS = 3  # gate-up GEMM, SiLU-and-mul, down GEMM
MOE_KERNELS = 7  # router GEMM, top-k softmax, align/sort, grouped GEMM, activation, grouped GEMM, combine
SHARED_EXPERT_KERNELS = 3  # the shared experts' gate-up, activation, down
# Host launches of one eager attention piece plus the next graph replay: FlashAttention 2 + 1, MLA 5 + 1.
PIECE_LAUNCHES = 2 + 1
# Weight-only quantisation (16-bit activations): vLLM runs these GEMMs with Marlin kernels (awq_marlin,
# gptq_marlin, and fp8/fp4 weights on GPUs without those tensor cores), whose small-batch tiles are 16 rows
# (one m-block); Marlin stays at the memory roofline — "near-optimal ~4× speedups up to batch sizes of
# 16-32" (IST-DASLab/marlin README) — so the dense curve's tile waste (T½) does not apply to them.
MARLIN_TILE_ROWS = 16
DENSE_TILE_ROWS = 128  # the 16-bit GEMMs' tile height the fitted T½ (≈ 127 rows) stands for
WEIGHT_ONLY_QUANTIZATIONS = frozenset(
    {"awq", "awq_marlin", "gptq", "gptq_marlin", "marlin", "int4", "gptq-int8"}
)
MLA_DISPATCH_WEIGHT = (5 + 1) / PIECE_LAUNCHES


def _expected_max_binomial(n: int, p: float, ranks: int) -> float:
    """E[max of ``ranks`` independent Binomial(n, p)] = Σ_{x=0}^{n−1} (1 − F(x)^ranks), exactly for n ≤ 512;
    above it the normal approximation μ + σ·E[max of ``ranks`` standard normals] (Blom's plotting position)."""
    if p <= 0.0 or n <= 0:
        return 0.0
    if p >= 1.0:
        return float(n)
    if n > 512:
        mean, sd = n * p, math.sqrt(n * p * (1 - p))
        z = statistics.NormalDist().inv_cdf((ranks - 0.375) / (ranks + 0.25)) if ranks > 1 else 0.0
        return min(float(n), mean + sd * z)
    pmf = (1 - p) ** n
    ratio = p / (1 - p)
    cdf = 0.0
    total = 0.0
    for x in range(n):
        cdf += pmf
        total += 1 - min(1.0, cdf) ** ranks
        pmf *= (n - x) / (x + 1) * ratio
    return total


@functools.lru_cache(maxsize=8192)
def expert_parallel_imbalance(num_experts: int, top_k: int, ranks: int, tokens: int) -> tuple[float, float]:
    """(bytes factor, FLOPs factor) of the routed experts on the busiest of ``ranks`` expert-parallel ranks
    against an even split, for ``tokens`` routed with uniform top-``top_k`` of ``num_experts`` (see the module
    docstring's ``linear``). Both are 1 for one rank and tend to 1 as the batch grows."""
    if ranks <= 1 or num_experts < ranks or tokens < 1:
        return 1.0, 1.0
    local = num_experts // ranks
    p = 1 - (1 - top_k / num_experts) ** tokens
    memory = ranks * _expected_max_binomial(local, p, ranks) / (num_experts * p)
    pairs = tokens * top_k
    flops = ranks * _expected_max_binomial(pairs, 1 / ranks, ranks) / pairs
    return max(1.0, memory), max(1.0, flops)


def _kernels_per_stage(model: ModelSpec, layers: int) -> int:
    """Kernels one pipeline stage's decoder layers launch per step (``kernels`` term of the module docstring)."""
    attention = MLA_ATTENTION_KERNELS if model.uses_mla else ATTENTION_KERNELS
    dense_mlp = NORM_KERNELS + attention + DENSE_MLP_KERNELS
    if not (model.is_moe and model.num_experts_per_tok):
        return layers * dense_mlp
    moe = NORM_KERNELS + attention + MOE_KERNELS
    if model.num_shared_experts:
        moe += SHARED_EXPERT_KERNELS
    dense_layers = min(layers, model.first_k_dense_replace or 0)
    return dense_layers * dense_mlp + (layers - dense_layers) * moe


def _allreduce_bus_bandwidth(gpu: GpuSpec, *, peer_to_peer: bool) -> float:
    """Bytes per second a TP all-reduce's ring moves per GPU: one direction of the GPU link at
    ``INTERCONNECT_EFFICIENCY`` (``throughput.py``), or NCCL's SHM path through host memory without P2P."""
    if not peer_to_peer:
        return SHM_ALLREDUCE_BUS_BYTES_PER_SECOND
    link = gpu.interconnect_bandwidth_bytes_per_second or DEFAULT_LINK_BYTES_PER_SECOND
    return link / 2 * INTERCONNECT_EFFICIENCY


def _windowed_kv(model: ModelSpec, plan: CapacityPlan) -> tuple[int, int]:
    """(KV bytes per token of the sliding-window/chunked layers, their window) for one GPU.

    A decode step's attention in such a layer reads at most the window's tokens
    (``SlidingWindowSpec``/``ChunkedLocalAttentionSpec``); the plan's layout says which layers those are.
    """
    layout = plan.layout
    window = model.sliding_window or model.attention_chunk_size or 0
    if layout is None or not window:
        return 0, 0
    windowed = 0
    for group in layout.groups:
        if group.spec.kind in (LayerType.SLIDING, LayerType.CHUNKED):
            windowed += group.spec.bytes_per_token * group.num_layers
    windowed = min(windowed, plan.kv_cache.bytes_per_token)
    return (windowed, window) if windowed else (0, 0)
