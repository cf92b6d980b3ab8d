"""Validated options, one pydantic model per feature (``Options``). Defaults are the papers' values; every deviation
from the papers or their reference code is a named option whose description says why it exists.

verl users set these under ``algorithm.<section>.*`` (``+algorithm.gepo.alpha_low=0.5`` on the command line, or
without ``+`` through the Hydra config shipped in ``edge_verl/conf/``). Each option is declared once, on its field
(``option``): its default, its description, and its bounds (``ge`` / ``le`` / ``gt``) or allowed values (a
``Literal`` type). Validation checks what the field declares, with errors that name the key (``<section>.<option>``,
under verl's ``algorithm``), the value and the allowed values (pydantic's validation, worded by ``_message``); a
class's validators add what one field cannot say (a list's shape, a relation between two options); docs/options.md
prints the fields' JSON schema (``option_specs``, ``edge_verl/options_page.py``). An estimator's options live in its
module (``edge_verl/estimators/``), GEC's in ``algorithms/gec.py``; here: the base class, the extra metrics and the seeding
(its options, the keyed seeds it draws from and the two fields it adds to verl's rows).
"""

from __future__ import annotations

import functools
import hashlib
import math
import random
from typing import Any, ClassVar, Mapping, NamedTuple, Optional, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, ValidationError


def _check_finite(owner: str, name: str, value: Any, low: float | None = None, high: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{owner}.{name}={value!r} must be a finite number")
    if low is not None and value < low:
        raise ValueError(f"{owner}.{name}={value!r} must be >= {low}")
    if high is not None and value > high:
        raise ValueError(f"{owner}.{name}={value!r} must be <= {high}")
    return float(value)


def option(default: Any, *, description: str, ge: float | None = None, le: float | None = None, gt: float | None = None,
           reason: str = "") -> Any:
    """A field: its default, its description (docs/options.md) and its bounds (a number: ``ge <= value <= le``,
    ``value > gt``; an integer: ``value >= ge``); ``reason`` says why ``gt`` holds. Allowed values: a ``Literal``
    annotation."""
    return Field(default, description=description, ge=ge, le=le, gt=gt, json_schema_extra={"reason": reason} if reason else None)


# JSON schema types -> the Python types the options are declared with.
_SCHEMA_TYPES = {"number": float, "integer": int, "boolean": bool, "string": str}


class Declared(NamedTuple):
    """What a field declares, read from its class's JSON schema: its type (a Literal is ``str`` with ``choices``, a
    fixed-length list a tuple of its items' types), whether null is allowed, its bounds, the reason for ``above`` and
    its description."""

    kind: Any
    optional: bool
    low: float | None
    high: float | None
    above: float | None
    choices: tuple | None
    reason: str | None
    description: str


def _schema_kind(schema: Mapping[str, Any]) -> Any:
    if "prefixItems" in schema:
        return tuple[tuple(_schema_kind(item) for item in schema["prefixItems"])]
    return _SCHEMA_TYPES.get(schema.get("type"), object)


@functools.cache
def _properties(cls: type) -> Mapping[str, Any]:
    """The fields of the options class ``cls`` in its JSON schema, built once per class (pydantic builds the whole
    schema on every call; the options page and an error's wording read it field by field)."""
    return cls.model_json_schema()["properties"]


def declared(cls: type, name: str) -> Declared:
    """What field ``name`` of the options class ``cls`` declares (its JSON schema, as pydantic writes it)."""
    schema = _properties(cls)[name]
    branches = schema.get("anyOf", [schema])
    typed = [branch for branch in branches if branch.get("type") != "null"]
    (body,) = typed
    return Declared(
        _schema_kind(body), len(typed) < len(branches), body.get("minimum"), body.get("maximum"),
        body.get("exclusiveMinimum"), tuple(body["enum"]) if "enum" in body else None, schema.get("reason"),
        schema.get("description", ""),
    )


class Options(BaseModel):
    """Every options class's base: pydantic validates (strict types: a number is not a flag nor a string, a flag
    not a number; finite numbers only; unknown keys refused; each field's declared bounds and allowed values), and
    an error is a ``ValueError`` that names ``<section>.<option>``, the value and what is allowed (``_message``).
    ``section``: the options' section under verl's ``algorithm``."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, allow_inf_nan=False)
    section: ClassVar[str] = ""

    def __init__(self, **values: Any) -> None:
        unknown = sorted(set(values) - set(type(self).model_fields))
        if unknown:
            raise ValueError(f"{type(self).__name__}: unknown option(s) {unknown}; allowed: {sorted(type(self).model_fields)}")
        try:
            super().__init__(**values)
        except ValidationError as error:
            raise ValueError(_message(type(self), error)) from None

    @classmethod
    def from_mapping(cls, values: Optional[Mapping[str, Any]]):
        """The validated options from a plain mapping (``algorithm.<section>``; None: the defaults)."""
        return cls(**dict(values or {}))

    def to_dict(self) -> dict[str, Any]:
        """The options' values by name (``from_mapping`` reads them back)."""
        return self.model_dump()


def _message(cls: type, error: ValidationError) -> str:
    """The first error as the plugin words it: a validator's own message, else what the field allows (its
    declaration), else pydantic's, each naming the key and the value."""
    first = error.errors()[0]
    raised = (first.get("ctx") or {}).get("error")
    if isinstance(raised, Exception):
        return str(raised)
    location = tuple(first.get("loc", ()))
    key, value = ".".join(str(part) for part in location), first.get("input")
    prefix = f"{cls.section}.{key}={value!r}"
    if len(location) != 1 or location[0] not in cls.model_fields:
        return f"{prefix}: {first.get('msg')}"
    field, kind = declared(cls, str(location[0])), first.get("type")
    if field.kind is bool:
        return f"{prefix} must be true or false"
    if field.choices is not None:
        return f"{prefix}; allowed: {list(field.choices)}"
    if field.kind is int:
        at_least = f" >= {field.low}" if field.low is not None else ""
        return f"{prefix} must be an integer{at_least}{' or null' if field.optional else ''}"
    if field.kind is float:
        if kind in ("float_type", "finite_number"):
            return f"{prefix} must be a finite number"
        if kind == "greater_than_equal":
            return f"{prefix} must be >= {field.low}"
        if kind == "less_than_equal":
            return f"{prefix} must be <= {field.high}"
        if kind == "greater_than":
            why = f"{field.reason}; it " if field.reason else ""
            return f"{prefix} {why}must be > {field.above}"
    return f"{prefix}: {first.get('msg')}"


class MetricsConfig(Options):
    """Extra metrics for any estimator, verl's built-ins included (options under ``algorithm.edge_metrics``)."""

    section: ClassVar[str] = "edge_metrics"
    advantage_stats: bool = option(False, description=(
        "log ``edge_verl/adv/var`` (unbiased variance of the per-response advantages) and "
        "``edge_verl/adv/zero_variance_group_frac`` every step, whatever ``algorithm.adv_estimator`` is, so "
        "GRPO and EDGE curves are comparable (EDGE-GRPO Fig. 5). Off by default: with the plugin installed, a "
        "plain verl run logs nothing extra unless asked, and the plugin's estimators report the same two values"
        " under their own names (``edge_verl/<estimator>/adv_var_after``, ``.../zero_variance_group_frac``) at "
        "no extra cost; the recipes switch it on."
    ))
    per_source: bool = option(False, description=(
        "log every step's training statistics split by the responses' ``data_source`` (the tasks of a mixture, "
        "GEPO's setting), ``edge_verl/by_source/<data_source>/<stat>``: sampled reward and accuracy, all-wrong "
        "/ all-right / tied group fractions, response length, the sampled tokens' entropy estimate (mean -log "
        "pi_old) and, under GEPO, each source's mean group entropy and attenuated fractions "
        "(``edge_verl.estimators.base.per_source_statistics``). Off by default (one more read of the batch per "
        "step on verl's v1 trainer); ``edge-verl study`` switches it on for a mixture."
    ))


class SeedingConfig(Options):
    """Reproducible runs, options under ``algorithm.edge_seeding``: the same command gives the same run.

    The seeds are this module's keys below (``prompt_key``, ``response_seed``, ``derived_seed``):
    ``integration/rollout.py`` gives each response its own, and ``integration/v1_trainer.py``
    (``wrap_replay_buffer_sample``) orders v1's update batch by the prompt's key.
    """

    section: ClassVar[str] = "edge_seeding"
    enable: bool = option(True, description=(
        "on (default) in every run that uses the plugin; a plain verl run (GRPO) gets it with "
        "``+algorithm.edge_seeding.enable=True``, so that a baseline beside EDGE or GEPO is seeded the same way"
        " (otherwise the pair is not paired). When on: each response is sampled with a seed of its own, a "
        "function of ``actor_rollout_ref.rollout.seed``, the global step, the prompt's identity "
        "(``data_source``, ``extra_info.index`` and the prompt itself) and the response's index in its group, "
        "carried as the request's ``seed`` sampling parameter (vLLM builds a generator per request from it; so "
        "does the CPU rollout), so the n samples of a prompt differ and none depends on timing or arrival "
        "order; GEC's choices and its continuation's sampling are keyed on that seed, not on verl's random uid;"
        " and verl's v1 trainer orders the update batch by (prompt, sample index) before it cuts mini-batches, "
        "instead of completion order. Off: verl's sampling as it is (vLLM: one stream per engine, or with "
        "``rollout.full_determinism`` one seed per replica for every request, which gives a prompt's n samples "
        "the same tokens)."
    ))


# --- the seeding's keys and its two fields in verl's rows ---
#
# A random draw of a seeded run takes its seed from the run's seed and the identity of what it is drawn for (the
# training step, the prompt's identity in its data set, the response's index in its group, and a salt naming the
# draw), never from timing, arrival order, batch composition or a fresh uuid. Each key is hashed (SHA-256), so
# nearby keys give unrelated streams and two different keys collide with probability 2^-63. ``response_seed`` is
# one response's sampling seed: carried as the request's ``seed`` sampling parameter, vLLM builds a generator per
# request from it (``SamplingParams.seed``) and the CPU rollout does the same; GEC's choices and its
# continuation's sampling are keyed on it through ``derived_seed`` / ``keyed_rng`` with their own salts, so no draw
# consumes another's stream. The identity's parts come in as arguments (``integration/rollout.py`` reads them off
# verl's rows: ``data_source`` and ``extra_info.index``, verl's own per-row identity).

# The agent-loop wrapper hands each response's prompt key to the agent loop under PROMPT_KEY_FIELD, which verl's v1
# trainer stores with the sample (the update batch is sorted by it). SAMPLE_INDEX_COLUMN: the non-tensor column the
# legacy trainer's rollout gets before the batch is split across agent-loop workers, each response's index within
# its uid group (v1 passes ``session_id`` instead).
PROMPT_KEY_FIELD = "edge_verl_prompt_key"
SAMPLE_INDEX_COLUMN = "edge_verl_sample_index"

# Seeds are non-negative and below 2^63: vLLM's SamplingParams.seed and torch.Generator.manual_seed take them.
SEED_BITS = 63
TRAIN, VALIDATION = "train", "val"


def keyed_seed(*parts: Any) -> int:
    """A seed in [0, 2^63) that is a function of ``parts`` only (their ``repr``, so 1 and "1" differ)."""
    digest = hashlib.sha256("\x1f".join(repr(part) for part in parts).encode()).digest()
    return int.from_bytes(digest[:8], "little") >> (64 - SEED_BITS)


def prompt_key(run_seed: int, *, validate: bool, step: int, data_source: str, index: Any, prompt: str) -> int:
    """The key of one prompt at one step: a function of the run's seed, the split (validation draws apart from
    training's at the same step), the step and the row's identity: its ``data_source`` and ``index`` (verl's
    ``extra_info.index``) and the prompt's text, so that rows without an index still differ."""
    split = VALIDATION if validate else TRAIN
    return keyed_seed("prompt", int(run_seed), split, int(step), str(data_source), _identity(index), str(prompt))


def response_seed(prompt: int, sample_index: int) -> int:
    """The sampling seed of sample ``sample_index`` of the prompt keyed ``prompt`` (``prompt_key``)."""
    return keyed_seed("response", int(prompt), int(sample_index))


def derived_seed(seed: int, salt: str) -> int:
    """A seed for a further draw made for the same response (e.g. GEC's continuation), apart from ``seed``'s."""
    return keyed_seed("derived", int(seed), str(salt))


def keyed_rng(*parts: Any) -> random.Random:
    """A ``random.Random`` whose stream is a function of ``parts`` only (see ``keyed_seed``)."""
    return random.Random(keyed_seed(*parts))


def seed_global_generators(seed: int) -> None:
    """Python's, numpy's and torch's global generators from ``seed``: what a framework draws from them without a
    generator of its own (verl's shuffled validation loader, for one) follows the run's seed."""
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def _identity(index: Any) -> Any:
    """A row's index as an int when it is one (numpy and torch scalars included), else its text."""
    try:
        as_int = int(index)
    except (TypeError, ValueError):
        return str(index)
    return as_int if as_int == index else str(index)


# --- the options as docs/options.md lists them (edge_verl/options_page.py) ---


class OptionSpec(NamedTuple):
    """One option as docs/options.md lists it: its field name, type, default, the values its field declares
    (empty: any value of its type; the class's validators may say more) and its description."""

    name: str
    type: str
    default: Any
    allowed: str
    doc: str


def _type_text(kind: Any) -> str:
    if get_origin(kind) is tuple:
        return "[" + ", ".join(_type_text(argument) for argument in get_args(kind)) + "]"
    return kind.__name__


def _allowed_text(field: Declared) -> str:
    kind, low, high, above = field.kind, field.low, field.high, field.above
    if kind is bool:
        text = "true, false"
    elif field.choices is not None:
        text = ", ".join(f"`{choice}`" for choice in field.choices)
    elif kind is float:
        if high is None:
            text = f">= {low}" if low is not None else f"> {above}" if above is not None else "any finite number"
        else:
            text = f"[{low}, {high}]" if low is not None else f"({above}, {high}]" if above is not None else f"<= {high}"
    elif kind is int:
        text = f">= {low}" if low is not None else "any integer"
    else:
        return ""
    return text + (", null" if field.optional else "")


def option_specs(cls: type) -> list[OptionSpec]:
    """Every field of the options class ``cls`` as docs/options.md lists it, in field order, from the fields'
    metadata; a field without a description is an error."""
    missing = [name for name, info in cls.model_fields.items() if not info.description]
    if missing:
        raise ValueError(f"{cls.__name__}: no description of {missing} (option(..., description=...))")
    specs = []
    for name, info in cls.model_fields.items():
        field = declared(cls, name)
        type_text = _type_text(field.kind) + (" or null" if field.optional else "")
        specs.append(OptionSpec(name, type_text, info.default, _allowed_text(field), field.description))
    return specs
