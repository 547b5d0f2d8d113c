"""The offline lane (``service.planning.offline``) answers exactly as the validated path does.

``kvcap plan`` answers a plainly valid offline plan without pydantic; these tests hold its bytes to
``make_plan(...).model_dump_json(indent=2)`` over the whole catalog, its printed output and exit code to the
validated command body's (``service.cli_fast._plan``) for a spread of flags, and its settings to
``PlanSettings``' — and check that what it cannot prove valid is left to the schemas.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest

import service.cli_fast as cli_fast
from service.catalog.builtin import builtin_snapshot
from service.catalog.offline import offline_snapshot
from service.cli_fast import PlanOptions, run_plan
from service.core.planner import ResolvedSettings
from service.errors import ServiceError
from service.planning.offline import (
    OfflinePlanner,
    PlainSettings,
    dump_json,
    plain_settings,
)
from service.planning.schemas import PlanRequestBody, PlanSettings, SettingsOut
from service.planning.service import make_plan

GPUS = ("h100-sxm-80gb", "l4", "mi300x")
SETTINGS: tuple[dict[str, Any], ...] = (
    {},
    {"kv_cache_dtype": "fp8", "max_model_len": 8192, "tensor_parallel_size": 2},
    {"max_model_len": "auto", "gpu_memory_utilization": 0.8, "enforce_eager": True},
    {"kv_cache_memory_bytes": 8 * 1024**3, "block_size": 32, "max_num_seqs": 64},
)


def test_the_settings_fields_are_the_core_s() -> None:
    assert [f.name for f in dataclasses.fields(ResolvedSettings)] == list(SettingsOut.model_fields)


def test_plain_settings_cover_every_field_of_plan_settings() -> None:
    assert {f.name for f in dataclasses.fields(PlainSettings)} == set(PlanSettings.model_fields)
    defaults = PlanSettings()
    for f in dataclasses.fields(PlainSettings):
        assert getattr(PlainSettings(), f.name) == getattr(defaults, f.name), f.name


@pytest.mark.parametrize("gpu", GPUS)
@pytest.mark.parametrize("settings", SETTINGS, ids=range(len(SETTINGS)))
def test_every_catalog_model_plans_to_the_same_bytes(gpu: str, settings: dict[str, Any]) -> None:
    snapshot = builtin_snapshot()
    plain = plain_settings(settings)
    assert plain is not None
    planned = 0
    for model in snapshot.models:
        body = PlanRequestBody.model_validate({"model": model, "gpu": gpu, **settings})
        answer = OfflinePlanner(snapshot=offline_snapshot(), model=model, gpu=gpu).plan(plain)
        try:
            expected = make_plan(snapshot, body).model_dump_json(indent=2)
        except (
            ServiceError
        ):  # refused (no default context length …): left to the validated path, which says why
            assert answer is None, model
            continue
        assert answer is not None, model
        assert dump_json(answer.data) == expected, model
        planned += 1
    assert planned >= len(snapshot.models) - 3


def _run(capsys: pytest.CaptureFixture[str], options: PlanOptions) -> tuple[int, str, str]:
    code = run_plan(options)
    out, err = capsys.readouterr()
    return code, out, err


PLANS = [
    PlanOptions(model="llama-3.1-8b", gpu="h100-sxm-80gb"),
    PlanOptions(model="llama-3.1-8b", gpu="h100-sxm-80gb", as_json=True),
    PlanOptions(model="llama-3.1-70b", gpu="l4"),  # will not start: suggestions, exit 1
    PlanOptions(model="llama-3.1-70b", gpu="l4", as_json=True),
    PlanOptions(model="qwen3-30b-a3b", gpu="h200", tensor_parallel_size=2, max_model_len="auto"),
    PlanOptions(model="Qwen/Qwen2.5-72B-Instruct-AWQ", gpu="NVIDIA-H100-80GB-HBM3", tensor_parallel_size=2),
    PlanOptions(model="llama-3.1-8b", gpu="h100-sxm-80gb", quantization="fp8", kv_cache_dtype="fp8"),
    PlanOptions(model="llama-3.1-8b", gpu="l4", kv_cache_dtype="fp8", max_model_len="32,768", as_json=True),
    PlanOptions(model="qwen2.5-7b", gpu="a100-sxm4-80gb", quantization="awq", kv_cache_dtype="auto"),
    PlanOptions(model="llama-3.1-70b", gpu="h100-sxm-80gb", tensor_parallel_size=4, pipeline_parallel_size=2),
    PlanOptions(model="llama-3.1-8b", gpu="h100-sxm-80gb", dtype="fp16", gpu_memory_utilization=0.85),
    PlanOptions(
        model="llama-3.1-8b", gpu="h100-sxm-80gb", block_size=32, max_num_seqs=128, enforce_eager=True
    ),
    PlanOptions(model="llama-3.1-8b", gpu="h100-sxm-80gb", prompt_tokens=1000, output_tokens=200),
    PlanOptions(model="llama-3.1-8b", kv_cache_memory_bytes=10 * 1024**3),  # no GPU: the KV budget given
    PlanOptions(
        model="llama-3.1-8b", gpu="h100-sxm-80gb", engine="vllm-0.10-v0", max_num_batched_tokens=4096
    ),
    PlanOptions(model="llama-3.1-8b", device="cpu", kv_cache_memory_bytes=4 * 1024**3, cpu_avx512_bf16=False),
    PlanOptions(
        model="llama-3.1-8b", gpu="h100-sxm-80gb", engine="vllm-9.9"
    ),  # a later release: the newest rules
    PlanOptions(
        model="llama-3.1-8b", gpu="h100-sxm-80gb", max_model_len="10000000"
    ),  # past the model: exit 1
    # refused: each answered by the validated path, with its message (exit 2)
    PlanOptions(model="no-such-model", gpu="h100-sxm-80gb"),
    PlanOptions(model="llama-3.1-8b", gpu="no-such-gpu"),
    PlanOptions(model="llama-3.1-8b", gpu="h100-sxm-80gb", tensor_parallel_size=0),
    PlanOptions(model="llama-3.1-8b", gpu="h100-sxm-80gb", gpu_memory_utilization=1.5),
    PlanOptions(model="llama-3.1-8b", gpu="h100-sxm-80gb", max_model_len="lots"),
    PlanOptions(model="llama-3.1-8b", gpu="h100-sxm-80gb", dtype="float8"),
    PlanOptions(model="llama-3.1-8b", gpu="h100-sxm-80gb", kv_cache_dtype="fp4"),
    PlanOptions(model="llama-3.1-8b"),  # no GPU and no KV budget
    PlanOptions(gpu="h100-sxm-80gb"),  # neither --model nor --hf-config
    PlanOptions(model=" llama-3.1-8b ", gpu="h100-sxm-80gb"),  # stripped by the schema
]


@pytest.mark.parametrize("options", PLANS, ids=range(len(PLANS)))
def test_the_command_prints_and_exits_as_the_validated_path_does(
    options: PlanOptions, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "150")
    answered = _run(capsys, options)
    monkeypatch.setattr(cli_fast, "offline_plan", lambda _: None)
    assert answered == _run(capsys, options)


@pytest.mark.parametrize("options", PLANS[:18], ids=range(18))
def test_plain_plans_are_answered_without_the_schemas(
    options: PlanOptions, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli_fast.offline_plan(options) in (0, 1)
    capsys.readouterr()


@pytest.mark.parametrize("options", PLANS[18:], ids=range(len(PLANS) - 18))
def test_refusals_are_left_to_the_validated_path(
    options: PlanOptions, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli_fast.offline_plan(options) is None
    assert capsys.readouterr() == ("", "")


VALUES: list[dict[str, Any]] = [
    {},
    {"tensor_parallel_size": 8, "pipeline_parallel_size": 2, "max_model_len": 131072},
    {"max_model_len": "auto", "dtype": "bf16", "device": "rocm", "engine": "vllm-0.11"},
    {"gpu_memory_utilization": 1, "kv_cache_memory_bytes": 0, "num_gpu_blocks_override": 100},
    {
        "enable_chunked_prefill": False,
        "async_scheduling": True,
        "enforce_eager": True,
        "cpu_avx512_bf16": False,
    },
    {
        "mamba_cache_dtype": "float32",
        "mamba_ssm_cache_dtype": "auto",
        "quantization": "awq",
        "kv_cache_dtype": "fp8_e4m3",
    },
    {
        "enable_lora": None,
        "speculative_config": None,
        "block_size": 16,
        "max_num_seqs": 1,
        "max_num_batched_tokens": 1,
    },
]
REFUSED_OR_COERCED: list[dict[str, Any]] = [
    {"tensor_parallel_size": "2"},  # coerced by the schema
    {"tensor_parallel_size": True},
    {"tensor_parallel_size": 0},
    {"max_model_len": 4096.0},
    {"max_model_len": "4096"},
    {"gpu_memory_utilization": 0},
    {"gpu_memory_utilization": math.nan},
    {"gpu_memory_utilization": "0.9"},
    {"dtype": "float8"},
    {"device": "tpu"},
    {"enforce_eager": None},
    {"enforce_eager": "yes"},
    {"kv_cache_dtype": "x" * 33},
    {"quantization": "awq\x00"},
    {"engine": " vllm-0.11"},
    {"enable_lora": True},
    {"max_loras": 2},
    {"data_parallel_size": 2},
    {"speculative_config": {"method": "ngram", "num_speculative_tokens": 3}},
    {"no_such_field": 1},
]


@pytest.mark.parametrize("values", VALUES, ids=range(len(VALUES)))
def test_plain_settings_are_the_schema_s(values: dict[str, Any]) -> None:
    plain = plain_settings(values)
    assert plain is not None
    validated = PlanSettings.model_validate(values)
    for f in dataclasses.fields(PlainSettings):
        ours, theirs = getattr(plain, f.name), getattr(validated, f.name)
        assert (ours, type(ours)) == (theirs, type(theirs)), f.name


@pytest.mark.parametrize("values", REFUSED_OR_COERCED, ids=range(len(REFUSED_OR_COERCED)))
def test_values_the_schema_judges_are_left_to_it(values: dict[str, Any]) -> None:
    assert plain_settings(values) is None


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (1e-05, "0.00001"),
        (-1.5e-05, "-0.000015"),
        (1.5e-07, "1.5e-7"),
        (1e16, "1e+16"),
        (0.1, "0.1"),
        (math.inf, "null"),
    ],
)
def test_floats_are_written_as_pydantic_writes_them(value: float, text: str) -> None:
    from pydantic import TypeAdapter

    assert (
        dump_json([value, {"s": 'a"\\\n\x01é'}])
        == TypeAdapter(list[Any]).dump_json([value, {"s": 'a"\\\n\x01é'}], indent=2).decode()
    )
    assert dump_json(value) == text
