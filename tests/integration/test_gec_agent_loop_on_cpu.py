"""Pieces of the edge_gec agent loop that need verl's agent-loop module but no rollout."""

import asyncio

import pytest

pytest.importorskip("verl")
from omegaconf import OmegaConf  # noqa: E402

from edge_verl.integration.gec_agent_loop import _GroupVerdicts, _SampleIndex, check_gec_supported, gec_config  # noqa: E402

pytestmark = pytest.mark.verl


def test_sample_index_uses_v1_session_id_or_numbers_legacy_loops_in_start_order():
    assert _SampleIndex.claim("u1", {"session_id": 5}, 4) == 5
    assert [_SampleIndex.claim("u2", {}, 3) for _ in range(3)] == [0, 1, 2]
    assert _SampleIndex.claim("u2", {}, 3) == 0  # the counter was released after a full group


def test_group_verdicts_wait_for_every_sibling():
    async def group():
        return await asyncio.gather(*[_GroupVerdicts.wait_for_group("g", i, 3, i == 1, 5.0) for i in range(3)])

    assert asyncio.run(group()) == [[False, True, False]] * 3


def test_group_verdicts_time_out_with_an_explanation():
    with pytest.raises(RuntimeError, match="only 1 of 2 responses"):
        asyncio.run(_GroupVerdicts.wait_for_group("lonely", 0, 2, False, 0.05))


def _config(**rollout):
    return OmegaConf.create(
        {"actor_rollout_ref": {"rollout": {"calculate_log_probs": False, **rollout}}, "algorithm": {"edge_gec": {"seed": 1}}}
    )


def test_gec_refuses_rollout_log_probs_and_reads_its_options():
    check_gec_supported(_config())
    assert gec_config(_config()).seed == 1
    with pytest.raises(ValueError, match="calculate_log_probs=False"):
        check_gec_supported(_config(calculate_log_probs=True))
