"""Guided Error Correction as an OpenRLHF agent executor (``--train.agent_func_path`` takes ``gec_agent.py``).

OpenRLHF 0.11.2 builds ``AgentExecutor()`` once per vLLM engine and runs a prompt's n samples as n
concurrent ``execute`` calls (one ``asyncio.gather``) on that engine. Per call this executor: samples with
OpenRLHF's own ``SingleTurnAgentExecutor`` (its tokenisation, truncation and token spans); grades the
response with the math reward (``reward_func.grade_response``: setting an agent replaces OpenRLHF's remote
reward, so the executor grades itself); asks ``edge_verl.algorithms.gec.decide_correction`` whether and how
to correct it; carries that out on TOKENS; grades the final response; returns it with its trained spans.

Token layout of a corrected response ("body" = the first sample without trailing end/special tokens; nothing
with ``first_attempt=drop``), all within ``max_length`` (the body is cut, never the injected text):
- regenerate:       body + phrase + continuation (sampled from prompt + body + phrase, ``continuation_tokens``)
- inject_answer:    body + answer text + EOS
- replace_solution: reference solution + EOS
``action_ranges`` are the trained spans: the whole response (``injected_loss=surrogate``, the paper), or the
response minus the injected span (``injected_loss=masked``: the phrase, the answer text or the solution get
no policy gradient; the rewards, hence every advantage, are unchanged). ``sft`` and ``answer_source=placebo``
have no OpenRLHF translation and are refused (``options.UNTRANSLATED_GEC``).

What OpenRLHF does not tell an executor, and how it is found (``rollout_labels``): edge_verl's launcher sends
every label as a ``RolloutLabel`` that says whether the call is evaluation (NEVER corrected, whatever the
temperatures) and which training prompt of the run it samples; a label without that mark is refused. A group is
named by its prompt's number and text, a response by its own tokens (``ResponseKeys``); decisions are keyed on
those, never on arrival order or on which engine got the prompt. ``scope=all_wrong_groups`` waits for the n
verdicts in the executor's own ``algorithms.gec.GroupRendezvous`` (OpenRLHF runs a prompt's n calls on one
engine, whose executor this is); n is the label's group size (``RolloutLabel.size``).
Injected tokens have no rollout log-probs, so a run with ``--algo.advantage.is_correction_level`` on is refused.

Returned ``extra_logs`` (numbers, the same names for every call): ``edge_verl/gec/{eval, corrected,
corrected_<branch>, fallback, original_score, all_wrong_group, injected_tokens, continuation_tokens}`` and
the grader health numbers of the final grading.
"""

from __future__ import annotations

import asyncio
import time
from copy import deepcopy
from dataclasses import dataclass
from typing import Any, Optional

from openrlhf.utils.agent import AgentExecutorBase, SingleTurnAgentExecutor

from edge_verl.algorithms.gec import (
    BRANCHES, decide_correction, decision_rng,
)
from edge_verl.algorithms.gec_layout import correction_layout, injected_text
from edge_verl.algorithms.gec_rendezvous import GroupRendezvous
from edge_verl.openrlhf.options import OpenRlhfGec, run_options
from edge_verl.openrlhf.reward_func import grade_response, health_logs, label_parts
from edge_verl.openrlhf.rollout_labels import ResponseKeys, prompt_digest, unwrap


@dataclass(frozen=True)
class CorrectedTokens:
    """A correction's final response tokens, the [start, end) span of its injected tokens, whether the
    regeneration's continuation hit its budget, and its length (None: not a regeneration)."""

    response_ids: list[int]
    injected_start: int
    injected_end: int
    truncated: bool = False
    continuation_tokens: Optional[int] = None


def trained_ranges(prompt_length: int, response_length: int, injected: tuple[int, int], masked: bool) -> list[tuple[int, int]]:
    """OpenRLHF ``action_ranges`` (observation positions) of a response: all of it, or with ``masked`` all but
    the injected span [start, end) (response positions); empty spans are dropped."""
    spans = [(0, response_length)] if not masked else [(0, injected[0]), (injected[1], response_length)]
    return [(prompt_length + start, prompt_length + end) for start, end in spans if end > start]


class AgentExecutor(AgentExecutorBase):
    """OpenRLHF's agent hook running EDGE-GRPO's GEC (see the module docstring)."""

    def __init__(self) -> None:
        options = run_options()
        self.options: OpenRlhfGec = options.gec_or_default()
        self.gec = self.options.config
        self.reward = options.reward
        self.sampler = SingleTurnAgentExecutor()  # no reward endpoint: this executor grades
        # decide_correction's arguments that are the run's, not the call's
        self.decision_options = {
            "probabilities": self.gec.probabilities,
            "only_all_wrong_groups": self.gec.scope == "all_wrong_groups",
            "missing_solution": self.gec.missing_solution,
        }
        self.response_keys = ResponseKeys()
        self.rendezvous = GroupRendezvous()

    async def execute(self, prompt, label, sampling_params, max_length: int, hf_tokenizer, llm_engine, images=None):
        if images:
            raise ValueError("edge_verl's GEC executor is text-only; this prompt carries images.")
        if sampling_params.logprobs is not None:
            raise ValueError(
                "edge_verl's GEC executor writes tokens the policy did not sample, which have no rollout log-probs: "
                "run with --algo.advantage.is_correction_level off."
            )
        label, mark = unwrap(label)
        if mark is None:
            raise ValueError(
                "edge_verl's GEC agent file got a label without edge_verl's rollout mark: it runs under edge_verl's "
                "launcher (python -m edge_verl.openrlhf.train_ppo_ray ...), whose trainer tells the executor which "
                "calls are evaluation (never corrected) and which prompt of the run a call samples."
            )
        training = not mark.evaluation
        params = sampling_params
        if training and self.gec.first_sample_tokens is not None:  # room left in max_length for the correction
            params = deepcopy(sampling_params)
            params.max_tokens = self.gec.first_sample_tokens
        started = time.perf_counter()
        output = await self.sampler.execute(prompt, label, params, max_length, hf_tokenizer, llm_engine)
        sample_seconds = time.perf_counter() - started
        output["label"] = label
        (start, end), = output["action_ranges"]
        prompt_ids = list(output["observation_tokens"][:start])
        sampled = list(output["observation_tokens"][start:end])
        # grading (up to its deadline) runs in a thread, as OpenRLHF's own executor grades: on the event loop it
        # would stall the engine's other requests and the outputs it streams
        first = await asyncio.to_thread(grade_response, hf_tokenizer.decode(sampled, skip_special_tokens=True), label, self.reward)
        logs = {"edge_verl/gec/eval": 0.0 if training else 1.0, "edge_verl/gec/original_score": float(first["score"])}
        correct = first["score"] > self.gec.correct_threshold
        corrected, decision, group = None, None, [correct]
        if training:
            uid = f"{mark.group}:{prompt_digest(prompt)}"
            key = self.response_keys.key(uid, sampled, mark.size)
            if self.gec.scope == "all_wrong_groups":
                group = await self.rendezvous.wait_for_group(
                    uid, key, mark.size, correct, self.gec.group_timeout_s
                )
            _, answer, solution = label_parts(label)
            fits = self.gec.max_prompt_tokens is None or len(prompt_ids) < self.gec.max_prompt_tokens
            decision = decide_correction(
                correct=correct, group_correct=group, rng=decision_rng(self.gec.seed, uid, *key),
                has_answer=bool(answer), has_solution=bool(solution), prompt_fits=fits, **self.decision_options,
            )
            if decision.branch is not None:
                corrected = await self.correct(
                    decision.branch, prompt_ids, sampled, answer, solution, sampling_params,
                    max_length - len(prompt_ids), hf_tokenizer, llm_engine,
                )
        final = first
        if corrected is not None:
            final = await asyncio.to_thread(
                grade_response, hf_tokenizer.decode(corrected.response_ids, skip_special_tokens=True), label, self.reward
            )
            output["observation_tokens"] = prompt_ids + corrected.response_ids
            output["action_ranges"] = trained_ranges(
                len(prompt_ids), len(corrected.response_ids), (corrected.injected_start, corrected.injected_end),
                masked=self.gec.injected_loss == "masked",
            )
            output["truncated"] = corrected.truncated
            output["rollout_log_probs"] = None
        branch = None if corrected is None else decision.branch
        logs["edge_verl/gec/corrected"] = float(branch is not None)
        for name in BRANCHES:
            logs[f"edge_verl/gec/corrected_{name}"] = float(branch == name)
        logs["edge_verl/gec/fallback"] = float(decision is not None and decision.fallback)
        logs["edge_verl/gec/all_wrong_group"] = float(training and not any(group))
        logs["edge_verl/gec/injected_tokens"] = float(0 if corrected is None else corrected.injected_end - corrected.injected_start)
        logs["edge_verl/gec/continuation_tokens"] = float((corrected and corrected.continuation_tokens) or 0)
        logs["edge_verl/gec/sample_seconds"] = sample_seconds
        logs.update(health_logs([final], 0))
        output.update(reward=float(final["score"]), scores=float(final["score"]), extra_logs=logs)
        return output

    async def correct(
        self, branch: str, prompt_ids: list[int], sampled: list[int], answer: str, solution: str,
        sampling_params: Any, limit: int, hf_tokenizer: Any, llm_engine: Any,
    ) -> Optional[CorrectedTokens]:
        """The drawn correction on tokens, within ``limit`` response tokens; None when it cannot fit:
        ``correction_layout``'s (shared with verl's agent loop), a regeneration's continuation sampled after it."""
        injected = list(hf_tokenizer.encode(injected_text(branch, self.gec, answer, solution), add_special_tokens=False))
        eos = int(hf_tokenizer.eos_token_id)
        end_ids = {eos, *map(int, getattr(hf_tokenizer, "all_special_ids", ()) or ())}
        layout = correction_layout(branch, sampled, injected, config=self.gec, eos_id=eos, end_ids=end_ids, limit=limit)
        if layout is None:
            return None
        if layout.continuation_budget is None:  # no continuation to sample: the layout is the response
            return CorrectedTokens(layout.tokens, layout.injected_start, layout.injected_end)
        params = deepcopy(sampling_params)
        params.max_tokens = layout.continuation_budget
        reply = await llm_engine.generate(prompt_ids + layout.tokens, params)
        continuation = list(reply.outputs[0].token_ids)[: params.max_tokens]
        truncated = reply.outputs[0].finish_reason == "length"
        return CorrectedTokens(layout.tokens + continuation, layout.injected_start, layout.injected_end, truncated,
                               len(continuation))
