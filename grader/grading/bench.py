"""``make bench-grade``: plain ``nbgrader autograde`` against ``grader grade`` on one class.

Builds a class of N learners (a quarter each correct, partial, wrong, hostile) for every
assignment, grades copies of it both ways in the same run, and prints both times, their
ratio, and whether honest learners got identical scores. Times are noisy on a shared
machine; only the ratio measured side by side means something.
"""
from __future__ import annotations

import argparse
import copy
import csv
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat

from grader.course.build import SOLUTION_MARKER, build, course_root, present_assignments, solution_edition, tool_environment

# Rebinding the names the test cells call: full marks for anything under plain nbgrader.
HOSTILE_PREAMBLE = ("for _name in [n for n in globals() if n.startswith('check_')]:\n"
                    "    globals()[_name] = lambda *a, **k: None\n")
SOLUTION_BLOCK = re.compile(r"^([ \t]*)### BEGIN SOLUTION.*?### END SOLUTION[^\n]*", re.S | re.M)


def learner_notebook(source_nb, release_nb, kind: str):
    """A submission of one kind: 'correct', 'partial' (first exercise only), 'wrong', 'hostile'."""
    if kind == "correct":
        return solution_edition(source_nb)
    nb = copy.deepcopy(release_nb)
    solutions = {c.id: c.source for c in source_nb.cells if c.metadata.get("nbgrader", {}).get("solution")}
    first = True
    for cell in nb.cells:
        if cell.id not in solutions:
            continue
        if kind == "partial":
            if first:
                cell.source = SOLUTION_MARKER.sub("", solutions[cell.id])
            first = False
        else:  # wrong and hostile: the right signature, a wrong body
            cell.source = SOLUTION_BLOCK.sub(lambda m: m.group(1) + "return None", solutions[cell.id])
    if kind == "hostile":
        first_code = next(c for c in nb.cells if c.cell_type == "code")
        first_code.source += "\n" + HOSTILE_PREAMBLE
    return nb


def make_class(course: Path, assignments: list[str], learners: int) -> dict[str, str]:
    kinds = ["correct", "partial", "wrong", "hostile"]
    roster = {f"learner{i:03d}": kinds[i % 4] for i in range(learners)}
    for assignment in assignments:
        source_nb = nbformat.read(course / "source" / assignment / f"{assignment}.ipynb", as_version=4)
        release_nb = nbformat.read(course / "release" / assignment / f"{assignment}.ipynb", as_version=4)
        for student, kind in roster.items():
            path = course / "submitted" / student / assignment / f"{assignment}.ipynb"
            path.parent.mkdir(parents=True)
            nbformat.write(learner_notebook(source_nb, release_nb, kind), path)
    return roster


def scores(csv_path: Path) -> dict[tuple[str, str], float]:
    with open(csv_path, newline="") as f:
        return {(r["assignment"], r["student_id"]): float(r["raw_score"]) for r in csv.DictReader(f)}


def run(command, cwd) -> tuple[float, str]:
    """Seconds the command took, and its standard output."""
    started = time.monotonic()
    result = subprocess.run(command, cwd=cwd, env=tool_environment(), capture_output=True, text=True)
    if result.returncode != 0:
        print(result.stdout[-2000:] + result.stderr[-4000:], file=sys.stderr)
    return time.monotonic() - started, result.stdout


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grader bench-grade", description=__doc__)
    parser.add_argument("--learners", type=int, default=60)
    parser.add_argument("--assignments", nargs="*", default=None)
    parser.add_argument("--jobs", type=int, default=None)
    args = parser.parse_args(argv)
    root = course_root()
    assignments = args.assignments or present_assignments(root)
    with tempfile.TemporaryDirectory(prefix="bench-grade-") as tmp:
        base = Path(tmp) / "base"
        base.mkdir()
        for name in ["nbgrader_config.py", "pyproject.toml"]:
            shutil.copy2(root / name, base / name)
        shutil.copytree(root / "source", base / "source", ignore=shutil.ignore_patterns("*.ipynb"))
        build(base, assignments)
        roster = make_class(base, assignments, args.learners)
        plain, ours = Path(tmp) / "plain", Path(tmp) / "isolated"
        shutil.copytree(base, plain)
        shutil.copytree(base, ours)
        total = len(roster) * len(assignments)
        print(f"{len(roster)} learners x {len(assignments)} notebooks = {total} submissions", flush=True)
        jobs = ["--jobs", str(args.jobs)] if args.jobs else []
        # Alternate the two graders assignment by assignment, so that a change in the machine's
        # load during the run falls on both of them.
        plain_seconds = our_seconds = regrade_seconds = 0.0
        for a in assignments:
            plain_a, _ = run([sys.executable, "-m", "nbgrader", "autograde", a, "--force"], plain)
            ours_a, report = run([sys.executable, "-m", "grader", "grade", a, "--root", str(ours), "--csv",
                                  str(ours / f"grades-{a}.csv"), *jobs], ours)
            isolation = next((line for line in report.splitlines() if line.startswith("isolation:")), "no report")
            # the same command again: every job's result is cached, so only nbgrader's steps run
            again_a, again = run([sys.executable, "-m", "grader", "grade", a, "--root", str(ours), "--csv",
                                  str(ours / f"grades-{a}.csv"), *jobs], ours)
            executed = re.search(r"(\d+) notebooks executed, (\d+) from cache", again)
            print(f"  {a:<14} plain {plain_a:7.1f} s   grader grade {ours_a:7.1f} s   {plain_a / ours_a:5.2f}x\n"
                  f"                 {isolation}\n"
                  f"                 re-grade {again_a:7.1f} s: "
                  + (f"{executed.group(1)} executed, {executed.group(2)} from cache" if executed else "no report"),
                  flush=True)
            plain_seconds, our_seconds = plain_seconds + plain_a, our_seconds + ours_a
            regrade_seconds += again_a
        run([sys.executable, "-m", "nbgrader", "export", "--to=grades.csv"], plain)
        plain_scores = scores(plain / "grades.csv")
        our_scores = {}
        for a in assignments:
            our_scores.update(scores(ours / f"grades-{a}.csv"))
        honest = [(a, s) for a in assignments for s, kind in roster.items() if kind != "hostile"]
        differing = [(a, s, plain_scores.get((a, s)), our_scores.get((a, s))) for a, s in honest
                     if plain_scores.get((a, s)) != our_scores.get((a, s))]
        hostile_plain = sum(plain_scores.get((a, s), 0) for a in assignments for s, k in roster.items() if k == "hostile")
        hostile_ours = sum(our_scores.get((a, s), 0) for a in assignments for s, k in roster.items() if k == "hostile")
        print(f"plain nbgrader autograde: {plain_seconds:7.1f} s  ({plain_seconds / total:.2f} s per submission)")
        print(f"grader grade (isolated):  {our_seconds:7.1f} s  ({our_seconds / total:.2f} s per submission)")
        print(f"speed-up: {plain_seconds / our_seconds:.2f}x")
        print(f"re-grading the unchanged class (cached results): {regrade_seconds:7.1f} s")
        print(f"honest submissions with identical scores: {len(honest) - len(differing)}/{len(honest)}")
        for row in differing[:10]:
            print("  differs:", row)
        print(f"points given to hostile submissions: plain nbgrader {hostile_plain:.0f}, grader grade {hostile_ours:.0f}")
    return 0
