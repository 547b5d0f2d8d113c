"""Fit the nine ``StepCoefficients`` on the FIT split of ``tests/data/serving-benchmarks.json`` (stdlib only).

Objective: the weighted mean over fit cases and metrics (``output_throughput``, ``mean_tpot_ms``,
``mean_ttft_ms``) of ``min(|log(predicted / measured)|, log 3)`` — an L1 loss on log error, capped so that a few
cases the model cannot explain (repeated runs served from vLLM's prefix cache, clusters with unusual
interconnects) do not pull every other prediction towards them. A source group of n cases weighs √n (a case
1/√n), so one author's sweep of thirty runs on one cluster does not alone decide the coefficients for every
GPU, nor does a single pasted result. Held-back cases are never read.

Cases of V0 engine profiles are reported by ``make accuracy`` but not fitted: V0 (vLLM ≤ 0.10 without the V1
engine) ran output processing — detokenisation, stop checks, building each request's output — synchronously
inside the engine loop, a per-request cost V1 moved to the API-server process; one per-request coefficient
cannot describe both, and the V1 releases are the ones kvcap plans for. Cases whose notes say the tensor-parallel
GPUs sit in different pods joined by Ray are reported but not fitted either: one author's cluster whose link is
known only where a start-up log shows it (no GPU P2P in the Qwen2-7B runs, ``gpu_peer_to_peer``: the model's
host-memory all-reduce path) and whose repeated runs were partly served from the prefix cache.

Method: coordinate descent with multiplicative steps — each coefficient in turn is multiplied by (1 ± δ) and a
change is kept when the loss drops; δ halves after a sweep without improvement, from 0.4 down to 0.05. Each
coefficient stays within physical bounds (efficiencies in (0, 1], overheads ≥ 0).

    python -m bench.fit_step_coefficients            # prints the fitted values and the fit/held-back figures

Nothing is written: the printed values are copied, with the date and the figures, into
``service/core/serving/step_time.py``.
"""

from __future__ import annotations

import math
import sys
from dataclasses import replace

from bench.serving_accuracy import (
    METRICS,
    PreparedCase,
    evaluate,
    load_cases,
    prepare_all,
    summarise,
)
from service.core.engines import resolve_engine
from service.core.serving import DEFAULT_STEP_COEFFICIENTS, StepCoefficients

# Physical ranges: streaming reads reach 60–95 % of datasheet HBM bandwidth (STREAM-like kernels on
# A100/H100); large bf16 GEMMs 40–90 % of dense peak (cuBLAS); FlashAttention 20–80 %; CPU work per step
# 0.1–20 ms and per request 0.1–200 µs; host dispatch of one decoder layer under piecewise CUDA graphs (one
# eager attention call from Python and one graph replay, PyTorch ≈ 10–50 µs per eager op) 10–500 µs; the fixed
# GPU time of one small kernel (launch gap, block scheduling, ramp and tail) 0.5–10 µs; the API server's part of
# a request's round trip (HTTP, tokenising, IPC to the engine core, detokenising, SSE) 0.5–30 ms.
BOUNDS = {
    "bandwidth_efficiency": (0.6, 0.95),
    "compute_efficiency": (0.4, 0.9),
    "gemm_half_tokens": (8.0, 1024.0),
    "attention_efficiency": (0.2, 0.8),
    "step_overhead_seconds": (1e-4, 0.02),
    "per_request_seconds": (1e-7, 2e-4),
    "layer_dispatch_seconds": (1e-5, 5e-4),
    "kernel_floor_seconds": (5e-7, 1e-5),
    "request_latency_seconds": (5e-4, 0.03),
}
CAP = math.log(3.0)


def loss(cases: list[PreparedCase], coefficients: StepCoefficients) -> float:
    per_group: dict[str, int] = {}
    for case in cases:
        per_group[case.source_group] = per_group.get(case.source_group, 0) + 1
    total, weights = 0.0, 0.0
    for case, outcome in zip(cases, evaluate(cases, coefficients), strict=True):
        weight = 1.0 / math.sqrt(per_group[case.source_group])
        for metric in METRICS:
            ratio = outcome.ratio(metric)
            if ratio is not None:
                total += weight * min(abs(math.log(ratio)), CAP)
                weights += weight
    return total / weights if weights else math.inf


def fit(
    cases: list[PreparedCase], start: StepCoefficients, *, max_evaluations: int = 120
) -> StepCoefficients:
    best = start
    best_loss = loss(cases, best)
    evaluations = 1
    print(f"start loss {best_loss:.4f}", flush=True)
    delta = 0.4
    while delta >= 0.05 and evaluations < max_evaluations:
        improved = False
        for name, (low, high) in BOUNDS.items():
            for factor in (1 + delta, 1 / (1 + delta)):
                value = min(high, max(low, getattr(best, name) * factor))
                if value == getattr(best, name):
                    continue
                trial = replace(best, **{name: value})
                trial_loss = loss(cases, trial)
                evaluations += 1
                if trial_loss < best_loss - 1e-6:
                    best, best_loss, improved = trial, trial_loss, True
                    print(f"  {name} → {value:.6g}: loss {best_loss:.4f}", flush=True)
                    break
        if not improved:
            delta /= 2
            print(f"delta {delta:.3f} (evaluations {evaluations})", flush=True)
    return best


def main() -> int:
    prepared, _ = prepare_all(load_cases())
    fit_cases = [
        c
        for c in prepared
        if c.split == "fit" and not resolve_engine(c.request.engine).v0 and not c.across_pods
    ]
    print(f"fitting on {len(fit_cases)} fit cases (V1 engines)", flush=True)
    start = DEFAULT_STEP_COEFFICIENTS  # refits start from the committed values
    fitted = fit(fit_cases, start)
    print("fitted:", {k: float(f"{v:.4g}") for k, v in fitted.as_dict().items()})
    outcomes = evaluate(prepared, fitted)
    for split in ("fit", "held_back"):
        s = summarise(outcomes, split)
        cells = ", ".join(f"{m} {s.median_abs_error[m] * 100:.1f} %" for m in METRICS)
        print(f"{split}: median |error| {cells}; max ratio {s.max_ratio:.2f}× ({s.worst_case})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
