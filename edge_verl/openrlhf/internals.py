"""What the OpenRLHF coupling subclasses, replaces or relies on in OpenRLHF 0.11.2, on the books, checked from source.

``SUBCLASSED`` lists the OpenRLHF classes and methods ``edge_verl.openrlhf.actors`` subclasses or overrides
(and the module attributes the launcher sets to its actor classes), ``GLOBALS`` the module-level names an
OpenRLHF method reads that the subclass gives its own object for that call (``actors.globals_of``), ``READ``
what it and the reward / agent files call or read as they are. Each SUBCLASSED / READ entry is (file under the
``openrlhf`` package, qualified name) -> the leading parameters relied on, in order. ``find_mismatches`` reads
the files with ``ast`` (nothing is imported, so it runs where flash_attn, deepspeed and CUDA are absent) and also
checks the one fact that is not a signature: the ``choices`` of ``--algo.advantage.estimator`` in
``cli/train_ppo_ray.py``, which the launcher extends. Any other OpenRLHF version is refused before any OpenRLHF
module is imported (``check_installed_version``: the launcher, the reward file and the agent file call it first),
and again before anything is subclassed (``check_module_version``).
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import sys
from functools import lru_cache
from pathlib import Path
from typing import Mapping, Optional

PINNED_VERSION = "0.11.2"
Table = Mapping[tuple[str, str], tuple[str, ...]]

SUBCLASSED: Table = {
    ("trainer/ppo_utils/experience_maker.py", "RemoteExperienceMaker.compute_advantages_and_returns"): ("self", "experiences"),
    ("trainer/ppo_trainer.py", "BasePPOTrainer.__init__"): ("self", "strategy"),
    ("trainer/ppo_trainer.py", "BasePPOTrainer.save_logs_and_checkpoints"): ("self", "global_step", "logs_dict", "client_states"),
    ("trainer/ppo_trainer.py", "BasePPOTrainer.restore_best_checkpoint_state"): ("self", "checkpoint_states"),
    ("trainer/ppo_trainer.py", "PPOTrainer.__init__"): ("self", "pretrain", "strategy"),
    ("trainer/ppo_trainer.py", "PPOTrainer.evaluate"): ("self", "global_step"),
    ("trainer/ppo_trainer.py", "compute_eval_metrics"): ("eval_dataloader", "samples_list", "n_samples_per_prompt"),
    ("trainer/ppo_trainer_async.py", "PPOTrainerAsync.__init__"): ("self", "pretrain", "strategy"),
    ("trainer/ppo_trainer_async.py", "TrainingActor.__init__"): ("self", "pretrain", "strategy"),
    ("trainer/ppo_trainer_async.py", "GenerateSamplesActor.__init__"): ("self", "pretrain", "strategy"),
    ("trainer/ppo_trainer_async.py", "GenerateSamplesActor._run_eval"): ("self",),
    ("trainer/ppo_utils/samples_generator.py", "SamplesGenerator.generate_eval_samples"): ("self",),
    ("trainer/ppo_utils/samples_generator.py", "SamplesGenerator._dispatch_prompts_to_vllm"): ("self", "prompts", "labels", "images"),
    ("trainer/ray/ppo_actor.py", "PolicyModelActor"): (),
    ("utils/config.py", "hierarchize"): ("args",),
}
GLOBALS: Mapping[tuple[str, str], tuple[str, ...]] = {
    ("trainer/ppo_trainer.py", "PPOTrainer.evaluate"): ("compute_eval_metrics",),
    ("trainer/ppo_trainer_async.py", "GenerateSamplesActor._run_eval"): ("compute_eval_metrics",),
    ("trainer/ppo_trainer_async.py", "PPOTrainerAsync.__init__"): ("TrainingActor", "GenerateSamplesActor"),
}
READ: Table = {
    ("trainer/ppo_utils/experience_maker.py", "apply_length_penalties"): (),
    ("trainer/ppo_utils/length_penalty.py", "apply_length_penalties"): ("experiences", "args"),
    ("trainer/ppo_utils/experience_maker.py", "RemoteExperienceMaker._flatten_results"): ("self", "refs", "duplicate_factor"),
    ("trainer/ray/launcher.py", "RayActorGroup.async_run_method_batch"): ("self", "method_name"),
    ("trainer/ray/launcher.py", "BaseModelActor.execute_batch"): ("self", "method_name", "all_data", "start_idx", "end_idx"),
    ("models/actor.py", "Actor.forward"): ("self", "sequences", "action_mask", "attention_mask", "return_output"),
    ("trainer/ray/ppo_actor.py", "PolicyModelActor.forward"): ("self", "sequences", "action_mask", "attention_mask"),
    ("trainer/ppo_trainer.py", "BasePPOTrainer.__init__"): ("self", "strategy"),
    ("utils/agent.py", "AgentExecutorBase.execute"): (
        "self", "prompt", "label", "sampling_params", "max_length", "hf_tokenizer", "llm_engine", "images",
    ),
    ("utils/agent.py", "SingleTurnAgentExecutor.execute"): (
        "self", "prompt", "label", "sampling_params", "max_length", "hf_tokenizer", "llm_engine", "images",
    ),
    ("utils/agent.py", "SingleTurnAgentExecutor._fetch_rewards_via_func"): ("self", "queries_list", "prompts_list", "labels_list"),
    ("trainer/ray/vllm_engine.py", "RolloutRayActor.generate_responses"): (
        "self", "prompt", "label", "sampling_params", "max_length", "hf_tokenizer", "num_samples",
    ),
    ("trainer/ray/vllm_engine.py", "_load_agent_executor"): ("agent_func_path",),
    ("cli/train_ppo_ray.py", "train"): ("args",),
}
ESTIMATOR_FILE = "cli/train_ppo_ray.py"
ESTIMATOR_FLAG = "--algo.advantage.estimator"
ESTIMATOR_CHOICES = ("gae", "reinforce", "rloo", "reinforce_baseline", "group_norm", "dr_grpo", "flash_reinforce")


def check_version(found: Optional[str], where: Optional[Path] = None) -> None:
    """Refuse every OpenRLHF but the pinned one, naming both (and where it looked, when given)."""
    if found != PINNED_VERSION:
        seen = f"openrlhf {found!r}" if found is not None else "an openrlhf whose version it cannot read (no dist-info, no version.txt)"
        raise RuntimeError(
            f"edge_verl's OpenRLHF coupling is pinned to openrlhf=={PINNED_VERSION} (every subclassed or relied-on "
            f"attribute is checked against it: edge_verl/openrlhf/internals.py); found {seen}"
            f"{f' at {where}' if where is not None else ''}. "
            f"Install openrlhf=={PINNED_VERSION}, or drop edge_verl's OpenRLHF files from the command line."
        )


@lru_cache(maxsize=None)
def version_at(package_dir: str) -> Optional[str]:
    """The version of the ``openrlhf`` package folder ``package_dir`` (the code actually loaded, wherever it
    lives): the dist-info beside it (an install), else the ``version.txt`` beside it (a source checkout, which
    OpenRLHF's setup.py reads its version from); None when there is neither."""
    root = Path(package_dir).parent
    for dist in importlib.metadata.distributions(path=[str(root)]):
        if (dist.metadata["Name"] or "").lower() == "openrlhf":
            return dist.version
    source = root / "version.txt"
    return source.read_text().strip() or None if source.is_file() else None


def installed_package_dir() -> Optional[Path]:
    """The ``openrlhf`` package folder in use: the imported one (OpenRLHF loading the reward or agent file), else
    the one this interpreter would import, found without importing it."""
    module = sys.modules.get("openrlhf")
    if module is not None:
        locations = list(getattr(module, "__path__", None) or [])
    else:
        spec = importlib.util.find_spec("openrlhf")
        locations = list(spec.submodule_search_locations or []) if spec is not None else []
    return Path(locations[0]).resolve() if locations else None


def check_installed_version() -> None:
    """Refuse before any OpenRLHF module is imported: no openrlhf at all (ModuleNotFoundError, as its import would
    raise), or another version than the pinned one (RuntimeError)."""
    package_dir = installed_package_dir()
    if package_dir is None:
        raise ModuleNotFoundError(f"edge_verl's OpenRLHF coupling needs openrlhf=={PINNED_VERSION}, and this Python finds no "
                                  "openrlhf package.", name="openrlhf")
    check_version(version_at(str(package_dir)), where=package_dir)


def package_dir_of(module) -> Path:
    """The ``openrlhf`` package folder a module of it was loaded from."""
    path = Path(module.__file__).resolve()
    depth = module.__name__.count(".")
    return path.parents[depth - 1] if depth else path.parent


def check_module_version(module) -> None:
    check_version(version_at(str(package_dir_of(module))))


def _parameters(node: ast.AST) -> tuple[str, ...]:
    arguments = node.args
    return tuple(arg.arg for arg in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs))


def _find(tree: ast.AST, qualname: str) -> Optional[ast.AST]:
    scope = tree
    for part in qualname.split("."):
        found = None
        for child in ast.iter_child_nodes(scope):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and child.name == part:
                found = child
            elif isinstance(child, ast.ImportFrom) and any((alias.asname or alias.name) == part for alias in child.names):
                found = child
        if found is None:
            return None
        scope = found
    return scope


def estimator_choices(source: str) -> Optional[tuple[str, ...]]:
    """The literal ``choices`` of the ``--algo.advantage.estimator`` argument in train_ppo_ray.py's source."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) and node.args[0].value == ESTIMATOR_FLAG:
            for keyword in node.keywords:
                if keyword.arg == "choices":
                    return tuple(ast.literal_eval(keyword.value))
    return None


def find_mismatches(package_dir: Path) -> list[str]:
    """Every entry of SUBCLASSED, GLOBALS and READ that the OpenRLHF source at ``package_dir`` does not satisfy."""
    problems = []
    trees: dict[str, ast.AST] = {}
    for (file, qualname), expected in {**READ, **SUBCLASSED}.items():
        path = package_dir / file
        if file not in trees:
            trees[file] = ast.parse(path.read_text()) if path.is_file() else ast.Module(body=[], type_ignores=[])
        node = _find(trees[file], qualname)
        if node is None:
            problems.append(f"openrlhf/{file}: {qualname} is missing")
        elif expected and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found = _parameters(node)[: len(expected)]
            if found != expected:
                problems.append(f"openrlhf/{file}: {qualname} takes {found}, expected {expected}")
    for (file, qualname), names in GLOBALS.items():
        node = _find(trees[file], qualname)
        read = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)} if node else set()
        unread = [name for name in names if name not in read]
        if unread:
            problems.append(f"openrlhf/{file}: {qualname} does not read the global(s) {unread}")
    choices = estimator_choices((package_dir / ESTIMATOR_FILE).read_text())
    if choices != ESTIMATOR_CHOICES:
        problems.append(f"openrlhf/{ESTIMATOR_FILE}: {ESTIMATOR_FLAG} choices are {choices}, expected {ESTIMATOR_CHOICES}")
    return problems
