"""The plugin's tiled log-prob + entropy head (``algorithms/tiled_head.py``) behind verl's fused-kernel seam.

A run asks for it with verl's own two keys: ``actor_rollout_ref.model.use_fused_kernels=True`` and
``actor_rollout_ref.model.fused_kernel_options.impl_backend=edge_tiled`` (``tiled_head.TILED_HEAD_BACKEND``).
verl 0.9.1's FSDP engine hands that backend to ``monkey_patch.patch_forward_with_backends``, which installs the
model's fused forward; that forward computes the last hidden states and asks
``torch_functional.FusedLinearForPPO(impl_backend=model._verl_fused_kernels_backend)`` for the per-token
log-probs and entropy from them and ``lm_head.weight``. Two wrappers, nothing copied of verl's forward:
``patch_forward_with_backends`` installs verl's own torch-backend forward for ``edge_tiled`` (verl skips a
backend it does not know) and marks the model with ``edge_tiled``; ``FusedLinearForPPO`` serves that backend
with ``tiled_log_prob_entropy`` and every other as verl does. Every model type verl fuses (dense, Qwen2/3-VL,
Qwen3.5, GLM-4V) builds its head through the same class. The entropy keeps its gradient (EDA's gradient form).

verl's Megatron engine has its own fused forward (``verl.models.mcore.model_forward_fused``, Triton, CUDA
only) and, without it, ``vocab_parallel_entropy``, which keeps the float32 logits and softmax of its
vocabulary shard for the backward pass: the plugin's head is not installed there (docs/performance.md).
"""

from __future__ import annotations

import logging
from typing import Any, Callable

import torch

from edge_verl.algorithms.tiled_head import TILED_HEAD_BACKEND, tiled_log_prob_entropy
from edge_verl.integration.internals import CORE

logger = logging.getLogger(__name__)


def _make_patch_forward_with_backends(original: Callable) -> Callable:
    def patch_forward_with_backends(model, use_fused_kernels: bool = False, fused_kernels_backend: str = None):
        if fused_kernels_backend != TILED_HEAD_BACKEND or not use_fused_kernels:
            return original(model, use_fused_kernels=use_fused_kernels, fused_kernels_backend=fused_kernels_backend)
        original(model, use_fused_kernels=True, fused_kernels_backend="torch")
        model._verl_fused_kernels_backend = TILED_HEAD_BACKEND
        logger.warning("edge_verl: the tiled head computes log-probs and entropy in %s", type(model).__name__)
        return None

    return patch_forward_with_backends


def _make_fused_linear(original: type) -> type:
    class FusedLinearForPPO(original):
        """verl's ``FusedLinearForPPO``, with ``impl_backend="edge_tiled"`` served by ``tiled_log_prob_entropy``."""

        def __init__(self, chunk_size: int = 512, impl_backend: str = "torch"):
            if impl_backend != TILED_HEAD_BACKEND:
                super().__init__(chunk_size=chunk_size, impl_backend=impl_backend)
                return
            torch.nn.Module.__init__(self)  # verl's own constructor refuses a backend it does not know
            self.chunk_size, self.impl_backend = chunk_size, impl_backend

        def forward(self, hidden_states, vocab_weights, input_ids, temperature: float = 1.0):
            if self.impl_backend != TILED_HEAD_BACKEND:
                return super().forward(hidden_states, vocab_weights, input_ids, temperature)
            return tiled_log_prob_entropy(hidden_states, vocab_weights, input_ids, temperature)

    FusedLinearForPPO.__qualname__ = original.__qualname__
    FusedLinearForPPO.__module__ = original.__module__
    return FusedLinearForPPO


def patch_monkey_patch(module: Any) -> None:
    CORE.wrap(module, "patch_forward_with_backends", _make_patch_forward_with_backends)


def patch_torch_functional(module: Any) -> None:
    CORE.wrap(module, "FusedLinearForPPO", _make_fused_linear)
