"""The only package that imports verl: registration, estimator adapter, rollout hooks, CPU backend."""
