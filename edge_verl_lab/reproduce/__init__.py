"""``edge-verl reproduce <table>``: a paper table from the recipes, per seed, on a fresh machine.

``tables`` describes the papers' tables (rows, recipes, reported numbers); ``pipeline`` runs the stages
(data -> train -> evaluate -> report), resumably; ``cli`` is the command line.
"""
