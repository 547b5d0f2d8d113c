"""The capacity plan: what vLLM will allocate for a model on a GPU, and whether it will start.

Reads like the seed article, one stage at a time (``pipeline.plan``)::

    settings     the request checked and every default filled in               (settings.py)
                 with what ``vllm serve`` refuses before it serves             (checks.py)
    weights      parameters on one GPU of every pipeline stage                 (memory.py)
    budget       ceil(total × gpu_memory_utilization) − weights − activation
                 peak − non-torch − CUDA graphs (0.20+), or --kv-cache-memory-bytes (memory.py)
    layout       pages, groups and the block size the layers settle on         (layout.py)
    blocks       available // page_size // group_size, min over stages         (blocks.py)
    concurrency  blocks / blocks one max_model_len request needs; the longest
                 request that fits; tokens = int(concurrency × max_model_len)  (blocks.py)
    verdict      vLLM's start-up checks, in the release's wording              (verdict.py)
    suggestions  changes that would make a refusal start, each re-planned      (suggestions.py)

and the breakdown of every term (breakdown.py).
"""

from service.core.planner.pipeline import plan
from service.core.planner.request import DEVICES, PlanRequest, with_changes
from service.core.planner.results import (
    CapacityPlan,
    KvCacheResult,
    MemoryResult,
    Message,
    Projections,
    ResolvedSettings,
    StageResult,
    Suggestion,
    Term,
    gib,
    projection_counts,
)
from service.core.planner.settings import batch_defaults, default_block_size

__all__ = [
    "DEVICES",
    "CapacityPlan",
    "KvCacheResult",
    "MemoryResult",
    "Message",
    "PlanRequest",
    "Projections",
    "ResolvedSettings",
    "StageResult",
    "Suggestion",
    "Term",
    "batch_defaults",
    "default_block_size",
    "gib",
    "plan",
    "projection_counts",
    "with_changes",
]
