"""The two distributions of this repository, each built as an sdist from a copy of its sources and as a wheel from
that sdist (as pip builds an sdist from an index): the plugin's (pyproject.toml, what a GPU user installs) holds
edge_verl alone, and the lab's (lab/pyproject.toml) holds edge_verl_lab alone, every module of it, with the entry
points through which it adds its commands to ``edge-verl``. Built by setuptools' own build backend, without pip or
an index (seconds)."""

import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

pytest.importorskip("setuptools", reason="the wheels are built by setuptools' build backend")

ROOT = Path(__file__).resolve().parents[1]
# setuptools' build backend: build_sdist or build_wheel into the folder argv[2]; prints the file's name
BUILD = "import sys; from setuptools import build_meta; print(getattr(build_meta, sys.argv[1])(sys.argv[2]))"


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> dict:
    """{distribution: its wheel (built from its sdist), "<distribution> sdist": the sdist's member names}"""
    # a copy: a build folder left in the checkout by an earlier build would be packed again
    source = tmp_path_factory.mktemp("source")
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "build")
    for folder in ("edge_verl", "edge_verl_lab", "lab"):
        shutil.copytree(ROOT / folder, source / folder, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    out = tmp_path_factory.mktemp("dist")
    built = {}
    for name, project in (("edge-verl", source), ("edge-verl-lab", source / "lab")):
        sdist = out / _build("build_sdist", project, out)
        with tarfile.open(sdist) as archive:
            # the "data" filter where this Python has it (3.11.4+, 3.12; Debian 12's 3.11.2 does not): our own sdist
            archive.extractall(out / "unpacked", **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
            built[f"{name} sdist"] = archive.getnames()
        built[name] = zipfile.ZipFile(out / _build("build_wheel", out / "unpacked" / sdist.name[: -len(".tar.gz")], out))
    return built


def _build(what: str, project: Path, out: Path) -> str:
    done = subprocess.run([sys.executable, "-c", BUILD, what, str(out)], cwd=project, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


def _top_level(wheel: zipfile.ZipFile) -> set[str]:
    return {name.split("/")[0] for name in wheel.namelist()}


def test_the_plugins_wheel_holds_the_plugin_alone(wheels):
    top = _top_level(wheels["edge-verl"])
    assert top == {"edge_verl", "edge_verl-0.1.0.dist-info"}, top
    names = set(wheels["edge-verl"].namelist())
    assert {"edge_verl/cli.py", "edge_verl/conf/edge_ppo_trainer.yaml", "edge_verl/openrlhf/cpu_site/sitecustomize.py"} <= names


def test_the_labs_wheel_holds_the_lab_and_registers_its_commands(wheels):
    wheel = wheels["edge-verl-lab"]
    assert _top_level(wheel) == {"edge_verl_lab", "edge_verl_lab-0.1.0.dist-info"}
    modules = {path.relative_to(ROOT).as_posix() for path in (ROOT / "edge_verl_lab").rglob("*.py")}
    assert {name for name in wheel.namelist() if name.endswith(".py")} == modules
    in_sdist = {name.split("/", 1)[1] for name in wheels["edge-verl-lab sdist"] if name.endswith(".py")}
    assert in_sdist == modules  # the sdist carries the code the wheel was built from
    entry_points = wheel.read("edge_verl_lab-0.1.0.dist-info/entry_points.txt").decode()
    assert entry_points.split() == [
        "[edge_verl.commands]", "demo", "=", "edge_verl_lab.cli:DEMO", "reproduce", "=", "edge_verl_lab.cli:REPRODUCE",
        "study", "=", "edge_verl_lab.cli:STUDY",
    ]
    requires = [line for line in wheel.read("edge_verl_lab-0.1.0.dist-info/METADATA").decode().splitlines() if line.startswith("Requires-Dist")]
    assert requires == ["Requires-Dist: edge-verl==0.1.0", "Requires-Dist: matplotlib>=3.7", "Requires-Dist: scipy>=1.7"]
