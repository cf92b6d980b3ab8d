"""Slow, literal per-sample references (Python loops over dicts) used to check the vectorised code."""

from __future__ import annotations

import math
from collections import defaultdict


def grpo_reference(scores, uids, epsilon, norm_by_std=True, pad_prefix="pad"):
    groups = defaultdict(list)
    for score, uid in zip(scores, uids):
        groups[uid].append(score)
    out = []
    for score, uid in zip(scores, uids):
        members = groups[uid]
        if str(uid).startswith(pad_prefix):
            out.append(0.0)
            continue
        if len(members) == 1:
            mean, std = 0.0, 1.0
        else:
            mean = sum(members) / len(members)
            std = math.sqrt(sum((m - mean) ** 2 for m in members) / (len(members) - 1))
        out.append((score - mean) / (std + epsilon) if norm_by_std else score - mean)
    return out


def eda_reference(scores, token_entropy, mask, uids, std_epsilon, entropy_epsilon=1e-6):
    """EDA literally: P_i = mean entropy over tokens, P_hat = P_i / group mean P, A_hat = A / P_hat."""
    advantages = grpo_reference(scores, uids, std_epsilon)
    response_entropy = []
    for row_entropy, row_mask in zip(token_entropy, mask):
        tokens = [h for h, m in zip(row_entropy, row_mask) if m]
        response_entropy.append(sum(tokens) / len(tokens) if tokens else None)
    groups = defaultdict(list)
    for value, uid in zip(response_entropy, uids):
        if value is not None:
            groups[uid].append(value)
    out = []
    for advantage, value, uid, row_mask in zip(advantages, response_entropy, uids, mask):
        members = groups[uid]
        group_mean = sum(members) / len(members) if members else 0.0
        if value is None or group_mean <= entropy_epsilon:
            ratio = 1.0
        else:
            ratio = max(value / group_mean, entropy_epsilon)
        out.append([advantage / ratio * m for m in row_mask])
    return out


def gepo_group_entropy_reference(old_log_probs, mask, uids):
    totals, counts = defaultdict(float), defaultdict(int)
    for row_lp, row_mask, uid in zip(old_log_probs, mask, uids):
        for lp, m in zip(row_lp, row_mask):
            if m:
                totals[uid] -= lp
                counts[uid] += 1
    return {uid: totals[uid] / counts[uid] for uid in counts}
