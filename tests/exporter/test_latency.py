"""Predicted vs observed latency of registered deployments, and the step-time scale fitted from it: the load read
from two refreshes of vLLM's histograms, the simulator at that load, observed / predicted TPOT stored per
configuration (median of deployments), and simulations of that configuration using it."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from service.catalog.builtin import builtin_snapshot
from service.core.serving import BenchmarkSpec, simulate
from service.deployments.schemas import DeploymentRead
from service.deployments.service import deployment_plan
from service.exporter.latency import LATENCY_NUM_PROMPTS, LatencyPredictions, ObservedLoad
from service.live.histograms import E2E, GENERATION_TOKENS, PROMPT_TOKENS, REQUEST_TPOT, TTFT
from service.live.manager import LiveTarget, aggregate
from service.live.parser import parse_vllm_metrics
from service.live.schemas import parse_live_source
from service.live.scraper import TargetResult
from service.planning.calibration import calibration_key
from service.planning.schemas import PlanRequestBody, SimulationRequestBody, WorkloadIn
from service.planning.simulations import make_simulation, resolve_replica, scaled_coefficients
from service.planning.step_time_calibration import (
    MAX_TIME_SCALE,
    StepTimeScale,
    StepTimeScales,
    fit_time_scale,
    record_step_time,
)

URL = "http://10.0.0.5:8000/metrics"
TARGET = LiveTarget(namespace="llm", name="chat", source=parse_live_source({"scrape_urls": [URL]}))
SETTINGS = {"model": "llama-3.1-8b", "gpu": "h100-sxm-80gb", "max_model_len": 8192}
DEPLOYMENT = DeploymentRead.model_validate(
    {
        "namespace": "llm",
        "name": "chat",
        **SETTINGS,
        "version": 1,
        "created_at": datetime(2026, 12, 1, tzinfo=UTC),
        "updated_at": datetime(2026, 12, 1, tzinfo=UTC),
    }
)


def histogram(name: str, count: float, total: float) -> str:
    labels = 'engine="0",model_name="m"'
    return (
        f"# TYPE {name} histogram\n"
        f'{name}_bucket{{{labels},le="+Inf"}} {count}\n{name}_sum{{{labels}}} {total}\n{name}_count{{{labels}}} {count}\n'
    )


def scrape(requests: float, *, tpot_sum: float) -> TargetResult:
    """A pod that has finished ``requests`` requests of 1,000 prompt and 200 output tokens each."""
    text = (
        histogram(E2E, requests, requests * 2.0)
        + histogram(TTFT, requests, requests * 0.05)
        + histogram(REQUEST_TPOT, requests, tpot_sum)
        + histogram(PROMPT_TOKENS, requests, requests * 1000)
        + histogram(GENERATION_TOKENS, requests, requests * 200)
    )
    return TargetResult(
        url=URL, ok=True, reason=None, duration_s=0.0, metrics=parse_vllm_metrics(text), pod="p"
    )


def observed(tpot_seconds: float) -> object:
    first = aggregate(TARGET, [scrape(100, tpot_sum=100 * 0.01)], observed_at_s=1000.0, duration_s=0)
    # 40 more requests in 10 s, whose mean TPOT is ``tpot_seconds``
    return aggregate(
        TARGET,
        [scrape(140, tpot_sum=100 * 0.01 + 40 * tpot_seconds)],
        observed_at_s=1010.0,
        duration_s=0,
        previous=first,
    )


def test_the_load_of_one_replica_comes_from_the_histograms_since_the_previous_refresh() -> None:
    load = ObservedLoad.of(observed(0.02))  # type: ignore[arg-type]
    assert load is not None
    assert load.request_rate == pytest.approx(4.0)  # 40 requests in 10 s, one replica
    assert (load.prompt_tokens, load.output_tokens) == (1000, 200)  # the means, rounded to 8 tokens
    assert load.tpot_seconds == pytest.approx(0.02)


def model_tpot() -> float:
    replica = resolve_replica(builtin_snapshot(), PlanRequestBody.model_validate(SETTINGS))
    spec = BenchmarkSpec(
        num_prompts=LATENCY_NUM_PROMPTS, request_rate=4.0, random_input_len=1000, random_output_len=200
    )
    return simulate(replica.request, spec, plan=replica.plan).result.mean_tpot_ms / 1e3


def test_the_prediction_is_the_simulator_at_that_load_and_the_fit_is_observed_over_predicted() -> None:
    predicted_tpot = model_tpot()
    observation = observed(predicted_tpot * 1.3)
    latency = LatencyPredictions()
    fits = latency.update(builtin_snapshot(), [DEPLOYMENT], {("llm", "chat"): observation}, StepTimeScales())  # type: ignore[dict-item]
    prediction = latency.latency[("llm", "chat")]
    assert prediction.tpot_seconds == pytest.approx(predicted_tpot)
    assert prediction.step_time_scale is None  # nothing stored yet
    (fit,) = fits
    assert fit.source == "llm/chat"
    assert fit.observation["time_scale"] == pytest.approx(1.3)


def test_an_implausible_ratio_is_not_a_calibration() -> None:
    assert (
        fit_time_scale(observed_tpot_seconds=0.01 * (MAX_TIME_SCALE + 1), predicted_tpot_seconds=0.01) is None
    )
    assert fit_time_scale(observed_tpot_seconds=0.0, predicted_tpot_seconds=0.01) is None
    assert fit_time_scale(observed_tpot_seconds=0.012, predicted_tpot_seconds=0.01) == pytest.approx(1.2)


async def test_stored_scales_are_the_median_of_deployments_and_simulations_of_that_configuration_use_it(
    session: AsyncSession, sessionmaker: async_sessionmaker[AsyncSession]
) -> None:
    snapshot = builtin_snapshot()
    plan = resolve_replica(snapshot, PlanRequestBody.model_validate(SETTINGS)).response
    for source, scale in (("llm/a", 1.1), ("llm/b", 1.4), ("llm/c", 2.0)):
        assert await record_step_time(session, plan, source=source, observation={"time_scale": scale})
    # the same deployment again within 2 %: nothing written
    assert not await record_step_time(session, plan, source="llm/a", observation={"time_scale": 1.11})
    await session.commit()
    scales = StepTimeScales()
    await scales.reload(sessionmaker)
    assert scales.by_key[calibration_key(plan)].time_scale == pytest.approx(1.4)
    assert scales.by_key[calibration_key(plan)].samples == 3

    body = SimulationRequestBody.model_validate(
        {
            **SETTINGS,
            "benchmark": {
                "num_prompts": 40,
                "request_rate": 1,
                "random_input_len": 256,
                "random_output_len": 64,
            },
        }
    )
    calibrated = make_simulation(snapshot, body, scales=scales)
    assert calibrated.step_time_scale == pytest.approx(1.4)
    replica = resolve_replica(snapshot, body)
    spec = BenchmarkSpec(num_prompts=40, request_rate=1.0, random_input_len=256, random_output_len=64)
    expected = simulate(replica.request, spec, plan=replica.plan, coefficients=scaled_coefficients(1.4))
    assert calibrated.result.mean_tpot_ms == pytest.approx(expected.result.mean_tpot_ms)
    other = make_simulation(snapshot, body.model_copy(update={"max_model_len": 4096}), scales=scales)
    assert other.step_time_scale == 1.0  # another configuration is not calibrated by it


def test_the_deployment_plan_sizes_replicas_with_the_scale_fitted_for_its_configuration() -> None:
    snapshot = builtin_snapshot()
    deployment = DEPLOYMENT.model_copy(
        update={
            "workload": WorkloadIn(
                requests_per_second=30, prompt_tokens=1000, output_tokens=200, tpot_seconds=0.05
            )
        }
    )
    plain = deployment_plan(snapshot, deployment)
    key = calibration_key(plain.plan)
    slower = deployment_plan(
        snapshot, deployment, None, StepTimeScales({key: StepTimeScale(time_scale=2.0, samples=3)})
    )
    base, scaled = plain.recommendation, slower.recommendation
    assert base is not None and scaled is not None and base.recommended and scaled.recommended
    assert not any("fitted from this deployment" in a for a in base.recommended.assumptions)
    assert any("step times × 2" in a for a in scaled.recommended.assumptions)
    # every step twice as long: one replica sustains less, so no fewer replicas are needed
    assert scaled.recommended.simulated_requests_per_second_per_replica is not None
    assert base.recommended.simulated_requests_per_second_per_replica is not None
    assert (
        scaled.recommended.simulated_requests_per_second_per_replica
        < base.recommended.simulated_requests_per_second_per_replica
    )
    assert scaled.recommended.replicas >= base.recommended.replicas


SPEC_SETTINGS = SETTINGS | {"speculative_config": {"model": "llama-3.2-1b", "num_speculative_tokens": 3}}


def spec_tpot(length: float | None) -> float:
    replica = resolve_replica(builtin_snapshot(), PlanRequestBody.model_validate(SPEC_SETTINGS))
    spec = BenchmarkSpec(
        num_prompts=LATENCY_NUM_PROMPTS,
        request_rate=4.0,
        random_input_len=1000,
        random_output_len=200,
        ready_check_timeout_sec=0,
        spec_mean_acceptance_length=length,
    )
    return simulate(replica.request, spec, plan=replica.plan).result.mean_tpot_ms / 1e3


def test_a_speculative_deployments_prediction_uses_its_registered_acceptance() -> None:
    workload = {"requests_per_second": 4, "prompt_tokens": 1000, "output_tokens": 200}
    predictions = {}
    for length in (None, 3.5):
        deployment = DEPLOYMENT.model_copy(
            update={
                "speculative_config": PlanRequestBody.model_validate(SPEC_SETTINGS).speculative_config,
                "workload": WorkloadIn.model_validate(workload | {"spec_mean_acceptance_length": length}),
            }
        )
        latency = LatencyPredictions()
        latency.update(builtin_snapshot(), [deployment], {("llm", "chat"): observed(0.01)}, StepTimeScales())  # type: ignore[dict-item]
        predictions[length] = latency.latency[("llm", "chat")].tpot_seconds
    assert predictions[3.5] == pytest.approx(spec_tpot(3.5))
    assert predictions[None] == pytest.approx(spec_tpot(None))  # the draft model's default, 2.18
    assert predictions[3.5] < predictions[None]  # more accepted drafts, fewer steps per token


def spec_scrape(requests: float, *, drafts: float, accepted: float) -> TargetResult:
    """``scrape`` with vLLM's speculative-decoding counters (as ``vllm/v1/spec_decode/metrics.py`` names them)."""
    base = scrape(requests, tpot_sum=requests * 0.01)
    labels = 'engine="0",model_name="m"'
    text = (
        "# TYPE vllm:spec_decode_num_drafts_total counter\n"
        f"vllm:spec_decode_num_drafts_total{{{labels}}} {drafts}\n"
        "# TYPE vllm:spec_decode_num_accepted_tokens_total counter\n"
        f"vllm:spec_decode_num_accepted_tokens_total{{{labels}}} {accepted}\n"
    )
    assert base.metrics is not None
    counters = parse_vllm_metrics(text).engines[0]
    engine = dataclasses.replace(
        base.metrics.engines[0] if base.metrics.engines else counters,
        spec_drafts_total=counters.spec_drafts_total,
        spec_accepted_tokens_total=counters.spec_accepted_tokens_total,
    )
    return dataclasses.replace(base, metrics=dataclasses.replace(base.metrics, engines=(engine,)))


def test_a_speculative_deployments_prediction_uses_the_acceptance_its_pods_report() -> None:
    # 40 requests in the window; vLLM counted 800 drafts of which 1,200 tokens were accepted: 1 + 1.5 = 2.5,
    # which the prediction simulates with instead of the registered 3.5.
    first = aggregate(
        TARGET, [spec_scrape(100, drafts=1000.0, accepted=3000.0)], observed_at_s=1000.0, duration_s=0
    )
    second = aggregate(
        TARGET,
        [spec_scrape(140, drafts=1800.0, accepted=4200.0)],
        observed_at_s=1010.0,
        duration_s=0,
        previous=first,
    )
    assert first.spec_mean_acceptance_length == pytest.approx(4.0)  # since the pod started
    assert second.spec_mean_acceptance_length == pytest.approx(2.5)
    deployment = DEPLOYMENT.model_copy(
        update={
            "speculative_config": PlanRequestBody.model_validate(SPEC_SETTINGS).speculative_config,
            "workload": WorkloadIn.model_validate(
                {
                    "requests_per_second": 4,
                    "prompt_tokens": 1000,
                    "output_tokens": 200,
                    "spec_mean_acceptance_length": 3.5,
                }
            ),
        }
    )
    latency = LatencyPredictions()
    latency.update(builtin_snapshot(), [deployment], {("llm", "chat"): second}, StepTimeScales())
    assert latency.latency[("llm", "chat")].tpot_seconds == pytest.approx(spec_tpot(2.5))
    # A deployment registered without speculative decoding ignores the counters.
    plain = LatencyPredictions()
    plain.update(builtin_snapshot(), [DEPLOYMENT], {("llm", "chat"): second}, StepTimeScales())
    assert plain.latency[("llm", "chat")].tpot_seconds == pytest.approx(model_tpot())
