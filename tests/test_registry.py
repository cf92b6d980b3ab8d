"""The registry of estimators: an estimator registered from outside the package (tests/e2e/toy_estimator.py, one
module that nothing else of the plugin knows) is found by every consumer of the registry, with no other file
changed: verl's registry and the estimator adapter, both trainers' adapters (the run, its state and the legacy
advantage step), the OpenRLHF coupling (options file, argument checks, the launcher's choices, the advantage
computation, its state in OpenRLHF's checkpoints and the dump), the doctor, the options page, the Hydra configs'
options, the methods, a recipe and the demo. No verl import (tests/integration/test_registry_in_verl_on_cpu.py
does the same through verl's own functions)."""

from __future__ import annotations

import importlib
import sys
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from edge_verl.estimators import builtin_names, names
from edge_verl.estimators.base import ESTIMATORS, Estimator, declared_metrics, register_estimator

TOY_MODULE = "tests.e2e.toy_estimator"
TOY = "toy_sign"


@pytest.fixture
def toy():
    """The toy estimator registered for one test, removed after it (and the Hydra options stored without it)."""
    module = importlib.import_module(TOY_MODULE)
    register_estimator(module.TOY)
    try:
        yield module
    finally:
        ESTIMATORS.unregister(TOY)
        if "edge_verl.conf" in sys.modules:
            sys.modules["edge_verl.conf"].store_options()


def test_the_package_estimators_are_its_modules_each_named_by_its_key():
    assert builtin_names() == ("edge_eda", "gepo") == names()
    assert list(ESTIMATORS) == ["edge_eda", "gepo"] and all(isinstance(entry, Estimator) for entry in ESTIMATORS.values())
    assert all(ESTIMATORS[name].name == name for name in builtin_names())


def test_an_estimator_is_registered_once_under_its_name(toy):
    assert names() == ("edge_eda", "gepo", TOY) and list(ESTIMATORS)[-1] == TOY
    assert register_estimator(toy.TOY) is toy.TOY  # the same entry again: a no-op
    with pytest.raises(ValueError, match="already in the table"):
        register_estimator(Estimator(TOY, "another", toy.ToyConfig, toy.toy_sign))


def _group_step(rows: int = 4, width: int = 3):
    scores = torch.tensor([1.0, 0.0, 1.0, 1.0])[:rows]
    mask = torch.ones(rows, width, dtype=torch.long)
    old_log_probs = -torch.rand(rows, width, generator=torch.Generator().manual_seed(0))
    uids = np.array(["a", "a", "b", "b"][:rows], dtype=object)
    return scores, mask, old_log_probs, uids


def test_verl_registry_the_adapter_and_the_run_find_it(toy):
    from edge_verl.integration import estimator_adapter
    from edge_verl.integration.run import active_run, advantage_step, plugin_in_use, TrainingRun

    registered = {}
    core_algos = SimpleNamespace(ADV_ESTIMATOR_REGISTRY=registered,
                                 register_adv_est=lambda name: lambda function: registered.setdefault(name, function))
    estimator_adapter.register_estimators(core_algos)
    assert set(registered) == {"edge_eda", "gepo", TOY}

    algorithm = OmegaConf.create({"adv_estimator": TOY, TOY: {"scale": 0.5}})
    assert plugin_in_use(algorithm)
    run = TrainingRun.from_config(algorithm)
    assert run.entry is toy.TOY and run.options.scale == 0.5 and run.token_inputs == ("old_log_probs",)
    scores, mask, old_log_probs, uids = _group_step()
    rewards = torch.zeros(4, 3)
    rewards[:, -1] = scores
    with active_run(run), advantage_step(run, old_log_probs=old_log_probs) as step:
        advantages, _ = registered[TOY](rewards, mask, index=uids, config=algorithm)
    # group a: rewards 1, 0 -> signs +1, -1; group b: 1, 1 -> 0, 0; times scale 0.5
    torch.testing.assert_close(advantages, torch.tensor([0.5, -0.5, 0.0, 0.0])[:, None].expand(4, 3))
    assert step.metrics[f"edge_verl/{TOY}/calls"] == 1.0
    assert run.state_dict() == {"toy_calls": {"calls": 1}}  # saved with every checkpoint under its state_key


def test_the_legacy_trainers_advantage_step_takes_it_for_one_of_the_plugins(toy):
    from edge_verl.integration.estimator_adapter import adapter_of
    from edge_verl.integration.legacy_trainer import STEP_METRICS_KEY, LegacyAdapter
    from edge_verl.integration.run import active_run, TrainingRun

    scores, mask, old_log_probs, uids = _group_step()
    rewards = torch.zeros(4, 3)
    rewards[:, -1] = scores
    data = SimpleNamespace(batch={"token_level_rewards": rewards, "response_mask": mask, "old_log_probs": old_log_probs},
                           non_tensor_batch={"uid": uids}, meta_info={})

    def verl_compute_advantage(data, adv_estimator, **kwargs):  # what ray_trainer.compute_advantage does with it
        batch = data.batch
        data.batch["advantages"], _ = adapter_of(adv_estimator)(batch["token_level_rewards"], batch["response_mask"],
                                                                 index=data.non_tensor_batch["uid"])
        return data

    run = TrainingRun.from_config(OmegaConf.create({"adv_estimator": TOY}))
    with active_run(run):
        result = LegacyAdapter.compute_advantage(verl_compute_advantage)(data, TOY)
    assert result.meta_info[STEP_METRICS_KEY][f"edge_verl/{TOY}/calls"] == 1.0
    assert result.meta_info[STEP_METRICS_KEY][f"edge_verl/{TOY}/old_logprob_mean"] < 0  # the batch's old log-probs


def test_the_openrlhf_coupling_finds_it(toy, tmp_path):
    from edge_verl.openrlhf import estimators
    from edge_verl.openrlhf.options import OpenRlhfOptions, sections
    from edge_verl.openrlhf.train_ppo_ray import check_args

    assert TOY in sections()
    options = OpenRlhfOptions.from_mapping({TOY: {"scale": 2.0}, "dump": {"dir": str(tmp_path)}})
    assert options.toy_sign.scale == 2.0 and OpenRlhfOptions().estimator(TOY).scale == 1.0
    with pytest.raises(ValueError, match=f"{TOY}.scale=-1"):
        OpenRlhfOptions.from_mapping({TOY: {"scale": -1}})
    args = SimpleNamespace(
        rollout=SimpleNamespace(n_samples_per_prompt=2, temperature=0.6, batch_size=2),
        reward=SimpleNamespace(clip_range=None),
        algo=SimpleNamespace(advantage=SimpleNamespace(estimator=TOY, is_correction_level="off"), kl=SimpleNamespace(init_coef=0.0, use_loss=False)),
        train=SimpleNamespace(agent_func_path=None),
    )
    check_args(args, options)
    with pytest.raises(ValueError, match="n_samples_per_prompt=1 must be >= 2"):
        check_args(SimpleNamespace(**{**vars(args), "rollout": SimpleNamespace(n_samples_per_prompt=1, batch_size=2)}), options)
    # OpenRLHF's experience maker: two experiences whose samples are shuffled across them (index = original position)
    scores, mask, old_log_probs, _ = _group_step()
    experiences = [
        SimpleNamespace(index=index, rewards=scores[index], action_mask=mask[index], action_log_probs=old_log_probs[index],
                        sequences=torch.zeros(2, 5, dtype=torch.long), attention_mask=torch.ones(2, 5), info={}, kl=None)
        for index in ([3, 0], [1, 2])
    ]
    maker = SimpleNamespace(strategy=SimpleNamespace(args=args))
    estimators.compute_edge_advantages(maker, experiences, options, lambda experiences, args: None)
    torch.testing.assert_close(experiences[0].advantages[:, 0], torch.tensor([0.0, 2.0]))
    torch.testing.assert_close(experiences[1].advantages[:, 0], torch.tensor([-2.0, 0.0]))
    state = estimators.estimator_state(maker, options)
    assert estimators.state_key(toy.TOY) == "edge_verl_toy_calls" and state.calls == 1
    (dumped,) = [torch.load(path, weights_only=False) for path in tmp_path.glob("advantages_*.pt")]
    assert dumped["estimator"] == TOY and dumped["options"] == {"scale": 2.0} and dumped["state_before"] == {"calls": 0}
    torch.testing.assert_close(estimators.recompute_dumped(dumped).advantages, dumped["advantages"])
    torch.testing.assert_close(experiences[0].info["return"], torch.tensor([0.0, 2.0]))  # its mean advantage per row


def test_the_doctor_expects_it_in_verls_registry(toy):
    from edge_verl.integration.doctor import expected_estimators, find_problems

    assert expected_estimators() == ("edge_eda", "gepo", TOY)
    report = {"entry_points": ["edge_verl.integration.plugin"], "estimators": ["edge_eda", "gepo", "grpo"],
              "agent_loops": ["edge_gec"], "internals": [], "cpu": None, "reward_probe": {"grader": "worker", "score": 1.0}}
    assert find_problems(report) == [f"advantage estimator {TOY!r} is not registered in verl's core_algos"]
    assert find_problems({**report, "estimators": [*report["estimators"], TOY]}) == []


def test_the_options_page_and_the_hydra_configs_hold_its_options(toy):
    from edge_verl.conf import OPTIONS_CONFIG, store_options
    from edge_verl.options_page import option_sections, options_markdown

    assert list(option_sections())[:3] == ["edge_eda", "gepo", TOY]
    page = options_markdown()
    assert f"## algorithm.{TOY}" in page and f"| `algorithm.{TOY}.scale` | float | `1.0` |" in page
    node = store_options()
    assert node["algorithm"][TOY] == {"scale": 1.0}
    from hydra.core.config_store import ConfigStore

    assert OmegaConf.to_container(ConfigStore.instance().load(f"{OPTIONS_CONFIG}.yaml").node)["algorithm"][TOY] == {"scale": 1.0}


def test_the_methods_a_recipe_and_the_demo_find_it(toy, tmp_path):
    from edge_verl.methods import Method, get_method, method_names, method_overrides
    from edge_verl.recipes import Recipe, recipe_text
    from edge_verl_lab.demo.run import ALGORITHMS, DemoConfig, build_overrides

    method = get_method(TOY)
    assert method.estimator == TOY and TOY in method_names() and Method("mine", "toy with options", TOY).estimator == TOY
    overrides = method_overrides(TOY, seed=3, eda_form="gradient", first_sample_tokens=16, continuation_tokens=64)
    assert overrides[0] == f"algorithm.adv_estimator={TOY}"
    recipe = Recipe(TOY, "Qwen/Qwen2.5-7B", "fsdp", "gepo")  # what one line in recipes.RECIPES would add
    assert f"algorithm.adv_estimator={TOY}" in recipe_text(recipe)
    assert ALGORITHMS[:5] == ("grpo", "edge_eda", "gepo", TOY, "edge")
    paths = {"model": tmp_path / "m", "train": tmp_path / "t.parquet", "val": tmp_path / "v.parquet"}
    assert build_overrides(DemoConfig(algorithm=TOY, out=tmp_path, seed=3), paths)[: len(overrides)] == overrides


def test_the_demo_and_the_study_report_show_the_metrics_it_declares(toy):
    from edge_verl_lab.demo.run import plot_panels, summarise
    from edge_verl_lab.study.report import _mechanism_lines, mechanism_summary

    calls, old = f"edge_verl/{TOY}/calls", f"edge_verl/{TOY}/old_logprob_mean"
    rows = [{"step": step, "critic/score/mean": 0.5, calls: float(step), old: -1.0 - step} for step in (1, 2, 3)]
    panels = dict(plot_panels(rows))
    assert panels["method statistics"] == [calls] and panels["policy entropy"] == [old]
    assert "toy calls" in summarise(rows)
    # the study's mechanism table: calls 1, 2, 3 in each of two seeds -> step 1: 1, last step: 3, all steps: 2
    runs = {f"{TOY}_seed{seed}": {"method": TOY, "seed": seed} for seed in (1, 2)}
    found = mechanism_summary(SimpleNamespace(methods=(TOY,), steps=3), runs, {name: rows for name in runs})
    assert found == {TOY: {calls: {"first": 1.0, "last": 3.0, "mean": 2.0}}}
    assert f"| {TOY} | toy: calls so far | 1.000 | 3.000 | 2.000 |" in _mechanism_lines({"mechanisms": found})


def test_a_metric_is_declared_once_with_a_known_panel(toy):
    from edge_verl.estimators.base import Metric

    with pytest.raises(ValueError, match="panel='elsewhere'; allowed: entropy, statistics"):
        Metric("calls", panel="elsewhere")
    with pytest.raises(ValueError, match="no leading or trailing"):
        Metric("/calls")
    twice = (Metric("calls"), Metric("calls", label="again"))
    with pytest.raises(ValueError, match="each key once"):
        Estimator(name=TOY, description="", config=toy.ToyConfig, compute=toy.toy_sign, metrics=twice)
    # the same key from the estimator and from the actor loss are two metrics
    assert toy.TOY.logged(Metric("calls")) == f"edge_verl/{TOY}/calls" and toy.TOY.logged(Metric("calls", actor=True)) == f"actor/{TOY}/calls"


def test_without_it_no_consumer_knows_it():
    from edge_verl.methods import method_names
    from edge_verl.options_page import option_sections
    from edge_verl_lab.demo.run import ALGORITHMS

    assert TOY not in names() and TOY not in ESTIMATORS and TOY not in option_sections()
    assert TOY not in method_names() and TOY not in ALGORITHMS
    assert not any(key.startswith(f"edge_verl/{TOY}/") for key, _ in declared_metrics())
