"""Guided Error Correction inside verl's rollout: the agent loop ``edge_gec``.

verl puts its rollout servers to sleep as soon as sampling ends, so a post-processor that must generate
again lives INSIDE the rollout, as an agent loop. Per response it: samples like the single-turn loop;
grades the response with the run's own reward function; asks ``edge_verl.algorithms.gec`` whether and
how to correct it; carries that out on TOKENS (never re-tokenising decoded text); and returns the final
tokens with ``reward_score`` unset, so verl's reward loop scores the final response as for any sample.

Rows opt in through an ``agent_name`` column ("edge_gec") in the TRAINING data; validation rows carry
none and use verl's default loop, so validation is never corrected.

Token layout of a corrected response (all of it is trained, response_mask = 1; "injected" = not sampled):
- regenerate:       sampled[:-EOS] + phrase + continuation (sampled again, ends in EOS unless cut)
- inject_answer:    sampled[:-EOS] + answer text + EOS
- replace_solution: reference solution + EOS
Injected tokens (phrase, answer text, solution) have no rollout log-probs. This loop therefore requires
``actor_rollout_ref.rollout.calculate_log_probs=False`` (VERL.md's first option): rollout-correction
IS/RS then never sees made-up log-probs. Which tokens were injected travels in
``extra_fields["edge_verl_gec"]`` to the trainer hook that logs GEC's metrics.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from typing import Any, Optional
from uuid import uuid4

from verl.experimental.agent_loop.agent_loop import AgentLoopOutput, register
from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop

from edge_verl.algorithms.gec import (
    AGENT_NAME,
    INFO_KEY,
    INJECT_ANSWER,
    REGENERATE,
    REPLACE_SOLUTION,
    decide_correction,
    decision_rng,
    injected_answer_text,
)
from edge_verl.config import GecConfig
from edge_verl.integration.estimators import bypass_mode_enabled, config_section


def gec_config(config: Any) -> GecConfig:
    return GecConfig.from_mapping(config_section(config.algorithm, AGENT_NAME))


def check_gec_supported(config: Any) -> None:
    """Refuse settings under which GEC's injected tokens would corrupt verl's bookkeeping."""
    rollout = config.actor_rollout_ref.rollout
    if rollout.get("calculate_log_probs", False):
        raise ValueError(
            "The edge_gec agent loop injects tokens the rollout never sampled, which have no rollout log-probs; "
            "set actor_rollout_ref.rollout.calculate_log_probs=False (rollout-correction IS/RS then stays off)."
        )
    if bypass_mode_enabled(config.algorithm):
        raise ValueError("edge_gec needs recomputed old log-probs; set algorithm.rollout_correction.bypass_mode=False.")
    gec_config(config)


class _GroupVerdicts:
    """Per-uid rendezvous of the n sibling responses' correctness (all run in one agent-loop worker)."""

    _groups: dict[str, dict] = {}

    @classmethod
    async def wait_for_group(cls, uid: str, index: int, size: int, correct: bool, timeout_s: float) -> list[bool]:
        group = cls._groups.setdefault(uid, {"verdicts": {}, "done": asyncio.Event(), "left": size})
        group["verdicts"][index] = correct
        if len(group["verdicts"]) >= size:
            group["done"].set()
        try:
            await asyncio.wait_for(group["done"].wait(), timeout=timeout_s)
        except asyncio.TimeoutError as error:
            raise RuntimeError(
                f"edge_gec scope=all_wrong_groups: only {len(group['verdicts'])} of {size} responses of uid {uid} "
                f"reached this agent-loop worker within {timeout_s} s; the n samples of a prompt must run in one "
                "worker (v1 trainer, or actor_rollout_ref.rollout.agent.num_workers dividing the prompts)."
            ) from error
        verdicts = [group["verdicts"][key] for key in sorted(group["verdicts"])]
        group["left"] -= 1
        if group["left"] == 0:
            cls._groups.pop(uid, None)
        return verdicts


class _SampleIndex:
    """Index of a response within its group. v1 passes ``session_id``; the legacy worker passes none, but
    it starts the n loops of a uid in order, so claiming a counter before the first ``await`` reproduces
    verl's own ``rollout_n`` numbering."""

    _claimed: dict[str, int] = {}

    @classmethod
    def claim(cls, uid: str, kwargs: dict, group_size: int) -> int:
        if kwargs.get("session_id") is not None:
            return int(kwargs["session_id"])
        index = cls._claimed.get(uid, 0)
        cls._claimed[uid] = index + 1
        if index + 1 >= group_size:
            cls._claimed.pop(uid, None)
        return index


@register(AGENT_NAME)
class GecAgentLoop(SingleTurnAgentLoop):
    """Single-turn sampling followed by EDGE-GRPO's Guided Error Correction (see module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        check_gec_supported(self.config)
        self.gec = gec_config(self.config)
        from verl.trainer.ppo.reward import get_custom_reward_fn

        self.reward_fn = get_custom_reward_fn(self.config)
        if self.reward_fn is None:
            raise ValueError("edge_gec grades responses with reward.custom_reward_function; set its path and name.")
        eos = self.tokenizer.eos_token_id
        self.eos_ids = set(eos if isinstance(eos, list) else [eos])
        self.eos_id = min(self.eos_ids)

    async def _grade(self, response_ids: list[int], kwargs: dict) -> float:
        """The run's reward for ``response_ids`` (a sync reward function runs in an executor thread)."""
        reward_model = kwargs.get("reward_model") or {}
        call = functools.partial(
            self.reward_fn,
            data_source=kwargs.get("data_source"),
            solution_str=self.tokenizer.decode(response_ids, skip_special_tokens=True),
            ground_truth=reward_model.get("ground_truth"),
            extra_info=kwargs.get("extra_info"),
        )
        if inspect.iscoroutinefunction(getattr(self.reward_fn, "func", self.reward_fn)):
            result = await call()
        else:
            result = await asyncio.get_running_loop().run_in_executor(None, call)
        return float(result["score"] if isinstance(result, dict) else result)

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        uid = str(kwargs.get("uid", ""))
        index = _SampleIndex.claim(uid, kwargs, int(self.rollout_config.n))  # before any await: see _SampleIndex
        output = await super().run(sampling_params, **kwargs)
        correct = await self._grade(list(output.response_ids), kwargs) > self.gec.correct_threshold
        group = [correct]
        if self.gec.scope == "all_wrong_groups":
            group = await _GroupVerdicts.wait_for_group(
                uid, index, int(self.rollout_config.n), correct, self.gec.group_timeout_s
            )
        extra_info = kwargs.get("extra_info") or {}
        answer = str(extra_info.get("answer") or (kwargs.get("reward_model") or {}).get("ground_truth") or "")
        solution = str(extra_info.get("solution") or "")
        decision = decide_correction(
            correct=correct,
            group_correct=group,
            rng=decision_rng(self.gec.seed, uid, index),
            probabilities=self.gec.probabilities,
            only_all_wrong_groups=self.gec.scope == "all_wrong_groups",
            has_answer=bool(answer),
            has_solution=bool(solution),
            missing_solution=self.gec.missing_solution,
        )
        info = {
            "branch": decision.branch,
            "reason": decision.reason,
            "fallback": decision.fallback,
            "original_correct": correct,
            "original_length": len(output.response_ids),
            "injected_start": 0,
            "injected_end": 0,
            "all_wrong_group": not any(group),
        }
        if decision.branch is not None:
            applied = await self._apply(decision.branch, output, sampling_params, answer, solution)
            if applied is None:
                info.update(branch=None, reason="does_not_fit")
            else:
                response_ids, injected = applied
                output.response_ids = response_ids
                output.response_mask = [1] * len(response_ids)
                output.response_logprobs = None
                info["injected_start"], info["injected_end"] = injected
        output.reward_score = None  # verl's reward loop scores the final response
        output.extra_fields[INFO_KEY] = info
        return output

    async def _apply(
        self, branch: str, output: AgentLoopOutput, sampling_params: dict, answer: str, solution: str
    ) -> Optional[tuple[list[int], tuple[int, int]]]:
        """Final response tokens and the [start, end) span of injected tokens, or None if it cannot fit."""
        limit = self.response_length
        body = list(output.response_ids)
        if body and body[-1] in self.eos_ids:
            body = body[:-1]
        if branch == REPLACE_SOLUTION:
            tokens = self._encode(solution) + [self.eos_id]
            return (tokens, (0, len(tokens))) if len(tokens) <= limit else None
        if branch == INJECT_ANSWER:
            suffix = self._encode(injected_answer_text(answer, self.gec.answer_template)) + [self.eos_id]
            if len(suffix) > limit:
                return None
            body = body[: limit - len(suffix)]
            return body + suffix, (len(body), len(body) + len(suffix))
        assert branch == REGENERATE
        phrase = self._encode(self.gec.reflection_phrase)
        if len(phrase) + 1 > limit:
            return None
        body = body[: limit - len(phrase) - 1]
        budget = min(self.gec.continuation_tokens, limit - len(body) - len(phrase))
        continued = await self.server_manager.generate(
            request_id=uuid4().hex,
            prompt_ids=list(output.prompt_ids) + body + phrase,
            sampling_params={**sampling_params, "max_tokens": budget, "logprobs": False},
        )
        continuation = list(continued.token_ids)[:budget]
        return body + phrase + continuation, (len(body), len(body) + len(phrase))
