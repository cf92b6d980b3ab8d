"""The trainer wrappers in-process, with stand-ins only for what verl would call around them (the
TransferQueue client, the wrapped original): gating, GEC's one switch, sample numbering, checkpoints.
The TransferQueue stand-in has verl's signatures and answers with its types (checked below)."""

import asyncio
import inspect
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from omegaconf import OmegaConf
from tensordict import NonTensorStack, TensorDict
from verl import DataProto
from verl.trainer.ppo.v1 import trainer_base

from edge_verl.algorithms import GEC_AGENT_LOOP
from edge_verl.algorithms.gec import GEC_INFO_KEY, GEC_LOSS_OPTIONS_KEY, GEC_ORIGIN_COLUMN, decision_rng
from edge_verl.config import SAMPLE_INDEX_COLUMN
from edge_verl.estimators import edge_eda as estimators
from edge_verl.integration import run_checks, trainer_run
from edge_verl.integration.checkpoint import STATE_FILE
from edge_verl.integration.rollout import response_identity, sample_index
from edge_verl.integration.legacy_trainer import STEP_METRICS_KEY, LegacyAdapter
from edge_verl.integration.run import active_run, advantage_step, TrainingRun
from edge_verl.integration.trainer_run import wrap_save_checkpoint
from edge_verl.integration.v1_trainer import V1Adapter

pytestmark = pytest.mark.verl


def _config(estimator="grpo", gec=None, calculate_log_probs=False, default_agent_loop="single_turn_agent", tmp_path="."):
    algorithm = {"adv_estimator": estimator}
    if gec is not None:
        algorithm["edge_gec"] = gec
    return OmegaConf.create(
        {
            "algorithm": algorithm,
            "actor_rollout_ref": {
                "rollout": {"calculate_log_probs": calculate_log_probs, "n": 4, "agent": {"default_agent_loop": default_agent_loop}}
            },
            "trainer": {"default_local_dir": str(tmp_path)},
        }
    )


class _Frame:
    """The part of an HF ``datasets.Dataset`` the GEC check reads."""

    def __init__(self, agent_names=None):
        self._columns = {} if agent_names is None else {"agent_name": agent_names}
        self.column_names = list(self._columns)

    def __getitem__(self, column):
        return self._columns[column]


def _trainer(config, train=None, val=None):
    return SimpleNamespace(
        config=config,
        train_dataset=SimpleNamespace(dataframe=_Frame(train)),
        val_dataset=SimpleNamespace(dataframe=_Frame(val)),
        global_steps=1,
    )


def _nested(*rows):
    """A per-token field as the TransferQueue stores it: one row per response, on its own length."""
    return torch.nested.as_nested_tensor([torch.as_tensor(row, dtype=torch.float32) for row in rows], layout=torch.jagged)


class _TransferQueue:
    """verl's TransferQueue client (``trainer_base.tq``) holding one step's fields, called as the adapters call
    it and answering with the types transfer_queue answers with: ``kv_batch_get`` a TensorDict of the selected
    fields (per-token fields nested as stored, non-tensor fields a NonTensorStack), ``kv_batch_put`` a
    KVBatchMeta. ``test_the_stand_in_transfer_queue_has_verls_signatures_and_types`` checks both against
    transfer_queue's own functions."""

    def __init__(self, **stored):
        self.stored, self.gets, self.puts = stored, [], []

    def kv_batch_get(self, keys: list[str] | str, partition_id: str, select_fields: list[str] | str | None = None) -> TensorDict:
        self.gets.append(select_fields)
        fields = {name: NonTensorStack(*value) if isinstance(value, list) else value for name, value in self.stored.items() if name in select_fields}
        return TensorDict(fields, batch_size=[len(keys)])

    def kv_batch_put(self, keys: list[str], partition_id: str, fields: TensorDict | None = None, tags=None, data_parser=None) -> trainer_base.KVBatchMeta:
        self.puts.append((keys, partition_id, fields))
        return trainer_base.KVBatchMeta(keys=list(keys), tags=tags or [{} for _ in keys], partition_id=partition_id, fields=list(fields.keys()))


_BATCH = SimpleNamespace(keys=["k0"], tags=[{}], partition_id="train")


@pytest.mark.parametrize("name", [name for name in vars(_TransferQueue) if not name.startswith("_")])
def test_the_stand_in_transfer_queue_has_verls_signatures_and_types(name):
    real, ours = inspect.signature(getattr(trainer_base.tq, name)), inspect.signature(getattr(_TransferQueue, name))
    described = lambda parameters: [(p.name, p.kind, p.default) for p in parameters]  # noqa: E731
    assert described(list(ours.parameters.values())[1:]) == described(real.parameters.values())
    assert ours.return_annotation is real.return_annotation
    tq = _TransferQueue(response_mask=_nested([1, 1], [1]), extra_fields=[{}, {}])
    answer = tq.kv_batch_get(["k0", "k1"], "train", ["response_mask"]) if name == "kv_batch_get" else tq.kv_batch_put(["k0"], "train", TensorDict({}, batch_size=[1]))
    assert isinstance(answer, real.return_annotation)


# --- a plain verl run is untouched -------------------------------------------------------------------------


EDGE_REWARD = {"reward": {"custom_reward_function": {"path": "pkg://edge_verl.reward", "name": "compute_score"}}}


@pytest.mark.parametrize("reward", [{}, EDGE_REWARD], ids=["verl_reward", "edge_verl_reward"])
def test_plain_grpo_step_makes_no_transfer_queue_call_and_writes_no_file(tmp_path, reward):
    tq, called = _TransferQueue(), []
    trainer = _trainer(OmegaConf.merge(_config("grpo", tmp_path=tmp_path), reward))

    def original(self, batch, metrics, *args):
        called.append(batch)
        return batch

    adapter = V1Adapter(tq)
    metrics = {}
    assert adapter.compute_advantage(original)(trainer, _BATCH, metrics) is _BATCH
    adapter.compute_metrics(original)(trainer, _BATCH, metrics, {}, 1, 0)
    wrap_save_checkpoint(lambda self: None)(trainer)
    assert trainer_run.run_of(trainer) is None  # nothing of the plugin's was asked for: no run at all
    assert tq.gets == tq.puts == [] and len(called) == 2 and metrics == {}
    assert list(tmp_path.iterdir()) == []


def test_plain_grpo_gets_verls_policy_loss_functions_unwrapped():
    from verl.trainer.ppo import core_algos
    from verl.workers.utils import losses

    for name in ("vanilla", "clip_cov", "kl_cov"):
        assert losses.get_policy_loss_fn(name) is core_algos.get_policy_loss_fn(name)


def test_gepo_with_pooled_log_probs_fetches_nothing_extra_and_saves_its_thresholds(tmp_path):
    tq = _TransferQueue()
    trainer = _trainer(_config("gepo", tmp_path=tmp_path))
    V1Adapter(tq).compute_advantage(lambda self, batch, metrics: batch)(trainer, _BATCH, {})
    wrap_save_checkpoint(lambda self: None)(trainer)
    assert tq.gets == tq.puts == []
    assert (tmp_path / "global_step_1" / STATE_FILE).exists()


def test_edge_eda_fetches_the_entropy_once_and_reports_the_step_metrics():
    tq = _TransferQueue(entropy=_nested([1, 1, 1]), response_mask=_nested([1, 1, 1]))
    trainer = _trainer(_config("edge_eda"))
    seen = {}

    def original(self, batch, metrics):
        from edge_verl.integration.run import current_step

        step = current_step()
        seen["entropy"] = step.inputs["entropy"]
        step.metrics["edge_verl/edge_eda/x"] = 1.0
        return batch

    metrics = {}
    V1Adapter(tq).compute_advantage(original)(trainer, _BATCH, metrics)
    assert tq.gets == [["entropy", "response_mask"]] and tq.puts == []
    assert torch.equal(seen["entropy"], torch.ones(1, 3)) and metrics == {"edge_verl/edge_eda/x": 1.0}


# --- GEC: one switch, loud checks ----------------------------------------------------------------------------


GEC_ROWS = [GEC_AGENT_LOOP] * 3


def test_gec_on_with_gec_rows_starts():
    run = trainer_run.start_run(_trainer(_config("edge_eda", gec={"enable": True}), train=GEC_ROWS))
    assert run.gec_enabled and run.uses_plugin_estimator


def test_gec_on_but_no_gec_rows_in_the_training_data_is_an_error():
    with pytest.raises(ValueError, match="no training row has agent_name=edge_gec"):
        trainer_run.start_run(_trainer(_config("edge_eda", gec={"enable": True})))
    with pytest.raises(ValueError, match="no training row has agent_name=edge_gec"):
        trainer_run.start_run(_trainer(_config("edge_eda", gec={"enable": True}), train=["single_turn_agent"]))


@pytest.mark.parametrize("gec", [None, {"seed": 3}, {"enable": False}])
def test_gec_rows_in_the_data_without_the_switch_is_an_error(gec):
    with pytest.raises(ValueError, match="set algorithm.edge_gec.enable=True"):
        trainer_run.start_run(_trainer(_config("edge_eda", gec=gec), train=GEC_ROWS))


def test_a_plain_run_is_not_inspected_even_with_gec_rows():
    # Nothing of the plugin's asked for: no run, no check of its data (the edge_gec loop itself refuses to
    # run with GEC off, tests/integration/test_gec_agent_loop_on_cpu.py).
    assert trainer_run.start_run(_trainer(_config("grpo"), train=GEC_ROWS)) is None


def test_gec_with_rollout_log_probs_is_an_error():
    with pytest.raises(ValueError, match="calculate_log_probs=False"):
        trainer_run.start_run(_trainer(_config("edge_eda", gec={"enable": True}, calculate_log_probs=True), train=GEC_ROWS))


def test_gec_rows_in_validation_data_or_as_default_loop_are_errors():
    with pytest.raises(ValueError, match="validation must never be corrected"):
        trainer_run.start_run(_trainer(_config("edge_eda", gec={"enable": True}), train=GEC_ROWS, val=GEC_ROWS))
    with pytest.raises(ValueError, match="default_agent_loop=edge_gec"):
        trainer_run.start_run(_trainer(_config("edge_eda", gec={"enable": True}, default_agent_loop="edge_gec"), train=GEC_ROWS))


def test_bad_gec_option_is_reported_before_the_first_rollout():
    with pytest.raises(ValueError, match="edge_gec.scope='all'"):
        trainer_run.start_run(_trainer(_config("grpo", gec={"scope": "all"})))


# --- sample numbering survives any split across agent-loop workers -------------------------------------------


def _legacy_rollout_batch(uids):
    return DataProto.from_dict(
        tensors={"input_ids": torch.zeros(len(uids), 2, dtype=torch.long)},
        non_tensors={"uid": np.array(uids, dtype=object), "index": np.array([u for u in uids], dtype=object)},
    )


def test_legacy_rollout_numbers_samples_before_the_split_so_seeds_never_repeat():
    # 2 prompts x n=3 over 3 agent-loop workers: chunks [a a] [a b] [b b] split both groups. verl's own
    # per-worker numbering (rollout_n) restarts at 0 in each chunk and would give (a, 0) twice.
    uids = ["a", "a", "a", "b", "b", "b"]
    prompts = _legacy_rollout_batch(uids)
    run = TrainingRun.from_config(OmegaConf.create({"adv_estimator": "edge_eda", "edge_gec": {"enable": True}}))
    passed = []
    wrapped = LegacyAdapter.generate_sequences(lambda self, batch: passed.append(batch) or batch)
    with active_run(run):
        wrapped(None, prompts)
    identities = []
    for chunk in passed[0].chunk(3):
        for row in range(len(chunk)):
            kwargs = {key: values[row] for key, values in chunk.non_tensor_batch.items()}
            identities.append((kwargs["uid"], sample_index(kwargs)))
    assert identities == [("a", 0), ("a", 1), ("a", 2), ("b", 0), ("b", 1), ("b", 2)]
    draws = {decision_rng(42, uid, index).random() for uid, index in identities}
    assert len(draws) == 6

    from verl.experimental.agent_loop.agent_loop import get_trajectory_info

    verl_numbering = [
        (uid, info["rollout_n"])
        for chunk in passed[0].chunk(3)
        for uid, info in zip(chunk.non_tensor_batch["uid"], asyncio.run(get_trajectory_info(1, list(chunk.non_tensor_batch["index"]), False)))
    ]
    assert len(set(verl_numbering)) < 6, "the split really breaks verl's per-worker numbering"


def test_sample_numbering_is_added_to_every_batch_of_a_seeded_run_and_to_gec_training_batches():
    wrapped = LegacyAdapter.generate_sequences(lambda self, batch: batch)

    def numbered(algorithm, validate):
        batch = _legacy_rollout_batch(["a", "a"])
        batch.meta_info["validate"] = validate
        if algorithm is None:  # a plain verl run: no TrainingRun
            return SAMPLE_INDEX_COLUMN in wrapped(None, batch).non_tensor_batch
        with active_run(TrainingRun.from_config(OmegaConf.create(algorithm))):
            return SAMPLE_INDEX_COLUMN in wrapped(None, batch).non_tensor_batch

    unseeded = {"edge_seeding": {"enable": False}}
    # seeded (the plugin's default): each response's seed needs its index, validation's too
    assert numbered({"adv_estimator": "gepo"}, False) and numbered({"adv_estimator": "gepo"}, True)
    # unseeded: only GEC's training decisions need it
    assert numbered({"adv_estimator": "edge_eda", "edge_gec": {"enable": True}, **unseeded}, False)
    assert not numbered({"adv_estimator": "edge_eda", "edge_gec": {"enable": True}, **unseeded}, True)
    assert not numbered({"adv_estimator": "gepo", **unseeded}, False)
    assert not numbered(None, False)


def test_v1_session_id_is_the_sample_index_and_gec_without_seed_or_index_is_an_error():
    assert sample_index({"session_id": 5}) == 5
    assert sample_index({SAMPLE_INDEX_COLUMN: np.int64(2)}) == 2
    assert sample_index({"uid": "a"}) is None
    # GEC keys its draws on the response's seed, else on (uid, index); with neither it refuses
    assert response_identity({"seed": 9}, {"uid": "a"}) == (9,)
    assert response_identity({}, {"uid": "a", "session_id": 3}) == ("a", 3)
    with pytest.raises(RuntimeError, match="neither session_id"):
        response_identity({}, {"uid": "a"})


# --- advantage statistics for any estimator ---------------------------------------------------------------


def _grpo_batch():
    # Group a: scores 1, 0, 0, 0 -> verl GRPO: mean 0.25, unbiased std 0.5 -> advantages 1.5, -0.5, -0.5, -0.5;
    # group b: all 0 -> 0. Unbiased variance over the 8 responses: (2.25 + 3 * 0.25) / 7 = 3 / 7.
    rewards = torch.zeros(8, 3)
    rewards[0, 1] = 1.0
    batch = DataProto.from_dict(
        tensors={"token_level_rewards": rewards, "response_mask": torch.ones(8, 3)},
        non_tensors={"uid": np.array(["a"] * 4 + ["b"] * 4, dtype=object)},
    )
    return batch


ASKED = {"adv_estimator": "grpo", "edge_metrics": {"advantage_stats": True}}
GRPO = OmegaConf.create({"adv_estimator": "grpo"})


def test_legacy_advantage_stats_for_verl_grpo_when_asked_and_only_then():
    from verl.trainer.ppo import ray_trainer

    with active_run(TrainingRun.from_config(OmegaConf.create(ASKED))):
        out = ray_trainer.compute_advantage(_grpo_batch(), "grpo", num_repeat=4, config=GRPO)
    assert out.meta_info[STEP_METRICS_KEY]["edge_verl/adv/var"] == pytest.approx(3 / 7, rel=1e-5)
    assert out.meta_info[STEP_METRICS_KEY]["edge_verl/adv/zero_variance_group_frac"] == 0.5
    plain = TrainingRun.from_config(GRPO)
    assert not plain.opens_advantage_step
    with active_run(plain):
        out = ray_trainer.compute_advantage(_grpo_batch(), "grpo", num_repeat=4, config=GRPO)
    assert STEP_METRICS_KEY not in out.meta_info


def test_v1_advantage_stats_join_the_step_the_v1_adapter_opened():
    from verl.trainer.ppo.v1 import utils

    with advantage_step(TrainingRun.from_config(OmegaConf.create(ASKED))) as step:
        out = utils.compute_advantage(_grpo_batch(), "grpo", num_repeat=4, config=GRPO)
    assert step.metrics["edge_verl/adv/var"] == pytest.approx(3 / 7, rel=1e-5)
    # 1 correct of 8 responses; group b has no correct response (all-wrong), no group is all-right
    outcomes = {key: step.metrics[f"edge_verl/adv/{key}"] for key in ("score_mean", "correct_frac", "all_wrong_group_frac", "all_right_group_frac")}
    assert outcomes == {"score_mean": 0.125, "correct_frac": 0.125, "all_wrong_group_frac": 0.5, "all_right_group_frac": 0.0}
    assert STEP_METRICS_KEY not in out.meta_info  # v1: the adapter puts the step's metrics into verl's


def test_legacy_per_source_statistics_split_the_batch_by_its_data_source_column():
    from verl.trainer.ppo import ray_trainer

    batch = _grpo_batch()  # group a (1 of 4 right) from source "x", group b (none right) from "y"
    batch.non_tensor_batch["data_source"] = np.array(["x"] * 4 + ["y"] * 4, dtype=object)
    batch.batch["old_log_probs"] = torch.full((8, 3), -0.25)
    with active_run(TrainingRun.from_config(OmegaConf.create({"adv_estimator": "grpo", "edge_metrics": {"per_source": True}}))):
        out = ray_trainer.compute_advantage(batch, "grpo", num_repeat=4, config=GRPO)
    metrics = out.meta_info[STEP_METRICS_KEY]
    assert metrics["edge_verl/by_source/x/score_mean"] == 0.25 and metrics["edge_verl/by_source/y/score_mean"] == 0.0
    assert metrics["edge_verl/by_source/x/all_wrong_group_frac"] == 0.0 and metrics["edge_verl/by_source/y/all_wrong_group_frac"] == 1.0
    assert metrics["edge_verl/by_source/x/sampled_entropy"] == pytest.approx(0.25)  # -log pi_old of every sampled token
    assert "edge_verl/adv/var" not in metrics  # per_source alone does not switch advantage_stats on


def test_v1_per_source_statistics_read_the_sources_the_adapter_put_on_the_step():
    from verl.trainer.ppo.v1 import utils

    run = TrainingRun.from_config(OmegaConf.create({"adv_estimator": "grpo", "edge_metrics": {"per_source": True}}))
    assert run.opens_advantage_step
    with advantage_step(run) as step:
        step.sources = ["x"] * 4 + ["y"] * 4  # v1's advantage batch has no data_source: the adapter reads it from the TransferQueue
        utils.compute_advantage(_grpo_batch(), "grpo", num_repeat=4, config=GRPO)
    assert step.metrics["edge_verl/by_source/x/responses"] == 4 and step.metrics["edge_verl/by_source/y/all_right_group_frac"] == 0.0
    with advantage_step(run), pytest.raises(KeyError, match="needs each row's data_source"):
        utils.compute_advantage(_grpo_batch(), "grpo", num_repeat=4, config=GRPO)


def test_an_advantage_step_does_not_nest():
    run = TrainingRun.from_config(GRPO)
    with advantage_step(run), pytest.raises(RuntimeError, match="already open"):
        with advantage_step(run):
            pass


def test_bad_metrics_option_is_reported():
    with pytest.raises(ValueError, match="edge_metrics.advantage_stats"):
        TrainingRun.from_config(OmegaConf.create({"adv_estimator": "grpo", "edge_metrics": {"advantage_stats": "yes"}}))
    with pytest.raises(ValueError, match="unknown option"):
        TrainingRun.from_config(OmegaConf.create({"adv_estimator": "grpo", "edge_metrics": {"adv_stats": True}}))


# --- the reward's grader outcomes ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "reward, expected",
    [
        ({"reward": {"custom_reward_function": {"path": "pkg://edge_verl.reward", "name": "compute_score"}}}, True),
        ({"reward": {"custom_reward_function": {"path": "/venv/lib/site-packages/edge_verl/reward/__init__.py"}}}, True),
        ({"custom_reward_function": {"path": "pkg://edge_verl.reward"}}, True),  # verl's legacy top-level key
        ({"reward": {"custom_reward_function": {"path": "/home/me/my_reward.py"}}}, False),
        ({"reward": {"custom_reward_function": {"path": None}}}, False),
        ({}, False),
    ],
)
def test_grader_metrics_are_on_when_the_run_grades_with_edge_verls_reward(reward, expected):
    config = OmegaConf.merge(_config("grpo"), OmegaConf.create(reward))
    assert run_checks.uses_edge_reward(config) is expected
    assert run_checks.check_run_config(config).grader_metrics is expected


def test_v1_step_metrics_give_the_fraction_of_reward_calls_per_grader_outcome():
    # a run that uses the plugin (here: its metrics, as the recipes' GRPO baselines do) and grades with its reward
    config = OmegaConf.merge(_config("grpo"), EDGE_REWARD, {"algorithm": {"edge_metrics": {"advantage_stats": True}}})
    trainer = _trainer(config)
    # 4 samples: 2 decided in the caller, 1 by a worker, 1 cut at its deadline (v1 pads a missing key with None)
    extra = [{"reward_extra_info": {"grader": outcome}} for outcome in ("caller", "worker", "caller", "deadline")] + [{}]
    tq = _TransferQueue(extra_fields=extra, uid=["u"] * 5)
    batch = SimpleNamespace(keys=["k0", "k1", "k2", "k3", "k4"], tags=[{}] * 5, partition_id="train")
    metrics = {}
    V1Adapter(tq).compute_metrics(lambda self, batch, metrics, *a: None)(trainer, batch, metrics)
    assert tq.gets == [["extra_fields"]]  # no GEC: nothing else is fetched
    assert metrics == {
        "edge_verl/grader/caller": 0.5, "edge_verl/grader/worker": 0.25, "edge_verl/grader/deadline": 0.25,
        "edge_verl/grader/waiting": 0.0, "edge_verl/grader/no_answer": 0.0, "edge_verl/grader/crashed": 0.0,
    }  # fmt: skip


def test_legacy_step_metrics_give_the_fraction_of_reward_calls_per_grader_outcome():
    run = TrainingRun.from_config(OmegaConf.create({"adv_estimator": "grpo"}))
    run.grader_metrics = True
    batch = DataProto.from_dict(
        tensors={"x": torch.zeros(4, 1)}, non_tensors={"grader": np.array(["waiting", "worker", "worker", "no_answer"], dtype=object)}
    )
    compute_data_metrics = LegacyAdapter.compute_data_metrics(lambda batch, use_critic: {"verl/own": 1.0})
    with active_run(run):
        metrics = compute_data_metrics(batch=batch, use_critic=False)
    assert metrics["verl/own"] == 1.0
    assert metrics["edge_verl/grader/worker"] == 0.5 and metrics["edge_verl/grader/waiting"] == 0.25
    assert metrics["edge_verl/grader/no_answer"] == 0.25 and metrics["edge_verl/grader/caller"] == 0.0
    run.grader_metrics = False  # another reward function: nothing
    with active_run(run):
        assert compute_data_metrics(batch=batch, use_critic=False) == {"verl/own": 1.0}


# --- EDA's gradient form: the loss columns reach the actor's batch, and a missing loss hook is caught ----------


def test_v1_puts_edas_loss_columns_next_to_the_advantages_and_its_options_into_extra_info():
    from tensordict import TensorDict

    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])

    def original(self, batch, metrics):
        from edge_verl.integration.run import current_step

        step = current_step()
        step.loss_columns = {estimators.EDA_GROUP_ENTROPY_COLUMN: 0.7 * mask, estimators.EDA_RATIO_COLUMN: 1.3 * mask}
        step.loss_options = {estimators.EDA_OPTIONS_KEY: {"entropy_epsilon": 1e-6, "ratio_clamp": None}}
        return batch

    tq = _TransferQueue(entropy=_nested([0.5, 0.5], [0.5, 0.5, 0.5]), response_mask=_nested([1, 1], [1, 1, 1]))
    batch = SimpleNamespace(keys=["k0", "k1"], tags=[{}, {}], partition_id="train", extra_info={"temperature": 1.0})
    trainer = _trainer(_config("edge_eda"))
    result = V1Adapter(tq).compute_advantage(original)(trainer, batch, {})
    ((keys, partition, fields),) = tq.puts
    assert keys == ["k0", "k1"] and partition == "train" and isinstance(fields, TensorDict)
    column = fields[estimators.EDA_GROUP_ENTROPY_COLUMN]
    assert column.is_nested  # laid on each row's response length, as verl stores the advantages
    first, second = column.unbind()
    torch.testing.assert_close(first, torch.tensor([0.7, 0.7]))
    torch.testing.assert_close(second, torch.tensor([0.7, 0.7, 0.7]))
    assert result.extra_info == {"temperature": 1.0, estimators.EDA_OPTIONS_KEY: {"entropy_epsilon": 1e-6, "ratio_clamp": None}}


def test_an_update_without_the_loss_hooks_metric_stops_a_gradient_form_run():
    config = _config("edge_eda")
    config.algorithm.edge_eda = {"entropy_gradient": True}
    trainer = _trainer(config)
    config.actor_rollout_ref.actor = {"calculate_entropy": True}
    update = V1Adapter.update_actor(lambda self, batch, metrics: batch)
    with pytest.raises(RuntimeError, match="did not run in the actor workers"):
        update(trainer, _BATCH, {"actor/pg_loss": 0.1})
    metrics = {"actor/edge_eda/loss_scale_mean": 1.0}
    assert update(trainer, _BATCH, metrics) is _BATCH
    detached = _trainer(_config("edge_eda"))  # the detached form has nothing in the loss to check
    assert update(detached, _BATCH, {}) is _BATCH


def test_the_gradient_form_without_entropy_in_the_update_is_refused_before_the_first_rollout():
    config = _config("edge_eda")
    config.algorithm.edge_eda = {"entropy_gradient": True}
    config.actor_rollout_ref.actor = {"calculate_entropy": False, "entropy_coeff": 0.0}
    with pytest.raises(ValueError, match="calculate_entropy=True"):
        run_checks.check_run_config(config)
    config.actor_rollout_ref.actor.calculate_entropy = True
    assert run_checks.check_run_config(config).options.entropy_gradient


def test_an_update_without_the_loss_hooks_metrics_stops_a_run_that_needs_them():
    from omegaconf import OmegaConf

    from edge_verl.integration.trainer_run import check_loss_hook_ran

    def run(**algorithm):
        return TrainingRun.from_config(OmegaConf.create(algorithm))

    gec = {"enable": True}
    # the paper's surrogate needs nothing from the hook; the controls and EDA's gradient form do
    check_loss_hook_ran(run(adv_estimator="grpo", edge_gec=gec), ["actor/pg_loss"])
    check_loss_hook_ran(None, [])
    with pytest.raises(RuntimeError, match="injected_loss=masked .* no actor/gec/"):
        check_loss_hook_ran(run(adv_estimator="grpo", edge_gec={**gec, "injected_loss": "masked"}), ["actor/pg_loss"])
    check_loss_hook_ran(run(adv_estimator="grpo", edge_gec={**gec, "injected_loss": "sft"}), ["actor/gec/sampled/token_share"])
    with pytest.raises(RuntimeError, match="entropy_gradient=True"):
        check_loss_hook_ran(run(adv_estimator="edge_eda", edge_eda={"entropy_gradient": True}), ["actor/pg_loss"])


def test_v1_gec_step_reads_the_rollouts_records_from_the_transfer_queue_and_puts_the_token_origins_back():
    from edge_verl.algorithms.gec import ORIGINS, CorrectionRecord

    def record(branch, score, span):
        return CorrectionRecord(
            branch=branch, reason="corrected" if branch else "correct", fallback=False, original_correct=branch is None,
            original_score=score, original_length=2, injected_start=span[0], injected_end=span[1], all_wrong_group=False,
            prompt_length=3, sample_seconds=0.0, correction_seconds=0.0,
        ).to_dict()

    # one group of two: row 0 as sampled (score 1), row 1 given the answer on its last two of 3 tokens (0 before, 1 after)
    extra = [{GEC_INFO_KEY: record(None, 1.0, (0, 0))}, {GEC_INFO_KEY: record("inject_answer", 0.0, (1, 3))}]
    tq = _TransferQueue(
        extra_fields=extra, uid=["g", "g"], response_mask=_nested([1, 1], [1, 1, 1]), advantages=_nested([0, 0], [0, 0, 0]),
        rm_scores=_nested([0, 1], [0, 0, 1]), entropy=_nested([0.5, 0.5], [0.5, 3.0, 3.0]),
    )
    trainer = _trainer(_config("grpo", gec={"enable": True}), train=GEC_ROWS)
    batch = SimpleNamespace(keys=["k0", "k1"], tags=[{}, {}], partition_id="train", extra_info={})
    metrics = {}
    stored = V1Adapter(tq).compute_advantage(lambda self, batch, metrics: batch)(trainer, batch, metrics)
    ((_, _, fields),) = tq.puts
    first, second = fields[GEC_ORIGIN_COLUMN].unbind()
    answer = ORIGINS.index("answer")
    assert first.tolist() == [0.0, 0.0] and second.tolist() == [0.0, answer, answer]
    assert stored.extra_info[GEC_LOSS_OPTIONS_KEY]["injected_share"] == pytest.approx(2 / 5)
    # as sampled the group scored [1, 0]; the sampled tokens' entropy is 0.5 (the injected 3.0 left out)
    assert metrics["edge_verl/gec/sampled/score_mean"] == 0.5 and metrics["edge_verl/gec/sampled/entropy"] == pytest.approx(0.5)


@pytest.mark.parametrize("prompts", [1, 0])
def test_a_gepo_run_with_fewer_than_two_groups_per_step_is_refused_before_it_starts(prompts):
    # GEPO's thresholds are the step's group-entropy mean -/+ beta x std: one group has std 0 and GEPO scales nothing
    config = _config("gepo")
    config.data = {"train_batch_size": prompts}
    with pytest.raises(ValueError, match=rf"data.train_batch_size={prompts}: gepo needs at least 2 prompt groups per step; its thresholds"):
        run_checks.check_run_config(config)
    config.data.train_batch_size = 2
    assert run_checks.check_run_config(config).entry.name == "gepo"
    for estimator in ("edge_eda", "grpo"):  # one group is a group: EDA and verl's GRPO are defined on it
        single = _config(estimator)
        single.data = {"train_batch_size": 1}
        run_checks.check_run_config(single)
