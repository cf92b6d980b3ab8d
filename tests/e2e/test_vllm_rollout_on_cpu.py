"""verl's own vLLM rollout (``rollout.name=vllm``, vLLM's CPU build) in real main_ppo runs on CPU: GRPO
and EDGE (edge_eda + GEC) with each GEC branch forced once, checked as the HF rollout's runs are
(tests/e2e/gec_checks.py) plus GEC's token layout against the token ids vLLM itself returned.

vLLM starts from dummy weights (verl's ``load_format=dummy``) and gets the trainer's before every rollout,
so rollout probabilities that match the actor's prove the weight sync (edge_verl.integration.cpu.vllm_worker).
~2 minutes per run, most of it Ray, worker and vLLM start-up.
"""

import json
import os
from pathlib import Path


from edge_verl_lab.demo.run import SAMPLE_TOKENS
from edge_verl.integration.cpu.vllm_worker import WORKER_LOG_LINE
from edge_verl.reward.score import GRADER_OUTCOMES

from tests.e2e.gec_checks import BRANCHES, check_origin_metrics, check_token_accounting, has_gradient, read_dump
from tests.e2e.gec_recorder import RECORD_ENV, agent_loop_config
from tests.e2e.test_main_ppo_on_cpu import assert_grader_metrics

REPOSITORY = Path(__file__).resolve().parents[2]


def assert_served_by_vllm(out):
    log = (out / "verl.log").read_text()
    assert "vLLMHttpServer" in log and WORKER_LOG_LINE in log
    assert "HFRolloutServer" not in log


def assert_rollout_matches_actor(rows):
    # bf16 vLLM vs the fp32 actor: measured mean 1.4e-3 - 1.8e-3, max <= 8.3e-3 per step; vLLM's dummy
    # initial weights (no sync) would differ by ~0.1 on average
    for row in rows:
        assert row["training/rollout_probs_diff_mean"] < 5e-3, row["step"]
        assert row["training/rollout_probs_diff_max"] < 5e-2, row["step"]


def test_grpo_through_vllm_trains_with_synced_weights_and_writes_only_its_seeding_and_grader_metrics(run_cpu_demo):
    out, rows = run_cpu_demo("vllm_grpo", algorithm="grpo", rollout="vllm", steps=2, save_freq=2)
    assert_served_by_vllm(out)
    assert [row["step"] for row in rows] == [1, 2]
    assert_rollout_matches_actor(rows)
    for row in rows:
        assert 0 < row["response_length/mean"] <= row["response_length/max"] <= SAMPLE_TOKENS
    # the demo's GRPO asks the plugin for one thing, its seeding (+algorithm.edge_seeding.enable=True, as every
    # method's): it then logs the grader metrics of its reward, and no estimator, GEC or advantage metric
    assert {key for row in rows for key in row if key.startswith("edge_verl/")} == {f"edge_verl/grader/{outcome}" for outcome in GRADER_OUTCOMES}
    assert (out / "checkpoints" / "global_step_2").is_dir()
    assert not list((out / "checkpoints").rglob("edge_verl*")), "a GRPO checkpoint holds a file of the plugin"


# GEPO reads the actor's old log-probs, not the rollout's: its runs use the HF rollout (test_main_ppo_on_cpu.py,
# test_study_on_cpu.py); through vLLM it added a vLLM start-up to CI and nothing GEPO depends on.


def test_gec_through_vllm_trains_vllms_tokens_in_every_branch(run_cpu_demo, monkeypatch, tmp_path):
    # One run with the paper's branch probabilities (every branch occurs among the ~57 wrong responses of
    # 64); what each branch must do to vLLM's tokens is checked response by response on the recorder's log.
    from transformers import AutoTokenizer

    records = tmp_path / "gec_records.jsonl"
    monkeypatch.setenv(RECORD_ENV, str(records))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPOSITORY), os.environ.get("PYTHONPATH", "")]))

    def overrides(out):
        return [
            f"trainer.rollout_data_dir={out / 'rollouts'}",
            "trainer.val_before_train=True",
            f"trainer.validation_data_dir={out / 'validation'}",
            f"actor_rollout_ref.rollout.agent.agent_loop_config_path={agent_loop_config(out)}",
        ]

    out, rows = run_cpu_demo("vllm_gec", overrides=overrides, algorithm="edge", rollout="vllm", steps=1)
    assert_served_by_vllm(out)
    metrics = rows[-1]
    dump = read_dump(out / "rollouts")
    tokenizer = AutoTokenizer.from_pretrained(out / "model")
    recorded = [json.loads(line) for line in records.read_text().splitlines()]
    branches = check_token_accounting(recorded, dump, tokenizer, SAMPLE_TOKENS)
    assert all(branches[branch] > 0 for branch in BRANCHES), branches
    assert metrics["edge_verl/gec/corrected"] == sum(branches[branch] for branch in BRANCHES)
    for branch in BRANCHES:
        assert metrics[f"edge_verl/gec/corrected_{branch}"] == branches[branch]
    check_origin_metrics(metrics)
    # the paper's loss: the injected tokens are trained through the surrogate (when there is a gradient)
    assert "actor/gec/sft_nll" not in metrics
    assert (metrics.get("actor/gec/phrase/grad_share", 0.0) > 0) == has_gradient(metrics)
    assert_grader_metrics(metrics)
    validation = read_dump(out / "validation")
    assert len(validation) == 32 and not any("Wait!" in row["output"] for row in validation)
