"""`kvcap check` offline: the plain lane (built-in catalog without the schemas, flags checked by hand) gives the
verdicts the validated path gives.

Every fixture and a spread of vLLM flags — plainly valid ones, serving features the schema reads, values it
coerces and values vLLM refuses — are checked twice: with ``offline_snapshot`` and ``plain_settings`` as the
command runs, and with ``builtin_snapshot`` and every flag validated by ``PlanSettings``. Results, reasons,
warnings and the JSON report must be the same.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import service.admission.policy as policy
from service.admission.check import Document, check_offline, load, parse_text, report_json
from service.admission.check_command import policy_config
from service.catalog.builtin import builtin_snapshot
from service.catalog.offline import offline_snapshot
from service.planning.offline import plain_settings

DATA = Path(__file__).parent / "data"

_DEPLOYMENT = """
apiVersion: apps/v1
kind: Deployment
metadata: {{name: server, namespace: team}}
spec:
  replicas: 1
  template:
    spec:
      nodeSelector: {{nvidia.com/gpu.product: {gpu}}}
      containers:
        - name: vllm
          image: vllm/vllm-openai:v0.11.0
          command: ["vllm", "serve"]
          args: {args}
          resources:
            limits: {{nvidia.com/gpu: "{gpus}"}}
"""
FLAGS = [
    ("NVIDIA-L4", 1, ["meta-llama/Llama-3.1-8B-Instruct", "--max-model-len=8192"]),
    ("NVIDIA-H100-80GB-HBM3", 2, ["Qwen/Qwen2.5-72B-Instruct-AWQ", "--tensor-parallel-size", "2"]),
    (
        "NVIDIA-H100-80GB-HBM3",
        1,
        ["meta-llama/Llama-3.1-8B-Instruct", "--kv-cache-dtype", "fp8", "--gpu-memory-utilization", "0.95"],
    ),
    (
        "NVIDIA-H100-80GB-HBM3",
        1,
        [
            "meta-llama/Llama-3.1-8B-Instruct",
            "--max-num-seqs",
            "512",
            "--block-size",
            "32",
            "--enforce-eager",
        ],
    ),
    (
        "NVIDIA-H100-80GB-HBM3",
        1,
        ["meta-llama/Llama-3.1-8B-Instruct", "--enable-lora", "--max-loras", "4"],
    ),  # a feature
    (
        "NVIDIA-H100-80GB-HBM3",
        1,
        ["meta-llama/Llama-3.1-8B-Instruct", "--gpu-memory-utilization", "1.5"],
    ),  # refused
    ("NVIDIA-H100-80GB-HBM3", 1, ["meta-llama/Llama-3.1-8B-Instruct", "--dtype", "float8"]),  # refused
    (
        "NVIDIA-H100-80GB-HBM3",
        1,
        ["meta-llama/Llama-3.1-8B-Instruct", "--max-model-len", "99999999999"],
    ),  # refused
    ("NVIDIA-H100-80GB-HBM3", 1, ["meta-llama/Llama-3.1-8B-Instruct", "--max-model-len", "auto"]),
    ("NVIDIA-L4", 1, ["meta-llama/Llama-3.1-70B-Instruct"]),  # denied: will not start
    ("NVIDIA-L4", 1, ["no-such/model"]),
]


def _documents() -> list[Document]:
    items = load([str(DATA)], stdin=None)  # type: ignore[arg-type]  # no "-" among the paths
    for gpu, gpus, args in FLAGS:
        items += parse_text(_DEPLOYMENT.format(gpu=gpu, gpus=gpus, args=args), f"flags {args}")
    documents = [item for item in items if isinstance(item, Document)]
    assert len(documents) > len(FLAGS)
    return documents


def test_every_fixture_and_flag_spread_gets_the_validated_path_s_verdict(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = policy_config()
    documents = _documents()
    ours = [check_offline(document, offline_snapshot(), config) for document in documents]
    monkeypatch.setattr(policy, "plain_settings", lambda _: None)
    policy.cached_plan.cache_clear()
    theirs = [check_offline(document, builtin_snapshot(), config) for document in documents]
    assert ours == theirs
    assert report_json(ours) == report_json(theirs)
    verdicts = {result.verdict for result in ours}
    assert {"allowed", "denied"} <= verdicts
    assert any("vLLM would refuse" in result.reason for result in ours)


def test_plainly_valid_flags_are_planned_without_the_schema(monkeypatch: pytest.MonkeyPatch) -> None:
    validated: list[object] = []

    def counting(values: dict[str, object]) -> object:
        found = plain_settings(values)
        if found is None:
            validated.append(values)
        return found

    monkeypatch.setattr(policy, "plain_settings", counting)
    (document,) = parse_text(_DEPLOYMENT.format(gpu="NVIDIA-L4", gpus=1, args=FLAGS[0][2]), "plain")
    assert isinstance(document, Document)
    assert check_offline(document, offline_snapshot(), policy_config()).verdict == "allowed"
    assert validated == []
