"""Data preparation for the papers' setups -> verl RL parquet (pure; no verl import).

The papers' small sets ship with the package (``edge_verl/data/sets``, provenance and licences in its
README): DeepScaleR-Hard-1K (EDGE-GRPO's training split), the 1560-problem evaluation suite (AIME24, AMC,
MATH-500, Minerva, OlympiadBench), AIME25, and the Random-1K stand-in. The paper's Random-1K (a random 1K
sample of the 40K-problem DeepScaleR-Preview) is not public; the shipped stand-in is a seeded draw
(``sample_unique``, seed 42) from the DeepScaleR-Preview pools that carry a reference solution for every
problem, written by ``scripts/draw_random_1k.py`` (the sets README says which pools and how it differs).
Nothing here reaches a network unless asked to: ``RandomSource()`` means the shipped draw; another draw
comes from an explicit source, the full data set through the ``datasets`` library (a hub id, or a local
folder / file in any format ``datasets`` reads) or local pool files (JSON, JSONL or verl parquet with
problem/answer[/solution]), and the manifest records which source each file came from.

Every row carries the Qwen2.5-Math chat prompt of EDGE-GRPO (system prompt + the raw problem), the
answer as ``reward_model.ground_truth`` (a string, or a list of acceptable answers for Minerva /
OlympiadBench), and in ``extra_info`` the answer and the reference solution (verl's stock MATH
preprocessing drops the solution; GEC's replace branch needs it). Training rows are marked for GEC with
``agent_name = "edge_gec"`` in the ``*_gec`` files. Output bytes are deterministic.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

from edge_verl.algorithms import GEC_AGENT_LOOP as GEC_AGENT
from edge_verl.methods import GEC_FILE_SUFFIX

SYSTEM_PROMPT = "Please reason step by step, and put your final answer within \\boxed{}."

SETS_DIR = Path(__file__).resolve().parent / "sets"
TRAIN_SETS = ("hard_1k", "random_1k")
EVAL_SETS = ("aime24", "amc", "math500", "minerva", "olympiad_bench", "aime25")
PAPER_EVAL = ("aime24", "amc", "math500", "minerva", "olympiad_bench")
DEEPSCALER_HUB_ID = "agentica-org/DeepScaleR-Preview-Dataset"
# The shipped Random-1K draw (edge_verl/data/sets/train/deepscaler_random_1k.jsonl); the defaults everywhere.
RANDOM_1K_SIZE = 1000
RANDOM_1K_SEED = 42
MANIFEST = "MANIFEST.json"


class DataUnavailable(RuntimeError):
    """A data set cannot be built on this machine (no hub, no local copy); the message says what to pass."""


def prompt_messages(problem: str) -> list[dict]:
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": problem}]


def _answer_list(answer: Any) -> list[str]:
    if isinstance(answer, (list, tuple)):
        return [str(item) for item in answer]
    return [str(answer)]


def _has_answer(record: dict) -> bool:
    answer = record.get("answer")
    return answer is not None and bool(_answer_list(answer)) and all(item.strip() for item in _answer_list(answer))


def make_row(
    problem: str, answer: Any, solution: Optional[str], *, data_source: str, split: str, index: int, gec: bool
) -> dict:
    answers = _answer_list(answer)
    row = {
        "data_source": data_source,
        "prompt": prompt_messages(problem),
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": answers if len(answers) > 1 or isinstance(answer, list) else answers[0]},
        "extra_info": {"index": index, "split": split, "answer": answers[0], "solution": solution or "", "problem": problem},
    }
    if gec:
        row["agent_name"] = GEC_AGENT
    return row


def read_records(path: Path) -> list[dict]:
    """JSON list, JSONL, or verl parquet (converted back to problem/answer/solution records)."""
    path = Path(path)
    if path.suffix == ".json":
        return json.loads(path.read_text())
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if path.suffix != ".parquet":
        raise ValueError(f"{path}: expected .json, .jsonl or .parquet")
    import pyarrow.parquet as pq

    records = []
    for row in pq.read_table(path).to_pylist():
        if "prompt" not in row:  # a plain problem/answer table
            records.append(row)
            continue
        problem = next(message["content"] for message in row["prompt"] if message["role"] == "user")
        solution = (row.get("extra_info") or {}).get("solution")
        records.append({"problem": problem, "answer": row["reward_model"]["ground_truth"], "solution": solution})
    return records


def write_jsonl(records: Iterable[dict], path: Path) -> Path:
    """One JSON object per line, non-ASCII kept as is (like the shipped sets); same records -> same bytes."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes("".join(json.dumps(record, ensure_ascii=False) + "\n" for record in records).encode("utf-8"))
    return path


def shipped_file(kind: str, name: str) -> Path:
    """Path of a data set shipped with the package: kind "train" (TRAIN_SETS) or "eval" (EVAL_SETS)."""
    files = {
        "train": {name: f"deepscaler_{name}.jsonl" for name in TRAIN_SETS},
        "eval": {name: f"{name}.jsonl" for name in EVAL_SETS},
    }
    if name not in files.get(kind, {}):
        raise ValueError(f"no shipped {kind} set {name!r}; shipped: {sorted(files.get(kind, {}))}")
    return SETS_DIR / kind / files[kind][name]


def load_deepscaler(source: str = DEEPSCALER_HUB_ID, split: str = "train") -> list[dict]:
    """DeepScaleR-Preview through ``datasets``: a hub id, a local data folder, or one data file."""
    import datasets

    path = Path(source)
    if path.is_file():
        builder = {".json": "json", ".jsonl": "json", ".parquet": "parquet", ".csv": "csv"}.get(path.suffix)
        if builder is None:
            raise ValueError(f"{source}: datasets cannot read {path.suffix!r} files here; use .json/.jsonl/.parquet/.csv")
        dataset = datasets.load_dataset(builder, data_files=str(path), split=split)
    else:
        dataset = datasets.load_dataset(str(source), split=split)
    missing = {"problem", "answer"} - set(dataset.column_names)
    if missing:
        raise ValueError(f"{source}: columns {sorted(missing)} missing (has {dataset.column_names})")
    return [dict(record) for record in dataset]


def sample_unique(records: Iterable[dict], size: int, seed: int) -> list[dict]:
    """``size`` records drawn without replacement (seeded) after removing repeated problem texts and
    problems without an answer (nothing to grade them against).

    The draw is over the problems sorted by text, so it depends on the pool's content, not its order.
    """
    pool: dict[str, dict] = {}
    for record in records:
        if _has_answer(record):
            pool.setdefault(str(record["problem"]).strip(), record)
    if size > len(pool):
        raise ValueError(f"cannot draw {size} problems from a pool of {len(pool)} unique problems")
    keys = sorted(pool)
    return [pool[key] for key in random.Random(seed).sample(keys, size)]


@dataclass(frozen=True)
class RandomSource:
    """Where Random-1K comes from. Default (no hub, no pools): the draw shipped with the package.

    ``hub``: the full DeepScaleR-Preview for ``datasets`` (a hub id such as ``DEEPSCALER_HUB_ID``, or a
    local folder / file); ``pools``: local problem files, drawn from together (and used when the hub cannot
    be loaded). Either one re-draws with the given seed and size instead of reading the shipped file.
    """

    hub: Optional[str] = None
    pools: tuple[Path, ...] = ()

    @property
    def shipped(self) -> bool:
        return self.hub is None and not self.pools


def pool_records(pools: Sequence[Path]) -> list[dict]:
    """The records of the pool files as problem/answer/solution ("" where the pool has none) plus ``pool``,
    the file it came from (the first file wins when a problem is in several: ``sample_unique`` keeps it)."""
    return [
        {"problem": r["problem"], "answer": r["answer"], "solution": r.get("solution") or "", "pool": Path(path).name}
        for path in pools
        for r in read_records(path)
    ]


def random_1k_records(
    source: RandomSource = RandomSource(), size: int = RANDOM_1K_SIZE, seed: int = RANDOM_1K_SEED
) -> tuple[list[dict], str]:
    """(records, provenance): the shipped draw, or a new one from the hub (or local data set) and, when that
    cannot be loaded, from the pools. A source that was asked for and cannot be read raises DataUnavailable."""
    if source.shipped:
        if (size, seed) != (RANDOM_1K_SIZE, RANDOM_1K_SEED):
            raise DataUnavailable(
                f"Random-1K with size={size}, seed={seed}: the shipped draw has size={RANDOM_1K_SIZE}, "
                f"seed={RANDOM_1K_SEED}. Pass --random-pool FILE... (or --random-source with the full data set) to draw another."
            )
        path = shipped_file("train", "random_1k")
        return read_records(path), f"shipped:{path.name}"
    drawn = f" (seed {seed}, {size} problems)"
    if source.hub is not None:
        try:
            return sample_unique(load_deepscaler(source.hub), size, seed), f"datasets:{source.hub}{drawn}"
        except (ImportError, OSError) as error:  # no datasets, no hub on this machine, no such folder: the pools, or say why
            if not source.pools:
                reason = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
                raise DataUnavailable(
                    f"Random-1K needs the DeepScaleR-Preview data set, and {source.hub!r} cannot be loaded ({reason}). "
                    "Pass --random-source with a hub id or a local copy of it (folder or .parquet/.jsonl file with "
                    "problem/answer/solution), --random-pool FILE... (JSON/JSONL/parquet problem pools), or neither "
                    "for the shipped draw."
                ) from error
    provenance = "pools:" + ",".join(Path(path).name for path in source.pools)
    return sample_unique(pool_records(source.pools), size, seed), provenance + drawn


def training_records(
    name: str, *, size: int = RANDOM_1K_SIZE, seed: int = RANDOM_1K_SEED, source: RandomSource = RandomSource()
) -> tuple[list[dict], str]:
    """(records, provenance) of "hard_1k" (shipped) or "random_1k" (see ``random_1k_records``)."""
    if name == "hard_1k":
        path = shipped_file("train", name)
        return read_records(path), f"shipped:{path.name}"
    if name == "random_1k":
        return random_1k_records(source, size, seed)
    raise ValueError(f"training set {name!r}; allowed: {list(TRAIN_SETS)}")


def to_training_rows(records: Sequence[dict], name: str, *, gec: bool) -> list[dict]:
    return [
        make_row(r["problem"], r["answer"], r.get("solution"), data_source=f"deepscaler_{name}", split="train", index=i, gec=gec)
        for i, r in enumerate(records)
    ]


def sft_rows(records: Sequence[dict]) -> list[dict]:
    """EDGE-GRPO's SFT baseline data: the RL prompt (system + problem) answered by the reference solution, in
    verl's multi-turn SFT format (``messages``); problems without a solution are left out."""
    return [
        {"messages": [*prompt_messages(r["problem"]), {"role": "assistant", "content": r["solution"]}]}
        for r in records
        if r.get("solution")
    ]


def training_rows(
    name: str, *, gec: bool = True, size: int = RANDOM_1K_SIZE, seed: int = RANDOM_1K_SEED, source: RandomSource = RandomSource()
) -> list[dict]:
    return to_training_rows(training_records(name, size=size, seed=seed, source=source)[0], name, gec=gec)


def eval_rows(name: str, limit: Optional[int] = None) -> list[dict]:
    if name not in EVAL_SETS:
        raise ValueError(f"evaluation set {name!r}; allowed: {list(EVAL_SETS)}")
    records = read_records(shipped_file("eval", name))[:limit]
    return [
        make_row(r["problem"], r["answer"], None, data_source=name, split="test", index=i, gec=False) for i, r in enumerate(records)
    ]


def write_parquet(rows: Iterable[dict], path: Path) -> Path:
    """Deterministic parquet (same rows -> same bytes): pyarrow, no pandas index, fixed compression."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pylist(list(rows))
    pq.write_table(table, path, compression="zstd", use_dictionary=False, write_statistics=False)
    return path


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@dataclass
class Prepared:
    """What ``prepare`` wrote: file name -> {rows, sha256, source}, and the sets it could not build."""

    files: dict[str, dict] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)


def prepare(
    out: Path,
    *,
    train_sets: Sequence[str] = TRAIN_SETS,
    eval_sets: Sequence[str] = EVAL_SETS,
    seed: int = RANDOM_1K_SEED,
    size: int = RANDOM_1K_SIZE,
    random_source: RandomSource = RandomSource(),
) -> Prepared:
    """Write ``train_<set>.parquet``, ``train_<set>_gec.parquet`` (rows marked for GEC), ``sft_<set>.parquet``
    (the SFT baseline: prompts answered by the reference solutions, when the set has them) and
    ``eval_<set>.parquet`` into ``out`` with a ``MANIFEST.json`` (rows, sha256, source of every file).

    ``seed``, ``size`` and ``random_source`` are Random-1K's (default: the shipped draw; no network). A
    training set that cannot be built is reported in ``Prepared.failed`` (the others are still written).
    """
    out = Path(out)
    prepared = Prepared()
    manifest_path = out / MANIFEST
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}

    def record(path: Path, rows: list[dict], provenance: str) -> None:
        write_parquet(rows, path)
        entry = {"rows": len(rows), "sha256": sha256(path), "source": provenance}
        prepared.files[path.name] = manifest[path.name] = entry

    for name in train_sets:
        try:
            records, provenance = training_records(name, size=size, seed=seed, source=random_source)
        except DataUnavailable as error:
            prepared.failed[name] = str(error)
            continue
        for gec, suffix in ((False, ""), (True, GEC_FILE_SUFFIX)):  # the file a GEC method trains on (methods.py)
            record(out / f"train_{name}{suffix}.parquet", to_training_rows(records, name, gec=gec), provenance)
        sft = sft_rows(records)
        if sft:
            record(out / f"sft_{name}.parquet", sft, provenance + " (reference solutions)")
    for name in eval_sets:
        record(out / f"eval_{name}.parquet", eval_rows(name), f"shipped:{name}.jsonl")
    if not prepared.files and not manifest_path.exists():
        return prepared  # nothing written: no folder holding only an empty manifest
    manifest_path.write_text(json.dumps(dict(sorted(manifest.items())), indent=2) + "\n")
    return prepared
