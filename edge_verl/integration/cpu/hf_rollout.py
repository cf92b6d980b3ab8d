"""An HF-``generate``-style rollout backend for verl's async rollout registries (name ``hf``).

verl 0.9.1 only ships vLLM, SGLang and TensorRT-LLM servers, none of which runs on a CPU. This backend
registers, the way verl adds any backend:
- ``HFRolloutReplica`` in ``RolloutReplicaRegistry`` (launches one server actor per replica),
- ``HFServerAdapter`` in the worker-side rollout registry (pushes the trainer's weights to the server),
- ``HFRolloutServer``: a Ray actor with a plain transformers model that answers verl's token-in/token-out
  ``generate`` with sampled tokens, their log-probs and ``extra_fields["global_steps"]``. Requests are
  decoded one at a time, each with a generator of its own seeded from its ``seed`` sampling parameter
  (vLLM's ``SamplingParams.seed``), so a response is a function of its seed alone, whatever arrived with it.

Log-probs are those of the temperature-scaled full-vocabulary distribution, the quantity verl's actor
recomputes as old_log_probs (vLLM's "processed" log-probs additionally renormalise after top-k/top-p).
It is meant for debugging pipelines and tests on small models, not for throughput.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any, Optional

import ray
import torch

from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.replica import RolloutReplica, TokenOutput

logger = logging.getLogger(__name__)

ROLLOUT_NAME = "hf"
_POLL_S = 0.005


def _server_actor_name(replica_rank: int) -> str:
    return f"edge_verl_{ROLLOUT_NAME}_server_{replica_rank}"


def _model_path(model_config: Any) -> str:
    local_path = model_config.get("local_path", None) if hasattr(model_config, "get") else None
    return local_path or model_config.get("path")


def sample_response(
    model: torch.nn.Module,
    prompt_ids: list[int],
    *,
    max_new_tokens: int,
    temperature: float,
    top_p: float,
    top_k: int,
    eos_token_ids: set[int],
    generator: torch.Generator,
) -> tuple[list[int], list[float]]:
    """Sample a continuation of one prompt with a KV cache and ``generator``; returns the generated token ids
    (ending in EOS when it was sampled) and the log-probability of each under softmax(logits / temperature)
    (raw logits when temperature == 0, which means greedy decoding).

    One request at a time, never a batch: the model's logits for a row change in their last bits with the
    batch it is decoded in (measured on the demo's model: up to 3.6e-7 between a prompt alone and in a padded
    batch of 2-16, and rows of one prompt batched together drift apart once their tokens differ), so a batched
    response would depend on which requests arrived with it."""
    if max_new_tokens <= 0:
        return [], []
    tokens: list[int] = []
    log_probs: list[float] = []
    with torch.inference_mode():
        result = model(input_ids=torch.tensor([prompt_ids], dtype=torch.long), use_cache=True)
        for _ in range(max_new_tokens):
            logits = result.logits[0, -1, :].float()
            scaled = logits / temperature if temperature > 0 else logits
            if temperature > 0:
                filtered = _filter_top_k_top_p(scaled[None], top_k=top_k, top_p=top_p)[0]
                token = int(torch.multinomial(torch.softmax(filtered, dim=-1), 1, generator=generator))
            else:
                token = int(logits.argmax())
            tokens.append(token)
            log_probs.append(float(torch.log_softmax(scaled, dim=-1)[token]))
            if token in eos_token_ids or len(tokens) == max_new_tokens:
                break
            result = model(input_ids=torch.tensor([[token]]), past_key_values=result.past_key_values, use_cache=True)
    return tokens, log_probs


def _filter_top_k_top_p(logits: torch.Tensor, *, top_k: int, top_p: float) -> torch.Tensor:
    if top_k is not None and 0 < top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True, dim=-1)
        cumulative = torch.softmax(sorted_logits, dim=-1).cumsum(-1)
        drop_sorted = cumulative - torch.softmax(sorted_logits, dim=-1) >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


class HFRolloutServer:
    """Ray actor holding a transformers model; verl's LLM client calls ``generate`` on it."""

    def __init__(self, config: Any, model_config: Any, replica_rank: int):
        from transformers import AutoConfig, AutoModelForCausalLM

        self.config = config
        self.replica_rank = replica_rank
        path = _model_path(model_config)
        override = dict(model_config.get("override_config", {}) or {})
        hf_config = AutoConfig.from_pretrained(path, trust_remote_code=model_config.get("trust_remote_code", False))
        self.model = AutoModelForCausalLM.from_pretrained(
            path,
            config=hf_config,
            torch_dtype=torch.float32,
            attn_implementation=override.get("attn_implementation", "sdpa"),
            trust_remote_code=model_config.get("trust_remote_code", False),
        ).eval()
        eos = self.model.generation_config.eos_token_id
        if eos is None:
            eos = hf_config.eos_token_id
        self.eos_token_ids = set(eos if isinstance(eos, list) else [eos])
        self.max_model_len = int(config.max_model_len or (config.prompt_length + config.response_length))
        # The stream of requests that carry no seed of their own (a run without algorithm.edge_seeding): verl's
        # rollout seed and the replica, in arrival order. A request's "seed" gets a generator of its own.
        self.generator = torch.Generator().manual_seed(int(getattr(config, "seed", 0) or 0) + replica_rank)
        self.global_steps: Optional[int] = None
        self._pending: list[tuple[list[int], dict[str, Any], asyncio.Future]] = []
        self._worker: Optional[asyncio.Task] = None

    async def generate(
        self,
        prompt_ids: list[int],
        sampling_params: dict[str, Any],
        request_id: str,
        image_data: Optional[list[Any]] = None,
        video_data: Optional[list[Any]] = None,
        **kwargs: Any,
    ) -> TokenOutput:
        if image_data or video_data:
            raise NotImplementedError("The hf rollout is text-only.")
        prompt_ids = [int(token) for token in prompt_ids]
        room = self.max_model_len - len(prompt_ids)
        if room < 1:
            raise ValueError(f"Prompt length {len(prompt_ids)} leaves no room within max_model_len {self.max_model_len}.")
        requested = sampling_params.get("max_tokens", sampling_params.get("max_new_tokens"))
        max_tokens = min(room, int(requested) if requested is not None else int(self.config.response_length))
        future = asyncio.get_running_loop().create_future()
        self._pending.append((prompt_ids, {**sampling_params, "max_tokens": max_tokens}, future))
        if self._worker is None or self._worker.done():
            self._worker = asyncio.create_task(self._drain())
        token_ids, log_probs = await future
        return TokenOutput(
            token_ids=token_ids,
            log_probs=log_probs if sampling_params.get("logprobs") else None,
            stop_reason="completed",
            num_preempted=0,
            extra_fields={"global_steps": self.global_steps},
        )

    async def _drain(self) -> None:
        """Decode the waiting requests one by one, in arrival order (``sample_response``)."""
        while self._pending:
            prompt_ids, params, future = self._pending.pop(0)
            seed = params.get("seed")
            generator = self.generator if seed is None else torch.Generator().manual_seed(int(seed))
            try:
                result = await asyncio.to_thread(
                    sample_response,
                    self.model,
                    prompt_ids,
                    max_new_tokens=params["max_tokens"],
                    temperature=float(params.get("temperature", 1.0)),
                    top_p=float(params.get("top_p", 1.0)),
                    top_k=int(params.get("top_k", -1)),
                    eos_token_ids=self.eos_token_ids,
                    generator=generator,
                )
            except Exception as error:  # hand the failure to the waiting request, then keep serving
                future.set_exception(error)
                continue
            future.set_result(result)

    def update_weights(self, state_dict: dict[str, torch.Tensor], global_steps: Optional[int] = None) -> None:
        missing, unexpected = self.model.load_state_dict(state_dict, strict=False)
        tied = {"lm_head.weight"} if self.model.config.tie_word_embeddings else set()
        if unexpected or set(missing) - tied:
            raise RuntimeError(f"Weight update does not match the model: missing={missing} unexpected={unexpected}")
        if global_steps is not None:
            self.global_steps = global_steps

    def set_global_steps(self, global_steps: int) -> None:
        self.global_steps = global_steps

    def get_global_steps(self) -> Optional[int]:
        return self.global_steps

    # Lifecycle calls verl makes on every server; an in-memory CPU model has nothing to free or restore.
    async def wake_up(self, tags: Optional[list[str]] = None) -> None:
        return None

    async def sleep(self) -> None:
        return None

    async def clear_kv_cache(self) -> None:
        return None

    async def release_kv_cache(self) -> None:
        return None

    async def resume_kv_cache(self) -> None:
        return None

    async def wait_for_requests_to_drain(self) -> None:
        while self._pending or (self._worker is not None and not self._worker.done()):
            await asyncio.sleep(_POLL_S)

    async def abort_all_requests(self, reset_prefix_cache: bool = True, reject_request: bool = False) -> dict:
        return {"aborted_count": 0, "request_ids": []}

    async def abort_request(self, request_id: str, reset_prefix_cache: bool = True) -> dict:
        return {"aborted": False, "request_id": request_id}

    async def resume_generation(self) -> None:
        return None

    async def start_profile(self, **kwargs: Any) -> None:
        return None

    async def stop_profile(self) -> None:
        return None


class HFRolloutReplica(RolloutReplica):
    """One ``HFRolloutServer`` per replica, next to the trainer workers (hybrid) or on its own."""

    def rollout_worker_use_gpu(self) -> bool:
        return False

    async def launch_servers(self) -> None:
        server = (
            ray.remote(HFRolloutServer)
            .options(name=_server_actor_name(self.replica_rank), num_cpus=0, max_concurrency=self.max_concurrency)
            .remote(config=self.config, model_config=self.model_config, replica_rank=self.replica_rank)
        )
        self.servers = [server]
        self._server_handle = server
        self._server_address = f"{ROLLOUT_NAME}-replica-{self.replica_rank}"


class HFServerAdapter(BaseRollout):
    """Worker-side half: streams the trainer's full weights to this rank's replica server."""

    def __init__(self, config: Any, model_config: Any, device_mesh: Any, replica_rank: int = -1):
        super().__init__(config, model_config, device_mesh)
        rank = int(os.environ.get("RANK", "0"))
        world = self.config.tensor_model_parallel_size * self.config.data_parallel_size
        world *= self.config.pipeline_model_parallel_size
        self.replica_rank = rank // world if replica_rank == -1 else replica_rank
        self.is_leader = rank % world == 0
        self._server: Optional[ray.actor.ActorHandle] = None

    def _server_handle(self) -> ray.actor.ActorHandle:
        if self._server is None:
            self._server = ray.get_actor(_server_actor_name(self.replica_rank))
        return self._server

    async def resume(self, tags: list[str]) -> None:
        return None

    async def release(self) -> None:
        return None

    @torch.no_grad()
    async def update_weights(self, weights, global_steps: Optional[int] = None, wire_format: str = "named_tensors", **kwargs):
        if wire_format != "named_tensors":
            raise NotImplementedError(f"The hf rollout accepts wire_format='named_tensors' only, got {wire_format!r}.")
        state_dict = {}
        if hasattr(weights, "__aiter__"):
            async for name, tensor in weights:
                state_dict[name] = _to_local_cpu(tensor)
        else:
            for name, tensor in weights:
                state_dict[name] = _to_local_cpu(tensor)
        if self.is_leader:
            await self._server_handle().update_weights.remote(state_dict, global_steps)


def _to_local_cpu(tensor: torch.Tensor) -> torch.Tensor:
    if hasattr(tensor, "full_tensor"):
        tensor = tensor.full_tensor()
    return tensor.detach().to("cpu", copy=True)
