"""edge-verl reproduce without running verl: tables (the ablations and controls included), stage planning
(dry run), the table's arithmetic and markdown (every seed, the paired difference to GRPO and its interval,
the last checkpoint as the headline and the best validation step labelled optimistic), resumability of the
report, and argument errors. The real CPU run is tests/e2e/test_reproduce_on_cpu.py; the GEPO sweep:
tests/test_sensitivity.py."""

import json
from pathlib import Path

import pytest

from edge_verl.cli import main
from edge_verl_lab.reproduce.pipeline import (
    Pipeline,
    Run,
    Settings,
    _logger_with_file,
    check_runs,
    run_identity,
    build_table,
    planned_runs,
    run_folder,
    table_markdown,
)
from edge_verl.recipes import get_recipe
from edge_verl_lab.reproduce.tables import TABLES, Row
from tests.recipe_dry_run import recipe_method

RECIPES = Path(__file__).resolve().parents[1] / "recipes"


def test_every_row_has_an_existing_recipe_for_each_backend_it_names_running_the_rows_method():
    for table in TABLES.values():
        for row in table.rows:
            for backend, recipe in row.recipes.items():
                assert (RECIPES / recipe).exists(), (table.key, row.key, backend, recipe)
                assert recipe_method(RECIPES / recipe) == row.method, (table.key, row.key, recipe)
                assert get_recipe(recipe).backend == backend, (table.key, row.key, recipe)
            assert (row.train_set is not None) == row.trains == (row.method is not None)


def test_a_row_names_a_defined_method_or_none_for_a_base_model():
    with pytest.raises(ValueError, match="method 'edgy' is not defined; defined: edge, eda"):
        Row("x", "X", {"fsdp": "m"}, {"fsdp": "run_edge_qwen2.5-math-7b_fsdp.sh"}, "edgy", "hard_1k")
    with pytest.raises(ValueError, match="row x: a row with recipes names their method"):
        Row("x", "X", {"fsdp": "m"}, {"fsdp": "run_edge_qwen2.5-math-7b_fsdp.sh"}, None, "hard_1k")
    with pytest.raises(ValueError, match="row x: a row with recipes names their method, a base-model row none"):
        Row("x", "X", {"fsdp": "m"}, method="grpo")


def test_a_users_training_file_is_read_in_the_variant_of_each_rows_method(tmp_path):
    settings = _settings(tmp_path, train_files={"hard_1k": tmp_path / "mine.parquet"})
    table = settings.table
    assert settings.train_file(table.row("edge_7b")) == tmp_path / "mine_gec.parquet"
    assert settings.train_file(table.row("grpo_7b")) == tmp_path / "mine.parquet"


def test_edge_tables_hold_the_papers_numbers():
    hard = TABLES["edge_hard_1k"]
    assert hard.row("edge_7b").paper == {"Avg": 53.21, "aime24": 16.67, "amc": 53.01, "math500": 79.00, "minerva": 36.03, "olympiad_bench": 42.67}
    assert TABLES["edge_random_1k"].row("grpo_1.5b").paper["Avg"] == 40.32
    assert hard.row("base_7b").paper == {"Avg": 29.04} and not hard.row("base_7b").trains
    assert hard.train_sets == ("hard_1k",) and hard.row("edge_1.5b").method == "edge" and hard.row("grpo_1.5b").method == "grpo"
    assert hard.row("edge_1.5b").train_file(Path("d")) == Path("d/train_hard_1k_gec.parquet")
    assert hard.row("grpo_1.5b").train_file(Path("d")) == Path("d/train_hard_1k.parquet")


def test_logger_always_includes_file():
    assert _logger_with_file(None) == "[console,file]"
    assert _logger_with_file("[console,wandb]") == "[console,wandb,file]"
    assert _logger_with_file("[file,wandb]") == "[file,wandb]"


def _settings(tmp_path, **overrides):
    options = {"table": TABLES["edge_hard_1k"], "seeds": [1, 2], "out": tmp_path / "out", "recipes_dir": RECIPES}
    return Settings(**{**options, **overrides})


def test_plan_base_rows_once_trained_rows_per_seed(tmp_path):
    runs = planned_runs(_settings(tmp_path, rows=["base_1.5b", "edge_1.5b"]))
    assert [run.name for run in runs] == ["base_1.5b", "edge_1.5b_seed1", "edge_1.5b_seed2"]


def test_bad_settings_are_refused(tmp_path):
    with pytest.raises(ValueError, match="backend"):
        _settings(tmp_path, backend="deepspeed")
    with pytest.raises(ValueError, match="seeds"):
        _settings(tmp_path, seeds=[1, 1])
    with pytest.raises(KeyError, match="no row"):
        _settings(tmp_path, rows=["edge_70b"])
    with pytest.raises(ValueError, match="trains on"):
        _settings(tmp_path, train_files={"random_1k": tmp_path / "x.parquet"})
    assert main(["reproduce", "edge_hard_1k", "--rows", "nope", "--out", str(tmp_path)]) == 2


def test_dry_run_lists_every_stage_and_writes_nothing(tmp_path, capsys):
    assert main(["reproduce", "edge_hard_1k", "--seeds", "1", "2", "--rows", "base_7b", "grpo_7b", "--out", str(tmp_path / "out"), "--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("would prepare data")
    trains = [line for line in lines if line.startswith("would run train")]
    assert len(trains) == 2 and "SEED=2" in trains[1] and "EXPERIMENT_NAME=edge_hard_1k_grpo_7b_seed2" in trains[1]
    assert trains[1].endswith(f"-> {tmp_path / 'out' / 'checkpoints' / 'grpo_7b_seed2'}")
    assert "MODEL_PATH=Qwen/Qwen2.5-Math-7B" in trains[0] and "run_grpo_qwen2.5-math-7b_fsdp.sh" in trains[0]
    assert "RUN_TAG=edge_hard_1k/grpo_7b" in trains[0]
    assert sum(line.startswith("would run eval") for line in lines) == 3 and lines[-1].startswith("would write report")
    assert not (tmp_path / "out").exists()
    assert main(["reproduce", "gepo_math", "--seeds", "1", "--backend", "megatron", "--out", str(tmp_path / "g"), "--dry-run"]) == 0
    output = capsys.readouterr().out
    assert "run_klcov_qwen3.5-9b_megatron.sh" in output and "MODEL_PATH=Qwen/Qwen3.5-9B" in output


def _train_lines(capsys) -> dict[str, str]:
    lines = capsys.readouterr().out.splitlines()
    return {line.split(":", 1)[0].removeprefix("would run train "): line for line in lines if line.startswith("would run train")}


def test_per_row_models_land_in_distinct_folders_by_row_size_or_model_id(tmp_path, capsys):
    argv = ["reproduce", "edge_hard_1k", "--seeds", "1", "--out", str(tmp_path / "out"), "--dry-run"]
    assert main([*argv, "--model", "1.5b=/models/m15", "--model", "Qwen/Qwen2.5-Math-7B=/models/m7", "--model", "edge_7b=/models/e7"]) == 0
    trains = _train_lines(capsys)
    expected = {"grpo_1.5b_seed1": "/models/m15", "edge_1.5b_seed1": "/models/m15", "grpo_7b_seed1": "/models/m7", "edge_7b_seed1": "/models/e7"}
    assert {name: line.split("MODEL_PATH=", 1)[1].split()[0] for name, line in trains.items()} == expected
    folders = [line.rsplit("-> ", 1)[1] for line in trains.values()]
    assert len(set(folders)) == 4 and all(folder.endswith(name) for folder, name in zip(folders, trains))


def test_one_model_for_rows_of_different_models_is_refused_before_anything_runs(tmp_path, capsys):
    argv = ["reproduce", "edge_hard_1k", "--seeds", "1", "--out", str(tmp_path / "out")]
    assert main([*argv, "--set", "MODEL_PATH=/models/Qwen2.5-Math-7B"]) == 2
    assert "--set MODEL_PATH would put every row on one model" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
    # rows of one model: MODEL_PATH is just where that model is
    assert main([*argv, "--rows", "grpo_7b", "edge_7b", "--set", "MODEL_PATH=/m7", "--dry-run"]) == 0
    assert all("MODEL_PATH=/m7" in line for line in _train_lines(capsys).values())
    assert main([*argv, "--model", "70b=/x"]) == 2
    assert "--model 70b: not a selected row, size or model" in capsys.readouterr().err


@pytest.mark.parametrize("variable", ["CKPT_DIR", "CKPT_ROOT", "EXPERIMENT_NAME", "SEED", "TRAIN_FILE"])
def test_variables_that_would_merge_runs_are_refused(tmp_path, capsys, variable):
    assert main(["reproduce", "edge_hard_1k", "--out", str(tmp_path / "out"), "--set", f"{variable}=x"]) == 2
    assert f"--set {variable}: the pipeline sets it per run" in capsys.readouterr().err


def test_a_repeated_row_is_refused(tmp_path, capsys):
    assert main(["reproduce", "edge_hard_1k", "--rows", "grpo_7b", "grpo_7b", "--out", str(tmp_path / "out")]) == 2
    assert "each row once" in capsys.readouterr().err


def test_a_finished_stage_of_another_run_in_the_same_out_is_refused_before_any_training(tmp_path, capsys):
    """Same --out, another backend: the fsdp run's finished train stage must not count as the megatron one."""
    settings = _settings(tmp_path, rows=["grpo_7b"], seeds=[1])
    run = planned_runs(settings)[0]
    folder = run_folder(settings, run)
    folder.mkdir(parents=True)
    (folder / "train.done.json").write_text(json.dumps({"identity": run_identity(settings, run), "step": 2}))
    check_runs(settings, [run])  # the same run: fine (skipped later)
    argv = ["reproduce", "edge_hard_1k", "--rows", "grpo_7b", "--seeds", "1", "--out", str(tmp_path / "out")]
    assert main([*argv, "--backend", "megatron"]) == 2
    error = capsys.readouterr().err
    assert "holds a finished train stage of another run" in error and "backend: 'fsdp' -> 'megatron'" in error
    assert main([*argv, "--model", "grpo_7b=/models/other"]) == 2
    assert "model: 'Qwen/Qwen2.5-Math-7B' -> '/models/other'" in capsys.readouterr().err


def _fake_eval(folder: Path, avg: float, aime: float):
    (folder / "eval").mkdir(parents=True)
    (folder / "eval" / "eval.json").write_text(json.dumps({"aime24": {"problems": 30, "pass@1": aime}, "Avg": {"problems": 1560, "pass@1": avg}}))
    (folder / "eval.done.json").write_text("{}")


def test_table_is_mean_and_sample_std_over_seeds_next_to_the_paper(tmp_path):
    settings = _settings(tmp_path, rows=["base_1.5b", "edge_1.5b"])
    runs = planned_runs(settings)
    # edge seeds: Avg 0.40 and 0.50 -> 45.00 ± 7.07 (sample std: sqrt(((40-45)^2 + (50-45)^2) / 1)); AIME 0.1, 0.2 -> 15 ± 7.07
    _fake_eval(run_folder(settings, runs[0]), 0.30, 0.0)
    _fake_eval(run_folder(settings, runs[1]), 0.40, 0.1)
    _fake_eval(run_folder(settings, runs[2]), 0.50, 0.2)
    table = build_table(settings, runs)
    edge = table["rows"][1]
    assert edge["per_seed"] == {"1": {"Avg": pytest.approx(40.0), "aime24": pytest.approx(10.0)}, "2": {"Avg": pytest.approx(50.0), "aime24": pytest.approx(20.0)}}
    assert edge["columns"]["Avg"] == {"mean": pytest.approx(45.0), "std": pytest.approx(7.0710678), "n": 2, "paper": 47.24}
    assert table["rows"][0]["columns"]["Avg"] == {"mean": pytest.approx(30.0), "std": 0.0, "n": 1, "paper": 25.71}
    text = table_markdown(table)
    assert "| EDGE-GRPO 1.5B | Qwen/Qwen2.5-Math-1.5B | 2 | 45.00 ± 7.07 [47.24] | 15.00 ± 7.07 [10.00] |" in text


def test_report_is_skipped_when_its_inputs_are_unchanged_and_redone_when_they_change(tmp_path):
    settings = _settings(tmp_path, rows=["base_1.5b"])
    runs = [Run(TABLES["edge_hard_1k"].row("base_1.5b"), None)]
    _fake_eval(run_folder(settings, runs[0]), 0.30, 0.0)
    lines = []
    pipeline = Pipeline(settings, log=lines.append)
    pipeline.report(runs)
    pipeline.report(runs)
    assert lines[0].startswith("wrote report") and lines[1].startswith("skip  report")
    (run_folder(settings, runs[0]) / "eval" / "eval.json").write_text(json.dumps({"Avg": {"problems": 1, "pass@1": 1.0}}))
    pipeline.report(runs)
    assert lines[2].startswith("wrote report")
    assert json.loads((settings.out / "table.json").read_text())["rows"][0]["columns"]["Avg"]["mean"] == 100.0


def _fake_recipes(folder: Path, exit_code: int) -> Path:
    """Recipes standing in for the real ones: they log what they were given and exit with ``exit_code``."""
    folder.mkdir()
    for recipe in {r for row in TABLES["edge_hard_1k"].rows for r in row.recipes.values()}:
        (folder / recipe).write_text(f'#!/usr/bin/env bash\necho "training $SEED on $TRAIN_FILE in $CKPT_DIR"; exit {exit_code}\n')
    return folder


def test_a_failed_stage_stops_with_the_path_of_its_log_and_is_retried_next_time(tmp_path, capsys):
    data = tmp_path / "data"
    data.mkdir()
    for name in ["train_hard_1k", "train_hard_1k_gec", *(f"eval_{n}" for n in ("aime24", "amc", "math500", "minerva", "olympiad_bench", "aime25"))]:
        (data / f"{name}.parquet").write_bytes(b"")
    recipes = _fake_recipes(tmp_path / "recipes", exit_code=7)
    argv = ["reproduce", "edge_hard_1k", "--seeds", "1", "--rows", "grpo_1.5b", "--out", str(tmp_path / "out"),
            "--data-dir", str(data), "--recipes", str(recipes)]
    assert main(argv) == 1
    captured = capsys.readouterr()
    log = tmp_path / "out" / "runs" / "grpo_1.5b_seed1" / "train.log"
    assert f"stage 'train grpo_1.5b_seed1' failed: run_grpo_qwen2.5-math-7b_fsdp.sh exited with 7; log: {log}" in captured.err
    assert "training 1 on" in log.read_text() and not (log.parent / "train.done.json").exists()
    assert main(argv) == 1  # nothing was marked done: the next invocation runs the stage again
    assert log.read_text().count("training 1 on") == 2
    assert len(list((log.parent / "metrics").glob("attempt_*.jsonl"))) == 0  # the fake recipe logged nothing
    recipes_ok = _fake_recipes(tmp_path / "recipes_ok", exit_code=0)
    assert main([*argv[:-1], str(recipes_ok)]) == 1
    assert "no checkpoint in" in capsys.readouterr().err  # exit 0 without a checkpoint is a failure too


def test_random_1k_unavailable_fails_the_data_stage_loudly(tmp_path, capsys):
    argv = ["reproduce", "edge_random_1k", "--seeds", "1", "--rows", "grpo_1.5b", "--out", str(tmp_path / "out"),
            "--random-source", str(tmp_path / "missing.parquet"), "--recipes", str(_fake_recipes(tmp_path / "recipes", exit_code=0))]
    assert main(argv) == 1
    assert "stage 'data' failed: Random-1K needs the DeepScaleR-Preview data set" in capsys.readouterr().err


# --- what the table reports: every seed, the paired difference to GRPO, last vs best ----------------------------


def _fake_training(folder: Path, avg: float, validation: list[tuple[int, float]], **metrics):
    """An evaluated training run: eval.json (Avg), and verl's file-logger records with its per-step
    validation (val-core/<set>/acc/mean@1 on two sets, ``validation`` giving their mean) and ``metrics``."""
    _fake_eval(folder, avg, avg / 2)
    records = [{"step": step, "data": {"val-core/aime24/acc/mean@1": score - 0.1, "val-core/amc/acc/mean@1": score + 0.1, **metrics}}
               for step, score in validation]
    (folder / "metrics").mkdir()
    (folder / "metrics" / "attempt_1.jsonl").write_text("".join(json.dumps(record) + "\n" for record in records))


def _three_seed_grpo_and_edge(tmp_path):
    settings = _settings(tmp_path, rows=["base_1.5b", "grpo_1.5b", "edge_1.5b"], seeds=[1, 2, 3])
    runs = planned_runs(settings)
    averages = {"base_1.5b": [0.30], "grpo_1.5b": [0.47, 0.48, 0.52], "edge_1.5b": [0.50, 0.52, 0.54]}
    for run in runs:
        if run.row.trains:
            # validation peaks at step 50 (0.60) and ends at step 100 (0.45): best != last
            _fake_training(run_folder(settings, run), averages[run.row.key][run.seed - 1], [(0, 0.2), (50, 0.6), (100, 0.45)])
        else:
            _fake_eval(run_folder(settings, run), 0.30, 0.1)
    return settings, runs


def test_each_row_shows_every_seed_and_its_paired_difference_to_the_grpo_row_of_the_same_size(tmp_path):
    settings, runs = _three_seed_grpo_and_edge(tmp_path)
    table = build_table(settings, runs)
    rows = {row["key"]: row for row in table["rows"]}
    edge = rows["edge_1.5b"]
    assert {seed: scores["Avg"] for seed, scores in edge["per_seed"].items()} == {"1": pytest.approx(50.0), "2": pytest.approx(52.0), "3": pytest.approx(54.0)}
    # Avg: EDGE 50, 52, 54 vs GRPO 47, 48, 52 -> differences 3, 4, 2: mean 3, std 1, t(0.975, 2) = 4.302653,
    # half-width 4.302653 / sqrt(3) = 2.484138 -> [0.52, 5.48]; aime24 is half of Avg: 1.5 [0.26, 2.74]
    assert edge["baseline"] == "grpo_1.5b"
    avg = edge["vs_baseline"]["Avg"]
    assert avg["per_seed"] == {"1": pytest.approx(3.0), "2": pytest.approx(4.0), "3": pytest.approx(2.0)}
    assert (avg["mean"], avg["std"], avg["n"]) == (pytest.approx(3.0), pytest.approx(1.0), 3)
    assert avg["interval"] == [pytest.approx(0.515862, abs=1e-6), pytest.approx(5.484138, abs=1e-6)]
    assert edge["vs_baseline"]["aime24"]["interval"] == [pytest.approx(0.257931, abs=1e-6), pytest.approx(2.742069, abs=1e-6)]
    assert rows["grpo_1.5b"]["baseline"] is None and rows["grpo_1.5b"]["vs_baseline"] == {}
    assert rows["base_1.5b"]["baseline"] is None  # a base model is not paired with anything
    text = table_markdown(table)
    assert "| EDGE-GRPO 1.5B | Qwen/Qwen2.5-Math-1.5B | 3 | 52.00 ± 2.00 [47.24] |" in text
    assert text.splitlines()[6].startswith("| EDGE-GRPO 1.5B |") and text.splitlines()[6].endswith("| +3.00 [+0.52, +5.48] |")  # headline Δ Avg
    assert "| GRPO 1.5B | Qwen/Qwen2.5-Math-1.5B | 3 | 49.00 ± 2.65 [40.26] |" in text and "| (baseline) |" in text
    assert "| EDGE-GRPO 1.5B | GRPO 1.5B | 3 | +3.00 [+0.52, +5.48] | +1.50 [+0.26, +2.74] |" in text
    for seed, value in (("1", "50.00"), ("2", "52.00"), ("3", "54.00")):
        assert f"| EDGE-GRPO 1.5B | {seed} | {value} |" in text  # the per-seed section
    assert "| Qwen/Qwen2.5-Math-1.5B (base) | Qwen/Qwen2.5-Math-1.5B | 1 | 30.00 [25.71] |" in text  # one value: no ± 0


def test_a_single_paired_seed_reports_the_difference_without_an_interval_and_says_so(tmp_path):
    settings = _settings(tmp_path, rows=["grpo_7b", "edge_7b"], seeds=[1])
    runs = planned_runs(settings)
    _fake_eval(run_folder(settings, runs[0]), 0.40, 0.1)
    _fake_eval(run_folder(settings, runs[1]), 0.45, 0.1)
    table = build_table(settings, runs)
    edge = table["rows"][1]["vs_baseline"]["Avg"]
    assert (edge["mean"], edge["n"], edge["interval"]) == (pytest.approx(5.0), 1, None)
    assert "+5.00 (1 paired seed: no interval)" in table_markdown(table)


def test_the_headline_is_the_last_checkpoint_and_the_best_validation_step_only_appears_labelled_optimistic(tmp_path):
    settings, runs = _three_seed_grpo_and_edge(tmp_path)
    table = build_table(settings, runs)
    assert table["checkpoint"] == "last"
    edge = {row["key"]: row for row in table["rows"]}["edge_1.5b"]
    # validation means (in %): 20 at step 0, 60 at step 50, 45 at step 100 -> best step 50 (60), last step 100 (45)
    assert edge["validation"]["per_seed"]["2"] == {"best_step": 50, "best": pytest.approx(60.0), "last_step": 100, "last": pytest.approx(45.0)}
    assert edge["validation"]["best"]["mean"] == pytest.approx(60.0) and edge["validation"]["last"]["mean"] == pytest.approx(45.0)
    assert edge["validation"]["label"] == "best step on validation — optimistic"
    assert edge["columns"]["Avg"]["mean"] == pytest.approx(52.0)  # the headline: the final checkpoint's evaluation
    text = table_markdown(table)
    headline, _, rest = text.partition("### ")
    assert "final checkpoint" in headline and "60.00" not in headline and "optimistic" not in headline
    assert "### Best step on validation — optimistic (not the headline)" in text
    assert "| EDGE-GRPO 1.5B | 2 | 50 | 60.00 | 100 | 45.00 |" in text
    assert {row["key"]: row["validation"] for row in table["rows"]}["base_1.5b"] is None


def test_without_validation_metrics_there_is_no_best_step_section(tmp_path):
    settings = _settings(tmp_path, rows=["grpo_7b"], seeds=[1])
    runs = planned_runs(settings)
    _fake_eval(run_folder(settings, runs[0]), 0.40, 0.1)
    text = table_markdown(build_table(settings, runs))
    assert "optimistic" not in text and "best step" not in text


def test_the_report_plots_every_curve_and_skips_a_metric_a_run_did_not_log(tmp_path):
    from edge_verl_lab.reproduce.tables import CURVES

    for key in ("edge_verl/edge_eda/abs_adv_p1", "edge_verl/edge_eda/abs_adv_p50", "edge_verl/edge_eda/abs_adv_p99",
                "edge_verl/edge_eda/entropy_ratio_p1", "edge_verl/edge_eda/entropy_ratio_p50",
                "edge_verl/edge_eda/entropy_ratio_p99", "actor/grad_norm", "edge_verl/gec/sampled/adv_var"):
        assert key in CURVES
    settings = _settings(tmp_path, rows=["grpo_7b", "edge_7b"], seeds=[1])
    grpo, edge = planned_runs(settings)
    _fake_training(run_folder(settings, grpo), 0.40, [(1, 0.3)], **{"actor/grad_norm": 1.0})  # no edge_eda/*
    _fake_training(run_folder(settings, edge), 0.45, [(1, 0.3)], **{"edge_verl/edge_eda/abs_adv_p99": 2.5, "actor/grad_norm": 0.5})
    lines = []
    Pipeline(settings, log=lines.append).report([grpo, edge])
    assert lines == [f"wrote report: {settings.out / 'table.md'}, table.json, curves.png"]
    assert (settings.out / "curves.png").stat().st_size > 10_000


def test_ablation_tables_run_every_ablation_and_control_on_7b_with_only_the_papers_numbers(tmp_path):
    expected = ["grpo", "gec", "forcer", "eda", "forcer_eda", "edge", "sft", "edge_masked", "edge_sft_injected",
                "edge_placebo", "edge_drop_first"]
    for key, train_set, grpo, edge, forcer_eda in (("edge_ablation_random_1k", "random_1k", 46.47, 49.30, 45.71),
                                                    ("edge_ablation_hard_1k", "hard_1k", 47.69, 53.21, 45.19)):
        table = TABLES[key]
        assert [row.method for row in table.rows] == expected and [row.key for row in table.rows] == [f"{m}_7b" for m in expected]
        assert all(row.size == "7b" and row.train_set == train_set and row.model("fsdp") == "Qwen/Qwen2.5-Math-7B" for row in table.rows)
        assert table.row("grpo_7b").paper["Avg"] == grpo and table.row("edge_7b").paper["Avg"] == edge
        assert table.row("forcer_eda_7b").paper == {"Avg": forcer_eda}  # the ablation table gives only Avg
        assert all(not table.row(f"{m}_7b").paper for m in expected if m not in ("grpo", "edge", "forcer_eda"))
        assert set(table.row("sft_7b").recipes) == {"fsdp"} and all(set(table.row(f"{m}_7b").recipes) == {"fsdp", "megatron"} for m in expected if m != "sft")
        assert table.row("edge_masked_7b").recipes["megatron"] == "run_edge-masked_qwen2.5-math-7b_megatron.sh"
        assert all(table.baseline_of(row, table.rows).key == "grpo_7b" for row in table.rows if row.key != "grpo_7b")
    settings = _settings(tmp_path, table=TABLES["edge_ablation_hard_1k"], rows=["forcer_eda_7b", "edge_placebo_7b"], seeds=[1])
    runs = planned_runs(settings)
    _fake_eval(run_folder(settings, runs[0]), 0.40, 0.1)
    _fake_eval(run_folder(settings, runs[1]), 0.41, 0.1)
    text = table_markdown(build_table(settings, runs))
    assert "| + Force-R & EDA | Qwen/Qwen2.5-Math-7B | 1 | 40.00 [45.19] | 10.00 [—] |" in text
    assert "| control: EDGE, placebo answers | Qwen/Qwen2.5-Math-7B | 1 | 41.00 [—] | 10.00 [—] |" in text


def test_sft_trains_on_the_reference_solutions_and_is_left_out_on_megatron_unless_named(tmp_path, capsys):
    table = TABLES["edge_ablation_hard_1k"]
    assert table.row("sft_7b").train_file(Path("d")) == Path("d/sft_hard_1k.parquet")
    argv = ["reproduce", "edge_ablation_hard_1k", "--seeds", "1", "--out", str(tmp_path / "out"), "--dry-run"]
    assert main([*argv, "--backend", "megatron"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "leave out row sft_7b: no megatron recipe; has fsdp"
    assert not any("sft_7b" in line for line in lines[1:])
    assert sum(line.startswith("would run train") for line in lines) == 10
    assert main([*argv, "--backend", "megatron", "--rows", "sft_7b"]) == 2
    assert "row sft_7b has no megatron recipe (has ['fsdp'])" in capsys.readouterr().err
    assert main([*argv, "--rows", "sft_7b"]) == 0
    sft = _train_lines(capsys)["sft_7b_seed1"]
    assert "TRAIN_FILE=" + str(tmp_path / "out" / "data" / "sft_hard_1k.parquet") in sft and "run_sft_qwen2.5-math-7b_fsdp.sh" in sft
    assert main([*argv, "--rows", "sft_7b", "--train-file", f"hard_1k={tmp_path / 'mine.parquet'}"]) == 2
    assert "row sft_7b (SFT) trains on the reference solutions" in capsys.readouterr().err
