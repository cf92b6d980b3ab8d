"""Every recipe's overrides compose against verl 0.9.1's real Hydra config and pass its validation.

A recipe is run with DRY_RUN=1, which prints the verl command (``--config-name=...`` and the overrides); they are composed
with verl's own config (an unknown key fails), checked against the keys verl 0.9.1 parses but silently
ignores (VERL.md), validated by verl's ``validate_config`` and its typed configs, and by the plugin's
early checks (estimator options, GEC settings).
"""

import functools
import subprocess
import tempfile
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module
from hydra.core.global_hydra import GlobalHydra

from edge_verl.methods import get_method
from tests.recipe_dry_run import dry_run, python_path_env, recipe_method

pytestmark = pytest.mark.verl

RECIPES = sorted((Path(__file__).resolve().parents[2] / "recipes").glob("*.sh"))
# Parsed by verl 0.9.1 but ignored (or removed): a recipe using them would silently not do what it says.
IGNORED_KEYS = ("custom_reward_function.", "+custom_reward_function.", "reward_model.", "actor_rollout_ref.actor.grad_clip")
REMOVED_VALUES = ("actor_rollout_ref.rollout.mode=sync",)


@functools.cache
def prepared_data() -> str:
    """The papers' sets as scripts/prepare_data.py writes them: verl's validate_config runs the plugin's
    preflight, which checks that the data files exist and agree with GEC's switch."""
    from edge_verl.data import prepare

    folder = Path(tempfile.mkdtemp(prefix="edge_verl_recipes_data_"))
    prepare(folder)
    return str(folder)


def recipe_overrides(recipe: Path, *arguments: str, **env) -> tuple[str, list[str]]:
    """(config name, overrides) of the command the recipe prints with DRY_RUN=1, on the prepared data."""
    printed = dry_run(recipe, *arguments, **{"DATA_DIR": prepared_data(), **env})
    return printed.config_name or "sft_trainer_engine", printed.overrides


def test_there_are_recipes_for_both_backends():
    names = [recipe.name for recipe in RECIPES]
    assert "run_gepo_qwen7b.sh" in names
    assert any("megatron" in name for name in names) and any("fsdp" in name for name in names)


PPO_RECIPES = [recipe for recipe in RECIPES if get_method(recipe_method(recipe)).estimator is not None]
SFT_RECIPES = [recipe for recipe in RECIPES if recipe not in PPO_RECIPES]


def _compose(config_name, overrides):
    GlobalHydra.instance().clear()
    with initialize_config_module(config_module="verl.trainer.config", version_base=None):
        config = compose(config_name=config_name, overrides=overrides)
    GlobalHydra.instance().clear()
    return config


@pytest.mark.parametrize("recipe", PPO_RECIPES, ids=[recipe.stem for recipe in PPO_RECIPES])
def test_recipe_composes_against_verl_and_validates(recipe):
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config

    from edge_verl.integration.run_checks import check_run_config, check_token_budgets

    config_name, overrides = recipe_overrides(recipe)
    for override in overrides:
        assert not override.startswith(IGNORED_KEYS), f"{recipe.name}: {override} is ignored by verl 0.9.1"
        assert override not in REMOVED_VALUES, f"{recipe.name}: {override} was removed from verl"
    config = _compose(config_name, overrides)
    assert config.actor_rollout_ref.actor.strategy == ("megatron" if "megatron" in recipe.name else "fsdp2")
    assert config.reward.custom_reward_function.path == "pkg://edge_verl.reward"
    validate_config(config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
    omega_conf_to_dataclass(config.actor_rollout_ref.rollout)
    omega_conf_to_dataclass(config.actor_rollout_ref.actor.optim)
    # dynamic batch sizes, as verl's GPU examples: token budgets that hold at least one whole sequence
    sequence = config.data.max_prompt_length + config.data.max_response_length
    actor, rollout, ref = config.actor_rollout_ref.actor, config.actor_rollout_ref.rollout, config.actor_rollout_ref.ref
    assert actor.use_dynamic_bsz and rollout.log_prob_use_dynamic_bsz and ref.log_prob_use_dynamic_bsz
    assert sequence <= actor.ppo_max_token_len_per_gpu <= rollout.log_prob_max_token_len_per_gpu == ref.log_prob_max_token_len_per_gpu
    run = check_run_config(config)
    method = get_method(recipe_method(recipe))  # its definition: edge_verl/methods.py
    assert run.estimator == method.estimator
    assert run.gec_enabled == method.gec, "GEC methods switch GEC on, the others leave it off"
    assert (run.estimator == "edge_eda" and run.options.entropy_gradient) == method.eda, "EDA recipes use the reference's gradient form"
    assert run.gec.force_regenerate == method.force_regenerate
    if run.gec_enabled:  # the first sample keeps the paper's 1024; corrections get their full 256 beyond it
        assert (run.gec.first_sample_tokens, run.gec.continuation_tokens) == (1024, 256)
        # the longest corrected response: the first sample, the phrase (a byte-level BPE such as Qwen's never needs
        # more tokens than bytes) and the continuation; a solution longer than the response is skipped, never cut
        phrase_tokens_at_most = len(run.gec.reflection_phrase.encode())
        longest = run.gec.first_sample_tokens + phrase_tokens_at_most + run.gec.continuation_tokens
        assert config.actor_rollout_ref.rollout.response_length >= longest
        check_token_budgets(config)  # every pass's budget holds a prompt and that response
    else:
        assert config.actor_rollout_ref.rollout.response_length == 1024


def test_gepo_ablation_recipes_run_each_ablation_and_only_it():
    from edge_verl.integration.run_checks import check_run_config

    expected = {
        "gepo_no_high": ("no_high_entropy_control", 0.5, 1.0),
        "gepo_no_low": ("no_low_entropy_control", 1.0, 0.2),
        "gepo_symmetric": ("symmetric", 0.5, 0.5),
    }
    recipes = {recipe_method(recipe): recipe for recipe in PPO_RECIPES if recipe_method(recipe) in expected}
    assert set(recipes) == set(expected)
    for method, recipe in recipes.items():
        options = check_run_config(_compose(*recipe_overrides(recipe))).options
        assert (options.ablation, options.alpha_low, options.alpha_high) == expected[method]


@pytest.mark.parametrize("recipe", SFT_RECIPES, ids=[recipe.stem for recipe in SFT_RECIPES])
def test_sft_recipe_composes_against_verls_sft_trainer(recipe):
    from verl.utils.config import omega_conf_to_dataclass

    config_name, overrides = recipe_overrides(recipe)
    assert config_name == "sft_trainer_engine"
    config = _compose(config_name, overrides)
    assert config.data.train_files.endswith("sft_hard_1k.parquet") and config.data.messages_key == "messages"
    assert "hf_model" in config.checkpoint.save_contents  # scripts/evaluate.py reads the HF weights
    assert config.model.path == "Qwen/Qwen2.5-Math-7B"  # (its typed config would fetch the model's config.json)
    for section in (config.optim, config.engine):
        omega_conf_to_dataclass(section)


def test_user_overrides_come_last_and_win():
    _, overrides = recipe_overrides(PPO_RECIPES[0], LR="3e-6")
    assert "actor_rollout_ref.actor.optim.lr=3e-6" in overrides
    _, overrides = recipe_overrides(RECIPES[0], "trainer.total_epochs=7")
    assert overrides[-1] == "trainer.total_epochs=7"


# The CPU backend's FSDP set (EDGE_VERL_CPU=1): what an FSDP recipe on CPU has always run with.
FSDP_CPU_SET = {
    # Ray, the scheduling and the device
    "ray_kwargs.ray_init.num_cpus=32", "transfer_queue.backend.SimpleStorage.num_data_storage_units=1",
    "+ray_kwargs.ray_init.num_gpus=1", "+ray_kwargs.ray_init.include_dashboard=False",
    "trainer.n_gpus_per_node=1", "trainer.nnodes=1", "trainer.device=cpu",
    # the HF model without FlashAttention, FSDP2, the hf rollout
    "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",
    "actor_rollout_ref.actor.strategy=fsdp2", "actor_rollout_ref.ref.strategy=fsdp2",
    "actor_rollout_ref.rollout.name=hf", "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
    # one agent-loop and one reward-loop worker, no DataLoader workers
    "actor_rollout_ref.rollout.agent.num_workers=1", "reward.num_workers=1", "data.dataloader_num_workers=0",
    # torch.compile of verl's entropy function: 27 s of every CPU run's first step (cpu/overrides.py)
    "actor_rollout_ref.actor.use_torch_compile=False",
    "actor_rollout_ref.actor.fsdp_config.use_torch_compile=False", "actor_rollout_ref.ref.fsdp_config.use_torch_compile=False",
}


def test_an_fsdp_recipe_on_cpu_gets_the_fsdp_set_unchanged():
    recipe = next(recipe for recipe in PPO_RECIPES if recipe.name == "run_gepo_qwen7b.sh")
    _, plain = recipe_overrides(recipe)
    config_name, on_cpu = recipe_overrides(recipe, EDGE_VERL_CPU="1")
    assert on_cpu[: len(plain)] == plain and set(on_cpu[len(plain):]) == FSDP_CPU_SET
    assert _compose(config_name, on_cpu).actor_rollout_ref.actor.strategy == "fsdp2"


@pytest.mark.parametrize("tensor_parallel", [1, 2])
def test_a_megatron_recipe_on_cpu_runs_megatron(tensor_parallel):
    recipe = next(recipe for recipe in PPO_RECIPES if recipe.name == "run_edge_qwen2.5-math-7b_megatron.sh")
    config_name, overrides = recipe_overrides(recipe, EDGE_VERL_CPU="1", CPU_TENSOR_PARALLEL=str(tensor_parallel))
    assert config_name == "ppo_megatron_trainer"
    assert not any("strategy=" in override for override in overrides), "no strategy override: Megatron stays Megatron"
    config = _compose(config_name, overrides)
    actor, ref = config.actor_rollout_ref.actor, config.actor_rollout_ref.ref
    assert actor.strategy == ref.strategy == "megatron"
    assert actor.megatron.tensor_model_parallel_size == ref.megatron.tensor_model_parallel_size == tensor_parallel
    assert config.trainer.n_gpus_per_node == tensor_parallel and config.ray_kwargs.ray_init.num_gpus == tensor_parallel
    assert actor.megatron.vanilla_mbridge and ref.megatron.vanilla_mbridge
    assert not actor.megatron.sequence_parallel and not ref.megatron.sequence_parallel
    for key in ("masked_softmax_fusion", "sequence_parallel"):  # mbridge's CUDA-only defaults, off
        assert actor.megatron.override_transformer_config[key] is False
    assert dict(ref.megatron.override_transformer_config) == dict(actor.megatron.override_transformer_config)
    assert config.actor_rollout_ref.model.use_remove_padding is False
    assert config.actor_rollout_ref.rollout.name == "hf"
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    validate_config(config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))


def test_tensor_parallel_on_cpu_is_refused_for_fsdp_recipes():
    recipe = next(recipe for recipe in PPO_RECIPES if recipe.name == "run_gepo_qwen7b.sh")
    environment = python_path_env(DRY_RUN="1", EDGE_VERL_CPU="1", CPU_TENSOR_PARALLEL="2")
    completed = subprocess.run(["bash", str(recipe)], capture_output=True, text=True, env=environment)
    assert completed.returncode == 2 and "tensor_parallel > 1 needs the megatron backend" in completed.stderr


def test_a_recipe_on_cpu_keeps_vllm_with_cpu_rollout_vllm():
    recipe = next(recipe for recipe in PPO_RECIPES if recipe.name == "run_gepo_qwen7b.sh")
    config_name, overrides = recipe_overrides(recipe, EDGE_VERL_CPU="1", CPU_ROLLOUT="vllm")
    config = _compose(config_name, overrides)
    rollout = config.actor_rollout_ref.rollout
    assert rollout.name == "vllm" and rollout.enable_sleep_mode is False and rollout.enforce_eager is True
    assert config.actor_rollout_ref.actor.strategy == "fsdp2"
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    validate_config(config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
