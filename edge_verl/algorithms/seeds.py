"""Seeds keyed on what they are drawn for: a run is a function of its command.

A random draw of a run takes its seed from the run's seed and the identity of what it is drawn for (the
training step, the prompt's identity in its data set, the response's index in its group, and a salt naming
the draw), never from timing, arrival order, batch composition or a fresh uuid. Each key is hashed
(SHA-256), so nearby keys give unrelated streams and two different keys collide with probability 2^-63.

``response_seed`` is the sampling seed of one response, keyed on its prompt's ``prompt_key``: carried as the request's ``seed`` sampling
parameter, vLLM builds a generator per request from it (``SamplingParams.seed``) and the CPU rollout
(``integration/cpu/hf_rollout.py``) does the same. GEC's choices and its continuation's sampling are keyed on
it through ``derived_seed`` / ``keyed_rng`` with their own salts, so no draw consumes another's stream.

No verl import: the identity's parts come in as arguments (``integration/seeding.py`` reads them off verl's
rows: ``data_source`` and ``extra_info.index``, verl's own per-row identity).
"""

from __future__ import annotations

import hashlib
import random
from typing import Any

# Seeds are non-negative and below 2^63: vLLM's SamplingParams.seed and torch.Generator.manual_seed take them.
SEED_BITS = 63
TRAIN, VALIDATION = "train", "val"


def keyed_seed(*parts: Any) -> int:
    """A seed in [0, 2^63) that is a function of ``parts`` only (their ``repr``, so 1 and "1" differ)."""
    digest = hashlib.sha256("\x1f".join(repr(part) for part in parts).encode()).digest()
    return int.from_bytes(digest[:8], "little") >> (64 - SEED_BITS)


def prompt_key(run_seed: int, *, validate: bool, step: int, data_source: str, index: Any, prompt: str) -> int:
    """The key of one prompt at one step: a function of the run's seed, the split (validation draws apart from
    training's at the same step), the step and the row's identity: its ``data_source`` and ``index`` (verl's
    ``extra_info.index``) and the prompt's text, so that rows without an index still differ."""
    split = VALIDATION if validate else TRAIN
    return keyed_seed("prompt", int(run_seed), split, int(step), str(data_source), _identity(index), str(prompt))


def response_seed(prompt: int, sample_index: int) -> int:
    """The sampling seed of sample ``sample_index`` of the prompt keyed ``prompt`` (``prompt_key``)."""
    return keyed_seed("response", int(prompt), int(sample_index))


def derived_seed(seed: int, salt: str) -> int:
    """A seed for a further draw made for the same response (e.g. GEC's continuation), apart from ``seed``'s."""
    return keyed_seed("derived", int(seed), str(salt))


def keyed_rng(*parts: Any) -> random.Random:
    """A ``random.Random`` whose stream is a function of ``parts`` only (see ``keyed_seed``)."""
    return random.Random(keyed_seed(*parts))


def seed_global_generators(seed: int) -> None:
    """Python's, numpy's and torch's global generators from ``seed``: what a framework draws from them without a
    generator of its own (verl's shuffled validation loader, for one) follows the run's seed."""
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def _identity(index: Any) -> Any:
    """A row's index as an int when it is one (numpy and torch scalars included), else its text."""
    try:
        as_int = int(index)
    except (TypeError, ValueError):
        return str(index)
    return as_int if as_int == index else str(index)
