"""The CPU platform's memory counters (edge_verl/integration/cpu/platform.py): verl logs them as
``perf/max_memory_allocated_gb``, which the memory benchmark (scripts/bench_memory.py) reads."""

import torch

from edge_verl.integration.cpu import platform


def test_the_cpu_platform_reports_the_process_s_resident_memory_as_what_verl_logs_as_allocated():
    device = platform._DEVICE_MODULE
    device.reset_peak_memory_stats()
    before = device.max_memory_allocated()
    assert before >= device.memory_allocated() - 2**20 > 0
    block = torch.ones(2**26)  # 256 MiB, freed at once: the peak keeps it, the resident set does not
    del block
    assert device.max_memory_allocated() - before >= 255 * 2**20
    assert device.memory_allocated() < device.max_memory_allocated() - 200 * 2**20
    device.reset_peak_memory_stats()  # the peak starts again from what is resident
    assert device.max_memory_allocated() < device.memory_allocated() + 64 * 2**20
