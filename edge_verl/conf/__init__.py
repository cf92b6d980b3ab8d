"""Hydra configs that extend verl's with edge_verl's options (``--config-path=pkg://edge_verl.conf``)."""
