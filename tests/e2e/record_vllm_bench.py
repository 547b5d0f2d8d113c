"""Record ``vllm bench serve`` runs against a real vLLM (CPU build) into ``tests/data/vllm_bench_cpu/``.

Starts the shrunk Llama of ``vllm_bench.SERVER`` (dummy weights, every scheduler input pinned), runs each of
``vllm_bench.BENCH_RUNS`` one after another with vLLM's own benchmark client, stops the server by its process
id, and writes one trimmed result JSON per run plus ``machine.json`` (CPU, cores, versions, flags). Then fits
the step-time coefficients on the calibration run and writes ``fitted_coefficients.json``.

Usage (from the repository root)::

    .venv/bin/python tests/e2e/record_vllm_bench.py              # writes tests/data/vllm_bench_cpu/
    .venv/bin/python tests/e2e/record_vllm_bench.py --out /tmp/x  # somewhere else
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.e2e import vllm_bench as bench
from tests.vllm_bench_cpu import replay

OUT_DIR = Path(__file__).resolve().parents[2] / "tests" / "data" / "vllm_bench_cpu"


def say(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT_DIR)
    parser.add_argument("--only", default="", help="comma-separated run names (default: all)")
    parser.add_argument("--no-fit", action="store_true")
    args = parser.parse_args(argv)
    only = {s for s in args.only.split(",") if s}
    runs = [r for r in bench.BENCH_RUNS if not only or r.name in only]
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="vllm-bench-") as tmp:
        work = Path(tmp)
        started = time.time()
        server = bench.start_bench_server(work)
        startup_lines = bench.startup_lines(server)
        cache_info = server.cache_config_info()
        loads: dict[str, list[float]] = {}
        try:
            say(f"vLLM healthy after {time.time() - started:.0f} s: {startup_lines[-1:]}")
            raws = bench.run_bench_series(server, runs, work / "results")
            loads["after_all_runs"] = [round(x, 2) for x in os.getloadavg()]
            for run in runs:
                raw = raws[run.name]
                trimmed = bench.trim_result(raw, run)
                (args.out / f"{run.name}.json").write_text(json.dumps(trimmed, indent=1) + "\n")
                say(
                    f"{run.name}: duration {raw['duration']:.2f} s, "
                    f"completed {raw['completed']}, mean TTFT {raw['mean_ttft_ms']:.1f} ms, "
                    f"mean TPOT {raw['mean_tpot_ms']:.2f} ms, "
                    f"steps {raw['server_metrics_delta'].get('vllm:iteration_tokens_total_count')}, "
                    f"preemptions {raw['server_metrics_delta'].get('vllm:num_preemptions_total')}"
                )
        finally:
            server.stop()
    machine = bench.machine_description()
    machine["server"] = bench.SERVER.as_dict()
    machine["vllm_startup_lines"] = startup_lines
    machine["vllm_cache_config_info"] = {
        k: cache_info[k] for k in ("num_gpu_blocks", "block_size", "kv_cache_memory_bytes") if k in cache_info
    }
    machine["run_order"] = [r.name for r in runs]
    machine["load_average"] = loads
    machine["recorded_at_utc"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    (args.out / "machine.json").write_text(json.dumps(machine, indent=1) + "\n")
    if not args.no_fit:
        case = replay.load_case(args.out)
        fit = replay.fit_coefficients(case)
        (args.out / "fitted_coefficients.json").write_text(json.dumps(fit.as_json(), indent=1) + "\n")
        say(json.dumps(fit.as_json(), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
