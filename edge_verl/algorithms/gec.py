"""Guided Error Correction decisions (EDGE-GRPO, arXiv 2507.21848, Sec. 3.3). Pure Python, no verl.

Which responses are corrected and how. Everything here is a decision on booleans and strings; the verl
agent loop (``edge_verl.integration.gec_agent_loop``) carries the decisions out on tokens.

Differs from plain GRPO rollouts: every incorrect response (or, optionally, only those of all-wrong
groups) is, independently,
- regenerated (p = 0.5): " Wait! Something is wrong here." is appended and the policy continues for up
  to 256 more tokens;
- given the answer (p = 0.25): "\\nWait! Something is wrong here. After verification, the correct answer
  is \\boxed{ANSWER}." is appended;
- replaced by the reference solution (p = 0.25).
Randomness is an explicit ``random.Random`` seeded from (seed, uid, sample index), so a decision does not
depend on the order in which asynchronous rollouts finish.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from typing import Optional, Sequence

REGENERATE = "regenerate"
INJECT_ANSWER = "inject_answer"
REPLACE_SOLUTION = "replace_solution"
BRANCHES = (REGENERATE, INJECT_ANSWER, REPLACE_SOLUTION)

REFLECTION_PHRASE = " Wait! Something is wrong here."
# "{answer}" is the only placeholder; everything else is literal text.
ANSWER_TEMPLATE = "\nWait! Something is wrong here. After verification, the correct answer is \\boxed{{answer}}."


@dataclass(frozen=True)
class Decision:
    """What happens to one response: ``branch`` is None when it is left as sampled; ``reason`` says why."""

    branch: Optional[str]
    reason: str
    fallback: bool = False


def decision_rng(seed: int, uid: str, sample_index: int) -> random.Random:
    """A random source private to one response, stable across runs and rollout orderings."""
    digest = hashlib.sha256(f"{seed}:{uid}:{sample_index}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "little"))


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


def injected_answer_text(answer: str, template: str = ANSWER_TEMPLATE) -> str:
    """The appended text of the inject_answer branch (``template`` must contain "{answer}")."""
    return template.replace("{answer}", answer)


def injected_token_mask(starts, ends, length: int):
    """(B,) spans [start, end) -> (B, T) bool mask of injected tokens (torch, vectorised)."""
    import torch

    positions = torch.arange(length)[None, :]
    return (positions >= torch.as_tensor(starts)[:, None]) & (positions < torch.as_tensor(ends)[:, None])


def summarize_corrections(
    infos: Sequence[Optional[dict]],
    final_scores,
    uids: Sequence[str],
    response_mask,
    old_log_probs=None,
    correct_threshold: float = 0.5,
) -> dict[str, float]:
    """Per-step GEC metrics from the agent loop's per-response records.

    Counts per step: gec/responses, gec/corrected[_<branch>], gec/fallbacks, gec/not_fitting,
    gec/prompt_too_long (left uncorrected by the prompt-length gate), gec/regenerate_became_correct,
    gec/all_wrong_groups, gec/groups_rescued, gec/continuation_cut (regenerations whose continuation room was
    below the configured budget); gec/continuation_tokens_{mean,min,max} over the step's regenerations;
    gec/correction_time_share: of the loop's time in the rollout server (first samples + corrections, summed
    over responses), the share spent on corrections (the regenerate branch's second call; edits are ~0).

    infos (B,): the agent loop's per-response records (None for rows not run by the GEC loop); final_scores
    (B,) reward of the final responses; response_mask (B, T); old_log_probs (B, T) optional. Returns
    counts of corrections per branch, regenerations that became correct, groups rescued from all-wrong,
    the fraction of trained tokens that were injected and the old policy's log-prob/probability of
    injected vs sampled tokens (how far off-policy the injected text is).
    """
    import torch

    rows = [i for i, info in enumerate(infos) if isinstance(info, dict)]
    if not rows:
        return {}
    scores = torch.as_tensor(final_scores, dtype=torch.float32)
    final_correct = scores > correct_threshold
    metrics = {"gec/responses": float(len(rows))}
    branches = [infos[i].get("branch") for i in rows]
    metrics["gec/corrected"] = float(sum(branch is not None for branch in branches))
    for branch in BRANCHES:
        metrics[f"gec/corrected_{branch}"] = float(sum(b == branch for b in branches))
    metrics["gec/fallbacks"] = float(sum(bool(infos[i].get("fallback")) for i in rows))
    metrics["gec/not_fitting"] = float(sum(infos[i].get("reason") == "does_not_fit" for i in rows))
    metrics["gec/prompt_too_long"] = float(sum(infos[i].get("reason") == "prompt_too_long" for i in rows))
    regenerated = [i for i in rows if infos[i].get("branch") == REGENERATE]
    metrics["gec/regenerate_became_correct"] = float(sum(bool(final_correct[i]) for i in regenerated))
    if regenerated:  # how long the continuations were, and how many got less than their budget's room
        lengths = [int(infos[i].get("continuation_tokens", 0)) for i in regenerated]
        metrics["gec/continuation_tokens_mean"] = sum(lengths) / len(lengths)
        metrics["gec/continuation_tokens_min"] = float(min(lengths))
        metrics["gec/continuation_tokens_max"] = float(max(lengths))
        metrics["gec/continuation_cut"] = float(
            sum(int(infos[i].get("continuation_budget", 0)) < int(infos[i].get("continuation_requested", 0)) for i in regenerated)
        )
    groups: dict[str, list[int]] = {}
    for i in rows:
        groups.setdefault(str(uids[i]), []).append(i)
    all_wrong = [members for members in groups.values() if not any(infos[i].get("original_correct") for i in members)]
    sampling = sum(float(infos[i].get("sample_seconds", 0.0)) for i in rows)
    correcting = sum(float(infos[i].get("correction_seconds", 0.0)) for i in rows)
    if sampling + correcting > 0:  # the corrections' share of the loop's generation time (summed per response)
        metrics["gec/correction_time_share"] = correcting / (sampling + correcting)
    metrics["gec/all_wrong_groups"] = float(len(all_wrong))
    metrics["gec/groups_rescued"] = float(sum(any(bool(final_correct[i]) for i in members) for members in all_wrong))
    mask = torch.as_tensor(response_mask).bool()
    starts = [0] * len(infos)
    ends = [0] * len(infos)
    for i in rows:
        starts[i], ends[i] = int(infos[i].get("injected_start", 0)), int(infos[i].get("injected_end", 0))
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
