"""Command line of ``edge-verl reproduce`` (wired into edge_verl_lab.cli)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Optional

from edge_verl.data import EVAL_SETS, PAPER_EVAL, RandomSource
from edge_verl.recipe_files import default_recipes_dir
from edge_verl_lab.reproduce.tables import BACKENDS, GEPO_DEFAULT_GRID, GEPO_PAPER, TABLES, gepo_sensitivity_table

USAGE = """examples:
  edge-verl reproduce edge_hard_1k --seeds 1 2 3                  # EDGE-GRPO Table 2, FSDP recipes
  edge-verl reproduce edge_random_1k --seeds 1 2 3 --backend megatron --rows grpo_7b edge_7b
  edge-verl reproduce gepo_math --seeds 1 2 3 --dry-run            # list the stages and commands
  edge-verl reproduce edge_hard_1k --model 1.5b=/models/Qwen2.5-Math-1.5B --model 7b=/models/Qwen2.5-Math-7B
  edge-verl reproduce edge_hard_1k --seeds 1 2 --set NGPUS_PER_NODE=4 --set MICRO_BATCH_SIZE=2
  edge-verl reproduce edge_ablation_hard_1k --seeds 1 2 3          # ablations and controls, 7B (SFT: FSDP only)
  edge-verl reproduce gepo_sensitivity --seeds 1 2 3 --dry-run     # every coefficient, default grid
  edge-verl reproduce gepo_sensitivity --vary alpha_high=0.05,0.1,0.3 --vary gamma --seeds 1 2 3

Tables and rows (row: model on fsdp / on megatron):
{tables}
Every stage is skipped when done (re-run the same command to resume); a failed stage prints its log path.
Tables report each run's final checkpoint; the best validation step appears only in its own section,
labelled optimistic.
"""


def describe_tables() -> str:
    """The tables, each row with the model it runs on each backend (the --help listing)."""
    lines = []
    for key, table in TABLES.items():
        lines.append(f"  {key}: {table.title}")
        if table.sweep is not None:
            row = table.row(table.sweep.centre_row)
            lines.append(f"    {row.key:<14} {' / '.join(row.models[b] for b in BACKENDS)}  (the paper's point, run once)")
            for name, points in table.sweep.points.items():
                values = " ".join(f"{value:g}" for value, _ in points)
                lines.append(f"    {name:<14} {values}  (paper {GEPO_PAPER[name]:g}; --vary {name}=V,V,...)")
            continue
        width = max(14, *(len(row.key) for row in table.rows))
        for row in table.rows:
            models = sorted(set(row.models.values()))
            shown = models[0] if len(models) == 1 else " / ".join(row.models[b] for b in BACKENDS)
            only = "" if set(row.recipes) in (set(), set(BACKENDS)) else f"  ({', '.join(sorted(row.recipes))} only)"
            lines.append(f"    {row.key:<{width}} {shown}{'' if row.trains else '  (evaluated only)'}{only}")
    return "\n".join(lines)


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def _sweep_grid(text: str) -> tuple[str, Optional[tuple[float, ...]]]:
    """``NAME`` (its default grid) or ``NAME=V1,V2,...``."""
    name, sep, values = text.partition("=")
    if not sep:
        return name, None
    try:
        return name, tuple(float(value) for value in values.split(",") if value.strip())
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"expected NAME=V1,V2,... (numbers), got {text!r}") from error


def sensitivity_grid(varied: list[tuple[str, Optional[tuple[float, ...]]]]) -> Optional[dict[str, tuple[float, ...]]]:
    """The grid of ``--vary`` options (a bare NAME: its default values; a NAME given twice: the values
    merged), or None for the default grid."""
    if not varied:
        return None
    grid: dict[str, tuple[float, ...]] = {}
    for name, values in varied:
        if name not in GEPO_DEFAULT_GRID:
            raise ValueError(f"--vary {name}: not a GEPO coefficient; choose from {list(GEPO_DEFAULT_GRID)}")
        chosen = GEPO_DEFAULT_GRID[name] if values is None else values
        if not chosen:
            raise ValueError(f"--vary {name}=: give at least one value")
        grid[name] = (*grid.get(name, ()), *chosen)
    return grid


def add_reproduce_parser(commands, help: str) -> None:
    parser = commands.add_parser(
        "reproduce",
        help=help,
        epilog=USAGE.format(tables=describe_tables()),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("table", choices=sorted(TABLES), help="the paper table to reproduce (rows listed below)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3], help="training seeds, one run per row and seed (default 1 2 3)")
    parser.add_argument("--backend", choices=BACKENDS, default="fsdp", help="the recipes' training backend (default fsdp)")
    parser.add_argument("--rows", nargs="+", default=None, help="only these rows (default: all; names below)")
    parser.add_argument("--out", type=Path, default=None, help="output folder (default runs/reproduce/<table>_<backend>)")
    parser.add_argument("--data-dir", type=Path, default=None, help="prepared data (default OUT/data; prepared when missing)")
    parser.add_argument("--recipes", type=Path, default=None, help="recipes folder (default: the checkout's recipes/)")
    parser.add_argument("--model", dest="models", type=_key_value, action="append", default=[], metavar="KEY=PATH",
                        help="the model for a row (grpo_7b=PATH), a size (7b=PATH) or a model id (Qwen/Qwen2.5-Math-7B=PATH); repeatable")
    parser.add_argument("--set", dest="env", type=_key_value, action="append", default=[], metavar="KEY=VALUE",
                        help="a recipe variable for every run (TRAIN_BATCH_SIZE, NGPUS_PER_NODE, EDGE_VERL_CPU, ...)")
    parser.add_argument("--train-file", type=_key_value, action="append", default=[], metavar="SET=PATH",
                        help="use PATH for training set SET (GEC rows read PATH's *_gec.parquet sibling)")
    parser.add_argument("--random-source", default=None,
                        help="re-draw Random-1K from DeepScaleR-Preview (hub id or local copy) instead of the shipped draw")
    parser.add_argument("--random-pool", nargs="*", type=Path, default=[], help="re-draw Random-1K from these local problem pools")
    parser.add_argument("--eval-benchmarks", nargs="*", default=[*PAPER_EVAL, "aime25"], choices=EVAL_SETS,
                        help="benchmarks to evaluate (default: the papers' five and AIME25)")
    parser.add_argument("--eval-limit", type=int, default=None, help="first N problems per benchmark (slices)")
    parser.add_argument("--eval-max-new-tokens", type=int, default=3000, help="generation budget per problem (paper: 3000)")
    parser.add_argument("--eval-temperature", type=float, default=0.1, help="sampling temperature (paper: 0.1)")
    parser.add_argument("--eval-extra", nargs="*", type=Path, default=[], help="extra benchmarks (problem, answer)")
    parser.add_argument("--vary", type=_sweep_grid, action="append", default=[], metavar="NAME[=V1,V2,...]",
                        help="gepo_sensitivity: sweep this coefficient (alpha_low, alpha_high, beta_low, beta_high, gamma) "
                        "over these values, or its default grid; repeatable (default: every coefficient, default grids)")
    parser.add_argument("--dry-run", action="store_true", help="list the stages (done / to run) and their commands")


def run_reproduce(args: argparse.Namespace, cwd: Optional[Path] = None) -> int:
    from edge_verl_lab.reproduce.pipeline import EvalSettings, Pipeline, RunCollision, Settings, StageFailed, table_markdown

    try:
        if args.vary and args.table != "gepo_sensitivity":
            raise ValueError(f"--vary sweeps GEPO's coefficients: it needs the table gepo_sensitivity, not {args.table}")
        grid = sensitivity_grid(args.vary)
        table = gepo_sensitivity_table(grid) if grid is not None else TABLES[args.table]
        settings = Settings(
            table=table,
            seeds=args.seeds,
            out=args.out or Path("runs") / "reproduce" / f"{args.table}_{args.backend}",
            recipes_dir=(args.recipes or default_recipes_dir()).resolve(),
            backend=args.backend,
            data_dir=args.data_dir,
            rows=args.rows,
            env=dict(args.env),
            models=dict(args.models),
            train_files={key: Path(value) for key, value in args.train_file},
            evaluation=EvalSettings(
                benchmarks=tuple(args.eval_benchmarks),
                limit=args.eval_limit,
                temperature=args.eval_temperature,
                max_new_tokens=args.eval_max_new_tokens,
                extra=tuple(path.resolve() for path in args.eval_extra),
            ),
            random_source=RandomSource(hub=args.random_source or None, pools=tuple(args.random_pool)),
            dry_run=args.dry_run,
        )
    except (ValueError, KeyError, FileNotFoundError) as error:
        print(f"edge-verl reproduce: {error}", file=sys.stderr)
        return 2
    try:
        table = Pipeline(settings, log=lambda line: print(line, flush=True), cwd=cwd).run()
    except RunCollision as error:
        print(f"edge-verl reproduce: {error}", file=sys.stderr)
        return 2
    except StageFailed as error:
        print(f"edge-verl reproduce: {error}", file=sys.stderr)
        return 1
    if table is not None:
        print(table_markdown(table))
    return 0
