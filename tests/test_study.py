"""``edge-verl study`` without verl: the tasks' splits, the study's options and run folders (resumable, never
two runs in one folder), and the report computed from metrics files written here by hand."""

import json
import math
import random

import pytest

from edge_verl.cli import main
from edge_verl_lab.demo import task as tasks
from edge_verl_lab.demo.run import DemoConfig, build_overrides
from edge_verl.methods import get_method
from edge_verl_lab.study import report as study_report
from edge_verl_lab.study.runner import DONE_FILE, IDENTITY_FILE, StudyConfig, StudyError, plan, run_state
from tests.study_rows import training_row


# --- tasks ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", tasks.TASK_NAMES)
def test_every_task_holds_out_problems_never_trained_or_warm_started_on(name):
    task = tasks.get_task(name)
    train = {question for question, _, _ in task.train_problems}
    heldout = {question for question, _, _ in task.heldout_problems}
    assert train and heldout and not train & heldout
    assert {question for question, _ in task.warm_start_problems()} == train
    rows = tasks.training_rows(task, 500, seed=3, agent_name="edge_gec")
    assert {row["prompt"][0]["content"] for row in rows} <= train and all(row["agent_name"] == "edge_gec" for row in rows)
    seen = tasks.validation_rows(task, "seen")
    held = tasks.validation_rows(task, "heldout")
    assert {row["prompt"][0]["content"] for row in seen} <= train
    assert {row["prompt"][0]["content"] for row in held} == heldout
    parts = tasks.parts(task)  # a mixture validates each part under its own sources
    assert {row["data_source"] for row in seen} == {part.validation_source("seen") for part in parts}
    assert {row["data_source"] for row in held} == {part.validation_source("heldout") for part in parts}
    assert {row["data_source"] for row in rows} == {part.data_source for part in parts}
    assert not any("agent_name" in row for row in seen + held), "validation is never corrected"
    for row in rows + seen + held:  # every row carries what GEC and the reward read
        info = row["extra_info"]
        assert info["answer"] == row["reward_model"]["ground_truth"] and info["solution"].endswith("\\boxed{%s}" % info["answer"])


def test_addmod_answers_are_last_digits_of_the_sum_and_the_split_is_fixed():
    task = tasks.get_task("addmod")
    assert len(task.train_problems) == 80 and len(task.heldout_problems) == 20 and len(task.seen_problems()) == 20
    for question, answer, _ in task.train_problems + task.heldout_problems:
        _, a, b, _, _ = question.split()
        assert answer == str((int(a) + int(b)) % 10)
    assert tasks.get_task("addmod").heldout_problems == tasks._addmod_split()[1]


def test_the_copy_task_writes_the_rows_the_demo_always_wrote():
    # The demo's data before tasks became data: a digit per row from random.Random(seed).randrange(10).
    rng = random.Random(5)
    digits = [rng.randrange(10) for _ in range(20)]
    rows = tasks.make_rows(20, seed=5, split="train")
    assert [row["prompt"][0]["content"] for row in rows] == [f"Copy {str(d) * 12}" for d in digits]
    assert [row["extra_info"]["solution"] for row in rows] == [f"The digit to copy is {d}. \\boxed{{{d}}}" for d in digits]
    assert tasks.get_task("copy").seen_problems() == tasks.get_task("copy").train_problems  # 10 <= 10: all of them


def test_max_shares_pair_s_split_and_answers_the_larger_digit():
    pair, larger = tasks.get_task("pair"), tasks.get_task("max")
    for mine, theirs in ((larger.train_problems, pair.train_problems), (larger.heldout_problems, pair.heldout_problems)):
        # the same strings, in the same order: a string held out of one part is held out of the other
        assert [q.split()[-1] for q, _, _ in mine] == [q.split()[-1] for q, _, _ in theirs]
    for question, answer, solution in larger.train_problems[:200]:
        assert answer == max(question.split()[-1]) and solution.endswith("\\boxed{%s}" % answer)
    # its misconception is the other digit of the string: "Max 22266626" -> 2
    assert tasks.MISCONCEPTIONS["other_digit"]("Max 22266626", "6") == "2"
    assert tasks.MISCONCEPTIONS["reversed"]("Pair 22266626", "26") == "62"


def test_the_mixture_draws_each_part_under_its_own_source_in_proportion_to_its_problems():
    mix = tasks.get_task("mix")
    assert isinstance(mix, tasks.Mixture) and [part.name for part in tasks.parts(mix)] == ["pair", "max"]
    assert len(mix.train_problems) == 8000 and len(mix.heldout_problems) == 6000 and len(mix.seen_problems()) == 2000
    rows = tasks.training_rows(mix, 4000, seed=1)
    share = sum(row["data_source"] == "edge_verl/demo_pair" for row in rows) / len(rows)
    assert abs(share - 0.5) < 0.03  # 4000 pair and 4000 max problems: 1/2 each, binomial SD 0.008
    for row in rows:  # a row's source is its problem's part
        word = row["prompt"][0]["content"].split()[0]
        assert row["data_source"] == {"Pair": "edge_verl/demo_pair", "Max": "edge_verl/demo_max"}[word]
    ranges = tasks.part_ranges(mix, "heldout")
    assert [(part.name, start, stop) for part, start, stop in ranges] == [("pair", 0, 3000), ("max", 3000, 6000)]
    assert mix.heldout_problems[3000:] == tasks.get_task("max").heldout_problems
    with pytest.raises(ValueError, match="validates each part under its own data source"):
        mix.validation_source("seen")
    with pytest.raises(ValueError, match="two or more distinct parts"):
        tasks.Mixture("m", "", "x", ("pair",), warm_start_steps=1)
    with pytest.raises(ValueError, match="one share in"):
        tasks.Mixture("m", "", "x", ("pair", "max"), warm_start_steps=1, part_gold=(0.5,))


def test_the_warm_start_draws_what_it_drew_before_mixtures_and_each_part_its_own_gold_share():
    # The warm start before mixtures, for one task: rng.choices(problems, k) then, per example, gold with
    # probability correct_fraction, else the misconception (pair: reversed).
    pair = tasks.get_task("pair")
    problems = pair.warm_start_problems()
    rng = random.Random(11)
    before = []
    for _ in range(3):
        for question, answer in rng.choices(problems, k=32):
            # the draw now hands out whole completions (a reflection task's can hold two boxes): the boxed answer
            before.append((question, "\\boxed{" + (answer if rng.random() < 0.16 else answer[::-1]) + "}"))
    draw, rng = tasks.warm_start_draw(pair), random.Random(11)
    assert [example for _ in range(3) for example in draw(rng, 32)] == before
    # the mixture: each part's examples gold in its share (MIX_PART_GOLD); every wrong one is the part's misconception
    draw, rng = tasks.warm_start_draw(tasks.get_task("mix")), random.Random(0)
    examples = [(q, c.removeprefix("\\boxed{").removesuffix("}")) for q, c in draw(rng, 20000)]
    for word, gold, share in (("Pair", lambda q: "".join(sorted(set(q.split()[-1]))), tasks.MIX_PART_GOLD[0]), ("Max", lambda q: max(q.split()[-1]), tasks.MIX_PART_GOLD[1])):
        mine = [(q, a) for q, a in examples if q.startswith(word)]
        right = sum(a == gold(q) for q, a in mine) / len(mine)
        assert abs(right - share) < 0.02, (word, right)
    assert all(a in (max(q.split()[-1]), min(q.split()[-1])) for q, a in examples if q.startswith("Max"))
    with pytest.raises(ValueError, match="each part's gold share"):
        tasks.warm_start_draw(tasks.get_task("mix"), correct_fraction=0.5)
    with pytest.raises(ValueError, match="is a mixture"):
        DemoConfig(task="mix", warm_start_correct_fraction=0.3)


def test_unknown_tasks_and_overlapping_splits_are_refused():
    with pytest.raises(ValueError, match="defined: copy, addmod"):
        tasks.get_task("nope")
    problem = ("Q", "1", "\\boxed{1}")
    with pytest.raises(ValueError, match="also in training"):
        tasks.Task("bad", "", "x", (problem,), (problem,))
    with pytest.raises(ValueError, match="task 'nope'"):
        DemoConfig(task="nope")


def test_a_validating_demo_validates_on_both_splits_and_the_default_demo_never_does(tmp_path):
    paths = {"model": tmp_path / "m", "train": tmp_path / "t.parquet", "val": tmp_path / "v.parquet",
             "val_seen": tmp_path / "s.parquet", "val_heldout": tmp_path / "h.parquet"}
    plain = build_overrides(DemoConfig(out=tmp_path), paths)
    assert f"data.val_files={paths['val']}" in plain and "trainer.test_freq=-1" in plain and "trainer.val_before_train=False" in plain
    assert not any("advantage_stats" in option for option in plain), "a plain demo GRPO run is a plain verl run"
    study = build_overrides(DemoConfig(out=tmp_path, validate=True, test_freq=4, val_samples=3, advantage_stats=True), paths)
    assert f"data.val_files=[{paths['val_seen']},{paths['val_heldout']}]" in study
    for option in ("trainer.val_before_train=True", "trainer.test_freq=4", "actor_rollout_ref.rollout.val_kwargs.n=3",
                   "actor_rollout_ref.rollout.val_kwargs.temperature=1.0", "+algorithm.edge_metrics.advantage_stats=True"):
        assert option in study


# --- the study's options and folders -------------------------------------------------------------------------


@pytest.mark.parametrize("options, message", [
    ({"methods": ("grpo", "sft")}, "not an RL method"),
    ({"methods": ("grpo", "nope")}, "not defined"),
    ({"methods": ("grpo", "grpo")}, "names one twice"),
    ({"methods": ()}, "at least one"),
    ({"seeds": ()}, "seeds"),
    ({"seeds": (1, -1)}, "seeds"),
    ({"task": "nope"}, "task 'nope'"),
    ({"steps": 0}, "steps"),
    ({"val_samples": 0}, "val_samples"),
    ({"trainer": "v2"}, "trainer"),
])
def test_bad_study_options_are_refused(tmp_path, options, message):
    with pytest.raises(ValueError, match=message):
        StudyConfig(out=tmp_path, **options)


def test_run_folders_are_resumable_and_never_shared(tmp_path):
    config = StudyConfig(out=tmp_path, methods=("grpo", "edge"), seeds=(1, 2), steps=2)
    assert [(m, s) for m, s, _ in plan(config)] == [("grpo", 1), ("edge", 1), ("grpo", 2), ("edge", 2)]
    assert {state for _, _, state in plan(config)} == {"new"}
    folder = config.run_folder("edge", 1)
    folder.mkdir(parents=True)
    (folder / IDENTITY_FILE).write_text(json.dumps(config.identity("edge", 1)))
    assert run_state(config, "edge", 1) == "partial"
    (folder / DONE_FILE).write_text("{}")
    assert run_state(config, "edge", 1) == "done"
    longer = StudyConfig(out=tmp_path, methods=("edge",), seeds=(1,), steps=3)
    with pytest.raises(StudyError, match="steps: 2 there, 3 now"):
        plan(longer)
    with pytest.raises(StudyError, match="extra_overrides"):
        run_state(StudyConfig(out=tmp_path, methods=("edge",), seeds=(1,), steps=2, extra_overrides=("trainer.x=1",)), "edge", 1)
    stray = config.run_folder("grpo", 2)
    stray.mkdir(parents=True)
    (stray / "notes.txt").write_text("mine")
    with pytest.raises(StudyError, match="not a study run"):
        plan(config)


def test_the_cli_dry_run_lists_the_runs_and_bad_options_exit_2(tmp_path, capsys):
    assert main(["study", "--methods", "grpo", "gepo", "--seeds", "4", "--steps", "3", "--out", str(tmp_path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "2 methods x 1 seeds x 3 steps; 0 of 2 runs done" in out and "gepo_seed4" in out
    assert not (tmp_path / "runs").exists(), "a dry run writes nothing"
    assert main(["study", "--steps", "0", "--out", str(tmp_path), "--dry-run"]) == 2
    assert "steps=0" in capsys.readouterr().err


# --- the report, from metrics files written by hand ----------------------------------------------------------


def _write_run(config, method, seed, records, seconds=60.0):
    folder = config.run_folder(method, seed)
    folder.mkdir(parents=True)
    (folder / IDENTITY_FILE).write_text(json.dumps(config.identity(method, seed)))
    (folder / "metrics.jsonl").write_text("".join(json.dumps(record) + "\n" for record in records))
    (folder / DONE_FILE).write_text(json.dumps({"seconds": seconds, "commit": "abc", "modified": False}))


# The report tests below read verl's validation (evaluation="verl", the published addmod study's form); the
# exact evaluation's report is tested in tests/test_study_exact_report.py.
VERL = {"task": "addmod", "evaluation": "verl"}
HELD = "val-core/edge_verl/demo_addmod/heldout/acc/mean@8"
SEEN = "val-core/edge_verl/demo_addmod/seen/acc/mean@8"


def _records(heldout_end, reward, method="grpo"):
    """Training steps with rewards ``reward`` (every metric ``method``'s columns name: tests/study_rows.py);
    validation at step 0 and after the last step."""
    rows = [{"step": 0, HELD: 0.05, SEEN: 0.04}]
    for step, value in enumerate(reward, 1):
        row = training_row(method, step, critic__score__mean=value, actor__entropy=1.0 + step,
                           edge_verl__adv__all_wrong_group_frac=0.25 * step, response_length__mean=10.0)
        if get_method(method).gec:
            row.update({"critic/score/mean": 0.9, "edge_verl/gec/sampled/score_mean": value, "edge_verl/gec/sampled/entropy": 0.5,
                        "edge_verl/gec/sampled/all_wrong_group_frac": 0.5, "edge_verl/gec/injected_token_frac": 0.3})
        rows.append(row)
    rows[-1].update({HELD: heldout_end, SEEN: heldout_end + 0.1})
    return rows


def test_a_column_reads_one_named_metric_and_a_run_without_it_stops_the_report(tmp_path):
    config = StudyConfig(out=tmp_path, methods=("grpo", "edge"), seeds=(1,), steps=2, **VERL)
    _write_run(config, "grpo", 1, _records(0.1, [0.1, 0.2]))
    records = _records(0.1, [0.1, 0.2], method="edge")
    for row in records:  # a GEC run whose as-sampled reward was renamed: never read from the corrected one instead
        row.pop("edge_verl/gec/sampled/score_mean", None)
    _write_run(config, "edge", 1, records)
    with pytest.raises(StudyError, match="edge_seed1 .*reward_sampled: a edge run reads edge_verl/gec/sampled/score_mean"):
        study_report.summarize(config)
    columns = {column.key: column for column in study_report.COLUMNS}
    assert columns["reward_sampled"].metric_for("grpo") == "critic/score/mean"
    assert columns["adv_var_before"].metric_for("gepo") == "edge_verl/gepo/adv_var_before"
    assert columns["adv_var_sampled"].metric_for("edge") == "edge_verl/gec/sampled/adv_var"  # GEC's as-sampled beats EDA's own
    assert columns["injected_token_frac"].metric_for("eda") is None  # not a GEC method: no column


def test_the_report_reads_each_number_from_the_runs_metrics_files(tmp_path):
    config = StudyConfig(out=tmp_path, methods=("grpo", "edge"), seeds=(1, 2, 3), steps=4, **VERL)
    held = {"grpo": (0.10, 0.20, 0.30), "edge": (0.15, 0.20, 0.40)}
    for method in config.methods:
        for seed, value in zip(config.seeds, held[method]):
            _write_run(config, method, seed, _records(value, [0.1, 0.2, 0.3, 0.5 + seed / 10], method=method))
    report = study_report.write_report(config)
    run = report["runs"]["grpo_seed2"]
    # the window is the last half of 4 steps: steps 3 and 4
    assert report["window"] == {"from_step": 3, "to_step": 4}
    assert run["values"]["heldout_acc"] == 0.20 and run["values"]["heldout_acc_start"] == 0.05
    assert run["values"]["seen_acc"] == pytest.approx(0.30) and run["values"]["seen_acc_start"] == 0.04
    assert run["values"]["reward_sampled"] == pytest.approx((0.3 + 0.7) / 2)
    assert run["values"]["entropy"] == pytest.approx((4.0 + 5.0) / 2) == run["values"]["entropy_sampled"]
    assert run["values"]["all_wrong_groups"] == pytest.approx((0.75 + 1.0) / 2)
    assert "injected_token_frac" not in run["values"]
    edge = report["runs"]["edge_seed1"]
    # a GEC run: the sampled columns read GEC's as-sampled metrics, the trained reward the corrected one
    assert edge["sources"]["reward_sampled"] == "edge_verl/gec/sampled/score_mean"
    assert edge["sources"]["entropy_sampled"] == "edge_verl/gec/sampled/entropy"
    assert edge["values"]["reward_trained"] == 0.9 and edge["values"]["all_wrong_groups"] == 0.5
    assert run["sources"]["reward_sampled"] == "critic/score/mean"
    # held-out: grpo 0.1 0.2 0.3 (mean 0.2, std 0.1); edge - grpo per seed: 0.05, 0, 0.1 -> mean 0.05, std 0.05,
    # 95% interval 0.05 +- t(0.975, 2) * 0.05 / sqrt(3) = 0.05 +- 4.3027 * 0.028868 = 0.05 +- 0.12421
    summary = report["methods"]["grpo"]["summary"]["heldout_acc"]
    assert summary["mean"] == pytest.approx(0.2) and summary["std"] == pytest.approx(0.1) and summary["n"] == 3
    delta = report["methods"]["edge"]["vs_baseline"]["heldout_acc"]
    assert delta["per_seed"] == pytest.approx({"1": 0.05, "2": 0.0, "3": 0.1})
    assert delta["mean"] == pytest.approx(0.05) and delta["interval"] == pytest.approx([0.05 - 0.12421, 0.05 + 0.12421], abs=1e-4)
    assert report["methods"]["grpo"]["vs_baseline"] == {}
    assert report["wall_time_s"] == 360.0 and report["run_commits"] == ["abc"] and report["not_finished"] == []
    text = (tmp_path / "report.md").read_text()
    assert "+0.050 [-0.074, +0.174]" in text and "0.200 ± 0.100" in text and "[metrics](runs/grpo_seed1/metrics.jsonl)" in text
    assert "edge-verl study --task addmod --steps 4 --evaluation verl --methods grpo edge" in text
    assert json.loads((tmp_path / "report.json").read_text()) == report
    assert (tmp_path / "curves.png").stat().st_size > 10_000


def test_an_unfinished_run_is_listed_and_left_out(tmp_path):
    config = StudyConfig(out=tmp_path, methods=("grpo", "gepo"), seeds=(1,), steps=2, **VERL)
    _write_run(config, "grpo", 1, _records(0.1, [0.1, 0.2]))
    (config.run_folder("gepo", 1)).mkdir(parents=True)
    report = study_report.summarize(config)
    assert report["not_finished"] == ["gepo_seed1"] and list(report["runs"]) == ["grpo_seed1"]
    assert report["methods"]["gepo"]["summary"] == {} and math.isclose(report["wall_time_s"], 60.0)
    assert "Not finished (left out): gepo_seed1." in study_report.report_markdown(report)


def test_the_regenerating_command_round_trips_through_the_cli(tmp_path, capsys):
    config = StudyConfig(out=tmp_path, task="copy", methods=("grpo", "eda"), seeds=(5, 6), steps=3, test_freq=2, val_samples=2,
                         trainer="legacy", extra_overrides=("trainer.save_freq=2",))
    command = study_report.command_of(config.as_dict())
    assert command.startswith("edge-verl study --task copy --steps 3 --test-freq 2 --val-samples 2 --trainer legacy")
    assert main(command.split()[1:] + ["--dry-run"]) == 0
    assert "2 methods x 2 seeds x 3 steps" in capsys.readouterr().out


def test_an_export_keeps_what_recomputes_the_report_and_gives_the_same_numbers(tmp_path, capsys):
    config = StudyConfig(out=tmp_path / "study", methods=("grpo", "gepo"), seeds=(1, 2), steps=4, **VERL)
    for method in config.methods:
        for seed in config.seeds:
            _write_run(config, method, seed, _records(0.1 * seed, [0.1, 0.2, 0.3, 0.4], method=method))
    (config.run_folder("grpo", 1) / "verl.log").write_text("big")
    original = study_report.write_report(config)
    published = tmp_path / "docs" / "results"
    arguments = ["study", "--task", "addmod", "--evaluation", "verl", "--methods", "grpo", "gepo", "--seeds", "1", "2", "--steps", "4",
                 "--out", str(config.out)]
    assert main([*arguments, "--export", str(published)]) == 0
    exported = json.loads((published / "report.json").read_text())
    assert exported["runs"] == original["runs"] and exported["methods"] == original["methods"]
    assert exported["published_from"] == str(config.out) and f"--out {config.out} --export <this folder>" in (published / "report.md").read_text()
    assert sorted(path.name for path in (published / "runs" / "grpo_seed1").iterdir()) == sorted(["metrics.jsonl", IDENTITY_FILE, DONE_FILE])
    assert main([*arguments, "--export", str(config.out)]) == 2  # never onto itself


def test_every_method_of_the_default_study_is_a_demo_config_before_anything_runs(tmp_path):
    config = StudyConfig(out=tmp_path)
    assert config.evaluation == "exact" and config.task == "reflect" and config.seeds == tuple(range(1, 9))
    for method in config.methods:  # "eda" is EDA under its method name (the demo's --algorithm says edge_eda)
        demo = config.demo_config(method, 1)
        assert demo.algorithm == method and demo.advantage_stats and demo.save_final_weights
        # exact evaluation: verl never validates, and every method of a seed trains from the seed's one model
        assert not demo.validate and demo.model_dir == config.seed_model_folder(1)


def test_a_diverged_run_is_shown_with_its_stability_statistics_at_the_step_it_diverged(tmp_path):
    config = StudyConfig(out=tmp_path, methods=("grpo", "eda"), seeds=(1,), steps=4, **VERL)
    steady = _records(0.1, [0.1, 0.2, 0.3, 0.4])
    for row in steady[1:]:
        row["actor/entropy"] = 0.2
    _write_run(config, "grpo", 1, steady)
    records = _records(0.1, [0.1, 0.2, 0.3, 0.4], method="eda")
    for row, entropy, grad in zip(records[1:], (0.1, 0.4, 1.6, 2.5), (0.3, 0.5, 9.0, 20.0)):
        row.update({"actor/entropy": entropy, "actor/grad_norm": grad, "edge_verl/edge_eda/abs_adv_p99": 10 * entropy})
    _write_run(config, "eda", 1, records)
    report = study_report.summarize(config)
    assert report["runs"]["grpo_seed1"]["diverged"] is None
    found = report["runs"]["eda_seed1"]["diverged"]
    # step 3 is the first whose sampled entropy (actor/entropy for a non-GEC run) passes 1.0 nats
    assert found["step"] == 3 and "actor/entropy 1.600 > 1.0" in found["why"]
    assert found["series"]["grad norm"] == [[1, 0.3], [2, 0.5], [3, 9.0], [4, 20.0]]
    assert found["series"]["|adv| p99"][2] == [3, 16.0] and "entropy ratio p1" not in found["series"]  # not logged here
    text = study_report.report_markdown(report)
    assert "1 of 2 runs" in text and "**eda_seed1** diverged at step 3" in text and "| 3 | 1.6 | 16 |" in text
    # a non-finite statistic is a divergence too, at its step
    assert study_report.divergence([{"step": 1, "actor/entropy": 0.1, "actor/pg_loss": float("nan")}], "grpo")["why"] == "not finite: actor/pg_loss"


def test_eda_s_detached_form_is_a_study_row_of_its_own(tmp_path):
    config = StudyConfig(out=tmp_path, methods=("grpo", "eda", "eda_detached", "edge_detached"), seeds=(1,), steps=2)
    detached = config.demo_config("eda_detached", 1)
    assert (detached.algorithm, detached.eda_form) == ("eda", "detached")
    assert (config.demo_config("eda", 1).eda_form, config.demo_config("edge_detached", 1).algorithm) == ("gradient", "edge")
    paths = {name: tmp_path / name for name in ("model", "train", "val", "val_seen", "val_heldout")}
    assert "+algorithm.edge_eda.entropy_gradient=False" in build_overrides(detached, paths)
    assert config.identity("eda_detached", 1)["method"] == "eda_detached" != config.identity("eda", 1)["method"]
    # its report columns are EDA's (and GEC's for edge_detached)
    columns = {column.key: column for column in study_report.COLUMNS}
    assert columns["adv_var_before"].metric_for("eda_detached") == "edge_verl/edge_eda/adv_var_before"
    assert columns["reward_sampled"].metric_for("edge_detached") == "edge_verl/gec/sampled/score_mean"
    with pytest.raises(ValueError, match="not an RL method the study can run; allowed: .*eda_detached, edge_detached"):
        StudyConfig(out=tmp_path, methods=("grpo", "sft"))


def _scheduled(monkeypatch, tmp_path, jobs, fail=()):
    """Run ``runner._run_all`` over a 2-method x 3-seed study with ``run_one`` replaced by a recorder that holds each
    run for a moment; returns (the runs in start order, the most running at once, the addresses runs got, failure)."""
    import threading
    import time

    from edge_verl_lab.study import runner

    config = StudyConfig(out=tmp_path, methods=("grpo", "gepo"), seeds=(1, 2, 3), steps=4, **VERL)
    started, running, most, addresses, lock = [], [0], [0], set(), threading.Lock()

    def fake_run_one(config, method, seed, stream, ray_address=None, seed_lock=None):
        with lock:
            started.append((method, seed))
            running[0] += 1
            most[0] = max(most[0], running[0])
            addresses.add(ray_address)
        time.sleep(0.05)
        with lock:
            running[0] -= 1
        if (method, seed) in fail:
            raise StudyError(f"{method} {seed} failed")
        return {}

    monkeypatch.setattr(runner, "run_one", fake_run_one)
    stream = __import__("io").StringIO()
    failure = runner._run_all(config, config.runs(), jobs, "127.0.0.1:6379", stream, time.time())
    return started, most[0], addresses, failure, stream.getvalue()


@pytest.mark.parametrize("jobs", [1, 2, 3])
def test_the_study_runs_jobs_runs_at_a_time_in_run_order_on_its_cluster(monkeypatch, tmp_path, jobs):
    started, most, addresses, failure, progress = _scheduled(monkeypatch, tmp_path, jobs)
    assert failure is None and most == jobs and addresses == {"127.0.0.1:6379"}
    # started in the study's run order (seed by seed), every run once
    assert started == [(m, s) for s in (1, 2, 3) for m in ("grpo", "gepo")]
    assert progress.count("/6] ") == 6


def test_after_a_failed_run_no_new_run_starts_and_the_first_failure_is_returned(monkeypatch, tmp_path):
    started, _, _, failure, _ = _scheduled(monkeypatch, tmp_path, 2, fail={("grpo", 1)})
    assert isinstance(failure, StudyError) and "grpo 1 failed" in str(failure)
    # grpo_seed1 and gepo_seed1 started together; gepo_seed1 finished; nothing after the failure started
    assert started[:2] == [("grpo", 1), ("gepo", 1)] and len(started) <= 3


def test_the_number_of_runs_at_a_time_is_validated(tmp_path):
    from edge_verl_lab.study.runner import run_study

    config = StudyConfig(out=tmp_path, methods=("grpo",), seeds=(1,), steps=4, **VERL)
    for bad in (0, -1, True, 1.5):
        with pytest.raises(ValueError, match="jobs="):
            run_study(config, dry_run=True, jobs=bad)
    assert main(["study", "--out", str(tmp_path), "--jobs", "0", "--dry-run"]) == 2


def test_a_demo_run_joins_a_running_cluster_only_when_given_its_address(tmp_path):
    paths = {"train": tmp_path / "train.parquet", "val": tmp_path / "val.parquet", "model": tmp_path / "model"}
    alone = build_overrides(DemoConfig(out=tmp_path), paths)
    assert "ray_kwargs.ray_init.num_cpus=32" in alone and not any("ray_init.address" in item for item in alone)
    joined = build_overrides(DemoConfig(out=tmp_path, ray_address="127.0.0.1:6379"), paths)
    assert "+ray_kwargs.ray_init.address=127.0.0.1:6379" in joined and "ray_kwargs.ray_init.num_cpus=32" not in joined
    # verl's file logger runs in the TaskRunner, a worker: its path travels in the run's job, not the driver's env
    assert f"+ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH={(tmp_path / 'verl_metrics.jsonl').resolve()}" in joined
    for bad in ("", "localhost", 6379):
        with pytest.raises(ValueError, match="ray_address"):
            DemoConfig(out=tmp_path, ray_address=bad)
