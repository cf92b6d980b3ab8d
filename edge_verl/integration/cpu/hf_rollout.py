"""An HF-``generate``-style rollout backend for verl's async rollout registries (name ``hf``).

verl 0.9.1 only ships vLLM, SGLang and TensorRT-LLM servers, none of which runs on a CPU. This backend
registers, the way verl adds any backend:
- ``HFRolloutReplica`` in ``RolloutReplicaRegistry`` (launches one server actor per replica),
- ``HFServerAdapter`` in the worker-side rollout registry (pushes the trainer's weights to the server),
- ``HFRolloutServer``: a Ray actor with a plain transformers model that answers verl's token-in/token-out
  ``generate`` with sampled tokens, their log-probs and ``extra_fields["global_steps"]``. Concurrent
  requests with the same sampling settings are decoded together in one left-padded batch.

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
_BATCH_WINDOW_S = 0.005


def _server_actor_name(replica_rank: int) -> str:
    return f"edge_verl_{ROLLOUT_NAME}_server_{replica_rank}"


def _model_path(model_config: Any) -> str:
    local_path = model_config.get("local_path", None) if hasattr(model_config, "get") else None
    return local_path or model_config.get("path")


def sample_tokens(
    model: torch.nn.Module,
    prompts: list[list[int]],
    *,
    max_new_tokens: list[int],
    temperature: float,
    top_p: float,
    top_k: int,
    eos_token_ids: set[int],
    pad_token_id: int,
    generator: Optional[torch.Generator] = None,
) -> list[tuple[list[int], list[float]]]:
    """Sample continuations of ``prompts`` (left-padded into one batch) with a KV cache.

    Returns, per prompt, the generated token ids (ending in EOS when it was sampled) and the
    log-probability of each under softmax(logits / temperature) (raw logits when temperature == 0,
    which means greedy decoding).
    """
    batch_size = len(prompts)
    width = max(map(len, prompts))
    input_ids = torch.full((batch_size, width), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((batch_size, width), dtype=torch.long)
    for row, ids in enumerate(prompts):
        input_ids[row, width - len(ids) :] = torch.tensor(ids, dtype=torch.long)
        attention_mask[row, width - len(ids) :] = 1
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    budget = torch.tensor(max_new_tokens)
    outputs: list[tuple[list[int], list[float]]] = [([], []) for _ in prompts]
    finished = budget <= 0
    eos = torch.tensor(sorted(eos_token_ids), dtype=torch.long)

    with torch.inference_mode():
        result = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=True)
        for step in range(int(budget.max()) if batch_size else 0):
            logits = result.logits[:, -1, :].float()
            scaled = logits / temperature if temperature > 0 else logits
            log_probs = torch.log_softmax(scaled, dim=-1)
            if temperature > 0:
                filtered = _filter_top_k_top_p(scaled, top_k=top_k, top_p=top_p)
                tokens = torch.multinomial(torch.softmax(filtered, dim=-1), 1, generator=generator).squeeze(-1)
            else:
                tokens = logits.argmax(dim=-1)
            tokens = torch.where(finished, torch.full_like(tokens, pad_token_id), tokens)
            token_log_probs = log_probs.gather(-1, tokens[:, None]).squeeze(-1)
            for row in torch.nonzero(~finished).flatten().tolist():
                outputs[row][0].append(int(tokens[row]))
                outputs[row][1].append(float(token_log_probs[row]))
            finished = finished | torch.isin(tokens, eos) | (budget <= step + 1)
            if bool(finished.all()):
                break
            attention_mask = torch.cat([attention_mask, (~finished).long()[:, None]], dim=-1)
            position_ids = position_ids[:, -1:] + 1
            result = model(
                input_ids=tokens[:, None],
                attention_mask=attention_mask,
                position_ids=position_ids,
                past_key_values=result.past_key_values,
                use_cache=True,
            )
    return outputs


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
        pad = self.model.generation_config.pad_token_id
        self.pad_token_id = pad if pad is not None else min(self.eos_token_ids)
        self.max_model_len = int(config.max_model_len or (config.prompt_length + config.response_length))
        self.generator = torch.Generator().manual_seed(int(os.environ.get("EDGE_VERL_ROLLOUT_SEED", "0")) + replica_rank)
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
        while self._pending:
            await asyncio.sleep(_BATCH_WINDOW_S)
            pending, self._pending = self._pending, []
            groups: dict[tuple, list] = {}
            for item in pending:
                params = item[1]
                key = (float(params.get("temperature", 1.0)), float(params.get("top_p", 1.0)), int(params.get("top_k", -1)))
                groups.setdefault(key, []).append(item)
            for (temperature, top_p, top_k), items in groups.items():
                try:
                    results = await asyncio.to_thread(
                        sample_tokens,
                        self.model,
                        [item[0] for item in items],
                        max_new_tokens=[item[1]["max_tokens"] for item in items],
                        temperature=temperature,
                        top_p=top_p,
                        top_k=top_k,
                        eos_token_ids=self.eos_token_ids,
                        pad_token_id=self.pad_token_id,
                        generator=self.generator,
                    )
                except Exception as error:  # hand the failure to every waiting request, then keep serving
                    for item in items:
                        item[2].set_exception(error)
                    continue
                for item, result in zip(items, results):
                    item[2].set_result(result)

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
            await asyncio.sleep(_BATCH_WINDOW_S)

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
