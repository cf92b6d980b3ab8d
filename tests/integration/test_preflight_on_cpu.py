"""The plugin's preflight on verl's composed config (``edge-verl preflight`` and the ``validate_config``
hook): each kind of mistake is reported with the message a user acts on, from the config and the data
files alone (no Ray, no model)."""

import json
from pathlib import Path

import pytest

from edge_verl.data import make_row, write_parquet
from edge_verl.cli import compose_verl_config, run_identity_of
from edge_verl.integration.preflight import PreflightFailed, preflight, preflight_or_exit
from edge_verl.run_identity import IDENTITY_FILE

pytestmark = pytest.mark.verl

GEC_ON = ["actor_rollout_ref.rollout.calculate_log_probs=False", "+algorithm.edge_gec.enable=True"]
PLACEBO = "+algorithm.edge_gec.answer_source=placebo"


def _data(folder: Path, gec_train: bool = True, gec_val: bool = False, ground_truth: bool = True) -> dict[str, Path]:
    rows = [make_row(f"1+{i}", str(1 + i), "sol", data_source="t", split="train", index=i, gec=gec_train) for i in range(4)]
    if not ground_truth:
        for row in rows:
            row["reward_model"] = {"style": "rule"}
    val = [make_row("2+2", "4", None, data_source="v", split="test", index=0, gec=gec_val)]
    return {"train": write_parquet(rows, folder / "train.parquet"), "val": write_parquet(val, folder / "val.parquet")}


def _config(tmp_path: Path, *overrides: str, **data_options):
    data = _data(tmp_path, **data_options)
    base = [
        f"data.train_files={data['train']}",
        f"data.val_files={data['val']}",
        "data.max_response_length=512",
        f"trainer.default_local_dir={tmp_path / 'ckpt'}",
        "actor_rollout_ref.model.path=Qwen/Qwen2.5-Math-7B",
    ]
    return compose_verl_config("ppo_trainer", [*base, *overrides])


def test_a_correct_edge_config_passes_and_names_its_run(tmp_path):
    run = preflight(_config(tmp_path, "algorithm.adv_estimator=edge_eda", *GEC_ON))
    assert run.estimator == "edge_eda" and run.gec_enabled and not run.options.entropy_gradient


MISTAKES = {
    # an option the estimator does not know
    "unknown_key": (["algorithm.adv_estimator=gepo", "+algorithm.gepo.gamme=0.1"], {}, "unknown option(s) ['gamme']"),
    # gamma is an EMA rate in (0, 1]
    "bad_value": (["algorithm.adv_estimator=gepo", "+algorithm.gepo.gamma=2"], {}, "gepo.gamma=2 must be <= 1.0"),
    # EDA's gradient form needs verl to compute the current entropy in the actor update
    "eda_prerequisite": (
        ["algorithm.adv_estimator=edge_eda", "+algorithm.edge_eda.entropy_gradient=True"],
        {"gec_train": False},
        "actor_rollout_ref.actor.calculate_entropy=True",
    ),
    # GEC on, but no training row selects the GEC agent loop
    "gec_without_rows": (["algorithm.adv_estimator=grpo", *GEC_ON], {"gec_train": False}, "no training row has agent_name=edge_gec"),
    # GEC rows, but GEC off
    "rows_without_gec": (["algorithm.adv_estimator=grpo"], {}, "GEC is off"),
    # validation must never be corrected
    "gec_validation": (["algorithm.adv_estimator=grpo", *GEC_ON], {"gec_val": True}, "validation must never be corrected"),
    # GEC grades against reward_model.ground_truth
    "gec_ground_truth": (["algorithm.adv_estimator=grpo", *GEC_ON], {"ground_truth": False}, "reward_model.ground_truth"),
    # 1024 sampled + 256 continued tokens cannot fit in 512
    "gec_budget": (
        ["algorithm.adv_estimator=grpo", *GEC_ON, "+algorithm.edge_gec.first_sample_tokens=1024"],
        {},
        "= 1280 exceeds actor_rollout_ref.rollout.response_length=512",
    ),
    # with dynamic batch sizes, the update's token budget must hold one whole sequence: 512 prompt + 512 response
    "gec_token_budget": (
        ["algorithm.adv_estimator=grpo", *GEC_ON, "actor_rollout_ref.actor.use_dynamic_bsz=True",
         "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=1000"],
        {},
        "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=1000 = 1000 tokens cannot hold one GEC-corrected sequence: "
        "data.max_prompt_length + data.max_response_length = 1024",
    ),
    "gec_log_prob_budget_under_sequence_parallel": (
        ["algorithm.adv_estimator=grpo", *GEC_ON, "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=True",
         "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu=500", "actor_rollout_ref.actor.ulysses_sequence_parallel_size=2"],
        {},
        "log_prob_max_token_len_per_gpu=500 x ulysses_sequence_parallel_size=2 = 1000 tokens",
    ),
    # the reviewers' controls are named choices; sft_coef only means something with injected_loss=sft
    "gec_control": (["algorithm.adv_estimator=grpo", *GEC_ON, "+algorithm.edge_gec.injected_loss=ignore"], {}, "allowed: ['surrogate', 'masked', 'sft']"),
    "gec_sft_coef": (["algorithm.adv_estimator=grpo", *GEC_ON, "+algorithm.edge_gec.sft_coef=0.5"], {}, "read only with edge_gec.injected_loss=sft"),
    # the placebo's reward is a placebo option; as_gold (the default) needs verl's naive manager scoring in the agent loop
    "placebo_reward_without_placebo": (
        ["algorithm.adv_estimator=grpo", *GEC_ON, "+algorithm.edge_gec.placebo_reward=graded"], {},
        "edge_gec.placebo_reward='graded' is read only with edge_gec.answer_source=placebo",
    ),
    "placebo_as_gold_other_manager": (
        ["algorithm.adv_estimator=grpo", *GEC_ON, PLACEBO, "reward.reward_manager.name=dapo"], {},
        "reward.reward_manager is source='register', name='dapo'",
    ),
    "placebo_as_gold_imported_manager": (
        ["algorithm.adv_estimator=grpo", *GEC_ON, PLACEBO, "reward.reward_manager.source=importlib"], {},
        "reward.reward_manager is source='importlib', name='naive'",
    ),
    "placebo_as_gold_colocated_reward_model": (
        ["algorithm.adv_estimator=grpo", *GEC_ON, PLACEBO, "reward.reward_model.enable=True"], {},
        "without enable_resource_pool verl scores rewards after the rollout",
    ),
    "placebo_as_gold_reward_model_pool": (
        ["algorithm.adv_estimator=grpo", *GEC_ON, PLACEBO, "reward.reward_model.enable=True", "reward.reward_model.enable_resource_pool=True"],
        {}, "hands the reward function the reward model's router",
    ),
    # injected tokens have no rollout log-probs
    "gec_log_probs": (["algorithm.adv_estimator=grpo", "+algorithm.edge_gec.enable=True"], {}, "calculate_log_probs=False"),
}


@pytest.mark.parametrize("kind", sorted(MISTAKES))
def test_each_kind_of_mistake_is_reported_with_its_fix(tmp_path, kind, capsys):
    overrides, data_options, expected = MISTAKES[kind]
    config = _config(tmp_path, *overrides, **data_options)
    with pytest.raises(PreflightFailed) as failed:
        preflight_or_exit(config)
    assert failed.value.code == 2
    assert expected in failed.value.message
    assert capsys.readouterr().err.strip().splitlines()[-1] == failed.value.message


def test_a_placebo_run_whose_training_file_lends_no_other_answer_stops_before_ray(tmp_path):
    one = write_parquet([make_row("1+1", "2", "sol", data_source="t", split="train", index=0, gec=True)], tmp_path / "one.parquet")
    config = _config(tmp_path, "algorithm.adv_estimator=grpo", *GEC_ON, "+algorithm.edge_gec.answer_source=placebo", f"data.train_files={one}")
    with pytest.raises(ValueError, match="hold 1 problem"):
        preflight(config)
    assert preflight(_config(tmp_path, "algorithm.adv_estimator=grpo", *GEC_ON, "+algorithm.edge_gec.answer_source=placebo")).gec.answer_source == "placebo"


def test_an_as_gold_placebo_refusal_says_why_and_how_to_fix_it_and_graded_needs_no_check(tmp_path):
    dapo = ["algorithm.adv_estimator=grpo", *GEC_ON, PLACEBO, "reward.reward_manager.name=dapo"]
    with pytest.raises(ValueError) as refused:
        preflight(_config(tmp_path, *dapo))
    assert "the placebo would not share EDGE's rewards" in str(refused.value)
    assert "Use reward.reward_manager.name=naive (source=register), or set algorithm.edge_gec.placebo_reward=graded" in str(refused.value)
    # graded leaves every reward to verl's reward loop, whichever manager or reward model scores it
    graded = [*dapo, "+algorithm.edge_gec.placebo_reward=graded", "reward.reward_model.enable=True"]
    assert preflight(_config(tmp_path, *graded)).gec.placebo_reward == "graded"
    # so does gold: the default as_gold is not read there
    assert preflight(_config(tmp_path, "algorithm.adv_estimator=grpo", *GEC_ON, "reward.reward_manager.name=dapo")).gec.answer_source == "gold"
    # the agent loop's setup runs the same check on the worker's config
    from edge_verl.integration.run_checks import check_gec_supported

    with pytest.raises(ValueError, match="name='dapo'"):
        check_gec_supported(_config(tmp_path, *dapo))


def test_a_missing_training_file_is_named(tmp_path):
    config = _config(tmp_path, "algorithm.adv_estimator=grpo", f"data.train_files={tmp_path / 'nope.parquet'}")
    with pytest.raises(FileNotFoundError, match=r"data.train_files: .*nope.parquet not found"):
        preflight(config)


def test_a_plain_grpo_run_is_checked_only_for_its_files(tmp_path):
    run = preflight(_config(tmp_path, "algorithm.adv_estimator=grpo", gec_train=False))
    assert not (run.opens_advantage_step or run.gec_enabled)


def test_run_identity_follows_hydras_last_value(tmp_path):
    config = _config(tmp_path, "algorithm.adv_estimator=grpo", "data.seed=7", "data.seed=9", gec_train=False)
    identity = run_identity_of(config, "grpo", "fsdp", tag="edge_hard_1k/grpo_7b")
    assert identity["seed"] == "9" and identity["tag"] == "edge_hard_1k/grpo_7b" and len(identity["train_data"]["sha256"]) == 64


def _cli(*args: str) -> int:
    from edge_verl.cli import main

    return main(["preflight", *args])


def test_cli_records_the_identity_only_after_the_checks_pass(tmp_path, capsys):
    data = _data(tmp_path, gec_train=False)
    common = [f"data.train_files={data['train']}", f"data.val_files={data['val']}", f"trainer.default_local_dir={tmp_path / 'ckpt'}"]
    assert _cli("--method", "gepo", "algorithm.adv_estimator=gepo", "+algorithm.gepo.gamma=0", *common) == 2
    assert not (tmp_path / "ckpt").exists()
    missing = [f"data.train_files={tmp_path / 'missing.parquet'}", *common[1:]]
    assert _cli("--method", "grpo", "algorithm.adv_estimator=grpo", *missing) == 2
    assert not (tmp_path / "ckpt").exists()
    assert _cli("--method", "grpo", "algorithm.adv_estimator=grpo", *common) == 0
    assert json.loads((tmp_path / "ckpt" / IDENTITY_FILE).read_text())["method"] == "grpo"
    assert "run identity recorded" in capsys.readouterr().out
    # unknown top-level key: Hydra refuses it while composing
    assert _cli("algorithm.adv_estimatr=grpo", *common) == 2
    assert "rejects the overrides" in capsys.readouterr().err


def test_the_validate_config_hook_is_in_the_plugins_table():
    from edge_verl.integration.internals import CORE, PATCH_MARK
    from edge_verl.integration.plugin import HOOKS

    assert "validate_config" in CORE.patched["verl.utils.config"]
    assert "verl.utils.config" in HOOKS
    import verl.utils.config as verl_config

    assert getattr(verl_config.validate_config, PATCH_MARK) == ("verl.utils.config", "validate_config")
