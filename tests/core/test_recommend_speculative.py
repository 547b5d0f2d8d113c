"""Recommendations for a plan with speculative decoding: the workload's mean acceptance length reaches the rate
searches and the roofline, is refused beyond [1, 1 + k], and every option says which acceptance it assumed."""

from __future__ import annotations

import math

import pytest

from service.core.errors import InvalidSpec
from service.core.recommend import Search, Workload, evaluate
from tests.core.serving.test_speculative import _request

# A decode-bound workload with a TPOT target of 8 ms at the mean: what one replica sustains is set by the tokens
# each step delivers, so it grows with the acceptance.
TPOT_BOUND = Workload(
    requests_per_second=20, prompt_tokens=500, output_tokens=100, tpot_seconds=0.008, slo_percentile="mean"
)


def _with(workload: Workload, length: float | None) -> Workload:
    return Workload(
        **{
            name: getattr(workload, name)
            for name in (
                "requests_per_second",
                "prompt_tokens",
                "output_tokens",
                "tpot_seconds",
                "slo_percentile",
            )
        },
        spec_mean_acceptance_length=length,
    )


def test_an_acceptance_below_one_or_beyond_one_plus_k_is_refused_naming_the_workload_field() -> None:
    with pytest.raises(InvalidSpec) as below:
        _with(TPOT_BOUND, 0.9)
    assert below.value.field == "workload.spec_mean_acceptance_length"
    # k = 3 drafts accept at most 3 tokens, plus the bonus token: 4 is the most a step can deliver.
    with pytest.raises(InvalidSpec) as above:
        evaluate(_request("eagle3", 3), _with(TPOT_BOUND, 4.01), search=Search(simulate=False))
    assert above.value.field == "workload.spec_mean_acceptance_length"
    assert "[1, 4]" in above.value.message
    assert evaluate(_request("eagle3", 3), _with(TPOT_BOUND, 4.0), search=Search(simulate=False)).feasible


def test_each_option_says_which_acceptance_it_was_sized_with() -> None:
    given = evaluate(_request("eagle3", 3), _with(TPOT_BOUND, 2.5), search=Search(simulate=False))
    assert given.speculative is not None and given.speculative.given
    assert given.speculative.mean_acceptance_length == 2.5
    assert any("mean acceptance length 2.50 (given in the workload)" in a for a in given.assumptions)
    # No value: EAGLE-3's default of 0.8 per position, 1 + 0.8 + 0.64 + 0.512 over three drafts.
    default = evaluate(_request("eagle3", 3), TPOT_BOUND, search=Search(simulate=False))
    assert default.speculative is not None and not default.speculative.given
    assert math.isclose(default.speculative.mean_acceptance_length, 2.952)
    assert any("the eagle3 default, not measured" in a for a in default.assumptions)
    # A plan without speculative decoding ignores the value and says so; its figures are those without it.
    plain = evaluate(_request(), _with(TPOT_BOUND, 2.5), search=Search(simulate=False))
    assert plain.speculative is None
    assert any("spec_mean_acceptance_length ignored" in a for a in plain.assumptions)
    without = evaluate(_request(), TPOT_BOUND, search=Search(simulate=False))
    assert (plain.replicas, plain.tpot_seconds) == (without.replicas, without.tpot_seconds)


def test_the_roofline_divides_the_decode_step_by_the_mean_acceptance_length() -> None:
    # Without a TPOT target the roofline batch is min(KV limit, max_num_seqs), the same at any acceptance; each
    # step then gives every request L tokens, so the bound's time per output token is step(batch) / L and its
    # rate batch / (TTFT + output × step(batch) / L).
    no_slo = Workload(requests_per_second=20, prompt_tokens=500, output_tokens=100)
    one, two = (
        evaluate(_request("eagle3", 3), _with(no_slo, length), search=Search(simulate=False))
        for length in (1.0, 2.0)
    )
    assert one.max_num_seqs == two.max_num_seqs and one.tpot_seconds and two.tpot_seconds
    assert two.tpot_seconds == pytest.approx(one.tpot_seconds / 2, rel=1e-12)
    assert one.ttft_seconds == two.ttft_seconds and two.ttft_seconds is not None
    expected = two.max_num_seqs / (two.ttft_seconds + 100 * one.tpot_seconds / 2)
    assert two.roofline_requests_per_second_per_replica == pytest.approx(expected, rel=1e-12)


def test_a_higher_acceptance_sustains_more_per_replica_and_needs_fewer_replicas_for_a_tpot_slo() -> None:
    low, high = (evaluate(_request("eagle3", 3), _with(TPOT_BOUND, length)) for length in (1.5, 3.5))
    assert low.feasible and high.feasible
    assert low.simulated_requests_per_second_per_replica and high.simulated_requests_per_second_per_replica
    assert high.simulated_requests_per_second_per_replica > low.simulated_requests_per_second_per_replica
    assert high.requests_per_second_per_replica and low.requests_per_second_per_replica
    assert high.requests_per_second_per_replica > low.requests_per_second_per_replica
    # 20 req/s × 1.2 headroom ÷ the per-replica rate, rounded up.
    for option in (low, high):
        assert option.replicas == math.ceil(24 / option.requests_per_second_per_replica - 1e-9)
    assert high.replicas < low.replicas
    # The roofline (step / L) stays a ceiling above the simulated rate rather than capping it.
    assert high.roofline_requests_per_second_per_replica
    assert high.roofline_requests_per_second_per_replica >= high.simulated_requests_per_second_per_replica
