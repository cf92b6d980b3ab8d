"""The plugin as this process has it: the installed distribution's version, a digest of the code it runs, the
estimators it registered and, in verl, the verl modules it hooks. ``nodes.py`` compares it across a run's Ray
nodes: a node whose plugin differs from the driver's (another version, or the same version with other code, as an
editable checkout out of sync) would run another method under the same name.

Read in the driver and, through the node probe (``nodes.node_probe``), in a worker of each node. For a verl run it
imports verl's ``core_algos`` (its import runs the registration hook, as in any trainer process) and reads verl's
registry; for an OpenRLHF run, which has no verl, the plugin's own registry.
"""

from __future__ import annotations

import hashlib
import sys
from importlib import metadata
from pathlib import Path

DISTRIBUTION = "edge-verl"
FRAMEWORKS = ("verl", "openrlhf")
PLUGIN_MODULE = "edge_verl.integration.plugin"  # verl's entry point
# The files whose content is the plugin's behaviour: its code and its Hydra configs.
CODE_SUFFIXES = (".py", ".yaml")


def plugin_version() -> str | None:
    """The installed edge-verl's version (None: no distribution of that name in this environment)."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return None


def code_digest(package_dir: Path | None = None) -> str:
    """sha256 over every code file of the package (relative path and bytes, in path order), first 16 hex digits."""
    import edge_verl

    root = Path(package_dir or Path(edge_verl.__file__).parent)
    digest = hashlib.sha256()
    for path in sorted(item for item in root.rglob("*") if item.suffix in CODE_SUFFIXES and "__pycache__" not in item.parts):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def settings_in_effect() -> dict:
    """What this process made of the plugin's settings (``EDGE_VERL_*``): the reward pool's limits, the CPU backend."""
    from edge_verl.integration.cpu.overrides import cpu_backend_requested
    from edge_verl.reward import pool

    return {
        "reward_timeout_s": pool.DEFAULT_TIMEOUT_S, "reward_wait_s": pool.DEFAULT_WAIT_S,
        "reward_workers": pool.DEFAULT_WORKERS, "reward_max_workers": pool.DEFAULT_MAX_WORKERS,
        "cpu_backend": cpu_backend_requested(),
    }


def registered_estimators(framework: str) -> list[str]:
    """The plugin's estimators this process has: those it registered in verl's registry, or (OpenRLHF) the plugin's
    own, the feature modules' (``EDGE_VERL_FEATURE_MODULES``) included."""
    from edge_verl.estimators import import_feature_modules, names

    if framework == "verl":
        from verl.trainer.ppo import core_algos  # its import runs the plugin's registration hook

        return sorted(name for name in names() if name in core_algos.ADV_ESTIMATOR_REGISTRY)
    import_feature_modules()
    return sorted(names())


def installation_report(framework: str = "verl") -> dict:
    """{"version", "digest", "estimators" (``registered_estimators``), "hooks": the verl modules the plugin hooks (an
    OpenRLHF run: none), "in_effect": ``settings_in_effect``} of this process."""
    if framework not in FRAMEWORKS:
        raise ValueError(f"framework={framework!r}; allowed: {', '.join(FRAMEWORKS)}")
    # the hooks of the plugin module verl loaded in this process (an OpenRLHF run loads none)
    plugin = sys.modules.get(PLUGIN_MODULE) if framework == "verl" else None
    hooks = sorted(plugin.HOOKS) if plugin is not None else []
    return {
        "version": plugin_version(),
        "digest": code_digest(),
        "estimators": registered_estimators(framework),
        "hooks": hooks,
        "in_effect": settings_in_effect(),
    }
