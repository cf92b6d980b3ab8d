"""The CPU backend: verl 0.9.1 on a machine without an accelerator, behind its own switch.

A separate ``verl.plugins`` entry point (``edge_verl_cpu`` -> ``edge_verl.integration.cpu.plugin``) that
does nothing unless the process runs with ``EDGE_VERL_CPU=1``: a GPU user imports none of the modules
below. With the switch on it registers
- ``platform``: a ``cpu`` platform in verl's PlatformRegistry (gloo collectives, no-op memory calls);
- ``hf_rollout``: an HF-generate rollout (``rollout.name=hf``) in verl's two rollout registries;
- ``megatron_engine``: hooks on verl's engine constructors; building the Megatron engine applies the
  adaptations megatron-core and mbridge need on a CPU torch (the ``megatron-cpu`` extra).
``vllm_worker`` is vLLM's side (a ``vllm.general_plugins`` entry point, same switch): in vLLM's own
processes it keeps the linear weights loadable, so verl's vLLM rollout runs on vLLM's CPU build.
``overrides`` (no verl import) lists the Hydra overrides and environment a CPU run needs, per training
backend; the demo, the recipes (``edge-verl cpu-overrides --config-name``) and the tests share it.
"""
