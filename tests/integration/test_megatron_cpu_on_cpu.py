"""The CPU adaptations of verl's Megatron engine (``edge_verl.integration.cpu.megatron_engine``).

They patch torch process-wide, so each check runs in a fresh Python process: ``megatron_cpu_probe.py``
applies them, then builds the tiny Qwen2 as megatron-core's local GPTModel through mbridge (verl's
``vanilla_mbridge`` route) from its HF weights and compares it with the HF model itself. A second process
shows that importing megatron, as verl's engine registry does in every worker, applies nothing.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.verl

PROBE = Path(__file__).with_name("megatron_cpu_probe.py")


def _python(*args, env=None):
    command = [sys.executable, *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, env={**os.environ, **(env or {})})


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    completed = _python(PROBE, tmp_path_factory.mktemp("megatron_probe"))
    assert completed.returncode == 0, completed.stderr[-4000:]
    line = next(line for line in completed.stdout.splitlines() if line.startswith("PROBE "))
    return json.loads(line[len("PROBE "):])


def test_every_adaptation_is_applied_once(probe):
    assert len(probe["applied"]) == 7 and probe["applied_again"] == probe["applied"]


def test_what_megatron_writes_for_its_gpu_lands_on_the_cpu(probe):
    devices = probe["devices"]
    assert devices.pop("to_dtype_only") == "torch.float64"  # a dtype-only .to() is left alone
    assert devices.pop("is_available") is False  # libraries that choose a device still choose the CPU
    assert set(devices.values()) == {"cpu"}, devices


def test_tensor_type_names_are_the_cuda_ones_megatrons_optimizer_accepts(probe):
    assert probe["type_names"] == ["torch.cuda.FloatTensor", "torch.cuda.BFloat16Tensor", "torch.cuda.DoubleTensor"]


def test_megatrons_rng_tracker_forks_the_cpu_generator_and_restores_it(probe):
    # verl's set_random_seed (wrapped) seeded the tracker; a fork leaves the default state as it found it
    assert probe["rng_restored_after_fork"] and probe["rng_fork_advances_its_own_state"]


def test_the_local_megatron_model_loaded_by_mbridge_is_the_hf_model(probe):
    # megatron's local layers (torch RMSNorm, no Transformer Engine), weights from the HF checkpoint through
    # the patched name mapping; a right-padded row with verl's 2-D mask: fp32 logits equal to rounding.
    assert probe["local_layers"] == ["RMSNorm"]
    assert probe["logits_max_abs_diff"] < 1e-5
    # left padding cannot be reduced to the causal mask: refused, not silently wrong
    assert "left padding" in probe["left_padding"]


def test_export_gives_every_hf_tensor_back_under_its_hf_name(probe):
    # verl's weight sync to the rollout and the HF checkpoint both go through this export
    assert probe["exported_names_missing"] == []
    assert probe["exported_max_abs_diff"] == 0.0


IMPORT_ONLY = """
import torch, verl
from verl.workers import engine  # imports megatron (verl's engine registry), as every worker does
from verl.workers.engine.megatron import transformer_impl
wrapped = hasattr(transformer_impl.MegatronEngine.__init__, "__edge_verl_patch__")
try:
    torch.zeros(1, device="cuda")
    created = "cpu"
except (AssertionError, RuntimeError):
    created = "refused"
print("STATE", wrapped, created, hasattr(torch.Tensor.to, "__edge_verl_patch__"))
"""


@pytest.mark.parametrize("cpu_backend, hooked", [("1", "True"), ("0", "False")])
def test_importing_megatron_changes_nothing_until_its_engine_is_built(cpu_backend, hooked):
    completed = _python("-c", IMPORT_ONLY, env={"EDGE_VERL_CPU": cpu_backend})
    assert completed.returncode == 0, completed.stderr[-3000:]
    state = next(line for line in completed.stdout.splitlines() if line.startswith("STATE ")).split()[1:]
    # the engine's constructor is hooked only with the CPU backend on; torch is untouched either way
    assert state == [hooked, "refused", "False"]
