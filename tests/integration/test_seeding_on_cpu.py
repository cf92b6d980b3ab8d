"""Reproducible runs (algorithm.edge_seeding): the CPU rollout decodes each request from its own seed, the agent-loop
wrapper gives every response a seed keyed on its identity, and v1's update batch is put in (prompt, sample) order.
The end-to-end checks (the same command trained twice) are tests/e2e/test_study_on_cpu.py and
tests/e2e/test_two_nodes_on_cpu.py."""

import asyncio
from types import SimpleNamespace

import numpy as np
import pytest
from omegaconf import OmegaConf
from transfer_queue import KVBatchMeta

from edge_verl.config import prompt_key, response_seed
from edge_verl.config import PROMPT_KEY_FIELD, SAMPLE_INDEX_COLUMN
from edge_verl.integration import rollout, v1_trainer
from edge_verl.integration.cpu.hf_rollout import HFRolloutServer
from edge_verl.integration.run import sampling_seed
from edge_verl_lab.demo import tiny

PROMPT = [3, 40, 41, 42, 43, 5]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny")
    tokenizer = tiny.build_tokenizer(folder)
    tiny.save(tiny.build_model(tokenizer, seed=0), tokenizer, folder)
    return str(folder)


def _server(model_dir, seed=42):
    config = SimpleNamespace(max_model_len=None, prompt_length=16, response_length=24, seed=seed)
    return HFRolloutServer(config, OmegaConf.create({"path": model_dir}), replica_rank=0)


def _sample(server, requests):
    """The token ids of each request (prompt, seed), all sent to ``server`` at once."""

    async def send():
        outputs = await asyncio.gather(*(
            server.generate(prompt, {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "max_tokens": 24, **({} if seed is None else {"seed": seed})}, f"r{i}")
            for i, (prompt, seed) in enumerate(requests)
        ))
        return [tuple(output.token_ids) for output in outputs]

    return asyncio.run(send())


def test_a_response_is_a_function_of_its_seed_whatever_arrives_with_it_and_in_what_order(model_dir):
    server = _server(model_dir)
    requests = [(PROMPT, 11), (PROMPT[:4], 12), (PROMPT + [7, 8], 13)]
    alone = [_sample(server, [request])[0] for request in requests]
    together = _sample(server, requests)
    reversed_order = _sample(server, requests[::-1])[::-1]
    with_others = _sample(server, [(PROMPT, 99), requests[1], (PROMPT, 98), requests[0], requests[2]])
    assert together == alone == reversed_order
    assert [with_others[3], with_others[1], with_others[4]] == alone
    assert len(set(alone)) == 3


def test_a_groups_seeds_give_n_different_samples_where_one_shared_seed_gives_one(model_dir):
    # verl's full_determinism gives every request of a replica the seed replica_rank + rollout.seed: a prompt's
    # n samples are then one sample n times (measured on vLLM's CPU build too, docs/reproducibility.md)
    server = _server(model_dir)
    key = prompt_key(42, validate=False, step=1, data_source="t", index=0, prompt="p")
    per_response = _sample(server, [(PROMPT, response_seed(key, i)) for i in range(8)])
    shared = _sample(server, [(PROMPT, 42)] * 8)
    assert len(set(per_response)) == 8
    assert len(set(shared)) == 1


def test_another_run_seed_samples_other_responses(model_dir):
    server = _server(model_dir)
    keys = [prompt_key(seed, validate=False, step=1, data_source="t", index=0, prompt="p") for seed in (42, 43)]
    first, second = (_sample(server, [(PROMPT, response_seed(key, i)) for i in range(4)]) for key in keys)
    assert not set(first) & set(second)


def test_requests_without_a_seed_draw_from_the_servers_stream_seeded_by_the_rollout_seed(model_dir):
    # a run without algorithm.edge_seeding: verl's rollout.seed (+ the replica rank), in arrival order
    first, again, other = (_sample(_server(model_dir, seed), [(PROMPT, None)] * 3) for seed in (42, 42, 7))
    assert first == again != other
    assert len(set(first)) == 3


# --- the agent-loop wrapper ------------------------------------------------------------------------------------


def _config(**algorithm):
    return OmegaConf.create({"algorithm": {"adv_estimator": "grpo", **algorithm}, "actor_rollout_ref": {"rollout": {"seed": 5}}})


@pytest.mark.parametrize("algorithm, expected", [
    ({}, None),  # a plain verl run: verl's sampling
    ({"adv_estimator": "gepo"}, 5),  # the plugin's estimator: on by default, keyed on rollout.seed
    ({"edge_seeding": {"enable": True}}, 5),  # a GRPO baseline asks for it
    ({"adv_estimator": "gepo", "edge_seeding": {"enable": False}}, None),
])
def test_who_is_seeded(algorithm, expected):
    assert sampling_seed(_config(**algorithm)) == expected


def _call_wrapped(config, trajectory, **kwargs):
    calls = []

    def original(self, sampling_params, trajectory, **kwargs):
        calls.append((sampling_params, kwargs))
        return "ran"

    worker = SimpleNamespace(config=config)
    assert rollout.wrap_run_agent_loop(original)(worker, {"temperature": 1.0}, trajectory, agent_name="x", **kwargs) == "ran"
    return calls[0]


ROW = {"data_source": "t", "index": np.int64(3), "raw_prompt": np.array([{"role": "user", "content": "1+1"}], dtype=object), "uid": "u"}


def test_a_seeded_run_hands_each_response_the_seed_of_its_identity_and_its_prompts_key():
    trajectory = {"step": 2, "validate": False}
    params, kwargs = _call_wrapped(_config(adv_estimator="gepo"), trajectory, session_id=1, **ROW)
    key = prompt_key(5, validate=False, step=2, data_source="t", index=3, prompt='[{"content": "1+1", "role": "user"}]')
    assert params == {"temperature": 1.0, "seed": response_seed(key, 1)}
    assert kwargs[PROMPT_KEY_FIELD] == key and kwargs["agent_name"] == "x"
    # the legacy trainer's column stands for v1's session_id; another uid changes nothing
    legacy, _ = _call_wrapped(_config(adv_estimator="gepo"), trajectory, **{**ROW, "uid": "v", SAMPLE_INDEX_COLUMN: 1})
    assert legacy == params
    # validation at the same step, another step, another sample: other seeds
    others = [
        _call_wrapped(_config(adv_estimator="gepo"), {"step": 2, "validate": True}, session_id=1, **ROW)[0]["seed"],
        _call_wrapped(_config(adv_estimator="gepo"), {"step": 3, "validate": False}, session_id=1, **ROW)[0]["seed"],
        _call_wrapped(_config(adv_estimator="gepo"), trajectory, session_id=0, **ROW)[0]["seed"],
    ]
    assert len({params["seed"], *others}) == 4


def test_a_plain_run_is_passed_through_untouched_and_a_response_without_an_index_is_refused():
    params, kwargs = _call_wrapped(_config(), {"step": 1, "validate": False}, session_id=0, **ROW)
    assert params == {"temperature": 1.0} and PROMPT_KEY_FIELD not in kwargs
    with pytest.raises(RuntimeError, match="session_id"):
        _call_wrapped(_config(adv_estimator="gepo"), {"step": 1, "validate": False}, **ROW)


def test_gecs_continuation_gets_a_seed_of_its_own_or_none():
    assert rollout.continuation_seed({"seed": 7}, rollout.CONTINUATION_SALT) not in (None, 7)
    assert rollout.continuation_seed({}, rollout.CONTINUATION_SALT) is None


# --- v1's update batch order -----------------------------------------------------------------------------------


class _FakeTQ:
    """The TransferQueue fields the order reads, per sample key."""

    def __init__(self, fields):
        self.fields = fields

    def kv_batch_get(self, keys, partition_id, select_fields):
        return {name: [self.fields[key][name] for key in keys] for name in select_fields}


def test_v1s_update_batch_is_put_in_prompt_then_sample_order_whatever_the_completion_order():
    # two prompts (keys 20 and 10), two samples each, the second sample of prompt 10 with two outputs
    done = ["a_1_0", "b_0_0", "a_0_0", "b_1_1", "b_1_0"]  # completion order; uids a (prompt 20) and b (10)
    fields = {key: {PROMPT_KEY_FIELD: 20 if key[0] == "a" else 10, "session_id": int(key.split("_")[1])} for key in done}
    batch = KVBatchMeta(keys=list(done), tags=[{"k": key} for key in done], partition_id="train", extra_info={"x": 1})
    sample = v1_trainer.wrap_replay_buffer_sample(_FakeTQ(fields))(lambda self, *args: (batch, {"m": 1}))
    buffer = SimpleNamespace()
    setattr(buffer, v1_trainer._BUFFER_SEED, 5)
    ordered, metrics = sample(buffer, 1, "train", 2)
    assert ordered.keys == ["b_0_0", "b_1_0", "b_1_1", "a_0_0", "a_1_0"]
    assert [tag["k"] for tag in ordered.tags] == ordered.keys and ordered.extra_info == {"x": 1} and metrics == {"m": 1}
    setattr(buffer, v1_trainer._BUFFER_SEED, None)  # a plain run: verl's order
    assert sample(buffer, 1, "train", 2)[0].keys == done


def test_a_seeded_runs_trainer_process_draws_the_same_global_random_numbers_on_every_run():
    # verl shuffles its validation loader with torch's global generator: a seeded run seeds it from its seed
    import random

    import torch

    from edge_verl.integration.trainer_run import start_run

    def draws(**algorithm):
        trainer = SimpleNamespace(config=OmegaConf.create({**_config(**algorithm), "data": {}}), train_dataset=None, val_dataset=None)
        random.seed(None), torch.seed()  # whatever the process drew before
        start_run(trainer)
        return torch.rand(3).tolist(), random.random()

    assert draws(adv_estimator="gepo") == draws(adv_estimator="gepo")
    assert draws(adv_estimator="gepo") != draws(adv_estimator="gepo", edge_seeding={"enable": False})
