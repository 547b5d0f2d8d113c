"""Human-readable rendering of plans for the CLI (rich tables), shared by every command that prints one."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:  # the renderers read attributes only: the offline plan hands them plain response data
    from service.planning.schemas import OptionOut, PlanResponse, RecommendationOut, SimulationOut

GIB = 1024**3


def _gib(n: int) -> str:
    return f"{n / GIB:,.2f} GiB"


# The memory bar's segments, in the order vLLM carves the budget (seed article's picture, per GPU).
MEMORY_SEGMENTS = (
    ("weights", "weights_bytes", "blue"),
    ("activation peak", "activation_bytes", "dark_orange"),
    ("non-torch", "non_torch_bytes", "grey50"),
    ("CUDA graphs", "cudagraph_bytes", "magenta"),
    ("KV cache", "kv_cache_bytes", "green"),
)


def bar_cells(values: Sequence[int], width: int) -> list[int]:
    """Split ``width`` cells in proportion to ``values`` (largest remainder), so the cells add up exactly."""
    total = sum(values)
    if total <= 0:
        return [0 for _ in values]
    exact = [v * width / total for v in values]
    cells = [int(x) for x in exact]
    by_remainder = sorted(range(len(values)), key=lambda i: exact[i] - cells[i], reverse=True)
    for i in by_remainder[: width - sum(cells)]:
        cells[i] += 1
    return cells


def memory_bar(plan: PlanResponse, width: int = 64) -> Text:
    """One GPU's memory as a bar: each term's share of the device, and what lies outside the budget."""
    mem = plan.memory
    parts = [(name, max(0, int(getattr(mem, field))), style) for name, field, style in MEMORY_SEGMENTS]
    parts.append(("unused", max(0, mem.total_bytes - sum(b for _, b, _ in parts)), "grey23"))
    bar = Text()
    for (_, _, style), cells in zip(parts, bar_cells([b for _, b, _ in parts], width), strict=True):
        bar.append("█" * cells, style=style)
    legend = Text()
    for name, n_bytes, style in parts:
        legend.append("■ ", style=style)
        legend.append(f"{name} {n_bytes / GIB:,.2f} GiB  ")
    return Text.assemble(bar, "\n", legend)


def render_capacity_curve(
    console: Console, rows: Sequence[tuple[int, PlanResponse]], *, width: int = 30
) -> None:
    """Requests held at once against ``max_model_len``, a bar per row (the plans come from the planner)."""
    if not rows:
        return
    table = Table(show_header=True, header_style="bold", title="Capacity vs max_model_len")
    table.add_column("max_model_len", justify="right")
    table.add_column("requests at once", justify="right")
    table.add_column("", min_width=width)
    top = max((p.kv_cache.max_concurrency for _, p in rows if p.fits), default=0.0)
    for length, answer in rows:
        if not answer.fits:
            table.add_row(f"{length:,}", "[red]won't start[/red]", "")
            continue
        concurrency = answer.kv_cache.max_concurrency
        cells = round(width * concurrency / top) if top > 0 else 0
        table.add_row(f"{length:,}", f"{concurrency:,.2f}x", Text("█" * max(1, cells), style="green"))
    console.print(table)


def render_load_curve(
    console: Console, curve: Sequence[tuple[int, SimulationOut]], *, gpus: int, width: int = 16
) -> None:
    """The simulator's load curve: per concurrency cap, output tokens/s per GPU (with a bar), TTFT and TPOT."""
    table = Table(show_header=True, header_style="bold", title="Load curve (simulated vllm bench serve)")
    for name in ("concurrency", "tok/s/GPU", "", "TTFT p50 ms", "TTFT p99 ms", "TPOT p50 ms"):
        table.add_column(name, justify="right" if name else "left", min_width=width if not name else None)
    per_gpu = [out.result.output_throughput / max(1, gpus) for _, out in curve]
    top = max(per_gpu, default=0.0)
    for (level, out), rate in zip(curve, per_gpu, strict=True):
        result = out.result
        cells = round(width * rate / top) if top > 0 else 0
        table.add_row(
            f"{level:,}",
            f"{rate:,.1f}",
            Text("█" * max(1, cells), style="green"),
            f"{result.median_ttft_ms:,.1f}",
            f"{result.p99_ttft_ms:,.1f}",
            f"{result.median_tpot_ms:,.2f}",
        )
    console.print(table)


def render_plan(console: Console, plan: PlanResponse) -> None:
    s, kv, mem = plan.settings, plan.kv_cache, plan.memory
    gpu = plan.gpu.name if plan.gpu else "(KV budget given)"
    if s.pipeline_stage_gpus:  # a pipeline across different GPUs: each stage's, in order
        gpu = " → ".join(s.pipeline_stage_gpus)
    verdict = "[green]will start[/green]" if plan.fits else "[red]will NOT start[/red]"
    console.print(
        f"[bold]{plan.model.name}[/bold] on [bold]{gpu}[/bold] × TP {s.tensor_parallel_size} × PP {s.pipeline_parallel_size}, {s.engine} ({s.profile}): {verdict}"
    )
    table = Table(show_header=True, header_style="bold", title="KV cache (per replica)")
    table.add_column("term")
    table.add_column("value", justify="right")
    rows = [
        ("KV bytes per token", f"{kv.bytes_per_token:,}"),
        ("block size (tokens)", f"{kv.block_size}"),
        ("bytes per block", f"{kv.bytes_per_block:,}"),
        (
            "num_gpu_blocks",
            f"{kv.num_gpu_blocks:,}"
            + ("" if plan.exact else f"  (likely {kv.num_gpu_blocks_low:,}–{kv.num_gpu_blocks_high:,})"),
        ),
        ("KV cache size (tokens)", f"{kv.kv_cache_size_tokens:,}"),
        (f"max concurrency @ {s.max_model_len:,} tokens", f"{kv.max_concurrency:.2f}x"),
        ("full-length sequences that fit", f"{kv.max_concurrent_sequences:,}"),
        ("KV bytes of one full sequence", f"{kv.bytes_per_sequence:,} ({_gib(kv.bytes_per_sequence)})"),
        ("max_model_len that fits", f"{plan.max_model_len_that_fits:,}"),
    ]
    for label, text in rows:
        table.add_row(label, text)
    console.print(table)
    memory = Table(show_header=True, header_style="bold", title="Memory per GPU")
    memory.add_column("term")
    memory.add_column("bytes", justify="right")
    memory.add_column("GiB", justify="right")
    for name, value in (
        ("total", mem.total_bytes),
        ("budget (× utilisation)", mem.budget_bytes),
        ("weights", mem.weights_bytes),
        ("activation peak", mem.activation_bytes),
        ("non-torch", mem.non_torch_bytes),
        ("CUDA graphs", mem.cudagraph_bytes),
        ("KV cache", mem.kv_cache_bytes),
    ):
        memory.add_row(name, f"{value:,}", f"{value / GIB:,.2f}")
    console.print(memory)
    console.print(memory_bar(plan))
    if plan.features is not None:
        _render_features(console, plan)
    for message in plan.messages:
        colour = {"error": "red", "warning": "yellow"}.get(message.level, "dim")
        console.print(f"[{colour}]{message.level}[/{colour}] {message.text}", highlight=False)
    if plan.suggestions:
        console.print("to make it start: " + " or ".join(s.text for s in plan.suggestions), highlight=False)
    if plan.projections:
        p = plan.projections
        console.print(
            f"K/V projections per layer for a {p.prompt_tokens}-token prompt and {p.output_tokens} generated tokens: "
            f"{p.without_cache_per_layer:,} without a cache vs {p.with_cache_per_layer:,} with one ({p.ratio:.1f}× fewer)",
            highlight=False,
        )


_FEATURE_TERMS = {
    "lora_buffers",
    "lora_cpu_cache",
    "cpu_offload",
    "speculative_weights",
    "speculative_kv_layers",
    "expert_weights_dp",
    "blocks_per_request_with_lookahead",
    "cpu_kv_cache",
    "max_concurrency_with_shared_prefix",
    "max_concurrency_all_dp_ranks",
    "encoder_weights_skipped",
    "encoder_cache_profile",
}


def _render_features(console: Console, plan: PlanResponse) -> None:
    """The serving features' terms of the breakdown, each with its formula."""
    table = Table(show_header=True, header_style="bold", title="Serving features")
    table.add_column("term")
    table.add_column("value", justify="right")
    table.add_column("formula")
    for term in plan.breakdown:
        if term.name in _FEATURE_TERMS:
            value = f"{term.value:,.0f}" if term.unit == "bytes" else f"{term.value:,.4g}"
            table.add_row(term.name, f"{value} {term.unit}", term.formula)
    console.print(table)


def _money(value: float | None) -> str:
    return f"${value:,.2f}" if value is not None else "–"


def _ms(value: float | None) -> str:
    return f"{value * 1e3:,.1f}" if value is not None else "–"


def render_options(console: Console, options: list[OptionOut], *, title: str) -> None:
    table = Table(title=title, header_style="bold")
    for column in (
        "GPU",
        "TP",
        "KV",
        "quant",
        "max_num_seqs",
        "replicas",
        "GPUs",
        "$/h",
        "$/M out tok",
        "TPOT ms",
        "TTFT ms",
        "verdict",
    ):
        table.add_column(
            column, justify="right" if column not in ("GPU", "KV", "quant", "verdict") else "left"
        )
    for o in options:
        verdict = "[green]ok[/green]" if o.feasible else f"[red]{o.rejection}[/red]"
        table.add_row(
            o.gpu,
            str(o.tensor_parallel_size),
            o.kv_cache_dtype,
            o.quantization or "–",
            str(o.max_num_seqs) if o.feasible else "–",
            str(o.replicas) if o.feasible else "–",
            str(o.gpus) if o.feasible else "–",
            _money(o.cost_per_hour_usd),
            _money(o.cost_per_million_output_tokens_usd),
            _ms(o.tpot_seconds),
            _ms(o.ttft_seconds),
            verdict,
        )
    console.print(table)


def render_recommendation(console: Console, result: RecommendationOut) -> None:
    chosen = result.recommended
    if chosen is None:
        console.print(f"[red]no tensor-parallel size serves this workload on {result.gpu.name}[/red]")
    else:
        console.print(
            f"[bold]{result.model.name}[/bold] on [bold]{result.gpu.name}[/bold]: tensor-parallel-size {chosen.tensor_parallel_size}, "
            f"--max-num-seqs {chosen.max_num_seqs}, --max-model-len {chosen.max_model_len:,}, {chosen.replicas} replica(s), "
            f"{chosen.gpus} GPU(s), {_money(chosen.cost_per_hour_usd)}/h",
            highlight=False,
        )
        for reason in chosen.reasons:
            console.print(f"  • {reason}", highlight=False)
        spec = chosen.speculative
        if spec is not None:
            console.print(
                f"  • speculative decoding {spec.method} (k = {spec.num_speculative_tokens}): mean acceptance "
                f"length {spec.mean_acceptance_length:.2f} ({spec.source})",
                highlight=False,
            )
    render_options(console, result.options, title="Options tried")
    for option in result.options:
        if not option.feasible:
            console.print(
                f"[dim]TP {option.tensor_parallel_size}: {option.reasons[0] if option.reasons else option.rejection}[/dim]",
                highlight=False,
            )
