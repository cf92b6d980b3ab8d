"""``edge-verl``: the plugin's commands ``doctor`` (installation self-check), ``preflight`` (the plugin's checks on
verl's composed config, before Ray starts), ``options`` (docs/options.md, from the options classes), ``cpu-overrides``, ``recipe`` (the recipes,
written from their definitions, edge_verl/recipes.py), ``method`` and ``method-overrides`` (the
methods' definitions, edge_verl/methods.py, as the recipes read them) and ``run-identity`` (the recipes' guard
against resuming another run's checkpoint); and the commands other installed packages add: the lab's ``demo``
(a real verl run on CPU), ``study`` (methods x seeds on a CPU task) and ``reproduce`` (a paper table), when the
lab (edge-verl-lab, lab/ in a checkout) is installed."""

from __future__ import annotations

import argparse
import sys
from importlib import metadata
from pathlib import Path
from typing import Any, Optional, Sequence

# The entry-point group through which an installed package adds a command to edge-verl: the entry point's name is
# the command, its object has ``help`` (one line, for ``edge-verl --help``) and ``run(argv) -> int`` (argv: the
# words after the command). The lab registers its commands there (lab/pyproject.toml); this package never
# imports the lab.
COMMAND_GROUP = "edge_verl.commands"
# The lab's commands, named here only to say how to install the lab when one is asked for without it.
LAB_COMMANDS = ("demo", "study", "reproduce")
LAB_INSTALL = "from a checkout of edge_verl, pip install -e ./lab (bash scripts/setup.sh installs it)"


def _parser(added: Optional[dict[str, metadata.EntryPoint]] = None, describe_added: bool = True) -> argparse.ArgumentParser:
    """The parser of the plugin's commands, which lists the ``added`` ones (default: the installed) for --help,
    each with its package's line of help when ``describe_added`` (which imports that package)."""
    from edge_verl.integration.cpu.overrides import ROLLOUTS
    from edge_verl.methods import KNOBS, SYMMETRIC_ALPHA, method_names

    parser = argparse.ArgumentParser(prog="edge-verl", description=__doc__)
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    commands = parser.add_subparsers(dest="command", required=True)
    doctor = commands.add_parser(
        "doctor", help="check that import verl registers edge_verl's components and that every patched verl internal exists; "
        "report the GPU stack",
    )
    doctor.add_argument(
        "--cpu", action="store_true",
        help="check the CPU backend too, as EDGE_VERL_CPU=1 does: its registrations and every internal it patches "
        "(megatron-core, mbridge and vLLM's CPU build where installed)",
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
    method.add_argument("name", nargs="?", default=None, help=f"a method ({', '.join(method_names())}); none: list them all")
    method.add_argument("--field", choices=METHOD_FIELDS, default=None, help="print only this field's value")
    method_args = commands.add_parser(
        "method-overrides", help="print the verl overrides of a method with this run's parameters, one per line"
    )
    method_args.add_argument("name", help=f"the method ({', '.join(method_names())})")
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
    commands.add_parser(
        "options", help="print docs/options.md: every algorithm.* option of the plugin, its type, default, allowed "
        "values and description, from the options classes' fields",
    )
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
    added = added_commands() if added is None else added
    for name, entry in added.items():  # listed for --help; main() hands them over before parsing
        commands.add_parser(name, help=_help_of(entry) if describe_added else None, add_help=False)
    absent = [name for name in LAB_COMMANDS if name not in added]
    if absent:
        parser.epilog = f"The lab's commands ({', '.join(absent)}) are not installed: {LAB_INSTALL}."
    return parser


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


# --- preflight: verl's config composed without importing verl -----------------------------------------------


def verl_config_dir() -> Path:
    """verl's ``trainer/config`` folder, found without importing verl (``import verl`` costs seconds)."""
    import importlib.util

    spec = importlib.util.find_spec("verl")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"verl is not installed for {sys.executable}: activate the environment that has it, or set PYTHON")
    return Path(list(spec.submodule_search_locations)[0]) / "trainer" / "config"


def compose_verl_config(config_name: str, overrides: Sequence[str], config_path: Optional[str] = None) -> Any:
    """verl's Hydra config as ``main_ppo`` composes it from ``--config-name``/``--config-path`` and overrides."""
    from hydra import compose, initialize_config_dir, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()  # hydra's initialize_* set the global state when constructed
    if config_path and config_path.startswith("pkg://"):
        context = initialize_config_module(config_module=config_path.removeprefix("pkg://"), version_base=None)
    else:
        folder = Path(config_path).resolve() if config_path else verl_config_dir()
        context = initialize_config_dir(config_dir=str(folder), version_base=None)
    try:
        with context:
            return compose(config_name=config_name, overrides=list(overrides))
    finally:
        GlobalHydra.instance().clear()


def run_identity_of(config: Any, method: str, backend: str, tag: str = "") -> dict:
    """The recipes' run identity from the composed config: what verl will actually run (Hydra's
    last-value-wins already applied)."""
    from edge_verl.integration.preflight import data_paths
    from edge_verl.run_identity import describe

    data = config.data
    return describe(
        method, str(config.actor_rollout_ref.model.path), data_paths(data.train_files), backend, data.get("seed", None), tag
    )


def _preflight(args: argparse.Namespace) -> int:
    import time

    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from edge_verl.integration.cpu.overrides import backend_of_config
    from edge_verl.integration.preflight import PREFIX, PreflightFailed, preflight_or_exit
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
    from edge_verl.openrlhf.recipes import OPENRLHF_RECIPES
    from edge_verl.recipe_files import default_recipes_dir, recipe_texts, stale_recipes, write_recipes
    from edge_verl.recipes import RECIPES

    folder = args.dir or default_recipes_dir()
    if args.name is not None:
        texts = recipe_texts()
        if args.name not in texts:
            print(f"edge-verl recipe: no recipe {args.name!r}; defined: {', '.join(texts)}", file=sys.stderr)
            return 2
        sys.stdout.write(texts[args.name])
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
    for recipe in OPENRLHF_RECIPES:
        print(f"{recipe.file_name:<56}{recipe.method:<21}{recipe.model:<24}{'openrlhf':<10}{recipe.setup}")
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


def _options(args: argparse.Namespace) -> int:
    from edge_verl.options_page import options_markdown

    sys.stdout.write(options_markdown())
    return 0


def _doctor(args: argparse.Namespace) -> int:
    from edge_verl.integration.doctor import run_doctor

    return run_doctor(cpu=args.cpu)


COMMANDS = {
    "doctor": _doctor,
    "preflight": _preflight,
    "run-identity": _run_identity,
    "cpu-overrides": _cpu_overrides,
    "recipe": _recipe,
    "method": _method,
    "method-overrides": _method_overrides,
    "options": _options,
}


def added_commands() -> dict[str, metadata.EntryPoint]:
    """The commands installed packages add (entry points of ``COMMAND_GROUP``), by name, found without importing
    them; a name of the plugin's own commands is never handed over, and of two entry points of one name the first
    found is."""
    added: dict[str, metadata.EntryPoint] = {}
    for entry in metadata.entry_points(group=COMMAND_GROUP):
        if entry.name not in COMMANDS:
            added.setdefault(entry.name, entry)
    return added


def _help_of(entry: metadata.EntryPoint) -> str:
    """An added command's line in ``edge-verl --help`` (its package is imported for it)."""
    try:
        return str(entry.load().help)
    except Exception as error:  # a broken package must not take the plugin's own commands with it
        return f"({entry.value} cannot be loaded: {type(error).__name__}: {error})"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    added = added_commands()
    if argv and argv[0] in added:
        return added[argv[0]].load().run(argv[1:])
    if argv and argv[0] in LAB_COMMANDS:
        print(f"edge-verl {argv[0]}: a command of the lab (edge-verl-lab), which is not installed: {LAB_INSTALL}", file=sys.stderr)
        return 1
    # a command of the plugin's own never shows the others' help: they stay unimported
    args = _parser(added, describe_added=not argv or argv[0] not in COMMANDS).parse_args(argv)
    return COMMANDS[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
