"""``edge-verl study``: methods x seeds of real verl runs on one CPU task, and a report that says whether
they help (``runner``: the runs, resumable; ``report``: the numbers, read back from each run's metrics file).
No verl import: the runs are verl subprocesses, as in the demo."""
