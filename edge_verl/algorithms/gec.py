"""Guided Error Correction (EDGE-GRPO, arXiv 2507.21848, Sec. 3.3): its options, names and decisions, and the
record of what was done. Pure Python (torch only where token ids become tensors), no verl.

Which responses are corrected and how. Everything in the first part is a decision on booleans, strings and
token ids; the verl agent loop (``edge_verl.integration.rollout``) grades, generates and carries the decisions
out on tokens.

Differs from plain GRPO rollouts: every incorrect response (or, optionally, only those of all-wrong
groups) is, independently,
- regenerated (p = 0.5): " Wait! Something is wrong here." is appended and the policy continues for up
  to 256 more tokens;
- given the answer (p = 0.25): "\\nWait! Something is wrong here. After verification, the correct answer
  is \\boxed{ANSWER}." is appended;
- replaced by the reference solution (p = 0.25).
Randomness is an explicit ``random.Random`` keyed on (seed, the response's identity): in verl the response's
sampling seed (``config.response_seed``: run seed, step, prompt identity, sample index), so a decision depends
neither on the order in which asynchronous rollouts finish nor on verl's random uid.

The reviewers' controls decided here (the loop carries them out):
- ``first_attempt=drop``: the regenerate and inject_answer branches start from an empty body instead of
  the first sample's; injected spans then start at 0 (``token_origins`` reads them unchanged).
- ``answer_source=placebo``: the answer and solution come from ANOTHER training problem. ``placebo_rng``
  (a stream distinct from ``decision_rng``, so the branch drawn is the gold run's) orders the pool of
  ``PlaceboProblem``s and ``placebo_candidates`` picks, without replacement, at most
  ``PLACEBO_CANDIDATES`` of them whose answer is not this row's gold as text; the loop accepts the first
  that its reward function grades wrong against this row's gold, or leaves the response as sampled with
  reason ``NO_PLACEBO``. With ``placebo_reward=as_gold`` the loop also builds the gold twin (the same branch
  with this row's own answer / solution) and rewards the placebo response with the twin's score, recorded as
  ``twin_score``.

What the loop did to each response travels to the trainer as a ``CorrectionRecord`` turned into a plain
dict (``to_dict``: verl's extra_fields cross Ray and the TransferQueue, so they hold builtins only) and is
read back strictly (``from_dict``: a missing or unknown key is an error, never a default that would log
zeros after a rename). ``gec_rendezvous.py`` is where the sibling responses of a group exchange their verdicts
when only all-wrong groups are corrected, ``gec_loss.py`` how the actor trains the tokens GEC wrote.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, ClassVar, Collection, Iterator, Literal, Mapping, Optional, Sequence

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from edge_verl.config import Options, _check_finite, keyed_rng, option

REGENERATE = "regenerate"
INJECT_ANSWER = "inject_answer"
REPLACE_SOLUTION = "replace_solution"
BRANCHES = (REGENERATE, INJECT_ANSWER, REPLACE_SOLUTION)

# ``AgentLoopOutput.extra_fields`` key under which the loop reports each response's correction.
GEC_INFO_KEY = "edge_verl_gec"
# GEC in the actor loss: the per-token origin code of every response token (``ORIGINS``), written at the advantage
# step of a GEC run next to the advantages, and the batch-level options the loss treats GEC's injected tokens with
# (edge_gec.injected_loss, sft_coef).
GEC_ORIGIN_COLUMN = "edge_gec_token_origin"
GEC_LOSS_OPTIONS_KEY = "edge_gec_loss_options"

REFLECTION_PHRASE = " Wait! Something is wrong here."
# "{answer}" is the only placeholder; everything else is literal text.
ANSWER_TEMPLATE = "\nWait! Something is wrong here. After verification, the correct answer is \\boxed{{answer}}."

# A drawn correction that cannot fit in rollout.response_length (the agent loop leaves the response as sampled).
DOES_NOT_FIT = "does_not_fit"
# answer_source=placebo: no other training problem's answer grades wrong against this row's gold.
NO_PLACEBO = "no_placebo"
# Every CorrectionRecord.reason: decide_correction's verdicts, then the agent loop's DOES_NOT_FIT / NO_PLACEBO.
REASONS = ("correct", "prompt_too_long", "group_has_correct", "no_solution", "no_answer", "corrected", DOES_NOT_FIT, NO_PLACEBO)

# Where each token of a final response came from (``token_origins``), in code order. Only "sampled" and
# "continuation" were sampled from the policy; the other three are text GEC wrote.
ORIGINS = ("sampled", "continuation", "phrase", "answer", "solution")
SAMPLED, CONTINUATION, PHRASE, ANSWER, SOLUTION = range(len(ORIGINS))
NOT_SAMPLED = (PHRASE, ANSWER, SOLUTION)
# edge_gec.injected_loss: how the actor trains the NOT_SAMPLED tokens (``treat_injected`` below).
INJECTED_LOSSES = ("surrogate", "masked", "sft")


# --- its options (algorithm.edge_gec) ---------------------------------------------------------------------

ANSWER_SOURCES = ("gold", "placebo")
PLACEBO_REWARDS = ("as_gold", "graded")
FIRST_ATTEMPTS = ("keep", "drop")
SCOPES = ("every_incorrect", "all_wrong_groups")
MISSING_SOLUTIONS = ("regenerate", "inject_answer", "skip")


class GecConfig(Options):
    """Guided Error Correction (agent loop ``edge_gec``), options under ``algorithm.edge_gec``.

    The options up to ``group_timeout_s`` are the method's (each description gives the paper's value and any
    deviation); from ``injected_loss`` on come the reviewers' controls, each a named deviation from what the paper
    fixes (how the tokens GEC wrote are trained, whose answer is injected and how it is rewarded, whether the wrong
    first attempt is kept) that tests a claim, the paper's behaviour by default.
    """

    section: ClassVar[str] = "edge_gec"
    enable: bool = option(False, description=(
        "GEC's one switch (default off). When on, the training data must mark its rows for the ``edge_gec`` "
        "agent loop (``agent_name`` column; scripts/prepare_data.py writes *_gec.parquet) and rollout log-probs"
        " must be off; when off, data with such rows is refused. Both checked before the first rollout."
    ))
    probabilities: tuple[float, float, float] = option(
        (0.5, 0.25, 0.25), description="[regenerate, inject_answer, replace_solution]; paper [0.5, 0.25, 0.25]."
    )
    force_regenerate: bool = option(
        False, description="the paper's Force-R ablation (regenerate with probability 1); overrides probabilities."
    )
    scope: Literal[SCOPES] = option("every_incorrect", description=(
        '"every_incorrect" (paper: every incorrect response) or "all_wrong_groups" (only groups in which no '
        "response is correct)."
    ))
    continuation_tokens: int = option(256, ge=1, description=(
        "budget of the regenerate branch; paper 256 (always also capped so the whole response stays within "
        "rollout.response_length)."
    ))
    first_sample_tokens: Optional[int] = option(None, ge=1, description=(
        "the first sample's own cap (the loop passes it as max_tokens), so that a correction can grow past it: "
        "the reference samples up to 1024 tokens, then appends the phrase and up to 256 more. The recipes set "
        "1024 with rollout.response_length = 1024 + continuation_tokens + 32 (room for the phrase; the fit is "
        "checked before the first rollout, and with the phrase's token count when the loop starts). None "
        "(default) = the first sample may use all of rollout.response_length and corrections are cut to fit in "
        "it, so a response truncated at the cap gets almost no continuation: a deviation kept because the "
        "default cannot know the run's lengths (1024 would not fit most response_length settings)."
    ))
    max_prompt_tokens: Optional[int] = option(256, ge=1, description=(
        "only prompts SHORTER than this many tokens (chat template included) are corrected, as in the reference"
        " (``if prompt_length < 256``); longer ones are left as sampled and counted (gec/prompt_too_long). None"
        " = correct every prompt."
    ))
    reflection_phrase: str = option(
        REFLECTION_PHRASE, description="the paper's phrase the regenerate branch appends before its continuation; non-empty."
    )
    answer_template: str = option(
        ANSWER_TEMPLATE, description='the paper\'s text the inject_answer branch appends; must contain "{answer}".'
    )
    missing_solution: Literal[MISSING_SOLUTIONS] = option("regenerate", description=(
        'what a replace_solution draw does for a row without a reference solution: "regenerate" (default; '
        'counted in metrics as a fallback), "inject_answer", or "skip" (leave the response as is).'
    ))
    correct_threshold: float = option(
        0.5, description="a response whose reward score exceeds this counts as correct (binary reward: 0.5)."
    )
    seed: int = option(42, description=(
        "seeds GEC's per-response random source together with the response's identity (its sampling seed, "
        "``algorithm.edge_seeding``); paper seed 42."
    ))
    group_timeout_s: float = option(
        600.0, ge=0.001, description='in "all_wrong_groups" mode, how long a response waits for its siblings\' verdicts.'
    )
    # The reviewers' controls (defaults = the paper; each a named deviation for testing a claim):
    injected_loss: Literal[INJECTED_LOSSES] = option("surrogate", description=(
        "how the actor trains the tokens GEC wrote and the policy did not sample (the phrase, the injected "
        'answer, the replaced solution; a regeneration\'s continuation IS sampled). "surrogate" (paper): through'
        ' the GRPO surrogate like every token. "masked": no policy gradient through them (their advantage is 0 '
        "and their log-prob detached inside the loss), the group's rewards and every advantage unchanged. "
        '"sft": no surrogate through them; instead a separate token-mean NLL over them, times ``sft_coef``.'
    ))
    sft_coef: float = option(1.0, ge=0.0, description='coefficient of that NLL term (injected_loss="sft" only); 1.0.')
    answer_source: Literal[ANSWER_SOURCES] = option("gold", description=(
        '"gold" (paper: the row\'s own answer and reference solution) or "placebo" (the answer and solution of '
        "another training problem, drawn with the per-response seed among problems whose answer grades wrong "
        'against this row\'s gold; a response with no such problem is left as sampled, reason "no_placebo").'
    ))
    placebo_reward: Literal[PLACEBO_REWARDS] = option("as_gold", description=(
        'the reward of a placebo-corrected response (read only with answer_source=placebo). "as_gold" '
        "(default): what its gold twin earns, the same branch on the same first sample with this row's own "
        "answer / solution, graded by the run's reward function as verl's reward loop would grade it "
        "(``integration.rollout``); a placebo is applied only where its twin fits, as the gold run's "
        "correction is. A corrected response is then rewarded as EDGE would reward it, so only the injected "
        'content differs: the placebo that tests "the right answer is what helps", hence the default. Needs '
        'verl\'s ``naive`` reward manager and no reward model (checked before Ray starts). "graded": the '
        "response is scored like any other, against this row's gold, so 0 (its candidates are chosen to grade "
        "wrong): corrected responses count as wrong, so reward and content both differ from EDGE (the arm "
        'published as edge_placebo before this option; method ``edge_placebo_graded``). "graded" with '
        "answer_source=gold is an error."
    ))
    first_attempt: Literal[FIRST_ATTEMPTS] = option("keep", description=(
        '"keep" (paper: the regenerate and inject_answer branches append to the model\'s own wrong first '
        'response) or "drop" (the corrected response is the phrase + continuation, or the answer text alone), '
        "to test whether keeping the wrong first answer in a response rewarded 1 hurts."
    ))

    @field_validator("probabilities", mode="before")
    @classmethod
    def _probabilities(cls, value: Any) -> tuple[float, ...]:
        probabilities = tuple(value)
        if len(probabilities) != 3:
            raise ValueError(f"edge_gec.probabilities={value!r} needs 3 values [regenerate, inject_answer, replace_solution]")
        for index, probability in enumerate(probabilities):
            _check_finite("edge_gec", f"probabilities[{index}]", probability, low=0.0, high=1.0)
        if abs(sum(probabilities) - 1.0) > 1e-6:
            raise ValueError(f"edge_gec.probabilities={value!r} must sum to 1")
        return tuple(float(p) for p in probabilities)

    @field_validator("reflection_phrase", mode="before")
    @classmethod
    def _phrase(cls, value: Any) -> str:
        if not isinstance(value, str) or not value:
            raise ValueError("edge_gec.reflection_phrase must be a non-empty string")
        return value

    @field_validator("answer_template", mode="before")
    @classmethod
    def _template(cls, value: Any) -> str:
        if not isinstance(value, str) or "{answer}" not in value:
            raise ValueError(f"edge_gec.answer_template={value!r} must contain '{{answer}}'")
        return value

    @model_validator(mode="after")
    def _relations(self) -> "GecConfig":
        if self.force_regenerate:
            object.__setattr__(self, "probabilities", (1.0, 0.0, 0.0))
        if self.injected_loss != "sft" and self.sft_coef != 1.0:
            raise ValueError(f"edge_gec.sft_coef={self.sft_coef!r} is read only with edge_gec.injected_loss=sft")
        if self.answer_source != "placebo" and self.placebo_reward != PLACEBO_REWARDS[0]:
            raise ValueError(
                f"edge_gec.placebo_reward={self.placebo_reward!r} is read only with edge_gec.answer_source=placebo "
                f"(here {self.answer_source!r}): the gold answer is graded as it is; set answer_source=placebo or drop placebo_reward."
            )
        return self



@dataclass(frozen=True)
class Decision:
    """What happens to one response: ``branch`` is None when it is left as sampled; ``reason`` says why."""

    branch: Optional[str]
    reason: str
    fallback: bool = False


def decision_rng(seed: int, *response: Any) -> random.Random:
    """A random source private to one response: a function of ``seed`` and the response's identity
    (``response``: its sampling seed, or any parts that name it stably across runs)."""
    return keyed_rng("gec_decision", int(seed), *response)


def placebo_rng(seed: int, *response: Any) -> random.Random:
    """The response's random source for drawing a placebo problem: the same key as ``decision_rng`` under
    another salt, so drawing placebos consumes nothing of the decision's stream (same seed -> same branches)."""
    return keyed_rng("gec_placebo", int(seed), *response)


def draw_branch(rng: random.Random, probabilities: Sequence[float]) -> str:
    """One branch with the given probabilities (regenerate, inject_answer, replace_solution)."""
    threshold = rng.random() * sum(probabilities)
    cumulative = 0.0
    for branch, probability in zip(BRANCHES, probabilities):
        cumulative += probability
        if threshold < cumulative:
            return branch
    return BRANCHES[max(i for i, p in enumerate(probabilities) if p > 0)]


def decide_correction(
    *,
    correct: bool,
    group_correct: Sequence[bool],
    rng: random.Random,
    probabilities: Sequence[float],
    only_all_wrong_groups: bool,
    has_answer: bool,
    has_solution: bool,
    missing_solution: str,
    prompt_fits: bool = True,
) -> Decision:
    """Decide the fate of one response.

    correct: this response's reward says correct; group_correct: the same for every response of its group
    (only read in ``only_all_wrong_groups`` mode). ``missing_solution`` is what a replace_solution draw
    becomes when the row has no reference solution: "regenerate", "inject_answer" or "skip".
    prompt_fits: False when the prompt is too long to be corrected (the reference corrects only prompts
    shorter than 256 tokens); no branch is drawn then.
    """
    if correct:
        return Decision(None, "correct")
    if not prompt_fits:
        return Decision(None, "prompt_too_long")
    if only_all_wrong_groups and any(group_correct):
        return Decision(None, "group_has_correct")
    branch = draw_branch(rng, probabilities)
    fallback = False
    if branch == REPLACE_SOLUTION and not has_solution:
        fallback = True
        if missing_solution == "skip":
            return Decision(None, "no_solution", fallback=True)
        branch = missing_solution
    if branch == INJECT_ANSWER and not has_answer:
        return Decision(None, "no_answer", fallback=True)
    return Decision(branch, "corrected", fallback=fallback)


class CorrectionRecord(BaseModel):
    """What GEC did to one response, written by the agent loop and read by the trainer's metrics.

    Token counts and positions are tokens of the rollout's tokenizer; times are wall-clock seconds.

    branch: the correction applied (one of BRANCHES); None when the response was left as sampled.
    reason: why (one of REASONS); "corrected" exactly when ``branch`` is set.
    fallback: the draw was replace_solution but the row had no reference solution (``missing_solution``).
    original_correct: the first sample's reward was above ``correct_threshold``.
    original_score: the first sample's reward (what the policy's own response earned, before correction).
    original_length: tokens of the first sample, its end tokens included.
    injected_start, injected_end: the span [start, end) of the FINAL response's tokens that were not
        sampled from the policy (the phrase; the answer text + EOS; the whole solution + EOS); (0, 0)
        when nothing was injected. Tokens before it are the first sample's (none with first_attempt=drop
        or replace_solution: start 0), tokens after a phrase the regeneration's continuation.
    all_wrong_group: no response of the group was originally correct (scope every_incorrect: the group
        is the response alone, so this is ``not original_correct``).
    prompt_length: tokens of the prompt.
    sample_seconds: the first sample (the rollout server's call).
    correction_seconds: carrying a drawn correction out (the regeneration's server call, a placebo's
        grading; edits take ~0); 0 when none was drawn.
    continuation_tokens: tokens the regeneration's continuation returned after the phrase.
    continuation_budget: the continuation's max_tokens: ``continuation_requested`` cut to the room left
        in response_length.
    continuation_requested: the configured ``edge_gec.continuation_tokens``.
    The three continuation_* fields are set exactly when branch is "regenerate" (None: not a regeneration);
    ``to_dict`` writes them either way, so every key is always present.
    placebo_index: answer_source=placebo, an inject_answer or replace_solution applied: the
        ``PlaceboProblem.row`` whose answer (and solution) was injected; None otherwise (written either way).
    twin_score: placebo_reward=as_gold, a placebo applied: the reward of its gold twin, which the response was
        rewarded with in place of verl's reward loop; None when verl's reward loop scored the final response
        (written either way).
    pydantic checks each field (the allowed values, bounds, finite numbers, no unknown field); the validator below,
    what one record cannot hold together.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    branch: Optional[Literal[BRANCHES]]
    reason: Literal[REASONS]
    fallback: bool
    original_correct: bool
    original_score: float
    original_length: int = Field(ge=0)
    injected_start: int = Field(ge=0)
    injected_end: int = Field(ge=0)
    all_wrong_group: bool
    prompt_length: int = Field(ge=0)
    sample_seconds: float = Field(ge=0)
    correction_seconds: float = Field(ge=0)
    continuation_tokens: Optional[int] = None
    continuation_budget: Optional[int] = None
    continuation_requested: Optional[int] = None
    placebo_index: Optional[int] = None
    twin_score: Optional[float] = None

    @model_validator(mode="after")
    def _one_record_can_happen(self) -> "CorrectionRecord":
        if (self.branch is not None) != (self.reason == "corrected"):
            raise ValueError(
                f"CorrectionRecord: branch={self.branch!r} with reason={self.reason!r}; a branch is set exactly "
                "when the reason is 'corrected'."
            )
        span = (self.injected_start, self.injected_end)
        if span[0] > span[1]:
            raise ValueError(f"CorrectionRecord: injected span [{span[0]}, {span[1]}) needs 0 <= start <= end.")
        if self.branch is None and span != (0, 0):
            raise ValueError(
                f"CorrectionRecord: injected span [{span[0]}, {span[1]}) on an uncorrected response; expected (0, 0)."
            )
        continuation = (self.continuation_tokens, self.continuation_budget, self.continuation_requested)
        if self.branch != REGENERATE:
            if continuation != (None, None, None):
                raise ValueError(
                    f"CorrectionRecord: continuation_(tokens, budget, requested)={continuation} on branch "
                    f"{self.branch!r}; only a regeneration has a continuation (None otherwise)."
                )
        elif None in continuation or not 0 <= continuation[0] <= continuation[1] <= continuation[2]:
            raise ValueError(
                f"CorrectionRecord: continuation_(tokens, budget, requested)={continuation} of a regeneration "
                "needs 0 <= tokens <= budget <= requested."
            )
        lends = self.branch in (INJECT_ANSWER, REPLACE_SOLUTION)
        if self.placebo_index is not None and (not lends or self.placebo_index < 0):
            raise ValueError(
                f"CorrectionRecord: placebo_index={self.placebo_index!r} on branch {self.branch!r}; a placebo row "
                f"(>= 0) is lent only to {INJECT_ANSWER!r} and {REPLACE_SOLUTION!r} (None otherwise)."
            )
        if self.twin_score is not None and self.placebo_index is None:
            raise ValueError(
                f"CorrectionRecord: twin_score={self.twin_score!r} without a placebo; only a placebo response is "
                "rewarded as its gold twin (None otherwise)."
            )
        return self

    def to_dict(self) -> dict[str, Any]:
        """Every field under its own name, as plain builtins (for verl's extra_fields)."""
        return self.model_dump()

    @classmethod
    def from_dict(cls, info: Mapping[str, Any]) -> "CorrectionRecord":
        """The record ``to_dict`` wrote; a missing or unknown key raises ValueError naming it (an Optional field's
        key included: every key is always written)."""
        expected = set(cls.model_fields)
        missing = sorted(expected - set(info))
        unknown = sorted(map(str, set(info) - expected))
        if missing or unknown:
            raise ValueError(
                f"GEC record with missing key(s) {missing} and unknown key(s) {unknown}: the agent loop "
                "(edge_verl/integration/rollout.py) and CorrectionRecord must agree on every field name."
            )
        return cls(**info)


def injected_answer_text(answer: str, template: str = ANSWER_TEMPLATE) -> str:
    """The appended text of the inject_answer branch (``template`` must contain "{answer}")."""
    return template.replace("{answer}", answer)


def strip_end_tokens(token_ids: Sequence[int], end_ids: Collection[int]) -> list[int]:
    """``token_ids`` without its trailing end tokens: every trailing id in ``end_ids``, repeatedly.

    A chat model's sample may end in any of its end tokens, even several (Qwen2.5: ``<|im_end|>``,
    ``<|endoftext|>``); text appended after one would follow an end of turn. The reference code decoded
    with skip_special_tokens, which drops them all.
    """
    end = len(token_ids)
    while end and token_ids[end - 1] in end_ids:
        end -= 1
    return list(token_ids[:end])


# answer_source=placebo: how many candidate problems one response grades at most before giving up (NO_PLACEBO).
PLACEBO_CANDIDATES = 16


@dataclass(frozen=True)
class PlaceboProblem:
    """A training problem that may lend its answer and solution to another's response (answer_source=placebo).

    row: its position in the training files read in order (the first file's rows, then the next's);
    answer: its answer text; solution: its reference solution ("" when it has none);
    answer_key: ``answer`` normalised, compared with the normalised gold answers of the borrowing row.
    """

    row: int
    answer: str
    solution: str
    answer_key: str


def shuffled_indices(rng: random.Random, count: int) -> Iterator[int]:
    """0 .. count-1 in a uniformly random order, drawn lazily: a Fisher-Yates shuffle that stores only the
    positions it swapped, so taking the first k costs O(k) whatever ``count`` is."""
    moved: dict[int, int] = {}
    for position in range(count):
        pick = rng.randrange(position, count)
        yield moved.get(pick, pick)
        moved[pick] = moved.get(position, position)


def placebo_candidates(
    pool: Sequence[PlaceboProblem],
    gold_keys: Collection[str],
    rng: random.Random,
    *,
    need_solution: bool,
    limit: int = PLACEBO_CANDIDATES,
) -> list[int]:
    """Up to ``limit`` indices into ``pool``, in ``rng``'s order without replacement: the problems to grade, in
    turn, as the placebo of a response whose gold answers normalise to ``gold_keys``.

    Skipped without counting towards ``limit``: a problem whose ``answer_key`` is one of ``gold_keys`` (the
    row itself, or another with the same answer: no placebo) and, with ``need_solution`` (replace_solution),
    one without a reference solution. The grading that decides is the loop's.
    """
    chosen: list[int] = []
    for index in shuffled_indices(rng, len(pool)):
        if len(chosen) == limit:
            break
        problem = pool[index]
        if problem.answer_key in gold_keys or (need_solution and not problem.solution):
            continue
        chosen.append(index)
    return chosen


def injected_token_mask(starts, ends, length: int):
    """(B,) spans [start, end) -> (B, T) bool mask of injected tokens (torch, vectorised)."""
    import torch

    positions = torch.arange(length)[None, :]
    return (positions >= torch.as_tensor(starts)[:, None]) & (positions < torch.as_tensor(ends)[:, None])


def summarize_corrections(
    infos: Sequence[Any],
    final_scores,
    uids: Sequence[str],
    response_mask,
    old_log_probs=None,
    correct_threshold: float = 0.5,
) -> dict[str, float]:
    """Per-step GEC metrics from the agent loop's per-response records.

    Counts per step: gec/responses, gec/corrected[_<branch>], gec/fallbacks, gec/not_fitting,
    gec/prompt_too_long (left uncorrected by the prompt-length gate), gec/no_placebo (answer_source=placebo:
    left as sampled, no other problem's answer graded wrong), gec/rewarded_as_gold_frac (of the corrected
    responses, the share rewarded as their gold twin: placebo_reward=as_gold; logged when any was corrected),
    gec/regenerate_became_correct,
    gec/all_wrong_groups, gec/groups_rescued, gec/continuation_cut (regenerations whose continuation room was
    below the configured budget); gec/continuation_tokens_{mean,min,max} over the step's regenerations;
    gec/correction_time_share: of the loop's time in the rollout server (first samples + corrections, summed
    over responses), the share spent on corrections (the regenerate branch's second call; edits are ~0).

    infos (B,): the raw values of extra_fields["edge_verl_gec"]: ``CorrectionRecord.to_dict()`` for rows the
    GEC loop ran (parsed strictly: a missing or unknown key raises), None (or any non-dict) for the others;
    final_scores (B,) reward of the final responses; response_mask (B, T); old_log_probs (B, T) optional.
    Returns counts of corrections per branch, regenerations that became correct, groups rescued from
    all-wrong, the fraction of trained tokens that were injected and the old policy's log-prob/probability
    of injected vs sampled tokens (how far off-policy the injected text is).
    """
    import torch

    records = {i: CorrectionRecord.from_dict(info) for i, info in enumerate(infos) if isinstance(info, dict)}
    if not records:
        return {}
    scores = torch.as_tensor(final_scores, dtype=torch.float32)
    final_correct = scores > correct_threshold
    metrics = {"gec/responses": float(len(records))}
    branches = [record.branch for record in records.values()]
    metrics["gec/corrected"] = float(sum(branch is not None for branch in branches))
    for branch in BRANCHES:
        metrics[f"gec/corrected_{branch}"] = float(sum(b == branch for b in branches))
    metrics["gec/fallbacks"] = float(sum(bool(record.fallback) for record in records.values()))
    metrics["gec/not_fitting"] = float(sum(record.reason == DOES_NOT_FIT for record in records.values()))
    metrics["gec/prompt_too_long"] = float(sum(record.reason == "prompt_too_long" for record in records.values()))
    metrics["gec/no_placebo"] = float(sum(record.reason == NO_PLACEBO for record in records.values()))
    if metrics["gec/corrected"]:
        twins = sum(record.twin_score is not None for record in records.values())
        metrics["gec/rewarded_as_gold_frac"] = twins / metrics["gec/corrected"]
    regenerated = {i: record for i, record in records.items() if record.branch == REGENERATE}
    metrics["gec/regenerate_became_correct"] = float(sum(bool(final_correct[i]) for i in regenerated))
    if regenerated:  # how long the continuations were, and how many got less than their budget's room
        lengths = [int(record.continuation_tokens) for record in regenerated.values()]
        metrics["gec/continuation_tokens_mean"] = sum(lengths) / len(lengths)
        metrics["gec/continuation_tokens_min"] = float(min(lengths))
        metrics["gec/continuation_tokens_max"] = float(max(lengths))
        metrics["gec/continuation_cut"] = float(
            sum(record.continuation_budget < record.continuation_requested for record in regenerated.values())
        )
    groups: dict[str, list[int]] = {}
    for i in records:
        groups.setdefault(str(uids[i]), []).append(i)
    all_wrong = [members for members in groups.values() if not any(records[i].original_correct for i in members)]
    sampling = sum(float(record.sample_seconds) for record in records.values())
    correcting = sum(float(record.correction_seconds) for record in records.values())
    if sampling + correcting > 0:  # the corrections' share of the loop's generation time (summed per response)
        metrics["gec/correction_time_share"] = correcting / (sampling + correcting)
    metrics["gec/all_wrong_groups"] = float(len(all_wrong))
    metrics["gec/groups_rescued"] = float(sum(any(bool(final_correct[i]) for i in members) for members in all_wrong))
    mask = torch.as_tensor(response_mask).bool()
    starts = [0] * len(infos)
    ends = [0] * len(infos)
    for i, record in records.items():
        starts[i], ends[i] = int(record.injected_start), int(record.injected_end)
    injected = injected_token_mask(starts, ends, mask.shape[1]) & mask
    sampled = mask & ~injected
    metrics["gec/injected_token_frac"] = float(injected.sum() / mask.sum().clamp(min=1))
    if old_log_probs is not None:
        log_probs = torch.as_tensor(old_log_probs, dtype=torch.float32)
        for name, selected in (("injected", injected), ("sampled", sampled)):
            if bool(selected.any()):
                values = log_probs[selected]
                metrics[f"gec/old_logprob_{name}_mean"] = float(values.mean())
                metrics[f"gec/old_prob_{name}_mean"] = float(values.exp().mean())
    return metrics
