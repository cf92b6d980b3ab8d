"""OpenRLHF 0.11.2's own ``train_ppo_ray``, for real, through edge_verl's launcher on this CPU.

Real: Ray (a local cluster, OpenRLHF's actors and placement groups), vLLM's CPU build (OpenRLHF's
``RolloutRayActor``, its engine-core and worker processes), DeepSpeed's CPU accelerator (ZeRO-2, gloo, its
checkpoint files), OpenRLHF's trainer, experience maker, replay buffer and loss, and edge_verl's reward file,
GEC agent file, actor subclasses and options passed by content. Substituted (``edge_verl/openrlhf/cpu.py``):
``torch.cuda`` calls in OpenRLHF's trainer, Ray's logical GPUs, flash-attn's CUDA kernels (never called), and
the weight sync's transport (gloo where OpenRLHF uses NCCL; the same tensors, ranks and rendezvous), each
named in the test id: ``real-ray-vllm_cpu-deepspeed_cpu-gloo_weight_sync``.

The model is the demo's tiny Qwen2 on its copy task (warm-started: a few answers right), the data that task's
problems as OpenRLHF rows (``{"prompt": chat, "label": {"answer", "solution"}}``).
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from edge_verl.openrlhf import cpu
from edge_verl.openrlhf.train_ppo_ray import GEC_AGENT_FILE, REWARD_FILE
from edge_verl_lab.demo import task
from edge_verl_lab.demo.run import DemoConfig, build_warm_model, model_recipe

REPO = Path(__file__).resolve().parents[2]
VENV_PYTHON = REPO / ".venv" / "openrlhf-cpu" / "bin" / "python"
REAL = "real-ray-vllm_cpu-deepspeed_cpu-gloo_weight_sync"
N = 8  # responses per prompt
PROMPTS_PER_STEP = 2
STEP = re.compile(r"Global step (\d+): (\{.*\})")
RESTORED = re.compile(r"edge_verl: GEPO thresholds restored at global_step (\d+): (\{.*\})")


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    if not VENV_PYTHON.is_file():
        pytest.fail(f"OpenRLHF's CPU environment is missing at {VENV_PYTHON.parent.parent}: run `bash scripts/setup.sh` "
                    "(without EDGE_VERL_OPENRLHF_SETUP=0).")
    folder = tmp_path_factory.mktemp("openrlhf_inputs")
    # 70 warm-start steps (the copy task's own 50 leave ~12% right, 100 ~85%): some right, some wrong, so that
    # groups of 8 are mixed (a gradient at every step) and GEC has responses to correct
    config = DemoConfig(task="copy", rollout="vllm", seed=1, warm_start_steps=70, out=folder)
    model = build_warm_model(model_recipe(config), folder / "model")
    rows = task.training_rows(task.get_task("copy"), 64, seed=1)
    data = folder / "train.jsonl"
    data.write_text("".join(
        json.dumps({"prompt": row["prompt"], "label": {"answer": row["reward_model"]["ground_truth"],
                                                        "solution": row["extra_info"]["solution"]}}) + "\n"
        for row in rows
    ))
    return {"model": model, "data": data}


def train(inputs, out: Path, estimator: str, steps: int, options: dict, *extra: str) -> dict:
    """One ``python -m edge_verl.openrlhf.train_ppo_ray`` run of ``steps`` steps in OpenRLHF's environment; its
    log and the metrics OpenRLHF logged per step."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "options.json").write_text(json.dumps(options))
    env = {**os.environ, **cpu.environment(gpus=2), "EDGE_VERL_OPENRLHF": str(out / "options.json")}
    env.pop("EDGE_VERL_OPENRLHF_OPTIONS", None)
    command = [
        str(VENV_PYTHON), "-m", "edge_verl.openrlhf.train_ppo_ray",
        "--actor.model_name_or_path", str(inputs["model"]),
        "--actor.num_nodes", "1", "--actor.num_gpus_per_node", "1", "--ref.num_nodes", "1", "--ref.num_gpus_per_node", "1",
        "--vllm.num_engines", "1", "--vllm.tensor_parallel_size", "1", "--vllm.sync_backend", "gloo", "--vllm.enforce_eager",
        "--data.prompt_dataset", str(inputs["data"]), "--data.input_key", "prompt", "--data.label_key", "label",
        "--data.apply_chat_template", "--data.max_len", "256", "--data.max_samples", str(steps * PROMPTS_PER_STEP),
        "--rollout.max_new_tokens", "16", "--rollout.n_samples_per_prompt", str(N),
        "--rollout.batch_size", str(PROMPTS_PER_STEP), "--rollout.micro_batch_size", "8",
        "--train.batch_size", str(N * PROMPTS_PER_STEP), "--train.micro_batch_size", "8", "--rollout.temperature", "1.0",
        "--algo.advantage.estimator", estimator, "--algo.kl.init_coef", "0",
        "--actor.adam.lr", "1e-3", "--actor.lr_warmup_ratio", "0", "--ds.zero_stage", "2", "--ds.param_dtype", "bf16",
        "--ds.attn_implementation", "sdpa", "--train.seed", "1",
        "--ckpt.path", str(out / "ckpt"), "--ckpt.save_steps", "1", "--ckpt.output_dir", str(out / "final"), *extra,
    ]
    if "--train.agent_func_path" not in extra:
        command += ["--reward.remote_url", REWARD_FILE]
    result = subprocess.run(command, env=env, cwd=out, capture_output=True, text=True, timeout=900)
    log = result.stdout + result.stderr
    (out / "train.log").write_text(log)
    assert result.returncode == 0, log[-8000:]
    metrics = {int(m.group(1)): ast.literal_eval(m.group(2)) for m in STEP.finditer(log)}
    return {"log": log, "metrics": metrics}


def saved_thresholds(out: Path, step: int) -> dict:
    import torch

    states = torch.load(out / "ckpt" / "_actor" / f"global_step{step}" / "mp_rank_00_model_states.pt",
                        map_location="cpu", weights_only=False)
    return states["edge_verl_gepo_thresholds"]


@pytest.mark.parametrize("parts", [REAL])
def test_gepo_trains_two_steps_checkpoints_and_resumes_with_its_thresholds(inputs, tmp_path, parts):
    out = tmp_path / "gepo"
    first = train(inputs, out, "gepo", 2, {"gepo": {}})
    assert sorted(first["metrics"]) == [1, 2]
    for step, logged in first["metrics"].items():
        # the plugin's metrics beside OpenRLHF's own (group_reward_std among them), from the real trainer actor
        assert {"gepo/h_low", "gepo/h_high", "gepo/negative_attenuated", "group_reward_std", "reward",
                "edge_verl/grader/caller", "actor_grad_norm"} <= set(logged)
    assert any(logged["actor_grad_norm"] > 0 for logged in first["metrics"].values()), first["metrics"]
    # GEPO's thresholds are training state: in each of DeepSpeed's checkpoints, one EMA update per step
    assert [saved_thresholds(out, s)["num_updates"] for s in (1, 2)] == [1, 2]
    after_two = saved_thresholds(out, 2)
    assert after_two["h_low"] == pytest.approx(first["metrics"][2]["gepo/h_low"], rel=1e-6)

    resumed = train(inputs, out, "gepo", 3, {"gepo": {}}, "--ckpt.load_enable")
    restored = [(int(m.group(1)), json.loads(m.group(2))) for m in RESTORED.finditer(resumed["log"])]
    assert restored == [(2, after_two)]  # exactly the saved state, floats included
    assert sorted(resumed["metrics"]) == [3]
    assert saved_thresholds(out, 3)["num_updates"] == 3


@pytest.mark.parametrize("parts", [REAL])
def test_edge_eda_trains_and_the_weight_sync_carries_the_trained_weights(inputs, tmp_path, parts):
    # OpenRLHF's rollout correction (--algo.advantage.is_correction_level token) has vLLM return the sampled
    # tokens' log-probs and logs vllm_kl = mean(vLLM's log-prob - the trainer's old-policy log-prob) at each step.
    # Measured (GEPO, lr 1e-3, 4 steps): |vllm_kl| <= 2.5e-4 with the weights synced after each update, and
    # 0.015, 0.054, 0.060 at steps 2-4 when vLLM skipped the synced weights (load_weights not called)
    run = train(inputs, tmp_path / "eda", "edge_eda", 2, {"edge_eda": {"entropy_gradient": False}},
                "--algo.advantage.is_correction_level", "token")
    first, second = run["metrics"][1], run["metrics"][2]
    # EDA's old-policy entropy comes from the real policy actors (edge_verl_token_entropy, a second forward)
    assert first["edge_eda/response_entropy"] > 0 and first["edge_eda/entropy_ratio"] > 0
    assert "group_reward_std" in first
    assert first["actor_grad_norm"] > 0, first  # step 1 moved the policy ...
    assert abs(second["vllm_kl"]) < 3e-3, second  # ... and vLLM sampled step 2 from the moved policy


@pytest.mark.parametrize("parts", [REAL])
def test_gec_corrects_one_step_through_the_agent_file(inputs, tmp_path, parts):
    options = {"gec": {"n_samples_per_prompt": N, "rollout_temperature": 1.0}}
    run = train(inputs, tmp_path / "gec", "group_norm", 1, options, "--train.agent_func_path", GEC_AGENT_FILE)
    logged = run["metrics"][1]
    assert logged["edge_verl/gec/eval"] == 0  # training calls, told by the temperature
    assert logged["edge_verl/gec/corrected"] > 0 and logged["reward"] > 0, logged  # wrong responses corrected
    assert "edge_verl/grader/caller" in logged
