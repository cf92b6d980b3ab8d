"""Entry point ``edge_verl_cpu`` of the ``verl.plugins`` group: registers the CPU backend in this verl
process when, and only when, it runs with ``EDGE_VERL_CPU=1`` (see ``edge_verl.integration.cpu``)."""

from __future__ import annotations

import os
import sys

from edge_verl.integration.cpu.overrides import PEAK_PER_PASS_ENV, UNUSED_ENV, cpu_backend_requested, cpu_threads


def hide_unused_packages() -> None:
    """``EDGE_VERL_CPU_UNUSED``: the packages this run does not use, made unimportable in this process
    before verl imports them (see ``overrides.UNUSED_ENV``); a package already imported stays."""
    for name in filter(None, (part.strip() for part in os.environ.get(UNUSED_ENV, "").split(","))):
        sys.modules.setdefault(name, None)


def fix_thread_count() -> None:
    """torch's intra-op threads in this process: ``cpu_threads()``, whatever Ray or the host would pick. A
    matmul's last bits can depend on how many threads split it, so a run's numbers must not depend on the
    cores a scheduler gave each process (``overrides.THREADS_ENV``)."""
    import torch

    torch.set_num_threads(cpu_threads())


def register_cpu_backend() -> None:
    """CPU platform (gloo) + HF rollout in verl's registries; Megatron's CPU adaptations when its engine is built."""
    hide_unused_packages()
    fix_thread_count()
    os.environ.setdefault("VERL_PLATFORM", "cpu")
    # verl's engine registry keys the FSDP engine by device "cuda"; the engine itself follows the platform.
    os.environ.setdefault("VERL_ENGINE_DEVICE", "cuda")
    from verl.workers.rollout import base as rollout_base
    from verl.workers.rollout.replica import RolloutReplicaRegistry

    from edge_verl.integration.cpu import hf_rollout, megatron_engine, platform, replay_buffer, shared_cluster  # platform registers "cpu"
    from wrapt import register_post_import_hook

    platform.patch_init_process_group()
    # Megatron's CPU adaptations apply when verl builds its Megatron engine in this process, not on import.
    register_post_import_hook(megatron_engine.hook_megatron_engine, "verl.workers.engine.megatron.transformer_impl")
    register_post_import_hook(megatron_engine.hook_fsdp_engine, "verl.workers.engine.fsdp.transformer_impl")
    if os.environ.get(PEAK_PER_PASS_ENV, "").strip() == "1":
        register_post_import_hook(platform.patch_peak_per_pass, "verl.workers.engine_workers")
    # Several runs on one Ray cluster (the study's --jobs): TransferQueue's controller per run.
    register_post_import_hook(shared_cluster.patch_transfer_queue, "transfer_queue.interface")
    register_post_import_hook(replay_buffer.patch_replay_buffer, "verl.trainer.ppo.v1.replay_buffer")
    rollout_base._ROLLOUT_REGISTRY[(hf_rollout.ROLLOUT_NAME, "async")] = f"{hf_rollout.__name__}.HFServerAdapter"
    RolloutReplicaRegistry.register(hf_rollout.ROLLOUT_NAME, lambda: hf_rollout.HFRolloutReplica)


if cpu_backend_requested():
    register_cpu_backend()
