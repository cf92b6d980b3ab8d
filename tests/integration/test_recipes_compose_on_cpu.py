"""Every recipe's overrides compose against verl 0.9.1's real Hydra config and pass its validation.

A recipe is run with DRY_RUN=1, which prints ``--config-name=...`` and its overrides; they are composed
with verl's own config (an unknown key fails), checked against the keys verl 0.9.1 parses but silently
ignores (VERL.md), validated by verl's ``validate_config`` and its typed configs, and by the plugin's
early checks (estimator options, GEC settings).
"""

import os
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("verl")
from hydra import compose, initialize_config_module  # noqa: E402
from hydra.core.global_hydra import GlobalHydra  # noqa: E402

pytestmark = pytest.mark.verl

RECIPES = sorted((Path(__file__).resolve().parents[2] / "recipes").glob("*.sh"))
# Parsed by verl 0.9.1 but ignored (or removed): a recipe using them would silently not do what it says.
IGNORED_KEYS = ("custom_reward_function.", "+custom_reward_function.", "reward_model.", "actor_rollout_ref.actor.grad_clip")
REMOVED_VALUES = ("actor_rollout_ref.rollout.mode=sync",)


def recipe_overrides(recipe: Path, **env) -> tuple[str, list[str]]:
    environment = {**os.environ, "DRY_RUN": "1", **env}
    lines = subprocess.run(["bash", str(recipe)], capture_output=True, text=True, check=True, env=environment).stdout.splitlines()
    assert lines[0].startswith("--config-name="), lines[:2]
    return lines[0].split("=", 1)[1], lines[1:]


def test_there_are_recipes_for_both_backends():
    names = [recipe.name for recipe in RECIPES]
    assert "run_gepo_qwen7b.sh" in names
    assert any("megatron" in name for name in names) and any("fsdp" in name for name in names)


@pytest.mark.parametrize("recipe", RECIPES, ids=[recipe.stem for recipe in RECIPES])
def test_recipe_composes_against_verl_and_validates(recipe):
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config

    from edge_verl.integration.trainer_hooks import check_run_config

    config_name, overrides = recipe_overrides(recipe)
    for override in overrides:
        assert not override.startswith(IGNORED_KEYS), f"{recipe.name}: {override} is ignored by verl 0.9.1"
        assert override not in REMOVED_VALUES, f"{recipe.name}: {override} was removed from verl"
    GlobalHydra.instance().clear()
    with initialize_config_module(config_module="verl.trainer.config", version_base=None):
        config = compose(config_name=config_name, overrides=overrides)
    GlobalHydra.instance().clear()
    assert config.actor_rollout_ref.actor.strategy == ("megatron" if "megatron" in recipe.name else "fsdp2")
    assert config.reward.custom_reward_function.path == "pkg://edge_verl.reward"
    validate_config(config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
    omega_conf_to_dataclass(config.actor_rollout_ref.rollout)
    omega_conf_to_dataclass(config.actor_rollout_ref.actor.optim)
    run = check_run_config(config)
    assert run.gec_enabled == ("edge_" in recipe.name), "EDGE recipes switch GEC on, the others leave it off"


def test_user_overrides_come_last_and_win():
    _, overrides = recipe_overrides(RECIPES[0], LR="3e-6")
    assert "actor_rollout_ref.actor.optim.lr=3e-6" in overrides
    environment = {**os.environ, "DRY_RUN": "1"}
    lines = subprocess.run(
        ["bash", str(RECIPES[0]), "trainer.total_epochs=7"], capture_output=True, text=True, check=True, env=environment
    ).stdout.splitlines()
    assert lines[-1] == "trainer.total_epochs=7"
