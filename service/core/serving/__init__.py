"""A discrete-event simulator of one vLLM V1 engine under ``vllm bench serve`` (pure core, stdlib only).

Edges import only the names below; see ``simulate.py`` for the stages and their sources.
"""

from service.core.serving.datasets import BenchmarkSpec, RequestLengths, sample_requests
from service.core.serving.metrics import RESULT_KEYS, BenchmarkResult
from service.core.serving.search import RateSearchResult, SloTarget, max_rate_within_slo
from service.core.serving.simulate import (
    DEFAULT_SIMULATION_LIMITS,
    ERROR_BAND_RATIO,
    SimulationLimits,
    SimulationResult,
    TimelinePoint,
    simulate,
)
from service.core.serving.speculative import SpecDecoding
from service.core.serving.step_time import DEFAULT_STEP_COEFFICIENTS, StepCoefficients

__all__ = [
    "DEFAULT_SIMULATION_LIMITS",
    "DEFAULT_STEP_COEFFICIENTS",
    "ERROR_BAND_RATIO",
    "RESULT_KEYS",
    "BenchmarkResult",
    "BenchmarkSpec",
    "RateSearchResult",
    "RequestLengths",
    "SimulationLimits",
    "SimulationResult",
    "SloTarget",
    "SpecDecoding",
    "StepCoefficients",
    "TimelinePoint",
    "max_rate_within_slo",
    "sample_requests",
    "simulate",
]
