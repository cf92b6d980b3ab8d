"""A CPU platform for verl's platform registry: verl 0.9.1 ships none (it assumes CUDA or NPU).

Switched on explicitly (``EDGE_VERL_CPU=1``, which also sets ``VERL_PLATFORM=cpu``): nothing changes for a
GPU user who installs the plugin. Collectives use gloo; memory calls that only make sense for an
accelerator (empty_cache, ...) are no-ops; the memory counters report the process's resident memory
(``process_memory``), so verl's own ``perf/max_memory_allocated_gb`` is the actor worker's peak; verl still schedules its workers on a Ray "GPU"
resource, so a CPU run starts Ray with a fake ``num_gpus`` (the demo and the recipes' CPU mode do this).
"""

from __future__ import annotations

import types
from contextlib import contextmanager, nullcontext
from typing import Any, Optional

import psutil
import torch

from verl.plugin.platform import PlatformBase, PlatformRegistry

def _build_device_module() -> types.ModuleType:
    """``torch.cpu`` plus the accelerator calls verl makes on its device module, as no-ops."""
    module = types.ModuleType("edge_verl_cpu_device")
    for name in ("Event", "Stream", "current_stream", "synchronize", "is_available", "device_count"):
        setattr(module, name, getattr(torch.cpu, name))
    module.stream = lambda stream=None: nullcontext()
    module.current_device = lambda: "cpu"
    module.set_device = lambda device=None: None
    module.empty_cache = lambda: None
    module.ipc_collect = lambda: None
    module.set_per_process_memory_fraction = lambda fraction, device=None: None
    # the process's resident set (VmRSS) and its peak (VmHWM) stand for what an accelerator allocated: on CPU
    # both include the libraries (~1 GB of torch and verl), which a difference between two runs cancels
    module.memory_allocated = module.memory_reserved = lambda device=None: process_memory("VmRSS")
    module.max_memory_allocated = module.max_memory_reserved = lambda device=None: process_memory("VmHWM")
    module.reset_peak_memory_stats = lambda device=None: reset_peak_memory()
    module.get_device_name = lambda device=None: "CPU"
    module.get_rng_state = lambda device=None: torch.get_rng_state()
    module.set_rng_state = lambda state, device=None: torch.set_rng_state(state)
    module.manual_seed = torch.manual_seed
    module.manual_seed_all = torch.manual_seed

    def mem_get_info(device=None) -> tuple[int, int]:
        memory = psutil.virtual_memory()
        return memory.available, memory.total

    module.mem_get_info = mem_get_info
    return module


def process_memory(field: str) -> int:
    """This process's ``/proc/self/status`` memory field in bytes (``VmRSS``: resident now, ``VmHWM``: its
    peak since start or ``reset_peak_memory``); 0 where the kernel does not report it."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024  # kB
    except OSError:
        pass
    return 0


def reset_peak_memory() -> None:
    """Start ``VmHWM`` again from the current resident set (Linux >= 4.0: ``clear_refs`` value 5)."""
    try:
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")
    except OSError:
        pass


def patch_peak_per_pass(module: Any) -> None:
    """Reset the peak when each of verl's ``TrainingWorker`` passes starts (``verl.workers.engine_workers``), so
    that its ``perf/max_memory_allocated_gb`` is that pass's own peak (``overrides.PEAK_PER_PASS_ENV``)."""
    from edge_verl.integration.cpu import CPU_BACKEND

    def make(original):
        def reset_then_run(self, data, *args, **kwargs):
            reset_peak_memory()
            return original(self, data, *args, **kwargs)

        return reset_then_run

    for path in ("TrainingWorker.train_batch", "TrainingWorker.infer_batch"):
        CPU_BACKEND.wrap(module, path, make)


_DEVICE_MODULE = _build_device_module()


def deduplicate_backend(backend: Optional[str]) -> Optional[str]:
    """``"cpu:gloo,cpu:gloo"`` -> ``"cpu:gloo"``: verl builds ``cpu:gloo,{device}:{backend}``, which torch
    rejects when the device is the CPU itself."""
    if not backend or "," not in backend:
        return backend
    parts = list(dict.fromkeys(part.strip() for part in backend.split(",")))
    return ",".join(parts)


def patch_init_process_group() -> None:
    """Route ``torch.distributed.init_process_group`` through :func:`deduplicate_backend` (idempotent)."""
    import torch.distributed as dist

    from edge_verl.integration.cpu import CPU_BACKEND

    def make(original):
        def init_process_group(backend=None, *args, **kwargs):
            return original(deduplicate_backend(backend), *args, **kwargs)

        return init_process_group

    CPU_BACKEND.wrap(dist, "init_process_group", make)


@PlatformRegistry.register(platform="cpu")
class PlatformCPU(PlatformBase):
    """verl platform for CPU-only hosts: device "cpu", backend "gloo", no-op memory management."""

    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self) -> types.ModuleType:
        return _DEVICE_MODULE

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check: bool = False) -> bool:
        # Never auto-detected: only VERL_PLATFORM=cpu (set by EDGE_VERL_CPU=1) selects it.
        return False

    def current_device(self) -> str:
        # verl uses the "device id" as a device argument (tensor.to(get_device_id()), device_id=...);
        # an int would mean an accelerator index, so the CPU answers with its device string.
        return "cpu"

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        return None

    def synchronize(self, device_index: Optional[int] = None) -> None:
        return None

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        return None

    def empty_cache(self) -> None:
        return None

    def get_device_capability(self, device_index: int = 0) -> tuple[Optional[int], Optional[int]]:
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        # Ray sets CUDA_VISIBLE_DEVICES for the fake "GPU" resource; reading it keeps device ids consistent.
        return "CUDA_VISIBLE_DEVICES"

    @contextmanager
    def nvtx_range(self, msg: str):
        yield

    def profiler_start(self) -> None:
        return None

    def profiler_stop(self) -> None:
        return None

    def ray_resource_name(self) -> str:
        return "GPU"

    def ray_resource_options(self, num_gpus: float) -> dict[str, Any]:
        return {"num_gpus": num_gpus}

    def ray_noset_envvars(self) -> list[str]:
        return []

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self) -> Any:
        return None
