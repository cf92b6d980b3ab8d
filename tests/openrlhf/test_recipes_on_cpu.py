"""The OpenRLHF recipes (recipes/openrlhf/, from edge_verl/openrlhf/recipes.py): each file is its definition
written out, and the command it prints (DRY_RUN=1) passes OpenRLHF 0.11.2's own argument parser and the
launcher's checks with the options file the recipe writes."""

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from edge_verl.openrlhf import train_ppo_ray
from edge_verl.openrlhf.recipes import OPENRLHF_RECIPES, openrlhf_recipe_text
from tests.openrlhf.test_launcher_on_cpu import launch  # noqa: F401  (the fixture)

RECIPES = Path(__file__).resolve().parents[2] / "recipes"


def printed(recipe, tmp_path) -> tuple[dict, list[str]]:
    """(the options file's content, OpenRLHF's argv) of the command the recipe prints."""
    # the package under test first on the path: the printed command names its files
    path = os.pathsep.join([str(RECIPES.parent), *filter(None, [os.environ.get("PYTHONPATH")])])
    env = {**os.environ, "DRY_RUN": "1", "PYTHON": sys.executable, "CKPT_DIR": str(tmp_path), "PYTHONPATH": path}
    done = subprocess.run(["bash", str(RECIPES / recipe.file_name)], env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assignment, python, dash_m, module, *argv = shlex.split(done.stdout)
    assert (python, dash_m, module) == (sys.executable, "-m", "edge_verl.openrlhf.train_ppo_ray")
    name, path = assignment.split("=", 1)
    assert name == "EDGE_VERL_OPENRLHF"
    return json.loads(Path(path).read_text()), argv


@pytest.mark.parametrize("recipe", OPENRLHF_RECIPES, ids=lambda recipe: recipe.method + "-" + recipe.setup)
def test_each_openrlhf_recipe_is_its_definition_and_its_command_passes_openrlhfs_parser_and_the_checks(recipe, launch, tmp_path):  # noqa: F811
    assert (RECIPES / recipe.file_name).read_text() == openrlhf_recipe_text(recipe), "run `edge-verl recipe --write`"
    options, argv = printed(recipe, tmp_path)
    args = launch(argv, options)
    assert args.algo.advantage.estimator == recipe.estimator and args.algo.kl.init_coef == 0
    assert args.actor.loss_agg_mode == "seq-mean-token-mean" and args.rollout.temperature == 0.6
    # each paper's setting: EDGE-GRPO's 1 prompt x 8 on Qwen2.5-Math-7B and Hard-1K, GEPO's 32 x 16 on Qwen2.5-7B and Random-1K
    setting = {"edge": ("Qwen/Qwen2.5-Math-7B", 1, 8, "deepscaler_hard_1k"), "gepo": ("Qwen/Qwen2.5-7B", 32, 16, "deepscaler_random_1k")}
    model, prompts, n, train = setting[recipe.setup]
    assert (args.actor.model_name_or_path, args.rollout.batch_size, args.rollout.n_samples_per_prompt) == (model, prompts, n)
    assert args.train.batch_size == n * prompts and args.data.prompt_dataset.endswith(f"/train/{train}.jsonl")
    # the five benchmarks, one sample a problem at T = 0.1, each its own file (OpenRLHF groups them by their rows' datasource)
    assert [path.rsplit("/", 1)[-1] for path in args.eval.dataset.split(",")] == [
        "aime24.jsonl", "amc.jsonl", "math500.jsonl", "minerva.jsonl", "olympiad_bench.jsonl"]
    assert args.eval.steps > 0 and args.eval.n_samples_per_prompt == 1 and args.eval.temperature == 0.1 and args.data.label_key == "label"
    assert args.data.max_len == 512 + args.rollout.max_new_tokens
    if recipe.gec:  # the agent grades; the group and the temperatures agree; a correction fits
        assert args.train.agent_func_path == train_ppo_ray.GEC_AGENT_FILE and not args.reward.remote_url
        gec = options["gec"]
        assert (gec["n_samples_per_prompt"], gec["rollout_temperature"]) == (8, 0.6) and args.eval.temperature == 0.1
        assert args.rollout.max_new_tokens == gec["first_sample_tokens"] + 32 + gec["continuation_tokens"] == 1024 + 32 + 256
    else:
        assert args.reward.remote_url == train_ppo_ray.REWARD_FILE and args.rollout.max_new_tokens == 1024
    # the method's own options (GEPO's ablations) carried into the options file
    expected = {"gepo_no_high": {"ablation": "no_high_entropy_control", "alpha_high": 1.0},
                "gepo_no_low": {"ablation": "no_low_entropy_control", "alpha_low": 1.0},
                "gepo_symmetric": {"ablation": "symmetric", "alpha_low": 0.5, "alpha_high": 0.5}, "gepo": {}}
    if recipe.method in expected:
        assert options["gepo"] == expected[recipe.method]


def test_a_gepo_recipe_with_one_prompt_per_step_is_refused_before_ray_starts(launch, tmp_path, monkeypatch):  # noqa: F811
    import ray

    recipe = next(recipe for recipe in OPENRLHF_RECIPES if recipe.method == "gepo")
    monkeypatch.setenv("PROMPTS_PER_STEP", "1")
    options, argv = printed(recipe, tmp_path)
    started = []
    monkeypatch.setattr(ray, "init", lambda *args, **kwargs: started.append(args))
    with pytest.raises(ValueError, match="--rollout.batch_size=1: gepo needs at least 2 prompt groups per step"):
        launch(argv, options)
    assert started == []
