"""The study's training protocol (edge_verl_lab/study/protocol.py): the reference's values by default, every
deviation named with its reason, and the table built from the very overrides each run is launched with."""

import dataclasses

import pytest

from edge_verl_lab.demo.run import DemoConfig, build_overrides, response_length
from edge_verl_lab.study import protocol
from edge_verl_lab.study.config import LEGACY_PROTOCOL, StudyConfig
from edge_verl_lab.study.protocol import deviation_table, run_overrides

INPUTS = {"model": "/m", "train": "/t.parquet", "val": "/v.parquet"}
# What EDGE-GRPO's reference does and a CPU study can do too (EDGE_GRPO.md section 3; transformers'
# TrainingArguments defaults for what the reference's script leaves unset: no warm-up, weight decay 0).
AT_THE_REFERENCE = ("loss aggregation", "sampling temperature", "top_p", "responses per prompt (G)", "optimizer updates per step",
                    "PPO epochs", "warm-up steps", "weight decay", "gradient clipping", "clip epsilon", "KL penalty", "entropy bonus")


def _rows(config):
    return {row["setting"]: row for row in deviation_table(config)}


def test_the_default_study_runs_the_reference_protocol_wherever_the_scale_allows(tmp_path):
    rows = _rows(StudyConfig(out=tmp_path))
    for name in AT_THE_REFERENCE:
        assert not rows[name]["deviates"], rows[name]
    # what the scale forces is named, each with its reason
    forced = {name for name, row in rows.items() if row["deviates"]}
    assert forced == {"model", "training data", "prompts per step", "learning rate", "learning-rate schedule", "training steps",
                      "max response tokens", "GEC continuation tokens", "max prompt tokens", "seed"}
    assert all(rows[name]["reason"] for name in forced)
    assert rows["loss aggregation"]["override"] == "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean"
    assert rows["optimizer updates per step"]["override"] == "actor_rollout_ref.actor.ppo_mini_batch_size=8"  # 8 prompts, 1 update


def test_the_table_is_the_overrides_every_run_is_launched_with(tmp_path):
    config = StudyConfig(out=tmp_path, methods=("grpo", "edge", "gepo"), seeds=(1, 2))
    shown = {row["override"] for row in deviation_table(config) if row["override"]}
    for method, seed in config.runs():
        launched = set(build_overrides(config.demo_config(method, seed), INPUTS))
        assert shown <= launched and set(run_overrides(config, method, seed)) <= launched


def test_an_option_set_away_from_the_reference_shows_as_a_deviation_with_the_option_named(tmp_path):
    rows = _rows(StudyConfig(out=tmp_path, temperature=1.0, updates_per_step=2, loss_agg_mode="token-mean"))
    assert rows["sampling temperature"]["deviates"] and rows["sampling temperature"]["study"] == "1.0"
    assert rows["optimizer updates per step"]["study"] == "2 (mini-batch 4 prompts)"
    assert "option loss_agg_mode" in rows["loss aggregation"]["reason"]


def test_a_deviation_nobody_can_explain_stops_the_report(tmp_path, monkeypatch):
    # a fixed setting (no option, no reason) whose value leaves the reference's: the table refuses to print it
    changed = tuple(dataclasses.replace(setting, reference="0.3") if setting.name == "clip epsilon" else setting for setting in protocol.SETTINGS)
    monkeypatch.setattr(protocol, "SETTINGS", changed)
    with pytest.raises(ValueError, match="clip epsilon is '0.2' where the reference has '0.3'"):
        deviation_table(StudyConfig(out=tmp_path))


def test_the_evaluation_cap_is_the_longest_trained_response_and_samples_at_the_training_temperature(tmp_path):
    with_gec = StudyConfig(out=tmp_path, task="pair", methods=("grpo", "edge"))
    # pair: 16-token samples; edge's corrections: 16 + 48 (phrase room) + 64 (continuation) = 128
    assert response_length(with_gec.demo_config("edge", 1)) == 128 and with_gec.eval_max_new_tokens == 128
    assert with_gec.eval_config().temperature == 0.6
    assert StudyConfig(out=tmp_path, task="pair", methods=("grpo", "gepo")).eval_max_new_tokens == 16
    assert StudyConfig(out=tmp_path, task="reflect", methods=("grpo", "edge")).eval_max_new_tokens == 64 + 48 + 64
    assert StudyConfig(out=tmp_path, temperature=0.8, eval_temperature=1.0).eval_config().temperature == 1.0


def test_a_study_recorded_before_the_protocol_options_reads_back_as_the_legacy_protocol(tmp_path):
    recorded = StudyConfig(out=tmp_path).as_dict()
    for name in (*LEGACY_PROTOCOL, "demo_defaults"):
        recorded.pop(name, None)
    recorded.update(eval_max_new_tokens=16)
    config = StudyConfig.from_dict(recorded)
    assert (config.loss_agg_mode, config.temperature, config.updates_per_step, config.lr_warmup_steps, config.weight_decay) == (
        "token-mean", 1.0, 2, 3, 0.01)
    assert config.eval_config().temperature == 1.0


@pytest.mark.parametrize("bad, message", [
    ({"updates_per_step": 3}, "must divide prompts_per_step=8"),
    ({"updates_per_step": 0}, "updates_per_step=0"),
    ({"loss_agg_mode": "mean"}, "loss_agg_mode='mean'; allowed: token-mean"),
    ({"temperature": 0.0}, "temperature=0.0 must be > 0"),
    ({"weight_decay": -0.1}, "weight_decay=-0.1"),
    ({"lr_warmup_steps": -1}, "lr_warmup_steps=-1"),
    ({"sample_tokens": 0}, "sample_tokens=0"),
])
def test_the_demo_refuses_a_bad_protocol_by_name(bad, message):
    with pytest.raises(ValueError, match=message):
        DemoConfig(**bad)
