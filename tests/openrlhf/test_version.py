"""Which OpenRLHF is in use, read before any of its modules is imported: the launcher, the reward file and the
agent file each refuse any version but the pinned one, naming what they found and where; an installed package
reads its dist-info, a source checkout its version.txt (what OpenRLHF's setup.py reads)."""

import subprocess
import sys
from pathlib import Path

import pytest

from edge_verl.openrlhf.internals import PINNED_VERSION, version_at
from edge_verl.openrlhf.train_ppo_ray import GEC_AGENT_FILE, REWARD_FILE

REPO = Path(__file__).resolve().parents[2]


def _fake_openrlhf(root: Path, version: str | None, how: str = "dist-info") -> Path:
    """A package named openrlhf whose import leaves a mark (``imported``), with its version recorded ``how``."""
    package = root / "openrlhf"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(f"open({str(root / 'imported')!r}, 'w').close()\n")
    if version is not None and how == "dist-info":
        dist = root / f"openrlhf-{version}.dist-info"
        dist.mkdir()
        (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: openrlhf\nVersion: {version}\n")
    elif version is not None:
        (root / "version.txt").write_text(f"{version}\n")
    return root


def _run(root: Path, code: str) -> subprocess.CompletedProcess:
    env = {"PYTHONPATH": f"{root}:{REPO}", "PATH": "/usr/bin:/bin", "EDGE_VERL_OPENRLHF_OPTIONS": "{}"}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env, cwd=root)


def test_the_version_is_the_dist_info_s_else_the_source_checkout_s_version_txt(tmp_path):
    assert version_at(str(_fake_openrlhf(tmp_path / "installed", "0.11.2") / "openrlhf")) == "0.11.2"
    assert version_at(str(_fake_openrlhf(tmp_path / "checkout", "0.11.2", how="version.txt") / "openrlhf")) == "0.11.2"
    assert version_at(str(_fake_openrlhf(tmp_path / "bare", None) / "openrlhf")) is None


LAUNCH = "from edge_verl.openrlhf.train_ppo_ray import main; main(['--help'])"
LOAD_FILE = ("import importlib.util; spec = importlib.util.spec_from_file_location('{name}', {path!r}); "
             "module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module)")


@pytest.mark.parametrize("entry", ["launcher", "reward file", "agent file"])
@pytest.mark.parametrize("found", ["0.10.0", None])
def test_another_or_an_unreadable_version_is_refused_before_any_openrlhf_module_is_imported(tmp_path, entry, found):
    root = _fake_openrlhf(tmp_path, found)
    code = {"launcher": LAUNCH, "reward file": LOAD_FILE.format(name="reward_func", path=REWARD_FILE),
            "agent file": LOAD_FILE.format(name="agent_module", path=GEC_AGENT_FILE)}[entry]
    done = _run(root, code)
    assert done.returncode != 0
    expected = f"found openrlhf '{found}' at {root / 'openrlhf'}" if found else "an openrlhf whose version it cannot read"
    assert f"pinned to openrlhf=={PINNED_VERSION}" in done.stderr and expected in done.stderr, done.stderr[-2000:]
    assert not (root / "imported").exists(), "an OpenRLHF module was imported before the version was read"


def test_a_source_checkout_of_the_pinned_version_passes_the_check(tmp_path):
    root = _fake_openrlhf(tmp_path, PINNED_VERSION, how="version.txt")
    done = _run(root, "from edge_verl.openrlhf.internals import check_installed_version; check_installed_version(); print('ok')")
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
    assert not (root / "imported").exists()
