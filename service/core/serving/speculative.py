"""Speculative decoding in the simulated V1 engine: how many draft tokens each step verifies and accepts.

**What vLLM does** (``vllm/v1/core/sched/scheduler.py`` and ``vllm/v1/worker/gpu_model_runner.py``, read on
main after 0.11; the same rules since the V1 spec-decode path of 0.8):

* After every step in which a request samples, the proposer (``propose_draft_token_ids``, run by the model
  runner in the same step) gives it up to ``k = num_speculative_tokens`` draft tokens
  (``request.spec_token_ids``). A prefill chunk that does not finish the prompt samples nothing and gets none.
* The next ``schedule()`` gives a running request ``num_tokens_with_spec − num_computed_tokens`` tokens — its
  one sampled token plus its drafts, 1 + k for a decoding request — clipped by the token budget
  (``max_num_batched_tokens``: draft tokens count against it) and by ``max_model_len − 1 − num_computed``;
  drafts that do not fit are dropped (``spec_token_ids[:num_scheduled_spec_tokens]``).
* ``allocate_slots(request, num_new_tokens, num_lookahead_tokens=…)`` reserves KV slots for the scheduled
  tokens plus ``num_lookahead_tokens`` more: ``k`` for EAGLE/EAGLE-3/MTP (``use_eagle()``) and draft models
  (``uses_draft_model()``), whose proposer writes its own KV for the next drafts; 0 for ngram and suffix.
  Newly admitted requests get no lookahead (``effective_lookahead_tokens`` is 0 while
  ``num_computed_tokens`` is 0). Slots of rejected drafts stay allocated to the request.
* ``update_from_output``: the rejection sampler returns the accepted drafts plus one token (the bonus or the
  correction), so ``num_computed_tokens`` drops by the rejected drafts — progress per step is 1 + accepted.
  ``_update_request_with_output`` stops at ``max_tokens`` and drops what lies beyond.

**Acceptance** is a property of the workload (model pair, prompts, sampling), so it is an input:
``BenchmarkSpec.spec_mean_acceptance_length``, vLLM's own "Mean acceptance length"
(``vllm/v1/spec_decode/metrics.py::SpecDecodingLogging.log``: 1 + accepted tokens / drafts, the bonus token
included; the same figure from Prometheus as ``1 + rate(vllm:spec_decode_num_accepted_tokens_total) /
rate(vllm:spec_decode_num_drafts_total)``). The simulator spreads it over draft positions as a chain whose
every position is accepted with the same conditional probability α (a draft token counts only when all before
it were accepted): E[accepted | d drafts] = α + α² + … + α^d, α solved from the mean length at k drafts. vLLM's
"Per-position acceptance rate" is then α^i and its "Avg Draft acceptance rate" (L − 1) / k. Without a value
the method's default below is assumed (``DEFAULT_POSITION_ACCEPTANCE``) and the response says so.

**Determinism and cost.** Each request carries an expected-progress accumulator: every verification adds
E[accepted | d] to it and the request accepts its integer part (never more than d). The accumulator counts in
units of 2⁻²⁰ token (``ACCEPTANCE_UNITS``), so it is an integer and j verifications of d drafts add exactly
j × E[accepted | d] — the engine's closed-form stretches and its step-by-step path accept the same tokens. The
mean over a run is the assumed one (to 2⁻²¹ token per draft), nothing is drawn, and a step costs one addition
per request. The accumulators start
at evenly spread phases (the fractional part of index × the golden ratio), so requests that decode together do
not all accept in the same steps — the batch's accepted tokens per step stay near n·E[accepted], as with
independent draws. What it leaves out is the spread of acceptance between steps: inter-token gaps and
per-request TPOT vary less than in a real run.
"""

from __future__ import annotations

from dataclasses import dataclass

from service.core.errors import InvalidSpec

# Conditional acceptance of each draft position (α above) when the benchmark gives no mean acceptance length.
# Rounded from public figures; the workload's own measured value should replace them.
#   eagle   0.70 — EAGLE (Li et al., ICML 2024, arXiv:2401.15077), acceptance rates n-α of chain drafts on
#           MT-bench ≈ 0.7–0.8 (LLaMA2-Chat, Vicuna), the lower end taken.
#   eagle3  0.80 — EAGLE-3 (Li et al., arXiv:2503.01840): training-time test keeps the acceptance rate near
#           0.8 at every draft position instead of falling with it.
#   mtp     0.85 — DeepSeek-V3 technical report (arXiv:2412.19437, §5.4.3): "the acceptance rate of the
#           second token prediction ranges between 85% and 90%" (one MTP module), the lower end taken. That
#           figure is for the first draft; k > num_nextn_predict_layers reuses the layer for drafts it was not
#           trained for, whose acceptance is lower than the chain's α^i: give the measured length there.
#   draft_model 0.60 — Leviathan et al. (ICML 2023, arXiv:2211.17192), Table 3: α 0.5–0.8 for small drafts
#           of the same family.
#   medusa, mlp_speculator 0.60 — Medusa (Cai et al., arXiv:2401.10774): the first head's top-1 accuracy
#           ≈ 0.6.
#   ngram, ngram_gpu, suffix — none: they propose only where the last tokens reappear in the prompt or output,
#           and the ``random`` dataset's prompts are random token ids, so almost nothing matches and almost
#           no step has drafts (``NgramProposer.propose`` returns an empty draft); with no value given they
#           are simulated as proposing nothing. Give the measured mean acceptance length to model a workload
#           where they do match (every step is then assumed to carry k drafts).
DEFAULT_POSITION_ACCEPTANCE: dict[str, float] = {
    "eagle": 0.70,
    "eagle3": 0.80,
    "draft_model": 0.60,
    "medusa": 0.60,
    "mlp_speculator": 0.60,
    "mtp": 0.85,
}
MATCHING_METHODS = frozenset({"ngram", "ngram_gpu", "suffix"})  # propose only on a match in the context
# Methods whose proposer keeps KV of its own drafts: the scheduler reserves k lookahead slots for them
# (scheduler.py: ``use_eagle()`` — eagle, eagle3, mtp — or ``uses_draft_model()``).
LOOKAHEAD_METHODS = frozenset({"eagle", "eagle3", "mtp", "draft_model"})
GOLDEN_RATIO_FRACTION = 0.6180339887498949  # accumulator phase of request i: frac(i × this)
ACCEPTANCE_UNITS = 1 << 20  # accumulator units per token (an integer accumulator: exact sums)


def method_family(method: str) -> str:
    """``mtp`` for every MTP variant (deepseek_mtp, qwen3_next_mtp …), the method itself otherwise."""
    return "mtp" if method.endswith("mtp") else method


def mean_acceptance_length_of(position_acceptance: float, drafts: int) -> float:
    """1 + α + α² + … + α^drafts: vLLM's mean acceptance length of a chain with conditional rate α."""
    return 1.0 + sum(position_acceptance**i for i in range(1, drafts + 1))


def position_acceptance_of(mean_acceptance_length: float, drafts: int) -> float:
    """α whose chain of ``drafts`` has this mean acceptance length (bisection: the length grows with α)."""
    target = mean_acceptance_length
    if target <= 1.0 or drafts <= 0:
        return 0.0
    if target >= 1.0 + drafts:
        return 1.0
    low, high = 0.0, 1.0
    for _ in range(60):
        mid = (low + high) / 2
        if mean_acceptance_length_of(mid, drafts) < target:
            low = mid
        else:
            high = mid
    return (low + high) / 2


@dataclass(frozen=True, slots=True, kw_only=True)
class SpecDecoding:
    """One engine's speculative decoding as the simulator runs it."""

    method: str
    num_speculative_tokens: int  # k: drafts proposed per request per step
    num_lookahead_tokens: int  # KV slots reserved beyond the scheduled tokens (k or 0)
    proposes: bool  # False: the proposer finds nothing to propose (ngram/suffix without a given length)
    mean_acceptance_length: float  # vLLM's figure at k drafts (1 when nothing is proposed)
    position_acceptance: float  # α
    given: bool  # the benchmark gave the mean acceptance length (otherwise the method's default)
    # E[accepted | d drafts] for d = 0 … k, in tokens and in ``ACCEPTANCE_UNITS`` (rounded: the accumulator's).
    expected_accepted: tuple[float, ...]
    expected_accepted_units: tuple[int, ...]

    @property
    def draft_acceptance_rate(self) -> float:
        """vLLM's "Avg Draft acceptance rate" as a ratio: accepted / drafted tokens."""
        k = self.num_speculative_tokens
        return (self.mean_acceptance_length - 1.0) / k if k and self.proposes else 0.0

    @property
    def drafts_per_step(self) -> int:
        """Drafts a request takes into its next step (0 when the proposer finds nothing)."""
        return self.num_speculative_tokens if self.proposes else 0

    def assumption(self) -> str:
        if not self.proposes:
            return (
                f"speculative decoding ({self.method}, k = {self.num_speculative_tokens}): no drafts proposed — "
                "on random prompts the n-gram matcher finds no match, so every step schedules one token per "
                "request (give benchmark.spec_mean_acceptance_length to model a workload where it matches)"
            )
        source = "given" if self.given else f"the {method_family(self.method)} default, not measured"
        return (
            f"speculative decoding ({self.method}, k = {self.num_speculative_tokens}): mean acceptance length "
            f"{self.mean_acceptance_length:.2f} ({source}; per-position acceptance {self.position_acceptance:.2f}, "
            f"draft acceptance rate {self.draft_acceptance_rate:.0%}), accepted tokens spread deterministically "
            f"over steps; {self.num_lookahead_tokens} lookahead KV slots per running request"
        )


def spec_decoding_of(
    method: str, num_speculative_tokens: int, mean_acceptance_length: float | None
) -> SpecDecoding:
    """The engine's speculative decoding for ``--speculative-config``'s method and k, and the benchmark's mean
    acceptance length (None: the method's default); refused when the length cannot come from k drafts."""
    k = num_speculative_tokens
    if k < 1:
        raise InvalidSpec("speculative decoding needs num_speculative_tokens ≥ 1", field="speculative_config")
    if mean_acceptance_length is not None and not 1.0 <= mean_acceptance_length <= 1.0 + k:
        raise InvalidSpec(
            f"must be in [1, 1 + num_speculative_tokens] = [1, {1 + k}], got {mean_acceptance_length}",
            field="benchmark.spec_mean_acceptance_length",
        )
    family = method_family(method)
    proposes = mean_acceptance_length is not None or method not in MATCHING_METHODS
    if mean_acceptance_length is not None:
        alpha = position_acceptance_of(mean_acceptance_length, k)
        length = mean_acceptance_length
    else:
        alpha = DEFAULT_POSITION_ACCEPTANCE.get(family, 0.0) if proposes else 0.0
        length = mean_acceptance_length_of(alpha, k) if proposes else 1.0
    expected = tuple(mean_acceptance_length_of(alpha, d) - 1.0 for d in range(k + 1))
    if mean_acceptance_length is not None:
        # The chain's sum at k drafts is the given length itself (not the bisection's rounding of it).
        expected = (*expected[:k], mean_acceptance_length - 1.0)
    return SpecDecoding(
        method=method,
        num_speculative_tokens=k,
        num_lookahead_tokens=k if family in LOOKAHEAD_METHODS else 0,
        proposes=proposes,
        mean_acceptance_length=length,
        position_acceptance=alpha,
        given=mean_acceptance_length is not None,
        expected_accepted=expected,
        expected_accepted_units=tuple(round(e * ACCEPTANCE_UNITS) for e in expected),
    )


def initial_credit(index: int) -> int:
    """The accumulator phase of request ``index`` in ``ACCEPTANCE_UNITS`` (see the module docstring)."""
    return int((index * GOLDEN_RATIO_FRACTION) % 1.0 * ACCEPTANCE_UNITS)


# ``VllmConfig._set_max_num_scheduled_tokens`` (``vllm/config/vllm.py``, read in the 0.17.0 – 0.27.1 wheels; absent
# in 0.16.0): with speculative decoding the scheduler's per-step token budget is ``max_num_batched_tokens −
# max_num_seqs × max_num_new_slots_for_drafting`` — the slots drafting may add to a batch, 1 per request for a draft
# model (``SpeculativeConfig.max_num_new_slots_for_drafting``: "one new slot per request since we do not slice the
# draft tokens"), 0 for EAGLE/MTP and n-gram proposers without parallel drafting. From 0.28.0 the budget is
# ``max_num_batched_tokens`` again (the slots are only checked against it). E.g. a draft model with 8,192 batched
# tokens and 1,024 sequences schedules at most 7,168 tokens a step.
DRAFT_SLOTS_TAKEN_FROM_BUDGET = ((0, 17), (0, 28))  # [from, until)


def scheduled_token_budget(
    method: str | None, version: tuple[int, int] | None, *, max_num_seqs: int, max_num_batched_tokens: int
) -> int:
    """The scheduler's per-step token budget (``max_num_scheduled_tokens``) vLLM derives (see above)."""
    first, until = DRAFT_SLOTS_TAKEN_FROM_BUDGET
    if method != "draft_model" or version is None or not first <= version < until:
        return max_num_batched_tokens
    return max_num_batched_tokens - max_num_seqs
