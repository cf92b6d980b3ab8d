"""The launcher runs OpenRLHF 0.11.2's own ``train_ppo_ray`` __main__ (its real argument parser and checks);
Ray and the models are not started on this CPU: the run stops once the launcher's checks have passed."""

from __future__ import annotations

import argparse
import json
import os
import sys
from unittest.mock import MagicMock

import pytest

from edge_verl.openrlhf import actors, train_ppo_ray
from edge_verl.openrlhf.options import CONTENT_ENV_VAR, ENV_VAR, run_options
from tests.openrlhf.conftest import load_launcher


class Checked(Exception):
    """Raised right after the launcher's checks passed on OpenRLHF's parsed arguments."""


@pytest.fixture
def launch(openrlhf_modules, monkeypatch, tmp_path):
    load_launcher(openrlhf_modules)
    # Package re-exports of train_ppo_ray.py's imports (their __init__ files pull in deepspeed / vLLM).
    monkeypatch.setattr(sys.modules["openrlhf.utils"], "get_strategy", MagicMock(), raising=False)
    monkeypatch.setattr(sys.modules["openrlhf.utils"], "get_tokenizer", MagicMock(), raising=False)
    monkeypatch.setattr(sys.modules["openrlhf.trainer.ray"], "create_vllm_engines", MagicMock(), raising=False)
    for name in ("openrlhf.trainer.ray.ppo_actor", "openrlhf.trainer.ray.ppo_critic"):
        monkeypatch.setitem(sys.modules, name, MagicMock())
    sys.modules["ray"].is_initialized = lambda: False
    # The actor classes need OpenRLHF's trainer modules (deepspeed, vLLM): tests/e2e runs them for real.
    monkeypatch.setattr(actors, "actor_classes", lambda: {})
    monkeypatch.setenv(CONTENT_ENV_VAR, "")  # restored after the test (the launcher sets it)
    seen = {}
    original_check = train_ppo_ray.check_args

    def check_then_stop(args):
        original_check(args)
        seen["args"] = args
        raise Checked

    monkeypatch.setattr(train_ppo_ray, "check_args", check_then_stop)

    def run(argv, options=None):
        monkeypatch.setenv(CONTENT_ENV_VAR, "")  # what a previous launch set in this process
        if options is not None:
            path = tmp_path / f"o{len(list(tmp_path.iterdir()))}.json"
            path.write_text(json.dumps(options))
            monkeypatch.setenv(ENV_VAR, str(path))
        with pytest.raises(Checked):
            train_ppo_ray.main(argv)
        return seen["args"]

    return run


BASE = ["--actor.model_name_or_path", "Qwen/Qwen2.5-7B", "--reward.remote_url", train_ppo_ray.REWARD_FILE,
        "--rollout.n_samples_per_prompt", "8", "--rollout.batch_size", "16", "--rollout.micro_batch_size", "16",
        "--algo.kl.init_coef", "0"]


def test_openrlhfs_parser_accepts_gepo_and_edge_eda_through_the_launcher(launch):
    args = launch([*BASE, "--algo.advantage.estimator", "gepo"])
    assert args.algo.advantage.estimator == "gepo"
    assert args.reward.remote_url == train_ppo_ray.REWARD_FILE
    assert launch([*BASE, "--algo.advantage.estimator", "edge_eda"]).algo.advantage.estimator == "edge_eda"
    # The parser is OpenRLHF's again afterwards.
    assert argparse.ArgumentParser.add_argument.__qualname__ == "_ActionsContainer.add_argument"


def test_launcher_refuses_what_the_estimators_and_gec_cannot_run(launch):
    with pytest.raises(ValueError, match="init_coef=0.01"):
        launch([*BASE[:-1], "0.01", "--algo.advantage.estimator", "gepo"])
    gec = {"gec": {"n_samples_per_prompt": 8, "rollout_temperature": 0.6}}
    agent = ["--train.agent_func_path", train_ppo_ray.GEC_AGENT_FILE, "--rollout.temperature", "0.6"]
    with pytest.raises(ValueError, match="gec.n_samples_per_prompt=4 but --rollout.n_samples_per_prompt=8"):
        launch([*BASE, *agent], {"gec": {"n_samples_per_prompt": 4}})
    with pytest.raises(ValueError, match="gec.rollout_temperature=1.0 but --rollout.temperature=0.6"):
        launch([*BASE, *agent], {"gec": {"rollout_temperature": 1.0}})
    with pytest.raises(ValueError, match="is_correction_level=token"):  # with or without a gec section
        launch([*BASE, *agent, "--algo.advantage.is_correction_level", "token"], {})
    # evaluation at the training temperature runs beside GEC: the trainer marks its calls
    for options in (gec, {"gec": {}}, {}):
        args = launch([*BASE, *agent, "--eval.dataset", "x.jsonl", "--eval.temperature", "0.6"], options)
        assert args.train.agent_func_path == train_ppo_ray.GEC_AGENT_FILE


def test_the_options_travel_by_content_in_openrlhfs_runtime_env(launch, monkeypatch, tmp_path):
    ours = train_ppo_ray.runtime_env_with_ours({"env_vars": {"NCCL_DEBUG": "WARN"}}, '{"gepo":{}}')
    assert ours == {"env_vars": {"NCCL_DEBUG": "WARN", CONTENT_ENV_VAR: '{"gepo":{}}'}}  # no setup hook
    # The launcher validates the file once and reads it as its workers will: from the content, the file gone.
    options = {"gepo": {"alpha_low": 0.6}, "reward": {"format_policy": "lenient"}}
    launch([*BASE, "--algo.advantage.estimator", "gepo"], options)
    content = json.loads(os.environ[CONTENT_ENV_VAR])
    assert content == options
    for file in tmp_path.iterdir():
        file.unlink()
    assert run_options().gepo.alpha_low == 0.6 and run_options().source == CONTENT_ENV_VAR
    # Both variables, saying different things: refused
    (tmp_path / "options.json").write_text(json.dumps(options))
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "options.json"))
    monkeypatch.setenv(CONTENT_ENV_VAR, '{"gepo": {"alpha_low": 0.9}}')
    with pytest.raises(ValueError, match="differs from the file"):
        train_ppo_ray.main([*BASE, "--algo.advantage.estimator", "gepo"])
