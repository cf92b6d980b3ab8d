"""The OpenRLHF patch series (upstream/openrlhf/): applied to OpenRLHF 0.11.2's source by its own script, which
runs OpenRLHF's whole test suite (the series' tests included) on the patched tree in OpenRLHF's environment;
then the patched command line offers the estimators and their options, and the series' second implementation
of EDA and GEPO (``openrlhf/trainer/ppo_utils/edge_grpo_gepo.py``) equals ``edge_verl.algorithms``."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
from pathlib import Path

import pytest
import torch

from edge_verl.estimators.edge_eda import compute_eda_advantages
from edge_verl.estimators.gepo import GepoThresholds, compute_gepo_advantages
from edge_verl.openrlhf import cpu

REPO = Path(__file__).resolve().parents[2]
SERIES = REPO / "upstream" / "openrlhf"
VENV_PYTHON = REPO / ".venv" / "openrlhf-cpu" / "bin" / "python"


@pytest.fixture(scope="module")
def applied(tmp_path_factory):
    """The patched tree (APPLIED) and the script's output: every patch applied, OpenRLHF's tests passed."""
    if not VENV_PYTHON.is_file():
        pytest.fail(f"OpenRLHF's CPU environment is missing at {VENV_PYTHON.parent.parent}: run `bash scripts/setup.sh`.")
    folder = tmp_path_factory.mktemp("series")
    result = subprocess.run(["bash", str(SERIES / "apply_and_test.sh")], env={**os.environ, "APPLIED": str(folder)},
                            capture_output=True, text=True, timeout=900)
    log = result.stdout + result.stderr
    assert result.returncode == 0, log[-6000:]
    return folder / "openrlhf", log


def test_the_series_applies_to_0_11_2_and_openrlhfs_tests_pass(applied):
    _, log = applied
    patches = sorted(SERIES.glob("patches/*.patch"))
    assert f"applied {len(patches)} patches on openrlhf 0.11.2" in log
    passed = re.search(r"(\d+) passed", log)
    assert passed and int(passed.group(1)) >= 221 + 16, log[-2000:]  # OpenRLHF's 221, and the series' own
    assert "failed" not in log.splitlines()[-1]
    # a PR description per patch
    assert len(list((SERIES / "prs").glob("*.md"))) == len(patches)


def test_the_patched_command_line_offers_the_estimators_and_their_options(applied):
    tree, _ = applied
    env = {**os.environ, **cpu.environment(gpus=1), "PYTHONPATH": os.pathsep.join([str(tree), cpu.environment()["PYTHONPATH"]])}
    result = subprocess.run([str(VENV_PYTHON), "-m", "openrlhf.cli.train_ppo_ray", "--help"], env=env, capture_output=True,
                            text=True, timeout=300, cwd=tree)
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    text = " ".join(result.stdout.split())
    assert re.search(r"--algo\.advantage\.estimator \{[^}]*gepo,edge_eda\}", text), text[:3000]
    for flag in ("--algo.gepo.alpha_low", "--algo.gepo.beta_high", "--algo.gepo.gamma", "--algo.edge_eda.entropy_eps",
                 "--algo.edge_eda.ratio_clamp"):
        assert flag in text


def load_estimators(tree: Path):
    spec = importlib.util.spec_from_file_location("series_edge_grpo_gepo", tree / "openrlhf/trainer/ppo_utils/edge_grpo_gepo.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("seed", range(4))
def test_the_series_estimators_equal_edge_verls(applied, seed):
    series = load_estimators(applied[0])
    generator = torch.Generator().manual_seed(seed)
    groups, n, width = 5, 8, 7
    rewards = torch.randint(0, 2, (groups, n), generator=generator).float()
    rewards[0] = 1.0  # a tied group
    lengths = torch.randint(0, width + 1, (groups * n,), generator=generator)
    mask = (torch.arange(width)[None, :] < lengths[:, None]).float()
    entropy = torch.rand(groups * n, width, generator=generator) * 2 * mask
    log_probs = -torch.rand(groups * n, width, generator=generator) * 3 * mask
    group_index, valid = torch.arange(groups * n) // n, torch.ones(groups * n, dtype=torch.bool)
    tokens = mask.sum(-1).reshape(groups, n)

    # EDA (its std epsilon 1e-4 on both sides)
    outcome = series.group_norm_advantages(rewards, series.GROUP_STD_EPS["edge_eda"])
    response_entropy = (entropy.sum(-1) / mask.sum(-1).clamp(min=1)).reshape(groups, n)
    eda, _ = series.eda_advantages(outcome, response_entropy, tokens > 0)
    expected = compute_eda_advantages(rewards.reshape(-1), entropy, mask, group_index, groups, valid, std_epsilon=1e-4)
    torch.testing.assert_close(eda.reshape(-1), expected.eda_outcome_advantages, rtol=1e-5, atol=1e-6)

    # GEPO, two steps: the EMA carries over
    thresholds, reference = series.GEPOThresholds(gamma=0.3), GepoThresholds(gamma=0.3)
    for step in range(2):
        nll = (-(log_probs * (step + 1)) * mask).sum(-1).reshape(groups, n)
        outcome = series.group_norm_advantages(rewards, series.GROUP_STD_EPS["gepo"])
        shaped, _, _ = series.gepo_advantages(outcome, nll, tokens, thresholds)
        expected = compute_gepo_advantages(rewards.reshape(-1), log_probs * (step + 1), mask, group_index, groups, valid, reference)
        torch.testing.assert_close(shaped.reshape(-1), expected.shaped_outcome_advantages, rtol=1e-5, atol=1e-6)
        assert (thresholds.h_low, thresholds.h_high) == pytest.approx((reference.h_low, reference.h_high), rel=1e-5)
