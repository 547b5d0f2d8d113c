"""Against a real vLLM: the serving simulator predicts what ``vllm bench serve`` measures on this machine.

Starts vLLM 0.32 (CPU build, dummy weights, the shrunk Llama of ``vllm_bench.SERVER`` with every scheduler input
pinned), runs vLLM's own benchmark client at each of ``vllm_bench.BENCH_RUNS`` (closed loop at concurrency 8 —
the calibration —, everything at once, and Poisson arrivals), reads vLLM's result JSON and the change of its
``/metrics`` per run, and stops the server by its process id. Then the step-time coefficients are fitted on the
calibration run only and every other run is predicted (``tests/vllm_bench_cpu/replay.py``); the checks are those
of the recorded replay (``tests/vllm_bench_cpu/test_replay_vllm_bench_cpu.py``), with the same tolerances, on
the fresh measurements. Opt-in (``make e2e``); about 9 minutes on two shared cores (5 of them start-up).
"""

from __future__ import annotations

import json
import sys

import pytest

from tests.e2e import vllm_bench as bench
from tests.e2e.vllm_harness import default_vllm_python
from tests.vllm_bench_cpu import checks, replay

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def fresh_case(tmp_path_factory: pytest.TempPathFactory) -> replay.RecordedCase:
    if not default_vllm_python().exists():
        pytest.fail("no vLLM virtual environment at .vllm-venv: run `make e2e`, which creates it")
    work = tmp_path_factory.mktemp("vllm-bench")
    out = work / "case"
    out.mkdir()
    server = bench.start_bench_server(work, timeout_s=900)
    try:
        startup_lines = bench.startup_lines(server)
        raws = bench.run_bench_series(server, bench.BENCH_RUNS, work / "results", timeout_s=900)
        for run in bench.BENCH_RUNS:
            (out / f"{run.name}.json").write_text(json.dumps(bench.trim_result(raws[run.name], run)))
    finally:
        server.stop()
    machine = bench.machine_description()
    machine["server"] = bench.SERVER.as_dict()
    machine["run_order"] = [r.name for r in bench.BENCH_RUNS]
    machine["vllm_startup_lines"] = startup_lines
    (out / "machine.json").write_text(json.dumps(machine))
    return replay.load_case(out)


@pytest.fixture(scope="module")
def fresh_fit(fresh_case: replay.RecordedCase) -> replay.FitResult:
    return replay.fit_coefficients(fresh_case)


def test_vllm_served_every_request_with_exactly_the_tokens_the_simulator_was_given(
    fresh_case: replay.RecordedCase, fresh_fit: replay.FitResult
) -> None:
    for run in fresh_case.runs:
        checks.assert_exact_counts(fresh_case, run, fresh_fit.coefficients)


def test_the_simulated_scheduler_runs_as_many_engine_steps_and_preempts_when_vllm_does(
    fresh_case: replay.RecordedCase, fresh_fit: replay.FitResult
) -> None:
    for run in fresh_case.runs:
        checks.assert_scheduler_matches(fresh_case, run, fresh_fit.coefficients, fresh_session=True)


def test_the_fit_on_the_calibration_run_predicts_the_other_rates_within_the_stated_tolerances(
    fresh_case: replay.RecordedCase, fresh_fit: replay.FitResult, capsys: pytest.CaptureFixture[str]
) -> None:
    table = checks.comparison_table(fresh_case, fresh_fit.coefficients)
    with capsys.disabled():
        sys.stdout.write("\n" + json.dumps(fresh_fit.as_json()["coefficients"]) + "\n" + table + "\n")
    for run in fresh_case.runs[1:]:
        checks.assert_prediction_within_tolerances(
            fresh_case, run, fresh_fit.coefficients, fresh_session=True
        )
    checks.assert_orderings(
        fresh_case, fresh_fit.coefficients, runs=[r for r in fresh_case.runs if checks.run_is_closed(r)]
    )
