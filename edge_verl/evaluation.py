"""The papers' evaluation protocol: sample, grade with edge_verl's reward, report per benchmark and the
sample-weighted average over all problems (EDGE-GRPO's "Avg" over 1560 problems), plus pass@k.

Generation uses vLLM when it is installed (GPU) and transformers' ``generate`` otherwise (CPU, tiny
models). Aggregation is pure Python and tested on hand-computed cases.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from edge_verl.data import EVAL_SETS, PAPER_EVAL, prompt_messages, read_records


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


def load_benchmarks(data_dir: Path, names: Sequence[str], limit: Optional[int] = None, extra: Sequence[Path] = ()) -> list[dict]:
    """Problems as {"benchmark", "index", "problem", "answer"} from ../shared/data/eval (and extra JSONL files
    with problem/answer fields, named by their stem)."""
    problems = []
    sources = [(name, data_dir / "eval" / EVAL_SETS[name]) for name in names] + [(path.stem, path) for path in extra]
    for name, path in sources:
        for index, record in enumerate(read_records(path)[:limit]):
            problems.append({"benchmark": name, "index": index, "problem": record["problem"], "answer": record["answer"]})
    return problems


def generate(model_path: str, prompts: list[str], samples: int, temperature: float, max_new_tokens: int, seed: int = 0) -> list[list[str]]:
    """``samples`` completions per prompt: vLLM if importable, else transformers on the available device."""
    try:
        from vllm import LLM, SamplingParams
    except ImportError:
        return _generate_hf(model_path, prompts, samples, temperature, max_new_tokens, seed)
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
    model_path: str,
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


def write_report(records: list[dict], out_dir: Path, ks: Sequence[int], average_over: Sequence[str] = PAPER_EVAL) -> dict:
    results = [ProblemResult(r["benchmark"], r["index"], tuple(r["scores"])) for r in records]
    table = summarize(results, ks, average_over)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "eval_records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (out_dir / "eval.json").write_text(json.dumps(table, indent=2))
    (out_dir / "eval.md").write_text(markdown_table(table, ks) + "\n")
    return table
