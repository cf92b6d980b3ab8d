"""Put this folder on PYTHONPATH with EDGE_VERL_OPENRLHF_CPU=1 to run OpenRLHF on CPU (edge_verl/openrlhf/cpu.py):
every Python process of the run, the ones Ray and vLLM start included, then applies its substitutions."""

import os

if os.environ.get("EDGE_VERL_OPENRLHF_CPU") == "1":
    from edge_verl.openrlhf.cpu import install

    install()
