"""Benchmark: verl's ``grpo`` and ``grpo_vectorized`` vs edge_verl's ``edge_eda`` and ``gepo``, same batch.

Each estimator is called through verl's registry exactly as verl's compute_advantage calls it
(token_level_rewards, response_mask, index=uids, config), plus ``batch=`` holding old_log_probs and
entropy for ours. Prints median milliseconds and the ratio to ``grpo_vectorized`` for each (B, T).
Runs on CPU or GPU (``--device cuda``); on GPU the timings synchronise the device.

    .venv/bin/python scripts/bench_estimators.py --sizes 512x1024 8192x4096
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch


def make_batch(batch_size: int, length: int, group_size: int, device: str, seed: int = 0) -> dict:
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, length + 1, (batch_size,), generator=generator)
    mask = (torch.arange(length)[None, :] < lengths[:, None]).float()
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


def time_call(fn, device: str, repeats: int) -> float:
    fn()  # warm-up
    samples = []
    for _ in range(repeats):
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        started = time.perf_counter()
        fn()
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        samples.append(time.perf_counter() - started)
    return 1000 * statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=["256x512", "1024x1024", "4096x2048", "8192x4096"])
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--skip-loop-grpo-above", type=int, default=1 << 30, help="skip verl's Python-loop grpo above this B")
    args = parser.parse_args()

    import verl  # noqa: F401  (registers edge_verl's estimators through the plugin entry point)
    from omegaconf import OmegaConf
    from verl.trainer.ppo import core_algos

    from edge_verl.integration.run import TrainingRun, active_run, advantage_step

    def call_in_step(fn, kwargs):
        with advantage_step():  # as in training: the estimator also computes its step metrics
            return fn(**kwargs)

    config = OmegaConf.create({"norm_adv_by_std_in_grpo": True})
    names = ["grpo", "grpo_vectorized", "edge_eda", "gepo"]
    print(f"device={args.device} group_size={args.group_size} repeats={args.repeats} torch={torch.__version__}")
    print("| B x T | " + " | ".join(f"{name} ms" for name in names) + " | edge_eda / grpo_vectorized | gepo / grpo_vectorized |")
    print("|---" * (len(names) + 3) + "|")
    for size in args.sizes:
        batch_size, length = (int(part) for part in size.lower().split("x"))
        data = make_batch(batch_size, length, args.group_size, args.device)
        common = {key: data[key] for key in ("token_level_rewards", "response_mask", "index")}
        extra = {"old_log_probs": data["old_log_probs"], "entropys": data["entropys"]}
        timings = {}
        for name in names:
            if name == "grpo" and batch_size > args.skip_loop_grpo_above:
                timings[name] = float("nan")
                continue
            fn = core_algos.get_adv_estimator_fn(name)
            kwargs = dict(common, config=config)
            if name in ("edge_eda", "gepo"):
                kwargs["batch"] = extra
            # A fresh run per estimator, as verl's trainers open one (GEPO's thresholds live in it).
            with active_run(TrainingRun.from_config(OmegaConf.merge(config, {"adv_estimator": name}))):
                timings[name] = time_call(lambda: call_in_step(fn, kwargs), args.device, args.repeats)
        base = timings["grpo_vectorized"]
        cells = " | ".join(f"{timings[name]:.2f}" for name in names)
        print(f"| {batch_size} x {length} | {cells} | {timings['edge_eda'] / base:.2f} | {timings['gepo'] / base:.2f} |")


if __name__ == "__main__":
    main()
