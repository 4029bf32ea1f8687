"""PrairieLearn: the external grader's results.json, from the same per-test data as Gradescope's.

PrairieLearn mounts a job at /grade (``PL_ROOT``): the learner's files in student/, the question's
tests/ folder (here: the unpacked Gradescope bundle, ``course/`` and ``autograder.json``), and reads
results/results.json: ``score`` from 0 to 1, ``tests[]`` with ``points``, ``max_points`` and
``message``, and ``gradable: false`` when the notebook cannot be read (PrairieLearn then asks for a new
submission instead of recording a zero). Run it as the question's ``entrypoint``:
``python -c "from grader.grading.export.prairielearn import main; main()"``.
"""
from __future__ import annotations

import os
import sys
import traceback
from pathlib import Path


def results_json(graded) -> dict:
    possible = graded.max_score
    tests = [{"name": t.name, "points": t.score, "max_points": t.max_score, "message": t.output,
              "output": "" if t.status == "passed" else t.output} for t in graded.tests]
    data = {"gradable": bool(graded.readable), "score": (graded.score / possible) if possible > 0 else 0.0,
            "points": graded.score, "max_points": possible, "message": "\n".join(graded.notes), "tests": tests}
    if not graded.readable:
        data["message"] = ("Your notebook could not be read, so it was not graded. " + data["message"]).strip()
    return data


def failed_json(why: str) -> dict:
    return {"gradable": True, "score": 0.0, "message": "Grading failed: this is not a verdict on your work; tell your "
            "instructor.", "tests": [{"name": "grading failed", "points": 0.0, "max_points": 0.0,
                                     "message": "the autograder failed before it could grade this submission"}]}


def main() -> int:
    from grader.grading.export.gradescope import grade_bundle, write_json

    root = Path(os.environ.get("PL_ROOT") or "/grade")
    try:
        graded, _ = grade_bundle(root / "tests", root / "student", root)
        data = results_json(graded)
    except BaseException:  # noqa: BLE001 - fail closed, never crash
        print(traceback.format_exc(), file=sys.stderr)
        data = failed_json("")
    write_json(root / "results" / "results.json", data)
    return 0
