"""verl's vLLM rollout on vLLM's CPU build: the one adaptation vLLM's own processes need.

Entry point ``edge_verl_cpu`` of vLLM's ``vllm.general_plugins`` group: vLLM calls it in every process it
starts (API server, engine core, workers). It does nothing unless the process runs with ``EDGE_VERL_CPU=1``
and vLLM's platform is the CPU, so a GPU user's vLLM is untouched.

The adaptation: after loading a checkpoint, vLLM's CPU build repacks each unquantized linear layer's weight
for its GEMM kernels and replaces the parameter (``dispatch_cpu_unquantized_gemm(layer,
remove_weight=True)``). verl's rollout then cannot load the trainer's weights into it (``'Parameter' object
has no attribute 'weight_loader'``, then ``BufferError: cannot close exported pointers exist``). vLLM's own
per-layer flag ``_cpu_skip_gemm_dispatch`` (set by vLLM for MLA's kv_b_proj) keeps the weight and uses
``torch.nn.functional.linear``; setting it on every unquantized linear layer before that step makes the
weight sync work, at the cost of vLLM's packed CPU GEMM (a tiny model does not notice).
"""

from __future__ import annotations

from edge_verl.integration.cpu.overrides import cpu_backend_requested
from edge_verl.integration.cpu import CPU_BACKEND

WORKER_LOG_LINE = "edge_verl CPU backend: vLLM linear layers keep loadable weights (_cpu_skip_gemm_dispatch)"

def keep_linear_weights_loadable() -> None:
    """Set ``_cpu_skip_gemm_dispatch`` on every unquantized linear layer before vLLM's CPU repacking (once)."""
    from vllm.model_executor.layers import linear

    def make(original):
        def process_weights_after_loading(self, layer):
            layer._cpu_skip_gemm_dispatch = True
            return original(self, layer)

        return process_weights_after_loading

    CPU_BACKEND.wrap(linear, "UnquantizedLinearMethod.process_weights_after_loading", make)


def register() -> None:
    """The ``vllm.general_plugins`` entry point: adapt this vLLM process when the CPU backend is on."""
    if not cpu_backend_requested():
        return
    from vllm.platforms import current_platform

    if current_platform.is_cpu():
        keep_linear_weights_loadable()
        print(WORKER_LOG_LINE, flush=True)
