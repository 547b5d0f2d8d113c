"""The whole-text sample reader gives what the line-by-line reading and prometheus-client's parser give.

``parse_vllm_metrics`` reads a text whose only line break is "\\n" with one regular expression over the whole
text (``_text_samples``), and a label text once per fleet (``_labels_of``, ``SeriesLabels``). These tests hold
it to the line-by-line reading it replaced (``_wanted_sample_lines`` + ``_fast_samples``, still what a text
with other line breaks goes through) and to prometheus-client's own parser, on the real vLLM expositions and
on generated ones with escaped label values, NaN/±Inf, timestamps, engines to sum and lines of odd form.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from service.live import parser
from service.live.histograms import SeriesLabels, histograms_from_samples
from service.live.parser import ExpositionError, VllmMetrics, metrics_from_samples, parse_vllm_metrics

FIXTURES = ("vllm-0.32.0-cpu-busy.txt", "vllm-0.32.0-cpu-idle.txt")


def _line_by_line(text: str) -> tuple[list[parser.Sample] | None, bool]:
    lines, saw_vllm = parser._wanted_sample_lines(text)
    return parser._fast_samples(lines), saw_vllm


def _plain(samples: list[parser.Sample] | None) -> list[tuple[str, dict[str, str], float]] | None:
    """Samples with plain-dict labels and NaN spelled out, so that equal readings compare equal."""
    if samples is None:
        return None
    return [(name, dict(labels), value) for name, labels, value in samples]


def _same(a: list[tuple[str, dict[str, str], float]] | None, b: object) -> bool:
    return repr(a) == repr(b)  # repr: NaN == NaN


def _reference_metrics(text: str) -> VllmMetrics | type[ExpositionError]:
    """What ``parse_vllm_metrics`` returned before the whole-text reader: the line-by-line reading, else
    prometheus-client's parser over the relevant lines; plain-dict labels throughout."""
    samples, saw_vllm = _line_by_line(text)
    if not saw_vllm:
        return ExpositionError
    if samples is None:
        lines, _ = parser._relevant_lines(text)
        try:
            samples = [
                (s.name, s.labels, float(s.value))
                for family in text_string_to_metric_families("\n".join(lines) + "\n")
                for s in family.samples
            ]
        except (ValueError, TypeError, IndexError, KeyError):
            return ExpositionError
    return metrics_from_samples(_plain(samples) or [])


def _parsed(text: str) -> VllmMetrics | type[ExpositionError]:
    try:
        return parse_vllm_metrics(text)
    except ExpositionError:
        return ExpositionError


@pytest.mark.parametrize("name", FIXTURES)
def test_the_real_expositions_read_the_same_as_line_by_line_and_as_prometheus_client(
    vllm_metrics_dir: Path, name: str
) -> None:
    text = (vllm_metrics_dir / name).read_text()
    read = parser._text_samples(text)
    assert read is not None
    samples, saw_vllm = read
    assert saw_vllm
    assert samples is not None and len(samples) > 100
    assert _same(_plain(samples), _plain(_line_by_line(text)[0]))
    lines, _ = parser._relevant_lines(text)
    full = [
        (s.name, s.labels, float(s.value))
        for family in text_string_to_metric_families("\n".join(lines) + "\n")
        for s in family.samples
    ]
    assert sorted(map(repr, _plain(samples) or [])) == sorted(map(repr, full))
    assert parse_vllm_metrics(text) == metrics_from_samples(full)


@pytest.mark.parametrize("name", FIXTURES)
def test_a_second_read_of_the_same_text_shares_labels_and_gives_the_same_metrics(
    vllm_metrics_dir: Path, name: str
) -> None:
    text = (vllm_metrics_dir / name).read_text()
    parser._LABELS.clear()
    first = parse_vllm_metrics(text)
    second = parse_vllm_metrics(text)
    assert first == second == _reference_metrics(text)


def test_histograms_from_precomputed_series_labels_equal_those_from_plain_labels(
    vllm_metrics_dir: Path,
) -> None:
    for name in FIXTURES:
        samples = _line_by_line((vllm_metrics_dir / name).read_text())[0]
        assert samples is not None
        shared = [(n, SeriesLabels.of(labels), v) for n, labels, v in samples]
        assert histograms_from_samples(shared) == histograms_from_samples(samples)
        assert histograms_from_samples(shared)  # the fixtures have histograms


def test_a_label_text_naming_dunder_name_is_left_to_the_full_parser() -> None:
    text = 'vllm:num_requests_running{__name__="x"} 1\n'
    assert parser._text_samples(text) == (None, True)
    assert parser._text_samples(text) == (None, True)  # the cached "no" too


def test_a_text_with_carriage_returns_goes_line_by_line() -> None:
    text = 'vllm:num_requests_running{engine="0"} 3\r\nvllm:num_requests_waiting{engine="0"} 1\r\n'
    assert parser._text_samples(text) is None
    assert parse_vllm_metrics(text).requests_running == 3.0
    assert parse_vllm_metrics(text).requests_waiting == 1.0


# -- generated expositions ------------------------------------------------------------------------------------

_NAMES = st.sampled_from(
    [
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:gpu_cache_usage_perc",
        "vllm:num_preemptions_total",
        "vllm:cache_config_info",
        "vllm:time_to_first_token_seconds_bucket",
        "vllm:time_to_first_token_seconds_sum",
        "vllm:time_to_first_token_seconds_count",
        "vllm:e2e_request_latency_seconds_bucket",
        "vllm:e2e_request_latency_seconds_count",
        "vllm:num_requests_running_by_reason",  # not read: a longer name sharing a prefix
        "vllm:num_requests",  # not read: a shorter one
        "vllm:prompt_tokens_total",
        "node_load1",
    ]
)
_LABEL_VALUES = st.sampled_from(
    [
        "0",
        "1",
        "m",
        "llama",
        'a\\"b',
        "a\\\\b",
        "a\\nb",
        "x}y",
        "x,y",
        "",
        "0.005",
        "+Inf",
        "1e3",
        "NaN",
        "z =",
    ]
)
_LABEL_NAMES = st.sampled_from(["engine", "model_name", "le", "block_size", "__name__", "num_gpu_blocks"])
_VALUES = st.sampled_from(
    ["1", "0", "3.5", "1e3", "-2", "NaN", "+Inf", "-Inf", "inf", "1_000", "0x10", "abc", "1.0e-7", "8192.0"]
)
_BLANKS = st.sampled_from([" ", "\t", "  ", " \t"])


@st.composite
def _sample_lines(draw: st.DrawFn) -> str:
    name = draw(_NAMES)
    pairs = draw(st.lists(st.tuples(_LABEL_NAMES, _LABEL_VALUES), max_size=3))
    labels = ",".join(f'{key}="{value}"' for key, value in pairs)
    form = draw(st.sampled_from(["braces", "braces-comma", "none", "blank-inside", "unclosed"]))
    if form == "braces":
        head = f"{name}{{{labels}}}"
    elif form == "braces-comma":
        head = f"{name}{{{labels},}}" if labels else f"{name}{{}}"
    elif form == "none":
        head = name
    elif form == "blank-inside":
        head = f"{name}{{ {labels} }}"
    else:
        head = f"{name}{{{labels}"
    line = head + draw(_BLANKS) + draw(_VALUES)
    if draw(st.booleans()):
        line += draw(_BLANKS) + draw(st.sampled_from(["1700000000000", "-5", "x"]))
    if draw(st.booleans()):
        line += draw(st.sampled_from(["", " ", "\t"]))
    return line


_OTHER_LINES = st.sampled_from(
    [
        "# HELP vllm:num_requests_running Number of requests in model execution batches.",
        "# TYPE vllm:num_requests_running gauge",
        "# TYPE vllm:time_to_first_token_seconds histogram",
        "",
        "<html>",
        "vllm:",
        "vllm:num_requests_running",
        " vllm:num_requests_running 1",
    ]
)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(_sample_lines(), _OTHER_LINES), max_size=12), st.booleans())
def test_generated_expositions_read_the_same_as_line_by_line(lines: list[str], final_newline: bool) -> None:
    text = "\n".join(lines) + ("\n" if final_newline else "")
    read = parser._text_samples(text)
    assert read is not None
    samples, saw_vllm = read
    expected, expected_saw = _line_by_line(text)
    assert saw_vllm == expected_saw
    assert _same(_plain(samples), _plain(expected))
    assert repr(_parsed(text)) == repr(_reference_metrics(text))
