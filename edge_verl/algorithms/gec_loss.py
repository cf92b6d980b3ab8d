"""GEC in the actor loss (EDGE-GRPO, arXiv 2507.21848, Sec. 3.3, and the reviewers' controls): each response
token's origin and what the advantage step hands the loss (``advantage_step_outputs``, in the trainer), how the
actor trains the tokens GEC wrote (``treat_injected``) and the per-origin sums of an update (``origin_sums``, in
the actor workers), and those sums finished into the step's metrics (``finish_origin_metrics``, in the trainer).
Pure torch, no verl; the decisions and the record are ``gec.py``."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence

import torch

from edge_verl.algorithms.gec import (
    ANSWER, CONTINUATION, INJECT_ANSWER, INJECTED_LOSSES, NOT_SAMPLED, ORIGINS, PHRASE, REGENERATE, REPLACE_SOLUTION,
    SAMPLED, SOLUTION, CorrectionRecord,
)
from edge_verl.estimators.groups import response_valid
from edge_verl.estimators.statistics import advantage_statistics, as_sampled_statistics

# GEC's tokens in the actor loss: the reviewers' controls and the per-origin diagnostics.
#
# Every token of a GEC run's response carries its origin (``ORIGINS``: sampled, continuation, phrase,
# answer, solution; ``token_origins``). The phrase, an injected answer and a replaced solution were written
# by GEC, not sampled from the policy; ``edge_gec.injected_loss`` says how the actor trains them:
#
# - "surrogate" (paper): through the policy-gradient surrogate like any token;
# - "masked": no policy gradient through them: their advantage is 0 and their log-prob is detached inside
#   the surrogate, whatever verl's ``policy_loss.loss_mode`` (a sequence-level ratio included); the rewards,
#   every advantage and the loss's token normaliser are unchanged;
# - "sft": as "masked" in the surrogate, plus ``sft_coef`` x their token-mean NLL (``injected_nll``).
#
# Diagnostics per origin and micro-batch (``origin_sums``), as SUMS so that a ratio of two of them, taken
# after verl has averaged each over micro-batches, data-parallel ranks and mini-batches (the same number
# of values per key), is the token-weighted value over the whole update (``finish_origin_metrics``):
# token share; old-policy log-prob mean; importance ratio pi_theta / pi_old mean, and max (the largest over
# the whole update, on both trainers: ``AGGREGATION`` declares it a max, which verl's v1 trainer already
# applies to keys containing "max" and ``finish_origin_metrics`` applies to the legacy trainer's list of
# per-mini-batch values, where an origin absent from a mini-batch logs 0 < any ratio); vanilla clip fraction,
# only when verl's ``policy_loss.loss_mode`` is "vanilla" (the tokens whose gradient verl's PPO clip removes,
# its dual clip included, with the advantage the surrogate received, which the trainer's loss hook marks,
# ``integration/actor_loss.py`` ``vanilla_clipped``: this module holds no copy of verl's clipping; every other
# loss mode clips differently, e.g. GSPO per sequence, and gets no clip fraction rather than a wrong one);
# gradient share: of sum_t |dL/dlogp_t| (the surrogate's gradient with respect to each token's log-prob, one
# ``autograd.grad`` over the loss's elementwise ops, no second backward through the model), the part on that
# origin's tokens. Shares over the five origins sum to 1.
#
# At the advantage step (``advantage_step_outputs``): each response token's origin for the loss, the share of
# injected tokens, and the statistics of the responses as sampled next to those as trained.

# The raw per-origin sums logged by the loss (``origin_sums``) and turned into statistics afterwards.
VANILLA_CLIPPED = "_vanilla_clipped"
RAW_SUMS = ("_tokens", "_old_logprob_sum", "_ratio_sum", VANILLA_CLIPPED, "_grad_abs")
RAW_MAX = "ratio_max"
NLL_SUM = "_sft_nll_sum"
# How each raw metric is reduced over micro- and mini-batches, declared here where it is made: the sums by the
# mean (a ratio of two means over the same count of values is the ratio of the sums), the ratio maxima by max.
AGGREGATION = {**{name: "mean" for name in (*RAW_SUMS, NLL_SUM)}, RAW_MAX: "max"}


def token_origins(records: Sequence[Optional["CorrectionRecord"]], length: int):
    """(B, T) int64 origin code (``ORIGINS``) of every token position of B final responses padded to T.

    A record's injected span [start, end) is the phrase (regenerate), the answer text + EOS (inject_answer)
    or the solution + EOS (replace_solution); tokens before it are the first sample's own (none when the
    span starts at 0: first_attempt=drop, replace_solution), tokens after a regeneration's phrase its
    continuation. None (a row GEC did not run on) and uncorrected responses are
    sampled throughout. Positions past a response's end get a code too: callers mask them.
    """
    codes = {REGENERATE: PHRASE, INJECT_ANSWER: ANSWER, REPLACE_SOLUTION: SOLUTION}
    starts, ends, span_codes, after_codes = [], [], [], []
    for record in records:
        branch = None if record is None else record.branch
        starts.append(0 if branch is None else record.injected_start)
        ends.append(0 if branch is None else record.injected_end)
        span_codes.append(codes.get(branch, SAMPLED))
        after_codes.append(CONTINUATION if branch == REGENERATE else SAMPLED)
    positions = torch.arange(length)[None, :]
    starts_t, ends_t = torch.as_tensor(starts)[:, None], torch.as_tensor(ends)[:, None]
    origins = torch.full((len(starts), length), SAMPLED, dtype=torch.int64)
    origins = torch.where(positions >= ends_t, torch.as_tensor(after_codes)[:, None], origins)
    in_span = (positions >= starts_t) & (positions < ends_t)
    return torch.where(in_span, torch.as_tensor(span_codes)[:, None], origins).reshape(len(starts), length)


def sampled_token_mean(values: torch.Tensor, origins: torch.Tensor, response_mask: torch.Tensor) -> float:
    """Token mean of ``values`` (B, T) over the response tokens the policy sampled first (origin
    ``sampled``: not the phrase, answer or solution GEC wrote, nor a regeneration's continuation), 0 when
    there are none; non-finite values count as 0."""
    selected = (origins.to(torch.int64) == SAMPLED) & response_mask.to(torch.bool)
    count = int(selected.sum())
    if count == 0:
        return 0.0
    return float(torch.nan_to_num(values.to(torch.float64), nan=0.0, posinf=0.0, neginf=0.0)[selected].sum()) / count


def not_sampled(origins: torch.Tensor) -> torch.Tensor:
    """(B, T) bool: the tokens GEC wrote (phrase, answer, solution)."""
    return torch.isin(origins.to(torch.int64), torch.as_tensor(NOT_SAMPLED, device=origins.device))


def treat_injected(
    log_prob: torch.Tensor, advantages: torch.Tensor, injected: torch.Tensor, mode: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """The (log_prob, advantages) the surrogate receives: unchanged for "surrogate"; for "masked" and "sft",
    0 advantage and a detached log-prob on ``injected`` tokens (no gradient can reach them)."""
    if mode not in INJECTED_LOSSES:
        raise ValueError(f"edge_gec.injected_loss={mode!r}; allowed: {list(INJECTED_LOSSES)}")
    if mode == "surrogate":
        return log_prob, advantages
    return torch.where(injected, log_prob.detach(), log_prob), torch.where(injected, torch.zeros_like(advantages), advantages)


def injected_nll(log_prob: torch.Tensor, injected: torch.Tensor, num_tokens: Optional[float], dp_size: int = 1) -> torch.Tensor:
    """-sum(log_prob over ``injected``) / num_tokens * dp_size: verl's token-mean convention
    (``agg_loss``), with ``num_tokens`` the injected tokens of the (global) mini-batch; None = this
    micro-batch's own count (single process)."""
    total = -(log_prob * injected.to(log_prob.dtype)).sum()
    if num_tokens is None:
        num_tokens = float(injected.sum())
    return total / max(float(num_tokens), 1.0) * dp_size


def origin_sums(
    origins: torch.Tensor,
    response_mask: torch.Tensor,
    old_log_prob: torch.Tensor,
    ratio: torch.Tensor,
    clipped: Optional[torch.Tensor],
    grad: Optional[torch.Tensor] = None,
) -> dict[str, float]:
    """Per-origin sums over one micro-batch's response tokens (see module docstring); every key for every
    origin, 0 when it has no tokens, so each micro-batch and rank logs the same keys. ``ratio`` (B, T): the
    importance ratio pi_theta / pi_old the loss computed; ``clipped`` (B, T) bool: the tokens the loss's
    clipping removed (the trainer's loss knows its own clipping: ``integration/actor_loss.py``), None for a loss
    without a clip fraction (no ``_vanilla_clipped``); ``grad`` (B, T): dL/dlogp of the surrogate (None: no
    ``_grad_abs``)."""
    mask = response_mask.to(torch.bool)
    with torch.no_grad():
        ratio = ratio.detach().float()
        columns = {"_tokens": mask.float(), "_old_logprob_sum": old_log_prob.float(), "_ratio_sum": ratio}
        if clipped is not None:
            columns[VANILLA_CLIPPED] = clipped.float()
        if grad is not None:
            columns["_grad_abs"] = grad.detach().float().abs()
        codes = origins.to(torch.int64)
        selected = torch.stack([codes == code for code in range(len(ORIGINS))]) & mask  # (O, B, T)
        sums = torch.stack([(selected * column).sum(dim=(1, 2)) for column in columns.values()], dim=1)  # (O, C)
        maxima = torch.where(selected, ratio, torch.zeros_like(ratio)).amax(dim=(1, 2))
        values, peaks = sums.tolist(), maxima.tolist()  # one host sync each
    metrics: dict[str, float] = {}
    for code, origin in enumerate(ORIGINS):
        for name, value in zip(columns, values[code]):
            metrics[f"{origin}/{name}"] = value
        metrics[f"{origin}/{RAW_MAX}"] = peaks[code]
    return metrics


def _reduce(name: str, value) -> float:
    """A raw metric as verl hands it to the trainer (a float: v1, already reduced; a list of per-mini-batch
    floats: legacy) reduced by its ``AGGREGATION`` (``name``: the key's last part)."""
    if not isinstance(value, (list, tuple)):
        return float(value)
    if not value:
        return 0.0
    if AGGREGATION.get(name) == "max":
        return max(float(v) for v in value)
    return sum(float(v) for v in value) / len(value)


def finish_origin_metrics(metrics: Mapping[str, object], prefix: str) -> dict[str, float]:
    """The statistics from the raw sums under ``prefix`` (e.g. "actor/gec"): per origin token_share,
    grad_share (both 0 for an origin without tokens; absent when no gradient was measured), and for an
    origin with tokens old_logprob_mean, ratio_mean, ratio_max, vanilla_clip_frac (vanilla PPO only);
    ``sft_nll`` (mean NLL per injected token) when the loss had the SFT term. Returns the finished keys; the
    caller drops the raw ones (``raw_keys``)."""
    raw = {key[len(prefix) + 1 :]: _reduce(key.rsplit("/", 1)[-1], value) for key, value in metrics.items() if key.startswith(prefix + "/")}
    tokens = {origin: raw.get(f"{origin}/_tokens", 0.0) for origin in ORIGINS}
    total_tokens = sum(tokens.values())
    grads = {origin: raw.get(f"{origin}/_grad_abs") for origin in ORIGINS}
    total_grad = sum(g for g in grads.values() if g is not None)
    finished: dict[str, float] = {}
    if total_tokens <= 0:
        return finished
    for origin in ORIGINS:
        count = tokens[origin]
        finished[f"{prefix}/{origin}/token_share"] = count / total_tokens
        if grads[origin] is not None and total_grad > 0:
            finished[f"{prefix}/{origin}/grad_share"] = grads[origin] / total_grad
        if count > 0:
            finished[f"{prefix}/{origin}/old_logprob_mean"] = raw[f"{origin}/_old_logprob_sum"] / count
            finished[f"{prefix}/{origin}/ratio_mean"] = raw[f"{origin}/_ratio_sum"] / count
            finished[f"{prefix}/{origin}/ratio_max"] = raw[f"{origin}/{RAW_MAX}"]
            if f"{origin}/{VANILLA_CLIPPED}" in raw:
                finished[f"{prefix}/{origin}/vanilla_clip_frac"] = raw[f"{origin}/{VANILLA_CLIPPED}"] / count
    injected_tokens = sum(tokens[ORIGINS[code]] for code in NOT_SAMPLED)
    if NLL_SUM in raw and injected_tokens > 0:
        finished[f"{prefix}/sft_nll"] = raw[NLL_SUM] / injected_tokens
    return {key: value for key, value in finished.items() if math.isfinite(value)}


def raw_keys(metrics: Mapping[str, object], prefix: str) -> list[str]:
    """The raw sums' keys under ``prefix`` (leading underscore, and the per-micro-batch ratio maxima)."""
    keys = []
    for key in metrics:
        if key.startswith(prefix + "/"):
            name = key[len(prefix) + 1 :].rsplit("/", 1)[-1]
            if name.startswith("_") or name == RAW_MAX:
                keys.append(key)
    return keys


@dataclass
class AdvantageStepOutputs:
    """What GEC adds to an advantage step: ``origins`` (B, T) float32, each response token's origin code
    (0 off the response), the loss column; ``injected_share``: the step's injected tokens over its response
    tokens (the SFT term's token count per mini-batch); ``sampled`` / ``final``: the statistics of the
    responses as sampled (before correction) and of the advantages as trained."""

    origins: torch.Tensor
    injected_share: float
    sampled: dict[str, float] = field(default_factory=dict)
    final: dict[str, float] = field(default_factory=dict)


def advantage_step_outputs(
    infos: Sequence[Any],
    response_mask: torch.Tensor,
    advantages: torch.Tensor,
    scores: torch.Tensor,
    grouping: tuple[torch.Tensor, int, torch.Tensor],
    *,
    norm_by_std: bool,
    epsilon: float,
    entropy: Optional[torch.Tensor] = None,
) -> AdvantageStepOutputs:
    """GEC at the advantage step of any estimator (on the host). ``infos`` (B,): the rows' correction records
    as dicts (``CorrectionRecord.to_dict``; anything else for a row GEC did not run on); ``response_mask``,
    ``advantages`` (B, T); ``scores`` (B,) the final rewards; ``grouping``: (group_index, num_groups, is_pad)
    of the rows' uids; ``norm_by_std`` / ``epsilon``: the GRPO normalisation of the advantages as sampled;
    ``entropy`` (B, T): the old policy's per-token entropy, for ``sampled["entropy"]`` over the sampled tokens
    (verl's actor/entropy averages over every trained token, injected ones included)."""
    records = [CorrectionRecord.from_dict(info) if isinstance(info, dict) else None for info in infos]
    mask = response_mask.to(torch.bool).cpu()
    origins = torch.where(mask, token_origins(records, mask.shape[1]), 0)
    injected, total = int((not_sampled(origins) & mask).sum()), int(mask.sum())
    final_scores = scores.detach().to(torch.float32).cpu()
    sampled_scores = torch.tensor([float(s) if r is None else r.original_score for r, s in zip(records, final_scores.tolist())])
    uncorrected = torch.tensor([r is None or r.branch is None for r in records])
    group_index, num_groups, is_pad = grouping
    valid = response_valid(mask, is_pad.cpu())
    advantages = advantages.detach().to(torch.float32).cpu()
    sampled = as_sampled_statistics(
        sampled_scores, advantages, mask, group_index.cpu(), num_groups, valid, uncorrected, norm_by_std=norm_by_std, epsilon=epsilon
    )
    final = advantage_statistics(advantages, mask, final_scores, group_index.cpu(), num_groups, valid)
    if entropy is not None:
        sampled["entropy"] = sampled_token_mean(entropy.detach().to(torch.float32).cpu(), origins, mask)
    return AdvantageStepOutputs(
        origins=origins.to(torch.float32),
        injected_share=injected / max(total, 1),
        sampled=sampled,
        final={"adv_var": final["var"], "zero_variance_group_frac": final["zero_variance_group_frac"]},
    )
