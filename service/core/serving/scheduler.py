"""vLLM V1's scheduler, step by step (stage 3 of the serving simulator).

The rules are those of ``vllm/v1/core/sched/scheduler.py::Scheduler.schedule`` and
``vllm/v1/core/kv_cache_manager.py::KVCacheManager.allocate_slots`` as they stand from vLLM 0.11 to 0.33 (the
V1-only releases kvcap's engine profiles cover; the FCFS policy, chunked prefill on, prefix caching on — the
V1 defaults):

1. **Running requests first**, in order. Each asks for ``num_tokens − num_computed_tokens`` new tokens (one for
   a decoding request; the rest of its prompt for one still in prefill), clipped to
   ``long_prefill_token_threshold`` when that is set and to the step's remaining token budget
   (``max_num_batched_tokens``). It needs ``cdiv(num_computed + new, block_size)`` blocks per KV group; if the
   free pool cannot supply them, the **last** running request is preempted (recompute: its blocks are freed,
   ``num_computed_tokens`` = 0, it goes to the **front** of the waiting queue; generated tokens are kept and
   recomputed with the prompt when it resumes), repeating until the request fits or preempts itself.
2. **Then waiting requests**, FCFS, only when nothing was preempted in this step, while the budget lasts and
   fewer than ``max_num_seqs`` requests run. A new request first looks up the prefix cache: full blocks
   of its prompt already cached count as computed (at most ``num_tokens − 1`` tokens, so one token is always
   computed; ``KVCacheManager.get_computed_blocks``). Its first chunk is ``min(remaining, budget)`` tokens
   (chunked prefill); if the blocks for that chunk are not free it waits (waiting requests never preempt).
3. After the step, every scheduled request's ``num_computed_tokens`` grows by what it was given; a request
   whose computed tokens reach its token count samples one token; one that reaches its ``max_tokens``
   finishes and frees its blocks.

Prefix caching is modelled for the prefix every request shares (``--random-prefix-len``): V1 caches a block
as soon as it is full at allocation time (``cache_blocks`` in ``allocate_slots``), so requests scheduled
after the first one — even in the same step — hit its full prefix blocks. Those blocks stay cached
(vLLM evicts cached blocks LRU-last when the pool runs dry; a prefix every request uses is never the
LRU one). Other cache hits (a preempted request finding its own freed blocks) are not modelled.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from service.core.units import cdiv


class SimRequest:
    """One request's mutable state inside the simulated engine (internal; results are frozen dataclasses)."""

    __slots__ = (
        "arrival_seconds",
        "computed",
        "finish_seconds",
        "first_token_seconds",
        "generated",
        "index",
        "last_token_seconds",
        "num_preemptions",
        "num_tokens",
        "output_tokens",
        "own_blocks",
        "prompt_tokens",
        "send_seconds",
        "shared_blocks",
        "shared_prefix_tokens",
    )

    def __init__(self, index: int, prompt_tokens: int, output_tokens: int, shared_prefix_tokens: int) -> None:
        self.index = index
        self.prompt_tokens = prompt_tokens
        self.output_tokens = output_tokens
        self.shared_prefix_tokens = shared_prefix_tokens
        self.computed = 0  # num_computed_tokens
        self.generated = 0  # output tokens sampled so far (kept across preemptions)
        self.num_tokens = prompt_tokens  # prompt + generated (kept in step with ``generated``)
        self.own_blocks = 0  # blocks this request holds alone (per KV group sum)
        self.shared_blocks = 0  # token-blocks of the shared prefix it references in the cache
        self.num_preemptions = 0
        self.arrival_seconds = 0.0  # scheduled send time (before the client gate)
        self.send_seconds = 0.0  # actual send time (after the gate) = engine arrival
        self.first_token_seconds = -1.0
        self.last_token_seconds = -1.0
        self.finish_seconds = -1.0

    def add_generated(self, count: int) -> None:
        self.generated += count
        self.num_tokens += count

    @property
    def is_decoding(self) -> bool:
        return self.generated > 0 and self.computed == self.num_tokens - 1


@dataclass(frozen=True, slots=True, kw_only=True)
class BlockDemand:
    """Blocks a request needs for ``t`` tokens, summed over the KV-cache groups of the plan's layout.

    Full-attention groups need ``cdiv(t, block_size)`` each; sliding-window groups at most their window's
    blocks (``SlidingWindowSpec``: window − 1 past tokens + the step's, + 1 for alignment); constant-state
    groups (Mamba) a fixed number of pages.
    """

    block_size: int
    full_groups: int = 1
    capped_groups: tuple[tuple[int, int], ...] = ()  # (groups, most blocks per request)
    constant_blocks: int = 0

    @property
    def is_simple(self) -> bool:
        """Only full-attention groups: one more token needs new blocks exactly at block boundaries."""
        return not self.capped_groups and self.constant_blocks == 0

    def blocks(self, tokens: int) -> int:
        token_blocks = cdiv(tokens, self.block_size) if tokens > 0 else 0
        total = self.full_groups * token_blocks + self.constant_blocks
        for groups, cap in self.capped_groups:
            total += groups * min(token_blocks, cap)
        return total


@dataclass(frozen=True, slots=True, kw_only=True)
class SchedulerConfig:
    max_num_seqs: int
    max_num_batched_tokens: int
    long_prefill_token_threshold: int = 0  # 0: off (vLLM's default)
    demand: BlockDemand
    num_free_blocks: int  # usable blocks of the pool (the null block excluded)


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduledStep:
    """What the scheduler gave out in one step (the engine turns it into a step time)."""

    scheduled: tuple[tuple[SimRequest, int], ...]  # (request, new tokens), running first then new ones
    num_preempted: int
    load_tokens: int
    decode_context_tokens: int
    prefill_attention_pairs: float
    prefill_kv_tokens: int


class Scheduler:
    """The waiting queue, the running list and the block pool of one engine."""

    __slots__ = ("_shared_cached_blocks", "config", "free_blocks", "prefix_hit_tokens", "running", "waiting")

    def __init__(self, config: SchedulerConfig) -> None:
        self.config = config
        self.waiting: deque[SimRequest] = deque()
        self.running: list[SimRequest] = []
        self.free_blocks = config.num_free_blocks
        self._shared_cached_blocks = 0  # token-blocks of the shared prefix currently in the cache
        self.prefix_hit_tokens = 0  # prompt tokens served from the prefix cache so far

    # --- helpers -------------------------------------------------------------------------------------------
    def _own_blocks_for(self, request: SimRequest, tokens: int) -> int:
        return self.config.demand.blocks(tokens) - self.config.demand.full_groups * request.shared_blocks

    def _prefix_hit_tokens(self, request: SimRequest) -> int:
        """Tokens of the shared prefix found in the cache: whole blocks, never the request's last token."""
        if request.shared_prefix_tokens <= 0 or self._shared_cached_blocks == 0:
            return 0
        bs = self.config.demand.block_size
        usable = min(request.shared_prefix_tokens, request.num_tokens - 1) // bs
        return min(usable, self._shared_cached_blocks) * bs

    def _cache_prefix(self, request: SimRequest, tokens_with_slots: int) -> None:
        """Blocks become cached once full (``cache_blocks`` at allocation): hand the prefix's to the cache."""
        bs = self.config.demand.block_size
        full = min(request.shared_prefix_tokens, tokens_with_slots) // bs
        if full > self._shared_cached_blocks and request.shared_blocks == 0:
            # This request computed the prefix blocks: the cache now owns them; it only references them.
            moved = full * self.config.demand.full_groups
            request.own_blocks -= moved
            request.shared_blocks = full
            self._shared_cached_blocks = full

    def _preempt_last(self) -> SimRequest:
        victim = self.running.pop()
        self.free_blocks += victim.own_blocks
        victim.own_blocks = 0
        victim.shared_blocks = 0
        victim.computed = 0
        victim.num_preemptions += 1
        self.waiting.appendleft(victim)
        return victim

    # --- one step ------------------------------------------------------------------------------------------
    def schedule(self) -> ScheduledStep:
        cfg = self.config
        budget = cfg.max_num_batched_tokens
        threshold = cfg.long_prefill_token_threshold
        scheduled: list[tuple[SimRequest, int]] = []
        preempted = 0
        decode_context = 0
        pairs = 0.0
        prefill_kv = 0

        demand = cfg.demand
        simple = demand.is_simple
        bs = demand.block_size
        full_groups = demand.full_groups
        index = 0
        while index < len(self.running) and budget > 0:
            request = self.running[index]
            new = request.num_tokens - request.computed
            if 0 < threshold < new:
                new = threshold
            if new > budget:
                new = budget
            if new <= 0:
                index += 1
                continue
            if simple and new == 1:
                # One decode token: a new block per group exactly when the context sits on a boundary.
                need = full_groups if request.computed % bs == 0 else 0
            else:
                need = self._own_blocks_for(request, request.computed + new) - request.own_blocks
            scheduled_self = True
            while need > self.free_blocks:
                victim = self._preempt_last()
                preempted += 1
                if victim is request:
                    scheduled_self = False
                    break
            if not scheduled_self:
                break
            if need > 0:
                self.free_blocks -= need
                request.own_blocks += need
            if request.shared_prefix_tokens and not request.shared_blocks:
                self._cache_prefix(request, request.computed + new)
            scheduled.append((request, new))
            budget -= new
            index += 1

        if preempted == 0:
            while self.waiting and budget > 0 and len(self.running) < cfg.max_num_seqs:
                request = self.waiting[0]
                hit = self._prefix_hit_tokens(request) if request.computed == 0 else 0
                new = request.num_tokens - hit
                if 0 < threshold < new:
                    new = threshold
                new = min(new, budget)
                shared = hit // cfg.demand.block_size
                own_needed = (
                    cfg.demand.blocks(hit + new) - cfg.demand.full_groups * shared - request.own_blocks
                )
                if own_needed > self.free_blocks:
                    break
                self.waiting.popleft()
                request.computed = hit
                self.prefix_hit_tokens += hit
                request.shared_blocks = shared
                self.free_blocks -= own_needed
                request.own_blocks += own_needed
                self._cache_prefix(request, hit + new)
                self.running.append(request)
                scheduled.append((request, new))
                budget -= new

        tokens = 0
        for request, new in scheduled:
            tokens += new
            if new == 1 and request.computed == request.num_tokens - 1 and request.generated > 0:
                decode_context += request.computed
            else:
                pairs += new * (request.computed + new / 2)
                prefill_kv += request.computed + new
        return ScheduledStep(
            scheduled=tuple(scheduled),
            num_preempted=preempted,
            load_tokens=tokens,
            decode_context_tokens=decode_context,
            prefill_attention_pairs=pairs,
            prefill_kv_tokens=prefill_kv,
        )

    def finish(self, request: SimRequest) -> None:
        """Free a finished request's blocks (``KVCacheManager.free``) and drop it from the running list."""
        self.free_blocks += request.own_blocks
        request.own_blocks = 0
        self.running.remove(request)

    @property
    def used_blocks(self) -> int:
        return self.config.num_free_blocks - self.free_blocks
