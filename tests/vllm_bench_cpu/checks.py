"""The checks of the simulator against recorded real-vLLM runs, shared by the replay test and the e2e test.

Three kinds, from exact to statistical:

* **counts** (exact): vLLM completed every request, with exactly the prompt and output tokens the simulator is
  given, and the simulator reports the same ``completed``, ``total_input_tokens``, ``total_output_tokens``.
  vLLM's own counters agree: ``vllm:prompt_tokens_total`` and ``vllm:generation_tokens_total`` moved by those
  totals, ``vllm:request_success_total`` by the number of requests, and the sum of
  ``vllm:iteration_tokens_total`` by prompt + output tokens.
* **scheduler**: the number of engine steps (observations of ``vllm:iteration_tokens_total``, one per engine
  step that produced output, ``vllm/v1/metrics/loggers.py`` 0.32.0) against the simulator's; preemptions
  (``vllm:num_preemptions_total``) happen in the simulation exactly in the runs where vLLM preempted.
* **latency and throughput**: the simulated summary (mean, median, p99 of TTFT, TPOT, ITL, E2EL; duration and
  throughputs) against the measured one, within ``TOLERANCES`` (relative), and the orderings across runs.

The tolerances are what a fit on one calibration run can promise on a shared two-core VM (a neighbour's load
changes one run's step time by 10–20 %); they are stated in the README next to the figures.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from service.core.serving import SimulationResult, StepCoefficients
from tests.vllm_bench_cpu import replay

# Relative tolerance |simulated ÷ measured − 1| per key, for the predicted (non-calibration) runs.
TOLERANCES: Mapping[str, float] = {
    "duration": 0.25,
    "output_throughput": 0.25,
    "mean_tpot_ms": 0.25,
    "median_tpot_ms": 0.25,
    "mean_itl_ms": 0.25,
    "median_itl_ms": 0.30,
    "mean_e2el_ms": 0.25,
    "median_e2el_ms": 0.25,
    "mean_ttft_ms": 0.50,
    "median_ttft_ms": 0.60,
}
# Engine steps: the simulator's count against vLLM's, relative.
STEP_COUNT_TOLERANCE = 0.10

_cache: dict[tuple[int, str, StepCoefficients], SimulationResult] = {}


def simulated(
    case: replay.RecordedCase, run: replay.RecordedRun, coefficients: StepCoefficients
) -> SimulationResult:
    key = (id(case), run.name, coefficients)
    if key not in _cache:
        _cache[key] = replay.simulate_run(case, run, coefficients)
    return _cache[key]


def assert_exact_counts(
    case: replay.RecordedCase, run: replay.RecordedRun, coefficients: StepCoefficients
) -> None:
    m = run.measured
    n = run.benchmark["num_prompts"]
    assert m["completed"] == n and m["failed"] == 0, (run.name, m["completed"], m["failed"])
    assert m["total_input_tokens"] == sum(run.input_lens), run.name
    assert m["total_output_tokens"] == sum(run.output_lens), run.name
    b = run.benchmark
    low = max(1, math.floor(b["random_output_len"] * (1 - b["random_range_ratio"])))
    high = max(1, math.ceil(b["random_output_len"] * (1 + b["random_range_ratio"])))
    assert all(low <= o <= high for o in run.output_lens), (run.name, "--ignore-eos: every output as asked")
    delta = run.server_metrics_delta
    assert round(delta["vllm:request_success_total"]) == n, run.name
    assert round(delta["vllm:prompt_tokens_total"]) == m["total_input_tokens"], run.name
    assert round(delta["vllm:generation_tokens_total"]) == m["total_output_tokens"], run.name
    # One observation per engine step with output: prompt tokens computed (no prefix cache: all of them, counted
    # once at the first token, not again after a preemption) + tokens sampled.
    assert run.engine_tokens == m["total_input_tokens"] + m["total_output_tokens"], run.name
    s = simulated(case, run, coefficients).result
    assert (s.completed, s.failed) == (m["completed"], 0), run.name
    assert (s.total_input_tokens, s.total_output_tokens) == (
        m["total_input_tokens"],
        m["total_output_tokens"],
    )


def assert_scheduler_matches(
    case: replay.RecordedCase, run: replay.RecordedRun, coefficients: StepCoefficients
) -> None:
    sim = simulated(case, run, coefficients)
    steps = run.engine_steps
    assert abs(sim.num_steps / steps - 1) <= STEP_COUNT_TOLERANCE, (run.name, sim.num_steps, steps)
    assert (sim.num_preemptions > 0) == (run.preemptions > 0), (
        run.name,
        sim.num_preemptions,
        run.preemptions,
    )


def prediction_errors(
    case: replay.RecordedCase, run: replay.RecordedRun, coefficients: StepCoefficients
) -> dict[str, float]:
    result = simulated(case, run, coefficients).result.as_dict()
    return replay.relative_errors(run.measured, result, tuple(TOLERANCES))


def assert_prediction_within_tolerances(
    case: replay.RecordedCase, run: replay.RecordedRun, coefficients: StepCoefficients
) -> None:
    errors = prediction_errors(case, run, coefficients)
    outside = {k: round(e, 3) for k, e in errors.items() if abs(e) > TOLERANCES[k]}
    assert not outside, (run.name, outside)


def assert_orderings(case: replay.RecordedCase, coefficients: StepCoefficients) -> None:
    """Across runs the simulator orders duration, mean TTFT and mean TPOT as vLLM measured them."""
    for key in ("duration", "mean_ttft_ms", "mean_tpot_ms"):
        measured = sorted(case.runs, key=lambda r: float(r.measured[key]))
        predicted = sorted(
            case.runs, key=lambda r: float(simulated(case, r, coefficients).result.as_dict()[key])
        )
        assert [r.name for r in measured] == [r.name for r in predicted], key


def comparison_table(case: replay.RecordedCase, coefficients: StepCoefficients) -> str:
    """A Markdown table: measured vs simulated per run (the README's figures)."""
    keys = (
        "duration",
        "output_throughput",
        "mean_ttft_ms",
        "median_ttft_ms",
        "p99_ttft_ms",
        "mean_tpot_ms",
        "median_tpot_ms",
        "p99_tpot_ms",
        "mean_itl_ms",
        "median_itl_ms",
        "p99_itl_ms",
        "mean_e2el_ms",
        "median_e2el_ms",
        "p99_e2el_ms",
    )
    lines = ["| run | metric | measured | simulated | error |", "|---|---|---:|---:|---:|"]
    for run in case.runs:
        sim = simulated(case, run, coefficients)
        s = sim.result.as_dict()
        role = " (fit)" if run is case.calibration else ""
        lines.append(
            f"| {run.name}{role} | engine steps | {run.engine_steps} | {sim.num_steps} | "
            f"{sim.num_steps / run.engine_steps - 1:+.1%} |"
        )
        lines.append(f"| {run.name}{role} | preemptions | {run.preemptions} | {sim.num_preemptions} | |")
        for k in keys:
            mv, sv = float(run.measured[k]), float(s[k])
            lines.append(f"| {run.name}{role} | {k} | {mv:.2f} | {sv:.2f} | {sv / mv - 1:+.1%} |")
    return "\n".join(lines)
