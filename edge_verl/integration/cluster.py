"""verl's side of a run across Ray nodes (``edge_verl/nodes.py`` holds the checks; docs/multinode.md the user's page),
in verl's driver (``main_ppo``'s process):

- **Settings travel** (``runtime_env_with_settings``): every ``EDGE_VERL_*`` variable of the driver's environment
  that a submitted job's runtime env does not already carry (``nodes.settings_to_pass``) joins the job's Ray
  ``runtime_env`` (verl's default one, under the user's ``ray_kwargs.ray_init.runtime_env``, which wins), so every
  worker of the run, on any node, reads the driver's value. For every run, as a worker on the driver's own node
  would have inherited it.
- **Checked and watched** (``arm``, runs that use the plugin): right after ``ray.init`` every node is probed, the
  nodes are watched while the run trains and the placement is printed at the end (``nodes.guard_run``).

The checks hang on Ray's post-init hook, armed from the preflight's place right after verl's ``validate_config``:
verl's ``run_ppo`` lives in ``main_ppo``, which a run executes as ``__main__``, out of a post-import hook's reach,
and ``ray.init`` is the first moment the cluster can be asked.
"""

from __future__ import annotations

from typing import Any, Callable

from edge_verl.integration.internals import CORE
from edge_verl.integration.run import plugin_in_use
from edge_verl.nodes import guard_run, settings_to_pass


def runtime_env_with_settings(original: Callable) -> Callable:
    """verl's ``get_ppo_ray_runtime_env`` with the driver's settings among its ``env_vars``."""

    def get_ppo_ray_runtime_env(*args, **kwargs):
        runtime_env = original(*args, **kwargs)
        env_vars = runtime_env.setdefault("env_vars", {})
        for name, value in settings_to_pass().items():
            env_vars.setdefault(name, value)
        return runtime_env

    return get_ppo_ray_runtime_env


def _after_ray_init() -> None:
    """Ray's post-init hook in the driver of a run that uses the plugin (once)."""
    post_init_hooks().remove(_after_ray_init)
    guard_run("verl")


def post_init_hooks() -> list:
    """Ray's functions run at the end of every successful ``ray.init`` (internals.CORE reads the list)."""
    from ray._private import worker

    return worker._post_init_hooks


def arm(config: Any) -> None:
    """In verl's driver, before ``ray.init``: a run that uses the plugin gets ``_after_ray_init`` right after it."""
    if plugin_in_use(config.algorithm) and _after_ray_init not in post_init_hooks():
        post_init_hooks().append(_after_ray_init)


def patch_constants(module: Any) -> None:
    """verl's driver builds the job's runtime env with ``get_ppo_ray_runtime_env``: the plugin's settings join it."""
    CORE.wrap(module, "get_ppo_ray_runtime_env", runtime_env_with_settings)
