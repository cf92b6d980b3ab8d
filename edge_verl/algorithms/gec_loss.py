"""GEC's tokens in the actor loss: the reviewers' controls and the per-origin diagnostics. Pure torch, no verl.

Every token of a GEC run's response carries its origin (``gec.ORIGINS``: sampled, continuation, phrase,
answer, solution; ``gec.token_origins``). The phrase, an injected answer and a replaced solution were written
by GEC, not sampled from the policy; ``edge_gec.injected_loss`` says how the actor trains them:

- "surrogate" (paper): through the policy-gradient surrogate like any token;
- "masked": no policy gradient through them: their advantage is 0 and their log-prob is detached inside
  the surrogate, whatever verl's ``policy_loss.loss_mode`` (a sequence-level ratio included); the rewards,
  every advantage and the loss's token normaliser are unchanged;
- "sft": as "masked" in the surrogate, plus ``sft_coef`` x their token-mean NLL (``injected_nll``).

Diagnostics per origin and micro-batch (``origin_sums``), as SUMS so that a ratio of two of them, taken
after verl has averaged each over micro-batches, data-parallel ranks and mini-batches (the same number
of values per key), is the token-weighted value over the whole update (``finish_origin_metrics``):
token share; old-policy log-prob mean; importance ratio pi_theta / pi_old mean, and max (the largest over
the whole update, on both trainers: ``AGGREGATION`` declares it a max, which verl's v1 trainer already
applies to keys containing "max" and ``finish_origin_metrics`` applies to the legacy trainer's list of
per-mini-batch values, where an origin absent from a mini-batch logs 0 < any ratio); clip fraction
(tokens whose PPO clip is active: A > 0 and ratio > 1 + eps_high, or A < 0 and ratio < 1 - eps_low, with
the advantage the surrogate received); gradient share: of sum_t |dL/dlogp_t| (the surrogate's gradient with
respect to each token's log-prob, one ``autograd.grad`` over the loss's elementwise ops, no second
backward through the model), the part on that origin's tokens. Shares over the five origins sum to 1.
"""

from __future__ import annotations

import math
from typing import Mapping, Optional

import torch

from edge_verl.algorithms.gec import INJECTED_LOSSES, NOT_SAMPLED, ORIGINS, SAMPLED

# verl clamps log(pi_theta / pi_old) to this range before exp (core_algos.compute_policy_loss_vanilla).
LOG_RATIO_CLAMP = 20.0
# The raw per-origin sums logged by the loss (``origin_sums``) and turned into statistics afterwards.
RAW_SUMS = ("_tokens", "_old_logprob_sum", "_ratio_sum", "_clipped", "_grad_abs")
RAW_MAX = "ratio_max"
NLL_SUM = "_sft_nll_sum"
# How each raw metric is reduced over micro- and mini-batches, declared here where it is made: the sums by the
# mean (a ratio of two means over the same count of values is the ratio of the sums), the ratio maxima by max.
AGGREGATION = {**{name: "mean" for name in (*RAW_SUMS, NLL_SUM)}, RAW_MAX: "max"}


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
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    clip_low: float,
    clip_high: float,
    grad: Optional[torch.Tensor] = None,
) -> dict[str, float]:
    """Per-origin sums over one micro-batch's response tokens (see module docstring); every key for every
    origin, 0 when it has no tokens, so each micro-batch and rank logs the same keys. ``grad`` (B, T):
    dL/dlogp of the surrogate (None: no ``_grad_abs``)."""
    mask = response_mask.to(torch.bool)
    with torch.no_grad():
        log_ratio = (log_prob.detach().float() - old_log_prob.float()).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
        ratio = log_ratio.exp()
        adv = advantages.detach().float()
        clipped = ((adv > 0) & (ratio > 1.0 + clip_high)) | ((adv < 0) & (ratio < 1.0 - clip_low))
        grad_abs = None if grad is None else grad.detach().float().abs()
        codes = origins.to(torch.int64)
        columns = [mask.float(), old_log_prob.float(), ratio, clipped.float()] + ([grad_abs] if grad_abs is not None else [])
        selected = torch.stack([codes == code for code in range(len(ORIGINS))]) & mask  # (O, B, T)
        sums = torch.stack([(selected * column).sum(dim=(1, 2)) for column in columns], dim=1)  # (O, C)
        maxima = torch.where(selected, ratio, torch.zeros_like(ratio)).amax(dim=(1, 2))
        values, peaks = sums.tolist(), maxima.tolist()  # one host sync each
    names = RAW_SUMS if grad is not None else RAW_SUMS[:-1]
    metrics: dict[str, float] = {}
    for code, origin in enumerate(ORIGINS):
        for name, value in zip(names, values[code]):
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
    origin with tokens old_logprob_mean, ratio_mean, ratio_max, clip_frac; ``sft_nll`` (mean NLL per
    injected token) when the loss had the SFT term. Returns the finished keys; the caller drops the raw
    ones (``raw_keys``)."""
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
            finished[f"{prefix}/{origin}/clip_frac"] = raw[f"{origin}/_clipped"] / count
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
