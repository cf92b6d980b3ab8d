"""The recipes folder (``recipes/``): every recipe file of both frameworks by its path there, verl's
(``edge_verl/recipes.py``) and OpenRLHF's (``edge_verl/openrlhf/recipes.py``, in ``openrlhf/``), written and
checked against their definitions (``edge-verl recipe --write`` / ``--check``).

Above both definitions, in a module of its own: OpenRLHF's recipes read the training setups of verl's
(``TRAINING_SETUPS``), so the writer of both folders cannot sit in ``recipes.py`` without the two importing
each other. No verl import.
"""

from __future__ import annotations

from pathlib import Path

from edge_verl.openrlhf.recipes import OPENRLHF_RECIPES, openrlhf_recipe_text
from edge_verl.recipes import RECIPES, recipe_text


def recipe_texts() -> dict[str, str]:
    """Every recipe file's path under the recipes folder -> its text: verl's (``RECIPES``), then OpenRLHF's
    (edge_verl/openrlhf/recipes.py, in ``openrlhf/``)."""
    return {**{recipe.file_name: recipe_text(recipe) for recipe in RECIPES},
            **{recipe.file_name: openrlhf_recipe_text(recipe) for recipe in OPENRLHF_RECIPES}}


def stale_recipes(folder: Path) -> tuple[list[str], list[str]]:
    """(files to write: missing or different, run_*.sh files in ``folder`` (and its openrlhf/) that no recipe
    defines)."""
    folder = Path(folder)
    texts = recipe_texts()
    changed = [name for name, text in texts.items() if not (folder / name).exists() or (folder / name).read_text() != text]
    found = [*folder.glob("run_*.sh"), *folder.glob("openrlhf/run_*.sh")]
    undefined = sorted(path.relative_to(folder).as_posix() for path in found if path.relative_to(folder).as_posix() not in texts)
    return changed, undefined


def write_recipes(folder: Path) -> list[str]:
    """Write every recipe whose file in ``folder`` is missing or differs (executable); returns their names."""
    changed, _ = stale_recipes(folder)
    texts = recipe_texts()
    for name in changed:
        path = Path(folder) / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(texts[name])
        path.chmod(path.stat().st_mode | 0o111)
    return changed


def default_recipes_dir() -> Path:
    """The repository's recipes/ next to the installed package (a checkout), else ./recipes."""
    beside = Path(__file__).resolve().parents[1] / "recipes"
    return beside if beside.is_dir() else Path("recipes")
