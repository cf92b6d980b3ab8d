"""Offline calibration of a study's starting point: build the tiny model of one seed, warm-start it (a length
and a share of gold answers, the rest the task's misconception), and
measure its accuracy p0 and the share of all-wrong groups as GRPO's first step would sample them (K
samples at temperature 1 per problem), in seconds, without verl or Ray.

EDGE-GRPO targets the regime where most groups are all wrong at the start (its Hard-1K): at K = 8 and
p0 = 6%, 0.94^8 = 61% of the groups are. ``edge-verl study --calibrate`` prints this for a grid of warm-start
lengths, so the default is chosen by measurement; the study's report prints p0 per seed. A mixture is
measured part by part (one line per part: its p0 and its all-wrong groups under the mixture's warm start).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from edge_verl.demo import task as tasks
from edge_verl.demo.run import DemoConfig, build_warm_model, model_recipe
from edge_verl.study.exact_eval import EvalConfig, evaluate_problems

CALIBRATION_PROBLEMS = 128
GROUP_SIZE = 8


@dataclass(frozen=True)
class Calibration:
    """p0 of one warm start: the sampled accuracy (K samples, T=1) on the first training problems, the
    share of problems with no correct sample (all-wrong groups) and the greedy accuracy."""

    task: str
    seed: int
    warm_start_steps: int
    warm_start_correct_fraction: float
    p0: float
    all_wrong_group_frac: float
    greedy_acc: float
    problems: int

    def line(self) -> str:
        return (f"{self.task:<8} seed {self.seed:<3} warm start {self.warm_start_steps:>4} steps, "
                f"{self.warm_start_correct_fraction:.2f} gold: p0 {self.p0:.3f}, "
                f"all-wrong groups (K={GROUP_SIZE}) {self.all_wrong_group_frac:.2f}, greedy {self.greedy_acc:.3f}")


def measure_start(model_dir: Path, task_name: str, problems: int = CALIBRATION_PROBLEMS) -> dict:
    """p0 (K = GROUP_SIZE samples at T = 1), all-wrong group share and greedy accuracy of ``model_dir`` on the
    first ``problems`` training problems of the task (a task, not a mixture: measure each part)."""
    the_task = tasks.get_task(task_name)
    if isinstance(the_task, tasks.Mixture):
        raise ValueError(f"measure_start: {task_name} is a mixture; measure each of its parts ({', '.join(the_task.part_names)})")
    chosen = [(question, answer) for question, answer, _ in the_task.train_problems[:problems]]
    result = evaluate_problems(model_dir, chosen, EvalConfig(samples=GROUP_SIZE, temperature=1.0, seed=0), the_task.data_source)
    sampled = result["per_problem"]["sampled"]
    return {"p0": result["sampled_acc"], "all_wrong_group_frac": sum(1 for value in sampled if value == 0) / len(sampled),
            "greedy_acc": result["greedy_acc"], "problems": len(chosen)}


def calibrate(
    task_name: str,
    seeds: Sequence[int],
    warm_start_steps: Sequence[int],
    work_dir: Path,
    correct_fractions: Sequence[float] | None = None,
) -> list[Calibration]:
    """One ``Calibration`` per (seed, warm-start length, gold share), a mixture's one per part too;
    ``correct_fractions`` None: the task's (a mixture: each part's; it takes no other)."""
    the_task = tasks.get_task(task_name)
    if isinstance(the_task, tasks.Mixture) and correct_fractions:
        raise ValueError(f"{task_name} is a mixture: its warm start takes each part's gold share, not {list(correct_fractions)}")
    found = []
    for fraction in correct_fractions or [the_task.warm_start_correct_fraction]:
        for steps in warm_start_steps:
            for seed in seeds:
                demo = DemoConfig(task=task_name, seed=seed, warm_start_steps=steps, warm_start_correct_fraction=fraction, out=Path(work_dir))
                label = "parts" if fraction is None else f"{fraction:g}"
                folder = build_warm_model(model_recipe(demo), Path(work_dir) / f"{task_name}_seed{seed}_warm{steps}_gold{label}")
                for part, gold in zip(tasks.parts(the_task), tasks.gold_shares(the_task, fraction)):
                    found.append(Calibration(part.name, seed, steps, gold, **measure_start(folder, part.name)))
    return found
