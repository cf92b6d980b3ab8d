"""Is a run a function of its command? Two run folders of ``edge-verl demo`` (or of a study run) compared number
for number: every per-step metric but the wall-clock ones, the final weights, and the sampled responses.

    python -m edge_verl_lab.same_run RUN_A RUN_B     # exit 0 when they are the same run, else list what differs

Timing keys are the only metrics allowed to differ: verl's ``timing_s/*`` and ``timing_per_token_ms/*``, the
throughput, MFU and step time derived from them (``perf/*``), the processes' memory (``*/perf/*memory*``) and
GEC's share of rollout time. Everything else, verl's and the plugin's, must be equal to the last bit.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path
from typing import Iterable, Optional

TIMING_PREFIXES = ("timing_s/", "timing_per_token_ms/")
TIMING_KEYS = ("perf/mfu/actor", "perf/throughput", "perf/time_per_step", "edge_verl/gec/correction_time_share")
RESOURCE_MARKS = ("memory",)  # e.g. actor/perf/max_memory_allocated_gb, actor/perf/cpu_memory_used_gb


def is_timing(key: str) -> bool:
    """A metric that measures the machine (wall time and what is derived from it, memory), not the run."""
    return key.startswith(TIMING_PREFIXES) or key in TIMING_KEYS or key.startswith("perf/mfu/") or (
        "/perf/" in key and any(mark in key for mark in RESOURCE_MARKS)
    )


def read_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def metric_differences(first: list[dict], second: list[dict]) -> list[str]:
    """One line per (step, metric) whose values differ, timing keys left out; a step or metric present in one
    run only differs too."""
    differences = []
    if [row.get("step") for row in first] != [row.get("step") for row in second]:
        differences.append(f"steps {[row.get('step') for row in first]} != {[row.get('step') for row in second]}")
    for a, b in zip(first, second):
        for key in sorted((set(a) | set(b)) - {"step"}):
            if not is_timing(key) and a.get(key, "<absent>") != b.get(key, "<absent>"):
                differences.append(f"step {a.get('step')}: {key}: {a.get(key, '<absent>')!r} != {b.get(key, '<absent>')!r}")
    return differences


def weights_digest(folder: Path) -> str:
    """SHA-256 over every tensor of a HF model folder's safetensors files, by name (the file's metadata apart)."""
    import torch
    from safetensors.torch import load_file

    digest = hashlib.sha256()
    files = sorted(Path(folder).glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors in {folder}")
    for path in files:
        tensors = load_file(str(path))
        for name in sorted(tensors):
            digest.update(name.encode())
            digest.update(tensors[name].contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def sampled_groups(rollout_dir: Path, step: int) -> list[tuple[str, tuple[str, ...]]]:
    """The responses verl dumped for ``step`` (``trainer.rollout_data_dir``), as (prompt, its responses in
    sample order) per group, sorted: the v1 trainer's dump is ordered by its random uid, the groups are not.
    The legacy trainer's dump has no uid and is in batch order: one (prompt, (response,)) per row, in order."""
    rows = read_rows(Path(rollout_dir) / f"{step}.jsonl")
    if rows and "uid" not in rows[0]:
        return [(row["input"], (row["output"],)) for row in rows]
    groups: dict[str, list[tuple[int, int, str, str]]] = {}
    for row in rows:
        uid, session, output = str(row["uid"]).rsplit("_", 2)
        groups.setdefault(uid, []).append((int(session), int(output), row["input"], row["output"]))
    result = []
    for rows in groups.values():
        rows.sort()
        result.append((rows[0][2], tuple(text for *_, text in rows)))
    return sorted(result)


def final_weights(run: Path) -> Optional[Path]:
    """The HF folder of a run's last checkpoint (``checkpoints/global_step_N/actor/huggingface``), if saved."""
    folders = sorted((Path(run) / "checkpoints").glob("global_step_*/actor/huggingface"),
                     key=lambda path: int(path.parents[1].name.rsplit("_", 1)[-1]))
    return folders[-1] if folders else None


def run_differences(first: Path, second: Path) -> list[str]:
    """What differs between two run folders: metrics (``metric_differences``), then the final weights when
    both saved them, then each step's sampled responses when both dumped them."""
    differences = metric_differences(read_rows(Path(first) / "metrics.jsonl"), read_rows(Path(second) / "metrics.jsonl"))
    weights = [final_weights(run) for run in (first, second)]
    if all(weights) and weights_digest(weights[0]) != weights_digest(weights[1]):
        differences.append(f"final weights: {weights[0]} != {weights[1]}")
    dumps = [Path(run) / "rollouts" for run in (first, second)]
    if all(folder.is_dir() for folder in dumps):
        steps = sorted(int(path.stem) for path in dumps[0].glob("*.jsonl"))
        for step in steps:
            if not (dumps[1] / f"{step}.jsonl").exists() or sampled_groups(dumps[0], step) != sampled_groups(dumps[1], step):
                differences.append(f"step {step}: sampled responses differ")
    return differences


def main(argv: Optional[Iterable[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("first", type=Path)
    parser.add_argument("second", type=Path)
    args = parser.parse_args(None if argv is None else list(argv))
    differences = run_differences(args.first, args.second)
    for line in differences[:50]:
        print(line)
    print(f"{'same run' if not differences else f'{len(differences)} differences'}: {args.first} vs {args.second}")
    return 0 if not differences else 1


if __name__ == "__main__":
    sys.exit(main())
