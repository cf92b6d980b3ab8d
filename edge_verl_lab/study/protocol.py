"""The study's training protocol against EDGE-GRPO's reference, setting by setting: the deviation table.

The reference is EDGE-GRPO's released training (../specs: EDGE_GRPO.md section 3; its script ``train_grpo.sh``
leaves the learning rate schedule, warm-up and weight decay at transformers' TrainingArguments defaults:
linear decay, no warm-up, weight decay 0). The study runs the reference's value wherever the CPU scale
allows; every other setting is a named option of ``StudyConfig`` with the reason it differs, and the table a
report prints is computed here from the SAME verl overrides every run was launched with
(``edge_verl_lab.demo.run.training_overrides``), so the page cannot describe a protocol the runs did not have
(tests/test_results.py also reads each published run's ``command.txt`` against it).

Not in the table: what a method is (edge_verl/methods.py: GEC's probabilities and phrases, EDA's form,
GEPO's coefficients are the papers' values) and the evaluation (the report states its own).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Optional

from edge_verl_lab.demo import task as tasks
from edge_verl_lab.demo.run import training_overrides

if TYPE_CHECKING:
    from edge_verl_lab.study.config import StudyConfig


@dataclass(frozen=True)
class Setting:
    """One setting of the training protocol: its ``reference`` value (as text), the verl override ``key`` that
    carries the study's value in every run's command (None: not a verl option; ``study`` then says the
    value), the ``StudyConfig`` option that sets it (None: fixed by the study), and ``reason``: why the study
    differs from the reference where it does (empty where it must not)."""

    name: str
    reference: str
    key: Optional[str] = None
    option: Optional[str] = None
    reason: str = ""
    study: Optional[Callable[["StudyConfig", dict[str, str]], str]] = None

    def value(self, config: "StudyConfig", overrides: dict[str, str]) -> str:
        """The study's value as the table prints it, from the run's overrides (or ``study``)."""
        return self.study(config, overrides) if self.study is not None else overrides[self.key]

    def why(self) -> str:
        """The reason a deviation is printed with: the recorded one, else the option that chose it."""
        return self.reason or (f"set by the study's option {self.option} (its default is the reference's)" if self.option else "")


ONE_UPDATE = "1 (mini-batch = the step's prompts)"


def _updates_per_step(config: "StudyConfig", overrides: dict[str, str]) -> str:
    mini_batch = int(overrides["actor_rollout_ref.actor.ppo_mini_batch_size"])
    updates = config.prompts_per_step // mini_batch
    return ONE_UPDATE if updates == 1 else f"{updates} (mini-batch {mini_batch} prompts)"


def _kl(config: "StudyConfig", overrides: dict[str, str]) -> str:
    off = overrides["actor_rollout_ref.actor.use_kl_loss"] == "False" and overrides["algorithm.use_kl_in_reward"] == "False"
    return "none (beta = 0)" if off else "on"


SETTINGS: tuple[Setting, ...] = (
    Setting("model", "Qwen2.5-Math-1.5B / 7B (base)",
            reason="CPU scale: 2 cores run a ~90k-parameter model for a few dozen steps, not a 1.5B one",
            study=lambda config, overrides: "tiny Qwen2 (~90k parameters, byte tokenizer), warm-started on the task"),
    Setting("training data", "DeepScaleR-Hard-1K / Random-1K (math, 1K problems)", option="task",
            reason="a task with a verifiable rule, in the collapse regime by construction (edge_verl_lab/demo/task.py), that such a model can learn",
            study=lambda config, overrides: f"{config.task}: {tasks.get_task(config.task).description}"),
    Setting("loss aggregation", "seq-mean-token-mean", "actor_rollout_ref.actor.loss_agg_mode", "loss_agg_mode"),
    Setting("sampling temperature", "0.6", "actor_rollout_ref.rollout.temperature", "temperature"),
    Setting("top_p", "1.0", "actor_rollout_ref.rollout.top_p"),
    Setting("responses per prompt (G)", "8", "actor_rollout_ref.rollout.n", "responses_per_prompt"),
    Setting("prompts per step", "1", "data.train_batch_size", "prompts_per_step",
            reason="8 prompts a step give each step 8 groups (the reference's 1000 steps saw 1000); EDA normalises per group "
                   "and GEPO's thresholds are over the step's groups, so neither changes meaning"),
    Setting("optimizer updates per step", ONE_UPDATE, "actor_rollout_ref.actor.ppo_mini_batch_size",
            "updates_per_step", study=_updates_per_step),
    Setting("PPO epochs", "1", "actor_rollout_ref.actor.ppo_epochs"),
    Setting("learning rate", "1e-06", "actor_rollout_ref.actor.optim.lr", "lr",
            reason="the tiny model moves nowhere at 1e-6 in a few dozen steps; 1e-3 is where GRPO learns the task (measured)"),
    Setting("learning-rate schedule", "linear decay to 0", "actor_rollout_ref.actor.optim.lr_scheduler_type",
            reason="verl 0.9.1's FSDP actor offers constant or cosine only"),
    Setting("warm-up steps", "0", "actor_rollout_ref.actor.optim.lr_warmup_steps", "lr_warmup_steps",
            reason="Adam's first, sign-like updates at lr 1e-3 can wreck the tiny model's answer format"),
    Setting("weight decay", "0.0", "actor_rollout_ref.actor.optim.weight_decay", "weight_decay"),
    Setting("gradient clipping", "1.0", "actor_rollout_ref.actor.optim.clip_grad"),
    Setting("clip epsilon", "0.2", "actor_rollout_ref.actor.clip_ratio"),
    Setting("KL penalty", "none (beta = 0)", "actor_rollout_ref.actor.use_kl_loss", study=_kl),
    Setting("entropy bonus", "0", "actor_rollout_ref.actor.entropy_coeff"),
    Setting("training steps", "1000 (one epoch of 1K prompts)", "trainer.total_training_steps", "steps",
            reason="the CPU budget of a study of several methods x seeds"),
    Setting("max response tokens", "1024 (+ up to 256 for a GEC correction)", "data.max_response_length",
            reason="the task's answers are ~11 tokens (a reflection ~53): its sample cap holds them, a GEC method gets the "
                   "phrase and the continuation budget on top, as the reference",
            study=lambda config, overrides: _response_lengths(config)),
    Setting("GEC continuation tokens", "256", option="continuation_tokens",
            reason="a second answer is ~11 tokens; 64 leave room for babble as 256 do for a math continuation",
            study=lambda config, overrides: str(config.continuation_tokens)),
    Setting("max prompt tokens", "512", "data.max_prompt_length", reason="the task's prompts are ~30 tokens"),
    Setting("seed", "42", option="seeds", reason="several seeds, paired across methods, instead of one",
            study=lambda config, overrides: ", ".join(map(str, config.seeds))),
)


def _response_lengths(config: "StudyConfig") -> str:
    """Each method's ``data.max_response_length``, grouped: "16 (grpo, eda); 128 (edge)"."""
    by_length: dict[str, list[str]] = {}
    for method in config.methods:
        by_length.setdefault(training_overrides(config.demo_config(method, config.seeds[0]))["data.max_response_length"], []).append(method)
    return "; ".join(f"{length} ({', '.join(methods)})" for length, methods in sorted(by_length.items(), key=lambda item: int(item[0])))


# The one protocol key a method may set for itself: a GEC method's responses get room for a correction.
PER_METHOD_KEY = "data.max_response_length"


def deviation_table(config: "StudyConfig") -> list[dict]:
    """One row per ``SETTINGS`` entry: name, reference, the study's value, the verl override every run carries
    (key=value, from ``training_overrides`` of the study's first run), the option that sets it, whether it
    deviates, and why. Raises ``ValueError`` for a deviation without a reason (a protocol the page could not
    explain) or for one that differs between the study's runs where the study says it does not."""
    by_method = {method: training_overrides(config.demo_config(method, config.seeds[0])) for method in config.methods}
    overrides = by_method[config.methods[0]]
    rows = []
    for setting in SETTINGS:
        value = setting.value(config, overrides)
        deviates = value != setting.reference
        if deviates and not setting.why():
            raise ValueError(f"protocol: {setting.name} is {value!r} where the reference has {setting.reference!r}, and no reason is "
                             f"recorded; set the option back ({setting.option or setting.key}) or name the deviation in study/protocol.py")
        shared = setting.key is not None and setting.key != PER_METHOD_KEY
        if shared:
            for method, other_overrides in by_method.items():
                other = other_overrides[setting.key]
                if other != overrides[setting.key]:
                    raise ValueError(f"protocol: {setting.key} is {other} for {method} and {overrides[setting.key]} for "
                                     f"{config.methods[0]}: a study's methods share their protocol")
        rows.append({"setting": setting.name, "reference": setting.reference, "study": value, "deviates": deviates,
                     "reason": setting.why() if deviates else "", "option": setting.option,
                     "override": f"{setting.key}={overrides[setting.key]}" if shared else None})
    return rows


def run_overrides(config: "StudyConfig", method: str, seed: int) -> list[str]:
    """The protocol's ``key=value`` overrides that run (method, seed)'s command must carry."""
    return [f"{key}={value}" for key, value in training_overrides(config.demo_config(method, seed)).items()]
