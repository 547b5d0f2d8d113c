"""The admission policy: each deny and warn rule, audit mode, and what kvcap cannot check."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from service.admission.extract import extract
from service.admission.policy import PolicyConfig, Verdict, evaluate
from service.catalog.builtin import builtin_snapshot
from service.catalog.snapshot import CatalogSnapshot

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="module")
def snapshot() -> CatalogSnapshot:
    return builtin_snapshot()


def fixture_object(name: str) -> dict[str, Any]:
    obj: dict[str, Any] = json.loads((DATA / name).read_text())["request"]["object"]
    return obj


def judge(obj: dict[str, Any], snapshot: CatalogSnapshot, **config: Any) -> Verdict:
    return evaluate(extract(obj), snapshot, PolicyConfig(**config))


def serving(
    args: list[str],
    *,
    gpus: int | None = 1,
    product: str | None = "NVIDIA-L4",
    annotations: dict[str, str] | None = None,
    env: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "vllm", "image": "vllm/vllm-openai:v0.11.0", "args": args}
    if gpus is not None:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    if env:
        container["env"] = env
    pod: dict[str, Any] = {"containers": [container]}
    if product:
        pod["nodeSelector"] = {"nvidia.com/gpu.product": product}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "llm", "namespace": "ml", "annotations": annotations or {}},
        "spec": {"replicas": 1, "template": {"spec": pod}},
    }


LLAMA_8B = "meta-llama/Llama-3.1-8B-Instruct"


# --- the bar's cases -----------------------------------------------------------------------------------------


def test_denies_llama_70b_bf16_on_one_l4_because_the_weights_do_not_fit(snapshot: CatalogSnapshot) -> None:
    verdict = judge(fixture_object("deployment-llama-70b-one-l4.json"), snapshot)
    assert verdict.outcome == "denied"
    assert verdict.message.startswith("weights do not fit: llama-3.1-70b on l4")
    assert "tensor-parallel-size 8 with 8 nvidia.com/gpu" in verdict.message


def test_denies_llama_8b_at_131072_on_one_24gb_gpu_naming_the_length_that_fits(
    snapshot: CatalogSnapshot,
) -> None:
    verdict = judge(fixture_object("statefulset-llama-8b-131k-one-l4.json"), snapshot)
    assert verdict.outcome == "denied"
    (plan,) = verdict.plans
    assert 8192 < plan.max_model_len_that_fits < 131072
    assert verdict.message.startswith("vLLM would refuse --max-model-len 131,072 for llama-3.1-8b on l4")
    assert f"set --max-model-len ≤ {plan.max_model_len_that_fits:,}" in verdict.message


def test_allows_llama_8b_at_8192_on_one_l4(snapshot: CatalogSnapshot) -> None:
    verdict = judge(fixture_object("statefulset-llama-8b-8k-one-l4.json"), snapshot)
    assert verdict.outcome == "allowed"
    assert verdict.warnings == ()
    (plan,) = verdict.plans
    assert plan.fits and plan.max_concurrency > 1


def test_denies_tensor_parallel_4_with_2_gpus_requested(snapshot: CatalogSnapshot) -> None:
    verdict = judge(fixture_object("deployment-tp4-two-gpus.json"), snapshot)
    assert verdict.message == (
        "tensor-parallel-size 4 × pipeline-parallel-size 1 needs 4 GPUs but the pod requests 2 nvidia.com/gpu; "
        "request 4 nvidia.com/gpu or set --tensor-parallel-size 2"
    )


def test_allows_the_leaderworkerset_whose_group_spans_16_gpus(snapshot: CatalogSnapshot) -> None:
    verdict = judge(fixture_object("leaderworkerset-llama-405b-2x8-h100.json"), snapshot)
    assert verdict.outcome == "allowed", verdict.reasons
    (plan,) = verdict.plans
    assert (plan.model, plan.gpu, plan.gpus) == ("llama-3.1-405b", "h100-sxm-80gb", 16)
    assert plan.concurrency_at_context is not None and plan.concurrency_at_context > plan.max_concurrency


def test_denies_a_leaderworkerset_group_too_small_for_tp_times_pp(snapshot: CatalogSnapshot) -> None:
    lws = fixture_object("leaderworkerset-llama-405b-2x8-h100.json")
    lws["spec"]["leaderWorkerTemplate"]["size"] = 1
    verdict = judge(lws, snapshot)
    assert verdict.message.startswith(
        "tensor-parallel-size 8 × pipeline-parallel-size 2 needs 16 GPUs but the group requests 8 nvidia.com/gpu"
    )


def test_resolves_quantized_hf_ids_and_gpu_operator_labels(snapshot: CatalogSnapshot) -> None:
    verdict = judge(fixture_object("inferenceservice-qwen-72b-awq-a100.json"), snapshot)
    assert verdict.outcome == "allowed", verdict.reasons
    (plan,) = verdict.plans
    assert (plan.model, plan.quantization, plan.gpu) == ("qwen2.5-72b", "awq", "a100-sxm4-80gb")


def test_allows_the_plain_pod_with_fp8_kv_cache(snapshot: CatalogSnapshot) -> None:
    verdict = judge(fixture_object("pod-mistral-7b-shell-a10g.json"), snapshot)
    assert verdict.outcome == "allowed", verdict.reasons
    (plan,) = verdict.plans
    assert (plan.model, plan.gpu, plan.kv_cache_dtype) == ("mistral-7b-v0.3", "a10g", "fp8")


# --- promises ------------------------------------------------------------------------------------------------


def test_denies_a_promise_one_replica_cannot_keep(snapshot: CatalogSnapshot) -> None:
    verdict = judge(fixture_object("deployment-llama-8b-promise-64-one-l4.json"), snapshot)
    assert verdict.outcome == "denied"
    (plan,) = verdict.plans
    assert plan.concurrency_at_context is not None
    assert verdict.message.startswith(
        f"promised 64 concurrent requests of 8,192 tokens per replica but one replica holds {plan.concurrency_at_context:.1f}; use "
    )
    assert "tensor-parallel-size" in verdict.message and "requests of about" in verdict.message


def test_promise_is_checked_at_the_stated_context_not_max_model_len(snapshot: CatalogSnapshot) -> None:
    base = judge(serving([LLAMA_8B, "--max-model-len", "16384"]), snapshot)
    (plan,) = base.plans
    held_at_16k = plan.max_concurrency
    promise = {"kvcap.io/min-concurrency": f"{held_at_16k * 1.5:.1f}", "kvcap.io/context-tokens": "4096"}
    verdict = judge(serving([LLAMA_8B, "--max-model-len", "16384"], annotations=promise), snapshot)
    assert verdict.outcome == "allowed", verdict.reasons
    (plan,) = verdict.plans
    assert plan.context_tokens == 4096
    assert plan.concurrency_at_context is not None
    assert plan.concurrency_at_context == pytest.approx(held_at_16k * 4, rel=0.02)


def test_warns_on_low_headroom_and_an_estimate_band_straddling_the_promise(snapshot: CatalogSnapshot) -> None:
    (plan,) = judge(serving([LLAMA_8B, "--max-model-len", "8192"]), snapshot).plans
    promise = {"kvcap.io/min-concurrency": f"{plan.max_concurrency * 0.97:.3f}"}
    verdict = judge(serving([LLAMA_8B, "--max-model-len", "8192"], annotations=promise), snapshot)
    assert verdict.outcome == "allowed"
    assert any(w.startswith("low headroom: one replica holds") for w in verdict.warnings)
    assert any("inside kvcap's estimate" for w in verdict.warnings)


def test_denies_a_context_longer_than_max_model_len(snapshot: CatalogSnapshot) -> None:
    promise = {"kvcap.io/min-concurrency": "1", "kvcap.io/context-tokens": "16384"}
    verdict = judge(serving([LLAMA_8B, "--max-model-len", "8192"], annotations=promise), snapshot)
    assert verdict.message.startswith("kvcap.io/context-tokens 16,384 exceeds --max-model-len 8,192")


def test_denies_a_promise_above_max_num_seqs(snapshot: CatalogSnapshot) -> None:
    promise = {"kvcap.io/min-concurrency": "3", "kvcap.io/context-tokens": "1024"}
    verdict = judge(
        serving([LLAMA_8B, "--max-model-len", "8192", "--max-num-seqs", "2"], annotations=promise), snapshot
    )
    assert "--max-num-seqs caps a replica at 2: set --max-num-seqs ≥ 3" in verdict.message


def test_denies_flags_and_gpu_counts_that_vllm_or_kubernetes_would_refuse(snapshot: CatalogSnapshot) -> None:
    assert judge(serving([LLAMA_8B, "--max-model-len", "lots"]), snapshot).reasons == (
        "vLLM would refuse --max-model-len 'lots': not a valid length",
    )
    assert (
        judge(serving([LLAMA_8B, "--gpu-memory-utilization", "1.5"]), snapshot)
        .reasons[0]
        .startswith("vLLM would refuse --gpu-memory-utilization 1.5")
    )
    manifest = serving([LLAMA_8B])
    manifest["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "half"
    assert (
        "resources.limits.nvidia.com/gpu 'half' is not a whole number of GPUs"
        in judge(manifest, snapshot).reasons
    )


def test_devices_kvcap_does_not_model_are_not_guessed(snapshot: CatalogSnapshot) -> None:
    verdict = judge(serving([LLAMA_8B, "--device", "tpu"]), snapshot)
    assert verdict.outcome == "allowed"
    assert verdict.warnings == ("kvcap cannot check vllm: it models GPUs and CPUs, not --device tpu",)
    assert judge(serving([LLAMA_8B, "--device", "auto", "--max-model-len", "8192"]), snapshot).plans


def test_denies_malformed_kvcap_annotations(snapshot: CatalogSnapshot) -> None:
    verdict = judge(serving([LLAMA_8B], annotations={"kvcap.io/min-concurrency": "many"}), snapshot)
    assert verdict.outcome == "denied"
    assert verdict.reasons[0] == "kvcap.io/min-concurrency: 'many' is not a positive number of requests"


# --- soft problems -------------------------------------------------------------------------------------------


def test_warns_about_kv_head_replication(snapshot: CatalogSnapshot) -> None:
    verdict = judge(
        serving([LLAMA_8B, "--max-model-len", "8192", "-tp", "16"], gpus=16, product="NVIDIA-H100-80GB-HBM3"),
        snapshot,
    )
    assert verdict.outcome == "allowed", verdict.reasons
    assert any("exceeds the model's 8 KV heads" in w for w in verdict.warnings)


def test_warns_about_idle_gpus(snapshot: CatalogSnapshot) -> None:
    verdict = judge(serving([LLAMA_8B, "--max-model-len", "8192"], gpus=2), snapshot)
    assert verdict.outcome == "allowed"
    assert verdict.warnings == (
        "the pod requests 2 nvidia.com/gpu but tensor-parallel-size 1 × pipeline-parallel-size 1 uses 1: 1 GPU(s) sit idle",
    )


def test_several_gpu_types_check_the_smallest(snapshot: CatalogSnapshot) -> None:
    manifest = serving([LLAMA_8B, "--max-model-len", "65536"], product=None)
    manifest["spec"]["template"]["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {
                                "key": "nvidia.com/gpu.product",
                                "operator": "In",
                                "values": ["NVIDIA-H100-80GB-HBM3", "NVIDIA-L4"],
                            }
                        ]
                    }
                ]
            }
        }
    }
    verdict = judge(manifest, snapshot)
    assert verdict.outcome == "denied"
    assert verdict.plans[0].gpu == "l4"
    assert verdict.warnings[0].startswith(
        "node affinity nvidia.com/gpu.product allows NVIDIA-H100-80GB-HBM3, NVIDIA-L4"
    )


def test_fp8_kv_cache_and_allow_long_env_are_honoured(snapshot: CatalogSnapshot) -> None:
    too_long = [LLAMA_8B, "--max-model-len", "262144"]
    denied = judge(serving(too_long, product="NVIDIA-H200"), snapshot)
    assert "greater than the derived max_model_len" in denied.message
    env = [{"name": "VLLM_ALLOW_LONG_MAX_MODEL_LEN", "value": "1"}]
    allowed = judge(serving([*too_long, "--kv-cache-dtype", "fp8"], product="NVIDIA-H200", env=env), snapshot)
    assert "derived max_model_len" not in allowed.message


# --- what kvcap cannot check ---------------------------------------------------------------------------------


def test_unknown_model_is_allowed_with_a_warning(snapshot: CatalogSnapshot) -> None:
    verdict = judge(serving(["acme/secret-model-13b"]), snapshot)
    assert verdict.outcome == "allowed"
    assert verdict.warnings[0].startswith(
        "kvcap cannot check vllm: model 'acme/secret-model-13b' is not in kvcap's catalog"
    )


def test_the_model_annotation_fills_the_gap_of_a_local_path(snapshot: CatalogSnapshot) -> None:
    verdict = judge(
        serving(["/models/llama", "--max-model-len", "131072"], annotations={"kvcap.io/model": LLAMA_8B}),
        snapshot,
    )
    assert verdict.outcome == "denied"
    assert verdict.plans[0].model == "llama-3.1-8b"


def test_unknown_gpu_type_is_allowed_with_a_warning_but_gpu_counts_are_still_checked(
    snapshot: CatalogSnapshot,
) -> None:
    unknown = judge(serving([LLAMA_8B], product=None), snapshot)
    assert unknown.outcome == "allowed"
    assert "GPU type unknown" in unknown.warnings[0]
    assert judge(serving([LLAMA_8B], product="NVIDIA-Imaginary-9000"), snapshot).outcome == "allowed"
    assert judge(serving([LLAMA_8B, "-tp", "2"], product=None), snapshot).outcome == "denied"


def test_the_gpu_annotation_fills_the_gap_when_no_label_pins_the_type(snapshot: CatalogSnapshot) -> None:
    verdict = judge(
        serving([LLAMA_8B, "--max-model-len", "131072"], product=None, annotations={"kvcap.io/gpu": "l4"}),
        snapshot,
    )
    assert verdict.outcome == "denied"
    assert verdict.plans[0].gpu == "l4"


def test_unresolvable_flags_are_not_guessed(snapshot: CatalogSnapshot) -> None:
    env = [{"name": "TP", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "tp"}}}]
    verdict = judge(serving(["meta-llama/Llama-3.1-70B-Instruct", "-tp", "$(TP)"], env=env), snapshot)
    assert verdict.outcome == "allowed"
    assert verdict.warnings[0].startswith(
        "kvcap cannot check vllm: -tp $(TP) comes from a value kvcap cannot see"
    )


def test_no_gpu_request_cannot_be_checked(snapshot: CatalogSnapshot) -> None:
    verdict = judge(serving([LLAMA_8B], gpus=None), snapshot)
    assert verdict.outcome == "allowed"
    assert "requests no nvidia.com/gpu or amd.com/gpu" in verdict.warnings[0]


def test_skipped_workloads_get_no_checks(snapshot: CatalogSnapshot) -> None:
    verdict = judge(
        serving(["meta-llama/Llama-3.1-70B-Instruct"], annotations={"kvcap.io/skip": "true"}), snapshot
    )
    assert (verdict.outcome, verdict.allowed, verdict.skipped) == ("skipped", True, "kvcap.io/skip: true")


# --- modes ---------------------------------------------------------------------------------------------------


def test_audit_mode_turns_denials_into_would_deny_warnings(snapshot: CatalogSnapshot) -> None:
    obj = fixture_object("deployment-llama-70b-one-l4.json")
    enforce = judge(obj, snapshot)
    audit = judge(copy.deepcopy(obj), snapshot, mode="audit")
    assert (audit.allowed, audit.outcome) == (True, "would_deny")
    assert audit.warnings == tuple(f"would deny: {r}" for r in enforce.reasons)


def test_an_invalid_engine_annotation_is_denied(snapshot: CatalogSnapshot) -> None:
    verdict = judge(serving([LLAMA_8B], annotations={"kvcap.io/engine": "tgi-2"}), snapshot)
    assert verdict.reasons[0].startswith("kvcap.io/engine: unknown engine 'tgi-2'")


def test_engine_annotation_overrides_the_image_tag(snapshot: CatalogSnapshot) -> None:
    verdict = judge(
        serving([LLAMA_8B, "--max-model-len", "8192"], annotations={"kvcap.io/engine": "vllm-0.20"}), snapshot
    )
    assert verdict.plans[0].engine == "vllm-0.20"
    assert judge(serving([LLAMA_8B, "--max-model-len", "8192"]), snapshot).plans[0].engine == "vllm-0.11"


# --- traffic promises (the serving simulator) ----------------------------------------------------------------

TRAFFIC_ARGS = [LLAMA_8B, "--max-model-len", "8192"]


def simulated_rate(snapshot: CatalogSnapshot, ttft_ms: float, tpot_ms: float) -> float:
    """The oracle: the simulator's own rate search for the manifest's flags, outside the policy."""
    from dataclasses import replace

    from service.admission.policy import cached_plan
    from service.catalog.resolve import resolve_gpu, resolve_model
    from service.core.serving import SloTarget, max_rate_within_slo
    from service.planning.request import build_request
    from service.planning.schemas import PlanSettings

    model, gpu = resolve_model(snapshot, LLAMA_8B), resolve_gpu(snapshot, "NVIDIA-L4")
    assert model is not None and gpu is not None
    request = build_request(
        model.model.spec,
        gpu.spec,
        PlanSettings.model_validate({"max_model_len": 8192, "engine": "vllm-0.11"}),
    )
    s = cached_plan(request).settings
    pinned = replace(
        request,
        max_model_len=s.max_model_len,
        max_model_len_auto=False,
        max_num_seqs=s.max_num_seqs,
        max_num_batched_tokens=s.max_num_batched_tokens,
        block_size=s.block_size,
        suggest=False,
        detail=False,
    )
    found = max_rate_within_slo(
        pinned,
        SloTarget(ttft_seconds=ttft_ms / 1e3, tpot_seconds=tpot_ms / 1e3, percentile="p99"),
        prompt_tokens=1024,
        output_tokens=256,
        num_prompts=200,
    )
    return found.max_request_rate


def traffic(rate: float, **extra: str) -> dict[str, str]:
    return {
        "kvcap.io/requests-per-second": f"{rate:.4f}",
        "kvcap.io/prompt-tokens": "1024",
        "kvcap.io/output-tokens": "256",
        "kvcap.io/ttft-slo-ms": "2000",
        "kvcap.io/tpot-slo-ms": "80",
        **extra,
    }


def with_replicas(obj: dict[str, Any], replicas: int) -> dict[str, Any]:
    obj["spec"]["replicas"] = replicas
    return obj


def test_denies_traffic_the_replicas_cannot_sustain_within_the_slos(snapshot: CatalogSnapshot) -> None:
    one = simulated_rate(snapshot, ttft_ms=2000, tpot_ms=80)
    assert one > 0
    promised = 2.5 * one  # needs ceil(2.5) = 3 replicas
    verdict = judge(with_replicas(serving(TRAFFIC_ARGS, annotations=traffic(promised)), 2), snapshot)
    assert verdict.outcome == "denied"
    (plan,) = verdict.plans
    assert plan.requests_per_second_per_replica == pytest.approx(one, rel=1e-9)
    assert (plan.replicas, plan.replicas_needed) == (2, 3)
    assert verdict.message.startswith(
        f"promised {promised:.4f} req/s of 1,024-token prompts and 256-token outputs within p99 TTFT ≤ 2000 ms "
        f"and TPOT ≤ 80 ms but 2 replica(s) sustain {2 * one:.2f} req/s"
    )
    assert verdict.message.endswith("set replicas ≥ 3")


def test_allows_traffic_enough_replicas_sustain(snapshot: CatalogSnapshot) -> None:
    one = simulated_rate(snapshot, ttft_ms=2000, tpot_ms=80)
    verdict = judge(with_replicas(serving(TRAFFIC_ARGS, annotations=traffic(2.5 * one)), 3), snapshot)
    assert verdict.outcome == "allowed", verdict.reasons
    assert not any("low headroom" in w for w in verdict.warnings)  # 3 × one ≥ 1.1 × 2.5 × one
    (plan,) = verdict.plans
    assert plan.replicas_needed == 3


def test_warns_when_the_replicas_barely_sustain_the_traffic(snapshot: CatalogSnapshot) -> None:
    one = simulated_rate(snapshot, ttft_ms=2000, tpot_ms=80)
    verdict = judge(with_replicas(serving(TRAFFIC_ARGS, annotations=traffic(1.95 * one)), 2), snapshot)
    assert verdict.outcome == "allowed", verdict.reasons
    assert any(w.startswith("low headroom: 2 replica(s) sustain") for w in verdict.warnings)


def test_denies_slos_no_request_rate_meets(snapshot: CatalogSnapshot) -> None:
    # A 8B model in bf16 reads 16 GB of weights per decode step; the L4's 300 GB/s cannot do that in 1 ms.
    verdict = judge(serving(TRAFFIC_ARGS, annotations=traffic(1, **{"kvcap.io/tpot-slo-ms": "1"})), snapshot)
    assert verdict.outcome == "denied"
    assert verdict.message.startswith("promised 1 req/s of 1,024-token prompts")
    assert "time per output token" in verdict.message


def test_traffic_longer_than_max_model_len_is_denied(snapshot: CatalogSnapshot) -> None:
    verdict = judge(
        serving(TRAFFIC_ARGS, annotations=traffic(1, **{"kvcap.io/prompt-tokens": "8000"})), snapshot
    )
    assert verdict.outcome == "denied"
    assert "exceed max_model_len 8,192" in verdict.message


def test_audit_mode_turns_a_traffic_denial_into_a_warning(snapshot: CatalogSnapshot) -> None:
    one = simulated_rate(snapshot, ttft_ms=2000, tpot_ms=80)
    verdict = judge(serving(TRAFFIC_ARGS, annotations=traffic(5 * one)), snapshot, mode="audit")
    assert verdict.outcome == "would_deny"
    assert any(w.startswith("would deny: promised") for w in verdict.warnings)


def test_malformed_traffic_annotations_are_denied_with_the_annotation_named(
    snapshot: CatalogSnapshot,
) -> None:
    bad = {
        "kvcap.io/requests-per-second": "inf",
        "kvcap.io/tpot-slo-ms": "-3",
        "kvcap.io/slo-percentile": "p95",
    }
    verdict = judge(serving(TRAFFIC_ARGS, annotations=bad), snapshot)
    assert verdict.outcome == "denied"
    assert "kvcap.io/requests-per-second: 'inf' is not a positive number of requests/s" in verdict.message
    assert "kvcap.io/tpot-slo-ms: '-3' is not a positive number of milliseconds" in verdict.message
    assert "kvcap.io/slo-percentile: 'p95' is not one of p50, p99, mean" in verdict.message
    (plan,) = verdict.plans
    assert plan.requests_per_second is None


SPEC_ARGS = [
    *TRAFFIC_ARGS,
    "--speculative-config",
    '{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}',
]


def test_the_traffics_acceptance_length_sizes_a_speculative_deployment(snapshot: CatalogSnapshot) -> None:
    # On random prompts the n-gram matcher proposes nothing (acceptance 1, no speed-up); traffic whose drafts
    # are accepted 1.5 tokens a step decodes in fewer steps, so under a TPOT SLO one replica sustains more.
    one = simulated_rate(snapshot, ttft_ms=2000, tpot_ms=80)

    def per_replica(**extra: str) -> float:
        verdict = judge(serving(SPEC_ARGS, annotations=traffic(one, **extra)), snapshot, mode="audit")
        (plan,) = verdict.plans
        assert plan.requests_per_second_per_replica is not None, verdict.warnings
        return plan.requests_per_second_per_replica

    default = per_replica()
    accepted = per_replica(**{"kvcap.io/spec-mean-acceptance-length": "2.5"})
    assert accepted > 1.2 * default
    promised = 2.5 * accepted  # one replica (the default) of three needed
    verdict = judge(
        serving(SPEC_ARGS, annotations=traffic(promised, **{"kvcap.io/spec-mean-acceptance-length": "2.5"})),
        snapshot,
    )
    assert verdict.outcome == "denied"
    assert verdict.message.startswith(
        f"promised {promised:.4f} req/s of 1,024-token prompts and 256-token outputs at mean acceptance length "
        "2.5 within p99 TTFT ≤ 2000 ms and TPOT ≤ 80 ms but 1 replica(s) sustain"
    )


def test_an_acceptance_length_no_drafts_can_reach_is_denied_naming_the_annotation(
    snapshot: CatalogSnapshot,
) -> None:
    # k = 3 drafts: at most 1 + 3 tokens a step.
    over = judge(
        serving(SPEC_ARGS, annotations=traffic(1, **{"kvcap.io/spec-mean-acceptance-length": "4.5"})),
        snapshot,
    )
    assert over.outcome == "denied"
    assert over.message.startswith("kvcap.io/spec-mean-acceptance-length: ")
    assert "4.5" in over.message
    for raw in ("0.5", "nan", "fast"):
        bad = judge(
            serving(SPEC_ARGS, annotations=traffic(1, **{"kvcap.io/spec-mean-acceptance-length": raw})),
            snapshot,
        )
        assert bad.outcome == "denied"
        assert (
            f"kvcap.io/spec-mean-acceptance-length: {raw!r} is not a mean acceptance length from 1 to 64"
            in bad.message
        )


def test_slos_without_a_rate_are_a_problem(snapshot: CatalogSnapshot) -> None:
    verdict = judge(serving(TRAFFIC_ARGS, annotations={"kvcap.io/ttft-slo-ms": "500"}), snapshot)
    assert verdict.message == (
        "kvcap.io/ttft-slo-ms without kvcap.io/requests-per-second: give the rate the SLOs are promised at"
    )


def test_vllm_pp_layer_partition_in_the_env_splits_the_layers(snapshot: CatalogSnapshot) -> None:
    # vllm/distributed/utils.py::get_pp_indices: 12 and 20 layers instead of 16 and 16; the plan holds what its
    # fuller stage holds.
    args = [LLAMA_8B, "--pipeline-parallel-size", "2", "--max-model-len", "8192"]

    def plan_with(partition: str | None) -> Verdict:
        env = [{"name": "VLLM_PP_LAYER_PARTITION", "value": partition}] if partition is not None else None
        return judge(serving(args, gpus=2, env=env), snapshot)

    even, uneven = plan_with(None), plan_with("12,20")
    assert even.outcome == uneven.outcome == "allowed"
    blocks = even.plans[0].num_gpu_blocks, uneven.plans[0].num_gpu_blocks
    assert blocks[1] < blocks[0]
    assert plan_with("16,16").plans[0].num_gpu_blocks == blocks[0]
    refused = plan_with("12,x")
    assert refused.outcome == "denied"
    assert "VLLM_PP_LAYER_PARTITION='12,x': vLLM refuses it (Invalid partition string)" in refused.message
    # counts vLLM parses but get_pp_indices refuses (its own ValueError at start-up): denied, in its wording
    mismatched = plan_with("12,21")
    assert mismatched.outcome == "denied"
    assert mismatched.unevaluated == ()
    assert (
        "vLLM would refuse to start vllm: pipeline_layer_partition: sum(partitions)=33 does not match "
        "num_hidden_layers=32." in mismatched.message
    )
    three = plan_with("10,10,12")
    assert three.outcome == "denied"
    assert "len(partitions)=3 does not match pp_size=2." in three.message


# --- serving features in the pod's flags ---------------------------------------------------------------------


def _blocks(verdict: Verdict) -> int:
    (plan,) = verdict.plans
    return plan.num_gpu_blocks


def test_lora_and_a_draft_model_in_the_flags_take_their_memory(snapshot: CatalogSnapshot) -> None:
    """The adapters' buffers and the draft's weights and KV layers come out of the same budget: the pod's plan
    is the plan of the same request with those features (the planner's figures), not the plain one."""
    from service.core.planner import PlanRequest, plan
    from service.core.planner.features import LoraConfig, ServingFeatures, SpeculativeConfig

    base = [LLAMA_8B, "--max-model-len", "8192"]
    model = snapshot.find_model("llama-3.1-8b")
    draft = snapshot.find_model("llama-3.2-1b")
    gpu = snapshot.find_gpu("l4")
    assert model is not None and draft is not None and gpu is not None

    def planned(features: ServingFeatures | None) -> int:
        request = PlanRequest(
            model=model.spec, gpu=gpu.spec, engine="vllm-0.11", max_model_len=8192, features=features
        )
        return plan(request).kv_cache.num_gpu_blocks

    plain = _blocks(judge(serving(base), snapshot))
    assert plain == planned(None)
    lora = judge(serving([*base, "--enable-lora", "--max-loras", "4", "--max-lora-rank", "64"]), snapshot)
    assert _blocks(lora) == planned(ServingFeatures(lora=LoraConfig(max_loras=4, max_lora_rank=64))) < plain
    config = '{"model": "meta-llama/Llama-3.2-1B-Instruct", "num_speculative_tokens": 4}'
    spec = judge(serving([*base, "--speculative-config", config]), snapshot)
    expected = planned(
        ServingFeatures(
            speculative=SpeculativeConfig(method="draft_model", num_speculative_tokens=4, draft=draft.spec)
        )
    )
    assert _blocks(spec) == expected < plain


def test_a_draft_kvcap_does_not_know_leaves_the_serving_unchecked_not_denied(
    snapshot: CatalogSnapshot,
) -> None:
    config = '{"model": "acme/secret-draft", "num_speculative_tokens": 4}'
    verdict = judge(serving([LLAMA_8B, "--max-model-len", "8192", "--speculative-config", config]), snapshot)
    assert verdict.outcome != "denied"
    assert verdict.unevaluated == ("invalid_spec",)
    assert any("speculative_config.model" in w or "acme/secret-draft" in w for w in verdict.warnings), (
        verdict.warnings
    )


def test_a_json_flag_kvcap_cannot_read_leaves_the_serving_unchecked(snapshot: CatalogSnapshot) -> None:
    config = '{"image": {"count": 2, "width": 512}}'  # the per-modality options of newer releases
    verdict = judge(serving([LLAMA_8B, "--max-model-len", "8192", "--limit-mm-per-prompt", config]), snapshot)
    assert verdict.outcome != "denied"
    assert verdict.unevaluated == ("invalid_spec",)
    assert any("it cannot read --limit-mm-per-prompt" in w for w in verdict.warnings), verdict.warnings


def test_explicit_async_scheduling_with_the_host_ngram_proposer_is_a_start_vllm_refuses(
    snapshot: CatalogSnapshot,
) -> None:
    # vllm/config/vllm.py (0.32.0): --async-scheduling with an n-gram proposer on the host raises before serving.
    spec = ["--speculative-config", '{"method": "ngram", "num_speculative_tokens": 3}']

    def at(args: list[str]) -> Verdict:
        obj = serving(args)
        obj["spec"]["template"]["spec"]["containers"][0]["image"] = "vllm/vllm-openai:v0.32.0"
        return judge(obj, snapshot)

    refused = at([*TRAFFIC_ARGS, *spec, "--async-scheduling"])
    assert refused.outcome == "denied"
    assert refused.message.startswith(
        "vLLM would refuse to start vllm: async_scheduling: Currently, async scheduling is only supported with "
        "EAGLE/MTP/Draft Model/NGram GPU/DSpark/DFlash kind of speculative decoding"
    )
    plain = at([*TRAFFIC_ARGS, *spec])  # left to vLLM: it turns async scheduling off and serves
    assert plain.outcome == "allowed"
    assert "Async scheduling not supported with ngram-based speculative decoding and will be disabled." in (
        plain.warnings
    )
