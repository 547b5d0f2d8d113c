"""Run several ``vllm bench serve`` benchmarks in one client process (executed by the vLLM interpreter).

Importing vLLM's benchmark module takes about a minute on a loaded two-core machine, so the runs of one
session share a process. ``argv[1]`` is a JSON file: ``{"base_url": ..., "out": folder, "runs": [{"name": ...,
"args": [flags of vllm bench serve]}]}``. Around each run the server's ``/metrics`` is saved to
``<out>/<name>.metrics-before.txt`` and ``.metrics-after.txt``, and the machine's load average after it to
``<name>.load.json``; vLLM writes its own result JSON (the run's
``--result-dir``/``--result-filename``). Standard library plus vLLM only.
"""

import json
import os
import sys
import time
import urllib.request
from pathlib import Path

from vllm.benchmarks.serve import add_cli_args, main
from vllm.utils.argparse_utils import FlexibleArgumentParser


def metrics(base_url: str) -> str:
    with urllib.request.urlopen(base_url + "/metrics", timeout=30) as resp:
        return resp.read().decode("utf-8", errors="replace")


def run_all(plan_path: str) -> None:
    plan = json.loads(Path(plan_path).read_text())
    out = Path(plan["out"])
    for run in plan["runs"]:
        parser = FlexibleArgumentParser()
        add_cli_args(parser)
        args = parser.parse_args(run["args"])
        (out / f"{run['name']}.metrics-before.txt").write_text(metrics(plan["base_url"]))
        started = time.time()
        main(args)
        load = {"load_average": os.getloadavg(), "wall_seconds": time.time() - started}
        (out / f"{run['name']}.load.json").write_text(json.dumps(load))
        time.sleep(1.5)  # the engine's last stats reach /metrics on its next logging tick
        (out / f"{run['name']}.metrics-after.txt").write_text(metrics(plan["base_url"]))
        sys.stdout.write(f"run {run['name']} done\n")
        sys.stdout.flush()


if __name__ == "__main__":
    run_all(sys.argv[1])
