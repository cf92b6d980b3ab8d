"""The CPU backend: verl 0.9.1 on a machine without an accelerator, behind its own switch.

A separate ``verl.plugins`` entry point (``edge_verl_cpu`` -> ``edge_verl.integration.cpu.plugin``) that
does nothing unless the process runs with ``EDGE_VERL_CPU=1``: a GPU user imports none of the modules
below. With the switch on it registers
- ``platform``: a ``cpu`` platform in verl's PlatformRegistry (gloo collectives, no-op memory calls);
- ``hf_rollout``: an HF-generate rollout (``rollout.name=hf``) in verl's two rollout registries;
- ``replay_buffer``: the v1 trainer's look for finished rollouts every 50 ms (verl's 2 s tick was a large share of
  a CPU step);
- ``megatron_engine``: hooks on verl's engine constructors; building the Megatron engine applies the
  adaptations megatron-core and mbridge need on a CPU torch (the ``megatron-cpu`` extra).
``vllm_worker`` is vLLM's side (a ``vllm.general_plugins`` entry point, same switch): in vLLM's own
processes it keeps the linear weights loadable, so verl's vLLM rollout runs on vLLM's CPU build.
``overrides`` (no verl import) lists the Hydra overrides and environment a CPU run needs, per training
backend; the demo, the recipes (``edge-verl cpu-overrides --config-name``) and the tests share it.
"""

from edge_verl.integration.internals import PatchTable

TORCH_FACTORIES = (
    "tensor", "as_tensor", "empty", "zeros", "ones", "full", "arange", "rand", "randn", "randint",
    "randperm", "linspace", "eye", "empty_like", "zeros_like", "ones_like", "full_like", "empty_strided",
)
TENSOR_FACTORIES = ("new_tensor", "new_empty", "new_zeros", "new_ones", "new_full")
# torch.cuda queries megatron makes, answered for the CPU in the Megatron worker (megatron_engine).
CUDA_QUERIES = (
    "current_device", "set_device", "synchronize", "empty_cache", "get_rng_state", "set_rng_state", "manual_seed",
    "manual_seed_all", "current_stream", "default_stream", "stream", "Event", "memory_allocated", "memory_reserved",
    "max_memory_allocated", "max_memory_reserved", "reset_peak_memory_stats", "memory_stats", "nvtx",
)

# Every attribute the CPU backend patches or relies on (see edge_verl.integration.internals). Entries of
# torch.cuda, megatron, mbridge and vLLM are checked where those packages are installed: they are the CPU
# backend's optional packages (the megatron-cpu extra, vLLM's CPU build), absent from a plain install.
CPU_BACKEND = PatchTable(
    layer="CPU backend",
    optional=("megatron", "mbridge", "vllm"),
    patched={
        "torch.distributed": {"init_process_group": ("backend",)},  # platform: "cpu:gloo,cpu:gloo" -> "cpu:gloo"
        # megatron_engine: CUDA devices -> the CPU, in the Megatron worker only
        "torch": {
            **{name: () for name in TORCH_FACTORIES},
            **{f"Tensor.{name}": () for name in (*TENSOR_FACTORIES, "to", "cuda", "type")},
        },
        "torch.nn": {"Module.to": (), "Module.cuda": ()},
        "torch.cuda": {name: () for name in CUDA_QUERIES},
        "megatron.core.tensor_parallel.random": {
            "_get_cuda_rng_state": ("device", "clone", "graph_safe"),
            "_set_cuda_rng_state": ("new_state", "device", "graph_safe"),
        },
        "megatron.core.transformer.dot_product_attention": {
            "DotProductAttention.forward": ("self", "query", "key", "value", "attention_mask"),
        },
        "megatron.core.optimizer.distrib_optimizer": {
            "DistributedOptimizer.sharded_state_dict": ("self", "model_sharded_state_dict", "is_loading"),
        },
        "mbridge.core.llm_bridge": {"get_gpt_decoder_block_spec": ("config", "use_transformer_engine")},
        "mbridge.core.bridge": {"Bridge._weight_name_mapping_mcore_to_hf": ("self", "mcore_weights_name")},
        "verl.workers.engine.megatron.transformer_impl": {
            "MegatronEngine.__init__": ("self", "model_config", "engine_config"),
            "set_random_seed": ("seed",),
        },
        "verl.workers.engine.fsdp.transformer_impl": {"FSDPEngine.__init__": ("self",)},
        # replay_buffer: the synchronous v1 trainer looks for its finished rollouts every 50 ms, not every 2 s
        "verl.trainer.ppo.v1.replay_buffer": {
            "ReplayBuffer.__init__": ("self", "trainer_mode", "trainer_config", "max_off_policy_threshold",
                                      "max_off_policy_strategy", "sampler_kwargs", "poll_interval"),
        },
        # platform, EDGE_VERL_CPU_PEAK_PER_PASS=1: each actor pass reports its own peak
        "verl.workers.engine_workers": {"TrainingWorker.train_batch": ("self", "data"), "TrainingWorker.infer_batch": ("self", "data")},
        # vllm_worker: vLLM's own processes
        "vllm.model_executor.layers.linear": {"UnquantizedLinearMethod.process_weights_after_loading": ("self", "layer")},
    },
    read={
        "verl.plugin.platform": {"PlatformBase": (), "PlatformRegistry": (), "get_platform": ()},
        "verl.workers.rollout.base": {"BaseRollout": (), "_ROLLOUT_REGISTRY": (), "get_rollout_class": ()},
        "verl.workers.rollout.replica": {"RolloutReplica": (), "RolloutReplicaRegistry.register": (), "TokenOutput": ()},
        "verl.utils.distributed": {"initialize_global_process_group_ray": ()},
        "verl.utils.tracking": {"FileLogger": ()},
        "megatron.core.tensor_parallel.random": {"model_parallel_cuda_manual_seed": ("seed",)},
        "megatron.core.optimizer.distrib_optimizer": {"DistributedOptimizer._init_optimizer_states_with_dummy_values": ("self",)},
        "mbridge.core.llm_bridge": {"LLMBridge._get_transformer_layer_spec": ("self",)},
        "vllm.model_executor.layers.utils": {"dispatch_cpu_unquantized_gemm": ("layer", "remove_weight")},
    },
)
