"""Several verl runs on one Ray cluster: TransferQueue's controller per Ray job, not per cluster.

verl 0.9.1's v1 trainer always starts TransferQueue (``transfer_queue.init``), whose controller is a named
actor, ``TransferQueueController``, in the fixed Ray namespace ``transfer_queue``. A second verl job on the
same cluster therefore finds the first job's controller and connects to it instead of starting its own
("Some other rank has initialized TransferQueueController"): both jobs then put and get through one
controller, and the survivor fails with TransferQueue timeouts once the other job ends and its storage goes
(measured: two 12-step runs on one cluster, the second hung at step 10 when the first exited).

In a process of the CPU backend, ``transfer_queue.interface`` is given its controller under a namespace of
the Ray job instead (``job_namespace``): every process of one run (one driver, one Ray job: the TaskRunner
and the workers it creates) finds its own controller, and runs of other jobs never see it. A run alone on
its cluster behaves as before; only the namespace's name differs.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

# TransferQueue's namespace for its named actors (transfer_queue/interface.py, 0.9.1's pinned version).
TQ_NAMESPACE = "transfer_queue"


def job_namespace() -> str:
    """``transfer_queue-<Ray job id>``: the namespace of this process's run (every actor a job creates
    shares the job's id)."""
    import ray

    return f"{TQ_NAMESPACE}-{ray.get_runtime_context().get_job_id()}"


def _per_job(kwargs: dict) -> dict:
    if kwargs.get("namespace") == TQ_NAMESPACE:
        return {**kwargs, "namespace": job_namespace()}
    return kwargs


class _RayPerJob:
    """``ray`` as ``transfer_queue.interface`` sees it: ``get_actor`` looks TransferQueue's names up in the
    job's namespace; everything else is Ray's own."""

    def __init__(self, ray_module: ModuleType):
        self._ray = ray_module

    def get_actor(self, name: str, namespace: Any = None, **kwargs: Any):
        return self._ray.get_actor(name, **_per_job({"namespace": namespace, **kwargs}))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ray, name)


class _ActorClassPerJob:
    """An actor class whose ``options(namespace=TQ_NAMESPACE)`` names its actor in the job's namespace."""

    def __init__(self, actor_class: Any):
        self._actor_class = actor_class

    def options(self, **kwargs: Any):
        return self._actor_class.options(**_per_job(kwargs))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._actor_class, name)


def patch_transfer_queue(interface: ModuleType) -> None:
    """Give ``transfer_queue.interface`` its controller per Ray job (idempotent)."""
    if isinstance(interface.ray, _RayPerJob):
        return
    interface.ray = _RayPerJob(interface.ray)
    interface.TransferQueueController = _ActorClassPerJob(interface.TransferQueueController)
