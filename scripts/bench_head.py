"""Head-only benchmark: the policy head's forward + backward (log-prob, and the entropy with gradient for EDA's
gradient form) on eager autograd over the full logits (what verl computes without fused kernels), verl's torch
fused backend (``FusedLinearForPPO``) and the plugin's tiled head, side by side in one run.

Each cell runs in a fresh process (``MALLOC_MMAP_THRESHOLD_`` fixed, so the resident set follows the tensors
alive): the peak resident set over the call less the resident set before it (inputs allocated), in MiB, and
the median wall time of ``--repeats`` calls; ratios are to eager GRPO (log-prob gradient only) at that size.

    .venv/bin/python scripts/bench_head.py --tokens 1024 4096 --vocab 151936 --hidden 256
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HEADS = ("eager", "verl_torch", "edge_tiled")
LOSSES = ("grpo", "eda")  # log-prob gradient only; log-prob + entropy gradient


def _resident(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


def _cell(head: str, loss: str, tokens: int, vocab: int, hidden_size: int, repeats: int) -> dict:
    import torch

    torch.set_num_threads(1)
    generator = torch.Generator().manual_seed(0)
    hidden = torch.randn(tokens, hidden_size, generator=generator).requires_grad_()
    weight = (0.05 * torch.randn(vocab, hidden_size, generator=generator)).requires_grad_()
    labels = torch.randint(0, vocab, (tokens,), generator=generator)

    def run_once():
        if head == "eager":
            logits = (hidden @ weight.t()).float()
            log_p = logits.log_softmax(dim=-1)
            log_prob = log_p.gather(-1, labels[:, None])[:, 0]
            entropy = torch.logsumexp(logits, dim=-1) - (logits.softmax(dim=-1) * logits).sum(dim=-1) if loss == "eda" else None
        elif head == "verl_torch":
            from verl.utils.experimental.torch_functional import FusedLinearForPPOFunction

            log_prob, entropy = FusedLinearForPPOFunction.apply(hidden, weight, labels, 1.0, 512)
        else:
            from edge_verl.algorithms.tiled_head import tiled_log_prob_entropy

            log_prob, entropy = tiled_log_prob_entropy(hidden, weight, labels, 1.0)
        total = log_prob.sum() + (entropy.sum() if loss == "eda" else 0.0)
        total.backward()
        hidden.grad = weight.grad = None

    run_once()  # warm-up: libraries loaded, first-touch of the allocator
    before = _resident("VmRSS")
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run_once()
        times.append(time.perf_counter() - start)
    return {"extra_mib": (_resident("VmHWM") - before) / 2**20, "seconds": statistics.median(times)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=[1024, 4096])
    parser.add_argument("--vocab", type=int, default=151936)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cell", nargs=3, help=argparse.SUPPRESS)  # head loss tokens: one measurement, in this process
    args = parser.parse_args()
    if args.cell:
        head, loss, tokens = args.cell
        print(json.dumps(_cell(head, loss, int(tokens), args.vocab, args.hidden, args.repeats)))
        return 0
    environment = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"}
    print(f"head forward + backward, vocab {args.vocab}, hidden {args.hidden}, float32, 1 thread; "
          "extra MiB over the inputs, ratio to eager grpo")
    print("| tokens | head | loss | extra MiB | MiB / token | x eager grpo | ms | x eager grpo |")
    print("|---|---|---|---|---|---|---|---|")
    for tokens in args.tokens:
        found = {}
        for head in HEADS:
            for loss in LOSSES:
                command = [sys.executable, __file__, "--cell", head, loss, str(tokens), "--vocab", str(args.vocab),
                           "--hidden", str(args.hidden), "--repeats", str(args.repeats)]
                found[head, loss] = json.loads(subprocess.run(command, env=environment, check=True, capture_output=True, text=True).stdout)
        base = found["eager", "grpo"]
        for (head, loss), cell in found.items():
            print(f"| {tokens} | {head} | {loss} | {cell['extra_mib']:.0f} | {cell['extra_mib'] / tokens:.3f} | "
                  f"{cell['extra_mib'] / base['extra_mib']:.2f} | {1e3 * cell['seconds']:.0f} | {cell['seconds'] / base['seconds']:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
