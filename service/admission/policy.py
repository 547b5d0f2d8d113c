"""The admission policy: an extracted workload + the catalog snapshot → allow, warn or deny, and why.

Pure: no I/O, no clock, no settings lookup; the same input always gives the same verdict, which is what makes
``kvcap check`` offline and the webhook agree. Plans are memoised by their ``PlanRequest`` (frozen, hashable,
catalog specs by value), so re-applied manifests and controller UPDATEs cost a dictionary lookup.

**Deny** (hard problems: the workload will not run, or will not keep the owner's promise)

* the weights do not fit on the requested GPUs, or nothing is left for the KV cache;
* vLLM would refuse ``--max-model-len`` (one request must fit; the message names the largest length that does);
* tensor × pipeline (× data) parallelism needs more GPUs than a replica requests;
* vLLM would refuse a flag (not a number, heads not divisible by TP, ``max_model_len`` above the model's own);
* fewer concurrent requests of ``kvcap.io/context-tokens`` tokens fit in one replica than
  ``kvcap.io/min-concurrency`` promises (or ``--max-num-seqs`` caps it lower, or the context exceeds
  ``--max-model-len``); a malformed ``kvcap.io/*`` annotation;
* the replicas cannot sustain ``kvcap.io/requests-per-second`` within the promised SLOs: the serving simulator
  (``service.core.recommend.evaluate``, the same sizing as ``/v1/plans/recommend``) finds the largest rate one
  replica sustains with the manifest's flags, capped by the roofline; the promise needs
  ``ceil(rate / per-replica rate)`` replicas, or no rate meets the SLOs at all.

**Warn** (allowed): low headroom over the promise (below ``(1 + low_headroom_ratio) × promise``), the estimate
band straddling the promise, KV-head replication, padding layers, idle GPUs, and anything kvcap *cannot check*:
an unknown model or GPU type, flags hidden in ConfigMaps or Secrets. Not knowing is not a capacity failure, so
those are warnings in both modes (a ``fail-closed`` failure policy is about kvcap crashing, not about gaps in
the catalog). In ``audit`` mode every denial becomes a warning prefixed ``would deny:``.

``kvcap.io/min-concurrency`` is per replica: it is what one replica (one pod, one LWS group, one KServe
predictor) must hold at once, so it does not change when the replica count does. vLLM's own figure is
``num_gpu_blocks / blocks_per_request(context)``; kvcap plans again at ``max_model_len = context`` with the batch
settings of the real plan pinned, so the block count is the same and only the per-request blocks change.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import TYPE_CHECKING, Literal

from service.admission.extract import (
    ANNOTATION_CONTEXT_TOKENS,
    ANNOTATION_ENGINE,
    ANNOTATION_GPU,
    ANNOTATION_MODEL,
    ANNOTATION_SPEC_ACCEPTANCE,
    ExtractedServing,
    ExtractedWorkload,
    TrafficPromise,
)
from service.catalog.resolve import ModelMatch, implied_quantization, resolve_gpu, resolve_model
from service.catalog.snapshot import CatalogGpu, CatalogModel, CatalogSnapshot
from service.core.engines import DEFAULT_ENGINE, NEWEST_VERSION, OLDEST_VERSION, parse_engine
from service.core.errors import InvalidSpec, StartRefusal
from service.core.planner import CapacityPlan, PlanRequest, plan
from service.core.units import GIB
from service.errors import Unprocessable
from service.planning.offline import plain_settings
from service.planning.request import build_request

if TYPE_CHECKING:
    from service.core.recommend import Option
    from service.planning.offline import PlainSettings
    from service.planning.schemas import PlanSettings
    from service.settings import Settings

Mode = Literal["enforce", "audit"]
Outcome = Literal["allowed", "denied", "would_deny", "skipped"]

_FLAG_NAMES = {
    "tensor_parallel_size": "--tensor-parallel-size",
    "pipeline_parallel_size": "--pipeline-parallel-size",
    "pipeline_layer_partition": "VLLM_PP_LAYER_PARTITION",
    "max_model_len": "--max-model-len",
    "gpu_memory_utilization": "--gpu-memory-utilization",
    "kv_cache_dtype": "--kv-cache-dtype",
    "quantization": "--quantization",
    "max_num_seqs": "--max-num-seqs",
    "max_num_batched_tokens": "--max-num-batched-tokens",
    "block_size": "--block-size",
    "kv_cache_memory_bytes": "--kv-cache-memory-bytes",
    "num_gpu_blocks_override": "--num-gpu-blocks-override",
    "dtype": "--dtype",
    "device": "--device",
    "engine": ANNOTATION_ENGINE,
    "speculative_config": "--speculative-config",
    "max_loras": "--max-loras",
    "max_lora_rank": "--max-lora-rank",
    "max_cpu_loras": "--max-cpu-loras",
    "lora_extra_vocab_size": "--lora-extra-vocab-size",
    "cpu_offload_gb": "--cpu-offload-gb",
    "kv_transfer_config": "--kv-transfer-config",
    "kv_offloading_size": "--kv-offloading-size",
    "kv_offloading_backend": "--kv-offloading-backend",
    "limit_mm_per_prompt": "--limit-mm-per-prompt",
    "mm_processor_kwargs": "--mm-processor-kwargs",
    "mamba_cache_dtype": "--mamba-cache-dtype",
    "mamba_ssm_cache_dtype": "--mamba-ssm-cache-dtype",
    "data_parallel_size": "--data-parallel-size",
}
# JSON-valued flags whose content kvcap's schema may read more narrowly than vLLM: a value it cannot read
# leaves the serving unchecked instead of denying it (not knowing is not a capacity failure).
_JSON_FLAG_FIELDS = frozenset(
    {"speculative_config", "kv_transfer_config", "limit_mm_per_prompt", "mm_processor_kwargs"}
)


@dataclass(frozen=True, slots=True, kw_only=True)
class PolicyConfig:
    mode: Mode = "enforce"
    low_headroom_ratio: float = 0.1

    @classmethod
    def from_settings(cls, settings: Settings) -> PolicyConfig:
        return cls(mode=settings.admission_mode, low_headroom_ratio=settings.admission_low_headroom_ratio)


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanSummary:
    """What kvcap planned for one vLLM container (``kvcap check --json``, and logs)."""

    container: str
    model: str
    gpu: str
    engine: str
    tensor_parallel_size: int
    pipeline_parallel_size: int
    quantization: str | None
    kv_cache_dtype: str
    gpus: int | None
    fits: bool
    max_model_len: int
    max_model_len_that_fits: int
    num_gpu_blocks: int
    max_concurrency: float  # requests of max_model_len tokens one replica holds at once
    context_tokens: int | None = None
    concurrency_at_context: float | None = None
    min_concurrency: float | None = None
    requests_per_second: float | None = None  # kvcap.io/requests-per-second: the whole workload's promise
    requests_per_second_per_replica: float | None = None  # what one replica sustains within the SLOs
    replicas: int | None = None  # the manifest's replicas
    replicas_needed: int | None = None  # ceil(promised rate / per-replica rate)


@dataclass(frozen=True, slots=True, kw_only=True)
class Verdict:
    allowed: bool
    reasons: tuple[str, ...] = ()  # why it is denied (in audit mode: why it would be)
    warnings: tuple[str, ...] = ()
    plans: tuple[PlanSummary, ...] = ()
    skipped: str | None = None
    audit: bool = False
    # Why parts of the object were not evaluated (``unknown_model``, ``unresolved_flags`` …): each is also a
    # "kvcap cannot check" warning, and the webhook counts them (``kvcap_admission_unevaluated_total``).
    unevaluated: tuple[str, ...] = ()

    @property
    def outcome(self) -> Outcome:
        if self.skipped is not None:
            return "skipped"
        if not self.reasons:
            return "allowed"
        return "would_deny" if self.allowed else "denied"

    @property
    def message(self) -> str:
        """The denial as one line (Kubernetes shows it after ``denied the request:``)."""
        return "; ".join(self.reasons)


# --- the policy ----------------------------------------------------------------------------------------------


def evaluate(
    workload: ExtractedWorkload, snapshot: CatalogSnapshot, config: PolicyConfig | None = None
) -> Verdict:
    config = config or PolicyConfig()
    if workload.skip is not None:
        return Verdict(allowed=True, skipped=workload.skip, warnings=workload.notes)
    reasons: list[str] = list(workload.problems)
    warnings: list[str] = list(workload.notes)
    plans: list[PlanSummary] = []
    unevaluated: list[str] = []
    many = len(workload.servings) > 1
    for serving in workload.servings:
        check = _ServingCheck(serving, workload, snapshot, config)
        check.run()
        prefix = f"container {serving.container}: " if many else ""
        reasons.extend(prefix + r for r in check.reasons)
        warnings.extend(prefix + w for w in check.warnings)
        unevaluated.extend(check.unevaluated)
        if check.summary is not None:
            plans.append(check.summary)
    if config.mode == "audit" and reasons:
        return Verdict(
            allowed=True,
            reasons=tuple(reasons),
            warnings=tuple(f"would deny: {r}" for r in reasons) + tuple(warnings),
            plans=tuple(plans),
            audit=True,
            unevaluated=tuple(unevaluated),
        )
    return Verdict(
        allowed=not reasons,
        reasons=tuple(reasons),
        warnings=tuple(warnings),
        plans=tuple(plans),
        unevaluated=tuple(unevaluated),
    )


class _Resolutions:
    """Model and GPU name resolutions for the current snapshot; a new snapshot starts a new table.

    ``resolve_model`` tokenises every catalog key when a name is not an exact match (a few hundred µs); the
    names in a cluster's manifests are few and repeat on every review.
    """

    def __init__(self) -> None:
        self.snapshot: CatalogSnapshot | None = None
        self.models: dict[str, ModelMatch | None] = {}
        self.gpus: dict[str, CatalogGpu | None] = {}

    def _for(self, snapshot: CatalogSnapshot) -> None:
        if self.snapshot is not snapshot:
            self.snapshot, self.models, self.gpus = snapshot, {}, {}

    def model(self, snapshot: CatalogSnapshot, ref: str) -> ModelMatch | None:
        self._for(snapshot)
        if ref not in self.models:
            if len(self.models) > 4096:
                self.models.clear()
            self.models[ref] = resolve_model(snapshot, ref)
        return self.models[ref]

    def gpu(self, snapshot: CatalogSnapshot, ref: str) -> CatalogGpu | None:
        self._for(snapshot)
        if ref not in self.gpus:
            if len(self.gpus) > 4096:
                self.gpus.clear()
            self.gpus[ref] = resolve_gpu(snapshot, ref)
        return self.gpus[ref]


_resolved = _Resolutions()


@lru_cache(maxsize=1024)
def cached_plan(request: PlanRequest) -> CapacityPlan:
    """``plan`` memoised: requests hold the catalog specs by value, so a changed catalog is a new key.

    The term-by-term breakdown and the per-stage table are dropped from the memo: the policy does not read
    them, and they are most of a plan's objects (the garbage collector walks every one of them).
    """
    return replace(plan(request), breakdown=(), stages=(), projections=None)


def _fmt(n: float) -> str:
    return f"{n:,.0f}" if float(n).is_integer() else f"{n:,.1f}"


def _gib(n: int) -> str:
    return f"{n / GIB:.2f} GiB"


class _ServingCheck:
    """The checks for one vLLM container; collects reasons, warnings and the plan summary."""

    def __init__(
        self,
        serving: ExtractedServing,
        workload: ExtractedWorkload,
        snapshot: CatalogSnapshot,
        config: PolicyConfig,
    ) -> None:
        self.serving = serving
        self.workload = workload
        self.snapshot = snapshot
        self.config = config
        self.reasons: list[str] = []
        self.warnings: list[str] = []
        self.unevaluated: list[str] = []
        self.summary: PlanSummary | None = None

    def cannot_check(self, reason: str, warning: str) -> None:
        """A part kvcap could not evaluate: always a visible warning, and a counted reason."""
        self.unevaluated.append(reason)
        self.warnings.append(warning)

    # -- steps ---------------------------------------------------------------------------------------------

    def run(self) -> None:
        serving = self.serving
        self.warnings.extend(serving.notes)
        if serving.problems:  # vLLM (or Kubernetes) stops here; planning half-read flags would only mislead
            self.reasons.extend(serving.problems)
            return
        if serving.unresolved:
            self.cannot_check(
                "unresolved_flags",
                f"kvcap cannot check {serving.container}: {', '.join(serving.unresolved)} comes from a value kvcap "
                "cannot see (valueFrom, envFrom or a script); write the value in the manifest",
            )
            return
        engine = self._engine()
        flags = dict(serving.flags)
        device = str(flags.pop("device", None) or "auto").lower()
        if device == "auto":
            device = "rocm" if serving.gpu_resource == "amd.com/gpu" else "cuda"
        if device not in ("cuda", "rocm", "cpu"):
            self.cannot_check(
                "unsupported_device",
                f"kvcap cannot check {serving.container}: it models GPUs and CPUs, not --device {device}",
            )
            return
        flags["device"] = device
        tp = _int(flags.get("tensor_parallel_size"), 1)
        pp = _int(flags.get("pipeline_parallel_size"), 1)
        if device != "cpu" and not self._gpu_count(tp, pp):
            return
        model = self._model()
        if model is None:
            return
        gpu = self._gpu() if device != "cpu" else None
        if gpu is None and device != "cpu":
            return
        settings = self._settings({**flags, "engine": engine})
        if settings is None:
            return
        # the weights actually loaded (``…-AWQ``) decide the quantisation, even when the annotation names the model
        implied = (implied_quantization(serving.model) if serving.model else None) or model[1]
        try:
            request = build_request(
                model[0].spec,
                gpu.spec if gpu else None,
                settings,
                implied_quantization=implied,
                snapshot=self.snapshot,  # a draft model named in --speculative-config is a catalog model
            )
            result = cached_plan(request)
        except StartRefusal as exc:
            # vLLM's own start-up check refuses these settings: the pod would crash-loop, so it is denied
            self.reasons.append(f"vLLM would refuse to start {serving.container}: {exc}")
            return
        except InvalidSpec as exc:
            self.cannot_check("invalid_spec", f"kvcap cannot check {serving.container}: {exc}")
            return
        except (
            Unprocessable
        ) as exc:  # a serving feature's value kvcap cannot resolve (a draft not in the catalog)
            self.cannot_check("invalid_spec", f"kvcap cannot check {serving.container}: {exc.message}")
            return
        self._plan_verdict(result, model[0].name, gpu)
        concurrency = self._promise(request, result)
        traffic = self._traffic(request, result)
        self.summary = PlanSummary(
            container=serving.container,
            model=model[0].name,
            gpu=gpu.name if gpu else "cpu",
            engine=result.settings.engine,
            tensor_parallel_size=result.settings.tensor_parallel_size,
            pipeline_parallel_size=result.settings.pipeline_parallel_size,
            quantization=result.settings.quantization,
            kv_cache_dtype=result.settings.kv_cache_dtype,
            gpus=serving.gpus,
            fits=result.fits,
            max_model_len=result.settings.max_model_len,
            max_model_len_that_fits=result.max_model_len_that_fits,
            num_gpu_blocks=result.kv_cache.num_gpu_blocks,
            max_concurrency=round(result.kv_cache.max_concurrency, 2),
            context_tokens=concurrency[0] if concurrency else None,
            concurrency_at_context=round(concurrency[1], 2) if concurrency else None,
            min_concurrency=self.workload.min_concurrency,
            requests_per_second=self.workload.traffic.requests_per_second if self.workload.traffic else None,
            requests_per_second_per_replica=traffic[0] if traffic else None,
            replicas=self.workload.replicas,
            replicas_needed=traffic[1] if traffic else None,
        )

    def _settings(self, values: dict[str, object]) -> PlanSettings | PlainSettings | None:
        """The flags as ``PlanSettings`` (plainly valid ones without the schema: ``plain_settings``), or
        ``None`` with vLLM's refusal of each bad flag among the reasons."""
        plain = plain_settings(values)
        if plain is not None:
            return plain
        from pydantic import ValidationError

        from service.planning.schemas import PlanSettings

        try:
            return PlanSettings.model_validate(values)
        except ValidationError as exc:
            for error in exc.errors():
                field = str(error["loc"][0]) if error["loc"] else ""
                name = _FLAG_NAMES.get(field, field or "flags")
                if field in _JSON_FLAG_FIELDS:
                    where = ".".join(str(part) for part in error["loc"][1:])
                    self.cannot_check(
                        "invalid_spec",
                        f"kvcap cannot check {self.serving.container}: it cannot read {name}"
                        f"{' ' + where if where else ''}: {error['msg']}",
                    )
                    continue
                self.reasons.append(f"vLLM would refuse {name} {error.get('input')!r}: {error['msg']}")
            return None

    def _engine(self) -> str:
        """``kvcap.io/engine``, else the image tag's release, else the newest release kvcap knows."""
        chosen = self.workload.engine_annotation or self.serving.engine
        if chosen is None:
            if self.serving.image:
                # ``latest``, ``nightly``, a digest: the release is unknown, so the rules may be the wrong ones.
                self.warnings.append(
                    f"image {self.serving.image!r} names no vLLM release; checked with {DEFAULT_ENGINE}'s rules "
                    f"(pin a release tag or set {ANNOTATION_ENGINE})"
                )
            return DEFAULT_ENGINE
        try:
            name, version = parse_engine(chosen)
        except InvalidSpec as exc:
            if self.workload.engine_annotation:
                self.reasons.append(f"{ANNOTATION_ENGINE}: {exc.message}")
                return DEFAULT_ENGINE
            oldest = f"vllm-{OLDEST_VERSION[0]}.{OLDEST_VERSION[1]}"
            self.warnings.append(f"{chosen} is older than kvcap models; checked with {oldest}'s rules")
            return oldest
        if version is not None and version > NEWEST_VERSION:
            self.warnings.append(
                f"{name} is newer than the releases kvcap models; checked with {DEFAULT_ENGINE}'s rules"
            )
        return name

    def _gpu_count(self, tp: int, pp: int) -> bool:
        """TP × PP × DP against the GPUs a replica requests; False when nothing further can be checked."""
        serving = self.serving
        needed = tp * pp * serving.data_parallel_size
        if serving.gpus is None:
            self.cannot_check(
                "no_gpu_request",
                f"kvcap cannot check {serving.container}: it requests no nvidia.com/gpu or amd.com/gpu "
                "(set resources.limits so kvcap and the scheduler know how many GPUs it gets)",
            )
            return False
        parts = f"tensor-parallel-size {tp} × pipeline-parallel-size {pp}"
        if serving.data_parallel_size > 1:
            parts += f" × data-parallel-size {serving.data_parallel_size}"
        if needed > serving.gpus:
            fix = f"request {needed} {serving.gpu_resource}"
            if serving.gpus >= 1 and pp == 1 and serving.data_parallel_size == 1:
                fix += f" or set --tensor-parallel-size {_largest_divisor_at_most(tp, serving.gpus)}"
            self.reasons.append(f"{parts} needs {needed} GPUs but {serving.gpus_detail}; {fix}")
            return False
        if needed < serving.gpus:
            self.warnings.append(
                f"{serving.gpus_detail} but {parts} uses {needed}: {serving.gpus - needed} GPU(s) sit idle"
            )
        return True

    def _model(self) -> tuple[CatalogModel, str | None] | None:
        serving, workload = self.serving, self.workload
        annotation = workload.model_annotation
        if annotation:
            match = _resolved.model(self.snapshot, annotation)
            if match is not None:
                if serving.model:
                    other = _resolved.model(self.snapshot, serving.model)
                    if other is not None and other.model.name != match.model.name:
                        self.warnings.append(
                            f"{ANNOTATION_MODEL} {annotation!r} ({match.model.name}) differs from the served model "
                            f"{serving.model!r} ({other.model.name}); checked {match.model.name}"
                        )
                return match.model, match.quantization
            self.warnings.append(f"{ANNOTATION_MODEL} {annotation!r} is not a catalog model, name or HF id")
        if not serving.model:
            self.cannot_check(
                "no_model",
                f"kvcap cannot check {serving.container}: no model in its command line; set {ANNOTATION_MODEL}",
            )
            return None
        match = _resolved.model(self.snapshot, serving.model)
        if match is None:
            self.cannot_check(
                "unknown_model",
                f"kvcap cannot check {serving.container}: model {serving.model!r} is not in kvcap's catalog "
                f"(set {ANNOTATION_MODEL} to a catalog name or HF id, or import its config.json)",
            )
            return None
        return match.model, match.quantization

    def _gpu(self) -> CatalogGpu | None:
        serving, workload = self.serving, self.workload
        products = serving.gpu_products
        annotation = workload.gpu_annotation
        if products:
            known = [(label, _resolved.gpu(self.snapshot, label)) for label in products]
            found = [(label, gpu) for label, gpu in known if gpu is not None]
            unknown = [label for label, gpu in known if gpu is None]
            if found:
                label, gpu = min(found, key=lambda pair: pair[1].spec.memory_bytes)
                if len(products) > 1:
                    self.warnings.append(
                        f"{serving.gpu_product_source} allows {', '.join(products)}: checked the smallest, {gpu.name}"
                        + (f" ({', '.join(unknown)} not in the catalog)" if unknown else "")
                    )
                if annotation:
                    named = _resolved.gpu(self.snapshot, annotation)
                    if named is not None and named.name != gpu.name:
                        self.warnings.append(
                            f"{ANNOTATION_GPU} {annotation!r} ignored: {serving.gpu_product_source} pins {label}"
                        )
                return gpu
            if not annotation:
                self.cannot_check(
                    "unknown_gpu",
                    f"kvcap cannot check GPU memory for {serving.container}: GPU type {', '.join(products)} is not "
                    f"in kvcap's catalog (set {ANNOTATION_GPU} to a catalog GPU)",
                )
                return None
        if annotation:
            named = _resolved.gpu(self.snapshot, annotation)
            if named is None:
                self.cannot_check(
                    "unknown_gpu",
                    f"kvcap cannot check GPU memory for {serving.container}: {ANNOTATION_GPU} {annotation!r} is not "
                    "a catalog GPU or product label",
                )
            return named
        self.cannot_check(
            "unknown_gpu",
            f"kvcap cannot check GPU memory for {serving.container}: GPU type unknown (no nvidia.com/gpu.product "
            f"node selector or required affinity, no {ANNOTATION_GPU} annotation); checked GPU counts only",
        )
        return None

    def _plan_verdict(self, result: CapacityPlan, model: str, gpu: CatalogGpu | None) -> None:
        serving = self.serving
        errors = [
            m
            for m in result.errors
            if not (m.code == "max_model_len_over_derived" and serving.allow_long_max_model_len)
        ]
        for message in result.messages:
            if message.level == "warning":
                self.warnings.append(message.text)
        if not errors:
            return
        fixes = self._fixes(result)
        where = f"{model} on {gpu.name if gpu else 'cpu'}"
        for i, message in enumerate(errors):
            text = self._explain(message.code, message.text, result, where)
            if i == len(errors) - 1 and fixes:
                text += f"; {fixes}"
            self.reasons.append(text)

    def _explain(self, code: str, text: str, result: CapacityPlan, where: str) -> str:
        s = result.settings
        if code == "max_model_len_too_large":
            fits = result.max_model_len_that_fits
            held = (
                f"the KV cache holds at most {fits:,} tokens for one request"
                if fits
                else "not even one token fits"
            )
            return (
                f"vLLM would refuse --max-model-len {s.max_model_len:,} for {where} "
                f"(TP {s.tensor_parallel_size}, PP {s.pipeline_parallel_size}): {held}"
            )
        if code == "weights_exceed_gpu":
            return (
                f"weights do not fit: {where} with tensor-parallel-size {s.tensor_parallel_size} × "
                f"pipeline-parallel-size {s.pipeline_parallel_size} needs {_gib(result.memory.weights_bytes)} per GPU "
                f"but the GPU has {_gib(result.memory.total_bytes)}"
            )
        if code == "no_memory_for_blocks":
            return (
                f"no memory left for the KV cache: {where} has {_gib(result.memory.budget_bytes)} to use per GPU and "
                f"weights take {_gib(result.memory.weights_bytes)}, runtime overheads the rest"
            )
        return f"vLLM would refuse {where}: {text}"

    def _fixes(self, result: CapacityPlan) -> str:
        texts = []
        for suggestion in result.suggestions:
            text = suggestion.text
            if suggestion.setting == "tensor_parallel_size" and isinstance(suggestion.value, int):
                gpus = suggestion.value * result.settings.pipeline_parallel_size
                if self.serving.gpus is None or gpus > self.serving.gpus:
                    text += f" with {gpus} {self.serving.gpu_resource or 'GPUs'}"
            texts.append(text)
        if not texts:
            return ""
        return ("" if texts[0].startswith("set ") else "use ") + " or ".join(texts)

    def _promise(self, request: PlanRequest, result: CapacityPlan) -> tuple[int, float] | None:
        """Check ``kvcap.io/min-concurrency`` at ``kvcap.io/context-tokens``; (context, concurrency) when run."""
        promised = self.workload.min_concurrency
        context = self.workload.context_tokens or result.settings.max_model_len
        if not result.fits or result.kv_cache.num_gpu_blocks <= 0:
            return None
        s = result.settings
        if promised is None:
            return None
        if context > s.max_model_len:
            self.reasons.append(
                f"{ANNOTATION_CONTEXT_TOKENS} {context:,} exceeds --max-model-len {s.max_model_len:,}: vLLM rejects "
                f"longer requests; raise --max-model-len or lower {ANNOTATION_CONTEXT_TOKENS}"
            )
            return None
        if promised > s.max_num_seqs:
            self.reasons.append(
                f"promised {_fmt(promised)} concurrent requests per replica but --max-num-seqs caps a replica at "
                f"{s.max_num_seqs:,}: set --max-num-seqs ≥ {math.ceil(promised):,}"
            )
        at = self._at_context(request, result, context)
        held = at.kv_cache.max_concurrency
        blocks = at.kv_cache.num_gpu_blocks
        low = held * at.kv_cache.num_gpu_blocks_low / blocks if blocks else held
        high = held * at.kv_cache.num_gpu_blocks_high / blocks if blocks else held
        what = f"{_fmt(promised)} concurrent requests of {context:,} tokens per replica"
        if held < promised:
            self.reasons.append(
                f"promised {what} but one replica holds {held:.1f}; {self._promise_fixes(request, context, promised, held)}"
            )
            return context, held
        if not result.exact and low < promised:
            self.warnings.append(
                f"the promise of {what} is inside kvcap's estimate ({low:.1f}–{high:.1f}); "
                "give --kv-cache-memory-bytes for an exact count or leave more headroom"
            )
        if held < (1 + self.config.low_headroom_ratio) * promised:
            self.warnings.append(
                f"low headroom: one replica holds {held:.1f} concurrent requests of {context:,} tokens, "
                f"{(held / promised - 1) * 100:.0f}% above the promised {_fmt(promised)}"
            )
        return context, held

    def _traffic(self, request: PlanRequest, result: CapacityPlan) -> tuple[float, int] | None:
        """Check ``kvcap.io/requests-per-second`` with the serving simulator; (per-replica rate, replicas needed)."""
        promise = self.workload.traffic
        if promise is None or not result.fits or result.kv_cache.num_gpu_blocks <= 0:
            return None
        if request.gpu is None:
            self.cannot_check(
                "traffic_on_cpu", "kvcap cannot check kvcap.io/requests-per-second on CPUs: it simulates GPUs"
            )
            return None
        what = f"promised {promise.text}"
        try:
            option = sustained_rate(request, result, promise)
        except InvalidSpec as exc:  # an acceptance above 1 + num_speculative_tokens
            self.reasons.append(f"{ANNOTATION_SPEC_ACCEPTANCE}: {exc.message}")
            return None
        if option.rejection == "cannot estimate" or (
            option.feasible and option.requests_per_second_per_replica is None
        ):
            self.cannot_check(
                "traffic_not_estimable", f"kvcap cannot check the {what}: {'; '.join(option.reasons[-1:])}"
            )
            return None
        if not option.feasible:
            self.reasons.append(f"{what} but {option.reasons[-1] if option.reasons else option.rejection}")
            return None
        per_replica = option.requests_per_second_per_replica
        assert per_replica is not None
        needed = option.replicas
        replicas = self.workload.replicas
        sizing = (
            f"one replica sustains {per_replica:.2f} req/s in the serving simulator "
            f"(max_num_seqs {option.max_num_seqs:,})"
        )
        if replicas is None:
            self.warnings.append(
                f"{what}: {sizing}, so it needs {needed:,} replicas; kvcap cannot see how many this object runs"
            )
        elif replicas < needed:
            self.reasons.append(
                f"{what} but {replicas:,} replica(s) sustain {replicas * per_replica:.2f} req/s: {sizing}; "
                f"set replicas ≥ {needed:,}"
            )
        elif replicas * per_replica < (1 + self.config.low_headroom_ratio) * promise.requests_per_second:
            self.warnings.append(
                f"low headroom: {replicas:,} replica(s) sustain {replicas * per_replica:.2f} req/s, "
                f"{(replicas * per_replica / promise.requests_per_second - 1) * 100:.0f}% above the promised "
                f"{promise.requests_per_second:g} req/s ({sizing})"
            )
        return per_replica, needed

    @staticmethod
    def _at_context(request: PlanRequest, result: CapacityPlan, context: int) -> CapacityPlan:
        if context == result.settings.max_model_len:
            return result
        s = result.settings
        return cached_plan(
            replace(
                request,
                max_model_len=context,
                max_model_len_auto=False,
                max_num_seqs=s.max_num_seqs,
                max_num_batched_tokens=s.max_num_batched_tokens,
                block_size=s.block_size,
                suggest=False,
            )
        )

    def _promise_fixes(self, request: PlanRequest, context: int, promised: float, held: float) -> str:
        """What would keep the promise, each checked by planning again."""
        fixes: list[str] = []

        def holds(**changes: object) -> bool:
            try:
                candidate = cached_plan(replace(request, max_model_len=context, suggest=False, **changes))  # type: ignore[arg-type]
            except InvalidSpec:
                return False
            return candidate.fits and candidate.kv_cache.max_concurrency >= promised

        tp = request.tensor_parallel_size
        for factor in (2, 4, 8):
            if request.model.num_attention_heads % (tp * factor) == 0 and holds(
                tensor_parallel_size=tp * factor
            ):
                gpus = tp * factor * request.pipeline_parallel_size
                fixes.append(
                    f"tensor-parallel-size {tp * factor} with {gpus} {self.serving.gpu_resource or 'GPUs'}"
                )
                break
        current = (request.kv_cache_dtype or "auto").lower()
        if not current.startswith(("fp8", "int8")) and holds(kv_cache_dtype="fp8"):
            fixes.append("--kv-cache-dtype fp8")
        shorter = int(context * held / promised)
        if shorter >= 1:
            fixes.append(f"requests of about {shorter:,} tokens")
        if not fixes:
            return "no single change kvcap tried keeps it; use a larger GPU"
        return "use " + " or ".join(fixes)


@lru_cache(maxsize=256)
def _sustained(request: PlanRequest, promise: TrafficPromise) -> Option:
    from service.core.recommend import Search, Workload
    from service.core.recommend import evaluate as evaluate_option

    workload = Workload(
        requests_per_second=promise.requests_per_second,
        prompt_tokens=promise.prompt_tokens,
        output_tokens=promise.output_tokens,
        ttft_p95_seconds=promise.ttft_seconds,
        tpot_seconds=promise.tpot_seconds,
        slo_percentile=promise.slo_percentile,
        headroom_ratio=0.0,
        spec_mean_acceptance_length=promise.spec_mean_acceptance_length,
    )
    # The manifest's flags are what runs: max_num_seqs is not searched, only the rate.
    return replace(evaluate_option(request, workload, search=Search(search_max_num_seqs=False)), plan=None)


def sustained_rate(request: PlanRequest, result: CapacityPlan, promise: TrafficPromise) -> Option:
    """How one replica with the manifest's settings serves the promised traffic (memoised per request)."""
    s = result.settings
    pinned = replace(
        request,
        max_model_len=s.max_model_len,
        max_model_len_auto=False,
        max_num_seqs=s.max_num_seqs,
        max_num_batched_tokens=s.max_num_batched_tokens,
        block_size=s.block_size,
        suggest=False,
    )
    return _sustained(pinned, promise)


def _int(value: object, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _largest_divisor_at_most(tp: int, gpus: int) -> int:
    return max((d for d in range(1, gpus + 1) if tp % d == 0), default=1)
