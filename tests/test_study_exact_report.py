"""``edge-verl study --evaluation exact`` without verl: the report of hand-written run folders (metrics files,
each run's exact evaluation and each seed's step-0 one): p0 per seed, the baseline gate, the named contrasts
with their minimum detectable difference, and a loud error for a run without its evaluation."""

import json

import pytest

from edge_verl.demo.run import DemoConfig, build_overrides, final_weights, save_overrides
from edge_verl.study import report as study_report
from edge_verl.methods import get_method
from edge_verl.study.runner import DONE_FILE, EVAL_FILE, IDENTITY_FILE, StudyConfig
from tests.study_rows import training_row


def _evaluation(config, sampled, greedy=0.5, gold=0.2):
    # per problem: half at sampled - 0.01, half at sampled + 0.01 (mean `sampled`, SD 0.01054: SE 0.00333)
    per_problem = {"sampled": [sampled - 0.01] * 5 + [sampled + 0.01] * 5, "greedy": [greedy] * 10, "gold_prob": [gold] * 10}
    result = {"n": 10, "config": config.eval_config().as_dict(), "greedy_acc": greedy, "gold_prob": gold, "sampled_acc": sampled,
              "per_problem": per_problem}
    return {"seen": dict(result, sampled_acc=sampled + 0.01), "heldout": result}


def _write_study(tmp_path, final_sampled, reward_late, steps=4):
    """final_sampled / reward_late: (method, seed) -> held-out sampled accuracy / late sampled reward."""
    config = StudyConfig(task="pair", methods=("grpo", "edge", "gepo"), seeds=(1, 2, 3), steps=steps, evaluation="exact", out=tmp_path)
    for seed in config.seeds:
        folder = config.seed_model_folder(seed)
        folder.mkdir(parents=True)
        (folder / EVAL_FILE).write_text(json.dumps(_evaluation(config, 0.05)))
    for method, seed in config.runs():
        folder = config.run_folder(method, seed)
        folder.mkdir(parents=True)
        (folder / IDENTITY_FILE).write_text(json.dumps(config.identity(method, seed)))
        rows = [training_row(method, step, critic__score__mean=0.05 if step <= steps // 2 else reward_late[method, seed])
                for step in range(1, steps + 1)]
        if get_method(method).gec:  # a GEC run's sampled reward is its own metric
            for row in rows:
                row["edge_verl/gec/sampled/score_mean"] = row["critic/score/mean"]
        (folder / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
        (folder / EVAL_FILE).write_text(json.dumps(_evaluation(config, final_sampled[method, seed])))
        (folder / DONE_FILE).write_text(json.dumps({"seconds": 1.0, "commit": "abc", "modified": False}))
    return config


def test_a_learning_baseline_passes_the_gate_and_contrasts_carry_verdicts(tmp_path):
    # grpo 0.10, 0.12, 0.14; edge = grpo + 0.05, 0.06, 0.07 (mean 0.06, sd 0.01); gepo = grpo +- 0.001
    grpo = {1: 0.10, 2: 0.12, 3: 0.14}
    final = {**{("grpo", s): v for s, v in grpo.items()}, **{("edge", s): grpo[s] + 0.04 + 0.01 * s for s in grpo},
             **{("gepo", s): grpo[s] + (0.001 if s % 2 else -0.001) for s in grpo}}
    config = _write_study(tmp_path, final, {(m, s): 0.12 for m, s in final})
    report = study_report.summarize(config)
    assert report["p0"] == pytest.approx({"1": 0.06, "2": 0.06, "3": 0.06})  # the seeds' step-0 seen accuracy (sampled)
    # gate: seen 0.05 + 0.01 -> grpo's final seen (0.11, 0.13, 0.15) and reward 0.05 -> 0.12: up >= 0.02 everywhere
    assert report["gate"]["passed"], report["gate"]
    primary = {(e["method"], e["against"]): e for e in report["contrasts"]["primary"]}
    assert set(primary) == {("edge", "grpo"), ("gepo", "grpo")}
    assert primary["edge", "grpo"]["mean"] == pytest.approx(0.06) and primary["edge", "grpo"]["verdict"] == "edge above grpo"
    assert primary["gepo", "grpo"]["verdict"].startswith("no difference detected (detectable: |Δ| >= ")
    text = study_report.report_markdown(report)
    assert "**Baseline gate: passed**" in text and "MDD (80% power)" in text and "seed 1 0.060" in text
    assert "every completion capped at 16 tokens" in text
    # the evaluation's own noise: SD of (x - 0.01, x + 0.01) x 5 each = 0.01 * sqrt(10 / 9) = 0.010541, / sqrt(10) = 0.003333
    assert report["heldout_sampled_se_max"] == pytest.approx(0.003333, abs=1e-6) and "is at most 0.0033" in text


def test_a_baseline_that_did_not_learn_makes_every_verdict_uninformative(tmp_path):
    final = {(m, s): 0.06 + (0.05 if m == "edge" else 0.0) + 0.001 * s for m in ("grpo", "edge", "gepo") for s in (1, 2, 3)}
    config = _write_study(tmp_path, final, {(m, s): 0.05 for m, s in final})  # reward never rose
    report = study_report.summarize(config)
    assert not report["gate"]["passed"] and "reward_gain +0.000" in report["gate"]["reason"]
    assert all(e["verdict"].startswith("uninformative") for e in report["contrasts"]["primary"])
    assert "comparison is uninformative" in study_report.report_markdown(report)


def test_a_run_without_its_exact_evaluation_is_an_error(tmp_path):
    final = {(m, s): 0.1 for m in ("grpo", "edge", "gepo") for s in (1, 2, 3)}
    config = _write_study(tmp_path, final, {(m, s): 0.1 for m, s in final})
    (config.run_folder("edge", 2) / EVAL_FILE).unlink()
    with pytest.raises(FileNotFoundError, match=EVAL_FILE):
        study_report.summarize(config)


def test_every_method_is_evaluated_under_one_cap_and_trained_from_the_seeds_model(tmp_path):
    config = StudyConfig(task="pair", methods=("grpo", "edge"), seeds=(1,), steps=3, evaluation="exact", eval_max_new_tokens=12, out=tmp_path)
    demos = [config.demo_config(method, 1) for method in config.methods]
    # the training caps differ (GEC's corrections need 128 tokens), the evaluation's is one number for all
    assert [build_overrides(d, {"model": "m", "train": "t", "val": "v"}) for d in demos] and config.eval_config().max_new_tokens == 12
    assert all(not d.validate and d.save_final_weights and d.model_dir == config.seed_model_folder(1) for d in demos)
    assert config.identity("grpo", 1)["evaluation"] == config.identity("edge", 1)["evaluation"]
    assert save_overrides(demos[0]) == ["trainer.save_freq=3", "actor_rollout_ref.actor.checkpoint.save_contents=[model,optimizer,extra,hf_model]"]
    assert final_weights(demos[0]) == demos[0].out / "checkpoints" / "global_step_3" / "actor" / "huggingface"
    with pytest.raises(ValueError, match="evaluation="):
        StudyConfig(evaluation="greedy", out=tmp_path)
    with pytest.raises(ValueError, match="max_new_tokens"):
        StudyConfig(evaluation="exact", eval_max_new_tokens=0, out=tmp_path)
    with pytest.raises(ValueError, match="save_freq"):
        DemoConfig(steps=5, save_freq=2, save_final_weights=True)
