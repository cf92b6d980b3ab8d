"""A study page's checks beside its contrasts (edge_verl_lab/study/checks.py), on hand-written run folders: the
trained-twice comparison, gradient clipping and advantage size per method, the divergence rule's advantage and
gradient-norm limits, both evaluation lengths with the seeds at the floor, the seeds GEPO's contrast needs, the
learning-rate sensitivity of the primary verdicts, and the export of the folders beside the runs."""

import dataclasses
import json
import shutil

import pytest

from edge_verl_lab.reporting import minimum_detectable_difference
from edge_verl_lab.study import checks
from edge_verl_lab.study import report as study_report
from edge_verl_lab.study.config import WEIGHTS_DIGEST, eval_file
from edge_verl_lab.study.runner import DONE_FILE, EVAL_FILE, IDENTITY_FILE, StudyConfig
from tests.test_study_exact_report import _evaluation, _write_study

# grpo 0.10, 0.12, 0.14 held out; edge = grpo + 0.05, 0.06, 0.07; gepo = grpo +- 0.001; the late reward 0.12 (gate passes)
GRPO = {1: 0.10, 2: 0.12, 3: 0.14}
FINAL = {**{("grpo", s): v for s, v in GRPO.items()}, **{("edge", s): GRPO[s] + 0.04 + 0.01 * s for s in GRPO},
         **{("gepo", s): GRPO[s] + (0.001 if s % 2 else -0.001) for s in GRPO}}


def _study(tmp_path, **kwargs):
    config = _write_study(tmp_path, kwargs.get("final", FINAL), {key: 0.12 for key in FINAL})
    for method, seed in config.runs():
        done = config.run_folder(method, seed) / DONE_FILE
        done.write_text(json.dumps({**json.loads(done.read_text()), WEIGHTS_DIGEST: f"{method}{seed}" * 4}))
    return config


def _set_metrics(config, method, seed, **series):
    """Overwrite metric ``name`` (written with '__' for '/') of each step with the given per-step values."""
    path = config.run_folder(method, seed) / "metrics.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    for name, values in series.items():
        for row, value in zip(rows, values):
            row[name.replace("__", "/")] = value
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


def _train_twice(config, method, seed):
    source, target = config.run_folder(method, seed), config.out / checks.TWICE_FOLDER / "runs" / config.run_name(method, seed)
    shutil.copytree(source, target)
    return target


def test_runs_trained_twice_are_compared_number_for_number_and_any_difference_is_named(tmp_path):
    config = _study(tmp_path)
    twin = _train_twice(config, "grpo", 1)
    _train_twice(config, "edge", 1)
    found = checks.twice(config)
    assert found["all_equal"] and [pair["run"] for pair in found["pairs"]] == ["edge_seed1", "grpo_seed1"]
    assert found["pairs"][1]["heldout_sampled_acc"] == [0.10, 0.10]
    # a timing key may differ (the machine, not the run) ...
    _set_metrics(config, "grpo", 1, timing_s__step=[9.0] * 4)
    assert checks.twice(config)["all_equal"]
    # ... a training statistic may not, and neither may the weights
    rows = [json.loads(line) for line in (twin / "metrics.jsonl").read_text().splitlines()]
    rows[2]["actor/entropy"] += 1e-9
    (twin / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    pair = checks.twice(config)["pairs"][1]
    assert not pair["equal"] and pair["metric_differences"] == 1
    shutil.copyfile(config.run_folder("grpo", 1) / "metrics.jsonl", twin / "metrics.jsonl")
    (twin / DONE_FILE).write_text(json.dumps({"seconds": 2.0, WEIGHTS_DIGEST: "other"}))
    found = checks.twice(config)
    assert not found["all_equal"] and found["pairs"][1]["weights"] == ["grpo1" * 4, "other"]
    text = study_report.report_markdown(study_report.summarize(config))
    assert "### Trained twice" in text and "**NOT EQUAL**" in text and "| grpo_seed1 | 0.1000 / 0.1000 |" in text
    # another definition under the same name (e.g. another lr) is not a twin
    identity = json.loads((twin / IDENTITY_FILE).read_text())
    (twin / IDENTITY_FILE).write_text(json.dumps({**identity, "lr": 0.5}))
    assert not checks.twice(config)["pairs"][1]["same_definition"]


def test_a_study_without_the_folders_beside_its_runs_reports_neither(tmp_path):
    report = study_report.summarize(_study(tmp_path))
    assert report["twice"] is None and report["lr_sensitivity"] is None
    text = study_report.report_markdown(report)
    assert "Trained twice" not in text and "Learning-rate sensitivity" not in text


def test_clipping_counts_the_steps_whose_norm_passed_the_clip_and_each_run_s_largest_advantage(tmp_path):
    config = _study(tmp_path)
    for seed in config.seeds:
        # grpo: 0.5, 0.5, 0.9, 0.9 (never clipped at 1.0); edge: 2, 0.5, 4, 4 (3 of 4 clipped); gepo: exactly 1.0 (not past it)
        _set_metrics(config, "grpo", seed, actor__grad_norm=[0.5, 0.5, 0.9, 0.9], critic__advantages__max=[2.0, 2.5, 2.6, 2.0],
                     critic__advantages__min=[-1.0, -2.65, -1.0, -1.0])
        _set_metrics(config, "edge", seed, actor__grad_norm=[2.0, 0.5, 4.0, 4.0], critic__advantages__max=[5.0, 7.0 * seed, 5.0, 5.0],
                     critic__advantages__min=[-0.5] * 4)
        _set_metrics(config, "gepo", seed, actor__grad_norm=[1.0] * 4)
    found = study_report.summarize(config)["clipping"]
    assert found["threshold"] == 1.0
    grpo, edge, gepo = (found["methods"][method] for method in ("grpo", "edge", "gepo"))
    assert grpo["clipped_frac"] == 0 and grpo["grad_norm_median"] == pytest.approx(0.7) and grpo["abs_adv_max"] == pytest.approx(2.65)
    # edge: 9 of 12 steps past 1.0; its runs' largest |A|: 7, 14, 21 -> median 14, max 21; median norm of (2, .5, 4, 4) x 3 = 3
    assert edge["clipped_frac"] == pytest.approx(0.75) and edge["grad_norm_median"] == 3.0
    assert edge["abs_adv_max_median"] == 14.0 and edge["abs_adv_max"] == 21.0
    assert gepo["clipped_frac"] == 0
    text = study_report.report_markdown(study_report.summarize(config))
    assert "| edge | 3.000 | 4 | 75% | 14 | 21 |" in text


def test_a_run_diverges_where_its_advantage_or_gradient_norm_blows_up(tmp_path):
    config = _study(tmp_path)
    _set_metrics(config, "edge", 2, critic__advantages__max=[3.0, 2.5e6, 3.0, 3.0])  # EDA's floor: |A| 2.5e6 at step 2
    _set_metrics(config, "gepo", 3, actor__grad_norm=[0.5, 0.5, 0.5, 1.97e5])
    _set_metrics(config, "grpo", 1, critic__advantages__max=[100.0] * 4, actor__grad_norm=[100.0] * 4)  # at the limits, not past
    runs = study_report.summarize(config)["runs"]
    assert runs["edge_seed2"]["diverged"]["step"] == 2 and "|advantage| 2.5e+06 > 100" in runs["edge_seed2"]["diverged"]["why"]
    assert runs["gepo_seed3"]["diverged"]["step"] == 4 and "actor/grad_norm 1.97e+05 > 100" in runs["gepo_seed3"]["diverged"]["why"]
    assert runs["grpo_seed1"]["diverged"] is None
    assert sum(run["diverged"] is not None for run in runs.values()) == 2


def test_each_method_is_reported_at_its_trained_length_and_the_cap_with_its_seeds_at_the_floor(tmp_path):
    # edge: 10 held-out at 0.0005 (at the floor) in seed 1; grpo and gepo train at 16 tokens, the cap is edge's 128
    config = _study(tmp_path, final={**FINAL, ("edge", 1): 0.0005})
    assert config.own_length("grpo") == 16 and config.own_length("edge") is None and config.own_lengths() == [16]
    for method in ("grpo", "gepo"):
        for seed in config.seeds:
            evaluation = _evaluation(config, 0.3)
            evaluation["heldout"].update(greedy_capped_frac=0.25)
            (config.run_folder(method, seed) / eval_file(16)).write_text(json.dumps(evaluation))
    for method, seed in config.runs():
        path = config.run_folder(method, seed) / EVAL_FILE
        evaluation = json.loads(path.read_text())
        evaluation["heldout"]["greedy_capped_frac"] = 0.0
        path.write_text(json.dumps(evaluation))
    found = study_report.summarize(config)["lengths"]
    grpo, edge = found["methods"]["grpo"], found["methods"]["edge"]
    assert grpo["trained_length"] == 16 and grpo["at_own"] == {"sampled": 0.3, "greedy": 0.5, "greedy_capped": 0.25}
    assert grpo["at_cap"]["sampled"] == pytest.approx(0.12) and edge["at_own"] is None
    assert found["floor"] == {"grpo": [], "edge": [1], "gepo": []}
    text = study_report.report_markdown(study_report.summarize(config))
    assert "### Both evaluation lengths" in text and "| grpo | 16 | 0.300 | 0.500 | 0.250 | 0.120 | 0.500 | 0.000 |" in text
    assert "At the floor (held-out sampled <= 0.001 at the cap): edge seeds 1." in text


def test_a_page_without_evaluations_at_another_length_still_shows_both_lengths(tmp_path):
    # no eval_len16.json: a method trained at the cap (edge, 128) has its one number in both columns; one trained
    # shorter (grpo, 16) whose page of before evaluated it at the cap only shows "-" at its own length, not the cap's
    config = _study(tmp_path)
    text = study_report.report_markdown(study_report.summarize(config))
    assert "### Both evaluation lengths" in text
    row = next(line for line in text.splitlines() if line.startswith("| edge | 128 |"))
    cells = row.strip("|").split("|")
    assert [cell.strip() for cell in cells[2:4]] == [cell.strip() for cell in cells[5:7]] != ["-", "-"]
    assert next(line for line in text.splitlines() if line.startswith("| grpo | 16 |")).startswith("| grpo | 16 | - | - | - |")


def test_the_seeds_a_contrast_needs_for_an_mdd_of_0_05():
    # SD 0.05: n = 10 gives (2.262 + 0.883) * 0.05 / sqrt(10) = 0.0497; n = 9 gives (2.306 + 0.889) * 0.05 / 3 = 0.0533
    assert checks.seeds_needed(0.05) == 10
    assert minimum_detectable_difference(0.05, 10) <= 0.05 < minimum_detectable_difference(0.05, 9)
    assert checks.seeds_needed(0.0) == 2 and checks.seeds_needed(None) is None and checks.seeds_needed(float("nan")) is None
    assert checks.seeds_needed(10.0, limit=50) is None
    # gepo - grpo in the study above: +-0.001 -> SD 0.001155, MDD at n = 3 ~0.0071 <= 0.05 already
    power = checks.power_of([{"method": "gepo", "against": "grpo", "n": 3, "std": 0.0011547, "mdd": 0.0071}])
    assert power["seeds_needed"] == 2 and power["target"] == 0.05
    with pytest.raises(ValueError, match="not a primary contrast"):
        checks.power_of([], ("gec", "grpo"))


def test_the_primary_verdicts_are_re_checked_at_the_other_learning_rates_beside_the_study(tmp_path):
    config = _study(tmp_path / "main")
    # at lr 3e-3 edge falls to grpo - 0.06 in every seed (the verdict turns), gepo stays at grpo +- 0.001
    flipped = {**FINAL, **{("edge", s): GRPO[s] - 0.04 - 0.01 * s for s in GRPO}}
    other = _write_study(tmp_path / "main" / checks.LR_FOLDER / "0.003", flipped, {key: 0.12 for key in FINAL}, lr=0.003)
    study_report.write_report(other)
    found = study_report.summarize(config)["lr_sensitivity"]
    assert found["lr"] == config.lr and [study["lr"] for study in found["studies"]] == [0.003]
    entries = {(e["method"], e["against"]): e for e in found["studies"][0]["contrasts"]}
    assert entries["edge", "grpo"]["verdict"] == "edge below grpo" and entries["edge", "grpo"]["verdict_here"] == "edge above grpo"
    assert not entries["edge", "grpo"]["survives"] and entries["gepo", "grpo"]["survives"]
    text = study_report.report_markdown(study_report.summarize(config))
    assert "### Learning-rate sensitivity of the primary verdicts" in text and "| 0.003 (3 seeds) | edge − grpo | -0.060" in text


def test_export_copies_the_twice_and_other_lr_studies_and_the_trained_length_evaluations(tmp_path):
    config = _study(tmp_path / "main")
    (config.run_folder("grpo", 1) / eval_file(16)).write_text(json.dumps(_evaluation(config, 0.3)))
    _train_twice(config, "grpo", 1)
    twice = StudyConfig.from_dict({**config.as_dict(), "seeds": [1]}, out=config.out / checks.TWICE_FOLDER)
    for seed_file in (EVAL_FILE,):
        twice.seed_model_folder(1).mkdir(parents=True)
        shutil.copyfile(config.seed_model_folder(1) / seed_file, twice.seed_model_folder(1) / seed_file)
    study_report.write_report(twice)
    published = study_report.export(config, tmp_path / "page")
    assert (tmp_path / "page" / "runs" / "grpo_seed1" / eval_file(16)).is_file()
    assert (tmp_path / "page" / checks.TWICE_FOLDER / "runs" / "grpo_seed1" / "metrics.jsonl").is_file()
    assert published["twice"]["all_equal"] and len(published["twice"]["pairs"]) == 1


def test_eda_s_forms_are_contrasted_with_each_other_in_the_further_family():
    from edge_verl_lab.study.verdict import contrasts

    # eda = grpo - 0.30 +- 0.01; eda_clamped = grpo (the blow-up was the loss) -> eda - eda_clamped = -0.30 +- 0.01
    grpo = {"1": 0.6, "2": 0.7, "3": 0.5, "4": 0.65}
    eda = {seed: value - 0.30 + (0.01 if int(seed) % 2 else -0.01) for seed, value in grpo.items()}
    found = contrasts({"grpo": grpo, "eda": eda, "eda_clamped": dict(grpo)}, ["grpo", "eda", "eda_clamped"])
    further = {(entry["method"], entry["against"]): entry for entry in found["further"]}
    assert set(further) == {("eda_clamped", "grpo"), ("eda", "eda_clamped")}  # eda - grpo is primary
    assert further["eda", "eda_clamped"]["mean"] == pytest.approx(-0.30) and further["eda_clamped", "grpo"]["mean"] == 0
    # Holm over the further family of two: the smaller p doubled
    assert further["eda", "eda_clamped"]["p_holm"] == pytest.approx(min(1.0, 2 * further["eda", "eda_clamped"]["p"]))


def test_rows_added_to_a_study_folder_keep_its_evaluation_cap(tmp_path):
    from edge_verl_lab.study.runner import StudyError, check_seed_cap

    # the folder's seed models were evaluated under edge's 128-token cap; a grpo-only invocation's own cap is 16
    config = _study(tmp_path)
    alone = StudyConfig(task="pair", methods=("grpo",), seeds=(1,), steps=4, evaluation="exact", out=tmp_path)
    assert (config.eval_max_new_tokens, alone.eval_max_new_tokens) == (128, 16)
    check_seed_cap(config, config.seed_model_folder(1))
    with pytest.raises(StudyError, match="evaluated under a 128-token cap, this invocation's is 16 .*--eval-max-new-tokens 128"):
        check_seed_cap(alone, alone.seed_model_folder(1))
    check_seed_cap(alone, tmp_path / "models" / "seed9")  # a seed never evaluated: nothing to keep


def test_every_invocation_is_listed_with_the_runs_it_trained_and_those_the_page_dropped(tmp_path):
    config = _study(tmp_path)
    records = [{"jobs": 2, "trained": ["grpo_seed1", "grpo_seed2", "edge_seed1"], "evaluated_again": [], "seconds": 600.0,
                "finished": "2026-12-06T06:00:00+0000", "commit": "a" * 40, "modified": False},
               {"jobs": 2, "trained": ["gepo_seed1", "gepo_seed2"], "evaluated_again": [], "seconds": 120.0, "finished": "2026-12-06T07:00:00+0000",
                "commit": "b" * 40, "modified": False, "discarded": "trained on a dirty tree", "discarded_runs": ["gepo_seed2"]}]
    (tmp_path / study_report.INVOCATIONS_FILE).write_text("".join(json.dumps(record) + "\n" for record in records))
    text = study_report.report_markdown(study_report.summarize(config))
    assert "| 1 | 2026-12-06T06:00:00+0000 | aaaaaaa | 2 | 10.0 | grpo seeds 1-2, edge seed 1 | - | - |" in text
    assert "| 2 | 2026-12-06T07:00:00+0000 | bbbbbbb | 2 | 2.0 | gepo seeds 1-2 | - | gepo seed 2: trained on a dirty tree |" in text
    assert study_report.discarded_runs({**records[1], "discarded_runs": ["x"]}) == ["x"]
    assert study_report.discarded_runs({"trained": ["a"], "discarded": "why"}) == ["a"] and study_report.discarded_runs(records[0]) == []


def test_pages_sharing_a_folder_each_get_their_own_methods_twins(tmp_path):
    # one study folder, two pages: the twins of the methods a page does not show stay off it
    config = _study(tmp_path / "main")
    for method in ("grpo", "edge"):
        _train_twice(config, method, 1)
    twice = StudyConfig.from_dict({**config.as_dict(), "seeds": [1]}, out=config.out / checks.TWICE_FOLDER)
    twice.seed_model_folder(1).mkdir(parents=True)
    shutil.copyfile(config.seed_model_folder(1) / EVAL_FILE, twice.seed_model_folder(1) / EVAL_FILE)
    study_report.write_report(twice)
    page = dataclasses.replace(config, methods=("grpo", "gepo"))
    assert [pair["run"] for pair in checks.twice(page)["pairs"]] == ["grpo_seed1"]
    assert [sub.methods for sub in checks.sub_studies(page, checks.TWICE_FOLDER, nested=False)] == [("grpo", "gepo")]
    published = study_report.export(page, tmp_path / "page")
    assert sorted(path.name for path in (tmp_path / "page" / checks.TWICE_FOLDER / "runs").iterdir()) == ["grpo_seed1"]
    assert [pair["run"] for pair in published["twice"]["pairs"]] == ["grpo_seed1"]
