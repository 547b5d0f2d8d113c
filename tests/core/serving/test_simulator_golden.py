"""Refactor check: the serving simulator's figures are those recorded before its speed-ups.

``tests/data/simulator-golden.json`` was written by ``simulator_golden_cases.py`` against commit 567310b (the
simulator before the per-step overhead was cut); its simulated sweep was re-recorded when the rate search
moved its false position to the rate axis (six L4 options' rates moved by under 2 %, within the search's 3 %
tolerance; no simulation's figures changed). It is not a statement about vLLM — the accuracy tests and
``make accuracy`` are — only that a change meant to make the simulator faster changed no simulated figure: every
float is compared exactly (JSON keeps a float's repr, which round-trips). A change that is meant to alter the
simulation must re-record the file deliberately (``python -m tests.core.serving.simulator_golden_cases``) and
say so.
"""

from __future__ import annotations

import json

import pytest

from tests.core.serving.simulator_golden_cases import (
    GOLDEN,
    search_cases,
    search_figures,
    simulation_cases,
    simulation_figures,
    sweep_figures,
)

RECORDED = json.loads(GOLDEN.read_text())


def test_the_golden_file_covers_every_case() -> None:
    assert set(RECORDED["simulations"]) == {name for name, _, _ in simulation_cases()}
    assert set(RECORDED["searches"]) == {name for name, _, _ in search_cases()}
    # The set exercises what it claims to: preemptions, rejections, prefix hits, V0.
    figures = RECORDED["simulations"]
    assert figures["preemption-small-pool"]["num_preemptions"] > 0
    assert figures["v0-engine-small-pool"]["num_preemptions"] > 0
    assert figures["too-long-for-max-model-len"]["result"]["failed"] > 0
    assert figures["shared-prefix-max-num-seqs"]["prefix_cache_hit_tokens"] > 0


@pytest.mark.parametrize("case", simulation_cases(), ids=lambda case: case[0])
def test_simulation_matches_the_recorded_figures_exactly(case: tuple) -> None:
    name, request, spec = case
    assert json.loads(json.dumps(simulation_figures(request, spec))) == RECORDED["simulations"][name]


@pytest.mark.parametrize("case", search_cases(), ids=lambda case: case[0])
def test_rate_search_matches_the_recorded_figures_exactly(case: tuple) -> None:
    name, request, slo = case
    assert json.loads(json.dumps(search_figures(request, slo))) == RECORDED["searches"][name]


def test_simulated_sweep_matches_the_recorded_options_exactly() -> None:
    assert sweep_figures() == RECORDED["sweep"]
