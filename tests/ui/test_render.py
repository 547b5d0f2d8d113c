"""Terminal pictures: the memory bar and the capacity-vs-length table of ``kvcap plan``."""

from __future__ import annotations

import itertools
import json
import re

from rich.console import Console
from typer.testing import CliRunner

from service.catalog.builtin import builtin_snapshot
from service.cli import app as cli_app
from service.cli import capacity_lengths
from service.planning.schemas import PlanRequestBody
from service.planning.service import make_plan
from service.render import bar_cells, memory_bar


def test_bar_cells_add_up_to_the_width_and_follow_the_shares() -> None:
    assert bar_cells([50, 30, 20], 10) == [5, 3, 2]
    assert sum(bar_cells([16, 1, 1, 1, 5, 2], 64)) == 64
    assert bar_cells([1, 1, 1], 2) in ([1, 1, 0], [1, 0, 1], [0, 1, 1])
    assert bar_cells([0, 0], 8) == [0, 0]


def test_the_memory_bar_shows_every_term_of_the_plan() -> None:
    plan = make_plan(
        builtin_snapshot(), PlanRequestBody(model="llama-3.1-8b", gpu="h100-sxm-80gb", max_model_len=8192)
    )
    console = Console(width=200, record=True, color_system=None)
    console.print(memory_bar(plan, width=40))
    text = console.export_text()
    bar, legend = text.splitlines()[:2]
    assert bar == "█" * 40
    gib = plan.memory.weights_bytes / 1024**3
    assert f"weights {gib:,.2f} GiB" in legend
    assert f"KV cache {plan.memory.kv_cache_bytes / 1024**3:,.2f} GiB" in legend
    assert "unused" in legend


def test_capacity_lengths_are_powers_of_two_up_to_the_model_maximum() -> None:
    assert capacity_lengths(8192, 131072) == [2048, 4096, 8192, 16384, 32768, 65536, 131072]
    lengths = capacity_lengths(10000, 131072)
    assert 10000 in lengths and lengths[-1] == 131072 and len(lengths) <= 8
    assert all(b > a for a, b in itertools.pairwise(lengths))


def test_kvcap_plan_prints_the_capacity_of_each_length_as_the_planner_answers_it() -> None:
    result = CliRunner().invoke(
        cli_app, ["plan", "-m", "llama-3.1-8b", "-g", "l4", "--max-model-len", "8192"], env={"COLUMNS": "160"}
    )
    assert result.exit_code == 0, result.output
    assert "Capacity vs max_model_len" in result.output
    rows = dict(re.findall(r"│\s+([\d,]+) │\s+([\d.]+x|won't start)", result.output))
    for length_text, shown in rows.items():
        length = int(length_text.replace(",", ""))
        answer = make_plan(
            builtin_snapshot(), PlanRequestBody(model="llama-3.1-8b", gpu="l4", max_model_len=length)
        )
        expected = f"{answer.kv_cache.max_concurrency:.2f}x" if answer.fits else "won't start"
        assert shown == expected, length
    # An L4 leaves ~4.2 GiB for the KV cache: 131,072 tokens × 128 KiB/token = 16 GiB cannot start.
    assert rows["131,072"] == "won't start"
    assert rows["8,192"] != "won't start"


SIMULATE = [
    "simulate", "-m", "llama-3.1-8b", "-g", "h100-sxm-80gb", "--max-model-len", "8192",
    "--num-prompts", "40", "--random-input-len", "512", "--random-output-len", "64",
]  # fmt: skip


def test_kvcap_simulate_draws_the_load_curve_from_one_simulation_per_concurrency() -> None:
    from service.planning.schemas import SimulationRequestBody
    from service.planning.simulations import make_simulation

    runner = CliRunner()
    as_json = runner.invoke(cli_app, [*SIMULATE, "--sweep-concurrency", "8,1", "--json"])
    assert as_json.exit_code == 0, as_json.output
    curve = json.loads(as_json.output)
    assert [point["max_concurrency"] for point in curve] == [1, 8]
    for point in curve:
        body = SimulationRequestBody.model_validate(
            {
                "model": "llama-3.1-8b",
                "gpu": "h100-sxm-80gb",
                "max_model_len": 8192,
                "benchmark": {
                    "num_prompts": 40,
                    "random_input_len": 512,
                    "random_output_len": 64,
                    "request_rate": "inf",
                    "max_concurrency": point["max_concurrency"],
                },
            }
        )
        assert point["result"] == make_simulation(builtin_snapshot(), body).result.model_dump()
    table = runner.invoke(cli_app, [*SIMULATE, "--sweep-concurrency", "1,8"], env={"COLUMNS": "120"})
    assert table.exit_code == 0, table.output
    assert "Load curve" in table.output
    for point in curve:
        assert f"{point['result']['output_throughput']:,.1f}" in table.output
        assert f"{point['result']['median_tpot_ms']:,.2f}" in table.output
    # More concurrency, more tokens per second on one H100 (decode is bandwidth-bound at these batch sizes).
    assert curve[1]["result"]["output_throughput"] > curve[0]["result"]["output_throughput"]


def test_a_bad_concurrency_list_is_exit_2_with_the_flag_named() -> None:
    result = CliRunner().invoke(cli_app, [*SIMULATE, "--sweep-concurrency", "0,x"])
    assert result.exit_code == 2
    assert "--sweep-concurrency" in result.output
