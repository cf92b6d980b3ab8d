"""The committed results (docs/results/): the published study is the default one, run at clean commits, and
every number its page prints is what its run files say -- read here from the files themselves, with plain
json and arithmetic, not with the study's summarising code -- and docs/study.md quotes the page.

A second test regenerates the whole page with the package's report code from the same files (the page is
what `edge-verl study --export` writes)."""

import json
import math
import re
import statistics
from pathlib import Path

import pytest

from edge_verl.methods import method_overrides
from edge_verl_lab.study.report import report_markdown, summarize
from edge_verl_lab.study.config import PROTOCOL_FIELDS
from edge_verl_lab.study.runner import StudyConfig

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"
PAGE = RESULTS / "study_reflect"
# The earlier default study (pair, 4 seeds, the demo's protocol), kept with its own protocol table.
PAIR_PAGE = RESULTS / "study_pair"
# Every run of the default study beside its controls at the same 8 seeds (EDA detached, EDGE masked, GEC alone).
CONTROLS_PAGE = RESULTS / "controls_reflect"
MIX_PAGE = RESULTS / "study_mix"
# The study's own page, which quotes the results page's contrasts; the README only links it, and any contrast it
# did quote would be checked too.
STUDY_DOC = ROOT / "docs" / "study.md"
QUOTING = (ROOT / "README.md", STUDY_DOC, RESULTS / "README.md")
MIX_COMMIT = "be67352c09e450d1809990e9f6d98b5d697e13d1"
# The mixture's evaluation lists pair's problems, then max's (3000 held-out and 1000 seen strings each); its
# parts' training statistics are their data sources' per-source metrics.
MIX_PARTS = {"pair": ("edge_verl/demo_pair", slice(0, 3000), slice(0, 1000)), "max": ("edge_verl/demo_max", slice(3000, 6000), slice(1000, 2000))}
STUDIES = sorted(path.parent for path in RESULTS.glob("*/report.json"))
# Knowledge of the study written out here, independently of edge_verl_lab/study: the methods that correct their
# responses (their sampled reward is GEC's as-sampled metric, their logged reward the corrected one), the
# gate's margin, the contrasts named in advance, and Student-t quantiles for n = 4 and 8 seeds (df = 3, 7).
GEC_METHODS = {"edge", "edge_detached", "gec", "edge_masked", "edge_placebo", "edge_placebo_graded", "edge_sft_injected",
               "edge_drop_first", "forcer", "forcer_eda"}
GATE_MARGIN = 0.02
PRIMARY = [("edge", "grpo"), ("eda", "grpo"), ("gepo", "grpo"), ("edge", "edge_placebo"), ("edge", "edge_masked")]
T_975 = {3: 3.1824463, 7: 2.3646243}
T_80 = {3: 0.978472, 7: 0.8960296}


def _placebo_reward_as_run(run: Path) -> str | None:
    """How a published run rewarded its placebo corrections, from the verl command it ran (command.txt): None
    for a run without a placebo; "graded" for one that names no placebo_reward, which published runs predate
    (the placebo was then graded against the row's gold, today's edge_placebo_graded)."""
    command = (run / "command.txt").read_text()
    if "edge_gec.answer_source=placebo" not in command:
        return None
    found = re.findall(r"edge_gec\.placebo_reward=(\w+)", command)
    return found[-1] if found else "graded"


def _json(path: Path) -> dict:
    return json.loads(path.read_text())


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _read_page(folder: Path):
    report = _json(folder / "report.json")
    study = report["study"]
    runs = {}
    for run in sorted((folder / "runs").iterdir()):
        identity = _json(run / "study_run.json")
        runs[run.name] = {"identity": identity, "done": _json(run / "done.json"), "rows": _rows(run / "metrics.jsonl"),
                          "eval": _json(run / "exact_eval.json")}
    start = {seed: _json(folder / "models" / f"seed{seed}" / "exact_eval.json") for seed in study["seeds"]}
    return report, runs, start


@pytest.fixture(scope="module", params=[PAGE, PAIR_PAGE, CONTROLS_PAGE], ids=lambda path: path.name)
def page(request):
    return request.param, _read_page(request.param)


@pytest.fixture(scope="module")
def mix_page():
    return _read_page(MIX_PAGE)


def test_the_default_study_is_published():
    # the default study, the earlier pair study (the demo's protocol), its other rows at one seed, and GEPO's setting
    assert [path.name for path in STUDIES] == ["controls_pair", CONTROLS_PAGE.name, MIX_PAGE.name, PAIR_PAGE.name, PAGE.name]
    report = _json(PAGE / "report.json")
    default = StudyConfig()
    study = report["study"]
    # the default study's rows, and EDA's clamped form beside them (a second invocation, listed on the page)
    assert (study["task"], tuple(study["methods"]), tuple(study["seeds"]), study["steps"], study["evaluation"]) == (
        default.task, (*default.methods, "eda_clamped"), default.seeds, default.steps, default.evaluation), "the page is the default study"
    first = _rows(PAGE / "invocations.jsonl")[0]
    assert sorted(first["trained"]) == sorted(f"{m}_seed{s}" for m in default.methods for s in default.seeds) and first["jobs"] == 2
    assert first["seconds"] < 80 * 60 and f"{first['seconds'] / 60:.1f}" in (PAGE / "report.md").read_text()
    assert {key: study[key] for key in PROTOCOL_FIELDS} == {key: getattr(default, key) for key in PROTOCOL_FIELDS}
    assert len(study["seeds"]) >= 8, "every primary contrast has at least 8 seeds"
    # its placebo is rewarded as its gold twin would be (only the injected content differs from EDGE)
    rewards = {run.name: _placebo_reward_as_run(run) for run in sorted((PAGE / "runs").iterdir())}
    assert {name for name, reward in rewards.items() if reward} == {f"edge_placebo_seed{seed}" for seed in default.seeds}
    assert set(rewards.values()) == {None, "as_gold"}
    assert report["not_finished"] == [] and len(report["runs"]) == len(study["methods"]) * len(default.seeds)
    assert all(commit and "modified" not in commit for commit in report["run_commits"]), report["run_commits"]


def test_the_earlier_pair_page_graded_its_placebo():
    # run before edge_gec.placebo_reward existed: its placebo arm graded the placebo against the row's gold (today's
    # edge_placebo_graded, as docs/results/README.md says), where today's edge_placebo rewards it as gold
    rewards = {run.name: _placebo_reward_as_run(run) for run in sorted((PAIR_PAGE / "runs").iterdir())}
    assert set(rewards.values()) == {None, "graded"}
    assert "+algorithm.edge_gec.placebo_reward=as_gold" in method_overrides("edge_placebo", seed=1, eda_form="gradient", first_sample_tokens=16, continuation_tokens=64)


def test_every_run_file_is_the_run_the_page_names(page):
    _, (report, runs, _) = page
    study = report["study"]
    assert sorted(runs) == sorted(f"{method}_seed{seed}" for method in study["methods"] for seed in study["seeds"])
    for name, run in runs.items():
        identity = run["identity"]
        assert f"{identity['method']}_seed{identity['seed']}" == name and identity["steps"] == study["steps"]
        assert [row["step"] for row in run["rows"] if "critic/score/mean" in row] == list(range(1, study["steps"] + 1))
        assert run["done"]["modified"] is False and run["done"]["commit"]
        # one token cap, one evaluation config, for every method
        assert run["eval"]["heldout"]["config"] == run["eval"]["seen"]["config"] == identity["evaluation"]
        assert run["eval"]["heldout"]["config"]["max_new_tokens"] == study["eval_max_new_tokens"]
    assert report["wall_time_s"] == pytest.approx(sum(run["done"]["seconds"] for run in runs.values()), abs=0.05)


def _accuracy(evaluation: dict, split: str) -> float:
    return statistics.fmean(evaluation[split]["per_problem"]["sampled"])


def _late_reward(run: dict, steps: int) -> float:
    metric = "edge_verl/gec/sampled/score_mean" if run["identity"]["method"] in GEC_METHODS else "critic/score/mean"
    return statistics.fmean(row[metric] for row in run["rows"] if steps // 2 < row["step"] <= steps and metric in row)


def test_each_run_s_numbers_are_its_files(page):
    _, (report, runs, start) = page
    steps = report["study"]["steps"]
    for name, run in runs.items():
        values = report["runs"][name]["values"]
        for split in ("heldout", "seen"):
            assert values[f"{split}_sampled"] == pytest.approx(_accuracy(run["eval"], split), abs=1e-12)
            assert values[f"{split}_greedy"] == pytest.approx(statistics.fmean(run["eval"][split]["per_problem"]["greedy"]), abs=1e-12)
            seed_start = start[run["identity"]["seed"]]
            assert values[f"{split}_sampled_start"] == pytest.approx(_accuracy(seed_start, split), abs=1e-12)
        assert values["reward_sampled"] == pytest.approx(_late_reward(run, steps), abs=1e-12)
        # the held-out split is large enough: the sampling SE of its accuracy is below 0.01
        sampled = run["eval"]["heldout"]["per_problem"]["sampled"]
        assert len(sampled) == 3000 and statistics.stdev(sampled) / math.sqrt(len(sampled)) < 0.01
    assert report["p0"] == pytest.approx({str(seed): _accuracy(found, "seen") for seed, found in start.items()}, abs=1e-12)


def test_the_gate_and_the_named_contrasts_are_the_files_arithmetic(page):
    folder, (report, runs, start) = page
    steps = report["study"]["steps"]
    by = {(run["identity"]["method"], run["identity"]["seed"]): run for run in runs.values()}
    seeds = report["study"]["seeds"]
    learned = all(
        _accuracy(by["grpo", seed]["eval"], "seen") - _accuracy(start[seed], "seen") >= GATE_MARGIN
        and _late_reward(by["grpo", seed], steps) - next(
            row["critic/score/mean"] for row in by["grpo", seed]["rows"] if row["step"] == 1) >= GATE_MARGIN
        for seed in seeds)
    assert report["gate"]["passed"] is learned
    text = (folder / "report.md").read_text()
    found = {(entry["method"], entry["against"]): entry for entry in report["contrasts"]["primary"]}
    named = [(a, b) for a, b in PRIMARY if (a, seeds[0]) in by and (b, seeds[0]) in by]
    assert sorted(found) == sorted(named)
    for a, b in named:
        differences = [_accuracy(by[a, seed]["eval"], "heldout") - _accuracy(by[b, seed]["eval"], "heldout") for seed in seeds]
        mean, sd, n = statistics.fmean(differences), statistics.stdev(differences), len(differences)
        half = T_975[n - 1] * sd / math.sqrt(n)
        entry = found[a, b]
        assert entry["mean"] == pytest.approx(mean, abs=1e-12)
        assert entry["interval"] == pytest.approx([mean - half, mean + half], abs=1e-6)
        assert entry["mdd"] == pytest.approx((T_975[n - 1] + T_80[n - 1]) * sd / math.sqrt(n), abs=1e-6)
        assert f"{a} − {b} | {mean:+.3f} [{mean - half:+.3f}, {mean + half:+.3f}]" in text
        # the sign count: seeds above and below, and the exact two-sided sign test over those that differ
        above, below = sum(d > 0 for d in differences), sum(d < 0 for d in differences)
        sign_p = min(1.0, 2 * sum(math.comb(above + below, k) for k in range(min(above, below) + 1)) / 2 ** (above + below))
        assert (entry["signs"]["above"], entry["signs"]["below"]) == (above, below) and entry["signs"]["p"] == pytest.approx(sign_p)
    # Holm within the primary family: the k-th smallest of m p-values times m - k + 1, made monotone
    ordered = sorted(found.values(), key=lambda entry: entry["p"])
    running = 0.0
    for rank, entry in enumerate(ordered):
        running = max(running, min(1.0, entry["p"] * (len(ordered) - rank)))
        assert entry["p_holm"] == pytest.approx(running, abs=1e-12)
        assert entry["verdict"] != "no difference detected" or entry["p_holm"] >= 0.05


def test_the_study_doc_quotes_the_page():
    """Every contrast docs/study.md, the results page and the README quote (`a − b: Δ +0.123 [-0.010, +0.256]`)
    is the default page's report's, or for a control's contrast the controls page's (the same runs: a contrast on
    both pages has the same numbers on both)."""
    report = _json(PAGE / "report.json")
    found = {f"{e['method']} − {e['against']}": e for e in report["contrasts"]["primary"] + report["contrasts"]["further"]}
    controls = _json(CONTROLS_PAGE / "report.json")["contrasts"]
    for entry in controls["primary"] + controls["further"]:
        name = f"{entry['method']} − {entry['against']}"
        if name in found:
            assert (found[name]["mean"], found[name]["interval"]) == (entry["mean"], entry["interval"]), name
        found.setdefault(name, entry)
    quoted = {}
    for document in QUOTING:
        # a quote may break across lines anywhere a space stands
        quotes = re.findall(r"(\w+ − \w+):\s+Δ\s+([+-]\d\.\d{3})\s+\[([+-]\d\.\d{3}),\s+([+-]\d\.\d{3})\]", document.read_text())
        for name, mean, low, high in quotes:
            entry = found[name]
            assert (mean, low, high) == (f"{entry['mean']:+.3f}", f"{entry['interval'][0]:+.3f}", f"{entry['interval'][1]:+.3f}"), name
        quoted[document.relative_to(ROOT).as_posix()] = len(quotes)
    named = len(report["contrasts"]["primary"])
    assert quoted["docs/study.md"] >= named and quoted["docs/results/README.md"] >= named, (
        "docs/study.md and the results page each quote every named contrast", quoted)
    for seed, value in report["p0"].items():
        assert f"seed {seed} {value:.3f}" in (RESULTS / "README.md").read_text()


def _paired(differences: list[float]) -> tuple[float, float, float, float]:
    """mean, interval low, high, MDD of paired differences over n = 4 seeds (Student t, df 3)."""
    mean, sd, n = statistics.fmean(differences), statistics.stdev(differences), len(differences)
    half = T_975[n - 1] * sd / math.sqrt(n)
    return mean, mean - half, mean + half, (T_975[n - 1] + T_80[n - 1]) * sd / math.sqrt(n)


def test_the_mixture_page_is_its_files_task_by_task(mix_page):
    report, runs, start = mix_page
    study = report["study"]
    assert study["task"] == "mix" and study["evaluation"] == "exact" and report["not_finished"] == []
    # every run trained at one clean commit
    assert report["run_commits"] == [MIX_COMMIT] and {run["done"]["commit"] for run in runs.values()} == {MIX_COMMIT}
    assert len(study["seeds"]) >= 8 and not any(run["done"]["modified"] for run in runs.values())
    low = study["steps"] // 2 + 1
    for name, run in runs.items():
        assert len(run["eval"]["heldout"]["per_problem"]["sampled"]) == 6000
        for part, (source, heldout, seen) in MIX_PARTS.items():
            mine = report["runs"][name]["by_part"][part]
            assert mine["heldout_sampled"] == pytest.approx(statistics.fmean(run["eval"]["heldout"]["per_problem"]["sampled"][heldout]), abs=1e-12)
            assert mine["seen_sampled"] == pytest.approx(statistics.fmean(run["eval"]["seen"]["per_problem"]["sampled"][seen]), abs=1e-12)
            seed_start = start[run["identity"]["seed"]]
            assert mine["heldout_sampled_start"] == pytest.approx(statistics.fmean(seed_start["heldout"]["per_problem"]["sampled"][heldout]), abs=1e-12)
            for column, stat in (("reward", "score_mean"), ("all_wrong_groups", "all_wrong_group_frac"), ("entropy_sampled", "sampled_entropy")):
                # a step whose 8 prompts held none of this part's logs nothing for it (4 of the 16 x 12 steps here)
                key = f"edge_verl/by_source/{source}/{stat}"
                late = [row[key] for row in run["rows"] if row["step"] >= low and "critic/score/mean" in row and key in row]
                assert study["steps"] - low - 1 <= len(late) <= study["steps"] - low + 1
                assert mine[column] == pytest.approx(statistics.fmean(late), abs=1e-12)
    by = {(run["identity"]["method"], run["identity"]["seed"]): run for run in runs.values()}
    text = (MIX_PAGE / "report.md").read_text()
    for part, (_, heldout, _) in MIX_PARTS.items():
        entry = {e["method"]: e for e in report["parts"][part]["contrasts"]}["gepo"]
        differences = [statistics.fmean(by["gepo", seed]["eval"]["heldout"]["per_problem"]["sampled"][heldout])
                       - statistics.fmean(by["grpo", seed]["eval"]["heldout"]["per_problem"]["sampled"][heldout]) for seed in study["seeds"]]
        mean, low_end, high_end, mdd = _paired(differences)
        assert entry["mean"] == pytest.approx(mean, abs=1e-12) and entry["interval"] == pytest.approx([low_end, high_end], abs=1e-6)
        assert entry["mdd"] == pytest.approx(mdd, abs=1e-6)
        assert f"gepo − grpo | {mean:+.3f} [{low_end:+.3f}, {high_end:+.3f}]" in text
        # docs/study.md and the results page quote each task's contrast as "gepo − grpo on <task>: Δ ..."
        quote = f"gepo − grpo on {part}: Δ {mean:+.3f} [{low_end:+.3f}, {high_end:+.3f}]"
        for document in (STUDY_DOC, RESULTS / "README.md"):
            assert quote in document.read_text(), (document.name, quote)
    whole = {(e["method"], e["against"]): e for e in report["contrasts"]["primary"]}["gepo", "grpo"]
    quote = f"gepo − grpo on the whole mixture: Δ {whole['mean']:+.3f} [{whole['interval'][0]:+.3f}, {whole['interval'][1]:+.3f}]"
    assert quote in STUDY_DOC.read_text() and quote in (RESULTS / "README.md").read_text()


def test_every_mixture_contrast_the_docs_quote_is_the_mixture_page_s(mix_page):
    """`a − b on the whole mixture: Δ ...` is the page's contrast (primary or further), `a − grpo on <task>: Δ ...`
    its task's; a quote may break across lines anywhere a space stands."""
    report, _, _ = mix_page
    whole = {f"{e['method']} − {e['against']}": e for e in report["contrasts"]["primary"] + report["contrasts"]["further"]}
    by_part = {part: {f"{e['method']} − grpo": e for e in found["contrasts"]} for part, found in report["parts"].items()}
    number = r"([+-]\d\.\d{3})"
    quoted = 0
    for document in QUOTING:
        for name, where, mean, low, high in re.findall(rf"(\w+\s+−\s+\w+)\s+on\s+(the\s+whole\s+mixture|\w+):\s+Δ\s+{number}\s+\[{number},\s+{number}\]",
                                                       document.read_text()):
            name, where = " ".join(name.split()), " ".join(where.split())
            entry = whole[name] if where == "the whole mixture" else by_part[where][name]
            assert (mean, low, high) == (f"{entry['mean']:+.3f}", f"{entry['interval'][0]:+.3f}", f"{entry['interval'][1]:+.3f}"), (document.name, name, where)
            quoted += 1
    assert quoted >= 2 * len(report["contrasts"]["primary"])


@pytest.mark.parametrize("folder", STUDIES, ids=lambda path: path.name)
def test_a_published_report_is_what_the_report_code_gives_from_its_files(folder):
    report = _json(folder / "report.json")
    config = StudyConfig.from_dict(report["study"], out=folder)
    again = summarize(config, published_from=report["published_from"])
    for key in ("runs", "methods", "window", "wall_time_s", "run_commits", "columns", "task", "p0", "gate", "contrasts", "parts"):
        assert json.loads(json.dumps(again.get(key))) == report.get(key), key  # every float to its last digit
    assert report_markdown(again) == (folder / "report.md").read_text()
    for run in report["runs"].values():
        assert (folder / run["metrics_file"]).is_file()


@pytest.mark.parametrize("folder", STUDIES, ids=lambda path: path.name)
def test_each_run_trained_with_the_protocol_its_page_prints(folder):
    # The page's protocol table (edge_verl_lab/study/protocol.py) is computed from the study's options; here each run's
    # own command.txt is read for every verl override the table shows. A study recorded before the protocol was an
    # option set most of these by verl's defaults, not in its commands: for it, the rows its commands did set.
    report = _json(folder / "report.json")
    recorded = "loss_agg_mode" in report["study"]
    shown = {row["override"] for row in report["protocol"] if row["override"]}
    assert len(shown) >= 15 and all(row["reason"] for row in report["protocol"] if row["deviates"])
    for run in sorted((folder / "runs").iterdir()):
        command = {part.strip() for part in (run / "command.txt").read_text().split(" \\\n")}
        keys = {part.split("=", 1)[0]: part for part in command if "=" in part}
        for override in shown:
            key = override.split("=", 1)[0]
            if recorded or key in keys:
                assert keys.get(key) == override, (run.name, override)
    if recorded:  # the reference's protocol, or the page names the exception
        rows = {row["setting"]: row for row in report["protocol"]}
        for setting in ("loss aggregation", "sampling temperature", "optimizer updates per step"):
            assert not rows[setting]["deviates"] or rows[setting]["reason"], setting


def _command_value(run: Path, key: str) -> str:
    """The last value ``key`` takes in a run's verl command (Hydra keeps the last)."""
    values = [part.strip().split("=", 1)[1] for part in (run / "command.txt").read_text().split(" \\\n") if part.strip().startswith(f"{key}=")]
    return values[-1]


def test_the_evaluation_cap_holds_every_arm_s_longest_response_and_its_completion_table_is_the_files():
    report, runs, _ = _read_page(PAGE)
    cap = report["study"]["eval_max_new_tokens"]
    longest = max(int(_command_value(PAGE / "runs" / name, "data.max_response_length")) for name in runs)
    assert cap >= longest and report["eval_cap"] == cap and report["longest_response"] == longest
    text = (PAGE / "report.md").read_text()
    for method in report["study"]["methods"]:
        mine = [run["eval"]["heldout"]["per_problem"] for run in runs.values() if run["identity"]["method"] == method]
        means = {}
        for stat, per_problem in (("sampled_acc", "sampled"), ("sampled_first_acc", "sampled_first"), ("sampled_capped_frac", "sampled_capped"),
                                  ("greedy_acc", "greedy"), ("greedy_first_acc", "greedy_first"), ("sampled_length", "sampled_length")):
            means[stat] = statistics.fmean(statistics.fmean(found[per_problem]) for found in mine)
            assert report["completions"][method][stat]["mean"] == pytest.approx(means[stat], abs=1e-12), (method, stat)
        row = next(line for line in text.splitlines() if line.startswith(f"| {method} | {means['sampled_acc']:.3f}"))
        assert f"| {means['sampled_first_acc']:.3f}" in row and f"| {means['sampled_length']:.1f}" in row


def test_each_seed_s_calibration_is_on_the_page():
    report = _json(PAGE / "report.json")
    text = (PAGE / "report.md").read_text()
    for seed in report["study"]["seeds"]:
        calibration = _json(PAGE / "models" / f"seed{seed}" / "calibration.json")
        assert calibration["config"]["temperature"] == report["study"]["temperature"]
        assert calibration["config"]["continuation_tokens"] == report["study"]["continuation_tokens"]
        measured = calibration["parts"][report["study"]["task"]]
        assert (f"| {seed} | {report['study']['task']} | {measured['p0']:.3f} | {measured['all_wrong_group_frac']:.2f} | "
                f"{measured['reflected_frac']:.3f} | {measured['regenerate_success']:.3f} | {measured['regenerated']} |") in text


def test_the_reflect_controls_are_the_default_study_s_runs_beside_the_controls():
    # the controls page is the default study's folder with the controls' arms trained into it: every run it shares
    # with the default page is the same run (its files byte for byte: one training, not a second one), and the
    # controls' own arms trained at the same seeds from the same warm starts
    controls, default = _json(CONTROLS_PAGE / "report.json"), _json(PAGE / "report.json")
    assert controls["study"]["seeds"] == default["study"]["seeds"]
    assert set(default["study"]["methods"]) < set(controls["study"]["methods"])
    assert {"eda_detached", "edge_masked", "gec"} <= set(controls["study"]["methods"])
    shared = sorted(run.name for run in (PAGE / "runs").iterdir())
    assert set(shared) < {run.name for run in (CONTROLS_PAGE / "runs").iterdir()}
    for name in shared:
        for file in sorted((PAGE / "runs" / name).iterdir()):
            assert (CONTROLS_PAGE / "runs" / name / file.name).read_bytes() == file.read_bytes(), (name, file.name)
    for seed in default["study"]["seeds"]:
        assert _json(CONTROLS_PAGE / "models" / f"seed{seed}" / "exact_eval.json") == _json(PAGE / "models" / f"seed{seed}" / "exact_eval.json")


# --- study v4: the pages republished on reproducible runs (each check read from the page's raw files) -------------

# The pages republished on reproducible runs, each with its trained-twice folder, its invocations and the checks.
V4_PAGES = [PAGE, CONTROLS_PAGE, MIX_PAGE]
CLAMP = "+algorithm.edge_eda.ratio_clamp=[0.1,10.0]"


def _is_timing(key: str) -> bool:
    return key.startswith(("timing_s/", "timing_per_token_ms/", "perf/")) or "/perf/" in key or key == "edge_verl/gec/correction_time_share"


def _run_folders(folder: Path) -> list[Path]:
    """Every run folder of a page: its own, its trained-twice ones and those of its other learning rates."""
    return [run for runs in (folder / "runs", folder / "twice" / "runs", *sorted((folder / "lr").glob("*/runs")))
            if runs.is_dir() for run in sorted(runs.iterdir())]


@pytest.mark.parametrize("folder", V4_PAGES, ids=lambda path: path.name)
def test_every_method_of_the_page_was_trained_twice_and_the_twins_are_equal_number_for_number(folder):
    report = _json(folder / "report.json")
    twins = sorted((folder / "twice" / "runs").iterdir())
    assert {_json(run / "study_run.json")["method"] for run in twins} == set(report["study"]["methods"])
    for twin in twins:
        run = folder / "runs" / twin.name
        assert _json(twin / "study_run.json") == _json(run / "study_run.json"), twin.name
        digests = {_json(path / "done.json")["weights_sha256"] for path in (run, twin)}
        assert len(digests) == 1 and len(next(iter(digests))) == 64, twin.name
        first, second = _json(run / "exact_eval.json"), _json(twin / "exact_eval.json")
        for split in ("heldout", "seen"):
            assert first[split]["per_problem"] == second[split]["per_problem"], (twin.name, split)
        rows = [[{k: v for k, v in row.items() if not _is_timing(k)} for row in _rows(path / "metrics.jsonl")] for path in (run, twin)]
        assert rows[0] == rows[1], twin.name
    assert "**equal, number for number**" in (folder / "report.md").read_text()


@pytest.mark.parametrize("folder", V4_PAGES, ids=lambda path: path.name)
def test_every_run_of_the_page_was_trained_by_one_listed_invocation_at_its_commit(folder):
    # a run an invocation trained and the page dropped is named in that invocation's record with the reason
    def kept(record):
        dropped = record.get("discarded_runs", record["trained"]) if record.get("discarded") else []
        return set(record["trained"]) - set(dropped)

    for run in _run_folders(folder):
        invocations = _rows(run.parents[1] / "invocations.jsonl")
        trained = [record for record in invocations if run.name in kept(record)]
        assert len(trained) == 1, run
        assert trained[0]["commit"] == _json(run / "done.json")["commit"] and trained[0]["modified"] is False, run
    text = (folder / "report.md").read_text()
    assert "### Invocations" in text
    for record in _rows(folder / "invocations.jsonl"):
        assert f"| {record['finished']} | {record['commit'][:7]}" in text
        if record.get("discarded"):
            assert record["discarded"] in text


@pytest.mark.parametrize("folder", V4_PAGES, ids=lambda path: path.name)
def test_the_clip_fraction_and_gradient_norm_per_method_are_the_files(folder):
    report = _json(folder / "report.json")
    text = (folder / "report.md").read_text()
    for method in report["study"]["methods"]:
        runs = [run for run in sorted((folder / "runs").iterdir()) if _json(run / "study_run.json")["method"] == method]
        clip = {float(_command_value(run, "actor_rollout_ref.actor.grad_clip")) for run in runs}
        assert clip == {1.0}
        norms = [row["actor/grad_norm"] for run in runs for row in _rows(run / "metrics.jsonl") if "actor/grad_norm" in row]
        assert len(norms) == len(runs) * report["study"]["steps"]
        clipped = sum(norm > 1.0 for norm in norms) / len(norms)
        assert f"| {method} | {statistics.median(norms):.3f} | {max(norms):.3g} | {clipped:.0%} |" in text, method


@pytest.mark.parametrize("folder", V4_PAGES, ids=lambda path: path.name)
def test_each_method_is_on_the_page_at_its_trained_length_and_at_the_cap(folder):
    report = _json(folder / "report.json")
    text = (folder / "report.md").read_text()
    cap = report["study"]["eval_max_new_tokens"]
    for method in report["study"]["methods"]:
        runs = [run for run in sorted((folder / "runs").iterdir()) if _json(run / "study_run.json")["method"] == method]
        trained = {int(_command_value(run, "data.max_response_length")) for run in runs}
        assert len(trained) == 1
        length = trained.pop()
        at_cap = statistics.fmean(_json(run / "exact_eval.json")["heldout"]["sampled_acc"] for run in runs)
        own_file = "exact_eval.json" if length == cap else f"exact_eval_len{length}.json"
        evaluations = [_json(run / own_file)["heldout"] for run in runs]
        assert {found["config"]["max_new_tokens"] for found in evaluations} == {length}
        own = statistics.fmean(found["sampled_acc"] for found in evaluations)
        assert f"| {method} | {length} | {own:.3f} |" in text and f"| {at_cap:.3f} |" in text, method


@pytest.mark.parametrize("folder", V4_PAGES, ids=lambda path: path.name)
def test_eda_clamped_ran_eda_s_gradient_form_with_p_hat_clamped_at_every_seed_of_the_page(folder):
    report = _json(folder / "report.json")
    clamped = sorted(run for run in (folder / "runs").iterdir() if run.name.startswith("eda_clamped_seed"))
    assert len(clamped) == len(report["study"]["seeds"]) >= 8
    for run in clamped:
        assert _command_value(run, "algorithm.adv_estimator") == "edge_eda" and CLAMP in (run / "command.txt").read_text()
        assert _command_value(run, "+algorithm.edge_eda.entropy_gradient") == "True"
    further = {(e["method"], e["against"]) for e in report["contrasts"]["further"]}
    assert {("eda_clamped", "grpo"), ("eda", "eda_clamped")} <= further


@pytest.mark.parametrize("folder", V4_PAGES, ids=lambda path: path.name)
def test_gepo_s_mdd_and_the_seeds_it_would_take_are_the_files(folder):
    from edge_verl_lab.reporting import minimum_detectable_difference

    report, runs, _ = _read_page(folder)
    by = {(run["identity"]["method"], run["identity"]["seed"]): run for run in runs.values()}
    differences = [_accuracy(by["gepo", seed]["eval"], "heldout") - _accuracy(by["grpo", seed]["eval"], "heldout") for seed in report["study"]["seeds"]]
    sd, n = statistics.stdev(differences), len(differences)
    power = report["power"]
    assert power["mdd"] == pytest.approx((T_975[n - 1] + T_80[n - 1]) * sd / math.sqrt(n), abs=1e-6)
    needed = power["seeds_needed"]
    assert minimum_detectable_difference(sd, needed) <= 0.05 and (needed == 2 or minimum_detectable_difference(sd, needed - 1) > 0.05)
    assert f"**Power of gepo − grpo**: MDD {power['mdd']:.3f} at n = {n}" in (folder / "report.md").read_text()


@pytest.mark.parametrize("folder", V4_PAGES, ids=lambda path: path.name)
def test_the_primary_verdicts_at_the_other_learning_rates_are_their_files(folder):
    """Each OUT/lr/<lr>/ study trained at that lr (its runs' commands) from the page's warm starts, and the page's
    learning-rate table prints its primary contrasts as its files give them (n seeds, Student t)."""
    text = (folder / "report.md").read_text()
    studies = sorted((folder / "lr").glob("*/report.json"))
    assert len(studies) >= 2, "the primary verdicts are re-checked at two other learning rates"
    assert "### Learning-rate sensitivity of the primary verdicts" in text
    here_lr = float(_json(folder / "report.json")["study"]["lr"])
    for found in studies:
        sub = found.parent
        report, runs, start = _read_page(sub)
        lr, seeds = float(sub.name), report["study"]["seeds"]
        assert lr != here_lr and len(seeds) >= 4
        for name in runs:
            assert float(_command_value(sub / "runs" / name, "actor_rollout_ref.actor.optim.lr")) == lr, name
        for seed in seeds:  # the same warm start as the page's seed
            assert _json(sub / "models" / f"seed{seed}" / "exact_eval.json") == _json(folder / "models" / f"seed{seed}" / "exact_eval.json")
        by = {(run["identity"]["method"], run["identity"]["seed"]): run for run in runs.values()}
        for a, b in PRIMARY:
            if (a, seeds[0]) not in by or (b, seeds[0]) not in by:
                continue
            differences = [_accuracy(by[a, seed]["eval"], "heldout") - _accuracy(by[b, seed]["eval"], "heldout") for seed in seeds]
            mean, sd, n = statistics.fmean(differences), statistics.stdev(differences), len(differences)
            half = T_975[n - 1] * sd / math.sqrt(n)
            assert f"| {lr:g} ({n} seeds" in text
            assert f"| {a} − {b} | {mean:+.3f} [{mean - half:.3f}, {mean + half:.3f}] |" in text, (lr, a, b)
    # every contrast the docs quote at another lr (`a − b at lr 0.0005: Δ -0.211 [-0.527, 0.105]`; on the mixture's
    # page `gepo − grpo on the whole mixture at lr 0.0005: Δ ...`) is the table's
    rows = re.findall(r"\| ([\d.e-]+) \(\d+ seeds[^|]*\| (\w+ − \w+) \| ([+-]\d\.\d{3}) \[(-?\d\.\d{3}), (-?\d\.\d{3})\] \|", text)
    table = {(float(lr), name): (mean, low, high) for lr, name, mean, low, high in rows}
    where = r"\s+on\s+the\s+whole\s+mixture" if folder == MIX_PAGE else ""
    quoted = 0
    for document in QUOTING:  # a quote may break across lines anywhere a space stands
        for name, lr, mean, low, high in re.findall(rf"(\w+\s+−\s+\w+){where}\s+at\s+lr\s+([\d.e-]+):\s+Δ\s+([+-]\d\.\d{{3}})\s+\[(-?\d\.\d{{3}}),\s+(-?\d\.\d{{3}})\]",
                                                    document.read_text()):
            name = " ".join(name.split())
            assert table[float(lr), name] == (mean, low, high), (document.name, name, lr)
            quoted += 1
    assert quoted >= 2 * len({name for _, name in table})  # each contrast of the table: the study doc and the results page
