"""`kvcap simulate`: vLLM's summary block line for line, --json, vLLM's --save-result file, and exit 2 for bad input."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from service.cli import app

runner = CliRunner()
ARGS = [
    "simulate",
    "-m",
    "llama-3.1-8b",
    "-g",
    "h100-sxm-80gb",
    "--max-model-len",
    "8192",
    "--num-prompts",
    "40",
    "--random-input-len",
    "512",
    "--random-output-len",
    "64",
]


def vllm_line(label: str, value: object) -> str:
    """`vllm bench serve`'s own format: ``"{:<40} {:<10}"`` (``{:<10.2f}`` for floats)."""
    if isinstance(value, float):
        return f"{label:<40} {value:<10.2f}"
    return f"{label:<40} {value!s:<10}"


def test_prints_the_block_vllm_bench_serve_prints_with_the_simulated_figures() -> None:
    summary = runner.invoke(app, [*ARGS, "--request-rate", "3", "--max-concurrency", "16"])
    assert summary.exit_code == 0, summary.output
    as_json = runner.invoke(app, [*ARGS, "--request-rate", "3", "--max-concurrency", "16", "--json"])
    assert as_json.exit_code == 0, as_json.output
    result = json.loads(as_json.output)["result"]
    lines = summary.output.splitlines()
    assert lines[0] == "============ Serving Benchmark Result ============"
    assert lines[1] == vllm_line("Successful requests:", 40)
    assert lines[2] == vllm_line("Failed requests:", 0)
    assert lines[3] == vllm_line("Maximum request concurrency:", 16)
    assert lines[4] == vllm_line("Request rate configured (RPS):", 3.0)
    assert lines[5] == vllm_line("Benchmark duration (s):", result["duration"])
    assert lines[6] == vllm_line("Total input tokens:", 40 * 512)
    assert lines[7] == vllm_line("Total generated tokens:", 40 * 64)
    assert vllm_line("Output token throughput (tok/s):", result["output_throughput"]) in lines
    assert "---------------Time to First Token----------------" in lines
    assert "-----Time per Output Token (excl. 1st token)------" in lines
    assert vllm_line("Mean TPOT (ms):", result["mean_tpot_ms"]) in lines
    assert vllm_line("P99 TTFT (ms):", result["p99_ttft_ms"]) in lines
    assert "=" * 50 in lines


def test_an_infinite_rate_prints_no_configured_rate_as_vllm_does() -> None:
    summary = runner.invoke(app, ARGS)
    assert summary.exit_code == 0, summary.output
    assert "Request rate configured" not in summary.output
    assert "Maximum request concurrency" not in summary.output


def test_save_result_writes_vllms_result_json_with_its_metadata_keys(tmp_path: Path) -> None:
    path = tmp_path / "predicted.json"
    outcome = runner.invoke(app, [*ARGS, "--burstiness", "0.5", "--save-result", str(path)])
    assert outcome.exit_code == 0, outcome.output
    saved = json.loads(path.read_text())
    # main_async's metadata (vllm/benchmarks/serve.py): request_rate is the string "inf" for an infinite rate
    assert saved["request_rate"] == "inf"
    assert saved["burstiness"] == 0.5
    assert saved["max_concurrency"] is None
    assert saved["num_prompts"] == 40
    assert saved["model_id"] == "llama-3.1-8b"
    assert saved["backend"] == "kvcap-simulator"
    assert len(saved["date"]) == len("20261201-120000")
    for key in ("duration", "completed", "output_throughput", "mean_ttft_ms", "p99_tpot_ms", "median_itl_ms"):
        assert key in saved
    assert saved["total_output_tokens"] == 40 * 64


def test_bad_input_exits_2_naming_the_flag_or_field() -> None:
    rate = runner.invoke(app, [*ARGS, "--request-rate", "fast"])
    assert rate.exit_code == 2 and "--request-rate" in rate.output
    ratio = runner.invoke(app, [*ARGS, "--random-range-ratio", "1.5"])
    assert ratio.exit_code == 2 and "benchmark.random_range_ratio" in ratio.output
    gpu = runner.invoke(app, ["simulate", "-m", "llama-3.1-8b"])
    assert gpu.exit_code == 2 and "gpu" in gpu.output


def test_no_gpu_p2p_slows_the_tensor_parallel_tokens() -> None:
    tp2 = [*ARGS, "--tensor-parallel-size", "2", "--max-concurrency", "8", "--json"]
    p2p = runner.invoke(app, tp2)
    shm = runner.invoke(app, [*tp2, "--no-gpu-p2p"])
    assert p2p.exit_code == 0 and shm.exit_code == 0, shm.output
    assert json.loads(shm.output)["result"]["mean_tpot_ms"] > json.loads(p2p.output)["result"]["mean_tpot_ms"]


def test_the_readiness_probe_flags_follow_vllm_bench_serve() -> None:
    old = [*ARGS, "--engine", "vllm-0.12", "--json"]
    primed = json.loads(runner.invoke(app, old).output)
    skipped = runner.invoke(app, [*old, "--ready-check-timeout-sec", "0"])
    assert skipped.exit_code == 0, skipped.output
    assert json.loads(skipped.output)["result"]["mean_ttft_ms"] > primed["result"]["mean_ttft_ms"]
    warmed = runner.invoke(app, [*old, "--ready-check-timeout-sec", "0", "--num-warmups", "1"])
    assert json.loads(warmed.output)["result"] == primed["result"]
    bad = runner.invoke(app, [*ARGS, "--num-warmups", "-1"])
    assert bad.exit_code == 2 and "num_warmups" in bad.output


def test_speculative_config_and_its_acceptance_length_reach_the_simulation() -> None:
    spec = ["--speculative-config", '{"model": "llama-3.2-1b", "num_speculative_tokens": 3}']
    out = runner.invoke(app, [*ARGS, *spec, "--spec-mean-acceptance-length", "2.5", "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert data["speculative"]["method"] == "draft_model"
    assert data["speculative"]["assumed_mean_acceptance_length"] == 2.5
    too_long = runner.invoke(app, [*ARGS, *spec, "--spec-mean-acceptance-length", "4.5"])
    assert too_long.exit_code == 2 and "spec_mean_acceptance_length" in too_long.output
    not_json = runner.invoke(app, [*ARGS, "--speculative-config", "{eagle"])
    assert not_json.exit_code == 2 and "--speculative-config" in not_json.output


def test_the_summary_ends_with_vllms_speculative_decoding_section(tmp_path: Path) -> None:
    spec = ["--speculative-config", '{"model": "llama-3.2-1b", "num_speculative_tokens": 3}']
    args = [*ARGS, *spec, "--spec-mean-acceptance-length", "2.5"]
    data = json.loads(runner.invoke(app, [*args, "--json"]).output)["speculative"]
    lines = runner.invoke(app, args).output.splitlines()
    start = lines.index("{s:{c}^{n}}".format(s="Speculative Decoding", n=50, c="-"))
    assert lines[start + 1] == vllm_line("Acceptance rate (%):", 100 * data["draft_acceptance_rate"])
    assert lines[start + 2] == vllm_line("Acceptance length:", data["mean_acceptance_length"])
    assert lines[start + 3] == vllm_line("Drafts:", data["num_drafts"])
    assert lines[start + 4] == vllm_line("Draft tokens:", 3 * data["num_drafts"])
    assert lines[start + 5] == vllm_line("Accepted tokens:", data["num_accepted_tokens"])
    assert lines[start + 6] == "=" * 50
    saved = tmp_path / "result.json"
    assert runner.invoke(app, [*args, "--save-result", str(saved)]).exit_code == 0
    result = json.loads(saved.read_text())
    assert result["spec_decode_acceptance_length"] == data["mean_acceptance_length"]
    assert result["spec_decode_num_drafts"] == data["num_drafts"]
