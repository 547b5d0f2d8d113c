"""The discrete-event loop of one simulated vLLM engine (stage 5 of the serving simulator).

The engine core runs steps back to back while it has work (``vllm/v1/engine/core.py::EngineCore.step``): new
requests that reached it during a step are seen at the next step's scheduling; an idle engine waits for the
next request. Every sampled token reaches the client at the end of its step.

**Decode stretches.** Most steps of a benchmark change nothing but context lengths: every running request is
decoding, none can join (no waiting request, or the waiting head cannot be admitted — the free pool only
shrinks while nobody finishes), no request finishes and no block allocation can fail. Over such a stretch
step ``j`` takes ``a + b·j`` (the context of every request grows by one token per step and only the attention
term depends on it; ``step_time.StepTimeModel.gpu_seconds_parts``), or ``max(a + b·j, cpu)`` under async
scheduling, so the stretch's duration is a closed-form sum. The loop jumps to the first event — a finish, a
block allocation the pool cannot serve, or an arrival that could join — instead of stepping token by token.
Inter-token latencies inside a stretch are the step times themselves; they are kept as a few weighted
samples (exact quantiles of a linear series), not one value per token.

**Speculative decoding** (``speculative.py``): a request advances 1 + accepted drafts per step, so the
stretch above becomes ``_try_spec_stretch``: every step of it has the same load (n(1 + d) tokens, the same
draft passes) and only the summed context grows, by n + that step's accepted drafts, which the integer
acceptance accumulators give exactly; the decode cohort is not used.

The client gate (``--max-concurrency``) sends a request at ``max(scheduled send time, a slot frees)``; slots
free when a request's last token arrives (``serve.py::limited_request_func`` holds the semaphore for the whole
request). A sent request reaches the engine ``request_latency_seconds`` later (the API server's share of its
round trip, ``step_time.StepCoefficients``): its TTFT and E2EL include that time, its inter-token gaps do not.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections import deque
from dataclasses import dataclass

from service.core.errors import InvalidSpec
from service.core.serving.scheduler import BlockDemand, Scheduler, SimRequest
from service.core.serving.speculative import ACCEPTANCE_UNITS, SpecDecoding, initial_credit
from service.core.serving.step_time import DraftCost, StepTimeModel

ITL_SAMPLES_PER_STRETCH = 8


@dataclass(frozen=True, slots=True, kw_only=True)
class StepRecord:
    """The engine's state at one moment (timeline raw material)."""

    time_seconds: float
    running: int
    waiting: int
    used_blocks: int
    tokens_per_step: float


RecordRow = tuple[float, int, int, int, float]


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineTrace:
    """What the benchmark client would have recorded, plus engine-side counters."""

    requests: tuple[SimRequest, ...]  # every request; failed ones have finish_seconds < 0
    failed: tuple[int, ...]  # indices of requests the server rejected
    itl_samples: tuple[tuple[float, float], ...]  # (inter-token latency seconds, weight in tokens)
    itl_count: int  # exact number of inter-token gaps
    itl_sum_seconds: float  # exact sum of the gaps
    # One row per iteration: (time, running, waiting, used blocks, tokens per step), ``StepRecord``'s fields.
    record_rows: tuple[RecordRow, ...]
    output_events: tuple[tuple[float, float], ...]  # (time, output tokens delivered then)
    num_steps: int
    num_steps_with_output: int  # steps in which at least one request sampled a token
    peak_running: int  # most requests running in any step
    num_iterations: int  # loop iterations (single steps + stretches): the simulator's own work
    num_preemptions: int
    # Speculative decoding, as vLLM's SpecDecodingStats counts it: verifications with drafts, draft tokens
    # verified, draft tokens accepted (0 without speculative decoding).
    spec_num_drafts: int = 0
    spec_num_draft_tokens: int = 0
    spec_num_accepted_tokens: int = 0

    @property
    def records(self) -> tuple[StepRecord, ...]:
        """The engine's state at each iteration (built on demand: the timeline needs only a few)."""
        return tuple(
            StepRecord(time_seconds=t, running=r, waiting=w, used_blocks=u, tokens_per_step=k)
            for t, r, w, u, k in self.record_rows
        )


def stretch_seconds(k: int, a: float, b: float, cpu: float, overlap: bool) -> float:
    """Σ_{j<k} step_j with step_j = a + b·j (+ cpu), or max(a + b·j, cpu) when CPU work overlaps the GPU."""
    if k <= 0:
        return 0.0
    if not overlap:
        return k * (a + cpu) + b * k * (k - 1) / 2
    if a >= cpu:
        j0 = 0
    elif b <= 0:
        return k * cpu
    else:
        j0 = min(k, math.ceil((cpu - a) / b))
    rest = k - j0
    return j0 * cpu + rest * a + b * (k * (k - 1) - j0 * (j0 - 1)) / 2


def _first_steps_reaching(
    target: float, k: int, duration: float, a: float, b: float, cpu: float, overlap: bool
) -> tuple[int, float]:
    """The fewest steps m ≤ ``k`` whose ``stretch_seconds`` reaches ``target``, and that sum, given that the
    ``k`` steps' sum ``duration`` exceeds it.

    ``stretch_seconds`` never decreases with the step count, in floating point too (a, b, cpu ≥ 0: each of its
    terms is a product or sum of non-decreasing non-negative values, and rounding keeps order), so any
    bisection of [1, k] finds the same m. This one first tries the steps where the sum's continuous form meets
    ``target`` (a quadratic in m) and the step before: when the estimate is right, two sums instead of about
    log2(k)."""
    # Below the CPU floor a step takes cpu (overlap) or a + cpu; above it a + b·j (+ cpu): the estimate takes
    # the quadratic of the GPU part and, when the CPU floor binds, the smaller of it and target / cpu.
    c = a if overlap else a + cpu
    if b > 0:
        half = c - b / 2
        estimate = (math.sqrt(half * half + 2 * b * target) - half) / b
    else:
        estimate = target / c if c > 0 else float(k)
    if overlap and cpu > a and cpu > 0:
        estimate = min(estimate, target / cpu)
    guess = math.ceil(estimate) if estimate < k else k
    lo, hi = 1, k
    for probe in (guess, guess - 1):
        if lo <= probe < hi:
            value = stretch_seconds(probe, a, b, cpu, overlap)
            if value >= target:
                hi, duration = probe, value
            else:
                lo = probe + 1
    while lo < hi:
        mid = (lo + hi) // 2
        value = stretch_seconds(mid, a, b, cpu, overlap)
        if value >= target:
            hi, duration = mid, value
        else:
            lo = mid + 1
    return lo, duration


class _Gate:
    """``asyncio.Semaphore(max_concurrency)``: slot free times, FIFO waiters."""

    __slots__ = ("_free_at", "unlimited")

    def __init__(self, max_concurrency: int | None) -> None:
        self.unlimited = max_concurrency is None
        self._free_at: list[float] = [0.0] * (max_concurrency or 0)

    def has_slot(self) -> bool:
        return self.unlimited or bool(self._free_at)

    def take(self, arrival_seconds: float) -> float:
        if self.unlimited:
            return arrival_seconds
        return max(arrival_seconds, heapq.heappop(self._free_at))

    def release(self, at_seconds: float) -> None:
        if not self.unlimited:
            heapq.heappush(self._free_at, at_seconds)


class Engine:
    """Runs one benchmark through one scheduler and step-time model."""

    def __init__(
        self,
        *,
        requests: list[SimRequest],
        scheduler: Scheduler,
        step_model: StepTimeModel,
        max_concurrency: int | None,
        max_model_len: int,
        max_iterations: int,
        use_stretches: bool = True,
        use_cohort: bool = True,
        step_parts: dict[tuple[int, int, float, int], tuple[float, float]] | None = None,
        keep_records: bool = True,
        spec: SpecDecoding | None = None,
        draft: DraftCost | None = None,
    ) -> None:
        # Speculative decoding: every step goes through ``_spec_step`` (requests advance by 1 + accepted
        # drafts, not one token per step, so neither the closed-form stretches nor the cohort apply).
        self._spec = spec
        self._draft = draft
        self._draft_parts: dict[tuple[int, int, float, int], tuple[float, float]] = {}
        self.spec_num_drafts = 0
        self.spec_num_draft_tokens = 0
        self.spec_num_accepted_tokens = 0
        # With speculative decoding the closed-form stretch is ``_try_spec_stretch`` (off when stepping).
        self._spec_stretches = spec is not None and use_stretches
        if spec is not None:
            use_stretches = use_cohort = False
            for request in requests:
                request.spec_credit = initial_credit(request.index)
        self.use_stretches = (
            use_stretches  # False: one step at a time (the reference the stretches must match)
        )
        self.requests = requests
        self.scheduler = scheduler
        self.model = step_model
        self.gate = _Gate(max_concurrency)
        self.max_model_len = max_model_len
        self.max_iterations = max_iterations
        self.pending: deque[SimRequest] = deque(sorted(requests, key=lambda r: (r.arrival_seconds, r.index)))
        # Sent, not yet at the engine: (engine arrival, request), in send order (``request_latency_seconds``).
        self.latency = step_model.coefficients.request_latency_seconds  # not scaled by time_scale (no step)
        self.transit: deque[tuple[float, SimRequest]] = deque()
        self.clock = 0.0
        self.failed: list[int] = []
        self.itl_samples: list[tuple[float, float]] = []
        self.itl_count = 0
        self.itl_sum = 0.0
        self.records: list[RecordRow] = []
        self.keep_records = keep_records  # False: no row per iteration (no timeline is drawn from this run)
        self.output_events: list[tuple[float, float]] = []
        self.num_steps = 0
        self.num_steps_with_output = 0
        self.peak_running = 0
        self.num_iterations = 0
        self.num_preemptions = 0
        # Step-time terms by their arguments: each a pure function of them and the step model, so a kept
        # answer is the answer (``step_parts``: shared by the simulations of one replica).
        self._parts = {} if step_parts is None else step_parts
        self._cpu: dict[int, float] = {}  # CPU seconds of a step by its number of requests
        # A decode-only step's terms by its number of requests n: the kept (n, n, 0, 0) GPU terms and the CPU
        # seconds of n requests (the same values, one lookup).
        self._decode_terms: dict[int, tuple[float, float, float]] = {}
        self._per_windowed = step_model.seconds_per_windowed_token()
        self._overlap = step_model.async_scheduling
        # The decode cohort (see the module docstring): running requests advanced together without a visit
        # each. Only for the V1 scheduler over full-attention layouts with stretches on; otherwise never used.
        cfg = scheduler.config
        self._simple = cfg.demand.is_simple
        self._cohort_on = (
            use_cohort
            and use_stretches
            and not cfg.prefill_first
            and self._simple
            and not cfg.attention_window
        )
        self._formed = True  # the cohort's bookkeeping below describes the running list
        self._advance = 0  # decode tokens every member has been given since the engine started
        self._members = 0
        self._member_context = (
            0  # Σ over members of (computed − cohort_base): + members × advance = Σ context
        )
        self._by_offset = [0] * cfg.demand.block_size  # members by (computed − cohort_base) mod block_size
        self._finish_heap: list[tuple[int, int, SimRequest]] = []  # (advance it finishes at, index, request)
        self._outsiders: list[SimRequest] = []  # running requests outside the cohort
        self._cohort_last = 0.0  # when every member sampled its last token

    # --- client side -------------------------------------------------------------------------------------
    def _send_due(self) -> None:
        """Send every request whose time has come and for which the gate has a slot."""
        pending, gate, clock = self.pending, self.gate, self.clock
        unlimited = gate.unlimited  # (no gate: every slot free, each request sent at its arrival)
        waiting = self.scheduler.waiting
        while pending and pending[0].arrival_seconds <= clock and (unlimited or gate.has_slot()):
            request = pending.popleft()
            request.send_seconds = (
                request.arrival_seconds if unlimited else gate.take(request.arrival_seconds)
            )
            if request.prompt_tokens + request.output_tokens > self.max_model_len:
                # The OpenAI server rejects prompt + max_tokens > max_model_len with HTTP 400 at once.
                request.finish_seconds = -1.0
                self.failed.append(request.index)
                gate.release(request.send_seconds)
                continue
            if self.latency:
                self.transit.append((request.send_seconds + self.latency, request))
            else:
                waiting.append(request)
        transit = self.transit
        while transit and transit[0][0] <= self.clock:
            waiting.append(transit.popleft()[1])

    def _next_send_seconds(self) -> float:
        """The next time a request reaches the engine or is sent towards it (a safe bound either way)."""
        at = self.transit[0][0] if self.transit else math.inf
        if self.pending and self.gate.has_slot():
            return min(at, self.pending[0].arrival_seconds)
        return at

    def _finish(self, request: SimRequest) -> None:
        """The client has its last token. Under async scheduling the scheduler had already given the request
        its next step (output placeholders, ``Scheduler.schedule`` 0.15+): it holds its slot and blocks for one
        more step, whose token is discarded."""
        clock = request.finish_seconds = self.clock
        gate = self.gate
        if not gate.unlimited:
            gate.release(clock)
        if self._overlap:  # (async scheduling)
            request.lagging = True
            self.scheduler.num_lagging += 1
        else:
            self.scheduler.finish(request)

    def _record(self, tokens: float) -> None:
        s = self.scheduler
        running = len(s.running)
        if running > self.peak_running:
            self.peak_running = running
        if self.keep_records:
            self.records.append(
                (self.clock, running, len(s.waiting), s.config.num_free_blocks - s.free_blocks, tokens)
            )

    def _gpu_parts(self, tokens: int, requests: int, pairs: float, prefill_kv: int) -> tuple[float, float]:
        key = (tokens, requests, pairs, prefill_kv)
        parts = self._parts.get(key)
        if parts is None:
            parts = self._parts[key] = self.model.gpu_seconds_parts_of(tokens, requests, pairs, prefill_kv)
        return parts

    def _decode_terms_of(self, requests: int) -> tuple[float, float, float]:
        fixed, per_context = self._gpu_parts(requests, requests, 0.0, 0)
        terms = self._decode_terms[requests] = (fixed, per_context, self._cpu_seconds(requests))
        return terms

    def _cpu_seconds(self, requests: int) -> float:
        cpu = self._cpu.get(requests)
        if cpu is None:
            cpu = self._cpu[requests] = self.model.cpu_seconds(requests)
        return cpu

    def _step_seconds(
        self, tokens: int, requests: int, decode_context: int, pairs: float, prefill_kv: int, windowed: int
    ) -> float:
        """``StepTimeModel.step_seconds`` of the load, term for term, from the kept terms."""
        parts = self._parts.get((tokens, requests, pairs, prefill_kv))
        fixed, per_context = (
            parts if parts is not None else self._gpu_parts(tokens, requests, pairs, prefill_kv)
        )
        gpu = fixed + per_context * decode_context
        if windowed:
            gpu += self._per_windowed * windowed
        cpu = self._cpu.get(requests)
        if cpu is None:
            cpu = self._cpu_seconds(requests)
        return max(gpu, cpu) if self._overlap else gpu + cpu

    # --- the loop ----------------------------------------------------------------------------------------
    def run(self) -> EngineTrace:
        s = self.scheduler
        pending, transit = self.pending, self.transit
        running, waiting = s.running, s.waiting  # (the scheduler's own list and queue, never replaced)
        use_stretches, cohort_on = self.use_stretches, self._cohort_on
        single_step = self._single_step if self._spec is None else self._spec_step
        spec_stretches = self._spec_stretches
        while True:
            clock = self.clock
            if (pending and pending[0].arrival_seconds <= clock) or (transit and transit[0][0] <= clock):
                self._send_due()  # (nothing is due otherwise: the same as calling it)
            if not running and not waiting:
                if not pending and not transit:
                    break
                self.clock = max(clock, self._next_send_seconds())
                continue
            self.num_iterations += 1
            if self.num_iterations > self.max_iterations:
                raise InvalidSpec(
                    f"the simulation needs more than {self.max_iterations:,} engine iterations; "
                    "use fewer prompts or shorter requests",
                    field="benchmark.num_prompts",
                )
            if use_stretches and self._try_stretch():
                continue
            if spec_stretches and self._try_spec_stretch():
                continue
            if cohort_on and self._formed and self._cohort_step():
                continue
            if self._formed and self._members:
                self._dissolve()
            single_step()
            if cohort_on:
                self._form()
        return EngineTrace(
            requests=tuple(self.requests),
            failed=tuple(self.failed),
            itl_samples=tuple(self.itl_samples),
            itl_count=self.itl_count,
            itl_sum_seconds=self.itl_sum,
            record_rows=tuple(self.records),
            output_events=tuple(self.output_events),
            num_steps=self.num_steps,
            num_steps_with_output=self.num_steps_with_output,
            peak_running=self.peak_running,
            num_iterations=self.num_iterations,
            num_preemptions=self.num_preemptions,
            spec_num_drafts=self.spec_num_drafts,
            spec_num_draft_tokens=self.spec_num_draft_tokens,
            spec_num_accepted_tokens=self.spec_num_accepted_tokens,
        )

    def _single_step(self) -> None:
        s = self.scheduler
        decoding, scheduled, preempted, tokens, decode_context, pairs, prefill_kv, windowed = (
            s.schedule_parts()
        )
        self.num_preemptions += preempted
        requests = len(decoding) + len(scheduled)
        if not requests:
            self._drop_unservable_head()
            return
        self._record(tokens)
        seconds = self._step_seconds(tokens, requests, decode_context, pairs, prefill_kv, windowed)
        previous_end = self.clock
        clock = self.clock = previous_end + seconds
        self.num_steps += 1
        regular = 0
        sampled = 0
        itl_count = 0
        itl_sum = 0.0
        irregular = self.itl_samples
        finished: list[SimRequest] = []
        released: list[SimRequest] = []
        # The leading plain decodes each sample their next token (never their first).
        for request in decoding:
            if request.lagging:
                released.append(request)
                continue
            request.computed += 1
            generated = request.generated + 1
            request.generated = generated
            request.num_tokens += 1
            last = request.last_token_seconds
            if last == previous_end:
                regular += 1
            else:
                itl_sum += clock - last
                irregular.append((clock - last, 1.0))
            request.last_token_seconds = clock
            if generated >= request.output_tokens:
                finished.append(request)
        sampled = itl_count = len(decoding) - len(released)
        self._sample_scheduled(
            scheduled, clock, previous_end, seconds, released, finished, sampled, itl_count, itl_sum, regular
        )
        for request in finished:
            self._finish(request)

    def _spec_step(self) -> None:
        """One step with speculative decoding (``speculative.py``): the scheduler hands each decoding request
        1 + d tokens (its drafts), the step takes the target's forward over every token — logits at the 1 + d
        positions of each request — plus the proposer's passes (``DraftCost``), and after it each request
        that completed its tokens keeps 1 + accepted of them (the rejected drafts rolled back), streams them
        to the client as one chunk, and takes new drafts into the next step."""
        s = self.scheduler
        spec = self._spec
        assert spec is not None
        _, scheduled, preempted, tokens, decode_context, pairs, prefill_kv, windowed = s.schedule_parts()
        self.num_preemptions += preempted
        requests = len(scheduled)
        if not requests:
            self._drop_unservable_head()
            return
        self._record(tokens)
        key = (tokens, requests + s.scheduled_drafts, pairs, prefill_kv)  # logits at 1 + d positions each
        target = self._parts.get(key)
        fixed, per_context = target if target is not None else self._gpu_parts(*key)
        gpu = fixed + per_context * decode_context
        if windowed:
            gpu += self._per_windowed * windowed
        if self._draft is not None:
            key = (tokens, requests, pairs, prefill_kv)
            parts = self._draft_parts.get(key)
            if parts is None:
                parts = self._draft_parts[key] = self._draft.seconds_parts_of(
                    tokens, requests, pairs, prefill_kv
                )
            gpu += parts[0] + parts[1] * decode_context
        cpu = self._cpu_seconds(requests)
        seconds = max(gpu, cpu) if self._overlap else gpu + cpu
        previous_end = self.clock
        clock = self.clock = previous_end + seconds
        self.num_steps += 1
        expected = spec.expected_accepted_units
        next_drafts = spec.drafts_per_step
        sampled = itl_count = regular = num_drafts = num_draft_tokens = num_accepted = 0
        itl_sum = 0.0
        irregular = self.itl_samples
        finished: list[SimRequest] = []
        released: list[SimRequest] = []
        for request, new in scheduled:
            if request.lagging:
                released.append(request)
                continue
            num_tokens = request.num_tokens
            computed = request.computed + new
            if computed < num_tokens:
                request.computed = computed  # a prefill chunk that does not finish the prompt samples nothing
                continue
            verified = computed - num_tokens
            accepted = 0
            if verified:
                credit = request.spec_credit + expected[verified]
                accepted = credit // ACCEPTANCE_UNITS
                request.spec_credit = credit - accepted * ACCEPTANCE_UNITS
                num_drafts += 1
                num_draft_tokens += verified
                num_accepted += accepted
            # The accepted drafts and one more token; nothing beyond max_tokens (``_update_request_with_output``).
            emitted = 1 + accepted
            generated = request.generated
            first = generated == 0
            if emitted > request.output_tokens - generated:
                emitted = request.output_tokens - generated
            generated += emitted
            request.generated = generated
            request.num_tokens = num_tokens + emitted
            request.computed = num_tokens + emitted - 1  # the rejected drafts rolled back
            sampled += emitted
            if first:
                request.first_token_seconds = clock
            else:
                last = request.last_token_seconds
                itl_count += 1  # one streamed chunk, however many tokens it carries
                if last == previous_end:
                    regular += 1
                else:
                    itl_sum += clock - last
                    irregular.append((clock - last, 1.0))
            request.last_token_seconds = clock
            if generated >= request.output_tokens:
                request.spec_tokens = 0
                finished.append(request)
            else:
                request.spec_tokens = next_drafts
        self.spec_num_drafts += num_drafts
        self.spec_num_draft_tokens += num_draft_tokens
        self.spec_num_accepted_tokens += num_accepted
        self.itl_count += itl_count
        self.itl_sum += itl_sum + regular * (clock - previous_end)
        if regular:
            irregular.append((seconds, float(regular)))
        if sampled:
            self.output_events.append((clock, float(sampled)))
            self.num_steps_with_output += 1
        for request in released:
            s.finish(request)
        for request in finished:
            self._finish(request)

    def _try_spec_stretch(self) -> bool:
        """``_spec_step`` repeated while nothing but contexts change, without a visit per request and step.

        The conditions of ``_try_stretch`` (everyone decodes and sampled at the end of the last step, nobody
        can join, no arrival that could join, no finish before the last step, every block the steps start is
        free), plus: every request holds the same d drafts and gets all of them (n(1 + d) ≤ the budget, never
        capped by ``max_model_len``), a full-attention layout, no prefix left to hand to the cache. Then every
        step has the same load — n(1 + d) tokens, n(1 + d) logits rows, the same draft passes — and only the
        summed context grows, by n + the step's accepted drafts. Request i's accumulator after j steps holds
        X_i + j·U units (U = E[accepted | d] in ``ACCEPTANCE_UNITS``), so it has accepted (X_i + j·U) // Q
        drafts, and the batch's sum is n·(j·U // Q) + #{i : X_i ≥ Q − j·U mod Q}: one bisection per step over
        the sorted phases. Each step's time, the clock, the ITL samples and the output events are summed in the
        same order and with the same operations as ``_spec_step`` does, so both paths give the same figures.
        False (nothing changed) when a condition fails or fewer than two steps qualify."""
        s = self.scheduler
        spec = self._spec
        assert spec is not None
        running = s.running
        n = len(running)
        cfg = s.config
        drafts = spec.drafts_per_step
        per = 1 + drafts
        demand = cfg.demand
        if not n or s.num_lagging or n * per > cfg.max_num_batched_tokens or cfg.attention_window:
            return False
        if not demand.is_simple:
            return False
        clock = self.clock
        arrival_limit = math.inf
        if s.waiting:
            if not s.admission_blocked(n * per):
                return False
        elif n < cfg.max_num_seqs:
            transit, pending = self.transit, self.pending
            if transit:
                arrival_limit = transit[0][0]
            if pending and self.gate.has_slot():
                first = pending[0].arrival_seconds
                if first < arrival_limit:
                    arrival_limit = first
            if arrival_limit <= clock:
                return False
        q = ACCEPTANCE_UNITS
        u = spec.expected_accepted_units[drafts]
        max_len = cfg.max_model_len
        k = 1 << 62
        context = 0
        for request in running:
            if (
                request.generated == 0
                or request.computed != request.num_tokens - 1
                or request.spec_tokens != drafts
                or request.last_token_seconds != clock
                or (request.shared_prefix_tokens and not request.shared_blocks)
                or request.prompt_tokens + request.output_tokens + drafts > max_len
            ):
                return False
            left = request.output_tokens - request.generated
            x = request.spec_credit
            # The fewest steps j with j + (x + j·u) // q ≥ left: from the real-valued bound, then by one.
            j = max(1, -((x - left * q) // (q + u)))
            while j + (x + j * u) // q < left:
                j += 1
            while j > 1 and j - 1 + (x + (j - 1) * u) // q >= left:
                j -= 1
            if j < k:
                k = j
            context += request.computed
        if k < 2:
            return False
        bs, groups = demand.block_size, demand.full_groups
        lookahead = cfg.num_lookahead_tokens

        def blocks_for(steps: int) -> int:
            """Blocks the requests start over ``steps`` steps (the last step's slots, as ``_schedule_spec``)."""
            total = 0
            t = steps - 1
            for request in running:
                slots = request.computed + t + (request.spec_credit + t * u) // q + per + lookahead
                if slots > max_len:
                    slots = max_len
                need = groups * (-(-slots // bs) - request.shared_blocks) - request.own_blocks
                if need > 0:
                    total += need
            return total

        free = s.free_blocks
        if blocks_for(k) > free:
            lo, hi = 1, k
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if blocks_for(mid) <= free:
                    lo = mid
                else:
                    hi = mid - 1
            k = lo
            if k < 2:
                return False
        # The step's terms: the target's (logits at 1 + d rows each) and the proposer's, as ``_spec_step``.
        tokens = n * per
        key = (tokens, n + n * drafts, 0.0, 0)
        target = self._parts.get(key)
        fixed, per_context = target if target is not None else self._gpu_parts(*key)
        draft_fixed = draft_context = 0.0
        with_draft = self._draft is not None
        if with_draft:
            draft_key = (tokens, n, 0.0, 0)
            parts = self._draft_parts.get(draft_key)
            if parts is None:
                assert self._draft is not None
                parts = self._draft_parts[draft_key] = self._draft.seconds_parts_of(tokens, n, 0.0, 0)
            draft_fixed, draft_context = parts
        cpu = self._cpu_seconds(n)
        overlap = self._overlap
        phases = sorted(request.spec_credit for request in running)
        if n > self.peak_running:
            self.peak_running = n
        if self.keep_records:
            self.records.append((clock, n, len(s.waiting), cfg.num_free_blocks - s.free_blocks, tokens))
        irregular = self.itl_samples
        events = self.output_events
        weight = float(n)
        accepted_before = 0  # Σ_i (x_i + j·u) // q after j steps (every x_i < q)
        steps = 0
        last_clock = clock
        for j in range(1, k + 1):
            gpu = fixed + per_context * context
            if with_draft:
                gpu += draft_fixed + draft_context * context
            seconds = (gpu if gpu > cpu else cpu) if overlap else gpu + cpu  # ``max(gpu, cpu)``'s value
            previous_end = last_clock
            last_clock = previous_end + seconds
            spread = j * u
            accepted_after = n * (spread // q) + (n - bisect.bisect_left(phases, q - spread % q))
            step_accepted = accepted_after - accepted_before
            accepted_before = accepted_after
            steps = j
            self.itl_sum += 0.0 + n * (last_clock - previous_end)
            irregular.append((seconds, weight))
            if j == k or last_clock >= arrival_limit:
                break  # the last step (its tokens below), or the next request reached the engine during it
            events.append((last_clock, float(n + step_accepted)))
            context += n + step_accepted
        clock = self.clock = last_clock
        m = steps
        # Each request's state after m steps; those done (only possible at m = k) finish, as in ``_spec_step``.
        finished: list[SimRequest] = []
        delivered_last = 0
        grown = 0
        accepted_total = 0
        for request in running:
            x = request.spec_credit
            accepted = (x + m * u) // q
            before_last = m - 1 + (x + (m - 1) * u) // q  # tokens it gained before the last step
            slots = (
                request.computed + before_last + per + lookahead
            )  # the last step's ``_schedule_spec`` slots
            if slots > max_len:
                slots = max_len
            need = groups * (-(-slots // bs) - request.shared_blocks) - request.own_blocks
            if need > 0:
                request.own_blocks += need
                grown += need
            left = request.output_tokens - request.generated
            progress = m + accepted
            emitted = progress if progress < left else left
            delivered_last += emitted - (before_last if before_last < left else left)
            accepted_total += accepted
            request.spec_credit = x + m * u - accepted * q
            request.generated += emitted
            request.num_tokens += emitted
            request.computed = request.num_tokens - 1
            request.last_token_seconds = clock
            if request.generated >= request.output_tokens:
                request.spec_tokens = 0
                finished.append(request)
        s.free_blocks -= grown
        events.append((clock, float(delivered_last)))
        self.num_steps += m
        self.num_steps_with_output += m
        self.itl_count += n * m
        if drafts:
            self.spec_num_drafts += n * m
            self.spec_num_draft_tokens += n * m * drafts
            self.spec_num_accepted_tokens += accepted_total
        for request in finished:
            self._finish(request)
        return True

    # --- the decode cohort ------------------------------------------------------------------------------
    def _sample_scheduled(
        self,
        scheduled: list[tuple[SimRequest, int]],
        clock: float,
        previous_end: float,
        seconds: float,
        released: list[SimRequest],
        finished: list[SimRequest],
        sampled: int,
        itl_count: int,
        itl_sum: float,
        regular: int,
    ) -> None:
        """The end of a step for the requests scheduled after the leading decodes (one stage of both step
        kinds): each computes its tokens, a finished prompt samples its next token, and the step's sample,
        inter-token and finish counts — started at ``sampled``, ``itl_count``, ``itl_sum`` (of the irregular
        gaps) and ``regular`` (gaps) from the leading decodes, summed on in the same order — are recorded.
        Lagging requests join ``released`` and leave the scheduler; finished ones are appended to
        ``finished``."""
        irregular = self.itl_samples
        for request, new in scheduled:
            if request.lagging:
                released.append(request)
                continue
            computed = request.computed + new
            request.computed = computed
            if computed < request.num_tokens:
                continue  # a prefill chunk that does not finish the prompt samples nothing
            generated = request.generated + 1
            request.generated = generated
            request.num_tokens += 1
            sampled += 1
            if generated == 1:
                request.first_token_seconds = clock
            else:
                last = request.last_token_seconds
                itl_count += 1
                if last == previous_end:
                    regular += 1
                else:
                    itl_sum += clock - last
                    irregular.append((clock - last, 1.0))
            request.last_token_seconds = clock
            if generated >= request.output_tokens:
                finished.append(request)
        self.itl_count += itl_count
        # The regular gaps (a token in each of two consecutive steps) are all this step's length: one product.
        self.itl_sum += itl_sum + regular * (clock - previous_end)
        if regular:
            irregular.append((seconds, float(regular)))
        if sampled:
            self.output_events.append((clock, float(sampled)))
            self.num_steps_with_output += 1
        for request in released:
            self.scheduler.finish(request)

    def _join(self, request: SimRequest) -> None:
        """``request`` decodes from here with the cohort (it sampled its last token with the others)."""
        advance = self._advance
        request.cohort_base = advance
        offset = request.computed - advance
        self._by_offset[offset % len(self._by_offset)] += 1
        self._member_context += offset
        self._members += 1
        heapq.heappush(
            self._finish_heap, (advance + request.output_tokens - request.generated, request.index, request)
        )

    def _catch_up(self, request: SimRequest) -> int:
        """Write the cohort's advance since ``request`` joined into its own fields; returns that advance
        (its bookkeeping entries are the caller's to drop)."""
        delta = self._advance - request.cohort_base
        request.cohort_base = -1
        if delta:
            computed = request.computed
            bs = len(self._by_offset)
            request.computed = computed + delta
            request.generated += delta
            request.num_tokens += delta
            # One block per group each time a token starts a block, as the scheduler allocates them.
            request.own_blocks += self.scheduler.config.demand.full_groups * (
                (computed + delta + bs - 1) // bs - (computed + bs - 1) // bs
            )
            request.last_token_seconds = self._cohort_last
        return delta

    def _dissolve(self) -> None:
        """Every member's own fields brought up to date; the cohort is empty until ``_form``."""
        for request in self.scheduler.running:
            if request.cohort_base >= 0:
                self._catch_up(request)
        self._members = 0
        self._member_context = 0
        self._by_offset = [0] * len(self._by_offset)
        self._finish_heap = []
        self._outsiders = []
        self._formed = False

    def _form(self) -> None:
        """After a step taken request by request: the running requests that decode in step with each other
        (their last token now, no shared prefix to hand to the cache) become the cohort, the rest outsiders."""
        if self._members:
            self._dissolve()
        outsiders: list[SimRequest] = []
        self._cohort_last = self.clock
        for request in self.scheduler.running:
            if self._joinable(request):
                self._join(request)
            else:
                outsiders.append(request)
        self._outsiders = outsiders
        self._formed = True

    def _next_block_offsets(self) -> list[int]:
        """``_simple_block_limited_steps``'s per-offset counts of the members: a member at context c needs a
        block at step (−c) mod bs; c ≡ its offset + advance (mod bs)."""
        by_offset = self._by_offset
        bs = len(by_offset)
        advance = self._advance
        per_offset = [0] * bs
        for offset, count in enumerate(by_offset):
            if count:
                per_offset[(-(offset + advance)) % bs] += count
        return per_offset

    def _blocks_started(self, k: int) -> int:
        """Blocks (per group) the members start over their next ``k`` tokens. A member whose next block
        starts at step f (0 ≤ f < bs) starts one at f, f + bs, …: with k = q·bs + r that is q + 1 blocks when
        f < r, else q. The members with f < r are those at offsets s₀, s₀ − 1, …, s₀ − r + 1 (mod bs), where
        s₀ = (−advance) mod bs — one cyclic slice of ``_by_offset``."""
        by_offset = self._by_offset
        bs = len(by_offset)
        q, r = divmod(k, bs)
        grown = q * self._members
        if r:
            top = (-self._advance) % bs
            low = top - r + 1
            grown += (
                sum(by_offset[low : top + 1])
                if low >= 0
                else sum(by_offset[: top + 1]) + sum(by_offset[low:])
            )
        return grown

    def _advance_cohort(self, k: int, clock: float, blocks_taken: bool = False) -> None:
        """The members decode ``k`` more tokens, the last at ``clock``: the blocks they start come from the
        pool (unless ``blocks_taken``: the step took them already), and those whose output is complete
        finish."""
        by_offset = self._by_offset
        bs = len(by_offset)
        advance = self._advance
        if not blocks_taken:
            self.scheduler.free_blocks -= self.scheduler.config.demand.full_groups * self._blocks_started(k)
        advance += k
        self._advance = advance
        self._cohort_last = clock
        heap = self._finish_heap
        while heap and heap[0][0] <= advance:
            request = heapq.heappop(heap)[2]
            base = request.cohort_base
            offset = request.computed - base
            by_offset[offset % bs] -= 1
            self._member_context -= offset
            self._members -= 1
            self._catch_up(request)
            self._finish(request)
            if request.lagging:
                self._outsiders.append(request)

    def _cohort_step(self) -> bool:
        """``_single_step`` when the scheduler's leading decodes are the members plus lagging requests (each
        takes its extra step and is released), and every running request after them is outside the cohort:
        the members are handed over without a visit each, the rest go through ``Scheduler.schedule_rest``
        as in any step. False (nothing changed) when the step needs the request-by-request path."""
        s = self.scheduler
        cfg = s.config
        running = s.running
        count = len(running)
        members = self._members
        if members and self._cohort_last != self.clock:
            return False
        outsiders = self._outsiders
        lead = count  # the scheduler's leading decodes end at the first request that does not decode
        for request in outsiders:
            if request.num_tokens - request.computed != 1 or not request.generated:
                position = running.index(request)
                if position < lead:
                    lead = position
        leading: list[SimRequest] = []  # outsiders among the leading decodes: lagging ones only
        tail: list[SimRequest] = []
        if lead == count:
            leading = outsiders
        else:
            for request in outsiders:
                (tail if running.index(request) >= lead else leading).append(request)
            if len(tail) != count - lead:
                return False  # a member after a request in prefill: not a leading decode
        if lead > cfg.max_num_batched_tokens:
            return False
        if leading:
            context = self._take_lagging_blocks(leading)
            if context is None:
                return False
        else:  # ``_take_lagging_blocks([])``, inline: the members starting a block take one per group each
            demand = cfg.demand
            starting = self._by_offset[(-self._advance) % demand.block_size] if members else 0
            if demand.full_groups * starting > s.free_blocks:
                return False
            s.free_blocks -= demand.full_groups * starting
            context = 0
        scheduled: list[tuple[SimRequest, int]] = []
        budget = cfg.max_num_batched_tokens - lead
        tokens, decode_context = lead, context + self._member_context + members * self._advance
        pairs, prefill_kv, preempted = 0.0, 0, 0
        if lead < count:  # (with nobody after the leading decodes the scheduler's loop gives nothing out)
            preempted, budget, tokens, decode_context, pairs, prefill_kv, _ = s.schedule_rest(
                lead, scheduled, budget, tokens, decode_context, pairs, prefill_kv, 0
            )
            self.num_preemptions += preempted
        from_tail = len(scheduled)
        if preempted == 0 and s.waiting:
            tokens, pairs, prefill_kv = s.admit_waiting(scheduled, budget, tokens, pairs, prefill_kv)
        requests = lead + len(scheduled)
        if not requests:
            self._drop_unservable_head()
            return True
        # ``_record`` and ``_step_seconds`` (no windowed layers in a cohort), inline.
        running_now = len(running)
        if running_now > self.peak_running:
            self.peak_running = running_now
        previous_end = self.clock
        if self.keep_records:
            self.records.append(
                (previous_end, running_now, len(s.waiting), cfg.num_free_blocks - s.free_blocks, tokens)
            )
        parts = self._parts.get((tokens, requests, pairs, prefill_kv))
        fixed, per_context = (
            parts if parts is not None else self._gpu_parts(tokens, requests, pairs, prefill_kv)
        )
        gpu = fixed + per_context * decode_context
        cpu = self._cpu.get(requests)
        if cpu is None:
            cpu = self._cpu_seconds(requests)
        seconds = (cpu if cpu > gpu else gpu) if self._overlap else gpu + cpu  # max(gpu, cpu) under overlap
        clock = self.clock = previous_end + seconds
        self.num_steps += 1
        # Every member's last token came at the end of the previous step: each gap is a regular one.
        finished: list[SimRequest] = []
        released = list(leading)
        self._sample_scheduled(
            scheduled, clock, previous_end, seconds, released, finished, members, members, 0.0, members
        )
        self._outsiders = []
        self._advance_cohort(1, clock, True)
        for request in finished:
            self._finish(request)
        if preempted:
            self._form()  # the victims left the running list: count the outsiders afresh
            return True
        kept = self._outsiders  # members that finished and lag
        for request in tail:
            if not any(request is r for r in released):
                self._keep_or_join(request, kept)
        for request, _ in scheduled[from_tail:]:
            self._keep_or_join(request, kept)
        return True

    def _take_lagging_blocks(self, leading: list[SimRequest]) -> int | None:
        """The blocks of a step whose leading decodes are the members and ``leading`` (lagging requests, each
        taking its extra step): taken from the pool, and the leaders' summed context returned; None, with
        nothing taken, when a leader is not lagging or shares a prefix, or when some decode cannot get its
        block (the scheduler's order then decides who is preempted)."""
        s = self.scheduler
        demand = s.config.demand
        bs, groups = demand.block_size, demand.full_groups
        starting = self._by_offset[(-self._advance) % bs] if self._members else 0  # members starting a block
        context = 0
        for request in leading:
            computed = request.computed
            if not request.lagging or request.shared_prefix_tokens:
                return None
            context += computed
            if not computed % bs:
                starting += 1
        if groups * starting > s.free_blocks:
            return None
        s.free_blocks -= groups * starting
        for request in leading:
            if not request.computed % bs:
                request.own_blocks += groups
        return context

    def _keep_or_join(self, request: SimRequest, outsiders: list[SimRequest]) -> None:
        """After a step: a running request that decodes in step with the cohort joins it; one that still
        runs (lagging ones included) stays among ``outsiders``; one that finished and left is dropped."""
        if self._joinable(request):
            self._join(request)
        elif request.finish_seconds < 0 or request.lagging:
            outsiders.append(request)

    def _joinable(self, request: SimRequest) -> bool:
        """Decodes, sampled its last token now (with the cohort), has more to generate, and has no shared
        prefix to hand to the prefix cache when it starts a block."""
        return (
            request.generated > 0
            and request.computed == request.num_tokens - 1
            and not request.lagging
            and not request.shared_prefix_tokens
            and request.generated < request.output_tokens
            and request.last_token_seconds == self.clock
        )

    def _drop_unservable_head(self) -> None:
        """Nothing could be scheduled: the waiting head needs more blocks than the empty pool has."""
        s = self.scheduler
        if s.running or not s.waiting:
            return
        request = s.waiting.popleft()
        request.finish_seconds = -1.0
        self.failed.append(request.index)
        self.gate.release(self.clock)

    def _try_stretch(self) -> bool:
        s = self.scheduler
        running = s.running
        n = len(running)
        cfg = s.config
        if n == 0 or n > cfg.max_num_batched_tokens:
            return False
        if s.num_lagging:
            return self._try_lag_step()  # (a lagging request takes its extra step, one at a time)
        arrival_limit = math.inf
        clock = self.clock
        if s.waiting:
            if not s.admission_blocked(n):
                return False
        elif n < cfg.max_num_seqs:
            # ``_next_send_seconds``, inline.
            transit, pending = self.transit, self.pending
            if transit:
                arrival_limit = transit[0][0]
            if pending and self.gate.has_slot():
                first = pending[0].arrival_seconds
                if first < arrival_limit:
                    arrival_limit = first
            if arrival_limit <= clock:
                return False
        k = 1 << 62
        context = 0
        window = cfg.attention_window
        windowed = 0  # Σ min(context, window) of the sliding-window layers
        below_window = 0  # requests whose context is still inside the window: their windowed read grows
        members = self._members
        cohort = bool(members) and self._formed and not self._outsiders and self._cohort_last == clock
        if cohort:
            # Every running request is a member: each decodes, none lags; the nearest finish is the heap's.
            advance = self._advance
            k = self._finish_heap[0][0] - advance
            context = self._member_context + members * advance
        elif self._formed and members:
            self._dissolve()
        # Newly admitted requests sit at the end: check from there, the usual reason to fail.
        if cohort:
            pass
        elif not window:
            for request in reversed(running):
                computed = request.computed
                if request.generated == 0 or computed != request.num_tokens - 1 or request.lagging:
                    return False
                left = request.output_tokens - request.generated
                if left < k:
                    k = left
                context += computed
        else:
            for request in reversed(running):
                computed = request.computed
                if request.generated == 0 or computed != request.num_tokens - 1 or request.lagging:
                    return False
                left = request.output_tokens - request.generated
                if left < k:
                    k = left
                context += computed
                if computed < window:
                    windowed += computed
                    below_window += 1
                    # Linear only while context + j ≤ window, i.e. for the first window − context + 1 steps.
                    if window - computed + 1 < k:
                        k = window - computed + 1
                else:
                    windowed += window
        if k < 2:
            return False
        demand = cfg.demand
        if not self._simple or demand.full_groups * n * ((k - 1) // demand.block_size + 1) > s.free_blocks:
            # (Each request needs at most one block per group every block_size steps: when even that many
            # fit, all k steps do; otherwise ``_block_limited_steps`` counts them.)
            k = self._block_limited_steps(k, cohort=cohort)
            if k < 2:
                return False
        terms = self._decode_terms.get(n)
        fixed, per_context, cpu = terms if terms is not None else self._decode_terms_of(n)
        a = fixed + per_context * context
        b = per_context * n
        if window:
            per_windowed = self._per_windowed
            a += per_windowed * windowed
            b += per_windowed * below_window
        overlap = self._overlap
        duration = stretch_seconds(k, a, b, cpu, overlap)
        if arrival_limit < math.inf:
            # Stop after the step during which the next request reaches the engine.
            target = arrival_limit - clock
            if duration > target:
                k, duration = _first_steps_reaching(target, k, duration, a, b, cpu, overlap)
        # ``_record``, inline.
        if n > self.peak_running:
            self.peak_running = n
        if self.keep_records:
            self.records.append((clock, n, len(s.waiting), cfg.num_free_blocks - s.free_blocks, float(n)))
        self._stretch_figures(n, k, clock, duration, a, b, cpu)
        clock = self.clock = clock + duration
        if cohort:
            self._advance_cohort(k, clock)
            return True
        self._advance_running(k, clock)
        if self._cohort_on:
            self._form()
        return True

    def _stretch_figures(
        self, n: int, k: int, start: float, duration: float, a: float, b: float, cpu: float
    ) -> None:
        """The client's and the engine's counters for ``k`` decode steps of ``n`` requests from ``start``."""
        # Output tokens over time feed vLLM's one-second buckets (max_output_tokens_per_s): a few points per
        # second of the stretch are enough (one for a stretch of half a second or less: ceil(2·duration) ≤ 1).
        if duration <= 0.5:
            self.output_events.append((start + duration * 0.5, n * k / 1))
        else:
            events = min(ITL_SAMPLES_PER_STRETCH, math.ceil(2 * duration))
            tokens_per_event = n * k / events
            self.output_events.extend(
                [(start + duration * (m + 0.5) / events, tokens_per_event) for m in range(events)]
            )
        self.num_steps += k
        self.num_steps_with_output += k
        self.itl_count += k * n
        self.itl_sum += duration * n
        # Each sampled step's time: a + b·j, then max(·, cpu) when CPU work overlaps, else + cpu. Beyond
        # ITL_SAMPLES_PER_STRETCH (8) steps, step int((m + 0.5)·k / 8) for each m < 8, which is (2m + 1)·k // 16
        # (every product there is exact in floating point).
        if k <= ITL_SAMPLES_PER_STRETCH:
            weight = float(n)
            steps: range | list[int] = range(k)
        else:
            weight = n * k / ITL_SAMPLES_PER_STRETCH
            steps = [(odd * k) >> 4 for odd in (1, 3, 5, 7, 9, 11, 13, 15)]
        if not self._overlap:
            self.itl_samples.extend([(a + b * j + cpu, weight) for j in steps])
        elif a >= cpu:  # (b ≥ 0: every step's GPU time is at least a, so at least cpu)
            self.itl_samples.extend([(a + b * j, weight) for j in steps])
        else:
            self.itl_samples.extend([(cpu if cpu > (gpu := a + b * j) else gpu, weight) for j in steps])

    def _advance_running(self, k: int, clock: float) -> None:
        """Every running request (none in the cohort) decodes ``k`` more tokens, the last at ``clock``; the
        blocks they start come from the pool, and those whose output is complete finish."""
        s = self.scheduler
        demand = s.config.demand
        finished: list[SimRequest] = []
        grown_total = 0
        simple = demand.is_simple
        bs, groups = demand.block_size, demand.full_groups
        for request in s.running:
            c = request.computed
            if simple:
                grown = groups * ((c + k + bs - 1) // bs - (c + bs - 1) // bs)
            else:
                grown = demand.blocks(c + k) - demand.blocks(c)
            request.computed = c + k
            generated = request.generated + k
            request.generated = generated
            request.num_tokens += k
            request.own_blocks += grown
            grown_total += grown
            request.last_token_seconds = clock
            if generated >= request.output_tokens:
                finished.append(request)
        s.free_blocks -= grown_total
        for request in finished:
            self._finish(request)

    def _try_lag_step(self) -> bool:
        """``_cohort_step`` for the step after one that finished requests under async scheduling, when it
        holds nothing else: every running request is a member or lagging (each takes its extra step, its
        token discarded, and leaves), nobody can join it (nobody waits, or the waiting head is blocked; the
        requests sent by now are waiting) and every block it starts is free (otherwise the scheduler's order
        decides who is preempted). Its time and every figure are ``_cohort_step``'s, term for term, without
        the scheduler's visit; False (nothing changed) when the step needs it."""
        s = self.scheduler
        n = len(s.running)
        members = self._members
        lagging = self._outsiders
        if not (self._cohort_on and self._formed) or members + len(lagging) != n:
            return False
        if members and self._cohort_last != self.clock:
            return False
        if s.waiting and not s.admission_blocked(n):
            return False
        context = self._take_lagging_blocks(lagging)
        if context is None:
            return False
        # ``_record`` and ``_step_seconds`` of this decode-only step, inline.
        if n > self.peak_running:
            self.peak_running = n
        previous_end = self.clock
        if self.keep_records:
            self.records.append(
                (previous_end, n, len(s.waiting), s.config.num_free_blocks - s.free_blocks, n)
            )
        terms = self._decode_terms.get(n)
        fixed, per_context, cpu = terms if terms is not None else self._decode_terms_of(n)
        gpu = fixed + per_context * (context + self._member_context + members * self._advance)
        seconds = (cpu if cpu > gpu else gpu) if self._overlap else gpu + cpu  # max(gpu, cpu) under overlap
        clock = self.clock = previous_end + seconds
        self.num_steps += 1
        if members:  # each member's gap is a regular one; the lagging ones sample nothing
            self.itl_count += members
            self.itl_sum += 0.0 + members * (clock - previous_end)
            self.itl_samples.append((seconds, float(members)))
            self.output_events.append((clock, float(members)))
            self.num_steps_with_output += 1
        for request in lagging:
            s.finish(request)
        self._outsiders = []
        self._advance_cohort(1, clock, True)
        return True

    def _block_limited_steps(self, k: int, *, cohort: bool = False) -> int:
        """Largest j ≤ k such that j more decode steps of every running request fit in the free pool."""
        s = self.scheduler
        demand = s.config.demand
        free = s.free_blocks
        if demand.is_simple:
            # Each request needs at most one block per group every block_size steps: when even that many fit,
            # all k steps do (the exact count below could only be smaller).
            if demand.full_groups * len(s.running) * ((k - 1) // demand.block_size + 1) <= free:
                return k
            if cohort:
                return _steps_within_free(self._next_block_offsets(), k, free=free, groups=demand.full_groups)
            return _simple_block_limited_steps([r.computed for r in s.running], k, free=free, demand=demand)
        contexts = [r.computed for r in s.running]
        base = [demand.blocks(c) for c in contexts]

        def needed(j: int) -> int:
            return sum(demand.blocks(c + j) for c in contexts) - sum(base)

        if needed(k) <= free:
            return k
        lo, hi = 0, k
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if needed(mid) <= free:
                lo = mid
            else:
                hi = mid - 1
        return lo


def _simple_block_limited_steps(contexts: list[int], k: int, *, free: int, demand: BlockDemand) -> int:
    """``_block_limited_steps`` for full-attention layouts in O(block_size) per probe.

    A request at context c needs a new block at step j exactly when (c + j) % block_size == 0, i.e. at
    j = off, off + bs, … with off = (−c) mod bs; so only how many requests share each offset matters.
    """
    bs = demand.block_size
    per_offset = [0] * bs
    for c in contexts:
        per_offset[(-c) % bs] += 1
    return _steps_within_free(per_offset, k, free=free, groups=demand.full_groups)


def _steps_within_free(per_offset: list[int], k: int, *, free: int, groups: int) -> int:
    """Largest j ≤ k such that the blocks requests need over j decode steps fit in ``free``: ``per_offset[o]``
    requests need one block per group at steps o, o + bs, … (bs = ``len(per_offset)``)."""
    bs = len(per_offset)

    def needed(j: int) -> int:
        total = 0
        for off in range(min(bs, j)):
            count = per_offset[off]
            if count:
                total += count * ((j - 1 - off) // bs + 1)
        return groups * total

    if needed(k) <= free:
        return k
    lo, hi = 0, k
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if needed(mid) <= free:
            lo = mid
        else:
            hi = mid - 1
    return lo
