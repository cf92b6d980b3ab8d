"""The OpenRLHF coupling runs in OpenRLHF's environment: importing it imports neither verl nor Ray nor
OpenRLHF (they are imported where OpenRLHF already has them); and the hook files are where the docs say."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.openrlhf.conftest import REPO

BLOCKED = ("verl", "ray", "openrlhf", "vllm", "hydra", "omegaconf")


def test_importing_the_coupling_pulls_in_no_trainer():
    code = (
        "import sys\n"
        f"for name in {BLOCKED!r}: sys.modules[name] = None\n"  # None: any import of them raises ImportError
        "import edge_verl.openrlhf.options, edge_verl.openrlhf.reward_func, edge_verl.openrlhf.estimators\n"
        "import edge_verl.openrlhf.internals, edge_verl.openrlhf.train_ppo_ray, edge_verl.openrlhf.actors\n"
        "import edge_verl.openrlhf.cpu\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO, timeout=120)


def test_module_prints_the_hook_file_paths():
    for name, file in (("reward", "reward_func.py"), ("agent", "gec_agent.py")):
        out = subprocess.run([sys.executable, "-m", "edge_verl.openrlhf", name], capture_output=True, text=True,
                             check=True, cwd=REPO, timeout=120).stdout.strip()
        assert out == str(REPO / "edge_verl" / "openrlhf" / file)


def test_cpu_env_prints_the_cpu_environment_as_exports():
    from edge_verl.openrlhf.cpu import SITE_DIR, environment

    out = subprocess.run([sys.executable, "-m", "edge_verl.openrlhf", "cpu-env"], capture_output=True, text=True,
                         check=True, cwd=REPO, timeout=120).stdout
    exported = dict(line.removeprefix("export ").split("=", 1) for line in out.splitlines())
    assert {name: value.strip("'") for name, value in exported.items()} == environment()
    assert exported["EDGE_VERL_OPENRLHF_CPU"] == "1" and str(SITE_DIR) in exported["PYTHONPATH"]


def test_the_cpu_sitecustomize_installs_only_when_asked_and_runs_the_one_it_shadows(tmp_path):
    from edge_verl.openrlhf.cpu import SITE_DIR

    (tmp_path / "sitecustomize.py").write_text("import builtins\nbuiltins.SHADOWED_RAN = True\n")
    code = "import builtins, sys; print(getattr(builtins, 'SHADOWED_RAN', False), 'flash_attn_2_cuda' in sys.modules)"
    for flag, installed in (("1", "True"), ("0", "False")):
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SITE_DIR), str(tmp_path), str(REPO)]),
               "EDGE_VERL_OPENRLHF_CPU": flag}
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True,
                             cwd=tmp_path, timeout=120).stdout.split()
        assert out == ["True", installed]
