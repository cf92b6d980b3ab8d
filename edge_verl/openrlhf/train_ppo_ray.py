"""OpenRLHF's ``train_ppo_ray`` with ``gepo`` and ``edge_eda``: ``python -m edge_verl.openrlhf.train_ppo_ray
<OpenRLHF's own arguments>``.

OpenRLHF builds its parser inside ``if __name__ == "__main__"`` of ``openrlhf.cli.train_ppo_ray`` and runs
the experience maker in a Ray actor. This launcher, in one process:
1. installs the patches in this process (``estimators.install``: applied as OpenRLHF's modules are imported);
2. runs OpenRLHF's own ``__main__`` (``runpy``) with three things changed for that run only: the
   ``--algo.advantage.estimator`` argument also accepts ``gepo`` and ``edge_eda``; the arguments are checked
   (``check_args``) as OpenRLHF hierarchizes them (``openrlhf.utils.config.hierarchize``, called once right
   after parsing, before OpenRLHF's own checks and before Ray); and OpenRLHF's own ``ray.init`` call in
   ``train`` gets, in its ``runtime_env``, ``EDGE_VERL_OPENRLHF`` and ``worker_process_setup_hook =
   edge_verl.openrlhf.estimators.install`` (``runtime_env_with_ours``): every Ray worker patches itself.
Nothing else of OpenRLHF's command line changes; with an estimator of its own the patches stay idle. Ray
started before the launcher (``ray.init`` already called in this process) would miss the hook: refused.
"""

from __future__ import annotations

import argparse
import os
import runpy
import sys
from pathlib import Path
from typing import Any, Optional, Sequence

from edge_verl.openrlhf.estimators import ESTIMATORS, check_run_args, install
from edge_verl.openrlhf.internals import ESTIMATOR_FLAG
from edge_verl.openrlhf.options import ENV_VAR, OpenRlhfOptions, run_options

GEC_AGENT_FILE = str(Path(__file__).with_name("gec_agent.py"))
REWARD_FILE = str(Path(__file__).with_name("reward_func.py"))
SETUP_HOOK = "edge_verl.openrlhf.estimators.install"


def check_gec_args(args: Any, options: OpenRlhfOptions) -> None:
    """With edge_verl's GEC agent file: the options file agrees with the run, and evaluation is recognisable."""
    agent = args.train.agent_func_path
    if not agent or Path(agent).resolve() != Path(GEC_AGENT_FILE).resolve():
        return
    gec = options.gec
    if gec is None:
        raise ValueError(f"--train.agent_func_path {agent} needs a 'gec' section in the {ENV_VAR} options file.")
    if gec.n_samples_per_prompt != args.rollout.n_samples_per_prompt:
        raise ValueError(
            f"{ENV_VAR} gec.n_samples_per_prompt={gec.n_samples_per_prompt} but --rollout.n_samples_per_prompt="
            f"{args.rollout.n_samples_per_prompt}: they must be equal (the group rendezvous waits for that many)."
        )
    if abs(gec.rollout_temperature - args.rollout.temperature) > 1e-9:
        raise ValueError(
            f"{ENV_VAR} gec.rollout_temperature={gec.rollout_temperature} but --rollout.temperature="
            f"{args.rollout.temperature}: they must be equal (GEC corrects only calls at the training temperature)."
        )
    if args.eval.dataset and abs(args.eval.temperature - args.rollout.temperature) < 1e-9:
        raise ValueError(
            f"--eval.temperature={args.eval.temperature} equals --rollout.temperature: OpenRLHF evaluates through the "
            "agent executor with no train/eval flag, and GEC tells evaluation (never corrected) by its temperature. "
            "Use a different --eval.temperature (the paper: 0.6 training, 0.1 evaluation)."
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


def runtime_env_with_ours(runtime_env: Optional[dict]) -> dict:
    """OpenRLHF's ``runtime_env`` plus the setup hook and the options file (as an absolute path)."""
    merged = dict(runtime_env or {})
    if merged.get("worker_process_setup_hook") not in (None, SETUP_HOOK):
        raise ValueError(
            f"runtime_env already sets worker_process_setup_hook={merged['worker_process_setup_hook']!r}; "
            f"edge_verl's launcher needs {SETUP_HOOK!r} there."
        )
    env_vars = dict(merged.get("env_vars") or {})
    if os.environ.get(ENV_VAR):
        env_vars[ENV_VAR] = str(Path(os.environ[ENV_VAR]).resolve())
    return {**merged, "env_vars": env_vars, "worker_process_setup_hook": SETUP_HOOK}


def main(argv: Optional[Sequence[str]] = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    run_options()  # a bad options file fails here, before Ray or any model
    install()
    import openrlhf.utils.config as config_module
    import ray

    if ray.is_initialized():
        raise RuntimeError("Ray is already up in this process: its workers would miss edge_verl's setup hook.")
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
        return ray_init(*args, runtime_env=runtime_env_with_ours(runtime_env), **kwargs)

    argparse.ArgumentParser.add_argument = add_argument_with_ours
    config_module.hierarchize = hierarchize_checked
    ray.init = ray_init_with_ours
    saved_argv = sys.argv
    try:
        sys.argv = ["openrlhf.cli.train_ppo_ray", *argv]
        runpy.run_module("openrlhf.cli.train_ppo_ray", run_name="__main__", alter_sys=True)
    finally:
        sys.argv = saved_argv
        argparse.ArgumentParser.add_argument = add_argument
        config_module.hierarchize = hierarchize
        ray.init = ray_init


if __name__ == "__main__":
    main()
