"""The verl 0.9.1 Hydra overrides that a CPU-only run needs (and why), shared by the demo and the recipes.

Plain strings, no verl import: ``edge-verl cpu-overrides`` prints them for shell recipes. The process
must also run with ``EDGE_VERL_CPU=1`` (see ``cpu_environment``), which makes the plugin register the CPU
platform and the ``hf`` rollout.
"""

from __future__ import annotations

import os

CPU_ENV_FLAG = "EDGE_VERL_CPU"


def cpu_backend_requested() -> bool:
    """True when this process asked for the CPU backend (``EDGE_VERL_CPU=1``)."""
    return os.environ.get(CPU_ENV_FLAG, "").strip().lower() in {"1", "true", "yes", "on"}


CPU_OVERRIDES: tuple[str, ...] = (
    # TransferQueue starts 1 controller + 8 storage actors of 1 CPU each and hangs on 2 cores.
    "ray_kwargs.ray_init.num_cpus=32",
    "transfer_queue.backend.SimpleStorage.num_data_storage_units=1",
    # verl schedules workers on a Ray "GPU" resource; the CPU platform answers for it.
    "+ray_kwargs.ray_init.num_gpus=1",
    "trainer.n_gpus_per_node=1",
    "trainer.nnodes=1",
    "trainer.device=cpu",
    # No FlashAttention on CPU.
    "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",
    # FSDP1 refuses CPU parameters; FSDP2 works.
    "actor_rollout_ref.actor.strategy=fsdp2",
    "actor_rollout_ref.ref.strategy=fsdp2",
    # The HF-generate rollout registered by the plugin (vLLM/SGLang need a GPU).
    "actor_rollout_ref.rollout.name=hf",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
    # verl starts 8 agent-loop and 8 reward-loop workers by default: minutes of start-up on 2 cores.
    "actor_rollout_ref.rollout.agent.num_workers=1",
    "reward.num_workers=1",
    # DataLoader worker processes only add start-up time (and get killed noisily at exit) here.
    "data.dataloader_num_workers=0",
)


def cpu_environment(base: dict[str, str] | None = None) -> dict[str, str]:
    """``base`` (default: this process's environment) plus the variables a CPU verl run needs."""
    env = dict(os.environ if base is None else base)
    env[CPU_ENV_FLAG] = "1"
    env["VERL_PLATFORM"] = "cpu"
    env.setdefault("VERL_ENGINE_DEVICE", "cuda")
    env.setdefault("RAY_DEDUP_LOGS", "1")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    return env
