"""Block counts against what a real vLLM reported (tests/data/vllm_recorded: vLLM 0.32.0, CPU build).

Each case holds the config.json, the CLI flags and the KV budget vLLM ran with, and the numbers vLLM logged and
exported in ``vllm:cache_config_info``. With the budget given, kvcap's numbers must be equal, not close.
Re-record with ``tests/e2e/record_vllm_cases.py``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from service.core.hf_config import parse_hf_config
from service.core.planner import PlanRequest, plan
from service.core.planner.features import LoraConfig, ServingFeatures, SpeculativeConfig

RECORDS = sorted((Path(__file__).resolve().parents[1] / "data" / "vllm_recorded").glob("*.json"))
CASES = [p for p in RECORDS if json.loads(p.read_text()).get("started", True)]
REFUSED = [p for p in RECORDS if p not in CASES]


def _flag(args: list[str], flag: str) -> str | None:
    return args[args.index(flag) + 1] if flag in args else None


def _int_flag(args: list[str], flag: str) -> int | None:
    value = _flag(args, flag)
    return int(value) if value is not None else None


def features_for(case: dict[str, Any]) -> ServingFeatures | None:
    """``--speculative-config`` (the draft's config.json is in the record) and ``--enable-lora`` flags."""
    args = case["args"]
    speculative = None
    raw = _flag(args, "--speculative-config")
    if raw is not None:
        config = json.loads(raw)
        draft = parse_hf_config(case["draft_hf_config"]) if "draft_hf_config" in case else None
        speculative = SpeculativeConfig(
            method=config.get("method") or "draft_model",
            num_speculative_tokens=config.get("num_speculative_tokens"),
            draft=draft,
        )
    lora = None
    if "--enable-lora" in args:
        lora = LoraConfig(
            max_loras=_int_flag(args, "--max-loras") or 1,
            max_lora_rank=_int_flag(args, "--max-lora-rank") or 16,
        )
    if speculative is None and lora is None:
        return None
    return ServingFeatures(speculative=speculative, lora=lora)


def request_for(case: dict[str, Any]) -> PlanRequest:
    args = case["args"]
    major, minor = case["vllm_version"].split(".")[:2]
    return PlanRequest(
        model=parse_hf_config(case["hf_config"]),
        engine=f"vllm-{major}.{minor}",
        device=case["device"],
        kv_cache_memory_bytes=case["kv_cache_memory_bytes"],
        max_model_len=case["max_model_len"],
        kv_cache_dtype=_flag(args, "--kv-cache-dtype"),
        dtype=_flag(args, "--dtype"),
        block_size=_int_flag(args, "--block-size"),
        tensor_parallel_size=_int_flag(args, "--tensor-parallel-size") or 1,
        max_num_batched_tokens=_int_flag(args, "--max-num-batched-tokens"),
        max_num_seqs=_int_flag(args, "--max-num-seqs"),
        enable_chunked_prefill=False if "--no-enable-chunked-prefill" in args else None,
        disable_sliding_window="--disable-sliding-window" in args,
        enable_prefix_caching=False if "--no-enable-prefix-caching" in args else None,
        mamba_cache_dtype=_flag(args, "--mamba-cache-dtype"),
        mamba_ssm_cache_dtype=_flag(args, "--mamba-ssm-cache-dtype"),
        num_gpu_blocks_override=_int_flag(args, "--num-gpu-blocks-override"),
        cpu_avx512_bf16=case.get("host", {}).get("avx512_bf16", True),
        features=features_for(case),
    )


def test_there_are_recorded_cases_for_every_layer_kind() -> None:
    ids = {path.stem for path in CASES}
    assert len(CASES) >= 25
    for needed in (
        "llama-mha",
        "llama-gqa",
        "llama-mqa",
        "falcon-mqa",
        "mistral-sliding",
        "gemma3-hybrid-6l",
        "deepseek-v2-mla",
        "qwen3-next-hybrid",
        "granite-hybrid-mamba2",
        "nemotron-h-hybrid",
        "llama4-chunked",
        "gemma3n-kv-shared",
        "llama-gqa-lora",
        "llama-gqa-ngram",
        "llama-gqa-draft",
        "llama-gqa-eagle",
        "deepseek-v3-mtp",
        "granite-hybrid-ngram",
        "qwen3-moe-sliding",
        "qwen2-moe-sliding",
        "cohere2-window-edge",
        "gpt-bigcode-mqa",
        "olmo3-interleaved",
        "exaone4-default-pattern",
        "dbrx-moe",
        "minicpm3-mla-like",
        "falcon-h1-parallel-hybrid",
        "granite-hybrid-no-prefix-caching",
        "llama-gqa-maxlen-null-block-edge",
        "cohere-command-r-v1",
        "gpt2-mha",
        "mamba1-pure",
        "falcon-mamba-pure",
        "qwen2-head-dim-ignored",
        "opt-head-dim-ignored",
        "mixtral-head-dim-64",
        "persimmon-transformers-fallback",
        "granite-hybrid-mamba-cache-fp32",
        "gemma4-hybrid-6l",
        "gemma4-k-eq-v",
        "granite-hybrid-head-dim-ignored",
        "granite-hybrid-ssm-bf16",
        "falcon-h1-ssm-bf16",
        "laguna-default-full",
        "smollm3-nope-sliding",
        "llama-gqa-blocks-override",
    ):
        assert needed in ids
    assert {p.stem for p in REFUSED} >= {
        "llama-gqa-block16-refused",
        "llama-gqa-maxlen-refused",
        "qwen2-sliding-partial-refused",
        "qwen3-sliding-partial-refused",
        "llama-hd80-fp8-refused",
        "llama-gqa-seqs-over-batched-refused",
        "llama-gqa-maxlen-all-blocks-refused",
    }


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_block_counts_equal_what_vllm_reported(path: Path) -> None:
    case = json.loads(path.read_text())
    reported = case["reported"]
    kv = plan(request_for(case)).kv_cache
    assert kv.block_size == reported["block_size"]
    assert kv.num_gpu_blocks == reported["num_gpu_blocks"]
    assert kv.kv_cache_size_tokens == reported["kv_cache_size_tokens"]
    assert kv.max_concurrency == pytest.approx(reported["max_concurrency"], rel=1e-12)
    assert int(case["cache_config_info"]["num_gpu_blocks"]) == reported["num_gpu_blocks"]


# vLLM's own words for each refusal, as the record's root-cause line has them; kvcap must say the same.
REFUSAL_PHRASES = {
    "No common block size for": "block_size_unsupported",
    "To serve at least one request with the model's max seq len": "max_model_len_exceeds_kv_cache",
    "is greater than the derived max_model_len": "max_model_len_exceeds_model",
    "must be divisible by tensor parallel size": "tensor_parallel_heads",
    "is smaller than max_model_len": "batched_tokens_below_max_model_len",
    "must be greater than or equal to max_num_seqs": "batched_tokens_below_max_num_seqs",
    "Sliding window for some but all layers is not supported": "sliding_window_some_layers",
    "FP8 KV cache requires head_size divisible by 32 on CPU": "cpu_fp8_head_size",
    "and is not supported anymore": "architecture_removed",
    "does not dispatch through the Transformers attention interface": "transformers_backend_layer",
    "unsupported operand type(s) for +: 'NoneType' and 'int'": "disable_sliding_window_unsupported",
}


@pytest.mark.parametrize("path", REFUSED, ids=[p.stem for p in REFUSED])
def test_refused_start_ups_are_predicted_not_to_start_with_vllms_reason(path: Path) -> None:
    case = json.loads(path.read_text())
    phrase = next((p for p in REFUSAL_PHRASES if p in case["error"]), None)
    assert phrase is not None, f"no known refusal in {case['error']!r}"
    result = plan(request_for(case))
    assert not result.fits
    assert any(phrase in m.text for m in result.errors), [m.text for m in result.errors]


PADDED = [
    p
    for p in CASES
    if any("Padding mamba page size by" in line for line in json.loads(p.read_text())["log_lines"])
]


@pytest.mark.parametrize("path", PADDED, ids=[p.stem for p in PADDED])
def test_mamba_page_padding_equals_what_vllm_logged(path: Path) -> None:
    """The padding percentage pins the state's bytes (and so its dtypes), not only the block count."""
    case = json.loads(path.read_text())
    logged = next(line for line in case["log_lines"] if "Padding mamba page size by" in line)
    percent = logged.split("Padding mamba page size by ")[1].split("%")[0]
    notes = [m.text for m in plan(request_for(case)).messages if "padded by" in m.text]
    assert any(f"padded by {percent}%" in note for note in notes), notes
