"""Helpers the grading tests share to build students' submissions."""
from __future__ import annotations

# 200 forks asked for, each child asleep 5 s so that the granted ones stay counted; the parent
# prints how many it got and how many were refused, then kills and reaps them all
BOUNDED_FORKS = ("import os, sys, time\nkids, refused = [], 0\n"
                 "for _ in range(200):\n    try:\n        pid = os.fork()\n"
                 "    except OSError:\n"
                 "        refused += 1\n        continue\n    if pid == 0:\n        time.sleep(5)\n        os._exit(0)\n"
                 "    kids.append(pid)\nprint(len(kids), refused, flush=True)\n"
                 "for pid in kids:\n    os.kill(pid, 9)\n    os.waitpid(pid, 0)\n")


def without_demonstrations(nb):
    """``nb`` with the chapter's demonstration cells deleted, as a student may delete them (they
    carry no nbgrader metadata, so nbgrader neither restores nor needs them): the first code cell
    (the chapter's imports, by the chapter rules of book/authoring.md) and every cell from the
    first answer cell on stay. The chapter's figures, BPE runs and pretrained model would only add
    CPU time to a submission whose grade they cannot change."""
    first_code = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code")
    first_answer = next(i for i, c in enumerate(nb.cells) if c.metadata.get("nbgrader", {}).get("solution"))
    nb.cells = [c for i, c in enumerate(nb.cells) if i == first_code or i >= first_answer]
    return nb
