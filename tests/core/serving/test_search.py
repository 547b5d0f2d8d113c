"""The largest request rate within an SLO: bracket + false position on the Poisson rate."""

from __future__ import annotations

import math

import pytest

from service.core.errors import InvalidSpec
from service.core.planner import PlanRequest, plan
from service.core.serving import BenchmarkSpec, SloTarget, max_rate_within_slo, simulate
from service.core.serving.search import CEILING_FRACTION, RELATIVE_TOLERANCE
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
