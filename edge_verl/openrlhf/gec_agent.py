"""The file for OpenRLHF's ``--train.agent_func_path``: GEC as an agent executor.

OpenRLHF loads this file by path as an anonymous module and builds ``AgentExecutor()`` once per vLLM engine;
the executor lives in ``edge_verl.openrlhf.gec_executor`` (a regular module, so that its dataclasses and
imports resolve), see its docstring.
"""

from edge_verl.openrlhf.gec_executor import AgentExecutor

__all__ = ["AgentExecutor"]
