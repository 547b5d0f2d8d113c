"""The largest request rate within an SLO: bracket + false position on the Poisson rate."""

from __future__ import annotations

import math

import pytest

from service.core.errors import InvalidSpec
from service.core.planner import PlanRequest, plan
from service.core.serving import BenchmarkSpec, SloTarget, max_rate_within_slo, simulate
from service.core.serving.search import (
    CEILING_FRACTION,
    CLOSING_STEP,
    FLOOR_FRACTION,
    RELATIVE_TOLERANCE,
    next_rate,
)
from tests.core.model_cards import LLAMA_31_8B
from tests.core.serving.test_simulate import COEFFS
from tests.core.serving.test_step_time import H100

REQUEST = PlanRequest(model=LLAMA_31_8B, gpu=H100, max_model_len=4096)


def test_the_found_rate_meets_the_slo_and_a_slightly_higher_one_does_not() -> None:
    p = plan(REQUEST)
    alone = simulate(
        REQUEST,
        BenchmarkSpec(num_prompts=1, random_input_len=1024, random_output_len=128),
        plan=p,
        coefficients=COEFFS,
    )
    # Twice the unloaded TPOT: met at low load, missed once batches grow.
    slo = SloTarget(ttft_seconds=1.0, tpot_seconds=2 * alone.result.mean_tpot_ms / 1e3, percentile="p99")
    found = max_rate_within_slo(
        REQUEST, slo, prompt_tokens=1024, output_tokens=128, num_prompts=100, plan=p, coefficients=COEFFS
    )
    assert 0 < found.max_request_rate < found.ceiling_request_rate
    assert found.at_rate is not None and slo.met_by(found.at_rate.result)
    above = simulate(
        REQUEST,
        BenchmarkSpec(
            num_prompts=100,
            random_input_len=1024,
            random_output_len=128,
            request_rate=found.max_request_rate * (1 + 2 * RELATIVE_TOLERANCE),
        ),
        plan=p,
        coefficients=COEFFS,
    )
    assert not slo.met_by(above.result)
    assert found.simulations <= 10
    assert found.at_rate.peak_running >= 1
    assert found.at_rate.num_steps_with_output <= found.at_rate.num_steps


def test_an_slo_no_single_request_can_meet_gives_zero() -> None:
    slo = SloTarget(tpot_seconds=0.001)  # 1 ms per token: below the weight-read time of an 8B model
    found = max_rate_within_slo(
        REQUEST, slo, prompt_tokens=256, output_tokens=32, num_prompts=50, coefficients=COEFFS
    )
    assert found.max_request_rate == 0.0 and found.at_rate is None


def test_a_loose_slo_stops_just_below_the_saturation_ceiling() -> None:
    slo = SloTarget(ttft_seconds=1e4, tpot_seconds=10.0)
    found = max_rate_within_slo(
        REQUEST, slo, prompt_tokens=256, output_tokens=32, num_prompts=50, coefficients=COEFFS
    )
    # Never the ceiling itself: a steady state at ρ = 1 has an unbounded queue.
    assert math.isclose(found.max_request_rate, CEILING_FRACTION * found.ceiling_request_rate)
    assert found.ceiling_request_rate > 0
    # The saturated run and the top of the bracket, which passes: the floor is never simulated.
    assert found.simulations == 2


def test_a_zero_answer_simulates_the_ceiling_the_top_and_the_floor() -> None:
    found = max_rate_within_slo(
        REQUEST, SloTarget(tpot_seconds=0.001), prompt_tokens=256, output_tokens=32, num_prompts=50
    )
    assert found.max_request_rate == 0.0 and found.simulations == 3


def test_slo_values_are_validated() -> None:
    with pytest.raises(InvalidSpec) as error:
        SloTarget(percentile="p95")
    assert error.value.field == "slo.percentile"
    with pytest.raises(InvalidSpec) as error:
        SloTarget(ttft_seconds=0.0)
    assert error.value.field == "slo.ttft_seconds"


def test_a_trial_at_either_clamp_closes_the_bracket() -> None:
    # A trial CLOSING_STEP above the passing end that fails, or below the failing end that passes, leaves a
    # bracket within the tolerance: the stopping test must see it so in floating point.
    for low in (0.013, 1.0, 7.3, 1234.5):
        assert (low * (1 + CLOSING_STEP)) / low - 1 <= RELATIVE_TOLERANCE
        high = low * 1.4
        assert high / (high / (1 + CLOSING_STEP)) - 1 <= RELATIVE_TOLERANCE
    # Inside the bracket, by the margin's linear zero, kept off both ends.
    assert next_rate(1.0, -1.0, 3.0, 1.0) == 2.0
    assert next_rate(1.0, -1e-6, 3.0, 1.0) == 1.0 * (1 + CLOSING_STEP)
    assert next_rate(1.0, -1.0, 3.0, 1e-6) == 3.0 / (1 + CLOSING_STEP)
    # Too narrow for both margins: the geometric middle, within the tolerance of either end.
    narrow = next_rate(1.0, -0.5, 1.05, 0.5)
    assert narrow == math.sqrt(1.05)
    assert 1.05 / narrow - 1 <= RELATIVE_TOLERANCE and narrow - 1 <= RELATIVE_TOLERANCE


def _passes(
    request: PlanRequest, slo: SloTarget, rate: float, *, p: object, lengths: tuple[int, int]
) -> bool:
    spec = BenchmarkSpec(
        num_prompts=60,
        random_input_len=lengths[0],
        random_output_len=lengths[1],
        request_rate=rate,
        ready_check_timeout_sec=0,
    )
    return slo.met_by(simulate(request, spec, plan=p, coefficients=COEFFS, timeline=False).result)  # type: ignore[arg-type]


def _reference_boundary(
    request: PlanRequest, slo: SloTarget, *, ceiling: float, p: object, lengths: tuple[int, int]
) -> tuple[float, float]:
    """The slow reference: plain bisection on pass/fail between the search's floor and top, to 0.1 %:
    (a passing rate, a failing rate 0.1 % above it)."""
    low, high = FLOOR_FRACTION * ceiling, CEILING_FRACTION * ceiling
    assert _passes(request, slo, low, p=p, lengths=lengths)
    assert not _passes(request, slo, high, p=p, lengths=lengths)
    while high / low - 1 > 0.001:
        mid = math.sqrt(low * high)
        if _passes(request, slo, mid, p=p, lengths=lengths):
            low = mid
        else:
            high = mid
    return low, high


# SLOs whose margin rises with the rate in these runs (a p99 TTFT of 60 requests is nearly their largest, one
# unlucky collision, and is not monotone: there no search can promise the boundary, only a bracket).
@pytest.mark.parametrize(
    ("tpot_factor", "ttft_factor", "percentile"),
    [(2.0, None, "p99"), (1.3, None, "p50"), (None, 1.5, "p50"), (1.5, 2.0, "mean")],
)
def test_the_search_lands_within_its_tolerance_of_an_exhaustive_bisection(
    tpot_factor: float | None, ttft_factor: float | None, percentile: str
) -> None:
    lengths = (1024, 64)
    p = plan(REQUEST)
    alone = simulate(
        REQUEST,
        BenchmarkSpec(num_prompts=1, random_input_len=lengths[0], random_output_len=lengths[1]),
        plan=p,
        coefficients=COEFFS,
    ).result
    slo = SloTarget(
        tpot_seconds=tpot_factor * alone.mean_tpot_ms / 1e3 if tpot_factor else None,
        ttft_seconds=ttft_factor * alone.mean_ttft_ms / 1e3 if ttft_factor else None,
        percentile=percentile,
    )
    found = max_rate_within_slo(
        REQUEST,
        slo,
        prompt_tokens=lengths[0],
        output_tokens=lengths[1],
        num_prompts=60,
        plan=p,
        coefficients=COEFFS,
    )
    passing, failing = _reference_boundary(
        REQUEST, slo, ceiling=found.ceiling_request_rate, p=p, lengths=lengths
    )
    assert found.at_rate is not None and slo.met_by(found.at_rate.result)
    # Within the tolerance of the reference boundary on either side. (Pass/fail is not strictly monotone at
    # the scale of a fraction of a percent — 60 requests, one collision more or less — so the bisection's
    # boundary and the search's may differ by that much in either direction.)
    assert found.max_request_rate <= failing * (1 + RELATIVE_TOLERANCE)
    assert found.max_request_rate * (1 + RELATIVE_TOLERANCE) >= passing
    assert found.simulations <= 8
