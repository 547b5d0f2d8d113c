"""vLLM V1 scheduling rules on cases small enough to work out by hand (vllm/v1/core/sched/scheduler.py)."""

from __future__ import annotations

from service.core.serving.scheduler import BlockDemand, Scheduler, SchedulerConfig, SimRequest


def _scheduler(
    *, budget: int, blocks: int, block_size: int = 16, max_num_seqs: int = 256, threshold: int = 0
) -> Scheduler:
    return Scheduler(
        SchedulerConfig(
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=budget,
            long_prefill_token_threshold=threshold,
            demand=BlockDemand(block_size=block_size),
            num_free_blocks=blocks,
        )
    )


def _run_step(s: Scheduler) -> list[tuple[int, int]]:
    """Schedule one step and apply it as the engine does: computed += new, sample when the prompt is done."""
    step = s.schedule()
    for request, new in step.scheduled:
        request.computed += new
        if request.computed >= request.num_tokens:
            request.add_generated(1)
            if request.generated >= request.output_tokens:
                s.finish(request)
    return [(r.index, n) for r, n in step.scheduled]


def test_two_prompts_of_ten_share_an_eight_token_budget_in_the_exact_chunked_order() -> None:
    s = _scheduler(budget=8, blocks=100)
    a, b = SimRequest(0, 10, 5, 0), SimRequest(1, 10, 5, 0)
    s.waiting.extend([a, b])
    # Step 1: A takes the whole budget (chunk of 8), B waits.
    assert _run_step(s) == [(0, 8)]
    # Step 2: running first — A's last 2 prompt tokens — then B's first chunk of the remaining 6.
    assert _run_step(s) == [(0, 2), (1, 6)]
    assert a.generated == 1 and b.generated == 0
    # Step 3: A decodes one token; B's last 4 prompt tokens.
    assert _run_step(s) == [(0, 1), (1, 4)]
    # Step 4: both decode.
    assert _run_step(s) == [(0, 1), (1, 1)]
    assert (a.generated, b.generated) == (3, 2)


def test_long_prefill_token_threshold_clips_each_chunk() -> None:
    s = _scheduler(budget=100, blocks=100, threshold=4)
    a = SimRequest(0, 10, 2, 0)
    s.waiting.append(a)
    assert _run_step(s) == [(0, 4)]
    assert _run_step(s) == [(0, 4)]
    assert _run_step(s) == [(0, 2)]
    assert a.generated == 1


def test_running_request_that_cannot_get_a_block_preempts_the_last_running_request() -> None:
    # 5 blocks of 4 tokens. Two prompts of 8 tokens take 2 blocks each (1 left).
    s = _scheduler(budget=64, blocks=5, block_size=4)
    a, b = SimRequest(0, 8, 10, 0), SimRequest(1, 8, 10, 0)
    s.waiting.extend([a, b])
    assert _run_step(s) == [(0, 8), (1, 8)]
    assert s.free_blocks == 1
    # Decode: A (context 8) needs a third block — the last free one; B then needs one too, none is left, and
    # the last running request is B itself: B is preempted (blocks freed, back to the front of the queue).
    assert _run_step(s) == [(0, 1)]
    assert b.num_preemptions == 1 and b.computed == 0 and b.own_blocks == 0
    assert list(s.waiting) == [b] and s.running == [a]
    assert s.free_blocks == 2
    # Next step: A decodes within its third block; B (8 prompt + 1 generated = 9 tokens → 3 blocks) does not
    # fit in the 2 free blocks, so it keeps waiting; waiting requests never preempt.
    assert _run_step(s) == [(0, 1)]
    assert b.generated == 1  # generated tokens survive a recompute preemption


def test_preemption_takes_the_newest_request_not_the_one_asking() -> None:
    s = _scheduler(budget=64, blocks=7, block_size=4)
    a, b, c = SimRequest(0, 8, 10, 0), SimRequest(1, 8, 10, 0), SimRequest(2, 8, 10, 0)
    s.waiting.extend([a, b, c])
    assert _run_step(s) == [(0, 8), (1, 8), (2, 8)]  # 6 of 7 blocks
    # A takes the last block; B needs one: the last running request (C) is preempted, freeing 2; B proceeds.
    assert _run_step(s) == [(0, 1), (1, 1)]
    assert c.num_preemptions == 1 and a.num_preemptions == 0 and b.num_preemptions == 0
    assert s.waiting[0] is c


def test_no_waiting_request_is_admitted_in_a_step_that_preempted() -> None:
    s = _scheduler(budget=64, blocks=5, block_size=4)
    a, b = SimRequest(0, 8, 10, 0), SimRequest(1, 8, 10, 0)
    s.waiting.extend([a, b])
    _run_step(s)
    late = SimRequest(2, 1, 1, 0)  # would fit in the freed blocks
    s.waiting.append(late)
    assert _run_step(s) == [(0, 1)]  # B preempted; neither B nor the late request is scheduled this step


def test_max_num_seqs_caps_the_running_list() -> None:
    s = _scheduler(budget=100, blocks=100, max_num_seqs=2)
    requests = [SimRequest(i, 4, 3, 0) for i in range(3)]
    s.waiting.extend(requests)
    assert _run_step(s) == [(0, 4), (1, 4)]
    assert _run_step(s) == [(0, 1), (1, 1)]
    assert len(s.waiting) == 1


def test_a_waiting_request_waits_when_its_first_chunk_does_not_fit_in_free_blocks() -> None:
    s = _scheduler(budget=100, blocks=3, block_size=4)
    a, b = SimRequest(0, 8, 2, 0), SimRequest(1, 8, 2, 0)
    s.waiting.extend([a, b])
    assert _run_step(s) == [(0, 8)]  # A: 2 blocks; B needs 2, 1 free
    assert list(s.waiting) == [b]


def test_requests_after_the_first_hit_the_shared_prefix_in_whole_blocks() -> None:
    # Prefix of 10 tokens, blocks of 4: two full blocks (8 tokens) are cacheable.
    s = _scheduler(budget=100, blocks=100, block_size=4)
    first, second = SimRequest(0, 14, 2, 10), SimRequest(1, 14, 2, 10)
    s.waiting.extend([first, second])
    step = s.schedule()
    # The first computes all 14 tokens; its two full prefix blocks are cached at allocation, so the second
    # (same step) starts at 8 computed tokens and computes 6.
    assert [(r.index, n) for r, n in step.scheduled] == [(0, 14), (1, 6)]
    assert second.computed == 8 and s.prefix_hit_tokens == 8
    # Blocks: first holds cdiv(14,4)=4 of which 2 now belong to the cache; second holds 4 − 2 shared = 2.
    assert first.own_blocks == 2 and second.own_blocks == 2
    assert s.free_blocks == 100 - 2 - 2 - 2


def test_prefix_hit_never_covers_the_last_prompt_token() -> None:
    s = _scheduler(budget=100, blocks=100, block_size=4)
    first, second = SimRequest(0, 8, 2, 8), SimRequest(1, 8, 2, 8)
    s.waiting.extend([first, second])
    step = s.schedule()
    # Hit ≤ num_tokens − 1 = 7 tokens → one whole block (4), so the second computes 4.
    assert [(r.index, n) for r, n in step.scheduled] == [(0, 8), (1, 4)]


def test_finishing_frees_the_blocks() -> None:
    s = _scheduler(budget=100, blocks=10, block_size=4)
    a = SimRequest(0, 6, 1, 0)
    s.waiting.append(a)
    _run_step(s)  # prefill samples the only output token → finished
    assert s.running == [] and s.free_blocks == 10


def _v0(*, budget: int, blocks: int, block_size: int = 4, max_num_seqs: int = 256) -> Scheduler:
    return Scheduler(
        SchedulerConfig(
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=budget,
            demand=BlockDemand(block_size=block_size),
            num_free_blocks=blocks,
            prefill_first=True,
        )
    )


def test_v0_runs_prefill_only_steps_of_whole_prompts_before_decoding() -> None:
    # V0 (vllm/core/scheduler.py::_schedule_default): a step with any admitted prompt holds only prompts.
    s = _v0(budget=16, blocks=200)
    a, b, c = SimRequest(0, 10, 3, 0), SimRequest(1, 6, 3, 0), SimRequest(2, 8, 3, 0)
    s.waiting.extend([a, b, c])
    assert _run_step(s) == [(0, 10), (1, 6)]  # 16 tokens: C (8 more) does not fit the budget, no chunking
    assert _run_step(s) == [(2, 8)]  # prompts first even though A and B could decode
    assert _run_step(s) == [(0, 1), (1, 1), (2, 1)]


def test_v0_keeps_a_one_percent_watermark_of_free_blocks() -> None:
    # 200 blocks → watermark 2. A prompt of 792 tokens needs 198 blocks: 200 − 198 = 2 ≥ 2 → admitted;
    # one of 796 tokens (199 blocks) would leave 1 < 2 → waits.
    s = _v0(budget=4096, blocks=200)
    s.waiting.append(SimRequest(0, 796, 2, 0))
    assert _run_step(s) == []
    s2 = _v0(budget=4096, blocks=200)
    s2.waiting.append(SimRequest(0, 792, 2, 0))
    assert _run_step(s2) == [(0, 792)]


def test_from_019_a_request_waits_until_its_whole_sequence_fits() -> None:
    # vLLM PR #37307 (scheduler_reserve_full_isl): 5 blocks of 4 tokens, an 8-token budget.
    def scheduler(reserve: bool) -> Scheduler:
        return Scheduler(
            SchedulerConfig(
                max_num_seqs=8,
                max_num_batched_tokens=8,
                demand=BlockDemand(block_size=4),
                num_free_blocks=5,
                reserve_full_sequence=reserve,
            )
        )

    for reserve, expected in ((False, [(0, 4), (1, 4)]), (True, [(0, 4)])):
        s = scheduler(reserve)
        a, b = SimRequest(0, 4, 9, 0), SimRequest(1, 20, 2, 0)
        s.waiting.extend([a, b])
        # A: 4 tokens, 1 block (4 free). B's first chunk (4 tokens) needs 1 block; its whole 20-token prompt
        # needs 5 — only admitted without the full-sequence rule (vLLM ≤ 0.18).
        assert _run_step(s) == expected, reserve
