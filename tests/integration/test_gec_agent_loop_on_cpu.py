"""Pieces of the edge_gec agent loop that need verl's agent-loop module but no rollout."""

import asyncio

import pytest

pytest.importorskip("verl")
from omegaconf import OmegaConf  # noqa: E402

from edge_verl.integration.gec_agent_loop import _GroupVerdicts, check_gec_supported  # noqa: E402

pytestmark = pytest.mark.verl


def test_group_verdicts_wait_for_every_sibling():
    async def group():
        return await asyncio.gather(*[_GroupVerdicts.wait_for_group("g", i, 3, i == 1, 5.0) for i in range(3)])

    assert asyncio.run(group()) == [[False, True, False]] * 3


def test_group_verdicts_time_out_with_an_explanation():
    with pytest.raises(RuntimeError, match="only 1 of 2 responses"):
        asyncio.run(_GroupVerdicts.wait_for_group("lonely", 0, 2, False, 0.05))


def _config(**rollout):
    return OmegaConf.create(
        {"actor_rollout_ref": {"rollout": {"calculate_log_probs": False, **rollout}}, "algorithm": {"edge_gec": {"seed": 1}}}
    )


def test_gec_refuses_rollout_log_probs_and_reads_its_options():
    assert check_gec_supported(_config()).seed == 1
    with pytest.raises(ValueError, match="calculate_log_probs=False"):
        check_gec_supported(_config(calculate_log_probs=True))


def _loop_config(enable=True):
    return OmegaConf.create(
        {
            "actor_rollout_ref": {"rollout": {"calculate_log_probs": False, "n": 2, "prompt_length": 8, "response_length": 8}},
            "algorithm": {"edge_gec": {"enable": enable}},
            "reward": {"custom_reward_function": {"path": "pkg://edge_verl.reward", "name": "compute_score"}},
            "data": {},
        }
    )


def _make_loop(config, tokenizer):
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap

    from edge_verl.integration.gec_agent_loop import GecAgentLoop

    return GecAgentLoop(
        trainer_config=DictConfigWrap(config), server_manager=None, tokenizer=tokenizer, processor=None,
        dataset_cls=None, data_config=DictConfigWrap(config.data),
    )


def test_the_runs_setup_is_done_once_per_worker_not_once_per_sample(tmp_path, monkeypatch):
    from verl.trainer.ppo import reward

    from edge_verl.demo.tiny import build_tokenizer

    tokenizer = build_tokenizer(tmp_path)
    loads = []
    real = reward.get_custom_reward_fn
    monkeypatch.setattr(reward, "get_custom_reward_fn", lambda config: loads.append(config) or real(config))
    config = _loop_config()
    loops = [_make_loop(config, tokenizer) for _ in range(5)]  # verl builds one loop per trajectory
    assert len(loads) == 1 and len({id(loop.reward_fn) for loop in loops}) == 1
    assert loops[0].eos_id == tokenizer.eos_token_id
    _make_loop(_loop_config(), tokenizer)  # another run (a new config object) sets up afresh
    assert len(loads) == 2


def test_a_gec_row_in_a_run_without_the_switch_is_refused(tmp_path):
    from edge_verl.demo.tiny import build_tokenizer

    with pytest.raises(ValueError, match="set algorithm.edge_gec.enable=True"):
        _make_loop(_loop_config(enable=False), build_tokenizer(tmp_path))
