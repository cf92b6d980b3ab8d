"""The CPU backend's poll of verl's v1 replay buffer (edge_verl/integration/cpu/replay_buffer.py), on verl's own
``ReplayBuffer``: a synchronous trainer's buffer looks every 50 ms, the asynchronous one keeps verl's 2 s, and an
interval its caller passes wins. That the look changes no run: tests/e2e (the README demo's figure to the digit)."""

import importlib

import pytest

from edge_verl.integration.cpu import CPU_BACKEND
from edge_verl.integration.cpu.replay_buffer import POLL_S, patch_replay_buffer
from edge_verl.integration.internals import check_internals


@pytest.fixture(scope="module")
def replay_buffer():
    module = importlib.import_module("verl.trainer.ppo.v1.replay_buffer")
    upstream = module.ReplayBuffer.__init__
    patch_replay_buffer(module)
    patch_replay_buffer(module)  # once per process, whoever calls it again
    yield module
    module.ReplayBuffer.__init__ = upstream


def _buffer(cls, mode, *args, **kwargs):
    return cls(mode, {}, None, "drop", {}, *args, **kwargs)


def test_a_synchronous_trainer_looks_every_50_ms(replay_buffer):
    assert POLL_S == 0.05
    assert _buffer(replay_buffer.ReplayBuffer, "sync").poll_interval == POLL_S


def test_the_asynchronous_trainer_and_an_interval_of_the_callers_keep_theirs(replay_buffer):
    assert _buffer(replay_buffer.ReplayBufferAsync, "async").poll_interval == 2.0  # verl's default
    assert _buffer(replay_buffer.ReplayBuffer, "sync", poll_interval=0.5).poll_interval == 0.5
    assert _buffer(replay_buffer.ReplayBuffer, "sync", 0.5).poll_interval == 0.5  # positional


def test_the_patched_constructor_is_in_the_cpu_backends_table_and_matches_verl(replay_buffer):
    table = {"verl.trainer.ppo.v1.replay_buffer": CPU_BACKEND.entries()["verl.trainer.ppo.v1.replay_buffer"]}
    assert check_internals(table, CPU_BACKEND.optional).problems == []
