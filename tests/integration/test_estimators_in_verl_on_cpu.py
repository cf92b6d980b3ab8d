"""verl's own compute_advantage with the plugin's estimators, in-process (no Ray, no training)."""

import numpy as np
import pytest
import torch

from omegaconf import OmegaConf
from verl import DataProto
from verl.trainer.ppo import core_algos, ray_trainer
from verl.trainer.ppo.v1 import utils as v1_utils

from edge_verl.estimators.edge_eda import compute_eda_advantages
from edge_verl.estimators.groups import group_index_from_uids
from edge_verl.integration import estimator_adapter
from edge_verl.integration.legacy_trainer import STEP_METRICS_KEY
from edge_verl.integration.run import active_run, TrainingRun

pytestmark = pytest.mark.verl


def _data(entropy_key="entropys", with_entropy=True, with_old_log_probs=True, seed=0, pad_rows=0):
    rng = np.random.default_rng(seed)
    groups, per_group, width = 4, 4, 6
    size = groups * per_group
    uids = [f"uid{i // per_group}" for i in range(size)] + ["pad0"] * pad_rows
    mask = torch.ones(size + pad_rows, width)
    mask[:, 4:] = 0
    mask[size:] = 0
    scores = torch.tensor(rng.integers(0, 2, size + pad_rows), dtype=torch.float32)
    scores[size:] = 0
    rewards = torch.zeros(size + pad_rows, width)
    rewards[:, 3] = scores
    tensors = {"token_level_rewards": rewards, "response_mask": mask}
    if with_entropy:
        tensors[entropy_key] = torch.tensor(rng.uniform(0.1, 2.0, (size + pad_rows, width)), dtype=torch.float32)
    if with_old_log_probs:
        tensors["old_log_probs"] = torch.tensor(-rng.exponential(1.0, (size + pad_rows, width)), dtype=torch.float32)
    return DataProto.from_dict(tensors=tensors, non_tensors={"uid": np.array(uids, dtype=object)})


def _config(**sections):
    return OmegaConf.create({"adv_estimator": "x", "norm_adv_by_std_in_grpo": True, **sections})


def _in_run(config, estimator):
    """A training run as verl's trainers open it (the plugin's fit wrapper)."""
    return active_run(TrainingRun.from_config(OmegaConf.merge(config, {"adv_estimator": estimator})))


def test_estimators_are_registered_by_import_verl():
    for name in ("edge_eda", "gepo"):
        assert core_algos.get_adv_estimator_fn(name) is estimator_adapter.adapter_of(name)
        assert core_algos.get_adv_estimator_fn(name).__name__ == f"compute_{name}_advantage"


@pytest.mark.parametrize("entropy_key", ["entropys", "entropy"])
def test_verl_compute_advantage_runs_edge_eda_with_either_entropy_name(entropy_key):
    data = _data(entropy_key)
    expected_entropy = data.batch[entropy_key].clone()
    out = ray_trainer.compute_advantage(data, adv_estimator="edge_eda", num_repeat=4, config=_config())
    group_index, num_groups, is_pad = group_index_from_uids(data.non_tensor_batch["uid"])
    expected = compute_eda_advantages(
        data.batch["token_level_rewards"].sum(-1), expected_entropy, data.batch["response_mask"],
        group_index, num_groups, ~is_pad,
    )
    torch.testing.assert_close(out.batch["advantages"], expected.advantages)
    assert torch.all(out.batch["advantages"][:, 4:] == 0)


def test_v1s_advantage_function_outside_the_v1_trainers_step_is_verls_own():
    # v1.utils.compute_advantage joins the step PPOTrainer._compute_advantage opens; called on its own it
    # is verl's function, so EDA gets no entropy and says where it comes from.
    with pytest.raises(KeyError, match="inside one of verl's trainers"):
        v1_utils.compute_advantage(_data("entropys"), adv_estimator="edge_eda", num_repeat=4, config=_config())


def test_edge_eda_metrics_are_handed_back_with_the_batch():
    with _in_run(_config(), "edge_eda"):
        out = ray_trainer.compute_advantage(_data(), adv_estimator="edge_eda", config=_config())
    for key in ("zero_variance_group_frac", "adv_var_before", "adv_var_after", "max_abs_adv", "entropy_ratio_min", "entropy_ratio_max"):
        assert f"edge_verl/edge_eda/{key}" in out.meta_info[STEP_METRICS_KEY]
    assert not any(key.startswith("edge_verl/adv/") for key in out.meta_info[STEP_METRICS_KEY])  # not asked for


@pytest.mark.parametrize("estimator, after", [("edge_eda", "adv_var_after"), ("gepo", "adv_var_after")])
def test_asked_for_advantage_statistics_agree_with_the_estimators_own(estimator, after):
    config = _config(edge_metrics={"advantage_stats": True})
    with _in_run(config, estimator):
        metrics = ray_trainer.compute_advantage(_data(seed=4), adv_estimator=estimator, config=config).meta_info[STEP_METRICS_KEY]
    assert metrics["edge_verl/adv/var"] == pytest.approx(metrics[f"edge_verl/{estimator}/{after}"], rel=1e-5)
    assert metrics["edge_verl/adv/zero_variance_group_frac"] == metrics[f"edge_verl/{estimator}/zero_variance_group_frac"]


def test_gepo_through_verl_updates_the_runs_thresholds_once_per_call_and_reports_metrics():
    config = _config(gepo={"alpha_low": 0.5, "alpha_high": 0.2})
    with _in_run(config, "gepo") as run:
        ray_trainer.compute_advantage(_data(seed=1), adv_estimator="gepo", config=config)
        metrics = ray_trainer.compute_advantage(_data(seed=2), adv_estimator="gepo", config=config).meta_info[STEP_METRICS_KEY]
    assert run.state.num_updates == 2
    assert metrics["edge_verl/gepo/h_low"] == pytest.approx(run.state.h_low)
    assert metrics["edge_verl/gepo/ema_updates"] == 2
    assert 0.0 <= metrics["edge_verl/gepo/pos_attenuated_frac"] <= 1.0


def test_two_runs_keep_separate_thresholds():
    config = _config()
    with _in_run(config, "gepo") as first:
        ray_trainer.compute_advantage(_data(seed=1), adv_estimator="gepo", config=config)
    with _in_run(config, "gepo") as second:
        ray_trainer.compute_advantage(_data(seed=2), adv_estimator="gepo", config=config)
    assert first.state.num_updates == second.state.num_updates == 1
    assert first.state.h_low != second.state.h_low


def test_gepo_outside_a_training_run_says_where_its_state_lives():
    with pytest.raises(RuntimeError, match="training state"):
        ray_trainer.compute_advantage(_data(), adv_estimator="gepo", config=_config())


def test_an_exception_in_the_estimator_leaves_no_step_open():
    from edge_verl.integration.run import current_step

    with pytest.raises(KeyError):
        ray_trainer.compute_advantage(_data(with_entropy=False), adv_estimator="edge_eda", config=_config())
    assert current_step() is None


def test_padding_rows_get_zero_advantage_and_no_nan():
    with _in_run(_config(), "gepo"):
        out = ray_trainer.compute_advantage(_data(pad_rows=3), adv_estimator="gepo", config=_config())
    assert torch.isfinite(out.batch["advantages"]).all()
    assert torch.all(out.batch["advantages"][-3:] == 0)


def test_missing_entropy_is_an_error_naming_what_to_change():
    with pytest.raises(KeyError, match="per-token entropy.*bypass_mode=False"):
        ray_trainer.compute_advantage(_data(with_entropy=False), adv_estimator="edge_eda", config=_config())


def test_missing_old_log_probs_is_an_error_for_gepo():
    with _in_run(_config(), "gepo"), pytest.raises(KeyError, match="old_log_probs"):
        ray_trainer.compute_advantage(_data(with_old_log_probs=False), adv_estimator="gepo", config=_config())


@pytest.mark.parametrize("estimator", ["edge_eda", "gepo"])
def test_bypass_mode_is_refused(estimator):
    config = _config(rollout_correction={"bypass_mode": True})
    with pytest.raises(ValueError, match="bypass_mode=True"):
        ray_trainer.compute_advantage(_data(), adv_estimator=estimator, config=config)


def test_bad_option_from_the_algorithm_config_is_rejected():
    with pytest.raises(ValueError, match="alpha_high=0.9 must be < gepo.alpha_low=0.5"):
        ray_trainer.compute_advantage(_data(), adv_estimator="gepo", config=_config(gepo={"alpha_high": 0.9}))


def test_grpo_is_left_to_verl():
    data = _data()
    with _in_run(_config(), "grpo"):
        out = ray_trainer.compute_advantage(data, adv_estimator="grpo", config=_config())
    assert "advantages" in out.batch.keys() and STEP_METRICS_KEY not in out.meta_info


@pytest.mark.parametrize("estimator", ["edge_eda", "gepo"])
def test_step_metrics_equal_slow_references(estimator):
    # The metrics are computed without host syncs (masked reductions, one copy at the end); here each is
    # recomputed the slow way (boolean indexing, torch.var) on a batch with padding rows and a tied group.
    from edge_verl.estimators.gepo import GepoThresholds, compute_gepo_advantages
    from edge_verl.estimators.groups import zero_variance_group_fraction

    data = _data(seed=3, pad_rows=2)
    data.batch["token_level_rewards"][:4] = 0.0  # group uid0: all wrong
    config = _config(gepo={"alpha_low": 0.5, "alpha_high": 0.2}) if estimator == "gepo" else _config()
    with _in_run(config, estimator):
        out = ray_trainer.compute_advantage(data, adv_estimator=estimator, config=config)
    metrics = {key.rsplit("/", 1)[1]: value for key, value in out.meta_info[STEP_METRICS_KEY].items() if f"/{estimator}/" in key}
    scores = data.batch["token_level_rewards"].sum(-1)
    group_index, num_groups, is_pad = group_index_from_uids(data.non_tensor_batch["uid"])
    valid, mask = ~is_pad, data.batch["response_mask"]
    if estimator == "edge_eda":
        result = compute_eda_advantages(scores, data.batch["entropys"], mask, group_index, num_groups, valid)
        before, after = result.outcome_advantages, result.eda_outcome_advantages
        real = result.has_tokens
        expected = {
            "max_abs_adv": float(after[valid].abs().max()),
            "entropy_ratio_min": float(result.entropy_ratio[real].min()),
            "entropy_ratio_max": float(result.entropy_ratio[real].max()),
            "response_entropy_mean": float(result.response_entropy[real].mean()),
        }
        for name, values in (("abs_adv", after[valid].abs()), ("entropy_ratio", result.entropy_ratio[real])):
            for label, q in (("p1", 0.01), ("p50", 0.5), ("p99", 0.99)):  # torch's quantile: linear, as numpy's
                expected[f"{name}_{label}"] = float(torch.quantile(values.double(), q))
        assert expected["abs_adv_p1"] <= expected["abs_adv_p50"] <= expected["abs_adv_p99"] <= expected["max_abs_adv"]
    else:
        result = compute_gepo_advantages(
            scores, data.batch["old_log_probs"], mask, group_index, num_groups, valid, GepoThresholds(gamma=0.01)
        )
        before, after = result.outcome_advantages, result.shaped_outcome_advantages
        entropies = result.group_entropy[result.group_valid]
        expected = {
            "group_entropy_mean": float(entropies.mean()),
            "group_entropy_std": float(entropies.std(unbiased=False)),
            "pos_attenuated_frac": float(result.positive_attenuated.sum() / ((before > 0) & valid).sum()),
            "neg_attenuated_frac": float(result.negative_attenuated.sum() / ((before < 0) & valid).sum()),
            "h_low": result.h_low,
            "h_high": result.h_high,
        }
    expected["zero_variance_group_frac"] = zero_variance_group_fraction(scores, group_index, num_groups, valid)
    expected["adv_var_before"] = float(before[valid].var())
    expected["adv_var_after"] = float(after[valid].var())
    assert expected["zero_variance_group_frac"] >= 0.25  # uid0 at least
    for key, value in expected.items():
        assert metrics[key] == pytest.approx(value, rel=1e-5, abs=1e-7), key


def test_a_verl_with_its_own_estimators_keeps_them_and_still_imports():
    """The upstream series (upstream/verl/) registers edge_eda and gepo in verl itself: the plugin must not make
    ``import verl`` fail over the names (verl's register_adv_est raises on a second function), and defers."""
    from types import SimpleNamespace


    def native_eda(**kwargs):
        return None

    registry = {"edge_eda": native_eda}

    def register_adv_est(name):
        def decorator(function):
            if name in registry and registry[name] is not function:
                raise ValueError(f"Adv estimator {name} has already been registered")
            registry[name] = function
            return function

        return decorator

    module = SimpleNamespace(ADV_ESTIMATOR_REGISTRY=registry, register_adv_est=register_adv_est)
    with pytest.warns(UserWarning, match="verl's own is used"):
        estimator_adapter.register_estimators(module)
    assert registry == {"edge_eda": native_eda, "gepo": estimator_adapter.adapter_of("gepo")}
    with pytest.warns(UserWarning):  # idempotent: a second import changes nothing
        estimator_adapter.register_estimators(module)
    assert registry == {"edge_eda": native_eda, "gepo": estimator_adapter.adapter_of("gepo")}
