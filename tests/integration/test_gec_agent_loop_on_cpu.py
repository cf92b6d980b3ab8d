"""Pieces of the edge_gec agent loop that need verl's agent-loop module but no rollout."""

import asyncio

import pytest

from omegaconf import OmegaConf

from edge_verl.algorithms.gec import CorrectionRecord
from edge_verl.algorithms.gec import GroupRendezvous, group_rendezvous
from edge_verl.integration.gec_agent_loop import check_gec_supported

pytestmark = pytest.mark.verl


async def _group(rendezvous, uid, verdicts, timeout_s=5.0):
    """All responses of one group report, in the order given (index, correct), and wait together."""
    size = len(verdicts)
    return await asyncio.gather(*[rendezvous.wait_for_group(uid, i, size, correct, timeout_s) for i, correct in verdicts])


def test_every_sibling_gets_the_verdicts_ordered_by_sample_index():
    rendezvous = GroupRendezvous()
    # they arrive as 2, 0, 1; each gets [index 0, 1, 2] = [False, True, False]
    results = asyncio.run(_group(rendezvous, "g", [(2, False), (0, False), (1, True)]))
    assert results == [[False, True, False]] * 3 and rendezvous.open_groups == frozenset()


def test_a_timed_out_wait_explains_itself_and_leaves_no_group_behind():
    rendezvous = GroupRendezvous()
    with pytest.raises(RuntimeError, match="only 1 of 2 responses of uid lonely"):
        asyncio.run(rendezvous.wait_for_group("lonely", 0, 2, False, 0.05))
    assert rendezvous.open_groups == frozenset()


def test_a_cancelled_waiter_leaves_no_group_behind():
    rendezvous = GroupRendezvous()

    async def cancel_while_waiting():
        waiter = asyncio.ensure_future(rendezvous.wait_for_group("g", 0, 2, False, 5.0))
        await asyncio.sleep(0)  # it registers and waits for its sibling
        assert rendezvous.open_groups == {"g"}
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter

    asyncio.run(cancel_while_waiting())
    assert rendezvous.open_groups == frozenset()


def test_the_same_uid_in_a_later_step_does_not_see_earlier_verdicts():
    rendezvous = GroupRendezvous()

    async def steps():
        first = await _group(rendezvous, "g", [(0, True), (1, True)])
        with pytest.raises(RuntimeError, match="only 1 of 2"):  # a step whose sibling never came
            await rendezvous.wait_for_group("g", 1, 2, True, 0.05)
        # had either step left its group, index 0 would be reported twice or its True would be read here
        second = await _group(rendezvous, "g", [(1, False), (0, False)])
        return first, second

    assert asyncio.run(steps()) == ([[True, True]] * 2, [[False, False]] * 2)
    assert rendezvous.open_groups == frozenset()


def test_a_sample_index_reported_twice_is_refused():
    rendezvous = GroupRendezvous()

    async def duplicate():
        first = asyncio.ensure_future(rendezvous.wait_for_group("g", 0, 2, False, 0.2))
        await asyncio.sleep(0)
        with pytest.raises(RuntimeError, match="sample index 0 of uid g reported twice"):
            await rendezvous.wait_for_group("g", 0, 2, True, 0.2)
        with pytest.raises(RuntimeError, match="only 1 of 2"):
            await first

    asyncio.run(duplicate())
    assert rendezvous.open_groups == frozenset()


def test_responses_on_one_event_loop_share_its_rendezvous_and_no_other():
    # verl runs a worker's trajectories as tasks of its event loop: the loop is what siblings share
    async def rendezvous_of_two_tasks():
        async def rendezvous():
            return group_rendezvous()

        return await asyncio.gather(rendezvous(), rendezvous())

    (one, same), (other, _) = asyncio.run(rendezvous_of_two_tasks()), asyncio.run(rendezvous_of_two_tasks())
    assert one is same and one is not other


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


# --- the correction budget: the first sample's own cap, the continuation beyond it, the prompt gate ----------


class _Server:
    """Stands in for verl's rollout server: records each request, answers with ``max_tokens`` copies of a
    non-EOS byte (a response truncated at its cap: the long failures GEC's regenerate branch targets)."""

    def __init__(self, response_length):
        self.requests = []
        self.response_length = response_length  # verl's servers' max_tokens when the request sets none

    async def generate(self, request_id, prompt_ids, sampling_params, **kwargs):
        from verl.workers.rollout.replica import TokenOutput

        self.requests.append((list(prompt_ids), dict(sampling_params)))
        return TokenOutput(token_ids=[ord("x")] * int(sampling_params.get("max_tokens", self.response_length)), log_probs=None)


def _budget_loop(tmp_path, response_length, **gec):
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap

    from edge_verl.demo.tiny import build_tokenizer
    from edge_verl.integration.gec_agent_loop import GecAgentLoop

    config = _loop_config()
    config.actor_rollout_ref.rollout.response_length = response_length
    config.actor_rollout_ref.rollout.prompt_length = 64
    config.algorithm.edge_gec.update({"force_regenerate": True, "continuation_tokens": 12, **gec})
    server = _Server(response_length)
    asyncio.set_event_loop(asyncio.new_event_loop())  # verl's loop binds the event loop it is built in
    loop = GecAgentLoop(
        trainer_config=DictConfigWrap(config), server_manager=server, tokenizer=build_tokenizer(tmp_path),
        processor=None, dataset_cls=None, data_config=DictConfigWrap(config.data),
    )
    return loop, server


def _run(loop):
    sample = {
        "raw_prompt": [{"role": "user", "content": "1+1?"}],
        "uid": "u0",
        "session_id": 0,
        "reward_model": {"ground_truth": "2"},
        "extra_info": {"answer": "2"},
        "data_source": "demo",
    }
    event_loop = asyncio.get_event_loop()
    try:
        return event_loop.run_until_complete(loop.run({"temperature": 1.0}, **sample))
    finally:
        event_loop.close()
        asyncio.set_event_loop(None)


def test_a_response_truncated_at_its_cap_gets_the_full_continuation(tmp_path):
    # response_length 60 = first sample 16 + phrase (31 bytes of " Wait! Something is wrong here.") + 12 + 1 spare.
    loop, server = _budget_loop(tmp_path, 60, first_sample_tokens=16)
    output = _run(loop)
    (_, first), (continuation_prompt, second) = server.requests
    assert first["max_tokens"] == 16 and second["max_tokens"] == 12
    phrase = list(" Wait! Something is wrong here.".encode())
    info = CorrectionRecord.from_dict(output.extra_fields["edge_verl_gec"])
    assert output.response_ids == [ord("x")] * 16 + loop._encode(" Wait! Something is wrong here.") + [ord("x")] * 12
    assert len(phrase) == 31 and len(output.response_ids) == 16 + 31 + 12
    assert (info.continuation_tokens, info.continuation_budget, info.continuation_requested) == (12, 12, 12)
    assert (info.injected_start, info.injected_end, info.original_length) == (16, 47, 16)


def test_without_a_first_sample_cap_the_correction_is_cut_to_fit(tmp_path):
    # The deviation kept by default: the first sample fills response_length (40), so the body is cut to make
    # room for the phrase and 1 continuation token: 40 = 8 + 31 + 1.
    loop, server = _budget_loop(tmp_path, 40)
    output = _run(loop)
    (_, first), (_, second) = server.requests
    assert "max_tokens" not in first and second["max_tokens"] == 1
    info = CorrectionRecord.from_dict(output.extra_fields["edge_verl_gec"])
    assert len(output.response_ids) == 40 and (info.continuation_budget, info.continuation_requested) == (1, 12)


def test_prompts_at_or_over_the_gate_are_left_as_sampled(tmp_path):
    loop, server = _budget_loop(tmp_path, 60, first_sample_tokens=16, max_prompt_tokens=8)
    output = _run(loop)
    info = CorrectionRecord.from_dict(output.extra_fields["edge_verl_gec"])
    assert len(server.requests) == 1 and info.branch is None and info.reason == "prompt_too_long"
    assert info.continuation_tokens is None and (info.injected_start, info.injected_end) == (0, 0)
    assert info.prompt_length >= 8 and output.response_ids == [ord("x")] * 16


def test_a_first_sample_cap_without_room_for_the_correction_is_refused(tmp_path):
    with pytest.raises(ValueError, match="raise response_length to at least 59"):
        _budget_loop(tmp_path, 58, first_sample_tokens=16)
    config = _config(response_length=200)
    config.algorithm.edge_gec.update({"first_sample_tokens": 190, "continuation_tokens": 20})
    with pytest.raises(ValueError, match="first_sample_tokens=190"):
        check_gec_supported(config)
