"""Guided Error Correction (EDGE-GRPO, arXiv 2507.21848, Sec. 3.3): the decisions, and GEC's tokens in the
actor loss. Pure Python and torch, no verl.

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
zeros after a rename). ``GroupRendezvous`` (asyncio only) is where the sibling responses of a group
exchange their verdicts when only all-wrong groups are corrected.

The second part ("GEC in the actor loss", below): how the actor trains the tokens GEC wrote (the reviewers'
controls, ``treat_injected``), the per-origin diagnostics of an update, and what the advantage step hands the
loss (``advantage_step_outputs``).
"""

from __future__ import annotations

import asyncio
import math
import random
from dataclasses import asdict, dataclass, field, fields
from typing import Any, ClassVar, Collection, Iterator, Literal, Mapping, Optional, Sequence

import torch
from pydantic import field_validator, model_validator

from edge_verl.config import Options, _check_finite, keyed_rng, option
from edge_verl.estimators.groups import response_valid
from edge_verl.estimators.statistics import advantage_statistics, as_sampled_statistics

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


@dataclass(frozen=True)
class CorrectionRecord:
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
    """

    branch: Optional[str]
    reason: str
    fallback: bool
    original_correct: bool
    original_score: float
    original_length: int
    injected_start: int
    injected_end: int
    all_wrong_group: bool
    prompt_length: int
    sample_seconds: float
    correction_seconds: float
    continuation_tokens: Optional[int] = None
    continuation_budget: Optional[int] = None
    continuation_requested: Optional[int] = None
    placebo_index: Optional[int] = None
    twin_score: Optional[float] = None

    def __post_init__(self) -> None:
        if self.branch is not None and self.branch not in BRANCHES:
            raise ValueError(f"CorrectionRecord: branch={self.branch!r}; allowed: None or one of {BRANCHES}.")
        if self.reason not in REASONS:
            raise ValueError(f"CorrectionRecord: reason={self.reason!r}; allowed: {REASONS}.")
        if (self.branch is not None) != (self.reason == "corrected"):
            raise ValueError(
                f"CorrectionRecord: branch={self.branch!r} with reason={self.reason!r}; a branch is set exactly "
                "when the reason is 'corrected'."
            )
        for name in ("original_length", "prompt_length", "sample_seconds", "correction_seconds"):
            if getattr(self, name) < 0:
                raise ValueError(f"CorrectionRecord: {name}={getattr(self, name)!r} must be >= 0.")
        span = (self.injected_start, self.injected_end)
        if not 0 <= span[0] <= span[1]:
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

    def to_dict(self) -> dict[str, Any]:
        """Every field under its own name, as plain builtins (for verl's extra_fields)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, info: Mapping[str, Any]) -> "CorrectionRecord":
        """The record ``to_dict`` wrote; a missing or unknown key raises ValueError naming it."""
        expected = {field.name for field in fields(cls)}
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


def token_origins(records: Sequence[Optional["CorrectionRecord"]], length: int):
    """(B, T) int64 origin code (``ORIGINS``) of every token position of B final responses padded to T.

    A record's injected span [start, end) is the phrase (regenerate), the answer text + EOS (inject_answer)
    or the solution + EOS (replace_solution); tokens before it are the first sample's own (none when the
    span starts at 0: first_attempt=drop, replace_solution), tokens after a regeneration's phrase its
    continuation. None (a row GEC did not run on) and uncorrected responses are
    sampled throughout. Positions past a response's end get a code too: callers mask them.
    """
    import torch

    codes = {REGENERATE: PHRASE, INJECT_ANSWER: ANSWER, REPLACE_SOLUTION: SOLUTION}
    starts, ends, span_codes, after_codes = [], [], [], []
    for record in records:
        branch = None if record is None else record.branch
        starts.append(0 if branch is None else record.injected_start)
        ends.append(0 if branch is None else record.injected_end)
        span_codes.append(codes.get(branch, SAMPLED))
        after_codes.append(CONTINUATION if branch == REGENERATE else SAMPLED)
    positions = torch.arange(length)[None, :]
    starts_t, ends_t = torch.as_tensor(starts)[:, None], torch.as_tensor(ends)[:, None]
    origins = torch.full((len(starts), length), SAMPLED, dtype=torch.int64)
    origins = torch.where(positions >= ends_t, torch.as_tensor(after_codes)[:, None], origins)
    in_span = (positions >= starts_t) & (positions < ends_t)
    return torch.where(in_span, torch.as_tensor(span_codes)[:, None], origins).reshape(len(starts), length)


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


# --- the group rendezvous (scope all_wrong_groups): pure asyncio, no verl ----------------------------------


class _Group:
    """One uid's verdicts so far (sample index -> correct), how many responses wait on them, and the
    event set when all ``size`` have arrived."""

    def __init__(self) -> None:
        self.verdicts: dict[int, bool] = {}
        self.waiting = 0
        self.complete = asyncio.Event()


class GroupRendezvous:
    """Where the n sibling responses of a uid exchange their correctness (scope all_wrong_groups).

    A group exists only while one of its responses waits: every waiter leaves in ``finally`` (all verdicts
    in, timeout, cancellation) and the last one removes the group, so no verdict outlives the rollout that
    produced it and the same uid in a later step starts afresh. Who owns one follows how the framework
    schedules a group's responses: verl's agent loop one per event loop (``integration.rollout``),
    OpenRLHF's executor one per executor (``openrlhf.gec_executor``).
    """

    def __init__(self) -> None:
        self._groups: dict[str, _Group] = {}

    @property
    def open_groups(self) -> frozenset[str]:
        """The uids with a response waiting right now (empty between rollouts)."""
        return frozenset(self._groups)

    async def wait_for_group(self, uid: str, index: int, size: int, correct: bool, timeout_s: float) -> list[bool]:
        """The group's verdicts ordered by sample index, once all ``size`` responses have reported."""
        group = self._groups.setdefault(uid, _Group())
        if index in group.verdicts:
            raise RuntimeError(
                f"edge_gec scope=all_wrong_groups: sample index {index} of uid {uid} reported twice in one "
                "rollout; every response of a group needs its own index (session_id or the plugin's column)."
            )
        group.verdicts[index] = correct
        group.waiting += 1
        try:
            if len(group.verdicts) >= size:
                group.complete.set()
            await asyncio.wait_for(group.complete.wait(), timeout=timeout_s)
            return [group.verdicts[key] for key in sorted(group.verdicts)]
        except asyncio.TimeoutError as error:
            raise RuntimeError(
                f"edge_gec scope=all_wrong_groups: only {len(group.verdicts)} of {size} responses of uid {uid} "
                f"reached this agent-loop worker within {timeout_s} s; the n samples of a prompt must run in one "
                "worker (v1 trainer, or actor_rollout_ref.rollout.agent.num_workers dividing the prompts)."
            ) from error
        finally:
            group.waiting -= 1
            if group.waiting == 0:
                del self._groups[uid]


# === GEC in the actor loss ==================================================================================
# GEC's tokens in the actor loss: the reviewers' controls and the per-origin diagnostics.
#
# Every token of a GEC run's response carries its origin (``ORIGINS``: sampled, continuation, phrase,
# answer, solution; ``token_origins``). The phrase, an injected answer and a replaced solution were written
# by GEC, not sampled from the policy; ``edge_gec.injected_loss`` says how the actor trains them:
#
# - "surrogate" (paper): through the policy-gradient surrogate like any token;
# - "masked": no policy gradient through them: their advantage is 0 and their log-prob is detached inside
#   the surrogate, whatever verl's ``policy_loss.loss_mode`` (a sequence-level ratio included); the rewards,
#   every advantage and the loss's token normaliser are unchanged;
# - "sft": as "masked" in the surrogate, plus ``sft_coef`` x their token-mean NLL (``injected_nll``).
#
# Diagnostics per origin and micro-batch (``origin_sums``), as SUMS so that a ratio of two of them, taken
# after verl has averaged each over micro-batches, data-parallel ranks and mini-batches (the same number
# of values per key), is the token-weighted value over the whole update (``finish_origin_metrics``):
# token share; old-policy log-prob mean; importance ratio pi_theta / pi_old mean, and max (the largest over
# the whole update, on both trainers: ``AGGREGATION`` declares it a max, which verl's v1 trainer already
# applies to keys containing "max" and ``finish_origin_metrics`` applies to the legacy trainer's list of
# per-mini-batch values, where an origin absent from a mini-batch logs 0 < any ratio); vanilla clip fraction,
# only when verl's ``policy_loss.loss_mode`` is "vanilla" (the tokens whose gradient verl's PPO clip removes,
# its dual clip included, with the advantage the surrogate received, which the trainer's loss hook marks,
# ``integration/actor_loss.py`` ``vanilla_clipped``: this module holds no copy of verl's clipping; every other
# loss mode clips differently, e.g. GSPO per sequence, and gets no clip fraction rather than a wrong one);
# gradient share: of sum_t |dL/dlogp_t| (the surrogate's gradient with respect to each token's log-prob, one
# ``autograd.grad`` over the loss's elementwise ops, no second backward through the model), the part on that
# origin's tokens. Shares over the five origins sum to 1.
#
# At the advantage step (``advantage_step_outputs``): each response token's origin for the loss, the share of
# injected tokens, and the statistics of the responses as sampled next to those as trained.

# The raw per-origin sums logged by the loss (``origin_sums``) and turned into statistics afterwards.
VANILLA_CLIPPED = "_vanilla_clipped"
RAW_SUMS = ("_tokens", "_old_logprob_sum", "_ratio_sum", VANILLA_CLIPPED, "_grad_abs")
RAW_MAX = "ratio_max"
NLL_SUM = "_sft_nll_sum"
# How each raw metric is reduced over micro- and mini-batches, declared here where it is made: the sums by the
# mean (a ratio of two means over the same count of values is the ratio of the sums), the ratio maxima by max.
AGGREGATION = {**{name: "mean" for name in (*RAW_SUMS, NLL_SUM)}, RAW_MAX: "max"}


def sampled_token_mean(values: torch.Tensor, origins: torch.Tensor, response_mask: torch.Tensor) -> float:
    """Token mean of ``values`` (B, T) over the response tokens the policy sampled first (origin
    ``sampled``: not the phrase, answer or solution GEC wrote, nor a regeneration's continuation), 0 when
    there are none; non-finite values count as 0."""
    selected = (origins.to(torch.int64) == SAMPLED) & response_mask.to(torch.bool)
    count = int(selected.sum())
    if count == 0:
        return 0.0
    return float(torch.nan_to_num(values.to(torch.float64), nan=0.0, posinf=0.0, neginf=0.0)[selected].sum()) / count


def not_sampled(origins: torch.Tensor) -> torch.Tensor:
    """(B, T) bool: the tokens GEC wrote (phrase, answer, solution)."""
    return torch.isin(origins.to(torch.int64), torch.as_tensor(NOT_SAMPLED, device=origins.device))


def treat_injected(
    log_prob: torch.Tensor, advantages: torch.Tensor, injected: torch.Tensor, mode: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """The (log_prob, advantages) the surrogate receives: unchanged for "surrogate"; for "masked" and "sft",
    0 advantage and a detached log-prob on ``injected`` tokens (no gradient can reach them)."""
    if mode not in INJECTED_LOSSES:
        raise ValueError(f"edge_gec.injected_loss={mode!r}; allowed: {list(INJECTED_LOSSES)}")
    if mode == "surrogate":
        return log_prob, advantages
    return torch.where(injected, log_prob.detach(), log_prob), torch.where(injected, torch.zeros_like(advantages), advantages)


def injected_nll(log_prob: torch.Tensor, injected: torch.Tensor, num_tokens: Optional[float], dp_size: int = 1) -> torch.Tensor:
    """-sum(log_prob over ``injected``) / num_tokens * dp_size: verl's token-mean convention
    (``agg_loss``), with ``num_tokens`` the injected tokens of the (global) mini-batch; None = this
    micro-batch's own count (single process)."""
    total = -(log_prob * injected.to(log_prob.dtype)).sum()
    if num_tokens is None:
        num_tokens = float(injected.sum())
    return total / max(float(num_tokens), 1.0) * dp_size


def origin_sums(
    origins: torch.Tensor,
    response_mask: torch.Tensor,
    old_log_prob: torch.Tensor,
    ratio: torch.Tensor,
    clipped: Optional[torch.Tensor],
    grad: Optional[torch.Tensor] = None,
) -> dict[str, float]:
    """Per-origin sums over one micro-batch's response tokens (see module docstring); every key for every
    origin, 0 when it has no tokens, so each micro-batch and rank logs the same keys. ``ratio`` (B, T): the
    importance ratio pi_theta / pi_old the loss computed; ``clipped`` (B, T) bool: the tokens the loss's
    clipping removed (the trainer's loss knows its own clipping: ``integration/actor_loss.py``), None for a loss
    without a clip fraction (no ``_vanilla_clipped``); ``grad`` (B, T): dL/dlogp of the surrogate (None: no
    ``_grad_abs``)."""
    mask = response_mask.to(torch.bool)
    with torch.no_grad():
        ratio = ratio.detach().float()
        columns = {"_tokens": mask.float(), "_old_logprob_sum": old_log_prob.float(), "_ratio_sum": ratio}
        if clipped is not None:
            columns[VANILLA_CLIPPED] = clipped.float()
        if grad is not None:
            columns["_grad_abs"] = grad.detach().float().abs()
        codes = origins.to(torch.int64)
        selected = torch.stack([codes == code for code in range(len(ORIGINS))]) & mask  # (O, B, T)
        sums = torch.stack([(selected * column).sum(dim=(1, 2)) for column in columns.values()], dim=1)  # (O, C)
        maxima = torch.where(selected, ratio, torch.zeros_like(ratio)).amax(dim=(1, 2))
        values, peaks = sums.tolist(), maxima.tolist()  # one host sync each
    metrics: dict[str, float] = {}
    for code, origin in enumerate(ORIGINS):
        for name, value in zip(columns, values[code]):
            metrics[f"{origin}/{name}"] = value
        metrics[f"{origin}/{RAW_MAX}"] = peaks[code]
    return metrics


def _reduce(name: str, value) -> float:
    """A raw metric as verl hands it to the trainer (a float: v1, already reduced; a list of per-mini-batch
    floats: legacy) reduced by its ``AGGREGATION`` (``name``: the key's last part)."""
    if not isinstance(value, (list, tuple)):
        return float(value)
    if not value:
        return 0.0
    if AGGREGATION.get(name) == "max":
        return max(float(v) for v in value)
    return sum(float(v) for v in value) / len(value)


def finish_origin_metrics(metrics: Mapping[str, object], prefix: str) -> dict[str, float]:
    """The statistics from the raw sums under ``prefix`` (e.g. "actor/gec"): per origin token_share,
    grad_share (both 0 for an origin without tokens; absent when no gradient was measured), and for an
    origin with tokens old_logprob_mean, ratio_mean, ratio_max, vanilla_clip_frac (vanilla PPO only);
    ``sft_nll`` (mean NLL per injected token) when the loss had the SFT term. Returns the finished keys; the
    caller drops the raw ones (``raw_keys``)."""
    raw = {key[len(prefix) + 1 :]: _reduce(key.rsplit("/", 1)[-1], value) for key, value in metrics.items() if key.startswith(prefix + "/")}
    tokens = {origin: raw.get(f"{origin}/_tokens", 0.0) for origin in ORIGINS}
    total_tokens = sum(tokens.values())
    grads = {origin: raw.get(f"{origin}/_grad_abs") for origin in ORIGINS}
    total_grad = sum(g for g in grads.values() if g is not None)
    finished: dict[str, float] = {}
    if total_tokens <= 0:
        return finished
    for origin in ORIGINS:
        count = tokens[origin]
        finished[f"{prefix}/{origin}/token_share"] = count / total_tokens
        if grads[origin] is not None and total_grad > 0:
            finished[f"{prefix}/{origin}/grad_share"] = grads[origin] / total_grad
        if count > 0:
            finished[f"{prefix}/{origin}/old_logprob_mean"] = raw[f"{origin}/_old_logprob_sum"] / count
            finished[f"{prefix}/{origin}/ratio_mean"] = raw[f"{origin}/_ratio_sum"] / count
            finished[f"{prefix}/{origin}/ratio_max"] = raw[f"{origin}/{RAW_MAX}"]
            if f"{origin}/{VANILLA_CLIPPED}" in raw:
                finished[f"{prefix}/{origin}/vanilla_clip_frac"] = raw[f"{origin}/{VANILLA_CLIPPED}"] / count
    injected_tokens = sum(tokens[ORIGINS[code]] for code in NOT_SAMPLED)
    if NLL_SUM in raw and injected_tokens > 0:
        finished[f"{prefix}/sft_nll"] = raw[NLL_SUM] / injected_tokens
    return {key: value for key, value in finished.items() if math.isfinite(value)}


def raw_keys(metrics: Mapping[str, object], prefix: str) -> list[str]:
    """The raw sums' keys under ``prefix`` (leading underscore, and the per-micro-batch ratio maxima)."""
    keys = []
    for key in metrics:
        if key.startswith(prefix + "/"):
            name = key[len(prefix) + 1 :].rsplit("/", 1)[-1]
            if name.startswith("_") or name == RAW_MAX:
                keys.append(key)
    return keys


@dataclass
class AdvantageStepOutputs:
    """What GEC adds to an advantage step: ``origins`` (B, T) float32, each response token's origin code
    (0 off the response), the loss column; ``injected_share``: the step's injected tokens over its response
    tokens (the SFT term's token count per mini-batch); ``sampled`` / ``final``: the statistics of the
    responses as sampled (before correction) and of the advantages as trained."""

    origins: torch.Tensor
    injected_share: float
    sampled: dict[str, float] = field(default_factory=dict)
    final: dict[str, float] = field(default_factory=dict)


def advantage_step_outputs(
    infos: Sequence[Any],
    response_mask: torch.Tensor,
    advantages: torch.Tensor,
    scores: torch.Tensor,
    grouping: tuple[torch.Tensor, int, torch.Tensor],
    *,
    norm_by_std: bool,
    epsilon: float,
    entropy: Optional[torch.Tensor] = None,
) -> AdvantageStepOutputs:
    """GEC at the advantage step of any estimator (on the host). ``infos`` (B,): the rows' correction records
    as dicts (``CorrectionRecord.to_dict``; anything else for a row GEC did not run on); ``response_mask``,
    ``advantages`` (B, T); ``scores`` (B,) the final rewards; ``grouping``: (group_index, num_groups, is_pad)
    of the rows' uids; ``norm_by_std`` / ``epsilon``: the GRPO normalisation of the advantages as sampled;
    ``entropy`` (B, T): the old policy's per-token entropy, for ``sampled["entropy"]`` over the sampled tokens
    (verl's actor/entropy averages over every trained token, injected ones included)."""
    records = [CorrectionRecord.from_dict(info) if isinstance(info, dict) else None for info in infos]
    mask = response_mask.to(torch.bool).cpu()
    origins = torch.where(mask, token_origins(records, mask.shape[1]), 0)
    injected, total = int((not_sampled(origins) & mask).sum()), int(mask.sum())
    final_scores = scores.detach().to(torch.float32).cpu()
    sampled_scores = torch.tensor([float(s) if r is None else r.original_score for r, s in zip(records, final_scores.tolist())])
    uncorrected = torch.tensor([r is None or r.branch is None for r in records])
    group_index, num_groups, is_pad = grouping
    valid = response_valid(mask, is_pad.cpu())
    advantages = advantages.detach().to(torch.float32).cpu()
    sampled = as_sampled_statistics(
        sampled_scores, advantages, mask, group_index.cpu(), num_groups, valid, uncorrected, norm_by_std=norm_by_std, epsilon=epsilon
    )
    final = advantage_statistics(advantages, mask, final_scores, group_index.cpu(), num_groups, valid)
    if entropy is not None:
        sampled["entropy"] = sampled_token_mean(entropy.detach().to(torch.float32).cpu(), origins, mask)
    return AdvantageStepOutputs(
        origins=origins.to(torch.float32),
        injected_share=injected / max(total, 1),
        sampled=sampled,
        final={"adv_var": final["var"], "zero_variance_group_frac": final["zero_variance_group_frac"]},
    )
