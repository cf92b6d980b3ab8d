"""docs/options.md is what the code says (``edge-verl options``): every option of every section the plugin reads,
with its type, default, declared bounds or allowed values and its docstring description; and what the page says
is allowed is what validation enforces."""

import json
import math
from dataclasses import fields
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from edge_verl import names
from edge_verl.cli import main
from edge_verl.conf import OPTIONS_CONFIG, options_node
from edge_verl.estimators import names as estimator_names
from edge_verl.options_page import PAGE, option_sections, options_markdown

ROOT = Path(__file__).resolve().parents[1]


def _row(page: str, key: str) -> list[str]:
    """The cells of the page's one table row for ``key``."""
    (line,) = [line for line in page.splitlines() if line.startswith(f"| `{key}` |")]
    return [cell.strip() for cell in line.strip("|").split(" | ")]


def test_the_committed_page_is_the_one_the_code_writes(capsys):
    assert main(["options"]) == 0
    written = capsys.readouterr().out
    assert written == options_markdown()
    assert (ROOT / PAGE).read_text() == written, "run `edge-verl options > docs/options.md`"


def test_the_sections_are_those_a_run_reads_and_the_shipped_config_holds():
    assert list(option_sections()) == [*estimator_names(), names.GEC_SECTION, names.METRICS_SECTION, names.SEEDING_SECTION]
    assert set(options_node()["algorithm"]) == set(option_sections())
    for name in ("edge_ppo_trainer", "edge_ppo_megatron_trainer"):  # each takes the options' config (edge_verl.conf)
        assert OPTIONS_CONFIG in OmegaConf.load(ROOT / "edge_verl" / "conf" / f"{name}.yaml").defaults, name


def test_every_field_is_on_the_page_with_its_default_and_a_description():
    page = (ROOT / PAGE).read_text()
    for section, config in option_sections().items():
        for item in fields(config):
            option, kind, default, allowed, description = _row(page, f"algorithm.{section}.{item.name}")
            value = list(item.default) if isinstance(item.default, tuple) else item.default
            assert default == f"`{json.dumps(value)}`".replace("|", "\\|"), (section, item.name)
            assert kind and allowed and len(description) > 20, (section, item.name)


def _outside(declared: dict, kind: str):
    """A value just outside what a field declares, or None when it declares nothing to step outside of."""
    if "choices" in declared:
        return "not_" + declared["choices"][0]
    if "above" in declared:
        return declared["above"]  # an exclusive bound: the bound itself is refused
    if "low" in declared:
        return declared["low"] - 1
    if "high" in declared:
        return declared["high"] + 1
    return {"bool": 1, "float": math.inf, "int": 1.5}.get(kind)


@pytest.mark.parametrize("section", list(option_sections()))
def test_a_value_outside_what_the_page_allows_is_refused_naming_the_key(section):
    config = option_sections()[section]
    page = (ROOT / PAGE).read_text()
    checked = 0
    for item in fields(config):
        kind = _row(page, f"algorithm.{section}.{item.name}")[1].removesuffix(" or null")
        bad = _outside(dict(item.metadata), kind)
        if bad is None:
            continue  # a list or free text: its class's own checks (tests/test_config.py)
        with pytest.raises(ValueError, match=f"^{section}\\.{item.name}={bad!r}"):
            config.from_mapping({item.name: bad})
        checked += 1
    assert checked >= len(fields(config)) - 4


def test_a_description_runs_to_its_last_indented_line_and_every_field_needs_one():
    from dataclasses import dataclass

    from edge_verl.config import option_specs

    @dataclass(frozen=True)
    class Example:
        """Summary: not an option.

        low_x, high_x: the two bounds,
            continued here.
        text / other: shared.

        A paragraph at the docstring's indentation (with a colon: here) ends the description above it.
        last: alone.
        """

        low_x: float = 0.0
        high_x: float = 1.0
        text: str = ""
        other: str = ""
        last: bool = False

    docs = {spec.name: spec.doc for spec in option_specs(Example)}
    assert docs == {"low_x": "the two bounds, continued here.", "high_x": "the two bounds, continued here.",
                    "text": "shared.", "other": "shared.", "last": "alone."}

    @dataclass(frozen=True)
    class Undocumented:
        """documented: yes."""

        documented: int = 1
        forgotten: int = 2

    with pytest.raises(ValueError, match=r"Undocumented: no description of \['forgotten'\]"):
        option_specs(Undocumented)
