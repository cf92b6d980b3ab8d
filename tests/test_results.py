"""The committed results (docs/results/): every number of a published study's report is what its run files
give, recomputed here from the copies it links, and the page states the scale it ran at."""

import json
from pathlib import Path

import pytest

from edge_verl.study.report import report_markdown, summarize
from edge_verl.study.runner import StudyConfig

RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results"
STUDIES = sorted(path.parent for path in RESULTS.glob("*/report.json"))


def test_the_default_study_is_published():
    assert [path.name for path in STUDIES] == ["study_addmod"]
    report = json.loads((RESULTS / "study_addmod" / "report.json").read_text())
    default = StudyConfig()
    study = report["study"]
    assert (study["task"], tuple(study["methods"]), tuple(study["seeds"]), study["steps"]) == (
        default.task, default.methods, default.seeds, default.steps), "the page is the default study"
    assert report["not_finished"] == [] and len(report["runs"]) == len(default.methods) * len(default.seeds)
    assert all(commit and "modified" not in commit for commit in report["run_commits"]), report["run_commits"]


@pytest.mark.parametrize("folder", STUDIES, ids=lambda path: path.name)
def test_a_published_report_is_what_its_run_files_give(folder):
    report = json.loads((folder / "report.json").read_text())
    config = StudyConfig.from_dict(report["study"], out=folder)
    again = summarize(config, published_from=report["published_from"])
    for key in ("runs", "methods", "window", "wall_time_s", "run_commits", "columns", "task"):
        assert again[key] == report[key], key
    assert report_markdown(again) == (folder / "report.md").read_text()
    for run in report["runs"].values():
        assert (folder / run["metrics_file"]).is_file()
