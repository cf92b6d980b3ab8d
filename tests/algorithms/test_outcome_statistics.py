"""Group outcome statistics (all-wrong / all-right groups) and GEC's sampled-token mean: hand-computed cases
and properties."""

import pytest
import torch

from edge_verl.algorithms.gec import CONTINUATION, PHRASE, SAMPLED
from edge_verl.algorithms.gec_loss import sampled_token_mean
from edge_verl.estimators.statistics import as_sampled_statistics, outcome_statistics


def test_outcome_statistics_by_hand():
    # group 0: 0 0 0 (all wrong); group 1: 1 1 (all right); group 2: 1 0 0.6 (0.6 > 0.5 counts as correct);
    # row 8 is a padding row (invalid) of group 3, which has no valid row and is left out.
    scores = torch.tensor([0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 0.6, 1.0])
    group = torch.tensor([0, 0, 0, 1, 1, 2, 2, 2, 3])
    valid = torch.tensor([True] * 8 + [False])
    stats = outcome_statistics(scores, group, 4, valid)
    # score mean over 8 valid rows: (2 + 1 + 0.6) / 8 = 0.45; correct 4 of 8; 3 groups: 1 all-wrong, 1 all-right
    assert stats["score_mean"] == torch.tensor(0.45).item()
    assert stats["correct_frac"] == 0.5
    assert stats["all_wrong_group_frac"] == pytest.approx(1 / 3) and stats["all_right_group_frac"] == pytest.approx(1 / 3)


def test_outcome_statistics_are_finite_and_bounded_on_any_batch():
    generator = torch.Generator().manual_seed(0)
    for _ in range(50):
        rows = int(torch.randint(0, 12, (1,), generator=generator))
        groups = max(1, int(torch.randint(1, 5, (1,), generator=generator)))
        scores = torch.rand(rows, generator=generator).round()
        group = torch.randint(0, groups, (rows,), generator=generator)
        valid = torch.rand(rows, generator=generator) > 0.3
        stats = outcome_statistics(scores, group, groups, valid)
        assert all(0.0 <= value <= 1.0 for value in stats.values()), stats
        assert stats["all_wrong_group_frac"] + stats["all_right_group_frac"] <= 1.0 + 1e-6
    empty = outcome_statistics(torch.zeros(0), torch.zeros(0, dtype=torch.long), 1, torch.zeros(0, dtype=torch.bool))
    assert empty == {"score_mean": 0.0, "correct_frac": 0.0, "all_wrong_group_frac": 0.0, "all_right_group_frac": 0.0}


def test_as_sampled_statistics_report_the_outcomes_as_sampled():
    # Two groups of 2; as sampled all wrong except row 2; GEC turned row 0 correct (final scores not used here).
    sampled = torch.tensor([0.0, 0.0, 1.0, 0.0])
    mask = torch.ones(4, 3)
    stats = as_sampled_statistics(sampled, torch.zeros(4, 3), mask, torch.tensor([0, 0, 1, 1]), 2, torch.ones(4, dtype=torch.bool),
                                  torch.tensor([False, True, True, True]))
    assert stats["all_wrong_group_frac"] == 0.5 and stats["all_right_group_frac"] == 0.0 and stats["score_mean"] == 0.25


def test_sampled_token_mean_counts_first_attempt_tokens_only():
    # row 0: sampled 1, 3 then phrase 100 (injected); row 1: sampled 5, continuation 7, padding 1000 (masked)
    values = torch.tensor([[1.0, 3.0, 100.0], [5.0, 7.0, 1000.0]])
    origins = torch.tensor([[SAMPLED, SAMPLED, PHRASE], [SAMPLED, CONTINUATION, SAMPLED]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    assert sampled_token_mean(values, origins, mask) == (1 + 3 + 5) / 3
    assert sampled_token_mean(values, torch.full_like(origins, PHRASE), mask) == 0.0
    values[0, 0] = float("nan")  # non-finite: counted as 0, never propagated
    assert sampled_token_mean(values, origins, mask) == (0 + 3 + 5) / 3
