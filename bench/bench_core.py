"""Core benchmarks: one plan, a 1,000-configuration sweep, and a recommendation sweep over the catalog.

Each figure is CPU time (see ``_median_seconds``) printed with a baseline measured in the same run:

- a 1,000-configuration sweep (model × GPU × TP × KV dtype × context) against 1,000 × the time of one plan;
- a full catalog sweep (every GPU × TP × KV dtype × quantisation, with recommendations) for one model and
  workload, against the time of one plan — and its absolute time, since the issue's bar is "under 100 ms";
- the same sweep with every option the roofline does not exclude simulated (its per-replica rate at the SLO),
  against the roofline sweep — and its absolute time against the bar of 2 s on one core.

Run: ``python -m bench.bench_core``.
"""

from __future__ import annotations

import itertools
import statistics
import time
from collections.abc import Callable
from typing import Any

from service.catalog.builtin import builtin_snapshot
from service.core.planner import PlanRequest, plan
from service.core.planner.features import LoraConfig, ServingFeatures, SpeculativeConfig
from service.core.recommend import Workload, _rate_search, sweep


def _median_seconds(fn: Callable[[], Any], *, repeat: int) -> float:
    """Median CPU time of this process per call: the core is single-threaded pure Python, so CPU time is its
    cost, and unlike wall time it does not grow when other processes share the machine's two cores."""
    return statistics.median(_samples(fn, repeat=repeat))


def _min_seconds(fn: Callable[[], Any], *, repeat: int) -> float:
    """Fastest of ``repeat`` runs (CPU time): on a shared VM the slower runs measure the neighbours."""
    return min(_samples(fn, repeat=repeat))


def _samples(fn: Callable[[], Any], *, repeat: int) -> list[float]:
    samples = []
    for _ in range(repeat):
        start = time.process_time()
        fn()
        samples.append(time.process_time() - start)
    return samples


def run() -> list[dict[str, Any]]:
    catalog = builtin_snapshot()
    model = catalog.find_model("llama-3.1-8b")
    gpu = catalog.find_gpu("h100-sxm-80gb")
    assert model is not None and gpu is not None
    single = PlanRequest(model=model.spec, gpu=gpu.spec, max_model_len=8192)
    one = _min_seconds(lambda: plan(single), repeat=200)
    one_fast = _median_seconds(
        lambda: plan(
            PlanRequest(model=model.spec, gpu=gpu.spec, max_model_len=8192, suggest=False, detail=False)
        ),
        repeat=200,
    )

    # Serving features go through one extra stage; without them (above) the planner never enters it.
    featured = PlanRequest(
        model=model.spec,
        gpu=gpu.spec,
        max_model_len=8192,
        features=ServingFeatures(
            lora=LoraConfig(max_loras=4, max_lora_rank=16),
            speculative=SpeculativeConfig(method="ngram", num_speculative_tokens=4),
            data_parallel_size=2,
            shared_prefix_tokens=4096,
        ),
    )
    with_features = _min_seconds(lambda: plan(featured), repeat=200)

    models = [
        catalog.models[n].spec
        for n in ("llama-3.1-8b", "llama-3.1-70b", "qwen3-30b-a3b", "gemma-3-27b", "mistral-7b-v0.1")
    ]
    gpus = [g.spec for g in catalog.gpus.values()][:10]
    configs = list(itertools.product(models, gpus, (1, 2, 4, 8), ("auto", "fp8"), (4096, 8192, 32768)))[:1000]

    def thousand() -> None:
        for m, g, tp, kv, length in configs:
            plan(
                PlanRequest(
                    model=m,
                    gpu=g,
                    tensor_parallel_size=tp,
                    kv_cache_dtype=kv,
                    max_model_len=length,
                    suggest=False,
                    detail=False,
                )
            )

    sweep_1000 = _median_seconds(thousand, repeat=3)
    all_gpus = [g.spec for g in catalog.gpus.values()]
    workload = Workload(requests_per_second=5, prompt_tokens=1000, output_tokens=200, tpot_seconds=0.05)
    # The first sweep simulates (rate searches of the cheapest options); later ones answer from the cache.
    _rate_search.cache_clear()
    cold = _samples(lambda: sweep(PlanRequest(model=model.spec), workload, all_gpus), repeat=1)[0]
    runs = _samples(lambda: sweep(PlanRequest(model=model.spec), workload, all_gpus), repeat=9)
    catalog_sweep, catalog_median = min(runs), statistics.median(runs)
    roofline_only = min(
        _samples(lambda: sweep(PlanRequest(model=model.spec), workload, all_gpus, simulate=False), repeat=5)
    )
    # Every option the roofline does not exclude simulated (its per-replica rate at the SLO), searches uncached.
    _rate_search.cache_clear()
    every: list[Any] = []
    every_option = _samples(
        lambda: every.extend(
            sweep(PlanRequest(model=model.spec), workload, all_gpus, simulate_every_option=True)
        ),
        repeat=1,
    )[0]
    simulated = [o for o in every if o.plan is not None and o.sizing == "simulated"]
    return [
        {
            "name": "core plan (Llama-3.1-8B on H100, full detail)",
            "seconds": one,
            "baseline": None,
            "note": "one call",
        },
        {
            "name": "core plan with serving features (LoRA, ngram, DP 2, shared prefix)",
            "seconds": with_features,
            "baseline": one,
            "note": "vs the same plan without features",
        },
        {
            "name": "core plan, verdict only (sweep mode)",
            "seconds": one_fast,
            "baseline": one,
            "note": "vs full detail",
        },
        {
            "name": f"{len(configs)}-configuration sweep",
            "seconds": sweep_1000,
            "baseline": one_fast * len(configs),
            "note": "vs 1,000 × one plan (verdict only)",
        },
        {
            "name": f"catalog sweep with recommendations ({len(all_gpus)} GPUs × TP × KV × quant)",
            "seconds": catalog_sweep,
            "baseline": one,
            "note": f"vs one plan; searches cached; fastest of 9 runs (median {catalog_median * 1e3:.0f} ms); bar: < 0.100 s",
        },
        {
            "name": "catalog sweep, first time (simulating the cheapest options)",
            "seconds": cold,
            "baseline": roofline_only,
            "note": f"vs the same sweep on the roofline alone ({roofline_only * 1e3:.0f} ms)",
        },
        {
            "name": f"catalog-wide recommendation, every option simulated ({len(all_gpus)} GPUs × TP × KV × quant)",
            "seconds": every_option,
            "baseline": roofline_only,
            "note": f"vs the roofline sweep; {len(simulated)} options, "
            f"{sum(o.simulations for o in simulated)} simulations, one core",
        },
    ]


def main() -> None:
    for row in run():
        ratio = f"{row['seconds'] / row['baseline']:.2f}×" if row["baseline"] else "–"
        print(f"{row['name']:<72} {row['seconds'] * 1e3:10.3f} ms  {ratio:>8}  {row['note']}")


if __name__ == "__main__":
    main()
