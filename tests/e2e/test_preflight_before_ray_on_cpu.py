"""A plain ``python -m verl.trainer.main_ppo`` with a mistake in the plugin's options fails in the driver,
before ``ray.init``: exit code 2, the plugin's message as the last line, no Ray session, no worker."""

import os
import subprocess
import sys

import pytest

from edge_verl_lab.demo.run import DemoConfig, build_overrides
from edge_verl.data import make_row, write_parquet
from edge_verl.integration.cpu.overrides import cpu_environment

GEC_ON = ["+algorithm.edge_gec.enable=True", "actor_rollout_ref.rollout.calculate_log_probs=False"]
# kind -> (overrides after the demo's GRPO run, whether the training rows are marked for GEC, expected text).
# One mistake in the options and one in the data files: that the driver stops before Ray is what this tier
# shows; every kind of mistake and its message is checked in process (tests/integration/test_preflight_on_cpu.py).
MISTAKES = {
    "bad_value": (["algorithm.adv_estimator=gepo", "+algorithm.gepo.gamma=1.5"], False, "gepo.gamma=1.5 must be <= 1.0"),
    "gec_data_column": (GEC_ON, False, "no training row has agent_name=edge_gec"),
}


@pytest.mark.parametrize("kind", sorted(MISTAKES))
def test_main_ppo_stops_before_ray_starts(tmp_path, kind):
    overrides, gec_rows, expected = MISTAKES[kind]
    rows = [make_row("1+1", "2", "s", data_source="t", split="train", index=i, gec=gec_rows) for i in range(8)]
    train = write_parquet(rows, tmp_path / "train.parquet")
    val = write_parquet(rows[:1] if not gec_rows else [make_row("1+1", "2", None, data_source="v", split="test", index=0, gec=False)], tmp_path / "val.parquet")
    demo = build_overrides(DemoConfig(out=tmp_path), {"train": train, "val": val, "model": tmp_path / "model"})
    env = cpu_environment()
    env["RAY_TMPDIR"] = str(tmp_path / "ray")  # where a Ray session would leave its folder
    completed = subprocess.run(
        [sys.executable, "-m", "verl.trainer.main_ppo", *demo, *overrides],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )
    output = completed.stdout + completed.stderr
    assert completed.returncode == 2, output[-3000:]
    last = [line for line in output.splitlines() if line.strip()][-1]
    assert last.startswith("edge-verl preflight: ") and expected in last, output[-3000:]
    assert "ray init kwargs" not in output  # verl prints it right before ray.init
    assert not (tmp_path / "ray").exists() and not any(tmp_path.glob("**/session_*"))
    assert os.environ.get("RAY_ADDRESS") is None
