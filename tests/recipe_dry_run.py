"""A recipe's DRY_RUN=1 output (the verl command, ready to paste) read back into its parts."""

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

RECIPES = Path(__file__).resolve().parents[1] / "recipes"
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


@dataclass
class DryRun:
    text: str  # the printed command
    env: dict  # the variables in front (env K=V ...)
    program: list  # python -m MODULE [its own options]
    config_name: str  # --config-name=... (main_ppo); "" for the SFT trainer
    overrides: list  # the Hydra overrides, in order

    @property
    def values(self) -> dict:
        """Override key -> value, the last one winning (as in Hydra); a leading "+" dropped."""
        return {key.lstrip("+"): value for key, _, value in (item.partition("=") for item in self.overrides)}


def parse(text: str) -> DryRun:
    words = shlex.split(text.replace("\\\n", " "))  # the line continuations, as the shell drops them
    assert words and words[0] == "env", text[:200]
    index, env = 1, {}
    while _ASSIGNMENT.match(words[index]):
        key, _, value = words[index].partition("=")
        env[key] = value
        index += 1
    module_end = words.index("-m", words.index("-m", index) + 1) + 2 if "torch.distributed.run" in words else words.index("-m", index) + 2
    program, rest = words[index:module_end], words[module_end:]
    config_name = ""
    if rest and rest[0].startswith("--config-name="):
        config_name, rest = rest[0].split("=", 1)[1], rest[1:]
    return DryRun(text, env, program, config_name, rest)


def python_path_env(**env) -> dict:
    """This environment with this interpreter first on PATH (the recipes' default PYTHON) and ``env``."""
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}", **env}


def dry_run(recipe, *arguments: str, **env) -> DryRun:
    path = recipe if isinstance(recipe, Path) else RECIPES / recipe
    completed = subprocess.run(
        ["bash", str(path), *arguments], capture_output=True, text=True, env=python_path_env(DRY_RUN="1", **env), timeout=120
    )
    assert completed.returncode == 0, completed.stderr[-2000:]
    return parse(completed.stdout)


def recipe_method(recipe: Path) -> str:
    """The method the recipe file runs, from its definition (edge_verl/recipes.py; tests/test_recipes.py holds
    the file equal to it)."""
    from edge_verl.recipes import get_recipe

    return get_recipe(Path(recipe).name).method
