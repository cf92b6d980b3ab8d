"""Memory benchmark: the actor worker's peak memory in verl's own update and log-prob passes, per method, as a
ratio to GRPO, in one run.

Each row is a real ``main_ppo`` run on CPU (the demo's pipeline, v1 trainer, FSDP engine) of a model with
Qwen2.5's vocabulary (151,936 rows, the padded embedding of a tiny Qwen2: hidden size 64) on responses as
long as the recipes' (``--sample-tokens``, default 1024; GEC's corrections add the phrase and
``--continuation-tokens``, default 256), two micro-batches per pass. An untrained model of that vocabulary
almost never samples EOS, so every response runs to its cap: each pass sees the recipes' lengths. The peak
is verl's own ``perf/max_memory_allocated_gb`` of the actor update, which the CPU platform reports as the
worker process's peak resident memory (VmHWM, edge_verl/integration/cpu/platform.py) over the whole run:
both passes of every step. glibc's malloc keeps freed memory of a large block in its heap once its dynamic mmap
threshold has grown (so the resident peak depends on the order of frees, ~25% apart for three methods whose passes
allocate the same tensors); the script fixes the threshold (``MALLOC_MMAP_THRESHOLD_``, inherited by every process
of the run), so every block of 64 KiB or more is mapped on allocation and returned when freed, and the resident
peak follows the tensors alive at once. Times are verl's ``timing_s/update_actor`` and ``timing_s/old_log_prob`` per
1000 response tokens (median over the steps after the first).

    .venv/bin/python scripts/bench_memory.py --out runs/bench_memory

How the figures carry to a GPU: with a tiny hidden size, what differs between methods is what scales with
tokens per micro-batch x vocabulary: the logits and their softmax copies kept for the backward pass (fp32
here; bf16 logits upcast to fp32 on GPUs, the same size per token). The Δ column (GB over GRPO) per
micro-batch token is the extra that method adds per token of a micro-batch on any device; the ratio is
specific to this model, whose weights and optimizer state are small (on a 7B model they dominate the peak
and the ratios move towards 1, but the Δ per token stays). What it cannot show: fused kernels
(``use_fused_kernels``, GPU only), sequence parallel and remove-padding (padded sequences here), and the
allocator's fragmentation on a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the checkout, without install

from edge_verl_lab.demo.run import DemoConfig, run_demo, trained_steps  # noqa: E402

QWEN25_VOCAB = 151936
ENTROPY_CHECKPOINTING = "actor_rollout_ref.actor.entropy_checkpointing=True"
ENTROPY_CHUNKING = "actor_rollout_ref.actor.entropy_from_logits_with_chunking=True"
# label -> (demo algorithm, EDA form, extra overrides)
METHODS = {
    "grpo": ("grpo", "gradient", ()),
    "gepo": ("gepo", "gradient", ()),
    "eda detached": ("edge_eda", "detached", ()),
    "eda gradient": ("edge_eda", "gradient", ()),
    "eda gradient + checkpointing": ("edge_eda", "gradient", (ENTROPY_CHECKPOINTING,)),
    "eda gradient + chunking": ("edge_eda", "gradient", (ENTROPY_CHUNKING,)),
    "eda gradient + both": ("edge_eda", "gradient", (ENTROPY_CHECKPOINTING, ENTROPY_CHUNKING)),
    "edge (eda gradient + gec)": ("edge", "gradient", ()),
    "edge + checkpointing": ("edge", "gradient", (ENTROPY_CHECKPOINTING,)),
}
PEAK_SUFFIX = "max_memory_allocated_gb"
# glibc: a fixed mmap threshold (setting it turns the dynamic one off): blocks >= 64 KiB are mapped and unmapped
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": "65536"}
PHASES = ("update_actor", "old_log_prob")


def peak_gb(rows: list[dict]) -> float:
    """The actor worker's peak over the run: the largest ``*max_memory_allocated_gb`` verl logged."""
    values = [value for row in rows for key, value in row.items() if key.endswith(PEAK_SUFFIX) and isinstance(value, (int, float))]
    if not values:
        raise RuntimeError(f"no metric ending in {PEAK_SUFFIX} was logged: is the CPU platform's memory counter in place?")
    return max(values)


def per_token_ms(rows: list[dict], responses: int) -> dict[str, float]:
    """Median over the steps after the first of each phase's milliseconds per 1000 response tokens."""
    found = {}
    for phase in PHASES:
        values = [1e6 * row[f"timing_s/{phase}"] / (row["response_length/mean"] * responses)
                  for row in rows[1:] if f"timing_s/{phase}" in row and row.get("response_length/mean")]
        found[phase] = statistics.median(values) if values else float("nan")
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sample-tokens", type=int, default=1024, help="sampled response cap (the reference's 1024)")
    parser.add_argument("--continuation-tokens", type=int, default=256, help="GEC's regenerated continuation (the reference's 256)")
    parser.add_argument("--micro-batch", type=int, default=2, help="sequences per micro-batch in both passes")
    parser.add_argument("--prompts", type=int, default=2)
    parser.add_argument("--responses", type=int, default=4)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("runs/bench_memory"))
    parser.add_argument("--methods", nargs="*", default=list(METHODS), choices=list(METHODS))
    args = parser.parse_args()
    if args.steps < 2:
        parser.error("--steps must be >= 2 (the first step's time is left out)")
    os.environ.update(MALLOC_ENV)  # the run's processes inherit it (run_demo passes this environment on)
    results = {}
    for label in args.methods:
        algorithm, form, extra = METHODS[label]
        config = DemoConfig(
            algorithm=algorithm, eda_form=form, steps=args.steps, seed=args.seed, task="copy",
            out=args.out / label.replace(" ", "_").replace("(", "").replace(")", "").replace("+", "and"),
            prompts_per_step=args.prompts, responses_per_prompt=args.responses, updates_per_step=1,
            loss_agg_mode="seq-mean-token-mean", temperature=0.6, warm_start_steps=0,
            sample_tokens=args.sample_tokens, continuation_tokens=args.continuation_tokens, vocab_multiple=QWEN25_VOCAB,
            extra_overrides=[f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={args.micro_batch}",
                             f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={args.micro_batch}", *extra],
        )
        result = run_demo(config, stream=sys.stderr)
        if result["returncode"] != 0:
            print(f"{label}: verl failed (exit {result['returncode']}), see {config.out / 'verl.log'}", file=sys.stderr)
            return result["returncode"]
        rows = trained_steps(result["rows"])
        results[label] = {
            "peak_gb": peak_gb(rows),
            "response_tokens_mean": statistics.fmean(row["response_length/mean"] for row in rows),
            "response_tokens_max": max(row["response_length/max"] for row in rows),
            "ms_per_1k_tokens": per_token_ms(rows, args.prompts * args.responses),
            "overrides": list(extra),
        }
        (args.out / "bench_memory.json").write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "results": results}, indent=2))
    print(f"\nActor worker peak memory and time (vocab {QWEN25_VOCAB}, hidden 64; samples up to {args.sample_tokens} tokens, GEC + "
          f"{args.continuation_tokens}; micro-batch {args.micro_batch} sequences; {args.steps} steps); ratio to grpo")
    print("| method | peak GB | × grpo | Δ GB | response tokens mean / max | update ms/1k tok | log-prob ms/1k tok |")
    print("|---|---|---|---|---|---|---|")
    base = results.get("grpo")
    for label, found in results.items():
        ratio = f"{found['peak_gb'] / base['peak_gb']:.2f}" if base else "-"
        delta = f"{found['peak_gb'] - base['peak_gb']:+.2f}" if base else "-"
        times = found["ms_per_1k_tokens"]
        timing = [f"{times[phase]:.0f}" + (f" ({times[phase] / base['ms_per_1k_tokens'][phase]:.2f}x)" if base and label != "grpo" else "")
                  for phase in PHASES]
        print(f"| {label} | {found['peak_gb']:.2f} | {ratio} | {delta} | {found['response_tokens_mean']:.0f} / "
              f"{found['response_tokens_max']:.0f} | {timing[0]} | {timing[1]} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
