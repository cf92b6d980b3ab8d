"""``edge-verl study --evaluation exact`` without verl: the report of hand-written run folders (metrics files,
each run's exact evaluation and each seed's step-0 one): p0 per seed, the baseline gate, the named contrasts
with their minimum detectable difference, and a loud error for a run without its evaluation."""

import json

import pytest

from edge_verl_lab.demo.run import DemoConfig, build_overrides, final_weights, save_overrides
from edge_verl_lab.study import report as study_report
from edge_verl.methods import get_method
from edge_verl_lab.study.runner import DONE_FILE, EVAL_FILE, IDENTITY_FILE, StudyConfig, StudyError
from tests.study_rows import training_row


def _evaluation(config, sampled, greedy=0.5, gold=0.2):
    # per problem: half at sampled - 0.01, half at sampled + 0.01 (mean `sampled`, SD 0.01054: SE 0.00333)
    per_problem = {"sampled": [sampled - 0.01] * 5 + [sampled + 0.01] * 5, "greedy": [greedy] * 10, "gold_prob": [gold] * 10}
    result = {"n": 10, "config": config.eval_config().as_dict(), "greedy_acc": greedy, "gold_prob": gold, "sampled_acc": sampled,
              "per_problem": per_problem}
    return {"seen": dict(result, sampled_acc=sampled + 0.01), "heldout": result}


def _write_study(tmp_path, final_sampled, reward_late, steps=4, **options):
    """final_sampled / reward_late: (method, seed) -> held-out sampled accuracy / late sampled reward; ``options``:
    other StudyConfig fields."""
    config = StudyConfig(task="pair", methods=("grpo", "edge", "gepo"), seeds=(1, 2, 3), steps=steps, evaluation="exact", out=tmp_path,
                         **options)
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
    # one cap for every method, by default the longest response any of them trains on: edge's 16 + 48 + 64 = 128
    assert "every completion capped at 128 tokens" in text and "samples per problem at T=0.6" in text
    # the protocol table: the reference's loss aggregation and temperature, the tiny model's lr named as a deviation
    protocol = {row["setting"]: row for row in report["protocol"]}
    assert not protocol["loss aggregation"]["deviates"] and protocol["learning rate"]["deviates"] and protocol["learning rate"]["reason"]
    assert "| loss aggregation | seq-mean-token-mean | seq-mean-token-mean | `actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean` |" in text
    # the evaluation's own noise: SD of (x - 0.01, x + 0.01) x 5 each = 0.01 * sqrt(10 / 9) = 0.010541, / sqrt(10) = 0.003333
    assert report["heldout_sampled_se_max"] == pytest.approx(0.003333, abs=1e-6) and "is at most 0.0033" in text


def test_the_page_shows_what_each_method_writes_when_the_evaluation_records_it(tmp_path):
    # evaluation files with the completion statistics (exact_eval.SUMMARY): edge's final models answer right
    # in the last box more often than in the first (they reflect), grpo's never write a second box
    final = {(m, s): 0.1 for m in ("grpo", "edge", "gepo") for s in (1, 2, 3)}
    config = _write_study(tmp_path, final, {(m, s): 0.12 for m, s in final})
    for method, seed in config.runs():
        path = config.run_folder(method, seed) / EVAL_FILE
        evaluation = json.loads(path.read_text())
        reflecting = method == "edge"
        evaluation["heldout"].update(sampled_first_acc=0.05 if reflecting else 0.1, greedy_first_acc=0.5, sampled_reflected_frac=0.3 if reflecting else 0.0,
                                     sampled_capped_frac=0.01 * seed, greedy_capped_frac=0.0, sampled_length=20.0 if reflecting else 11.0)
        path.write_text(json.dumps(evaluation))
    report = study_report.summarize(config)
    found = report["completions"]
    assert found["edge"]["sampled_reflected_frac"]["mean"] == pytest.approx(0.3) and found["grpo"]["sampled_reflected_frac"]["mean"] == 0
    # truncation per seed 0.01, 0.02, 0.03: mean 0.02, sd 0.01
    assert found["gepo"]["sampled_capped_frac"]["mean"] == pytest.approx(0.02) and found["gepo"]["sampled_capped_frac"]["std"] == pytest.approx(0.01)
    text = study_report.report_markdown(report)
    assert "### What the final models write" in text and "| edge | 0.100 ± 0.000 | 0.050 ± 0.000 |" in text
    assert "the 128-token cap" in text and "longest response any method trains on: 128 tokens" in text
    # an evaluation file of before (no completion statistics) gives no such section rather than a wrong one
    del evaluation["heldout"]["sampled_capped_frac"]
    path.write_text(json.dumps(evaluation))
    assert "completions" not in study_report.summarize(config)


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


# --- a mixture: each task's slice of the evaluation and its per-source training statistics ---------------------

PARTS = {"pair": ("edge_verl/demo_pair", 3000, 1000), "max": ("edge_verl/demo_max", 3000, 1000)}  # source, held-out, seen


def _mixture_evaluation(config, pair_heldout, max_heldout, seen_gain=0.0):
    # held-out: pair's 3000 problems first (each `pair_heldout`), then max's 3000 (each `max_heldout`); seen: 0.1 / 0.6 + gain
    heldout = [pair_heldout] * 3000 + [max_heldout] * 3000
    seen = [0.1 + seen_gain] * 1000 + [0.6 + seen_gain] * 1000

    def result(values):
        mean = sum(values) / len(values)
        return {"n": len(values), "config": config.eval_config().as_dict(), "greedy_acc": mean, "gold_prob": mean, "sampled_acc": mean,
                "per_problem": {"sampled": values, "greedy": values, "gold_prob": values}}

    return {"heldout": result(heldout), "seen": result(seen)}


def _write_mixture_study(tmp_path, pair_final, max_final):
    config = StudyConfig(task="mix", methods=("grpo", "gepo"), seeds=(1, 2, 3), steps=2, evaluation="exact", out=tmp_path)
    for seed in config.seeds:
        folder = config.seed_model_folder(seed)
        folder.mkdir(parents=True)
        (folder / EVAL_FILE).write_text(json.dumps(_mixture_evaluation(config, 0.05, 0.5)))
    for method, seed in config.runs():
        folder = config.run_folder(method, seed)
        folder.mkdir(parents=True)
        (folder / IDENTITY_FILE).write_text(json.dumps(config.identity(method, seed)))
        rows = []
        for step in (1, 2):  # the window is step 2: per-source rewards 0.2 (pair) and 0.7 (max) there, 0.0 at step 1
            row = training_row(method, step, critic__score__mean=0.05 * step)  # the batch reward rises: the gate can pass
            for part, (source, _, _) in PARTS.items():
                row[f"edge_verl/by_source/{source}/score_mean"] = 0.0 if step == 1 else {"pair": 0.2, "max": 0.7}[part]
                for stat in ("all_wrong_group_frac", "sampled_entropy", "response_length"):
                    row[f"edge_verl/by_source/{source}/{stat}"] = 0.3
                if method == "gepo":
                    for stat in ("group_entropy_mean", "pos_attenuated_frac", "neg_attenuated_frac"):
                        row[f"edge_verl/by_source/{source}/{stat}"] = 0.4
            rows.append(row)
        (folder / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
        evaluation = _mixture_evaluation(config, pair_final[method, seed], max_final[method, seed], seen_gain=0.2)
        (folder / EVAL_FILE).write_text(json.dumps(evaluation))
        (folder / DONE_FILE).write_text(json.dumps({"seconds": 1.0, "commit": "abc", "modified": False}))
    return config


def test_a_mixture_report_splits_the_evaluation_and_the_training_statistics_by_task(tmp_path):
    # pair: gepo = grpo - 0.05, - 0.06, - 0.07 (mean -0.06, sd 0.01); max: gepo = grpo (differences all 0)
    grpo_pair, grpo_max = {1: 0.3, 2: 0.35, 3: 0.4}, {1: 0.6, 2: 0.62, 3: 0.64}
    pair_final = {**{("grpo", s): v for s, v in grpo_pair.items()}, **{("gepo", s): v - 0.04 - 0.01 * s for s, v in grpo_pair.items()}}
    max_final = {**{("grpo", s): v for s, v in grpo_max.items()}, **{("gepo", s): v for s, v in grpo_max.items()}}
    config = _write_mixture_study(tmp_path, pair_final, max_final)
    report = study_report.summarize(config)
    run = report["runs"]["gepo_seed2"]["by_part"]
    # the slices: gepo seed 2 is 0.35 - 0.06 = 0.29 on pair's 3000, 0.62 on max's; whole held-out (0.29 + 0.62) / 2
    assert run["pair"]["heldout_sampled"] == pytest.approx(0.29) and run["max"]["heldout_sampled"] == pytest.approx(0.62)
    assert report["runs"]["gepo_seed2"]["values"]["heldout_sampled"] == pytest.approx(0.455)
    assert (run["pair"]["seen_sampled_start"], run["max"]["seen_sampled_start"]) == pytest.approx((0.1, 0.6))
    assert (run["pair"]["reward"], run["max"]["reward"]) == (0.2, 0.7)  # step 2's per-source rewards, not step 1's
    assert run["pair"]["group_entropy"] == 0.4 and "group_entropy" not in report["runs"]["grpo_seed2"]["by_part"]["pair"]
    pair = {entry["method"]: entry for entry in report["parts"]["pair"]["contrasts"]}
    assert pair["gepo"]["mean"] == pytest.approx(-0.06) and pair["gepo"]["std"] == pytest.approx(0.01)
    maximum = {entry["method"]: entry for entry in report["parts"]["max"]["contrasts"]}
    assert maximum["gepo"]["mean"] == pytest.approx(0.0, abs=1e-12)
    # Holm over the two contrasts: pair's p (t = -0.06 / (0.01 / sqrt 3) = -10.4, df 2: p = 0.0091) doubled; max's p is 1
    assert pair["gepo"]["p_holm"] == pytest.approx(2 * pair["gepo"]["p"]) and maximum["gepo"]["p_holm"] == 1.0
    # grpo's seen accuracy 0.35 -> 0.55 and batch reward 0.05 -> 0.10: the gate passes, pair's difference is a verdict
    assert report["gate"]["passed"] and pair["gepo"]["verdict"] == "gepo below grpo"
    assert maximum["gepo"]["verdict"].startswith("no difference detected")
    text = study_report.report_markdown(report)
    assert "### Per task of the mixture" in text and "**pair** (`edge_verl/demo_pair`)" in text and "gepo − grpo" in text


def test_a_mixture_run_without_per_source_metrics_is_an_error(tmp_path):
    final = {(m, s): 0.3 for m in ("grpo", "gepo") for s in (1, 2, 3)}
    config = _write_mixture_study(tmp_path, final, final)
    folder = config.run_folder("gepo", 3)
    rows = [{key: value for key, value in json.loads(line).items() if "demo_max" not in key}
            for line in (folder / "metrics.jsonl").read_text().splitlines()]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    with pytest.raises(StudyError, match="part max: the run did not log edge_verl/by_source/edge_verl/demo_max/score_mean"):
        study_report.summarize(config)


def test_a_mixture_study_evaluates_exactly_and_its_runs_log_per_source_statistics(tmp_path):
    with pytest.raises(ValueError, match="is a mixture"):
        StudyConfig(task="mix", evaluation="verl", out=tmp_path)
    config = StudyConfig(task="mix", methods=("grpo",), seeds=(1,), out=tmp_path)
    overrides = build_overrides(config.demo_config("grpo", 1), {"train": "t", "val": "v", "model": "m", "val_seen": "s", "val_heldout": "h"})
    assert "+algorithm.edge_metrics.per_source=True" in overrides
    pair = StudyConfig(task="pair", methods=("grpo",), seeds=(1,), out=tmp_path)
    assert not any("per_source" in o for o in build_overrides(pair.demo_config("grpo", 1), {"train": "t", "val": "v", "model": "m"}))


def test_the_entropy_terms_gradient_share_is_read_only_where_edas_gradient_form_runs():
    # EDA's gradient form logs the share (actor_loss.py); its detached rows, GRPO and GEPO have no entropy term
    column = {c.key: c for c in study_report.COLUMNS}["entropy_grad_share"]
    assert column.metric_for("eda") == column.metric_for("edge") == "actor/edge_eda/entropy_grad_share"
    assert [column.metric_for(row) for row in ("eda_detached", "edge_detached", "grpo", "gepo")] == [None] * 4


def test_each_seed_s_calibration_is_on_the_page_and_travels_with_an_export(tmp_path):
    from edge_verl_lab.study.calibrate import calibration_config
    from edge_verl_lab.study.runner import CALIBRATION_FILE

    grpo = {1: 0.10, 2: 0.12, 3: 0.14}
    final = {(m, s): grpo[s] for m in ("grpo", "edge", "gepo") for s in grpo}
    config = _write_study(tmp_path / "study", final, {(m, s): 0.12 for m, s in final})
    measured = {"p0": 0.0625, "all_wrong_group_frac": 0.55, "greedy_acc": 0.0, "reflected_frac": 0.25, "regenerated": 120,
                "regenerate_success": 0.3, "problems": 128}
    for seed in (1, 2):  # seed 3 has none: it is left out, not invented
        calibration = {"config": calibration_config(config.temperature, config.continuation_tokens),
                       "parts": {"pair": {**measured, "p0": measured["p0"] * seed}}}
        (config.seed_model_folder(seed) / CALIBRATION_FILE).write_text(json.dumps(calibration))
    report = study_report.summarize(config)
    assert sorted(report["calibration"]) == ["1", "2"] and report["calibration"]["2"]["parts"]["pair"]["p0"] == 0.125
    text = study_report.report_markdown(report)
    assert "| 1 | pair | 0.062 | 0.55 | 0.250 | 0.300 | 120 |" in text and "| 2 | pair | 0.125 |" in text
    assert f"K=8 samples at T={config.temperature:g}" in text
    exported = study_report.export(config, tmp_path / "published")
    assert exported["calibration"] == report["calibration"]


def test_each_method_s_mechanism_is_shown_at_its_first_and_last_step(tmp_path):
    grpo = {1: 0.10, 2: 0.12, 3: 0.14}
    final = {(m, s): grpo[s] for m in ("grpo", "edge", "gepo") for s in grpo}
    config = _write_study(tmp_path, final, {(m, s): 0.12 for m, s in final})
    # GEPO's h_low moves 0.1 per step from 0.1 * seed; EDGE's injected-token probability from 0.05 to 0.2 in every seed
    for seed in config.seeds:
        path = config.run_folder("gepo", seed) / "metrics.jsonl"
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        for row in rows:
            row["edge_verl/gepo/h_low"] = 0.1 * seed + 0.1 * (row["step"] - 1)
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
        path = config.run_folder("edge", seed) / "metrics.jsonl"
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        for row in rows:
            row["edge_verl/gec/old_prob_injected_mean"] = 0.05 * row["step"]
        rows[-1]["edge_verl/gec/old_prob_injected_mean"] = 0.2
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    report = study_report.summarize(config)
    # h_low at step 1: mean of 0.1, 0.2, 0.3 = 0.2; at step 4: 0.5; over all steps: 0.35
    assert report["mechanisms"]["gepo"]["edge_verl/gepo/h_low"] == pytest.approx({"first": 0.2, "last": 0.5, "mean": 0.35})
    assert report["mechanisms"]["edge"]["edge_verl/gec/old_prob_injected_mean"] == pytest.approx({"first": 0.05, "last": 0.2, "mean": 0.125})
    assert "grpo" not in report["mechanisms"]  # it logs none of them
    text = study_report.report_markdown(report)
    assert "| gepo | GEPO h_low | 0.200 | 0.500 | 0.350 |" in text
    assert "| edge | policy's mean probability of the injected tokens | 0.050 | 0.200 | 0.125 |" in text
