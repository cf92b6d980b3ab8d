"""edge_verl/openrlhf/cpu.py's switch: all of its substitutes or, where CUDA is available, none."""

from __future__ import annotations

import sys

from edge_verl.openrlhf import cpu


def test_install_replaces_everything_without_a_gpu_and_nothing_with_one(monkeypatch):
    registered = []
    monkeypatch.setattr(cpu, "register_post_import_hook", lambda patch, name: registered.append(name))
    # sys.modules entries install() writes, restored after the test
    monkeypatch.setitem(sys.modules, "flash_attn.ops.triton.cross_entropy", sys.modules.get("flash_attn.ops.triton.cross_entropy"))
    monkeypatch.delitem(sys.modules, "flash_attn.ops.triton.cross_entropy")
    monkeypatch.setitem(sys.modules, "flash_attn_2_cuda", None)
    monkeypatch.delitem(sys.modules, "flash_attn_2_cuda")

    monkeypatch.setattr(cpu, "cuda_available", lambda: True)
    assert cpu.install() is False
    assert registered == [] and "flash_attn_2_cuda" not in sys.modules and "flash_attn.ops.triton.cross_entropy" not in sys.modules

    monkeypatch.setattr(cpu, "cuda_available", lambda: False)
    assert cpu.install() is True
    assert registered == list(cpu.PATCHES) and len(registered) == 8
    assert isinstance(sys.modules["flash_attn_2_cuda"], cpu._KernelNotBuilt)
    assert sys.modules["flash_attn.ops.triton.cross_entropy"] is None
