"""Math reward: answer extraction and grading, with verl's ``compute_score`` signature on top.

Use from verl with ``reward.custom_reward_function.path=pkg://edge_verl.reward`` and
``reward.custom_reward_function.name=compute_score``.
"""

from edge_verl.reward.pool import GraderUnavailable
from edge_verl.reward.score import compute_score

__all__ = ["GraderUnavailable", "compute_score"]
