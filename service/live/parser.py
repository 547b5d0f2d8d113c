"""vLLM's Prometheus exposition → a typed snapshot of the numbers kvcap compares with its predictions.

The source of truth is ``vllm/v1/metrics/loggers.py::PrometheusStatLogger`` (notes: vllm-source-notes.md §11):

- gauges ``vllm:num_requests_running``, ``vllm:num_requests_waiting`` and ``vllm:kv_cache_usage_perc`` (a 0–1
  fraction despite its name), labelled ``model_name`` and ``engine`` (the data-parallel index; V0 has
  ``model_name`` only). ``vllm:gpu_cache_usage_perc`` is the pre-0.11 name of the usage gauge: both are
  emitted by 0.10, the old one is hidden in 0.11 and gone in 0.12, so the new name wins when both exist;
- the counter ``vllm:num_preemptions`` (exposed as ``vllm:num_preemptions_total``);
- with speculative decoding, the counters ``vllm:spec_decode_num_drafts`` and
  ``vllm:spec_decode_num_accepted_tokens`` (``_total``; ``vllm/v1/spec_decode/metrics.py::SpecDecodingProm``):
  1 + accepted ÷ drafts is vLLM's own "Mean acceptance length" of the traffic served;
- ``vllm:cache_config_info``, a gauge set to 1 whose labels are *every* field of vLLM's ``CacheConfig``,
  stringified with ``str()`` (``"None"``, ``"True"``, ``"0.92"``, ``"512.0"``), plus ``engine`` but no
  ``model_name``. The label set changes with every vLLM version, so all labels are kept as a dict and only a
  few have typed accessors. With data parallel the front end reports ``num_gpu_blocks`` already *summed*
  over engines (and the first engine's ``kv_cache_size_tokens``/``kv_cache_max_concurrency``), on one series
  per engine — so it is read once, never summed again.

- the latency and token histograms of ``service.live.histograms`` (time to first token, time per output token,
  inter-token latency, end-to-end latency, prompt/generation tokens per request, tokens per step), summed over
  engines and model names into one ``Histogram`` each.

Parsing uses prometheus-client's own text parser, fed only the lines of the metrics above: a vLLM server
exposes ~600 lines, most of them histograms kvcap does not read (queue, prefill and decode times, request
parameters), and skipping them keeps parsing cheap enough for one kvcap to refresh a thousand targets. Text with no ``vllm:`` metric at all (an HTML error page, a
different exporter, garbage) raises ``ExpositionError``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from prometheus_client.parser import text_string_to_metric_families

from service.live.histograms import (
    HISTOGRAM_NAMES,
    HISTOGRAM_SUFFIXES,
    Histogram,
    SeriesLabels,
    histograms_from_samples,
)

CACHE_CONFIG_INFO = "vllm:cache_config_info"
KV_CACHE_USAGE = "vllm:kv_cache_usage_perc"
GPU_CACHE_USAGE_OLD = "vllm:gpu_cache_usage_perc"  # before 0.11
REQUESTS_RUNNING = "vllm:num_requests_running"
REQUESTS_WAITING = "vllm:num_requests_waiting"
PREEMPTIONS = "vllm:num_preemptions_total"
SPEC_DRAFTS = "vllm:spec_decode_num_drafts_total"
SPEC_ACCEPTED_TOKENS = "vllm:spec_decode_num_accepted_tokens_total"

# Sample names kvcap reads, and the family names under which a ``# TYPE`` line may declare them (a counter's
# family may be written with or without ``_total``).
SAMPLE_NAMES = frozenset(
    {
        CACHE_CONFIG_INFO,
        KV_CACHE_USAGE,
        GPU_CACHE_USAGE_OLD,
        REQUESTS_RUNNING,
        REQUESTS_WAITING,
        PREEMPTIONS,
        SPEC_DRAFTS,
        SPEC_ACCEPTED_TOKENS,
    }
)
HISTOGRAM_SAMPLE_NAMES = frozenset(name + suffix for name in HISTOGRAM_NAMES for suffix in HISTOGRAM_SUFFIXES)
_FAMILY_NAMES = (
    SAMPLE_NAMES
    | {"vllm:num_preemptions", "vllm:spec_decode_num_drafts", "vllm:spec_decode_num_accepted_tokens"}
    | set(HISTOGRAM_NAMES)
)
_WANTED_SAMPLES = SAMPLE_NAMES | HISTOGRAM_SAMPLE_NAMES

Sample = tuple[str, Mapping[str, str], float]
"""(sample name, labels, value) — what both the exposition parser and the Prometheus source produce."""


class ExpositionError(ValueError):
    """The text is not a vLLM metrics exposition (or not one prometheus-client can parse)."""


def _optional_text(value: str | None) -> str | None:
    if value is None:
        return None
    value = value.strip()
    return None if value in ("", "None", "null") else value


def _optional_int(value: str | None) -> int | None:
    """``"8192"`` and ``"8192.0"`` are both 8192; ``"None"``, empty or non-numeric text is None."""
    number = _optional_float(value)
    if number is None or number != int(number):
        return None
    return int(number)


def _optional_float(value: str | None) -> float | None:
    text = _optional_text(value)
    if text is None:
        return None
    try:
        number = float(text)
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def _optional_bool(value: str | None) -> bool | None:
    text = _optional_text(value)
    if text is None:
        return None
    lowered = text.lower()
    if lowered in ("true", "1"):
        return True
    if lowered in ("false", "0"):
        return False
    return None


@dataclass(frozen=True, slots=True)
class CacheConfig:
    """vLLM's ``CacheConfig`` as reported by ``vllm:cache_config_info``: every label as a string, plus typed
    accessors for the fields kvcap uses (``None`` when absent in this vLLM version or reported as "None")."""

    labels: Mapping[str, str]

    def __post_init__(self) -> None:
        object.__setattr__(self, "labels", MappingProxyType(dict(self.labels)))

    def get(self, key: str) -> str | None:
        return _optional_text(self.labels.get(key))

    @property
    def num_gpu_blocks(self) -> int | None:
        """KV-cache blocks of the whole server (summed over data-parallel engines by vLLM's front end)."""
        return _optional_int(self.labels.get("num_gpu_blocks"))

    @property
    def block_size(self) -> int | None:
        return _optional_int(self.labels.get("block_size"))

    @property
    def cache_dtype(self) -> str | None:
        return self.get("cache_dtype")

    @property
    def gpu_memory_utilization(self) -> float | None:
        return _optional_float(self.labels.get("gpu_memory_utilization"))

    @property
    def kv_cache_memory_bytes(self) -> int | None:
        """Set only when the server was started with ``--kv-cache-memory-bytes`` (0.11+)."""
        return _optional_int(self.labels.get("kv_cache_memory_bytes"))

    @property
    def kv_cache_size_tokens(self) -> int | None:
        """The logged "KV cache size" in tokens (0.25+), of the first data-parallel engine."""
        return _optional_int(self.labels.get("kv_cache_size_tokens"))

    @property
    def kv_cache_max_concurrency(self) -> float | None:
        """The logged "Maximum concurrency" for max_model_len requests (0.25+), of the first engine."""
        return _optional_float(self.labels.get("kv_cache_max_concurrency"))

    @property
    def enable_prefix_caching(self) -> bool | None:
        return _optional_bool(self.labels.get("enable_prefix_caching"))


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineMetrics:
    """One vLLM engine core (a data-parallel rank) serving one model name; ``None`` = not reported."""

    engine: str | None
    model_name: str | None
    requests_running: float | None = None
    requests_waiting: float | None = None
    kv_cache_usage_ratio: float | None = None
    preemptions_total: float | None = None
    spec_drafts_total: float | None = None
    spec_accepted_tokens_total: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class VllmMetrics:
    """Everything kvcap reads from one vLLM server (one pod), whatever the source."""

    engines: tuple[EngineMetrics, ...] = ()
    cache_configs: Mapping[str, CacheConfig] = field(default_factory=dict)
    """By engine label (``""`` when the series has none)."""
    histograms: Mapping[str, Histogram] = field(default_factory=dict)
    """Latency and token histograms by vLLM name, summed over engines and model names."""

    @property
    def cache_config(self) -> CacheConfig | None:
        """The first engine's cache config: every data-parallel engine reports the same server-wide values."""
        if not self.cache_configs:
            return None
        return self.cache_configs[min(self.cache_configs, key=_engine_order)]

    @property
    def num_gpu_blocks(self) -> int | None:
        config = self.cache_config
        return config.num_gpu_blocks if config else None

    @property
    def data_parallel_size(self) -> int:
        """Distinct engines seen (1 for a server without data parallelism)."""
        names = {e.engine for e in self.engines} | set(self.cache_configs)
        names.discard(None)
        return max(1, len(names))

    @property
    def num_gpu_blocks_per_engine(self) -> int | None:
        """``num_gpu_blocks`` divided back over the data-parallel engines vLLM summed it across."""
        blocks = self.num_gpu_blocks
        return None if blocks is None else blocks // self.data_parallel_size

    @property
    def model_names(self) -> tuple[str, ...]:
        return tuple(sorted({e.model_name for e in self.engines if e.model_name is not None}))

    @property
    def requests_running(self) -> float:
        return sum(e.requests_running or 0.0 for e in self.engines)

    @property
    def requests_waiting(self) -> float:
        return sum(e.requests_waiting or 0.0 for e in self.engines)

    @property
    def preemptions_total(self) -> float:
        return sum(e.preemptions_total or 0.0 for e in self.engines)

    @property
    def spec_drafts_total(self) -> float | None:
        """Speculative-decoding drafts over the engines; None when no engine reports the counter."""
        values = [e.spec_drafts_total for e in self.engines if e.spec_drafts_total is not None]
        return sum(values) if values else None

    @property
    def spec_accepted_tokens_total(self) -> float | None:
        values = [
            e.spec_accepted_tokens_total for e in self.engines if e.spec_accepted_tokens_total is not None
        ]
        return sum(values) if values else None

    @property
    def kv_cache_usage_ratio(self) -> float | None:
        """Mean over the engines that report it (each engine has its own, equally sized, KV cache)."""
        values = [e.kv_cache_usage_ratio for e in self.engines if e.kv_cache_usage_ratio is not None]
        return sum(values) / len(values) if values else None


def _engine_order(engine: str) -> tuple[int, int | str]:
    return (0, int(engine)) if engine.isdigit() else (1, engine)


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def metrics_from_samples(samples: Iterable[Sample]) -> VllmMetrics:
    """Assemble ``VllmMetrics`` from samples, keyed per (engine, model_name); unknown names are ignored."""
    gauges: dict[tuple[str | None, str | None], dict[str, float | None]] = {}
    configs: dict[str, CacheConfig] = {}
    histogram_samples: list[Sample] = []
    for name, labels, value in samples:
        if name in HISTOGRAM_SAMPLE_NAMES:
            histogram_samples.append((name, labels, value))
            continue
        if name == CACHE_CONFIG_INFO:
            configs.setdefault(
                labels.get("engine", ""), CacheConfig({k: v for k, v in labels.items() if k != "engine"})
            )
            continue
        if name not in SAMPLE_NAMES:
            continue
        key = (labels.get("engine"), labels.get("model_name"))
        gauges.setdefault(key, {})[name] = _finite(value)
    engines = []
    for (engine_label, model_name), values in sorted(
        gauges.items(), key=lambda kv: (str(kv[0][0]), str(kv[0][1]))
    ):
        usage = values.get(KV_CACHE_USAGE)
        if usage is None:
            usage = values.get(GPU_CACHE_USAGE_OLD)
        engines.append(
            EngineMetrics(
                engine=engine_label,
                model_name=model_name,
                requests_running=values.get(REQUESTS_RUNNING),
                requests_waiting=values.get(REQUESTS_WAITING),
                kv_cache_usage_ratio=usage,
                preemptions_total=values.get(PREEMPTIONS),
                spec_drafts_total=values.get(SPEC_DRAFTS),
                spec_accepted_tokens_total=values.get(SPEC_ACCEPTED_TOKENS),
            )
        )
    return VllmMetrics(
        engines=tuple(engines),
        cache_configs=configs,
        histograms=MappingProxyType(histograms_from_samples(histogram_samples)),
    )


_SAMPLE_PREFIXES = tuple(_WANTED_SAMPLES)
_NAME_END = re.compile(r"[{ \t]")


def _is_wanted_sample(line: str) -> bool:
    """True for a sample line of a metric kvcap reads (the name followed by ``{`` or a blank)."""
    if not line.startswith(_SAMPLE_PREFIXES):
        return False
    end = _NAME_END.search(line)
    return end is not None and line[: end.start()] in _WANTED_SAMPLES


def _relevant_lines(text: str) -> tuple[list[str], bool]:
    """The lines of the metrics kvcap reads, and whether any ``vllm:`` metric appeared at all.

    Exposition lines are never indented (the format allows it, no exporter does it), so a prefix test per line
    is enough; a stray indented line is just not kept.
    """
    kept: list[str] = []
    saw_vllm = False
    for line in text.splitlines():
        if line.startswith("vllm:"):
            saw_vllm = True
            if _is_wanted_sample(line):
                kept.append(line)
        elif line.startswith("# "):
            parts = line.split(None, 3)
            if len(parts) >= 3 and parts[1] in ("TYPE", "HELP") and parts[2] in _FAMILY_NAMES:
                kept.append(line)
    return kept, saw_vllm


# The sample-line grammar of the text exposition format (``name{label="value",…} value [timestamp]``), as
# prometheus-client's parser reads it: label values escape only backslash, double quote and newline.
_LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*"'
_SAMPLE_LINE = re.compile(
    rf"([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{{((?:{_LABEL},)*(?:{_LABEL})?)\}})?[ \t]+([^ \t]+)(?:[ \t]+-?[0-9]+)?[ \t]*"
)
_LABEL_PAIR = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
_ESCAPE = re.compile(r'\\[\\n"]')
_UNESCAPED = {"\\\\": "\\", "\\n": "\n", '\\"': '"'}


def _unescape(value: str) -> str:
    return _ESCAPE.sub(lambda m: _UNESCAPED[m.group(0)], value) if "\\" in value else value


def _fast_samples(lines: list[str]) -> list[Sample] | None:
    """The kept sample lines read with two regular expressions; None when a line is anything but the plain
    form (spaces inside braces, ``__name__``, an exponent-less oddity), so the full parser decides instead.

    prometheus-client's parser walks each label character by character; on the ~170 lines kvcap keeps of a
    vLLM exposition that is ~2.5 ms, most of a thousand-target refresh. The plain form is what vLLM writes
    (prometheus-client's ``generate_latest``), and for it both readings are the same samples (checked by
    tests over every recorded exposition).
    """
    samples: list[Sample] = []
    for line in lines:
        if line.startswith("#"):
            continue
        match = _SAMPLE_LINE.fullmatch(line)
        if match is None:
            return None
        name, labels_text, value_text = match.groups()
        if "_" in value_text:  # float() accepts 1_000; the exposition format does not
            return None
        try:
            value = float(value_text)
        except ValueError:
            return None
        labels = {key: _unescape(raw) for key, raw in _LABEL_PAIR.findall(labels_text)} if labels_text else {}
        if "__name__" in labels:
            return None
        samples.append((name, labels, value))
    return samples


def _wanted_sample_lines(text: str) -> tuple[list[str], bool]:
    """The sample lines of the metrics kvcap reads (no comments: the fast reader needs none), and whether any
    ``vllm:`` metric appeared at all — ``_relevant_lines`` with a name lookup instead of prefix tests."""
    kept: list[str] = []
    saw_vllm = False
    for line in text.splitlines():
        if not line.startswith("vllm:"):
            continue
        saw_vllm = True
        end = len(line)
        for stop in ("{", " ", "\t"):
            at = line.find(stop, 0, end)
            if at != -1:
                end = at
        if line[:end] in _WANTED_SAMPLES:
            kept.append(line)
    return kept, saw_vllm


# The same reading over the whole text at once, for a text whose only line break is "\n" (what every exporter
# writes): one ``findall`` finds the sample lines of the wanted names and splits them, instead of a Python loop over
# ~600 lines and a match per kept line. The second branch matches a wanted name whose line is not of the plain
# form (every group empty): the text then goes to the line-by-line reading and the full parser, as before. Label
# values are the unrolled form of ``(?:[^"\\]|\\.)*`` (the same strings, without one alternation per character),
# the names a trie of the wanted ones (a branch per character, not per name), and a value with ``_`` fails the
# first branch as ``_fast_samples`` refuses it.
def _trie(words: Iterable[str]) -> str:
    """A regular expression matching exactly ``words``, branching on each character."""
    words = sorted(set(words))
    optional = "" in words
    groups: dict[str, list[str]] = {}
    for word in words:
        if word:
            groups.setdefault(word[0], []).append(word[1:])
    branches = [re.escape(first) + _trie(rest) for first, rest in groups.items()]
    body = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
    return f"(?:{body})?" if optional and branches else body


_WANTED_NAME = "vllm:" + _trie(name[len("vllm:") :] for name in _WANTED_SAMPLES)
_LABEL_IN_TEXT = r'[a-zA-Z_][a-zA-Z0-9_]*="[^"\\\n]*(?:\\.[^"\\\n]*)*"'
_WANTED_LINE_IN_TEXT = re.compile(
    rf"\n({_WANTED_NAME})"
    rf"(?:\{{((?:{_LABEL_IN_TEXT},)*(?:{_LABEL_IN_TEXT})?)\}})?[ \t]+([^ \t\n_]+)(?:[ \t]+-?[0-9]+)?[ \t]*(?=\n|\Z)"
    rf"|\n{_WANTED_NAME}(?=[{{ \t\n]|\Z)"
)
_NAMES = {name: name for name in _WANTED_SAMPLES}

_LABELS: dict[str, SeriesLabels | None] = {}
"""Label text (between the braces) → its labels (never modified: one object serves every pod that reports the
text); None when they name ``__name__`` (the full parser decides). A fleet's pods repeat the same label sets —
the same buckets, engines and model names — so each is read once; bounded like the other shared caches of the
live loop (a fleet past it reads its labels again after each clear, as every pod did before)."""
_LABELS_MAX = 16384
_NO_LABELS = SeriesLabels.of({})


def _labels_of(text: str) -> SeriesLabels | None:
    if not text:
        return _NO_LABELS
    if text in _LABELS:
        return _LABELS[text]
    parsed = {key: _unescape(raw) for key, raw in _LABEL_PAIR.findall(text)}
    labels = None if "__name__" in parsed else SeriesLabels.of(parsed)
    if len(_LABELS) >= _LABELS_MAX:
        _LABELS.clear()
    _LABELS[text] = labels
    return labels


def _has_other_line_breaks(text: str) -> bool:
    """Whether ``str.splitlines`` would split ``text`` anywhere but at "\n" (\r, \v, \f, \x1c–\x1e, \x85,
    U+2028, U+2029)."""
    if any(c in text for c in "\r\x0b\x0c\x1c\x1d\x1e"):
        return True
    return not text.isascii() and any(c in text for c in "\x85\u2028\u2029")


def _text_samples(text: str) -> tuple[list[Sample] | None, bool] | None:
    """``(_fast_samples(lines), saw_vllm)`` for ``_wanted_sample_lines(text)``, read in one pass over the text;
    None when the text has another line break than "\n" (``_wanted_sample_lines`` splits there too)."""
    if _has_other_line_breaks(text):
        return None
    padded = "\n" + text
    if "\nvllm:" not in padded:
        return [], False
    try:
        samples = [
            (_NAMES[name], _labels_of(labels), float(value))
            for name, labels, value in _WANTED_LINE_IN_TEXT.findall(padded)
        ]
    except (KeyError, ValueError):  # a line of a wanted name not in the plain form ("" is no name)
        return None, True
    if any(labels is None for _, labels, _ in samples):
        return None, True
    return samples, True  # type: ignore[return-value]  # no None labels left


def parse_vllm_metrics(text: str) -> VllmMetrics:
    """Parse a vLLM ``/metrics`` body; raise ``ExpositionError`` for anything that is not one."""
    read = _text_samples(text)
    if read is None:
        sample_lines, saw_vllm = _wanted_sample_lines(text)
        fast = _fast_samples(sample_lines) if saw_vllm else None
    else:
        fast, saw_vllm = read
    if not saw_vllm:
        snippet = text.strip()[:60].replace("\n", " ")
        raise ExpositionError(f"no vllm: metrics in the response (starts with {snippet!r})")
    if fast is not None:
        return metrics_from_samples(fast)
    lines, _ = _relevant_lines(text)
    try:
        samples = [
            (sample.name, sample.labels, float(sample.value))
            for family in text_string_to_metric_families("\n".join(lines) + "\n")
            for sample in family.samples
        ]
    except (ValueError, TypeError, IndexError, KeyError) as exc:
        raise ExpositionError(f"malformed exposition: {exc}") from None
    return metrics_from_samples(samples)
