"""Time the operators of the step-time model on a real GPU, as Vidur profiles them, and record what was seen.

Run on a machine with a CUDA GPU and PyTorch (not part of the suite, which has no GPU)::

    python3 -m bench.gpu_operator_profile --out tests/data/gpu-operator-profile-h200.json

It measures, at the shapes ``service/core/serving/step_time.py`` prices:

* ``machine``   the GPU, driver, clocks and library versions the figures belong to;
* ``memory``    what the CUDA context, the first cuBLAS / cuBLASLt call, an SDPA call and a one-rank NCCL group
                take outside PyTorch's allocator (``total − free − reserved`` after each), the terms of
                ``service/core/overheads.py``'s non-torch estimate;
* ``copy``      a device-to-device copy and a read-only reduction: the HBM bandwidth ceiling;
* ``gemm``      ``y = x Wᵀ`` (bf16, and fp8 e4m3 through ``torch._scaled_mm`` with per-tensor scales) for the
                linear layers of Llama-3.1-8B, Qwen2-7B, Qwen2.5-32B and Llama-3.1-70B at TP 4, and
                Llama-3's LM head, at 1 … 8,192 rows;
* ``grouped``   the routed experts of Qwen3-30B-A3B (128 experts, top-8) through ``torch._grouped_mm`` for a
                batch routed uniformly at random;
* ``attention`` decode (one query per request against a contiguous KV of L tokens, GQA) and causal prefill
                through ``scaled_dot_product_attention``;
* ``launch``    a tiny kernel's time inside a CUDA graph and launched one by one from Python;
* ``forward``   a whole Llama-3.1-8B-shaped forward (random weights, torch operators: RMSNorm, QKV, SDPA, O,
                gate-up, SiLU·mul, down, LM head) captured in a CUDA graph: decode batches over a 1,024-token
                context and single prefills.

Every time is the median over several replays of a CUDA graph of many launches, with the weights rotated over
enough copies that they do not stay in L2, so a figure is device time of the operator itself. These are PyTorch's
kernels (cuBLAS, cuBLASLt, PyTorch's flash / memory-efficient attention), not vLLM's (its paged FlashAttention,
fused RMSNorm and SiLU, Triton fused-MoE): the same bytes and FLOPs, close but not identical code.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import statistics
import subprocess
import sys
import time
import traceback
from typing import Any

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # pragma: no cover - the suite's machines have no torch
    torch = None  # type: ignore[assignment]
    F = None  # type: ignore[assignment]

TOKENS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
# (model, layer, N out features, K in features) of one GPU's share: q/k/v fused, o, gate/up fused, down.
GEMM_SHAPES = (
    ("Llama-3.1-8B", "qkv", 6144, 4096),
    ("Llama-3.1-8B", "o", 4096, 4096),
    ("Llama-3.1-8B", "gate_up", 28672, 4096),
    ("Llama-3.1-8B", "down", 4096, 14336),
    ("Llama-3.1-8B", "lm_head", 128256, 4096),
    ("Qwen2-7B", "qkv", 4608, 3584),
    ("Qwen2-7B", "o", 3584, 3584),
    ("Qwen2-7B", "gate_up", 37888, 3584),
    ("Qwen2-7B", "down", 3584, 18944),
    ("Qwen2.5-32B", "qkv", 7168, 5120),
    ("Qwen2.5-32B", "o", 5120, 5120),
    ("Qwen2.5-32B", "gate_up", 55296, 5120),
    ("Qwen2.5-32B", "down", 5120, 27648),
    ("Llama-3.1-70B/TP4", "qkv", 2560, 8192),
    ("Llama-3.1-70B/TP4", "o", 8192, 2048),
    ("Llama-3.1-70B/TP4", "gate_up", 14336, 8192),
    ("Llama-3.1-70B/TP4", "down", 8192, 7168),
)
L2_ROTATION_BYTES = 400 * 2**20  # several times the 50–60 MB L2 of Hopper / Ampere parts
TARGET_GRAPH_SECONDS = 2e-3  # one replay of the timed graph
REPLAYS = 7
ATTENTION_MODELS = (("Llama-3.1-8B", 32, 8, 128), ("Qwen2.5-32B", 40, 8, 128))
DECODE_CASES = (
    (1, 1024),
    (1, 8192),
    (1, 32768),
    (16, 1024),
    (16, 8192),
    (64, 1024),
    (64, 4096),
    (256, 1024),
    (256, 4096),
)  # (requests, context tokens)
PREFILL_TOKENS = (512, 1024, 2048, 4096, 8192, 16384)
FORWARD_CONTEXT = 1024
FORWARD_BATCHES = (1, 8, 32, 64, 128, 256)
FORWARD_PREFILL = (512, 2048, 8192)
COPY_ELEMENTS = 2**30
DEVICE = "cuda"  # "cpu" with --dry-run: tiny shapes, host timers, to check the script before a GPU run


def log(*parts: object) -> None:
    print(*parts, flush=True)


def sh(command: list[str]) -> str:
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=20).stdout.strip()
    except Exception as error:  # a missing tool is recorded, not fatal
        return f"unavailable: {error}"


def machine() -> dict[str, Any]:
    props = torch.cuda.get_device_properties(0)
    query = "name,driver_version,memory.total,clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem,power.limit"
    return {
        "gpu": torch.cuda.get_device_name(0),
        "compute_capability": f"{props.major}.{props.minor}",
        "multiprocessors": props.multi_processor_count,
        "total_memory_bytes": props.total_memory,
        "l2_cache_bytes": getattr(props, "L2_cache_size", None),
        "nvidia_smi": sh(["nvidia-smi", f"--query-gpu={query}", "--format=csv"]),
        "torch": torch.__version__,
        "cuda_runtime": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
        "python": sys.version.split()[0],
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }


# --------------------------------------------------------------------------------------------------- timing


def time_graph(step: Any, count: int, est_seconds: float) -> dict[str, float]:
    """Median device seconds of ``step(i)`` (i = 0 … count−1 rotate the inputs) inside one CUDA graph."""
    reps = max(count, min(400, math.ceil(TARGET_GRAPH_SECONDS / max(est_seconds, 1e-6))))
    reps = max(3, reps)
    if DEVICE == "cpu":
        started = time.perf_counter()
        for i in range(3):
            step(i)
        return {"seconds": (time.perf_counter() - started) / 3, "min_seconds": 0.0, "launches_per_replay": 3}
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for i in range(min(reps, 3)):  # warm-up: handles, workspaces, autotuning outside the capture
            step(i)
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(reps):
            step(i)
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(REPLAYS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / reps)
    del graph
    return {"seconds": statistics.median(times), "min_seconds": min(times), "launches_per_replay": reps}


def sync() -> None:
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def free_bytes() -> int:
    return int(torch.cuda.mem_get_info()[0]) if DEVICE == "cuda" else 0


def copies_for(nbytes: int) -> int:
    return max(2, min(32, math.ceil(L2_ROTATION_BYTES / max(1, nbytes))))


# --------------------------------------------------------------------------------------------------- memory


MEMORY_PROBE = r"""
import json, os, sys, torch
import torch.nn.functional as F
out = []
def snap(stage):
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    out.append({"stage": stage, "free_bytes": free, "total_bytes": total,
                "torch_reserved_bytes": torch.cuda.memory_reserved(),
                "torch_allocated_bytes": torch.cuda.memory_allocated(),
                "non_torch_bytes": total - free - torch.cuda.memory_reserved()})
torch.cuda.init(); x = torch.ones(1024, device="cuda"); snap("cuda context + first allocation")
a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16); b = a @ a; snap("after first bf16 matmul (cuBLAS)")
try:
    f8 = a.to(torch.float8_e4m3fn); one = torch.tensor(1.0, device="cuda")
    c = torch._scaled_mm(f8, f8.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16); snap("after first fp8 _scaled_mm (cuBLASLt)")
except Exception as e:
    out.append({"stage": "fp8 _scaled_mm", "error": repr(e)})
q = torch.randn(8, 32, 512, 128, device="cuda", dtype=torch.bfloat16)
k = torch.randn(8, 8, 512, 128, device="cuda", dtype=torch.bfloat16)
o = F.scaled_dot_product_attention(q, k, k, is_causal=True, enable_gqa=True); snap("after first SDPA")
try:
    import torch.distributed as dist
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1"); os.environ.setdefault("MASTER_PORT", "29517")
    dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda:0"))
    t = torch.ones(1 << 20, device="cuda"); dist.all_reduce(t); snap("after one-rank NCCL group + all_reduce")
    dist.destroy_process_group()
except Exception as e:
    out.append({"stage": "nccl", "error": repr(e)})
g = torch.cuda.CUDAGraph(); s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s):
    y = a @ a
torch.cuda.current_stream().wait_stream(s)
with torch.cuda.graph(g):
    y = a @ a
snap("after capturing one CUDA graph of one matmul")
print(json.dumps(out))
"""


def memory() -> list[dict[str, Any]]:
    done = subprocess.run([sys.executable, "-c", MEMORY_PROBE], capture_output=True, text=True, timeout=120)
    if done.returncode:
        return [{"error": done.stderr[-2000:]}]
    return json.loads(done.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------------------------------- sections


def copy_bandwidth() -> list[dict[str, Any]]:
    rows = []
    n = COPY_ELEMENTS  # 1 Gi bf16 elements = 2 GiB per buffer
    src = torch.randn(n, device=DEVICE, dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    r = time_graph(lambda _, dst=dst, src=src: dst.copy_(src), 3, 1e-3)
    rows.append(
        {"op": "device-to-device copy", "bytes": 4 * n, **r, "bytes_per_second": 4 * n / r["seconds"]}
    )
    r = time_graph(lambda _, src=src: src.sum(dtype=torch.float32), 3, 1e-3)
    rows.append({"op": "read-only sum", "bytes": 2 * n, **r, "bytes_per_second": 2 * n / r["seconds"]})
    del src, dst
    torch.cuda.empty_cache()
    return rows


def gemm(fp8: bool) -> list[dict[str, Any]]:
    rows = []
    one = torch.tensor(1.0, device=DEVICE)
    for model, layer, n_out, k_in in GEMM_SHAPES:
        w_bytes = n_out * k_in * (1 if fp8 else 2)
        weights = []
        for _ in range(copies_for(w_bytes)):
            w = torch.randn(n_out, k_in, device=DEVICE, dtype=torch.bfloat16)
            weights.append(w.to(torch.float8_e4m3fn) if fp8 else w)
        for tokens in TOKENS:
            rows_in = max(tokens, 16) if fp8 else tokens  # _scaled_mm wants 16-row multiples
            try:
                xs = [torch.randn(rows_in, k_in, device=DEVICE, dtype=torch.bfloat16) for _ in range(2)]
                if fp8:
                    xs = [x.to(torch.float8_e4m3fn) for x in xs]

                    def step(i: int, xs=xs, weights=weights) -> Any:
                        return torch._scaled_mm(
                            xs[i % 2],
                            weights[i % len(weights)].t(),
                            scale_a=one,
                            scale_b=one,
                            out_dtype=torch.bfloat16,
                        )
                else:

                    def step(i: int, xs=xs, weights=weights) -> Any:
                        return F.linear(xs[i % 2], weights[i % len(weights)])

                flops = 2.0 * rows_in * n_out * k_in
                moved = w_bytes + rows_in * k_in * (1 if fp8 else 2) + rows_in * n_out * 2
                est = max(moved / 4e12, flops / (1.5e15 if fp8 else 7e14)) + 3e-6
                r = time_graph(step, len(weights), est)
                rows.append(
                    {
                        "model": model,
                        "layer": layer,
                        "n": n_out,
                        "k": k_in,
                        "tokens": tokens,
                        "rows": rows_in,
                        "dtype": "fp8_e4m3" if fp8 else "bfloat16",
                        "flops": flops,
                        "bytes": moved,
                        **r,
                        "flops_per_second": flops / r["seconds"],
                        "bytes_per_second": moved / r["seconds"],
                    }
                )
            except Exception as error:
                rows.append({"model": model, "layer": layer, "tokens": tokens, "error": repr(error)[:300]})
        del weights
        torch.cuda.empty_cache()
    return rows


def grouped_experts() -> list[dict[str, Any]]:
    """Qwen3-30B-A3B's routed experts: E = 128, top-8, hidden 2048, moe_intermediate 768 (TP 1)."""
    rows: list[dict[str, Any]] = []
    experts, top_k, hidden, width = 128, 8, 2048, 768
    gen = torch.Generator(device="cpu").manual_seed(0)
    for layer, n_out, k_in in (("gate_up", 2 * width, hidden), ("down", hidden, width)):
        w_bytes = experts * n_out * k_in * 2
        weights = [
            torch.randn(experts, n_out, k_in, device=DEVICE, dtype=torch.bfloat16).transpose(-2, -1)
            for _ in range(copies_for(w_bytes))
        ]
        for tokens in TOKENS:
            try:
                choice = torch.rand(tokens, experts, generator=gen).topk(top_k, dim=1).indices.flatten()
                counts = torch.bincount(choice, minlength=experts)
                offs = torch.cumsum(counts, 0).to(torch.int32).to(DEVICE)
                total = tokens * top_k
                xs = [torch.randn(total, k_in, device=DEVICE, dtype=torch.bfloat16) for _ in range(2)]
                touched = int((counts > 0).sum())

                def step(i: int, xs=xs, offs=offs, weights=weights) -> Any:
                    return torch._grouped_mm(xs[i % 2], weights[i % len(weights)], offs=offs)

                flops = 2.0 * total * n_out * k_in
                moved = touched * n_out * k_in * 2 + total * (k_in + n_out) * 2
                r = time_graph(step, len(weights), max(moved / 4e12, flops / 7e14) + 5e-6)
                rows.append(
                    {
                        "model": "Qwen3-30B-A3B",
                        "layer": layer,
                        "n": n_out,
                        "k": k_in,
                        "experts": experts,
                        "top_k": top_k,
                        "tokens": tokens,
                        "experts_touched": touched,
                        "flops": flops,
                        "bytes": moved,
                        **r,
                        "flops_per_second": flops / r["seconds"],
                        "bytes_per_second": moved / r["seconds"],
                    }
                )
            except Exception as error:
                rows.append(
                    {"model": "Qwen3-30B-A3B", "layer": layer, "tokens": tokens, "error": repr(error)[:300]}
                )
        del weights
        torch.cuda.empty_cache()
    return rows


def attention() -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for model, heads, kv_heads, dim in ATTENTION_MODELS:
        for batch, context in DECODE_CASES:
            try:
                kv_bytes = 2 * batch * kv_heads * context * dim * 2
                n = copies_for(kv_bytes)
                ks = [
                    torch.randn(batch, kv_heads, context, dim, device=DEVICE, dtype=torch.bfloat16)
                    for _ in range(n)
                ]
                vs = [torch.randn_like(k) for k in ks]
                q = torch.randn(batch, heads, 1, dim, device=DEVICE, dtype=torch.bfloat16)

                def step(i: int, ks=ks, vs=vs, q=q) -> Any:
                    return F.scaled_dot_product_attention(
                        q, ks[i % len(ks)], vs[i % len(vs)], enable_gqa=True
                    )

                r = time_graph(step, n, kv_bytes / 4e12 + 5e-6)
                rows.append(
                    {
                        "kind": "decode",
                        "model": model,
                        "heads": heads,
                        "kv_heads": kv_heads,
                        "head_dim": dim,
                        "batch": batch,
                        "context": context,
                        "kv_bytes": kv_bytes,
                        **r,
                        "bytes_per_second": kv_bytes / r["seconds"],
                    }
                )
                del ks, vs
            except Exception as error:
                rows.append(
                    {
                        "kind": "decode",
                        "model": model,
                        "batch": batch,
                        "context": context,
                        "error": repr(error)[:300],
                    }
                )
            torch.cuda.empty_cache()
        for tokens in PREFILL_TOKENS:
            try:
                q = torch.randn(1, heads, tokens, dim, device=DEVICE, dtype=torch.bfloat16)
                k = torch.randn(1, kv_heads, tokens, dim, device=DEVICE, dtype=torch.bfloat16)
                v = torch.randn_like(k)
                flops = 4.0 * heads * dim * tokens * tokens / 2  # QKᵀ and PV, causal half

                def step(_: int, q=q, k=k, v=v) -> Any:
                    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

                r = time_graph(step, 1, flops / 4e14)
                rows.append(
                    {
                        "kind": "prefill",
                        "model": model,
                        "heads": heads,
                        "kv_heads": kv_heads,
                        "head_dim": dim,
                        "tokens": tokens,
                        "flops": flops,
                        **r,
                        "flops_per_second": flops / r["seconds"],
                    }
                )
            except Exception as error:
                rows.append({"kind": "prefill", "model": model, "tokens": tokens, "error": repr(error)[:300]})
    return rows


def launches() -> list[dict[str, Any]]:
    x = torch.randn(4096, device=DEVICE)
    r = time_graph(lambda _: x.add_(1.0), 1, 2e-6)
    rows = [{"op": "4,096-element add inside a CUDA graph", **r}]
    for _ in range(100):
        x.add_(1.0)
    sync()
    count = 20000
    start = time.perf_counter()
    for _ in range(count):
        x.add_(1.0)
    host = (time.perf_counter() - start) / count
    sync()
    rows.append({"op": "4,096-element add launched from Python (host seconds per launch)", "seconds": host})
    return rows


class Forward:
    """A Llama-3.1-8B-shaped decoder (random bf16 weights) in plain PyTorch operators."""

    hidden, heads, kv_heads, dim, inter, layers, vocab = 4096, 32, 8, 128, 14336, 32, 128256

    def __init__(self, max_batch: int, context: int) -> None:
        d = {"device": DEVICE, "dtype": torch.bfloat16}
        h, qkv = self.hidden, (self.heads + 2 * self.kv_heads) * self.dim
        scale = 0.02
        self.w = [
            (
                torch.randn(qkv, h, **d) * scale,
                torch.randn(h, h, **d) * scale,
                torch.randn(2 * self.inter, h, **d) * scale,
                torch.randn(h, self.inter, **d) * scale,
            )
            for _ in range(self.layers)
        ]
        self.norm = torch.ones(h, **d)
        self.lm_head = torch.randn(self.vocab, h, **d) * scale
        self.context = context
        self.k = [torch.randn(max_batch, self.kv_heads, context, self.dim, **d) for _ in range(self.layers)]
        self.v = [torch.randn_like(k) for k in self.k]

    def layer(self, x: Any, i: int, batch: int, tokens: int, decode: bool) -> Any:
        wqkv, wo, wgu, wd = self.w[i]
        hq, hk, dim = self.heads, self.kv_heads, self.dim
        h = F.rms_norm(x, (self.hidden,), self.norm)
        qkv = F.linear(h, wqkv)
        q, k, v = qkv.split([hq * dim, hk * dim, hk * dim], dim=-1)
        if decode:
            q = q.view(batch, 1, hq, dim).transpose(1, 2)
            a = F.scaled_dot_product_attention(q, self.k[i][:batch], self.v[i][:batch], enable_gqa=True)
            a = a.transpose(1, 2).reshape(batch, hq * dim)
        else:
            q = q.view(1, tokens, hq, dim).transpose(1, 2)
            k = k.reshape(1, tokens, hk, dim).transpose(1, 2)
            v = v.reshape(1, tokens, hk, dim).transpose(1, 2)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            a = a.transpose(1, 2).reshape(tokens, hq * dim)
        x = x + F.linear(a, wo)
        h = F.rms_norm(x, (self.hidden,), self.norm)
        g, u = F.linear(h, wgu).chunk(2, dim=-1)
        return x + F.linear(F.silu(g) * u, wd)

    def run(self, x: Any, batch: int, tokens: int, decode: bool) -> Any:
        for i in range(self.layers):
            x = self.layer(x, i, batch, tokens, decode)
        last = x if decode else x[-1:]
        return F.linear(F.rms_norm(last, (self.hidden,), self.norm), self.lm_head)


def activation_peak(run: Any) -> int:
    """Bytes PyTorch's allocator held at the peak of one eager ``run()`` above what was allocated before it
    (the quantity vLLM's profile run reads as ``torch_peak_increase``)."""
    if DEVICE != "cuda":
        run()
        return 0
    sync()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    run()
    sync()
    return int(torch.cuda.max_memory_allocated() - base)


def forward() -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    context = FORWARD_CONTEXT
    model = Forward(max_batch=max(FORWARD_BATCHES), context=context)
    for batch in FORWARD_BATCHES:
        try:
            x = torch.randn(batch, model.hidden, device=DEVICE, dtype=torch.bfloat16)
            free_before = free_bytes()
            r = time_graph(lambda _, x=x, b=batch: model.run(x, b, b, True), 1, 5e-3)
            rows.append(
                {
                    "kind": "decode",
                    "model": "Llama-3.1-8B",
                    "batch": batch,
                    "context": context,
                    "layers": model.layers,
                    **r,
                    "graph_pool_bytes": free_before - free_bytes(),
                }
            )
        except Exception as error:
            rows.append({"kind": "decode", "batch": batch, "error": repr(error)[:300]})
    del model.k, model.v
    torch.cuda.empty_cache()
    for tokens in FORWARD_PREFILL:
        try:
            x = torch.randn(tokens, model.hidden, device=DEVICE, dtype=torch.bfloat16)
            peak = activation_peak(lambda x=x, t=tokens: model.run(x, 1, t, False))
            r = time_graph(lambda _, x=x, t=tokens: model.run(x, 1, t, False), 1, 0.05)
            rows.append(
                {
                    "kind": "prefill",
                    "model": "Llama-3.1-8B",
                    "tokens": tokens,
                    "layers": model.layers,
                    **r,
                    "activation_peak_bytes": peak,
                }
            )
        except Exception as error:
            rows.append({"kind": "prefill", "tokens": tokens, "error": repr(error)[:300]})
    return rows


SECTIONS = {
    "memory": memory,
    "copy": copy_bandwidth,
    "launch": launches,
    "gemm_bf16": lambda: gemm(fp8=False),
    "attention": attention,
    "forward": forward,
    "grouped": grouped_experts,
    "gemm_fp8": lambda: gemm(fp8=True),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--sections", default=",".join(SECTIONS))
    parser.add_argument(
        "--dry-run", action="store_true", help="tiny shapes on the CPU: check the script runs"
    )
    args = parser.parse_args()
    if args.dry_run:
        dry_run()
    elif torch is None or not torch.cuda.is_available():
        sys.exit("this profile needs PyTorch with a CUDA GPU")
    torch.manual_seed(0)
    info = {"gpu": "cpu (dry run)"} if args.dry_run else machine()
    result: dict[str, Any] = {"machine": info, "script": "bench/gpu_operator_profile.py"}
    for name in args.sections.split(","):
        started = time.perf_counter()
        try:
            result[name] = SECTIONS[name]() if name in SECTIONS else {"skipped": "not in this run"}
        except Exception:  # keep the other sections
            result[name] = {"error": traceback.format_exc()[-3000:]}
        result.setdefault("section_seconds", {})[name] = round(time.perf_counter() - started, 1)
        log(f"{name}: {result['section_seconds'][name]} s")
        tmp = args.out + ".tmp"
        with open(tmp, "w") as handle:
            json.dump(result, handle, indent=1)
        os.replace(tmp, args.out)
    result["machine"]["nvidia_smi_after"] = (
        ""
        if args.dry_run
        else sh(["nvidia-smi", "--query-gpu=clocks.sm,clocks.mem,temperature.gpu,power.draw", "--format=csv"])
    )
    with open(args.out, "w") as handle:
        json.dump(result, handle, indent=1)
    summary(result)


def dry_run() -> None:
    """Shrink every shape so the whole script runs in seconds on a CPU (its figures mean nothing)."""
    global DEVICE, GEMM_SHAPES, TOKENS, DECODE_CASES, PREFILL_TOKENS, FORWARD_CONTEXT, FORWARD_BATCHES
    global FORWARD_PREFILL, COPY_ELEMENTS, ATTENTION_MODELS
    DEVICE = "cpu"
    GEMM_SHAPES = tuple((m, layer, n // 32, k // 32) for m, layer, n, k in GEMM_SHAPES)
    TOKENS, DECODE_CASES, PREFILL_TOKENS = (1, 16, 64), ((1, 64), (4, 128)), (64, 128)
    FORWARD_CONTEXT, FORWARD_BATCHES, FORWARD_PREFILL, COPY_ELEMENTS = 64, (1, 4), (32,), 2**16
    ATTENTION_MODELS = (("tiny", 8, 2, 16),)
    Forward.hidden, Forward.heads, Forward.kv_heads, Forward.dim = 256, 8, 2, 32
    Forward.inter, Forward.layers, Forward.vocab = 512, 2, 1000
    SECTIONS.pop("memory")


def summary(result: dict[str, Any]) -> None:
    for row in result.get("copy", []):
        log(f"{row['op']}: {row['bytes_per_second'] / 1e12:.2f} TB/s")
    for row in result.get("launch", []):
        log(f"{row['op']}: {row['seconds'] * 1e6:.2f} us")
    for key in ("gemm_bf16", "gemm_fp8"):
        rows = result.get(key, [])
        if isinstance(rows, list):
            for row in rows:
                if row.get("layer") == "gate_up" and row.get("model") == "Llama-3.1-8B" and "seconds" in row:
                    log(
                        f"{key} 8B gate_up T={row['tokens']}: {row['seconds'] * 1e6:.1f} us "
                        f"{row['flops_per_second'] / 1e12:.0f} TF/s {row['bytes_per_second'] / 1e12:.2f} TB/s"
                    )
            errors = sum(1 for row in rows if "error" in row)
            log(f"{key}: {len(rows)} rows, {errors} errors")
    for key in ("attention", "forward", "grouped"):
        rows = result.get(key, [])
        if isinstance(rows, list):
            for row in rows:
                log(
                    key,
                    {
                        k: v
                        for k, v in row.items()
                        if k in ("kind", "model", "batch", "context", "tokens", "layer", "seconds", "error")
                    },
                )
    log("memory", json.dumps(result.get("memory"))[:3000])


if __name__ == "__main__":
    main()
