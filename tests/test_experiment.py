"""The run-folder protocol both experiment pipelines follow (edge_verl_lab/experiment.py): identity comparison,
stage records, the resumption rule; and the study's runner taking that rule (a finished training stage is
only evaluated, an interrupted one without a checkpoint starts over with its partial outputs removed, one
with a checkpoint resumes), checked without verl: the demo run is replaced by a spy that records what the
runner asked for and stops it."""

import io
import json

import pytest

from edge_verl_lab import experiment
from edge_verl_lab.reporting import columns_over_seeds, paired_columns
from edge_verl_lab.study import runner
from edge_verl_lab.study.config import DONE_FILE, IDENTITY_FILE, StudyConfig


def test_changed_keys_names_every_differing_or_missing_key_in_order():
    recorded = {"table": "t", "row": "a", "seed": 1, "old": True}
    wanted = {"table": "t", "row": "b", "seed": 1, "overrides": ["x"]}
    assert experiment.changed_keys(recorded, wanted) == ["row", "overrides", "old"]
    assert experiment.changed_keys(wanted, dict(wanted)) == []


def test_a_stage_is_finished_only_once_its_record_is_written(tmp_path):
    folder = tmp_path / "run"
    assert experiment.read_stage(folder, "train") is None
    record = experiment.finished_record(12.345, step=3)
    assert record["step"] == 3 and record["seconds"] == 12.3 and {"finished", "commit", "modified"} <= set(record)
    experiment.mark_stage(folder, "train", record)
    assert experiment.stage_file(folder, "train").name == "train.done.json"
    assert experiment.read_stage(folder, "train") == record


def test_the_resumption_rule_follows_verls_checkpoint_marker(tmp_path):
    assert experiment.resumption(tmp_path / "none") == experiment.RESTART
    (tmp_path / experiment.CHECKPOINT_MARKER).write_text("4\n")
    assert experiment.last_checkpoint(tmp_path) == 4 and experiment.resumption(tmp_path) == experiment.RESUME
    (tmp_path / experiment.CHECKPOINT_MARKER).write_text("garbage")
    assert experiment.resumption(tmp_path) == experiment.RESTART


def test_one_summary_and_one_paired_contrast_over_seeds():
    per_seed = {"1": {"acc": 0.5, "len": 10.0}, "2": {"acc": 0.7}, "3": {"acc": 0.6}}
    baseline = {"1": {"acc": 0.4}, "2": {"acc": 0.4}, "4": {"acc": 0.9}}
    summary = columns_over_seeds(per_seed, ["acc", "len", "absent"])
    # acc: mean (0.5 + 0.7 + 0.6) / 3 = 0.6, sample std sqrt((0.01 + 0.01 + 0) / 2) = 0.1; len: one seed
    assert summary["acc"]["mean"] == pytest.approx(0.6) and summary["acc"]["std"] == pytest.approx(0.1) and summary["acc"]["n"] == 3
    assert summary["len"] == {"mean": 10.0, "std": 0.0, "n": 1} and "absent" not in summary
    contrasts = paired_columns(per_seed, baseline, ["acc", "len"])
    # seeds 1 and 2 are shared: differences 0.1 and 0.3, mean 0.2; "len" has no baseline seed
    assert list(contrasts) == ["acc"] and contrasts["acc"]["n"] == 2 and contrasts["acc"]["mean"] == pytest.approx(0.2)
    assert contrasts["acc"]["per_seed"] == pytest.approx({"1": 0.1, "2": 0.3})


class _Stop(Exception):
    pass


@pytest.fixture
def verl_study(tmp_path):
    config = StudyConfig(out=tmp_path, methods=("grpo",), seeds=(1,), steps=2, evaluation="verl")
    folder = config.run_folder("grpo", 1)
    folder.mkdir(parents=True)
    (folder / IDENTITY_FILE).write_text(json.dumps(config.identity("grpo", 1)))
    return config, folder


def _spy(monkeypatch):
    asked = []

    def run_demo(demo, stream=None):
        asked.append(demo)
        raise _Stop

    monkeypatch.setattr(runner, "run_demo", run_demo)
    return asked


def test_a_finished_training_stage_is_not_trained_again(verl_study, monkeypatch):
    config, folder = verl_study
    asked = _spy(monkeypatch)
    trained = experiment.mark_stage(folder, runner.TRAIN_STAGE, {**experiment.finished_record(42.0, steps=2), "commit": "abc", "modified": False})
    done = runner.run_one(config, "grpo", 1, stream=io.StringIO())
    assert asked == []  # verl never started
    assert done["seconds"] == 42.0 and done["commit"] == "abc" and trained["commit"] == "abc"
    assert json.loads((folder / DONE_FILE).read_text()) == done
    assert runner.run_state(config, "grpo", 1) == "done"


def test_an_interrupted_run_without_a_checkpoint_starts_over_from_clean_files(verl_study, monkeypatch):
    config, folder = verl_study
    asked = _spy(monkeypatch)
    for name in ("metrics.jsonl", "verl_metrics.jsonl"):
        (folder / name).write_text('{"step": 1}\n')
    with pytest.raises(_Stop):
        runner.run_one(config, "grpo", 1, stream=io.StringIO())
    assert len(asked) == 1 and asked[0].resume is False
    assert not (folder / "metrics.jsonl").exists() and not (folder / "verl_metrics.jsonl").exists()
    assert experiment.read_stage(folder, runner.TRAIN_STAGE) is None and not (folder / DONE_FILE).exists()


def test_an_interrupted_run_with_a_checkpoint_resumes_and_keeps_its_rows(verl_study, monkeypatch):
    config, folder = verl_study
    asked = _spy(monkeypatch)
    (folder / "metrics.jsonl").write_text('{"step": 1}\n')
    (folder / "checkpoints").mkdir()
    (folder / "checkpoints" / experiment.CHECKPOINT_MARKER).write_text("1")
    with pytest.raises(_Stop):
        runner.run_one(config, "grpo", 1, stream=io.StringIO())
    assert len(asked) == 1 and asked[0].resume is True and asked[0].out == folder
    assert (folder / "metrics.jsonl").read_text() == '{"step": 1}\n'


def test_study_report_and_runner_do_not_import_each_other():
    import ast
    import inspect

    from edge_verl_lab.study import report

    imported = {node.module for node in ast.walk(ast.parse(inspect.getsource(report))) if isinstance(node, ast.ImportFrom)}
    assert "edge_verl_lab.study.runner" not in imported
