"""Command-line start-up: `kvcap plan` and `kvcap check` as whole processes against `python -c pass`.

The commands run the installed ``kvcap`` script, whose entry point answers an offline plan or check before
typer is imported (``service.cli_fast``); ``import typer`` alone is measured beside them for scale.

Pipelines call `kvcap check` once per manifest, so the cost is the process: interpreter start, imports, one
answer, exit. Each command and the baseline run in turn (A B A B …) and the ratio is taken pair by pair, so a
drift in the machine's speed moves both sides of a ratio alike. Wall time is what a pipeline waits; CPU time
(user + system of the finished child) is what the command costs and does not grow when neighbours share the
cores, so both are printed.

Bytecode is written to a private cache and one unmeasured run warms it, as an installed package has its ``.pyc``
files: compiling the sources on every start-up would measure the compiler, not kvcap.

Run: ``python -m bench.bench_cli``.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RENDERED = ROOT / "tests" / "admission" / "data" / "rendered-chart.yaml"

BASELINE = ("-c", "pass")
# The installed ``kvcap`` script (what a pipeline runs: ``service.cli_fast:main``) run by this interpreter, or the
# same entry point by module when the script is not installed next to it.
_SCRIPT = Path(sys.executable).with_name("kvcap")
KVCAP = (str(_SCRIPT),) if _SCRIPT.exists() else ("-m", "service.cli_fast")
COMMANDS = {
    "kvcap plan (offline)": (*KVCAP, "plan", "--model", "llama-3.1-8b", "--gpu", "h100-sxm-80gb"),
    "kvcap check -f (offline)": (*KVCAP, "check", "-f", str(RENDERED)),
    # typer and click alone (what ``kvcap --help`` and every other command load first), for comparison
    "import typer": ("-c", "import typer"),
}


@dataclass(frozen=True, slots=True, kw_only=True)
class ProcessCost:
    wall_seconds: float
    cpu_seconds: float


@dataclass(frozen=True, slots=True, kw_only=True)
class StartupResult:
    name: str
    wall_seconds: float  # median over runs
    cpu_seconds: float
    baseline_wall_seconds: float
    baseline_cpu_seconds: float
    wall_ratio: float  # median of the per-pair ratios
    cpu_ratio: float


def _environment(cache_dir: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = cache_dir
    env["COLUMNS"] = "150"
    return env


def _run_once(args: tuple[str, ...], env: dict[str, str]) -> ProcessCost:
    start = time.perf_counter()
    with subprocess.Popen(
        [sys.executable, *args], cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    ) as child:
        _, _, usage = os.wait4(child.pid, 0)
        child.returncode = 0  # reaped above; keeps Popen from waiting again
    wall = time.perf_counter() - start
    return ProcessCost(wall_seconds=wall, cpu_seconds=usage.ru_utime + usage.ru_stime)


def run(*, runs: int = 7) -> list[StartupResult]:
    results = []
    with tempfile.TemporaryDirectory(prefix="kvcap-bench-pyc-") as cache_dir:
        env = _environment(cache_dir)
        for args in (BASELINE, *COMMANDS.values()):
            _run_once(args, env)  # warm the bytecode cache and the page cache
        for name, args in COMMANDS.items():
            pairs = [(_run_once(args, env), _run_once(BASELINE, env)) for _ in range(runs)]
            results.append(
                StartupResult(
                    name=name,
                    wall_seconds=statistics.median(a.wall_seconds for a, _ in pairs),
                    cpu_seconds=statistics.median(a.cpu_seconds for a, _ in pairs),
                    baseline_wall_seconds=statistics.median(b.wall_seconds for _, b in pairs),
                    baseline_cpu_seconds=statistics.median(b.cpu_seconds for _, b in pairs),
                    wall_ratio=statistics.median(a.wall_seconds / b.wall_seconds for a, b in pairs),
                    cpu_ratio=statistics.median(
                        a.cpu_seconds / b.cpu_seconds for a, b in pairs if b.cpu_seconds > 0
                    ),
                )
            )
    return results


def main() -> None:
    for r in run():
        print(
            f"{r.name:<26} wall {r.wall_seconds * 1e3:8.1f} ms ({r.wall_ratio:5.1f}× python -c pass "
            f"{r.baseline_wall_seconds * 1e3:.1f} ms)   cpu {r.cpu_seconds * 1e3:8.1f} ms "
            f"({r.cpu_ratio:5.1f}× {r.baseline_cpu_seconds * 1e3:.1f} ms)"
        )


if __name__ == "__main__":
    main()
