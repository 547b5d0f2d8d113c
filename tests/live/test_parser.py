"""The vLLM exposition parser on the real 0.32 expositions, on 0.10/0.11 metric names, data parallel, "None"
labels, and on things that are not vLLM expositions."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.live.parser import ExpositionError, parse_vllm_metrics


def fixture_text(vllm_metrics_dir: Path, name: str) -> str:
    return (vllm_metrics_dir / name).read_text()


def test_reads_the_real_busy_exposition_of_vllm_0_32(vllm_metrics_dir: Path) -> None:
    metrics = parse_vllm_metrics(fixture_text(vllm_metrics_dir, "vllm-0.32.0-cpu-busy.txt"))
    assert len(metrics.engines) == 1
    engine = metrics.engines[0]
    assert engine.engine == "0"
    assert engine.model_name == "./tinyllama"
    assert engine.requests_running == 8.0
    assert engine.requests_waiting == 0.0
    assert engine.kv_cache_usage_ratio == pytest.approx(0.009766817238432424)
    assert engine.preemptions_total == 0.0
    config = metrics.cache_config
    assert config is not None
    assert config.num_gpu_blocks == 8192
    assert config.block_size == 128
    assert config.cache_dtype == "auto"
    assert config.gpu_memory_utilization == pytest.approx(0.92)
    assert config.kv_cache_memory_bytes == 1_073_741_824
    assert config.kv_cache_size_tokens == 1_048_576
    assert config.kv_cache_max_concurrency == 512.0
    assert config.enable_prefix_caching is True
    assert metrics.num_gpu_blocks == 8192
    assert metrics.data_parallel_size == 1


def test_reads_the_real_idle_exposition_of_vllm_0_32(vllm_metrics_dir: Path) -> None:
    metrics = parse_vllm_metrics(fixture_text(vllm_metrics_dir, "vllm-0.32.0-cpu-idle.txt"))
    assert metrics.requests_running == 0.0
    assert metrics.requests_waiting == 0.0
    assert metrics.kv_cache_usage_ratio == 0.0
    assert metrics.preemptions_total == 0.0
    assert metrics.num_gpu_blocks == 8192
    assert metrics.cache_config is not None
    assert metrics.cache_config.block_size == 128


def test_keeps_every_cache_config_label_as_a_string_whatever_the_version_adds(vllm_metrics_dir: Path) -> None:
    config = parse_vllm_metrics(fixture_text(vllm_metrics_dir, "vllm-0.32.0-cpu-busy.txt")).cache_config
    assert config is not None
    assert config.labels["_block_size_resolved"] == "True"
    assert config.labels["kv_cache_dtype_skip_layers"] == "[]"
    assert config.labels["sliding_window"] == "None"
    assert config.get("sliding_window") is None
    assert "engine" not in config.labels


V0_10 = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="meta-llama/Llama-3.1-8B"} 3.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="meta-llama/Llama-3.1-8B"} 1.0
# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="meta-llama/Llama-3.1-8B"} 0.25
# TYPE vllm:num_preemptions counter
vllm:num_preemptions_total{model_name="meta-llama/Llama-3.1-8B"} 7.0
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",cache_dtype="auto",cpu_offload_gb="0",enable_prefix_caching="False",gpu_memory_utilization="0.9",is_attention_free="False",num_cpu_blocks="2048",num_gpu_blocks="28160",num_gpu_blocks_override="None",sliding_window="None",swap_space="4"} 1.0
"""


def test_reads_the_pre_0_11_usage_name_without_an_engine_label() -> None:
    metrics = parse_vllm_metrics(V0_10)
    (engine,) = metrics.engines
    assert engine.engine is None
    assert engine.model_name == "meta-llama/Llama-3.1-8B"
    assert engine.kv_cache_usage_ratio == 0.25
    assert engine.requests_running == 3.0
    assert engine.requests_waiting == 1.0
    assert engine.preemptions_total == 7.0
    assert metrics.num_gpu_blocks == 28160
    assert metrics.cache_config is not None
    assert metrics.cache_config.kv_cache_memory_bytes is None  # not a field before 0.11
    assert metrics.cache_config.enable_prefix_caching is False


V0_11 = """\
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="qwen"} 2.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="qwen"} 0.0
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{engine="0",model_name="qwen"} 0.5
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="qwen"} 0.4
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="qwen"} 0.0
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",cache_dtype="fp8",engine="0",gpu_memory_utilization="0.9",kv_cache_memory_bytes="None",num_gpu_blocks="8192.0"} 1.0
"""


def test_prefers_the_new_usage_name_when_0_11_emits_both() -> None:
    metrics = parse_vllm_metrics(V0_11)
    assert metrics.kv_cache_usage_ratio == 0.4
    assert metrics.cache_config is not None
    assert metrics.cache_config.num_gpu_blocks == 8192  # written "8192.0"
    assert metrics.cache_config.kv_cache_memory_bytes is None  # written "None"
    assert metrics.cache_config.cache_dtype == "fp8"


DATA_PARALLEL = """\
vllm:num_requests_running{engine="0",model_name="m"} 4.0
vllm:num_requests_running{engine="1",model_name="m"} 6.0
vllm:num_requests_waiting{engine="0",model_name="m"} 1.0
vllm:num_requests_waiting{engine="1",model_name="m"} 2.0
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.2
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.4
vllm:num_preemptions_total{engine="0",model_name="m"} 1.0
vllm:num_preemptions_total{engine="1",model_name="m"} 2.0
vllm:cache_config_info{block_size="16",engine="0",kv_cache_size_tokens="131072",num_gpu_blocks="16384"} 1.0
vllm:cache_config_info{block_size="16",engine="1",kv_cache_size_tokens="131072",num_gpu_blocks="16384"} 1.0
"""


def test_data_parallel_engines_report_summed_blocks_once_and_sum_their_requests() -> None:
    metrics = parse_vllm_metrics(DATA_PARALLEL)
    assert [e.engine for e in metrics.engines] == ["0", "1"]
    assert metrics.data_parallel_size == 2
    assert metrics.num_gpu_blocks == 16384  # vLLM's front end already summed; never summed again
    assert metrics.num_gpu_blocks_per_engine == 8192
    assert metrics.requests_running == 10.0
    assert metrics.requests_waiting == 3.0
    assert metrics.preemptions_total == 3.0
    assert metrics.kv_cache_usage_ratio == pytest.approx(0.3)


def test_keeps_each_model_name_apart() -> None:
    text = (
        'vllm:num_requests_running{model_name="a"} 1.0\n'
        'vllm:num_requests_running{model_name="b"} 2.0\n'
        'vllm:kv_cache_usage_perc{model_name="a"} 0.5\n'
    )
    metrics = parse_vllm_metrics(text)
    assert metrics.model_names == ("a", "b")
    assert metrics.requests_running == 3.0
    assert metrics.cache_config is None
    assert metrics.num_gpu_blocks is None


def test_none_and_empty_cache_config_values_read_as_none() -> None:
    text = 'vllm:cache_config_info{block_size="None",num_gpu_blocks="",gpu_memory_utilization="None",cache_dtype="None"} 1.0\n'
    config = parse_vllm_metrics(text).cache_config
    assert config is not None
    assert config.block_size is None
    assert config.num_gpu_blocks is None
    assert config.gpu_memory_utilization is None
    assert config.cache_dtype is None
    assert config.enable_prefix_caching is None


def test_a_fractional_block_count_is_not_an_integer() -> None:
    config = parse_vllm_metrics('vllm:cache_config_info{num_gpu_blocks="12.5"} 1.0\n').cache_config
    assert config is not None
    assert config.num_gpu_blocks is None


@pytest.mark.parametrize(
    "text",
    [
        "",
        "garbage \x00\x01 {{{ not metrics",
        "<!DOCTYPE html><html><body><h1>502 Bad Gateway</h1></body></html>",
        "# HELP node_load1 1m load average.\n# TYPE node_load1 gauge\nnode_load1 0.5\n",
        '{"status": "success"}',
    ],
    ids=["empty", "garbage", "html", "another-exporter", "json"],
)
def test_text_without_vllm_metrics_is_not_an_exposition(text: str) -> None:
    with pytest.raises(ExpositionError):
        parse_vllm_metrics(text)


def test_a_malformed_vllm_line_is_an_exposition_error() -> None:
    with pytest.raises(ExpositionError, match="malformed"):
        parse_vllm_metrics('vllm:num_requests_running{engine="0" not-a-number\n')


def test_unrelated_garbage_after_valid_vllm_lines_does_not_hide_them() -> None:
    metrics = parse_vllm_metrics('vllm:num_requests_running{engine="0"} 5.0\n<html> trailing junk\n')
    assert metrics.requests_running == 5.0


def test_non_finite_values_are_treated_as_missing() -> None:
    metrics = parse_vllm_metrics('vllm:kv_cache_usage_perc{engine="0"} NaN\n')
    assert metrics.kv_cache_usage_ratio is None


def _full_parser_samples(lines: list[str]) -> list[tuple[str, dict[str, str], float]]:
    from prometheus_client.parser import text_string_to_metric_families

    return [
        (s.name, s.labels, float(s.value))
        for family in text_string_to_metric_families("\n".join(lines) + "\n")
        for s in family.samples
    ]


@pytest.mark.parametrize(
    "name", ["vllm-0.32.0-cpu-busy.txt", "vllm-0.32.0-cpu-idle.txt", "vllm-0.32.0-cpu-ngram.txt"]
)
def test_the_fast_sample_reader_gives_what_prometheus_clients_parser_gives(
    vllm_metrics_dir: Path, name: str
) -> None:
    from service.live.parser import _fast_samples, _relevant_lines

    lines, _ = _relevant_lines(fixture_text(vllm_metrics_dir, name))
    fast = _fast_samples(lines)
    assert fast is not None  # vLLM's own output is the plain form
    assert sorted(map(repr, fast)) == sorted(map(repr, _full_parser_samples(lines)))


def test_escaped_label_values_read_the_same_and_odd_lines_go_to_the_full_parser() -> None:
    from service.live.parser import _fast_samples

    escaped = [
        'vllm:cache_config_info{engine="0",prefix="a\\"b\\\\c\\nd",block_size="16"} 1.0',
        "vllm:num_requests_running 3 1700000000000",
    ]
    assert _fast_samples(escaped) == _full_parser_samples(escaped)
    assert _fast_samples(escaped)[0][1]["prefix"] == 'a"b\\c\nd'  # type: ignore[index]
    for odd in (
        'vllm:num_requests_running{ model_name="m" } 3',  # blanks inside the braces
        "vllm:num_requests_running 1_000",  # float() would read it, the format does not
        'vllm:num_requests_running{__name__="x"} 1',
    ):
        assert _fast_samples([odd]) is None, odd
    text = 'vllm:num_requests_running{ model_name="m" } 3\n'
    assert parse_vllm_metrics(text).requests_running == 3.0  # the full parser still reads it


def test_reads_the_speculative_decoding_counters_of_a_real_ngram_server(vllm_metrics_dir: Path) -> None:
    # vLLM 0.32.0 (CPU build) with --speculative-config '{"method": "ngram", "num_speculative_tokens": 3, …}'
    # after six 64-token completions of a repetitive prompt: 96 drafts, 276 draft tokens, all 276 accepted.
    served = parse_vllm_metrics(fixture_text(vllm_metrics_dir, "vllm-0.32.0-cpu-ngram.txt"))
    assert (served.spec_drafts_total, served.spec_accepted_tokens_total) == (96.0, 276.0)
    started = parse_vllm_metrics(fixture_text(vllm_metrics_dir, "vllm-0.32.0-cpu-ngram-start.txt"))
    assert (started.spec_drafts_total, started.spec_accepted_tokens_total) == (0.0, 0.0)
    # A server without speculative decoding has no such counters: not reported, not zero.
    plain = parse_vllm_metrics(fixture_text(vllm_metrics_dir, "vllm-0.32.0-cpu-busy.txt"))
    assert plain.spec_drafts_total is None and plain.spec_accepted_tokens_total is None
