"""The engine's decode cohort changes no simulated figure: the same simulations with it turned off (every
running request visited in every step, as before it) give exactly the same result, timeline and counters.

The cases cover what makes the cohort step aside or hand requests back one by one: arrivals between decode
stretches, requests finishing (and lagging one step under async scheduling, or leaving at once without it),
prefill chunks behind the leading decodes, a pool small enough to preempt, a shared prefix, the client's
concurrency gate, ShareGPT lengths, sliding-window and MoE layouts, and the rate search of a sweep's every
option (``simulate_every_option``) on a few GPUs.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import math
from typing import Any

import pytest

from service.core.planner import PlanRequest
from service.core.recommend import Workload, _rate_search, sweep
from service.core.serving import BenchmarkSpec, simulate
from service.core.serving.engine import Engine
from tests.core.serving.simulator_golden_cases import _request, simulation_cases


def _figures(request: PlanRequest, spec: BenchmarkSpec) -> dict[str, Any]:
    sim = simulate(request, spec)
    return {
        "result": sim.result.as_dict(),
        "timeline": [dataclasses.astuple(p) for p in sim.timeline],
        "counters": (
            sim.num_preemptions,
            sim.num_steps,
            sim.num_steps_with_output,
            sim.prefix_cache_hit_tokens,
            sim.peak_running,
        ),
        "messages": sim.messages,
    }


class _Spy:
    """Counts the steps the cohort took and those taken request by request (so a case that never reaches
    the cohort cannot pass silently)."""

    def __init__(self) -> None:
        self.cohort_steps = 0
        self.single_steps = 0


def _with_cohort(monkeypatch: pytest.MonkeyPatch, *, on: bool, spy: _Spy | None = None) -> None:
    simulate_module = importlib.import_module("service.core.serving.simulate")  # the module, not the function
    monkeypatch.setattr(simulate_module, "Engine", functools.partial(Engine, use_cohort=on))
    if spy is not None:
        cohort_step, single_step = Engine._cohort_step, Engine._single_step

        def counted_cohort(self: Engine) -> bool:
            taken = cohort_step(self)
            spy.cohort_steps += taken
            return taken

        def counted_single(self: Engine) -> None:
            spy.single_steps += 1
            single_step(self)

        monkeypatch.setattr(Engine, "_cohort_step", counted_cohort)
        monkeypatch.setattr(Engine, "_single_step", counted_single)


def _extra_cases() -> list[tuple[str, PlanRequest, BenchmarkSpec]]:
    llama = _request("llama-3.1-8b", "h100-sxm-80gb", max_model_len=8192)
    small_budget = _request("llama-3.1-8b", "l40s", max_model_len=8192, max_num_batched_tokens=1024)
    tight_pool = _request("llama-3.1-8b", "a100-sxm4-80gb", max_model_len=4096, kv_cache_memory_bytes=2**30)

    def spec(**changes: Any) -> BenchmarkSpec:
        values: dict[str, Any] = {"num_prompts": 100, "random_input_len": 1000, "random_output_len": 200}
        values.update(changes)
        return BenchmarkSpec(**values)

    return [
        ("sweep-like-saturated", llama, spec(request_rate=math.inf)),
        ("sweep-like-poisson", llama, spec(request_rate=40.0)),
        ("short-outputs", llama, spec(request_rate=30.0, random_output_len=3, random_range_ratio=0.6)),
        ("one-output-token", llama, spec(request_rate=30.0, random_output_len=1)),
        ("small-budget-saturated", small_budget, spec(request_rate=math.inf, random_range_ratio=0.5)),
        ("small-budget-poisson", small_budget, spec(request_rate=9.0, random_range_ratio=0.5, seed=4)),
        ("tight-pool-saturated", tight_pool, spec(random_input_len=900, random_output_len=500)),
        ("tight-pool-poisson", tight_pool, spec(request_rate=25.0, random_output_len=700, seed=5)),
        (
            "synchronous-poisson",
            _request("llama-3.1-8b", "h100-sxm-80gb", max_model_len=8192, async_scheduling=False),
            spec(request_rate=35.0, random_range_ratio=0.4),
        ),
        ("prefix-and-concurrency", llama, spec(random_prefix_len=256, max_concurrency=24, request_rate=50.0)),
    ]


CASES = simulation_cases() + _extra_cases()


@pytest.mark.parametrize("case", CASES, ids=lambda case: case[0])
def test_the_cohort_changes_no_figure(case: tuple[str, PlanRequest, BenchmarkSpec], monkeypatch) -> None:
    _, request, spec = case
    _with_cohort(monkeypatch, on=False)
    without = _figures(request, spec)
    _with_cohort(monkeypatch, on=True)
    assert _figures(request, spec) == without


@pytest.mark.parametrize("rate", [math.inf, 40.0])
def test_the_cohort_takes_the_steps_that_are_not_decode_stretches(
    rate: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    spy = _Spy()
    _with_cohort(monkeypatch, on=True, spy=spy)
    request = _request("llama-3.1-8b", "h100-sxm-80gb", max_model_len=8192)
    spec = BenchmarkSpec(num_prompts=100, random_input_len=1000, random_output_len=200, request_rate=rate)
    simulate(request, spec)
    # Prefills behind the leading decodes and lagging finished requests are the cohort's; only a step that
    # the cohort cannot take (none here: the pool is large and no request has a shared prefix) is not.
    assert spy.cohort_steps > 0
    assert spy.single_steps == 0


def test_every_option_of_a_sweep_is_simulated_alike(monkeypatch: pytest.MonkeyPatch) -> None:
    from service.catalog.builtin import builtin_snapshot

    catalog = builtin_snapshot()
    model = catalog.find_model("llama-3.1-8b")
    assert model is not None
    gpus = [catalog.find_gpu(name) for name in ("h100-sxm-80gb", "l4", "a100-sxm4-40gb", "l40s")]
    workload = Workload(requests_per_second=5, prompt_tokens=1000, output_tokens=200, tpot_seconds=0.05)

    def options(on: bool) -> list[Any]:
        _with_cohort(monkeypatch, on=on)
        _rate_search.cache_clear()
        found = sweep(
            PlanRequest(model=model.spec), workload, [g.spec for g in gpus if g], simulate_every_option=True
        )
        _rate_search.cache_clear()
        return [dataclasses.replace(o, plan=None) for o in found]

    assert options(True) == options(False)


@pytest.mark.parametrize("block_size", [1, 16, 32])
def test_blocks_started_counts_each_members_block_starts(block_size: int) -> None:
    """``Engine._blocks_started`` (a cyclic slice of the per-offset counts) against counting each member's
    block starts step by step: a member at context c starts a block at each step j < k with (c + j) % bs == 0."""
    import random

    rng = random.Random(block_size)
    for _ in range(300):
        contexts = [rng.randrange(1, 5 * block_size) for _ in range(rng.randrange(0, 12))]
        advance = rng.randrange(0, 3 * block_size)
        k = rng.randrange(1, 4 * block_size)
        engine = Engine.__new__(Engine)
        engine._advance = advance
        engine._members = len(contexts)
        engine._by_offset = [0] * block_size
        for context in contexts:  # a member joined at ``advance`` with computed == context
            engine._by_offset[(context - advance) % block_size] += 1
        expected = sum(1 for c in contexts for j in range(k) if (c + j) % block_size == 0)
        assert engine._blocks_started(k) == expected


def test_first_steps_reaching_is_the_bisection_of_every_step_count() -> None:
    """``_first_steps_reaching`` (a guess from the stretch's quadratic, then bisection) against the plain
    bisection of [1, k] it replaces and against a scan of every m: the same step count and the same sum, with
    or without CPU overlap, with the CPU floor binding or not, for targets between the sums of two steps and
    on them exactly."""
    import random

    from service.core.serving.engine import _first_steps_reaching, stretch_seconds

    def bisection(target: float, k: int, a: float, b: float, cpu: float, overlap: bool) -> int:
        lo, hi = 1, k
        while lo < hi:
            mid = (lo + hi) // 2
            if stretch_seconds(mid, a, b, cpu, overlap) >= target:
                hi = mid
            else:
                lo = mid + 1
        return lo

    rng = random.Random(7)
    checked = 0
    for _ in range(3000):
        a = rng.choice([rng.uniform(1e-4, 0.05), rng.uniform(1e-6, 1e-3)])
        b = rng.choice([0.0, rng.uniform(0.0, 1e-4), rng.uniform(0.0, 1e-6)])
        cpu = rng.choice([0.0, 0.0011, rng.uniform(0.0, 0.01)])
        overlap = rng.random() < 0.5
        k = rng.randrange(2, 400)
        total = stretch_seconds(k, a, b, cpu, overlap)
        m = rng.randrange(1, k + 1)
        target = rng.choice(
            [stretch_seconds(m, a, b, cpu, overlap), rng.uniform(0.0, total), math.nextafter(total, 0.0)]
        )
        if not 0 < target < total:
            continue
        found, duration = _first_steps_reaching(target, k, total, a, b, cpu, overlap)
        assert found == bisection(target, k, a, b, cpu, overlap)
        assert found == next(j for j in range(1, k + 1) if stretch_seconds(j, a, b, cpu, overlap) >= target)
        assert duration == stretch_seconds(found, a, b, cpu, overlap)
        checked += 1
    assert checked > 2000
