"""``edge-verl``: ``demo`` (a real verl run on CPU), ``doctor`` (installation self-check), ``preflight`` (the
plugin's checks on verl's composed config, before Ray starts), ``cpu-overrides``, ``recipe`` (the recipes,
written from their definitions), ``method`` and ``method-overrides`` (the methods' definitions,
edge_verl/methods.py), ``run-identity`` (the recipes' guard against resuming another run's checkpoint),
``reproduce`` (a paper table: recipes per seed -> evaluation -> table and curves), ``study`` (methods x seeds
on a CPU task, with a report of held-out accuracy and training statistics)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _parser() -> argparse.ArgumentParser:
    from edge_verl.demo.run import ALGORITHMS, EDA_FORMS, TRAINERS
    from edge_verl.integration.cpu.overrides import ROLLOUTS
    from edge_verl.methods import KNOBS, METHOD_NAMES, SYMMETRIC_ALPHA

    parser = argparse.ArgumentParser(prog="edge-verl", description=__doc__)
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="train a tiny model with verl on CPU and plot the run")
    demo.add_argument(
        "--algorithm", choices=ALGORITHMS, default="grpo",
        help="verl's grpo, edge_eda, gepo, or edge (EDA + GEC) (default grpo)",
    )
    demo.add_argument("--steps", type=int, default=20, help="training steps (default 20)")
    from edge_verl.demo.task import DEFAULT_TASK, TASK_NAMES

    demo.add_argument("--task", choices=TASK_NAMES, default=DEFAULT_TASK,
                      help=f"the task (edge_verl/demo/task.py; default {DEFAULT_TASK}; addmod: the collapse regime)")
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
    demo.add_argument("overrides", nargs="*", help="extra Hydra overrides passed to verl's main_ppo")
    commands.add_parser(
        "doctor", help="check that import verl registers edge_verl's components and that every patched verl internal exists; "
        "report the GPU stack",
    )
    overrides = commands.add_parser("cpu-overrides", help="print the verl overrides a CPU run needs, one per line")
    overrides.add_argument(
        "--backend", choices=("fsdp", "megatron"), default=None,
        help="the training backend's set (default fsdp; see --config-name)",
    )
    overrides.add_argument(
        "--config-name", default=None, help="pick the set from verl's trainer config (ppo_trainer, ppo_megatron_trainer)"
    )
    overrides.add_argument("--tensor-parallel", type=int, default=1, help="Megatron: gloo processes (TP size)")
    overrides.add_argument(
        "--rollout", choices=ROLLOUTS, default="hf", help="the plugin's HF rollout (default) or verl's vLLM rollout"
    )
    recipe = commands.add_parser(
        "recipe", help="list the recipes (edge_verl/recipes.py), print one, or write them all from their definitions",
        description="Every recipes/run_*.sh is written from edge_verl/methods.py (the method's overrides) and "
        "edge_verl/recipes.py (model, backend, training setup): change those, then `edge-verl recipe --write`.",
    )
    recipe.add_argument("name", nargs="?", default=None, help="a recipe's file name (e.g. run_gepo_qwen7b.sh): print its text")
    recipe.add_argument("--write", action="store_true", help="write every recipe whose file is missing or differs")
    recipe.add_argument("--check", action="store_true", help="exit 1 when a file is missing, differs or is no recipe's")
    recipe.add_argument("--dir", type=Path, default=None, help="the recipes folder (default: the checkout's recipes/)")
    method = commands.add_parser(
        "method", help="list the methods (edge_verl/methods.py), or print one method's definition or one field of it"
    )
    method.add_argument("name", nargs="?", default=None, help=f"a method ({', '.join(METHOD_NAMES)}); none: list them all")
    method.add_argument("--field", choices=METHOD_FIELDS, default=None, help="print only this field's value")
    method_args = commands.add_parser(
        "method-overrides", help="print the verl overrides of a method with this run's parameters, one per line"
    )
    method_args.add_argument("name", help=f"the method ({', '.join(METHOD_NAMES)})")
    method_args.add_argument("--seed", type=int, required=True, help="the run's seed (seeds GEC's decisions)")
    method_args.add_argument(
        "--entropy-gradient", type=_verl_bool, required=True, metavar="{True,False}",
        help="EDA's form: True = gradient through the current entropy, False = detached",
    )
    method_args.add_argument("--first-sample-tokens", type=int, required=True, help="GEC: the first sample's cap")
    method_args.add_argument("--continuation-tokens", type=int, required=True, help="GEC: a correction's continuation budget")
    method_args.add_argument(
        "--gepo-symmetric-alpha", type=float, default=SYMMETRIC_ALPHA,
        help=f"gepo_symmetric: the factor of both sides (default {SYMMETRIC_ALPHA})",
    )
    method_args.add_argument("--knobs", choices=KNOBS, default=None, help="a training setup: refused unless the method runs with it")
    preflight = commands.add_parser(
        "preflight",
        help="check edge_verl's options and data in verl's composed config before Ray starts; record the run identity",
        description="Compose verl's config from the same arguments main_ppo gets and run every check of the plugin "
        "(estimator and GEC options, EDA's prerequisites, token budgets, data files and columns) in seconds. "
        "With --method, also record or check the run identity in trainer.default_local_dir.",
    )
    preflight.add_argument("--config-name", default="ppo_trainer", help="verl's trainer config (ppo_trainer, ppo_megatron_trainer)")
    preflight.add_argument("--config-path", default=None, help="a config folder or pkg:// module (default: verl's trainer/config)")
    preflight.add_argument("--method", default=None, help="the run's method name (the recipes' METHOD): check the run identity")
    preflight.add_argument("--tag", default="", help="with --method: what else tells this run apart (reproduce: table/row)")
    preflight.add_argument("overrides", nargs=argparse.REMAINDER, help="Hydra overrides, exactly as main_ppo gets them")
    identity = commands.add_parser("run-identity", help="record a run's identity in its checkpoint folder, or check it")
    identity.add_argument("checkpoint_dir", type=Path, help="the run's trainer.default_local_dir")
    for option, text in (
        ("--method", "the run's method (a recipe's METHOD)"),
        ("--model", "model path or hub id"),
        ("--train-file", "training file (must exist: it is identified by its sha256)"),
        ("--backend", "fsdp or megatron"),
        ("--seed", "the run's seed"),
    ):
        identity.add_argument(option, required=True, help=text)
    identity.add_argument("--tag", default="", help="what else tells this run apart (reproduce: table/row)")
    from edge_verl.reproduce.cli import add_reproduce_parser

    add_reproduce_parser(commands)
    _add_study_parser(commands, TRAINERS)
    return parser


def _add_study_parser(commands, trainers) -> None:
    from edge_verl.demo.task import TASK_NAMES
    from edge_verl.study.runner import DEFAULT_METHODS, DEFAULT_SEEDS, DEFAULT_TASK, STUDY_METHODS, StudyConfig

    defaults = StudyConfig()
    study = commands.add_parser(
        "study", help="methods x seeds of real verl runs on a CPU task, validated on held-out problems; report + curves",
        description="Train every method with every seed (edge-verl demo runs: verl's main_ppo on CPU) on one task, "
        "validate each run uncorrected on the task's seen and held-out problems, and write OUT/report.md, "
        "report.json and curves.png (every seed, mean ± std, the paired difference to GRPO with a 95%% interval). "
        "A re-run skips finished runs; a folder holding another run is refused before anything runs.",
    )
    study.add_argument("--task", choices=TASK_NAMES, default=DEFAULT_TASK, help=f"the task (default {DEFAULT_TASK}: the collapse regime, learnable by a rule)")
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
    # The training protocol (edge_verl/study/protocol.py: the report prints it against EDGE-GRPO's reference)
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
    from edge_verl.demo.task import get_task
    from edge_verl.study.calibrate import calibrate

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
    from edge_verl.study.report import export, write_report
    from edge_verl.study.runner import StudyConfig, StudyError, plan, run_study

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
        else:
            run_study(config, dry_run=args.dry_run)
    except (ValueError, StudyError) as error:
        print(f"edge-verl study: {error}", file=sys.stderr)
        return 2 if isinstance(error, ValueError) else 1
    return 0


# What `edge-verl method NAME --field F` can print: the definition's fields and what follows from them.
METHOD_FIELDS = ("description", "estimator", "eda", "gec", "force_regenerate", "agent_name", "knobs", "options")


def _verl_bool(text: str) -> bool:
    """A boolean as Hydra writes it (True/False, any case)."""
    value = {"true": True, "false": False}.get(text.lower())
    if value is None:
        raise argparse.ArgumentTypeError(f"{text!r}: expected True or False")
    return value


def _version() -> str:
    from edge_verl.gpu_stack import installed_version

    return installed_version("edge-verl") or "unknown (not installed)"  # a source tree that is not installed


def _run_identity(args: argparse.Namespace) -> int:
    from edge_verl.run_identity import RunIdentityMismatch, check_or_record, describe

    try:
        identity = describe(args.method, args.model, args.train_file, args.backend, args.seed, args.tag)
        outcome = check_or_record(args.checkpoint_dir, identity)
    except (RunIdentityMismatch, FileNotFoundError) as error:
        print(f"edge-verl run-identity: {error}", file=sys.stderr)
        return 3
    print(f"edge-verl run-identity: {args.checkpoint_dir}: {outcome}")
    return 0


def _preflight(args: argparse.Namespace) -> int:
    import time

    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from edge_verl.integration.cpu.overrides import backend_of_config
    from edge_verl.integration.preflight import PREFIX, PreflightFailed, compose_verl_config, preflight_or_exit, run_identity_of
    from edge_verl.run_identity import RunIdentityMismatch, check_or_record

    started = time.perf_counter()
    try:
        config = compose_verl_config(args.config_name, args.overrides, args.config_path)
    except (HydraException, OmegaConfBaseException, FileNotFoundError) as error:  # unknown key, bad syntax, no config
        print(f"{PREFIX}: verl's config rejects the overrides: {error}", file=sys.stderr)
        return 2
    try:
        run = preflight_or_exit(config)
    except PreflightFailed as failed:
        return failed.code
    parts = [f"estimator {run.estimator}", f"GEC {'on' if run.gec_enabled else 'off'}"]
    if args.method:
        folder = Path(str(config.trainer.default_local_dir))
        try:
            identity = run_identity_of(config, args.method, backend_of_config(args.config_name), args.tag)
            parts.append(f"run identity {check_or_record(folder, identity)} in {folder}")
        except (RunIdentityMismatch, FileNotFoundError, ValueError) as error:
            print(f"{PREFIX}: {error}", file=sys.stderr)
            return 3
    print(f"{PREFIX}: ok ({', '.join(parts)}; {time.perf_counter() - started:.1f} s)")
    return 0


def _cpu_overrides(args: argparse.Namespace) -> int:
    from edge_verl.integration.cpu.overrides import backend_of_config, cpu_overrides

    try:
        backend = args.backend or "fsdp"
        if args.config_name:
            configured = backend_of_config(args.config_name)
            if args.backend and args.backend != configured:
                raise ValueError(f"--backend {args.backend} contradicts --config-name {args.config_name}")
            backend = configured
        print("\n".join(cpu_overrides(backend, args.tensor_parallel, args.rollout)))
    except ValueError as error:
        print(f"edge-verl cpu-overrides: {error}", file=sys.stderr)
        return 2
    return 0


def _method(args: argparse.Namespace) -> int:
    from edge_verl.methods import METHOD_ALIASES, METHODS, get_method

    if args.name is None:
        if args.field is not None:
            print("edge-verl method: --field needs a method name", file=sys.stderr)
            return 2
        aliases = {name: alias for alias, name in METHOD_ALIASES.items()}
        for name, method in METHODS.items():
            also = f" (also: {aliases[name]})" if name in aliases else ""
            print(f"{name:<16}{method.description}{also}")
        return 0
    try:
        method = get_method(args.name)
    except ValueError as error:
        print(f"edge-verl method: {error}", file=sys.stderr)
        return 2

    def text(value) -> str:
        return " ".join(value) if isinstance(value, tuple) else str(value)

    if args.field is not None:
        print(text(getattr(method, args.field)))
    else:
        print("\n".join(f"{field}: {text(getattr(method, field))}" for field in ("name", *METHOD_FIELDS)))
    return 0


def _recipe(args: argparse.Namespace) -> int:
    from edge_verl.recipes import RECIPES, get_recipe, recipe_text, stale_recipes, write_recipes
    from edge_verl.reproduce.cli import default_recipes_dir

    folder = args.dir or default_recipes_dir()
    if args.name is not None:
        try:
            sys.stdout.write(recipe_text(get_recipe(args.name)))
        except ValueError as error:
            print(f"edge-verl recipe: {error}", file=sys.stderr)
            return 2
        return 0
    if args.write:
        for name in write_recipes(folder):
            print(f"wrote {folder / name}")
    if args.write or args.check:
        changed, undefined = stale_recipes(folder)
        for name in changed:
            print(f"edge-verl recipe: {folder / name} is missing or differs from its definition (edge-verl recipe --write)", file=sys.stderr)
        for name in undefined:
            print(f"edge-verl recipe: {folder / name} is no recipe's: define it in edge_verl/recipes.py, or delete it", file=sys.stderr)
        return 1 if args.check and (changed or undefined) else 0
    for recipe in RECIPES:
        print(f"{recipe.file_name:<56}{recipe.method:<21}{recipe.model:<24}{recipe.backend:<10}{recipe.knobs}")
    return 0


def _method_overrides(args: argparse.Namespace) -> int:
    from edge_verl.methods import get_method, method_overrides

    try:
        knobs = get_method(args.name).knobs
        if args.knobs is not None and args.knobs not in knobs:
            raise ValueError(f"method {args.name} runs with KNOBS={' or '.join(knobs)}, not KNOBS={args.knobs} (edge_verl/methods.py)")
        overrides = method_overrides(
            args.name,
            seed=args.seed,
            eda_form="gradient" if args.entropy_gradient else "detached",
            first_sample_tokens=args.first_sample_tokens,
            continuation_tokens=args.continuation_tokens,
            gepo_symmetric_alpha=args.gepo_symmetric_alpha,
        )
    except ValueError as error:
        print(f"edge-verl method-overrides: {error}", file=sys.stderr)
        return 2
    print("\n".join(overrides))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "doctor":
        from edge_verl.integration.doctor import run_doctor

        return run_doctor()
    if args.command == "run-identity":
        return _run_identity(args)
    if args.command == "preflight":
        return _preflight(args)
    if args.command == "reproduce":
        from edge_verl.reproduce.cli import run_reproduce

        return run_reproduce(args)
    if args.command == "cpu-overrides":
        return _cpu_overrides(args)
    if args.command == "recipe":
        return _recipe(args)
    if args.command == "method":
        return _method(args)
    if args.command == "method-overrides":
        return _method_overrides(args)
    if args.command == "study":
        return _study(args)
    from edge_verl.demo.run import DemoConfig, run_demo
    from edge_verl.demo.task import DEFAULT_TASK

    suffix = ("" if args.rollout == "hf" else f"_{args.rollout}") + ("" if args.task == DEFAULT_TASK else f"_{args.task}")
    out = args.out or Path("runs") / f"demo_{args.algorithm}_{args.trainer}{suffix}"
    try:
        config = DemoConfig(
            algorithm=args.algorithm,
            steps=args.steps,
            task=args.task,
            trainer=args.trainer,
            eda_form=args.eda_form,
            rollout=args.rollout,
            out=out,
            seed=args.seed,
            lr=args.lr,
            save_freq=args.save_freq,
            resume=args.resume,
            advantage_stats=True,  # the plot's advantage-variance panel for every estimator, GRPO included
            extra_overrides=list(args.overrides),
        )
        result = run_demo(config)
    except ValueError as error:
        print(f"edge-verl demo: {error}", file=sys.stderr)
        return 2
    print(f"metrics: {result['metrics']}  plot: {result['plot']}  ({result['seconds']:.0f} s)")
    return result["returncode"]


if __name__ == "__main__":
    sys.exit(main())
