"""Properties of the block math that hold for any architecture (Hypothesis)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from service.core.errors import InvalidSpec
from service.core.planner import PlanRequest, plan
from service.core.planner.pipeline import fits
from service.core.specs import GpuSpec, LayerType, ModelSpec
from service.core.units import GIB


@st.composite
def models(draw: st.DrawFn) -> ModelSpec:
    layers = draw(st.integers(1, 48))
    heads = draw(st.sampled_from([4, 8, 16, 32]))
    kv = draw(st.sampled_from([h for h in (1, 2, 4, 8, 16, 32) if h <= heads]))
    head_dim = draw(st.sampled_from([64, 96, 128, 256]))
    window = draw(st.one_of(st.none(), st.sampled_from([128, 512, 4096])))
    kinds: tuple[LayerType, ...] = ()
    if window is not None:
        kinds = tuple(
            draw(
                st.lists(
                    st.sampled_from([LayerType.FULL, LayerType.SLIDING]), min_size=layers, max_size=layers
                )
            )
        )
    return ModelSpec(
        num_hidden_layers=layers,
        hidden_size=heads * head_dim,
        num_attention_heads=heads,
        num_key_value_heads=kv,
        head_dim=head_dim,
        vocab_size=32_000,
        num_parameters=draw(st.integers(10**6, 10**10)),
        max_model_len=131_072,
        layer_types=kinds,
        sliding_window=window if LayerType.SLIDING in kinds else None,
    )


engines = st.sampled_from(
    ["ideal", "vllm-0.6", "vllm-0.10-v0", "vllm-0.10", "vllm-0.15", "vllm-0.19", "vllm-0.21", "vllm-0.33"]
)
# Releases before 0.11 have no --kv-cache-memory-bytes: their budget is given as a block count instead.
WITHOUT_KV_BYTES = {"vllm-0.6", "vllm-0.10-v0", "vllm-0.10"}
budgets = st.integers(0, 80 * GIB)


@settings(max_examples=150, deadline=None)
@given(model=models(), engine=engines, kv_bytes=budgets, length=st.integers(1, 131_072))
def test_blocks_and_capacity_are_never_negative(
    model: ModelSpec, engine: str, kv_bytes: int, length: int
) -> None:
    gpu = GpuSpec(name="g", memory_bytes=80 * GIB)
    kwargs = (
        {"num_gpu_blocks_override": max(1, kv_bytes // GIB)}
        if engine in WITHOUT_KV_BYTES
        else {"kv_cache_memory_bytes": kv_bytes}
    )
    kv = plan(
        PlanRequest(model=model, gpu=gpu, engine=engine, max_model_len=length, block_size=16, **kwargs)
    ).kv_cache  # type: ignore[arg-type]
    assert kv.num_gpu_blocks >= 0
    assert kv.kv_cache_size_tokens >= 0
    assert kv.max_concurrency >= 0


@settings(max_examples=150, deadline=None)
@given(model=models(), engine=engines.filter(lambda e: e not in WITHOUT_KV_BYTES), a=budgets, b=budgets)
def test_more_memory_never_means_fewer_blocks(model: ModelSpec, engine: str, a: int, b: int) -> None:
    low, high = sorted((a, b))
    blocks = [
        plan(
            PlanRequest(model=model, engine=engine, kv_cache_memory_bytes=m, block_size=16)
        ).kv_cache.num_gpu_blocks
        for m in (low, high)
    ]
    assert blocks[0] <= blocks[1]


@settings(max_examples=150, deadline=None)
@given(
    model=models(),
    engine=engines.filter(lambda e: e not in WITHOUT_KV_BYTES),
    kv_bytes=budgets,
    a=st.integers(1, 131_072),
    b=st.integers(1, 131_072),
)
def test_longer_context_never_means_more_concurrency(
    model: ModelSpec, engine: str, kv_bytes: int, a: int, b: int
) -> None:
    short, long = sorted((a, b))
    conc = [
        plan(
            PlanRequest(
                model=model, engine=engine, kv_cache_memory_bytes=kv_bytes, block_size=16, max_model_len=n
            )
        ).kv_cache.max_concurrency
        for n in (short, long)
    ]
    assert conc[1] <= conc[0]


@settings(max_examples=100, deadline=None)
@given(
    model=models(), engine=st.sampled_from(["ideal", "vllm-0.33"]), memory=st.integers(20 * GIB, 200 * GIB)
)
def test_smaller_kv_dtype_never_means_fewer_blocks(model: ModelSpec, engine: str, memory: int) -> None:
    gpu = GpuSpec(name="g", memory_bytes=memory)
    counts = [
        plan(
            PlanRequest(model=model, gpu=gpu, engine=engine, max_model_len=4096, kv_cache_dtype=dtype)
        ).kv_cache.num_gpu_blocks
        for dtype in ("float32", "bfloat16", "fp8")
    ]
    assert counts[0] <= counts[1] <= counts[2]


@settings(max_examples=100, deadline=None)
@given(model=models(), memory=st.integers(20 * GIB, 200 * GIB), util=st.floats(0.5, 1.0))
def test_predictions_move_with_the_gpu_size(model: ModelSpec, memory: int, util: float) -> None:
    small = plan(
        PlanRequest(
            model=model,
            gpu=GpuSpec(name="s", memory_bytes=memory),
            gpu_memory_utilization=util,
            max_model_len=4096,
        )
    )
    large = plan(
        PlanRequest(
            model=model,
            gpu=GpuSpec(name="l", memory_bytes=memory + 8 * GIB),
            gpu_memory_utilization=util,
            max_model_len=4096,
        )
    )
    assert small.kv_cache.num_gpu_blocks <= large.kv_cache.num_gpu_blocks
    assert (
        small.kv_cache.num_gpu_blocks_low
        <= small.kv_cache.num_gpu_blocks
        <= small.kv_cache.num_gpu_blocks_high
    )


@settings(max_examples=150, deadline=None)
@given(
    model=models(),
    engine=engines,
    memory=st.integers(8 * GIB, 200 * GIB),
    length=st.integers(1, 131_072),
    util=st.floats(0.5, 0.95),
)
def test_the_verdict_only_plan_agrees_with_the_plan(
    model: ModelSpec, engine: str, memory: int, length: int, util: float
) -> None:
    """Suggestions re-plan through ``fits``; it must answer what the whole plan answers, errors included."""
    request = PlanRequest(
        model=model,
        gpu=GpuSpec(name="g", memory_bytes=memory),
        engine=engine,
        max_model_len=length,
        gpu_memory_utilization=util,
        suggest=False,
        detail=False,
    )
    try:
        expected: bool | str = plan(request).fits
    except InvalidSpec as exc:
        expected = f"{exc.field}: {exc.message}"
    try:
        got: bool | str = fits(request)
    except InvalidSpec as exc:
        got = f"{exc.field}: {exc.message}"
    assert got == expected
