"""The plugin's estimators (``gepo``, ``edge_eda``, every one of the registry) inside OpenRLHF 0.11.2, which has
no hook for advantage estimators.

OpenRLHF picks its estimator in an if/elif of ``RemoteExperienceMaker.compute_advantages_and_returns``. This
module holds what the subclasses of ``actors.py`` (put in OpenRLHF's place by the launcher,
``edge_verl.openrlhf.train_ppo_ray``) do, as functions of OpenRLHF's objects; it imports no OpenRLHF. With any
other ``--algo.advantage.estimator`` OpenRLHF's own code runs unchanged. Nothing here names an estimator: each
is its declaration in the registry (``edge_verl.estimators.base.ESTIMATORS``).

- experience maker: for an estimator of the registry, ``compute_edge_advantages`` does what OpenRLHF does for its
  group estimators (rewards to float32, its length penalties, groups = n contiguous samples of the original order
  through ``Experience.index``) and then calls the estimator's ONE function on the whole step padded to one
  width; advantages = returns, per token; its outcome advantage is OpenRLHF's ``return`` and its per-sample
  values are logged as ``<estimator>/<key>``. The inputs it reads: the old log-probs are ``action_log_probs``,
  which OpenRLHF computed just before.
- The old policy's full-vocabulary token entropy (EDA's input; GEPO's with ``group_entropy=token_entropy``) is
  not computed by OpenRLHF at experience time. ``edge_verl_token_entropy``, added to the actor workers, runs
  OpenRLHF's own ``Actor.forward(..., return_entropy=True)`` (temperature-scaled logits, as the log-probs)
  without gradient. Cost: a SECOND no-grad forward of the policy over the step's samples (as long as the
  old-log-prob forward) and one (B, A) float32 tensor per sample back to the trainer. Options that move an
  estimator's work into the actor's loss (EDA's ``entropy_gradient=true``) have no OpenRLHF hook and are refused.
- Reward clamp: OpenRLHF clamps to ``--reward.clip_range`` (default (-10, 10)) AFTER group normalisation,
  which would cap EDA's amplified advantages at 10. For the plugin's estimators the clamp is applied to the
  raw rewards (what its name says) and never to advantages.
- KL: a KL penalty folded into the reward (``--algo.kl.init_coef > 0`` without ``--algo.kl.use_loss``) is
  refused; use the KL loss or none (the papers: none).
- trainer: an estimator's training state (GEPO's ``GepoThresholds``, on the experience maker) is added to the
  ``client_states`` every checkpoint stores (``edge_verl_<state_key>``), and restored from the checkpoint dict
  that ``restore_best_checkpoint_state`` receives on resume (sync and async trainers alike); resuming from a
  checkpoint without it is an error unless ``<estimator>.resume_without_state``.
- ``dump.dir`` set: each computation's inputs, options and outputs are saved there (``dump_batch``).
- evaluation: OpenRLHF's ``compute_eval_metrics`` (sync and async trainers) reduces the eval samples to pass@k,
  lengths and truncation, dropping every ``extra_logs`` value; ``keeping_plugin_logs`` keeps its logs and adds the mean over
  the eval samples of each of the plugin's (``edge_verl/...``: GEC's, which says it did not correct, and the
  grader's health), which OpenRLHF's loggers write under ``eval/``.
"""

from __future__ import annotations

import functools
import itertools
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import torch

from edge_verl.estimators.base import ESTIMATORS, Estimator, GroupBatch
from edge_verl.estimators.groups import masked_response_mean
from edge_verl.openrlhf.options import OpenRlhfOptions

ENTROPY_METHOD = "edge_verl_token_entropy"
STATE_PREFIX = "edge_verl_"  # an estimator's state: client_states[STATE_PREFIX + state_key], and the maker's attribute
DUMP_COUNT_ATTRIBUTE = "edge_verl_dumped"
PLUGIN_LOG_PREFIX = "edge_verl/"  # the names of the plugin's extra_logs (GEC executor, reward function)


def estimator_of(args: Any) -> Optional[Estimator]:
    """The registry's estimator a run's (hierarchized) arguments name; None for OpenRLHF's own."""
    return ESTIMATORS.get(args.algo.advantage.estimator)


def state_key(entry: Estimator) -> str:
    """Where an estimator's training state lives: the key in OpenRLHF's ``client_states`` and the experience
    maker's attribute (GEPO: ``edge_verl_gepo_thresholds``)."""
    return STATE_PREFIX + entry.state_key


def check_run_args(args: Any, options: OpenRlhfOptions) -> None:
    """What the plugin's estimators need from OpenRLHF's (hierarchized) arguments; nothing for other estimators."""
    entry = estimator_of(args)
    if entry is None:
        return
    estimator = entry.name
    if args.rollout.n_samples_per_prompt < 2:
        raise ValueError(
            f"--algo.advantage.estimator {estimator} compares the responses of a group: --rollout.n_samples_per_prompt="
            f"{args.rollout.n_samples_per_prompt} must be >= 2."
        )
    # compute_edge_advantages sees one rollout step's groups: --rollout.batch_size prompts
    entry.check_groups(args.rollout.batch_size, "--rollout.batch_size")
    if args.algo.kl.init_coef > 0 and not args.algo.kl.use_loss:
        raise ValueError(
            f"--algo.advantage.estimator {estimator} computes outcome advantages and takes no KL penalty in the reward "
            f"(--algo.kl.init_coef={args.algo.kl.init_coef}): add --algo.kl.use_loss, or set --algo.kl.init_coef 0."
        )
    why = entry.loss_entropy(options.estimator(estimator))
    if why is not None:
        option = entry.loss_option(options.estimator(estimator)).removeprefix("algorithm.")
        raise ValueError(
            f"{option} needs the current policy's entropy inside the actor loss, which OpenRLHF has no hook for; "
            "switch it off (the detached form, entropy of the old policy)."
        )


def pad_columns(tensors: Sequence[torch.Tensor], width: int) -> torch.Tensor:
    """(B_i, A_i) tensors -> one (sum B_i, width) float32 tensor, zero-padded on the right."""
    return torch.cat([torch.nn.functional.pad(t.float(), (0, width - t.shape[1])) for t in tensors], dim=0)


def estimator_state(maker: Any, options: OpenRlhfOptions) -> Optional[Any]:
    """The training state a run's experience maker owns for its estimator (created on first use); None unless
    the run's estimator is the registry's and keeps state."""
    entry = estimator_of(maker.strategy.args)
    if entry is None or entry.state is None:
        return None
    state = getattr(maker, state_key(entry), None)
    if state is None:
        state = entry.new_state(options.estimator(entry.name))
        setattr(maker, state_key(entry), state)
    return state


def old_policy_token_entropy(maker: Any, experiences: Sequence[Any], width: int) -> torch.Tensor:
    """(B, width) token entropy of the old policy from the actor workers (``edge_verl_token_entropy``)."""
    args = maker.strategy.args
    refs = maker.actor_model_group.async_run_method_batch(
        method_name=ENTROPY_METHOD,
        sequences=[e.sequences for e in experiences],
        action_mask=[e.action_mask for e in experiences],
        attention_mask=[e.attention_mask for e in experiences],
    )
    entropies = maker._flatten_results(refs, args.ds.ring_attn_size * args.ds.tensor_parallel_size)
    return pad_columns(entropies, width)


def token_inputs(maker: Any, experiences: Sequence[Any], names: Sequence[str], width: int) -> dict[str, torch.Tensor]:
    """The per-token inputs (``TOKEN_INPUTS``) an estimator reads, from OpenRLHF's experiences, (B, width)."""
    sources = {
        "old_log_probs": lambda: pad_columns([e.action_log_probs for e in experiences], width),
        "entropy": lambda: old_policy_token_entropy(maker, experiences, width),
    }
    return {name: sources[name]() for name in names}


def compute_edge_advantages(maker: Any, experiences: list, options: OpenRlhfOptions, apply_length_penalties: Callable) -> list:
    """OpenRLHF's ``compute_advantages_and_returns`` for an estimator of the registry (see the module docstring)."""
    args = maker.strategy.args
    entry = estimator_of(args)
    estimator = entry.name
    check_run_args(args, options)
    for experience in experiences:
        experience.rewards = experience.rewards.to(torch.promote_types(experience.rewards.dtype, torch.float32))
    apply_length_penalties(experiences, args)
    n = args.rollout.n_samples_per_prompt
    counts = [len(e.index) for e in experiences]
    positions = torch.tensor(list(itertools.chain.from_iterable(e.index for e in experiences)))
    if len(positions) % n:
        raise ValueError(f"{estimator}: {len(positions)} samples are not whole groups of --rollout.n_samples_per_prompt={n}")
    scores = torch.cat([e.rewards for e in experiences])
    # OpenRLHF's own group_reward_std (its compute_advantages_and_returns logs it for every estimator): the
    # unbiased std of each group's rewards after the length penalties, before any clamp
    by_position = torch.empty_like(scores)
    by_position[positions] = scores
    group_reward_std = by_position.reshape(-1, n).std(-1).index_select(0, positions // n) if n > 1 else None
    if args.reward.clip_range:
        scores = scores.clamp(min=args.reward.clip_range[0], max=args.reward.clip_range[1])
    width = max(e.action_mask.shape[1] for e in experiences)
    mask = pad_columns([e.action_mask for e in experiences], width)
    group_index, num_groups = positions // n, len(positions) // n
    valid = torch.ones(len(positions), dtype=torch.bool)
    estimator_options = options.estimator(estimator)
    tokens = token_inputs(maker, experiences, entry.inputs(estimator_options), width)
    state = estimator_state(maker, options)
    dumped = {"estimator": estimator, "rewards": by_position, "positions": positions, "n": n, "mask": mask,
              "sequences": [e.sequences for e in experiences], "attention_mask": [e.attention_mask for e in experiences],
              "action_widths": [e.action_mask.shape[1] for e in experiences],
              "options": estimator_options.to_dict(), "tokens": tokens,
              # what the estimator read per token (EDA: the old policy's token entropy; GEPO: that or the old log-probs)
              "entropy_source": next(iter(tokens.values()), None)}
    if state is not None:
        dumped["state_before"] = state.state_dict()
    output = entry.compute(GroupBatch(scores, mask, group_index, num_groups, valid, tokens), estimator_options, state)
    # OpenRLHF's "return": the estimator's outcome advantage, else each row's mean advantage over its response
    outcome = output.outcome if output.outcome is not None else masked_response_mean(output.advantages, mask)
    dumped.update(output.extras)
    start = 0
    for experience, count in zip(experiences, counts):
        rows = slice(start, start + count)
        experience.advantages = output.advantages[rows, : experience.action_mask.shape[1]].clone()
        experience.returns = experience.advantages.clone()
        experience.info["return"] = outcome[rows].clone()
        if group_reward_std is not None:
            experience.info["group_reward_std"] = group_reward_std[rows].clone()
        for name, values in output.per_sample.items():
            experience.info[f"{estimator}/{name}"] = values[rows].clone()
        experience.kl = None
        start += count
    dump_batch(maker, options, {**dumped, "scores": scores, "outcome": outcome, "advantages": output.advantages,
                                "group_reward_std": group_reward_std})
    return experiences


def recompute_dumped(dumped: dict):
    """A computation ``dump_batch`` saved, computed again by the estimator's ONE function from the dump's own
    inputs, options and training state before the step: the math's own record (EDA's ``EdaResult``, GEPO's
    ``GepoResult``), else its ``EstimatorOutput``; rows in the dump's order."""
    entry = ESTIMATORS[dumped["estimator"]]
    options = entry.options(dumped["options"])
    n, positions = dumped["n"], dumped["positions"]
    state = entry.new_state(options)
    if state is not None:
        state.load_state_dict(dumped["state_before"])
    batch = GroupBatch(dumped["scores"], dumped["mask"], positions // n, len(positions) // n,
                       torch.ones(len(positions), dtype=torch.bool), dumped["tokens"])
    output = entry.compute(batch, options, state)
    return output.result if output.result is not None else output


def dump_batch(maker: Any, options: OpenRlhfOptions, payload: dict) -> Optional[Path]:
    """With ``dump.dir``: ``payload`` saved as ``advantages_<k>.pt`` (k = 1, 2, ... the maker's computations).

    Rows are in the order OpenRLHF's experiences hold them; ``positions`` maps each row to its sample's place in
    the original order (group = position // n); ``rewards`` are by position, after the length penalties and
    before the clamp, ``scores`` by row after it; ``sequences`` / ``attention_mask`` / ``action_widths`` per
    experience (its actions are the last ``action_widths`` positions of its sequences). ``tokens``: what the estimator
    read per token, by name (``entropy_source``: the first of them; EDA: the old policy's token entropy; GEPO: that
    or the old log-probs, by ``group_entropy``); ``options``: its options; ``state_before``: its training state
    before the step (an estimator with state); and the estimator's ``EstimatorOutput.extras``."""
    folder = options.dump.dir
    if not folder:
        return None
    count = getattr(maker, DUMP_COUNT_ATTRIBUTE, 0) + 1
    setattr(maker, DUMP_COUNT_ATTRIBUTE, count)
    path = Path(folder) / f"advantages_{count:05d}.pt"
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(payload, path)
    return path


def plugin_eval_logs(samples: Sequence[Any]) -> dict[str, float]:
    """The mean over the eval samples of each of the plugin's ``extra_logs`` (one value per sample, in
    ``Experience.info``); a name some samples lack is averaged over those that have it."""
    values: dict[str, list[float]] = {}
    for sample in samples:
        for name, value in (getattr(sample, "info", None) or {}).items():
            if name.startswith(PLUGIN_LOG_PREFIX):
                values.setdefault(name, []).extend(torch.as_tensor(value, dtype=torch.float64).flatten().tolist())
    return {name: sum(found) / len(found) for name, found in sorted(values.items()) if found}


def keeping_plugin_logs(compute: Callable) -> Callable:
    """OpenRLHF's ``compute_eval_metrics`` -> the same, with ``plugin_eval_logs`` of the samples added."""

    @functools.wraps(compute)
    def compute_eval_metrics(eval_dataloader, samples_list, n_samples_per_prompt):
        return {**compute(eval_dataloader, samples_list, n_samples_per_prompt), **plugin_eval_logs(samples_list)}

    return compute_eval_metrics


def edge_verl_token_entropy(self, sequences, action_mask, attention_mask):
    """(B, A) token entropy of the actor (no gradient) on an experience's sequences, masked like OpenRLHF's
    action log-probs; runs in a PolicyModelActor worker (GPU)."""
    device = torch.cuda.current_device() if torch.cuda.is_available() else "cpu"  # "cpu": the CPU test only
    self.actor.eval()
    with torch.no_grad():
        _, output = self.actor(
            sequences.to(device), action_mask.to(device), attention_mask.to(device),
            return_output=True, return_entropy=True, ring_attn_group=self.strategy.ring_attn_group,
        )
    self.actor.train()
    entropy = output.entropy[:, -action_mask.shape[1]:] * action_mask.to(device).float()
    return entropy.to("cpu")
