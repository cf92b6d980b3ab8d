import json

import pytest

from edge_verl_lab.demo import task
from edge_verl_lab.demo.run import (
    DemoConfig, build_overrides, collect_metrics, failure_lines, keep_logged_rows, prepare_inputs, summarise,
)


def test_config_rejects_bad_values_naming_the_allowed_ones():
    with pytest.raises(ValueError, match="allowed: grpo, edge_eda, gepo, edge"):
        DemoConfig(algorithm="ppo")
    with pytest.raises(ValueError, match="trainer='v2'; allowed: v1, legacy"):
        DemoConfig(trainer="v2")
    with pytest.raises(ValueError, match="responses_per_prompt must be >= 2"):
        DemoConfig(responses_per_prompt=1)
    with pytest.raises(ValueError, match="rollout='sglang'; allowed: hf, vllm"):
        DemoConfig(rollout="sglang")


def test_the_vllm_demo_gets_vllm_and_a_model_vllms_cpu_attention_supports(tmp_path):
    from edge_verl_lab.demo import tiny

    config = DemoConfig(rollout="vllm", out=tmp_path)
    paths = {"model": tmp_path / "m", "train": tmp_path / "t.parquet", "val": tmp_path / "v.parquet"}
    overrides = build_overrides(config, paths)
    assert "actor_rollout_ref.rollout.name=vllm" in overrides and "actor_rollout_ref.rollout.name=hf" not in overrides
    # hidden 64 over 2 heads: head size 32 (vLLM's CPU attention: 32, 64, 80 and up), 1 key/value head
    assert (DemoConfig().attention_heads, config.attention_heads) == (4, 2)
    model = tiny.build_model(tiny.build_tokenizer(tmp_path / "tok"), attention_heads=config.attention_heads)
    assert model.config.hidden_size // model.config.num_attention_heads == 32
    assert model.config.num_key_value_heads == 1
    with pytest.raises(ValueError, match="attention_heads=3 must be >= 1 and divide hidden_size=64"):
        tiny.build_model(tiny.build_tokenizer(tmp_path / "tok"), attention_heads=3)


def test_a_run_over_several_nodes_joins_a_cluster_and_splits_each_update_over_its_workers(tmp_path):
    paths = {"model": tmp_path / "m", "train": tmp_path / "t.parquet", "val": tmp_path / "v.parquet"}
    config = DemoConfig(out=tmp_path, nnodes=2, ray_address="10.0.0.1:6379")
    values = dict(item.split("=", 1) for item in build_overrides(config, paths))
    assert (values["trainer.nnodes"], values["trainer.n_gpus_per_node"], values["+ray_kwargs.ray_init.address"]) == ("2", "1", "10.0.0.1:6379")
    # 8 prompts x 8 responses in 2 updates over 2 workers: 16 rollouts per worker and update, 32 per worker in a pass
    assert values["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"] == "16"
    assert values["actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu"] == "32"
    assert "+ray_kwargs.ray_init.num_gpus" not in values  # the joined cluster's nodes declare their own
    with pytest.raises(ValueError, match="nnodes=2 needs ray_address"):
        DemoConfig(out=tmp_path, nnodes=2)
    with pytest.raises(ValueError, match="3 trainer workers must divide an update's 4 prompts"):
        DemoConfig(out=tmp_path, workers_per_node=3)


def test_overrides_select_the_trainer_estimator_and_cpu_backend(tmp_path):
    paths = {"model": tmp_path / "m", "train": tmp_path / "t.parquet", "val": tmp_path / "v.parquet"}
    overrides = build_overrides(DemoConfig(algorithm="gepo", trainer="legacy", out=tmp_path), paths)
    assert "algorithm.adv_estimator=gepo" in overrides and "trainer.use_v1=False" in overrides
    assert "actor_rollout_ref.rollout.name=hf" in overrides
    assert "reward.custom_reward_function.path=pkg://edge_verl.reward" in overrides
    # 8 prompts x 8 responses, mini-batch 4 prompts: micro-batch must divide the 32 mini-batch rows
    assert "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=32" in overrides


def test_edge_is_eda_plus_gec_with_rollout_log_probs_off_seeded_by_the_demos_seed(tmp_path):
    paths = {"model": tmp_path / "m", "train": tmp_path / "t.parquet", "val": tmp_path / "v.parquet"}
    gepo = build_overrides(DemoConfig(algorithm="gepo", out=tmp_path), paths)
    assert "algorithm.adv_estimator=gepo" in gepo and not any("edge_gec" in override for override in gepo)
    edge = build_overrides(DemoConfig(algorithm="edge", out=tmp_path, seed=5), paths)
    assert edge[0] == "algorithm.adv_estimator=edge_eda"
    assert "actor_rollout_ref.rollout.calculate_log_probs=False" in edge and "+algorithm.edge_gec.enable=True" in edge
    assert "+algorithm.edge_gec.seed=5" in edge and "+algorithm.edge_eda.entropy_gradient=True" in edge
    detached = build_overrides(DemoConfig(algorithm="edge_eda", eda_form="detached", out=tmp_path), paths)
    assert "+algorithm.edge_eda.entropy_gradient=False" in detached and "actor_rollout_ref.actor.calculate_entropy=False" in detached


def test_a_gec_demo_trains_on_gec_rows_in_the_gec_file_variant(tmp_path):
    config = DemoConfig(algorithm="edge", out=tmp_path, warm_start_steps=1)
    import pandas as pd

    inputs = prepare_inputs(config)
    assert inputs["train"] == tmp_path / "data" / "train_gec.parquet"
    assert set(pd.read_parquet(inputs["train"], columns=["agent_name"])["agent_name"]) == {"edge_gec"}
    assert prepare_inputs(DemoConfig(algorithm="grpo", out=tmp_path, warm_start_steps=1))["train"] == tmp_path / "data" / "train.parquet"


def test_a_prompt_filler_lengthens_every_training_prompt_and_the_prompt_budget_by_its_characters(tmp_path):
    import pandas as pd

    with pytest.raises(ValueError, match="prompt_filler=-1 must be an integer >= 0"):
        DemoConfig(prompt_filler=-1)
    plain = prepare_inputs(DemoConfig(algorithm="grpo", out=tmp_path / "plain", model_dir=tmp_path / "m", warm_start_steps=1))
    filled_config = DemoConfig(algorithm="grpo", out=tmp_path / "filled", model_dir=tmp_path / "m", warm_start_steps=1, prompt_filler=900)
    filled = prepare_inputs(filled_config)
    before, after = (pd.read_parquet(inputs["train"])["prompt"] for inputs in (plain, filled))
    # the same rows (same seed), each user message 900 characters (= byte-level tokens) longer, ending as before
    assert [len(b[0]["content"]) + 900 for b in before] == [len(a[0]["content"]) for a in after]
    assert all(a[0]["content"].endswith(b[0]["content"]) for a, b in zip(after, before))
    assert "data.max_prompt_length=964" in build_overrides(filled_config, filled)  # 64 + 900


def test_rows_carry_answer_and_solution_for_gec():
    rows = task.make_rows(5, seed=0, split="train")
    assert all(row["extra_info"]["answer"] == row["reward_model"]["ground_truth"] for row in rows)
    assert all(row["extra_info"]["solution"].endswith("\\boxed{%s}" % row["extra_info"]["answer"]) for row in rows)
    assert task.make_rows(5, seed=0, split="train") == rows


def test_collect_metrics_merges_records_per_step_and_keeps_previous_rows_on_resume(tmp_path):
    raw, out = tmp_path / "raw.jsonl", tmp_path / "metrics.jsonl"
    out.write_text(json.dumps({"step": 1, "a": 1.0}) + "\n" + json.dumps({"step": 2, "a": 9.0}) + "\n")
    raw.write_text("\n".join(json.dumps(r) for r in [{"step": 2, "data": {"a": 2.0}}, {"step": 2, "data": {"b": 3.0}}]))
    rows = collect_metrics(raw, out, keep_previous=True)
    assert rows == [{"step": 1, "a": 1.0}, {"step": 2, "a": 2.0, "b": 3.0}]
    assert [json.loads(line) for line in out.read_text().splitlines()] == rows


def test_a_resumed_demo_keeps_the_rows_an_interrupted_attempt_logged(tmp_path):
    # an attempt killed after step 2: its rows are in verl's log only (its metrics.jsonl was never collected); the
    # resumed run's logger starts that log afresh with step 3, so the rows must be kept before it starts
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 1, "a": 1.0}) + "\n")  # an earlier resume's collection
    (tmp_path / "verl_metrics.jsonl").write_text(json.dumps({"step": 2, "data": {"a": 2.0}}) + "\n")
    assert [row["step"] for row in keep_logged_rows(tmp_path)] == [1, 2]
    (tmp_path / "verl_metrics.jsonl").write_text(json.dumps({"step": 3, "data": {"a": 3.0}}) + "\n")  # the resumed run
    rows = collect_metrics(tmp_path / "verl_metrics.jsonl", tmp_path / "metrics.jsonl", keep_previous=True)
    assert rows == [{"step": 1, "a": 1.0}, {"step": 2, "a": 2.0}, {"step": 3, "a": 3.0}]


def test_summary_compares_first_and_last_steps():
    rows = [{"step": i, "critic/score/mean": 0.1 * i} for i in range(1, 11)]
    table = summarise(rows)
    assert "reward" in table and "0.3000" in table and "0.8000" in table
    assert "EDA H share" not in table  # a metric no step logged gets no row


def test_failure_lines_keep_exception_messages_once():
    log = "noise\n\x1b[36m(Worker)\x1b[0m ValueError: bad thing\nValueError: bad thing\nUserWarning stuff\nKeyError: 'x'"
    assert failure_lines(log) == ["ValueError: bad thing", "KeyError: 'x'"]


def test_the_summary_and_plot_skip_a_validation_only_row():
    rows = [{"step": 0, "val-core/x/acc/mean@1": 0.5}] + [{"step": i, "critic/score/mean": 0.1 * i} for i in range(1, 11)]
    table = summarise(rows)
    assert "0.3000" in table and "0.8000" in table  # first 5 training steps: 0.1..0.5; step 0 is not one


def test_a_model_built_for_another_task_or_seed_is_rebuilt(tmp_path):
    from edge_verl_lab.demo import tiny

    copy = DemoConfig(out=tmp_path, warm_start_steps=1)
    inputs = prepare_inputs(copy)
    record = json.loads((inputs["model"] / tiny.RECORD).read_text())
    assert record["task"] == "copy" and record["seed"] == 0
    built = (inputs["model"] / "model.safetensors").stat().st_mtime_ns
    prepare_inputs(copy)
    assert (inputs["model"] / "model.safetensors").stat().st_mtime_ns == built, "the same recipe reuses the model"
    prepare_inputs(DemoConfig(out=tmp_path, warm_start_steps=1, task="addmod"))
    assert json.loads((inputs["model"] / tiny.RECORD).read_text())["task"] == "addmod"
    import pandas as pd

    held = pd.read_parquet(tmp_path / "data" / "val_heldout.parquet")
    assert set(held["data_source"]) == {"edge_verl/demo_addmod/heldout"} and len(held) == 20
