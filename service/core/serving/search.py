"""The largest request rate one replica sustains within latency SLOs (stage 7 of the serving simulator).

The search brackets the Poisson rate between an unloaded rate and the saturation ceiling, then narrows the
bracket by false position:

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
   and the ceiling (fails), until the bracket is within 3 %. The zero is interpolated on the rate axis, not
   on log(rate): the margin rises steeply only near saturation, so from the floor a log axis aims far below
   the answer and creeps up on it. Each trial stays at least 0.9 × 3 % inside both ends of the bracket
   (``next_rate``): a trial next to an end, on the side the margin predicts, then closes the bracket. The
   answer is the largest rate found to pass, with a failing one within 3 % above it; usually 2–4 trials
   after the floor.

The replica (plan, step-time model, scheduler configuration, kept step-time terms) is prepared once and
shared by every simulation; each simulation uses the same seed, so neighbouring rates see the same request
lengths and the same arrival pattern scaled in time (vLLM rescales the gamma offsets to
``num_prompts / rate``), which keeps the SLO metric monotone enough for bisection.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from service.core.errors import InvalidSpec
from service.core.planner import CapacityPlan, PlanRequest
from service.core.planner import plan as make_plan
from service.core.serving.datasets import BenchmarkSpec
from service.core.serving.metrics import (
    BenchmarkResult,
    LatencySummary,
    request_throughput,
)
from service.core.serving.simulate import (
    EngineRun,
    Replica,
    SimulationResult,
    for_replica,
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
    shared: SharedSearches | None = None,
    spec_mean_acceptance_length: float | None = None,
) -> RateSearchResult:
    """Bracket + bisection on the Poisson request rate (see module docstring); ``timeline=False``: the
    simulations keep no timeline (``simulate(..., timeline=False)``). ``shared``: searches already run for
    replicas with the same simulation inputs (``SharedSearches``); a search found there runs no simulation.
    ``spec_mean_acceptance_length``: the workload's acceptance under speculative decoding
    (``BenchmarkSpec.spec_mean_acceptance_length``; None: the method's default)."""
    if prompt_tokens < 1:
        raise InvalidSpec("must be ≥ 1", field="prompt_tokens")
    if output_tokens < 1:
        raise InvalidSpec("must be ≥ 1", field="output_tokens")
    replica = prepare_replica(request, plan=plan or make_plan(request), coefficients=coefficients)

    def spec_at(rate: float) -> BenchmarkSpec:
        return BenchmarkSpec(
            dataset_name="random",
            num_prompts=num_prompts,
            request_rate=rate,
            random_input_len=prompt_tokens,
            random_output_len=output_tokens,
            seed=seed,
            ready_check_timeout_sec=0,  # served traffic has no benchmark client priming the prefix cache
            spec_mean_acceptance_length=spec_mean_acceptance_length,
        )

    if shared is None:
        return _search(replica, slo, spec_at, timeline=timeline)
    key = (
        replica.simulation_inputs,
        slo,
        prompt_tokens,
        output_tokens,
        num_prompts,
        seed,
        timeline,
        spec_mean_acceptance_length,
    )
    found = shared.get(key)
    if found is None:
        found = shared.put(key, _search(replica, slo, spec_at, timeline=timeline))
    elif found.at_rate is not None:
        # The same runs; the summary of the kept one against this replica's plan.
        found = replace(found, at_rate=for_replica(found.at_rate, replica, spec_at(found.max_request_rate)))
    return found


class SharedSearches:
    """Rate searches by the simulation inputs of their replica (``Replica.simulation_inputs``) and the
    search's own arguments: replicas planned from different requests (two GPUs with the same figures, say)
    that run every benchmark alike share one search. At most ``maxsize`` are kept, the oldest dropped first."""

    def __init__(self, maxsize: int = 4096) -> None:
        self.maxsize = maxsize
        self._found: dict[tuple[object, ...], RateSearchResult] = {}

    def get(self, key: tuple[object, ...]) -> RateSearchResult | None:
        return self._found.get(key)

    def put(self, key: tuple[object, ...], found: RateSearchResult) -> RateSearchResult:
        if len(self._found) >= self.maxsize:
            del self._found[next(iter(self._found))]
        self._found[key] = found
        return found

    def clear(self) -> None:
        self._found.clear()

    def __len__(self) -> int:
        return len(self._found)


def _search(
    replica: Replica, slo: SloTarget, spec_at: Callable[[float], BenchmarkSpec], *, timeline: bool
) -> RateSearchResult:
    """``max_rate_within_slo``'s search against a prepared replica (``spec_at``: the benchmark at a rate)."""

    def run(rate: float) -> EngineRun:
        return run_benchmark(spec_at(rate), replica=replica, keep_records=timeline)

    def margin(trial: EngineRun) -> float:
        return slo.margin(trial.latency_summary())

    # Only the run the search returns is summarized in full; the others are read for one figure each.
    saturated = run(float("inf"))
    ceiling = request_throughput(saturated.completed, saturated.duration_seconds)
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
        mid = next_rate(best_rate, f_low, high_rate, f_high)
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


CLOSING_STEP = 0.9 * RELATIVE_TOLERANCE
"""The least relative step a trial takes from either end of the bracket: a trial that lands on the side the
margin predicts then leaves a bracket within ``RELATIVE_TOLERANCE`` (1 + 0.9 × 3 % is below 1.03 in floating
point too), so the search stops."""


def next_rate(low_rate: float, f_low: float, high_rate: float, f_high: float) -> float:
    """The next rate to simulate between ``low_rate`` (margin ``f_low`` ≤ 0) and ``high_rate`` (``f_high`` > 0).

    The margin's zero by linear interpolation on the rate axis (the margin rises steeply only near
    saturation, so from the floor a log-rate axis aims far too low), kept at least ``CLOSING_STEP`` inside
    each end: an estimate next to an end then becomes the trial that closes the bracket if the estimate is
    right. A bracket too narrow for both margins is split at its geometric middle, which closes it either way.
    """
    lowest, highest = low_rate * (1 + CLOSING_STEP), high_rate / (1 + CLOSING_STEP)
    if lowest >= highest:
        return math.sqrt(low_rate * high_rate)
    rate = low_rate + (high_rate - low_rate) * (-f_low) / (f_high - f_low) if f_high > f_low else lowest
    return min(max(rate, lowest), highest)
