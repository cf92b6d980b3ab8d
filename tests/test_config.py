import math

import pytest

from edge_verl.estimators.edge_eda import EdaConfig
from edge_verl.estimators.gepo import GepoConfig


def test_defaults_are_the_papers():
    gepo = GepoConfig()
    assert (gepo.alpha_low, gepo.alpha_high, gepo.beta_low, gepo.beta_high, gepo.gamma) == (0.5, 0.2, 0.2, 0.3, 0.01)
    assert gepo.group_entropy == "token_pooled" and gepo.ema_order == "update_then_apply" and gepo.ema_init == "first_batch"
    eda = EdaConfig()
    assert eda.std_epsilon == 1e-4 and eda.ratio_clamp is None


@pytest.mark.parametrize(
    "values, message",
    [
        ({"alpha_low": 0.1, "alpha_high": 0.2}, "alpha_high=0.2 must be < gepo.alpha_low=0.1"),
        ({"alpha_low": 1.5}, "alpha_low=1.5 must be <= 1.0"),
        ({"gamma": 0}, "gamma=0"),
        ({"beta_low": math.nan}, "finite"),
        ({"group_entropy": "exact"}, "allowed: \\['token_pooled'"),
        ({"ema_order": "later"}, "ema_order='later'"),
        ({"alpha": 0.5}, "unknown option\\(s\\) \\['alpha'\\]"),
        ({"alpha_low": "0.5"}, "finite number"),
    ],
)
def test_gepo_rejects_bad_values_naming_them(values, message):
    with pytest.raises(ValueError, match=message):
        GepoConfig.from_mapping(values)


@pytest.mark.parametrize(
    "values, message",
    [({"ratio_clamp": [10, 0.1]}, "0 < low < high"), ({"ratio_clamp": [1]}, "\\[low, high\\]"), ({"entropy_epsilon": 0}, "> 0")],
)
def test_eda_rejects_bad_values(values, message):
    with pytest.raises(ValueError, match=message):
        EdaConfig.from_mapping(values)


def test_eda_clamp_accepts_a_list():
    assert EdaConfig.from_mapping({"ratio_clamp": [0.1, 10]}).ratio_clamp == (0.1, 10.0)
