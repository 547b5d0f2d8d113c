"""The largest request rate one replica sustains within latency SLOs (stage 7 of the serving simulator).

The search brackets the Poisson rate between an unloaded rate and the saturation ceiling, then bisects on a
log scale:

1. **Ceiling**: the request throughput of the same workload sent all at once (``--request-rate inf``) — no
   arrival process can complete requests faster than a saturated engine does. It is also the bound a steady
   state above which queues grow without limit.
   The search never goes above ``CEILING_FRACTION`` (95 %) of it: a finite run at ρ = 1 builds only a short
   queue and can pass a TTFT target that a steady state at that rate — whose queue grows without bound — would
   miss.
   The top of the bracket is simulated first: when the SLO holds there it is the answer, and no other rate
   is simulated (the metric grows with the rate, so the floor below it would pass too).
2. **Floor**: 2 % of the ceiling. If the SLO fails there, queueing is not the problem (a single prefill or
   decode step is too slow) and the answer is 0.
3. **False position** (Illinois variant) on ``log(metric / SLO)`` against the rate, between the floor (passes)
   and the ceiling (fails), until the bracket is within 3 %: the SLO metric is smooth in the rate, so 2–4
   simulations usually close the bracket that bisection would need 6 for.

The replica (plan, step-time model, scheduler configuration, kept step-time terms) is prepared once and
shared by every simulation; each simulation uses the same seed, so neighbouring rates see the same request
lengths and the same arrival pattern scaled in time (vLLM rescales the gamma offsets to
``num_prompts / rate``), which keeps the SLO metric monotone enough for bisection.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from service.core.errors import InvalidSpec
from service.core.planner import CapacityPlan, PlanRequest
from service.core.planner import plan as make_plan
from service.core.serving.datasets import BenchmarkSpec
from service.core.serving.metrics import (
    BenchmarkResult,
    LatencySummary,
    latency_summary,
    request_throughput_of,
)
from service.core.serving.simulate import (
    EngineRun,
    SimulationResult,
    prepare_replica,
    run_benchmark,
    summarize,
)
from service.core.serving.step_time import StepCoefficients

PERCENTILES = ("p50", "p99", "mean")
FLOOR_FRACTION = 0.02
CEILING_FRACTION = 0.95
RELATIVE_TOLERANCE = 0.03
MAX_BISECTIONS = 12


@dataclass(frozen=True, slots=True, kw_only=True)
class SloTarget:
    ttft_seconds: float | None = None
    tpot_seconds: float | None = None
    percentile: str = "p50"  # "p50" | "p99" | "mean"

    def __post_init__(self) -> None:
        if self.percentile not in PERCENTILES:
            raise InvalidSpec(f"must be one of {', '.join(PERCENTILES)}", field="slo.percentile")
        for name in ("ttft_seconds", "tpot_seconds"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise InvalidSpec("must be > 0", field=f"slo.{name}")

    def margin(self, result: BenchmarkResult | LatencySummary) -> float:
        """max over the targets of log(measured / target): ≤ 0 when every target is met."""
        prefix = {"p50": "median", "p99": "p99", "mean": "mean"}[self.percentile]
        worst = -math.inf
        for name, target in (("ttft", self.ttft_seconds), ("tpot", self.tpot_seconds)):
            if target is None:
                continue
            value = getattr(result, f"{prefix}_{name}_ms") / 1e3
            worst = max(worst, math.log(max(value, 1e-12) / target))
        return worst if worst > -math.inf else -1.0

    def met_by(self, result: BenchmarkResult | LatencySummary) -> bool:
        return self.margin(result) <= 0


@dataclass(frozen=True, slots=True, kw_only=True)
class RateSearchResult:
    max_request_rate: float  # requests/s one replica sustains within the SLO (0 if none)
    at_rate: SimulationResult | None  # the simulation at that rate
    ceiling_request_rate: float  # saturation throughput (requests/s) of the same workload
    simulations: int


def max_rate_within_slo(
    request: PlanRequest,
    slo: SloTarget,
    *,
    prompt_tokens: int,
    output_tokens: int,
    num_prompts: int = 300,
    seed: int = 0,
    plan: CapacityPlan | None = None,
    coefficients: StepCoefficients | None = None,
    timeline: bool = True,
) -> RateSearchResult:
    """Bracket + bisection on the Poisson request rate (see module docstring); ``timeline=False``: the
    simulations keep no timeline (``simulate(..., timeline=False)``)."""
    if prompt_tokens < 1:
        raise InvalidSpec("must be ≥ 1", field="prompt_tokens")
    if output_tokens < 1:
        raise InvalidSpec("must be ≥ 1", field="output_tokens")
    replica = prepare_replica(request, plan=plan or make_plan(request), coefficients=coefficients)

    def run(rate: float) -> EngineRun:
        spec = BenchmarkSpec(
            dataset_name="random",
            num_prompts=num_prompts,
            request_rate=rate,
            random_input_len=prompt_tokens,
            random_output_len=output_tokens,
            seed=seed,
            ready_check_timeout_sec=0,  # served traffic has no benchmark client priming the prefix cache
        )
        return run_benchmark(spec, replica=replica)

    def margin(trial: EngineRun) -> float:
        return slo.margin(latency_summary(trial.outcomes()))

    # Only the run the search returns is summarized in full; the others are read for one figure each.
    saturated = run(float("inf"))
    ceiling = request_throughput_of(saturated.outcomes(), duration_seconds=saturated.duration_seconds)
    simulations = 1
    if ceiling <= 0:
        return RateSearchResult(max_request_rate=0.0, at_rate=None, ceiling_request_rate=0.0, simulations=1)
    # The top of the bracket first: when it passes it is the answer, and the floor need not be simulated.
    high_rate = ceiling * CEILING_FRACTION
    high = run(high_rate)
    simulations += 1
    f_high = margin(high)
    if f_high <= 0:
        return RateSearchResult(
            max_request_rate=high_rate,
            at_rate=summarize(high, timeline=timeline),
            ceiling_request_rate=ceiling,
            simulations=simulations,
        )
    low_rate = ceiling * FLOOR_FRACTION
    low = run(low_rate)
    simulations += 1
    f_low = margin(low)
    if f_low > 0:
        return RateSearchResult(
            max_request_rate=0.0, at_rate=None, ceiling_request_rate=ceiling, simulations=simulations
        )
    best_rate, best = low_rate, low
    side = 0
    for _ in range(MAX_BISECTIONS):
        if high_rate / best_rate - 1 <= RELATIVE_TOLERANCE:
            break
        # Interpolate the zero of the margin on a log-rate axis; keep inside the middle 90 % of the bracket.
        x_low, x_high = math.log(best_rate), math.log(high_rate)
        x = x_low + (x_high - x_low) * (-f_low) / (f_high - f_low) if f_high > f_low else (x_low + x_high) / 2
        x = min(max(x, x_low + 0.05 * (x_high - x_low)), x_high - 0.05 * (x_high - x_low))
        mid = math.exp(x)
        trial = run(mid)
        simulations += 1
        f_mid = margin(trial)
        if f_mid <= 0:
            best_rate, best, f_low = mid, trial, f_mid
            if side == -1:
                f_high /= 2  # Illinois: halve the stale end so the bracket shrinks from both sides
            side = -1
        else:
            high_rate, f_high = mid, f_mid
            if side == 1:
                f_low /= 2
            side = 1
    return RateSearchResult(
        max_request_rate=best_rate,
        at_rate=summarize(best, timeline=timeline),
        ceiling_request_rate=ceiling,
        simulations=simulations,
    )
