"""Validated configuration, one dataclass per feature. Defaults are the papers' values; every deviation
from the papers or their reference code is a named option whose docstring line says why it exists.

verl users set these under ``algorithm.edge_eda.*`` / ``algorithm.gepo.*`` (``+algorithm.gepo.alpha_low=0.5``
on the command line, or without ``+`` through the Hydra config shipped in ``edge_verl/conf/``).
Errors name the bad key or value and the allowed ones.

Each option is described once, in its class docstring (``name: text``, continued on indented lines), and its
bounds or allowed values are declared once, on its field (``_option``): validation checks what the field
declares (``_check_declared``, by the field's type), ``__post_init__`` adds what one field cannot say (a
list's shape, a relation between two options), and docs/options.md prints both (``option_specs``,
``edge_verl/options_page.py``).
"""

from __future__ import annotations

import functools
import inspect
import math
import re
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, ClassVar, Mapping, NamedTuple, Optional, get_args, get_origin, get_type_hints



def _from_mapping(cls, values: Optional[Mapping[str, Any]]):
    values = dict(values or {})
    allowed = {field.name for field in fields(cls)}
    unknown = sorted(set(values) - allowed)
    if unknown:
        raise ValueError(f"{cls.__name__}: unknown option(s) {unknown}; allowed: {sorted(allowed)}")
    return cls(**values)


def _check_finite(owner: str, name: str, value: Any, low: float | None = None, high: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{owner}.{name}={value!r} must be a finite number")
    if low is not None and value < low:
        raise ValueError(f"{owner}.{name}={value!r} must be >= {low}")
    if high is not None and value > high:
        raise ValueError(f"{owner}.{name}={value!r} must be <= {high}")
    return float(value)


def _check_integer(owner: str, name: str, value: Any, low: int | None = None, optional: bool = False) -> None:
    if optional and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or (low is not None and value < low):
        wanted = "an integer" + (f" >= {low}" if low is not None else "") + (" or null" if optional else "")
        raise ValueError(f"{owner}.{name}={value!r} must be {wanted}")


def _check_choice(owner: str, name: str, value: Any, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"{owner}.{name}={value!r}; allowed: {list(allowed)}")


def _option(default: Any, *, low: float | None = None, high: float | None = None, above: float | None = None,
            choices: tuple[str, ...] | None = None, reason: str = "") -> Any:
    """A dataclass field with its declared bounds (a number: ``low <= value <= high``, ``value > above``; an
    integer: ``value >= low``) or allowed values (a string: ``choices``); ``reason`` says why ``above`` holds."""
    declared = {"low": low, "high": high, "above": above, "choices": choices, "reason": reason or None}
    return field(default=default, metadata={key: value for key, value in declared.items() if value is not None})


def _field_type(hint: Any) -> tuple[Any, bool]:
    """(the type, whether null is allowed) of a field's annotation: ``Optional[int]`` -> (int, True)."""
    arguments = get_args(hint)
    if type(None) in arguments:
        (inner,) = [argument for argument in arguments if argument is not type(None)]
        return inner, True
    return hint, False


@functools.lru_cache(maxsize=None)
def _field_types(cls: type) -> dict[str, tuple[Any, bool]]:
    return {name: _field_type(hint) for name, hint in get_type_hints(cls).items()}


def _check_declared(config: Any, owner: str) -> None:
    """Check every field of ``config`` against its type and what it declares (``_option``): true or false, a
    finite number within its bounds, an integer at least its ``low``, one of its ``choices``; null where the
    type is Optional. Fields of other types (lists, free text) are checked by their class's ``__post_init__``."""
    for item in fields(config):
        value, (kind, optional), declared = getattr(config, item.name), _field_types(type(config))[item.name], item.metadata
        if optional and value is None:
            continue
        if kind is bool and not isinstance(value, bool):
            raise ValueError(f"{owner}.{item.name}={value!r} must be true or false")
        if kind is float:
            _check_finite(owner, item.name, value, declared.get("low"), declared.get("high"))
            above = declared.get("above")
            if above is not None and not value > above:
                why = f"{declared['reason']}; it " if "reason" in declared else ""
                raise ValueError(f"{owner}.{item.name}={value!r} {why}must be > {above}")
        if kind is int:
            _check_integer(owner, item.name, value, declared.get("low"), optional)
        if kind is str and "choices" in declared:
            _check_choice(owner, item.name, value, declared["choices"])


class _Switches:
    """A section whose fields need only what they declare (``_check_declared``): its checks and its
    ``from_mapping`` (unknown keys refused), under the section's name."""

    section: ClassVar[str]

    def __post_init__(self) -> None:
        _check_declared(self, self.section)

    @classmethod
    def from_mapping(cls, values: Optional[Mapping[str, Any]]):
        return _from_mapping(cls, values)


@dataclass(frozen=True)
class MetricsConfig(_Switches):
    """Extra metrics for any estimator, verl's built-ins included (options under ``algorithm.edge_metrics``).

    advantage_stats: log ``edge_verl/adv/var`` (unbiased variance of the per-response advantages) and
        ``edge_verl/adv/zero_variance_group_frac`` every step, whatever ``algorithm.adv_estimator`` is, so
        GRPO and EDGE curves are comparable (EDGE-GRPO Fig. 5). Off by default: with the plugin installed, a
        plain verl run logs nothing extra unless asked, and the plugin's estimators report the same two
        values under their own names (``edge_verl/<estimator>/adv_var_after``, ``.../zero_variance_group_frac``)
        at no extra cost; the recipes switch it on.
    per_source: log every step's training statistics split by the responses' ``data_source`` (the tasks of
        a mixture, GEPO's setting), ``edge_verl/by_source/<data_source>/<stat>``: sampled reward and
        accuracy, all-wrong / all-right / tied group fractions, response length, the sampled tokens' entropy
        estimate (mean -log pi_old) and, under GEPO, each source's mean group entropy and attenuated
        fractions (``edge_verl.estimators.base.per_source_statistics``). Off by default (one more
        read of the batch per step on verl's v1 trainer); ``edge-verl study`` switches it on for a mixture.
    """

    section: ClassVar[str] = "edge_metrics"
    advantage_stats: bool = False
    per_source: bool = False


@dataclass(frozen=True)
class SeedingConfig(_Switches):
    """Reproducible runs, options under ``algorithm.edge_seeding``: the same command gives the same run.

    enable: on (default) in every run that uses the plugin; a plain verl run (GRPO) gets it with
        ``+algorithm.edge_seeding.enable=True``, so that a baseline beside EDGE or GEPO is seeded the same way
        (otherwise the pair is not paired). When on: each response is sampled with a seed of its own, a function
        of ``actor_rollout_ref.rollout.seed``, the global step, the prompt's identity (``data_source``,
        ``extra_info.index`` and the prompt itself) and the response's index in its group, carried as the request's
        ``seed`` sampling parameter (vLLM builds a generator per request from it; so does the CPU rollout), so
        the n samples of a prompt differ and none depends on timing or arrival order; GEC's choices and its
        continuation's sampling are keyed on that seed, not on verl's random uid; and verl's v1 trainer orders
        the update batch by (prompt, sample index) before it cuts mini-batches, instead of completion order.
        Off: verl's sampling as it is (vLLM: one stream per engine, or with ``rollout.full_determinism`` one seed
        per replica for every request, which gives a prompt's n samples the same tokens).
    """

    section: ClassVar[str] = "edge_seeding"
    enable: bool = True


# --- the options as docs/options.md lists them (edge_verl/options_page.py) ---


class OptionSpec(NamedTuple):
    """One option as docs/options.md lists it: its field name, type, default, the values its field declares
    (empty: any value of its type; ``__post_init__`` may say more) and its description from the class docstring."""

    name: str
    type: str
    default: Any
    allowed: str
    doc: str


# A docstring line that starts an option's description: "name: text", "a, b: text" or "a / b: text" (see _descriptions).
_DESCRIPTION = re.compile(r"([a-z_]+(?:(?:, | / )[a-z_]+)*): (.*)")


def _descriptions(cls: type) -> dict[str, str]:
    """Each field's description in ``cls``'s docstring: a line ``name: text`` at the docstring's indentation
    (or ``a, b: text`` / ``a / b: text`` for several), continued by the more indented lines below it."""
    found: dict[str, str] = {}
    names, text = None, []
    for line in [*inspect.cleandoc(cls.__doc__ or "").splitlines(), ""]:
        if names is not None and line.startswith(" ") and line.strip():
            text.append(line.strip())
            continue
        if names is not None:
            found.update(dict.fromkeys(names, " ".join(text)))
            names = None
        start = _DESCRIPTION.fullmatch(line)
        if start is not None:
            names, text = re.split(r", | / ", start.group(1)), [start.group(2)]
    return found


def _type_text(kind: Any) -> str:
    if get_origin(kind) is tuple:
        return "[" + ", ".join(_type_text(argument) for argument in get_args(kind)) + "]"
    return kind.__name__


def _allowed_text(kind: Any, optional: bool, declared: Mapping[str, Any]) -> str:
    if kind is bool:
        text = "true, false"
    elif kind is float:
        low, high, above = declared.get("low"), declared.get("high"), declared.get("above")
        if high is None:
            text = f">= {low}" if low is not None else f"> {above}" if above is not None else "any finite number"
        else:
            text = f"[{low}, {high}]" if low is not None else f"({above}, {high}]" if above is not None else f"<= {high}"
    elif kind is int:
        text = f">= {declared['low']}" if "low" in declared else "any integer"
    elif "choices" in declared:
        text = ", ".join(f"`{choice}`" for choice in declared["choices"])
    else:
        return ""
    return text + (", null" if optional else "")


def option_specs(cls: type) -> list[OptionSpec]:
    """Every field of the config class ``cls`` as docs/options.md lists it, in field order; a field its
    docstring does not describe is an error."""
    described = _descriptions(cls)
    missing = [item.name for item in fields(cls) if item.name not in described]
    if missing:
        raise ValueError(f"{cls.__name__}: no description of {missing} in its docstring ('name: text' lines)")
    specs = []
    for item in fields(cls):
        kind, optional = _field_types(cls)[item.name]
        default = item.default if item.default is not MISSING else item.default_factory()
        type_text = _type_text(kind) + (" or null" if optional else "")
        specs.append(OptionSpec(item.name, type_text, default, _allowed_text(kind, optional, item.metadata), described[item.name]))
    return specs
