"""The lab: the demo, the study, the papers' reproduction and their reports and plots, beside the plugin.

``edge_verl`` is the plugin a verl user installs (estimators, GEC, reward, the verl coupling, the CPU backend);
this package is what this repository does with it: ``edge-verl demo`` (``demo``), ``edge-verl study``
(``study``), ``edge-verl reproduce`` (``reproduce``, with ``evaluation`` and ``experiment``), the reports and
curves (``reporting``) and the benchmarks' helpers (``benchmarks``). The dependency runs one way: the lab
imports the plugin, the plugin never imports the lab.
"""
