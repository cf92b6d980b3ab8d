"""The papers' evaluation protocol: sample, grade with edge_verl's reward, report per benchmark and the
sample-weighted average over all problems (EDGE-GRPO's "Avg" over 1560 problems), plus pass@k.

Generation uses vLLM when it is installed (GPU) and transformers' ``generate`` otherwise (CPU, tiny
models). Aggregation is pure Python and tested on hand-computed cases.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from edge_verl.data import EVAL_SETS, PAPER_EVAL, prompt_messages, read_records, shipped_file


def pass_at_k(samples: int, correct: int, k: int) -> float:
    """Unbiased pass@k (Chen et al. 2021): 1 - C(n - c, k) / C(n, k)."""
    if k > samples:
        raise ValueError(f"pass@{k} needs at least {k} samples, got {samples}")
    if samples - correct < k:
        return 1.0
    return 1.0 - math.comb(samples - correct, k) / math.comb(samples, k)


@dataclass(frozen=True)
class ProblemResult:
    benchmark: str
    index: int
    scores: tuple[float, ...]  # one per sample, 0/1

    @property
    def correct(self) -> int:
        return int(sum(score > 0.5 for score in self.scores))


def summarize(results: Sequence[ProblemResult], ks: Sequence[int] = (1,), average_over: Sequence[str] = PAPER_EVAL) -> dict:
    """Per-benchmark mean pass@k and the problem-weighted average over ``average_over`` benchmarks.

    pass@1 with one sample is plain accuracy; the "Avg" row weights every problem equally, so it equals
    total correct / total problems over the averaged benchmarks (not the mean of benchmark means).
    """
    table: dict[str, dict] = {}
    for benchmark in dict.fromkeys(result.benchmark for result in results):
        rows = [result for result in results if result.benchmark == benchmark]
        table[benchmark] = {"problems": len(rows)}
        for k in ks:
            table[benchmark][f"pass@{k}"] = sum(pass_at_k(len(r.scores), r.correct, k) for r in rows) / len(rows)
    averaged = [result for result in results if result.benchmark in average_over]
    if averaged:
        table["Avg"] = {"problems": len(averaged)}
        for k in ks:
            table["Avg"][f"pass@{k}"] = sum(pass_at_k(len(r.scores), r.correct, k) for r in averaged) / len(averaged)
    return table


def markdown_table(table: dict, ks: Sequence[int] = (1,)) -> str:
    header = "| benchmark | problems | " + " | ".join(f"pass@{k} (%)" for k in ks) + " |"
    lines = [header, "|---" * (len(ks) + 2) + "|"]
    for name, row in table.items():
        cells = " | ".join(f"{100 * row[f'pass@{k}']:.2f}" for k in ks)
        lines.append(f"| {name} | {row['problems']} | {cells} |")
    return "\n".join(lines)


def load_benchmarks(names: Sequence[str], limit: Optional[int] = None, extra: Sequence[Path] = ()) -> list[dict]:
    """Problems as {"benchmark", "index", "problem", "answer"} from the sets shipped with edge_verl (and
    extra JSON/JSONL/parquet files with problem/answer fields, named by their stem)."""
    problems = []
    sources = [(name, shipped_file("eval", name)) for name in names] + [(Path(path).stem, Path(path)) for path in extra]
    for name, path in sources:
        for index, record in enumerate(read_records(path)[:limit]):
            problems.append({"benchmark": name, "index": index, "problem": record["problem"], "answer": record["answer"]})
    return problems


def _has_weights(folder: Path) -> bool:
    return any(folder.glob("*.safetensors")) or any(folder.glob("pytorch_model*.bin"))


def resolve_model_dir(path: str | Path) -> str:
    """An HF model folder from a verl run folder (its latest checkpoint), a ``global_step_N`` checkpoint
    folder, an ``actor`` folder or an HF folder; anything else (e.g. a hub name) is returned unchanged.

    Raises when the checkpoint's ``huggingface`` folder has no weights (verl saves them only when
    ``actor.checkpoint.save_contents`` includes ``hf_model``, as the recipes set) with the way out.
    """
    folder = Path(path)
    if not folder.is_dir():
        return str(path)
    if (folder / "config.json").exists() and _has_weights(folder):
        return str(folder)
    latest = folder / "latest_checkpointed_iteration.txt"
    if latest.exists():
        return resolve_model_dir(folder / f"global_step_{int(latest.read_text().strip())}")
    for candidate in (folder / "actor" / "huggingface", folder / "huggingface"):
        if candidate.is_dir():
            if _has_weights(candidate):
                return str(candidate)
            actor = candidate.parent
            raise FileNotFoundError(
                f"{candidate} has no model weights: the run did not save HF weights. Train with "
                "actor_rollout_ref.actor.checkpoint.save_contents=[model,optimizer,extra,hf_model] (the recipes do), or "
                f"merge the checkpoint first: python -m verl.model_merger merge --backend fsdp --local_dir {actor} "
                f"--target_dir {candidate}"
            )
    raise FileNotFoundError(f"{folder}: not an HF model folder, a verl checkpoint folder or a verl run folder")


def uses_vllm() -> bool:
    """vLLM generates when it is importable and a CUDA device is there; otherwise transformers does. On a
    CPU-only machine vLLM may be installed too (its CPU build, for verl's rollout on the CPU backend), but
    it supports only some model shapes there (head sizes 32, 64, 80+) and is not what this protocol was
    checked with."""
    import importlib.util

    import torch

    return torch.cuda.is_available() and importlib.util.find_spec("vllm") is not None


def generate(model_path: str, prompts: list[str], samples: int, temperature: float, max_new_tokens: int, seed: int = 0) -> list[list[str]]:
    """``samples`` completions per prompt: vLLM on a GPU (``uses_vllm``), else transformers."""
    if not uses_vllm():
        return _generate_hf(model_path, prompts, samples, temperature, max_new_tokens, seed)
    from vllm import LLM, SamplingParams

    llm = LLM(model=model_path, seed=seed)
    params = SamplingParams(n=samples, temperature=temperature, max_tokens=max_new_tokens, seed=seed)
    return [[choice.text for choice in output.outputs] for output in llm.generate(prompts, params)]


def _generate_hf(model_path: str, prompts: list[str], samples: int, temperature: float, max_new_tokens: int, seed: int) -> list[list[str]]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(seed)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(model_path).to(device).eval()
    completions = []
    for prompt in prompts:
        encoded = tokenizer([prompt] * samples, return_tensors="pt", add_special_tokens=False).to(device)
        with torch.inference_mode():
            output = model.generate(
                **encoded,
                max_new_tokens=max_new_tokens,
                do_sample=temperature > 0,
                temperature=temperature if temperature > 0 else None,
                top_p=1.0,
                pad_token_id=tokenizer.pad_token_id,
            )
        completions.append(tokenizer.batch_decode(output[:, encoded["input_ids"].shape[1] :], skip_special_tokens=True))
    return completions


def evaluate(
    model_path: str | Path,
    problems: list[dict],
    *,
    samples: int = 1,
    temperature: float = 0.1,
    max_new_tokens: int = 3000,
    seed: int = 0,
) -> list[dict]:
    """Generate and grade; one record per problem with its responses, predictions and scores."""
    from transformers import AutoTokenizer

    from edge_verl.reward import compute_score

    model_path = resolve_model_dir(model_path)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    prompts = [
        tokenizer.apply_chat_template(prompt_messages(p["problem"]), add_generation_prompt=True, tokenize=False) for p in problems
    ]
    completions = generate(model_path, prompts, samples, temperature, max_new_tokens, seed)
    records = []
    for problem, responses in zip(problems, completions):
        graded = [compute_score(problem["benchmark"], response, problem["answer"]) for response in responses]
        records.append(
            {
                **problem,
                "responses": responses,
                "preds": [result["pred"] for result in graded],
                "scores": [result["score"] for result in graded],
            }
        )
    return records


def write_report(
    records: list[dict], out_dir: Path, ks: Sequence[int], average_over: Sequence[str] = PAPER_EVAL, meta: Optional[dict] = None
) -> dict:
    """eval_records.jsonl (every response, prediction, score), eval.json / eval.md (the table) and, given
    ``meta`` (model folder, sampling settings), eval_meta.json."""
    results = [ProblemResult(r["benchmark"], r["index"], tuple(r["scores"])) for r in records]
    table = summarize(results, ks, average_over)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "eval_records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (out_dir / "eval.json").write_text(json.dumps(table, indent=2))
    (out_dir / "eval.md").write_text(markdown_table(table, ks) + "\n")
    if meta is not None:
        (out_dir / "eval_meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    return table


CLI_USAGE = """Evaluate a model or a trained run with the papers' protocol and print their table (markdown; JSON in --out).

    .venv/bin/python scripts/evaluate.py --model Qwen/Qwen2.5-Math-7B --out runs/eval          # 1 sample, T=0.1
    .venv/bin/python scripts/evaluate.py --model checkpoints/edge_verl/<run> --out runs/eval    # its latest checkpoint
    .venv/bin/python scripts/evaluate.py --model <hf folder> --samples 8 --temperature 0.6 --k 1 4 8  # pass@k

--model takes an HF model folder or hub name, a verl run folder (trainer.default_local_dir: its latest
checkpoint), or one ``global_step_N`` folder; the checkpoint's HF weights (actor/huggingface, saved by the
recipes) are evaluated. Benchmarks: the EDGE-GRPO suite (AIME24, AMC, MATH-500, Minerva, OlympiadBench;
"Avg" = the problem-weighted mean over their 1560 problems) and AIME25, shipped with edge_verl.
"""


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``scripts/evaluate.py`` / ``python -m edge_verl_lab.evaluation``: see CLI_USAGE."""
    parser = argparse.ArgumentParser(description=CLI_USAGE.splitlines()[0], epilog=CLI_USAGE, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="HF folder or hub name, verl run folder, or global_step_N folder")
    parser.add_argument("--benchmarks", nargs="*", default=[*PAPER_EVAL, "aime25"], choices=EVAL_SETS)
    parser.add_argument("--extra", nargs="*", type=Path, default=[], help="extra benchmarks: JSON/JSONL/parquet with problem, answer")
    parser.add_argument("--limit", type=int, default=None, help="first N problems per benchmark (smoke tests)")
    parser.add_argument("--samples", type=int, default=1)
    parser.add_argument("--k", type=int, nargs="+", default=[1])
    parser.add_argument("--temperature", type=float, default=0.1)
    parser.add_argument("--max-new-tokens", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--average-over", nargs="+", default=list(PAPER_EVAL), help="benchmarks in the Avg row (paper: its five)")
    parser.add_argument("--out", type=Path, default=Path("runs/eval"))
    args = parser.parse_args(argv)
    if max(args.k) > args.samples:
        parser.error(f"--k {max(args.k)} needs --samples >= {max(args.k)}")
    try:
        model = resolve_model_dir(args.model)
    except FileNotFoundError as error:
        print(f"evaluate: {error}", file=sys.stderr)
        return 2
    problems = load_benchmarks(args.benchmarks, args.limit, args.extra)
    settings = {"samples": args.samples, "temperature": args.temperature, "max_new_tokens": args.max_new_tokens, "seed": args.seed}
    records = evaluate(model, problems, **settings)
    table = write_report(records, args.out, args.k, args.average_over, meta={"model": model, "limit": args.limit, **settings})
    print(markdown_table(table, args.k))
    print(f"\nmodel: {model}\nrecords: {args.out / 'eval_records.jsonl'}  table: {args.out / 'eval.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
