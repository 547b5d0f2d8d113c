"""What vLLM subtracts from its budget besides weights: activation peak, non-torch memory, CUDA graphs.

These terms are *estimates* (vLLM measures them on the device; we cannot), so each comes with a band. The
shapes follow what vLLM actually runs (``vllm-source-notes`` §1–4); a handful of global coefficients are
calibrated against recorded start-up logs (``tests/data``; ``make accuracy`` fits on one part and reports on
the rest, ``python -m bench.accuracy --fit`` refits them).

Activation peak (``GPUModelRunner.profile_run``): one forward pass of ``T = max_num_batched_tokens`` tokens
spread over ``R = min(T, max_num_seqs)`` requests, then a sampler warm-up (``_dummy_sampler_run``) on
``R × vocab`` logits with top-k = vocab − 1 and top-p = 0.9. The two phases do not overlap, so the peak is::

    peak = max(forward transient, sampler + hidden states) + resident MoE workspace

* forward transient per token = the larger of the attention stage (residual + hidden + QKV output, and in V0
  the attention output, since V0's profile run executes attention: ``vllm/worker/model_runner.py::_dummy_run``
  builds attention metadata; V1 skips attention: ``attn_metadata=None``) and the MLP stage (residual + hidden
  + down output + gate_up (2·I) + activation (I)), times the model dtype.
* MoE: ``fused_experts`` intermediate caches are transient before 0.15; from 0.15 the modular kernel takes them
  from the persistent ``WorkspaceManager`` (``vllm/v1/worker/workspace.py``, grown on first use and never
  freed), so they are still resident during the sampler warm-up. Shapes from ``TritonExperts.workspace_shapes``
  (``fused_moe/fused_moe.py``): ``M·top_k·(max(I, H) + max(2I, H))``; the MXFP4 (gpt-oss) Triton experts keep
  only ``M·top_k·I + M·H`` (``gpt_oss_triton_kernels_moe.py``).
* sampler bytes per logit = model-dtype logits + fp32 copy + probabilities + exponential noise, plus the
  ``torch.sort`` values / int64 indices / radix buffers when the release sorts the vocabulary:
  V0 always (``model_executor/layers/sampler.py::_apply_top_k_top_p``); V1 ≤0.11 uses FlashInfer's
  ``top_k_top_p_sampling_from_logits`` when FlashInfer is installed (the default images;
  ``TopKTopPSampler.__init__``), and without it falls back to ``forward_native`` → ``apply_top_k_top_p``, which
  sorts (0.10.2 logs "FlashInfer is not available. Falling back to the PyTorch-native implementation of top-p &
  top-k sampling", ``v1/sample/ops/topk_topp_sampler.py``); 0.12 – 0.16 made FlashInfer opt-in, so
  ``apply_top_k_top_p`` sorts; 0.17+
  sorts only below 8 rows and otherwise runs ``apply_top_k_top_p_triton`` (``topk_topp_sampler.py``). The
  0.16 → 0.17 step is the ~2.5× activation drop seen in the version sweep (Qwen3-14B: 5.64 → 2.23 GiB).
* data parallel MoE (0.10 V1, DP > 1): the experts run on every DP rank's batch, gathered by the naive
  all-to-all, so the MoE term is ``min(DP·T, 32768) × workspace per token + 2 · DP·T · hidden`` (the gathered
  hidden states and the experts' output) instead of ``T × workspace per token`` (``naive_dp_dispatch``).

Non-torch memory: cuBLAS/attention workspaces on every GPU, plus communication buffers on multi-GPU ranks.
V0 and 0.10 take the memory snapshot before distributed init, so NCCL/custom all-reduce buffers are charged;
from 0.11 the communicators exist before the snapshot, but the buffers NCCL allocates at the first collectives
(inside the profile run; NCCL connects peers lazily) are still charged. Their size depends on the fabric: the
recorded 0.19 logs show non-torch 0.25 GiB at TP1 and ~2.1 GiB at TP2/TP4 on H100 SXM (NVSwitch with NVLink
SHARP), while PCIe, NVLink-bridge and A100 (NVLink 3, no NVLS) logs show ≲ 0.1 – 0.2 GiB extra.

0.28+ (``mem_utils.py::memory_profiling``): non-KV = drop in free memory + (torch peak − torch allocated);
caching-allocator residue that ``empty_cache`` cannot return is charged through the free-memory drop.

CUDA graphs (estimate computed from 0.19, subtracted from 0.20 unless ``--enforce-eager``;
``GPUModelRunner.profile_cudagraph_memory``): per capture mode the largest and second-largest graphs are
captured and extrapolated, ``first + per_graph × (n − 1)``; modes share one pool, so the total is the largest
``first`` plus every mode's ``per_graph × (n − 1)``. ``per_graph`` grows with the graph's kernels, i.e. the
layers on the rank; ``first`` holds the static buffers between the piecewise graphs of the largest batch.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

from service.core.dtypes import MODEL_DTYPE_BYTES, normalize_model_dtype
from service.core.engines import EngineProfile
from service.core.kv_cache import kv_heads_per_rank
from service.core.specs import ModelSpec
from service.core.units import GIB, MIB

FUSED_MOE_CHUNK_TOKENS = 32768  # VLLM_FUSED_MOE_CHUNK_SIZE default (envs.py, 0.10.1)
NVLS_FABRIC_BYTES_PER_SECOND = 800 * 10**9  # NVLink 4+ per-GPU bandwidth: Hopper/Blackwell NVSwitch systems


@dataclass(frozen=True, slots=True, kw_only=True)
class OverheadCoefficients:
    """Calibration constants of the overhead model.

    The first five defaults were fitted on 2026-11-29 by ``python -m bench.accuracy --fit`` on the FIT split of
    the recorded start-up cases (``tests/data``), each against the logged term it describes (activation,
    non-torch, CUDA-graph estimate), and are checked on the held-back split by ``make accuracy``. The others are
    derived from the layouts in the comments, not fitted.
    """

    sampler_bytes_per_logit: float = (
        12.75  # fitted: fp32 copy + probabilities + exponential noise (+ dtype logits)
    )
    non_torch_bytes: int = int(0.26 * GIB)  # fitted: cuBLAS / attention workspaces on one GPU
    comm_bytes: int = int(
        1.85 * GIB
    )  # fitted: NCCL buffers per rank on NVLink-SHARP fabrics (H100 SXM TP2/TP4)
    comm_bytes_other: int = int(
        0.04 * GIB
    )  # fitted: the same on PCIe / NVLink bridges / NVLink 3 (one FIT case)
    cudagraph_bytes_per_layer_per_graph: int = 236 * 1024  # fitted: 0.18/0.19 "Estimated CUDA graph memory"
    sort_bytes_per_logit: float = (
        24.0  # derived: sorted fp32 values 4 + int64 indices 8 + radix double buffers 12
    )
    consumed_extra_bytes: int = int(0.15 * GIB)  # 0.28+: allocator residue charged via the free-memory drop
    activation_scale: float = 1.0  # multiplies the forward/sampler model (kept at 1: the shapes are explicit)
    activation_band: tuple[float, float] = (0.7, 1.4)
    non_torch_band_bytes: tuple[int, int] = (int(0.15 * GIB), int(0.5 * GIB))
    cudagraph_band: tuple[float, float] = (0.5, 2.0)


DEFAULT_COEFFICIENTS = OverheadCoefficients()


@dataclass(frozen=True, slots=True, kw_only=True)
class Estimate:
    """A byte estimate with its plausible range and how it was derived."""

    bytes: int
    low: int
    high: int
    formula: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Overheads:
    activation: Estimate
    non_torch: Estimate
    cudagraph: Estimate

    @property
    def total_bytes(self) -> int:
        return self.activation.bytes + self.non_torch.bytes + self.cudagraph.bytes

    @property
    def low_bytes(self) -> int:
        return self.activation.low + self.non_torch.low + self.cudagraph.low

    @property
    def high_bytes(self) -> int:
        return self.activation.high + self.non_torch.high + self.cudagraph.high


ZERO = Estimate(bytes=0, low=0, high=0, formula="not charged")


@lru_cache(maxsize=256)
def cudagraph_capture_sizes(
    *,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    version: tuple[int, int] | None,
    blackwell: bool = False,
    model_type: str | None = None,
) -> tuple[int, ...]:
    """vLLM's default capture sizes (``VllmConfig._set_cudagraph_sizes``).

    The largest size is ``min(2·max_num_seqs, 512)`` — 1024 on data-centre Blackwell (``blackwell``: SM 10.x)
    from 0.28 — then capped by the batched tokens. gpt-oss raises the ceiling to 1024 (992 in 0.11)
    regardless of ``max_num_seqs`` (``models/config.py::GptOssForCausalLMConfig``). 0.10/0.11: ``[1, 2, 4] + 8·k``
    (67 sizes at 512); 0.12+: step 8 to 248, then step 16 (51 sizes at 512).
    """
    cap = 1024 if blackwell and version is not None and version >= (0, 28) else 512
    largest = min(2 * max_num_seqs, cap)
    if model_type == "gpt_oss" and version is not None and version >= (0, 11):
        largest = 992 if version < (0, 12) else 1024
    largest = min(largest, max_num_batched_tokens)
    if version is not None and version < (0, 12):
        sizes = [1, 2, 4, *range(8, largest + 1, 8)]
    else:
        sizes = [1, 2, 4, *range(8, min(largest + 1, 256), 8), *range(256, largest + 1, 16)]
    return tuple(s for s in sizes if s <= largest)


def _grid(limit: int, stride_for: Callable[[int], float]) -> tuple[int, ...]:
    """1 … ``limit``: from each size, the next multiple of the largest power of two ≤ ``stride_for(size)``."""
    out: list[int] = []
    size = 1
    while size < limit:
        out.append(size)
        stride = 1 << max(0, math.floor(math.log2(max(1.0, stride_for(size)))))
        size += stride - size % stride
    return (*out, limit) if limit > 0 else ()


BLACKWELL_PREFILL_GRAPH_TOKENS = 8192  # max_prefill_cudagraph_capture_tokens' SM 10.x default (0.34)
BLACKWELL_DECODE_GRAPH_TOKENS = 8192  # max_decode_cudagraph_capture_tokens' SM 10.x default (0.34)


@lru_cache(maxsize=256)
def blackwell_capture_grids(
    max_num_seqs: int, max_num_batched_tokens: int
) -> tuple[tuple[int, ...], list[int]]:
    """(piecewise sizes, FULL decode sizes) on SM 10.x from 0.34 (``_split_cudagraph_capture_sizes``).

    With no capture sizes configured the prefill graphs take ``prefill_cudagraph_capture_grid`` up to
    ``min(8192, max_num_batched_tokens)`` ("1, 2, 4, every 8 up to 64, four sizes per doubling up to 1024,
    then every 256 tokens, and every 512 once 7% of the size exceeds 512: 54 sizes at 8192") and the FULL decode
    graphs ``decode_cudagraph_capture_grid(max_num_seqs)`` ("every count up to 6, then a step of the largest
    power of two not above 0.65 · n^(2/3) …: 64 sizes at 1024"), one token per request, within 8192 decode
    tokens and the batched tokens (vllm/config/compilation.py and vllm/config/vllm.py, 0.34.0).
    """
    prefill = _grid(
        min(BLACKWELL_PREFILL_GRAPH_TOKENS, max_num_batched_tokens),
        lambda t: min(t, max(8.0, t / 4), 0.07 * max(t, 4096)),
    )
    requests = _grid(max_num_seqs, lambda n: 0.65 * n ** (2 / 3))
    limit = min(max_num_seqs, BLACKWELL_DECODE_GRAPH_TOKENS, max_num_batched_tokens)
    # ``decode_cudagraph_capture_shapes``: a batch pads to the smallest graph that holds it, so the first size
    # above the limit is captured at the limit and larger ones are never captured.
    decode: list[int] = []
    for n in requests:
        decode.append(min(n, limit))
        if n >= limit:
            break
    return prefill, decode


def sampler_sorts(engine: EngineProfile, requests: int, *, flashinfer: bool = True) -> bool:
    """Whether the sampler warm-up sorts the whole vocabulary in this release (module docstring).

    ``flashinfer``: FlashInfer is installed; V1 before 0.12 samples with it then, and sorts without it.
    """
    version = engine.version
    if version is None:
        return False
    if engine.v0:
        return True
    if version < (0, 12):
        return not flashinfer
    if version < (0, 17):
        return True
    return requests < 8


def sampler_logits_bytes(
    model: ModelSpec,
    *,
    engine: EngineProfile,
    requests: int,
    dtype: str | None = None,
    flashinfer: bool = True,
    coefficients: OverheadCoefficients = DEFAULT_COEFFICIENTS,
) -> int:
    """What ``GPUModelRunner._dummy_sampler_run`` allocates for ``requests`` rows of ``vocab`` logits.

    ``compute_logits`` gives model-dtype logits ``[requests, vocab]``; the sampler (top-k = vocab − 1, top-p 0.9,
    temperature 0.5) adds per logit the fp32 copy, the probabilities and the exponential noise
    (``sampler_bytes_per_logit``, fitted), and the sort workspaces when the release sorts (``sampler_sorts``).
    The profile run and the warm-up after the KV cache both run it (module docstring; ``gpu_worker.py``
    ``compile_or_warm_up_model``), so one formula serves both::

        requests × vocab × (dtype bytes + sampler_bytes_per_logit [+ sort_bytes_per_logit])
    """
    c = coefficients
    b = MODEL_DTYPE_BYTES[normalize_model_dtype(dtype or model.torch_dtype)]
    sorts = sampler_sorts(engine, requests, flashinfer=flashinfer)
    per_logit = b + c.sampler_bytes_per_logit + (c.sort_bytes_per_logit if sorts else 0.0)
    return int(requests * model.vocab_size * per_logit)


def naive_dp_dispatch(engine: EngineProfile, data_parallel_size: int) -> bool:
    """vLLM 0.10 V1 with DP > 1: ``FusedMoE.forward_impl`` gathers every DP rank's tokens before the experts
    (``do_naive_dispatch_combine``; ``VLLM_ALL2ALL_BACKEND`` defaults to ``naive``, whose ``naive_multicast``
    fills a ``(Σ tokens across DP, hidden)`` buffer), and ``fused_experts`` sizes its caches for
    ``min(tokens, VLLM_FUSED_MOE_CHUNK_SIZE = 32768)`` rows (``fused_moe/fused_moe.py``, 0.10.1). Other releases
    are not read here (0.19 runs the modular kernel behind ``allgather_reducescatter``), so they keep the
    per-rank batch."""
    return (
        data_parallel_size > 1
        and not engine.v0
        and engine.version is not None
        and engine.version[:2] == (0, 10)
    )


def moe_workspace_persists(engine: EngineProfile) -> bool:
    """0.15+: fused-MoE workspaces live in the persistent ``WorkspaceManager`` (resident during sampling)."""
    return not engine.v0 and engine.version is not None and engine.version >= (0, 15)


def nvls_fabric(compute_capability: str | None, interconnect_bytes_per_second: int | None) -> bool:
    """NVIDIA Hopper or newer on an NVSwitch fabric (NVLink 4+), where NCCL sets up NVLink SHARP (NVLS) buffers.

    These are the systems whose multi-GPU logs show ~2 GiB of non-torch memory per rank (H100 SXM, 0.19);
    PCIe parts, NVLink bridges and A100's NVLink 3 show a few hundred MiB at most.
    """
    try:
        major = int((compute_capability or "").split(".")[0])
    except ValueError:
        return False  # AMD gfx targets and unknown parts
    return major >= 9 and bool(
        interconnect_bytes_per_second and interconnect_bytes_per_second >= NVLS_FABRIC_BYTES_PER_SECOND
    )


@dataclass(frozen=True, slots=True)
class _PerToken:
    transient: int  # bytes per batched token of the larger forward stage (no MoE workspace)
    moe_workspace: int  # bytes per batched token of the fused-MoE caches / workspaces
    hidden: int  # one hidden-state row


def _per_token(
    model: ModelSpec, tp: int, b: int, *, attention_output: bool, quantization: str | None
) -> _PerToken:
    hidden = model.hidden_size
    if model.uses_mla:
        q_out = (
            model.num_attention_heads * ((model.qk_nope_head_dim or 0) + (model.qk_rope_head_dim or 0)) // tp
        )
        kv_out = (model.kv_lora_rank or 0) + (model.qk_rope_head_dim or 0)
        attn_out = model.num_attention_heads * (model.v_head_dim or model.qk_nope_head_dim or 0) // tp
    else:
        q_out = model.num_attention_heads * model.head_dim // tp
        kv_out = 2 * kv_heads_per_rank(model.num_key_value_heads, tp) * model.head_dim
        attn_out = q_out
    attention_stage = 2 * hidden + q_out + kv_out + (attn_out if attention_output else 0)
    moe = 0
    if model.is_moe:
        top_k = model.num_experts_per_tok or 1
        width = (model.moe_intermediate_size or model.intermediate_size or 4 * hidden) // tp
        shared = (model.num_shared_experts or 0) * width
        dense = (model.intermediate_size or 0) // tp if model.first_k_dense_replace else 0
        ffn = max(shared, dense)
        if quantization == "mxfp4":
            moe = top_k * width + hidden
        else:
            moe = top_k * (max(width, hidden) + max(2 * width, hidden))
    else:
        ffn = (model.intermediate_size or 4 * hidden) // tp
    mlp_stage = 3 * hidden + 3 * ffn
    return _PerToken(transient=max(attention_stage, mlp_stage) * b, moe_workspace=moe * b, hidden=hidden * b)


def estimate_cudagraph(
    model: ModelSpec,
    *,
    engine: EngineProfile,
    tensor_parallel_size: int,
    layers_on_rank: int,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    dtype: str | None = None,
    blackwell: bool = False,
    coefficients: OverheadCoefficients = DEFAULT_COEFFICIENTS,
) -> Estimate:
    """``profile_cudagraph_memory``'s estimate (computed from 0.19; whether it is subtracted is the caller's call)."""
    c = coefficients
    b = MODEL_DTYPE_BYTES[normalize_model_dtype(dtype or model.torch_dtype)]
    sizes = cudagraph_capture_sizes(
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        version=engine.version,
        blackwell=blackwell,
        model_type=model.model_type,
    )
    if not sizes:
        return Estimate(bytes=0, low=0, high=0, formula="no capture sizes")
    # FULL graphs (FULL_AND_PIECEWISE, the default from 0.11) cover uniform-decode batches ≤ max_num_seqs.
    full = (
        [s for s in sizes if s <= max_num_seqs] if engine.version is None or engine.version >= (0, 11) else []
    )
    if blackwell and engine.blackwell_capture_grids:
        sizes, full = blackwell_capture_grids(max_num_seqs, max_num_batched_tokens)
    per_graph = max(MIB, c.cudagraph_bytes_per_layer_per_graph * layers_on_rank)
    per = _per_token(model, tensor_parallel_size, b, attention_output=False, quantization=None)
    first = max(sizes) * per.transient  # the largest batch's activations in the shared graph pool
    graphs = max(0, len(sizes) - 1) + max(0, len(full) - 1)
    total = int(first + per_graph * graphs)
    low_c, high_c = c.cudagraph_band
    return Estimate(
        bytes=total,
        low=int(total * low_c),
        high=int(total * high_c),
        formula=(
            f"largest capture {first / MIB:.0f} MiB + {graphs} more graphs × {per_graph / MIB:.1f} MiB "
            f"({len(sizes)} piecewise sizes up to {max(sizes)}, {len(full)} full)"
        ),
    )


@lru_cache(maxsize=4096)
def estimate_overheads(
    model: ModelSpec,
    *,
    engine: EngineProfile,
    tensor_parallel_size: int,
    pipeline_parallel_size: int,
    layers_on_rank: int,
    last_stage: bool,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    enforce_eager: bool,
    dtype: str | None = None,
    blackwell: bool = False,
    nvls: bool = True,
    quantization: str | None = None,
    data_parallel_size: int = 1,
    flashinfer_sampler: bool = True,
    coefficients: OverheadCoefficients = DEFAULT_COEFFICIENTS,
) -> Overheads:
    """Activation, non-torch and CUDA-graph bytes one GPU charges before the KV cache (module docstring).

    ``blackwell``: data-centre Blackwell (SM 10.x, larger capture ceiling from 0.28); ``nvls``: the GPUs sit on
    an NVLink-SHARP fabric (``nvls_fabric``: larger communication buffers); ``quantization``: the weight scheme;
    ``data_parallel_size``: DP ranks whose batches the MoE layers gather (``naive_dp_dispatch``);
    ``flashinfer_sampler``: FlashInfer is installed (``sampler_sorts``).
    """
    if not engine.overheads:
        return Overheads(activation=ZERO, non_torch=ZERO, cudagraph=ZERO)
    c = coefficients
    tp = tensor_parallel_size
    b = MODEL_DTYPE_BYTES[normalize_model_dtype(dtype or model.torch_dtype)]
    tokens = max_num_batched_tokens
    requests = min(tokens, max_num_seqs)
    per = _per_token(model, tp, b, attention_output=engine.v0, quantization=quantization)
    persists = model.is_moe and moe_workspace_persists(engine)
    gathered = (
        tokens * data_parallel_size if model.is_moe and naive_dp_dispatch(engine, data_parallel_size) else 0
    )
    if gathered:
        # Every DP rank's batch gathered before the experts, the fused-MoE caches sized for one chunk of it,
        # the gathered hidden states and the experts' output (module docstring).
        moe = min(gathered, FUSED_MOE_CHUNK_TOKENS) * per.moe_workspace + 2 * gathered * per.hidden
    else:
        moe = tokens * per.moe_workspace
    forward = tokens * per.transient + (0 if persists else moe)
    resident = moe if persists else 0
    sorts = sampler_sorts(engine, requests, flashinfer=flashinfer_sampler)
    per_logit = b + c.sampler_bytes_per_logit + (c.sort_bytes_per_logit if sorts else 0.0)
    sampler = (
        sampler_logits_bytes(
            model,
            engine=engine,
            requests=requests,
            dtype=dtype,
            flashinfer=flashinfer_sampler,
            coefficients=c,
        )
        if last_stage
        else 0
    )
    hidden_states = tokens * per.hidden
    peak = int(c.activation_scale * (max(forward, sampler + hidden_states) + resident))
    low_a, high_a = c.activation_band
    which = "sampler" if sampler + hidden_states > forward else "forward"
    activation = Estimate(
        bytes=peak,
        low=int(peak * low_a),
        high=int(peak * high_a),
        formula=(
            f"max(forward {forward / GIB:.2f} GiB, sampler {sampler / GIB:.2f} GiB + hidden states "
            f"{hidden_states / GIB:.2f} GiB){f' + resident MoE workspace {resident / GIB:.2f} GiB' if resident else ''}; "
            f"{which} dominates (T={tokens} batched tokens, R={requests} requests, vocab {model.vocab_size}, "
            f"{per_logit:.0f} B/logit{', vocabulary sort' if sorts else ''}"
            f"{f'; MoE over {gathered} tokens gathered from {data_parallel_size} DP ranks' if gathered else ''})"
        ),
    )

    non_torch_bytes = c.non_torch_bytes
    parts = [f"workspaces {c.non_torch_bytes / GIB:.2f} GiB"]
    if tp * pipeline_parallel_size > 1:
        comm = c.comm_bytes if nvls else c.comm_bytes_other
        non_torch_bytes += comm
        when = (
            "allocated after the memory snapshot"
            if engine.charges_nccl
            else "allocated by the first collectives"
        )
        fabric = "NVLink-SHARP fabric" if nvls else "PCIe / NVLink bridge"
        parts.append(f"communication buffers {comm / GIB:.2f} GiB ({fabric}, {when})")
    if engine.consumed_memory_model:
        non_torch_bytes += c.consumed_extra_bytes
        parts.append(
            f"allocator slack {c.consumed_extra_bytes / GIB:.2f} GiB (the free-memory drop is charged: 0.28+, V0 before 0.6.4)"
        )
    non_torch = Estimate(
        bytes=non_torch_bytes,
        low=c.non_torch_band_bytes[0],
        high=non_torch_bytes + c.non_torch_band_bytes[1],
        formula=" + ".join(parts),
    )

    if not engine.subtracts_cudagraphs or enforce_eager:
        reason = (
            "--enforce-eager: no CUDA graphs"
            if enforce_eager
            else "CUDA graphs use the 1 − utilisation headroom in this release"
        )
        cudagraph = Estimate(bytes=0, low=0, high=0, formula=reason)
    else:
        cudagraph = estimate_cudagraph(
            model,
            engine=engine,
            tensor_parallel_size=tp,
            layers_on_rank=layers_on_rank,
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=tokens,
            dtype=dtype,
            blackwell=blackwell,
            coefficients=c,
        )
    return Overheads(activation=activation, non_torch=non_torch, cudagraph=cudagraph)
