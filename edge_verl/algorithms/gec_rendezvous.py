"""GEC's group rendezvous (``edge_gec.scope=all_wrong_groups``): where the sibling responses of a group exchange
their verdicts in the agent-loop worker, so that only all-wrong groups are corrected. Pure asyncio, no verl."""

from __future__ import annotations

import asyncio


class _Group:
    """One uid's verdicts so far (sample index -> correct), how many responses wait on them, and the
    event set when all ``size`` have arrived."""

    def __init__(self) -> None:
        self.verdicts: dict[int, bool] = {}
        self.waiting = 0
        self.complete = asyncio.Event()


class GroupRendezvous:
    """Where the n sibling responses of a uid exchange their correctness (scope all_wrong_groups).

    A group exists only while one of its responses waits: every waiter leaves in ``finally`` (all verdicts
    in, timeout, cancellation) and the last one removes the group, so no verdict outlives the rollout that
    produced it and the same uid in a later step starts afresh. Who owns one follows how the framework
    schedules a group's responses: verl's agent loop one per event loop (``integration.rollout``),
    OpenRLHF's executor one per executor (``openrlhf.gec_executor``).
    """

    def __init__(self) -> None:
        self._groups: dict[str, _Group] = {}

    @property
    def open_groups(self) -> frozenset[str]:
        """The uids with a response waiting right now (empty between rollouts)."""
        return frozenset(self._groups)

    async def wait_for_group(self, uid: str, index: int, size: int, correct: bool, timeout_s: float) -> list[bool]:
        """The group's verdicts ordered by sample index, once all ``size`` responses have reported."""
        group = self._groups.setdefault(uid, _Group())
        if index in group.verdicts:
            raise RuntimeError(
                f"edge_gec scope=all_wrong_groups: sample index {index} of uid {uid} reported twice in one "
                "rollout; every response of a group needs its own index (session_id or the plugin's column)."
            )
        group.verdicts[index] = correct
        group.waiting += 1
        try:
            if len(group.verdicts) >= size:
                group.complete.set()
            await asyncio.wait_for(group.complete.wait(), timeout=timeout_s)
            return [group.verdicts[key] for key in sorted(group.verdicts)]
        except asyncio.TimeoutError as error:
            raise RuntimeError(
                f"edge_gec scope=all_wrong_groups: only {len(group.verdicts)} of {size} responses of uid {uid} "
                f"reached this agent-loop worker within {timeout_s} s; the n samples of a prompt must run in one "
                "worker (v1 trainer, or actor_rollout_ref.rollout.agent.num_workers dividing the prompts)."
            ) from error
        finally:
            group.waiting -= 1
            if group.waiting == 0:
                del self._groups[uid]
