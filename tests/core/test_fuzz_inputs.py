"""Property tests on the core's untrusted inputs: a config.json and plan settings from anywhere.

Whatever the numbers — huge, negative, fractional, ``inf``, ``NaN``, strings, lists, nested objects — the core
either answers or raises ``InvalidSpec`` naming a field; never ``OverflowError``, ``ValueError``,
``TypeError`` or anything else a web edge would turn into a 500. Time is bounded by Hypothesis' per-example
deadline (generous: the machine is shared; a plan takes milliseconds once the inputs are in range).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from service.catalog.builtin import builtin_snapshot
from service.core.errors import InvalidSpec
from service.core.hf_config import parse_hf_config
from service.core.planner import PlanRequest, plan
from service.core.recommend import Workload, sweep
from service.core.specs import GpuSpec, ModelSpec

BASE: dict[str, Any] = {
    "model_type": "llama",
    "num_hidden_layers": 32,
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "intermediate_size": 14336,
    "max_position_embeddings": 131072,
    "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8192},
    "torch_dtype": "bfloat16",
}
KEYS = [
    *BASE,
    "head_dim",
    "sliding_window",
    "sliding_window_pattern",
    "layer_types",
    "kv_lora_rank",
    "qk_rope_head_dim",
    "num_local_experts",
    "num_experts_per_tok",
    "moe_intermediate_size",
    "attn_layer_period",
    "attn_layer_offset",
    "mamba_d_state",
    "mamba_d_conv",
    "mamba_expand",
    "full_attention_interval",
    "linear_num_value_heads",
    "quantization_config",
    "text_config",
    "num_kv_shared_layers",
    "first_k_dense_replace",
]

numbers = st.one_of(
    st.integers(min_value=-(10**6), max_value=10**6),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.integers(min_value=10**300, max_value=10**400),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, 1, -1, 2**31, 2**63, 10**7, 1e309, float("nan"), 0.5, True, False]),
)
json_values = st.recursive(
    st.one_of(numbers, st.none(), st.text(max_size=8)),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
configs = st.dictionaries(st.sampled_from(KEYS), json_values, max_size=6).map(lambda patch: BASE | patch)

T = TypeVar("T")


def outcome(call: Callable[[], T]) -> tuple[T | None, InvalidSpec | None]:
    """The result, or the ``InvalidSpec`` raised; any other exception propagates and fails the test."""
    try:
        return call(), None
    except InvalidSpec as exc:
        return None, exc


DEADLINE = timedelta(seconds=2)
FUZZ = settings(
    max_examples=300, deadline=DEADLINE, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)


@FUZZ
@given(config=configs)
# The findings of the attacker-minded run, always tried: 1e309 (infinity), NaN, a 400-digit integer, ten
# million layers, an infinite RoPE factor, and a list where an object belongs.
@example(config=BASE | {"hidden_size": float("inf")})
@example(config=BASE | {"num_attention_heads": float("nan")})
@example(config=BASE | {"vocab_size": 10**400})
@example(config=BASE | {"num_hidden_layers": 10_000_000})
@example(config=BASE | {"rope_scaling": {"rope_type": "linear", "factor": float("inf")}})
@example(config=BASE | {"quantization_config": {"quant_method": "compressed-tensors", "config_groups": [1]}})
def test_parse_hf_config_answers_or_names_the_key_for_any_json(config: dict[str, Any]) -> None:
    spec, error = outcome(lambda: parse_hf_config(config))
    if error is not None:
        assert error.field, error
        return
    assert isinstance(spec, ModelSpec)
    assert 1 <= spec.num_hidden_layers <= 1_000


@FUZZ
@given(config=configs)
def test_a_model_parsed_from_any_config_plans_or_names_the_field(config: dict[str, Any]) -> None:
    spec, _ = outcome(lambda: parse_hf_config(config))
    if spec is None:
        return
    gpu = GpuSpec(name="h100", memory_bytes=80 * 2**30)
    length = min(spec.max_model_len or 4096, 1 << 20)
    _, error = outcome(lambda: plan(PlanRequest(model=spec, gpu=gpu, max_model_len=length)))
    assert error is None or error.field, error


SPEC = builtin_snapshot().models["llama-3.1-8b"].spec
settings_values = st.one_of(
    st.none(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, 1, 2**31 - 1, 2**62, 10**7, 33_554_432, 33_554_433]),
)


@FUZZ
@given(
    tp=st.integers(min_value=-5, max_value=5000),
    pp=st.integers(min_value=-5, max_value=5000),
    max_model_len=settings_values,
    block_size=settings_values,
    max_num_seqs=settings_values,
    max_num_batched_tokens=settings_values,
    kv_cache_memory_bytes=settings_values,
    num_gpu_blocks_override=settings_values,
    utilization=st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True)),
    prompt_tokens=settings_values,
)
def test_plan_with_extreme_settings_answers_or_names_the_field(
    tp: int,
    pp: int,
    max_model_len: int | None,
    block_size: int | None,
    max_num_seqs: int | None,
    max_num_batched_tokens: int | None,
    kv_cache_memory_bytes: int | None,
    num_gpu_blocks_override: int | None,
    utilization: float | None,
    prompt_tokens: int | None,
) -> None:
    request = PlanRequest(
        model=SPEC,
        gpu=GpuSpec(name="h100", memory_bytes=80 * 2**30),
        tensor_parallel_size=tp,
        pipeline_parallel_size=pp,
        max_model_len=max_model_len,
        block_size=block_size,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        kv_cache_memory_bytes=kv_cache_memory_bytes,
        num_gpu_blocks_override=num_gpu_blocks_override,
        gpu_memory_utilization=utilization,
        prompt_tokens=prompt_tokens,
        output_tokens=prompt_tokens,
    )
    result, error = outcome(lambda: plan(request))
    if error is not None:
        assert error.field, error
        return
    assert result is not None and result.kv_cache.num_gpu_blocks >= 0


@settings(max_examples=40, deadline=DEADLINE * 2, derandomize=True)
@given(
    tps=st.lists(st.integers(min_value=1, max_value=1024), max_size=16),
    kv=st.lists(st.sampled_from(["auto", "fp8", "bfloat16", "fp8_e5m2"]), min_size=1, max_size=16),
    quant=st.lists(st.sampled_from([None, "fp8", "awq", "gptq"]), min_size=1, max_size=16),
)
def test_a_sweep_plans_a_bounded_number_of_options(
    tps: list[int], kv: list[str], quant: list[str | None]
) -> None:
    gpus = [g.spec for g in builtin_snapshot().gpus.values()]
    options, error = outcome(
        lambda: sweep(
            PlanRequest(model=SPEC),
            Workload(concurrent_users=64),
            gpus,
            tensor_parallel_sizes=tps or None,
            kv_cache_dtypes=kv,
            quantizations=quant,
        )
    )
    if error is not None:
        assert error.field in ("gpus", "tensor_parallel_sizes", "kv_cache_dtypes", "quantizations")
        return
    assert options is not None and len(options) <= 1_536
