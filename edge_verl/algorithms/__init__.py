"""Pure torch: group statistics, EDA, GEPO (+ its threshold state), GEC decisions.

No verl, ray, hydra or omegaconf import here; randomness comes in as an argument.
"""
