"""The Megatron recipes, unchanged, train with verl's Megatron engine on CPU (megatron-core 0.16.1 + mbridge
0.15.1, the ``megatron-cpu`` extra; ``EDGE_VERL_CPU=1`` gives them the Megatron CPU overrides): EDGE-SFT at
tensor parallel 1 (the plugin's actor-loss hook in Megatron's loss), GEPO at tensor parallel 2 (two gloo
processes) with a checkpoint of the weights and the thresholds, run as its DRY_RUN prints it, pasted into a
shell elsewhere (recipes/lib is shared by every recipe, so one recipe shows it for all; CI's budget dropped
the GEPO FSDP recipe's own as-printed run, 1:40). Every run asserts which engine trained. ~2 min per run.
The thresholds' exact resume is checked on the FSDP engine (tests/e2e/test_main_ppo_on_cpu.py): a Megatron
resume took 2.5 minutes of CI. The two runs stay apart: GEC's runs keep no rollout log-probs
(``calculate_log_probs=False``), so only a run without GEC shows that the rollout samples from the weights
Megatron exported at tensor parallel 2."""

import json

import pytest

from tests.e2e.gec_checks import INJECTED, check_origin_metrics
from tests.e2e.recipe_runs import run_recipe_on_cpu

# |p_rollout - p_actor| per response token: the HF rollout samples from the HF weights the Megatron engine
# exported (fp32 HF, bf16 Megatron). Measured: mean 0.8e-4 - 1.5e-4, max <= 3.2e-3 over 2-3 steps, TP 1 and 2.
PROBS_DIFF_MEAN_BOUND = 2e-3
PROBS_DIFF_MAX_BOUND = 5e-2


def assert_megatron_trained(run, tensor_parallel):
    engines = run["engines"]
    assert engines and all(engine.startswith("megatron (MegatronEngineWithLMHead") for engine in engines), engines
    assert all(f"TP={tensor_parallel} PP=1" in engine for engine in engines), engines


def assert_rollout_matches_actor(records):
    steps = [record["data"] for record in records if "training/rollout_probs_diff_mean" in record["data"]]
    assert steps, "verl logged no rollout-vs-actor probability difference"
    for data in steps:
        assert data["training/rollout_probs_diff_mean"] < PROBS_DIFF_MEAN_BOUND, data["training/rollout_probs_diff_mean"]
        assert data["training/rollout_probs_diff_max"] < PROBS_DIFF_MAX_BOUND, data["training/rollout_probs_diff_max"]


def test_edge_sft_injected_megatron_recipe_trains_with_megatron(tmp_path):
    # EDA with gradient through entropy in Megatron's loss + GEC with the SFT control (EDGE's recipe with one
    # switch: the NLL term added to Megatron's loss, per-origin diagnostics); 2 steps, tensor parallel 1
    run = run_recipe_on_cpu(tmp_path, "run_edge-sft-injected_qwen2.5-math-7b_megatron.sh", "edge", TOTAL_STEPS=2)
    assert_megatron_trained(run, tensor_parallel=1)
    steps = [record["data"] for record in run["records"] if "actor/pg_loss" in record["data"]]
    assert len(steps) == 2
    for data in steps:
        assert data["edge_verl/gec/responses"] == 16
        assert 0.0 < data["actor/edge_eda/entropy_grad_share"] < 1.0
        assert data["actor/edge_eda/loss_scale_mean"] > 0.0
        assert data["edge_verl/adv/var"] == pytest.approx(data["edge_verl/edge_eda/adv_var_after"], rel=1e-5)
        check_origin_metrics(data)
        for origin in INJECTED:  # the surrogate has no gradient through GEC's text; the NLL term trains it
            assert data.get(f"actor/gec/{origin}/grad_share", 0.0) == 0.0, origin
        if data["edge_verl/gec/injected_token_frac"] > 0:
            assert data["actor/gec/sft_nll"] > 0


@pytest.fixture(scope="module")
def gepo_tp2(tmp_path_factory):
    out = tmp_path_factory.mktemp("gepo_megatron_tp2")
    # the tiny model's 259-token vocabulary padded to 264: tensor parallel splits the embedding rows evenly
    options = dict(vocab_multiple=8, CPU_TENSOR_PARALLEL=2)
    first = run_recipe_on_cpu(out, "run_gepo_qwen3.5-9b_megatron.sh", "gepo", as_printed=True, TOTAL_STEPS=2, SAVE_FREQ=2, **options)
    return out, first


def test_gepo_megatron_recipe_trains_with_tensor_parallel_2_as_printed(gepo_tp2):
    out, run = gepo_tp2
    assert_megatron_trained(run, tensor_parallel=2)
    assert_rollout_matches_actor(run["records"])
    last = run["records"][-1]["data"]
    for key in ("h_low", "h_high", "group_entropy_mean", "pos_attenuated_frac", "neg_attenuated_frac"):
        assert f"edge_verl/gepo/{key}" in last
    saved = json.loads((out / "checkpoints" / "global_step_2" / "edge_verl_state.json").read_text())["gepo_thresholds"]
    assert saved["num_updates"] == 2
    assert saved["h_low"] == pytest.approx(last["edge_verl/gepo/h_low"], rel=1e-12)
    assert (out / "checkpoints" / "global_step_2" / "actor" / "model" / "huggingface" / "model.safetensors").exists()
