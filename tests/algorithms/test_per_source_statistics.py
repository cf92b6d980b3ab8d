"""``estimators.base.per_source_statistics``: every training statistic split by data source (a mixture's tasks)."""

import math

import numpy as np
import pytest
import torch

from edge_verl.estimators.base import ESTIMATORS
from edge_verl.estimators.groups import group_index_from_uids
from edge_verl.estimators.statistics import outcome_statistics, per_source_statistics


def _batch():
    # source A: group a0 scores [1, 0, 0] (2 tokens each), group a1 [0, 0, 0] (1 token each);
    # source B: group b0 [1, 1, 1] (3 tokens each); then one padding row (uid "pad0", no tokens).
    uids = ["a0", "a0", "a0", "a1", "a1", "a1", "b0", "b0", "b0", "pad0"]
    sources = ["A"] * 6 + ["B"] * 3 + ["B"]
    scores = torch.tensor([1.0, 0, 0, 0, 0, 0, 1, 1, 1, 0])
    lengths = [2, 2, 2, 1, 1, 1, 3, 3, 3, 0]
    mask = torch.tensor([[1.0] * n + [0.0] * (3 - n) for n in lengths])
    # -log pi_old = 0.5 per token on A's rows, 1.0 on B's (and garbage off the mask, which must not count)
    old_log_probs = torch.where(mask > 0, torch.tensor([[-0.5]] * 6 + [[-1.0]] * 4).expand(10, 3), torch.tensor(-99.0))
    group_index, num_groups, is_pad = group_index_from_uids(uids)
    return sources, scores, mask, old_log_probs, group_index, num_groups, ~is_pad


def test_hand_computed_per_source_statistics_leave_padding_and_masked_tokens_out():
    sources, scores, mask, old_log_probs, group_index, num_groups, valid = _batch()
    found = per_source_statistics(sources, scores, mask, old_log_probs, group_index, num_groups, valid)
    assert set(found) == {"A", "B"}
    a, b = found["A"], found["B"]
    # A: 1 right of 6; groups a0 (one right) and a1 (none right: all wrong, and tied); lengths (2*3 + 1*3) / 6 = 1.5;
    # sampled entropy: every A token has -log pi_old = 0.5
    assert a == pytest.approx({"score_mean": 1 / 6, "correct_frac": 1 / 6, "all_wrong_group_frac": 0.5, "all_right_group_frac": 0.0,
                               "zero_variance_group_frac": 0.5, "response_length": 1.5, "responses": 6.0, "sampled_entropy": 0.5})
    # B: its padding row is not a response; group b0 all right and tied; 3 tokens each at 1.0
    assert b == pytest.approx({"score_mean": 1.0, "correct_frac": 1.0, "all_wrong_group_frac": 0.0, "all_right_group_frac": 1.0,
                               "zero_variance_group_frac": 1.0, "response_length": 3.0, "responses": 3.0, "sampled_entropy": 1.0})


def test_gepo_fields_per_source_hand_computed():
    # GEPO's own statistics of a source: its registry entry's source_statistics over the per-response values
    sources, scores, mask, old_log_probs, group_index, num_groups, valid = _batch()
    group_entropy = torch.tensor([0.4, 0.7, 0.2, 0.0])  # per group a0, a1, b0, pad0
    outcome = torch.tensor([1.15, -0.58, -0.58, 0, 0, 0, 0, 0, 0, 0])
    gepo = {"group_entropy": group_entropy[group_index], "outcome": outcome,
            "positive_attenuated": torch.tensor([True] + [False] * 9), "negative_attenuated": torch.zeros(10, dtype=torch.bool)}
    found = per_source_statistics(sources, scores, mask, None, group_index, num_groups, valid, per_response=gepo, estimator=ESTIMATORS["gepo"])
    # A: groups a0, a1 -> (0.4 + 0.7) / 2 = 0.55; its one positive advantage attenuated (1/1), none of its two negatives (0/2)
    assert found["A"]["group_entropy_mean"] == pytest.approx(0.55)
    assert (found["A"]["pos_attenuated_frac"], found["A"]["neg_attenuated_frac"]) == (1.0, 0.0)
    # B: group b0 only (the padding group is no group of B); no positive or negative advantage: 0, not NaN
    assert found["B"]["group_entropy_mean"] == pytest.approx(0.2)
    assert (found["B"]["pos_attenuated_frac"], found["B"]["neg_attenuated_frac"]) == (0.0, 0.0)
    assert "sampled_entropy" not in found["A"]  # no old log-probs given


def test_one_source_equals_the_batch_statistics_and_every_value_is_finite():
    rng = np.random.default_rng(0)
    for _ in range(20):
        groups, size, width = int(rng.integers(1, 6)), int(rng.integers(1, 5)), int(rng.integers(1, 6))
        uids = [f"g{g}" for g in range(groups) for _ in range(size)]
        scores = torch.tensor(rng.integers(0, 2, len(uids)), dtype=torch.float32)
        mask = torch.tensor(rng.integers(0, 2, (len(uids), width)), dtype=torch.float32)
        old = torch.tensor(-rng.random((len(uids), width)), dtype=torch.float32)
        group_index, num_groups, is_pad = group_index_from_uids(uids)
        valid = ~is_pad
        found = per_source_statistics(["only"] * len(uids), scores, mask, old, group_index, num_groups, valid)
        answered = valid & (mask.sum(-1) > 0)
        if not answered.any():
            assert found == {}
            continue
        whole = outcome_statistics(scores, group_index, num_groups, answered)
        for key, value in whole.items():
            assert found["only"][key] == pytest.approx(value)
        assert all(math.isfinite(value) for value in found["only"].values())


def test_sources_must_match_the_batch():
    sources, scores, mask, old_log_probs, group_index, num_groups, valid = _batch()
    with pytest.raises(ValueError, match="9 sources for 10 responses"):
        per_source_statistics(sources[:9], scores, mask, old_log_probs, group_index, num_groups, valid)


def test_an_estimator_with_per_response_values_of_its_own_gets_its_statistics_per_source():
    # an estimator registered from outside, whose per-response values are its own keys (not GEPO's): its
    # source_statistics reads them; one without source_statistics adds nothing (no KeyError over GEPO's keys)
    from edge_verl.estimators.base import Estimator, EstimatorOptions

    class OwnOptions(EstimatorOptions):
        section = "own_stats_estimator"

    def mean_weight(per_response, rows, group_index, num_groups):
        return {"weight_mean": float(per_response["weight"][rows].mean())}

    sources, scores, mask, old_log_probs, group_index, num_groups, valid = _batch()
    per_response = {"weight": torch.arange(10, dtype=torch.float32)}
    own = Estimator(name="own_stats_estimator", description="test", config=OwnOptions, compute=lambda *a: None,
                    source_statistics=mean_weight)
    found = per_source_statistics(sources, scores, mask, None, group_index, num_groups, valid, per_response=per_response, estimator=own)
    rows = {source: [i for i, name in enumerate(sources) if name == source and bool(valid[i])] for source in found}
    for source, stats in found.items():  # the mean of its valid rows' weights
        assert stats["weight_mean"] == pytest.approx(sum(rows[source]) / len(rows[source]))
    plain = Estimator(name="own_stats_estimator", description="test", config=OwnOptions, compute=lambda *a: None)
    assert "weight_mean" not in per_source_statistics(sources, scores, mask, None, group_index, num_groups, valid,
                                                      per_response=per_response, estimator=plain)["A"]
