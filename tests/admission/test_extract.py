"""Manifest → what vLLM will run with: command lines, env references, GPUs, GPU type, workload kinds."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from service.admission.extract import (
    ExtractedServing,
    ExtractedWorkload,
    extract,
    parse_human_int,
    parse_vllm_args,
)

DATA = Path(__file__).parent / "data"


def fixture_object(name: str) -> dict[str, Any]:
    review = json.loads((DATA / name).read_text())
    obj: dict[str, Any] = review["request"]["object"]
    return obj


def deployment(
    *,
    args: list[str] | None = None,
    command: list[str] | None = None,
    env: list[dict[str, Any]] | None = None,
    image: str = "vllm/vllm-openai:v0.11.0",
    gpus: object = 1,
    resource: str = "nvidia.com/gpu",
    pod: dict[str, Any] | None = None,
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    replicas: int | None = 2,
) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "vllm", "image": image}
    if command is not None:
        container["command"] = command
    if args is not None:
        container["args"] = args
    if env is not None:
        container["env"] = env
    if gpus is not None:
        container["resources"] = {"limits": {resource: gpus}}
    spec: dict[str, Any] = {"template": {"spec": {"containers": [container], **(pod or {})}}}
    if replicas is not None:
        spec["replicas"] = replicas
    metadata: dict[str, Any] = {"name": "llm", "namespace": "ml"}
    if annotations:
        metadata["annotations"] = annotations
    if labels:
        metadata["labels"] = labels
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": metadata, "spec": spec}


def only(workload: ExtractedWorkload) -> ExtractedServing:
    assert workload.skip is None, workload.skip
    assert len(workload.servings) == 1
    return workload.servings[0]


# --- flags ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["--max-model-len", "8192", "--tensor-parallel-size", "2"],
        ["--max-model-len=8192", "--tensor-parallel-size=2"],
        ["--max_model_len", "8192", "--tensor_parallel_size=2"],
        ["--max-model-len", "8K", "-tp", "2"],
        ["--max-model-len", "4096", "-tp", "4", "--max-model-len", "8192", "-tp=2"],
    ],
)
def test_reads_flags_in_every_form_vllm_accepts(args: list[str]) -> None:
    flags = parse_vllm_args(["meta-llama/Llama-3.1-8B-Instruct", *args])
    assert flags.positional == "meta-llama/Llama-3.1-8B-Instruct"
    assert flags.values == {"max_model_len": 8192, "tensor_parallel_size": 2}


def test_reads_every_capacity_flag() -> None:
    flags = parse_vllm_args(
        [
            "--model=m",
            "-pp",
            "2",
            "--gpu-memory-utilization",
            "0.85",
            "--kv-cache-dtype",
            "fp8",
            "-q",
            "awq",
            "--max-num-seqs",
            "128",
            "--max-num-batched-tokens",
            "16k",
            "--block-size",
            "32",
            "--kv-cache-memory-bytes",
            "8G",
            "--enforce-eager",
            "--dtype",
            "half",
        ]
    )
    assert flags.values == {
        "model": "m",
        "pipeline_parallel_size": 2,
        "gpu_memory_utilization": 0.85,
        "kv_cache_dtype": "fp8",
        "quantization": "awq",
        "max_num_seqs": 128,
        "max_num_batched_tokens": 16_000,
        "block_size": 32,
        "kv_cache_memory_bytes": 8 * 1024**3,
        "enforce_eager": True,
        "dtype": "half",
    }


def test_human_readable_integers_follow_vllm() -> None:
    assert parse_human_int("25.6k") == 25_600
    assert parse_human_int("32K") == 32_768
    assert parse_human_int("1M") == 1_048_576
    assert parse_human_int("131,072") == 131_072
    with pytest.raises(ValueError, match="whole number"):
        parse_human_int("1.5K")


def test_switches_do_not_swallow_the_positional_model() -> None:
    flags = parse_vllm_args(
        ["--trust-remote-code", "Qwen/Qwen3-8B", "--enable-prefix-caching", "--max-model-len", "auto"]
    )
    assert flags.positional == "Qwen/Qwen3-8B"
    assert flags.values == {"max_model_len": "auto", "enable_prefix_caching": True}


def test_negated_and_explicit_booleans() -> None:
    assert parse_vllm_args(["--enforce-eager", "--no-enforce-eager"]).values == {"enforce_eager": False}
    assert parse_vllm_args(["--enforce-eager=false"]).values == {"enforce_eager": False}


def test_disable_sliding_window_is_read_from_the_container_args() -> None:
    assert parse_vllm_args(["m", "--disable-sliding-window"]).values == {"disable_sliding_window": True}
    assert parse_vllm_args(["--disable-sliding-window=false"]).values == {"disable_sliding_window": False}


def test_values_vllm_would_refuse_are_problems() -> None:
    flags = parse_vllm_args(["m", "--tensor-parallel-size", "two", "--max-model-len"])
    assert flags.problems == [
        "vLLM would refuse --tensor-parallel-size 'two': not a valid integer",
        "vLLM would refuse --max-model-len without a value",
    ]


# --- command lines and environment ---------------------------------------------------------------------------


def test_positional_model_with_command_and_args_split() -> None:
    serving = only(
        extract(deployment(command=["vllm", "serve"], args=["meta-llama/Llama-3.1-8B-Instruct", "-tp", "1"]))
    )
    assert (serving.model, serving.model_source) == ("meta-llama/Llama-3.1-8B-Instruct", "positional")
    assert serving.flags == {"tensor_parallel_size": 1}


def test_args_only_run_the_images_vllm_serve_entrypoint() -> None:
    serving = only(extract(deployment(args=["--model", "mistralai/Mistral-7B-Instruct-v0.3"])))
    assert (serving.model, serving.model_source) == ("mistralai/Mistral-7B-Instruct-v0.3", "--model")


def test_python_module_api_server() -> None:
    workload = extract(
        deployment(
            image="ghcr.io/acme/llm:1.2",
            command=["python3", "-m", "vllm.entrypoints.openai.api_server"],
            args=["--model", "Qwen/Qwen2.5-7B-Instruct", "--max-model-len", "32768"],
        )
    )
    serving = only(workload)
    assert serving.model == "Qwen/Qwen2.5-7B-Instruct"
    assert serving.flags == {"max_model_len": 32768}
    assert serving.engine is None


def test_shell_script_with_env_references_and_line_continuations() -> None:
    script = (
        "set -e; export TP=2\n"
        "nvidia-smi && exec vllm serve $(MODEL) \\\n"
        "  --tensor-parallel-size $TP --max-model-len ${MAX_LEN:-16384} --gpu-memory-utilization=$(UTIL)"
    )
    workload = extract(
        deployment(
            command=["/bin/bash", "-lc"],
            args=[script],
            env=[
                {"name": "MODEL", "value": "meta-llama/Llama-3.1-8B-Instruct"},
                {"name": "UTIL", "value": "0.8"},
            ],
            gpus=2,
        )
    )
    serving = only(workload)
    assert serving.model == "meta-llama/Llama-3.1-8B-Instruct"
    assert serving.flags == {"tensor_parallel_size": 2, "max_model_len": 16384, "gpu_memory_utilization": 0.8}
    assert serving.unresolved == ()


def test_env_values_expand_in_order_and_dollar_dollar_escapes() -> None:
    env = [{"name": "BASE", "value": "8192"}, {"name": "LEN", "value": "$(BASE)"}]
    serving = only(
        extract(deployment(args=["m", "--max-model-len", "$(LEN)", "--served-model-name", "$$(x)"], env=env))
    )
    assert serving.flags == {"max_model_len": 8192}


def test_values_from_secrets_and_config_maps_are_unresolved_not_guessed() -> None:
    env = [{"name": "TP", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "tp"}}}]
    serving = only(extract(deployment(args=["m", "--tensor-parallel-size", "$(TP)"], env=env)))
    assert serving.unresolved == ("--tensor-parallel-size $(TP)",)
    assert "tensor_parallel_size" not in serving.flags


def test_a_wrapper_script_in_a_vllm_image_is_a_serving_kvcap_cannot_read() -> None:
    serving = only(extract(deployment(command=["/opt/start.sh"], args=["--fast"])))
    assert serving.unresolved and "wrapper" in serving.unresolved[0]


def test_allow_long_max_model_len_env_is_noticed() -> None:
    env = [{"name": "VLLM_ALLOW_LONG_MAX_MODEL_LEN", "value": "1"}]
    assert only(extract(deployment(args=["m"], env=env))).allow_long_max_model_len


@pytest.mark.parametrize(("value", "expected"), [("0", {"flashinfer_sampler": False}), ("1", {}), (None, {})])
def test_the_flashinfer_sampler_env_is_read(value: str | None, expected: dict[str, bool]) -> None:
    env = [{"name": "VLLM_USE_FLASHINFER_SAMPLER", "value": value}] if value is not None else None
    flags = only(extract(deployment(args=["m"], env=env))).flags
    assert {k: v for k, v in flags.items() if k == "flashinfer_sampler"} == expected


@pytest.mark.parametrize(
    ("image", "engine"),
    [
        ("vllm/vllm-openai:v0.11.0", "vllm-0.11"),
        ("docker.io/vllm/vllm-openai:v0.10.1.1", "vllm-0.10"),
        ("registry.local:5000/mirror/vllm/vllm-openai:0.9.2", "vllm-0.9"),
        ("vllm/vllm-openai:latest", None),
        ("vllm/vllm-openai@sha256:" + "a" * 64, None),
    ],
)
def test_engine_comes_from_the_image_tag(image: str, engine: str | None) -> None:
    assert only(extract(deployment(args=["m"], image=image))).engine == engine


# --- GPUs ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("resource", "value", "count"), [("nvidia.com/gpu", "4", 4), ("amd.com/gpu", 2, 2)])
def test_gpus_come_from_limits(resource: str, value: object, count: int) -> None:
    serving = only(extract(deployment(args=["m"], gpus=value, resource=resource)))
    assert (serving.gpus, serving.gpu_resource) == (count, resource)
    assert serving.gpus_detail == f"the pod requests {count} {resource}"


def test_gpus_fall_back_to_requests_and_none_means_no_gpu_asked() -> None:
    manifest = deployment(args=["m"], gpus=None)
    container = manifest["spec"]["template"]["spec"]["containers"][0]
    container["resources"] = {"requests": {"nvidia.com/gpu": "2"}}
    assert only(extract(manifest)).gpus == 2
    assert only(extract(deployment(args=["m"], gpus=None))).gpus is None


@pytest.mark.parametrize(
    ("pod", "products", "source"),
    [
        (
            {"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}},
            ("NVIDIA-A100-SXM4-80GB",),
            "nodeSelector",
        ),
        (
            {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {
                                    "matchExpressions": [
                                        {
                                            "key": "nvidia.com/gpu.product",
                                            "operator": "In",
                                            "values": ["NVIDIA-L4"],
                                        }
                                    ]
                                },
                                {
                                    "matchExpressions": [
                                        {
                                            "key": "nvidia.com/gpu.product",
                                            "operator": "In",
                                            "values": ["NVIDIA-A10G"],
                                        }
                                    ]
                                },
                            ]
                        }
                    }
                }
            },
            ("NVIDIA-L4", "NVIDIA-A10G"),
            "node affinity",
        ),
        ({"nodeSelector": {"cloud.google.com/gke-accelerator": "nvidia-l4"}}, ("nvidia-l4",), "nodeSelector"),
        ({}, (), None),
    ],
)
def test_gpu_product_from_node_selector_or_required_affinity(
    pod: dict[str, Any], products: tuple[str, ...], source: str | None
) -> None:
    serving = only(extract(deployment(args=["m"], pod=pod)))
    assert serving.gpu_products == products
    assert (serving.gpu_product_source or "").startswith(source or "")


# --- workload kinds ------------------------------------------------------------------------------------------


def test_deployment_and_statefulset_fixtures() -> None:
    workload = extract(fixture_object("deployment-llama-70b-one-l4.json"))
    assert (workload.kind, workload.namespace, workload.name, workload.replicas) == (
        "Deployment",
        "inference",
        "llama-70b",
        1,
    )
    serving = only(workload)
    assert serving.model == "meta-llama/Llama-3.1-70B-Instruct"
    assert serving.gpu_products == ("NVIDIA-L4",)
    statefulset = only(extract(fixture_object("statefulset-llama-8b-131k-one-l4.json")))
    assert statefulset.flags["max_model_len"] == 131072
    assert statefulset.gpu_products == ("NVIDIA-L4",)


def test_leaderworkerset_group_is_one_replica_of_leader_plus_workers() -> None:
    workload = extract(fixture_object("leaderworkerset-llama-405b-2x8-h100.json"))
    serving = only(workload)
    assert serving.model == "meta-llama/Meta-Llama-3.1-405B-Instruct"
    assert serving.flags == {"tensor_parallel_size": 8, "pipeline_parallel_size": 2, "max_model_len": 16384}
    assert serving.gpus == 16
    assert serving.gpus_detail == "the group requests 16 nvidia.com/gpu (leader 8 + 1 worker × 8)"
    assert serving.gpu_products == ("NVIDIA-H100-80GB-HBM3",)
    assert (workload.min_concurrency, workload.context_tokens) == (4.0, 8192)


def test_leaderworkerset_without_a_leader_template_uses_the_worker_template() -> None:
    lws = fixture_object("leaderworkerset-llama-405b-2x8-h100.json")
    template = lws["spec"]["leaderWorkerTemplate"]
    template["workerTemplate"] = template.pop("leaderTemplate")
    template["size"] = 3
    assert only(extract(lws)).gpus == 24


def test_inference_service_with_huggingface_runtime() -> None:
    workload = extract(fixture_object("inferenceservice-qwen-72b-awq-a100.json"))
    serving = only(workload)
    assert (serving.model, serving.model_source) == ("Qwen/Qwen2.5-72B-Instruct-AWQ", "storageUri")
    assert serving.flags == {"max_model_len": 16384, "gpu_memory_utilization": 0.92}
    assert serving.gpus == 1
    assert serving.gpu_products == ("NVIDIA-A100-SXM4-80GB",)
    assert workload.replicas == 1


def test_inference_service_model_id_and_non_vllm_backends() -> None:
    isvc = fixture_object("inferenceservice-qwen-72b-awq-a100.json")
    model = isvc["spec"]["predictor"]["model"]
    model["args"] = ["--model_id=meta-llama/Llama-3.1-8B-Instruct", "--tensor-parallel-size=1"]
    assert only(extract(isvc)).model == "meta-llama/Llama-3.1-8B-Instruct"
    model["args"].append("--backend=huggingface")
    assert extract(isvc).skip == "not a vLLM workload"
    model["modelFormat"] = {"name": "sklearn"}
    assert extract(isvc).skip == "not a vLLM workload"


def test_inference_service_with_custom_containers_and_multi_node_worker_spec() -> None:
    isvc = {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {"name": "big", "namespace": "ml"},
        "spec": {
            "predictor": {
                "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
                "containers": [
                    {
                        "name": "kserve-container",
                        "image": "vllm/vllm-openai:v0.11.0",
                        "args": ["meta-llama/Llama-3.1-405B-Instruct"],
                        "resources": {"limits": {"nvidia.com/gpu": "8"}},
                    }
                ],
                "workerSpec": {
                    "tensorParallelSize": 8,
                    "pipelineParallelSize": 2,
                    "containers": [{"name": "worker", "resources": {"limits": {"nvidia.com/gpu": "8"}}}],
                },
            }
        },
    }
    serving = only(extract(isvc))
    assert serving.flags == {"tensor_parallel_size": 8, "pipeline_parallel_size": 2}
    assert serving.gpus == 16


def test_plain_pod_with_shell_and_env() -> None:
    serving = only(extract(fixture_object("pod-mistral-7b-shell-a10g.json")))
    assert serving.container == "server"
    assert serving.model == "mistralai/Mistral-7B-Instruct-v0.3"
    assert serving.flags == {"max_model_len": 16384, "kv_cache_dtype": "fp8", "gpu_memory_utilization": 0.9}


@pytest.mark.parametrize(
    "manifest",
    [
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}},
        deployment(image="nginx:1.27", command=["nginx"], args=["-g", "daemon off;"]),
        deployment(image="busybox", command=["sh", "-c", "echo vllm is great; sleep 3600"]),
    ],
)
def test_objects_that_do_not_run_vllm_are_skipped(manifest: dict[str, Any]) -> None:
    assert extract(manifest).skip == "not a vLLM workload"


@pytest.mark.parametrize(
    "manifest",
    [
        deployment(args=["m"], annotations={"kvcap.io/skip": "true"}),
        deployment(args=["m"], labels={"kvcap.io/skip": "True"}),
    ],
)
def test_skip_annotation_or_label(manifest: dict[str, Any]) -> None:
    assert extract(manifest).skip == "kvcap.io/skip: true"


def test_pods_of_reviewed_controllers_are_not_judged_out_of_context() -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": "vllm-405b-0-",
            "labels": {"leaderworkerset.sigs.k8s.io/name": "vllm-405b"},
        },
        "spec": {
            "containers": [
                {"name": "vllm", "image": "vllm/vllm-openai:v0.11.0", "args": ["m", "-tp", "8", "-pp", "2"]}
            ]
        },
    }
    assert "LeaderWorkerSet vllm-405b" in (extract(pod).skip or "")
    owned = copy.deepcopy(pod)
    owned["metadata"] = {
        "name": "x",
        "ownerReferences": [{"kind": "ReplicaSet", "name": "llm-5d8f", "controller": True}],
    }
    assert "ReplicaSet llm-5d8f" in (extract(owned).skip or "")


def test_annotations_state_promises_and_fill_gaps() -> None:
    workload = extract(
        deployment(
            args=["/models/llama"],
            annotations={
                "kvcap.io/model": "meta-llama/Llama-3.1-8B-Instruct",
                "kvcap.io/gpu": "NVIDIA-L4",
                "kvcap.io/min-concurrency": "16",
                "kvcap.io/context-tokens": "4k",
                "kvcap.io/engine": "vllm-0.11",
            },
        )
    )
    assert workload.model_annotation == "meta-llama/Llama-3.1-8B-Instruct"
    assert workload.gpu_annotation == "NVIDIA-L4"
    assert (workload.min_concurrency, workload.context_tokens) == (16.0, 4000)
    assert workload.engine_annotation == "vllm-0.11"
    assert workload.problems == ()


def test_malformed_promises_are_problems() -> None:
    workload = extract(
        deployment(
            args=["m"], annotations={"kvcap.io/min-concurrency": "lots", "kvcap.io/context-tokens": "-5"}
        )
    )
    assert workload.problems == (
        "kvcap.io/min-concurrency: 'lots' is not a positive number of requests",
        "kvcap.io/context-tokens: '-5' is not a positive number of tokens",
    )


@pytest.mark.parametrize(("value", "partition"), [("12,20", [12, 20]), ("", None)])
def test_vllm_pp_layer_partition_env_is_read_as_get_pp_indices_reads_it(
    value: str, partition: list[int] | None
) -> None:
    env = [{"name": "VLLM_PP_LAYER_PARTITION", "value": value}]
    serving = only(extract(deployment(args=["m", "-pp", "2"], env=env)))
    assert serving.flags.get("pipeline_layer_partition") == partition
    assert not serving.problems


# --- serving features ----------------------------------------------------------------------------------------


def test_serving_feature_flags_are_read_as_vllm_parses_them() -> None:
    flags = parse_vllm_args(
        [
            "m",
            "--enable-lora",
            "--max-loras",
            "4",
            "--max-lora-rank=64",
            "--cpu-offload-gb",
            "8",
            "--no-enable-prefix-caching",
            "-ep",
            "--mamba-ssm-cache-dtype",
            "float32",
            "--speculative-config",
            '{"method": "eagle3", "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "num_speculative_tokens": 3}',
        ]
    )
    assert flags.problems == []
    assert flags.values == {
        "enable_lora": True,
        "max_loras": 4,
        "max_lora_rank": 64,
        "cpu_offload_gb": 8.0,
        "enable_prefix_caching": False,
        "enable_expert_parallel": True,
        "mamba_ssm_cache_dtype": "float32",
        "speculative_config": {
            "method": "eagle3",
            "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
            "num_speculative_tokens": 3,
        },
    }


def test_the_dotted_form_of_a_json_flag_builds_its_object() -> None:
    flags = parse_vllm_args(
        ["m", "--speculative-config.method", "ngram", "--speculative_config.num_speculative_tokens=4"]
    )
    assert flags.values == {"speculative_config": {"method": "ngram", "num_speculative_tokens": 4}}


def test_a_json_flag_that_is_not_a_json_object_is_a_problem() -> None:
    flags = parse_vllm_args(["m", "--speculative-config", "{method: ngram}", "--kv-transfer-config", "[1]"])
    assert flags.problems == [
        "vLLM would refuse --speculative-config '{method: ngram}': not a valid JSON object",
        "vLLM would refuse --kv-transfer-config '[1]': not a valid JSON object",
    ]


def test_json_keys_that_change_no_memory_are_dropped_with_a_note() -> None:
    config = (
        '{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 5, "prompt_lookup_min": 2}'
    )
    serving = only(extract(deployment(args=["--model", "m", "--speculative-config", config])))
    assert serving.flags["speculative_config"] == {"method": "ngram", "num_speculative_tokens": 4}
    assert (
        "--speculative-config: prompt_lookup_max, prompt_lookup_min change nothing kvcap plans (not checked)"
        in serving.notes
    )
