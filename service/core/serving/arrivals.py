"""When ``vllm bench serve`` sends each request (stage 2 of the serving simulator).

``vllm/benchmarks/serve.py::get_request`` (vLLM 0.11 – 0.33):

* ``--request-rate inf`` sends every request at once (delay 0);
* otherwise the gaps are gamma-distributed with ``shape = burstiness`` and ``scale = 1 / (rate × burstiness)``
  (mean gap ``1 / rate``; burstiness 1 is a Poisson process), accumulated into send offsets;
* without a ramp-up the offsets are then rescaled so the last one is exactly ``num_prompts / rate`` (vLLM does
  this to make runs with different seeds comparable: "their sum would have 1-2% gap from target").

``--max-concurrency`` is a client-side ``asyncio.Semaphore`` around each request: a request whose send time has
come waits until fewer than ``max_concurrency`` requests are in flight. That gate depends on completions, so
the engine loop applies it (``engine.py``); this module only yields the scheduled send offsets.
"""

from __future__ import annotations

import math
import random
from functools import lru_cache


def arrival_offsets_seconds(
    num_requests: int, *, request_rate: float, burstiness: float = 1.0, seed: int = 0
) -> tuple[float, ...]:
    """Send offsets from the benchmark start, in seconds, non-decreasing; deterministic for ``seed``."""
    if num_requests < 1:
        return ()
    if math.isinf(request_rate):
        return (0.0,) * num_requests
    gaps: list[float]
    if math.isinf(burstiness):
        gaps = [1.0 / request_rate] * num_requests  # the constant-interval limit vLLM special-cases
    elif burstiness == 1.0:
        scale = 1.0 / (request_rate * burstiness)
        gaps = [e * scale for e in unit_exponentials(num_requests, seed)]
    else:
        rng = random.Random(seed ^ 0x5EED)  # a stream apart from the length sampler's
        scale = 1.0 / (request_rate * burstiness)
        gaps = [rng.gammavariate(burstiness, scale) for _ in range(num_requests)]
    offsets: list[float] = []
    total = 0.0
    for gap in gaps:
        total += gap
        offsets.append(total)
    if offsets[-1] > 0:
        factor = (num_requests / request_rate) / offsets[-1]
        offsets = [o * factor for o in offsets]
    return tuple(offsets)


@lru_cache(maxsize=64)
def unit_exponentials(num_requests: int, seed: int) -> tuple[float, ...]:
    """The Poisson gaps of the seed's stream at rate 1: ``random.gammavariate(1.0, scale)`` is
    ``-log(1 − random()) × scale`` (CPython's shape-1 branch), so the gaps at any rate are these times
    ``1 / rate``, bit for bit — drawn once for the simulations of a rate search, which differ only in rate."""
    rng = random.Random(seed ^ 0x5EED)  # a stream apart from the length sampler's
    return tuple(-math.log(1.0 - rng.random()) for _ in range(num_requests))
