"""Growth curves: how the cost of a sweep, a simulation and ``/metrics`` grows with what they are given.

Each curve measures one operation at three sizes (each twice the one before) and prints the fitted growth
exponent: the least-squares slope of log(cost) against log(size). 1 is linear, 0 is constant, 2 is quadratic;
the ratio of the largest size's cost to the smallest's is the figure measured in the same run. Costs are CPU
times of this process (fastest of a few runs: the code is single-threaded pure Python, and CPU time does not
grow when neighbours share the machine).

- **catalog size** (``recommend.sweep`` over 13, 26 and 52 GPUs: half the built-in catalog, all of it, and all
  of it twice under other names): the roofline sweep, and the sweep with recommendations (the cheapest
  options simulated, searches not cached);
- **request count** (``serving.simulate``, 1,024 + 200 tokens, Poisson 10 req/s: 250, 500, 1,000 requests);
- **output length** (300 requests at Poisson 10 req/s, 1,024 prompt tokens: 100, 200, 400 output tokens);
- **deployments** (``/metrics`` with 250, 500, 1,000 deployments of 3 pods: the full render, and the
  ``ExpositionCache`` scrape once the fleet part is rendered for the refresh).

Run: ``python -m bench.bench_growth``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from bench.bench_live import FIXTURE, _observations, _predictions
from service.catalog.builtin import builtin_snapshot
from service.core.planner import PlanRequest, plan
from service.core.recommend import Workload, _rate_search, sweep
from service.core.serving import BenchmarkSpec, simulate
from service.exporter.collector import AdmissionMetrics, SelfMetrics, render_metrics
from service.exporter.exposition import ExpositionCache


@dataclass(frozen=True, slots=True, kw_only=True)
class Curve:
    name: str
    unit: str  # what the size counts
    sizes: tuple[int, ...]
    seconds: tuple[float, ...]

    @property
    def exponent(self) -> float:
        """Least-squares slope of log(seconds) against log(size)."""
        xs = [math.log(s) for s in self.sizes]
        ys = [math.log(max(t, 1e-9)) for t in self.seconds]
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        sxx = sum((x - mx) ** 2 for x in xs)
        return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx

    @property
    def growth(self) -> float:
        """Cost at the largest size over the cost at the smallest."""
        return self.seconds[-1] / self.seconds[0]

    @property
    def points(self) -> str:
        return ", ".join(
            f"{size:,} {self.unit}: {t * 1e3:,.1f} ms"
            for size, t in zip(self.sizes, self.seconds, strict=True)
        )


def _fastest(fn: Callable[[], Any], *, repeat: int, before: Callable[[], Any] | None = None) -> float:
    best = math.inf
    for _ in range(repeat):
        if before is not None:
            before()
        start = time.process_time()
        fn()
        best = min(best, time.process_time() - start)
    return best


def _curve(name: str, unit: str, sizes: Sequence[int], cost: Callable[[int], float]) -> Curve:
    return Curve(name=name, unit=unit, sizes=tuple(sizes), seconds=tuple(cost(size) for size in sizes))


def catalog_curves(*, repeat: int = 3) -> list[Curve]:
    catalog = builtin_snapshot()
    model = catalog.find_model("llama-3.1-8b")
    assert model is not None
    gpus = [g.spec for g in catalog.gpus.values()]
    doubled = gpus + [replace(g, name=f"{g.name}-second") for g in gpus]
    request = PlanRequest(model=model.spec)
    workload = Workload(requests_per_second=5, prompt_tokens=1000, output_tokens=200, tpot_seconds=0.05)
    sizes = (len(gpus) // 2, len(gpus), 2 * len(gpus))

    def roofline(n: int) -> float:
        return _fastest(lambda: sweep(request, workload, doubled[:n], simulate=False), repeat=repeat)

    def recommended(n: int) -> float:
        return _fastest(
            lambda: sweep(request, workload, doubled[:n]), repeat=repeat, before=_rate_search.cache_clear
        )

    return [
        _curve("sweep (roofline) vs catalog size", "GPUs", sizes, roofline),
        _curve("sweep with recommendations (cheapest simulated) vs catalog size", "GPUs", sizes, recommended),
    ]


def serving_curves(*, repeat: int = 3) -> list[Curve]:
    catalog = builtin_snapshot()
    model = catalog.find_model("llama-3.1-8b")
    gpu = catalog.find_gpu("h100-sxm-80gb")
    assert model is not None and gpu is not None
    request = PlanRequest(model=model.spec, gpu=gpu.spec, max_model_len=8192)
    capacity = plan(request)

    def requests(n: int) -> float:
        spec = BenchmarkSpec(num_prompts=n, random_input_len=1024, random_output_len=200, request_rate=10.0)
        return _fastest(lambda: simulate(request, spec, plan=capacity), repeat=repeat)

    def output(tokens: int) -> float:
        spec = BenchmarkSpec(
            num_prompts=300, random_input_len=1024, random_output_len=tokens, request_rate=10.0
        )
        return _fastest(lambda: simulate(request, spec, plan=capacity), repeat=repeat)

    return [
        _curve(
            "simulate vs request count (1,024 + 200 tokens, 10 req/s)", "requests", (250, 500, 1000), requests
        ),
        _curve(
            "simulate vs output length (300 requests, 10 req/s)", "output tokens", (100, 200, 400), output
        ),
    ]


def metrics_curves(*, repeat: int = 3) -> list[Curve]:
    body = FIXTURE.read_text()
    sizes = (250, 500, 1000)
    fleets = {n: _observations(n, body) for n in sizes}
    self_metrics, admission = SelfMetrics(deployments_tracked=1000), AdmissionMetrics()

    def full(n: int) -> float:
        predictions, observations = _predictions(list(fleets[n])), fleets[n]
        return _fastest(
            lambda: render_metrics(predictions, observations, self_metrics, admission), repeat=repeat
        )

    def prepare(n: int) -> float:
        predictions, observations = _predictions(list(fleets[n])), fleets[n]
        return _fastest(lambda: ExpositionCache().prepare(predictions, observations), repeat=repeat)

    def scrape(n: int) -> float:
        predictions, observations = _predictions(list(fleets[n])), fleets[n]
        cache = ExpositionCache()
        cache.prepare(predictions, observations)
        return _fastest(
            lambda: cache.render(predictions, observations, self_metrics, admission), repeat=10 * repeat
        )

    return [
        _curve("/metrics full render vs deployments", "deployments", sizes, full),
        _curve(
            "/metrics once-per-refresh render (ExpositionCache.prepare) vs deployments",
            "deployments",
            sizes,
            prepare,
        ),
        _curve(
            "GET /metrics with the fleet rendered once per refresh vs deployments",
            "deployments",
            sizes,
            scrape,
        ),
    ]


def run(*, repeat: int = 3) -> list[Curve]:
    return [*catalog_curves(repeat=repeat), *serving_curves(repeat=repeat), *metrics_curves(repeat=repeat)]


def main() -> None:
    for curve in run():
        print(f"{curve.name:<84} exponent {curve.exponent:5.2f}  ×{curve.growth:6.2f}  ({curve.points})")


if __name__ == "__main__":
    main()
