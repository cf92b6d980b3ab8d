"""The methods as data (edge_verl/methods.py): each method's overrides written out by hand for four of them,
the properties every definition must have, and the launchers that read them (recipes, demo, reproduce)."""

import subprocess
import sys
from pathlib import Path

import pytest

from edge_verl.cli import main
from edge_verl_lab.demo.run import ALGORITHMS, DemoConfig, build_overrides
from edge_verl.methods import EDA_FORMS, METHOD_ALIASES, METHOD_NAMES, METHODS, Method, get_method, method_overrides
from edge_verl.recipes import RECIPES as RECIPE_DEFINITIONS
from edge_verl.recipes import Recipe
from edge_verl_lab.reproduce.tables import TABLES

# The recipes' defaults: seed 42, the gradient form, 1024-token first samples, 256-token continuations.
RUN = {"seed": 42, "eda_form": "gradient", "first_sample_tokens": 1024, "continuation_tokens": 256}
# Every RL method: a seed per response, keyed on the run's seed (the rollout's).
SEEDED = ["+algorithm.edge_seeding.enable=True", "actor_rollout_ref.rollout.seed=42"]
GEC_ON = [
    "actor_rollout_ref.rollout.calculate_log_probs=False",
    "+algorithm.edge_gec.enable=True",
    "+algorithm.edge_gec.seed=42",
    "+algorithm.edge_gec.first_sample_tokens=1024",
    "+algorithm.edge_gec.continuation_tokens=256",
]


def test_edge_is_the_eda_estimator_in_the_gradient_form_plus_gec():
    assert method_overrides("edge", **RUN) == [
        "algorithm.adv_estimator=edge_eda",
        *SEEDED,
        "+algorithm.edge_eda.entropy_gradient=True",
        "actor_rollout_ref.actor.calculate_entropy=True",  # the gradient form needs the update's entropy
        *GEC_ON,
    ]


def test_gec_alone_is_grpo_advantages_plus_gec():
    assert method_overrides("gec", **RUN) == ["algorithm.adv_estimator=grpo", *SEEDED, *GEC_ON]


def test_the_placebo_is_edge_with_another_problems_answers_rewarded_as_gold_and_its_graded_form_kept():
    edge = method_overrides("edge", **RUN)
    placebo = ["+algorithm.edge_gec.answer_source=placebo"]
    assert method_overrides("edge_placebo", **RUN) == [*edge, *placebo, "+algorithm.edge_gec.placebo_reward=as_gold"]
    assert method_overrides("edge_placebo_graded", **RUN) == [*edge, *placebo, "+algorithm.edge_gec.placebo_reward=graded"]


def test_gepo_symmetric_puts_the_runs_alpha_on_both_sides():
    assert method_overrides("gepo_symmetric", **RUN, gepo_symmetric_alpha=0.3) == [
        "algorithm.adv_estimator=gepo",
        *SEEDED,
        "+algorithm.gepo.ablation=symmetric",
        "+algorithm.gepo.alpha_low=0.3",
        "+algorithm.gepo.alpha_high=0.3",
    ]
    assert method_overrides("gepo_symmetric", **RUN)[-1] == "+algorithm.gepo.alpha_high=0.5"  # the default


def test_grpo_is_verls_estimator_seeded_as_every_method_whatever_the_other_run_parameters():
    assert method_overrides("grpo", **RUN) == ["algorithm.adv_estimator=grpo", *SEEDED]
    assert method_overrides("grpo", seed=7, eda_form="detached", first_sample_tokens=9, continuation_tokens=3) == [
        "algorithm.adv_estimator=grpo", "+algorithm.edge_seeding.enable=True", "actor_rollout_ref.rollout.seed=7"
    ]


def test_the_detached_form_switches_the_entropy_gradient_and_the_updates_entropy_off():
    assert method_overrides("eda", **{**RUN, "eda_form": "detached"}) == [
        "algorithm.adv_estimator=edge_eda",
        *SEEDED,
        "+algorithm.edge_eda.entropy_gradient=False",
        "actor_rollout_ref.actor.calculate_entropy=False",
    ]


@pytest.mark.parametrize("name", METHOD_NAMES)
@pytest.mark.parametrize("eda_form", EDA_FORMS)
def test_every_methods_overrides_follow_from_its_definition(name, eda_form):
    method = get_method(name)
    overrides = method_overrides(name, **{**RUN, "eda_form": eda_form})
    keys = [override.split("=", 1)[0] for override in overrides]
    assert len(set(keys)) == len(keys), "each key once: no override silently replaces another"
    assert all("{" not in override for override in overrides), "every run parameter filled in"
    if method.estimator is None:  # SFT: verl's SFT trainer, no PPO override at all
        assert overrides == [] and not method.gec
        return
    assert overrides[0] == f"algorithm.adv_estimator={method.estimator}"
    assert ("+algorithm.edge_gec.enable=True" in overrides) == method.gec
    assert ("actor_rollout_ref.rollout.calculate_log_probs=False" in overrides) == method.gec
    assert ("+algorithm.edge_gec.force_regenerate=True" in overrides) == method.force_regenerate
    gradient = "True" if eda_form == "gradient" else "False"
    assert (f"+algorithm.edge_eda.entropy_gradient={gradient}" in overrides) == method.eda
    assert (f"actor_rollout_ref.actor.calculate_entropy={gradient}" in overrides) == method.eda
    filled = {"seed": 42, "entropy_gradient": gradient, "first_sample_tokens": 1024, "continuation_tokens": 256, "gepo_symmetric_alpha": 0.5}
    assert overrides[len(overrides) - len(method.options):] == [option.format(**filled) for option in method.options]
    assert method.description and method.knobs


def test_unknown_names_and_bad_run_parameters_are_errors_naming_the_allowed_values():
    with pytest.raises(ValueError, match=r"method 'ppo' is not defined; defined: edge, eda, gec, .*, sft, edge_eda"):
        get_method("ppo")
    with pytest.raises(ValueError, match="method 'ppo' is not defined"):
        method_overrides("ppo", **RUN)
    with pytest.raises(ValueError, match="eda_form='attached'; allowed: gradient, detached"):
        method_overrides("edge", **{**RUN, "eda_form": "attached"})
    with pytest.raises(ValueError, match="first_sample_tokens=0 must be an integer >= 1"):
        method_overrides("grpo", **{**RUN, "first_sample_tokens": 0})
    with pytest.raises(ValueError, match="seed='1' must be an integer"):
        method_overrides("gec", **{**RUN, "seed": "1"})
    with pytest.raises(ValueError, match="gepo_symmetric_alpha=nan must be a finite number"):
        method_overrides("gepo_symmetric", **RUN, gepo_symmetric_alpha=float("nan"))


def test_a_definition_that_contradicts_itself_is_refused():
    with pytest.raises(ValueError, match="estimator='ppo'; allowed: grpo, edge_eda, gepo or None"):
        Method("x", "x", "ppo")
    with pytest.raises(ValueError, match="force_regenerate is a GEC option"):
        Method("x", "x", "grpo", force_regenerate=True)
    with pytest.raises(ValueError, match=r"names \['alpha'\]; allowed: seed, entropy_gradient"):
        Method("x", "x", "gepo", options=("+algorithm.gepo.alpha_low={alpha}",))
    with pytest.raises(ValueError, match="knobs=\\('dapo',\\); allowed: one or more of edge, gepo"):
        Method("x", "x", "grpo", knobs=("dapo",))


def test_every_recipe_runs_a_defined_method_with_its_knobs_on_its_data_variant():
    # (the files are these definitions, byte for byte: tests/test_recipes.py)
    for recipe in RECIPE_DEFINITIONS:
        method = get_method(recipe.method)
        assert recipe.knobs in method.knobs
        assert recipe.train_file.endswith("_gec.parquet") == method.gec, "a GEC method trains on the *_gec rows, no other method does"
        assert recipe.train_file.startswith("sft_") == (method.estimator is None)


def test_every_gec_method_trains_on_the_gec_file_with_gecs_agent_loop():
    for method in METHODS.values():
        expected = "train_hard_1k_gec.parquet" if method.gec else "train_hard_1k.parquet"
        assert method.train_file(Path("data/train_hard_1k.parquet")) == Path("data") / expected
        assert method.agent_name == ("edge_gec" if method.gec else None)
    controls = {"edge_masked", "edge_sft_injected", "edge_placebo", "edge_placebo_graded", "edge_drop_first"}  # EDGE with a switch
    assert {name for name, method in METHODS.items() if method.gec} == {"edge", "gec", "forcer", "forcer_eda", *controls}
    assert {name for name, method in METHODS.items() if method.eda} == {"edge", "eda", "forcer_eda", *controls}


def test_the_demos_algorithms_are_defined_methods_built_from_their_definitions(tmp_path):
    assert set(ALGORITHMS) <= set(METHOD_NAMES) and METHOD_ALIASES == {"edge_eda": "eda"}
    paths = {"model": tmp_path / "m", "train": tmp_path / "t.parquet", "val": tmp_path / "v.parquet"}
    for algorithm in ALGORITHMS:
        overrides = build_overrides(DemoConfig(algorithm=algorithm, out=tmp_path, seed=3), paths)
        expected = method_overrides(algorithm, seed=3, eda_form="gradient", first_sample_tokens=16, continuation_tokens=64)
        assert overrides[: len(expected)] == expected
        length = "data.max_response_length=128" if get_method(algorithm).gec else "data.max_response_length=16"
        assert length in overrides


def test_every_reproduced_row_trains_a_defined_method():
    rows = [row for table in TABLES.values() for row in table.rows if row.trains]
    assert {row.method for row in rows} <= set(METHODS)
    assert all(row.train_file(Path("d")).name.endswith("_gec.parquet") == row.definition.gec for row in rows)


def test_the_cli_prints_a_methods_overrides_one_per_line_and_its_fields(capsys):
    argv = ["method-overrides", "forcer", "--seed", "7", "--entropy-gradient", "False", "--first-sample-tokens", "512",
            "--continuation-tokens", "128", "--knobs", "edge"]
    assert main(argv) == 0
    assert capsys.readouterr().out.splitlines() == method_overrides(
        "forcer", seed=7, eda_form="detached", first_sample_tokens=512, continuation_tokens=128
    )
    assert main(["method", "forcer_eda", "--field", "gec"]) == 0 and capsys.readouterr().out == "True\n"
    assert main(["method", "gepo", "--field", "gec"]) == 0 and capsys.readouterr().out == "False\n"
    assert main(["method"]) == 0
    listing = capsys.readouterr().out
    assert all(name in listing for name in METHODS) and "(also: edge_eda)" in listing


def test_the_cli_refuses_an_unknown_method_and_a_recipe_with_knobs_the_method_does_not_use(capsys):
    assert main(["method", "bogus", "--field", "gec"]) == 2
    assert "method 'bogus' is not defined; defined: edge" in capsys.readouterr().err
    argv = ["--seed", "1", "--entropy-gradient", "True", "--first-sample-tokens", "1", "--continuation-tokens", "1"]
    assert main(["method-overrides", "gepo", *argv, "--knobs", "edge"]) == 2
    assert "method gepo runs with KNOBS=gepo, not KNOBS=edge" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:  # argparse: not a boolean
        main(["method-overrides", "edge", *argv[:2], "--entropy-gradient", "yes", *argv[4:]])
    assert exit_info.value.code == 2


def test_a_recipe_of_an_unknown_method_or_knobs_the_method_does_not_use_is_refused():
    with pytest.raises(ValueError, match="method 'bogus' is not defined; defined: edge, eda"):
        Recipe("bogus", "Qwen/Qwen2.5-Math-7B", "fsdp", "edge")
    with pytest.raises(ValueError, match="method gepo runs with knobs gepo, not edge"):
        Recipe("gepo", "Qwen/Qwen2.5-7B", "fsdp", "edge")


def test_the_definitions_and_the_method_commands_import_neither_verl_nor_torch():
    # A look-up of a definition must stay a fraction of a second.
    code = (
        "import sys; from edge_verl.cli import main; main(['method', 'edge', '--field', 'gec']); "
        "loaded = {'verl', 'torch'} & set(sys.modules); assert not loaded, loaded"
    )
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert completed.returncode == 0 and completed.stdout == "True\n", completed.stderr[-2000:]
