"""``python -m edge_verl.openrlhf reward|agent``: the path of the file to give OpenRLHF (``--reward.remote_url`` /
``--train.agent_func_path``), for ``$(...)`` in a shell command. ``python -m edge_verl.openrlhf data OUT``: the
shipped training and evaluation sets in OpenRLHF's format under OUT (``edge_verl/openrlhf/data.py``).
``python -m edge_verl.openrlhf cpu-env``: ``export`` lines of the environment a CPU run of OpenRLHF needs
(``edge_verl/openrlhf/cpu.py``), for ``eval "$(...)"``."""

import shlex
import sys

from edge_verl.openrlhf.train_ppo_ray import GEC_AGENT_FILE, REWARD_FILE

FILES = {"reward": REWARD_FILE, "agent": GEC_AGENT_FILE}
USAGE = f"usage: python -m edge_verl.openrlhf {{{'|'.join(FILES)}}} | data OUT | cpu-env"


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "data":
        from edge_verl.openrlhf.data import write_sets

        for name, path in write_sets(argv[1]).items():
            print(f"{name}\t{path}")
        return 0
    if argv == ["cpu-env"]:
        from edge_verl.openrlhf.cpu import environment

        for name, value in environment().items():
            print(f"export {name}={shlex.quote(value)}")
        return 0
    if len(argv) != 1 or argv[0] not in FILES:
        print(f"{USAGE}  (got {argv})", file=sys.stderr)
        return 2
    print(FILES[argv[0]])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
