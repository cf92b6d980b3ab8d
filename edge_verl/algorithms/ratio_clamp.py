"""verl's bound on log(pi_theta / pi_old), copied: a torch-free module so that the integration's patch table
(``internals.CORE``, imported by the CLI before any torch) can check the installed verl's bound against it."""

# verl clamps log(pi_theta / pi_old) to this range before exp (core_algos.compute_policy_loss_vanilla).
LOG_RATIO_CLAMP = 20.0
