"""Grading worker process: ``python -m edge_verl.reward.worker``.

Imports only what grading needs (math-verify, sympy; no torch, no verl), warms math-verify up, prints
``ready``, then answers one JSON request per stdin line with one JSON reply per stdout line:
  request  {"id": int, "pred": str, "golds": [str, ...]}
  reply    {"id": int, "correct": bool, "reason": str}
The parent (``edge_verl.reward.pool``) enforces the deadline by killing this process.
"""

from __future__ import annotations

import json
import os
import sys


def main() -> int:
    # The protocol owns the original stdout; anything a library prints goes to stderr instead.
    out = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())

    from edge_verl.reward.grade import grade_with_math_verify

    grade_with_math_verify("1/2", ["0.5"])  # warm-up: first parse/verify pays sympy's lazy imports
    out.write("ready\n")
    out.flush()
    for line in sys.stdin:
        request = json.loads(line)
        try:
            correct, reason = grade_with_math_verify(request["pred"], request["golds"])
        except Exception as error:  # a grading failure is a wrong answer with a reason, never a crash
            correct, reason = False, f"grader_error:{type(error).__name__}"
        out.write(json.dumps({"id": request["id"], "correct": bool(correct), "reason": reason}) + "\n")
        out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
