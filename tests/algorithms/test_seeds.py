"""Seeds keyed on what they are drawn for (edge_verl/config.py): functions of their key alone."""

import hashlib
import random

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from edge_verl.config import SEED_BITS, derived_seed, keyed_rng, keyed_seed, prompt_key, response_seed

PROMPT = dict(validate=False, step=3, data_source="math", index=17, prompt='[{"role": "user", "content": "1+1?"}]')


def test_a_seed_is_the_first_eight_bytes_of_the_keys_sha256_shifted_to_63_bits():
    # keyed_seed("a", 1) hashes "'a'\x1f1" (the parts' reprs joined by the unit separator)
    digest = hashlib.sha256("'a'\x1f1".encode()).digest()
    assert keyed_seed("a", 1) == int.from_bytes(digest[:8], "little") >> 1
    assert keyed_seed("a", 1) != keyed_seed("a", "1")  # reprs differ: 1 vs '1'


@given(st.lists(st.one_of(st.integers(), st.text(max_size=8), st.booleans()), max_size=6))
def test_every_seed_is_a_non_negative_63_bit_integer_that_vllm_and_torch_accept(parts):
    seed = keyed_seed(*parts)
    assert 0 <= seed < 2**SEED_BITS
    torch.Generator().manual_seed(seed)  # raises past 2^64 - 1 or below 0


def test_the_same_identity_gives_the_same_seed_in_any_process_and_numpy_or_torch_indices_count_as_ints():
    key = prompt_key(42, **PROMPT)
    assert key == prompt_key(42, **PROMPT)
    assert key == prompt_key(42, **{**PROMPT, "index": np.int64(17)})
    assert key == prompt_key(42, **{**PROMPT, "index": torch.tensor(17)})
    assert response_seed(key, 5) == response_seed(key, 5)


@pytest.mark.parametrize("change", [
    {"validate": True}, {"step": 4}, {"data_source": "gsm8k"}, {"index": 18}, {"index": "17"},
    {"prompt": '[{"role": "user", "content": "1+2?"}]'},
])
def test_every_part_of_a_prompts_identity_and_the_run_seed_change_its_key(change):
    key = prompt_key(42, **PROMPT)
    assert prompt_key(42, **{**PROMPT, **change}) != key
    assert prompt_key(43, **PROMPT) != key


def test_the_n_samples_of_a_prompt_get_n_different_seeds_and_two_prompts_share_none():
    first, second = prompt_key(42, **PROMPT), prompt_key(42, **{**PROMPT, "index": 18})
    seeds = [response_seed(first, i) for i in range(64)] + [response_seed(second, i) for i in range(64)]
    assert len(set(seeds)) == 128


def test_a_derived_seed_is_a_stream_apart_from_its_base_and_from_other_salts():
    base = response_seed(prompt_key(42, **PROMPT), 0)
    derived = {derived_seed(base, salt) for salt in ("gec_continuation", "other")}
    assert len(derived | {base}) == 3
    assert derived_seed(base, "gec_continuation") == derived_seed(base, "gec_continuation")


def test_keyed_rng_is_random_random_seeded_with_the_keys_seed():
    assert keyed_rng("x", 7).random() == random.Random(keyed_seed("x", 7)).random()
