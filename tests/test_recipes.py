"""The recipes (recipes/run_*.sh) are their definitions written out: every committed file is byte-identical
to what edge_verl/recipes.py writes from edge_verl/methods.py, none is longer than 80 lines, every variable
they set is explained in docs/recipes.md, and the commands they print (DRY_RUN=1) run
each method's overrides exactly as methods.py defines them, a GRPO baseline beside each method with the same
knobs, and FSDP / Megatron twins that differ only in their backend's settings. Whether verl's config accepts
every command: tests/integration/test_recipes_compose_on_cpu.py."""

import os
import re
import subprocess

import pytest

from edge_verl.cli import main
from edge_verl.data import PAPER_EVAL
from edge_verl.methods import KNOBS, RUN_PARAMETERS, get_method, method_overrides
from edge_verl.openrlhf.recipes import OPENRLHF_RECIPES
from edge_verl.recipes import (
    BACKENDS, MAX_LINES, RECIPES, RUN_VARIABLES, TRAINING_SETUPS, Recipe, method_keys, recipe_text, shell_word,
)
from edge_verl_lab.reproduce.tables import TABLES
from tests.recipe_dry_run import RECIPES as FOLDER
from tests.recipe_dry_run import dry_run, python_path_env

PPO = [recipe for recipe in RECIPES if get_method(recipe.method).estimator is not None]
# A fixed log path: the default names the file after the start time.
LOG = {"VERL_FILE_LOGGER_PATH": "/tmp/edge_verl_recipes_test.jsonl"}
# The run variables of the recipes set away from their defaults, and the method parameters they stand for.
ALTERED_VARIABLES = {"SEED": "7", "EDA_ENTROPY_GRADIENT": "False", "MAX_SAMPLE_LENGTH": "512", "GEC_CONTINUATION_TOKENS": "128",
                 "GEPO_SYMMETRIC_ALPHA": "0.3"}
ALTERED_PARAMETERS = {"seed": 7, "eda_form": "detached", "first_sample_tokens": 512, "continuation_tokens": 128, "gepo_symmetric_alpha": 0.3}
DEFAULT_PARAMETERS = {"seed": 42, "eda_form": "gradient", "first_sample_tokens": 1024, "continuation_tokens": 256}
# What follows from GEC in a recipe besides the method's overrides: its rows, and a response long enough for a
# correction past the first sample (with the token budgets that hold it).
GEC_KEYS = {
    "data.train_files", "data.max_response_length", "actor_rollout_ref.actor.ppo_max_token_len_per_gpu",
    "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu", "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu",
}
NAME_KEYS = {"trainer.experiment_name", "trainer.default_local_dir"}  # <method>_<model>_<set>_<backend>_seed<N>


def test_every_recipe_file_is_what_its_definition_writes_and_every_file_has_one():
    for recipe in RECIPES:
        path = FOLDER / recipe.file_name
        assert path.read_text() == recipe_text(recipe), f"{path.name}: run `edge-verl recipe --write`"
        assert os.access(path, os.X_OK), path.name
    assert sorted(path.name for path in FOLDER.glob("run_*.sh")) == sorted(recipe.file_name for recipe in RECIPES)


def test_a_recipe_is_read_in_a_minute_no_file_is_longer_than_80_lines():
    files = [*FOLDER.glob("run_*.sh"), *FOLDER.glob("openrlhf/run_*.sh")]
    assert len(files) == len(RECIPES) + len(OPENRLHF_RECIPES) and MAX_LINES == 80
    longer = {path.name: len(path.read_text().splitlines()) for path in files if len(path.read_text().splitlines()) > MAX_LINES}
    assert longer == {}


def test_every_variable_a_recipe_sets_is_explained_once_in_docs_recipes_md():
    # the recipes' own variables and the shared defaults (recipes/lib): each settable, each on the one page
    texts = [path.read_text() for path in (*FOLDER.glob("run_*.sh"), *FOLDER.glob("lib/*.sh"))]
    variables = {name for text in texts for name in re.findall(r"\b([A-Z][A-Z0-9_]*)=\$\{\1:-", text)}
    assert {"MODEL_PATH", "LR", "EDA_ENTROPY_GRADIENT", "GEPO_SYMMETRIC_ALPHA", "MEGATRON_TP", "SFT_LR", "PYTHON"} <= variables
    page = (FOLDER.parent / "docs" / "recipes.md").read_text()
    assert sorted(name for name in variables if f"`{name}`" not in page) == []
    assert all("docs/recipes.md" in text for text in texts[:len(RECIPES)])


def test_the_recipes_validate_on_the_papers_five_benchmarks_by_default():
    # VAL_FILES's default is written by hand in recipes/lib/defaults.sh; the five are edge_verl.data's
    values = _values(next(recipe for recipe in PPO if recipe.knobs == "gepo"), DATA_DIR="/d")
    assert values["data.val_files"] == "[" + ",".join(f"/d/eval_{name}.parquet" for name in PAPER_EVAL) + "]"


def test_the_recipes_the_tables_the_docs_and_ci_run_are_defined():
    named = {name for table in TABLES.values() for row in table.rows for name in row.recipes.values()}
    documents = [FOLDER.parent / "README.md", FOLDER.parent / "REPRODUCING.md", *(FOLDER.parent / "docs").glob("*.md")]
    # a recipe named by file, the OpenRLHF ones under their folder (recipes/openrlhf/run_*.sh)
    in_the_docs = {name for path in documents for name in re.findall(r"(?:openrlhf/)?run_[A-Za-z0-9_.-]+\.sh", path.read_text())}
    assert {"run_edge_qwen2.5-math-7b_fsdp.sh", "run_gepo_qwen7b.sh", "run_sft_qwen2.5-math-7b_fsdp.sh"} <= in_the_docs
    named |= in_the_docs  # every recipe the README, docs/ and REPRODUCING.md name by file
    named |= {"run_edge-sft-injected_qwen2.5-math-7b_megatron.sh", "run_gepo_qwen3.5-9b_megatron.sh",  # the e2e runs
              "run_edge_qwen2.5-math-1.5b_fsdp.sh", "run_gepo-no-high_qwen7b.sh", "run_gepo-no-low_qwen7b.sh",
              "run_gepo-symmetric_qwen7b.sh", "run_cliphigher_qwen2.5-math-7b_fsdp.sh"}
    assert named <= {recipe.file_name for recipe in RECIPES} | {recipe.file_name for recipe in OPENRLHF_RECIPES}
    assert {recipe.file_name for recipe in OPENRLHF_RECIPES} <= in_the_docs
    assert len(RECIPES) == len({recipe.file_name for recipe in RECIPES}) == 41


def test_every_run_parameter_and_training_setup_a_method_may_name_has_its_recipe_definition():
    assert set(RUN_VARIABLES) == set(RUN_PARAMETERS) and set(TRAINING_SETUPS) == set(KNOBS)


def _values(recipe: Recipe, **env) -> dict:
    return dry_run(recipe.file_name, **LOG, **env).values


@pytest.mark.parametrize("recipe", PPO, ids=[recipe.file_name for recipe in PPO])
def test_a_recipe_runs_its_methods_overrides_as_methods_py_defines_them_once_each(recipe):
    for env, parameters in (({}, DEFAULT_PARAMETERS), (ALTERED_VARIABLES, ALTERED_PARAMETERS)):
        printed = dry_run(recipe.file_name, **LOG, **env)
        expected = method_overrides(recipe.method, **parameters)
        start = printed.overrides.index(expected[0])
        assert printed.overrides[start:start + len(expected)] == expected, recipe.file_name
        keys = [override.split("=", 1)[0].lstrip("+") for override in printed.overrides]
        assert len(set(keys)) == len(keys), "each key once: no override of the recipe silently replaces another"
        assert printed.config_name == BACKENDS[recipe.backend].config_name


def test_the_sft_recipe_runs_verls_sft_trainer_with_no_ppo_override():
    printed = dry_run("run_sft_qwen2.5-math-7b_fsdp.sh", **LOG)
    assert printed.program[-2:] == ["-m", "verl.trainer.sft_trainer"] and not printed.config_name
    assert not any(override.lstrip("+").startswith(("algorithm.", "actor_rollout_ref.")) for override in printed.overrides)


def _baseline(recipe: Recipe) -> Recipe:
    return next(other for other in RECIPES if other.method == "grpo" and (other.model, other.backend, other.knobs) ==
                (recipe.model, recipe.backend, recipe.knobs))


@pytest.mark.parametrize("recipe", [r for r in PPO if r.method != "grpo"], ids=[r.file_name for r in PPO if r.method != "grpo"])
def test_every_method_has_a_grpo_baseline_beside_it_with_identical_knobs(recipe):
    # The command of the method and of GRPO on the same model, backend and training setup differ only in the
    # method's own overrides, its name, and for a GEC method its rows and the longer response GEC needs.
    method, baseline = _values(recipe), _values(_baseline(recipe))
    differ = {key for key in method.keys() | baseline.keys() if method.get(key) != baseline.get(key)}
    allowed = method_keys(recipe) | NAME_KEYS | (GEC_KEYS if get_method(recipe.method).gec else set())
    assert differ <= allowed, sorted(differ - allowed)
    assert "data.train_files" not in differ or method["data.train_files"] == baseline["data.train_files"].replace(".parquet", "_gec.parquet")


def _twins() -> list[tuple[Recipe, Recipe]]:
    """(FSDP recipe, its Megatron twin): the same method and knobs, on the same model where there is one."""
    twins = []
    for one in (recipe for recipe in PPO if recipe.backend == "fsdp"):
        others = [other for other in PPO if other.backend == "megatron" and (other.method, other.knobs) == (one.method, one.knobs)]
        same_model = [other for other in others if other.model == one.model]
        if same_model or len(others) == 1:
            twins.append((one, (same_model or others)[0]))
    return twins


def test_seventeen_fsdp_recipes_have_a_megatron_twin():
    # EDGE's 7B family (11 methods), EDGE and GRPO on 1.5B (2), GEPO's methods with a Megatron recipe (4)
    assert len(_twins()) == 17


@pytest.mark.parametrize("fsdp, megatron", _twins(), ids=[one.file_name for one, _ in _twins()])
def test_fsdp_and_megatron_twins_differ_only_in_the_backends_settings(fsdp, megatron):
    # GEPO's twins also run different models (Qwen2.5-7B on FSDP, Qwen3.5-9B on Megatron): the model path is
    # then allowed to differ too, and nothing else is.
    one, other = dry_run(fsdp.file_name, **LOG), dry_run(megatron.file_name, **LOG)
    assert (one.config_name, other.config_name) == ("ppo_trainer", "ppo_megatron_trainer") and one.env == other.env
    backend_keys = {override.split("=", 1)[0] for backend in BACKENDS.values() for override in backend.overrides}
    models = {"actor_rollout_ref.model.path"} if fsdp.model != megatron.model else set()
    differ = {key for key in one.values.keys() | other.values.keys() if one.values.get(key) != other.values.get(key)}
    assert differ <= backend_keys | NAME_KEYS | models, sorted(differ - backend_keys - NAME_KEYS - models)


def test_a_templates_literal_text_and_its_run_variables_read_back_as_one_word():
    # Hydra values with shell characters are quoted; each run parameter becomes "$VARIABLE".
    word = shell_word("+algorithm.x.y=[a, b]$`{seed}'\"tail")
    completed = subprocess.run(["bash", "-c", f"SEED=7; printf '%s' {word}"], capture_output=True, text=True, check=True)
    assert completed.stdout == "+algorithm.x.y=[a, b]$`7'\"tail"
    assert shell_word("+algorithm.edge_gec.seed={seed}") == '+algorithm.edge_gec.seed="$SEED"'


def test_the_recipe_command_lists_writes_and_checks_the_recipes(tmp_path, capsys):
    for path in FOLDER.glob("run_*.sh"):
        (tmp_path / path.name).write_text(path.read_text())
    (tmp_path / "run_gepo_qwen7b.sh").write_text("#!/usr/bin/env bash\n")
    (tmp_path / "run_grpo_qwen7b.sh").unlink()
    (tmp_path / "run_mine.sh").write_text("#!/usr/bin/env bash\n")
    assert main(["recipe", "--check", "--dir", str(tmp_path)]) == 1
    errors = capsys.readouterr().err
    assert all(name in errors for name in ("run_gepo_qwen7b.sh", "run_grpo_qwen7b.sh", "run_mine.sh is no recipe's"))
    assert main(["recipe", "--write", "--dir", str(tmp_path)]) == 0
    assert (tmp_path / "run_gepo_qwen7b.sh").read_text() == (FOLDER / "run_gepo_qwen7b.sh").read_text()
    assert os.access(tmp_path / "run_grpo_qwen7b.sh", os.X_OK)
    (tmp_path / "run_mine.sh").unlink()
    capsys.readouterr()
    assert main(["recipe", "--check", "--dir", str(tmp_path)]) == 0
    assert main(["recipe", "run_gepo_qwen7b.sh"]) == 0 and capsys.readouterr().out == (FOLDER / "run_gepo_qwen7b.sh").read_text()
    assert main(["recipe"]) == 0 and "run_sft_qwen2.5-math-7b_fsdp.sh" in capsys.readouterr().out
    assert main(["recipe", "run_nope.sh"]) == 2 and "no recipe 'run_nope.sh'; defined: run_grpo" in capsys.readouterr().err


def test_a_recipe_whose_python_lacks_verl_stops_and_says_how_to_choose_one(tmp_path):
    completed = subprocess.run(["bash", str(FOLDER / "run_gepo_qwen7b.sh")], capture_output=True, text=True,
                               env=python_path_env(DRY_RUN="1", PYTHON="/bin/false"), timeout=60)
    assert completed.returncode == 2 and not completed.stdout
    assert "PYTHON=/bin/false cannot import verl and edge_verl" in completed.stderr


def test_the_sft_recipe_refuses_the_cpu_backend():
    completed = subprocess.run(["bash", str(FOLDER / "run_sft_qwen2.5-math-7b_fsdp.sh")], capture_output=True, text=True,
                               env=python_path_env(DRY_RUN="1", EDGE_VERL_CPU="1"), timeout=60)
    assert completed.returncode == 2 and "the SFT recipe has no CPU backend" in completed.stderr


def test_a_gec_recipe_given_only_the_response_length_keeps_it_and_gives_the_first_sample_the_rest():
    # 2000 = first sample + 32 tokens of room for GEC's phrase + 256 of continuation -> 1712
    values = _values(next(recipe for recipe in RECIPES if recipe.file_name == "run_edge_qwen2.5-math-7b_fsdp.sh"),
                     MAX_RESPONSE_LENGTH="2000")
    assert values["data.max_response_length"] == "2000" and values["algorithm.edge_gec.first_sample_tokens"] == "1712"


def test_every_fsdp_recipe_runs_one_policy_head_the_tiled_one_unless_the_user_picks_another():
    # the same head for every row of a table (GRPO, EDA, EDGE, the ablations): a comparison stays a comparison
    fsdp = [recipe for recipe in PPO if recipe.backend == "fsdp"]
    assert fsdp
    for recipe in fsdp:
        values = _values(recipe)
        assert values["actor_rollout_ref.model.use_fused_kernels"] == "True", recipe.file_name
        assert values["actor_rollout_ref.model.fused_kernel_options.impl_backend"] == "edge_tiled", recipe.file_name
    chosen = _values(fsdp[0], LOGPROB_HEAD="triton")
    assert chosen["actor_rollout_ref.model.fused_kernel_options.impl_backend"] == "triton"
    assert _values(fsdp[0], USE_FUSED_KERNELS="False")["actor_rollout_ref.model.use_fused_kernels"] == "False"
    # Megatron's engine builds its own head (docs/performance.md): its recipes set neither key
    megatron = next(recipe for recipe in PPO if recipe.backend == "megatron")
    assert "actor_rollout_ref.model.use_fused_kernels" not in _values(megatron)
