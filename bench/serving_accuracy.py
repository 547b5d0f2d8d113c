"""Accuracy of the serving simulator against public ``vllm bench serve`` results (``make accuracy``).

``python -m bench.serving_accuracy`` simulates every case of ``tests/data/serving-benchmarks.json`` with the
settings the source states (the release's defaults otherwise) and prints, per split, the median |error| of
``output_throughput``, ``mean_tpot_ms`` and ``mean_ttft_ms`` and the largest ratio between prediction and
measurement. ``--cases`` prints every case.

How a case becomes a simulation:

* **Plan.** Catalog model and GPU, TP/PP, dtype, quantisation, KV dtype, ``max_model_len``,
  ``max_num_seqs``, ``max_num_batched_tokens``, ``gpu_memory_utilization``, ``enforce_eager`` and
  ``async_scheduling`` (``--async-scheduling``) as given; the
  engine profile the data names. When the source logged its KV-cache size, the block count is taken from it
  (``num_gpu_blocks_override`` = logged tokens ÷ block size; where only vLLM's "Available KV cache memory"
  line is quoted, ``logged_kv_cache_gib``, the blocks those bytes hold) so the scheduler sees the real pool.
  When its start-up log says the GPUs lack P2P (``gpu_peer_to_peer: false``), the simulation is told so.
* **Workload.** Where the source's result file lists every request's prompt and generated tokens
  (``request_lengths``, from ``--save-result``'s ``input_lens``/``output_lens``), exactly those. Otherwise
  ``random`` as given (seed 0). The benchmark client's readiness probe (the first prompt, sent
  once before the timed run by the clients of releases before 0.14) leaves that prompt in V1's prefix cache;
  the simulator models it from the case's release, or from ``ready_check_timeout_sec`` / ``num_warmups``
  where the source states them. ``sharegpt``: kvcap's ShareGPT V3 length table, rescaled so the
  mean prompt and output lengths equal the ones the case reports (total tokens ÷ completed), because small
  ShareGPT runs (10–320 prompts) have means far from the dataset's.
* **Split.** ``fit`` cases may tune the step-time coefficients (``bench/fit_step_coefficients.py``);
  ``held_back`` ones never are. The split is the data's own rule (``tests/data/serving-benchmarks.md``).
  Each split is also summarised for the kind of case the coefficients are fitted on — V1 engines with their
  GPUs in one host; V0 engines and tensor parallelism across Ray-joined pods are reported but not fitted
  (see the fitting script for why).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from service.catalog.builtin import builtin_snapshot
from service.catalog.snapshot import CatalogSnapshot
from service.core.engines import resolve_engine
from service.core.errors import InvalidSpec
from service.core.planner import PlanRequest, plan
from service.core.planner.features import ServingFeatures
from service.core.serving import (
    DEFAULT_STEP_COEFFICIENTS,
    BenchmarkSpec,
    StepCoefficients,
    sample_requests,
    simulate,
)

DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "serving-benchmarks.json"
METRICS = ("output_throughput", "mean_tpot_ms", "mean_ttft_ms")
BARS = {"output_throughput": 0.15, "mean_tpot_ms": 0.15, "mean_ttft_ms": 0.35}


@dataclass(frozen=True, slots=True, kw_only=True)
class PreparedCase:
    case_id: str
    split: str
    source_group: str = ""
    across_pods: bool = False  # TP GPUs in different pods joined by Ray (the data's notes say so)
    gpu_peer_to_peer: bool = True  # False where the source's start-up log says the GPUs lack P2P
    request: PlanRequest
    benchmark: BenchmarkSpec
    measured: dict[str, float]


@dataclass(frozen=True, slots=True, kw_only=True)
class CaseOutcome:
    case_id: str
    split: str
    predicted: dict[str, float]
    measured: dict[str, float]
    v0: bool = False  # a V0 engine profile (reported, not fitted)
    across_pods: bool = False  # TP through Ray across pods (reported, not fitted)

    def ratio(self, metric: str) -> float | None:
        m, p = self.measured.get(metric), self.predicted.get(metric)
        if not m or p is None or m <= 0 or p <= 0:
            return None
        return p / m


def load_cases(path: Path = DATA) -> list[dict[str, Any]]:
    return list(json.loads(path.read_text(encoding="utf-8"))["cases"])


def _rate(value: object) -> float:
    if value is None or value == "inf":
        return math.inf
    return float(value)  # type: ignore[arg-type]


def _sharegpt_explicit(bench: dict[str, Any], num_prompts: int) -> BenchmarkSpec:
    base = sample_requests(BenchmarkSpec(dataset_name="sharegpt", num_prompts=num_prompts, seed=0))
    mean_in = sum(r.prompt_tokens for r in base) / len(base)
    mean_out = sum(r.output_tokens for r in base) / len(base)
    scale_in = float(bench.get("mean_input_tokens") or mean_in) / mean_in
    scale_out = float(bench.get("mean_output_tokens") or mean_out) / mean_out
    pairs = tuple(
        (max(1, round(r.prompt_tokens * scale_in)), max(1, round(r.output_tokens * scale_out))) for r in base
    )
    return BenchmarkSpec(
        dataset_name="explicit",
        num_prompts=num_prompts,
        request_rate=_rate(bench.get("request_rate")),
        max_concurrency=bench.get("max_concurrency"),
        requests=pairs,
        **_client_warmup(bench),
    )


def _recorded_lengths(bench: dict[str, Any]) -> BenchmarkSpec:
    """The run's own per-request (prompt, generated) token counts, where its result file lists them
    (``input_lens`` / ``output_lens`` of ``--save-result``): the exact workload instead of a length table. A
    request that generated nothing still prefilled its prompt: it is simulated with one output token."""
    pairs = tuple((max(1, int(p)), max(1, int(o))) for p, o in bench["request_lengths"])
    return BenchmarkSpec(
        dataset_name="explicit",
        num_prompts=len(pairs),
        request_rate=_rate(bench.get("request_rate")),
        max_concurrency=bench.get("max_concurrency"),
        requests=pairs,
        **_client_warmup(bench),
    )


def _client_warmup(bench: dict[str, Any]) -> dict[str, Any]:
    """The client's ``--ready-check-timeout-sec`` / ``--num-warmups`` where the source states them (the
    release's client default otherwise: ``simulate.client_primes_first_prompt``)."""
    fields: dict[str, Any] = {}
    if bench.get("ready_check_timeout_sec") is not None:
        fields["ready_check_timeout_sec"] = int(bench["ready_check_timeout_sec"])
    if bench.get("num_warmups"):
        fields["num_warmups"] = int(bench["num_warmups"])
    return fields


def blocks_from_available_kv_memory(gib: float, page_size_bytes: int, group_size: int) -> int:
    """The KV-cache blocks V1 allocates from the memory its start-up log reports ("Available KV cache memory:
    X GiB", per GPU): ``available // page_size // num_layers`` (vllm/v1/core/kv_cache_utils.py
    ``get_num_blocks``, v0.10.1; kvcap's ``service.core.kv_cache.num_blocks``). The log prints two decimals,
    so the count is known to within 0.005 GiB."""
    return int(gib * 2**30) // page_size_bytes // group_size


def prepare(case: dict[str, Any], snapshot: CatalogSnapshot) -> PreparedCase | str:
    """The simulation inputs of one case, or why it cannot be simulated."""
    model_entry = snapshot.find_model(case.get("model") or "")
    if model_entry is None:
        return f"model {case.get('model')!r} not in the catalog"
    gpu_entry = snapshot.find_gpu(case["gpu"])
    if gpu_entry is None:
        return f"GPU {case['gpu']!r} not in the catalog"
    bench = case["benchmark"]
    num_prompts = int(bench.get("num_prompts") or 1000)
    settings: dict[str, Any] = {
        "model": model_entry.spec,
        "gpu": gpu_entry.spec,
        "engine": case.get("engine")
        or (f"vllm-{case['vllm_version']}" if case.get("vllm_version") else None),
        "tensor_parallel_size": int(case.get("tensor_parallel_size") or 1),
        "pipeline_parallel_size": int(case.get("pipeline_parallel_size") or 1),
        "dtype": None if case.get("dtype") in (None, "auto") else case.get("dtype"),  # --dtype auto = model's
        "quantization": case.get("quantization"),
        "kv_cache_dtype": case.get("kv_cache_dtype"),
        "max_model_len": case.get("max_model_len"),
        "max_num_seqs": case.get("max_num_seqs"),
        "max_num_batched_tokens": case.get("max_num_batched_tokens"),
        "gpu_memory_utilization": case.get("gpu_memory_utilization"),
        "enforce_eager": bool(case.get("enforce_eager") or False),
        "async_scheduling": case.get("async_scheduling"),  # --async-scheduling; null = the release default
    }
    if case.get("enable_expert_parallel"):  # --enable-expert-parallel: the MoE's experts split over the ranks
        settings["features"] = ServingFeatures(enable_expert_parallel=True)
    if settings["max_model_len"] is None and bench.get("dataset_name") == "random":
        # The catalog default context may not fit; the benchmark needs prompt + output.
        needed = int(bench.get("random_input_len") or 1024) + int(bench.get("random_output_len") or 128)
        settings["max_model_len"] = max(4096, needed)
    request = PlanRequest(**settings)
    try:
        first = plan(request)
    except InvalidSpec as error:
        return f"plan: {error}"
    if not first.fits:
        reason = first.errors[0].text if first.errors else "the plan does not fit"
        return f"kvcap's plan says vLLM would not start with these settings: {reason}"
    logged = case.get("logged_kv_cache_tokens")
    if logged:
        blocks = int(logged) // first.kv_cache.block_size + (0 if first.settings.profile == "ideal" else 1)
        request = PlanRequest(**{**settings, "num_gpu_blocks_override": blocks})
    elif case.get("logged_kv_cache_gib"):
        kv = first.kv_cache
        blocks = blocks_from_available_kv_memory(
            float(case["logged_kv_cache_gib"]), kv.page_size_bytes, kv.group_size
        )
        request = PlanRequest(**{**settings, "num_gpu_blocks_override": blocks})
    if bench.get("request_lengths"):
        spec = _recorded_lengths(bench)
    elif bench.get("dataset_name") == "sharegpt":
        spec = _sharegpt_explicit(bench, num_prompts)
    else:
        spec = BenchmarkSpec(
            dataset_name="random",
            num_prompts=num_prompts,
            request_rate=_rate(bench.get("request_rate")),
            max_concurrency=bench.get("max_concurrency"),
            random_input_len=int(bench.get("random_input_len") or 1024),
            random_output_len=int(bench.get("random_output_len") or 128),
            random_range_ratio=float(bench.get("random_range_ratio") or 0.0),
            **_client_warmup(bench),
        )
    measured = {k: float(v) for k, v in case["measured"].items() if isinstance(v, int | float)}
    return PreparedCase(
        case_id=case["id"],
        split=case["split"],
        source_group=str(case.get("source_group") or case["id"]),
        across_pods="joined by Ray" in (case.get("notes") or "")
        or "through Ray" in (case.get("notes") or ""),
        gpu_peer_to_peer=case.get("gpu_peer_to_peer") is not False,
        request=request,
        benchmark=spec,
        measured=measured,
    )


def prepare_all(cases: Iterable[dict[str, Any]]) -> tuple[list[PreparedCase], list[tuple[str, str]]]:
    snapshot = builtin_snapshot()
    prepared: list[PreparedCase] = []
    skipped: list[tuple[str, str]] = []
    for case in cases:
        outcome = prepare(case, snapshot)
        if isinstance(outcome, str):
            skipped.append((case["id"], outcome))
        else:
            prepared.append(outcome)
    return prepared, skipped


def run_case(case: PreparedCase, coefficients: StepCoefficients) -> CaseOutcome:
    v0 = resolve_engine(case.request.engine).v0
    try:
        sim = simulate(
            case.request,
            case.benchmark,
            coefficients=coefficients,
            gpu_peer_to_peer=case.gpu_peer_to_peer,
        )
    except InvalidSpec:
        return CaseOutcome(
            case_id=case.case_id, split=case.split, predicted={}, measured=case.measured, v0=v0
        )
    result = sim.result.as_dict()
    return CaseOutcome(
        case_id=case.case_id,
        split=case.split,
        predicted={k: float(v) for k, v in result.items()},
        measured=case.measured,
        v0=v0,
        across_pods=case.across_pods,
    )


def log_errors(outcomes: Sequence[CaseOutcome]) -> list[float]:
    """|log(predicted / measured)| for every (case, metric) pair that has both."""
    errors = []
    for outcome in outcomes:
        for metric in METRICS:
            ratio = outcome.ratio(metric)
            if ratio is not None:
                errors.append(abs(math.log(ratio)))
    return errors


@dataclass(frozen=True, slots=True, kw_only=True)
class SplitSummary:
    split: str
    cases: int
    median_abs_error: dict[str, float]  # fraction
    counts: dict[str, int]
    max_ratio: float
    worst_case: str


def summarise(outcomes: Sequence[CaseOutcome], split: str, *, v1_only: bool = False) -> SplitSummary:
    """``v1_only``: the cases of the kind the coefficients are fitted on (V1 engines, TP within one host)."""
    chosen = [o for o in outcomes if o.split == split and not (v1_only and (o.v0 or o.across_pods))]
    medians: dict[str, float] = {}
    counts: dict[str, int] = {}
    worst, worst_case = 1.0, ""
    for metric in METRICS:
        errors = []
        for o in chosen:
            ratio = o.ratio(metric)
            if ratio is None:
                continue
            errors.append(abs(ratio - 1))
            spread = max(ratio, 1 / ratio)
            if spread > worst:
                worst, worst_case = spread, f"{o.case_id} {metric}"
        medians[metric] = statistics.median(errors) if errors else math.nan
        counts[metric] = len(errors)
    return SplitSummary(
        split=f"{split} (V1, 1 host)" if v1_only else split,
        cases=len(chosen),
        median_abs_error=medians,
        counts=counts,
        max_ratio=worst,
        worst_case=worst_case,
    )


def evaluate(cases: Sequence[PreparedCase], coefficients: StepCoefficients) -> list[CaseOutcome]:
    return [run_case(c, coefficients) for c in cases]


def _print_summary(summary: SplitSummary) -> None:
    parts = [
        f"{metric} {summary.median_abs_error[metric] * 100:5.1f} % (n={summary.counts[metric]}, bar ≤ {BARS[metric] * 100:.0f} %)"
        for metric in METRICS
    ]
    print(f"{summary.split:<22} {summary.cases:>3} cases | median |error|: " + "; ".join(parts))
    print(f"{'':<22}     max ratio {summary.max_ratio:.2f}× ({summary.worst_case}; bar ≤ 2×)")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", action="store_true", help="print every case")
    args = parser.parse_args(argv)
    prepared, skipped = prepare_all(load_cases())
    outcomes = evaluate(prepared, DEFAULT_STEP_COEFFICIENTS)
    print("Serving simulator vs public vllm bench serve results (tests/data/serving-benchmarks.json)")
    print(f"coefficients: {DEFAULT_STEP_COEFFICIENTS.as_dict()}")
    if args.cases:
        for o in outcomes:
            cells = []
            for metric in METRICS:
                r = o.ratio(metric)
                cells.append(f"{metric}={'–' if r is None else f'{r:.2f}×'}")
            kind = "V0" if o.v0 else "V1 Ray pods" if o.across_pods else "V1"
            print(f"  {o.split:<9} {kind:<11} {o.case_id:<58} " + " ".join(cells))
    for case_id, reason in skipped:
        print(f"  skipped {case_id}: {reason}")
    for split in ("fit", "held_back"):
        _print_summary(summarise(outcomes, split))
        _print_summary(summarise(outcomes, split, v1_only=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
