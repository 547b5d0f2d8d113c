"""Engine profiles: which of vLLM's rules apply for a given release.

vLLM's capacity rules changed between releases (read from the 0.5.5, 0.6.3, 0.6.4, 0.7.3 and 0.10.1 … 0.34.0
wheels). A request names an engine as ``ideal`` or ``vllm-<major>.<minor>``; it maps to one of four *profiles*:

==============  =====================================================================================
``ideal``       the seed article's arithmetic: budget = total × utilisation (default 1.0) − weights, no
                activation, runtime or CUDA-graph terms, no null block
``vllm-0.10``   V0 semantics (0.5 – 0.7, and 0.8 – 0.10 with ``VLLM_USE_V1=0``: ``vllm-0.10-v0``): one block
                spans all attention layers, NCCL buffers are charged, sliding windows are charged as full
                attention, ``max_num_seqs`` 256, concurrency = blocks × block_size / max_model_len
``vllm-0.11``   V1 from 0.8 to 0.19: utilisation 0.9, CUDA graphs live in the 1 − utilisation headroom
``vllm-0.20``   V1 from 0.20 on: utilisation 0.92 and the estimated CUDA-graph memory is subtracted; from
                0.34 the KV cache is sized after warm-up on CUDA and ROCm (the extensible KV cache:
                utilisation 1.0 and a margin kept free) and GPU blocks hold 64 tokens
==============  =====================================================================================

V1 became the default engine in 0.8.0 (``vllm/envs.py``: ``VLLM_USE_V1`` defaults to 1; 0.7.3 still defaults
to 0), and V0 was removed in 0.11: so ``vllm-0.8`` … ``vllm-0.10`` mean V1 and V0 is the explicit
``vllm-0.8-v0`` … ``vllm-0.10-v0``; ``vllm-0.5`` … ``vllm-0.7`` mean V0 (their V1 was an opt-in preview).

Inside a profile the exact release still matters for a few details, so the profile carries the flags for the
release that was asked for (``ceil`` of the requested budget from 0.15, the 1.25/1.5 group-size rule, the
token count formula of 0.21, the in-flight term of 0.28, the null block in the refusal check of 0.30, the
extensible KV cache and 64-token blocks of 0.34 …). A
patch release is kept where the rules changed inside a minor line (``vllm-0.5.2``: no long-context chunked
prefill by default before 0.5.3; ``vllm-0.6.3``: the profiler and block sizes before 0.6.4; ``vllm-0.7.0``:
DeepSeek's MLA layers cached per head before 0.7.1); a bare minor means its last patch release.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields
from functools import lru_cache

from service.core.errors import UnknownEngine

OLDEST_VERSION = (0, 5)
V1_DEFAULT_SINCE = (0, 8)  # vllm/envs.py: VLLM_USE_V1 defaults to "1" from 0.8.0 ("0" in 0.7.3)
V0_REMOVED_SINCE = (0, 11)
NEWEST_VERSION = (0, 34)
# vllm/config/compilation.py: cudagraph_mode defaults to FULL_AND_PIECEWISE from 0.11 (PIECEWISE before).
FULL_CUDAGRAPH_DECODE_SINCE = (0, 11)
DEFAULT_ENGINE = f"vllm-{NEWEST_VERSION[0]}.{NEWEST_VERSION[1]}"
PROFILE_NAMES = ("ideal", "vllm-0.10", "vllm-0.11", "vllm-0.20")

_ENGINE_PATTERN = re.compile(
    r"^(?:vllm[-_ ]?)?v?(\d+)\.(\d+)(?:\.(\d+))?(?:\.\d+)*(?:\.?post\d+)?(?:[-_ ]?(v0|v1))?$"
)
# Patch releases inside a minor line whose rules differ from the line's last release (see ``_release_rules``).
# Patch releases whose rules differ from their line's last: 0.5.0 – 0.5.2 (no long-context chunked prefill by
# default), 0.6.0 – 0.6.3, 0.7.0.
_PATCH_MATTERS_BELOW = {(0, 5): 3, (0, 6): 4, (0, 7): 1}


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineProfile:
    """The rules of one vLLM release (or of the ``ideal`` arithmetic)."""

    engine: str  # as resolved: "ideal" or "vllm-0.15"
    profile: str  # one of PROFILE_NAMES
    version: tuple[int, int] | None
    overheads: bool  # activation, runtime and CUDA-graph terms are charged
    v0: bool
    default_gpu_memory_utilization: float
    ceil_requested: bool  # requested = ceil(total × util) (0.15+), else the float
    charges_nccl: bool  # NCCL buffers allocated after the memory snapshot (0.10 and V0)
    subtracts_cudagraphs: bool  # estimated CUDA-graph memory comes out of the budget (0.20+)
    group_size_ratio: float | None  # None: smallest bucket; else largest when max < ratio × min
    tokens_from_concurrency: bool  # logged KV tokens = int(concurrency × max_model_len) (0.21+)
    in_flight_batches_async: int  # sliding-window in-flight batches with async scheduling (2 from 0.28)
    large_gpu_batch_tier: bool  # ≥ 160 GiB GPUs get 16384 batched tokens (0.28+)
    null_block_in_checks: bool  # refusal check uses available − one block (0.30+)
    hybrid_kv_manager: bool  # sliding-window layers hold only their window (V1)
    chunked_local_as_full: bool  # chunked local attention charged as full (0.10 – 0.12)
    per_token_head_kv: bool  # int8/fp8 per-token-head KV dtypes exist (0.20+)
    kv_cache_memory_bytes: bool  # --kv-cache-memory-bytes exists (0.11+)
    max_model_len_auto: bool  # --max-model-len auto (0.15+)
    mamba_align: bool  # prefix caching on for hybrids → 2 state pages per request (0.28+)
    consumed_memory_model: bool  # non-KV = consumed + transient peak (0.28+)
    refusal_counts_first_group_only: bool  # 0.14 – 0.18's refusal check under-counts hybrids
    refusal_per_layer: bool  # ≤0.13: the refusal check sums per-layer needs, without padding
    # 0.14 – 0.16 under PP: one request over every stage's layers against the smallest stage's memory
    refusal_over_whole_model: bool
    message_style: str  # "v0" | "models's" (≤0.21) | "model's" (0.25+)
    # Defaults and checks that moved between releases (read by the planner's stages, never by version number):
    # Async scheduling on by default on GPUs from 0.14 (v0.14.0 release notes, "Breaking Changes": "Async
    # scheduling is now enabled by default", vllm PR #27614).
    async_scheduling_default: bool
    in_flight_batches_pp_plus_one: bool  # async scheduling keeps pp + 1 batches in flight (0.30+)
    override_blocks_in_checks: bool  # the length check uses num_gpu_blocks_override's blocks (0.21+)
    usage_context_batch_defaults: bool  # max_num_seqs / max_num_batched_tokens by GPU size (V1 EngineArgs)
    chunked_prefill_above_tokens: (
        int | None
    )  # V0: chunked prefill only for longer max_model_len; None: always
    cpu_block_size: int  # CPU backend's default block (128 from 0.12)
    cpu_mla_block_size: int  # CPU backend's reference MLA kernel (16-token blocks from 0.32)
    mla_forces_flashmla: bool  # FlashMLA (64-token blocks) chosen for MLA on every GPU (before 0.19)
    # V0 releases 0.5 – 0.7 (read from the 0.5.5, 0.6.3, 0.6.4 and 0.7.3 wheels):
    release: tuple[int, int, int] | None = (
        None  # (major, minor, patch) the rules are for; patch 99 = the line's last
    )
    v0_chunked_prefill_batched_tokens: int = (
        2048  # SchedulerConfig default with chunked prefill (512 before 0.7)
    )
    # V0 turns chunked prefill on by itself above ``chunked_prefill_above_tokens`` (``use_long_context``): from
    # vllm PR #6666 ("Enable chunked prefill by default for long context models", merged 2024-07-23, after
    # 0.5.2 of 2024-07-15); 0.5.0 – 0.5.2 profile a whole max_model_len prompt unless asked.
    v0_long_context_chunked_prefill: bool = True
    block_size_choices: tuple[int, ...] | None = None  # --block-size argparse choices (None: not checked)
    auto_dtype_keeps_bf16: bool = False  # dtype "auto" keeps a bf16 config even on GPUs without bf16 (≤ 0.7)
    checks_quantization_capability: bool = False  # the loader's minimum-capability table was read (≤ 0.7)
    # (compute capability, backend, block) whose block the CUDA platform forces on an MLA --block-size it cannot
    # take (V1 0.8 – 0.11; see ``planner/settings.py::_block_size``):
    mla_forced_blocks: tuple[tuple[str, str, int], ...] = ()
    # DeepSeek's MLA layers (``ModelConfig.get_head_size``): from 0.7.1 (V0) and in V1 the cache holds one latent
    # head of kv_lora_rank + qk_rope_head_dim; before, K and V of every KV head with the qk head size
    # (qk_nope_head_dim + qk_rope_head_dim), padded to 256 for FlashAttention in 0.5 – 0.6 (read from the 0.5.1,
    # 0.6.6.post1, 0.7.0 and 0.7.1 wheels).
    mla_latent_cache: bool = True
    mla_head_size_padded_to: int | None = None
    # CPU on AVX512-BF16 hosts: an auto SSM state is kept in float32 (0.32+, vllm/platforms/cpu.py)
    cpu_fp32_ssm_state: bool = False
    # Mamba2 mixers hold a prefill checkpoint page in align mode (0.32+, MambaMixer2.get_kv_cache_spec)
    mamba_prefill_checkpoint: bool = False
    # CPU attention kernels take block sizes in multiples of this (32 in 0.32, cpu_attn.py)
    cpu_kernel_block_multiple: int | None = None
    # CPU_ATTN's fp8 KV refuses head sizes that are multiples of 16 but not of 32 (its vec16 path has no fp8):
    # ``_get_attn_isa``, vllm/v1/attention/backends/cpu_attn.py, 0.32.0.
    cpu_fp8_kv_head_multiple: int | None = None
    # Qwen2Model asserts that no model mixes sliding and full layers (vllm/model_executor/models/qwen2.py):
    # read in 0.32.0; earlier releases phrase the check differently and are not modelled.
    qwen2_mixed_sliding_refused: bool = False
    # A decode-only step replays one CUDA graph of the whole forward: V0's CUDAGraphRunner (decode batches
    # up to 256) and V1 from 0.11 (cudagraph_mode FULL_AND_PIECEWISE by default). V1 0.8 – 0.10 captured
    # piecewise graphs only: every attention layer then runs eagerly between two graph replays.
    full_cudagraph_decode: bool = True
    cudagraph_max_batch: int = 512  # largest captured batch (V1 max_cudagraph_capture_size; V0 256)
    # Serving features (service.core.planner.features):
    lora_extra_vocab: bool = (
        False  # --lora-extra-vocab-size exists, default 256 (removed in 0.12, vllm PR #28545)
    )
    kv_offloading_size: bool = True  # --kv-offloading-size / --kv-offloading-backend (0.12+)
    draft_model_speculation: bool = (
        True  # speculative_config with a draft model in V1 (0.14+, vllm PR #24322)
    )
    text_only_skips_encoder: bool = (
        True  # limit_mm_per_prompt all 0 skips the tower (0.10.1+, vllm PR #22299)
    )
    # 0.14's async-scheduling default "excludes some not-yet-supported configurations: pipeline parallel, CPU
    # backend, …" (v0.14.0 release notes); async scheduling with PP came later (vllm PR #32359).
    async_scheduling_default_with_pp: bool = True
    # vllm/config/cache.py, 0.34.0: ``CacheConfig.DEFAULT_BLOCK_SIZE`` 64 (16 to 0.33); every GPU attention backend
    # whose kernel blocks are multiples of 16 keeps it (``AttentionBackend.get_preferred_block_size``,
    # vllm/v1/attention/backend.py), FlashMLA (64) and CUTLASS MLA (128) keep their own.
    gpu_block_size: int = 16
    # vllm/config/vllm.py ``_resolve_extensible_kv_cache``, 0.34.0: on CUDA and ROCm unless --kv-cache-memory-bytes or
    # --num-gpu-blocks-override is given, the KV cache is committed after warm-up and CUDA-graph capture and sized
    # from the memory then free (vllm/v1/worker/extensible_kv_cache.py ``measure_kv_cache_bytes``); an unset
    # --gpu-memory-utilization then means 1.0 (``CacheConfig.resolved_gpu_memory_utilization``).
    extensible_kv_cache: bool = False
    # vllm/config/vllm.py ``_split_cudagraph_capture_sizes``, 0.34.0: on SM 10.x the prefill (piecewise) graphs
    # default to ``prefill_cudagraph_capture_grid(min(8192, max_num_batched_tokens))`` and the FULL decode graphs
    # to ``decode_cudagraph_capture_grid(max_num_seqs)`` (vllm/config/compilation.py).
    blackwell_capture_grids: bool = False
    _hash: int = field(init=False, repr=False, compare=False, default=0)

    def __post_init__(self) -> None:
        # A profile keys the planner's per-configuration stages (``pipeline.fixed_stages``) with the rest of the
        # settings: hash its fields once instead of on every plan.
        object.__setattr__(
            self, "_hash", hash(tuple(getattr(self, f.name) for f in fields(self) if f.compare))
        )

    def __hash__(self) -> int:
        return self._hash

    @property
    def label(self) -> str:
        return self.engine if self.engine == self.profile else f"{self.engine} (profile {self.profile})"


def _v(version: tuple[int, int], at_least: tuple[int, int]) -> bool:
    return version >= at_least


def parse_engine(engine: str | None) -> tuple[str, tuple[int, int] | None]:
    """Normalise an engine string: ``None`` → newest release; ``0.15.1``, ``v0.15``, ``vllm-0.15`` → (0, 15).

    Releases 0.8–0.10 shipped both engines and ran V1 by default: ``vllm-0.10`` is V1 and ``vllm-0.10-v0`` the
    V0 engine (``VLLM_USE_V1=0``); ``vllm-0.10-v1`` is still read as V1. Releases 0.5–0.7 are V0.
    """
    name, version, _patch, _v0 = _parse(engine)
    return name, version


def _parse(engine: str | None) -> tuple[str, tuple[int, int] | None, int | None, bool]:
    """(name, (major, minor), patch where it changes the rules, V0) for an engine string."""
    if engine is None or not engine.strip():
        return DEFAULT_ENGINE, NEWEST_VERSION, None, False
    text = engine.strip().lower()
    if text == "ideal":
        return "ideal", None, None, False
    match = _ENGINE_PATTERN.match(text)
    if not match:
        raise UnknownEngine(
            f"unknown engine {engine!r}: use 'ideal' or 'vllm-<major>.<minor>' (vLLM 0.5 or newer; "
            "'vllm-0.8-v0' … 'vllm-0.10-v0' for the V0 engine of those releases)",
            field="engine",
        )
    version = (int(match.group(1)), int(match.group(2)))
    if version < OLDEST_VERSION:
        raise UnknownEngine(
            f"vLLM {version[0]}.{version[1]} is older than the oldest supported release (0.5)",
            field="engine",
        )
    suffix = match.group(4)
    patch_below = _PATCH_MATTERS_BELOW.get(version)
    patch = int(match.group(3)) if match.group(3) and patch_below is not None else None
    if patch is not None and patch_below is not None and patch >= patch_below:
        patch = None  # the line's last release has the same rules
    base = f"vllm-{version[0]}.{version[1]}" + (f".{patch}" if patch is not None else "")
    if version >= V0_REMOVED_SINCE:
        if suffix == "v0":
            raise UnknownEngine(
                f"vLLM {version[0]}.{version[1]} has no V0 engine (removed in 0.11)", field="engine"
            )
        return base, version, patch, False
    if version >= V1_DEFAULT_SINCE:
        if suffix == "v0":
            return f"{base}-v0", version, patch, True
        return base, version, patch, False
    if suffix == "v1":
        raise UnknownEngine(
            f"vLLM {version[0]}.{version[1]} ran V0 by default; kvcap models its V1 engine from 0.8",
            field="engine",
        )
    return base, version, patch, True


@lru_cache(maxsize=128)
def resolve_engine(engine: str | None) -> EngineProfile:
    """The profile for an engine string (see module docstring); releases newer than kvcap knows use the newest rules."""
    name, version, patch, v0 = _parse(engine)
    if version is None:
        return EngineProfile(
            engine="ideal",
            profile="ideal",
            version=None,
            overheads=False,
            v0=False,
            default_gpu_memory_utilization=1.0,
            ceil_requested=False,
            charges_nccl=False,
            subtracts_cudagraphs=False,
            group_size_ratio=1.5,
            tokens_from_concurrency=True,
            in_flight_batches_async=1,
            large_gpu_batch_tier=False,
            null_block_in_checks=False,
            hybrid_kv_manager=True,
            chunked_local_as_full=False,
            per_token_head_kv=True,
            kv_cache_memory_bytes=True,
            max_model_len_auto=True,
            mamba_align=False,
            consumed_memory_model=False,
            refusal_counts_first_group_only=False,
            refusal_per_layer=False,
            refusal_over_whole_model=False,
            message_style="model's",
            async_scheduling_default=False,
            in_flight_batches_pp_plus_one=False,
            override_blocks_in_checks=False,
            usage_context_batch_defaults=True,
            chunked_prefill_above_tokens=None,
            cpu_block_size=128,
            cpu_mla_block_size=128,
            mla_forces_flashmla=False,
        )
    rules = min(version, NEWEST_VERSION)
    release = (*rules, patch if patch is not None else 99)  # a bare minor: its last patch release
    profile = "vllm-0.10" if v0 else "vllm-0.11" if rules < (0, 20) else "vllm-0.20"
    if v0:
        ratio: float | None = None
    elif rules < (0, 12):
        ratio = None
    elif rules < (0, 19):
        ratio = 1.25
    else:
        ratio = 1.5
    cpu_block = 128 if _v(rules, (0, 12)) else 16
    return EngineProfile(
        engine=name,
        profile=profile,
        version=version,
        overheads=True,
        v0=v0,
        default_gpu_memory_utilization=0.92 if _v(rules, (0, 20)) else 0.9,
        ceil_requested=_v(rules, (0, 15)),
        charges_nccl=rules <= (0, 10),  # V0, and 0.10's V1 worker, snapshot memory before NCCL init
        subtracts_cudagraphs=_v(rules, (0, 20)),
        group_size_ratio=ratio,
        tokens_from_concurrency=_v(rules, (0, 21)),
        in_flight_batches_async=2 if _v(rules, (0, 28)) else 1,
        large_gpu_batch_tier=_v(rules, (0, 28)),
        null_block_in_checks=_v(rules, (0, 30)),
        hybrid_kv_manager=not v0,
        chunked_local_as_full=v0 or rules <= (0, 12),
        per_token_head_kv=_v(rules, (0, 20)),
        kv_cache_memory_bytes=_v(rules, (0, 11)),
        max_model_len_auto=_v(rules, (0, 15)),
        mamba_align=_v(rules, (0, 28)),
        # 0.28+ (mem_utils.memory_profiling) and V0 before 0.6.4 (worker.py: init free − free after the profile
        # run) both charge the drop in free memory, so the caching allocator's residue counts.
        consumed_memory_model=_v(rules, (0, 28)) or (v0 and release < (0, 6, 4)),
        # vllm/v1/core/kv_cache_utils.py: 0.13.0 sums max_memory_usage_bytes per layer of each worker's specs;
        # 0.14.0 introduced _max_memory_usage_bytes_from_groups (group_size × page × the first group's blocks) and
        # checked it over the merged specs of all workers against min(available_memory), 0.17.0 per worker again.
        refusal_counts_first_group_only=(0, 14) <= rules < (0, 19),
        refusal_per_layer=rules <= (0, 13),
        refusal_over_whole_model=not v0 and (0, 14) <= rules < (0, 17),
        message_style="v0" if v0 else "model's" if _v(rules, (0, 25)) else "models's",
        async_scheduling_default=_v(rules, (0, 14)),
        in_flight_batches_pp_plus_one=_v(rules, (0, 30)),
        override_blocks_in_checks=_v(rules, (0, 21)),
        usage_context_batch_defaults=not v0,
        chunked_prefill_above_tokens=32768 if v0 else None,
        cpu_block_size=cpu_block,
        cpu_mla_block_size=16 if _v(rules, (0, 32)) else cpu_block,
        mla_forces_flashmla=rules < (0, 19),
        release=release,
        v0_chunked_prefill_batched_tokens=512 if rules < (0, 7) else 2048,
        v0_long_context_chunked_prefill=release >= (0, 5, 3),
        block_size_choices=_v0_block_size_choices(release) if rules < V1_DEFAULT_SINCE else None,
        auto_dtype_keeps_bf16=rules < V1_DEFAULT_SINCE,
        checks_quantization_capability=rules < V1_DEFAULT_SINCE,
        mla_forced_blocks=_mla_forced_blocks(rules) if not v0 else (),
        mla_latent_cache=not v0 or release >= (0, 7, 1),
        mla_head_size_padded_to=256 if v0 and rules < (0, 7) else None,
        cpu_fp32_ssm_state=_v(rules, (0, 32)),
        mamba_prefill_checkpoint=_v(rules, (0, 32)),
        cpu_kernel_block_multiple=32 if _v(rules, (0, 32)) else None,
        cpu_fp8_kv_head_multiple=32 if _v(rules, (0, 32)) else None,
        qwen2_mixed_sliding_refused=_v(rules, (0, 32)),
        full_cudagraph_decode=v0 or _v(rules, FULL_CUDAGRAPH_DECODE_SINCE),
        cudagraph_max_batch=256 if v0 else 512,
        lora_extra_vocab=rules < (0, 12),
        kv_offloading_size=_v(rules, (0, 12)),
        draft_model_speculation=_v(rules, (0, 14)),
        text_only_skips_encoder=_v(rules, (0, 10)),
        async_scheduling_default_with_pp=rules != (0, 14),
        gpu_block_size=64 if _v(rules, (0, 34)) else 16,
        extensible_kv_cache=not v0 and _v(rules, (0, 34)),
        blackwell_capture_grids=not v0 and _v(rules, (0, 34)),
    )


def _mla_forced_blocks(rules: tuple[int, int]) -> tuple[tuple[str, str, int], ...]:
    """FlashMLA (SM 9.0, 64-token blocks) from V1's MLA support in 0.8; CUTLASS MLA, the Blackwell default, with
    128 in 0.10 and 0.11; from 0.12 the attention backend is chosen for the block size instead."""
    if not V1_DEFAULT_SINCE <= rules < (0, 12):
        return ()
    flashmla = (("9.0", "FlashMLA", 64),)
    return (*flashmla, ("10.0", "CUTLASS_MLA", 128)) if rules >= (0, 10) else flashmla


def _v0_block_size_choices(release: tuple[int, int, int]) -> tuple[int, ...]:
    """``--block-size`` choices in ``vllm/engine/arg_utils.py``: 0.5.5 took up to 2048, 0.6.3 only 8/16/32,
    0.6.4 and 0.7.3 8 – 128."""
    if release < (0, 6, 0):
        return (8, 16, 32, 128, 256, 512, 1024, 2048)
    if release < (0, 6, 4):
        return (8, 16, 32)
    return (8, 16, 32, 64, 128)
