"""Offline calibration of a study's starting point: build the tiny model of one seed, warm-start it (a length
and a share of gold answers, the rest the task's misconception, and a task's reflection habit), and measure,
as GRPO's first step would sample (K samples per problem at the study's training temperature, capped at the
task's sample tokens), its accuracy p0, the share of all-wrong groups, how often it reflects (writes a second
answer), and how often GEC's regenerate branch succeeds, in seconds, without verl or Ray.

EDGE-GRPO targets the regime where most groups are all wrong at the start (its Hard-1K): at K = 8 and
p0 = 6%, 0.94^8 = 61% of the groups are. Its GEC premise is a model whose self-reflection is weak but present:
after a wrong answer, the reflection phrase and a continuation sometimes reach the right answer. The
regenerate branch is measured as GEC carries it out (``edge_verl.integration.rollout``): every wrong
sample without its end token, then the phrase, then a continuation sampled at the same temperature for up
to the study's continuation budget, graded by the reward (its last box). ``edge-verl study --calibrate``
prints this for a grid of warm starts, so the default is chosen by measurement; the study's report prints p0
per seed. A mixture is measured part by part (one line per part, under the mixture's warm start).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from edge_verl.algorithms.gec import REFLECTION_PHRASE
from edge_verl_lab.demo import task as tasks
from edge_verl_lab.demo.run import DemoConfig, build_warm_model, model_recipe
from edge_verl_lab.study.exact_eval import EvalConfig, GumbelNoise, _grader, _prompt_ids, decode, load_model, problem_seed, sample_completions

CALIBRATION_PROBLEMS = 128
GROUP_SIZE = 8
# The regenerations' noise: another evaluation seed than the samples' (0), one stream per wrong sample.
REGENERATE_SEED = 1


@dataclass(frozen=True)
class Calibration:
    """One warm start measured at one temperature: p0 (the sampled accuracy, K samples per problem, on the
    first training problems), the share of problems with no correct sample (all-wrong groups), the greedy
    accuracy, the share of samples with a second answer (``reflected``), and GEC's regenerate branch on the
    wrong samples: how many (``regenerated``) and the share that it turned right (``regenerate_success``)."""

    task: str
    seed: int
    warm_start_steps: int
    warm_start_correct_fraction: float
    temperature: float
    p0: float
    all_wrong_group_frac: float
    greedy_acc: float
    reflected_frac: float
    regenerated: int
    regenerate_success: Optional[float]
    problems: int

    def line(self) -> str:
        success = "-" if self.regenerate_success is None else f"{self.regenerate_success:.3f}"
        return (f"{self.task:<8} seed {self.seed:<3} warm start {self.warm_start_steps:>4} steps, "
                f"{self.warm_start_correct_fraction:.2f} gold, T={self.temperature:g}: p0 {self.p0:.3f}, "
                f"all-wrong groups (K={GROUP_SIZE}) {self.all_wrong_group_frac:.2f}, greedy {self.greedy_acc:.3f}, "
                f"reflects {self.reflected_frac:.3f}, regenerate success {success} of {self.regenerated}")


def measure_start(model_dir: Path, task_name: str, temperature: float, problems: Optional[int] = None,
                  sample_tokens: Optional[int] = None, continuation_tokens: int = 64) -> dict:
    """The ``Calibration`` numbers of ``model_dir`` on the first ``problems`` (None: CALIBRATION_PROBLEMS)
    training problems of the task (a task, not a mixture: measure each part), sampled at ``temperature`` with
    ``sample_tokens`` (None: the task's) per sample and ``continuation_tokens`` per regeneration."""
    import torch

    problems = CALIBRATION_PROBLEMS if problems is None else problems
    the_task = tasks.get_task(task_name)
    if isinstance(the_task, tasks.Mixture):
        raise ValueError(f"measure_start: {task_name} is a mixture; measure each of its parts ({', '.join(the_task.part_names)})")
    chosen = [(question, answer) for question, answer, _ in the_task.train_problems[:problems]]
    cap = the_task.sample_tokens if sample_tokens is None else sample_tokens
    config = EvalConfig(max_new_tokens=cap, samples=GROUP_SIZE, temperature=temperature, seed=0)
    model, tokenizer = load_model(model_dir)
    eos_id, pad_id = tokenizer.eos_token_id, tokenizer.pad_token_id
    grade = _grader(the_task.data_source, tokenizer, eos_id, cap)
    phrase = tokenizer.encode(REFLECTION_PHRASE, add_special_tokens=False)
    greedy, correct, reflected, wrong = [], [], [], []
    with torch.inference_mode():
        prompts = [_prompt_ids(tokenizer, question) for question, _ in chosen]
        for completion, (_, answer) in zip(decode(model, prompts, None, eos_id, pad_id, cap), chosen):
            greedy.append(grade(completion, answer).correct)
        for prompt, samples, (_, answer) in zip(prompts, sample_completions(model, tokenizer, prompts, config), chosen):
            graded = [grade(completion, answer) for completion in samples]
            correct.append([one.correct for one in graded])
            reflected += [one.boxes >= 2 for one in graded]
            # GEC's regenerate branch on each wrong sample: the body without its end token, the phrase, a continuation
            wrong += [(prompt, [t for t in completion if t != eos_id], answer)
                      for completion, one in zip(samples, graded) if one.correct <= 0.5]
        noise = GumbelNoise([problem_seed(REGENERATE_SEED, k) for k in range(len(wrong))], 1, model.get_output_embeddings().weight.shape[0],
                            temperature)
        continued = decode(model, [prompt + body + phrase for prompt, body, _ in wrong], noise, eos_id, pad_id, continuation_tokens)
        regenerate_grade = _grader(the_task.data_source, tokenizer, eos_id, len(phrase) + continuation_tokens + cap)
        regenerated = [regenerate_grade(body + phrase + more, answer).correct for (_, body, answer), more in zip(wrong, continued)]
    return {"p0": statistics.fmean(value for row in correct for value in row),
            "all_wrong_group_frac": sum(1 for row in correct if not any(row)) / len(correct),
            "greedy_acc": statistics.fmean(greedy), "reflected_frac": statistics.fmean(reflected), "regenerated": len(regenerated),
            "regenerate_success": statistics.fmean(regenerated) if regenerated else None, "problems": len(chosen)}


def seed_calibration(model_dir: Path, task_name: str, temperature: float, continuation_tokens: int) -> dict:
    """A study seed's warm-started model measured by ``measure_start`` at the study's temperature and GEC
    continuation: {config, parts: {part name: the ``Calibration`` numbers}} (a task is its own one part)."""
    parts = {part.name: measure_start(model_dir, part.name, temperature, continuation_tokens=continuation_tokens)
             for part in tasks.parts(tasks.get_task(task_name))}
    return {"config": calibration_config(temperature, continuation_tokens), "parts": parts}


def calibration_config(temperature: float, continuation_tokens: int) -> dict:
    """What a seed's calibration file was measured with (a file of another config is measured again)."""
    return {"temperature": float(temperature), "continuation_tokens": continuation_tokens, "problems": CALIBRATION_PROBLEMS,
            "group_size": GROUP_SIZE, "regenerate_seed": REGENERATE_SEED}


def calibrate(
    task_name: str,
    seeds: Sequence[int],
    warm_start_steps: Sequence[int],
    work_dir: Path,
    correct_fractions: Sequence[float] | None = None,
    temperature: float = 0.6,
    continuation_tokens: int = 64,
) -> list[Calibration]:
    """One ``Calibration`` per (seed, warm-start length, gold share), a mixture's one per part too;
    ``correct_fractions`` None: the task's (a mixture: each part's; it takes no other). ``temperature``: the
    study's training temperature (the reference's 0.6 by default)."""
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
                    measured = measure_start(folder, part.name, temperature, continuation_tokens=continuation_tokens)
                    found.append(Calibration(part.name, seed, steps, gold, temperature, **measured))
    return found
