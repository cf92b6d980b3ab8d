"""The policy head's per-token log-prob and entropy from the hidden states, tile by tile. Pure torch, any device.

Shape legend: N tokens, D hidden size, V vocabulary; tiles of ``token_chunk`` tokens x ``vocab_block`` rows.

    log_prob_n = z_n[y_n] - logsumexp(z_n),  entropy_n = logsumexp(z_n) - sum_v p_nv z_nv,
    z_n = hidden_n @ weight.T / temperature,  p_n = softmax(z_n)

Why: an eager head materialises the (N, V) logits, and an entropy with gradient (EDA's gradient form) keeps
their float32 softmax for the backward pass (~0.9 MB per token with Qwen2.5's 151,936 rows). Here no
full-vocabulary row exists at any time: the forward pass sweeps the vocabulary block by block with an online
log-sum-exp (the running max M, s = sum exp(z - M) and u = sum exp(z - M)(z - M), so the entropy
log s - u / s never subtracts two large numbers), and saves the inputs and two float32 numbers per token
(log-sum-exp and entropy). The backward pass recomputes each tile's logits and sends both gradients through it:

    d log_prob_n / d z_nv = [v = y_n] - p_nv,   d entropy_n / d z_nv = -p_nv (log p_nv + entropy_n)

Each tile's matmuls run in the inputs' dtype (as the eager head's do); the logits, softmax and every sum over
tiles are float32, the weight's gradient accumulated in a float32 buffer of one vocabulary block (the loop runs
vocabulary blocks outside, token chunks inside), the hidden states' in a float32 (N, D) buffer. Extra memory:
a few (token_chunk, vocab_block) float32 tiles and (N, D) float32, whatever V is. Cost: the logits matmul once
more than eager autograd (recomputed in the backward pass).

Differs from verl's torch fused backend (``verl.utils.experimental.torch_functional.FusedLinearForPPO``):
that one chunks tokens only (each chunk spans the whole vocabulary, in float32), returns the entropy in the
inputs' dtype and accumulates the weight's gradient in the weight's dtype.
"""

from __future__ import annotations

from typing import Optional

import torch

# verl's ``actor_rollout_ref.model.fused_kernel_options.impl_backend`` value that selects this head (with
# ``actor_rollout_ref.model.use_fused_kernels=True``; ``integration/fused_head.py`` puts it behind verl's seam).
TILED_HEAD_BACKEND = "edge_tiled"
TOKEN_CHUNK = 1024
VOCAB_BLOCK = 8192


def _tiles(size: int, step: int) -> list[tuple[int, int]]:
    return [(start, min(start + step, size)) for start in range(0, size, step)]


def _accumulation_dtype(dtype: torch.dtype) -> torch.dtype:
    """float32, or the inputs' dtype where it is wider (float64 inputs are computed in float64)."""
    return torch.promote_types(dtype, torch.float32)


def _tile_logits(hidden: torch.Tensor, weight: torch.Tensor, temperature: float) -> torch.Tensor:
    """(c, b) logits of one tile: the matmul in the inputs' dtype, then upcast and scaled."""
    return (hidden @ weight.t()).to(_accumulation_dtype(hidden.dtype)).div_(temperature)


def _label_in_block(labels: torch.Tensor, start: int, end: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(rows, columns) of the tokens whose label lies in vocabulary rows [start, end)."""
    rows = ((labels >= start) & (labels < end)).nonzero(as_tuple=True)[0]
    return rows, labels[rows] - start


class _TiledLogProbEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, labels, temperature, token_chunk, vocab_block):
        ctx.set_materialize_grads(False)
        num_tokens, vocab = hidden.shape[0], weight.shape[0]
        log_sum_exp = torch.empty(num_tokens, dtype=_accumulation_dtype(hidden.dtype), device=hidden.device)
        entropy = torch.empty_like(log_sum_exp)
        label_logit = torch.zeros_like(log_sum_exp)
        for start, end in _tiles(num_tokens, token_chunk):
            chunk, chunk_labels = hidden[start:end], labels[start:end]
            running_max = total = weighted = None
            for block_start, block_end in _tiles(vocab, vocab_block):
                logits = _tile_logits(chunk, weight[block_start:block_end], temperature)
                rows, columns = _label_in_block(chunk_labels, block_start, block_end)
                label_logit[start + rows] = logits[rows, columns]
                block_max = logits.amax(dim=-1)
                new_max = block_max if running_max is None else torch.maximum(running_max, block_max)
                shifted = logits.sub_(new_max[:, None])  # z - M'
                exp = shifted.exp()
                block_total = exp.sum(dim=-1)
                block_weighted = exp.mul_(shifted).sum(dim=-1)
                if running_max is None:
                    total, weighted = block_total, block_weighted
                else:  # rescale the sums kept at M to M': s' = s e^(M-M'), u' = e^(M-M') (u + s (M - M'))
                    gap = running_max - new_max
                    decay = gap.exp()
                    weighted = decay * (weighted + total * gap) + block_weighted
                    total = decay * total + block_total
                running_max = new_max
            log_total = total.log()
            log_sum_exp[start:end] = running_max + log_total
            entropy[start:end] = log_total - weighted / total
        log_prob = label_logit - log_sum_exp
        ctx.save_for_backward(hidden, weight, labels, log_sum_exp, entropy)
        ctx.temperature, ctx.token_chunk, ctx.vocab_block = temperature, token_chunk, vocab_block
        ctx.mark_non_differentiable(labels)
        return log_prob, entropy

    @staticmethod
    def backward(ctx, grad_log_prob: Optional[torch.Tensor], grad_entropy: Optional[torch.Tensor]):
        hidden, weight, labels, log_sum_exp, entropy = ctx.saved_tensors
        temperature, token_chunk, vocab_block = ctx.temperature, ctx.token_chunk, ctx.vocab_block
        want_hidden, want_weight = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        if (grad_log_prob is None and grad_entropy is None) or not (want_hidden or want_weight):
            return None, None, None, None, None, None
        num_tokens, vocab = hidden.shape[0], weight.shape[0]
        wide = _accumulation_dtype(hidden.dtype)
        grad_hidden = torch.zeros(hidden.shape, dtype=wide, device=hidden.device) if want_hidden else None
        grad_weight = torch.empty_like(weight) if want_weight else None
        token_tiles = _tiles(num_tokens, token_chunk)
        for block_start, block_end in _tiles(vocab, vocab_block):
            block = weight[block_start:block_end]
            block_grad = torch.zeros(block.shape, dtype=wide, device=weight.device) if want_weight else None
            for start, end in token_tiles:
                chunk = hidden[start:end]
                log_p = _tile_logits(chunk, block, temperature).sub_(log_sum_exp[start:end, None])
                p = log_p.exp()
                # dz = -p (dH (log p + H) + dlogp) / T + [v = y] dlogp / T, in place, the per-token factors
                # scaled by -1/T first: four passes over the tile after the exponential
                if grad_entropy is not None:
                    factor = log_p.add_(entropy[start:end, None]).mul_(grad_entropy[start:end, None].to(wide) / -temperature)
                    if grad_log_prob is not None:
                        factor.add_(grad_log_prob[start:end, None].to(wide) / -temperature)
                else:
                    factor = grad_log_prob[start:end, None].to(wide) / -temperature
                grad_logits = p.mul_(factor)
                if grad_log_prob is not None:
                    rows, columns = _label_in_block(labels[start:end], block_start, block_end)
                    grad_logits[rows, columns] += grad_log_prob[start:end][rows].to(wide) / temperature
                grad_logits = grad_logits.to(hidden.dtype)
                if want_hidden:
                    grad_hidden[start:end] += grad_logits @ block
                if want_weight:
                    block_grad += grad_logits.t() @ chunk
            if want_weight:
                grad_weight[block_start:block_end] = block_grad
        if want_hidden:
            grad_hidden = grad_hidden.to(hidden.dtype)
        return grad_hidden, grad_weight, None, None, None, None


def tiled_log_prob_entropy(
    hidden_states: torch.Tensor,
    weight: torch.Tensor,
    labels: torch.Tensor,
    temperature: float = 1.0,
    *,
    token_chunk: int = TOKEN_CHUNK,
    vocab_block: int = VOCAB_BLOCK,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(log_prob, entropy), each float32 (float64 for float64 inputs) of ``labels.shape``, with gradient into ``hidden_states`` and ``weight``.

    hidden_states (..., D) the last hidden states; weight (V, D) the output projection (lm_head.weight, no
    bias); labels (...) int, the token whose log-prob is wanted at each position, in [0, V); temperature > 0
    divides the logits (the sampling temperature, a number). Tile sizes change memory and speed, not values.
    """
    if hidden_states.shape[:-1] != labels.shape:
        raise ValueError(f"labels {tuple(labels.shape)} must match hidden_states {tuple(hidden_states.shape)} without its last dimension")
    if weight.ndim != 2 or weight.shape[1] != hidden_states.shape[-1]:
        raise ValueError(f"weight {tuple(weight.shape)} must be (V, {hidden_states.shape[-1]})")
    if not float(temperature) > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if token_chunk < 1 or vocab_block < 1:
        raise ValueError(f"token_chunk and vocab_block must be >= 1, got {token_chunk}, {vocab_block}")
    flat_hidden = hidden_states.reshape(-1, hidden_states.shape[-1])
    flat_labels = labels.reshape(-1).to(device=flat_hidden.device, dtype=torch.int64)
    log_prob, entropy = _TiledLogProbEntropy.apply(
        flat_hidden, weight, flat_labels, float(temperature), int(token_chunk), int(vocab_block)
    )
    return log_prob.view(labels.shape), entropy.view(labels.shape)
