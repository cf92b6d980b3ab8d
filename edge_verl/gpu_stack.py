"""The GPU stack verl's recipes need (torch's CUDA, vLLM, flash-attn, the Megatron packages): what
``edge-verl doctor`` reports, and the requirement walk behind ``MODE=image bash scripts/setup_gpu.sh``.

Pure functions over injected look-ups (``tests/test_doctor_gpu_stack.py``); no verl import. Never a failure:
a node may carry one backend only, and a CPU machine has none.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass


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
    roots: str | Sequence[str],
    requires_of: Callable[[str], list[str]],
    version_of: Callable[[str], str | None],
    keep: Callable[[str], bool],
) -> list[str]:
    """Requirements in the installed closure of ``roots`` that no installed version meets, as ``name<specifiers>``.

    Walks Requires-Dist from each root (with its extras, e.g. ``edge-verl[gpu,test]``) through every installed
    dependency that meets its requirement, each extra's requirements included. ``keep(name)`` (canonical names)
    marks what stays as installed: neither checked nor walked. One name's specifiers are merged into one.
    """
    from packaging.requirements import Requirement
    from packaging.specifiers import SpecifierSet
    from packaging.utils import canonicalize_name

    unmet: dict[str, SpecifierSet] = {}
    walked: set[tuple[str, frozenset[str]]] = set()
    pending = [Requirement(root) for root in ([roots] if isinstance(roots, str) else roots)]
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


def print_unmet_requirements(*roots: str) -> None:
    """One unmet requirement of ``roots`` per line, for ``MODE=image bash scripts/setup_gpu.sh`` to install."""
    for line in find_unmet_requirements(
        roots, lambda name: importlib.metadata.requires(name) or [], installed_version, belongs_to_image_gpu_stack
    ):
        print(line)
