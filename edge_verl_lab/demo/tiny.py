"""A tiny Qwen2 model and byte-level tokenizer, built locally (no hub), for CPU runs of verl.

The tokenizer is a byte-level BPE with no merges: 256 byte tokens plus Qwen's chat special tokens, so
verl's Qwen-style chat tokenization works unchanged. The model is a randomly initialised Qwen2 of about
100k parameters. ``warm_start`` teaches it the answer *format* (``\\boxed{d}`` then end-of-turn) with
random digits, the way a base model knows how to answer but not what: RL then has something to move.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Callable

import torch

CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def build_tokenizer(out_dir: str | Path):
    """Write a byte-level tokenizer (vocab 259) to ``out_dir`` and return it."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {symbol: index for index, symbol in enumerate(alphabet)}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=SPECIAL_TOKENS[1:],
        model_max_length=1024,
    )
    tokenizer.add_special_tokens({"additional_special_tokens": SPECIAL_TOKENS[1:]})
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(str(out_dir))
    return tokenizer


def build_model(
    tokenizer,
    seed: int = 0,
    hidden_size: int = 64,
    num_layers: int = 2,
    vocab_multiple: int = 1,
    attention_heads: int = 4,
):
    """A randomly initialised Qwen2 causal LM sized for the tokenizer (~100k parameters).

    ``attention_heads`` splits ``hidden_size`` (half as many key/value heads, at least one): vLLM's CPU
    attention supports head sizes 32, 64, 80 and up, so a model for the vLLM rollout takes 2 heads of 32.

    ``vocab_multiple`` pads the embedding rows to a multiple, as real checkpoints do (Qwen2.5's 151936
    rows hold a ~151.6k-token vocabulary): Megatron's tensor parallel splits the rows evenly over ranks."""
    if vocab_multiple < 1:
        raise ValueError(f"vocab_multiple={vocab_multiple} must be >= 1")
    if attention_heads < 1 or hidden_size % attention_heads:
        raise ValueError(f"attention_heads={attention_heads} must be >= 1 and divide hidden_size={hidden_size}")
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=-(-len(tokenizer) // vocab_multiple) * vocab_multiple,
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=attention_heads,
        num_key_value_heads=max(1, attention_heads // 2),
        max_position_embeddings=512,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        torch_dtype="float32",
    )
    model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, do_sample=True
    )
    return model


def warm_start(
    model,
    tokenizer,
    draw: Callable[[random.Random, int], list[tuple[str, str]]],
    answer_format: str,
    steps: int,
    seed: int,
    lr: float = 3e-3,
):
    """Supervised warm start on the answer format: ``steps`` batches of 32 examples ``draw(rng, 32)`` gives
    ((user message, taught answer) pairs: the gold answer, or a task's misconception or a random digit, as
    ``edge_verl_lab.demo.task.warm_start_draw`` decides), each trained to write ``answer_format.format(answer)``
    followed by end-of-turn -- a weak "base model" that RL can improve. The chat template is applied here.
    Returns the final loss."""
    rng = random.Random(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    loss = torch.tensor(0.0)
    for _ in range(steps):
        batch_ids, batch_labels = [], []
        for prompt, target in draw(rng, 32):
            prompt_ids = tokenizer.apply_chat_template(
                [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=True
            )
            if not isinstance(prompt_ids, list):
                prompt_ids = list(prompt_ids["input_ids"])
            answer_ids = tokenizer.encode(answer_format.format(target), add_special_tokens=False)
            answer_ids.append(tokenizer.eos_token_id)
            batch_ids.append(prompt_ids + answer_ids)
            batch_labels.append([-100] * len(prompt_ids) + answer_ids)
        width = max(map(len, batch_ids))
        input_ids = torch.full((len(batch_ids), width), tokenizer.pad_token_id)
        labels = torch.full((len(batch_ids), width), -100)
        attention_mask = torch.zeros((len(batch_ids), width), dtype=torch.long)
        for row, (ids, lab) in enumerate(zip(batch_ids, batch_labels)):
            input_ids[row, : len(ids)] = torch.tensor(ids)
            labels[row, : len(lab)] = torch.tensor(lab)
            attention_mask[row, : len(ids)] = 1
        loss = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    return float(loss.detach())


RECORD = "edge_verl_tiny.json"  # what the model was built from, next to its weights


def save(model, tokenizer, out_dir: str | Path, record: dict | None = None) -> Path:
    """Weights, tokenizer and ``RECORD`` (``record``, by default only who built it) in ``out_dir``."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out_dir), safe_serialization=True)
    tokenizer.save_pretrained(str(out_dir))
    (out_dir / RECORD).write_text(json.dumps(record or {"built_by": "edge_verl.demo.tiny"}))
    return out_dir
