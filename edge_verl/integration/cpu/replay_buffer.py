"""How often verl's v1 trainer looks for its finished rollouts, on CPU.

The v1 trainer's step waits in ``ReplayBuffer.sample`` until the step's responses are in TransferQueue, looking
every ``poll_interval`` seconds, 2 by default (no config key sets it). A GPU step takes minutes; a CPU step of a
tiny model takes a few seconds, so the 2-s tick was a large share of it: measured on the README's demo, every
step's ``timing_s/gen`` read 4.04 s, two ticks, for a rollout that took less. In the CPU backend a synchronous
trainer's buffer looks every ``POLL_S`` instead (a look is one small TransferQueue metadata read). What a step
samples does not change: the synchronous buffer takes its batch only once every response of the step is in.
The asynchronous trainer (``ReplayBufferAsync``) keeps verl's interval, which it also uses to tell a step that
waited for data from one that did not.
"""

from __future__ import annotations

from types import ModuleType

from edge_verl.integration.cpu import CPU_BACKEND

POLL_S = 0.05


def patch_replay_buffer(module: ModuleType) -> None:
    """``ReplayBuffer.__init__`` of a synchronous trainer takes ``POLL_S`` unless its caller passed an interval."""

    def make(original):
        def __init__(self, trainer_mode, *args, **kwargs):
            if trainer_mode == "sync" and len(args) < 5:  # poll_interval: the 5th parameter after trainer_mode
                kwargs.setdefault("poll_interval", POLL_S)
            original(self, trainer_mode, *args, **kwargs)

        return __init__

    CPU_BACKEND.wrap(module, "ReplayBuffer.__init__", make)
