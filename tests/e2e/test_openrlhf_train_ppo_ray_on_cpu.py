"""OpenRLHF 0.11.2's own ``train_ppo_ray``, for real, through edge_verl's launcher on this CPU.

Real: Ray (a local cluster, OpenRLHF's actors and placement groups), vLLM's CPU build (OpenRLHF's
``RolloutRayActor``, its engine-core and worker processes), DeepSpeed's CPU accelerator (ZeRO-2, gloo, its
checkpoint files), OpenRLHF's trainer (sync and async), experience maker, replay buffer and loss, and edge_verl's reward file,
GEC agent file, actor subclasses and options passed by content. Substituted (``edge_verl/openrlhf/cpu.py``):
``torch.cuda`` calls in OpenRLHF's trainer, Ray's logical GPUs, flash-attn's CUDA kernels (never called), and
the weight sync's transport (gloo where OpenRLHF uses NCCL; the same tensors, ranks and rendezvous), each
named in the test id: ``real-ray-vllm_cpu-deepspeed_cpu-gloo_weight_sync``.

The model is the demo's tiny Qwen2 on its copy task (warm-started: a few answers right), the data that task's
problems as OpenRLHF rows (``{"prompt": chat, "label": {"answer", "solution"}}``), and the five benchmarks'
evaluation files as the data command writes them, cut to their two shortest problems each.

Each assertion that checks a feature was seen to fail without it (the closing note of the change says how):
the options by content (the dumped options), EDA's advantages (recomputed from the run's dumped batch), the
old policy's entropy (recomputed by transformers from the initial model), the weight sync (a run whose vLLM
never loads the synced weights, ``cpu.SKIP_WEIGHT_LOAD_ENV_VAR``), evaluation per benchmark and evaluation never
corrected at the training temperature.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest
import torch

from edge_verl.data import PAPER_EVAL, read_records, shipped_file
from edge_verl.openrlhf import cpu
from edge_verl.openrlhf.data import openrlhf_row
from edge_verl.openrlhf.estimators import recompute_dumped
from edge_verl.openrlhf.train_ppo_ray import GEC_AGENT_FILE, REWARD_FILE
from edge_verl_lab.demo import task
from edge_verl_lab.demo.run import DemoConfig, build_warm_model, model_recipe
from tests.e2e import two_nodes
from tests.e2e.ray_head import own_ray_head

REPO = Path(__file__).resolve().parents[2]
VENV_PYTHON = REPO / ".venv" / "openrlhf-cpu" / "bin" / "python"
REAL = "real-ray-vllm_cpu-deepspeed_cpu-gloo_weight_sync"
N = 8  # responses per prompt
PROMPTS_PER_STEP = 2
STEP = re.compile(r"Global step (\d+): (\{.*\})")
EVALUATION = re.compile(r"Evaluation completed in .*?eval_metrics: (\{.*\})")
RESTORED = re.compile(r"edge_verl: GEPO thresholds restored at global_step (\d+): (\{.*\})")


def step_metrics(log: str) -> dict[int, dict]:
    """Global step -> the metrics OpenRLHF's trainer logged for it."""
    return {int(m.group(1)): ast.literal_eval(m.group(2)) for m in STEP.finditer(log)}


def build_inputs(folder: Path, max_positions: int | None = None) -> dict:
    """The tiny model and the task's rows in OpenRLHF's format under ``folder``; ``max_positions``: the
    model's position limit raised (rotary positions: nothing to train), for vLLM's ``max_model_len``."""
    if not VENV_PYTHON.is_file():
        pytest.fail(f"OpenRLHF's CPU environment is missing at {VENV_PYTHON.parent.parent}: run `bash scripts/setup.sh` "
                    "(without EDGE_VERL_OPENRLHF_SETUP=0).")
    # 70 warm-start steps (the copy task's own 50 leave ~12% right, 100 ~85%): some right, some wrong, so that
    # groups of 8 are mixed (a gradient at every step) and GEC has responses to correct
    config = DemoConfig(task="copy", rollout="vllm", seed=1, warm_start_steps=70, out=folder)
    model = build_warm_model(model_recipe(config), folder / "model")
    if max_positions is not None:
        config_file = model / "config.json"
        config_file.write_text(json.dumps({**json.loads(config_file.read_text()), "max_position_embeddings": max_positions}))
    rows = task.training_rows(task.get_task("copy"), 64, seed=1)
    data = folder / "train.jsonl"
    data.write_text("".join(
        json.dumps({"prompt": row["prompt"], "label": {"answer": row["reward_model"]["ground_truth"],
                                                        "solution": row["extra_info"]["solution"]}}) + "\n"
        for row in rows
    ))
    evaluation = []
    for name in PAPER_EVAL:  # the data command's rows (edge_verl.openrlhf.data), the two shortest problems
        records = sorted(read_records(shipped_file("eval", name)), key=lambda record: len(record["problem"]))[:2]
        evaluation.append(folder / "eval" / f"{name}.jsonl")
        evaluation[-1].parent.mkdir(exist_ok=True)
        evaluation[-1].write_text("".join(json.dumps(openrlhf_row(r["problem"], r["answer"], datasource=name, with_solution=False)) + "\n"
                                          for r in records))
    return {"model": model, "data": data, "eval": evaluation}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    # positions raised for the benchmarks' prompts (vLLM's max_model_len)
    return build_inputs(tmp_path_factory.mktemp("openrlhf_inputs"), max_positions=2048)


def launcher_arguments(inputs, out: Path, estimator: str, steps: int, *extra: str) -> list[str]:
    """The launcher's command line (OpenRLHF's arguments) for ``steps`` steps of the tiny model on CPU."""
    arguments = [
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
        arguments += ["--reward.remote_url", REWARD_FILE]
    return arguments


def cpu_environment(options_file: Path | None = None, **extra: str) -> dict[str, str]:
    env = {**os.environ, **cpu.environment(gpus=2), "PATH": f"{VENV_PYTHON.parent}{os.pathsep}{os.environ['PATH']}"}
    for name in ("EDGE_VERL_OPENRLHF", "EDGE_VERL_OPENRLHF_OPTIONS", "VIRTUAL_ENV", "RAY_ADDRESS", cpu.SKIP_WEIGHT_LOAD_ENV_VAR):
        env.pop(name, None)
    return {**env, **extra, **({"EDGE_VERL_OPENRLHF": str(options_file)} if options_file else {})}


def train(inputs, out: Path, estimator: str, steps: int, options: dict, *extra: str, env: dict | None = None,
          node: two_nodes.Node | None = None) -> dict:
    """One ``python -m edge_verl.openrlhf.train_ppo_ray`` run of ``steps`` steps in OpenRLHF's environment; its
    log and the metrics OpenRLHF logged per step (``env``: variables added to the run's environment; ``node``: the
    launcher runs in that node's namespace)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "options.json").write_text(json.dumps(options))
    command = [str(VENV_PYTHON), "-m", "edge_verl.openrlhf.train_ppo_ray",
               *launcher_arguments(inputs, out, estimator, steps, *extra)]
    command = command if node is None else node.command(command)
    result = subprocess.run(command, env=cpu_environment(out / "options.json", **(env or {})), cwd=out, capture_output=True,
                            text=True, timeout=900)
    log = result.stdout + result.stderr
    (out / "train.log").write_text(log)
    assert result.returncode == 0, log[-8000:]
    return {"log": log, "metrics": step_metrics(log)}


def dumps(folder: Path) -> list[dict]:
    """The advantage computations a run dumped (``dump.dir``), in order."""
    return [torch.load(path, weights_only=False) for path in sorted(folder.glob("advantages_*.pt"))]


def group_std(dumped: dict) -> float:
    """The mean over samples of the unbiased std of each sample's group rewards (OpenRLHF's group_reward_std)."""
    return dumped["rewards"].reshape(-1, dumped["n"]).std(-1).mean().item()


def initial_model_entropy(model: Path, dumped: dict, temperature: float) -> torch.Tensor:
    """(rows, width) token entropy of the initial model at ``temperature`` (transformers, float32) on the dumped
    sequences, laid out like the run's (OpenRLHF's Actor.forward: positions from the attention mask, logits of
    every position but the last, the action tail masked)."""
    from transformers import AutoModelForCausalLM

    policy = AutoModelForCausalLM.from_pretrained(model, torch_dtype=torch.float32).eval()
    rows, width = dumped["mask"].shape
    entropy, start = torch.zeros(rows, width), 0
    with torch.no_grad():
        for sequences, attention, actions in zip(dumped["sequences"], dumped["attention_mask"], dumped["action_widths"]):
            positions = (attention.long().cumsum(-1) - 1).clamp(min=0)
            logits = policy(input_ids=sequences, attention_mask=attention, position_ids=positions).logits[:, :-1] / temperature
            entropy[start : start + len(sequences), :actions] = torch.distributions.Categorical(logits=logits).entropy()[:, -actions:]
            start += len(sequences)
    return entropy * dumped["mask"]


def saved_thresholds(out: Path, step: int) -> dict:
    import torch

    states = torch.load(out / "ckpt" / "_actor" / f"global_step{step}" / "mp_rank_00_model_states.pt",
                        map_location="cpu", weights_only=False)
    return states["edge_verl_gepo_thresholds"]


@pytest.mark.parametrize("parts", [REAL])
def test_edge_eda_is_edas_function_of_the_runs_own_batch_and_the_weight_sync_carries_the_trained_weights(inputs, tmp_path, parts):
    # OpenRLHF's rollout correction (--algo.advantage.is_correction_level token) has vLLM return the sampled
    # tokens' log-probs and logs vllm_kl = mean(vLLM's log-prob - the trainer's old-policy log-prob) at each step.
    # Two EDA steps, the weights synced after step 1.
    out = tmp_path / "eda"
    options = {"edge_eda": {"entropy_gradient": False}, "dump": {"dir": str(out / "dump")}}
    synced = train(inputs, out, "edge_eda", 2, options, "--algo.advantage.is_correction_level", "token")
    batches = dumps(out / "dump")
    assert len(batches) == 2 and all(batch["estimator"] == "edge_eda" for batch in batches)
    for step, batch in zip((1, 2), batches):
        logged = synced["metrics"][step]
        # the advantages the run trained on are EDA's of the run's own rewards, groups and entropies
        result = recompute_dumped(batch)
        torch.testing.assert_close(batch["advantages"], result.advantages)
        grpo = result.outcome_advantages[:, None] * batch["mask"]  # the same batch's advantages without EDA
        assert not grpo.any() or not torch.allclose(batch["advantages"], grpo), step  # the entropies weighed them
        # OpenRLHF's group_reward_std is the std of the rewards' own groups
        assert logged["group_reward_std"] == pytest.approx(group_std(batch), rel=1e-4, abs=1e-6)
    # step 1's entropies are the initial model's (DeepSpeed bf16 in the run, transformers float32 here)
    first = batches[0]
    recomputed = initial_model_entropy(inputs["model"], first, temperature=1.0)
    tokens = first["mask"].bool()
    difference = (first["entropy_source"] - recomputed)[tokens].abs()
    # measured: mean 0.0022, max 0.0065 (of a mean entropy of 0.43); the old log-probs' negation in its place: 0.37, 4.9
    assert difference.mean() < 0.01 and difference.max() < 0.05, (difference.mean(), difference.max())
    assert synced["metrics"][1]["actor_grad_norm"] > 0  # step 1 moved the policy

    # vLLM sampled step 2 from the moved policy: |vllm_kl| of the synced weights. Measured: 3e-6 here, 0.038 in the
    # same run whose vLLM never loads the synced weights (cpu.SKIP_WEIGHT_LOAD_ENV_VAR=1), the control this
    # threshold was set between (run once per change of the weight sync, not in every CI run: a run's start-up)
    kl_synced = abs(synced["metrics"][2]["vllm_kl"])
    assert kl_synced < 3e-3, kl_synced


@pytest.mark.parametrize("parts", [REAL])
def test_edge_gec_corrects_training_never_evaluation_and_evaluates_each_benchmark(inputs, tmp_path, parts):
    # EDGE-GRPO whole: GEC (the agent file) corrects wrong responses, EDA weighs the advantages; evaluation on the
    # five benchmarks' files AT THE TRAINING TEMPERATURE: the trainer marks evaluation, the temperature does not
    options = {"gec": {}, "edge_eda": {"entropy_gradient": False}}  # the group size and evaluation: told by the trainer
    # OpenRLHF cuts the evaluation set to --data.max_samples too: a one-step training file, and room for all ten
    # evaluation rows (argparse keeps the last of a repeated flag)
    one_step = tmp_path / "train_one_step.jsonl"
    one_step.write_text("".join(inputs["data"].read_text().splitlines(keepends=True)[:PROMPTS_PER_STEP]))
    run = train(inputs, tmp_path / "edge", "edge_eda", 1, options, "--train.agent_func_path", GEC_AGENT_FILE,
                "--data.prompt_dataset", str(one_step), "--data.max_samples", str(2 * len(PAPER_EVAL)),
                "--eval.dataset", ",".join(map(str, inputs["eval"])), "--eval.steps", "1", "--eval.temperature", "1.0",
                "--eval.n_samples_per_prompt", "2")
    logged = run["metrics"][1]
    assert logged["edge_verl/gec/eval"] == 0  # training calls
    assert logged["edge_verl/gec/corrected"] > 0 and logged["edge_verl/gec/injected_tokens"] > 0, logged
    assert logged["reward"] > logged["edge_verl/gec/original_score"], logged  # the corrections were graded right
    assert logged["edge_eda/response_entropy"] > 0 and logged["actor_grad_norm"] > 0, logged
    assert "edge_verl/grader/caller" in logged
    evaluations = EVALUATION.findall(run["log"])
    assert len(evaluations) == 1, "no evaluation ran"
    evaluated = ast.literal_eval(evaluations[0])
    # each benchmark under its own name (the rows' datasource), none under OpenRLHF's default
    assert {f"eval_{name}_pass1" for name in PAPER_EVAL} <= set(evaluated), evaluated
    assert not any(key.startswith("eval_default") for key in evaluated), evaluated
    # every evaluation call marked, none corrected, though wrong answers abound (the tiny copy model on benchmarks)
    assert evaluated["edge_verl/gec/eval"] == 1 and evaluated["edge_verl/gec/corrected"] == 0, evaluated
    assert evaluated["edge_verl/gec/original_score"] < 1, evaluated


@pytest.mark.parametrize("parts", [REAL])
def test_the_async_trainer_runs_as_a_ray_job_with_its_options_keeps_eval_logs_and_resumes_with_its_thresholds(inputs, tmp_path, parts):
    # `ray job submit` on a running cluster: the launcher is the job's driver; its options file is named in the
    # job's runtime_env (the submitting shell's environment does not reach the driver). --train.async_enable:
    # OpenRLHF's PPOTrainerAsync creates its TrainingActor and GenerateSamplesActor itself; the launcher's
    # PPOTrainerAsync creates edge_verl's subclasses of both (one run for both: each costs a cluster's start-up).
    # Then the same command resumed from step 2's checkpoint: GEPO's thresholds are training state.
    out = tmp_path / "job"
    out.mkdir()
    options = {"gepo": {"alpha_low": 0.6}, "dump": {"dir": str(out / "dump")}}
    (out / "options.json").write_text(json.dumps(options))
    env = cpu_environment()
    ray = str(VENV_PYTHON.parent / "ray")
    runtime_env = json.dumps({"env_vars": {"EDGE_VERL_OPENRLHF": str(out / "options.json")}})
    # a head of the test's own (tests/e2e/ray_head.py): not the machine's default Ray folder and ports
    with own_ray_head(ray, env, "--num-gpus", "2", "--num-cpus", "8", "--include-dashboard", "true") as head:
        submit = [ray, "job", "submit", "--address", head["dashboard"], "--runtime-env-json", runtime_env, "--",
                  "python", "-m", "edge_verl.openrlhf.train_ppo_ray", *launcher_arguments(inputs, out, "gepo", 2),
                  "--train.async_enable", "--eval.dataset", str(inputs["data"]), "--eval.steps", "1", "--eval.temperature", "0.1"]
        for _ in range(6):  # the head's job agent registers a few seconds after `ray start` returns
            result = subprocess.run(submit, env=env, cwd=out, capture_output=True, text=True, timeout=900)
            if "No available agent to submit job" not in result.stdout + result.stderr:
                break
            time.sleep(5)
    log = result.stdout + result.stderr
    (out / "job.log").write_text(log)
    assert result.returncode == 0 and "succeeded" in log, log[-8000:]
    metrics = step_metrics(log)
    assert sorted(metrics) == [1, 2]
    for logged in metrics.values():
        # the plugin's metrics beside OpenRLHF's own (group_reward_std among them), from the real trainer actor
        assert {"gepo/h_low", "gepo/h_high", "gepo/negative_attenuated", "group_reward_std", "reward",
                "edge_verl/grader/caller", "actor_grad_norm"} <= set(logged)
    assert any(logged["actor_grad_norm"] > 0 for logged in metrics.values()), metrics
    # GEPO's thresholds are training state: in each of DeepSpeed's checkpoints, one EMA update per step (edge_verl's
    # trainer subclass ran in the job)
    assert [saved_thresholds(out, step)["num_updates"] for step in (1, 2)] == [1, 2]
    after_two = saved_thresholds(out, 2)
    assert after_two["h_low"] == pytest.approx(metrics[2]["gepo/h_low"], rel=1e-6)
    evaluation = re.search(r"Async evaluation completed: (\{.*\})", log)
    assert evaluation, "no evaluation ran"
    logged = ast.literal_eval(evaluation.group(1))
    assert "eval_default_pass1" in logged and "edge_verl/grader/caller" in logged, logged
    # the trainer ran with the file's alpha_low (the paper's is 0.5): what it computed is GEPO's at 0.6, step by step
    batches = dumps(out / "dump")
    assert [batch["options"]["alpha_low"] for batch in batches] == [0.6, 0.6]
    for step, batch in zip((1, 2), batches):
        result = recompute_dumped(batch)
        torch.testing.assert_close(batch["advantages"], result.advantages)
        attenuated = result.positive_attenuated
        torch.testing.assert_close(batch["outcome"][attenuated], 0.6 * batch["unshaped_outcome"][attenuated])
        assert metrics[step]["gepo/h_low"] == pytest.approx(batch["h_low"], rel=1e-5)

    resumed = train(inputs, out, "gepo", 3, options, "--ckpt.load_enable", "--train.async_enable")
    restored = [(int(m.group(1)), json.loads(m.group(2))) for m in RESTORED.finditer(resumed["log"])]
    assert restored == [(2, after_two)]  # exactly the saved state, floats included
    assert sorted(resumed["metrics"]) == [3]
    assert saved_thresholds(out, 3)["num_updates"] == 3
