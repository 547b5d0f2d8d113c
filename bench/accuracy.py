"""Accuracy report: kvcap's predictions against recorded real vLLM start-ups (``make accuracy``).

``python -m bench.accuracy`` prints the error distribution per engine profile; ``--fit`` refits the fitted
``OverheadCoefficients`` on the FIT split and prints the suggested values (nothing is written).

Data (``tests/data``):

* ``vllm-startup-cases.json`` — the shared cases, copied unchanged from ``../shared/data``;
* ``vllm-startup-cases-extra.json`` — more cases (ids 1001+), each with its source;
* ``vllm-startup-cases-public.json`` — public start-up logs (ids 2001+) across releases and serving features,
  failed start-ups marked ``"started": false`` with vLLM's error line;
* ``vllm-weights-observed.json`` — "Model loading took X GiB" lines, checked against ``weights.py`` alone.

Rules (applied in this order, all documented in the printed report):

1. **Exclusions.** A case is left out, with every reason printed, when the collector rated it low confidence;
   its log is reconstructed rather than verbatim; the GPU memory is shared/unified; the release predates
   vLLM 0.6.4 (V0) or 0.9.2 (V1) — before ``memory_profiling`` the budget was total × util minus
   *device-level* used memory (CUDA context and other processes included), a formula no kvcap profile
   implements; the version cannot be
   placed or was stated for a different run of the same source; it uses a feature kvcap does not model (KV
   connector, speculative decoding, sleep mode); the model is not in the built-in catalog; the GPU cannot be resolved; its
   own numbers do not add up (total × util − weights − activation − non-torch [− CUDA graphs where subtracted]
   ≠ available, beyond rounding); it reports nothing to compare; or the logged available memory is ≤ 0 (a
   refusal: only the verdict is checked).
2. **Engine.** ``vllm_version`` when it names one; V0-format logs (``# GPU blocks``, ``Memory profiling
   results``, ``model weights take …``) → the release's V0 engine (``vllm-0.7``; ``vllm-0.10-v0`` for the V0
   engine of 0.8 – 0.10, and for V0 logs without a version); V1 logs of 0.9.2 – 0.10 → that release
   (``vllm-0.10`` means V1, the default engine from 0.8; 0.9.2 – 0.11 V1 share ``memory_profiling``, the
   float budget, no CUDA-graph subtraction and the FlashInfer sampler when FlashInfer is installed); V1 before
   0.9.2 is excluded like pre-0.6.4 V0 (``gpu_worker.determine_available_memory`` of 0.8.4 and 0.9.0 charges
   device-level used memory); V1 logs without a version → ``vllm-0.11`` when dated from 0.9.2's release
   (2025-07-08) to 2025-11, otherwise excluded as unplaceable.
3. **Settings.** Every logged setting is passed (utilisation, max_model_len, max_num_seqs / batched tokens —
   also when only written in ``other_settings`` — enforce_eager, KV dtype, quantisation, dtype, TP/PP, block
   size, data parallel size and expert parallelism, and FlashInfer's absence when the log warns of it); the rest
   take the release's defaults, as ``vllm serve`` would. The GPU is the logged ``total_gpu_memory`` when present
   (exact), else the catalog entry the name resolves to (with the stated capacity when the case names another memory variant than the entry's). A
   pipeline over different GPU kinds (``"A + B"``) whose log lists each GPU's ``nvidia-smi`` total gives every
   stage its own GPU, and ``VLLM_PP_LAYER_PARTITION`` its layers; such a case is judged for its verdict only
   (nvidia-smi's totals are an upper bound of CUDA's).
4. **Observed KV tokens.** The logged ``GPU KV cache size``; for V0 logs (and single-group V1 logs ≤0.20)
   that print only blocks, ``blocks × block_size`` — exactly how those releases count capacity.
5. **Split.** Cases are grouped by (model, engine) so that near-duplicates (the same model and release with
   another setting) never straddle the split. A group is FIT when ``sha256("model|engine")`` is odd, else
   HELD-BACK, so a group's side never changes when other cases are added or dropped. Stratification: a
   profile with one group is held back (never fitted); a profile whose groups all fell on one side moves its
   lowest-hash group across. The bar (median |KV-token error| ≤ 5 %) is on HELD-BACK. A case recorded with
   ``"split": "held_back"`` (collected after the coefficients were fitted) is UNSEEN: it joins no group, is never
   fitted and is reported on its own, so adding one moves neither side of the split above.

Failed starts (the last section): every case that failed to start (``"started": false`` with vLLM's
``failure`` line, or a refusal quoted in its excerpt) is planned under the release it names (or, unversioned,
the one its wording and date place) and kvcap's first error is classed against the logged reason
(``FAILURE_CLASSES`` / ``MESSAGE_CLASSES``); every started case kept above is checked for a false alarm. A case
whose model is not in the built-in catalog, or whose release is older than 0.5, is listed as not plannable.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import re
import statistics
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from service.catalog.builtin import builtin_snapshot
from service.catalog.resolve import ModelMatch, resolve_gpu, resolve_model
from service.catalog.snapshot import CatalogGpu, CatalogSnapshot
from service.core.engines import DEFAULT_ENGINE, OLDEST_VERSION, resolve_engine
from service.core.errors import InvalidSpec
from service.core.overheads import (
    DEFAULT_COEFFICIENTS,
    OverheadCoefficients,
    estimate_cudagraph,
    nvls_fabric,
    sampler_sorts,
)
from service.core.planner import CapacityPlan, PlanRequest, plan
from service.core.planner.features import ServingFeatures
from service.core.specs import GpuSpec, ModelSpec
from service.core.units import GIB
from service.core.weights import resolve_quantization, weight_shares

DATA = Path(__file__).resolve().parents[1] / "tests" / "data"
CASE_FILES = ("vllm-startup-cases.json", "vllm-startup-cases-extra.json", "vllm-startup-cases-public.json")
WEIGHTS_FILE = "vllm-weights-observed.json"
BAR_PERCENT = 5.0
# Cases recorded after the coefficients were fitted carry this split in their record (module docstring, rule 5).
UNSEEN = "held_back"
LEGACY_BEFORE = (0, 6, 4)  # V0: memory_profiling (snapshot-based accounting) arrived in 0.6.4
LEGACY_V1_BEFORE = (0, 9, 2)  # V1: 0.8.4 and 0.9.0 still charge device-level used memory; 0.9.2 profiles
V1_MEMORY_PROFILING_SINCE = (
    "2025-07-08"  # vLLM 0.9.2 release date (first V1 release read with memory_profiling)
)
V1_UNVERSIONED_BEFORE = "2025-12"  # undated V1 logs from 0.9.2 to here are on the 0.9.2 – 0.11 line
CONSISTENCY_TOLERANCE_GIB = 0.1  # four logged terms rounded to 0.01 GiB, plus ceil of the budget

METRICS = ("tokens", "blocks", "available")
_V0_MARKERS = re.compile(
    r"# (?:GPU|CUDA|cuda) blocks|Memory profiling results|model weights take|Loading model weights took"
)
_V1_MARKERS = re.compile(r"Available KV cache memory|GPU KV cache size|EngineCore")
_VERSION = re.compile(r"v?(\d+)\.(\d+)(?:\.(\d+))?")
_UNMODELLED = (
    ("--kv-transfer-config", "KV connector (extra GPU buffers not modelled)"),
    ("--speculative-config", "speculative decoding (draft model / MTP not modelled)"),
    ("--enable-sleep-mode", "sleep mode"),
)
# Data / expert parallelism as launched: ``-dp=8`` / ``--data-parallel-size 8`` / ``data_parallel_size=8`` and
# ``--enable-expert-parallel`` / ``enable_expert_parallel=True`` (features.py shards the experts over TP × DP and
# replicates attention per DP rank, so each rank's KV budget is planned).
_DATA_PARALLEL = re.compile(r"(?:-dp|--data-parallel-size|data_parallel_size)[ =](\d+)")
_EXPERT_PARALLEL = re.compile(r"--enable-expert-parallel\b|enable_expert_parallel=True")
# vLLM's warning when FlashInfer is not installed (``v1/sample/ops/topk_topp_sampler.py``, 0.8 – 0.11): the sampler
# falls back to the PyTorch-native top-k/top-p, which sorts the vocabulary (``overheads.sampler_sorts``).
_NO_FLASHINFER = re.compile(r"FlashInfer is not available\. Falling back to the PyTorch-native")
# ``VLLM_PP_LAYER_PARTITION=16,32``: layers per pipeline stage (``get_pp_indices``).
_PP_LAYER_PARTITION = re.compile(r"VLLM_PP_LAYER_PARTITION=(\d+(?:,\d+)+)")
# A log that lists its GPUs as ``nvidia-smi`` does: ``0: NVIDIA GeForce RTX 5070 Ti 16303MiB``.
_LISTED_GPU = re.compile(r"^\s*(\d+): (NVIDIA [^\n]*?) (\d+)MiB\s*$", re.MULTILINE)


# --- loading -------------------------------------------------------------------------------------------------


def load_cases(data: Path = DATA) -> list[dict[str, Any]]:
    cases: list[dict[str, Any]] = []
    for name in CASE_FILES:
        for record in json.loads((data / name).read_text()):
            cases.append({**record, "_file": name})
    return cases


def load_weight_observations(data: Path = DATA) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = json.loads((data / WEIGHTS_FILE).read_text())
    return records


# --- observed values -----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Observed:
    tokens: int | None
    tokens_derived: bool
    blocks: int | None
    available_gib: float | None
    weights_gib: float | None
    activation_gib: float | None
    non_torch_gib: float | None
    cudagraph_estimate_gib: float | None


@dataclass(frozen=True, slots=True)
class Prepared:
    """One case mapped to a plan request (or the reasons it is left out)."""

    case_id: int
    model_ref: str
    model_name: str | None
    engine: str | None
    profile: str | None
    confidence: str
    engine_rule: str
    request: PlanRequest | None
    observed: Observed
    excluded: tuple[str, ...] = ()
    verdict_only: bool = False
    split: str = ""

    @property
    def included(self) -> bool:
        return not self.excluded and self.request is not None


@dataclass(frozen=True, slots=True)
class Outcome:
    prepared: Prepared
    result: CapacityPlan
    predicted: dict[str, float]
    errors: dict[str, float]  # signed % error per metric present in the case
    components: dict[str, tuple[float, float]]  # GiB (predicted, observed) per logged breakdown term


def _version(text: str | None) -> tuple[int, int, int] | None:
    if not text:
        return None
    match = _VERSION.search(text)
    if not match:
        return None
    return int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)


def _setting(case: dict[str, Any], key: str, pattern: str) -> int | None:
    value = case.get(key)
    if isinstance(value, int):
        return value
    text = case.get("other_settings") or ""
    found = re.search(pattern, text)
    return int(found.group(1)) if found else None


def _log_format(case: dict[str, Any]) -> str | None:
    declared = case.get("log_format")
    if declared:
        return "v0" if declared == "v0" else "v1"
    excerpt = case.get("excerpt") or ""
    if _V0_MARKERS.search(excerpt):
        return "v0"
    if _V1_MARKERS.search(excerpt):
        return "v1"
    return None


def choose_engine(case: dict[str, Any]) -> tuple[str | None, str, str | None]:
    """(engine, how it was chosen, exclusion reason) for a case (module docstring, rule 2)."""
    text = case.get("vllm_version")
    version = _version(text)
    fmt = _log_format(case)
    date = str(case.get("source_date") or "")
    if version is not None and version < LEGACY_BEFORE:
        return (
            None,
            f"vLLM {'.'.join(map(str, version))}",
            "pre-0.6.4 profiler (device-level used memory charged)",
        )
    if version is None and fmt != "v1" and date and date < "2024-11-15":
        return (
            None,
            f"undated version, log of {date}",
            "pre-0.6.4 profiler (device-level used memory charged)",
        )
    if version is not None and fmt != "v0" and (0, 8) <= version < LEGACY_V1_BEFORE:
        why = "V1 before 0.9.2 (determine_available_memory charged device-level used memory)"
        return None, f"vLLM {'.'.join(map(str, version))} V1", why
    stated_for = re.search(r"stated for the (\w+) run", text or "")
    if stated_for and stated_for.group(1).lower() not in str(case.get("model", "")).lower():
        return None, str(text), f"version stated for the {stated_for.group(1)} run only (ambiguous here)"
    if fmt == "v0" or (version is not None and version < (0, 8) and fmt != "v1"):
        label = ".".join(map(str, version)) if version else f"log of {date}"
        if version is not None and version < (0, 8):
            return (
                f"vllm-{version[0]}.{version[1]}",
                f"V0 log format ({label}) → V0 engine of that release",
                None,
            )
        return "vllm-0.10-v0", f"V0 log format ({label}) → V0 engine (VLLM_USE_V1=0)", None
    if version is None:
        if len(date) >= 10 and date >= V1_MEMORY_PROFILING_SINCE and date[:7] < V1_UNVERSIONED_BEFORE:
            return "vllm-0.11", f"V1 log without a version, dated {date} → 0.9.2 – 0.11 line", None
        if len(date) >= 10 and date < V1_MEMORY_PROFILING_SINCE:
            return None, f"V1 log dated {date}", "V1 before 0.9.2 (device-level used memory charged)"
        return (
            None,
            f"V1 log without a version, dated {date or '?'}",
            "version unknown (cannot place the release)",
        )
    if version < (0, 11):
        return (
            f"vllm-{version[0]}.{version[1]}",
            f"V1 {version[0]}.{version[1]} (the default engine from 0.8)",
            None,
        )
    return f"vllm-{version[0]}.{version[1]}", f"vLLM {version[0]}.{version[1]}", None


def _gpu_tokens(text: str) -> set[str]:
    cleaned = re.sub(r"\(.*?\)", " ", text.lower())
    words = set(re.split(r"[^a-z0-9]+", cleaned)) - {"", "nvidia", "geforce", "hbm3", "sxm", "sxm4", "sxm5"}
    return words


def resolve_case_model(snapshot: CatalogSnapshot, ref: str) -> ModelMatch | None:
    """The logged name, then without its parenthesised note, then the Hub id the note presumes for a local
    directory ("DeepSeek-R1-32B-FULL (local directory; presumably deepseek-ai/DeepSeek-R1-Distill-Qwen-32B)")."""
    presumed = re.search(r"presumably ([\w.-]+/[\w.-]+)", ref)
    return (
        resolve_model(snapshot, ref)
        or resolve_model(snapshot, re.sub(r"\s*\(.*\)", "", ref))
        or (resolve_model(snapshot, presumed.group(1)) if presumed else None)
    )


def resolve_case_gpu(snapshot: CatalogSnapshot, case: dict[str, Any]) -> tuple[GpuSpec | None, str]:
    """The GPU a case ran on: the logged total when present (exact), else the catalog entry."""
    name = str(case.get("gpu") or "")
    found: CatalogGpu | None = resolve_gpu(snapshot, name) if name else None
    how = "catalog"
    if found is None and name:
        wanted = _gpu_tokens(name)
        memory = re.match(r"\s*(\d+)\s*GB", str(case.get("gpu_memory") or ""))
        if memory and not any(w.endswith("gb") for w in wanted):
            wanted.add(f"{memory.group(1)}gb")
        candidates = [
            g
            for g in snapshot.gpus.values()
            if wanted and wanted <= _gpu_tokens(f"{g.entry.display_name or ''} {g.name}")
        ]
        measured = [g for g in candidates if g.entry.usable_memory_bytes]
        pool = measured or candidates
        if pool and len({g.spec.memory_bytes for g in pool}) == 1:
            found = sorted(pool, key=lambda g: g.name)[0]
            how = "catalog (by name tokens)"
    stated = re.match(r"\s*(\d+)\s*GB\s*$", str(case.get("gpu_memory") or ""))
    if found is not None and stated and not case.get("total_gpu_memory_gib"):
        listed = re.search(r"(\d+)\s*GB", found.entry.display_name or "")
        if listed and listed.group(1) != stated.group(1):
            # The log names a memory variant the entry is not (an H20 with 141GB is the H20-3e, not the 96GB
            # H20): the entry's compute with the stated capacity, on the catalog's GiB basis.
            spec = replace(found.spec, memory_bytes=int(stated.group(1)) * GIB)
            return spec, f"catalog {found.name} with the stated {stated.group(1)}GB"
    total = case.get("total_gpu_memory_gib")
    if total:
        capability = found.spec.compute_capability if found else None
        stated = re.search(r"compute capability (\d+\.\d+)", str(case.get("other_settings") or ""))
        if capability is None and stated:
            capability = stated.group(1)
        base = found.spec if found else GpuSpec(name=name, memory_bytes=1)
        spec = replace(
            base,
            name=name or base.name,
            memory_bytes=int(float(total) * GIB),
            compute_capability=capability,
        )
        return spec, f"logged total {total} GiB" + (f" ({found.name})" if found else "")
    if found is None:
        return None, "unresolved"
    return found.spec, f"{how}: {found.name}"


def resolve_stage_gpus(snapshot: CatalogSnapshot, case: dict[str, Any]) -> tuple[GpuSpec, ...] | None:
    """One GPU per pipeline stage for a run over different GPU kinds (``"gpu": "A + B"``) whose log lists every
    GPU with its ``nvidia-smi`` total: stage ``s`` runs on GPUs ``s × TP …``, each the catalog entry its name
    resolves to (for its compute capability) or a bare spec, with the listed total (nvidia-smi's, an upper bound
    of what CUDA reports). None when the GPUs are one kind, are not all listed, or a stage mixes kinds."""
    if " + " not in str(case.get("gpu") or ""):
        return None
    listed = sorted(
        (int(i), name.strip(), int(mib)) for i, name, mib in _LISTED_GPU.findall(case.get("excerpt") or "")
    )
    tp = int(case.get("tensor_parallel_size") or 1)
    pp = int(case.get("pipeline_parallel_size") or 1)
    if pp < 2 or len(listed) != tp * pp:
        return None
    stages: list[GpuSpec] = []
    for stage in range(pp):
        ranks = listed[stage * tp : (stage + 1) * tp]
        if len({(name, mib) for _i, name, mib in ranks}) != 1:
            return None
        _index, name, mib = ranks[0]
        found, _how = resolve_case_gpu(snapshot, {"gpu": name})
        base = found or GpuSpec(name=name, memory_bytes=1)
        stages.append(replace(base, name=name, memory_bytes=mib * 2**20))
    return tuple(stages)


def case_gpus(
    snapshot: CatalogSnapshot, case: dict[str, Any]
) -> tuple[GpuSpec | None, tuple[GpuSpec, ...] | None]:
    """(the GPU, one GPU per pipeline stage when the stages differ): rule 3 of the module docstring."""
    gpu, _how = resolve_case_gpu(snapshot, case)
    if gpu is not None:
        return gpu, None
    stages = resolve_stage_gpus(snapshot, case)
    return (stages[0], stages) if stages else (None, None)


def _quantization(text: str | None) -> str | None:
    if not text:
        return None
    head = re.split(r"[\s(]", text.strip().lower(), maxsplit=1)[0]
    return head or None


def _dtype(text: str | None) -> str | None:
    if not text:
        return None
    return {"half": "float16"}.get(text.strip().lower(), text.strip().lower())


def _kv_dtype(text: str | None) -> str | None:
    if not text or text.strip().lower() == "auto":
        return None
    return text.strip().lower()


def _consistency_gap(case: dict[str, Any], engine: str | None) -> float | None:
    """GiB by which the case's own numbers miss vLLM's formula (None when the breakdown is incomplete)."""
    keys = (
        "total_gpu_memory_gib",
        "gpu_memory_utilization",
        "weights_gib",
        "activation_peak_gib",
        "non_torch_gib",
        "available_kv_cache_gib",
    )
    if any(case.get(k) is None for k in keys):
        return None
    subtracts = engine is not None and resolve_engine(engine).subtracts_cudagraphs
    requested = float(case["total_gpu_memory_gib"]) * float(case["gpu_memory_utilization"])
    non_kv = float(case["weights_gib"]) + float(case["activation_peak_gib"]) + float(case["non_torch_gib"])
    if subtracts and case.get("cudagraph_estimate_gib") is not None:
        non_kv += float(case["cudagraph_estimate_gib"])
    return abs(requested - non_kv - float(case["available_kv_cache_gib"]))


def build_request(
    case: dict[str, Any],
    model: ModelSpec,
    catalog_quantization: str | None,
    gpu: GpuSpec,
    engine: str,
    stage_gpus: tuple[GpuSpec, ...] | None = None,
) -> PlanRequest:
    """Every logged setting passed (rule 3); the rest take the release's defaults."""
    mns = _setting(case, "max_num_seqs", r"max[-_]num[-_]seqs[ =](\d+)")
    mnbt = _setting(case, "max_num_batched_tokens", r"max[-_]num[-_]batched[-_]tokens[ =](\d+)")
    quant = _quantization(case.get("quantization")) or catalog_quantization
    launch = f"{case.get('excerpt') or ''} {case.get('other_settings') or ''}"
    dp = _DATA_PARALLEL.search(launch)
    ep = _EXPERT_PARALLEL.search(launch) is not None
    partition = _PP_LAYER_PARTITION.search(launch)
    no_flashinfer = _NO_FLASHINFER.search(launch) is not None
    features = (
        ServingFeatures(
            data_parallel_size=int(dp.group(1)) if dp else 1,
            enable_expert_parallel=ep,
            flashinfer_sampler=not no_flashinfer,
        )
        if dp or ep or no_flashinfer
        else None
    )
    return PlanRequest(
        model=model,
        gpu=gpu,
        engine=engine,
        tensor_parallel_size=int(case.get("tensor_parallel_size") or 1),
        pipeline_parallel_size=int(case.get("pipeline_parallel_size") or 1),
        pipeline_layer_partition=(
            tuple(int(n) for n in partition.group(1).split(",")) if partition else None
        ),
        pipeline_stage_gpus=stage_gpus,
        max_model_len=case.get("max_model_len"),
        kv_cache_dtype=_kv_dtype(case.get("kv_cache_dtype")),
        quantization=quant,
        dtype=_dtype(case.get("dtype")),
        gpu_memory_utilization=case.get("gpu_memory_utilization"),
        block_size=case.get("block_size"),
        max_num_seqs=mns,
        max_num_batched_tokens=mnbt,
        enforce_eager=bool(case.get("enforce_eager")),
        features=features,
        suggest=False,
        detail=False,
    )


def prepare_case(case: dict[str, Any], snapshot: CatalogSnapshot) -> Prepared:
    reasons: list[str] = []
    confidence = str(case.get("confidence") or "")
    if confidence == "low":
        reasons.append("low confidence")
    if "reconstructed" in (case.get("excerpt") or "").lower():
        reasons.append("reconstructed log (not verbatim)")
    memory_text = str(case.get("gpu_memory") or "").lower()
    if "shared" in memory_text or "unified" in memory_text:
        reasons.append("shared / unified GPU memory")
    engine, engine_rule, engine_problem = choose_engine(case)
    if engine_problem:
        reasons.append(engine_problem)
    flags = f"{case.get('excerpt') or ''} {case.get('other_settings') or ''}"
    for flag, why in _UNMODELLED:
        if flag in flags and f"without `{flag}" not in flags and f"without {flag}" not in flags:
            reasons.append(why)

    model_ref = str(case.get("model") or "")
    match = resolve_case_model(snapshot, model_ref)
    if match is None:
        reasons.append("model not in the built-in catalog")
    gpu, stage_gpus = case_gpus(snapshot, case)
    if gpu is None:
        reasons.append("GPU not resolvable")
    if stage_gpus is not None:
        # nvidia-smi's totals exceed what CUDA reports, and GPUs outside the catalog carry no measured total.
        reasons.append("stages on different GPU kinds sized from nvidia-smi totals: verdict only")
    gap = _consistency_gap(case, engine)
    if gap is not None and gap > CONSISTENCY_TOLERANCE_GIB:
        reasons.append(f"internally inconsistent (numbers miss vLLM's formula by {gap:.2f} GiB)")

    observed_available = case.get("available_kv_cache_gib")
    verdict_only = observed_available is not None and float(observed_available) <= 0
    if verdict_only:
        reasons.append("available ≤ 0 (refusal): verdict only")
    if case.get("kv_cache_tokens") is None and case.get("gpu_blocks") is None and observed_available is None:
        reasons.append("nothing to compare (no tokens, blocks or available memory)")

    request: PlanRequest | None = None
    if match is not None and gpu is not None and engine is not None:
        request = build_request(case, match.model.spec, match.quantization, gpu, engine, stage_gpus)
    observed = Observed(
        tokens=case.get("kv_cache_tokens"),
        tokens_derived=False,
        blocks=case.get("gpu_blocks"),
        available_gib=float(observed_available) if observed_available is not None else None,
        weights_gib=case.get("weights_gib"),
        activation_gib=case.get("activation_peak_gib"),
        non_torch_gib=case.get("non_torch_gib"),
        cudagraph_estimate_gib=case.get("cudagraph_estimate_gib"),
    )
    return Prepared(
        case_id=int(case["id"]),
        model_ref=model_ref,
        model_name=match.model.name if match else None,
        engine=engine,
        profile=resolve_engine(engine).profile if engine else None,
        confidence=confidence,
        engine_rule=engine_rule,
        request=request,
        observed=observed,
        excluded=tuple(reasons),
        verdict_only=verdict_only,
        split=UNSEEN if case.get("split") == UNSEEN else "",
    )


def _group_hash(group: tuple[str, str]) -> str:
    return hashlib.sha256(f"{group[0]}|{group[1]}".encode()).hexdigest()


def assign_splits(prepared: Sequence[Prepared]) -> list[Prepared]:
    """Rule 5: a (model, engine) group's side is the parity of its sha256 — stable when cases are added or
    removed elsewhere. A profile with a single group is held back; a profile whose groups all landed on one side
    moves its lowest-hash group to the other side, so every profile with two or more groups has both."""
    groups: dict[str, set[tuple[str, str]]] = {}
    for p in prepared:
        if p.split != UNSEEN and p.included and p.profile and p.engine and p.model_name:
            groups.setdefault(p.profile, set()).add((p.model_name, p.engine))
    side: dict[tuple[str, str], str] = {}
    for members in groups.values():
        ordered = sorted(members, key=_group_hash)
        for group in ordered:
            side[group] = "fit" if int(_group_hash(group), 16) % 2 else "held"
        if len(ordered) == 1:
            side[ordered[0]] = "held"
        elif len({side[g] for g in ordered}) == 1:
            side[ordered[0]] = "fit" if side[ordered[0]] == "held" else "held"
    return [
        p if p.split == UNSEEN else replace(p, split=side.get((p.model_name or "", p.engine or ""), ""))
        for p in prepared
    ]


def prepare_all(
    cases: Iterable[dict[str, Any]] | None = None, snapshot: CatalogSnapshot | None = None
) -> list[Prepared]:
    snapshot = snapshot or builtin_snapshot()
    return assign_splits(
        [prepare_case(case, snapshot) for case in (cases if cases is not None else load_cases())]
    )


# --- evaluation ----------------------------------------------------------------------------------------------


def _pct(predicted: float, observed: float) -> float:
    return (predicted - observed) / abs(observed) * 100.0


def cudagraph_estimate_bytes(result: CapacityPlan, request: PlanRequest) -> int:
    """What 0.19+ would log as "Estimated CUDA graph memory" for this plan (subtracted or not)."""
    if request.enforce_eager:
        return 0
    model: ModelSpec = request.model
    layers = max(hi - lo for lo, hi in (s.layers for s in result.stages)) if result.stages else 0
    gpu = request.gpu
    blackwell = bool(gpu and gpu.compute_capability and gpu.compute_capability.split(".")[0] == "10")
    return estimate_cudagraph(
        model,
        engine=resolve_engine(request.engine),
        tensor_parallel_size=request.tensor_parallel_size,
        layers_on_rank=layers or model.num_hidden_layers,
        max_num_seqs=result.settings.max_num_seqs,
        max_num_batched_tokens=result.settings.max_num_batched_tokens,
        dtype=result.settings.dtype,
        blackwell=blackwell,
        coefficients=request.coefficients,
    ).bytes


def evaluate(p: Prepared, coefficients: OverheadCoefficients = DEFAULT_COEFFICIENTS) -> Outcome | None:
    if p.request is None:
        return None
    request = replace(p.request, coefficients=coefficients)
    try:
        result = plan(request)
    except InvalidSpec:
        return None
    kv, mem = result.kv_cache, result.memory
    obs = p.observed
    observed_tokens = obs.tokens
    derived = False
    single_group = kv.num_groups == 1
    engine = resolve_engine(p.engine)
    if (
        observed_tokens is None
        and obs.blocks is not None
        and (engine.v0 or (single_group and not engine.tokens_from_concurrency))
    ):
        observed_tokens = obs.blocks * kv.block_size
        derived = True
    predicted = {
        "tokens": float(kv.kv_cache_size_tokens),
        "blocks": float(kv.num_gpu_blocks),
        "available": mem.kv_cache_bytes / GIB,
    }
    errors: dict[str, float] = {}
    if observed_tokens:
        errors["tokens"] = _pct(predicted["tokens"], observed_tokens)
    if obs.blocks:
        errors["blocks"] = _pct(predicted["blocks"], obs.blocks)
    if obs.available_gib:
        errors["available"] = _pct(predicted["available"], obs.available_gib)
    components: dict[str, tuple[float, float]] = {}
    for name, value, logged in (
        ("weights", mem.weights_bytes, obs.weights_gib),
        ("activation", mem.activation_bytes, obs.activation_gib),
        ("non_torch", mem.non_torch_bytes, obs.non_torch_gib),
    ):
        if logged is not None:
            components[name] = (value / GIB, float(logged))
    if obs.cudagraph_estimate_gib is not None and engine.version is not None and engine.version >= (0, 18):
        components["cudagraph_estimate"] = (
            cudagraph_estimate_bytes(result, request) / GIB,
            obs.cudagraph_estimate_gib,
        )
    prepared = replace(p, observed=replace(obs, tokens=observed_tokens, tokens_derived=derived))
    return Outcome(
        prepared=prepared, result=result, predicted=predicted, errors=errors, components=components
    )


def evaluate_all(
    prepared: Sequence[Prepared], coefficients: OverheadCoefficients = DEFAULT_COEFFICIENTS
) -> list[Outcome]:
    outcomes = []
    for p in prepared:
        if p.included:
            outcome = evaluate(p, coefficients)
            if outcome is not None:
                outcomes.append(outcome)
    return outcomes


@dataclass(frozen=True, slots=True)
class Distribution:
    n: int
    median: float
    p90: float
    max: float


def distribution(values: Sequence[float]) -> Distribution | None:
    if not values:
        return None
    ordered = sorted(abs(v) for v in values)
    p90 = ordered[min(len(ordered) - 1, math.ceil(0.9 * len(ordered)) - 1)]
    return Distribution(n=len(ordered), median=statistics.median(ordered), p90=p90, max=ordered[-1])


def metric_errors(outcomes: Iterable[Outcome], metric: str, split: str | None = None) -> list[float]:
    return [
        o.errors[metric]
        for o in outcomes
        if metric in o.errors and (split is None or o.prepared.split == split)
    ]


def group_medians(outcomes: Iterable[Outcome], metric: str, split: str) -> list[float]:
    """|error| per (model, engine) group (the median within the group), for a duplicate-insensitive summary."""
    grouped: dict[tuple[str, str], list[float]] = {}
    for o in outcomes:
        if metric in o.errors and o.prepared.split == split:
            key = (o.prepared.model_name or "", o.prepared.engine or "")
            grouped.setdefault(key, []).append(abs(o.errors[metric]))
    return [statistics.median(values) for values in grouped.values()]


def held_back_median_token_error(coefficients: OverheadCoefficients = DEFAULT_COEFFICIENTS) -> float:
    """The bar: median |KV-token error| (%) on the held-back split."""
    outcomes = evaluate_all(prepare_all(), coefficients)
    dist = distribution(metric_errors(outcomes, "tokens", "held"))
    return dist.median if dist else float("nan")


# --- weights -------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WeightCheck:
    model_ref: str
    setting: str
    logged_gib: float
    predicted_gib: float | None
    high_confidence: bool
    note: str

    @property
    def error_pct(self) -> float | None:
        return None if self.predicted_gib is None else _pct(self.predicted_gib, self.logged_gib)


_LOW_CONFIDENCE_WEIGHT_NOTES = ("inferred", "not a raw log", "author table", "odd", "includes")


def check_weights(snapshot: CatalogSnapshot | None = None) -> list[WeightCheck]:
    """Predicted ``weights_bytes`` against every "Model loading took X GiB" observation."""
    snapshot = snapshot or builtin_snapshot()
    checks = []
    for obs in load_weight_observations():
        ref = str(obs["model"])
        tp = int(obs.get("tensor_parallel_size") or 1)
        pp = int(obs.get("pipeline_parallel_size") or 1)
        quant_text = obs.get("quantization")
        setting = f"TP{tp} PP{pp} {quant_text or 'unquantised'}"[:60]
        notes = f"{ref} {obs.get('notes') or ''}".lower()
        high = not any(word in notes for word in _LOW_CONFIDENCE_WEIGHT_NOTES)
        match = resolve_model(snapshot, ref)
        logged = float(obs["model_loading_took_gib_per_gpu"])
        if match is None:
            checks.append(WeightCheck(ref, setting, logged, None, high, "model not in the built-in catalog"))
            continue
        gpu, _ = resolve_case_gpu(snapshot, {"gpu": obs.get("gpu") or ""})
        try:
            quant = resolve_quantization(
                _quantization(quant_text) or match.quantization, native=match.model.spec.quantization
            )
            shares = weight_shares(
                match.model.spec,
                quantization=quant,
                tensor_parallel_size=tp,
                pipeline_parallel_size=pp,
                dtype=_dtype(obs.get("dtype")) if obs.get("dtype") not in (None, "None") else None,
                compute_capability=gpu.compute_capability if gpu else None,
            )
        except InvalidSpec as exc:
            checks.append(WeightCheck(ref, setting, logged, None, high, f"not plannable: {exc}"))
            continue
        predicted = shares[0].total_bytes / GIB  # PP observations are the first stage's line
        checks.append(WeightCheck(ref, setting, logged, predicted, high, match.model.name))
    return checks


# --- fitting -------------------------------------------------------------------------------------------------


def _grid(lo: float, hi: float, step: float) -> list[float]:
    count = round((hi - lo) / step)
    return [lo + i * step for i in range(count + 1)]


def _best(values: Sequence[float], loss: Callable[[float], float]) -> tuple[float, float]:
    scored = [(loss(v), v) for v in values]
    best_loss, best_value = min(scored)
    return best_value, best_loss


def _component_loss(
    prepared: Sequence[Prepared],
    coefficients: OverheadCoefficients,
    component: str,
    keep: Callable[[Outcome], bool],
) -> tuple[float, int]:
    total, count = 0.0, 0
    for outcome in evaluate_all(prepared, coefficients):
        if component in outcome.components and keep(outcome):
            predicted, logged = outcome.components[component]
            total += (predicted - logged) ** 2
            count += 1
    return total, count


def _is_sort_case(o: Outcome) -> bool:
    settings = o.result.settings
    features = o.prepared.request.features if o.prepared.request else None
    return sampler_sorts(
        resolve_engine(o.prepared.engine),
        min(settings.max_num_seqs, settings.max_num_batched_tokens),
        flashinfer=features.flashinfer_sampler if features else True,
    )


def fit(
    prepared: Sequence[Prepared], start: OverheadCoefficients = DEFAULT_COEFFICIENTS
) -> tuple[OverheadCoefficients, list[str]]:
    """Refit the fitted coefficients on the FIT split only, each against the logged term it describes.

    One-dimensional least squares (grid search, stdlib only), in this order: sampler bytes per logit (logged
    activation of releases that do not sort the vocabulary), single-GPU non-torch bytes, communication bytes on
    NVLink-SHARP fabrics and on other fabrics (logged non-torch of multi-GPU ranks), CUDA-graph bytes per layer
    and graph (logged "Estimated CUDA graph memory" of 0.18+). ``sort_bytes_per_logit`` is derived, not fitted.
    """
    fit_cases = [p for p in prepared if p.split == "fit"]
    notes: list[str] = []
    c = start
    Step = tuple[str, list[float], str, Callable[[Outcome], bool]]
    steps: list[Step] = [
        ("sampler_bytes_per_logit", _grid(6.0, 24.0, 0.25), "activation", lambda o: not _is_sort_case(o)),
        (
            "non_torch_bytes",
            [x * GIB for x in _grid(0.0, 1.0, 0.01)],
            "non_torch",
            lambda o: not _multi_gpu(o),
        ),
        (
            "comm_bytes",
            [x * GIB for x in _grid(0.0, 4.0, 0.01)],
            "non_torch",
            lambda o: _multi_gpu(o) and _nvls(o),
        ),
        (
            "comm_bytes_other",
            [x * GIB for x in _grid(0.0, 2.0, 0.01)],
            "non_torch",
            lambda o: _multi_gpu(o) and not _nvls(o),
        ),
        (
            "cudagraph_bytes_per_layer_per_graph",
            [x * 1024 for x in _grid(16, 1024, 4)],
            "cudagraph_estimate",
            lambda _o: True,
        ),
    ]
    for name, values, component, keep in steps:
        integer = isinstance(getattr(c, name), int)

        def build(
            value: float, name: str = name, integer: bool = integer, base: OverheadCoefficients = c
        ) -> OverheadCoefficients:
            changes: dict[str, Any] = {name: int(value) if integer else value}
            return replace(base, **changes)

        _, count = _component_loss(fit_cases, c, component, keep)
        if count == 0:
            notes.append(f"{name}: no FIT case logs this term; kept {getattr(c, name)}")
            continue

        def loss_of(
            value: float,
            build: Callable[[float], OverheadCoefficients] = build,
            component: str = component,
            keep: Callable[[Outcome], bool] = keep,
        ) -> float:
            return _component_loss(fit_cases, build(value), component, keep)[0]

        best, loss = _best(values, loss_of)
        c = build(best, base=c)
        shown = f"{best / GIB:.2f} GiB" if "bytes" in name and "per_" not in name else f"{best:g}"
        notes.append(f"{name} = {shown} (RMS {math.sqrt(loss / count):.3f} GiB over {count} FIT cases)")
    return c, notes


def _multi_gpu(o: Outcome) -> bool:
    r = o.prepared.request
    return r is not None and r.tensor_parallel_size * r.pipeline_parallel_size > 1


def _nvls(o: Outcome) -> bool:
    r = o.prepared.request
    return (
        r is not None
        and r.gpu is not None
        and nvls_fabric(r.gpu.compute_capability, r.gpu.interconnect_bandwidth_bytes_per_second)
    )


# --- report --------------------------------------------------------------------------------------------------


def _fmt(d: Distribution | None) -> str:
    return "      –               " if d is None else f"{d.n:>3} {d.median:6.2f} {d.p90:6.2f} {d.max:7.2f}"


@dataclass
class Report:
    lines: list[str] = field(default_factory=list)

    def add(self, text: str = "") -> None:
        self.lines.append(text)

    def __str__(self) -> str:
        return "\n".join(self.lines)


def report(
    prepared: Sequence[Prepared], outcomes: Sequence[Outcome], coefficients: OverheadCoefficients
) -> Report:
    r = Report()
    r.add("kvcap accuracy against recorded vLLM start-ups (|error| %, n / median / p90 / max)")
    r.add(f"coefficients: {coefficients}")
    r.add("")
    header = f"{'split':<9} {'profile':<10} | {'KV tokens':^22} | {'blocks':^22} | {'available GiB':^22}"
    r.add(header)
    r.add("-" * len(header))
    profiles = sorted({o.prepared.profile or "" for o in outcomes})
    for split, label in (("fit", "FIT"), ("held", "HELD-BACK"), (UNSEEN, "UNSEEN")):
        for profile in [*profiles, "all"]:
            chosen = [
                o
                for o in outcomes
                if o.prepared.split == split and (profile == "all" or o.prepared.profile == profile)
            ]
            cells = [_fmt(distribution(metric_errors(chosen, m))) for m in METRICS]
            r.add(f"{label:<9} {profile:<10} | " + " | ".join(cells))
        r.add("")
    held = distribution(metric_errors(outcomes, "tokens", "held"))
    verdict = "MEETS" if held and held.median <= BAR_PERCENT else "MISSES"
    r.add(
        f"Bar: held-back median |KV-token error| = {held.median if held else float('nan'):.2f} % ({verdict} ≤ {BAR_PERCENT:.0f} %)"
    )
    per_group = group_medians(outcomes, "tokens", "held")
    if per_group:
        r.add(
            f"     held-back with each (model, engine) group counted once: median {statistics.median(per_group):.2f} %"
            f" over {len(per_group)} groups (a group of near-duplicate runs cannot carry the bar alone)"
        )
    unseen = distribution(metric_errors(outcomes, "tokens", UNSEEN))
    if unseen:
        r.add(
            f"     unseen (recorded after the fit, never fitted): median |KV-token error| {unseen.median:.2f} % "
            f"over {unseen.n} cases, max {unseen.max:.2f} %"
        )
    r.add("")
    r.add("By release (all splits; |KV-token error| % n / median / max):")
    for engine in sorted({o.prepared.engine or "" for o in outcomes}, key=lambda e: _version(e) or (0, 0, 0)):
        d = distribution(metric_errors([o for o in outcomes if o.prepared.engine == engine], "tokens"))
        a = distribution(metric_errors([o for o in outcomes if o.prepared.engine == engine], "available"))
        tokens = f"{d.n:>3} {d.median:6.2f} {d.max:7.2f}" if d else "      –"
        avail = f"{a.n:>3} {a.median:6.2f} {a.max:7.2f}" if a else "      –"
        r.add(f"  {engine:<10} tokens {tokens}   available {avail}")
    r.add("")
    r.add("Per case (signed % error; * = tokens derived from blocks × block size):")
    r.add(
        f"  {'id':>5} {'split':<9} {'engine':<10} {'model':<18} {'conf':<6} {'tokens':>8} {'blocks':>8} {'avail':>8}  {'pred/obs available GiB':<22}"
    )
    for o in sorted(outcomes, key=lambda o: (o.prepared.split, o.prepared.profile or "", o.prepared.case_id)):
        p = o.prepared
        cell = {m: (f"{o.errors[m]:+7.2f}" if m in o.errors else "      –") for m in METRICS}
        star = "*" if p.observed.tokens_derived else " "
        avail = (
            f"{o.predicted['available']:.2f} / {p.observed.available_gib:.2f}"
            if p.observed.available_gib is not None
            else f"{o.predicted['available']:.2f} / –"
        )
        r.add(
            f"  {p.case_id:>5} {p.split:<9} {p.engine or '':<10} {(p.model_name or '')[:18]:<18} {p.confidence[:6]:<6} "
            f"{cell['tokens']}{star} {cell['blocks']} {cell['available']}  {avail}"
        )
    r.add("")
    r.add("Overhead terms against the logged breakdown (GiB, predicted − logged; mean / max |·| / n):")
    for component in ("weights", "activation", "non_torch", "cudagraph_estimate"):
        diffs = [
            o.components[component][0] - o.components[component][1]
            for o in outcomes
            if component in o.components
        ]
        if diffs:
            r.add(
                f"  {component:<19} mean {statistics.fmean(diffs):+.3f}  max |{max(abs(d) for d in diffs):.3f}|  n={len(diffs)}"
            )
    r.add(
        "  (cudagraph_estimate: 0.18/0.19 logs print the estimate without subtracting it; it is subtracted from 0.20)"
    )
    r.add("")
    r.add("Engine chosen per case:")
    for p in prepared:
        if p.included:
            r.add(f"  {p.case_id:>5}: {p.engine} — {p.engine_rule}")
    r.add("")
    r.add("Excluded:")
    for p in prepared:
        if p.excluded:
            r.add(f"  {p.case_id:>5} {p.model_ref[:48]:<48} {'; '.join(p.excluded)}")
    verdicts = [p for p in prepared if p.verdict_only and p.request is not None]
    if verdicts:
        r.add("")
        r.add("Refusal cases (verdict only):")
        for p in verdicts:
            assert p.request is not None
            res = plan(replace(p.request, detail=False))
            r.add(
                f"  {p.case_id:>5} logged available {p.observed.available_gib:.2f} GiB; kvcap: "
                f"{res.memory.kv_cache_bytes / GIB:.2f} GiB, fits={res.fits}"
            )
    r.add("")
    checks = check_weights()
    r.add("Weights (weights.py alone) against 'Model loading took X GiB' (signed %):")
    for check in checks:
        err = "      –" if check.error_pct is None else f"{check.error_pct:+7.2f}"
        pred = "    –" if check.predicted_gib is None else f"{check.predicted_gib:7.2f}"
        flag = "" if check.high_confidence else " (low confidence)"
        r.add(
            f"  {check.model_ref[:44]:<44} {check.setting[:34]:<34} logged {check.logged_gib:7.2f} pred {pred} {err}  {check.note}{flag}"
        )
    high = [abs(c.error_pct) for c in checks if c.error_pct is not None and c.high_confidence]
    if high:
        r.add(
            f"  high-confidence: n={len(high)}, median {statistics.median(high):.2f} %, max {max(high):.2f} %"
        )
    return r


# --- failed starts (the verdict) -----------------------------------------------------------------------------

# The reason a start-up failed, as a class: the logged failure line is matched by vLLM's wording, kvcap's first
# error by its message code. vLLM stops at its first error, so kvcap's first error is the one compared.
FAILURE_CLASSES: tuple[tuple[str, str], ...] = (
    ("sampler_warmup_oom", r"warming up sampler"),
    ("max_model_len_over_derived", r"greater than the derived max_model_len"),
    ("parallel_split", r"is not divisible by|must be divisible by|cannot be split evenly"),
    (
        "one_request_does_not_fit",
        r"To serve at least one request|max seq len \(\d+\) is larger than the maximum number of tokens",
    ),
    ("no_memory_for_blocks", r"No available memory for the cache blocks|# (?:cuda|gpu) blocks: 0\b"),
    ("weights_do_not_fit", r"out of memory.*(?:load|weight)"),
    ("block_size", r"block[-_ ]size"),
    ("scheduler_limits", r"max_num_batched_tokens \(\d+\)"),
    ("dtype_unsupported", r"Bfloat16 is only supported|quantization method .* is not supported"),
)
MESSAGE_CLASSES: dict[str, str] = {
    "sampler_warmup_oom": "sampler_warmup_oom",
    "max_model_len_over_derived": "max_model_len_over_derived",
    "tp_heads": "parallel_split",
    "tp_kv_heads": "parallel_split",
    "tp_vocab": "parallel_split",
    "pp_layers": "parallel_split",
    "quantized_shape_unaligned": "parallel_split",
    "max_model_len_too_large": "one_request_does_not_fit",
    "no_memory_for_blocks": "no_memory_for_blocks",
    "kv_bytes_exceed_gpu": "no_memory_for_blocks",
    "weights_exceed_gpu": "weights_do_not_fit",
    "block_size_unsupported": "block_size",
    "max_num_batched_tokens_below_max_model_len": "scheduler_limits",
    "max_num_batched_tokens_below_max_num_seqs": "scheduler_limits",
    "dtype_unsupported": "dtype_unsupported",
    "quantization_unsupported_gpu": "dtype_unsupported",
}
# Release dates that place an unversioned V0 refusal: before 0.5.0 a release kvcap does not model (not
# plannable), then the 0.5 line, before 0.7.0 the 0.6 line, else 0.7 (the last release whose default engine was
# V0).
V05_RELEASED = "2024-06-11"
V053_RELEASED = (
    "2024-07-23"  # the first 0.5 release that may carry vllm PR #6666 (long-context chunked prefill)
)
V06_RELEASED = "2024-09-04"
V07_RELEASED = "2025-01-27"


def failure_class(text: str) -> str:
    """The class of a logged failure line (``"other"`` when none of vLLM's wordings matches)."""
    for name, pattern in FAILURE_CLASSES:
        if re.search(pattern, text, re.IGNORECASE):
            return name
    return "other"


def verdict_engine(case: dict[str, Any]) -> str | None:
    """The release a case's verdict is checked under: the logged version (any release kvcap models, the V0 ones
    included: the verdict needs no memory figures); else the failure's wording — the V0 refusal "The model's max
    seq len … is larger than the maximum number of tokens" is the 0.5 line before 0.6.0's release date (0.5.0 –
    0.5.2's rules before 0.5.3's) and 0.6 after; "models's" is 0.10 – 0.21 (``vllm-0.11``); anything else a V1 log of a recent release (the newest)."""
    version = _version(case.get("vllm_version"))
    if version is not None:
        if version[:2] < OLDEST_VERSION:
            return None
        engine, _rule, _problem = choose_engine(case)
        return engine or f"vllm-{version[0]}.{version[1]}"
    text = logged_failure(case) or ""
    if _log_format(case) == "v0" or "larger than the maximum number of tokens" in text:
        date = str(case.get("source_date") or "")
        if date < V05_RELEASED:
            return None
        if date < V053_RELEASED:
            return "vllm-0.5.2"  # 0.5.0 – 0.5.2 share the rules (no long-context chunked prefill by default)
        return "vllm-0.5" if date < V06_RELEASED else "vllm-0.6" if date < V07_RELEASED else "vllm-0.7"
    if "models's" in text:
        return "vllm-0.11"
    return DEFAULT_ENGINE


@dataclass(frozen=True, slots=True)
class StartVerdict:
    """kvcap's will-it-start verdict for one recorded start-up (started or failed)."""

    case_id: int
    started: bool
    logged_class: str  # "" for a start that succeeded
    engine: str
    fits: bool | None  # None: not plannable (``why``)
    predicted_class: str  # kvcap's first error, as a class ("" when it fits)
    predicted_text: str
    why: str = ""

    @property
    def predicted_fail(self) -> bool:
        return self.fits is False

    @property
    def reason_matches(self) -> bool:
        return self.predicted_fail and self.predicted_class == self.logged_class


# vLLM's start-up refusals, as they appear in a log: a case whose excerpt holds one failed to start even where
# its file does not say so (the shared cases predate the ``started`` field; case 2 logs V0's refusal).
_REFUSAL_LINE = re.compile(
    r"^.*(?:To serve at least one request with the models?'s? max seq len|max seq len \(\d+\) is larger than "
    r"the maximum number of tokens|No available memory for the cache blocks|is greater than the derived "
    r"max_model_len).*$",
    re.MULTILINE,
)


def logged_failure(case: dict[str, Any]) -> str | None:
    """The failure line of a start-up that failed (``failure``, or a refusal quoted in its excerpt), else None."""
    if case.get("started") is False:
        return str(case.get("failure") or "")
    found = _REFUSAL_LINE.search(str(case.get("excerpt") or ""))
    return found.group(0).strip() if found else None


def judge_start(case: dict[str, Any], snapshot: CatalogSnapshot) -> StartVerdict:
    failure = logged_failure(case)
    started = failure is None
    logged = "" if failure is None else failure_class(failure)
    engine = verdict_engine(case)
    if engine is None:
        why = "a release before 0.5, the oldest kvcap models"
        return StartVerdict(int(case["id"]), started, logged, "< 0.5", None, "", "", why)
    model_ref = str(case.get("model") or "")
    match = resolve_case_model(snapshot, model_ref)
    gpu, stage_gpus = case_gpus(snapshot, case)
    flags = f"{case.get('excerpt') or ''} {case.get('other_settings') or ''}"
    unmodelled = [why for flag, why in _UNMODELLED if flag in flags and f"without {flag}" not in flags]
    why = "; ".join(
        [
            *(
                w
                for w, missing in (
                    ("model not in the built-in catalog", match is None),
                    ("GPU not resolvable", gpu is None),
                )
                if missing
            ),
            *unmodelled,
        ]
    )
    if match is None or gpu is None or unmodelled:
        return StartVerdict(int(case["id"]), started, logged, engine, None, "", "", why)
    request = build_request(case, match.model.spec, match.quantization, gpu, engine, stage_gpus)
    try:
        result = plan(request)
    except InvalidSpec as exc:  # refused while parsing the arguments: a failed start too
        return StartVerdict(
            int(case["id"]), started, logged, engine, False, failure_class(str(exc)), str(exc)
        )
    errors = [m for m in result.messages if m.level == "error"]
    first = errors[0] if errors else None
    return StartVerdict(
        case_id=int(case["id"]),
        started=started,
        logged_class=logged,
        engine=engine,
        fits=result.fits,
        predicted_class=MESSAGE_CLASSES.get(first.code, first.code) if first else "",
        predicted_text=first.text if first else "",
    )


def judge_starts(
    cases: Iterable[dict[str, Any]] | None = None, snapshot: CatalogSnapshot | None = None
) -> list[StartVerdict]:
    """The verdict for every case whose start is known: each failed one, and each started one that kvcap can
    plan with the memory figures it logged (the same cases the KV-token report keeps, so a false alarm is on a
    start whose settings are read exactly)."""
    snapshot = snapshot or builtin_snapshot()
    chosen = list(cases if cases is not None else load_cases())
    kept = {p.case_id for p in prepare_all(chosen, snapshot) if p.included}
    return [judge_start(c, snapshot) for c in chosen if logged_failure(c) is not None or int(c["id"]) in kept]


@dataclass(frozen=True, slots=True)
class StartCounts:
    failed: int
    plannable_failed: int
    predicted_fail: int
    reason_matched: int
    started: int
    false_alarms: int


def start_counts(verdicts: Sequence[StartVerdict]) -> StartCounts:
    failed = [v for v in verdicts if not v.started]
    started = [v for v in verdicts if v.started and v.fits is not None]
    return StartCounts(
        failed=len(failed),
        plannable_failed=sum(1 for v in failed if v.fits is not None),
        predicted_fail=sum(1 for v in failed if v.predicted_fail),
        reason_matched=sum(1 for v in failed if v.reason_matches),
        started=len(started),
        false_alarms=sum(1 for v in started if v.predicted_fail),
    )


def start_report(verdicts: Sequence[StartVerdict]) -> Report:
    r = Report()
    counts = start_counts(verdicts)
    r.add("Failed starts (kvcap's verdict and first error against the logged failure):")
    r.add(f"  {'id':>5} {'engine':<10} {'logged':<26} {'kvcap':<26} text")
    for v in verdicts:
        if v.started:
            continue
        if v.fits is None:
            kvcap = "not plannable"
            text = v.why
        else:
            kvcap = v.predicted_class if v.predicted_fail else "starts (MISSED)"
            text = v.predicted_text[:110]
        mark = "=" if v.reason_matches else "≠" if v.predicted_fail else " "
        r.add(f"  {v.case_id:>5} {v.engine:<10} {v.logged_class:<26} {mark} {kvcap:<24} {text}")
    alarms = [v for v in verdicts if v.started and v.predicted_fail]
    r.add("")
    r.add(
        f"  failed: {counts.failed}, plannable: {counts.plannable_failed}, predicted not to start: "
        f"{counts.predicted_fail}, with the logged reason: {counts.reason_matched}"
    )
    r.add(
        f"  started and plannable: {counts.started}, predicted to fail (false alarms): {counts.false_alarms}"
    )
    for v in alarms:
        r.add(f"    false alarm {v.case_id} ({v.engine}): {v.predicted_class}: {v.predicted_text[:120]}")
    return r


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.accuracy", description=__doc__.split("\n\n")[0] if __doc__ else None
    )
    parser.add_argument(
        "--fit", action="store_true", help="refit the fitted coefficients on the FIT split and print them"
    )
    args = parser.parse_args(argv)
    prepared = prepare_all()
    coefficients = DEFAULT_COEFFICIENTS
    if args.fit:
        coefficients, notes = fit(prepared)
        print("Suggested OverheadCoefficients (fitted on the FIT split only):")
        for note in notes:
            print(f"  {note}")
        print()
    outcomes = evaluate_all(prepared, coefficients)
    print(report(prepared, outcomes, coefficients))
    print()
    print(start_report(judge_starts()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
