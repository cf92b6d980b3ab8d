"""``edge-verl study`` at smoke scale, as a user runs it (the CLI, verl's real main_ppo per run): 2 methods x 1
seed x 2 steps on the collapse-regime task, on the legacy trainer, every report number checked against the
runs' own metrics files and exact-evaluation files (``--evaluation exact``: the seed's step-0 model evaluated once,
each run's final weights saved by verl and evaluated offline); a re-run skips the finished runs and another scale
in the same folder is refused, both before any verl start. The GEPO run's final checkpoint makes it also the
legacy trainer's GEPO run (metrics, thresholds saved after 2 updates). Both runs train at once on the study's one
Ray cluster (``--jobs`` 2, the default), and are a pair: at one seed the baseline and the method sample the same
responses at step 1, before any update (each run's rollouts kept by an extra override). ~2 minutes."""

import json
import subprocess
import sys

import pytest

from edge_verl_lab.same_run import sampled_groups
from edge_verl_lab.study.config import StudyConfig
from edge_verl_lab.study.protocol import run_overrides
from tests.e2e.test_main_ppo_on_cpu import GEPO_KEYS, assert_grader_metrics

SMOKE = ["--task", "pair", "--methods", "grpo", "gepo", "--seeds", "1", "--steps", "2", "--evaluation", "exact", "--eval-samples", "2", "--trainer", "legacy"]

# An extra override for every run (the study's positional overrides), resolved by verl in each run's own config:
# each run keeps its sampled responses in its folder.
KEEP_ROLLOUTS = "trainer.rollout_data_dir=${trainer.default_local_dir}/../rollouts"


def _study(out, *extra):
    command = [sys.executable, "-m", "edge_verl.cli", "study", *SMOKE, "--out", str(out), *extra, KEEP_ROLLOUTS]
    return subprocess.run(command, capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    out = tmp_path_factory.mktemp("study")
    done = _study(out)
    logs = "".join((path.read_text()[-3000:] for path in out.glob("runs/*/verl.log")))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:] + logs
    return out


def _rows(out, run):
    return [json.loads(line) for line in (out / "runs" / run / "metrics.jsonl").read_text().splitlines()]


def test_the_report_matches_the_runs_metrics_files(smoke):
    report = json.loads((smoke / "report.json").read_text())
    assert set(report["runs"]) == {"grpo_seed1", "gepo_seed1"} and report["not_finished"] == []
    for name, run in report["runs"].items():
        rows = _rows(smoke, name)
        assert [row["step"] for row in rows] == [1, 2]  # no validation inside verl
        last = rows[-1]
        values = run["values"]
        # the exact evaluation: the final weights' (the run's file) and the seed's step-0 model's (one file)
        final = json.loads((smoke / "runs" / name / "exact_eval.json").read_text())
        start = json.loads((smoke / "models" / "seed1" / "exact_eval.json").read_text())
        for split in ("seen", "heldout"):
            assert final[split]["n"] == {"heldout": 3000, "seen": 1000}[split] and final[split]["config"]["max_new_tokens"] == 16
            for stat, short in (("greedy_acc", "greedy"), ("sampled_acc", "sampled"), ("gold_prob", "gold_prob")):
                assert values[f"{split}_{short}"] == final[split][stat] and values[f"{split}_{short}_start"] == start[split][stat]
        assert (smoke / "runs" / name / "checkpoints" / "global_step_2" / "actor" / "huggingface" / "model.safetensors").is_file()
        for column, metric in (("reward_sampled", "critic/score/mean"), ("entropy", "actor/entropy"),
                               ("adv_var_after", "edge_verl/adv/var"), ("all_wrong_groups", "edge_verl/adv/all_wrong_group_frac"),
                               ("all_right_groups", "edge_verl/adv/all_right_group_frac"), ("response_length", "response_length/mean")):
            assert run["sources"][column] == metric and values[column] == pytest.approx(last[metric], rel=1e-12)
        # a group is all-wrong, all-right or neither; its fraction of tied groups is at least both together
        outcome = last["edge_verl/adv/all_wrong_group_frac"] + last["edge_verl/adv/all_right_group_frac"]
        assert outcome <= last["edge_verl/adv/zero_variance_group_frac"] + 1e-6
        assert last["edge_verl/adv/score_mean"] == pytest.approx(last["critic/score/mean"], abs=1e-6)
        # the protocol the page prints is the one the run's command carried, override by override
        config = StudyConfig.from_dict(report["study"], out=smoke)
        command = {part.strip() for part in (smoke / "runs" / name / "command.txt").read_text().split(" \\\n")}
        assert set(run_overrides(config, run["method"], 1)) <= command
        assert "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean" in command and "actor_rollout_ref.rollout.temperature=0.6" in command
        # what the final model writes: the page's per-method summary is the evaluation file's (one seed)
        for stat in ("sampled_capped_frac", "sampled_first_acc", "sampled_reflected_frac", "sampled_length"):
            assert report["completions"][run["method"]][stat]["mean"] == final["heldout"][stat]
    assert {row["override"] for row in report["protocol"] if row["override"]} <= command
    # both runs trained at once (--jobs 2, the default), each a Ray job of its own on the study's one cluster, its
    # metrics log passed in its job's runtime env; the study's wall time is the invocation's
    addresses = {part for name in report["runs"] for part in (smoke / "runs" / name / "command.txt").read_text().split()
                 if part.startswith("+ray_kwargs.ray_init.address=")}
    assert len(addresses) == 1 and "ray_kwargs.ray_init.num_cpus=32" not in command
    assert f"+ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH={smoke / 'runs' / 'gepo_seed1' / 'verl_metrics.jsonl'}" in command
    invocations = [json.loads(line) for line in (smoke / "invocations.jsonl").read_text().splitlines()]
    assert len(invocations) == 1 and invocations[0]["jobs"] == 2 and sorted(invocations[0]["trained"]) == ["gepo_seed1", "grpo_seed1"]
    assert report["invocations"] == invocations and "2 runs at a time on one Ray cluster" in (smoke / "report.md").read_text()
    gepo = report["runs"]["gepo_seed1"]
    assert gepo["sources"]["adv_var_before"] == "edge_verl/gepo/adv_var_before"
    difference = report["methods"]["gepo"]["vs_baseline"]["heldout_sampled"]
    assert difference["per_seed"] == {"1": pytest.approx(gepo["values"]["heldout_sampled"] - report["runs"]["grpo_seed1"]["values"]["heldout_sampled"])}
    assert difference["interval"] is None  # one seed: no interval, and the report says so
    # the seed's step-0 model is the same for both methods: identical step-0 numbers
    assert gepo["values"]["heldout_sampled_start"] == report["runs"]["grpo_seed1"]["values"]["heldout_sampled_start"]
    assert set(report["p0"]) == {"1"} and "passed" in report["gate"]
    # the seed's warm start measured as GRPO's first step samples it, at the study's temperature (its file and the page)
    calibration = json.loads((smoke / "models" / "seed1" / "calibration.json").read_text())
    assert report["calibration"] == {"1": calibration} and calibration["config"]["temperature"] == 0.6
    measured = calibration["parts"]["pair"]
    assert 0 <= measured["p0"] <= 1 and measured["problems"] == 128 and measured["regenerated"] > 0
    text = (smoke / "report.md").read_text()
    assert "(1 paired seed: no interval)" in text and "[metrics](runs/gepo_seed1/metrics.jsonl)" in text
    assert "Baseline gate" in text and "Primary contrasts" in text and "### Protocol against EDGE-GRPO's reference" in text
    assert "### What the final models write" in text
    assert (smoke / "curves.png").stat().st_size > 10_000


def test_the_baseline_and_the_method_at_one_seed_sample_the_same_first_step_so_they_are_paired(smoke):
    runs = smoke / "runs"
    config = StudyConfig.from_dict(json.loads((smoke / "report.json").read_text())["study"], out=smoke)
    groups = sampled_groups(runs / "grpo_seed1" / "rollouts", 1)  # the legacy trainer's dump: one row per response
    assert len(groups) == config.prompts_per_step * config.responses_per_prompt
    assert groups == sampled_groups(runs / "gepo_seed1" / "rollouts", 1)
    grpo, gepo = _rows(smoke, "grpo_seed1")[0], _rows(smoke, "gepo_seed1")[0]
    for metric in ("critic/score/mean", "response_length/mean", "response_length/max"):
        assert grpo[metric] == gepo[metric], metric


def test_a_rerun_skips_finished_runs_and_another_scale_is_refused(smoke):
    before = (smoke / "report.json").read_text()
    again = _study(smoke)
    assert again.returncode == 0 and "2 of 2 runs done" in again.stdout and "[1/" not in again.stdout
    assert json.loads((smoke / "report.json").read_text())["runs"] == json.loads(before)["runs"]
    assert len((smoke / "invocations.jsonl").read_text().splitlines()) == 1  # an invocation that ran nothing is not one
    longer = _study(smoke, "--steps", "3")
    assert longer.returncode == 1 and "holds another run (steps: 2 there, 3 now)" in longer.stderr


def test_the_legacy_gepo_run_logs_metrics_and_saves_thresholds(smoke):
    out = smoke / "runs" / "gepo_seed1"
    rows = _rows(smoke, "gepo_seed1")
    for key in GEPO_KEYS:
        assert f"edge_verl/gepo/{key}" in rows[-1]
    for row in rows:
        assert_grader_metrics(row)
    saved = json.loads((out / "checkpoints" / "global_step_2" / "edge_verl_state.json").read_text())
    assert saved["gepo_thresholds"]["num_updates"] == 2
    assert saved["gepo_thresholds"]["h_low"] == pytest.approx(rows[-1]["edge_verl/gepo/h_low"], rel=1e-12)


def test_the_runs_trained_twice_are_the_same_runs_number_for_number(smoke):
    # `--twice 1`: both rows of seed 1 trained again under OUT/twice (the same definitions, a fresh warm start of
    # the same recipe, another Ray cluster), then the page compares each with its run: weights, evaluations, metrics
    again = _study(smoke, "--twice", "1")
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    report = json.loads((smoke / "report.json").read_text())
    pairs = report["twice"]["pairs"]
    assert sorted(pair["run"] for pair in pairs) == ["gepo_seed1", "grpo_seed1"] and report["twice"]["all_equal"], pairs
    for pair in pairs:
        assert pair["same_definition"] and pair["metric_differences"] == 0 and pair["weights"][0] == pair["weights"][1]
        assert len(pair["weights"][0]) == 64
    assert "**equal, number for number**" in (smoke / "report.md").read_text()
