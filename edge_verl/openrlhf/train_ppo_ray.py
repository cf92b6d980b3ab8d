"""OpenRLHF's ``train_ppo_ray`` with ``gepo`` and ``edge_eda``: ``python -m edge_verl.openrlhf.train_ppo_ray
<OpenRLHF's own arguments>``.

OpenRLHF builds its parser inside ``if __name__ == "__main__"`` of ``openrlhf.cli.train_ppo_ray``. This
launcher runs that ``__main__`` (``runpy``) in its own process with, for that run only:
- ``--algo.advantage.estimator`` also accepting every estimator of the registry (``gepo``, ``edge_eda``, and those
  of the modules ``EDGE_VERL_FEATURE_MODULES`` names, which every worker imports too);
- the arguments checked (``check_args``) as OpenRLHF hierarchizes them (``openrlhf.utils.config.hierarchize``,
  called once right after parsing, before OpenRLHF's own checks and before Ray);
- edge_verl's actor classes in the place of OpenRLHF's ``PPOTrainer``, ``PPOTrainerAsync`` and
  ``PolicyModelActor`` (``actors.actor_classes``): Ray creates them in its workers, nothing is patched there;
- the options file's content in the ``runtime_env`` of OpenRLHF's ``ray.init`` (``EDGE_VERL_OPENRLHF_OPTIONS``,
  ``runtime_env_with_ours``) with every other ``EDGE_VERL_*`` setting of the launcher's environment, so every worker
  reads the same options and settings wherever it runs;
- right after that ``ray.init``, every node of the cluster checked to run the launcher's edge_verl with the job's
  settings, the nodes watched while the run trains and the placement printed at the end (``nodes.guard_run``,
  docs/multinode.md).
Nothing else of OpenRLHF's command line changes; with an estimator of its own, OpenRLHF's code runs. Ray
started before the launcher (``ray.init`` already called in this process) would not pass the options: refused;
so is any OpenRLHF but the pinned one, before any of its modules is imported (``check_installed_version``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import runpy
import sys
from pathlib import Path
from typing import Any, Iterator, Optional, Sequence

from edge_verl.estimators import import_feature_modules
from edge_verl.estimators.base import ESTIMATORS
from edge_verl.nodes import guard_run, submitted_env_vars, travelling_settings
from edge_verl.openrlhf.estimators import check_run_args
from edge_verl.openrlhf.internals import ESTIMATOR_FLAG, check_installed_version
from edge_verl.openrlhf.options import CONTENT_ENV_VAR, ENV_VAR, OpenRlhfOptions, options_text, run_options
from edge_verl.openrlhf.rollout_labels import GEC_AGENT_FILE, uses_gec_agent  # noqa: F401  (GEC_AGENT_FILE: re-exported, see __main__)

REWARD_FILE = str(Path(__file__).with_name("reward_func.py"))


def check_gec_args(args: Any, options: OpenRlhfOptions) -> None:
    """With edge_verl's GEC agent file: what the options file says of the run agrees with it. Evaluation needs no
    check: the trainer marks its calls (``rollout_labels``), at any temperature."""
    if not uses_gec_agent(args):
        return
    gec = options.gec_or_default()
    if gec.n_samples_per_prompt is not None and gec.n_samples_per_prompt != args.rollout.n_samples_per_prompt:
        raise ValueError(
            f"{ENV_VAR} gec.n_samples_per_prompt={gec.n_samples_per_prompt} but --rollout.n_samples_per_prompt="
            f"{args.rollout.n_samples_per_prompt}: drop the option (the executor is told the group size) or make them equal."
        )
    if gec.rollout_temperature is not None and abs(gec.rollout_temperature - args.rollout.temperature) > 1e-9:
        raise ValueError(
            f"{ENV_VAR} gec.rollout_temperature={gec.rollout_temperature} but --rollout.temperature="
            f"{args.rollout.temperature}: drop the option (no longer needed) or make them equal."
        )
    if args.algo.advantage.is_correction_level != "off":
        raise ValueError(
            f"--algo.advantage.is_correction_level={args.algo.advantage.is_correction_level}: GEC's injected tokens "
            "have no rollout log-probs; leave it off."
        )


def check_args(args: Any, options: Optional[OpenRlhfOptions] = None) -> None:
    """Every check of the coupling on OpenRLHF's hierarchized arguments."""
    options = run_options() if options is None else options
    check_run_args(args, options)
    check_gec_args(args, options)


def launcher_options() -> str:
    """The run's options as JSON text, validated: the file ``EDGE_VERL_OPENRLHF`` names, else the content of
    ``EDGE_VERL_OPENRLHF_OPTIONS``, else none (``{}``); both set and different is an error."""
    path, content = os.environ.get(ENV_VAR), os.environ.get(CONTENT_ENV_VAR)
    if path:
        text = options_text(path)
        if content and content != text:
            raise ValueError(f"{CONTENT_ENV_VAR} is set and differs from the file {ENV_VAR} names: unset one of them.")
        return text
    if content:
        run_options()  # validated
        return content
    return "{}"


def runtime_env_with_ours(runtime_env: Optional[dict], options: str) -> dict:
    """OpenRLHF's ``runtime_env`` plus, in its env_vars, the launcher's plugin settings (``EDGE_VERL_*``: estimators
    of one's own, the reward's limits, the CPU stand-in, ...) and the options' content (``options``: ``options_text``)."""
    merged = dict(runtime_env or {})
    # every setting, the options file's path among them (a worker reads the content, which wins): a local cluster's
    # raylet inherits the launcher's environment, and every node must see the job's settings (nodes.check_nodes);
    # none that a submitted job's runtime env already sets (Ray refuses a variable set twice)
    submitted = submitted_env_vars()
    ours = {name: value for name, value in {**travelling_settings(), CONTENT_ENV_VAR: options}.items() if name not in submitted}
    return {**merged, "env_vars": {**(merged.get("env_vars") or {}), **ours}}


@contextlib.contextmanager
def attributes_set(values: dict[tuple[Any, str], Any]) -> Iterator[None]:
    """Within the block, each (object, attribute) of ``values`` is set to its value; restored after."""
    saved = {(owner, attribute): getattr(owner, attribute) for owner, attribute in values}
    try:
        for (owner, attribute), value in values.items():
            setattr(owner, attribute, value)
        yield
    finally:
        for (owner, attribute), value in saved.items():
            setattr(owner, attribute, value)


def main(argv: Optional[Sequence[str]] = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    check_installed_version()  # before any OpenRLHF module is imported: a moved module would fail less clearly
    import_feature_modules()
    options = launcher_options()  # bad options fail here, before Ray or any model
    os.environ[CONTENT_ENV_VAR] = options  # this process reads them as its workers will
    import openrlhf.utils.config as config_module
    import ray

    from edge_verl.openrlhf.actors import actor_classes

    if ray.is_initialized():
        raise RuntimeError("Ray is already up in this process: its workers would miss edge_verl's options.")
    add_argument, hierarchize, ray_init = argparse.ArgumentParser.add_argument, config_module.hierarchize, ray.init

    def add_argument_with_ours(self, *names, **kwargs):
        if ESTIMATOR_FLAG in names and "choices" in kwargs:
            kwargs["choices"] = [*kwargs["choices"], *ESTIMATORS]
        return add_argument(self, *names, **kwargs)

    def hierarchize_checked(args):
        nested = hierarchize(args)
        check_args(nested)
        return nested

    def ray_init_with_ours(*args, runtime_env=None, **kwargs):
        context = ray_init(*args, runtime_env=runtime_env_with_ours(runtime_env, options), **kwargs)
        guard_run("openrlhf")  # every node runs this edge_verl with these settings, before OpenRLHF creates an actor
        return context

    for_the_run = {
        (argparse.ArgumentParser, "add_argument"): add_argument_with_ours,
        (config_module, "hierarchize"): hierarchize_checked,
        (ray, "init"): ray_init_with_ours,
        (sys, "argv"): ["openrlhf.cli.train_ppo_ray", *argv],
        **actor_classes(),
    }
    with attributes_set(for_the_run):
        runpy.run_module("openrlhf.cli.train_ppo_ray", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
