"""The file for OpenRLHF's ``--train.agent_func_path``: GEC as an agent executor.

OpenRLHF loads this file by path as an anonymous module and builds ``AgentExecutor()`` once per vLLM engine;
the executor lives in ``edge_verl.openrlhf.gec_executor`` (a regular module, so that its dataclasses and
imports resolve), see its docstring. Another OpenRLHF version than the pinned one is refused before any of its
modules is imported.
"""

from edge_verl.openrlhf.internals import check_installed_version

check_installed_version()

from edge_verl.openrlhf.gec_executor import AgentExecutor  # noqa: E402  (after the version check, which it must follow)

__all__ = ["AgentExecutor"]
