"""Replay recorded ``vllm bench serve`` runs of a real vLLM (CPU build) through kvcap's serving simulator.

A recorded case (``tests/data/vllm_bench_cpu/``) is what one vLLM 0.32.0 CPU server measured at several request
rates, with every scheduler input pinned (``machine.json`` → ``server``). The simulator is given the same inputs:

* the plan: the same model config, ``max_model_len``, ``max_num_seqs``, ``max_num_batched_tokens``,
  ``block_size`` and ``kv_cache_memory_bytes`` on ``device="cpu"`` (synchronous scheduling: vLLM's CPU platform
  turns async scheduling off, ``vllm/platforms/cpu.py`` 0.32.0; eager mode);
* the requests: each run's own per-request prompt and output lengths (``input_lens``/``output_lens`` from
  ``--save-detailed``) as an ``explicit`` dataset, because vLLM's random sampler draws from numpy's stream and
  kvcap's from Python's — the same distribution, different requests;
* the arrivals: the run's rate and ``--max-concurrency``; Poisson runs are drawn from the simulator's own stream at
  the same rate (the recorded send offsets are kept in the data for when explicit arrivals can be replayed).

The step-time model needs a "GPU": for this CPU it is ``cpu_gpu_spec`` — nominal scales (not measurements) that
the fitted efficiencies are relative to. ``fit_coefficients`` fits the step-time coefficients on the calibration
run alone (its vLLM-measured TTFT, TPOT, ITL and duration), by a deterministic pattern search over simulations;
every other run is then a prediction.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from service.core.hf_config import parse_hf_config
from service.core.planner import CapacityPlan, PlanRequest
from service.core.planner import plan as make_plan
from service.core.serving import (
    DEFAULT_STEP_COEFFICIENTS,
    BenchmarkSpec,
    SimulationResult,
    StepCoefficients,
    simulate,
)
from service.core.specs import GpuSpec

DATA_DIR = Path(__file__).resolve().parents[1] / "data" / "vllm_bench_cpu"

# The summary keys compared (vLLM's result-JSON names).
LATENCY_KEYS = tuple(
    f"{stat}_{metric}_ms" for metric in ("ttft", "tpot", "itl", "e2el") for stat in ("mean", "median", "p99")
)
THROUGHPUT_KEYS = ("duration", "request_throughput", "output_throughput", "total_token_throughput")
# What the calibration fit matches (log-ratio least squares, equal weights).
FIT_TARGETS = (
    "mean_ttft_ms",
    "median_ttft_ms",
    "mean_tpot_ms",
    "median_tpot_ms",
    "mean_itl_ms",
    "median_itl_ms",
    "p99_itl_ms",
    "duration",
)
# The coefficients fitted, searched in log space; the rest keep their defaults.
FITTED = ("compute_efficiency", "gemm_half_tokens", "step_overhead_seconds", "per_request_seconds")


@dataclass(frozen=True, slots=True, kw_only=True)
class RecordedRun:
    name: str
    benchmark: Mapping[str, Any]
    measured: Mapping[str, Any]  # vLLM's summary keys
    input_lens: tuple[int, ...]
    output_lens: tuple[int, ...]
    arrival_offsets_seconds: tuple[float, ...]
    server_metrics_delta: Mapping[str, float]

    @property
    def request_rate(self) -> float:
        rate = self.benchmark["request_rate"]
        return math.inf if rate == "inf" else float(rate)

    @property
    def engine_steps(self) -> int:
        """Engine steps vLLM ran in this run: observations of ``vllm:iteration_tokens_total``."""
        return round(self.server_metrics_delta["vllm:iteration_tokens_total_count"])

    @property
    def engine_tokens(self) -> int:
        """Tokens vLLM scheduled in this run (prefill incl. recomputation, plus decode)."""
        return round(self.server_metrics_delta["vllm:iteration_tokens_total_sum"])

    @property
    def preemptions(self) -> int:
        return round(self.server_metrics_delta.get("vllm:num_preemptions_total", 0.0))


@dataclass(frozen=True, slots=True, kw_only=True)
class RecordedCase:
    machine: Mapping[str, Any]
    server: Mapping[str, Any]
    runs: tuple[RecordedRun, ...]

    @property
    def calibration(self) -> RecordedRun:
        return self.runs[0]

    def run(self, name: str) -> RecordedRun:
        return next(r for r in self.runs if r.name == name)


def load_case(folder: Path = DATA_DIR) -> RecordedCase:
    machine = json.loads((folder / "machine.json").read_text())
    runs: list[RecordedRun] = []
    for name in machine["run_order"]:
        data = json.loads((folder / f"{name}.json").read_text())
        measured = {k: v for k, v in data.items() if not isinstance(v, (list, dict))}
        runs.append(
            RecordedRun(
                name=name,
                benchmark=data["benchmark"],
                measured=measured,
                input_lens=tuple(data["input_lens"]),
                output_lens=tuple(data["output_lens"]),
                arrival_offsets_seconds=tuple(data["arrival_offsets_seconds"]),
                server_metrics_delta=data["server_metrics_delta"],
            )
        )
    return RecordedCase(machine=machine, server=machine["server"], runs=tuple(runs))


def cpu_gpu_spec(machine: Mapping[str, Any]) -> GpuSpec:
    """The CPU as the step-time model's "GPU": nominal scales the fitted efficiencies are fractions of.

    Peak: logical CPUs × 2.0 GHz × 32 FLOP/cycle (two 16-lane fp32 FMA pipes of AVX-512, counted as 2 FLOPs);
    bandwidth: 20 GB/s (a share of one DDR channel per two vCPUs). Neither is measured: the fit of
    ``compute_efficiency`` and the per-step/per-request CPU costs absorb what this machine really does.
    """
    cpus = int(machine["logical_cpus"])
    return GpuSpec(
        name="cpu-" + str(machine["cpu_model"]).lower().replace(" ", "-"),
        memory_bytes=int(machine["memory_gib"] * 2**30),
        memory_bandwidth_bytes_per_second=20 * 10**9,
        bf16_dense_flops_per_second=cpus * 2 * 10**9 * 32,
        supports_fp8=False,
    )


def plan_request(case: RecordedCase) -> PlanRequest:
    s = case.server
    return PlanRequest(
        model=parse_hf_config(s["hf_config"]),
        gpu=cpu_gpu_spec(case.machine),
        engine="vllm-" + ".".join(str(case.machine["vllm_version"]).split(".")[:2]),
        device="cpu",
        dtype=s["hf_config"]["torch_dtype"],
        max_model_len=s["max_model_len"],
        max_num_seqs=s["max_num_seqs"],
        max_num_batched_tokens=s["max_num_batched_tokens"],
        block_size=s["block_size"],
        kv_cache_memory_bytes=s["kv_cache_memory_bytes"],
        enforce_eager=bool(s["enforce_eager"]),
    )


def benchmark_spec(run: RecordedRun) -> BenchmarkSpec:
    """The run as the simulator takes it: its own per-request lengths, its rate, concurrency and seed."""
    b = run.benchmark
    return BenchmarkSpec(
        dataset_name="explicit",
        num_prompts=len(run.input_lens),
        requests=tuple(zip(run.input_lens, run.output_lens, strict=True)),
        request_rate=run.request_rate,
        max_concurrency=b["max_concurrency"],
        seed=int(b["seed"]),
    )


def simulate_run(
    case: RecordedCase, run: RecordedRun, coefficients: StepCoefficients, *, plan: CapacityPlan | None = None
) -> SimulationResult:
    request = plan_request(case)
    return simulate(request, benchmark_spec(run), plan=plan or make_plan(request), coefficients=coefficients)


def relative_errors(
    measured: Mapping[str, Any], simulated: Mapping[str, Any], keys: Sequence[str]
) -> dict[str, float]:
    """simulated ÷ measured − 1 per key."""
    return {k: float(simulated[k]) / float(measured[k]) - 1.0 for k in keys if float(measured[k]) > 0}


def _loss(measured: Mapping[str, Any], simulated: Mapping[str, Any]) -> float:
    return sum(math.log(float(simulated[k]) / float(measured[k])) ** 2 for k in FIT_TARGETS)


def calibration_loss(case: RecordedCase, coefficients: StepCoefficients) -> float:
    """Σ log²(simulated ÷ measured) over ``FIT_TARGETS`` of the calibration run: what the fit minimises."""
    run = case.calibration
    return _loss(run.measured, simulate_run(case, run, coefficients).result.as_dict())


@dataclass(frozen=True, slots=True, kw_only=True)
class FitResult:
    coefficients: StepCoefficients
    loss: float  # Σ log²(simulated ÷ measured) over FIT_TARGETS of the calibration run
    evaluations: int
    calibration_run: str
    gpu: GpuSpec

    def as_json(self) -> dict[str, Any]:
        return {
            "calibration_run": self.calibration_run,
            "fit_targets": list(FIT_TARGETS),
            "fitted": list(FITTED),
            "loss": round(self.loss, 6),
            "evaluations": self.evaluations,
            "coefficients": self.coefficients.as_dict(),
            "gpu": {
                "name": self.gpu.name,
                "memory_bandwidth_bytes_per_second": self.gpu.memory_bandwidth_bytes_per_second,
                "bf16_dense_flops_per_second": self.gpu.bf16_dense_flops_per_second,
            },
        }


# The CPU calibration fits the four coefficients above on this machine's own runs and leaves the rest at the
# defaults, except the request latency: the GPU fit's value describes other hosts' API servers, and a CPU run's
# front-end time is part of what its fitted per-step costs absorb (the recorded fits were made with none).
CALIBRATION_BASE = replace(DEFAULT_STEP_COEFFICIENTS, request_latency_seconds=0.0)


def coefficients_from_json(data: Mapping[str, Any]) -> StepCoefficients:
    return StepCoefficients(**{"request_latency_seconds": 0.0, **data["coefficients"]})


# Start and bounds of the search (log space); the start is a CPU guess, not the GPU defaults.
_START = {
    "compute_efficiency": 0.05,
    "gemm_half_tokens": 16.0,
    "step_overhead_seconds": 0.005,
    "per_request_seconds": 2e-4,
}
_BOUNDS = {
    "compute_efficiency": (1e-4, 1.0),
    "gemm_half_tokens": (0.01, 4096.0),
    "step_overhead_seconds": (1e-5, 0.2),
    "per_request_seconds": (1e-7, 0.01),
}


def fit_coefficients(case: RecordedCase, *, max_evaluations: int = 400) -> FitResult:
    """Fit ``FITTED`` on the calibration run: a compass search in log space (deterministic).

    Each coordinate is stepped up and down by a factor; a step that lowers the loss is kept, and the factor is
    halved (in log) when no coordinate improves. Stops at a factor of 1.01 or ``max_evaluations`` simulations.
    """
    run = case.calibration
    request = plan_request(case)
    plan = make_plan(request)
    spec = benchmark_spec(run)
    evaluations = 0

    def loss_of(values: Mapping[str, float]) -> float:
        nonlocal evaluations
        evaluations += 1
        coefficients = replace(CALIBRATION_BASE, **values)
        return _loss(
            run.measured, simulate(request, spec, plan=plan, coefficients=coefficients).result.as_dict()
        )

    best = dict(_START)
    best_loss = loss_of(best)
    log_step = math.log(4.0)
    while log_step > math.log(1.01) and evaluations < max_evaluations:
        improved = False
        for name in FITTED:
            for sign in (1.0, -1.0):
                low, high = _BOUNDS[name]
                trial = dict(best)
                trial[name] = min(high, max(low, best[name] * math.exp(sign * log_step)))
                if trial[name] == best[name]:
                    continue
                trial_loss = loss_of(trial)
                if trial_loss < best_loss:
                    best, best_loss, improved = trial, trial_loss, True
                    break
        if not improved:
            log_step /= 2
    return FitResult(
        coefficients=replace(CALIBRATION_BASE, **best),
        loss=best_loss,
        evaluations=evaluations,
        calibration_run=run.name,
        gpu=request.gpu or cpu_gpu_spec(case.machine),
    )
