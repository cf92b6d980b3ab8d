"""Benchmark: verl's ``grpo_vectorized`` (and ``grpo``) vs edge_verl's ``edge_eda``, ``gepo`` and EDA's in-loss term.

Three modes, one table format (median milliseconds over rounds that call each estimator once, the ratio to
``grpo_vectorized`` as the median of the per-round ratios, and the compulsory memory traffic as achieved
GB/s next to the machine's measured copy bandwidth):
- through verl's ``compute_advantage`` (default where verl is installed; the call the trainer makes): a
  ``DataProto`` batch with verl's keys (``entropys``, ``old_log_probs``, ``uid``) handed to
  ``verl.trainer.ppo.ray_trainer.compute_advantage`` inside the estimator's training run, as the legacy
  trainer's ``fit`` does. Everything a training step pays is in the time: the plugin's wrapper opening the
  advantage step, the estimator and its step metrics; verl's ``grpo_vectorized`` goes through the same
  call. No run computes the ``edge_verl/adv/*`` statistics unless ``--advantage-stats``
  (``algorithm.edge_metrics.advantage_stats=True`` in every run, as the recipes set it) asks for them for
  every estimator alike;
- ``--registry``: each estimator called as verl's compute_advantage calls it (token_level_rewards,
  response_mask, index=uids, config), inside an advantage step (step metrics included), plus ``batch=``
  for ours: the estimator alone, without the wrapper's statistics and verl's DataProto handling;
- ``--standalone`` (torch only, e.g. a GPU host without verl): the pure functions of edge_verl.algorithms,
  uid grouping included, against ``edge_verl_lab.benchmarks.verl_grpo_vectorized`` (verl's code, proven equal
  to verl's in tests/integration/test_benchmarks_on_cpu.py).
``--threads`` sets torch's intra-op threads (default: torch's own choice); on a CPU machine shared with other
work, ``--threads 1 --clock cpu`` (this process's CPU time instead of wall time) gives the steadiest ratios.
``eda_loss_term``: the forward and backward of EDA's gradient-through-entropy factor as the actor loss
applies it (``entropy_gradient_scale`` on the current entropy, times the advantages), per call.

    .venv/bin/python scripts/bench_estimators.py --sizes 256x512 1024x1024 4096x2048 --threads 1 --clock cpu --repeats 41
    python scripts/bench_estimators.py --standalone --device cuda --sizes 256x512 8192x8192
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the checkout, without install

from edge_verl.estimators.edge_eda import compute_eda_advantages, entropy_gradient_scale  # noqa: E402
from edge_verl.estimators.gepo import GepoThresholds, compute_gepo_advantages  # noqa: E402
from edge_verl.estimators.groups import group_index_from_uids, masked_response_mean  # noqa: E402
from edge_verl_lab.benchmarks import copy_bandwidth, make_batch, round_ratio, time_rounds, traffic, verl_grpo_vectorized  # noqa: E402

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

    from edge_verl.integration.run import advantage_step, TrainingRun

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
            with advantage_step(run):
                return fn(**kwargs)

        calls[name] = call
    return calls


def compute_advantage_calls(data: dict, include_loop_grpo: bool, advantage_stats: bool = False) -> dict:
    """name -> zero-argument callable: verl's ``ray_trainer.compute_advantage`` on a DataProto, inside a
    training run per estimator (what the legacy trainer's step does; the plugin's wrapper opens the step)."""
    import verl  # noqa: F401  (registers edge_verl's estimators through the plugin entry point)
    from omegaconf import OmegaConf
    from verl import DataProto
    from verl.trainer.ppo import ray_trainer

    from edge_verl.integration.run import active_run, TrainingRun

    keys = ("token_level_rewards", "response_mask", "old_log_probs", "entropys")
    batch = DataProto.from_dict(tensors={key: data[key] for key in keys}, non_tensors={"uid": data["index"]})
    calls = {}
    for name in (["grpo"] if include_loop_grpo else []) + ["grpo_vectorized", "edge_eda", "gepo"]:
        config = OmegaConf.create(
            {"adv_estimator": name, "norm_adv_by_std_in_grpo": True, "edge_metrics": {"advantage_stats": advantage_stats}}
        )
        run = TrainingRun.from_config(config)

        def call(name=name, config=config, run=run):
            with active_run(run):
                return ray_trainer.compute_advantage(batch, adv_estimator=name, config=config)

        calls[name] = call
    return calls


def eda_loss_term_call(data: dict):
    """Forward + backward of EDA's in-loss factor on (B, T) tensors, as the actor's loss (``integration/actor_loss.py``) applies it."""
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
    modes = parser.add_mutually_exclusive_group()
    modes.add_argument("--standalone", action="store_true", help="no verl: pure functions vs a copy of verl's grpo_vectorized")
    modes.add_argument(
        "--registry", action="store_true", help="the estimators alone through verl's registry, not verl's compute_advantage"
    )
    parser.add_argument(
        "--advantage-stats", action="store_true",
        help="every run logs edge_verl/adv/* (algorithm.edge_metrics.advantage_stats=True, as in the recipes), verl's too",
    )
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's choice)")
    parser.add_argument(
        "--clock", choices=("wall", "cpu"), default="wall",
        help="wall time, or the process's CPU time (CPU device, with --threads 1: immune to other processes' load)",
    )
    parser.add_argument("--loop-grpo-up-to", type=int, default=1024, help="also time verl's Python-loop grpo up to this B")
    args = parser.parse_args()
    if args.advantage_stats and (args.standalone or args.registry):
        parser.error("--advantage-stats applies to the compute_advantage mode (the statistics are the wrapper's)")
    if args.clock == "cpu" and args.device != "cpu":
        parser.error("--clock cpu measures host CPU time; use it with --device cpu")
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    if args.threads is not None:
        torch.set_num_threads(args.threads)

    device_name = torch.cuda.get_device_name() if args.device.startswith("cuda") else "CPU"
    copy = copy_bandwidth(args.device)
    peak = next((value for key, value in PEAK_GB_PER_S.items() if key in device_name), None)
    mode = "through verl's compute_advantage"
    if args.standalone or args.registry:
        mode = "standalone (no verl)" if args.standalone else "through verl's registry"
    if args.advantage_stats:
        mode += ", advantage_stats for every estimator"
    print(
        f"device={args.device} ({device_name}) mode={mode} group_size={args.group_size} repeats={args.repeats} "
        f"threads={torch.get_num_threads()} clock={args.clock} torch={torch.__version__}"
    )
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
        elif args.registry:
            calls = registry_calls(data, include_loop_grpo=batch_size <= args.loop_grpo_up_to)
        else:
            calls = compute_advantage_calls(data, batch_size <= args.loop_grpo_up_to, advantage_stats=args.advantage_stats)
        calls["eda_loss_term"] = eda_loss_term_call(data)
        samples = time_rounds(calls, args.device, args.repeats, clock=clock)
        timings = {name: statistics.median(values) for name, values in samples.items()}
        bandwidth = {name: traffic(name, batch_size, length, timings[name]).gb_per_s for name in names}
        cells = [f"{timings[name]:.3f}" for name in names]
        cells += [f"{round_ratio(samples, name, 'grpo_vectorized'):.2f}" for name in ("edge_eda", "gepo")]
        cells += [f"{bandwidth[name]:.3g}" + (f" ({100 * bandwidth[name] / peak:.0f}%)" if peak else "") for name in names]
        loop = f"  (verl's loop grpo: {timings['grpo']:.2f} ms)" if "grpo" in timings else ""
        print(f"| {batch_size} x {length} | " + " | ".join(cells) + f" |{loop}")


if __name__ == "__main__":
    main()
