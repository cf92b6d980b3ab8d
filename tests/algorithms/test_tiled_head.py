"""The tiled log-prob + entropy head against eager autograd over the full logits (the slow, literal reference)."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils._python_dispatch import TorchDispatchMode

from edge_verl.algorithms.tiled_head import tiled_log_prob_entropy


def eager(hidden, weight, labels, temperature):
    """The reference: the whole (N, V) logits, softmax and entropy by autograd."""
    logits = (hidden @ weight.t()).to(torch.promote_types(hidden.dtype, torch.float32)) / temperature
    log_p = logits.log_softmax(dim=-1)
    entropy = -(log_p.exp() * log_p).sum(dim=-1)
    return log_p.gather(-1, labels.unsqueeze(-1)).squeeze(-1), entropy


def inputs(n=23, d=12, v=301, dtype=torch.float32, scale=1.0, seed=0):
    generator = torch.Generator().manual_seed(seed)
    hidden = (scale * torch.randn(n, d, generator=generator)).to(dtype).requires_grad_()
    weight = torch.randn(v, d, generator=generator).to(dtype).requires_grad_()
    labels = torch.randint(0, v, (n,), generator=generator)
    return hidden, weight, labels


def loss_of(log_prob, entropy, grad_log_prob, grad_entropy):
    loss = 0.0
    if grad_log_prob is not None:
        loss = loss + (log_prob * grad_log_prob).sum()
    if grad_entropy is not None:
        loss = loss + (entropy * grad_entropy).sum()
    return loss


def compare(hidden, weight, labels, temperature, *, use_log_prob, use_entropy, mask=None, atol, **tiles):
    """Values and both input gradients of the tiled head and of ``eager`` for one upstream gradient."""
    n = labels.numel()
    generator = torch.Generator().manual_seed(1)
    keep = torch.ones(n) if mask is None else mask.to(torch.float32)
    grad_log_prob = torch.randn(n, generator=generator) * keep if use_log_prob else None
    grad_entropy = torch.randn(n, generator=generator) * keep if use_entropy else None
    found, wanted = [], []
    for head, out in ((lambda *a: tiled_log_prob_entropy(*a, **tiles), found), (eager, wanted)):
        log_prob, entropy = head(hidden, weight, labels, temperature)
        cast = lambda g, dtype=log_prob.dtype: None if g is None else g.to(dtype)  # noqa: E731
        loss = loss_of(log_prob, entropy, cast(grad_log_prob), cast(grad_entropy))
        out.extend([log_prob.detach(), entropy.detach(), *torch.autograd.grad(loss, (hidden, weight))])
    for name, got, expected in zip(("log_prob", "entropy", "d hidden", "d weight"), found, wanted):
        torch.testing.assert_close(got.to(expected.dtype), expected, atol=atol, rtol=atol, msg=name)
    return found


@pytest.mark.parametrize("use_log_prob, use_entropy", [(True, False), (False, True), (True, True)])
@pytest.mark.parametrize("temperature", [1.0, 0.6])
def test_gradients_equal_eager_autograd_in_float32(use_log_prob, use_entropy, temperature):
    # 301 rows in blocks of 64 (the last block 45 rows), 23 tokens in chunks of 5 (the last 3)
    hidden, weight, labels = inputs()
    compare(hidden, weight, labels, temperature, use_log_prob=use_log_prob, use_entropy=use_entropy,
            atol=1e-5, token_chunk=5, vocab_block=64)


def test_float64_inputs_are_computed_in_float64_to_rounding():
    hidden, weight, labels = inputs(dtype=torch.float64)
    compare(hidden, weight, labels, 0.7, use_log_prob=True, use_entropy=True, atol=1e-11, token_chunk=4, vocab_block=50)


def test_masked_tokens_get_no_gradient_and_the_rest_equal_eager():
    # the loss sees a token only through its upstream gradient: masked tokens (0) send none into the hidden state
    hidden, weight, labels = inputs()
    mask = torch.arange(23) % 3 != 0
    _, _, grad_hidden, _ = compare(hidden, weight, labels, 1.0, use_log_prob=True, use_entropy=True, mask=mask,
                                   atol=1e-5, token_chunk=7, vocab_block=100)
    assert torch.count_nonzero(grad_hidden[~mask]) == 0
    assert torch.count_nonzero(grad_hidden[mask]) > 0


def test_a_single_token_and_a_block_wider_than_the_vocabulary():
    hidden, weight, labels = inputs(n=1, v=37)
    compare(hidden, weight, labels, 1.0, use_log_prob=True, use_entropy=True, atol=1e-5, token_chunk=1024, vocab_block=8192)


def test_extreme_logits_stay_finite_and_exact():
    # hidden x 300: logits of order +-1e3, a softmax that is one-hot to float32 precision; entropy ~0 and its
    # gradient the product of a tiny p and a large log p, which the online sums must not turn into inf - inf
    hidden, weight, labels = inputs(scale=300.0, dtype=torch.float64)
    log_prob, entropy = tiled_log_prob_entropy(hidden.float(), weight.float(), labels, 1.0, token_chunk=6, vocab_block=32)
    assert torch.isfinite(log_prob).all() and torch.isfinite(entropy).all() and (entropy >= 0).all()
    compare(hidden, weight, labels, 1.0, use_log_prob=True, use_entropy=True, atol=1e-9, token_chunk=6, vocab_block=32)


def test_labels_at_both_ends_of_the_vocabulary_and_of_a_block():
    hidden, weight, _ = inputs(n=6, v=130)
    labels = torch.tensor([0, 63, 64, 127, 128, 129])
    compare(hidden, weight, labels, 1.0, use_log_prob=True, use_entropy=False, atol=1e-5, token_chunk=2, vocab_block=64)


def test_tile_sizes_change_no_value():
    hidden, weight, labels = inputs()
    results = [tiled_log_prob_entropy(hidden, weight, labels, 0.8, token_chunk=c, vocab_block=b) for c, b in ((1, 1), (5, 64), (100, 1000))]
    for log_prob, entropy in results[1:]:
        torch.testing.assert_close(log_prob, results[0][0], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(entropy, results[0][1], atol=1e-5, rtol=1e-5)


def test_three_dimensional_hidden_states_as_verl_passes_them():
    # verl's fused forward hands (1, total_nnz, D) hidden states and (1, total_nnz) labels
    hidden, weight, labels = inputs()
    log_prob, entropy = tiled_log_prob_entropy(hidden[None], weight, labels[None], 1.0)
    flat = tiled_log_prob_entropy(hidden, weight, labels, 1.0)
    assert log_prob.shape == entropy.shape == (1, 23)
    torch.testing.assert_close(log_prob[0], flat[0])
    torch.testing.assert_close(entropy[0], flat[1])


# bf16, as a GPU run holds the model: the tile's matmul rounds its output to bf16 as the eager head's logits are,
# both differ from float64 on the same bf16 inputs by that rounding. Measured on these inputs (logits of order 3):
# values 2.9e-2 (log-prob) and 2.3e-2 (entropy), gradients 1.0e-2 and 6.5e-3 of their largest element, the same
# figures as eager autograd over bf16 logits upcast to float32.
BF16_ATOL = 5e-2


def test_bfloat16_within_the_stated_tolerance_of_float64_and_returns_float32():
    hidden, weight, labels = inputs(dtype=torch.bfloat16)
    log_prob, entropy = tiled_log_prob_entropy(hidden, weight, labels, 1.0, token_chunk=5, vocab_block=64)
    assert log_prob.dtype == entropy.dtype == torch.float32
    reference = [tensor.detach().double().requires_grad_() for tensor in (hidden, weight)]
    wanted = eager(*reference, labels, 1.0)
    torch.testing.assert_close(log_prob.double(), wanted[0].detach(), atol=BF16_ATOL, rtol=0)
    torch.testing.assert_close(entropy.double(), wanted[1].detach(), atol=BF16_ATOL, rtol=0)
    grads = torch.autograd.grad((log_prob + entropy).sum(), (hidden, weight))
    assert grads[0].dtype == grads[1].dtype == torch.bfloat16
    wanted_grads = torch.autograd.grad((wanted[0] + wanted[1]).sum(), reference)
    for got, expected in zip(grads, wanted_grads):
        scale = expected.abs().max()
        torch.testing.assert_close(got.double() / scale, expected / scale, atol=BF16_ATOL, rtol=0)


class _LargestTensor(TorchDispatchMode):
    """The largest tensor any operation returns while active."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        for tensor in result if isinstance(result, (tuple, list)) else (result,):
            if isinstance(tensor, torch.Tensor):
                self.largest = max(self.largest, tensor.numel())
        return result


def test_no_full_vocabulary_row_is_held_in_forward_or_backward():
    # 64 tokens x 4096 rows: eager makes (64, 4096) logits; tiles of 16 x 512 never exceed 16 x 512 elements
    # besides the weight's own gradient (4096 x 8) and the saved inputs
    hidden, weight, labels = inputs(n=64, d=8, v=4096)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda tensor: saved.append(tensor.shape) or tensor, lambda tensor: tensor):
        with _LargestTensor() as forward:
            log_prob, entropy = tiled_log_prob_entropy(hidden, weight, labels, 1.0, token_chunk=16, vocab_block=512)
    with _LargestTensor() as backward:
        (log_prob.sum() + entropy.sum()).backward()
    assert forward.largest <= 16 * 512
    assert backward.largest <= max(16 * 512, weight.numel())
    assert sorted(saved) == sorted([hidden.shape, weight.shape, labels.shape, (64,), (64,)])  # + two numbers per token


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 9), v=st.integers(1, 40), scale=st.sampled_from([0.0, 1e-3, 1.0, 30.0, 1e3]),
    temperature=st.sampled_from([0.05, 0.6, 1.0, 3.0]), chunk=st.integers(1, 10), block=st.integers(1, 50),
    seed=st.integers(0, 1000),
)
def test_no_nan_or_inf_on_any_input(n, v, scale, temperature, chunk, block, seed):
    hidden, weight, labels = inputs(n=n, d=4, v=v, scale=scale, seed=seed)
    log_prob, entropy = tiled_log_prob_entropy(hidden, weight, labels, temperature, token_chunk=chunk, vocab_block=block)
    assert torch.isfinite(log_prob).all() and (log_prob <= 1e-5).all()
    assert torch.isfinite(entropy).all() and (entropy >= -1e-5).all() and (entropy <= math.log(v) + 1e-4).all()
    grads = torch.autograd.grad(log_prob.sum() + entropy.sum(), (hidden, weight))
    assert all(torch.isfinite(grad).all() for grad in grads)


def test_bad_inputs_are_refused_with_the_shapes():
    hidden, weight, labels = inputs()
    with pytest.raises(ValueError, match="labels"):
        tiled_log_prob_entropy(hidden, weight, labels[:-1])
    with pytest.raises(ValueError, match="weight"):
        tiled_log_prob_entropy(hidden, weight[:, :-1], labels)
    with pytest.raises(ValueError, match="temperature"):
        tiled_log_prob_entropy(hidden, weight, labels, 0.0)
    with pytest.raises(ValueError, match="token_chunk"):
        tiled_log_prob_entropy(hidden, weight, labels, token_chunk=0)
