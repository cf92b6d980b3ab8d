"""``edge-verl cpu-overrides``: one set per training backend, picked by backend or by verl config name."""

import os
import subprocess
import sys

import pytest

from edge_verl.cli import main

from edge_verl.integration.cpu.overrides import (
    CPU_OVERRIDES, UNUSED_ENV, UNUSED_ON_FSDP, backend_of_config, cpu_environment, cpu_overrides, keep_bytecode,
)


def keys(overrides):
    return [override.split("=", 1)[0] for override in overrides]


def test_the_default_set_is_fsdp_and_the_demo_uses_it():
    assert cpu_overrides() == cpu_overrides("fsdp") == CPU_OVERRIDES
    assert "actor_rollout_ref.actor.strategy=fsdp2" in CPU_OVERRIDES


def test_megatron_set_never_switches_the_strategy_and_keeps_one_value_per_key():
    for tensor_parallel in (1, 2, 4):
        overrides = cpu_overrides("megatron", tensor_parallel)
        assert not any(".strategy=" in override for override in overrides)
        assert len(set(keys(overrides))) == len(overrides)
        assert f"actor_rollout_ref.actor.megatron.tensor_model_parallel_size={tensor_parallel}" in overrides
        assert f"actor_rollout_ref.ref.megatron.tensor_model_parallel_size={tensor_parallel}" in overrides
        assert f"trainer.n_gpus_per_node={tensor_parallel}" in overrides
        assert f"+ray_kwargs.ray_init.num_gpus={tensor_parallel}" in overrides


@pytest.mark.parametrize("backend", ["fsdp", "megatron"])
def test_the_vllm_rollout_swaps_only_the_rollout_keys(backend):
    hf, vllm = cpu_overrides(backend), cpu_overrides(backend, rollout="vllm")
    assert "actor_rollout_ref.rollout.name=hf" in hf and "actor_rollout_ref.rollout.name=vllm" in vllm
    # vLLM's CPU platform has no sleep mode; eager mode skips inductor compilation
    assert {"+actor_rollout_ref.rollout.enable_sleep_mode=False", "actor_rollout_ref.rollout.enforce_eager=True"} < set(vllm)
    assert set(hf) - set(vllm) == {"actor_rollout_ref.rollout.name=hf"}
    assert len(set(keys(vllm))) == len(vllm)
    with pytest.raises(ValueError, match="rollout='sglang'; allowed: hf, vllm"):
        cpu_overrides(backend, rollout="sglang")


def test_the_cpu_environment_sizes_vllms_kv_cache_unless_set():
    assert cpu_environment({})["VLLM_CPU_KVCACHE_SPACE"] == "1"
    assert cpu_environment({"VLLM_CPU_KVCACHE_SPACE": "4"})["VLLM_CPU_KVCACHE_SPACE"] == "4"


def test_the_cpu_environment_names_the_packages_to_hide_unless_the_caller_did():
    assert UNUSED_ENV not in cpu_environment({})
    assert cpu_environment({}, unused=("megatron", "vllm"))[UNUSED_ENV] == "megatron,vllm"
    # the caller's value wins, "" included: a run that wants every installed package importable
    assert cpu_environment({UNUSED_ENV: ""}, unused=("megatron",))[UNUSED_ENV] == ""
    # an FSDP run uses neither Megatron nor, with the HF rollout, vLLM; with vLLM's rollout only Megatron is spare
    assert UNUSED_ON_FSDP == {"hf": ("megatron", "mbridge", "vllm"), "vllm": ("megatron", "mbridge")}


def test_hidden_packages_are_unimportable_and_not_found_in_the_run_s_processes():
    # what the CPU plugin does at `import verl` (cpu/plugin.py), in a fresh process without verl: json stands
    # in for a package the run does not use
    code = (
        "import importlib.util, os, sys; os.environ['EDGE_VERL_CPU_UNUSED'] = 'json, nosuch'; "
        "from edge_verl.integration.cpu.plugin import hide_unused_packages; hide_unused_packages(); "
        "assert importlib.util.find_spec('json') is None\n"
        "try:\n    import json.decoder\nexcept ModuleNotFoundError:\n    print('hidden')"
    )
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert completed.stdout.strip() == "hidden", completed.stderr[-2000:]


def test_a_run_keeps_its_bytecode_in_a_cache_folder_where_the_caller_forbids_writing_it(tmp_path):
    assert keep_bytecode({"PATH": "/bin"}) == {"PATH": "/bin"}  # Python already keeps it beside the sources
    kept = cpu_environment({"PYTHONDONTWRITEBYTECODE": "1", "XDG_CACHE_HOME": str(tmp_path)})
    assert "PYTHONDONTWRITEBYTECODE" not in kept and kept["PYTHONPYCACHEPREFIX"] == str(tmp_path / "edge_verl" / "pycache")
    assert keep_bytecode({"PYTHONDONTWRITEBYTECODE": "1", "PYTHONPYCACHEPREFIX": "/mine"})["PYTHONPYCACHEPREFIX"] == "/mine"
    declined = {"PYTHONDONTWRITEBYTECODE": "1", "EDGE_VERL_BYTECODE_CACHE": "0"}
    assert keep_bytecode(declined) == declined
    # a process started with it writes the module it imports under the prefix and nothing beside the source
    source = tmp_path / "src"
    source.mkdir()
    (source / "probe_module.py").write_text("VALUE = 1\n")
    env = {**kept, "PYTHONPATH": str(source)}
    subprocess.run([sys.executable, "-c", "import probe_module"], env=env, check=True)
    assert not (source / "__pycache__").exists()
    assert list((tmp_path / "edge_verl" / "pycache").rglob("probe_module*.pyc"))


@pytest.mark.parametrize(
    "backend, tensor_parallel, message",
    [("deepspeed", 1, "allowed: fsdp, megatron"), ("fsdp", 2, "needs the megatron backend"), ("megatron", 0, ">= 1")],
)
def test_bad_requests_are_refused(backend, tensor_parallel, message):
    with pytest.raises(ValueError, match=message):
        cpu_overrides(backend, tensor_parallel)


def test_backend_from_verl_config_name():
    assert backend_of_config("ppo_trainer") == "fsdp"
    assert backend_of_config("ppo_megatron_trainer") == "megatron"
    assert backend_of_config("edge_ppo_megatron_trainer") == "megatron"  # the plugin's config with its options
    with pytest.raises(ValueError, match="no CPU overrides"):
        backend_of_config("sft_trainer_engine")


def test_cli_prints_the_set_of_the_config_and_refuses_contradictions(capsys):
    assert main(["cpu-overrides", "--config-name", "ppo_megatron_trainer"]) == 0
    assert capsys.readouterr().out.splitlines() == list(cpu_overrides("megatron"))
    assert main(["cpu-overrides"]) == 0
    assert capsys.readouterr().out.splitlines() == list(CPU_OVERRIDES)
    assert main(["cpu-overrides", "--rollout", "vllm"]) == 0
    assert capsys.readouterr().out.splitlines() == list(cpu_overrides("fsdp", rollout="vllm"))
    assert main(["cpu-overrides", "--backend", "fsdp", "--config-name", "ppo_megatron_trainer"]) == 2
    assert "contradicts" in capsys.readouterr().err



def test_a_run_joining_a_cluster_drops_the_cluster_s_sizes_and_carries_its_own_variables():
    from edge_verl.integration.cpu.overrides import CLUSTER_START_KEYS, connect_overrides

    joined = connect_overrides(cpu_overrides("fsdp"), "10.0.0.7:6380", {"VERL_FILE_LOGGER_PATH": "/runs/a/verl_metrics.jsonl"})
    keys = [item.split("=", 1)[0] for item in joined]
    assert not set(CLUSTER_START_KEYS) & set(keys)  # Ray refuses num_cpus / num_gpus when connecting
    assert "+ray_kwargs.ray_init.address=10.0.0.7:6380" in joined
    assert "+ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH=/runs/a/verl_metrics.jsonl" in joined
    # every other override is kept, in order
    assert [item for item in cpu_overrides("fsdp") if item.split("=", 1)[0] not in CLUSTER_START_KEYS] == joined[:-2]
    # and the set still parses as Hydra overrides (an address holds a colon)
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = {item.key_or_group: item.value() for item in OverridesParser.create().parse_overrides(joined)}
    assert parsed["ray_kwargs.ray_init.address"] == "10.0.0.7:6380"
    with pytest.raises(ValueError, match="empty Ray address"):
        connect_overrides(cpu_overrides("fsdp"), "")


def test_the_cpu_environment_pins_one_numeric_path_unless_asked_not_to():
    from edge_verl.integration.cpu.overrides import CPU_ISA_ENV, cpu_isa_variables

    pinned = cpu_environment({})
    assert (pinned["ATEN_CPU_CAPABILITY"], pinned["MKL_CBWR"], pinned["ONEDNN_MAX_CPU_ISA"]) == ("avx2", "AVX2", "AVX2")
    native = cpu_environment({CPU_ISA_ENV: "native"})
    assert not {"ATEN_CPU_CAPABILITY", "MKL_CBWR", "ONEDNN_MAX_CPU_ISA"} & set(native)
    assert cpu_environment({"MKL_CBWR": "COMPATIBLE"})["MKL_CBWR"] == "COMPATIBLE"  # the caller's value wins
    with pytest.raises(ValueError, match=CPU_ISA_ENV):
        cpu_isa_variables({CPU_ISA_ENV: "avx3"})


def test_a_process_pinned_too_late_is_refused(tmp_path):
    """torch fixes its kernels at its first operation: pinning after one on a wider path must fail loudly (where the
    machine has AVX512; on an AVX2 machine the late pin is harmless and passes)."""
    code = (
        "import os, torch\n"
        "torch.ones(3).sum()\n"
        "from edge_verl.integration.cpu.overrides import pin_numeric_path\n"
        "try:\n"
        "    pin_numeric_path()\n"
        "except RuntimeError as error:\n"
        "    print('refused', torch.backends.cpu.get_cpu_capability())\n"
        "else:\n"
        "    print('pinned', torch.backends.cpu.get_cpu_capability())\n"
    )
    env = {name: value for name, value in os.environ.items() if name not in {"ATEN_CPU_CAPABILITY", "MKL_CBWR", "ONEDNN_MAX_CPU_ISA"}}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    verdict, capability = done.stdout.split()
    assert (verdict, capability) in {("refused", "AVX512"), ("pinned", "AVX2"), ("pinned", "DEFAULT")}
    early = subprocess.run([sys.executable, "-c", "from edge_verl.integration.cpu.overrides import pin_numeric_path\n"
                            "pin_numeric_path()\nimport torch\ntorch.ones(3).sum()\nprint(torch.backends.cpu.get_cpu_capability())"],
                           capture_output=True, text=True, env=env, check=True)
    assert early.stdout.strip() in {"AVX2", "DEFAULT"}


def test_workers_over_nodes_scale_the_gpus_and_give_each_rollout_replica_its_agent_and_reward_worker():
    # 2 nodes x 1 worker (docs/multinode.md): verl's trainer.nnodes x n_gpus_per_node; a cluster started by the run
    # itself asks for all the fake GPUs; one agent-loop and one reward worker per replica (TP 1: per worker)
    values = dict(item.split("=", 1) for item in cpu_overrides("fsdp", nnodes=2))
    assert (values["trainer.nnodes"], values["trainer.n_gpus_per_node"], values["+ray_kwargs.ray_init.num_gpus"]) == ("2", "1", "2")
    assert values["actor_rollout_ref.rollout.agent.num_workers"] == values["reward.num_workers"] == "2"
    assert dict(item.split("=", 1) for item in cpu_overrides("fsdp", workers_per_node=2))["trainer.n_gpus_per_node"] == "2"
    # Megatron TP 2 on 2 nodes of 2: 4 workers, 2 replicas
    values = dict(item.split("=", 1) for item in cpu_overrides("megatron", 2, nnodes=2))
    assert (values["trainer.n_gpus_per_node"], values["+ray_kwargs.ray_init.num_gpus"], values["reward.num_workers"]) == ("2", "4", "2")
    assert cpu_overrides("megatron", 2) == cpu_overrides("megatron", 2, nnodes=1, workers_per_node=2)
    for bad in ({"nnodes": 0}, {"workers_per_node": True}, {"nnodes": 1.5}):
        with pytest.raises(ValueError, match="must be an integer >= 1"):
            cpu_overrides("fsdp", **bad)
    with pytest.raises(ValueError, match="multiple of tensor_parallel=2"):
        cpu_overrides("megatron", 2, workers_per_node=3)
