"""GEPO's sensitivity sweep through ``edge-verl reproduce gepo_sensitivity``: the grid (one coefficient at a
time around the paper's values, the paper's point once), its validation before anything runs, the dry-run
plan, the run identity of grid points, and the table and plots from evaluation results. No verl run; the
overrides composed against verl's config: tests/integration/test_sensitivity_compose_on_cpu.py."""

import json
from pathlib import Path

import pytest

from edge_verl.cli import main
from edge_verl.estimators.gepo import GepoConfig
from edge_verl_lab.reproduce.cli import sensitivity_grid
from edge_verl_lab.reproduce.pipeline import Pipeline, RunCollision, Settings, check_runs, planned_runs, run_folder, run_identity
from edge_verl_lab.reproduce.tables import GEPO_DEFAULT_GRID, GEPO_PAPER, TABLES, gepo_sensitivity_table

RECIPES = Path(__file__).resolve().parents[1] / "recipes"


def test_the_centre_is_the_papers_point_and_gepo_configs_defaults():
    defaults = GepoConfig()
    assert GEPO_PAPER == {"alpha_low": 0.5, "alpha_high": 0.2, "beta_low": 0.2, "beta_high": 0.3, "gamma": 0.01}
    assert GEPO_PAPER == {name: getattr(defaults, name) for name in GEPO_PAPER}
    assert all(GEPO_PAPER[name] in values for name, values in GEPO_DEFAULT_GRID.items()), "the paper's value inside each grid"
    TABLES["gepo_sensitivity"].sweep.check()  # every default grid point is a valid GepoConfig


def test_the_grid_varies_one_coefficient_at_a_time_and_runs_the_papers_point_once():
    table = gepo_sensitivity_table({"alpha_high": [0.3, 0.1, 0.1, 0.2], "gamma": [0.03]})
    # alpha_high: 0.1, 0.2 (the paper's: row "paper"), 0.3; gamma: 0.01 (paper), 0.03 -> 1 + 2 + 1 rows
    assert [row.key for row in table.rows] == ["paper", "alpha_high_0.1", "alpha_high_0.3", "gamma_0.03"]
    assert table.sweep.points == {
        "alpha_high": ((0.1, "alpha_high_0.1"), (0.2, "paper"), (0.3, "alpha_high_0.3")),
        "gamma": ((0.01, "paper"), (0.03, "gamma_0.03")),
    }
    assert table.row("paper").overrides == ()  # the recipe's defaults are the paper's values
    assert table.row("alpha_high_0.3").overrides == ("+algorithm.gepo.alpha_high=0.3",)
    assert table.row("gamma_0.03").overrides == ("+algorithm.gepo.gamma=0.03",)
    for row in table.rows:
        assert row.method == "gepo" and row.recipes == {"fsdp": "run_gepo_qwen7b.sh", "megatron": "run_gepo_qwen3.5-9b_megatron.sh"}
        assert (RECIPES / row.recipes["fsdp"]).exists() and (RECIPES / row.recipes["megatron"]).exists()
    assert table.baseline == "paper" and table.baseline_of(table.row("gamma_0.03"), table.rows).key == "paper"
    # the default grid: 5 coefficients x 4 values beside the paper's + the paper's point
    assert len(TABLES["gepo_sensitivity"].rows) == 1 + sum(len(values) - 1 for values in GEPO_DEFAULT_GRID.values())


@pytest.mark.parametrize(
    "grid, message",
    [
        ({"alpha_high": [0.1, 0.6]}, "grid point alpha_high=0.6 is invalid: gepo.alpha_high=0.6 must be < gepo.alpha_low=0.5"),
        ({"alpha_low": [0.2]}, "grid point alpha_low=0.2 is invalid: gepo.alpha_high=0.2 must be < gepo.alpha_low=0.2"),
        ({"gamma": [0.0]}, "grid point gamma=0.0 is invalid: gepo.gamma=0.0 would freeze the thresholds"),
        ({"beta_low": [-0.1]}, "grid point beta_low=-0.1 is invalid: gepo.beta_low=-0.1 must be >= 0.0"),
        ({"gamma": [float("nan")]}, "grid point gamma=nan is not a finite number"),
        ({"delta": [1.0]}, r"sensitivity coefficients \['delta'\]; choose from \['alpha_low'"),
    ],
)
def test_an_invalid_grid_point_is_an_error_naming_it(grid, message):
    with pytest.raises(ValueError, match=message):
        gepo_sensitivity_table(grid)


def test_vary_options_give_the_grid(tmp_path, capsys):
    assert sensitivity_grid([]) is None
    assert sensitivity_grid([("gamma", None), ("alpha_high", (0.1,)), ("alpha_high", (0.3,))]) == {
        "gamma": GEPO_DEFAULT_GRID["gamma"], "alpha_high": (0.1, 0.3)}
    out = tmp_path / "out"
    argv = ["reproduce", "gepo_sensitivity", "--out", str(out), "--dry-run"]
    assert main([*argv, "--vary", "alpha_high=0.1,0.45,0.5"]) == 2
    assert "grid point alpha_high=0.5 is invalid" in capsys.readouterr().err
    assert main([*argv, "--vary", "epsilon=0.1"]) == 2
    assert "--vary epsilon: not a GEPO coefficient" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([*argv, "--vary", "gamma=fast"])
    assert "expected NAME=V1,V2,... (numbers)" in capsys.readouterr().err
    assert main(["reproduce", "gepo_math", "--out", str(out), "--vary", "gamma", "--dry-run"]) == 2
    assert "--vary sweeps GEPO's coefficients: it needs the table gepo_sensitivity" in capsys.readouterr().err
    assert not out.exists()


def test_an_invalid_point_in_a_table_given_directly_is_refused_before_anything_runs(tmp_path):
    table = gepo_sensitivity_table({"alpha_high": [0.9]}, check=False)
    with pytest.raises(ValueError, match="alpha_high=0.9 is invalid"):
        Settings(table=table, seeds=[1], out=tmp_path / "out", recipes_dir=RECIPES)
    assert not (tmp_path / "out").exists()


def test_dry_run_of_the_sweep_lists_every_run_with_its_override_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "out"
    argv = ["reproduce", "gepo_sensitivity", "--vary", "alpha_high=0.1,0.3", "--vary", "gamma=0.03", "--seeds", "1", "2",
            "--out", str(out), "--dry-run"]
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    trains = {line.split(":", 1)[0].removeprefix("would run train "): line for line in lines if line.startswith("would run train")}
    rows = ["paper", "alpha_high_0.1", "alpha_high_0.3", "gamma_0.03"]
    assert list(trains) == [f"{row}_seed{seed}" for row in rows for seed in (1, 2)]  # the paper's point once per seed
    assert sum(line.startswith("would run eval") for line in lines) == 8
    assert trains["paper_seed1"].endswith(f"run_gepo_qwen7b.sh  -> {out / 'checkpoints' / 'paper_seed1'}")
    assert trains["alpha_high_0.3_seed2"].endswith(
        f"run_gepo_qwen7b.sh +algorithm.gepo.alpha_high=0.3  -> {out / 'checkpoints' / 'alpha_high_0.3_seed2'}")
    assert "RUN_TAG=gepo_sensitivity/gamma_0.03" in trains["gamma_0.03_seed1"] and "SEED=2" in trains["gamma_0.03_seed2"]
    assert lines[-1] == f"would write report: {out / 'table.md'}, table.json, curves.png, sensitivity_alpha_high.png, sensitivity_gamma.png"
    assert not out.exists()
    assert main([*argv[:-1], "--backend", "megatron", "--dry-run"]) == 0
    assert "run_gepo_qwen3.5-9b_megatron.sh +algorithm.gepo.gamma=0.03" in capsys.readouterr().out


def test_grid_points_have_distinct_identities_and_a_folder_of_another_point_is_refused(tmp_path):
    table = gepo_sensitivity_table({"alpha_high": [0.1, 0.3]})
    settings = Settings(table=table, seeds=[1], out=tmp_path / "out", recipes_dir=RECIPES)
    runs = {run.row.key: run for run in planned_runs(settings)}
    identities = {key: run_identity(settings, run) for key, run in runs.items()}
    assert identities["alpha_high_0.1"]["overrides"] == ["+algorithm.gepo.alpha_high=0.1"]
    assert "overrides" not in identities["paper"]  # a row without overrides: identities recorded before still match
    assert len({json.dumps(identity, sort_keys=True) for identity in identities.values()}) == 3
    run = runs["alpha_high_0.3"]
    folder = run_folder(settings, run)
    folder.mkdir(parents=True)
    recorded = {**identities["alpha_high_0.3"], "overrides": ["+algorithm.gepo.alpha_high=0.25"]}
    (folder / "train.done.json").write_text(json.dumps({"identity": recorded, "step": 300}))
    with pytest.raises(RunCollision, match=r"overrides: \['\+algorithm.gepo.alpha_high=0.25'\] -> \['\+algorithm.gepo.alpha_high=0.3'\]"):
        check_runs(settings, list(runs.values()))


def _fake_eval(folder: Path, avg: float):
    (folder / "eval").mkdir(parents=True)
    (folder / "eval" / "eval.json").write_text(json.dumps({"Avg": {"problems": 1560, "pass@1": avg}}))
    (folder / "eval.done.json").write_text("{}")


def test_report_writes_the_sweeps_table_and_one_plot_per_coefficient_from_evaluation_results(tmp_path):
    table = gepo_sensitivity_table({"alpha_high": [0.1, 0.3], "gamma": [0.001, 0.1]})
    settings = Settings(table=table, seeds=[1, 2], out=tmp_path / "out", recipes_dir=RECIPES)
    runs = planned_runs(settings)
    # Avg by row and seed (fractions): the paper's point 0.50 / 0.54; alpha_high 0.1 -> 0.46 / 0.48, 0.3 -> 0.52 / 0.58
    averages = {"paper": (0.50, 0.54), "alpha_high_0.1": (0.46, 0.48), "alpha_high_0.3": (0.52, 0.58),
                "gamma_0.001": (0.40, 0.44), "gamma_0.1": (0.50, 0.50)}
    for run in runs:
        _fake_eval(run_folder(settings, run), averages[run.row.key][run.seed - 1])
    lines = []
    report = Pipeline(settings, log=lines.append).report(runs)
    assert lines == [f"wrote report: {settings.out / 'table.md'}, table.json, curves.png, sensitivity_alpha_high.png, sensitivity_gamma.png"]
    for name in ("alpha_high", "gamma"):
        assert (settings.out / f"sensitivity_{name}.png").stat().st_size > 10_000
    points = report["sensitivity"]["alpha_high"]["points"]
    assert report["sensitivity"]["alpha_high"]["paper_value"] == 0.2
    assert [(p["value"], p["row"], p["paper_point"]) for p in points] == [(0.1, "alpha_high_0.1", False), (0.2, "paper", True), (0.3, "alpha_high_0.3", False)]
    # alpha_high 0.3: 52, 58 -> mean 55, std sqrt(((52-55)^2 + (58-55)^2) / 1) = 4.2426; vs the paper's point 50, 54:
    # differences 2, 4 -> mean 3, std 1.4142, t(0.975, 1) = 12.7062 -> half-width 12.7062 * 1.4142 / sqrt(2) = 12.7062
    high = points[2]
    assert high["per_seed"] == {"1": pytest.approx(52.0), "2": pytest.approx(58.0)}
    assert (high["mean"], high["std"], high["n"]) == (pytest.approx(55.0), pytest.approx(4.242641, abs=1e-6), 2)
    assert high["vs_paper"]["mean"] == pytest.approx(3.0)
    assert high["vs_paper"]["interval"] == [pytest.approx(3.0 - 12.7062, abs=1e-4), pytest.approx(3.0 + 12.7062, abs=1e-4)]
    assert points[1]["vs_paper"] is None
    text = (settings.out / "table.md").read_text()
    assert "### Sensitivity to alpha_high (paper 0.2; plot sensitivity_alpha_high.png)" in text
    assert "| 0.3 | alpha_high_0.3 | 52.00 | 58.00 | 55.00 ± 4.24 | +3.00 [-9.71, +15.71] |" in text
    assert "| 0.2 (paper) | paper | 50.00 | 54.00 | 52.00 ± 2.83 | (paper's point) |" in text
    assert json.loads((settings.out / "table.json").read_text())["sensitivity"]["gamma"]["points"][0]["value"] == 0.001


def test_a_sweep_with_only_some_rows_evaluated_plots_the_points_it_has(tmp_path):
    table = gepo_sensitivity_table({"beta_low": [0.1]})
    settings = Settings(table=table, seeds=[1], out=tmp_path / "out", recipes_dir=RECIPES, rows=["beta_low_0.1"])
    runs = planned_runs(settings)
    _fake_eval(run_folder(settings, runs[0]), 0.4)
    report = Pipeline(settings, log=lambda line: None).report(runs)
    assert [point["row"] for point in report["sensitivity"]["beta_low"]["points"]] == ["beta_low_0.1"]
    assert report["rows"][0]["baseline"] is None  # the paper's point did not run: no difference
    assert (settings.out / "sensitivity_beta_low.png").exists()
