"""Run in a fresh process by ``test_megatron_cpu_on_cpu.py`` (the adaptations patch torch process-wide):
apply the CPU adaptations, build the tiny Qwen2 as megatron's local GPTModel through mbridge (verl's
vanilla_mbridge route) from its HF weights, and print one JSON object of what the test checks."""

import json
import os
import socket
import sys
from pathlib import Path

import torch


def main(out: Path) -> dict:
    with socket.socket() as free:  # a one-process gloo group on a free port
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0", WORLD_SIZE="1")
    from edge_verl_lab.demo import tiny

    tokenizer = tiny.build_tokenizer(out)
    hf = tiny.build_model(tokenizer, seed=0)
    tiny.save(hf, tokenizer, out)
    hf.eval()

    from verl.workers.engine.megatron import transformer_impl

    from edge_verl.integration.cpu.megatron_engine import apply_megatron_cpu_adaptations

    report = {"applied": apply_megatron_cpu_adaptations(transformer_impl)}
    report["applied_again"] = apply_megatron_cpu_adaptations(transformer_impl)

    # torch: what megatron writes for its GPU lands on the CPU
    x = torch.zeros(3, device="cuda")
    report["devices"] = {
        "zeros_cuda": str(x.device),
        "tensor_index_0": str(torch.tensor([1.0], device=0).device),
        "arange_cuda_1": str(torch.arange(4, device="cuda:1").device),
        "to_cuda": str(x.to("cuda").device),
        "to_device_kwarg": str(x.to(device=torch.device("cuda"), dtype=torch.float64).device),
        "to_dtype_only": str(x.to(torch.float64).dtype),
        "dot_cuda": str(x.cuda().device),
        "new_zeros_cuda": str(x.new_zeros(2, device="cuda").device),
        "current_device": str(torch.device(torch.cuda.current_device())),
        "is_available": torch.cuda.is_available(),
    }
    report["type_names"] = [
        torch.zeros(1).type(), torch.zeros(1, dtype=torch.bfloat16).type(), torch.zeros(1).type(torch.float64).type()
    ]

    import torch.distributed as dist
    from megatron.core import parallel_state as mpu
    from megatron.core import tensor_parallel

    dist.init_process_group("gloo")
    mpu.initialize_model_parallel(1, 1)
    # verl's set_random_seed, wrapped: it now seeds megatron's RNG tracker without an accelerator
    transformer_impl.set_random_seed(7)
    tracker = tensor_parallel.get_cuda_rng_tracker()
    before = torch.get_rng_state()
    with tracker.fork():
        first = torch.rand(4)
    report["rng_restored_after_fork"] = bool(torch.equal(before, torch.get_rng_state()))
    with tracker.fork():
        second = torch.rand(4)
    report["rng_fork_advances_its_own_state"] = not torch.equal(first, second)

    from verl.models.mcore.mbridge import AutoBridge
    from verl.utils.megatron_utils import get_hf_rope_theta

    hf.config.rope_theta = get_hf_rope_theta(hf.config)  # as verl's megatron_utils does before bridging
    bridge = AutoBridge.from_config(hf.config, dtype=torch.float32)
    bridge.set_extra_args(masked_softmax_fusion=False, sequence_parallel=False)
    models = bridge.get_model(bf16=False, wrap_with_ddp=False)
    bridge.load_weights(models, str(out))
    model = models[0].eval()
    report["local_layers"] = sorted({type(module).__name__ for module in model.modules() if "Norm" in type(module).__name__})

    # a full row and a right-padded row, with verl's 2-D [batch, seq] mask (True = token)
    ids = torch.tensor([[5, 6, 7, 8, 9, 10], [11, 12, 13, 0, 0, 0]])
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0]]).bool()
    positions = torch.arange(6).expand(2, 6)
    with torch.no_grad():
        megatron_logits = model(input_ids=ids, position_ids=positions, attention_mask=mask)
        hf_logits = hf(input_ids=ids, attention_mask=mask.long()).logits
    report["logits_max_abs_diff"] = max(
        (megatron_logits[0] - hf_logits[0]).abs().max().item(), (megatron_logits[1, :3] - hf_logits[1, :3]).abs().max().item()
    )
    try:
        with torch.no_grad():
            model(input_ids=ids, position_ids=positions, attention_mask=mask.flip(-1))  # left padding
        report["left_padding"] = "accepted"
    except ValueError as error:
        report["left_padding"] = str(error)

    # export (verl's weight sync to the rollout and the HF checkpoint): every HF tensor, under its HF name
    hf_state = hf.state_dict()
    exported = {name: tensor for name, tensor in bridge.export_weights(models)}
    report["exported_names_missing"] = sorted(set(hf_state) - set(exported) - {"lm_head.weight"})
    report["exported_max_abs_diff"] = max((exported[name] - hf_state[name]).abs().max().item() for name in exported)
    return report


if __name__ == "__main__":
    print("PROBE " + json.dumps(main(Path(sys.argv[1]))))
