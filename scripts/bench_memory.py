"""Memory benchmark: the actor update's own peak memory and the step time per method, on each policy head, at
two token budgets per micro-batch, side by side in one run.

Each cell is a real ``main_ppo`` run on CPU (the demo's pipeline, v1 trainer, FSDP engine) of a model with
Qwen2.5's vocabulary (151,936 rows, the padded embedding of a tiny Qwen2: hidden size 64) on sequences of
``--sequence-tokens`` (default 1024): a prompt made long by filler (``DemoConfig.prompt_filler``) and a response
of ``--sample-tokens`` (default 64; GEC's corrections add the phrase and ``--continuation-tokens``, default 64).
An untrained model of that vocabulary almost never samples EOS, so every response runs to its cap. verl's
forward computes the head, and EDA's entropy with its gradient, over every token of the sequence, prompt
included, so a micro-batch's memory follows its tokens whichever part they are in; the CPU rollout decodes one
token of one request at a time (~25 ms per token with this vocabulary), so long responses would cost the run
hours. Per step, one micro-batch of ``m`` sequences in the update and in the log-prob pass
(``--micro-batches``, default 2 and 8: ~2k and ~8k tokens per micro-batch).

Heads (verl's own switches; the recipes' is ``edge_tiled``):
- ``eager``: verl's model forward, the (tokens, vocabulary) logits materialised, autograd over them;
- ``verl_torch``: ``use_fused_kernels=True, fused_kernel_options.impl_backend=torch``, verl's chunked torch head;
- ``edge_tiled``: ``impl_backend=edge_tiled``, the plugin's tiled head (``edge_verl/algorithms/tiled_head.py``).
verl's Triton backend (``impl_backend=triton``) needs CUDA: not measured here.

The peak is verl's ``actor/perf/max_memory_allocated_gb`` of the update, which the CPU platform reports as the
actor worker's peak resident set; ``EDGE_VERL_CPU_PEAK_PER_PASS=1`` resets it when the update starts, so it is
the update's own peak (the largest over the steps). glibc's malloc keeps freed memory of a large block in its
heap once its dynamic mmap threshold has grown, so the resident peak would depend on the order of frees; the
script fixes the threshold (``MALLOC_MMAP_THRESHOLD_``), so every block of 64 KiB or more is mapped on
allocation and returned when freed, and the peak follows the tensors alive at once. The step time is verl's
``timing_s/step``, median over the steps after the first, and the update's ``timing_s/update_actor`` beside it
(a step here is mostly the rollout's decoding, which no head changes).

    .venv/bin/python scripts/bench_memory.py --out runs/bench_memory

How the figures carry to a GPU: with a tiny hidden size, what differs between cells is what scales with tokens
per micro-batch x vocabulary (the logits, their float32 softmax copies kept for the backward pass); the MiB per
token column is that slope, measured between the two budgets, and carries to any device; the ratios are
specific to this model, whose weights and optimizer state are small. On a GPU the eager head costs more than
here: with the entropy computed, verl turns off flash-attn's in-place log-prob backward, one more bf16
tokens x vocabulary copy.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the checkout, without install

from edge_verl.algorithms.tiled_head import TILED_HEAD_BACKEND  # noqa: E402
from edge_verl.integration.cpu.overrides import CPU_ISA_ENV, PEAK_PER_PASS_ENV  # noqa: E402
from edge_verl_lab.demo.run import DemoConfig, run_demo, trained_steps  # noqa: E402

QWEN25_VOCAB = 151936
# label -> (demo algorithm, EDA form)
METHODS = {
    "grpo": ("grpo", "gradient"), "eda gradient": ("edge_eda", "gradient"), "edge": ("edge", "gradient"),
    "eda detached": ("edge_eda", "detached"), "gepo": ("gepo", "gradient"),
}
FUSED = "actor_rollout_ref.model.use_fused_kernels=True"
BACKEND = "actor_rollout_ref.model.fused_kernel_options.impl_backend"
HEADS = {
    "eager": (),
    "edge_tiled": (FUSED, f"{BACKEND}={TILED_HEAD_BACKEND}"),
    "verl_torch": (FUSED, f"{BACKEND}=torch"),
}
UPDATE_PEAK = "actor/perf/max_memory_allocated_gb"
# glibc: a fixed mmap threshold (setting it turns the dynamic one off): blocks >= 64 KiB are mapped and unmapped
# and the machine's own kernels (not the AVX2 path CPU runs pin for reproducible numbers: without AVX512's bfloat16
# instructions the bf16 matmuls of the update ran ~9x slower on this benchmark's Zen 4 machine: 33 s against 3.6 s)
RUN_ENV = {"MALLOC_MMAP_THRESHOLD_": "65536", PEAK_PER_PASS_ENV: "1", CPU_ISA_ENV: "native"}
# the chat template and the task's question around the filler, in byte-level tokens (about)
PROMPT_TEMPLATE_TOKENS = 48


def update_peak_gb(rows: list[dict]) -> float:
    """The update's own peak: the largest ``actor/perf/max_memory_allocated_gb`` over the steps."""
    values = [row[UPDATE_PEAK] for row in rows if isinstance(row.get(UPDATE_PEAK), (int, float))]
    if not values:
        raise RuntimeError(f"no {UPDATE_PEAK} was logged: is the CPU platform's memory counter in place?")
    return max(values)


def step_seconds(rows: list[dict]) -> float:
    """Median ``timing_s/step`` over the steps after the first (the first step pays one-time costs)."""
    values = [row["timing_s/step"] for row in rows[1:] if "timing_s/step" in row]
    if not values:
        raise RuntimeError("no timing_s/step after the first step: run at least 2 steps")
    return statistics.median(values)


def shape(micro_batch: int) -> tuple[int, int]:
    """(prompts, responses per prompt) of a step that is one micro-batch of ``micro_batch`` sequences: groups of
    up to 4 responses, at least 2 (a group of one has no advantage)."""
    if micro_batch < 2 or micro_batch % 2:
        raise ValueError(f"--micro-batches: {micro_batch} must be an even number >= 2")
    responses = 4 if micro_batch % 4 == 0 else 2
    return micro_batch // responses, responses


def table(results: dict) -> list[str]:
    """Markdown rows: per budget, head and method, the update's peak, its ratios to GRPO on the same head and to
    eager GRPO, the MiB per micro-batch token (the slope between the two budgets), and the step and update times
    with their ratios to eager GRPO's."""
    budgets = sorted({cell["micro_batch"] for cell in results.values()})
    lines = ["| tokens / micro-batch | head | method | update peak GiB | × grpo, same head | × eager grpo | MiB / token "
             "| step s | step × eager grpo | update s | update × eager grpo |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for budget in budgets:
        cells = {(c["head"], c["method"]): c for c in results.values() if c["micro_batch"] == budget}
        eager_grpo = cells.get(("eager", "grpo"))
        for (head, method), cell in cells.items():
            same = cells.get((head, "grpo"))
            slope = _slope(results, head, method)
            lines.append(
                f"| {cell['tokens_per_micro_batch']:.0f} | {head} | {method} | {cell['peak_gb']:.2f} "
                f"| {_ratio(cell['peak_gb'], same and same['peak_gb'])} | {_ratio(cell['peak_gb'], eager_grpo and eager_grpo['peak_gb'])} "
                f"| {'-' if slope is None else f'{slope:.3f}'} | {cell['step_s']:.1f} "
                f"| {_ratio(cell['step_s'], eager_grpo and eager_grpo['step_s'])} | {cell['update_s']:.1f} "
                f"| {_ratio(cell['update_s'], eager_grpo and eager_grpo['update_s'])} |"
            )
    return lines


def _ratio(value: float, base: float | None) -> str:
    return f"{value / base:.2f}" if base else "-"


def _slope(results: dict, head: str, method: str) -> float | None:
    """MiB of update peak per micro-batch token, between the smallest and the largest budget of this cell."""
    cells = sorted((c for c in results.values() if c["head"] == head and c["method"] == method),
                   key=lambda c: c["tokens_per_micro_batch"])
    if len(cells) < 2 or cells[-1]["tokens_per_micro_batch"] == cells[0]["tokens_per_micro_batch"]:
        return None
    return (cells[-1]["peak_gb"] - cells[0]["peak_gb"]) * 1024 / (cells[-1]["tokens_per_micro_batch"] - cells[0]["tokens_per_micro_batch"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sequence-tokens", type=int, default=1024, help="prompt + response tokens per sequence (filler fills the prompt)")
    parser.add_argument("--sample-tokens", type=int, default=64, help="sampled response cap")
    parser.add_argument("--continuation-tokens", type=int, default=64, help="GEC's regenerated continuation")
    parser.add_argument("--micro-batches", type=int, nargs="+", default=[2, 8], help="sequences per micro-batch: the budgets")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("runs/bench_memory"))
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    parser.add_argument("--heads", nargs="+", default=list(HEADS), choices=list(HEADS))
    parser.add_argument("--table", type=Path, help="print the table of a bench_memory.json (cells written so far) and exit")
    args = parser.parse_args()
    if args.table:
        print("\n".join(table(json.loads(args.table.read_text())["results"])))
        return 0
    if args.steps < 2:
        parser.error("--steps must be >= 2 (the first step's time is left out)")
    for micro_batch in args.micro_batches:
        try:
            shape(micro_batch)
        except ValueError as error:
            parser.error(str(error))
    os.environ.update(RUN_ENV)  # the run's processes inherit it (run_demo passes this environment on)
    results_file = args.out / "bench_memory.json"
    results = {}
    for micro_batch in args.micro_batches:
        prompts, responses = shape(micro_batch)
        for head in args.heads:
            for label in args.methods:
                algorithm, form = METHODS[label]
                name = f"{micro_batch}seq_{head}_{label.replace(' ', '_')}"
                config = DemoConfig(
                    algorithm=algorithm, eda_form=form, steps=args.steps, seed=args.seed, task="copy", out=args.out / name,
                    model_dir=args.out / "model", prompts_per_step=prompts, responses_per_prompt=responses,
                    updates_per_step=1, loss_agg_mode="seq-mean-token-mean", temperature=0.6, warm_start_steps=0,
                    sample_tokens=args.sample_tokens, continuation_tokens=args.continuation_tokens,
                    vocab_multiple=QWEN25_VOCAB, prompt_filler=max(0, args.sequence_tokens - args.sample_tokens - PROMPT_TEMPLATE_TOKENS),
                    extra_overrides=[f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={micro_batch}",
                                     f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={micro_batch}",
                                     *HEADS[head]],
                )
                result = run_demo(config, stream=sys.stderr)
                if result["returncode"] != 0:
                    print(f"{name}: verl failed (exit {result['returncode']}), see {config.out / 'verl.log'}", file=sys.stderr)
                    return result["returncode"]
                rows = trained_steps(result["rows"])
                sequence_tokens = statistics.fmean(row["prompt_length/mean"] + row["response_length/mean"] for row in rows)
                results[name] = {
                    "micro_batch": micro_batch, "head": head, "method": label,
                    "tokens_per_micro_batch": micro_batch * sequence_tokens,
                    "response_tokens_mean": statistics.fmean(row["response_length/mean"] for row in rows),
                    "peak_gb": update_peak_gb(rows), "step_s": step_seconds(rows),
                    "update_s": statistics.median(row["timing_s/update_actor"] for row in rows[1:]),
                    "overrides": list(HEADS[head]),
                }
                results_file.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "results": results}, indent=1))
    print(f"\nThe actor update's own peak and the step time (vocab {QWEN25_VOCAB}, hidden 64; samples up to "
          f"{args.sample_tokens} tokens after a filled prompt, {args.sequence_tokens} a sequence; GEC + {args.continuation_tokens}; "
          f"one micro-batch per pass; {args.steps} steps)")
    print("\n".join(table(results)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
