"""GEPO's default sensitivity sweep, passed to the GEPO recipes the way ``edge-verl reproduce
gepo_sensitivity`` passes it (after the script's name): every row's expected coefficients are those of its
grid point, and the paper's point and one point per coefficient, on both backends, compose against verl
0.9.1's config and reach the estimator as that value, every other coefficient at the paper's (every row
takes the same "$@" path). Hydra composition and the plugin's checks only:
no Ray, no training."""

import pytest

from edge_verl_lab.reproduce.tables import GEPO_PAPER, TABLES
from tests.integration.test_recipes_compose_on_cpu import RECIPES, _compose, recipe_overrides

SWEEP = TABLES["gepo_sensitivity"]
RECIPE_FILES = {recipe.name: recipe for recipe in RECIPES}


@pytest.mark.parametrize("backend", ["fsdp", "megatron"])
def test_each_grid_point_reaches_gepo_as_its_value_and_only_that_coefficient_moves(backend):
    from edge_verl.integration.run_checks import check_run_config

    expected_by_row = {SWEEP.sweep.centre_row: dict(GEPO_PAPER)}
    for coefficient, points in SWEEP.sweep.points.items():
        for value, key in points:
            expected_by_row.setdefault(key, {**GEPO_PAPER, coefficient: value})
    assert set(expected_by_row) == {row.key for row in SWEEP.rows}
    for row in SWEEP.rows:  # each row's override moves its coefficient to its grid point, and nothing else
        moved = {key.lstrip("+").rsplit(".", 1)[-1]: float(value) for key, value in (item.split("=", 1) for item in row.overrides)}
        assert {**GEPO_PAPER, **moved} == pytest.approx(expected_by_row[row.key]), row.key
    # every row's overrides reach the recipe the same way ("$@" after the script); composing the paper's point
    # and one point per coefficient shows it (composing all of the FSDP grid took 43 s of CI)
    firsts = {next(key for _, key in points if key != SWEEP.sweep.centre_row) for points in SWEEP.sweep.points.values()}
    rows = [row for row in SWEEP.rows if row.key in firsts | {SWEEP.sweep.centre_row}]
    for row in rows:
        config_name, overrides = recipe_overrides(RECIPE_FILES[row.recipes[backend]], *row.overrides)
        assert overrides[len(overrides) - len(row.overrides):] == list(row.overrides)  # the user's block: last
        run = check_run_config(_compose(config_name, overrides))
        assert run.estimator == "gepo"
        assert {name: getattr(run.options, name) for name in GEPO_PAPER} == pytest.approx(expected_by_row[row.key]), row.key
