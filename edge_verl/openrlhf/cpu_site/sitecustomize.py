"""Put this folder on PYTHONPATH with EDGE_VERL_OPENRLHF_CPU=1 to run OpenRLHF on CPU (edge_verl/openrlhf/cpu.py):
every Python process of the run, the ones Ray and vLLM start included, then applies its substitutions. A
``sitecustomize`` this one shadows (later on sys.path) still runs, first."""

import importlib.machinery
import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
_shadowed = importlib.machinery.PathFinder.find_spec(
    "sitecustomize", [path for path in sys.path if os.path.abspath(path or ".") != _HERE]
)
if _shadowed is not None and _shadowed.loader is not None:
    _module = importlib.util.module_from_spec(_shadowed)
    _shadowed.loader.exec_module(_module)

if os.environ.get("EDGE_VERL_OPENRLHF_CPU") == "1":
    from edge_verl.openrlhf.cpu import install

    install()
