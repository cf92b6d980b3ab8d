"""The CPU backend: verl 0.9.1 on a machine without an accelerator, behind its own switch.

A separate ``verl.plugins`` entry point (``edge_verl_cpu`` -> ``edge_verl.integration.cpu.plugin``) that
does nothing unless the process runs with ``EDGE_VERL_CPU=1``: a GPU user imports none of the modules
below. With the switch on it registers
- ``platform``: a ``cpu`` platform in verl's PlatformRegistry (gloo collectives, no-op memory calls);
- ``hf_rollout``: an HF-generate rollout (``rollout.name=hf``) in verl's two rollout registries.
``overrides`` (no verl import) lists the Hydra overrides and environment a CPU run needs; the demo, the
recipes (``edge-verl cpu-overrides``) and the tests share it.
"""
