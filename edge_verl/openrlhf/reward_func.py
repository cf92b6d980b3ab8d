"""The math reward as an OpenRLHF reward file: ``--reward.remote_url <path of this file>``.

OpenRLHF 0.11.2's ``SingleTurnAgentExecutor`` loads this file by path inside each vLLM rollout actor and
calls ``reward_func([query], [prompt], [label])`` once per sample, in a thread (``asyncio.to_thread``):
- ``query`` is the decoded prompt + response WITH special tokens; the response is what follows the prompt
  (``response_from_query``), with chat special tokens (``<|im_end|>``, ``</s>``, ...) removed;
- ``label`` is the dataset's ``--data.label_key`` value: the gold answer (a string, a number, a list of
  acceptable answers) or a dict with ``answer`` (and optionally ``solution``, read by the GEC executor);
- the answer is graded by ``edge_verl.reward.compute_score``, whose deadline is enforced from outside the
  grading code by worker processes, so it holds in this thread where signal-based timeouts cannot work.
It never raises: OpenRLHF logs a reward exception at INFO and drops the reward, which surfaces much later as
an unrelated "reward_model_group is required" error. The one failure the grader reports by raising, grading
workers that cannot start, is logged at ERROR and scores 0 with ``edge_verl/grader/unavailable`` = 1.
Options (format policy, the two time bounds) come from ``EDGE_VERL_OPENRLHF`` (``edge_verl.openrlhf.options``)
and are validated when the file is loaded, i.e. when the engine starts, after the OpenRLHF version (the pinned
one only, as for the launcher and the agent file).

Returned per call: ``rewards`` and ``scores`` (float tensors, one value per query: 1.0 correct, else 0.0)
and ``extra_logs``: the grader's health numbers, one float per name (OpenRLHF wraps each in a tensor), the
fraction of this call's queries per ``GRADER_OUTCOMES`` (``edge_verl/grader/<outcome>``), plus
``edge_verl/grader/unavailable`` and ``edge_verl/reward/prompt_not_found`` (a query that does not contain its
prompt is graded on nothing and scores 0 rather than on text that may include the prompt's own ``\\boxed{}``).
"""

from __future__ import annotations

import logging
import re
from typing import Any, Optional, Sequence

import torch

from edge_verl.openrlhf.internals import check_installed_version
from edge_verl.openrlhf.options import RewardOptions, run_options
from edge_verl.reward.pool import GraderUnavailable
from edge_verl.reward.score import GRADER_OUTCOMES, compute_score, grader_outcome_fractions

logger = logging.getLogger(__name__)

# Chat-template control tokens as text: <|im_end|>, <|eot_id|>, <|endoftext|> (Qwen, Llama 3, GPT),
# </s> and <s> (Llama 2, Mistral), <eos>, <start_of_turn>/<end_of_turn> (Gemma).
SPECIAL_TOKEN_TEXT = re.compile(r"<\|[A-Za-z0-9_ ]{1,48}\|>|</?s>|<eos>|<(?:start|end)_of_turn>")
# How much of a left-truncated prompt must match to find where the response starts.
PROMPT_TAIL_CHARS = 64
UNAVAILABLE = "edge_verl/grader/unavailable"
PROMPT_NOT_FOUND = "edge_verl/reward/prompt_not_found"


def strip_special_tokens(text: str) -> str:
    """``text`` without chat special tokens (``SPECIAL_TOKEN_TEXT``)."""
    return SPECIAL_TOKEN_TEXT.sub("", text)


def response_from_query(query: Any, prompt: Any) -> Optional[str]:
    """The response part of OpenRLHF's ``query`` (decoded prompt + response), special tokens removed.

    The query starts with the prompt; a prompt OpenRLHF truncated from the left (too long for max_len) is
    found by its last PROMPT_TAIL_CHARS characters. None when the prompt cannot be found.
    """
    if not isinstance(query, str) or not isinstance(prompt, str):
        return None
    if query.startswith(prompt):
        return strip_special_tokens(query[len(prompt):])
    tail = prompt[-PROMPT_TAIL_CHARS:]
    at = query.find(tail) if tail else -1
    if at < 0:
        return None
    return strip_special_tokens(query[at + len(tail):])


def label_parts(label: Any) -> tuple[Any, str, str]:
    """(ground truth as ``compute_score`` takes it, the answer text to inject, the reference solution) of a
    label: a dict with ``answer`` (and ``solution``), or the gold itself."""
    if isinstance(label, dict):
        gold = label.get("answer")
        solution = label.get("solution")
    else:
        gold, solution = label, None
    answer = gold[0] if isinstance(gold, (list, tuple)) and gold else gold
    return gold, "" if answer is None else str(answer), "" if solution is None else str(solution)


def grade_response(response: Optional[str], label: Any, options: RewardOptions) -> dict:
    """``compute_score``'s result for ``response`` against the label's gold, plus ``unavailable`` (bool)."""
    if response is None:
        return {"score": 0.0, "grader": "no_answer", "reason": "prompt_not_found", "unavailable": False}
    gold, _, _ = label_parts(label)
    try:
        result = compute_score("openrlhf", response, gold, None, **options.score_kwargs())
    except GraderUnavailable as error:
        logger.error("edge_verl reward: no grading worker could start; scoring 0. %s", error)
        return {"score": 0.0, "grader": "", "reason": "grader_unavailable", "unavailable": True}
    return {**result, "unavailable": False}


def health_logs(results: Sequence[dict], prompts_missing: int) -> dict[str, float]:
    """The grader health numbers of a call's results: every outcome's fraction, unavailable, prompt_not_found."""
    count = max(len(results), 1)
    fractions = grader_outcome_fractions([result["grader"] for result in results])
    logs = {f"edge_verl/grader/{outcome}": float(fractions.get(outcome, 0.0)) for outcome in GRADER_OUTCOMES}
    logs[UNAVAILABLE] = sum(bool(result["unavailable"]) for result in results) / count
    logs[PROMPT_NOT_FOUND] = prompts_missing / count
    return logs


def reward_func(queries: Sequence[Any], prompts: Sequence[Any], labels: Sequence[Any]) -> dict:
    """OpenRLHF's reward hook (see the module docstring)."""
    options = run_options().reward
    responses = [response_from_query(query, prompt) for query, prompt in zip(queries, prompts)]
    results = [grade_response(response, label, options) for response, label in zip(responses, labels)]
    rewards = torch.tensor([float(result["score"]) for result in results], dtype=torch.float32)
    missing = sum(response is None for response in responses)
    return {"rewards": rewards, "scores": rewards.clone(), "extra_logs": health_logs(results, missing)}


if __name__ != "edge_verl.openrlhf.reward_func":  # loaded by path, as OpenRLHF's reward file (not imported as a module)
    check_installed_version()
run_options()  # a bad EDGE_VERL_OPENRLHF file fails when OpenRLHF loads this file, not at the first sample
