"""Where a GEC correction's tokens go: the first sample's body, the injected text and room for a regeneration's
continuation, within a response's token limit. Pure Python, no tokenizer and no framework: verl's agent loop
(edge_verl/integration/rollout.py) and OpenRLHF's agent executor (edge_verl/openrlhf/gec_executor.py) each encode
the text with their tokenizer, call ``correction_layout`` and, for a regeneration, sample the continuation after
``tokens``; both then lay out a response the same way.

The reference's layout (EDGE-GRPO's agent loop): the body is the first sample without its trailing end tokens
(nothing with ``first_attempt=drop``), cut from its end so that what follows fits; an injected answer or solution
ends with EOS; a replaced solution replaces the whole response; a regeneration's continuation gets what room is
left, at most ``continuation_tokens``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Collection, Optional, Sequence

from edge_verl.algorithms.gec import (
    INJECT_ANSWER, REGENERATE, REPLACE_SOLUTION, GecConfig, injected_answer_text, strip_end_tokens,
)


@dataclass(frozen=True)
class Layout:
    """A correction's tokens before any continuation, and the [start, end) span of them that were not sampled.

    tokens: the final response for inject_answer and replace_solution; for a regeneration, the body and the
        phrase, which the continuation follows.
    continuation_budget: a regeneration's max_tokens (the configured ``continuation_tokens`` cut to the room
        left); None for the other branches.
    """

    tokens: list[int]
    injected_start: int
    injected_end: int
    continuation_budget: Optional[int] = None


def injected_text(branch: str, config: GecConfig, answer: str, solution: str) -> str:
    """The text ``branch`` injects: the reference solution, the answer in ``config.answer_template``, or the
    reflection phrase a regeneration continues from."""
    if branch == REPLACE_SOLUTION:
        return solution
    if branch == INJECT_ANSWER:
        return injected_answer_text(answer, config.answer_template)
    if branch == REGENERATE:
        return config.reflection_phrase
    raise ValueError(f"GEC branch {branch!r}; allowed: {REGENERATE}, {INJECT_ANSWER}, {REPLACE_SOLUTION}")


def correction_layout(
    branch: str, sampled: Sequence[int], injected: Sequence[int], *, config: GecConfig, eos_id: int,
    end_ids: Collection[int], limit: int,
) -> Optional[Layout]:
    """The layout of ``branch`` applied to the first sample ``sampled`` (token ids), ``injected`` being
    ``injected_text`` encoded (without special tokens), within ``limit`` response tokens; None when it cannot
    fit (a solution + EOS, an answer + EOS, or the phrase and one continuation token longer than ``limit``)."""
    body = [] if config.first_attempt == "drop" else strip_end_tokens(sampled, end_ids)
    injected = list(injected)
    if branch == REPLACE_SOLUTION:
        tokens = injected + [eos_id]
        return Layout(tokens, 0, len(tokens)) if len(tokens) <= limit else None
    if branch == INJECT_ANSWER:
        suffix = injected + [eos_id]
        if len(suffix) > limit:
            return None
        body = body[: limit - len(suffix)]
        return Layout(body + suffix, len(body), len(body) + len(suffix))
    if branch != REGENERATE:
        raise ValueError(f"GEC branch {branch!r}; allowed: {REGENERATE}, {INJECT_ANSWER}, {REPLACE_SOLUTION}")
    if len(injected) + 1 > limit:
        return None
    body = body[: limit - len(injected) - 1]
    budget = min(config.continuation_tokens, limit - len(body) - len(injected))
    return Layout(body + injected, len(body), len(body) + len(injected), budget)
