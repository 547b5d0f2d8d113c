"""Print the measured-vs-simulated table of the recorded real-vLLM runs (for ``tests/data/vllm_bench_cpu/README.md``).

``python -m tests.vllm_bench_cpu.report`` from the repository root; ``--refit`` fits the coefficients on the
calibration run again (and writes ``fitted_coefficients.json``) instead of reading them.
"""

from __future__ import annotations

import argparse
import json
import sys

from tests.vllm_bench_cpu import checks, replay


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--refit", action="store_true")
    args = parser.parse_args(argv)
    case = replay.load_case()
    path = replay.DATA_DIR / "fitted_coefficients.json"
    if args.refit:
        fit = replay.fit_coefficients(case)
        path.write_text(json.dumps(fit.as_json(), indent=1) + "\n")
    coefficients = replay.coefficients_from_json(json.loads(path.read_text()))
    sys.stdout.write(checks.comparison_table(case, coefficients) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
