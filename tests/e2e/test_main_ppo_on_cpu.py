"""Real ``python -m verl.trainer.main_ppo`` runs on CPU through the demo (tiny model, 2-3 steps each): GEPO
on the v1 trainer (the legacy one: tests/e2e/test_study_on_cpu.py), on the mixture task with per-source
statistics, its metrics in verl's logger and its thresholds in its checkpoint (resumed: the two-node tests). EDA runs
on both trainers inside the GEC tests (``--algorithm edge`` = EDA + GEC). ~1 minute per run, mostly
Ray/worker start-up."""

import json
import os

import pytest

from edge_verl_lab.demo.run import DemoConfig, run_demo
from edge_verl.reward.score import GRADER_OUTCOMES

GRADER_KEYS = {f"edge_verl/grader/{outcome}" for outcome in GRADER_OUTCOMES}


def assert_grader_metrics(row):
    # the reward's health: the fraction of this step's calls per outcome (caller, worker, deadline, ...)
    fractions = {key: value for key, value in row.items() if key.startswith("edge_verl/grader/")}
    assert set(fractions) == GRADER_KEYS, sorted(fractions)
    assert sum(fractions.values()) == pytest.approx(1.0) and all(0.0 <= value <= 1.0 for value in fractions.values())


GEPO_KEYS = ("group_entropy_mean", "group_entropy_std", "h_low", "h_high", "pos_attenuated_frac", "neg_attenuated_frac")


# the mixture (pair and max, each under its own data source), with a short warm start: the run is about the plumbing
MIXTURE = {"task": "mix", "warm_start_steps": 50, "per_source_stats": True}
SOURCES = ("edge_verl/demo_pair", "edge_verl/demo_max")
PER_SOURCE_KEYS = ("score_mean", "correct_frac", "all_wrong_group_frac", "all_right_group_frac", "zero_variance_group_frac",
                   "response_length", "responses", "sampled_entropy", "group_entropy_mean", "pos_attenuated_frac", "neg_attenuated_frac")


@pytest.fixture(scope="module")
def gepo_v1_checkpointed(run_cpu_demo):
    # validation runs before training: it must not move the thresholds (2 updates after 2 steps)
    overrides = lambda out: ["trainer.val_before_train=True"]  # noqa: E731
    return run_cpu_demo("gepo_v1", overrides=overrides, algorithm="gepo", trainer="v1", steps=2, save_freq=2, **MIXTURE)


def test_per_source_statistics_on_the_v1_trainer_add_up_to_the_batch_s(gepo_v1_checkpointed):
    # verl's v1 advantage batch holds no data_source: the adapter reads it from the TransferQueue
    _, rows = gepo_v1_checkpointed
    for row in rows[1:]:
        found = {source: {key: row[f"edge_verl/by_source/{source}/{key}"] for key in PER_SOURCE_KEYS} for source in SOURCES}
        responses = [found[source]["responses"] for source in SOURCES]
        assert sum(responses) == 64 and all(count % 8 == 0 for count in responses)  # 8 prompts x 8 responses, whole groups
        # the sources' rewards, weighted by their responses, are verl's batch reward; the same for GEPO's group entropy
        assert sum(found[s]["score_mean"] * found[s]["responses"] for s in SOURCES) / 64 == pytest.approx(row["critic/score/mean"], abs=1e-6)
        group_entropy = sum(found[s]["group_entropy_mean"] * found[s]["responses"] for s in SOURCES) / 64
        assert group_entropy == pytest.approx(row["edge_verl/gepo/group_entropy_mean"], rel=1e-5)
        assert all(0 <= found[s][key] <= 1 for s in SOURCES for key in PER_SOURCE_KEYS if key.endswith("_frac"))


def test_gepo_v1_run_logs_metrics_and_saves_thresholds(gepo_v1_checkpointed):
    out, rows = gepo_v1_checkpointed
    for key in GEPO_KEYS:
        assert f"edge_verl/gepo/{key}" in rows[-1]
    for row in rows:
        if row["step"] >= 1:  # step 0 holds validation only
            assert_grader_metrics(row)
    saved = json.loads((out / "checkpoints" / "global_step_2" / "edge_verl_state.json").read_text())
    assert saved["gepo_thresholds"]["num_updates"] == 2  # validation (before step 1) did not update them
    assert any(key.startswith("val-core/") for key in rows[0]), "validation ran"
    assert saved["gepo_thresholds"]["h_low"] == pytest.approx(rows[-1]["edge_verl/gepo/h_low"], rel=1e-12)


# GEPO's thresholds through checkpoint and resume (the EMA continuing from the saved state, the resumed run the
# uninterrupted one number for number): tests/e2e/test_two_nodes_on_cpu.py, whose GEPO run resumes after a lost node.


# The legacy trainer's GEPO run (metrics, thresholds in its checkpoint): the study's smoke run,
# tests/e2e/test_study_on_cpu.py.


# A plain GRPO run with the plugin installed (nothing of ours in its metrics or checkpoint but the reward's
# health): tests/e2e/test_vllm_rollout_on_cpu.py, through verl's vLLM rollout.


def test_gec_switched_on_without_gec_rows_fails_before_the_first_rollout(tmp_path):
    # The demo's edge_eda data has no agent_name column: GEC would silently never run.
    config = DemoConfig(out=tmp_path, algorithm="edge_eda", steps=1, extra_overrides=[
        "+algorithm.edge_gec.enable=True", "actor_rollout_ref.rollout.calculate_log_probs=False"])
    result = run_demo(config)
    log = (tmp_path / "verl.log").read_text()
    assert result["returncode"] != 0
    assert "no training row has agent_name=edge_gec" in log
    assert not result["rows"], "no training step may run"


def test_an_estimator_added_through_the_feature_table_alone_trains_end_to_end(run_cpu_demo, monkeypatch):
    # tests/e2e/toy_estimator.py registers `toy_sign` in the registry (edge_verl.estimators.base) and nothing else; every verl
    # process imports it (EDGE_VERL_FEATURE_MODULES), so verl's registry, the run's options and state, the
    # adapters' inputs, its metrics and the checkpoint's state file all come from the table's entry
    from pathlib import Path

    root = str(Path(__file__).resolve().parents[2])
    monkeypatch.setenv("EDGE_VERL_FEATURE_MODULES", "tests.e2e.toy_estimator")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
    overrides = lambda out: ["algorithm.adv_estimator=toy_sign", "+algorithm.toy_sign.scale=0.5"]  # noqa: E731
    out, rows = run_cpu_demo("toy", overrides=overrides, trainer="legacy", steps=1, save_freq=1)
    row = rows[-1]
    assert row["edge_verl/toy_sign/calls"] == 1.0
    assert row["edge_verl/toy_sign/old_logprob_mean"] < 0.0  # read the old policy's log-probs
    # the advantages are +-0.5 or 0 on every response token: verl's own statistics of them say so
    assert row["critic/advantages/max"] <= 0.5 + 1e-6 and row["critic/advantages/min"] >= -0.5 - 1e-6
    assert max(abs(row["critic/advantages/max"]), abs(row["critic/advantages/min"])) == pytest.approx(0.5)
    saved = json.loads((out / "checkpoints" / "global_step_1" / "edge_verl_state.json").read_text())
    assert saved == {"toy_calls": {"calls": 1}}
