"""vLLM 0.34's capacity rules against 0.33's, each expectation from the 0.34.0 wheel's source.

* ``vllm/config/cache.py``: ``CacheConfig.DEFAULT_BLOCK_SIZE`` is 64 (16 in 0.33.0); GPU attention backends whose
  kernel blocks are multiples of 16 keep it (``AttentionBackend.get_preferred_block_size``).
* ``vllm/config/vllm.py::_resolve_extensible_kv_cache``: the extensible KV cache is on by default on CUDA and ROCm,
  off with ``kv_cache_memory_bytes`` or ``num_gpu_blocks_override``; ``CacheConfig.resolved_gpu_memory_utilization``
  is then 1.0 when ``gpu_memory_utilization`` is unset (0.92 otherwise).
* ``vllm/v1/worker/extensible_kv_cache.py::measure_kv_cache_bytes``: ``min(requested − non_kv_used, headroom −
  margin) − max(transient peak, torch growth)``, ``margin = max(KV_CACHE_MARGIN_FLOOR_BYTES, 0.75 × peak)``, the
  floor ``(3 if ROCm else 1) << 30``; ``GPUModelRunner.profile_cudagraph_memory`` returns 0 under this cache, so
  the transient peak is the profiled activation peak and the captured graphs are in ``non_kv_used``.
* ``vllm/config/vllm.py::_split_cudagraph_capture_sizes`` and ``vllm/config/compilation.py``: on SM 10.x the
  prefill graphs default to ``prefill_cudagraph_capture_grid(min(8192, max_num_batched_tokens))`` and the decode
  graphs to ``decode_cudagraph_capture_grid(max_num_seqs)``; their docstrings give the grids' shapes and sizes.
"""

from __future__ import annotations

import itertools
import math

import pytest

from service.catalog.builtin import builtin_snapshot
from service.core.engines import DEFAULT_ENGINE, NEWEST_VERSION, parse_engine, resolve_engine
from service.core.overheads import blackwell_capture_grids, cudagraph_capture_sizes
from service.core.planner import PlanRequest, plan
from service.core.planner.settings import resolve_settings
from service.core.specs import GpuSpec
from service.core.units import GIB
from tests.core.model_cards import LLAMA_31_8B

H100 = GpuSpec(name="H100", memory_bytes=80 * GIB, compute_capability="9.0")
A100 = GpuSpec(name="A100", memory_bytes=80 * GIB, compute_capability="8.0")
B200 = GpuSpec(name="B200", memory_bytes=180 * GIB, compute_capability="10.0")
MI300X = GpuSpec(name="MI300X", memory_bytes=192 * GIB, compute_capability="gfx942")


def _plan(engine: str | None, gpu: GpuSpec = H100, **changes: object):  # type: ignore[no-untyped-def]
    values: dict[str, object] = {"max_model_len": 8192, "detail": True, **changes}
    return plan(PlanRequest(model=LLAMA_31_8B, gpu=gpu, engine=engine, **values))  # type: ignore[arg-type]


def test_0_34_is_the_newest_release_and_the_default() -> None:
    assert NEWEST_VERSION == (0, 34)
    assert DEFAULT_ENGINE == "vllm-0.34"
    for text in ("vllm-0.34", "0.34.0", "v0.34.0", None):
        name, version = parse_engine(text)
        assert name == "vllm-0.34" and version == (0, 34)
        # The admission policy warns "newer than the releases kvcap models" only for version > NEWEST_VERSION.
        assert version is not None and not version > NEWEST_VERSION
    assert parse_engine("vllm-0.35")[1] > NEWEST_VERSION  # the next release still warns
    assert resolve_engine("vllm-0.34").release == (0, 34, 99)
    assert resolve_engine("vllm-0.35").extensible_kv_cache  # newer releases take the newest rules


def test_0_34_flags_and_0_33_flags() -> None:
    old, new = resolve_engine("vllm-0.33"), resolve_engine("vllm-0.34")
    assert (old.gpu_block_size, new.gpu_block_size) == (16, 64)
    assert (old.extensible_kv_cache, new.extensible_kv_cache) == (False, True)
    assert (old.blackwell_capture_grids, new.blackwell_capture_grids) == (False, True)
    # The estimate-based default is still 0.92 (``CacheConfig.DEFAULT_GPU_MEMORY_UTILIZATION``).
    assert old.default_gpu_memory_utilization == new.default_gpu_memory_utilization == 0.92
    assert not resolve_engine("ideal").extensible_kv_cache and resolve_engine("ideal").gpu_block_size == 16


@pytest.mark.parametrize(
    ("model", "gpu", "old", "new"),
    [
        ("llama-3.1-8b", H100, 16, 64),  # FlashAttention: MultipleOf(16) takes the default
        ("deepseek-v2-lite", A100, 16, 64),  # Triton MLA: MultipleOf(16)
        ("deepseek-v2-lite", H100, 64, 64),  # FlashMLA: [64]
        ("deepseek-v2-lite", B200, 128, 128),  # CUTLASS MLA: [128]
    ],
)
def test_default_gpu_block_size(model: str, gpu: GpuSpec, old: int, new: int) -> None:
    spec = builtin_snapshot().find_model(model)
    assert spec is not None
    sizes = [
        resolve_settings(PlanRequest(model=spec.spec, gpu=gpu, engine=e, max_model_len=4096)).block_size
        for e in ("vllm-0.33", "vllm-0.34")
    ]
    assert sizes == [old, new]


def test_cpu_keeps_its_block_and_its_utilisation() -> None:
    # The CPU platform picks its own block (128, ``CpuPlatform.update_block_size_for_backend``) and is not CUDA/ROCm.
    host = GpuSpec(name="host", memory_bytes=64 * GIB)
    request = PlanRequest(model=LLAMA_31_8B, gpu=host, device="cpu", engine="vllm-0.34", max_model_len=4096)
    settings = resolve_settings(request)
    assert settings.block_size == 128 and not settings.extensible_kv_cache
    assert (
        settings.gpu_memory_utilization
        == resolve_settings(
            PlanRequest(model=LLAMA_31_8B, gpu=host, device="cpu", engine="vllm-0.33", max_model_len=4096)
        ).gpu_memory_utilization
    )


def _measured(
    total: int, budget: int, weights: int, non_torch: int, graphs: int, peak: int, floor: int
) -> int:
    """``measure_kv_cache_bytes`` with the start-up free memory taken as the GPU's total (no CUDA context)."""
    init_free = total
    free_after = init_free - (weights + non_torch + graphs)  # nothing committed yet in this accounting
    non_kv_used = init_free - free_after
    headroom = free_after
    margin = max(floor, int(peak * 0.75))
    return min(budget - non_kv_used, headroom - margin) - peak


def test_extensible_kv_cache_sizes_from_the_device_not_the_utilisation() -> None:
    old, new = _plan("vllm-0.33"), _plan("vllm-0.34")
    assert old.settings.gpu_memory_utilization == 0.92 and new.settings.gpu_memory_utilization == 1.0
    total = 80 * GIB
    m = new.memory
    assert m.budget_bytes == math.ceil(total * 1.0)
    expected = _measured(
        total, m.budget_bytes, m.weights_bytes, m.non_torch_bytes, m.cudagraph_bytes, m.activation_bytes, GIB
    )
    assert m.kv_cache_bytes == expected
    # 0.33: ceil(total × 0.92) − weights − activation − non-torch − the CUDA-graph estimate.
    o = old.memory
    assert o.kv_cache_bytes == math.ceil(total * 0.92) - (
        o.weights_bytes + o.activation_bytes + o.non_torch_bytes + o.cudagraph_bytes
    )
    # The same estimates, so the difference is the 8 % of the GPU 0.92 held back less the sizing margin.
    assert (o.weights_bytes, o.activation_bytes, o.non_torch_bytes, o.cudagraph_bytes) == (
        m.weights_bytes,
        m.activation_bytes,
        m.non_torch_bytes,
        m.cudagraph_bytes,
    )
    margin = max(GIB, int(0.75 * m.activation_bytes))
    assert m.kv_cache_bytes - o.kv_cache_bytes == total - math.ceil(total * 0.92) - margin
    # Blocks of 64 tokens: page = 64 × 2 (K, V) × 8 heads × 128 × 2 B, one per layer.
    page = 64 * 2 * 8 * 128 * 2
    assert new.kv_cache.block_size == 64 and new.kv_cache.page_size_bytes == page
    assert new.kv_cache.num_gpu_blocks == m.kv_cache_bytes // page // 32
    assert [t.name for t in new.breakdown if t.name == "sizing_margin"] == ["sizing_margin"]
    assert next(t.value for t in new.breakdown if t.name == "sizing_margin") == margin


def test_an_explicit_utilisation_below_one_binds_as_before() -> None:
    # min(ceil(total × 0.9) − non-KV, total − non-KV − margin): the budget binds when 10 % of 80 GiB > margin,
    # so 0.34 keeps 0.33's bytes (only the block size differs).
    old, new = _plan("vllm-0.33", gpu_memory_utilization=0.9), _plan("vllm-0.34", gpu_memory_utilization=0.9)
    assert new.memory.kv_cache_bytes == old.memory.kv_cache_bytes
    assert math.ceil(80 * GIB * 0.9) + max(GIB, int(0.75 * new.memory.activation_bytes)) < 80 * GIB
    # Close to 1 the headroom binds instead.
    near = _plan("vllm-0.34", gpu_memory_utilization=0.995)
    m = near.memory
    assert m.kv_cache_bytes == _measured(
        80 * GIB,
        math.ceil(80 * GIB * 0.995),
        m.weights_bytes,
        m.non_torch_bytes,
        m.cudagraph_bytes,
        m.activation_bytes,
        GIB,
    )
    assert m.kv_cache_bytes < math.ceil(80 * GIB * 0.995) - (
        m.weights_bytes + m.non_torch_bytes + m.cudagraph_bytes + m.activation_bytes
    )


@pytest.mark.parametrize(
    "changes",
    [{"kv_cache_memory_bytes": 20 * GIB}, {"num_gpu_blocks_override": 1000}],
    ids=["bytes", "blocks"],
)
def test_a_given_kv_budget_turns_the_extensible_cache_off(changes: dict[str, object]) -> None:
    settings = resolve_settings(
        PlanRequest(model=LLAMA_31_8B, gpu=H100, engine="vllm-0.34", max_model_len=8192, **changes)  # type: ignore[arg-type]
    )
    assert not settings.extensible_kv_cache
    assert settings.gpu_memory_utilization == 0.92  # the estimate-based default


def test_rocm_keeps_a_three_gib_margin_floor() -> None:
    # MI300X, Llama-8B: 0.75 × the activation peak is under 3 GiB, so the ROCm floor is the margin.
    new = _plan("vllm-0.34", gpu=MI300X)
    m = new.memory
    assert 0.75 * m.activation_bytes < 3 * GIB
    assert m.kv_cache_bytes == _measured(
        192 * GIB,
        192 * GIB,
        m.weights_bytes,
        m.non_torch_bytes,
        m.cudagraph_bytes,
        m.activation_bytes,
        3 * GIB,
    )


def test_blackwell_capture_grids_follow_the_0_34_docstrings() -> None:
    prefill, decode = blackwell_capture_grids(1024, 16384)
    # prefill_cudagraph_capture_grid: "1, 2, 4, every 8 up to 64, four sizes per doubling up to 1024 ... 54 sizes
    # at 8192".
    assert len(prefill) == 54 and prefill[-1] == 8192
    assert prefill[:11] == (1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64)
    assert prefill[11:15] == (80, 96, 112, 128)
    assert all(b - a in (256, 512) for a, b in itertools.pairwise(prefill) if a >= 1024)
    # decode_cudagraph_capture_grid: "every count up to 6, then a step of ... (2 from 8, 4 from 16, 8 from 48, 16
    # from 128, 32 from 352): 64 sizes at 1024".
    assert len(decode) == 64 and decode[-1] == 1024
    assert decode[:8] == [1, 2, 3, 4, 5, 6, 8, 10]
    assert decode[decode.index(16) + 1] == 20 and decode[decode.index(48) + 1] == 56
    assert decode[decode.index(128) + 1] == 144 and decode[decode.index(352) + 1] == 384
    # A batch cap below the grid's next size: the first size above it is captured at the cap.
    _, capped = blackwell_capture_grids(100, 16384)
    assert capped[-1] == 100 and capped[-2] < 100


def test_blackwell_cudagraph_estimate_uses_the_grids_from_0_34_only() -> None:
    old, new = _plan("vllm-0.33", gpu=B200), _plan("vllm-0.34", gpu=B200)
    old_graphs = next(t for t in old.breakdown if t.name == "cudagraph")
    new_graphs = next(t for t in new.breakdown if t.name == "cudagraph")
    # 0.33: the shared token sizes up to min(2 × 1024, 1024) = 1024 (83 of them), FULL ones up to 1024 seqs.
    assert (
        len(
            cudagraph_capture_sizes(
                max_num_seqs=1024, max_num_batched_tokens=16384, version=(0, 33), blackwell=True
            )
        )
        == 83
    )
    assert "83 piecewise sizes up to 1024, 83 full" in old_graphs.formula
    assert "54 piecewise sizes up to 8192, 64 full" in new_graphs.formula
    # Hopper keeps the shared sizes in both releases.
    h_old, h_new = _plan("vllm-0.33"), _plan("vllm-0.34")
    assert h_old.memory.cudagraph_bytes == h_new.memory.cudagraph_bytes


def test_no_utilisation_suggestion_below_the_extensible_default() -> None:
    l4 = GpuSpec(name="L4", memory_bytes=24_152_899_584, compute_capability="8.9")

    def suggested(engine: str, length: int) -> set[str]:
        answer = plan(PlanRequest(model=LLAMA_31_8B, gpu=l4, engine=engine, max_model_len=length))
        assert not answer.fits
        return {s.setting for s in answer.suggestions}

    # 0.33 at 0.92: a length that 0.95 would hold is offered --gpu-memory-utilization 0.95.
    assert "gpu_memory_utilization" in suggested("vllm-0.33", 38_000)
    # 0.34 already runs at 1.0 (the extensible KV cache's unset utilisation): 0.95 would lower it.
    assert "gpu_memory_utilization" not in suggested("vllm-0.34", 45_000)
    assert plan(PlanRequest(model=LLAMA_31_8B, gpu=l4, engine="vllm-0.34", max_model_len=38_000)).fits


def _refusal(engine: str, length: int) -> tuple[str, object]:
    l4 = GpuSpec(name="L4", memory_bytes=24_152_899_584, compute_capability="8.9")
    answer = plan(PlanRequest(model=LLAMA_31_8B, gpu=l4, engine=engine, max_model_len=length, detail=True))
    text = next(m.text for m in answer.messages if m.code == "max_model_len_too_large")
    return text, answer


def test_refusal_before_warm_up_reads_the_tentative_capacity() -> None:
    # get_kv_cache_configs checks first against requested − non-KV with no CUDA-graph estimate (0 under the
    # extensible cache), less the null block (0.30+): here 16 GiB do not fit in it.
    text, answer = _refusal("vllm-0.34", 131072)
    m, kv = answer.memory, answer.kv_cache  # type: ignore[attr-defined]
    tentative = m.total_bytes - m.weights_bytes - m.non_torch_bytes - m.activation_bytes - kv.bytes_per_block
    assert f"the available KV cache memory ({tentative / GIB:.2f} GiB)" in text
    assert (
        "The extensible KV cache already takes all device memory left after the model and its activations; "
        "decrease `max_model_len` or `max_num_seqs`, or the model needs a device with more memory. "
        "Decreasing `max_model_len` also reduces what is needed." in text
    )
    assert "CUDA graphs" not in text and "Try increasing" not in text


def test_refusal_after_warm_up_reads_the_measured_blocks() -> None:
    # Longer than the measured cache holds, shorter than the tentative one: shrink_kv_cache_configs refuses it
    # against (num_blocks − 1) × bytes per block, with the after-warm-up hint.
    text, answer = _refusal("vllm-0.34", 48_000)
    kv = answer.kv_cache  # type: ignore[attr-defined]
    measured = (kv.num_gpu_blocks - 1) * kv.bytes_per_block
    assert f"the available KV cache memory ({measured / GIB:.2f} GiB)" in text
    assert f"the estimated maximum model length is {answer.max_model_len_that_fits}." in text  # type: ignore[attr-defined]
    assert "left after the model, its activations, CUDA graphs and warmup" in text
    assert "CUDA graphs take less with fewer or smaller capture sizes in the compilation config." in text
    # 0.33's wording for the same refusal.
    old, _ = _refusal("vllm-0.33", 48_000)
    assert "Try increasing `gpu_memory_utilization` or decreasing `max_model_len`" in old


def test_no_memory_for_blocks_names_the_extensible_remedy() -> None:
    def refusal(engine: str, gib: float) -> tuple[str, object]:
        gpu = GpuSpec(name="small", memory_bytes=int(gib * GIB), compute_capability="8.9")
        answer = plan(PlanRequest(model=LLAMA_31_8B, gpu=gpu, engine=engine, max_model_len=4096))
        return next(m.text for m in answer.messages if m.code == "no_memory_for_blocks"), answer

    # 15.5 GiB: Llama-8B's 14.99 GiB of weights, non-torch and the activation peak leave nothing before warm-up.
    before, answer = refusal("vllm-0.34", 15.5)
    m = answer.memory  # type: ignore[attr-defined]
    assert m.total_bytes - m.weights_bytes - m.non_torch_bytes - m.activation_bytes <= 0
    assert before.startswith(
        "No available memory for the cache blocks. The extensible KV cache already takes all device memory left "
        "after the model and its activations;"
    )
    # 16 GiB: something before warm-up, nothing once the graphs and the margin are taken.
    after, answer = refusal("vllm-0.34", 16)
    m = answer.memory  # type: ignore[attr-defined]
    assert m.total_bytes - m.weights_bytes - m.non_torch_bytes - m.activation_bytes > 0
    assert "left after the model, its activations, CUDA graphs and warmup" in after
    old, _ = refusal("vllm-0.33", 16)
    assert "Try increasing `gpu_memory_utilization`" in old


def test_the_low_end_allows_a_gib_held_before_the_start_snapshot(monkeypatch: pytest.MonkeyPatch) -> None:
    # The central estimate takes the free memory at start as the GPU's total; the band's low end takes
    # START_SNAPSHOT_BAND_BYTES (1 GiB) less: the CUDA context and the like, not modelled.
    from service.core.planner import memory

    def low_end(name: str, band: int, **changes: object) -> tuple[int, int]:
        monkeypatch.setattr(memory, "START_SNAPSHOT_BAND_BYTES", band)
        gpu = GpuSpec(name=name, memory_bytes=80 * GIB, compute_capability="9.0")  # a new key: nothing cached
        m = _plan("vllm-0.34", gpu=gpu, **changes).memory
        return m.kv_cache_bytes, m.kv_cache_bytes_low

    central, low = low_end("H100-band", GIB)
    same, without = low_end("H100-no-band", 0)
    assert central == same and without - low == GIB  # the headroom term binds: utilisation 1.0
    # Under an explicit utilisation the budget term binds and the allowance does not come into it.
    _, bound = low_end("H100-0.9-band", GIB, gpu_memory_utilization=0.9)
    _, bound_without = low_end("H100-0.9-no-band", 0, gpu_memory_utilization=0.9)
    assert bound == bound_without
