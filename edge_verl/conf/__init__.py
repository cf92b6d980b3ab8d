"""Hydra configs that extend verl's with edge_verl's options (``--config-path=pkg://edge_verl.conf``).

``edge_ppo_trainer.yaml`` and ``edge_ppo_megatron_trainer.yaml`` are verl's trainer configs plus the config
``edge_verl_options``, which this package stores in Hydra's ConfigStore when Hydra imports it to read them: every
option's default under ``algorithm``, one section per estimator of the registry (its options class's defaults), GEC's,
the extra metrics' and the seeding's (``edge_verl.options_page.option_sections``). So an estimator's options are
settable without "+" as soon as it is registered: one of the package's, or of a module ``EDGE_VERL_FEATURE_MODULES``
names (imported here first, as in every verl process).
"""

from __future__ import annotations

import json
from typing import Any

OPTIONS_CONFIG = "edge_verl_options"


def options_node() -> dict[str, Any]:
    """``{"algorithm": {section: {option: default}}}`` for every section ``options_page.option_sections`` lists, the
    values as YAML writes them (tuples as lists)."""
    from edge_verl.options_page import option_defaults, option_sections

    return {"algorithm": {section: json.loads(json.dumps(option_defaults(config))) for section, config in option_sections().items()}}


def store_options() -> dict[str, Any]:
    """Store ``options_node()`` in Hydra's ConfigStore as ``edge_verl_options`` (again after a registration); the node."""
    from hydra.core.config_store import ConfigStore

    from edge_verl.estimators import import_feature_modules

    import_feature_modules()
    node = options_node()
    ConfigStore.instance().store(name=OPTIONS_CONFIG, node=node)
    return node


store_options()
