"""Stage 8, suggestions: changes that would make a refused deployment start, each checked by planning again."""

from __future__ import annotations

from collections.abc import Callable

from service.core.errors import InvalidSpec
from service.core.planner.request import PlanRequest, with_changes
from service.core.planner.results import Suggestion
from service.core.planner.settings import Settings
from service.core.units import fmt_int


def suggest(
    request: PlanRequest,
    settings: Settings,
    max_model_len: int,
    max_model_len_that_fits: int,
    fits: Callable[[PlanRequest], bool],
) -> tuple[Suggestion, ...]:
    """One change at a time, kept when the changed request ``fits`` (the planner passes its verdict stages).

    Only the verdict of a re-plan is read, so each is a verdict-only plan (no suggestions of its own, no
    breakdown, no length search, no plan built): ``fits`` does not depend on any of them.
    """
    out: list[Suggestion] = []

    def works(**changes: object) -> bool:
        try:
            return fits(with_changes(request, suggest=False, detail=False, **changes))
        except InvalidSpec:
            return False

    if 0 < max_model_len_that_fits < max_model_len and works(max_model_len=max_model_len_that_fits):
        out.append(
            Suggestion(
                setting="max_model_len",
                value=max_model_len_that_fits,
                text=f"set --max-model-len ≤ {fmt_int(max_model_len_that_fits)}",
            )
        )
    kv_dtype = settings.kv_dtype
    if (
        (kv_dtype.element_bytes is None or kv_dtype.element_bytes > 1)
        and request.device != "cpu"
        and works(kv_cache_dtype="fp8")
    ):
        out.append(Suggestion(setting="kv_cache_dtype", value="fp8", text="--kv-cache-dtype fp8"))
    for factor in (2, 4, 8):
        tp = request.tensor_parallel_size * factor
        if tp <= 64 and request.model.num_attention_heads % tp == 0 and works(tensor_parallel_size=tp):
            out.append(
                Suggestion(setting="tensor_parallel_size", value=tp, text=f"tensor-parallel-size {tp}")
            )
            break
    # The utilisation in force: an unset one is the release's default, 1.0 under 0.34's extensible KV cache
    # (``settings.default_gpu_memory_utilization``), where raising it to 0.95 would lower it.
    util = settings.gpu_memory_utilization
    if request.kv_cache_memory_bytes is None and util < 0.95 and works(gpu_memory_utilization=0.95):
        out.append(
            Suggestion(setting="gpu_memory_utilization", value=0.95, text="--gpu-memory-utilization 0.95")
        )
    return tuple(out)
