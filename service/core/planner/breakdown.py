"""The breakdown: every number of the plan with the formula behind it, and the facts a user reads next to it."""

from __future__ import annotations

from typing import NamedTuple

from service.core.planner.blocks import Blocks, Concurrency
from service.core.planner.memory import MemoryBudget
from service.core.planner.results import Message, Term, gib
from service.core.planner.settings import Settings
from service.core.units import fmt_int


class Breakdown(NamedTuple):
    messages: tuple[Message, ...]  # the log line vLLM should print, the estimate band
    terms: tuple[Term, ...]


class FixedTerms(NamedTuple):
    """The part of the breakdown that does not read the length: the estimate band and the terms up to the
    block count (what ``explain`` writes before the per-request terms)."""

    band: Message | None
    terms: tuple[Term, ...]


def explain(
    settings: Settings,
    block_size: int,
    memory: MemoryBudget,
    blocks: Blocks,
    capacity: Concurrency,
    fixed: FixedTerms | None = None,
) -> Breakdown:
    """Every number of the plan with its formula; ``fixed`` is ``explain_fixed`` of the same stages, when the
    caller has it already (``pipeline.fixed_stages`` keeps it with them)."""
    engine = settings.engine
    n_blocks, max_len = blocks.num_gpu_blocks, capacity.max_model_len
    if fixed is None:
        fixed = explain_fixed(settings, block_size, memory, blocks, capacity.bytes_per_token)
    messages: list[Message] = []
    if n_blocks > 0 and max_len:
        if engine.v0:
            log = f"# {'cpu' if settings.device == 'cpu' else 'cuda'} blocks: {n_blocks}, then Maximum concurrency for {max_len} tokens per request: {capacity.max_concurrency:.2f}x"
        else:
            device_word = "CPU" if settings.device == "cpu" else "GPU"
            log = f"{device_word} KV cache size: {fmt_int(capacity.kv_cache_size_tokens)} tokens, Maximum concurrency for {fmt_int(max_len)} tokens per request: {capacity.max_concurrency:.2f}x"
        messages.append(Message(level="info", code="expected_log", text=f"vLLM should log: {log}"))
    if fixed.band is not None:
        messages.append(fixed.band)
    terms = (
        *fixed.terms,
        Term(
            name="blocks_per_request",
            formula=f"Σ groups blocks for {fmt_int(max_len)} tokens (full: cdiv(len, block); sliding: cdiv(min(window−1+{fmt_int(capacity.in_flight_tokens)}, len), block)+1)",
            value=capacity.blocks_per_request,
            unit="blocks",
        ),
        Term(
            name="max_concurrency",
            formula="num_gpu_blocks × block_size / max_model_len"
            if engine.v0
            else "num_gpu_blocks / blocks_per_request",
            value=round(capacity.max_concurrency, 4),
            unit="requests",
        ),
        Term(
            name="kv_cache_size_tokens",
            formula="int(max_concurrency × max_model_len)"
            if engine.tokens_from_concurrency and not engine.v0
            else "num_gpu_blocks // groups × block_size",
            value=capacity.kv_cache_size_tokens,
            unit="tokens",
        ),
    )
    return Breakdown(messages=tuple(messages), terms=terms)


def explain_fixed(
    settings: Settings, block_size: int, memory: MemoryBudget, blocks: Blocks, bytes_per_token: int
) -> FixedTerms:
    """The estimate band and the terms from the bytes per token to the block count: they read the layout, the
    memory and the blocks, never the length (``settings.max_model_len`` is not read here)."""
    engine, gpu = settings.engine, settings.gpu
    worst, layout = blocks.worst, blocks.layout
    n_blocks = blocks.num_gpu_blocks
    band = None
    if gpu is not None and settings.kv_cache_memory_bytes is None and engine.overheads:
        low, high = blocks.num_gpu_blocks_low, blocks.num_gpu_blocks_high
        spread = (high - low) / 2
        band = Message(
            level="info",
            code="estimate_band",
            text=(
                f"runtime overheads are estimated: num_gpu_blocks likely between {fmt_int(low)} and {fmt_int(high)} "
                f"(±{spread:,.0f}); give kv_cache_memory_bytes for an exact count"
            ),
        )

    elem = settings.kv_dtype.bytes_per_element(settings.dtype)
    attention_layers = sum(n for s, n in worst.specs if not s.is_state)
    terms = [
        Term(
            name="kv_bytes_per_token",
            formula=f"Σ layers kv_heads_per_rank × 2 (K,V) × head_dim × {elem} B ({attention_layers} layers with KV)",
            value=bytes_per_token,
            unit="bytes",
        ),
        Term(
            name="page_size",
            formula=f"block_size {block_size} × per-layer bytes per token",
            value=layout.page_size_bytes,
            unit="bytes",
        ),
        Term(
            name="bytes_per_block",
            formula=f"page_size × group_size {layout.group_size} ({len(layout.groups)} group(s))",
            value=layout.bytes_per_block,
            unit="bytes",
        ),
    ]
    if settings.kv_cache_memory_bytes is None and gpu is not None:
        quant = settings.quantization
        ceil = engine.ceil_requested
        overheads = worst.overheads
        terms += [
            Term(
                name="budget",
                formula=f"{'ceil(' if ceil else ''}total {gib(memory.total_bytes)} GiB × gpu_memory_utilization {settings.gpu_memory_utilization}{')' if ceil else ''}",
                value=memory.budget_bytes,
                unit="bytes",
            ),
            Term(
                name="weights",
                formula=f"parameters on this GPU × bytes per parameter ({quant.name + ' linear layers' if quant else settings.dtype})",
                value=worst.weights_bytes,
                unit="bytes",
            ),
            Term(
                name="activation_peak",
                formula=overheads.activation.formula,
                value=overheads.activation.bytes,
                unit="bytes",
            ),
            Term(
                name="non_torch",
                formula=overheads.non_torch.formula,
                value=overheads.non_torch.bytes,
                unit="bytes",
            ),
            Term(
                name="cudagraph",
                formula=overheads.cudagraph.formula,
                value=overheads.cudagraph.bytes,
                unit="bytes",
            ),
        ]
        if settings.extensible_kv_cache:
            terms.append(
                Term(
                    name="sizing_margin",
                    formula="max(1 GiB (3 GiB on ROCm), 0.75 × activation_peak): kept free by the extensible KV cache",
                    value=worst.margin_bytes,
                    unit="bytes",
                )
            )
            kv_formula = (
                "min(budget − weights − non_torch − cudagraph, total − weights − non_torch − cudagraph − "
                "sizing_margin) − activation_peak (sized after warm-up and capture)"
            )
        else:
            kv_formula = "budget − weights − activation_peak − non_torch − cudagraph"
    else:
        kv_formula = "kv_cache_memory_bytes as given (profiling skipped, utilisation ignored)"
    terms.append(Term(name="kv_cache_memory", formula=kv_formula, value=worst.available, unit="bytes"))
    pp = settings.pipeline_parallel_size
    terms.append(
        Term(
            name="num_gpu_blocks",
            formula="kv_cache_memory // page_size // group_size"
            + (" (min over pipeline stages)" if pp > 1 else ""),
            value=n_blocks,
            unit="blocks",
        )
    )
    return FixedTerms(band=band, terms=tuple(terms))
