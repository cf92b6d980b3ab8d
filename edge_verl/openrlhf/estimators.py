"""``gepo`` and ``edge_eda`` inside OpenRLHF 0.11.2, which has no hook for advantage estimators.

OpenRLHF picks its estimator in an if/elif of ``RemoteExperienceMaker.compute_advantages_and_returns``. This
module holds what the subclasses of ``actors.py`` (put in OpenRLHF's place by the launcher,
``edge_verl.openrlhf.train_ppo_ray``) do, as functions of OpenRLHF's objects; it imports no OpenRLHF. With any
other ``--algo.advantage.estimator`` OpenRLHF's own code runs unchanged.

- experience maker: for ``gepo`` / ``edge_eda``, ``compute_edge_advantages`` does what OpenRLHF does for its group estimators
  (rewards to float32, its length penalties, groups = n contiguous samples of the original order through
  ``Experience.index``) and then calls ONE pure function, ``compute_gepo_advantages`` /
  ``compute_eda_advantages``, on the whole step padded to one width; advantages = returns, per token.
  GEPO's entropy source is ``action_log_probs``: the old policy's log-probs OpenRLHF computed just before.
- EDA needs the old policy's full-vocabulary token entropy, which OpenRLHF does not compute at experience
  time. ``edge_verl_token_entropy``, added to the actor workers, runs OpenRLHF's own ``Actor.forward(...,
  return_entropy=True)`` (temperature-scaled logits, as the log-probs) without gradient. Cost: a SECOND
  no-grad forward of the policy over the step's samples (as long as the old-log-prob forward) and one
  (B, A) float32 tensor per sample back to the trainer. ``entropy_gradient=True`` (entropy inside the
  actor's loss) has no OpenRLHF hook and is refused.
- Reward clamp: OpenRLHF clamps to ``--reward.clip_range`` (default (-10, 10)) AFTER group normalisation,
  which would cap EDA's amplified advantages at 10. For these two estimators the clamp is applied to the
  raw rewards (what its name says) and never to advantages.
- KL: a KL penalty folded into the reward (``--algo.kl.init_coef > 0`` without ``--algo.kl.use_loss``) is
  refused; use the KL loss or none (the papers: none).
- trainer: GEPO's thresholds (``GepoThresholds``, on the experience maker) are added to the
  ``client_states`` every checkpoint stores, and restored from the checkpoint dict that
  ``restore_best_checkpoint_state`` receives on resume (sync and async trainers alike); resuming from a
  checkpoint without them is an error unless ``gepo.resume_without_state``.
- ``dump.dir`` set: each computation's inputs, options and outputs are saved there (``dump_batch``).
- evaluation: OpenRLHF's ``compute_eval_metrics`` (sync and async trainers) reduces the eval samples to pass@k,
  lengths and truncation, dropping every ``extra_logs`` value; ``keeping_plugin_logs`` keeps its logs and adds the mean over
  the eval samples of each of the plugin's (``edge_verl/...``: GEC's, which says it did not correct, and the
  grader's health), which OpenRLHF's loggers write under ``eval/``.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import torch

from edge_verl.algorithms.eda import compute_eda_advantages
from edge_verl.algorithms.gepo import MIN_GROUPS as GEPO_MIN_GROUPS, GepoThresholds, compute_gepo_advantages
from edge_verl.openrlhf.options import OpenRlhfOptions, run_options

ESTIMATORS = ("gepo", "edge_eda")
GEPO_STATE_KEY = "edge_verl_gepo_thresholds"
ENTROPY_METHOD = "edge_verl_token_entropy"
THRESHOLDS_ATTRIBUTE = "edge_verl_gepo_thresholds"
DUMP_COUNT_ATTRIBUTE = "edge_verl_dumped"
PLUGIN_LOG_PREFIX = "edge_verl/"  # the names of the plugin's extra_logs (GEC executor, reward function)


def check_run_args(args: Any, options: OpenRlhfOptions) -> None:
    """What ``gepo`` / ``edge_eda`` need from OpenRLHF's (hierarchized) arguments; nothing for other estimators."""
    estimator = args.algo.advantage.estimator
    if estimator not in ESTIMATORS:
        return
    if args.rollout.n_samples_per_prompt < 2:
        raise ValueError(
            f"--algo.advantage.estimator {estimator} compares the responses of a group: --rollout.n_samples_per_prompt="
            f"{args.rollout.n_samples_per_prompt} must be >= 2."
        )
    if estimator == "gepo":  # compute_edge_advantages sees one rollout step's groups: --rollout.batch_size prompts
        GEPO_MIN_GROUPS.check(estimator, args.rollout.batch_size, "--rollout.batch_size")
    if args.algo.kl.init_coef > 0 and not args.algo.kl.use_loss:
        raise ValueError(
            f"--algo.advantage.estimator {estimator} computes outcome advantages and takes no KL penalty in the reward "
            f"(--algo.kl.init_coef={args.algo.kl.init_coef}): add --algo.kl.use_loss, or set --algo.kl.init_coef 0."
        )
    if estimator == "edge_eda" and options.edge_eda.entropy_gradient:
        raise ValueError(
            "edge_eda.entropy_gradient=true needs the current policy's entropy inside the actor loss, which OpenRLHF "
            "has no hook for; set it to false (the detached form, entropy of the old policy)."
        )


def pad_columns(tensors: Sequence[torch.Tensor], width: int) -> torch.Tensor:
    """(B_i, A_i) tensors -> one (sum B_i, width) float32 tensor, zero-padded on the right."""
    return torch.cat([torch.nn.functional.pad(t.float(), (0, width - t.shape[1])) for t in tensors], dim=0)


def gepo_thresholds(maker: Any, options: OpenRlhfOptions) -> Optional[GepoThresholds]:
    """The GEPO thresholds a run's experience maker owns (created on first use); None unless the run is GEPO."""
    if maker.strategy.args.algo.advantage.estimator != "gepo":
        return None
    thresholds = getattr(maker, THRESHOLDS_ATTRIBUTE, None)
    if thresholds is None:
        thresholds = GepoThresholds(options.gepo.gamma, options.gepo.ema_init)
        setattr(maker, THRESHOLDS_ATTRIBUTE, thresholds)
    return thresholds


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


def compute_edge_advantages(maker: Any, experiences: list, options: OpenRlhfOptions, apply_length_penalties: Callable) -> list:
    """OpenRLHF's ``compute_advantages_and_returns`` for ``gepo`` / ``edge_eda`` (see the module docstring)."""
    args = maker.strategy.args
    estimator = args.algo.advantage.estimator
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
    dumped = {"estimator": estimator, "rewards": by_position, "positions": positions, "n": n, "mask": mask,
              "sequences": [e.sequences for e in experiences], "attention_mask": [e.attention_mask for e in experiences],
              "action_widths": [e.action_mask.shape[1] for e in experiences]}
    if estimator == "gepo":
        gepo = options.gepo
        source = (
            old_policy_token_entropy(maker, experiences, width)
            if gepo.group_entropy == "token_entropy"
            else pad_columns([e.action_log_probs for e in experiences], width)
        )
        thresholds = gepo_thresholds(maker, options)
        dumped["thresholds_before"] = thresholds.state_dict()
        result = compute_gepo_advantages(
            scores, source, mask, group_index, num_groups, valid, thresholds,
            std_epsilon=gepo.std_epsilon, alpha_low=gepo.alpha_low, alpha_high=gepo.alpha_high,
            beta_low=gepo.beta_low, beta_high=gepo.beta_high, estimator=gepo.group_entropy, order=gepo.ema_order,
        )
        outcome = result.shaped_outcome_advantages
        per_sample = {
            "gepo/positive_attenuated": result.positive_attenuated.float(),
            "gepo/negative_attenuated": result.negative_attenuated.float(),
            "gepo/h_low": torch.full_like(outcome, result.h_low),
            "gepo/h_high": torch.full_like(outcome, result.h_high),
            "gepo/group_entropy": result.group_entropy.index_select(0, group_index),
        }
        dumped.update(options=dataclasses.asdict(gepo), entropy_source=source, h_low=result.h_low, h_high=result.h_high,
                      unshaped_outcome=result.outcome_advantages)
    else:
        eda = options.edge_eda
        result_entropy = old_policy_token_entropy(maker, experiences, width)
        result = compute_eda_advantages(
            scores, result_entropy, mask, group_index, num_groups, valid,
            std_epsilon=eda.std_epsilon, entropy_epsilon=eda.entropy_epsilon, ratio_clamp=eda.ratio_clamp,
        )
        outcome = result.eda_outcome_advantages
        per_sample = {"edge_eda/response_entropy": result.response_entropy, "edge_eda/entropy_ratio": result.entropy_ratio}
        dumped.update(options=dataclasses.asdict(eda), entropy_source=result_entropy)
    start = 0
    for experience, count in zip(experiences, counts):
        rows = slice(start, start + count)
        experience.advantages = result.advantages[rows, : experience.action_mask.shape[1]].clone()
        experience.returns = experience.advantages.clone()
        experience.info["return"] = outcome[rows].clone()
        if group_reward_std is not None:
            experience.info["group_reward_std"] = group_reward_std[rows].clone()
        for name, values in per_sample.items():
            experience.info[name] = values[rows].clone()
        experience.kl = None
        start += count
    dump_batch(maker, options, {**dumped, "scores": scores, "outcome": outcome, "advantages": result.advantages,
                                "group_reward_std": group_reward_std})
    return experiences


def recompute_dumped(dumped: dict):
    """A computation ``dump_batch`` saved, computed again by the pure function from the dump's own inputs, options
    and (GEPO) thresholds before the step: its ``EdaResult`` / ``GepoResult``, rows in the dump's order."""
    options, n, positions = dumped["options"], dumped["n"], dumped["positions"]
    group_index, num_groups = positions // n, len(positions) // n
    valid = torch.ones(len(positions), dtype=torch.bool)
    inputs = (dumped["scores"], dumped["entropy_source"], dumped["mask"], group_index, num_groups, valid)
    if dumped["estimator"] == "edge_eda":
        return compute_eda_advantages(*inputs, std_epsilon=options["std_epsilon"], entropy_epsilon=options["entropy_epsilon"],
                                      ratio_clamp=options["ratio_clamp"])
    thresholds = GepoThresholds(gamma=options["gamma"], init=options["ema_init"])
    thresholds.load_state_dict(dumped["thresholds_before"])
    return compute_gepo_advantages(
        *inputs, thresholds, std_epsilon=options["std_epsilon"], alpha_low=options["alpha_low"],
        alpha_high=options["alpha_high"], beta_low=options["beta_low"], beta_high=options["beta_high"],
        estimator=options["group_entropy"], order=options["ema_order"],
    )


def dump_batch(maker: Any, options: OpenRlhfOptions, payload: dict) -> Optional[Path]:
    """With ``dump.dir``: ``payload`` saved as ``advantages_<k>.pt`` (k = 1, 2, ... the maker's computations).

    Rows are in the order OpenRLHF's experiences hold them; ``positions`` maps each row to its sample's place in
    the original order (group = position // n); ``rewards`` are by position, after the length penalties and
    before the clamp, ``scores`` by row after it; ``sequences`` / ``attention_mask`` / ``action_widths`` per
    experience (its actions are the last ``action_widths`` positions of its sequences). ``entropy_source`` is what the estimator read per token (EDA:
    the old policy's token entropy; GEPO: that or the old log-probs, by ``group_entropy``)."""
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
