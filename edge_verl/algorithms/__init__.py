"""Pure torch: GEC (``gec.py``: its options, decisions, edits and statistics; ``gec_loss.py``: its tokens' origins
and their treatment in the loss; ``gec_layout.py``: where a correction's tokens go; ``gec_rendezvous.py``: a
group's verdicts exchanged) and the tiled policy head
(``tiled_head.py``). The estimators (EDA, GEPO) are ``edge_verl/estimators/``.

No verl, ray, hydra or omegaconf import here; randomness comes in as an argument.
"""

# GEC's agent loop in verl's agent-loop registry, selected per training row by the data's ``agent_name`` column
# (``gec.py``; its options live under ``algorithm.edge_gec``). Here, not in ``gec.py``, so that the methods'
# definitions and the data preparation name it without importing torch.
GEC_AGENT_LOOP = "edge_gec"
