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
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

import nbformat

from grader import benchmarks_markdown
from grader.course.build import (
    SOLUTION_MARKER,
    build,
    course_root,
    present_assignments,
    solution_edition,
    tool_environment,
)
from grader.grading.seams import OFF_VARIABLE

# Rebinding the names the test cells call: full marks for anything under plain nbgrader.
HOSTILE_PREAMBLE = ("for _name in [n for n in globals() if n.startswith('check_')]:\n"
                    "    globals()[_name] = lambda *a, **k: None\n")
SOLUTION_BLOCK = re.compile(r"^([ \t]*)### BEGIN SOLUTION.*?### END SOLUTION[^\n]*", re.S | re.M)


class Row(NamedTuple):
    """One assignment's seconds: both graders, and what the model T(n) = fixed + n * marginal gives."""
    assignment: str
    plain: float  # nbgrader autograde
    ours: float  # grader grade (feedback included)
    per_submission: float
    fixed: float
    regrade: float  # grader grade again, every result cached
    serial: float | None  # grader grade --jobs 1, with --jobs-scaling
    plain_feedback: float  # nbgrader generate_feedback after the autograde


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


def run(command, cwd, environment: dict | None = None) -> tuple[float, str]:
    """Seconds the command took, and its standard output."""
    started = time.monotonic()
    result = subprocess.run(command, cwd=cwd, env={**tool_environment(), **(environment or {})}, capture_output=True,
                            text=True)
    if result.returncode != 0:
        print(result.stdout[-2000:] + result.stderr[-4000:], file=sys.stderr)
    return time.monotonic() - started, result.stdout


def grade_command(course: Path, assignment: str, jobs: list[str]) -> list[str]:
    return [sys.executable, "-m", "grader", "grade", assignment, "--root", str(course), "--csv",
            str(course / f"grades-{assignment}.csv"), *jobs]


def phase_report(output: str) -> str:
    """The per-phase line ``grader grade`` prints ("isolation: ...; sanitise ..., record ...")."""
    return next((line for line in output.splitlines() if line.startswith("isolation:")), "no report")


def single_learner_copy(base: Path, destination: Path, student: str) -> None:
    """The class reduced to one learner: grading it costs the fixed part plus one submission."""
    shutil.copytree(base, destination, ignore=lambda folder, names: [
        n for n in names if Path(folder).name == "submitted" and n != student])


class Copies(NamedTuple):
    """The class's folders: built once (``base``), then one copy per way of grading it."""
    base: Path
    plain: Path  # nbgrader autograde and generate_feedback
    ours: Path  # grader grade, then again with every result cached
    single: Path  # grader grade on one learner: the fixed cost
    serial: Path  # grader grade --jobs 1 (--jobs-scaling only)
    tmp: Path  # holds one more copy per speed patch switched off (``without``)

    def without(self, patch: str) -> Path:
        return self.tmp / f"without-{patch}"


class ScoreCheck(NamedTuple):
    """Both graders' scores compared: honest submissions, those scored differently, points given to hostile ones."""
    honest: list[tuple[str, str]]
    differing: list[tuple]
    hostile_plain: float
    hostile_ours: float


def main(argv=None) -> int:
    args = parse_arguments(argv)
    if args.markdown:  # a page it cannot write fails now, not after half an hour of grading
        benchmarks_markdown.check_section(args.markdown, "bench-grade")
    when = benchmarks_markdown.provenance(" ".join(["python -m grader bench-grade",
                                                    *(argv if argv is not None else sys.argv[1:])]))
    root = course_root()
    assignments = args.assignments or present_assignments(root)
    with tempfile.TemporaryDirectory(prefix="bench-grade-") as tmp:
        folders = Copies(*(Path(tmp) / name for name in ("base", "plain", "isolated", "single", "serial")), Path(tmp))
        roster, variants = prepare_class(root, folders, assignments, args)
        total = len(roster) * len(assignments)
        print(f"{len(roster)} learners x {len(assignments)} notebooks = {total} submissions", flush=True)
        rows, patch_seconds, isolation = grade_every_way(folders, assignments, len(roster), variants, args)
        check = compare_scores(folders, assignments, roster)
        print_summary(rows, len(roster), total, check, patch_seconds if variants else None, args.jobs_scaling)
        if args.markdown:
            jobs_text = f"`--jobs {args.jobs}`" if args.jobs else f"default jobs (one per core: {os.cpu_count()})"
            benchmarks_markdown.write_section(args.markdown, "bench-grade", benchmarks_markdown.grade_section(
                rows, learners=len(roster), when=when, isolation=isolation or "unknown", jobs=jobs_text,
                identical=(len(check.honest) - len(check.differing), len(check.honest)),
                hostile_points=(check.hostile_plain, check.hostile_ours),
                patch_seconds=patch_seconds if variants else None))
            print(f"wrote the bench-grade section of {args.markdown}")
    return 0


def parse_arguments(argv) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m grader bench-grade", description=__doc__)
    parser.add_argument("--learners", type=int, default=60)
    parser.add_argument("--assignments", nargs="*", default=None)
    parser.add_argument("--jobs", type=int, default=None)
    parser.add_argument("--compare-patches", action="store_true",
                        help="also grade the class once with each speed patch switched off (grader.grading.seams), and "
                        "once with all of them off (--public-apis-only); print each run's time as a ratio to the "
                        "run with every patch on")
    parser.add_argument("--jobs-scaling", action="store_true",
                        help="also grade the class with --jobs 1, and print the ratio to the default jobs")
    parser.add_argument("--markdown", type=Path, default=None, metavar="PATH",
                        help="also write the results between PATH's bench-grade markers (docs/benchmarks.md)")
    return parser.parse_args(argv)


def prepare_class(root: Path, folders: Copies, assignments: list[str], args) -> tuple[dict[str, str], list[str]]:
    """Build the course and its class in ``folders.base`` and copy it once per way of grading; the roster, and
    the speed patches graded without (``--compare-patches``)."""
    base = folders.base
    base.mkdir()
    for name in ["nbgrader_config.py", "pyproject.toml"]:
        shutil.copy2(root / name, base / name)
    shutil.copytree(root / "source", base / "source", ignore=shutil.ignore_patterns("*.ipynb"))
    build(base, assignments)
    roster = make_class(base, assignments, args.learners)
    shutil.copytree(base, folders.plain)
    shutil.copytree(base, folders.ours)
    single_learner_copy(base, folders.single, next(iter(roster)))
    if args.jobs_scaling:
        shutil.copytree(base, folders.serial)
    variants = patch_variants() if args.compare_patches else []
    for name in variants:
        shutil.copytree(base, folders.without(name))
    return roster, variants


def grade_every_way(folders: Copies, assignments: list[str], learners: int, variants: list[str],
                    args) -> tuple[list[Row], dict[str, float], str | None]:
    """Each assignment's Row, the class's seconds with each speed patch off, and the isolation level reported."""
    patch_seconds = {name: 0.0 for name in ["all on", *variants]}
    jobs = ["--jobs", str(args.jobs)] if args.jobs else []
    # Alternate the graders assignment by assignment, so that a change in the machine's load
    # during the run falls on all of them.
    rows, isolation = [], None
    for a in assignments:
        row, report, again = grade_assignment(folders, a, learners, jobs, variants, patch_seconds, args.jobs_scaling)
        rows.append(row)
        executed = re.search(r"(\d+) notebooks executed, (\d+) from cache", again)
        found = re.match(r"isolation: ([^;]+)", phase_report(report))
        isolation = isolation or (found.group(1) if found else None)
        # progress only: the numbers are in the table printed at the end, once
        print(f"  {a:<14} graded; {phase_report(report)}; re-grade: "
              + (f"{executed.group(1)} executed, {executed.group(2)} from cache" if executed else "no report"),
              flush=True)
    return rows, patch_seconds, isolation


def grade_assignment(folders: Copies, a: str, learners: int, jobs: list[str], variants: list[str],
                     patch_seconds: dict[str, float], jobs_scaling: bool) -> tuple[Row, str, str]:
    """One assignment graded every way, side by side (adds to ``patch_seconds``): its Row, and the output of
    ``grader grade`` and of its cached re-grade."""
    plain, ours, single, serial = folders.plain, folders.ours, folders.single, folders.serial
    plain_a, _ = run([sys.executable, "-m", "nbgrader", "autograde", a, "--force"], plain)
    # grader grade also writes every learner's feedback: what nbgrader does in a second command
    plain_feedback_a, _ = run([sys.executable, "-m", "nbgrader", "generate_feedback", a, "--force"], plain)
    ours_a, report = run(grade_command(ours, a, jobs), ours)
    patch_seconds["all on"] = patch_seconds.get("all on", 0.0) + ours_a
    for name in variants:  # side by side with the run above, in the same order every assignment
        patch_seconds[name] += run(grade_command(folders.without(name), a, jobs),
                                   folders.without(name), {OFF_VARIABLE: name})[0]
    # the same command again: every job's result is cached, so only nbgrader's steps run
    again_a, again = run(grade_command(ours, a, jobs), ours)
    one_a, _ = run(grade_command(single, a, jobs), single)
    serial_a = run(grade_command(serial, a, ["--jobs", "1"]), serial)[0] if jobs_scaling else None
    # T(n) = fixed + n * per_submission, from the class and the one-learner copy
    per_submission = (ours_a - one_a) / (learners - 1) if learners > 1 else ours_a
    fixed = one_a - per_submission
    return Row(a, plain_a, ours_a, per_submission, fixed, again_a, serial_a, plain_feedback_a), report, again


def compare_scores(folders: Copies, assignments: list[str], roster: dict[str, str]) -> ScoreCheck:
    run([sys.executable, "-m", "nbgrader", "export", "--to=grades.csv"], folders.plain)
    plain_scores = scores(folders.plain / "grades.csv")
    our_scores = {}
    for a in assignments:
        our_scores.update(scores(folders.ours / f"grades-{a}.csv"))
    honest = [(a, s) for a in assignments for s, kind in roster.items() if kind != "hostile"]
    differing = [(a, s, plain_scores.get((a, s)), our_scores.get((a, s))) for a, s in honest
                 if plain_scores.get((a, s)) != our_scores.get((a, s))]
    hostile_plain = sum(plain_scores.get((a, s), 0) for a in assignments for s, k in roster.items()
                        if k == "hostile")
    hostile_ours = sum(our_scores.get((a, s), 0) for a in assignments for s, k in roster.items() if k == "hostile")
    return ScoreCheck(honest, differing, hostile_plain, hostile_ours)


def print_summary(rows: list[Row], learners: int, total: int, check: ScoreCheck,
                  patch_seconds: dict[str, float] | None, jobs_scaling: bool) -> None:
    plain_seconds, our_seconds = sum(r.plain for r in rows), sum(r.ours for r in rows)
    feedback_seconds = sum(r.plain_feedback for r in rows)
    print_table(rows, learners)
    print(f"plain nbgrader autograde: {plain_seconds:7.1f} s  ({plain_seconds / total:.2f} s per submission)")
    print(f"  and then generate_feedback: {plain_seconds + feedback_seconds:7.1f} s "
          f"({(plain_seconds + feedback_seconds) / total:.2f} s per submission)")
    print(f"grader grade (isolated, feedback included):  {our_seconds:7.1f} s  ({our_seconds / total:.2f} s "
          f"per submission)")
    print(f"speed-up: {plain_seconds / our_seconds:.2f}x against autograde alone, "
          f"{(plain_seconds + feedback_seconds) / our_seconds:.2f}x against autograde and feedback")
    print(f"fixed cost per grader grade run (median over assignments): {median([r.fixed for r in rows]):.1f} s; "
          f"per submission beyond it: {median([r.per_submission for r in rows]):.2f} s")
    if jobs_scaling:
        print(f"--jobs 1 against the default: {sum(r.serial for r in rows) / our_seconds:.2f}x")
    if patch_seconds:
        print_patch_table(patch_seconds)
    print(f"re-grading the unchanged class (cached results): {sum(r.regrade for r in rows):7.1f} s")
    print(f"honest submissions with identical scores: {len(check.honest) - len(check.differing)}/{len(check.honest)}")
    for row in check.differing[:10]:
        print("  differs:", row)
    print(f"points given to hostile submissions: plain nbgrader {check.hostile_plain:.0f}, grader grade "
          f"{check.hostile_ours:.0f}")


def patch_variants() -> list[str]:
    """Each speed patch's name (switched off alone), then "all" (every one off: ``--public-apis-only``)."""
    from grader.grading import seams
    from grader.grading.feedback import highlight_cache, template_cache
    return ([patch.name for patch in seams.patches() if patch.kind == seams.SPEED]
            + [template_cache.NAME, highlight_cache.NAME, "all"])


def print_patch_table(seconds: dict[str, float]) -> None:
    """What each speed patch is worth: the class's time without it, as a ratio to the time with every patch on."""
    base = seconds["all on"]
    print(f"{'switched off':<20} {'ratio to all on':>16}  (> 1: the patch saves that fraction of a class run)")
    for name, value in seconds.items():
        if name != "all on":
            print(f"{name:<20} {value / base:15.3f}x")


def median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2] if ordered else 0.0


def print_table(rows: list[Row], learners: int) -> None:
    """One line per assignment: both graders' seconds, their ratio, per-submission and fixed cost."""
    scaling = any(r.serial for r in rows)
    print(f"{'assignment':<14} {'plain s':>8} {'ours s':>8} {'ratio':>6} {'plain/sub':>9} {'ours/sub':>9} "
          f"{'marginal':>9} {'fixed s':>8} {'regrade s':>9}" + (f" {'jobs-1 s':>8} {'jobs x':>6}" if scaling else "")
          + f" {'+fb s':>7} {'ratio':>6}")
    for r in rows:
        print(f"{r.assignment:<14} {r.plain:8.1f} {r.ours:8.1f} {r.plain / r.ours:5.2f}x {r.plain / learners:9.2f} "
              f"{r.ours / learners:9.2f} {r.per_submission:9.2f} {r.fixed:8.1f} {r.regrade:9.1f}"
              + (f" {r.serial:8.1f} {r.serial / r.ours:5.2f}x" if scaling else "")
              + f" {r.plain + r.plain_feedback:7.1f} {(r.plain + r.plain_feedback) / r.ours:5.2f}x")
