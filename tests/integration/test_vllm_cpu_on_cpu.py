"""The vLLM CPU build's one adaptation (edge_verl.integration.cpu.vllm_worker), in fresh processes.

vLLM loads the ``vllm.general_plugins`` entry points in each of its processes; with ``EDGE_VERL_CPU=1`` the
plugin keeps every unquantized linear layer's weight as the loadable parameter verl's weight sync writes
into. Without the switch vLLM's CPU build replaces it by a repacked tensor that has no ``weight_loader``
(what broke verl's weight sync, VLLM_CPU.md), and the plugin does nothing.
"""

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("vllm")

from edge_verl.integration.cpu import CPU_BACKEND  # noqa: E402
from edge_verl.integration.cpu.vllm_worker import WORKER_LOG_LINE  # noqa: E402
from edge_verl.integration.internals import find_internal_mismatches  # noqa: E402

pytestmark = pytest.mark.verl

PROBE = r"""
import json, torch
from vllm.plugins import load_general_plugins
load_general_plugins()
from vllm.model_executor.layers.linear import UnquantizedLinearMethod
method = UnquantizedLinearMethod()
layer = torch.nn.Module()
weight = torch.nn.Parameter(torch.randn(64, 32), requires_grad=False)
weight.weight_loader = lambda parameter, loaded: parameter.data.copy_(loaded)  # as vLLM's parameters carry
layer.register_parameter("weight", weight)
method.process_weights_after_loading(layer)
x = torch.randn(3, 32)
forward_ok = bool(torch.allclose(method.apply(layer, x), x @ weight.T, atol=1e-5))
kept = layer._parameters.get("weight") is weight
if kept:  # what verl's weight sync does: the new weights through the parameter's loader, then a forward
    new = torch.randn(64, 32)
    layer.weight.weight_loader(layer.weight, new)
    after_ok = bool(torch.allclose(method.apply(layer, x), x @ new.T, atol=1e-5))
else:
    after_ok = None
print(json.dumps({
    "kept": kept,
    "loader": hasattr(layer._parameters.get("weight"), "weight_loader"),
    "forward_ok": forward_ok,
    "after_sync_ok": after_ok,
}))
"""


def probe(cpu_backend: bool) -> tuple[dict, str]:
    env = {key: value for key, value in os.environ.items() if key != "EDGE_VERL_CPU"}
    if cpu_backend:
        env["EDGE_VERL_CPU"] = "1"
    completed = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=300)
    assert completed.returncode == 0, completed.stderr[-3000:]
    return json.loads(completed.stdout.strip().splitlines()[-1]), completed.stdout


def test_with_the_cpu_backend_linear_weights_stay_loadable_and_take_new_weights():
    report, stdout = probe(cpu_backend=True)
    assert report == {"kept": True, "loader": True, "forward_ok": True, "after_sync_ok": True}
    assert WORKER_LOG_LINE in stdout


def test_without_the_cpu_backend_vllm_is_untouched():
    report, stdout = probe(cpu_backend=False)
    # vLLM's own CPU path: the parameter is replaced by a packed weight verl cannot load into
    assert report == {"kept": False, "loader": False, "forward_ok": True, "after_sync_ok": None}
    assert WORKER_LOG_LINE not in stdout


def test_the_vllm_internals_the_adaptation_relies_on_are_there():
    vllm_entries = {module: paths for module, paths in CPU_BACKEND.entries().items() if module.startswith("vllm")}
    assert len(vllm_entries) == 2 and find_internal_mismatches(vllm_entries) == []
