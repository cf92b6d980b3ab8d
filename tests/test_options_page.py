"""docs/options.md is what the code says (``edge-verl options``): every option of every section the plugin reads,
with its type, default, declared bounds or allowed values and its description, from the fields' metadata; and what the page says
is allowed is what validation enforces."""

import json
import math
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from edge_verl.algorithms.gec import GecConfig
from edge_verl.config import MetricsConfig, SeedingConfig
from edge_verl.cli import main
from edge_verl.conf import OPTIONS_CONFIG, options_node
from edge_verl.config import declared
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
    assert list(option_sections()) == [*estimator_names(), GecConfig.section, MetricsConfig.section, SeedingConfig.section]
    assert set(options_node()["algorithm"]) == set(option_sections())
    for name in ("edge_ppo_trainer", "edge_ppo_megatron_trainer"):  # each takes the options' config (edge_verl.conf)
        assert OPTIONS_CONFIG in OmegaConf.load(ROOT / "edge_verl" / "conf" / f"{name}.yaml").defaults, name


def test_every_field_is_on_the_page_with_its_default_and_a_description():
    page = (ROOT / PAGE).read_text()
    for section, config in option_sections().items():
        for name, item in config.model_fields.items():
            option, kind, default, allowed, description = _row(page, f"algorithm.{section}.{name}")
            value = list(item.default) if isinstance(item.default, tuple) else item.default
            assert default == f"`{json.dumps(value)}`".replace("|", "\\|"), (section, name)
            assert kind and allowed and len(description) > 20, (section, name)
            assert description == item.description.replace("``", "`").replace("|", "\\|"), (section, name)


def _outside(field, kind: str):
    """A value just outside what a field declares, or None when it declares nothing to step outside of."""
    if field.choices is not None:
        return "not_" + field.choices[0]
    if field.above is not None:
        return field.above  # an exclusive bound: the bound itself is refused
    if field.low is not None:
        return field.low - 1
    if field.high is not None:
        return field.high + 1
    return {"bool": 1, "float": math.inf, "int": 1.5}.get(kind)


@pytest.mark.parametrize("section", list(option_sections()))
def test_a_value_outside_what_the_page_allows_is_refused_naming_the_key(section):
    config = option_sections()[section]
    page = (ROOT / PAGE).read_text()
    checked = 0
    for name in config.model_fields:
        kind = _row(page, f"algorithm.{section}.{name}")[1].removesuffix(" or null")
        bad = _outside(declared(config, name), kind)
        if bad is None:
            continue  # a list or free text: its class's own checks (tests/test_config.py)
        with pytest.raises(ValueError, match=f"^{section}\\.{name}={bad!r}"):
            config.from_mapping({name: bad})
        checked += 1
    assert checked >= len(config.model_fields) - 4


def test_the_page_reads_each_fields_metadata_and_every_field_needs_a_description():
    from typing import ClassVar, Literal, Optional

    from edge_verl.config import Options, option, option_specs

    class Example(Options):
        """Summary: not an option."""

        section: ClassVar[str] = "example"
        rate: float = option(0.5, gt=0.0, le=1.0, reason="zero stops it", description="a rate.")
        count: Optional[int] = option(None, ge=1, description="a count.")
        mode: Literal["a", "b"] = option("a", description="a mode.")
        pair: tuple[float, float] = option((0.0, 1.0), description="a pair.")

    specs = {spec.name: spec for spec in option_specs(Example)}
    assert {name: (spec.type, spec.allowed, spec.doc) for name, spec in specs.items()} == {
        "rate": ("float", "(0.0, 1.0]", "a rate."), "count": ("int or null", ">= 1, null", "a count."),
        "mode": ("str", "`a`, `b`", "a mode."), "pair": ("[float, float]", "", "a pair."),
    }
    with pytest.raises(ValueError, match=r"^example.rate=0.0 zero stops it; it must be > 0.0"):
        Example.from_mapping({"rate": 0.0})
    with pytest.raises(ValueError, match=r"^example.mode='c'; allowed: \['a', 'b'\]"):
        Example(mode="c")
    with pytest.raises(ValueError, match=r"^Example: unknown option\(s\) \['other'\]; allowed: \['count', 'mode', 'pair', 'rate'\]"):
        Example.from_mapping({"other": 1})

    class Undocumented(Options):
        documented: int = option(1, description="yes.")
        forgotten: int = 2

    with pytest.raises(ValueError, match=r"Undocumented: no description of \['forgotten'\]"):
        option_specs(Undocumented)
