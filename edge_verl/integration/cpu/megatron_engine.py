"""verl's Megatron engine on a CPU torch: the adaptations megatron-core 0.16.1 and mbridge 0.15.1 need.

Applied by ``apply_megatron_cpu_adaptations`` when, and only when, a process that runs with the CPU backend
(``EDGE_VERL_CPU=1``) builds verl's ``MegatronEngine`` (``plugin.register_cpu_backend`` hooks the engine's
constructor). Importing megatron is not enough: once megatron-core is installed, verl's engine registry
imports it in every worker, FSDP runs included, and those stay untouched. A GPU run never gets here.

Every attribute an adaptation touches is in the CPU backend's table (``edge_verl.integration.cpu.CPU_BACKEND``;
the internals test and ``edge-verl doctor`` check that every one still exists). Most answer CUDA-only calls with their CPU equivalent, process-wide in
the Megatron worker (megatron makes them from hundreds of places):
- ``torch.cuda`` queries (current_device, RNG, streams, events, memory, nvtx) -> the CPU's;
- tensors created or moved with device "cuda", ``cuda:N`` or an accelerator index -> the CPU;
- ``Tensor.type()`` (megatron's optimizer accepts only ``torch.cuda.*Tensor`` names) -> the CUDA name;
- megatron's tensor-parallel RNG tracker -> the CPU generator, seeded (verl skips it without an accelerator);
- mbridge's Transformer Engine layer spec -> megatron's local layers, with their norm weights' HF names;
- megatron's local attention given verl's 2-D padding mask -> the causal mask alone;
- megatron's distributed optimizer without apex -> its state initialised before a resume loads it.
"""

from __future__ import annotations

import functools
import logging
from contextlib import nullcontext
from types import SimpleNamespace
from typing import Any, Callable

import torch

from edge_verl.integration.cpu import CPU_BACKEND, CUDA_QUERIES, TENSOR_FACTORIES, TORCH_FACTORIES

logger = logging.getLogger(__name__)
ENGINE_LOG_PREFIX = "edge_verl CPU backend: training engine"

_APPLIED: list[str] = []


def is_cuda_device(device: Any) -> bool:
    """True for what megatron passes to mean its GPU: "cuda", "cuda:N", torch.device("cuda"), an int index."""
    if isinstance(device, torch.device):
        return device.type == "cuda"
    if isinstance(device, str):
        return device.split(":", 1)[0] == "cuda"
    return isinstance(device, int) and not isinstance(device, bool)


def cpu_device(device: Any) -> Any:
    """``device`` with every CUDA meaning replaced by the CPU."""
    return torch.device("cpu") if is_cuda_device(device) else device


def _on_cpu(function: Callable) -> Callable:
    """``function`` with a CUDA ``device=`` keyword sent to the CPU."""

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        if "device" in kwargs:
            kwargs["device"] = cpu_device(kwargs["device"])
        return function(*args, **kwargs)

    return wrapper


# -- torch --------------------------------------------------------------------------------------------

def _patch_tensor_creation() -> None:
    """Creation and moves with a CUDA device land on the CPU (megatron writes ``device="cuda"`` and
    ``device=torch.cuda.current_device()`` in ~80 places, e.g. its optimizer's ``torch.tensor([1.0],
    device="cuda")``)."""
    for name in TORCH_FACTORIES:
        CPU_BACKEND.wrap(torch, name, _on_cpu)
    for name in TENSOR_FACTORIES:
        CPU_BACKEND.wrap(torch, f"Tensor.{name}", _on_cpu)

    def make_to(original):
        def to(self, *args, **kwargs):
            if args and is_cuda_device(args[0]):
                args = (torch.device("cpu"), *args[1:])
            if "device" in kwargs:
                kwargs["device"] = cpu_device(kwargs["device"])
            return original(self, *args, **kwargs)

        return to

    CPU_BACKEND.wrap(torch, "Tensor.to", make_to)
    CPU_BACKEND.wrap(torch.nn, "Module.to", make_to)
    CPU_BACKEND.wrap(torch, "Tensor.cuda", lambda original: lambda self, *args, **kwargs: self)
    CPU_BACKEND.wrap(torch.nn, "Module.cuda", lambda original: lambda self, *args, **kwargs: self)

    def make_type(original):
        # megatron's optimizers accept parameters only under CUDA type names ("torch.cuda.BFloat16Tensor").
        def type_(self, *args, **kwargs):
            name = original(self, *args, **kwargs)
            if args or kwargs or not isinstance(name, str) or self.device.type != "cpu":
                return name
            return name.replace("torch.", "torch.cuda.", 1)

        return type_

    CPU_BACKEND.wrap(torch, "Tensor.type", make_type)


def _seed_cpu(seed: int) -> None:
    # torch.manual_seed calls torch.cuda.manual_seed_all: seeding through it from the patched
    # torch.cuda.manual_seed_all would recurse.
    torch.default_generator.manual_seed(int(seed))


class _NoOpEvent:
    def __init__(self, *args, **kwargs):
        pass

    def record(self, *args, **kwargs):
        return None

    def wait(self, *args, **kwargs):
        return None

    def synchronize(self):
        return None

    def query(self):
        return True

    def elapsed_time(self, other):
        return 0.0


def _patch_torch_cuda() -> None:
    """``torch.cuda`` queries megatron makes, answered for the CPU. ``is_available`` and ``device_count``
    keep their CPU answers (False, 0), so libraries that pick a device still pick the CPU."""
    answers = {
        "current_device": lambda: torch.device("cpu"),
        "set_device": lambda device=None: None,
        "synchronize": lambda device=None: None,
        "empty_cache": lambda: None,
        "get_rng_state": lambda device="cuda": torch.get_rng_state(),
        "set_rng_state": lambda new_state, device="cuda": torch.set_rng_state(new_state),
        "manual_seed": lambda seed: _seed_cpu(seed),
        "manual_seed_all": lambda seed: _seed_cpu(seed),
        "current_stream": lambda device=None: None,
        "default_stream": lambda device=None: None,
        "stream": lambda stream=None: nullcontext(),
        "Event": _NoOpEvent,
        "memory_allocated": lambda device=None: 0,
        "memory_reserved": lambda device=None: 0,
        "max_memory_allocated": lambda device=None: 0,
        "max_memory_reserved": lambda device=None: 0,
        "reset_peak_memory_stats": lambda device=None: None,
        "memory_stats": lambda device=None: {},
        "nvtx": SimpleNamespace(range_push=lambda *a, **k: None, range_pop=lambda *a, **k: None,
                                range=lambda *a, **k: nullcontext(), mark=lambda *a, **k: None),
    }
    assert set(answers) == set(CUDA_QUERIES)
    for name, answer in answers.items():
        CPU_BACKEND.wrap(torch.cuda, name, lambda original, answer=answer: answer)


# -- megatron -----------------------------------------------------------------------------------------


def _patch_megatron_rng() -> None:
    """megatron's tensor-parallel RNG tracker keeps CUDA generator states; on CPU it keeps the CPU's."""
    from megatron.core.tensor_parallel import random as tp_random

    CPU_BACKEND.wrap(tp_random, "_get_cuda_rng_state", lambda original: lambda device="cuda", clone=False, graph_safe=False: torch.get_rng_state())
    CPU_BACKEND.wrap(tp_random, "_set_cuda_rng_state", lambda original: lambda new_state, device=-1, graph_safe=False: torch.set_rng_state(new_state))
    # The tracker's fork warns when the CPU generator moved inside it: here the "CUDA" generator IS the
    # CPU's, so it always moves. That warning says nothing on CPU; every other message stays.
    logging.getLogger(tp_random.__name__).addFilter(
        lambda record: record.getMessage() != "CPU RNG state changed within GPU RNG context"
    )


def _patch_seed(transformer_impl) -> None:
    """verl's ``set_random_seed`` seeds megatron's RNG tracker only with an accelerator; without one,
    building a VocabParallelEmbedding fails ("cuda rng state model-parallel-rng is not added")."""

    def make(original):
        def set_random_seed(seed):
            original(seed)
            from megatron.core import tensor_parallel

            tensor_parallel.model_parallel_cuda_manual_seed(seed)

        return set_random_seed

    CPU_BACKEND.wrap(transformer_impl, "set_random_seed", make)


def _patch_local_attention() -> None:
    """verl's padded (bshd) Megatron forward passes a 2-D [batch, seq] padding mask, which Transformer
    Engine ignores under causal masking and megatron's local attention cannot broadcast. verl removes
    left padding first (``preprocess_bshd``), so the causal mask already hides every padded key from every
    real query: the 2-D mask is dropped, after checking the sequences are right-padded."""
    from megatron.core.transformer import dot_product_attention
    from megatron.core.transformer.enums import AttnMaskType

    def make(original):
        def forward(self, query, key, value, attention_mask, *args, **kwargs):
            mask_type = kwargs.get("attn_mask_type") or self.attn_mask_type
            if attention_mask is not None and attention_mask.dim() == 2 and mask_type == AttnMaskType.causal:
                kept = attention_mask.bool()
                if kept.shape[1] > 1 and bool((kept[:, 1:] & ~kept[:, :-1]).any()):
                    raise ValueError("edge_verl CPU Megatron: a 2-D attention mask with left padding cannot be dropped")
                attention_mask = None
            return original(self, query, key, value, attention_mask, *args, **kwargs)

        return forward

    CPU_BACKEND.wrap(dot_product_attention, "DotProductAttention.forward", make)


def _patch_distributed_optimizer_resume() -> None:
    """Without apex or Transformer Engine, megatron's DistributedOptimizer reads Adam's ``step`` from the
    torch optimizer state, which is empty in a fresh process, so a resume fails (``assert len(steps) ==
    1`` in ``state_dict``). Before a resume builds the sharded state dict, the state is initialised with
    megatron's own dummy values (``_init_optimizer_states_with_dummy_values``, as its fsdp_dtensor path
    does); loading then replaces them."""
    from megatron.core.optimizer import distrib_optimizer

    def make(original):
        def sharded_state_dict(self, model_sharded_state_dict, is_loading=False, *args, **kwargs):
            if is_loading and not self.optimizer.state:
                self._init_optimizer_states_with_dummy_values()
            return original(self, model_sharded_state_dict, is_loading, *args, **kwargs)

        return sharded_state_dict

    CPU_BACKEND.wrap(distrib_optimizer, "DistributedOptimizer.sharded_state_dict", make)


# -- mbridge ------------------------------------------------------------------------------------------

# megatron's local layers keep the norms as modules; Transformer Engine fuses them into the next linear.
LOCAL_TO_TE_NAMES = {
    ".input_layernorm.weight": ".self_attention.linear_qkv.layer_norm_weight",
    ".pre_mlp_layernorm.weight": ".mlp.linear_fc1.layer_norm_weight",
}


def _patch_mbridge() -> None:
    """mbridge builds Transformer Engine layers (``use_transformer_engine=True`` hard-coded) and only knows
    their fused norm weight names: build megatron's local layers, and name their norms as TE's."""
    from mbridge.core import bridge, llm_bridge

    def make_spec(original):
        def get_gpt_decoder_block_spec(config, use_transformer_engine=True, *args, **kwargs):
            return original(config, False, *args, **kwargs)

        return get_gpt_decoder_block_spec

    CPU_BACKEND.wrap(llm_bridge, "get_gpt_decoder_block_spec", make_spec)

    def make_mapping(original):
        def mapping(self, mcore_weights_name: str) -> list[str]:
            for local, fused in LOCAL_TO_TE_NAMES.items():
                if mcore_weights_name.endswith(local):
                    mcore_weights_name = mcore_weights_name[: -len(local)] + fused
                    break
            return original(self, mcore_weights_name)

        return mapping

    CPU_BACKEND.wrap(bridge, "Bridge._weight_name_mapping_mcore_to_hf", make_mapping)


def apply_megatron_cpu_adaptations(transformer_impl) -> list[str]:
    """Apply every adaptation once per process; returns their names (in order)."""
    if _APPLIED:
        return list(_APPLIED)
    steps = (
        ("torch.cuda queries -> CPU", _patch_torch_cuda),
        ("CUDA tensor creation/moves -> CPU, Tensor.type() CUDA names", _patch_tensor_creation),
        ("megatron tensor-parallel RNG tracker -> CPU generator", _patch_megatron_rng),
        ("verl set_random_seed seeds megatron's RNG tracker", lambda: _patch_seed(transformer_impl)),
        ("megatron local attention: causal mask for verl's 2-D padding mask", _patch_local_attention),
        ("megatron DistributedOptimizer: optimizer state initialised before a resume", _patch_distributed_optimizer_resume),
        ("mbridge: megatron local layer spec + norm weight names", _patch_mbridge),
    )
    for name, step in steps:
        step()
        _APPLIED.append(name)
    return list(_APPLIED)


def hook_megatron_engine(transformer_impl) -> None:
    """Make verl's ``MegatronEngine`` apply the adaptations (and log that it runs) when it is built."""

    def make(original):
        def __init__(self, *args, **kwargs):
            applied = apply_megatron_cpu_adaptations(transformer_impl)
            from megatron.core.package_info import __version__ as mcore_version

            engine_config = kwargs.get("engine_config", args[1] if len(args) > 1 else None)
            print(
                f"{ENGINE_LOG_PREFIX}=megatron ({type(self).__name__}, megatron-core {mcore_version}, "
                f"TP={getattr(engine_config, 'tensor_model_parallel_size', '?')} "
                f"PP={getattr(engine_config, 'pipeline_model_parallel_size', '?')}); "
                f"adaptations: {'; '.join(applied)}",
                flush=True,
            )
            original(self, *args, **kwargs)

        return __init__

    CPU_BACKEND.wrap(transformer_impl, "MegatronEngine.__init__", make)


def hook_fsdp_engine(transformer_impl) -> None:
    """Log that verl's FSDP engine runs (the counterpart of the Megatron line, for tests and users)."""

    def make(original):
        def __init__(self, *args, **kwargs):
            print(f"{ENGINE_LOG_PREFIX}=fsdp ({type(self).__name__})", flush=True)
            original(self, *args, **kwargs)

        return __init__

    CPU_BACKEND.wrap(transformer_impl, "FSDPEngine.__init__", make)
