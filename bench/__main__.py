"""``make bench``: every benchmark in one table of ratios against baselines measured in the same run.

Absolute times on a shared 2-core machine wander; ratios against a baseline taken a moment before under the
same conditions do not, so every row says what it is compared with. No test asserts a time.

    python -m bench [--quick]
"""

from __future__ import annotations

import argparse
import math
import resource
import sys
from dataclasses import dataclass

from bench import (
    bench_admission,
    bench_api,
    bench_cli,
    bench_core,
    bench_growth,
    bench_live,
    bench_registry,
    bench_replan,
    bench_simulator,
    bench_ui,
)


@dataclass(frozen=True)
class Row:
    benchmark: str
    value: str
    baseline: str
    ratio: float | None
    target: str = ""


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.3f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description="kvcap benchmarks")
    parser.add_argument("--quick", action="store_true", help="shorter load phases (less stable p99s)")
    args = parser.parse_args()
    seconds = 4.0 if args.quick else 8.0
    rows: list[Row] = []

    api = {r["name"]: r for r in bench_api.run(rate=100.0, seconds=seconds)}
    bare = api["bare FastAPI endpoint"]
    targets = {"POST /v1/plans (repeated requests)": "≤ 1.1×", "POST /v1/plans (every request new)": "≤ 1.3×"}
    for name, target in targets.items():
        r = api[name]
        rows.append(
            Row(
                f"{name} p50",
                f"{r['p50_ms']:.3f} ms",
                f"bare endpoint (same body parsed, plan-sized JSON) {bare['p50_ms']:.3f} ms",
                r["p50_ratio"],
                target,
            )
        )
        rows.append(
            Row(
                f"{name} p99",
                f"{r['p99_ms']:.3f} ms",
                f"bare endpoint {bare['p99_ms']:.3f} ms",
                r["p99_ratio"],
            )
        )

    for r in bench_core.run():
        ratio = r["seconds"] / r["baseline"] if r["baseline"] else None
        rows.append(
            Row(
                r["name"],
                _ms(r["seconds"]),
                r["note"],
                ratio,
                "< 100 ms"
                if "catalog sweep" in r["name"]
                else "≤ 2 s"
                if "every option" in r["name"]
                else "",
            )
        )

    admission = {r["name"]: r for r in bench_admission.run(rate=200.0, seconds=seconds, fleet=True)}
    bare_hook = admission["bare FastAPI endpoint"]
    for name in ("webhook, recorded reviews", "webhook, every review a new plan"):
        r = admission[name]
        rows.append(
            Row(
                f"{name} p99 @200 rps (database stopped)",
                f"{r['p99_ms']:.3f} ms",
                f"bare endpoint {bare_hook['p99_ms']:.3f} ms",
                r["p99_vs_bare"],
                "p99 < 10 ms",
            )
        )

    for name, r in admission.items():
        if "live deployments scraped" in name:
            rows.append(
                Row(
                    f"{name} p99 @200 rps",
                    f"{r['p99_ms']:.3f} ms",
                    f"bare endpoint {bare_hook['p99_ms']:.3f} ms; {r['dropped']} dropped; {r['fleet_note']}",
                    r["p99_vs_bare"],
                    "p99 < 10 ms, 0 dropped" if "worker process" in name else "",
                )
            )
            if r.get("handovers"):
                rows.append(
                    Row(
                        "serving process's GIL taking in one snapshot during that load (max)",
                        f"{r['handover_held_ms_max']:.3f} ms",
                        f"median {r['handover_held_ms_median']:.3f} ms over {r['handovers']} refreshes; "
                        f"{r['handover_pieces']} pieces, at most {r['handover_longest_ms_max']:.3f} ms at a stretch",
                        None,
                    )
                )
            if r.get("refresh_s") is not None:
                rows.append(
                    Row(
                        f"refresh of {bench_admission.FLEET:,} live targets during that load "
                        f"({name.rsplit(' on the ', 1)[-1]})",
                        _ms(r["refresh_s"]),
                        "KVCAP_SCRAPE_CONCURRENCY default (32)",
                        None,
                        "< 1.5 s" if "worker process" in name else "",
                    )
                )

    registry = bench_registry.run(count=300 if args.quick else 1000)
    rows.append(
        Row(
            f"register the {registry.count:,}th deployment (POST /v1/deployments, CPU)",
            _ms(registry.last_seconds),
            f"the 1st: {_ms(registry.first_seconds)}; a full reload at {registry.count:,}: "
            f"{_ms(registry.reload_seconds)}",
            registry.growth_ratio,
            "≤ 2×",
        )
    )

    for r in bench_simulator.run():
        rows.append(
            Row(
                r["name"],
                _ms(r["seconds"]),
                r["note"],
                r["seconds"] / r["baseline"] if r["baseline"] else None,
                r["target"],
            )
        )

    for r in bench_replan.run():
        rows.append(
            Row(
                r["name"],
                _ms(r["seconds"]),
                r["note"],
                r["seconds"] / r["baseline"] if r["baseline"] else None,
                r["target"],
            )
        )

    for name, seconds_taken, note in bench_live.run():
        target = (
            "≤ 50 ms" if name.startswith("GET /metrics") else "< 1.5 s" if name.startswith("refresh") else ""
        )
        rows.append(Row(name, _ms(seconds_taken), note, None, target))
    for name, value, note in bench_live.memory_rows(bench_live.memory()):
        rows.append(Row(name, value, note, None, "< 300 MiB" if "RSS" in name else ""))

    for curve in bench_growth.run(repeat=2 if args.quick else 3):
        rows.append(
            Row(
                f"growth: {curve.name}",
                f"exponent {curve.exponent:.2f}",
                curve.points,
                curve.growth,
                f"×{curve.sizes[-1] // curve.sizes[0]} size",
            )
        )

    for r in bench_cli.run(runs=5 if args.quick else 9):
        kvcap = r.name.startswith("kvcap")
        rows.append(
            Row(
                f"{r.name}, whole process, wall",
                _ms(r.wall_seconds),
                f"python -c pass {_ms(r.baseline_wall_seconds)}",
                r.wall_ratio,
                "≤ 10×, 0.3 s" if kvcap else "",
            )
        )
        rows.append(
            Row(
                f"{r.name}, whole process, CPU",
                _ms(r.cpu_seconds),
                f"python -c pass {_ms(r.baseline_cpu_seconds)}",
                r.cpu_ratio,
                "≤ 10×" if kvcap else "",
            )
        )

    ui = bench_ui.run(repeats=5 if args.quick else 9)
    if ui is None:
        rows.append(
            Row("/ui first render in Chromium", "not measured", "Chromium or Playwright missing", None)
        )
    else:
        rows.append(
            Row(
                "/ui first render in Chromium (verdict + memory bar)",
                f"{ui['ui_ms']:.1f} ms",
                f"bare page with one API call {ui['bare_ms']:.1f} ms",
                ui["ui_ms"] / ui["bare_ms"],
                "< 200 ms",
            )
        )

    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    rows.append(
        Row(
            "peak RSS of this process (servers, catalog, 1,000 deployments)",
            f"{peak_kib / 1024:,.0f} MiB",
            "",
            None,
        )
    )

    width = max(len(r.benchmark) for r in rows)
    print(f"{'benchmark':<{width}}  {'value':>14}  {'ratio':>8}  {'target':<12}  baseline")
    print("-" * (width + 60))
    for r in rows:
        ratio = f"{r.ratio:.2f}×" if r.ratio is not None and math.isfinite(r.ratio) else "–"
        print(f"{r.benchmark:<{width}}  {r.value:>14}  {ratio:>8}  {r.target:<12}  {r.baseline}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
