"""Plausible ranges for every architecture number and capacity setting the core accepts.

Why ranges at all: a ``config.json`` is user input. Without an upper bound a request with ten million layers
builds ten-million-entry layer tables (seconds of CPU on the event loop), and ``1e309`` (JSON's way to write
infinity), ``NaN`` or a 400-digit integer reach ``int()`` and float arithmetic that raise ``OverflowError`` /
``ValueError`` instead of a clear error. Every number the core is given is therefore an integer (or finite
float) inside the range below, checked where it enters (``hf_config``, ``ModelSpec``, ``plan``) and declared on
the HTTP schemas from the same constants, so the OpenAPI document and the core agree.

Each limit sits far above the largest published model (figures from the models' own ``config.json`` on
Hugging Face), so no real configuration is refused; the point is only to keep the work per request bounded.
"""

from __future__ import annotations

import math
from typing import Any, Final

from service.core.errors import InvalidSpec

# Llama 3.1 405B: 126 layers; PaLM 540B: 118; Megatron-Turing NLG 530B: 105.
MAX_LAYERS: Final = 1_000
# PaLM 540B: d_model 18,432; Llama 3.1 405B: hidden_size 16,384.
MAX_HIDDEN_SIZE: Final = 262_144
# Llama 3.1 405B and DeepSeek-V3: 128 attention heads.
MAX_HEADS: Final = 8_192
# Gemma: head_dim 256; DeepSeek-V3's MLA latent: kv_lora_rank 512 + qk_rope_head_dim 64 = 576.
MAX_HEAD_DIM: Final = 16_384
# Gemma 3: vocab_size 262,208 (the largest published tokenizer among served LLMs).
MAX_VOCAB: Final = 10_000_000
# PaLM 540B: ffn 73,728; Llama 3.1 405B: intermediate_size 53,248.
MAX_INTERMEDIATE_SIZE: Final = 2_097_152
# Llama 4 Scout: max_position_embeddings 10,485,760 (10 Mi tokens), the longest published context.
MAX_CONTEXT_TOKENS: Final = 33_554_432
# Kimi K2: 384 routed experts; DeepSeek-V3: 256; Switch-C: 2,048.
MAX_EXPERTS: Final = 16_384
# DeepSeek-V3: kv_lora_rank 512, q_lora_rank 1,536.
MAX_LORA_RANK: Final = 65_536
# Mamba-2: d_state 128, 128 heads of 64; Qwen3-Next: 32 value heads of 128.
MAX_STATE_DIM: Final = 65_536
# Every published Mamba / gated-DeltaNet config uses a convolution kernel of 4.
MAX_CONV_KERNEL: Final = 1_024
# Kimi K2: 1.04 T parameters; Switch-C: 1.6 T.
MAX_PARAMETERS: Final = 10**15
# DeepSeek-V3 YaRN: factor 40; Llama 3.1: 8.
MAX_ROPE_FACTOR: Final = 1_024
# vLLM's own parallel sizes are GPU counts; no deployment spans more than a few hundred GPUs per replica.
MAX_PARALLEL_SIZE: Final = 1_024
# Plausible per-replica batch limits (vLLM's defaults are 256-1,024 sequences, 2,048-16,384 tokens).
MAX_NUM_SEQS: Final = 1_048_576
MAX_BATCHED_TOKENS: Final = MAX_CONTEXT_TOKENS
# vLLM block sizes are 1-256 tokens for attention; hybrid models align pages to a few thousand.
MAX_BLOCK_SIZE: Final = 1_048_576
MAX_GPU_BLOCKS: Final = 2**31 - 1
MAX_BYTES: Final = 2**62
# Options one sweep may plan (GPUs × TP sizes × KV dtypes × quantisations). The default sweep over a catalog
# of ~30 GPUs plans ~600 in a few hundred milliseconds; each option costs about half a millisecond.
MAX_SWEEP_OPTIONS: Final = 1_536


def check_int(value: object, *, field: str, minimum: int = 1, maximum: int) -> int:
    """``value`` as an int within ``[minimum, maximum]``, or ``InvalidSpec`` naming ``field``.

    Accepts an integral float (``32.0``, as some exporters write config.json) but never ``inf``, ``NaN`` or a
    bool (``True`` is an ``int`` in Python, not a layer count).
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidSpec(f"must be an integer, got {value!r}", field=field)
    if isinstance(value, float) and (not math.isfinite(value) or not value.is_integer()):
        raise InvalidSpec(f"must be an integer, got {value!r}", field=field)
    if value < minimum:
        raise InvalidSpec(f"must be ≥ {minimum}, got {_show(value)}", field=field)
    if value > maximum:
        raise InvalidSpec(
            f"must be ≤ {maximum:,} (far above any published model), got {_show(value)}", field=field
        )
    return int(value)


def _show(value: int | float) -> str:
    """A number for an error message; a 400-digit integer is shortened, not converted to float."""
    text = str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)
    return text if len(text) <= 24 else f"{text[:12]}… ({len(text)} digits)"


def check_range(value: int | None, *, field: str, minimum: int = 1, maximum: int) -> None:
    """``check_int`` for an optional value already typed as an int."""
    if value is not None:
        check_int(value, field=field, minimum=minimum, maximum=maximum)


def check_finite(value: float | None, *, field: str, minimum: float, maximum: float) -> None:
    """A float inside ``[minimum, maximum]`` (``NaN`` compares false to both, so it is refused too)."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidSpec(f"must be a finite number, got {value!r}", field=field)
    if not minimum <= value <= maximum:
        raise InvalidSpec(f"must be between {minimum:g} and {maximum:g}, got {_show(value)}", field=field)


# ``PlanRequest`` field → (minimum, maximum): the settings a plan's cost or arithmetic depends on.
_REQUEST_RANGES: Final[dict[str, tuple[int, int]]] = {
    "tensor_parallel_size": (1, MAX_PARALLEL_SIZE),
    "pipeline_parallel_size": (1, MAX_PARALLEL_SIZE),
    "max_model_len": (1, MAX_CONTEXT_TOKENS),
    "block_size": (1, MAX_BLOCK_SIZE),
    "max_num_seqs": (1, MAX_NUM_SEQS),
    "max_num_batched_tokens": (1, MAX_BATCHED_TOKENS),
    "num_gpu_blocks_override": (1, MAX_GPU_BLOCKS),
    "kv_cache_memory_bytes": (0, MAX_BYTES),
    "prompt_tokens": (1, MAX_CONTEXT_TOKENS),
    "output_tokens": (1, MAX_CONTEXT_TOKENS),
}


def check_request_ranges(request: Any) -> None:
    """Every bounded setting of a ``PlanRequest`` (duck-typed: ``bounds`` sits below the planner)."""
    for name in _REQUEST_RANGES:
        value = getattr(request, name, None)
        if value is not None:
            check_request_range(name, value)
    check_finite(
        getattr(request, "gpu_memory_utilization", None), field="gpu_memory_utilization", minimum=0, maximum=1
    )


def check_request_range(name: str, value: Any) -> None:
    """One bounded setting of a ``PlanRequest`` (``name`` one of ``_REQUEST_RANGES``)."""
    minimum, maximum = _REQUEST_RANGES[name]
    check_int(value, field=name, minimum=minimum, maximum=maximum)


def check_sweep_size(**factors: int) -> None:
    """The product of a sweep's dimensions within ``MAX_SWEEP_OPTIONS``; the error names the largest one."""
    total = math.prod(factors.values())
    if total > MAX_SWEEP_OPTIONS:
        largest = max(factors, key=lambda name: factors[name])
        shape = " × ".join(f"{count} {name}" for name, count in factors.items())
        raise InvalidSpec(
            f"the sweep would plan {total:,} options ({shape}); at most {MAX_SWEEP_OPTIONS:,}: narrow {largest}",
            field=largest,
        )
