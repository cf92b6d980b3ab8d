"""The edge_gec agent loop with a pass-through recorder on its rollout server, for e2e tests.

Registered in place of ``edge_gec`` through verl's ``actor_rollout_ref.rollout.agent.agent_loop_config_path``
(``agent_loop_config``); it runs in verl's agent-loop worker, so the run needs this repository on PYTHONPATH
and ``RECORD_ENV`` naming the JSONL file to append to. Every server call is forwarded unchanged; what
the server returned and what GEC made of it are written down, one line per response.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from edge_verl.integration.rollout import GecAgentLoop
from edge_verl.algorithms import GEC_AGENT_LOOP
from edge_verl.algorithms.gec import GEC_INFO_KEY

RECORD_ENV = "EDGE_VERL_TEST_GEC_RECORD"


def agent_loop_config(folder: Path) -> Path:
    """A verl agent-loop config file that maps ``edge_gec`` to the recording loop."""
    path = folder / "recording_agent_loop.yaml"
    path.write_text(f"- name: {GEC_AGENT_LOOP}\n  _target_: {__name__}.RecordingGecAgentLoop\n")
    return path


class _RecordingServer:
    """Forwards ``generate`` to verl's server manager and notes the request and the returned token ids."""

    def __init__(self, server, calls: list):
        self._server = server
        self._calls = calls

    def __getattr__(self, name):
        return getattr(self._server, name)

    async def generate(self, *, request_id, prompt_ids, sampling_params, **kwargs):
        call = {"prompt_ids": [int(token) for token in prompt_ids], "max_tokens": sampling_params.get("max_tokens")}
        output = await self._server.generate(
            request_id=request_id, prompt_ids=prompt_ids, sampling_params=sampling_params, **kwargs
        )
        self._calls.append({**call, "token_ids": [int(token) for token in output.token_ids]})
        return output


class RecordingGecAgentLoop(GecAgentLoop):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._calls: list = []
        self.server_manager = _RecordingServer(self.server_manager, self._calls)

    async def run(self, sampling_params, **kwargs):
        output = await super().run(sampling_params, **kwargs)
        record = {
            "prompt_ids": [int(token) for token in output.prompt_ids],
            "response_ids": [int(token) for token in output.response_ids],
            "response_mask": [int(flag) for flag in output.response_mask],
            "ground_truth": str((kwargs.get("reward_model") or {}).get("ground_truth")),
            "calls": self._calls,
            "gec": output.extra_fields[GEC_INFO_KEY],
        }
        with open(os.environ[RECORD_ENV], "a") as file:
            file.write(json.dumps(record) + "\n")
        return output
