"""One Ray cluster for all of a study's runs, ``jobs`` runs training on it at a time.

A CPU run alone leaves about half of 2 cores idle: its processes (driver, TaskRunner, actor worker, rollout
server, agent loop, reward loop) start one after another, and during a step one of them works while the
others wait (measured on 2 cores: 55% mean utilisation over a 12-step study run). Two runs at a time fill
that idle half: two 12-step GRPO runs on one cluster finished together in 119 s, against 100 s for one
alone. A run joining the cluster also skips Ray's start and shutdown (~7 s of every run's fixed cost).

Each run is still verl's own ``main_ppo`` in its own driver process, a Ray job of its own on the shared
cluster (``DemoConfig.ray_address``): its actors, logs and TransferQueue are its job's alone
(``edge_verl/integration/cpu/shared_cluster.py`` keys TransferQueue's controller by job, which verl 0.9.1
names once per cluster). The cluster runs with the environment the demo gives its runs
(``demo.run.run_environment``): a joining driver's environment does not reach its workers, which inherit the
cluster's; what differs per run (verl's metrics log) travels in the job's runtime env.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Iterator, Optional

from edge_verl_lab.demo.run import run_environment

# Logical CPUs per run, as the CPU backend asks when a run starts its own cluster (``ray_init.num_cpus``):
# TransferQueue's controller and storage actors each take one.
CPUS_PER_RUN = 32
# Runs at a time by default (``edge-verl study --jobs``): 2 fill 2 cores; each CPU run of the study's tiny model
# takes under 5 GB.
DEFAULT_JOBS = 2


def _set_environment(values: dict[str, Optional[str]]) -> None:
    """Set each variable of ``values`` in this process's environment, or remove it where its value is None."""
    for name, value in values.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@contextmanager
def study_cluster(jobs: int, rollout: str = "hf") -> Iterator[str]:
    """A local Ray cluster sized for ``jobs`` concurrent runs (one logical GPU each), started by this process
    with a demo run's environment (``run_environment``) and stopped on exit; yields its address for
    ``DemoConfig.ray_address``."""
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"jobs={jobs!r} must be an integer >= 1")
    import ray

    if ray.is_initialized():
        raise RuntimeError("study_cluster: this process is already connected to a Ray cluster")
    wanted = run_environment(rollout)  # the raylet, and every worker it starts, inherit this environment
    before = {name: os.environ.get(name) for name in set(wanted) | set(os.environ) if os.environ.get(name) != wanted.get(name)}
    _set_environment({name: wanted.get(name) for name in before})
    try:
        context = ray.init(num_cpus=CPUS_PER_RUN * jobs, num_gpus=jobs, include_dashboard=False, log_to_driver=False)
    finally:
        _set_environment(before)
    try:
        yield context.address_info["gcs_address"]
    finally:
        ray.shutdown()
