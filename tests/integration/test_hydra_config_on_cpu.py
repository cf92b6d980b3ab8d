"""The Hydra configs shipped in edge_verl/config compose on top of verl 0.9.1's and match the dataclasses."""

import pytest

from hydra import compose, initialize_config_module
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from edge_verl.algorithms.gec import GecConfig
from edge_verl.config import MetricsConfig
from edge_verl.estimators.edge_eda import EdaConfig
from edge_verl.estimators.gepo import GepoConfig

pytestmark = pytest.mark.verl


@pytest.fixture
def compose_config():
    GlobalHydra.instance().clear()
    with initialize_config_module(config_module="edge_verl.conf", version_base=None):
        yield lambda name, overrides=(): compose(config_name=name, overrides=list(overrides))
    GlobalHydra.instance().clear()


@pytest.mark.parametrize("name", ["edge_ppo_trainer", "edge_ppo_megatron_trainer"])
def test_shipped_config_extends_verl_and_holds_paper_defaults(compose_config, name):
    config = compose_config(name)
    assert "actor_rollout_ref" in config and config.trainer.use_v1 is True
    gepo = OmegaConf.to_container(config.algorithm.gepo)
    eda = OmegaConf.to_container(config.algorithm.edge_eda)
    assert GepoConfig.from_mapping(gepo) == GepoConfig()
    assert EdaConfig.from_mapping(eda) == EdaConfig()
    assert set(gepo) == set(GepoConfig.model_fields)
    gec = OmegaConf.to_container(config.algorithm.edge_gec)
    assert GecConfig.from_mapping(gec) == GecConfig() and gec["enable"] is False
    assert set(gec) == set(GecConfig.model_fields)
    extra = OmegaConf.to_container(config.algorithm.edge_metrics)
    assert MetricsConfig.from_mapping(extra) == MetricsConfig() and extra["advantage_stats"] is False


def test_options_override_without_plus(compose_config):
    config = compose_config("edge_ppo_trainer", ["algorithm.adv_estimator=gepo", "algorithm.gepo.alpha_low=0.4"])
    assert GepoConfig.from_mapping(OmegaConf.to_container(config.algorithm.gepo)).alpha_low == 0.4
