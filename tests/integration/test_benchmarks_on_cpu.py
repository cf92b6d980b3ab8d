"""The benchmark's standalone baseline IS verl's grpo_vectorized, so GPU figures taken without verl compare
against verl's own estimator; and the benchmark script runs in both modes."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from verl.trainer.ppo import core_algos

from edge_verl_lab.benchmarks import make_batch, verl_grpo_vectorized

pytestmark = pytest.mark.verl

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_estimators.py"


@pytest.mark.parametrize("norm_by_std", [True, False])
@pytest.mark.parametrize("seed", range(3))
def test_baseline_equals_verls_grpo_vectorized(seed, norm_by_std):
    data = make_batch(96, 33, group_size=5, device="cpu", seed=seed)  # 96 = 19 groups of 5 + a singleton group
    uids = data["index"].copy()
    uids[np.random.default_rng(seed).permutation(96)[:10]] = "shuffled-in"  # groups need not be contiguous
    verl_fn = core_algos.get_adv_estimator_fn("grpo_vectorized")
    expected, _ = verl_fn(data["token_level_rewards"], data["response_mask"], uids, norm_adv_by_std_in_grpo=norm_by_std)
    actual = verl_grpo_vectorized(data["token_level_rewards"], data["response_mask"], uids, norm_adv_by_std_in_grpo=norm_by_std)
    torch.testing.assert_close(actual, expected, rtol=0, atol=0)


@pytest.mark.parametrize("mode", [["--standalone"], []], ids=["standalone", "registry"])
def test_the_benchmark_prints_one_row_per_size(mode):
    completed = subprocess.run(
        [sys.executable, str(SCRIPT), *mode, "--sizes", "16x8", "24x4", "--repeats", "1"],
        capture_output=True, text=True, timeout=300, check=True,
    )
    rows = [line for line in completed.stdout.splitlines() if line.startswith("| 16 x 8") or line.startswith("| 24 x 4")]
    assert len(rows) == 2
    cells = rows[0].split("|")[2:-1]
    assert len(cells) == 10 and all(float(cell.split()[0]) > 0 for cell in cells)
