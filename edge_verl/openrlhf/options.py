"""Options of the OpenRLHF coupling: ONE JSON file named by the environment variable ``EDGE_VERL_OPENRLHF``.

OpenRLHF builds the reward file and the agent executor without arguments inside its vLLM Ray actors, so
their options cannot come from its command line. Every process of the coupling (the launcher, the trainer
actor, each vLLM engine) reads the same file, parsed and validated once per process (``run_options``). The
launcher (``edge_verl.openrlhf.train_ppo_ray``) reads the file once and gives every Ray worker its content
(``EDGE_VERL_OPENRLHF_OPTIONS``, in the job's ``runtime_env``): the file need only exist where the launcher
runs. Without the launcher, set either variable where Ray starts its workers.

Layout (every section optional; unknown keys are errors that name the allowed ones):
  {"reward":   {"format_policy": "strict", "timeout_s": 5, "wait_s": 120},
   "gec":      {... GecConfig's fields (``enable`` is implied by using the agent file) ...},
   "<estimator>": {... its options' fields ...},  one section per estimator of the registry ("gepo", "edge_eda", ...)
   "dump":     {"dir": "/abs/path"}}
``dump.dir`` (default none: off): the trainer writes each advantage computation of the plugin's estimators there
(``advantages_<k>.pt``: its inputs, the options it ran with and its outputs; ``estimators.dump_batch``), for
checking a run offline against the pure functions. A path on the trainer's node; about (B, A) float32 tensors a step.
The GEC agent file without a ``gec`` section runs GEC's defaults (the paper's). The executor learns the group size
and whether a call is evaluation from the launcher's rollout labels (``rollout_labels``); ``gec.n_samples_per_prompt``
and ``gec.rollout_temperature``, which earlier versions needed, are still accepted and must then equal
``--rollout.n_samples_per_prompt`` and ``--rollout.temperature`` (the launcher checks).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping, Optional

from edge_verl.algorithms.gec import GecConfig
from edge_verl.estimators import import_feature_modules
from edge_verl.estimators.base import ESTIMATORS
from edge_verl.reward.score import FORMAT_POLICIES

ENV_VAR = "EDGE_VERL_OPENRLHF"
CONTENT_ENV_VAR = "EDGE_VERL_OPENRLHF_OPTIONS"


def sections() -> tuple[str, ...]:
    """The file's sections: the reward's, GEC's, one per estimator of the registry, the dump's."""
    return ("reward", "gec", *ESTIMATORS, "dump")


def _estimator_defaults() -> dict[str, Any]:
    return {name: entry.options({}) for name, entry in ESTIMATORS.items()}


def _positive_or_none(owner: str, name: str, value: Any) -> Optional[float]:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{owner}.{name}={value!r} must be a positive number of seconds or null")
    return float(value)


def _check_keys(owner: str, values: Mapping[str, Any], allowed: set[str]) -> None:
    unknown = sorted(set(values) - allowed)
    if unknown:
        raise ValueError(f"{ENV_VAR} {owner}: unknown option(s) {unknown}; allowed: {sorted(allowed)}")


@dataclass(frozen=True)
class RewardOptions:
    """The reward file's options: ``compute_score``'s ``format_policy``, ``timeout_s`` and ``wait_s`` (None: the
    grader's defaults, 5 s and 120 s, or EDGE_VERL_REWARD_TIMEOUT / EDGE_VERL_REWARD_WAIT)."""

    format_policy: str = "strict"
    timeout_s: Optional[float] = None
    wait_s: Optional[float] = None

    def __post_init__(self) -> None:
        if self.format_policy not in FORMAT_POLICIES:
            raise ValueError(f"reward.format_policy={self.format_policy!r}; allowed: {list(FORMAT_POLICIES)}")
        object.__setattr__(self, "timeout_s", _positive_or_none("reward", "timeout_s", self.timeout_s))
        object.__setattr__(self, "wait_s", _positive_or_none("reward", "wait_s", self.wait_s))

    def score_kwargs(self) -> dict[str, Any]:
        return {"format_policy": self.format_policy, "timeout_s": self.timeout_s, "wait_s": self.wait_s}


@dataclass(frozen=True)
class DumpOptions:
    """``dump.dir``: where the trainer writes each advantage computation (None: nowhere)."""

    dir: Optional[str] = None

    def __post_init__(self) -> None:
        if self.dir is not None and (not isinstance(self.dir, str) or not self.dir):
            raise ValueError(f"dump.dir={self.dir!r} must be a non-empty path, or absent")


# GecConfig controls that have no OpenRLHF translation, with the reason given when they are asked for.
UNTRANSLATED_GEC = {
    ("injected_loss", "sft"): "OpenRLHF's actor loss has no second (NLL) term to add; use surrogate or masked",
    ("answer_source", "placebo"): "the executor sees one prompt at a time and no pool of other problems; use gold",
}


@dataclass(frozen=True)
class OpenRlhfGec:
    """GEC as the OpenRLHF agent executor runs it: ``config`` (GecConfig, validated as for verl), and optionally the
    run's group size and training temperature, which the launcher then checks against the run's."""

    config: GecConfig = field(default_factory=lambda: GecConfig(enable=True))
    n_samples_per_prompt: Optional[int] = None
    rollout_temperature: Optional[float] = None

    def __post_init__(self) -> None:
        n = self.n_samples_per_prompt
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
            raise ValueError(f"gec.n_samples_per_prompt={n!r} must be an integer >= 1 (= --rollout.n_samples_per_prompt)")
        t = self.rollout_temperature
        if t is not None and (isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t < 0):
            raise ValueError(f"gec.rollout_temperature={t!r} must be a finite number >= 0 (= --rollout.temperature)")
        for (name, value), why in UNTRANSLATED_GEC.items():
            if getattr(self.config, name) == value:
                raise ValueError(f"gec.{name}={value!r} is not available through OpenRLHF: {why}.")

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> "OpenRlhfGec":
        values = dict(values or {})
        own = {"n_samples_per_prompt", "rollout_temperature"}
        _check_keys("gec", values, own | set(GecConfig.model_fields) - {"enable"})
        n, temperature = values.pop("n_samples_per_prompt", None), values.pop("rollout_temperature", None)
        return cls(GecConfig.from_mapping({**values, "enable": True}), n, temperature)


@dataclass(frozen=True)
class OpenRlhfOptions:
    """Every option of the coupling, validated (see the module docstring); ``gec`` is None without a section;
    ``estimators``: each estimator's options by name (``options.gepo`` reads ``estimators["gepo"]``)."""

    reward: RewardOptions = field(default_factory=RewardOptions)
    gec: Optional[OpenRlhfGec] = None
    estimators: Mapping[str, Any] = field(default_factory=_estimator_defaults)
    dump: DumpOptions = field(default_factory=DumpOptions)
    source: str = ""

    def __getattr__(self, name: str) -> Any:
        estimators = self.__dict__.get("estimators")
        if estimators is not None and name in estimators:
            return estimators[name]
        raise AttributeError(f"{type(self).__name__} has no attribute or estimator section {name!r}")

    def estimator(self, name: str) -> Any:
        """The validated options of estimator ``name`` (its section, or its defaults)."""
        return self.estimators[name]

    def gec_or_default(self) -> OpenRlhfGec:
        """The ``gec`` section, or GEC's defaults (the paper's) when the file has none."""
        return self.gec or OpenRlhfGec()

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any], source: str = "") -> "OpenRlhfOptions":
        if not isinstance(values, Mapping):
            raise ValueError(f"{ENV_VAR} file {source!r} must hold a JSON object with sections {list(sections())}")
        _check_keys("file", values, set(sections()))
        reward = values.get("reward") or {}
        _check_keys("reward", reward, {f.name for f in fields(RewardOptions)})
        gec = values.get("gec")
        dump = values.get("dump") or {}
        _check_keys("dump", dump, {f.name for f in fields(DumpOptions)})
        return cls(
            reward=RewardOptions(**reward),
            gec=None if gec is None else OpenRlhfGec.from_mapping(gec),
            estimators={name: entry.options(values.get(name)) for name, entry in ESTIMATORS.items()},
            dump=DumpOptions(**dump),
            source=source,
        )


def _file_values(path: str) -> Any:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise ValueError(f"{ENV_VAR}={path!r}: cannot read it as a JSON file ({error})") from error


def options_text(path: Optional[str]) -> str:
    """The options file at ``path`` as one line of JSON (``{}`` when ``path`` is empty), validated: what the
    launcher passes to every Ray worker in ``CONTENT_ENV_VAR``."""
    if not path:
        return "{}"
    values = _file_values(path)
    OpenRlhfOptions.from_mapping(values, source=path)  # validated here, before Ray or any model
    return json.dumps(values, separators=(",", ":"))


def read_options(path: Optional[str]) -> OpenRlhfOptions:
    """The options in the JSON file at ``path``; the defaults when ``path`` is empty or None."""
    if not path:
        return OpenRlhfOptions()
    return OpenRlhfOptions.from_mapping(_file_values(path), source=str(Path(path)))


_CACHE: dict[tuple[str, str], OpenRlhfOptions] = {}


def run_options() -> OpenRlhfOptions:
    """This process's options: from ``EDGE_VERL_OPENRLHF_OPTIONS`` (the file's content, which the launcher gives
    every Ray worker) when set, else from the file ``EDGE_VERL_OPENRLHF`` names; parsed once per value."""
    key = (os.environ.get(CONTENT_ENV_VAR, ""), os.environ.get(ENV_VAR, ""))
    if key not in _CACHE:
        import_feature_modules()  # estimators of one's own have sections too
        content, path = key
        if content:
            try:
                values = json.loads(content)
            except json.JSONDecodeError as error:
                raise ValueError(f"{CONTENT_ENV_VAR} is not JSON ({error})") from error
            _CACHE[key] = OpenRlhfOptions.from_mapping(values, source=CONTENT_ENV_VAR)
        else:
            _CACHE[key] = read_options(path)
    return _CACHE[key]
