"""The GEC agent file through OpenRLHF 0.11.2's own engine actor: its loader, ``generate_responses`` (a
prompt's n samples as n concurrent ``execute`` calls), its SingleTurnAgentExecutor and its conversion to
experiences. vLLM's engine is replaced by a scripted one (no model on this CPU)."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

import pytest

from edge_verl.algorithms.gec import ANSWER_TEMPLATE, REFLECTION_PHRASE
from edge_verl.openrlhf.options import ENV_VAR
from edge_verl.openrlhf.rollout_labels import GEC_AGENT_FILE, RolloutLabel

PROMPT = "Q: 2+2? A:"
OTHER = "Q: 3+3? A:"


class ScriptedLLM:
    """vLLM's AsyncLLMEngine: first samples in order from ``first[prompt]``, a continuation for prompts that
    end with the reflection phrase."""

    def __init__(self, tokenizer, first, continuation="so \\boxed{4}"):
        self.tokenizer, self.first, self.continuation, self.calls = tokenizer, {k: list(v) for k, v in first.items()}, continuation, []

    async def generate(self, prompt, params, request_id):
        text = "".join(map(chr, prompt["prompt_token_ids"]))
        self.calls.append(text)
        if text.endswith(REFLECTION_PHRASE):
            reply = self.continuation
        else:
            reply = next(value.pop(0) for key, value in self.first.items() if text.endswith(key))
        ids = (self.tokenizer.encode(reply) + [1])[: params.max_tokens]
        await asyncio.sleep(0)  # let the other samples run, as a real engine would
        yield SimpleNamespace(outputs=[SimpleNamespace(token_ids=ids, text=reply, finish_reason="stop", logprobs=None)])


@pytest.fixture
def engine(openrlhf_modules, tmp_path, monkeypatch):
    """``make(gec_options, first)``: OpenRLHF's RolloutRayActor with the GEC executor loaded by OpenRLHF."""
    vllm_engine = openrlhf_modules("openrlhf.trainer.ray.vllm_engine")

    def make(gec, first, tokenizer):
        path = tmp_path / f"options{len(list(tmp_path.iterdir()))}.json"
        path.write_text(json.dumps({"gec": {"n_samples_per_prompt": 4, "rollout_temperature": 0.6, **gec}}))
        monkeypatch.setenv(ENV_VAR, str(path))
        actor = vllm_engine.RolloutRayActor.__new__(vllm_engine.RolloutRayActor)
        actor.executor = vllm_engine._load_agent_executor(GEC_AGENT_FILE)
        actor.llm = ScriptedLLM(tokenizer, first)
        actor._mm_pad_token_ids = None
        return actor

    return make


def run(actor, tokenizer, prompts_labels, temperature=0.6, logprobs=None, evaluation=False, mark=True):
    """Each (prompt, label) as one ``generate_responses`` call (one Ray call), all concurrent on the actor; the
    labels marked as the launcher's samples generator marks them (the i-th training prompt, or evaluation)."""

    def label_of(i, label):
        return RolloutLabel(label, evaluation, -1 if evaluation else i, 4) if mark else label

    async def calls():
        return await asyncio.gather(*[
            actor.generate_responses(prompt, label_of(i, label),
                                     SimpleNamespace(temperature=temperature, max_tokens=None, logprobs=logprobs),
                                     200, tokenizer, num_samples=4)
            for i, (prompt, label) in enumerate(prompts_labels)
        ])

    return asyncio.run(calls())


def response_text(output, tokenizer):
    (start, _), *_ = output["action_ranges"] or [(len(output["observation_tokens"]), 0)]
    return tokenizer.decode(output["observation_tokens"][len(PROMPT):])


def test_inject_answer_appends_the_gold_and_trains_every_token(engine, tokenizer):
    actor = engine({"probabilities": [0, 1, 0]}, {PROMPT: ["\\boxed{5}", "\\boxed{4}", "\\boxed{5}", "\\boxed{4}"]}, tokenizer)
    (outputs,) = run(actor, tokenizer, [(PROMPT, "4")])
    injected = ANSWER_TEMPLATE.replace("{answer}", "4")
    # Samples 0 and 2 were wrong: body (EOS stripped) + the paper's sentence + EOS; 1 and 3 kept as sampled.
    assert [response_text(o, tokenizer) for o in outputs] == [
        "\\boxed{5}" + injected + "<|im_end|>", "\\boxed{4}<|im_end|>", "\\boxed{5}" + injected + "<|im_end|>", "\\boxed{4}<|im_end|>",
    ]
    assert [o["reward"] for o in outputs] == [1.0, 1.0, 1.0, 1.0]
    assert [o["extra_logs"]["edge_verl/gec/original_score"] for o in outputs] == [0.0, 1.0, 0.0, 1.0]
    # surrogate: the whole response is trained, (prompt length, total length).
    assert all(o["action_ranges"] == [(len(PROMPT), len(o["observation_tokens"]))] for o in outputs)
    assert outputs[0]["extra_logs"]["edge_verl/gec/injected_tokens"] == len(injected) + 1


def test_masked_injected_loss_leaves_injected_tokens_out_of_the_trained_spans(engine, tokenizer, openrlhf_modules):
    samples = openrlhf_modules("openrlhf.trainer.ppo_utils.samples_generator")
    actor = engine({"probabilities": [0, 1, 0], "injected_loss": "masked"}, {PROMPT: ["\\boxed{5}"] * 4}, tokenizer)
    (outputs,) = run(actor, tokenizer, [(PROMPT, "4")])
    body = len("\\boxed{5}")  # 9 tokens
    assert outputs[0]["action_ranges"] == [(len(PROMPT), len(PROMPT) + body)]
    generator = samples.SamplesGenerator.__new__(samples.SamplesGenerator)
    experience = generator._process_response_into_experience(outputs[0], max_len=200)
    # OpenRLHF's action mask: only the 9 sampled tokens; the reward is the corrected response's (1).
    assert int(experience.action_mask.sum()) == body and experience.rewards.tolist() == [1.0]


def test_regenerate_continues_after_the_phrase_and_replace_solution_uses_the_label(engine, tokenizer):
    actor = engine({"force_regenerate": True}, {PROMPT: ["\\boxed{5}"] * 4}, tokenizer)
    (outputs,) = run(actor, tokenizer, [(PROMPT, "4")])
    assert response_text(outputs[0], tokenizer) == "\\boxed{5}" + REFLECTION_PHRASE + "so \\boxed{4}<|im_end|>"
    assert sum(call.endswith(REFLECTION_PHRASE) for call in actor.llm.calls) == 4  # one continuation per sample
    assert outputs[0]["reward"] == 1.0 and outputs[0]["extra_logs"]["edge_verl/gec/corrected_regenerate"] == 1.0
    label = {"answer": "4", "solution": "2+2 = \\boxed{4}"}
    actor = engine({"probabilities": [0, 0, 1], "first_attempt": "drop"}, {PROMPT: ["\\boxed{5}"] * 4}, tokenizer)
    (outputs,) = run(actor, tokenizer, [(PROMPT, label)])
    assert response_text(outputs[0], tokenizer) == "2+2 = \\boxed{4}<|im_end|>" and outputs[0]["reward"] == 1.0


def test_all_wrong_group_scope_corrects_only_groups_without_a_correct_answer(engine, tokenizer):
    first = {PROMPT: ["\\boxed{5}", "\\boxed{4}", "\\boxed{5}", "\\boxed{5}"], OTHER: ["\\boxed{5}"] * 4}
    actor = engine({"probabilities": [0, 1, 0], "scope": "all_wrong_groups"}, first, tokenizer)
    mixed, all_wrong = run(actor, tokenizer, [(PROMPT, "4"), (OTHER, "6")])  # two prompts at once on one engine
    assert [o["extra_logs"]["edge_verl/gec/corrected"] for o in mixed] == [0.0] * 4
    assert [o["reward"] for o in mixed] == [0.0, 1.0, 0.0, 0.0]
    assert [o["extra_logs"]["edge_verl/gec/corrected"] for o in all_wrong] == [1.0] * 4
    assert [o["extra_logs"]["edge_verl/gec/all_wrong_group"] for o in all_wrong] == [1.0] * 4
    assert [o["reward"] for o in all_wrong] == [1.0] * 4


def test_evaluation_is_never_corrected_at_any_temperature(engine, tokenizer):
    for temperature in (0.6, 0.1):  # the training temperature too: the mark decides, not the temperature
        actor = engine({"probabilities": [0, 1, 0]}, {PROMPT: ["\\boxed{5}"] * 4}, tokenizer)
        (outputs,) = run(actor, tokenizer, [(PROMPT, "4")], temperature=temperature, evaluation=True)
        assert [response_text(o, tokenizer) for o in outputs] == ["\\boxed{5}<|im_end|>"] * 4
        assert [o["reward"] for o in outputs] == [0.0] * 4
        assert [o["extra_logs"]["edge_verl/gec/eval"] for o in outputs] == [1.0] * 4
        assert [o["label"] for o in outputs] == ["4"] * 4  # OpenRLHF's echo is the dataset's label
        assert len(actor.llm.calls) == 4  # no continuation asked for
    # the same call marked as training is corrected (inject_answer with probability 1)
    actor = engine({"probabilities": [0, 1, 0]}, {PROMPT: ["\\boxed{5}"] * 4}, tokenizer)
    (outputs,) = run(actor, tokenizer, [(PROMPT, "4")], temperature=0.6)
    assert [o["reward"] for o in outputs] == [1.0] * 4


def test_an_unmarked_label_is_refused(engine, tokenizer):
    actor = engine({}, {PROMPT: ["\\boxed{5}"] * 4}, tokenizer)
    with pytest.raises(ValueError, match="without edge_verl's rollout mark"):
        run(actor, tokenizer, [(PROMPT, "4")], mark=False)


def test_decisions_follow_the_responses_not_their_arrival_order(engine, tokenizer):
    # The same four responses arriving in two orders: each response gets the same decision (keyed on the group's
    # prompt number and the response's own tokens), so the group's corrected set is the same.
    def decisions(order):
        actor = engine({"probabilities": [0.5, 0.5, 0]}, {PROMPT: order}, tokenizer)
        (outputs,) = run(actor, tokenizer, [(PROMPT, "4")])
        return sorted((response_text(o, tokenizer)[:len(order[0])], o["extra_logs"]["edge_verl/gec/corrected_regenerate"],
                       o["extra_logs"]["edge_verl/gec/corrected_inject_answer"]) for o in outputs), actor
    responses = ["\\boxed{5}", "\\boxed{6}", "\\boxed{7}", "\\boxed{8}"]
    forward, actor = decisions(responses)
    backward, _ = decisions(responses[::-1])
    assert forward == backward
    assert [sampled for sampled, *_ in forward] == sorted(responses)  # each response's own decision, in both orders
    assert {tuple(branch) for _, *branch in forward} == {(1.0, 0.0), (0.0, 1.0)}  # both branches drawn
    assert actor.executor.response_keys.open_groups == frozenset()  # every group's record dropped once named


def test_decisions_are_reproducible_and_rollout_log_probs_are_refused(engine, tokenizer):
    first = {PROMPT: ["\\boxed{5}"] * 4}
    texts = [[response_text(o, tokenizer) for o in run(engine({}, first, tokenizer), tokenizer, [(PROMPT, "4")])[0]] for _ in range(2)]
    assert texts[0] == texts[1]
    actor = engine({}, first, tokenizer)
    with pytest.raises(ValueError, match="is_correction_level off"):
        run(actor, tokenizer, [(PROMPT, "4")], logprobs=1)


def test_untranslated_controls_are_refused_by_name(engine, tokenizer):
    with pytest.raises(ValueError, match="injected_loss='sft' is not available through OpenRLHF"):
        engine({"injected_loss": "sft"}, {}, tokenizer)
    with pytest.raises(ValueError, match=r"probabilities=\[0.5, 0.5, 0.5\] must sum to 1"):
        engine({"probabilities": [0.5, 0.5, 0.5]}, {}, tokenizer)
    for reward in ("as_gold", "graded"):  # a placebo, however rewarded, needs a pool the executor does not have
        with pytest.raises(ValueError, match="answer_source='placebo' is not available through OpenRLHF"):
            engine({"answer_source": "placebo", "placebo_reward": reward}, {}, tokenizer)
    with pytest.raises(ValueError, match="placebo_reward='graded' is read only with edge_gec.answer_source=placebo"):
        engine({"placebo_reward": "graded"}, {}, tokenizer)


def test_a_slow_grade_does_not_hold_up_another_request_s_generation_on_the_same_engine(engine, tokenizer, monkeypatch):
    import threading

    other_generated = threading.Event()

    class SlowerOther(ScriptedLLM):
        async def generate(self, prompt, params, request_id):
            async for reply in super().generate(prompt, params, request_id):
                if "".join(map(chr, prompt["prompt_token_ids"])).endswith(OTHER):
                    await asyncio.sleep(0.05)  # OTHER's samples come back after PROMPT's are being graded
                    other_generated.set()
                yield reply

    actor = engine({"probabilities": [0, 1, 0]}, {PROMPT: ["\\boxed{4}"] * 4, OTHER: ["\\boxed{6}"] * 4}, tokenizer)
    actor.llm = SlowerOther(tokenizer, {PROMPT: ["\\boxed{4}"] * 4, OTHER: ["\\boxed{6}"] * 4})
    # the executor's module as OpenRLHF loaded it (the grade it calls is looked up there)
    executor_globals = type(actor.executor).execute.__globals__
    waited = []
    real_grade = executor_globals["grade_response"]

    def slow_grade(response, label, options):
        # PROMPT's grades wait (up to 10 s) for OTHER's generation: on the event loop they would block it, and it
        # could only finish once every wait had run out
        if label == "4":
            waited.append(other_generated.wait(timeout=10))
        return real_grade(response, label, options)

    monkeypatch.setitem(executor_globals, "grade_response", slow_grade)
    first, second = run(actor, tokenizer, [(PROMPT, "4"), (OTHER, "6")])
    assert waited == [True] * 4, "OTHER's generation finished while PROMPT's grades were in progress"
    assert [o["reward"] for o in first + second] == [1.0] * 8


def test_openrlhfs_samples_generator_marks_evaluation_and_numbers_training_prompts(openrlhf_modules, monkeypatch):
    """OpenRLHF's own SamplesGenerator (generate_samples, generate_eval_samples, _generate_vllm, the dispatch) under
    the launcher's LabellingRollouts, with one scripted engine: what each generate_responses call receives."""
    import sys

    from edge_verl.openrlhf import actors
    from edge_verl.openrlhf.rollout_labels import LabellingRollouts

    samples = openrlhf_modules("openrlhf.trainer.ppo_utils.samples_generator")
    monkeypatch.setattr(sys.modules["ray"], "wait", lambda refs, num_returns=1, timeout=None: (refs[:num_returns], refs[num_returns:]),
                        raising=False)
    sent = []

    def generate_responses(prompt, label, sampling_params, max_length, hf_tokenizer, num_samples, images):
        sent.append((prompt, label))
        return [{"prompt": prompt, "label": label, "observation_tokens": [7, 8, 9], "action_ranges": [(1, 3)], "reward": 0.0,
                 "scores": 0.0, "rollout_log_probs": None} for _ in range(num_samples)]

    engine = SimpleNamespace(get_num_unfinished_requests=SimpleNamespace(remote=lambda: 0),
                             generate_responses=SimpleNamespace(remote=generate_responses))
    args = SimpleNamespace(
        vllm=SimpleNamespace(enable_sleep=False), train=SimpleNamespace(agent_func_path=GEC_AGENT_FILE),
        rollout=SimpleNamespace(batch_size=2, n_samples_per_prompt=3, vllm_generate_batch_size=None),
        algo=SimpleNamespace(dynamic_filtering_enable=False, advantage=SimpleNamespace(is_correction_level="off")),
    )
    train = [("ds", ["a", "b"], ["1", "2"], [None, None]), ("ds", ["c", "d"], ["3", "4"], [None, None])]
    owner = SimpleNamespace(args=args, samples_generator=samples.SamplesGenerator(
        strategy=SimpleNamespace(args=args), prompts_dataloader=train, eval_dataloader=[("math", ["e"], ["5"], [None])],
        tokenizer=None, vllm_engines=[engine]))
    actors.label_rollouts(owner)  # what the launcher's trainer does after OpenRLHF's constructor
    generator = owner.samples_generator
    assert isinstance(generator, LabellingRollouts) and isinstance(generator, samples.SamplesGenerator)
    first, _, _, _ = generator.generate_samples(max_len=100)
    generator.generate_eval_samples(max_len=100, temperature=0.6, n_samples_per_prompt=1)  # the training temperature
    generator.generate_samples(max_len=100)
    assert sent == [
        ("a", RolloutLabel("1", False, 0, 3)), ("b", RolloutLabel("2", False, 1, 3)),
        ("e", RolloutLabel("5", True, -1, 1)),
        ("c", RolloutLabel("3", False, 2, 3)), ("d", RolloutLabel("4", False, 3, 3)),
    ]
    assert len(first) == 6
    # without edge_verl's GEC agent file nothing is marked (another executor or reward file reads plain labels)
    args.train.agent_func_path = None
    plain = SimpleNamespace(args=args, samples_generator=samples.SamplesGenerator.__new__(samples.SamplesGenerator))
    actors.label_rollouts(plain)
    assert type(plain.samples_generator) is samples.SamplesGenerator
