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
``extra_fields["edge_verl_gec"]`` (a ``CorrectionRecord.to_dict()``) to the trainer hook that logs GEC's
metrics.

GEC's switch is ``algorithm.edge_gec.enable``; the trainer hooks check before the first rollout that the
training data marks rows for this loop exactly when it is on (and that validation data marks none).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional
from uuid import uuid4

from verl.experimental.agent_loop.agent_loop import AgentLoopOutput, register
from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop

from edge_verl.algorithms.gec import (
    DOES_NOT_FIT,
    INJECT_ANSWER,
    REGENERATE,
    REPLACE_SOLUTION,
    CorrectionRecord,
    decide_correction,
    decision_rng,
    group_rendezvous,
    injected_answer_text,
)
from edge_verl.config import GecConfig
from edge_verl.integration.names import GEC_AGENT_LOOP, GEC_INFO_KEY, SAMPLE_INDEX_COLUMN
from edge_verl.integration.preflight import check_budget, check_gec_supported


def sample_index(kwargs: dict) -> int:
    """The response's index within its uid group, as the trainer numbered it.

    v1 passes ``session_id`` (0..n-1); the legacy trainer's rollout gets ``SAMPLE_INDEX_COLUMN``, set on
    the whole batch before verl splits it across agent-loop workers (trainer_hooks), so the index does
    not depend on which worker runs the sample.
    """
    for key in ("session_id", SAMPLE_INDEX_COLUMN):
        if kwargs.get(key) is not None:
            return int(kwargs[key])
    raise RuntimeError(
        f"edge_gec got neither session_id (v1 trainer) nor {SAMPLE_INDEX_COLUMN} (legacy trainer, added by the "
        "edge_verl plugin when algorithm.edge_gec.enable=True): decisions would not be reproducible."
    )


@dataclass(frozen=True)
class _Correction:
    """A correction carried out: the final response tokens, the [start, end) span of its injected tokens
    and, for a regeneration, the continuation's length and the max_tokens it was given."""

    response_ids: list[int]
    injected_start: int
    injected_end: int
    continuation_tokens: Optional[int] = None
    continuation_budget: Optional[int] = None


@dataclass(frozen=True)
class _RunSetup:
    """Per-run work done once per agent-loop worker process: options, reward function, EOS ids."""

    config: Any
    gec: GecConfig
    reward_fn: Callable
    eos_ids: frozenset[int]


@register(GEC_AGENT_LOOP)
class GecAgentLoop(SingleTurnAgentLoop):
    """Single-turn sampling followed by EDGE-GRPO's Guided Error Correction (see module docstring).

    verl builds one loop object per trajectory; the run's setup is shared through ``_setup`` (keyed by
    the identity of verl's config object, which a worker keeps for its lifetime).
    """

    _setup: Optional[_RunSetup] = None

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        setup = GecAgentLoop._setup
        if setup is None or setup.config is not self.config:
            setup = GecAgentLoop._setup = self._make_setup()
        self.gec = setup.gec
        self.reward_fn = setup.reward_fn
        self.eos_ids = setup.eos_ids
        self.eos_id = min(setup.eos_ids)

    def _make_setup(self) -> _RunSetup:
        gec = check_gec_supported(self.config)
        if not gec.enable:
            raise ValueError(
                "A training row selects the edge_gec agent loop (agent_name) but GEC is off: set "
                "algorithm.edge_gec.enable=True, or train on data without agent_name=edge_gec."
            )
        from verl.trainer.ppo.reward import get_custom_reward_fn

        reward_fn = get_custom_reward_fn(self.config)
        if reward_fn is None:
            raise ValueError("edge_gec grades responses with reward.custom_reward_function; set its path and name.")
        eos = self.tokenizer.eos_token_id
        check_budget(gec, int(self.response_length), len(self._encode(gec.reflection_phrase)))
        return _RunSetup(self.config, gec, reward_fn, frozenset(eos if isinstance(eos, (list, tuple)) else [eos]))

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
        index = sample_index(kwargs)
        if self.gec.first_sample_tokens is not None:  # room left in response_length for the correction
            sampling_params = {**sampling_params, "max_tokens": self.gec.first_sample_tokens}
        started = time.perf_counter()
        output = await super().run(sampling_params, **kwargs)
        sample_seconds = time.perf_counter() - started
        original_length = len(output.response_ids)
        original_score = await self._grade(list(output.response_ids), kwargs)
        correct = original_score > self.gec.correct_threshold
        group = [correct]
        if self.gec.scope == "all_wrong_groups":
            group = await group_rendezvous().wait_for_group(
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
            prompt_fits=self.gec.max_prompt_tokens is None or len(output.prompt_ids) < self.gec.max_prompt_tokens,
        )
        branch, reason, correction_seconds, correction = decision.branch, decision.reason, 0.0, None
        if decision.branch is not None:
            started = time.perf_counter()
            correction = await self._apply(decision.branch, output, sampling_params, answer, solution)
            correction_seconds = time.perf_counter() - started
            if correction is None:
                branch, reason = None, DOES_NOT_FIT
            else:
                output.response_ids = correction.response_ids
                output.response_mask = [1] * len(correction.response_ids)
                output.response_logprobs = None
        kept = correction or _Correction(list(output.response_ids), 0, 0)  # none applied: as sampled
        record = CorrectionRecord(
            branch=branch,
            reason=reason,
            fallback=decision.fallback,
            original_correct=correct,
            original_score=original_score,
            original_length=original_length,
            injected_start=kept.injected_start,
            injected_end=kept.injected_end,
            all_wrong_group=not any(group),
            prompt_length=len(output.prompt_ids),
            sample_seconds=sample_seconds,
            correction_seconds=correction_seconds,
            continuation_tokens=kept.continuation_tokens,
            continuation_budget=kept.continuation_budget,
            continuation_requested=self.gec.continuation_tokens if branch == REGENERATE else None,
        )
        output.reward_score = None  # verl's reward loop scores the final response
        output.extra_fields[GEC_INFO_KEY] = record.to_dict()
        return output

    async def _apply(
        self, branch: str, output: AgentLoopOutput, sampling_params: dict, answer: str, solution: str
    ) -> Optional[_Correction]:
        """The corrected response (see ``_Correction``), or None if it cannot fit.

        Everything stays within rollout.response_length. With ``first_sample_tokens`` set (and
        response_length sized for it, ``check_budget``), the sampled body is at most that long, so a
        response truncated at its cap still gets the whole continuation budget (the reference's layout).
        """
        limit = self.response_length
        body = list(output.response_ids)
        if body and body[-1] in self.eos_ids:
            body = body[:-1]
        if branch == REPLACE_SOLUTION:
            tokens = self._encode(solution) + [self.eos_id]
            return _Correction(tokens, 0, len(tokens)) if len(tokens) <= limit else None
        if branch == INJECT_ANSWER:
            suffix = self._encode(injected_answer_text(answer, self.gec.answer_template)) + [self.eos_id]
            if len(suffix) > limit:
                return None
            body = body[: limit - len(suffix)]
            return _Correction(body + suffix, len(body), len(body) + len(suffix))
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
        return _Correction(body + phrase + continuation, len(body), len(body) + len(phrase), len(continuation), budget)
