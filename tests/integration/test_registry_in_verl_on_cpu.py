"""An estimator registered from outside the package (tests/e2e/toy_estimator.py) through verl's own functions,
in-process: registered in verl's registry and run by verl's ``compute_advantage``, its metrics handed back by the
legacy trainer's adapter, its options composed by Hydra from the plugin's config without "+"
(tests/test_registry.py checks the other consumers; tests/e2e/test_main_ppo_on_cpu.py trains it)."""

import importlib
import sys

import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_module
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf
from verl import DataProto
from verl.trainer.ppo import core_algos, ray_trainer

from edge_verl.estimators.base import ESTIMATORS, register_estimator
from edge_verl.integration import estimator_adapter
from edge_verl.integration.legacy_trainer import STEP_METRICS_KEY
from edge_verl.integration.run import active_run, TrainingRun

pytestmark = pytest.mark.verl

TOY = "toy_sign"


@pytest.fixture
def toy():
    module = importlib.import_module("tests.e2e.toy_estimator")
    register_estimator(module.TOY)
    try:
        yield module
    finally:
        ESTIMATORS.unregister(TOY)
        core_algos.ADV_ESTIMATOR_REGISTRY.pop(TOY, None)
        if "edge_verl.conf" in sys.modules:
            sys.modules["edge_verl.conf"].store_options()


def test_verl_runs_it_and_hydra_composes_its_options(toy):
    estimator_adapter.register_estimators(core_algos)  # what verl's import of core_algos does (plugin.py)
    assert core_algos.get_adv_estimator_fn(TOY) is estimator_adapter.adapter_of(TOY)

    GlobalHydra.instance().clear()
    importlib.import_module("edge_verl.conf").store_options()  # Hydra imported the package before the toy was registered
    with initialize_config_module(config_module="edge_verl.conf", version_base=None):
        config = compose(config_name="edge_ppo_trainer", overrides=[f"algorithm.adv_estimator={TOY}", f"algorithm.{TOY}.scale=0.5"])
    GlobalHydra.instance().clear()
    assert OmegaConf.to_container(config.algorithm[TOY]) == {"scale": 0.5}

    uids = np.array(["a", "a", "b", "b"], dtype=object)
    rewards = torch.zeros(4, 3)
    rewards[:, -1] = torch.tensor([1.0, 0.0, 1.0, 1.0])
    data = DataProto.from_dict(
        tensors={"token_level_rewards": rewards, "response_mask": torch.ones(4, 3), "old_log_probs": -torch.ones(4, 3)},
        non_tensors={"uid": uids},
    )
    run = TrainingRun.from_config(config.algorithm)
    with active_run(run):
        out = ray_trainer.compute_advantage(data, adv_estimator=TOY, config=config.algorithm)
    torch.testing.assert_close(out.batch["advantages"], torch.tensor([0.5, -0.5, 0.0, 0.0])[:, None].expand(4, 3))
    assert out.meta_info[STEP_METRICS_KEY][f"edge_verl/{TOY}/calls"] == 1.0
    assert out.meta_info[STEP_METRICS_KEY][f"edge_verl/{TOY}/old_logprob_mean"] == -1.0
    assert run.state_dict() == {"toy_calls": {"calls": 1}}
