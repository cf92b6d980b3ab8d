"""The reward file through OpenRLHF 0.11.2's own SingleTurnAgentExecutor and its conversion to experiences."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

import pytest

from edge_verl.openrlhf import reward_func
from edge_verl.openrlhf.options import ENV_VAR, OpenRlhfOptions, RewardOptions, read_options, run_options
from edge_verl.openrlhf.train_ppo_ray import REWARD_FILE


class ScriptedEngine:
    """vLLM's place: returns the scripted response text (as tokens) of each call, in order."""

    def __init__(self, tokenizer, responses, finish_reason="stop"):
        self.tokenizer, self.responses, self.finish_reason, self.prompts = tokenizer, list(responses), finish_reason, []

    async def generate(self, token_ids, params, multi_modal_data=None):
        self.prompts.append(list(token_ids))
        ids = self.tokenizer.encode(self.responses.pop(0)) + [self.tokenizer.eos_token_id]
        output = SimpleNamespace(token_ids=ids[: params.max_tokens], text="", finish_reason=self.finish_reason, logprobs=None)
        return SimpleNamespace(outputs=[output])


def params(**overrides):
    values = {"temperature": 0.6, "max_tokens": None, "logprobs": None, **overrides}
    return SimpleNamespace(**values)


def test_response_is_the_text_after_the_prompt_without_special_tokens():
    prompt = "<|im_start|>system\nPlease reason step by step, and put your final answer within \\boxed{}.<|im_end|>\n"
    prompt += "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"
    assert reward_func.response_from_query(prompt + "It is \\boxed{4}.<|im_end|>", prompt) == "It is \\boxed{4}."
    # A prompt OpenRLHF truncated from the left is found by its last 64 characters.
    assert reward_func.response_from_query(prompt[40:] + "\\boxed{4}</s>", prompt) == "\\boxed{4}"
    assert reward_func.response_from_query("unrelated \\boxed{4}", prompt) is None


def test_reward_func_never_raises_and_reports_health_numbers():
    # Hostile inputs: not strings, a missing prompt, binary noise, no gold. Each scores 0 with every health key.
    queries = [None, "p: \\boxed{4}", b"\xff\xfe", "p: \\boxed{4}", "p: " + "{" * 100_000]
    prompts = ["p: ", "not in query", "p: ", "p: ", "p: "]
    labels = ["4", "4", "4", None, "4"]
    result = reward_func.reward_func(queries, prompts, labels)
    assert result["rewards"].tolist() == [0.0] * 5
    logs = result["extra_logs"]
    assert all(isinstance(value, float) for value in logs.values())
    # Three of five queries give no response: None and bytes are not text, one lacks its prompt: 3/5.
    assert logs[reward_func.PROMPT_NOT_FOUND] == pytest.approx(3 / 5)
    assert logs[reward_func.UNAVAILABLE] == 0.0


def test_reward_file_through_openrlhf_single_turn_executor(openrlhf_modules, tokenizer):
    agent = openrlhf_modules("openrlhf.utils.agent")
    samples = openrlhf_modules("openrlhf.trainer.ppo_utils.samples_generator")
    executor = agent.SingleTurnAgentExecutor(REWARD_FILE)  # OpenRLHF loads the file by path
    assert executor.reward_func.__module__ == "reward_func"
    prompt = "Q: 2+2? A:"
    responses = ["I think \\boxed{5}", "so \\boxed{4}"]
    engine = ScriptedEngine(tokenizer, responses)
    outputs = [asyncio.run(executor.execute(prompt, "4", params(), 64, tokenizer, engine)) for _ in responses]
    assert [output["reward"].tolist() for output in outputs] == [[0.0], [1.0]]
    assert outputs[1]["extra_logs"]["edge_verl/grader/caller"] == 1.0
    generator = samples.SamplesGenerator.__new__(samples.SamplesGenerator)
    experience = generator._process_response_into_experience(outputs[1], max_len=64)
    # OpenRLHF's conversion: one sample, reward and score tensors of shape (1,), each log a (1,) tensor.
    assert experience.rewards.tolist() == [1.0] and experience.scores.tolist() == [1.0]
    assert experience.info["edge_verl/grader/caller"].tolist() == [1.0]
    # The trained span is the response: len("so \boxed{4}") = 12 characters + EOS = 13 tokens.
    assert int(experience.action_mask.sum()) == 13


def test_options_file_is_validated_naming_the_bad_value(tmp_path, monkeypatch):
    path = tmp_path / "options.json"
    path.write_text(json.dumps({"reward": {"format_policy": "loose"}}))
    with pytest.raises(ValueError, match=r"format_policy='loose'.*strict"):
        read_options(str(path))
    path.write_text(json.dumps({"gepo": {"alpha_low": 0.1, "alpha_high": 0.2}}))
    with pytest.raises(ValueError, match="alpha_high=0.2 must be < gepo.alpha_low=0.1"):
        read_options(str(path))
    path.write_text(json.dumps({"rewards": {}}))
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['rewards'\]"):
        read_options(str(path))
    path.write_text(json.dumps({"reward": {"timeout_s": 2}}))
    monkeypatch.setenv(ENV_VAR, str(path))
    assert run_options().reward == RewardOptions(timeout_s=2.0)
    assert read_options(None) == OpenRlhfOptions()
