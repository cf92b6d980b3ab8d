"""edge_verl for OpenRLHF 0.11.2 users: the math reward, GEC and the two estimators through OpenRLHF's hooks.

The only place that touches OpenRLHF (the verl coupling is ``edge_verl.integration``); ``algorithms/`` and
``reward/`` import neither. Three hooks, one module each:
- ``reward_func.py``: the file for ``--reward.remote_url`` (OpenRLHF's reward-function hook);
- ``gec_agent.py``: the file for ``--train.agent_func_path`` (OpenRLHF's agent-executor hook), GEC;
- ``estimators.py`` + ``actors.py`` + ``train_ppo_ray.py``: ``--algo.advantage.estimator gepo|edge_eda``, which
  OpenRLHF has no hook for: a launcher around its ``train_ppo_ray`` puts subclasses of its trainer and policy
  actors in their place for the run, each class and name relied on in ``internals.py`` and refused on any
  OpenRLHF but 0.11.2.
``cpu.py`` (with ``cpu_site/sitecustomize.py``) runs OpenRLHF's ``train_ppo_ray`` on a machine without a GPU,
for the tests and smoke runs only.
Options: one JSON file named by ``EDGE_VERL_OPENRLHF`` (``options.py``). Importing this package imports
nothing of OpenRLHF.
"""
