"""Grading worker process: ``python -m edge_verl.reward.worker``.

Imports only what grading needs (math-verify, sympy; no torch, no verl), warms math-verify up, prints
``ready``, then answers one JSON request per stdin line with one JSON reply per stdout line:
  request  {"id": int, "preds": [str, ...], "golds": [str, ...]}   candidates of both sides (forms.py)
           {"id": int, "term_checks": [[request, ...], ...]}        an answer written with an ellipsis: right
                                                                    when every request of one list is (sequences.py)
           {"id": int, "response": str, "golds": [str, ...]}        lenient policy: extract, then grade
  reply    {"id": int, "correct": bool, "reason": str, "pred": str | null}
The parent (``edge_verl.reward.pool``) enforces the deadline by killing this process.
"""

from __future__ import annotations

import json
import logging
import os
import sys


def main() -> int:
    # The protocol owns the original stdout; anything a library prints goes to stderr instead.
    out = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    # math-verify warns on every call made without its (signal-based) timeouts; the parent is the timeout.
    logging.getLogger("math_verify").setLevel(logging.ERROR)

    from edge_verl.reward.grade import grade_request

    grade_request({"preds": ["1/2"], "golds": ["0.5"]})  # warm-up: the first parse/verify pays sympy's lazy imports
    out.write("ready\n")
    out.flush()
    for line in sys.stdin:
        request = json.loads(line)
        try:
            reply = grade_request(request)
        except Exception as error:  # a grading failure is a wrong answer with a reason, never a crash
            reply = {"correct": False, "reason": f"grader_error:{type(error).__name__}", "pred": None}
        out.write(json.dumps({"id": request["id"], **reply, "correct": bool(reply["correct"])}) + "\n")
        out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
