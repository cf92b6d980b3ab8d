"""Benchmark helpers that need no verl: batches, timing, memory traffic, and verl's GRPO as the baseline.

``scripts/bench_estimators.py`` uses them both through verl's registry (where verl is installed) and
standalone (``--standalone``: the pure functions of ``edge_verl.algorithms`` against
``verl_grpo_vectorized``, e.g. on a GPU host with torch only). ``verl_grpo_vectorized`` is a copy of verl
0.9.1's ``compute_grpo_vectorized_outcome_advantage`` (with ``verl.utils.groupwise.as_torch_index`` /
``group_mean_std``); ``tests/integration/test_benchmarks_on_cpu.py`` proves it equal to verl's.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

FLOAT_BYTES = 4
# Compulsory memory traffic per (B, T) element, in float32 tensors read or written once:
# GRPO: rewards + response_mask read, advantages written; EDA: + token entropy read; GEPO: + old
# log-probs read; EDA's in-loss term (forward + backward): entropy, response_mask, advantages read,
# scaled advantages written, then the incoming gradient read and the entropy gradient written.
TENSORS_TOUCHED = {"grpo_vectorized": 3, "edge_eda": 4, "gepo": 4, "eda_loss_term": 6}


def make_batch(
    batch_size: int, length: int, group_size: int, device: str, seed: int = 0, mask_dtype: torch.dtype = torch.int64
) -> dict:
    """A verl-like batch: right-padded responses of random lengths, one 0/1 outcome reward at each
    response's last token, uid strings in groups of ``group_size``, old log-probs and token entropies.
    The response mask is int64 by default, as verl's agent loop builds ``response_mask``."""
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, length + 1, (batch_size,), generator=generator)
    mask = (torch.arange(length)[None, :] < lengths[:, None]).to(mask_dtype)
    rewards = torch.zeros(batch_size, length)
    rewards[torch.arange(batch_size), lengths - 1] = torch.randint(0, 2, (batch_size,), generator=generator).float()
    uids = np.array([f"uid-{i // group_size}" for i in range(batch_size)], dtype=object)
    return {
        "token_level_rewards": rewards.to(device),
        "response_mask": mask.to(device),
        "index": uids,
        "old_log_probs": (-torch.rand(batch_size, length, generator=generator) * 3).to(device),
        "entropys": (torch.rand(batch_size, length, generator=generator) * 2).to(device),
    }


def verl_grpo_vectorized(
    token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: np.ndarray, epsilon: float = 1e-6, norm_adv_by_std_in_grpo: bool = True
) -> torch.Tensor:
    """verl 0.9.1's ``grpo_vectorized`` estimator, line for line (string uids -> ``np.unique`` codes; per-group
    mean and unbiased std by ``index_add_``; singleton groups mean 0, std 1)."""
    with torch.no_grad():
        scores = token_level_rewards.sum(dim=-1)
        _, inverse = np.unique(np.asarray(index, dtype=object), return_inverse=True)
        group = torch.from_numpy(inverse.astype(np.int64, copy=False)).to(scores.device)
        scores32 = scores.reshape(-1).to(dtype=torch.float32)
        groups = int(torch.max(group).item()) + 1
        ones = torch.ones_like(scores32)
        count = torch.zeros(groups, device=scores.device).index_add_(0, group, ones)
        mean = torch.zeros(groups, device=scores.device).index_add_(0, group, scores32) / count.clamp_min(1.0)
        centered = scores32 - mean[group]
        variance = torch.zeros(groups, device=scores.device).index_add_(0, group, centered * centered) / (count - 1.0).clamp_min(1.0)
        std = torch.sqrt(torch.clamp(variance, min=0.0))
        single = count <= 1.0
        if torch.any(single):
            mean, std = mean.clone(), std.clone()
            mean[single], std[single] = 0.0, 1.0
        scalars = (scores - mean[group]) / (std[group] + epsilon) if norm_adv_by_std_in_grpo else scores - mean[group]
        return scalars.unsqueeze(-1) * response_mask


def synchronize(device: str) -> None:
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()


def time_call(fn: Callable[[], object], device: str, repeats: int, warmup: int = 2) -> float:
    """Median wall time of ``fn`` in milliseconds (the device synchronised around each call)."""
    return statistics.median(time_rounds({"fn": fn}, device, repeats, warmup)["fn"])


def time_rounds(
    calls: dict[str, Callable[[], object]],
    device: str,
    repeats: int,
    warmup: int = 2,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, list[float]]:
    """Times in milliseconds of each call in each of ``repeats`` rounds, one call of each per round (the
    device synchronised around each). Interleaving puts a burst of load from other processes on a shared
    machine on every call alike, instead of on whichever happened to run then. ``clock``: wall time by
    default; ``time.process_time`` (this process's CPU time, page faults included) leaves out the time
    spent waiting for a CPU that other processes hold, for CPU runs with one torch thread."""
    for _ in range(warmup):
        for fn in calls.values():
            fn()
    samples: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(repeats):
        for name, fn in calls.items():
            synchronize(device)
            started = clock()
            fn()
            synchronize(device)
            samples[name].append(1000 * (clock() - started))
    return samples


def round_ratio(samples: dict[str, list[float]], name: str, baseline: str) -> float:
    """Median over the rounds of ``name``'s time / ``baseline``'s time in the same round: steadier on a
    loaded machine than the ratio of the two medians, as both calls of a round ran under the same load."""
    return statistics.median(ours / base for ours, base in zip(samples[name], samples[baseline]))


@dataclass(frozen=True)
class Traffic:
    """Compulsory bytes of one call and the bandwidth its time achieves (GB/s = 1e9 bytes/s)."""

    bytes_moved: int
    milliseconds: float

    @property
    def gb_per_s(self) -> float:
        return self.bytes_moved / (self.milliseconds / 1000) / 1e9 if self.milliseconds > 0 else float("nan")


def traffic(name: str, batch_size: int, length: int, milliseconds: float) -> Traffic:
    return Traffic(TENSORS_TOUCHED[name] * batch_size * length * FLOAT_BYTES, milliseconds)


def copy_bandwidth(device: str, megabytes: int = 512, repeats: int = 5) -> float:
    """The machine's achieved copy bandwidth (GB/s, read + write counted) for a ``megabytes`` float32 tensor."""
    source = torch.empty(megabytes * (1 << 20) // FLOAT_BYTES, device=device).uniform_()
    target = torch.empty_like(source)
    milliseconds = time_call(lambda: target.copy_(source), device, repeats)
    return 2 * source.numel() * FLOAT_BYTES / (milliseconds / 1000) / 1e9
