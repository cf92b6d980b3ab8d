"""What a study page answers beside its contrasts, each from the runs' own files: is a run a function of its
command (``twice``: run definitions trained a second time, compared number for number), did gradient clipping
treat the methods alike (``clipping``), what each method scores at the length it trained with as well as at the
common cap (``lengths``), do the primary verdicts hold at other learning rates (``lr_sensitivity``), and how many
seeds GEPO's contrast would need to see 0.05 (``seeds_needed``).

Layout beside the study's own ``runs/`` and ``models/``: ``twice/`` and ``lr/<lr>/`` are studies of their own
(``edge-verl study --twice SEED``, ``edge-verl study --lr LR --seeds ... --out OUT/lr/LR``), with the same files.
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
from pathlib import Path
from typing import Callable, Optional, Sequence

from edge_verl_lab.demo.run import trained_steps, training_overrides
from edge_verl_lab.experiment import read_record
from edge_verl_lab.reporting import load_metrics, markdown_table, minimum_detectable_difference
from edge_verl_lab.same_run import metric_differences
from edge_verl_lab.study.config import DONE_FILE, EVAL_FILE, IDENTITY_FILE, WEIGHTS_DIGEST, StudyConfig, eval_file
from edge_verl_lab.study.verdict import POWER, PRIMARY_CONTRASTS

TWICE_FOLDER = "twice"
LR_FOLDER = "lr"
GRAD_NORM = "actor/grad_norm"  # verl's, before clipping (torch's clip_grad_norm_ returns the total norm it found)
ADVANTAGE_EXTREMES = ("critic/advantages/max", "critic/advantages/min")
# A held-out accuracy at or below this is "at the floor": a contrast between two such runs compares nothing.
FLOOR = 0.001
# The power GEPO's contrast should have: an MDD of at most this (its claimed effects are 0.05-0.10).
TARGET_MDD = 0.05


def _read_json(path: Path) -> dict:
    return json.loads(path.read_text())


# --- trained twice -----------------------------------------------------------------------------------------------


def twice(config: StudyConfig) -> Optional[dict]:
    """The runs of ``OUT/twice`` against their twins in ``OUT/runs`` (same identity), of this study's methods (a
    folder shared by several pages holds the twins of all of them): per pair, the held-out accuracies, the final
    weights' digests and the per-step metrics other than timing; None without the folder."""
    folder = config.out / TWICE_FOLDER / "runs"
    if not folder.is_dir():
        return None
    pairs = []
    for run in sorted(folder.iterdir()):
        identity, done = read_record(run / IDENTITY_FILE), read_record(run / DONE_FILE)
        if identity is None or done is None or identity["method"] not in config.methods:
            continue
        twin = config.run_folder(identity["method"], identity["seed"])
        twin_done = read_record(twin / DONE_FILE)
        if twin_done is None:
            continue
        pair = {"run": run.name, "same_definition": read_record(twin / IDENTITY_FILE) == identity,
                "weights": [twin_done.get(WEIGHTS_DIGEST), done.get(WEIGHTS_DIGEST)],
                "metric_differences": len(metric_differences(load_metrics(twin), load_metrics(run)))}
        for split in ("heldout", "seen"):
            for stat in ("sampled_acc", "greedy_acc"):
                pair[f"{split}_{stat}"] = [_read_json(path / EVAL_FILE)[split][stat] for path in (twin, run)]
        pair["equal"] = (pair["same_definition"] and None not in pair["weights"] and pair["weights"][0] == pair["weights"][1]
                         and pair["metric_differences"] == 0
                         and all(values[0] == values[1] for key, values in pair.items() if key.endswith("_acc")))
        pairs.append(pair)
    return {"pairs": pairs, "all_equal": bool(pairs) and all(pair["equal"] for pair in pairs)}


# --- gradient clipping and blow-ups ------------------------------------------------------------------------------


def clip_threshold(config: StudyConfig) -> float:
    """The gradient-norm clip every run trained with (the study's ``actor.grad_clip``)."""
    return float(training_overrides(config.demo_config(config.methods[0], config.seeds[0]))["actor_rollout_ref.actor.grad_clip"])


def clipping(config: StudyConfig, runs: dict, records: dict[str, list[dict]]) -> dict:
    """method -> {grad_norm_median, grad_norm_max, clipped_frac (steps whose norm passed the clip), abs_adv_max_median
    (over runs, each run's largest |advantage|), abs_adv_max, steps}: whether clipping treated the methods alike."""
    threshold = clip_threshold(config)
    by_method: dict[str, dict[str, list[float]]] = {}
    for name, run in runs.items():
        rows = trained_steps(records[name])
        found = by_method.setdefault(run["method"], {"norms": [], "run_adv": []})
        found["norms"] += [float(row[GRAD_NORM]) for row in rows if row.get(GRAD_NORM) is not None]
        extremes = [abs(float(row[key])) for row in rows for key in ADVANTAGE_EXTREMES if row.get(key) is not None]
        if extremes:
            found["run_adv"].append(max(extremes))
    result = {}
    for method, found in by_method.items():
        norms = found["norms"]
        if not norms:
            continue
        result[method] = {"grad_norm_median": statistics.median(norms), "grad_norm_max": max(norms),
                          "clipped_frac": sum(norm > threshold for norm in norms) / len(norms), "steps": len(norms),
                          "abs_adv_max_median": statistics.median(found["run_adv"]) if found["run_adv"] else None,
                          "abs_adv_max": max(found["run_adv"], default=None)}
    return {"threshold": threshold, "methods": result}


# --- both evaluation lengths --------------------------------------------------------------------------------------


def lengths(config: StudyConfig) -> dict:
    """method -> {trained_length, at_cap: {heldout_sampled, heldout_greedy, greedy_capped}, at_own: the same at
    the trained length (None when it is the cap)} as mean over the finished runs, and per seed the held-out
    sampled accuracy at each; ``floor``: method -> seeds whose held-out sampled accuracy is <= FLOOR at the cap."""
    result, floor = {}, {}
    for method in config.methods:
        own = config.own_length(method)
        rows = {"trained_length": config.trained_length(method), "cap": config.eval_max_new_tokens, "per_seed": {}}
        for seed in config.seeds:
            folder = config.run_folder(method, seed)
            if not (folder / DONE_FILE).exists():
                continue
            entry = {}
            for label, length in (("at_cap", None), ("at_own", own)):
                path = folder / eval_file(length)
                if (length is None and label == "at_own") or not path.exists():
                    continue
                heldout = _read_json(path)["heldout"]
                entry[label] = {"sampled": heldout["sampled_acc"], "greedy": heldout["greedy_acc"],
                                "greedy_capped": heldout.get("greedy_capped_frac")}  # absent from evaluations of before
            rows["per_seed"][str(seed)] = entry
        for label in ("at_cap", "at_own"):
            found = [entry[label] for entry in rows["per_seed"].values() if label in entry]
            rows[label] = {key: _mean([value[key] for value in found]) for key in ("sampled", "greedy", "greedy_capped")} if found else None
        floor[method] = sorted(int(seed) for seed, entry in rows["per_seed"].items() if "at_cap" in entry and entry["at_cap"]["sampled"] <= FLOOR)
        result[method] = rows
    return {"methods": result, "floor": floor, "floor_value": FLOOR}


def _mean(values: list[Optional[float]]) -> Optional[float]:
    return None if not values or None in values else statistics.mean(values)


# --- learning-rate sensitivity ------------------------------------------------------------------------------------


def sub_studies(config: StudyConfig, folder_name: str, nested: bool = True) -> list[StudyConfig]:
    """The studies in ``OUT/<folder_name>/*`` (``nested``) or ``OUT/<folder_name>`` itself, each with the config its
    report.json recorded, cut to this study's methods (pages that share a folder share its sub-studies), in
    learning-rate order."""
    pattern = "*/report.json" if nested else "report.json"
    found = []
    for report in sorted((config.out / folder_name).glob(pattern)):
        sub = StudyConfig.from_dict(_read_json(report)["study"], out=report.parent)
        methods = tuple(method for method in sub.methods if method in config.methods)
        if methods:
            found.append(dataclasses.replace(sub, methods=methods))
    return sorted(found, key=lambda sub: sub.lr)


def lr_sensitivity(config: StudyConfig, primary: Sequence[dict], summarize: Callable[[StudyConfig], dict]) -> Optional[dict]:
    """The primary contrasts at each other learning rate (``OUT/lr/*``, summarized by ``summarize``) beside this
    study's; a verdict survives at an lr when it concludes the same there (``verdict.verdict_direction``: above,
    below, or no difference detected both times). None without the folder."""
    studies = sub_studies(config, LR_FOLDER)
    if not studies:
        return None
    here = {(entry["method"], entry["against"]): entry for entry in primary}
    result = []
    for sub in studies:
        report = summarize(sub)
        entries = []
        for entry in report.get("contrasts", {}).get("primary", []):
            key = (entry["method"], entry["against"])
            ours = here.get(key)
            entries.append({**{name: entry[name] for name in ("method", "against", "mean", "interval", "n", "mdd", "p_holm", "verdict")},
                            "verdict_here": ours["verdict"] if ours else None,
                            "survives": ours is not None and ours["direction"] == entry["direction"]})
        result.append({"lr": sub.lr, "seeds": list(sub.seeds), "gate": report["gate"]["passed"], "contrasts": entries,
                       "heldout_sampled": {method: found["summary"].get("heldout_sampled", {}).get("mean")
                                           for method, found in report["methods"].items()}})
    return {"lr": config.lr, "studies": result}


# --- power ------------------------------------------------------------------------------------------------------


def seeds_needed(std: Optional[float], target: float = TARGET_MDD, confidence: float = 0.95, power: float = POWER,
                 limit: int = 1000) -> Optional[int]:
    """The fewest paired seeds whose MDD at the observed paired SD ``std`` is at most ``target`` (None without an
    SD, or past ``limit``). SD 0.05: MDD(n) = (t_.975 + t_.80)(n-1) * 0.05 / sqrt(n); n = 10 gives
    (2.262 + 0.883) * 0.05 / 3.162 = 0.0497 <= 0.05, n = 9 gives (2.306 + 0.889) * 0.05 / 3 = 0.0533."""
    if std is None or not math.isfinite(std):
        return None
    for n in range(2, limit + 1):
        mdd = minimum_detectable_difference(std, n, confidence, power)
        if mdd is not None and mdd <= target:
            return n
    return None


def power_of(primary: Sequence[dict], pair: tuple[str, str] = ("gepo", "grpo")) -> Optional[dict]:
    """For contrast ``pair``: its MDD at the seeds it has and the seeds its observed paired SD would need for an
    MDD of ``TARGET_MDD``."""
    if pair not in PRIMARY_CONTRASTS:
        raise ValueError(f"{pair} is not a primary contrast")
    for entry in primary:
        if (entry["method"], entry["against"]) == pair:
            return {"contrast": f"{pair[0]} − {pair[1]}", "n": entry["n"], "std": entry.get("std"), "mdd": entry["mdd"],
                    "target": TARGET_MDD, "seeds_needed": seeds_needed(entry.get("std"))}
    return None


# --- markdown -----------------------------------------------------------------------------------------------------


def _number(value: Optional[float], digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def markdown(report: dict) -> list[str]:
    """The page's sections for these checks, each only where its files exist."""
    lines: list[str] = []
    found = report.get("twice")
    if found:
        verdict = "equal, number for number" if found["all_equal"] else "NOT EQUAL"
        lines += ["### Trained twice (is a run a function of its command?)", "",
                  f"{len(found['pairs'])} run definitions trained a second time (`{TWICE_FOLDER}/`), each against its run on this page: "
                  f"**{verdict}** (held-out and seen accuracies, the final weights' sha256, every per-step metric but timing).", ""]
        lines += markdown_table(["run", "held-out sampled", "held-out greedy", "weights sha256", "metrics differing", "equal"],
                        [[pair["run"], " / ".join(f"{v:.4f}" for v in pair["heldout_sampled_acc"]),
                          " / ".join(f"{v:.4f}" for v in pair["heldout_greedy_acc"]),
                          " / ".join(str(digest)[:12] for digest in pair["weights"]), str(pair["metric_differences"]),
                          "yes" if pair["equal"] else "NO"] for pair in found["pairs"]])
        lines += [""]
    found = report.get("clipping")
    if found and found["methods"]:
        lines += ["### Gradient clipping and advantage size, per method", "",
                  f"verl's gradient norm before clipping (`{GRAD_NORM}`), over every training step of every seed; clipped: the "
                  f"share of steps whose norm passed the clip ({found['threshold']:g}), where the update's size was set by the "
                  "clip rather than the loss; |A| max: each run's largest |advantage| (`critic/advantages/max`, `min`).", ""]
        lines += markdown_table(["method", "grad norm median", "grad norm max", "steps clipped", "|A| max (median run)", "|A| max (any run)"],
                        [[method, _number(row["grad_norm_median"]), f"{row['grad_norm_max']:.3g}", f"{row['clipped_frac']:.0%}",
                          f"{row['abs_adv_max_median']:.3g}" if row["abs_adv_max_median"] is not None else "-",
                          f"{row['abs_adv_max']:.3g}" if row["abs_adv_max"] is not None else "-"]
                         for method, row in found["methods"].items()])
        lines += [""]
    found = report.get("lengths")
    if found:
        lines += ["### Both evaluation lengths (held-out, mean over seeds)", "",
                  "Each method evaluated at the length it trained with and at the common cap (the longest any method trains "
                  "with); a method that trains at the cap has one number, in both columns.", ""]
        rows = []
        for method, row in found["methods"].items():
            # at the cap the one evaluation is at both lengths; a page of before evaluated nothing at another length
            own = row["at_own"] or (row["at_cap"] if row["trained_length"] == row["cap"] else None)
            cap = row["at_cap"]
            rows.append([method, str(row["trained_length"]), _number(own and own["sampled"]), _number(own and own["greedy"]),
                         _number(own and own["greedy_capped"]), _number(cap and cap["sampled"]), _number(cap and cap["greedy"]),
                         _number(cap and cap["greedy_capped"])])
        cap = next(iter(found["methods"].values()))["cap"]
        lines += markdown_table(["method", "trained length", "sampled @trained", "greedy @trained", "greedy truncated @trained",
                         f"sampled @{cap}", f"greedy @{cap}", f"greedy truncated @{cap}"], rows)
        floors = {method: seeds for method, seeds in found["floor"].items() if seeds}
        if floors:
            lines += ["", f"At the floor (held-out sampled <= {found['floor_value']:g} at the cap): "
                      + "; ".join(f"{method} seeds {', '.join(map(str, seeds))}" for method, seeds in floors.items()) + "."]
        lines += [""]
    found = report.get("power")
    if found:
        needed = found["seeds_needed"]
        lines += [f"**Power of {found['contrast']}**: MDD {_number(found['mdd'])} at n = {found['n']} (paired SD {_number(found['std'])}); "
                  + (f"an MDD of {found['target']:g} at this SD takes {needed} seeds." if needed else "no SD to size it from."), ""]
    found = report.get("lr_sensitivity")
    if found:
        lines += ["### Learning-rate sensitivity of the primary verdicts", "",
                  f"The primary contrasts re-run at other learning rates (`{LR_FOLDER}/<lr>/`), against this page's (lr {found['lr']:g}); "
                  "a verdict survives at an lr when it reads the same direction there (above, below, or no difference detected).", ""]
        rows = []
        for study in found["studies"]:
            for entry in study["contrasts"]:
                low, high = entry["interval"] or (None, None)
                rows.append([f"{study['lr']:g} ({len(study['seeds'])} seeds{'' if study['gate'] else ', gate FAILED'})",
                             f"{entry['method']} − {entry['against']}", f"{entry['mean']:+.3f} [{_number(low)}, {_number(high)}]",
                             _number(entry["p_holm"]), entry["verdict"], entry["verdict_here"] or "-", "yes" if entry["survives"] else "no"])
        lines += markdown_table(["lr", "contrast", "Δ [95% CI]", "p (Holm)", "verdict there", "verdict here", "survives"], rows)
        lines += [""]
    return lines

