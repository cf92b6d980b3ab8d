"""Benchmark: verl's ``grpo_vectorized`` (and ``grpo``) vs edge_verl's ``edge_eda``, ``gepo`` and EDA's in-loss term.

Two modes, one table format (median milliseconds, ratio to ``grpo_vectorized``, and the compulsory memory
traffic as achieved GB/s next to the machine's measured copy bandwidth):
- through verl's registry (default where verl is installed): each estimator is called exactly as verl's
  compute_advantage calls it (token_level_rewards, response_mask, index=uids, config), inside an advantage
  step as in training (the estimator also computes its step metrics), plus ``batch=`` for ours;
- ``--standalone`` (torch only, e.g. a GPU host without verl): the pure functions of edge_verl.algorithms,
  uid grouping included, against ``edge_verl.benchmarks.verl_grpo_vectorized`` (verl's code, proven equal
  to verl's in tests/integration/test_benchmarks_on_cpu.py).
``eda_loss_term``: the forward and backward of EDA's gradient-through-entropy factor as the actor loss
applies it (``entropy_gradient_scale`` on the current entropy, times the advantages), per call.

    .venv/bin/python scripts/bench_estimators.py --sizes 256x512 8192x4096
    python scripts/bench_estimators.py --standalone --device cuda --sizes 256x512 8192x8192
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the checkout, without install

from edge_verl.algorithms.eda import compute_eda_advantages, entropy_gradient_scale  # noqa: E402
from edge_verl.algorithms.gepo import GepoThresholds, compute_gepo_advantages  # noqa: E402
from edge_verl.algorithms.group_stats import group_index_from_uids, masked_response_mean  # noqa: E402
from edge_verl.benchmarks import copy_bandwidth, make_batch, time_call, traffic, verl_grpo_vectorized  # noqa: E402

# Peak memory bandwidth of GPUs this may run on (GB/s), for the "% of peak" column.
PEAK_GB_PER_S = {"H200": 4800.0, "H100": 3350.0, "A100": 2039.0}


def standalone_calls(data: dict) -> dict:
    """name -> zero-argument callable, torch and edge_verl.algorithms only."""
    rewards, mask, uids = data["token_level_rewards"], data["response_mask"], data["index"]
    thresholds = GepoThresholds(gamma=0.01)

    def grouped():
        group_index, num_groups, is_pad = group_index_from_uids(uids)
        return rewards.sum(-1), group_index.to(rewards.device), num_groups, ~is_pad.to(rewards.device)

    def eda():
        scores, group_index, num_groups, valid = grouped()
        return compute_eda_advantages(scores, data["entropys"], mask, group_index, num_groups, valid).advantages

    def gepo():
        scores, group_index, num_groups, valid = grouped()
        return compute_gepo_advantages(scores, data["old_log_probs"], mask, group_index, num_groups, valid, thresholds).advantages

    return {"grpo_vectorized": lambda: verl_grpo_vectorized(rewards, mask, uids), "edge_eda": eda, "gepo": gepo}


def registry_calls(data: dict, include_loop_grpo: bool) -> dict:
    """name -> zero-argument callable through verl's estimator registry, inside a training run and step."""
    import verl  # noqa: F401  (registers edge_verl's estimators through the plugin entry point)
    from omegaconf import OmegaConf
    from verl.trainer.ppo import core_algos

    from edge_verl.integration.run import TrainingRun, active_run, advantage_step

    config = OmegaConf.create({"norm_adv_by_std_in_grpo": True})
    common = {key: data[key] for key in ("token_level_rewards", "response_mask", "index")}
    extra = {"old_log_probs": data["old_log_probs"], "entropys": data["entropys"]}
    calls = {}
    for name in (["grpo"] if include_loop_grpo else []) + ["grpo_vectorized", "edge_eda", "gepo"]:
        fn = core_algos.get_adv_estimator_fn(name)
        kwargs = dict(common, config=config, **({"batch": extra} if name in ("edge_eda", "gepo") else {}))
        # A run per estimator, as verl's trainers open one (GEPO's thresholds live in it).
        run = TrainingRun.from_config(OmegaConf.merge(config, {"adv_estimator": name}))

        def call(fn=fn, kwargs=kwargs, run=run):
            with active_run(run), advantage_step():
                return fn(**kwargs)

        calls[name] = call
    return calls


def eda_loss_term_call(data: dict):
    """Forward + backward of EDA's in-loss factor on (B, T) tensors, as ``integration/eda_loss.py`` applies it."""
    mask = data["response_mask"]
    entropy = data["entropys"].clone().requires_grad_(True)
    advantages = data["old_log_probs"].detach()  # any (B, T) advantages
    old_entropy = masked_response_mean(data["entropys"], mask)
    group_entropy = torch.full_like(old_entropy, float(old_entropy.mean()))
    old_ratio = old_entropy / group_entropy

    def call():
        scale = entropy_gradient_scale(masked_response_mean(entropy, mask), group_entropy, old_ratio, entropy_epsilon=1e-6, ratio_clamp=None)
        scaled = advantages * (scale[:, None] * mask)
        (gradient,) = torch.autograd.grad(scaled.sum(), entropy)
        return gradient

    return call


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=["256x512", "1024x1024", "4096x2048", "8192x4096"])
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--standalone", action="store_true", help="no verl: pure functions vs a copy of verl's grpo_vectorized")
    parser.add_argument("--loop-grpo-up-to", type=int, default=1024, help="also time verl's Python-loop grpo up to this B")
    args = parser.parse_args()

    device_name = torch.cuda.get_device_name() if args.device.startswith("cuda") else "CPU"
    copy = copy_bandwidth(args.device)
    peak = next((value for key, value in PEAK_GB_PER_S.items() if key in device_name), None)
    mode = "standalone (no verl)" if args.standalone else "through verl's registry"
    print(f"device={args.device} ({device_name}) mode={mode} group_size={args.group_size} repeats={args.repeats} torch={torch.__version__}")
    print(f"measured copy bandwidth: {copy:.0f} GB/s" + (f" (peak {peak:.0f} GB/s)" if peak else ""))
    names = ["grpo_vectorized", "edge_eda", "gepo", "eda_loss_term"]
    header = [f"{name} ms" for name in names] + ["edge_eda / grpo_vec", "gepo / grpo_vec"] + [f"{name} GB/s" for name in names]
    print("| B x T | " + " | ".join(header) + " |")
    print("|---" * (len(header) + 1) + "|")
    for size in args.sizes:
        batch_size, length = (int(part) for part in size.lower().split("x"))
        data = make_batch(batch_size, length, args.group_size, args.device)
        if args.standalone:
            calls = standalone_calls(data)
        else:
            calls = registry_calls(data, include_loop_grpo=batch_size <= args.loop_grpo_up_to)
        calls["eda_loss_term"] = eda_loss_term_call(data)
        timings = {name: time_call(call, args.device, args.repeats) for name, call in calls.items()}
        base = timings["grpo_vectorized"]
        bandwidth = {name: traffic(name, batch_size, length, timings[name]).gb_per_s for name in names}
        cells = [f"{timings[name]:.3f}" for name in names]
        cells += [f"{timings['edge_eda'] / base:.2f}", f"{timings['gepo'] / base:.2f}"]
        cells += [f"{bandwidth[name]:.3g}" + (f" ({100 * bandwidth[name] / peak:.0f}%)" if peak else "") for name in names]
        loop = f"  (verl's loop grpo: {timings['grpo']:.2f} ms)" if "grpo" in timings else ""
        print(f"| {batch_size} x {length} | " + " | ".join(cells) + f" |{loop}")


if __name__ == "__main__":
    main()
