"""Send times as vllm bench serve's get_request draws them (vllm/benchmarks/serve.py)."""

from __future__ import annotations

import math
import statistics

from service.core.serving.arrivals import arrival_offsets_seconds, unit_exponentials


def test_infinite_rate_sends_everything_at_time_zero() -> None:
    assert arrival_offsets_seconds(4, request_rate=math.inf) == (0.0, 0.0, 0.0, 0.0)


def test_offsets_are_rescaled_so_the_last_one_is_num_prompts_over_rate() -> None:
    offsets = arrival_offsets_seconds(500, request_rate=4.0, seed=3)
    assert math.isclose(offsets[-1], 500 / 4.0)
    assert list(offsets) == sorted(offsets)
    gaps = [b - a for a, b in zip((0.0, *offsets[:-1]), offsets, strict=True)]
    assert math.isclose(statistics.fmean(gaps), 1 / 4.0)


def test_poisson_gaps_have_unit_coefficient_of_variation_and_gamma_shape_sets_it() -> None:
    # Gamma(shape k) gaps have CV 1/√k: 1 for Poisson, 0.5 for burstiness 4, 2 for burstiness 0.25.
    for burstiness, cv in ((1.0, 1.0), (4.0, 0.5), (0.25, 2.0)):
        offsets = arrival_offsets_seconds(20_000, request_rate=10.0, burstiness=burstiness, seed=1)
        gaps = [b - a for a, b in zip((0.0, *offsets[:-1]), offsets, strict=True)]
        measured = statistics.pstdev(gaps) / statistics.fmean(gaps)
        assert abs(measured - cv) / cv < 0.05


def test_infinite_burstiness_gives_constant_gaps() -> None:
    offsets = arrival_offsets_seconds(3, request_rate=2.0, burstiness=math.inf)
    assert offsets == (0.5, 1.0, 1.5)


def test_offsets_are_deterministic_for_a_seed() -> None:
    assert arrival_offsets_seconds(10, request_rate=1.0, seed=7) == arrival_offsets_seconds(
        10, request_rate=1.0, seed=7
    )
    assert arrival_offsets_seconds(10, request_rate=1.0, seed=7) != arrival_offsets_seconds(
        10, request_rate=1.0, seed=8
    )


def test_poisson_gaps_are_the_gamma_draws_bit_for_bit() -> None:
    # The cached unit exponentials times 1 / rate must be what random.gammavariate(1, 1 / rate) draws on this
    # interpreter (its shape-1 branch), or every Poisson simulation would move.
    import random

    for seed, rate in ((0, 3.7), (5, 0.02), (123, 950.0)):
        rng = random.Random(seed ^ 0x5EED)
        gaps = [rng.gammavariate(1.0, 1.0 / rate) for _ in range(40)]
        assert [e * (1.0 / rate) for e in unit_exponentials(40, seed)] == gaps
