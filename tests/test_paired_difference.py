"""edge_verl_lab.reporting's statistics for "is the gain real": the paired
difference over seeds with its interval, and the validation series verl logs during training."""

import math
import random

import pytest
from scipy import stats

from edge_verl_lab.reporting import best_and_last, paired_difference, paired_p_value, validation_series


def test_the_interval_uses_the_two_sided_t_quantile_of_n_minus_1_degrees_of_freedom():
    # closed forms of t((1 + confidence) / 2, df): df = 1 (Cauchy) tan(pi (p - 1/2)); df = 2 (2p - 1) sqrt(2 / (4 p (1 - p)))
    two = paired_difference({"1": 1.0, "2": 3.0}, {"1": 0.0, "2": 0.0})  # mean 2, std sqrt 2, se 1
    assert two.interval == pytest.approx((2 - math.tan(math.pi * 0.475), 2 + math.tan(math.pi * 0.475)), rel=1e-12)
    three = paired_difference({"1": 1.0, "2": 2.0, "3": 3.0}, {"1": 0.0, "2": 0.0, "3": 0.0}, confidence=0.9)  # se 1 / sqrt 3
    half = 0.9 * math.sqrt(2 / (4 * 0.95 * 0.05)) / math.sqrt(3)
    assert three.interval == pytest.approx((2 - half, 2 + half), rel=1e-12)


def test_paired_difference_over_three_seeds_with_a_student_t_interval():
    # method 50, 52, 54 vs GRPO 47, 48, 52 on seeds 1, 2, 3 -> differences 3, 4, 2: mean 3,
    # sample std sqrt(((3-3)^2 + (4-3)^2 + (2-3)^2) / 2) = 1, standard error 1 / sqrt(3) = 0.57735,
    # t(0.975, df 2) = 4.302653 -> half-width 2.484138 -> [0.515862, 5.484138]
    difference = paired_difference({"1": 50, "2": 52, "3": 54}, {"1": 47, "2": 48, "3": 52})
    assert difference.per_seed == {"1": 3.0, "2": 4.0, "3": 2.0}
    assert (difference.mean, difference.std, difference.n) == (pytest.approx(3.0), pytest.approx(1.0), 3)
    assert difference.interval == (pytest.approx(0.515862, abs=1e-6), pytest.approx(5.484138, abs=1e-6))
    assert difference.as_dict()["interval"] == [pytest.approx(0.515862, abs=1e-6), pytest.approx(5.484138, abs=1e-6)]


def test_the_interval_and_the_p_value_are_scipys_paired_t_test():
    # the reference: scipy.stats.ttest_rel on the paired seeds, over random pairs of 2-8 seeds and confidences
    draw = random.Random(70)
    for _ in range(300):
        seeds = [str(seed) for seed in range(draw.randint(2, 8))]
        values, baseline = ({seed: draw.uniform(-1, 1) for seed in seeds} for _ in range(2))
        confidence = draw.choice((0.8, 0.9, 0.95, 0.99))
        difference = paired_difference(values, baseline, confidence)
        reference = stats.ttest_rel([values[seed] for seed in seeds], [baseline[seed] for seed in seeds])
        interval = reference.confidence_interval(confidence)
        assert difference.interval == pytest.approx((interval.low, interval.high), rel=1e-12, abs=1e-15)
        assert paired_p_value(difference) == pytest.approx(reference.pvalue, rel=1e-12, abs=1e-15)


def test_pairing_is_by_seed_not_by_position():
    # seed 4 has no GRPO partner and GRPO's seed 9 none of the method: only seeds 1 and 2 pair.
    # differences 10 - 7 = 3 and 20 - 19 = 1: mean 2, std sqrt(2) = 1.41421, t(0.975, 1) = 12.7062
    # -> half-width 12.7062 * 1.41421 / sqrt(2) = 12.7062 -> [-10.7062, 14.7062]
    difference = paired_difference({"2": 20, "1": 10, "4": 99}, {"1": 7, "9": 0, "2": 19})
    assert difference.n == 2 and set(difference.per_seed) == {"1", "2"} and difference.mean == pytest.approx(2.0)
    assert difference.interval == (pytest.approx(-10.7062, abs=1e-4), pytest.approx(14.7062, abs=1e-4))


def test_one_paired_seed_gives_the_difference_without_an_interval_and_none_gives_nothing():
    single = paired_difference({"1": 50.0, "2": 60.0}, {"1": 45.5})
    assert (single.mean, single.n, single.std, single.interval) == (4.5, 1, None, None)
    assert paired_difference({"1": 50.0}, {"2": 45.0}) is None


def test_validation_series_averages_verls_core_metrics_over_validation_sets():
    records = [
        {"step": 0, "val-core/aime24/acc/mean@1": 0.1, "val-core/amc/acc/mean@1": 0.3, "actor/entropy": 1.0},
        {"step": 1, "actor/entropy": 0.9},  # no validation at this step
        {"step": 50, "val-core/aime24/acc/mean@1": 0.5, "val-core/amc/acc/mean@1": 0.7,
         "val-aux/aime24/score/mean@1": 99.0, "val-core/amc/acc/maj@1/mean": 99.0},  # aux and maj@ are not the core mean
        {"step": 100, "val-core/aime24/acc/mean@1": 0.2, "val-core/amc/acc/mean@1": 0.4},
    ]
    # unweighted means: (0.1 + 0.3) / 2 = 0.2, (0.5 + 0.7) / 2 = 0.6, (0.2 + 0.4) / 2 = 0.3
    series = validation_series(records)
    assert [step for step, _ in series] == [0, 50, 100]
    assert [score for _, score in series] == [pytest.approx(0.2), pytest.approx(0.6), pytest.approx(0.3)]
    assert best_and_last(series) == {"best_step": 50, "best": pytest.approx(0.6), "last_step": 100, "last": pytest.approx(0.3)}
    assert best_and_last([(5, 0.4), (9, 0.4)])["best_step"] == 5  # a tie: the earlier step
    assert best_and_last([]) is None and validation_series([{"step": 1, "actor/entropy": 1.0}]) == []
