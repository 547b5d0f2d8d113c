"""Request lengths as ``vllm bench serve`` samples them (stage 1 of the serving simulator).

``vllm bench serve`` decides, before sending anything, how many prompt tokens each request carries and how many
tokens it asks for (``max_tokens``; with ``--ignore-eos`` or a model that never stops early, exactly what it
gets). The simulator needs only those two numbers per request, plus the length of a prefix shared by all
requests (prefix-cache hits).

* ``random`` (``vllm/benchmarks/datasets/random.py::RandomDataset.get_sampling_params``, vLLM 0.11 – 0.33):
  input lengths are integers uniform in ``[floor(L·(1−r)), ceil(L·(1+r))]`` and output lengths in
  ``[max(1, floor(O·(1−r))), max(1, ceil(O·(1+r)))]`` (``r`` = ``--random-range-ratio`` in [0, 1)); the
  ``--random-prefix-len`` tokens are one fixed random prefix *prepended* to every prompt, so a request carries
  ``prefix + sampled`` prompt tokens. vLLM subtracts the tokenizer's special tokens from ``L`` before sampling
  and the server adds them back; kvcap has no tokenizer and counts ``L`` as the server sees it.
* ``sharegpt`` (``vllm/benchmarks/datasets/sharegpt.py::ShareGPTDataset.sample`` with
  ``datasets/utils.py::is_valid_sequence``): the first human turn is the prompt, the first model turn's token
  count the output length; pairs with prompt < 4 or output < 4 tokens, prompt > 1024 or prompt + output > 2048
  are dropped. kvcap cannot ship the dataset, so it samples from a *reconstruction*: a quantile table of the
  (prompt, output) lengths that survive vLLM's filter, rebuilt from published statistics of
  ``ShareGPT_V3_unfiltered_cleaned_split.json`` (see ``sharegpt_v3_lengths.json`` for every figure and its
  source). Single requests are not the dataset's, only the distribution is.
* ``explicit``: the caller's own ``(prompt_tokens, output_tokens)`` pairs, cycled to ``num_prompts``.

Sampling is deterministic for a seed (``random.Random(seed)``); it does not reproduce numpy's stream, so the
lengths match vLLM's in distribution, not request by request.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass, replace
from functools import lru_cache
from importlib import resources

from service.core.errors import InvalidSpec

DATASET_NAMES = ("random", "sharegpt", "explicit")
# datasets/utils.py::is_valid_sequence defaults (vLLM 0.11 – 0.33).
SHAREGPT_MIN_LEN_TOKENS = 4
SHAREGPT_MAX_PROMPT_TOKENS = 1024
SHAREGPT_MAX_TOTAL_TOKENS = 2048


@dataclass(frozen=True, slots=True, kw_only=True)
class BenchmarkSpec:
    """One ``vllm bench serve`` run; field names are the flag names (``--random-input-len`` → ``random_input_len``)."""

    dataset_name: str = "random"
    num_prompts: int = 1000
    request_rate: float = math.inf  # requests/s; inf = every request at t = 0
    burstiness: float = 1.0  # gamma shape; 1.0 = Poisson
    max_concurrency: int | None = None  # client-side semaphore
    random_input_len: int = 1024
    random_output_len: int = 128
    random_range_ratio: float = 0.0
    random_prefix_len: int = 0
    seed: int = 0
    requests: tuple[tuple[int, int], ...] | None = None  # explicit (prompt_tokens, output_tokens)
    # Before the timed run the client sends the first prompt once as a readiness probe when this is > 0
    # (``--ready-check-timeout-sec``); None: the default of the release's client (see
    # ``simulate.client_primes_first_prompt``). ``--num-warmups`` sends it that many more times.
    ready_check_timeout_sec: int | None = None
    num_warmups: int = 0
    # Speculative decoding only: vLLM's "Mean acceptance length" of this workload (1 + accepted draft tokens per
    # draft, ``vllm/v1/spec_decode/metrics.py``), in [1, 1 + num_speculative_tokens]; None: the method's
    # default (``speculative.DEFAULT_POSITION_ACCEPTANCE``). Ignored for a plan without speculative decoding.
    spec_mean_acceptance_length: float | None = None

    def __post_init__(self) -> None:
        if self.dataset_name not in DATASET_NAMES:
            raise InvalidSpec(f"must be one of {', '.join(DATASET_NAMES)}", field="benchmark.dataset_name")
        if self.num_prompts < 1:
            raise InvalidSpec("must be ≥ 1", field="benchmark.num_prompts")
        if math.isnan(self.request_rate) or self.request_rate <= 0:
            raise InvalidSpec("must be > 0 (or inf)", field="benchmark.request_rate")
        if math.isnan(self.burstiness) or self.burstiness <= 0:
            raise InvalidSpec("must be > 0", field="benchmark.burstiness")
        if self.max_concurrency is not None and self.max_concurrency < 1:
            raise InvalidSpec("must be ≥ 1", field="benchmark.max_concurrency")
        if self.random_input_len < 1:
            raise InvalidSpec("must be ≥ 1", field="benchmark.random_input_len")
        if self.random_output_len < 1:
            raise InvalidSpec("must be ≥ 1", field="benchmark.random_output_len")
        if not 0.0 <= self.random_range_ratio < 1.0:
            raise InvalidSpec("must be in [0, 1)", field="benchmark.random_range_ratio")
        if self.random_prefix_len < 0:
            raise InvalidSpec("must be ≥ 0", field="benchmark.random_prefix_len")
        if self.ready_check_timeout_sec is not None and self.ready_check_timeout_sec < 0:
            raise InvalidSpec("must be ≥ 0", field="benchmark.ready_check_timeout_sec")
        if self.num_warmups < 0:
            raise InvalidSpec("must be ≥ 0", field="benchmark.num_warmups")
        length = self.spec_mean_acceptance_length
        if length is not None and not (math.isfinite(length) and length >= 1.0):
            raise InvalidSpec(
                "must be ≥ 1 (1 + accepted tokens per draft)", field="benchmark.spec_mean_acceptance_length"
            )
        if self.dataset_name == "explicit":
            if not self.requests:
                raise InvalidSpec("explicit datasets need (prompt, output) pairs", field="benchmark.requests")
            for i, (prompt, output) in enumerate(self.requests):
                if prompt < 1 or output < 1:
                    raise InvalidSpec(
                        f"request {i}: prompt and output tokens must be ≥ 1", field="benchmark.requests"
                    )


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestLengths:
    """One request as the server sees it."""

    prompt_tokens: int
    output_tokens: int
    shared_prefix_tokens: int = 0  # leading prompt tokens identical across requests (prefix cache)


@dataclass(frozen=True, slots=True, kw_only=True)
class LengthTable:
    """Joint quantile table of a dataset's (prompt, output) lengths: ``rows`` of equal probability."""

    rows: tuple[tuple[int, int], ...]
    source: str


def random_bounds(length: int, range_ratio: float, *, minimum: int = 0) -> tuple[int, int]:
    """``[floor(L·(1−r)), ceil(L·(1+r))]``, each at least ``minimum`` (RandomDataset.get_sampling_params)."""
    low = math.floor(length * (1 - range_ratio))
    high = math.ceil(length * (1 + range_ratio))
    return max(low, minimum), max(high, minimum)


def _sample_random(spec: BenchmarkSpec, rng: random.Random) -> tuple[RequestLengths, ...]:
    in_low, in_high = random_bounds(spec.random_input_len, spec.random_range_ratio)
    out_low, out_high = random_bounds(spec.random_output_len, spec.random_range_ratio, minimum=1)
    if spec.random_prefix_len + in_low < 1:
        raise InvalidSpec("prefix + sampled input must be ≥ 1 token", field="benchmark.random_input_len")
    # vLLM draws all input lengths, then all output lengths (two integers() calls); keep that order.
    inputs = [rng.randint(in_low, in_high) for _ in range(spec.num_prompts)]
    outputs = [rng.randint(out_low, out_high) for _ in range(spec.num_prompts)]
    return tuple(
        RequestLengths(
            prompt_tokens=spec.random_prefix_len + i,
            output_tokens=o,
            shared_prefix_tokens=spec.random_prefix_len,
        )
        for i, o in zip(inputs, outputs, strict=True)
    )


@lru_cache(maxsize=1)
def sharegpt_table() -> LengthTable:
    """The packaged ShareGPT V3 length table (a reconstruction from published statistics; see the JSON)."""
    text = resources.files("service.core.serving").joinpath("sharegpt_v3_lengths.json").read_text("utf-8")
    data = json.loads(text)
    rows = tuple((int(p), int(o)) for p, o in data["rows"])
    return LengthTable(rows=rows, source=str(data["source"]))


def is_valid_sharegpt_pair(prompt_tokens: int, output_tokens: int) -> bool:
    """vLLM's ``is_valid_sequence`` with its defaults."""
    return (
        prompt_tokens >= SHAREGPT_MIN_LEN_TOKENS
        and output_tokens >= SHAREGPT_MIN_LEN_TOKENS
        and prompt_tokens <= SHAREGPT_MAX_PROMPT_TOKENS
        and prompt_tokens + output_tokens <= SHAREGPT_MAX_TOTAL_TOKENS
    )


def _sample_sharegpt(spec: BenchmarkSpec, rng: random.Random) -> tuple[RequestLengths, ...]:
    rows = sharegpt_table().rows
    # vLLM shuffles the conversations with random.seed(seed) and takes them in order; drawing rows of an
    # equal-probability table uniformly is the same in distribution.
    picks = [rows[rng.randrange(len(rows))] for _ in range(spec.num_prompts)]
    return tuple(RequestLengths(prompt_tokens=p, output_tokens=o) for p, o in picks)


def _explicit(spec: BenchmarkSpec) -> tuple[RequestLengths, ...]:
    assert spec.requests is not None
    pairs = spec.requests
    return tuple(
        RequestLengths(prompt_tokens=pairs[i % len(pairs)][0], output_tokens=pairs[i % len(pairs)][1])
        for i in range(spec.num_prompts)
    )


def sample_requests(spec: BenchmarkSpec) -> tuple[RequestLengths, ...]:
    """``num_prompts`` requests of the spec's dataset, deterministic for ``spec.seed``.

    The lengths do not depend on the rate, the burstiness or the client gate, so a rate search's simulations
    share one draw (kept by the fields that decide it; the result is immutable).
    """
    return _sample_lengths(
        replace(spec, request_rate=math.inf, burstiness=1.0, max_concurrency=None)
        if spec.request_rate != math.inf or spec.burstiness != 1.0 or spec.max_concurrency is not None
        else spec
    )


@lru_cache(maxsize=256)
def _sample_lengths(spec: BenchmarkSpec) -> tuple[RequestLengths, ...]:
    rng = random.Random(spec.seed)
    if spec.dataset_name == "random":
        return _sample_random(spec, rng)
    if spec.dataset_name == "sharegpt":
        return _sample_sharegpt(spec, rng)
    return _explicit(spec)
