"""``edge-verl demo``: a real verl ``main_ppo`` run of a tiny model on CPU, end to end.

It builds the tiny model and byte-level tokenizer locally, writes the task's training set (copy-a-digit by
default; ``task.py`` holds the tasks), runs
``python -m verl.trainer.main_ppo`` (verl's own entry point, as a subprocess, with the plugin's CPU
backend), then turns verl's file log into ``metrics.jsonl`` (one object per training step), draws
``metrics.png`` and prints a summary table. This module does not import verl: it only launches it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from edge_verl_lab.demo import task
from edge_verl.integration.cpu.overrides import (
    BLAS_THREAD_VARIABLES, CPU_ISA_VARIABLES, ROLLOUTS, UNUSED_ON_FSDP, connect_overrides, cpu_environment, cpu_overrides,
    cpu_threads, pin_numeric_path,
)
from edge_verl.estimators import names as estimator_names
from edge_verl.estimators.base import declared_metrics
from edge_verl.methods import EDA_FORMS, METHODS, get_method, method_overrides


def headline_algorithms() -> tuple[str, ...]:
    """The demo's headline methods: verl's GRPO, each estimator of the registry alone under its own name (EDA's
    is the method "eda"; one registered from outside the package is its own method), and EDGE-GRPO."""
    return ("grpo", *estimator_names(), "edge")


def algorithms() -> tuple[str, ...]:
    """Methods of edge_verl/methods.py the demo runs: the headline ones first, then every other RL method
    (ablations, controls, baselines; not SFT)."""
    headline = headline_algorithms()
    return headline + tuple(name for name, method in METHODS.items() if method.estimator is not None and name not in headline + ("eda",))


def demo_methods() -> tuple[str, ...]:
    """What DemoConfig.algorithm accepts: ``algorithms()`` and EDA under its method name (the study's rows say "eda")."""
    return (*algorithms(), "eda")


_LIVE = {"HEADLINE_ALGORITHMS": headline_algorithms, "ALGORITHMS": algorithms, "DEMO_METHODS": demo_methods}


def __getattr__(name: str):
    """``HEADLINE_ALGORITHMS``, ``ALGORITHMS``, ``DEMO_METHODS``: the functions above, read when asked for (the
    registry may have grown since this module was imported)."""
    if name in _LIVE:
        return _LIVE[name]()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


TRAINERS = ("v1", "legacy")
# verl 0.9.1's actor.loss_agg_mode values (verl.trainer.ppo.core_algos.agg_loss).
LOSS_AGG_MODES = ("token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")
# The summary's columns before the estimators' own (each estimator's metrics declared with a ``short`` label).
BASE_SUMMARY_KEYS = (
    ("critic/score/mean", "reward"),
    ("edge_verl/gec/sampled/score_mean", "reward sampled"),
    ("response_length/mean", "resp len"),
    ("critic/advantages/max", "adv max"),
    ("critic/advantages/min", "adv min"),
    ("actor/entropy", "entropy"),
)


def summary_keys() -> tuple[tuple[str, str], ...]:
    """(metric, label) of the printed summary: ``BASE_SUMMARY_KEYS``, then every estimator's declared metrics that
    have a ``short`` label, in the registry's order."""
    return BASE_SUMMARY_KEYS + tuple((key, metric.short) for key, metric in declared_metrics() if metric.short)


def panel_metrics(panel: str) -> tuple[str, ...]:
    """The estimators' declared metrics on the plot's ``panel`` (``edge_verl.estimators.base.METRIC_PANELS``)."""
    return tuple(key for key, metric in declared_metrics() if metric.panel == panel)


# vLLM's CPU attention supports head sizes 32, 64, 80 and up: the vLLM demo's model has 2 heads of 32
# (1 key/value head) where the HF rollout's has 4 of 16 (2 key/value heads); both have hidden size 64.
ROLLOUT_ATTENTION_HEADS = {"hf": 4, "vllm": 2}


@dataclass
class DemoConfig:
    """Options of ``edge-verl demo`` (all validated in ``__post_init__``)."""

    # GEPO by default: the demo shows the plugin at work (its adaptive thresholds and attenuated advantages in
    # the summary and the plot); --algorithm grpo is verl's own baseline.
    algorithm: str = "gepo"
    # 30 steps: first-5 -> last-5 reward +0.122 at seed 0 (GEPO, copy; docs/cpu.md; at 20 steps the rise was
    # within the steps' sampling noise of ~0.05 on 64 responses)
    steps: int = 30
    prompts_per_step: int = 8
    responses_per_prompt: int = 8
    # The task (edge_verl_lab/demo/task.py): "copy" (the demo's), "addmod", "pair" (the study's), "max", or the
    # mixture "mix" (pair and max in one batch, each under its own data source).
    task: str = task.DEFAULT_TASK
    trainer: str = "v1"
    # EDA's form for edge_eda and edge: "gradient" (the reference's, as the EDGE recipes) or "detached".
    eda_form: str = "gradient"
    seed: int = 0
    out: Path = Path("runs/demo")
    # Adam's first updates are sign-like and moved every parameter of the tiny model by lr: at 2e-3
    # without warm-up one run in three collapsed to reward 0 after step 1 (measured); 1e-3 with a
    # 3-step warm-up learned on both trainers.
    lr: float = 1e-3
    lr_warmup_steps: int = 3
    # The training protocol's other knobs (edge_verl_lab/study/protocol.py compares each with EDGE-GRPO's reference;
    # the study sets the reference's values). The demo keeps the values its numbers in docs/cpu.md were measured with:
    # verl's token-mean loss, sampling at T = 1, two optimizer updates per step (mini-batch = half the prompts),
    # verl's weight decay 0.01.
    loss_agg_mode: str = "token-mean"
    temperature: float = 1.0
    updates_per_step: int = 2
    weight_decay: float = 0.01
    # The sampled response's token cap; None: the task's (Task.sample_tokens). A GEC method's responses get
    # room for a correction on top (``response_length``): the phrase and ``continuation_tokens``.
    sample_tokens: int | None = None
    continuation_tokens: int = 64
    # Supervised warm-start steps; None: the task's own (Task.warm_start_steps; copy: 50 steps leave the
    # tiny model ~12% accurate, just short of learning the task: a weak "base model" that GRPO visibly
    # improves within 20 steps (measured; 150 steps of random-digit format training instead left it at 8%
    # and GRPO did not move it)).
    warm_start_steps: int | None = None
    # The warm start's share of gold answers (the rest: the task's misconception or a random digit); None: the
    # task's (Task.warm_start_correct_fraction; 1.0 for copy and addmod, 0.16 for pair); a mixture takes each
    # part's and accepts only None.
    warm_start_correct_fraction: float | None = None
    save_freq: int = -1
    resume: bool = False
    # Characters (one byte-level token each) of filler prepended to every training prompt: long sequences
    # without generating them (scripts/bench_memory.py: the head's memory per token is the same for a prompt
    # token as for a response token, and the CPU rollout decodes one token at a time). 0: the task's prompts.
    prompt_filler: int = 0
    # Pad the tiny model's vocabulary (259 tokens) to a multiple of this: Megatron's tensor parallel
    # splits the embedding rows evenly over its ranks. 1 = unpadded (the demo's model).
    vocab_multiple: int = 1
    # "hf": the plugin's HF-generate rollout; "vllm": verl's vLLM rollout on vLLM's CPU build.
    rollout: str = "hf"
    # The tiny model's attention heads (hidden size 64); None: the rollout's (ROLLOUT_ATTENTION_HEADS).
    attention_heads: int | None = None
    # Log every estimator's advantage statistics, verl's GRPO included (+algorithm.edge_metrics.advantage_stats,
    # as the recipes do): ``edge-verl demo`` and the study turn it on; off, a GRPO run is a plain verl run.
    advantage_stats: bool = False
    # Log every training statistic per data source as well (+algorithm.edge_metrics.per_source: a mixture's
    # tasks, ``edge_verl/by_source/<data_source>/*``); the study turns it on for a mixture.
    per_source_stats: bool = False
    # Validation during training, uncorrected, on the task's training problems ("seen") and its held-out
    # problems ("heldout"), two data sources: before training, every ``test_freq`` steps and at the end, with
    # ``val_samples`` samples per problem at ``val_temperature``. Off (the demo's default): never validates.
    validate: bool = False
    test_freq: int = 5
    val_samples: int = 8
    val_temperature: float = 1.0
    # A model folder built by ``build_warm_model`` to train from instead of ``out/model`` (the study shares one
    # per seed among its methods); it must hold this config's recipe (``model_recipe``), else it is rebuilt.
    model_dir: Path | None = None
    # Save the actor's HF weights after the last step (``checkpoints/global_step_<steps>/actor/huggingface``),
    # for an evaluation outside verl; saved with verl's resumable checkpoint of that step.
    save_final_weights: bool = False
    # Join this running Ray cluster (``host:port``) instead of starting one: the study runs all its runs on one
    # cluster (``edge_verl_lab/study/cluster.py``), which must run with the CPU environment. None: start one.
    ray_address: str | None = None
    # verl's trainer workers: ``nnodes`` Ray nodes of ``workers_per_node`` each (trainer.nnodes x n_gpus_per_node;
    # one agent-loop and one reward worker per trainer worker). More than one node needs ``ray_address``: a cluster
    # of that many nodes, each started with ``--num-gpus`` of its workers (docs/multinode.md). A run's numbers do
    # not depend on where its workers sit: one node of two workers and two nodes of one give the same run.
    nnodes: int = 1
    workers_per_node: int = 1
    extra_overrides: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        the_task = task.get_task(self.task)  # raises on an unknown task, naming the defined ones
        allowed = demo_methods()
        if self.algorithm not in allowed:
            raise ValueError(f"algorithm={self.algorithm!r}; allowed: {', '.join(allowed)}")
        if self.trainer not in TRAINERS:
            raise ValueError(f"trainer={self.trainer!r}; allowed: {', '.join(TRAINERS)}")
        if self.eda_form not in EDA_FORMS:
            raise ValueError(f"eda_form={self.eda_form!r}; allowed: {', '.join(EDA_FORMS)}")
        if self.rollout not in ROLLOUTS:
            raise ValueError(f"rollout={self.rollout!r}; allowed: {', '.join(ROLLOUTS)}")
        if self.ray_address is not None and (not isinstance(self.ray_address, str) or ":" not in self.ray_address):
            raise ValueError(f"ray_address={self.ray_address!r}: a running Ray cluster's host:port, or None to start one")
        if self.attention_heads is None:
            self.attention_heads = ROLLOUT_ATTENTION_HEADS[self.rollout]
        if self.sample_tokens is None:
            self.sample_tokens = the_task.sample_tokens
        for name in ("steps", "prompts_per_step", "responses_per_prompt", "test_freq", "val_samples", "updates_per_step",
                     "sample_tokens", "continuation_tokens", "nnodes", "workers_per_node"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}={value!r} must be an integer >= 1")
        if isinstance(self.prompt_filler, bool) or not isinstance(self.prompt_filler, int) or self.prompt_filler < 0:
            raise ValueError(f"prompt_filler={self.prompt_filler!r} must be an integer >= 0")
        if self.nnodes > 1 and self.ray_address is None:
            raise ValueError(f"nnodes={self.nnodes} needs ray_address: a running cluster of {self.nnodes} nodes")
        if (self.prompts_per_step // max(self.updates_per_step, 1)) % (self.nnodes * self.workers_per_node):
            raise ValueError(f"{self.nnodes * self.workers_per_node} trainer workers must divide an update's "
                             f"{self.prompts_per_step // self.updates_per_step} prompts (each worker takes an equal share)")
        if self.prompts_per_step % self.updates_per_step:
            raise ValueError(f"updates_per_step={self.updates_per_step} must divide prompts_per_step={self.prompts_per_step}: "
                             "each optimizer update takes an equal share of the step's prompts (verl's ppo_mini_batch_size)")
        if self.loss_agg_mode not in LOSS_AGG_MODES:
            raise ValueError(f"loss_agg_mode={self.loss_agg_mode!r}; allowed: {', '.join(LOSS_AGG_MODES)}")
        if not (isinstance(self.temperature, (int, float)) and 0 < self.temperature < float("inf")):
            raise ValueError(f"temperature={self.temperature!r} must be > 0 (training samples)")
        if not (isinstance(self.weight_decay, (int, float)) and 0 <= self.weight_decay < float("inf")):
            raise ValueError(f"weight_decay={self.weight_decay!r} must be >= 0")
        if isinstance(self.lr_warmup_steps, bool) or not isinstance(self.lr_warmup_steps, int) or self.lr_warmup_steps < 0:
            raise ValueError(f"lr_warmup_steps={self.lr_warmup_steps!r} must be an integer >= 0")
        if self.responses_per_prompt < 2:
            raise ValueError("responses_per_prompt must be >= 2: group-relative advantages need a group")
        if not self.lr > 0:
            raise ValueError(f"lr={self.lr!r} must be > 0")
        if not self.val_temperature >= 0:
            raise ValueError(f"val_temperature={self.val_temperature!r} must be >= 0")
        if self.warm_start_steps is None:
            self.warm_start_steps = the_task.warm_start_steps
        mixture = isinstance(the_task, task.Mixture)
        if self.warm_start_correct_fraction is None:
            self.warm_start_correct_fraction = the_task.warm_start_correct_fraction
        if mixture and self.warm_start_correct_fraction is not None:
            raise ValueError(f"task {self.task} is a mixture: its warm start takes each part's gold share; "
                             "warm_start_correct_fraction must be None")
        if not mixture and (isinstance(self.warm_start_correct_fraction, bool) or not 0 < self.warm_start_correct_fraction <= 1):
            raise ValueError(f"warm_start_correct_fraction={self.warm_start_correct_fraction!r} must be in (0, 1]")
        if isinstance(self.warm_start_steps, bool) or not isinstance(self.warm_start_steps, int) or self.warm_start_steps < 0:
            raise ValueError(f"warm_start_steps={self.warm_start_steps!r} must be an integer >= 0")
        self.out = Path(self.out)
        self.model_dir = None if self.model_dir is None else Path(self.model_dir)
        if self.save_final_weights and self.save_freq > 0 and self.steps % self.save_freq:
            raise ValueError(f"save_final_weights with save_freq={self.save_freq}: the last step {self.steps} must be saved")


def model_recipe(config: DemoConfig) -> dict:
    """What the tiny model in ``out/model`` is built from: a model folder built from another recipe (another
    task, seed, size or warm start) is rebuilt, never reused."""
    the_task = task.get_task(config.task)
    recipe = {
        "built_by": "edge_verl.demo.tiny",  # a name every cached model folder records, not this module's path
        "task": config.task,
        "seed": config.seed,
        "warm_start_steps": config.warm_start_steps,
        "warm_start_correct_fraction": config.warm_start_correct_fraction,
        "misconception": the_task.misconception,
        "vocab_multiple": config.vocab_multiple,
        "attention_heads": config.attention_heads,
    }
    if the_task.reflection is not None:  # only then: a task without one keeps the recipe (and model) it had
        recipe["reflection"] = the_task.reflection.as_list()
    if isinstance(the_task, task.Mixture):  # each part's gold share and misconception make the model too
        recipe["parts"] = {part.name: [gold, part.misconception] for part, gold in zip(the_task.parts, task.gold_shares(the_task))}
    return recipe


def build_warm_model(recipe: dict, model_dir: Path) -> Path:
    """Build the tiny model of ``recipe`` (``model_recipe``'s fields) in ``model_dir``: a fresh Qwen2 of that
    seed and size, warm-started on the answer format of the task's training problems only (gold answers, or
    for the recipe's wrong share its misconception); unless the folder already holds that recipe's model."""
    from edge_verl_lab.demo import tiny  # torch: only here, so that the CLI's parser starts without it

    pin_numeric_path()  # the weights every run of the recipe starts from: the runs' numeric path

    model_dir = Path(model_dir)
    record = model_dir / tiny.RECORD
    if (model_dir / "model.safetensors").exists() and record.exists() and json.loads(record.read_text()) == recipe:
        return model_dir
    tokenizer = tiny.build_tokenizer(model_dir)
    model = tiny.build_model(
        tokenizer, seed=recipe["seed"], vocab_multiple=recipe["vocab_multiple"], attention_heads=recipe["attention_heads"]
    )
    draw = task.warm_start_draw(task.get_task(recipe["task"]), recipe["warm_start_correct_fraction"])
    tiny.warm_start(model, tokenizer, draw, "{}", steps=recipe["warm_start_steps"], seed=recipe["seed"])  # draw: whole completions
    tiny.save(model, tokenizer, model_dir, record=recipe)
    return model_dir


def prepare_inputs(config: DemoConfig) -> dict[str, Path]:
    """Tiny model (warm-started on the answer format, on the task's training problems only) and the train /
    validation parquet under ``config.out``: ``train`` (the method's file variant), ``val`` (training
    problems, the demo's set), ``val_seen`` and ``val_heldout`` (every training / held-out problem once)."""
    the_task = task.get_task(config.task)
    model_dir = build_warm_model(model_recipe(config), config.model_dir or config.out / "model")
    data_dir = config.out / "data"
    method = get_method(config.algorithm)  # a GEC method's rows go to GEC's agent loop, in train_gec.parquet
    rows = task.training_rows(the_task, 4096, seed=config.seed, agent_name=method.agent_name)
    for row in rows:
        row["prompt"][0]["content"] = prompt_filler(config.prompt_filler) + row["prompt"][0]["content"]
    train = task.write_parquet(rows, method.train_file(data_dir / "train.parquet"))
    val = task.write_parquet(task.training_rows(the_task, 32, seed=config.seed + 1, split="test"), data_dir / "val.parquet")
    inputs = {"model": model_dir, "train": train, "val": val}
    for split in task.VALIDATION_SPLITS:
        inputs[f"val_{split}"] = task.write_parquet(task.validation_rows(the_task, split), data_dir / f"val_{split}.parquet")
    return inputs


def prompt_filler(characters: int) -> str:
    """DemoConfig.prompt_filler's text: ``characters`` digits and spaces, one byte-level token each."""
    pattern = "0123456789 "
    return (pattern * (characters // len(pattern) + 1))[:characters]

# A sampled answer is capped at the task's ``sample_tokens`` (pair: 16 for ~11-token answers of the byte-level
# model; reflect: room for an answer, the reflection phrase and a second answer), GEC's first sample too; a
# correction then grows past it, as in the reference (1024 + up to 256 there): the phrase (31 byte tokens) and
# a ``continuation_tokens`` continuation, or the inject_answer text (up to ~90 tokens). GEC_ROOM holds the
# phrase with margin; the GEC loop's preflight checks the fit (check_budget). pair: 16 + 48 + 64 = 128.
SAMPLE_TOKENS = task.DEFAULT_SAMPLE_TOKENS
GEC_ROOM = 48


def response_length(config: DemoConfig) -> int:
    """``data.max_response_length`` of ``config``'s run: the sample cap, plus a GEC method's room to correct."""
    if not get_method(config.algorithm).gec:
        return config.sample_tokens
    return config.sample_tokens + GEC_ROOM + config.continuation_tokens


def training_overrides(config: DemoConfig) -> dict[str, str]:
    """The training protocol as verl keys -> values: what edge_verl_lab/study/protocol.py compares with the
    reference, read from here so that the study's deviation table is the runs' own settings."""
    mini_batch = config.prompts_per_step // config.updates_per_step
    return {
        "actor_rollout_ref.actor.loss_agg_mode": config.loss_agg_mode,
        "actor_rollout_ref.rollout.temperature": str(float(config.temperature)),
        "actor_rollout_ref.rollout.top_p": "1.0",
        "actor_rollout_ref.rollout.n": str(config.responses_per_prompt),
        "data.train_batch_size": str(config.prompts_per_step),
        # updates_per_step optimizer updates per step: verl splits the step's prompts into mini-batches
        "actor_rollout_ref.actor.ppo_mini_batch_size": str(mini_batch),
        "actor_rollout_ref.actor.ppo_epochs": "1",
        "actor_rollout_ref.actor.optim.lr": str(float(config.lr)),
        "actor_rollout_ref.actor.optim.lr_warmup_steps": str(config.lr_warmup_steps),
        "actor_rollout_ref.actor.optim.lr_scheduler_type": "constant",
        "actor_rollout_ref.actor.optim.weight_decay": str(float(config.weight_decay)),
        "actor_rollout_ref.actor.optim.clip_grad": "1.0",  # the v1 engine's; the legacy actor reads grad_clip
        "actor_rollout_ref.actor.grad_clip": "1.0",
        "actor_rollout_ref.actor.clip_ratio": "0.2",
        "actor_rollout_ref.actor.use_kl_loss": "False",
        "algorithm.use_kl_in_reward": "False",
        "actor_rollout_ref.actor.entropy_coeff": "0",
        "data.max_prompt_length": str(64 + config.prompt_filler),
        "data.max_response_length": str(response_length(config)),
        "trainer.total_training_steps": str(config.steps),
    }


def build_overrides(config: DemoConfig, inputs: dict[str, Path]) -> list[str]:
    """The complete Hydra override list for verl's main_ppo."""
    workers = config.nnodes * config.workers_per_node
    rollouts = config.prompts_per_step * config.responses_per_prompt // workers
    # one micro-batch per optimizer update and worker
    mini_rollouts = config.prompts_per_step // config.updates_per_step * config.responses_per_prompt // workers
    overrides = [
        *method_overrides(
            config.algorithm,
            seed=config.seed,
            eda_form=config.eda_form,
            first_sample_tokens=config.sample_tokens,
            continuation_tokens=config.continuation_tokens,
        ),
        f"data.train_files={inputs['train']}",
        f"data.val_files={validation_files(config, inputs)}",
        f"data.seed={config.seed}",
        f"actor_rollout_ref.model.path={inputs['model']}",
        *(f"{key}={value}" for key, value in training_overrides(config).items()),
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={mini_rollouts}",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={rollouts}",
        *validation_overrides(config),
        "reward.custom_reward_function.path=pkg://edge_verl.reward",
        "reward.custom_reward_function.name=compute_score",
        "trainer.logger=[console,file]",
        f"trainer.use_v1={config.trainer == 'v1'}",
        *(["+algorithm.edge_metrics.advantage_stats=True"] if config.advantage_stats else []),
        *(["+algorithm.edge_metrics.per_source=True"] if config.per_source_stats else []),
        *save_overrides(config),
        f"trainer.resume_mode={'auto' if config.resume else 'disable'}",
        f"trainer.default_local_dir={config.out / 'checkpoints'}",
        "trainer.project_name=edge_verl_demo",
        f"trainer.experiment_name={config.algorithm}_{config.trainer}",
        *ray_overrides(config),
        *config.extra_overrides,
    ]
    return overrides


def verl_metrics_log(out: Path) -> Path:
    """Where verl's file logger writes a run's records (``VERL_FILE_LOGGER_PATH``)."""
    return (out / "verl_metrics.jsonl").resolve()


def ray_overrides(config: DemoConfig) -> list[str]:
    """The CPU backend's overrides; joining ``config.ray_address`` when set (the run's metrics log then travels in
    the job's runtime env: its workers inherit the cluster's environment, not the driver's)."""
    overrides = cpu_overrides("fsdp", rollout=config.rollout, nnodes=config.nnodes, workers_per_node=config.workers_per_node)
    if config.ray_address is None:
        return list(overrides)
    return connect_overrides(overrides, config.ray_address, {"VERL_FILE_LOGGER_PATH": str(verl_metrics_log(config.out))})


# What a checkpoint holds when the run saves its final weights: verl's resumable state and the HF weights.
FINAL_SAVE_CONTENTS = "[model,optimizer,extra,hf_model]"


def save_overrides(config: DemoConfig) -> list[str]:
    """When verl saves checkpoints; with ``save_final_weights`` at least after the last step, HF weights included."""
    if not config.save_final_weights:
        return [f"trainer.save_freq={config.save_freq}"]
    frequency = config.steps if config.save_freq == -1 else config.save_freq
    return [f"trainer.save_freq={frequency}", f"actor_rollout_ref.actor.checkpoint.save_contents={FINAL_SAVE_CONTENTS}"]


def final_weights(config: DemoConfig) -> Path:
    """The HF folder of the actor after the last step (``save_final_weights``)."""
    return config.out / "checkpoints" / f"global_step_{config.steps}" / "actor" / "huggingface"


def validation_files(config: DemoConfig, inputs: dict[str, Path]) -> str:
    """``data.val_files``: the seen and held-out sets when the run validates, else the demo's set."""
    if config.validate:
        return "[" + ",".join(str(inputs[f"val_{split}"]) for split in task.VALIDATION_SPLITS) + "]"
    return str(inputs["val"])


def validation_overrides(config: DemoConfig) -> list[str]:
    """When to validate and how to sample; the demo's default never validates (greedy if it is asked to)."""
    if not config.validate:
        return ["actor_rollout_ref.rollout.val_kwargs.temperature=0", "trainer.val_before_train=False", "trainer.test_freq=-1"]
    return [
        f"actor_rollout_ref.rollout.val_kwargs.temperature={config.val_temperature}",
        f"actor_rollout_ref.rollout.val_kwargs.n={config.val_samples}",
        f"actor_rollout_ref.rollout.val_kwargs.do_sample={config.val_temperature > 0}",
        "trainer.val_before_train=True",
        f"trainer.test_freq={config.test_freq}",
    ]


def trained_steps(rows: list[dict]) -> list[dict]:
    """The rows of training steps: a validation-only row (step 0, ``val_before_train``) is not a step."""
    return [row for row in rows if any(key.startswith(("critic/", "actor/")) for key in row)]


def run_environment(rollout: str = "hf") -> dict[str, str]:
    """The environment of a demo run's processes: the CPU backend's, the packages an FSDP run with ``rollout``
    never uses hidden (``UNUSED_ON_FSDP``)."""
    return cpu_environment(unused=UNUSED_ON_FSDP[rollout])


# What a run's numbers depend on besides its command, recorded in its folder (environment.json).
RECORDED_PACKAGES = ("torch", "verl", "transformers", "edge-verl", "vllm")


def cpu_model() -> str | None:
    """The CPU's model name as the kernel reports it (None where /proc/cpuinfo has none)."""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            return next((line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")), None)
    except OSError:
        return None


def environment_record(env: dict[str, str]) -> dict:
    """The thread counts every process of the run uses, the numeric path its libraries take (the CPU and the
    variables that pin it) and the versions of what computes its numbers."""
    from importlib import metadata

    versions = {}
    for name in RECORDED_PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return {
        "threads": cpu_threads(env),
        **{name: env[name] for name in BLAS_THREAD_VARIABLES},
        "cpu": cpu_model(),
        "numeric_path": {name: env.get(name) for name in CPU_ISA_VARIABLES["avx2"]},
        "python": sys.version.split()[0],
        "packages": versions,
    }


def run_main_ppo(overrides: list[str], out: Path, stream=sys.stdout, rollout: str = "hf") -> int:
    """Run verl's main_ppo with the CPU backend (FSDP, ``rollout``) in ``run_environment``; full output goes to
    ``out/verl.log``, progress to ``stream``; the command and ``environment_record`` go beside them."""
    env = run_environment(rollout)
    env["VERL_FILE_LOGGER_PATH"] = str(verl_metrics_log(out))
    command = [sys.executable, "-m", "verl.trainer.main_ppo", *overrides]
    (out / "command.txt").write_text(" \\\n  ".join(command) + "\n")
    (out / "environment.json").write_text(json.dumps(environment_record(env), indent=1) + "\n")
    with open(out / "verl.log", "w") as log:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        assert process.stdout is not None
        for line in process.stdout:
            log.write(line)
            if "Training Progress" in line or "Error executing job" in line:
                stream.write(line.rstrip()[-160:] + "\n")
                stream.flush()
        return process.wait()


def collect_metrics(raw_path: Path, out_path: Path, keep_previous: bool = False) -> list[dict]:
    """verl's file-logger records -> one JSON object per training step (later records of a step merge in).

    ``keep_previous`` (a resumed run) keeps the rows already in ``out_path`` for steps this run did not log.
    """
    by_step: dict[int, dict] = {}
    if keep_previous and out_path.exists():
        for line in out_path.read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                by_step[int(row["step"])] = row
    fresh: set[int] = set()
    if raw_path.exists():
        for line in raw_path.read_text().splitlines():
            if line.strip():
                record = json.loads(line)
                step = int(record["step"])
                if step not in fresh:
                    by_step[step] = {"step": step}
                    fresh.add(step)
                by_step[step].update(record["data"])
    rows = [by_step[step] for step in sorted(by_step)]
    out_path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return rows


def keep_logged_rows(out: Path) -> list[dict]:
    """Before a resumed run: every row verl logged so far (an interrupted attempt's, which live only in verl's log,
    ``verl_metrics.jsonl``, until its end is collected) into ``metrics.jsonl``, since verl's file logger starts its log
    afresh. Returns the rows kept."""
    return collect_metrics(out / "verl_metrics.jsonl", out / "metrics.jsonl", keep_previous=True)


def plot_panels(rows: list[dict]) -> list[tuple[str, list[str]]]:
    """The plot's six panels, (title, the metrics it draws): each panel's metrics that ``rows`` log, the estimators'
    as they declare them (``panel_metrics``)."""

    def present(*keys: str) -> list[str]:
        return [key for key in keys if any(key in row for row in rows)]

    return [
        ("reward", present("critic/score/mean")),
        ("response length", present("response_length/mean")),
        ("advantage", present("critic/advantages/max", "critic/advantages/min", "critic/advantages/mean")),
        ("policy entropy", present("actor/entropy", *panel_metrics("entropy"))),
        (
            "advantage variance before/after shaping, tied groups",
            present(
                "edge_verl/adv/var",
                "edge_verl/adv/zero_variance_group_frac",
                *(f"edge_verl/{name}/{stat}" for name in estimator_names() for stat in ("adv_var_before", "adv_var_after")),
                "edge_verl/gec/sampled/adv_var",
            ),
        ),
        (
            "method statistics",
            present(*panel_metrics("statistics"), "edge_verl/gec/injected_token_frac"),
        ),
    ]


def plot_metrics(rows: list[dict], path: Path, title: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = plot_panels(rows)
    figure, axes = plt.subplots(2, 3, figsize=(15, 7))
    rows = trained_steps(rows)
    steps = [row["step"] for row in rows]
    for axis, (name, keys) in zip(axes.flat, panels):
        for key in keys:
            axis.plot(steps, [row.get(key, float("nan")) for row in rows], marker=".", label=key)
        axis.set_title(name, fontsize=9)
        axis.set_xlabel("step")
        if keys:
            axis.legend(fontsize=6)
        else:
            axis.text(0.5, 0.5, "not logged by this algorithm", ha="center", va="center", transform=axis.transAxes)
    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


def summarise(rows: list[dict], window: int = 5) -> str:
    """A small table: first/last ``window`` training-step means of the main curves."""
    rows = trained_steps(rows)
    head, tail = rows[:window], rows[-window:]

    def mean(part: list[dict], key: str) -> float:
        values = [row[key] for row in part if key in row]
        return sum(values) / len(values) if values else float("nan")

    lines = [f"{'metric':<14}{'first ' + str(window):>12}{'last ' + str(window):>12}"]
    for key, label in summary_keys():
        if any(key in row for row in rows):  # e.g. EDA's entropy-term share only in EDA's gradient form
            lines.append(f"{label:<14}{mean(head, key):>12.4f}{mean(tail, key):>12.4f}")
    return "\n".join(lines)


def failure_lines(log: str, limit: int = 12) -> list[str]:
    """The exception messages of a failed verl log (Ray repeats them per actor; keep each once)."""
    messages = []
    for line in log.splitlines():
        text = line.split("[0m", 1)[-1].strip()
        head = text.split(":", 1)[0]
        if head.endswith(("Error", "Exception", "Interrupt")) and " " not in head and text not in messages:
            messages.append(text[:400])
    return messages[-limit:]


def run_demo(config: DemoConfig, stream=sys.stdout) -> dict:
    """Prepare, train, collect. Returns {"returncode", "rows", "metrics", "plot", "seconds"}."""
    config.out.mkdir(parents=True, exist_ok=True)
    started = time.time()
    overrides = build_overrides(config, prepare_inputs(config))
    form = f" (EDA {config.eda_form})" if get_method(config.algorithm).eda else ""
    stream.write(
        f"edge-verl demo: {config.algorithm}{form} on verl's {config.trainer} trainer, {config.rollout} rollout, "
        f"{config.steps} steps, out={config.out}\n"
    )
    if config.resume:
        keep_logged_rows(config.out)
    returncode = run_main_ppo(overrides, config.out, stream, config.rollout)
    rows = collect_metrics(config.out / "verl_metrics.jsonl", config.out / "metrics.jsonl", keep_previous=config.resume)
    result = {"returncode": returncode, "rows": rows, "metrics": config.out / "metrics.jsonl", "plot": None}
    if rows:
        result["plot"] = plot_metrics(rows, config.out / "metrics.png", f"edge-verl demo: {config.algorithm} ({config.trainer})")
        stream.write(summarise(rows) + "\n")
    result["seconds"] = time.time() - started
    if returncode != 0:
        stream.write(f"verl failed (exit {returncode}); full log: {config.out / 'verl.log'}\n")
        stream.write("\n".join(failure_lines((config.out / "verl.log").read_text())) + "\n")
    return result
