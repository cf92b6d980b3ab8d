"""``edge-verl``: ``demo`` (a real verl run on CPU), ``doctor`` (registration self-check), ``cpu-overrides``,
``run-identity`` (the recipes' guard against resuming another run's checkpoint), ``reproduce`` (a paper
table: recipes per seed -> evaluation -> table and curves)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _parser() -> argparse.ArgumentParser:
    from edge_verl.demo.run import ALGORITHMS, EDA_FORMS, TRAINERS
    from edge_verl.integration.cpu.overrides import ROLLOUTS

    parser = argparse.ArgumentParser(prog="edge-verl", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="train a tiny model with verl on CPU and plot the run")
    demo.add_argument("--algorithm", choices=ALGORITHMS, default="grpo")
    demo.add_argument("--steps", type=int, default=20)
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
        help="output folder (default runs/demo_<algorithm>_<trainer>, + _vllm with --rollout vllm)",
    )
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument("--lr", type=float, default=1e-3)
    demo.add_argument("--save-freq", type=int, default=-1, help="verl checkpoint frequency in steps (-1: never)")
    demo.add_argument("--resume", action="store_true", help="resume from the latest checkpoint in OUT")
    demo.add_argument("overrides", nargs="*", help="extra Hydra overrides passed to verl's main_ppo")
    commands.add_parser("doctor", help="check that import verl registers edge_verl's components")
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
    identity = commands.add_parser("run-identity", help="record a run's identity in its checkpoint folder, or check it")
    identity.add_argument("checkpoint_dir", type=Path)
    for option in ("--method", "--model", "--train-file", "--backend", "--seed"):
        identity.add_argument(option, required=True)
    from edge_verl.reproduce.cli import add_reproduce_parser

    add_reproduce_parser(commands)
    return parser


def _run_identity(args: argparse.Namespace) -> int:
    from edge_verl.run_identity import RunIdentityMismatch, check_or_record, describe

    identity = describe(args.method, args.model, args.train_file, args.backend, args.seed)
    try:
        outcome = check_or_record(args.checkpoint_dir, identity)
    except RunIdentityMismatch as error:
        print(f"edge-verl run-identity: {error}", file=sys.stderr)
        return 3
    print(f"edge-verl run-identity: {args.checkpoint_dir}: {outcome}")
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


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "doctor":
        from edge_verl.integration.doctor import run_doctor

        return run_doctor()
    if args.command == "run-identity":
        return _run_identity(args)
    if args.command == "reproduce":
        from edge_verl.reproduce.cli import run_reproduce

        return run_reproduce(args)
    if args.command == "cpu-overrides":
        return _cpu_overrides(args)
    from edge_verl.demo.run import DemoConfig, run_demo

    suffix = "" if args.rollout == "hf" else f"_{args.rollout}"
    out = args.out or Path("runs") / f"demo_{args.algorithm}_{args.trainer}{suffix}"
    try:
        config = DemoConfig(
            algorithm=args.algorithm,
            steps=args.steps,
            trainer=args.trainer,
            eda_form=args.eda_form,
            rollout=args.rollout,
            out=out,
            seed=args.seed,
            lr=args.lr,
            save_freq=args.save_freq,
            resume=args.resume,
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
