"""Names as users write them → catalog entries.

Models arrive as Hugging Face ids of base, instruct and quantised variants (``meta-llama/Llama-3.1-8B-Instruct``,
``Qwen/Qwen2.5-72B-Instruct-AWQ``, ``neuralmagic/Meta-Llama-3.1-70B-Instruct-FP8``); they resolve to the entry
with the same architecture, and the quantisation the name implies is returned with it. GPUs arrive as catalog
names, display names or the ``nvidia.com/gpu.product`` labels the GPU operator writes (``NVIDIA-H100-80GB-HBM3``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from service.catalog.snapshot import CatalogGpu, CatalogModel, CatalogSnapshot

# Words that name a variant of the same architecture, not a different one.
_VARIANT_WORDS = frozenset(
    {
        "instruct",
        "chat",
        "it",
        "hf",
        "base",
        "pt",
        "sft",
        "dpo",
        "rlhf",
        "thinking",
        "meta",
        "latest",
        "awq",
        "gptq",
        "fp8",
        "int4",
        "int8",
        "dynamic",
        "bnb",
        "4bit",
        "8bit",
        "gguf",
        "w4a16",
        "w8a8",
        "w8a16",
        "quantized",
        "marlin",
        "mlx",
        "exl2",
        "nvfp4",
        "mxfp4",
        "fp4",
        "static",
        "block",
        "fp16",
        "bf16",
    }
)
_QUANT_WORDS = (
    ("nvfp4", "nvfp4"),
    ("fp4", "nvfp4"),
    ("mxfp4", "mxfp4"),
    ("awq", "awq"),
    ("w4a16", "int4"),
    ("int4", "int4"),
    ("4bit", "bitsandbytes"),
    ("bnb", "bitsandbytes"),
    ("w8a8", "int8"),
    ("fp8", "fp8"),
)


def _tokens(text: str) -> list[str]:
    base = text.strip().lower().split("/")[-1]
    # keep version numbers like 3.1 / v0.3 together; split on everything else, including dots that do not sit
    # between two digits (``…-quantized.w4a16`` → ``quantized``, ``w4a16``)
    return [t for t in re.split(r"[^a-z0-9.]+|(?<![0-9])\.|\.(?![0-9])", base) if t]


def _core(tokens: list[str]) -> tuple[str, ...]:
    return tuple(t for t in tokens if t not in _VARIANT_WORDS and not re.fullmatch(r"\d{4}", t))


@lru_cache(maxsize=1024)  # a pure function of the name; plans ask it for the same few names again and again
def implied_quantization(name: str) -> str | None:
    """The quantisation a model name announces (``…-AWQ`` → awq, ``…-GPTQ-Int8`` → gptq-int8)."""
    tokens = set(_tokens(name))
    if "gptq" in tokens:
        return "gptq-int8" if "int8" in tokens else "gptq"
    for word, scheme in _QUANT_WORDS:
        if word in tokens:
            return scheme
    if "int8" in tokens:
        return "int8"
    return None


@dataclass(frozen=True, slots=True)
class ModelMatch:
    model: CatalogModel
    quantization: str | None
    how: str  # "name" | "hf_id" | "alias" | "variant"


def resolve_model(snapshot: CatalogSnapshot, ref: str) -> ModelMatch | None:
    quant = implied_quantization(ref)
    exact = snapshot.find_model(ref)
    if exact is not None:
        how = "name" if exact.name == ref.strip().lower() else "hf_id"
        return ModelMatch(exact, quant, how)
    wanted = _core(_tokens(ref))
    if not wanted:
        return None
    candidates = tuple(snapshot.models[name] for name in _variant_index(snapshot).get(wanted, ()))
    if len(candidates) > 1:
        # A checkpoint-specific entry (Meta's FP8 405B, whose own layout an exact id reaches) shares its core name
        # with the base architecture; other variants of that name (neuralmagic/…-FP8, …-AWQ) are the base one.
        candidates = tuple(c for c in candidates if not c.spec.quantization)
    if len(candidates) == 1:
        return ModelMatch(candidates[0], quant, "variant")
    return None


_INDEXES: dict[int, tuple[CatalogSnapshot, dict[tuple[str, ...], tuple[str, ...]]]] = {}


def _variant_index(snapshot: CatalogSnapshot) -> dict[tuple[str, ...], tuple[str, ...]]:
    """Core name tokens → model names, in catalog order, built once per snapshot (snapshots are immutable and
    replaced whole); read from the entries, so a lazily made catalog makes only the models a lookup returns."""
    cached = _INDEXES.get(id(snapshot))
    if cached is not None and cached[0] is snapshot:
        return cached[1]
    index: dict[tuple[str, ...], list[str]] = {}
    for name, entry in snapshot.model_entries().items():
        keys = {entry.name, *(k for k in (entry.hf_id,) if k), *entry.aliases}
        for core in {_core(_tokens(key)) for key in keys}:
            index.setdefault(core, []).append(name)
    frozen = {core: tuple(names) for core, names in index.items()}
    if len(_INDEXES) >= 4:  # a few generations of the catalog at most
        _INDEXES.clear()
    _INDEXES[id(snapshot)] = (snapshot, frozen)
    return frozen


def resolve_gpu(snapshot: CatalogSnapshot, ref: str) -> CatalogGpu | None:
    """By name, product label or display name; ``-SHARED``/MIG suffixes of product labels are ignored."""
    found = snapshot.find_gpu(ref)
    if found is not None:
        return found
    trimmed = re.sub(r"(-SHARED|-MIG-.*)$", "", ref.strip(), flags=re.IGNORECASE)
    return snapshot.find_gpu(trimmed) if trimmed != ref.strip() else None
