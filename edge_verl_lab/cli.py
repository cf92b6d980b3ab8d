"""The lab's commands of ``edge-verl``: ``demo`` (a real verl run of a tiny model on CPU, plotted), ``study``
(methods x seeds on a CPU task, with a report of held-out accuracy and training statistics) and ``reproduce``
(a paper table: recipes per seed -> evaluation -> table and curves).

The lab registers them with ``edge-verl``: lab/pyproject.toml names ``DEMO``, ``STUDY`` and ``REPRODUCE`` as
entry points of the group ``edge_verl.commands``, which edge_verl/cli.py reads; the plugin never imports the
lab."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Sequence

from edge_verl.cli import LAB_INSTALL
from edge_verl_lab import missing_requirements


@dataclass(frozen=True)
class Command:
    """One command the lab adds to ``edge-verl`` (an entry point of ``edge_verl.commands``): ``help``, its line in
    ``edge-verl --help``; ``run(argv)`` parses and runs the words after its name."""

    name: str
    help: str

    def run(self, argv: Sequence[str]) -> int:
        return main([self.name, *argv])


DEMO = Command("demo", "train a tiny model with verl on CPU and plot the run")
STUDY = Command("study", "methods x seeds of real verl runs on a CPU task, validated on held-out problems; report + curves")
REPRODUCE = Command("reproduce", "run a paper table: each row's recipe per seed, evaluation, table and curves")


def build_parser() -> argparse.ArgumentParser:
    from edge_verl.estimators import import_feature_modules
    from edge_verl.integration.cpu.overrides import ROLLOUTS
    from edge_verl_lab.demo.run import EDA_FORMS, TRAINERS, DemoConfig, algorithms

    import_feature_modules()  # an estimator of one's own (EDGE_VERL_FEATURE_MODULES) is a demo algorithm too
    from edge_verl_lab.demo.task import DEFAULT_TASK, TASK_NAMES
    from edge_verl_lab.reproduce.cli import add_reproduce_parser

    parser = argparse.ArgumentParser(prog="edge-verl", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help=DEMO.help)
    demo.add_argument(
        "--algorithm", choices=algorithms(), default=DemoConfig.algorithm,
        help=f"gepo, edge_eda, edge (EDA + GEC), the controls, or verl's grpo (default {DemoConfig.algorithm})",
    )
    demo.add_argument("--steps", type=int, default=30, help="training steps (default 30)")
    demo.add_argument("--task", choices=TASK_NAMES, default=DEFAULT_TASK,
                      help=f"the task (edge_verl_lab/demo/task.py; default {DEFAULT_TASK}; addmod: the collapse regime)")
    demo.add_argument("--trainer", choices=TRAINERS, default="v1", help="verl's v1 trainer (default) or the legacy one")
    demo.add_argument(
        "--eda-form", choices=EDA_FORMS, default="gradient",
        help="edge_eda / edge: EDA with gradient through entropy (the reference's, default) or detached",
    )
    demo.add_argument(
        "--rollout", choices=ROLLOUTS, default="hf",
        help="the plugin's HF-generate rollout (default) or verl's vLLM rollout on vLLM's CPU build",
    )
    demo.add_argument(
        "--out", type=Path, default=None,
        help="output folder (default runs/demo_<algorithm>_<trainer>, + _vllm with --rollout vllm, + _<task> for another task)",
    )
    demo.add_argument("--seed", type=int, default=0, help="seed of the tiny model, the data and verl (default 0)")
    demo.add_argument("--lr", type=float, default=1e-3, help="actor learning rate (default 1e-3, the tiny model's)")
    demo.add_argument("--save-freq", type=int, default=-1, help="verl checkpoint frequency in steps (-1: never)")
    demo.add_argument("--resume", action="store_true", help="resume from the latest checkpoint in OUT")
    demo.add_argument("--ray-address", default=None,
                      help="join this running Ray cluster (host:port; its nodes started as docs/multinode.md says) instead of starting one")
    demo.add_argument("--nnodes", type=int, default=1, help="Ray nodes of trainer workers (verl's trainer.nnodes; >1 needs --ray-address)")
    demo.add_argument("--workers-per-node", type=int, default=1, help="trainer workers per node (verl's trainer.n_gpus_per_node)")
    demo.add_argument("overrides", nargs="*", help="extra Hydra overrides passed to verl's main_ppo")
    add_reproduce_parser(commands, REPRODUCE.help)
    _add_study_parser(commands, TRAINERS)
    return parser


def _add_study_parser(commands, trainers) -> None:
    from edge_verl_lab.demo.task import TASK_NAMES
    from edge_verl_lab.study.runner import DEFAULT_METHODS, DEFAULT_SEEDS, DEFAULT_TASK, STUDY_METHODS, StudyConfig
    from edge_verl_lab.study.cluster import DEFAULT_JOBS

    defaults = StudyConfig()
    study = commands.add_parser(
        "study", help=STUDY.help,
        description="Train every method with every seed (edge-verl demo runs: verl's main_ppo on CPU) on one task, "
        "validate each run uncorrected on the task's seen and held-out problems, and write OUT/report.md, "
        "report.json and curves.png (every seed, mean ± std, the paired difference to GRPO with a 95%% interval). "
        "A re-run skips finished runs; a folder holding another run is refused before anything runs.",
    )
    study.add_argument("--task", choices=TASK_NAMES, default=DEFAULT_TASK, help=f"the task (default {DEFAULT_TASK}: the collapse regime, learnable by a rule, with a weak reflection habit for GEC)")
    study.add_argument("--methods", nargs="+", choices=STUDY_METHODS, default=list(DEFAULT_METHODS), metavar="METHOD",
                       help=f"methods (edge_verl/methods.py, and eda_detached / edge_detached: EDA's detached form; "
                       f"default {' '.join(DEFAULT_METHODS)})")
    study.add_argument("--seeds", nargs="+", type=int, default=list(DEFAULT_SEEDS),
                       help=f"seeds (default {' '.join(map(str, DEFAULT_SEEDS))})")
    study.add_argument("--steps", type=int, default=defaults.steps, help=f"training steps per run (default {defaults.steps})")
    study.add_argument("--test-freq", type=int, default=None, help="validate every N steps too (default: before training and at the end only)")
    study.add_argument("--val-samples", type=int, default=defaults.val_samples, help=f"samples per validation problem (default {defaults.val_samples})")
    study.add_argument("--val-temperature", type=float, default=defaults.val_temperature, help="validation temperature (default 1.0)")
    study.add_argument("--prompts-per-step", type=int, default=defaults.prompts_per_step, help="prompts per training step (default 8)")
    study.add_argument("--responses-per-prompt", type=int, default=defaults.responses_per_prompt, help="group size (default 8)")
    study.add_argument("--trainer", choices=trainers, default=defaults.trainer, help="verl's v1 (default) or legacy trainer")
    study.add_argument("--evaluation", choices=("verl", "exact"), default=defaults.evaluation,
                       help="exact (default): offline on the seed's step-0 model and each run's final weights, the same for every method "
                       "(greedy, gold-answer probability, samples seeded per problem, one token cap); verl: verl's validation during each "
                       "run (unseeded; each method under its own response cap)")
    study.add_argument("--eval-samples", type=int, default=defaults.eval_samples, help=f"exact: samples per problem (default {defaults.eval_samples})")
    study.add_argument("--eval-seed", type=int, default=defaults.eval_seed, help=f"exact: the evaluation's seed, the same for every method (default {defaults.eval_seed})")
    study.add_argument("--eval-max-new-tokens", type=int, default=None,
                       help="exact: the token cap of every evaluated completion (default: the longest response any of the methods trains on)")
    study.add_argument("--eval-temperature", type=float, default=None, help="exact: the samples' temperature (default: --temperature)")
    # The training protocol (edge_verl_lab/study/protocol.py: the report prints it against EDGE-GRPO's reference)
    study.add_argument("--loss-agg-mode", default=defaults.loss_agg_mode, help=f"verl's actor.loss_agg_mode (default {defaults.loss_agg_mode}, the reference's)")
    study.add_argument("--temperature", type=float, default=defaults.temperature, help=f"training sampling temperature (default {defaults.temperature:g}, the reference's)")
    study.add_argument("--updates-per-step", type=int, default=defaults.updates_per_step,
                       help=f"optimizer updates per training step (default {defaults.updates_per_step}, the reference's)")
    study.add_argument("--lr", type=float, default=defaults.lr, help=f"actor learning rate (default {defaults.lr:g}, the tiny model's)")
    study.add_argument("--lr-warmup-steps", type=int, default=defaults.lr_warmup_steps, help=f"learning-rate warm-up steps (default {defaults.lr_warmup_steps})")
    study.add_argument("--weight-decay", type=float, default=defaults.weight_decay, help=f"AdamW weight decay (default {defaults.weight_decay:g}, the reference's)")
    study.add_argument("--continuation-tokens", type=int, default=defaults.continuation_tokens,
                       help=f"GEC's regenerate budget in tokens (default {defaults.continuation_tokens})")
    study.add_argument("--out", type=Path, default=defaults.out, help=f"output folder (default {defaults.out})")
    study.add_argument("--jobs", type=int, default=DEFAULT_JOBS,
                       help=f"runs training at a time, all on one Ray cluster (default {DEFAULT_JOBS}: two runs fill 2 cores that one "
                       "leaves half idle; the results do not depend on it)")
    study.add_argument("--twice", type=int, default=None, metavar="SEED",
                       help="train every method of SEED again under OUT/twice (the same definitions), then the report, which "
                       "compares each with its run number for number: is a run a function of its command")
    study.add_argument("--dry-run", action="store_true", help="list the runs and whether each is done; run nothing")
    study.add_argument("--report-only", action="store_true", help="write the report of the finished runs; run nothing")
    study.add_argument("--export", type=Path, default=None, metavar="DIR",
                       help="copy the finished runs' metrics files and the report, recomputed from the copies, to DIR; run nothing")
    study.add_argument("--calibrate", nargs="*", type=int, default=None, metavar="WARM_STEPS",
                       help="measure the starting point instead: p0, the all-wrong group share at K=8, the reflection share and GEC's "
                       "regenerate success of each seed's warm-started model at --temperature, for each warm-start length given "
                       "(default: the task's), offline in seconds; run nothing")
    study.add_argument("--warm-correct-fraction", nargs="+", type=float, default=None, metavar="F",
                       help="--calibrate: the warm start's share(s) of gold answers to measure (default: the task's)")
    study.add_argument("overrides", nargs="*", help="extra Hydra overrides for every run's verl main_ppo")


def _calibrate(args: argparse.Namespace) -> int:
    from edge_verl_lab.demo.task import get_task
    from edge_verl_lab.study.calibrate import calibrate

    steps = args.calibrate or [get_task(args.task).warm_start_steps]
    fractions = args.warm_correct_fraction
    if any(value < 0 for value in steps) or any(seed < 0 for seed in args.seeds):
        print(f"edge-verl study: --calibrate {steps} --seeds {args.seeds}: warm-start steps and seeds must be >= 0", file=sys.stderr)
        return 2
    if fractions is not None and any(not 0 < value <= 1 for value in fractions):
        print(f"edge-verl study: --warm-correct-fraction {fractions}: each must be in (0, 1]", file=sys.stderr)
        return 2
    try:
        measured = calibrate(args.task, args.seeds, steps, args.out / "calibration", fractions, args.temperature, args.continuation_tokens)
    except ValueError as error:  # e.g. a gold share for a mixture, whose parts have their own
        print(f"edge-verl study: {error}", file=sys.stderr)
        return 2
    for found in measured:
        print(found.line(), flush=True)
    return 0


def _study(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from edge_verl_lab.study.checks import TWICE_FOLDER
    from edge_verl_lab.study.report import export, write_report
    from edge_verl_lab.study.runner import StudyConfig, StudyError, plan, run_study

    if args.calibrate is not None:
        return _calibrate(args)
    try:
        config = StudyConfig(
            task=args.task, methods=tuple(args.methods), seeds=tuple(args.seeds), steps=args.steps, test_freq=args.test_freq,
            val_samples=args.val_samples, val_temperature=args.val_temperature, prompts_per_step=args.prompts_per_step,
            responses_per_prompt=args.responses_per_prompt, trainer=args.trainer, out=args.out, evaluation=args.evaluation,
            eval_samples=args.eval_samples, eval_seed=args.eval_seed, eval_max_new_tokens=args.eval_max_new_tokens,
            eval_temperature=args.eval_temperature, loss_agg_mode=args.loss_agg_mode, temperature=args.temperature,
            updates_per_step=args.updates_per_step, lr=args.lr, lr_warmup_steps=args.lr_warmup_steps, weight_decay=args.weight_decay,
            continuation_tokens=args.continuation_tokens, extra_overrides=tuple(args.overrides),
        )
        if args.export is not None:
            export(config, args.export)
            print(f"exported: {args.export / 'report.md'}")
        elif args.report_only:
            plan(config)  # refuses folders of another study before reading them
            write_report(config)
            print(f"report: {config.out / 'report.md'}")
        elif args.twice is not None:
            if args.twice not in config.seeds:
                raise ValueError(f"--twice {args.twice}: not one of the study's seeds {list(config.seeds)}")
            run_study(replace(config, seeds=(args.twice,), out=config.out / TWICE_FOLDER), dry_run=args.dry_run, jobs=args.jobs)
            if not args.dry_run:
                write_report(config)
                print(f"report: {config.out / 'report.md'}")
        else:
            run_study(config, dry_run=args.dry_run, jobs=args.jobs)
    except (ValueError, StudyError) as error:
        print(f"edge-verl study: {error}", file=sys.stderr)
        return 2 if isinstance(error, ValueError) else 1
    return 0



def _demo(args: argparse.Namespace) -> int:
    from edge_verl_lab.demo.run import DemoConfig, run_demo
    from edge_verl_lab.demo.task import DEFAULT_TASK

    # every option of the demo's parser but the overrides is the DemoConfig field of the same name
    options = {field.name: getattr(args, field.name) for field in fields(DemoConfig) if hasattr(args, field.name)}
    suffix = ("" if args.rollout == "hf" else f"_{args.rollout}") + ("" if args.task == DEFAULT_TASK else f"_{args.task}")
    options["out"] = args.out or Path("runs") / f"demo_{args.algorithm}_{args.trainer}{suffix}"
    try:
        config = DemoConfig(
            **options,
            advantage_stats=True,  # the plot's advantage-variance panel for every estimator, GRPO included
            extra_overrides=list(args.overrides),
        )
        result = run_demo(config)
    except ValueError as error:
        print(f"edge-verl demo: {error}", file=sys.stderr)
        return 2
    print(f"metrics: {result['metrics']}  plot: {result['plot']}  ({result['seconds']:.0f} s)")
    return result["returncode"]



def main(argv: list[str]) -> int:
    """``edge-verl COMMAND ...`` for the lab's commands (``argv`` starts with the command's name)."""
    from edge_verl.integration.cpu.overrides import pin_numeric_path

    missing = missing_requirements()
    if missing:  # the lab installed without its dependencies (pip's --no-deps)
        print(f"edge-verl {argv[0] if argv else ''}: the lab needs {', '.join(missing)}, which is not installed: {LAB_INSTALL}", file=sys.stderr)
        return 1
    pin_numeric_path()  # every lab command computes on CPU: the warm-started models and evaluations too
    args = build_parser().parse_args(argv)
    if args.command == "reproduce":
        from edge_verl_lab.reproduce.cli import run_reproduce

        return run_reproduce(args)
    if args.command == "study":
        return _study(args)
    return _demo(args)
