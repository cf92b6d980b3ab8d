"""``python -m edge_verl.openrlhf reward|agent``: the path of the file to give OpenRLHF (``--reward.remote_url`` /
``--train.agent_func_path``), for ``$(...)`` in a shell command."""

import sys

from edge_verl.openrlhf.train_ppo_ray import GEC_AGENT_FILE, REWARD_FILE

FILES = {"reward": REWARD_FILE, "agent": GEC_AGENT_FILE}

if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in FILES:
        sys.exit(f"usage: python -m edge_verl.openrlhf {{{'|'.join(FILES)}}}  (got {sys.argv[1:]})")
    print(FILES[sys.argv[1]])
