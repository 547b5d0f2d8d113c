"""vLLM V1's scheduler, step by step (stage 3 of the serving simulator).

The rules are those of ``vllm/v1/core/sched/scheduler.py::Scheduler.schedule`` and
``vllm/v1/core/kv_cache_manager.py::KVCacheManager.allocate_slots`` as they stand from vLLM 0.11 to 0.34 (the
V1-only releases kvcap's engine profiles cover; the FCFS policy, chunked prefill on, prefix caching on — the
V1 defaults; 0.34's additions, ``cache_aware_admission_window`` (0, off, by default) and the asynchronous KV
loads of KV connectors, change nothing modelled here):

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
   From vLLM 0.19 (PR #37307, merged 2026-03-24; ``SchedulerConfig.scheduler_reserve_full_isl``, on by
   default as read in 0.32, ``allocate_slots(full_sequence_must_fit=True)``) it also waits unless the free
   pool holds its *whole* current sequence (prompt + tokens generated before a preemption, at most
   ``max_model_len``) less its prefix hits: admitting on the first chunk alone made long requests thrash
   (admitted, then preempted a few chunks later). The rule was found missing by the real-vLLM check
   (``tests/data/vllm_bench_cpu``).
3. After the step, every scheduled request's ``num_computed_tokens`` grows by what it was given; a request
   whose computed tokens reach its token count samples one token; one that reaches its ``max_tokens``
   finishes and frees its blocks.

Prefix caching is modelled for the prefix every request shares (``--random-prefix-len``): V1 caches a block
as soon as it is full at allocation time (``cache_blocks`` in ``allocate_slots``), so requests scheduled
after the first one — even in the same step — hit its full prefix blocks. Those blocks stay cached
(vLLM evicts cached blocks LRU-last when the pool runs dry; a prefix every request uses is never the
LRU one). So is the prompt the benchmark client sent before the timed run (``SimRequest.cached_prompt_tokens``,
see ``simulate.client_primes_first_prompt``): freed blocks go to the tail of vLLM's free queue and allocation
takes from its head, so those blocks are still cached when that request, the first sent, is admitted. Other
cache hits (a preempted request finding its own freed blocks) are not modelled.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from service.core.units import cdiv


class SimRequest:
    """One request's mutable state inside the simulated engine (internal; results are frozen dataclasses)."""

    __slots__ = (
        "arrival_seconds",
        "cached_prompt_tokens",
        "cohort_base",
        "computed",
        "finish_seconds",
        "first_token_seconds",
        "generated",
        "index",
        "lagging",
        "last_token_seconds",
        "num_preemptions",
        "num_tokens",
        "output_tokens",
        "own_blocks",
        "prompt_tokens",
        "send_seconds",
        "shared_blocks",
        "shared_prefix_tokens",
        "spec_credit",
        "spec_tokens",
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
        # Async scheduling: finished, but already scheduled for one more step before the engine saw it finish.
        self.lagging = False
        self.arrival_seconds = 0.0  # scheduled send time (before the client gate)
        self.send_seconds = 0.0  # actual send time (after the gate) = engine arrival
        self.first_token_seconds = -1.0
        self.last_token_seconds = -1.0
        self.finish_seconds = -1.0
        # ≥ 0 while the engine advances this request with its decode cohort (``engine.Engine``): its token
        # counts, blocks and last token time are then those above plus the cohort's advance since this value.
        self.cohort_base = -1
        # Tokens of this request's own prompt already in the prefix cache when the run starts (the benchmark
        # client sent the same prompt before the timed run: its readiness probe or warm-ups). Used once, at
        # its first admission.
        self.cached_prompt_tokens = 0
        # Speculative decoding (``speculative``): draft tokens in hand for the next step (``spec_token_ids``),
        # and the expected-progress accumulator that decides how many of them are accepted.
        self.spec_tokens = 0
        self.spec_credit = 0  # in ``speculative.ACCEPTANCE_UNITS``

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
    prefill_first: bool = False  # V0 engine: prefill-only steps, whole prompts, no chunking
    # Admit a waiting/preempted request only if its whole current sequence fits (0.19+, see module docstring).
    reserve_full_sequence: bool = False
    max_model_len: int = 1 << 30
    attention_window: int = 0  # sliding-window layers' window (decode reads min(context, window)); 0: none
    num_free_blocks: int  # usable blocks of the pool (the null block excluded)
    # Speculative decoding (``_schedule_spec``): running requests schedule their drafts too, and each gets
    # ``num_lookahead_tokens`` KV slots beyond its scheduled tokens (``allocate_slots``).
    speculative: bool = False
    num_lookahead_tokens: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduledStep:
    """What the scheduler gave out in one step (the engine turns it into a step time)."""

    scheduled: tuple[tuple[SimRequest, int], ...]  # (request, new tokens), running first then new ones
    num_preempted: int
    load_tokens: int
    decode_context_tokens: int
    prefill_attention_pairs: float
    prefill_kv_tokens: int
    decode_windowed_tokens: int = 0


StepParts = tuple[list[SimRequest], list[tuple[SimRequest, int]], int, int, int, float, int, int]
"""``ScheduledStep``'s fields in order, its scheduled pairs split in two lists: the leading requests that
decode one token each (``(request, 1)``), then the other pairs."""


class Scheduler:
    """The waiting queue, the running list and the block pool of one engine."""

    __slots__ = (
        "_shared_cached_blocks",
        "config",
        "free_blocks",
        "num_lagging",
        "prefix_hit_tokens",
        "running",
        "scheduled_drafts",
        "waiting",
    )

    def __init__(self, config: SchedulerConfig) -> None:
        self.config = config
        self.waiting: deque[SimRequest] = deque()
        self.running: list[SimRequest] = []
        self.free_blocks = config.num_free_blocks
        self._shared_cached_blocks = 0  # token-blocks of the shared prefix currently in the cache
        self.prefix_hit_tokens = 0  # prompt tokens served from the prefix cache so far
        self.num_lagging = 0  # running requests already finished (async lag; the engine marks them)
        self.scheduled_drafts = 0  # draft tokens ``_schedule_spec`` gave out in its last step

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
        if victim.lagging:
            self.num_lagging -= 1
            return victim  # already finished (async lag): freeing it is all a preemption does
        victim.shared_blocks = 0
        victim.spec_tokens = 0  # (a resumed request recomputes its tokens; drafts come after it samples)
        victim.computed = 0
        victim.num_preemptions += 1
        self.waiting.appendleft(victim)
        return victim

    # --- one step ------------------------------------------------------------------------------------------
    def schedule(self) -> ScheduledStep:
        decoding, scheduled, preempted, tokens, decode_context, pairs, prefill_kv, windowed = (
            self.schedule_parts()
        )
        return ScheduledStep(
            scheduled=tuple((request, 1) for request in decoding) + tuple(scheduled),
            num_preempted=preempted,
            load_tokens=tokens,
            decode_context_tokens=decode_context,
            prefill_attention_pairs=pairs,
            prefill_kv_tokens=prefill_kv,
            decode_windowed_tokens=windowed,
        )

    def schedule_parts(self) -> StepParts:
        """``schedule`` as a plain tuple (the engine's hot path: no ``ScheduledStep`` per step)."""
        if self.config.prefill_first:
            return self._schedule_v0()
        if self.config.speculative:
            return self._schedule_spec()
        cfg = self.config
        budget = cfg.max_num_batched_tokens
        scheduled: list[tuple[SimRequest, int]] = []
        decode_context = 0
        pairs = 0.0
        prefill_kv = 0
        tokens = 0
        window = cfg.attention_window
        windowed = 0

        demand = cfg.demand
        simple = demand.is_simple
        bs = demand.block_size
        full_groups = demand.full_groups
        running = self.running
        count = len(running)
        # The leading run of decodes (one token each, its block free when it starts one: nothing to preempt)
        # is most of a step: it is handed over as a slice, without a (request, tokens) pair each.
        lead = 0
        if simple:
            limit = count if count < budget else budget
            while lead < limit:
                request = running[lead]
                computed = request.computed
                if request.num_tokens - computed != 1 or not request.generated:
                    break
                if not computed % bs:
                    # A new block per group at the boundary, as below; preempting is left to the loop below.
                    if full_groups > self.free_blocks:
                        break
                    self.free_blocks -= full_groups
                    request.own_blocks += full_groups
                    if request.shared_prefix_tokens and not request.shared_blocks:
                        self._cache_prefix(request, computed + 1)
                decode_context += computed
                if window:
                    windowed += computed if computed < window else window
                lead += 1
            budget -= lead
            tokens += lead
        decoding = running[:lead]
        preempted, budget, tokens, decode_context, pairs, prefill_kv, windowed = self.schedule_rest(
            lead, scheduled, budget, tokens, decode_context, pairs, prefill_kv, windowed
        )
        if preempted == 0 and self.waiting:
            tokens, pairs, prefill_kv = self.admit_waiting(scheduled, budget, tokens, pairs, prefill_kv)

        return decoding, scheduled, preempted, tokens, decode_context, pairs, prefill_kv, windowed

    def schedule_rest(
        self,
        index: int,
        scheduled: list[tuple[SimRequest, int]],
        budget: int,
        tokens: int,
        decode_context: int,
        pairs: float,
        prefill_kv: int,
        windowed: int,
    ) -> tuple[int, int, int, int, float, int, int]:
        """Step 1 of the module docstring for the running requests from ``index`` on (those before it were
        the step's leading decodes): each joins ``scheduled`` with its new tokens, preempting from the end
        when blocks run out. Returns (preempted, budget, tokens, decode_context, pairs, prefill_kv,
        windowed), the step's figures with theirs added."""
        cfg = self.config
        threshold = cfg.long_prefill_token_threshold
        window = cfg.attention_window
        demand = cfg.demand
        simple = demand.is_simple
        bs = demand.block_size
        full_groups = demand.full_groups
        running = self.running
        count = len(running)  # kept in step with preemptions (which pop from the end)
        preempted = 0
        while index < count and budget > 0:
            request = running[index]
            computed = request.computed
            new = request.num_tokens - computed
            if 0 < threshold < new:
                new = threshold
            if new > budget:
                new = budget
            if new <= 0:
                index += 1
                continue
            if new == 1 and simple:
                # One decode token: a new block per group exactly when the context sits on a boundary.
                if computed % bs:
                    # The common case, kept short: no block, no preemption, no prefix to cache.
                    scheduled.append((request, 1))
                    budget -= 1
                    tokens += 1
                    if request.generated > 0:
                        decode_context += computed
                        if window:
                            windowed += computed if computed < window else window
                    else:
                        pairs += computed + 0.5
                        prefill_kv += computed + 1
                    index += 1
                    continue
                need = full_groups
            else:
                need = self._own_blocks_for(request, computed + new) - request.own_blocks
            if need > self.free_blocks:
                scheduled_self = True
                while need > self.free_blocks:
                    victim = self._preempt_last()
                    count -= 1
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
                self._cache_prefix(request, computed + new)
            scheduled.append((request, new))
            budget -= new
            tokens += new
            if new == 1 and request.generated > 0 and computed == request.num_tokens - 1:
                decode_context += computed
                if window:
                    windowed += computed if computed < window else window
            else:
                pairs += new * (computed + new / 2)
                prefill_kv += computed + new
            index += 1

        return preempted, budget, tokens, decode_context, pairs, prefill_kv, windowed

    def _schedule_spec(self) -> StepParts:
        """One V1 step with speculative decoding (``speculative.py``'s module docstring; vLLM main after 0.11,
        ``Scheduler.schedule``): step 1 of the module docstring where each running request asks for
        ``num_tokens + spec_tokens − computed`` tokens — 1 + its drafts when it decodes — clipped to the budget
        and to ``max_model_len − 1 − computed``, and needs the blocks of those tokens plus the lookahead slots
        (``allocate_slots(..., num_lookahead_tokens)``, at most ``max_model_len``); then step 2 unchanged (new
        requests get no lookahead). A decoding request counts its context once in ``decode_context`` (its
        attention reads the KV once for its 1 + d queries); its 1 + d tokens count in ``tokens``, its d drafts
        in ``scheduled_drafts``."""
        cfg = self.config
        threshold = cfg.long_prefill_token_threshold
        window = cfg.attention_window
        lookahead = cfg.num_lookahead_tokens
        max_len = cfg.max_model_len
        demand = cfg.demand
        simple = demand.is_simple
        bs = demand.block_size
        full_groups = demand.full_groups
        drafts = 0
        budget = cfg.max_num_batched_tokens
        scheduled: list[tuple[SimRequest, int]] = []
        tokens = decode_context = prefill_kv = windowed = preempted = 0
        pairs = 0.0
        running = self.running
        count = len(running)
        index = 0
        while index < count and budget > 0:
            request = running[index]
            computed = request.computed
            new = request.num_tokens + request.spec_tokens - computed
            if 0 < threshold < new:
                new = threshold
            if new > budget:
                new = budget
            if new > max_len - 1 - computed:
                new = max_len - 1 - computed
            if new <= 0:
                index += 1
                continue
            slots = computed + new + lookahead
            if slots > max_len:
                slots = max_len
            if simple:  # ``_own_blocks_for`` of a full-attention layout, inline
                need = full_groups * (-(-slots // bs) - request.shared_blocks) - request.own_blocks
            else:
                need = self._own_blocks_for(request, slots) - request.own_blocks
            if need > self.free_blocks:
                scheduled_self = True
                while need > self.free_blocks:
                    victim = self._preempt_last()
                    count -= 1
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
                self._cache_prefix(request, computed + new)
            scheduled.append((request, new))
            budget -= new
            tokens += new
            if request.generated > 0 and computed == request.num_tokens - 1:
                drafts += new - 1
                decode_context += computed
                if window:
                    windowed += computed if computed < window else window
            else:
                pairs += new * (computed + new / 2)
                prefill_kv += computed + new
            index += 1
        self.scheduled_drafts = drafts
        if preempted == 0 and self.waiting:
            tokens, pairs, prefill_kv = self.admit_waiting(scheduled, budget, tokens, pairs, prefill_kv)
        return [], scheduled, preempted, tokens, decode_context, pairs, prefill_kv, windowed

    def admit_waiting(
        self, scheduled: list[tuple[SimRequest, int]], budget: int, tokens: int, pairs: float, prefill_kv: int
    ) -> tuple[int, float, int]:
        """Step 2 of the module docstring: waiting requests join, FCFS, while the budget, ``max_num_seqs`` and
        the free blocks allow; each joins ``scheduled`` and the running list. Returns the step's ``tokens``,
        ``pairs`` and ``prefill_kv`` with theirs added."""
        cfg = self.config
        threshold = cfg.long_prefill_token_threshold
        demand = cfg.demand
        bs = demand.block_size
        full_groups = demand.full_groups
        simple = demand.is_simple
        running = self.running
        while self.waiting and budget > 0 and len(running) < cfg.max_num_seqs:
            request = self.waiting[0]
            hit = (
                self._prefix_hit_tokens(request)
                if request.computed == 0 and request.shared_prefix_tokens > 0
                else 0
            )
            shared = hit // bs
            if request.cached_prompt_tokens:
                # Its own prompt's full blocks, found in the free pool's cached blocks: they count as computed
                # and leave the free pool for this request (they are its own, not the shared prefix's).
                warm = min(request.cached_prompt_tokens, request.num_tokens - 1) // bs * bs
                if warm > hit:
                    hit = warm
            new = request.num_tokens - hit
            if 0 < threshold < new:
                new = threshold
            if new > budget:
                new = budget
            # ``demand.blocks`` of a full-attention layout inline (every count here is ≥ 1 token).
            if simple:
                own_needed = full_groups * (-(-(hit + new) // bs) - shared) - request.own_blocks
            else:
                own_needed = demand.blocks(hit + new) - full_groups * shared - request.own_blocks
            if cfg.reserve_full_sequence:
                whole = request.num_tokens if request.num_tokens < cfg.max_model_len else cfg.max_model_len
                if simple:
                    full_needed = full_groups * (-(-whole // bs) - shared) - request.own_blocks
                else:
                    full_needed = demand.blocks(whole) - full_groups * shared - request.own_blocks
                if full_needed > self.free_blocks:
                    break
            if own_needed > self.free_blocks:
                break
            self.waiting.popleft()
            request.cached_prompt_tokens = 0
            request.computed = hit
            self.prefix_hit_tokens += hit
            request.shared_blocks = shared
            self.free_blocks -= own_needed
            request.own_blocks += own_needed
            if request.shared_prefix_tokens:  # (without a shared prefix there is nothing to cache)
                self._cache_prefix(request, hit + new)
            running.append(request)
            scheduled.append((request, new))
            budget -= new
            tokens += new
            pairs += new * (hit + new / 2)
            prefill_kv += hit + new
        return tokens, pairs, prefill_kv

    def _watermark_blocks(self) -> int:
        """V0 keeps 1 % of the pool free when admitting (``BlockSpaceManager`` ``watermark=0.01``)."""
        return int(0.01 * self.config.num_free_blocks)

    def _v0_admissible(self, request: SimRequest, batched: int, seqs: int) -> bool:
        cfg = self.config
        if seqs + 1 > cfg.max_num_seqs or batched + request.num_tokens > cfg.max_num_batched_tokens:
            return False
        need = cfg.demand.blocks(request.num_tokens)
        return self.free_blocks - need >= self._watermark_blocks()

    def _schedule_v0(self) -> StepParts:
        """V0 (``vllm/core/scheduler.py::Scheduler._schedule_default``, 0.5 – 0.10 with chunked prefill off).

        Prefills first: whole prompts in FCFS order while they fit the token budget, ``max_num_seqs`` and the
        free blocks above a 1 % watermark; a step that admitted any prompt runs only prefills. Otherwise every
        running request decodes one token, preempting (recompute) the last running request when a block is
        missing. Prefix caching was off by default in V0.
        """
        scheduled: list[tuple[SimRequest, int]] = []
        batched = 0
        pairs = 0.0
        while self.waiting and self._v0_admissible(self.waiting[0], batched, len(self.running)):
            request = self.waiting.popleft()
            need = self.config.demand.blocks(request.num_tokens)
            self.free_blocks -= need
            request.own_blocks = need
            request.computed = 0
            self.running.append(request)
            scheduled.append((request, request.num_tokens))
            batched += request.num_tokens
            pairs += request.num_tokens * request.num_tokens / 2
        if scheduled:
            return [], scheduled, 0, batched, 0, pairs, batched, 0
        preempted = 0
        decode_context = 0
        window = self.config.attention_window
        windowed = 0
        index = 0
        demand = self.config.demand
        while index < len(self.running):
            request = self.running[index]
            need = demand.blocks(request.computed + 1) - demand.blocks(request.computed)
            if need > self.free_blocks:
                scheduled_self = True
                while need > self.free_blocks:
                    victim = self._preempt_last()
                    preempted += 1
                    if victim is request:
                        scheduled_self = False
                        break
                if not scheduled_self:
                    break
            self.free_blocks -= need
            request.own_blocks += need
            scheduled.append((request, 1))
            decode_context += request.computed
            if window:
                windowed += min(request.computed, window)
            index += 1
        return [], scheduled, preempted, len(scheduled), decode_context, 0.0, 0, windowed

    def admission_blocked(self, running_tokens: int) -> bool:
        """True when no waiting request can join while the running ones only decode (the free pool only
        shrinks until someone finishes, so the answer holds for the whole decode stretch)."""
        cfg = self.config
        if not self.waiting:
            return False
        n = len(self.running)
        if n >= cfg.max_num_seqs:
            return True
        head = self.waiting[0]
        if cfg.prefill_first:
            return not self._v0_admissible(head, 0, n)
        budget = cfg.max_num_batched_tokens - running_tokens
        if budget <= 0:
            return True
        new = min(head.num_tokens - head.computed, budget)
        if 0 < cfg.long_prefill_token_threshold < new:
            new = cfg.long_prefill_token_threshold
        # A lower bound on what the head needs is enough: its chunk's blocks less the best prefix hit.
        best_hit_blocks = (
            min(head.shared_prefix_tokens, head.num_tokens - 1) // cfg.demand.block_size
            if head.shared_prefix_tokens
            else 0
        )
        tokens = min(head.num_tokens, cfg.max_model_len) if cfg.reserve_full_sequence else new
        demand = cfg.demand
        if tokens < new:
            tokens = new
        if demand.is_simple and tokens > 0:  # ``demand.blocks(tokens)`` of a full-attention layout, inline
            lower = demand.full_groups * (-(tokens // -demand.block_size) - best_hit_blocks)
        else:
            lower = demand.blocks(tokens) - demand.full_groups * best_hit_blocks
        return lower - head.own_blocks > self.free_blocks

    def finish(self, request: SimRequest) -> None:
        """Free a finished request's blocks (``KVCacheManager.free``) and drop it from the running list."""
        self.free_blocks += request.own_blocks
        request.own_blocks = 0
        if request.lagging:
            self.num_lagging -= 1
        self.running.remove(request)

    @property
    def used_blocks(self) -> int:
        return self.config.num_free_blocks - self.free_blocks
