"""Real ``python -m verl.trainer.main_ppo`` runs on CPU through the demo (tiny model, 2-3 steps each).

Each run costs ~1.5-2 minutes, mostly Ray/worker start-up; together they cover both verl trainers, both
estimators, the metrics reaching verl's logger, and GEPO's thresholds surviving checkpoint/resume.
"""

import json

import pytest

from edge_verl.demo.run import DemoConfig, run_demo

pytestmark = pytest.mark.e2e

EDA_KEYS = ("zero_variance_group_frac", "adv_var_before", "adv_var_after", "max_abs_adv", "entropy_ratio_min", "entropy_ratio_max")
GEPO_KEYS = ("group_entropy_mean", "group_entropy_std", "h_low", "h_high", "pos_attenuated_frac", "neg_attenuated_frac")


def _run(tmp_path_factory, name, **options):
    out = tmp_path_factory.mktemp(name)
    result = run_demo(DemoConfig(out=out, **options))
    assert result["returncode"] == 0, (out / "verl.log").read_text()[-4000:]
    return out, result["rows"]


@pytest.mark.parametrize("trainer", ["v1", "legacy"])
def test_edge_eda_run_logs_its_metrics(tmp_path_factory, trainer):
    out, rows = _run(tmp_path_factory, f"eda_{trainer}", algorithm="edge_eda", trainer=trainer, steps=2)
    assert [row["step"] for row in rows] == [1, 2]
    for row in rows:
        for key in EDA_KEYS:
            assert f"edge_verl/edge_eda/{key}" in row, sorted(row)
        assert row["edge_verl/edge_eda/entropy_ratio_min"] > 0
    assert (out / "metrics.png").stat().st_size > 10_000


@pytest.fixture(scope="module")
def gepo_v1_checkpointed(tmp_path_factory):
    return _run(tmp_path_factory, "gepo_v1", algorithm="gepo", trainer="v1", steps=2, save_freq=2)


def test_gepo_v1_run_logs_metrics_and_saves_thresholds(gepo_v1_checkpointed):
    out, rows = gepo_v1_checkpointed
    for key in GEPO_KEYS:
        assert f"edge_verl/gepo/{key}" in rows[-1]
    saved = json.loads((out / "checkpoints" / "global_step_2" / "edge_verl_state.json").read_text())
    assert saved["gepo_thresholds"]["num_updates"] == 2
    assert saved["gepo_thresholds"]["h_low"] == pytest.approx(rows[-1]["edge_verl/gepo/h_low"], rel=1e-12)


def test_gepo_resume_restores_thresholds_exactly(gepo_v1_checkpointed):
    out, _ = gepo_v1_checkpointed
    saved = json.loads((out / "checkpoints" / "global_step_2" / "edge_verl_state.json").read_text())["gepo_thresholds"]
    result = run_demo(DemoConfig(out=out, algorithm="gepo", trainer="v1", steps=3, resume=True))
    assert result["returncode"] == 0, (out / "verl.log").read_text()[-4000:]
    step3 = [row for row in result["rows"] if row["step"] == 3][0]
    # EMA continued from the restored state: H_3 = (1 - 0.01) * H_2 + 0.01 * candidate_3
    expected_low = 0.99 * saved["h_low"] + 0.01 * step3["edge_verl/gepo/candidate_h_low"]
    expected_high = 0.99 * saved["h_high"] + 0.01 * step3["edge_verl/gepo/candidate_h_high"]
    assert step3["edge_verl/gepo/h_low"] == pytest.approx(expected_low, rel=1e-9)
    assert step3["edge_verl/gepo/h_high"] == pytest.approx(expected_high, rel=1e-9)
    assert step3["edge_verl/gepo/ema_updates"] == 3


def test_gepo_legacy_run_logs_metrics_and_saves_thresholds(tmp_path_factory):
    out, rows = _run(tmp_path_factory, "gepo_legacy", algorithm="gepo", trainer="legacy", steps=2, save_freq=2)
    for key in GEPO_KEYS:
        assert f"edge_verl/gepo/{key}" in rows[-1]
    saved = json.loads((out / "checkpoints" / "global_step_2" / "edge_verl_state.json").read_text())
    assert saved["gepo_thresholds"]["num_updates"] == 2
