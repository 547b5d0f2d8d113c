"""Element sizes of weights and of the KV cache.

vLLM resolves ``--kv-cache-dtype auto`` to the model's dtype (bf16/fp16 → 2 bytes, fp32 → 4); the fp8 family stores
one byte per element (``vllm/utils/torch_utils.py::STR_DTYPE_TO_TORCH_DTYPE``, ``kv_cache_dtype_str_to_dtype``).
Per-token-head quantised modes keep one fp32 scale for K and one for V per KV head and token, so a layer costs
``kv_heads × (2 × head_dim × 1 + 2 × 4)`` bytes per token instead of ``kv_heads × 2 × head_dim × 1``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from service.core.errors import InvalidSpec

# Model (weight/activation) dtypes vLLM accepts for ``--dtype``; bytes per element.
MODEL_DTYPE_BYTES: dict[str, int] = {"float32": 4, "bfloat16": 2, "float16": 2}

_MODEL_DTYPE_ALIASES: dict[str, str] = {
    "float32": "float32",
    "fp32": "float32",
    "float": "float32",
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
    "float16": "float16",
    "fp16": "float16",
    "half": "float16",
}


def normalize_model_dtype(value: str, *, field: str = "dtype") -> str:
    """Canonical model dtype name (``bf16`` → ``bfloat16``); raises naming ``field`` when unknown."""
    key = value.strip().lower().removeprefix("torch.")
    try:
        return _MODEL_DTYPE_ALIASES[key]
    except KeyError:
        allowed = ", ".join(sorted(set(_MODEL_DTYPE_ALIASES)))
        raise InvalidSpec(f"unknown dtype {value!r}; expected one of {allowed}", field=field) from None


@dataclass(frozen=True, slots=True, kw_only=True)
class KvCacheDtype:
    """How one KV element is stored.

    ``element_bytes`` is ``None`` for ``auto`` (the model dtype decides). ``scale_bytes_per_head`` is what a
    per-token-head quantised layout adds per KV head and token for K and V together (2 fp32 scales = 8 bytes).
    """

    name: str
    element_bytes: int | None
    scale_bytes_per_head: int = 0
    is_quantized: bool = False

    def bytes_per_element(self, model_dtype: str) -> int:
        if self.element_bytes is not None:
            return self.element_bytes
        return MODEL_DTYPE_BYTES[normalize_model_dtype(model_dtype)]


# vLLM ``--kv-cache-dtype`` choices (``vllm/config/cache.py::CacheDType``) plus friendly aliases. ``int8`` is
# the seed article's "one byte per element, no scales"; against a real engine it means int8 per-token-head.
KV_CACHE_DTYPES: dict[str, KvCacheDtype] = {
    "auto": KvCacheDtype(name="auto", element_bytes=None),
    "bfloat16": KvCacheDtype(name="bfloat16", element_bytes=2),
    "float16": KvCacheDtype(name="float16", element_bytes=2),
    "float32": KvCacheDtype(name="float32", element_bytes=4),
    "fp8": KvCacheDtype(name="fp8", element_bytes=1, is_quantized=True),
    "fp8_e4m3": KvCacheDtype(name="fp8_e4m3", element_bytes=1, is_quantized=True),
    "fp8_e5m2": KvCacheDtype(name="fp8_e5m2", element_bytes=1, is_quantized=True),
    "fp8_inc": KvCacheDtype(name="fp8_inc", element_bytes=1, is_quantized=True),
    "int8": KvCacheDtype(name="int8", element_bytes=1, is_quantized=True),
    "int8_per_token_head": KvCacheDtype(
        name="int8_per_token_head", element_bytes=1, scale_bytes_per_head=8, is_quantized=True
    ),
    "fp8_per_token_head": KvCacheDtype(
        name="fp8_per_token_head", element_bytes=1, scale_bytes_per_head=8, is_quantized=True
    ),
}

_KV_ALIASES: dict[str, str] = {
    "bf16": "bfloat16",
    "fp16": "float16",
    "half": "float16",
    "fp32": "float32",
    "float": "float32",
    "fp8_e4m3fn": "fp8_e4m3",
}


@lru_cache(maxsize=256)
def resolve_kv_cache_dtype(value: str | None, *, field: str = "kv_cache_dtype") -> KvCacheDtype:
    """The ``KvCacheDtype`` for a ``--kv-cache-dtype`` value (``None`` → ``auto``)."""
    if value is None:
        return KV_CACHE_DTYPES["auto"]
    key = value.strip().lower()
    key = _KV_ALIASES.get(key, key)
    try:
        return KV_CACHE_DTYPES[key]
    except KeyError:
        allowed = ", ".join(KV_CACHE_DTYPES)
        raise InvalidSpec(
            f"unknown KV cache dtype {value!r}; expected one of {allowed}", field=field
        ) from None
