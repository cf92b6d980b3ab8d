"""verl's rollout as the plugin shapes it: a seed per response for every agent loop, and Guided Error Correction
as the agent loop ``edge_gec``. Imported by the plugin once verl's agent-loop module exists (``plugin.py``).

**A seed per response** (``algorithm.edge_seeding``, ``config.SeedingConfig``). ``AgentLoopWorker._run_agent_loop``
(both trainers; every agent loop, GEC's included) starts one response. For a seeded run the wrapper gives it the
request's ``seed`` sampling parameter, ``config.response_seed`` of (``rollout.seed``, validation or training, the
global step, the prompt's identity, the response's index in its group), and hands the prompt's key to the loop
(``config.PROMPT_KEY_FIELD``), which v1 stores with the sample (the v1 trainer's adapter orders the update batch by
it, ``v1_trainer.wrap_replay_buffer_sample``). The prompt's identity is verl's own row identity, ``data_source`` and
``extra_info.index`` (verl's ``index`` column), with the prompt's messages, so that rows without an index still
differ. The response's index is v1's ``session_id`` or, on the legacy trainer, the column
``LegacyAdapter.generate_sequences`` adds before verl splits the batch over agent-loop workers. A run that does
not ask for it (``run.sampling_seed`` is None) gets verl's function untouched.

**GEC** (``GecAgentLoop``): verl puts its rollout servers to sleep as soon as sampling ends, so a post-processor
that must generate again lives INSIDE the rollout, as an agent loop. Per response it: samples like the single-turn
loop; grades the response with the run's own reward function; asks ``edge_verl.algorithms.gec`` whether and how to
correct it; carries that out on TOKENS (never re-tokenising decoded text); and returns the final tokens with
``reward_score`` unset, so verl's reward loop scores the final response as for any sample (except a placebo
rewarded as gold, below).

Rows opt in through an ``agent_name`` column ("edge_gec") in the TRAINING data; validation rows carry
none and use verl's default loop, so validation is never corrected.

Token layout of a corrected response (all of it is trained, response_mask = 1; "injected" = not sampled;
"body" = the first sample without its trailing end tokens):
- regenerate:       body + phrase + continuation (sampled from prompt + body + phrase; ends in EOS unless cut)
- inject_answer:    body + answer text + EOS
- replace_solution: reference solution + EOS
With ``edge_gec.first_attempt=drop`` the body is empty: the continuation is sampled from prompt + phrase,
and the injected span starts at 0. The body is cut, never the injected text, so that every layout stays
within rollout.response_length.

End tokens: a chat model's sample may end in any of its end tokens (Qwen2.5: <|im_end|> and
<|endoftext|>). The body drops every trailing id of verl's EOS set (``eos_token_ids``: the tokenizer's
eos_token_id and the model's generation-config eos_token_id, read as verl's HFModelConfig reads them) and
every trailing special token, as the reference's decoding with skip_special_tokens did. The EOS this loop
appends is ONE id: the tokenizer's eos_token_id (the first of the set; the generation config's first
only for a tokenizer without one).

Answers (``edge_gec.answer_source``): "gold" injects the row's own answer (``extra_info.answer``, else the
ground truth) and reference solution (``extra_info.solution``). "placebo" injects another training
problem's: the run's setup reads the problems of ``data.train_files`` into a pool (``read_placebo_pool``),
and per response ``algorithms.gec.placebo_candidates`` orders at most PLACEBO_CANDIDATES of them (keyed on the
response's seed, without replacement, none with this row's answer); the first whose injected answer text (and, for
replace_solution, whose solution) the run's reward function grades wrong against THIS row's ground truth
is used, and recorded as ``placebo_index``. If none does, the response stays as sampled (reason
"no_placebo"). The branch drawn is the gold run's (the placebo draw has its own random stream); a
regeneration injects no answer and is the same under both sources.

Placebo rewards (``edge_gec.placebo_reward``): "graded" leaves the placebo response to verl's reward loop,
which grades it against this row's gold (0). "as_gold" rewards it as EDGE would have rewarded the same
correction: the loop builds the gold twin (``_apply`` with this row's own answer and solution, on the same
first sample; the placebo is carried out only where the twin fits, as in the gold run), grades it with the
run's reward function on the inputs verl's naive reward manager builds, and sets the response's
``reward_score`` and ``extra_fields["reward_extra_info"]`` as that manager would (``naive_reward``). verl's
agent loop skips its reward loop for a response whose ``reward_score`` is set, and its batch takes every
response's extra-info keys from the first one's, so the keys must be the reward loop's; the preflight
(``check_placebo_reward``) admits only the setting in which that holds: verl's ``naive`` manager, reward
scored in the agent loop (no reward model). ``internals.CORE`` checks the verl lines relied on.

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
import json
import time
import weakref
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterable, Optional
from uuid import uuid4

from edge_verl.algorithms import GEC_AGENT_LOOP
from edge_verl.algorithms.gec import (
    DOES_NOT_FIT, GEC_INFO_KEY, NO_PLACEBO, REGENERATE, REPLACE_SOLUTION, CorrectionRecord, GecConfig,
    PlaceboProblem, decide_correction, decision_rng, injected_answer_text, placebo_candidates, placebo_rng,
)
from edge_verl.algorithms.gec_layout import correction_layout, injected_text
from edge_verl.algorithms.gec_rendezvous import GroupRendezvous
from edge_verl.config import PROMPT_KEY_FIELD, SAMPLE_INDEX_COLUMN, derived_seed, prompt_key, response_seed
from edge_verl.integration.internals import CORE
from edge_verl.integration.preflight import read_placebo_pool
from edge_verl.integration.run import sampling_seed
from edge_verl.integration.run_checks import check_budget, check_gec_supported
from edge_verl.reward.normalize import normalise_answer
from edge_verl.reward.score import gold_answers



# --- a seed per response (every agent loop) ---------------------------------------------------------------------


def sample_index(kwargs: dict) -> Optional[int]:
    """The response's index within its group: v1's ``session_id``, or the legacy trainer's column (None: neither)."""
    for key in ("session_id", SAMPLE_INDEX_COLUMN):
        if kwargs.get(key) is not None:
            return int(kwargs[key])
    return None


def _plain(value: Any) -> Any:
    """A row value as JSON-able Python (numpy arrays and scalars, tensors, nested containers)."""
    if hasattr(value, "tolist"):
        return _plain(value.tolist())
    if isinstance(value, dict):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value if isinstance(value, (str, int, float, bool)) or value is None else str(value)


def seeded_response(run_seed: int, *, validate: bool, step: int, kwargs: dict) -> tuple[int, int]:
    """(prompt key, the response's sampling seed) of the response verl is about to start with ``kwargs`` (the
    row's columns, and its index in the group)."""
    index = sample_index(kwargs)
    if index is None:
        raise RuntimeError(
            "algorithm.edge_seeding: a response reached the agent loop with neither session_id (v1 trainer) nor "
            f"{SAMPLE_INDEX_COLUMN} (legacy trainer, added by the plugin before the batch is split): its seed "
            "would not be a function of its identity."
        )
    key = prompt_key(run_seed, validate=validate, step=step, data_source=str(kwargs.get("data_source")),
                     index=_plain(kwargs.get("index")), prompt=json.dumps(_plain(kwargs.get("raw_prompt")), sort_keys=True))
    return key, response_seed(key, index)


# GEC's regenerate branch continues a response with a request of its own (``GecAgentLoop``, below).
CONTINUATION_SALT = "gec_continuation"


def continuation_seed(sampling_params: dict, salt: str) -> Optional[int]:
    """The seed of a further request made for the same response (GEC's continuation), or None when the
    response itself carries no seed."""
    seed = sampling_params.get("seed")
    return None if seed is None else derived_seed(int(seed), salt)


_RUN_SEEDS: dict[int, Optional[int]] = {}


def _run_seed_of(worker: Any) -> Optional[int]:
    """The worker's run's sampling seed, parsed once per config object (a worker keeps its config for life)."""
    config = worker.config
    if id(config) not in _RUN_SEEDS:
        _RUN_SEEDS.clear()
        _RUN_SEEDS[id(config)] = sampling_seed(config)
    return _RUN_SEEDS[id(config)]


def wrap_run_agent_loop(original: Callable) -> Callable:
    def _run_agent_loop(self, sampling_params, trajectory, *args, **kwargs):
        run_seed = _run_seed_of(self)
        if run_seed is None:
            return original(self, sampling_params, trajectory, *args, **kwargs)
        key, seed = seeded_response(run_seed, validate=bool(trajectory["validate"]), step=int(trajectory["step"]), kwargs=kwargs)
        return original(self, {**sampling_params, "seed": seed}, trajectory, *args, **{**kwargs, PROMPT_KEY_FIELD: key})

    return _run_agent_loop


def install_agent_loop(module: Any) -> None:
    CORE.wrap(module, "AgentLoopWorker._run_agent_loop", wrap_run_agent_loop)


# --- GEC's agent loop -------------------------------------------------------------------------------------------

# verl's agent-loop module is imported only here, below the seeding half: importing it runs the plugin's hook
# (``plugin.patch_agent_loop``), which installs ``install_agent_loop`` of this module, so that function exists
# even when this module is the first to import verl's agent loop.
from verl.experimental.agent_loop.agent_loop import AgentLoopOutput, register  # noqa: E402
from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop  # noqa: E402


def naive_reward(result: Any) -> tuple[Any, dict]:
    """``(reward_score, reward_extra_info)`` of a reward function's ``result``, as verl 0.9.1's naive reward
    manager makes them (verl/experimental/reward_loop/reward_manager/naive.py:86-99): a dict's "score" and every
    one of its keys ("score" included); a number and ``{"acc": number}``."""
    if isinstance(result, dict):
        return result["score"], dict(result)
    return result, {"acc": result}


def response_identity(sampling_params: dict, kwargs: dict) -> tuple:
    """What GEC's draws for this response are keyed on: its sampling seed (``algorithm.edge_seeding``, set by
    ``wrap_run_agent_loop`` from the run's seed, the step, the prompt's identity and the sample index), or, in a run
    that turned seeding off, verl's uid and the sample index (then not reproducible: verl's uid is random)."""
    if sampling_params.get("seed") is not None:
        return (int(sampling_params["seed"]),)
    index = sample_index(kwargs)
    if index is None:
        raise RuntimeError(
            f"edge_gec got neither session_id (v1 trainer) nor {SAMPLE_INDEX_COLUMN} (legacy trainer, added by the "
            "edge_verl plugin when algorithm.edge_gec.enable=True): its decisions would depend on the worker split."
        )
    return str(kwargs.get("uid", "")), index


# verl's AgentLoopWorker builds one loop object per trajectory (``_run_agent_loop``), so siblings share no
# loop object; they share the worker's event loop, on which ``generate_sequences`` runs every trajectory of
# its batch as a task. Hence one rendezvous per event loop, held weakly: it goes with its loop, and between
# rollouts it holds no group (see GroupRendezvous).
_RENDEZVOUS_BY_LOOP: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, GroupRendezvous]" = weakref.WeakKeyDictionary()


def group_rendezvous() -> GroupRendezvous:
    """The running event loop's rendezvous (created on first use)."""
    loop = asyncio.get_running_loop()
    rendezvous = _RENDEZVOUS_BY_LOOP.get(loop)
    if rendezvous is None:
        rendezvous = _RENDEZVOUS_BY_LOOP[loop] = GroupRendezvous()
    return rendezvous


def _token_ids(value: Any) -> list[int]:
    """An ``eos_token_id`` setting (None, an int, or a list of ints) as a list."""
    if value is None:
        return []
    return [int(token) for token in value] if isinstance(value, Iterable) else [int(value)]


def eos_token_ids(tokenizer: Any, model_config: Any) -> tuple[int, ...]:
    """The model's end-of-sequence ids as verl's rollout knows them, the tokenizer's first.

    verl's HFModelConfig keeps the tokenizer's ``eos_token_id`` (it overrides the HF config's with it) and
    the model's generation config, loaded with ``verl.utils.model.get_generation_config`` from the model's
    local config folder; the rollout engines also stop on the generation config's ``eos_token_id`` (an
    int or a list: Qwen2.5's lists <|endoftext|> and <|im_end|>). ``model_config`` is
    ``actor_rollout_ref.model``; without a path (a unit test's config) the tokenizer's id stands alone.
    """
    ids = _token_ids(tokenizer.eos_token_id)
    path = model_config.get("hf_config_path", None) or model_config.get("path", None)
    if path:
        from verl.utils.fs import copy_to_local
        from verl.utils.model import get_generation_config

        generation = get_generation_config(
            copy_to_local(str(path)), trust_remote_code=bool(model_config.get("trust_remote_code", False))
        )
        if generation is not None:
            ids += [token for token in _token_ids(generation.eos_token_id) if token not in ids]
    if not ids:
        raise ValueError(
            f"edge_gec: no end-of-sequence id for the model at {path!r}: neither its tokenizer nor its generation "
            "config sets eos_token_id, and GEC ends an injected answer or solution with one."
        )
    return tuple(ids)


@dataclass(frozen=True)
class _Correction:
    """A correction carried out: the final response tokens, the [start, end) span of its injected tokens,
    for a regeneration the continuation's length and the max_tokens it was given, the placebo's row, and for
    a placebo rewarded as gold its twin's (reward_score, reward_extra_info) (``naive_reward``)."""

    response_ids: list[int]
    injected_start: int
    injected_end: int
    continuation_tokens: Optional[int] = None
    continuation_budget: Optional[int] = None
    placebo_index: Optional[int] = None
    twin_reward: Optional[tuple[Any, dict]] = None


@dataclass(frozen=True)
class _RunSetup:
    """Per-run work done once per agent-loop worker process: options, reward function, end tokens (verl's
    EOS ids in order, the ids stripped from a first sample's end) and the placebo pool (empty for gold)."""

    config: Any
    gec: GecConfig
    reward_fn: Callable
    eos_ids: tuple[int, ...]
    end_ids: frozenset[int]
    placebo_pool: tuple[PlaceboProblem, ...]


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
        self.eos_id = setup.eos_ids[0]  # the tokenizer's eos: what an injected answer or solution ends with
        self.end_ids = setup.end_ids
        self.placebo_pool = setup.placebo_pool

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
        check_budget(gec, int(self.response_length), len(self._encode(gec.reflection_phrase)))
        eos_ids = eos_token_ids(self.tokenizer, self.config.actor_rollout_ref.get("model", None) or {})
        end_ids = frozenset(eos_ids) | frozenset(self.tokenizer.all_special_ids)
        pool = read_placebo_pool(self.config.data.get("train_files", None)) if gec.answer_source == "placebo" else ()
        return _RunSetup(self.config, gec, reward_fn, eos_ids, end_ids, pool)

    async def _grade(self, response_ids: list[int], kwargs: dict) -> float:
        """The run's reward for ``response_ids``, decoded as verl's reward loop decodes them."""
        return await self._grade_text(self.tokenizer.decode(response_ids, skip_special_tokens=True), kwargs)

    async def _grade_text(self, text: str, kwargs: dict) -> float:
        """The run's reward for ``text`` as a response to this row."""
        result = await self._reward_result(text, kwargs, kwargs.get("extra_info"))
        return float(result["score"] if isinstance(result, dict) else result)

    async def _reward_result(self, text: str, kwargs: dict, extra_info: Any) -> Any:
        """What the run's reward function returns for ``text`` as a response to this row (a sync reward
        function runs in an executor thread)."""
        reward_model = kwargs.get("reward_model") or {}
        call = functools.partial(
            self.reward_fn,
            data_source=kwargs.get("data_source"),
            solution_str=text,
            ground_truth=reward_model.get("ground_truth"),
            extra_info=extra_info,
        )
        if inspect.iscoroutinefunction(getattr(self.reward_fn, "func", self.reward_fn)):
            return await call()
        return await asyncio.get_running_loop().run_in_executor(None, call)

    async def _reward_as_verl(self, response_ids: list[int], output: AgentLoopOutput, kwargs: dict) -> tuple[Any, dict]:
        """The (reward_score, reward_extra_info) verl's naive reward manager gives ``response_ids`` as this row's
        response (``naive_reward``), from the run's reward function called as that manager calls it: the text
        decoded without special tokens, the row's extra_info updated with the output's extra_fields (GEC's
        record is not among them yet), num_turns and the row's rollout reward scores (naive.py:44-52)."""
        extra_info = {
            **(kwargs.get("extra_info") or {}),
            **output.extra_fields,
            "num_turns": output.num_turns,
            "rollout_reward_scores": kwargs.get("reward_scores", {}),
        }
        text = self.tokenizer.decode(response_ids, skip_special_tokens=True)
        return naive_reward(await self._reward_result(text, kwargs, extra_info))

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        uid = str(kwargs.get("uid", ""))
        identity = response_identity(sampling_params, kwargs)
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
                uid, sample_index(kwargs), int(self.rollout_config.n), correct, self.gec.group_timeout_s
            )
        extra_info = kwargs.get("extra_info") or {}
        answer = str(extra_info.get("answer") or (kwargs.get("reward_model") or {}).get("ground_truth") or "")
        solution = str(extra_info.get("solution") or "")
        decision = decide_correction(
            correct=correct,
            group_correct=group,
            rng=decision_rng(self.gec.seed, *identity),
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
            correction, reason = await self._carry_out(
                decision.branch, output, sampling_params, answer, solution, identity, kwargs
            )
            correction_seconds = time.perf_counter() - started
            if correction is None:
                branch = None
            else:
                output.response_ids = correction.response_ids
                output.response_mask = [1] * len(correction.response_ids)
                output.response_logprobs = None
        kept = correction or _Correction(list(output.response_ids), 0, 0)  # none applied: as sampled
        twin = kept.twin_reward
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
            placebo_index=kept.placebo_index,
            twin_score=None if twin is None else float(twin[0]),
        )
        if twin is None:
            output.reward_score = None  # verl's reward loop scores the final response
        else:  # placebo_reward=as_gold: verl's reward loop skips a response whose reward_score is set
            output.reward_score, output.extra_fields["reward_extra_info"] = twin
        output.extra_fields[GEC_INFO_KEY] = record.to_dict()
        return output

    async def _carry_out(
        self, branch: str, output: AgentLoopOutput, sampling_params: dict, answer: str, solution: str,
        identity: tuple, kwargs: dict,
    ) -> tuple[Optional[_Correction], str]:
        """The drawn correction carried out and its reason: "corrected", or (None, NO_PLACEBO / DOES_NOT_FIT).

        A placebo rewarded as gold first builds its gold twin (``answer`` and ``solution`` are this row's):
        where the twin does not fit, the gold run leaves the response as sampled, and so does the placebo."""
        if self.gec.answer_source != "placebo" or branch == REGENERATE:  # a regeneration injects no answer
            correction = await self._apply(branch, output, sampling_params, answer, solution)
            return (None, DOES_NOT_FIT) if correction is None else (correction, "corrected")
        twin = None
        if self.gec.placebo_reward == "as_gold":
            twin = await self._apply(branch, output, sampling_params, answer, solution)
            if twin is None:
                return None, DOES_NOT_FIT
        lent = await self._placebo(branch, answer, identity, kwargs)
        if lent is None:
            return None, NO_PLACEBO
        correction = await self._apply(branch, output, sampling_params, lent.answer, lent.solution)
        if correction is None:
            return None, DOES_NOT_FIT
        twin_reward = None if twin is None else await self._reward_as_verl(twin.response_ids, output, kwargs)
        return replace(correction, placebo_index=lent.row, twin_reward=twin_reward), "corrected"

    async def _placebo(self, branch: str, answer: str, identity: tuple, kwargs: dict) -> Optional[PlaceboProblem]:
        """The first of this response's placebo candidates (``placebo_candidates``) whose injected answer
        text, and for replace_solution whose solution too, the run's reward grades wrong against this row's
        ground truth; None when none of them does."""
        ground_truth = (kwargs.get("reward_model") or {}).get("ground_truth")
        gold_keys = {normalise_answer(text) for text in (answer, *gold_answers(ground_truth))}
        rng = placebo_rng(self.gec.seed, *identity)
        candidates = placebo_candidates(self.placebo_pool, gold_keys, rng, need_solution=branch == REPLACE_SOLUTION)
        for candidate in candidates:
            problem = self.placebo_pool[candidate]
            texts = [injected_answer_text(problem.answer, self.gec.answer_template)]
            if branch == REPLACE_SOLUTION:
                texts.append(problem.solution)
            if await self._all_graded_wrong(texts, kwargs):
                return problem
        return None

    async def _all_graded_wrong(self, texts: list[str], kwargs: dict) -> bool:
        """Every text grades at most ``correct_threshold`` against this row (stops at the first that does not)."""
        for text in texts:
            if await self._grade_text(text, kwargs) > self.gec.correct_threshold:
                return False
        return True

    async def _apply(
        self, branch: str, output: AgentLoopOutput, sampling_params: dict, answer: str, solution: str
    ) -> Optional[_Correction]:
        """The corrected response (see ``_Correction``), or None if it cannot fit: ``correction_layout``'s
        (shared with OpenRLHF's executor), a regeneration's continuation sampled after it.

        Everything stays within rollout.response_length. With ``first_sample_tokens`` set (and
        response_length sized for it, ``check_budget``), the sampled body is at most that long, so a
        response truncated at its cap still gets the whole continuation budget (the reference's layout).
        The body is the first sample without its trailing end tokens, or nothing with first_attempt=drop.
        """
        injected = self._encode(injected_text(branch, self.gec, answer, solution))
        layout = correction_layout(branch, output.response_ids, injected, config=self.gec, eos_id=self.eos_id,
                                   end_ids=self.end_ids, limit=self.response_length)
        if layout is None:
            return None
        if layout.continuation_budget is None:  # no continuation to sample: the layout is the response
            return _Correction(layout.tokens, layout.injected_start, layout.injected_end)
        budget = layout.continuation_budget
        params = {**sampling_params, "max_tokens": budget, "logprobs": False}
        seed = continuation_seed(sampling_params, CONTINUATION_SALT)
        if seed is not None:  # a stream of its own: the first sample's seed would replay its draws
            params["seed"] = seed
        continued = await self.server_manager.generate(
            request_id=uuid4().hex, prompt_ids=list(output.prompt_ids) + layout.tokens, sampling_params=params
        )
        continuation = list(continued.token_ids)[:budget]
        return _Correction(layout.tokens + continuation, layout.injected_start, layout.injected_end, len(continuation), budget)
