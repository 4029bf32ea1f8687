"""``python -m grader export ASSIGNMENT... --to canvas|moodle|csv``: the gradebook, as an LMS imports it."""
from __future__ import annotations

import sys
from pathlib import Path

from grader.grading.run.terminal import printable

TARGETS = ("canvas", "moodle", "csv")
LISTED = 50  # names printed per list; the count is always whole


def add_arguments(parser) -> None:
    parser.add_argument("assignment", nargs="+", help="assignment ids, e.g. 03_backward (one column each)")
    parser.add_argument("--to", required=True, choices=TARGETS, help="canvas (gradebook import), moodle (grade "
                        "import, with feedback) or csv (nbgrader's columns, quoted)")
    parser.add_argument("--root", type=Path, default=None, help="course root (default: this repository)")
    parser.add_argument("--roster", type=Path, default=None,
                        help="CSV of learners: nbgrader_id, name, email, sis_user_id, sis_login_id, lms_user_id, "
                             "section, username, idnumber (docs/instructors.md)")
    parser.add_argument("--out", type=Path, default=None, help="the file to write (default: build/exports/TO-...csv)")
    parser.add_argument("--missing", choices=("zero", "blank"), default="zero",
                        help="what a learner without a submission gets (default: zero)")
    parser.add_argument("--canvas-id", action="append", default=[], metavar="ASSIGNMENT=ID",
                        help="Canvas's id of an assignment's column (repeat per assignment); without it Canvas creates "
                             "a new assignment")
    parser.add_argument("--canvas-export", type=Path, default=None,
                        help="a CSV exported from Canvas: fill its matching columns, keep every other byte")
    parser.add_argument("--moodle-id", choices=("email", "username", "idnumber"), default="email",
                        help="the roster field Moodle matches learners by (default: email)")


def _listed(what: str, names: list[str]) -> None:
    if names:
        shown = ", ".join(printable(n, 80) for n in names[:LISTED]) + (" ..." if len(names) > LISTED else "")
        print(f"{what} ({len(names)}): {shown}", file=sys.stderr)


def export(args) -> int:
    from grader.course import course_root
    from grader.grading.export.gradebook import GradebookError, read_class
    from grader.grading.export.roster import RosterError, read_roster, reconcile

    root = Path(args.root or course_root()).resolve()
    assignments = list(dict.fromkeys(args.assignment))
    canvas_ids = _canvas_ids(args.canvas_id)
    if canvas_ids is None:
        return 2
    try:
        roster = read_roster(args.roster) if args.roster else None
        grades = read_class(root, assignments)
    except (RosterError, GradebookError) as error:
        print(printable(str(error), 1000), file=sys.stderr)
        return 2
    for warning in grades.warnings:
        print(f"warning: {printable(warning, 300)}", file=sys.stderr)
    matched = reconcile(roster, grades)
    if roster is None and args.to != "csv":
        matched = _known_by_nbgrader_id(matched, args)
    _listed("in the gradebook but not in the roster", matched.not_in_roster)
    _listed(f"no submission (--missing {args.missing}: {'0' if args.missing == 'zero' else 'left blank'})",
            [f"{s} ({a})" for s, a in matched.no_submission])
    stem = "-".join(assignments) if len(assignments) <= 3 else f"{assignments[0]}-and-{len(assignments) - 1}-more"
    out = Path(args.out or root / "build" / "exports" / f"{args.to}-{stem}.csv")
    data = _exported(args, grades, matched, canvas_ids)
    if data is None:
        return 2
    out.parent.mkdir(parents=True, exist_ok=True)
    temporary = out.with_name(f".{out.name}.tmp")
    temporary.write_bytes(data.encode("utf-8"))
    temporary.replace(out)
    print(f"wrote {out} ({args.to}: {len(assignments)} assignment(s), {len(matched.learners)} learner(s) known)")
    return 0


def _canvas_ids(items: list[str]) -> dict[str, str] | None:
    """--canvas-id's ASSIGNMENT=ID pairs, or None once the mistake is printed."""
    try:
        canvas_ids = dict(item.split("=", 1) for item in items)
    except ValueError:
        print("--canvas-id takes ASSIGNMENT=ID, e.g. --canvas-id 03_backward=4721", file=sys.stderr)
        return None
    bad = {a: i for a, i in canvas_ids.items() if not i.isdigit()}
    if bad:
        print(f"a Canvas id is a number: {bad}", file=sys.stderr)
        return None
    return canvas_ids


def _known_by_nbgrader_id(matched, args):
    """With no --roster, the learners as the LMS must match them: by their nbgrader id, said once."""
    print("no --roster: learners are known only by their nbgrader id" + (
          ", taken as their SIS Login ID" if args.to == "canvas" else
          (", taken as their Moodle username" if args.moodle_id == "username" else "")), file=sys.stderr)
    if args.to == "canvas":
        from dataclasses import replace

        matched = type(matched)([replace(learner, sis_login_id=learner.sis_login_id or learner.nbgrader_id)
                                 for learner in matched.learners],
                                matched.not_in_roster, matched.no_submission)
    elif args.moodle_id == "username":
        from dataclasses import replace

        matched = type(matched)([replace(learner, username=learner.username or learner.nbgrader_id)
                                 for learner in matched.learners],
                                matched.not_in_roster, matched.no_submission)
    return matched


def _exported(args, grades, matched, canvas_ids: dict[str, str]) -> str | None:
    """The file's text in the format ``--to`` names (who was left out printed), or None once the problem is."""
    from grader.grading.export import canvas, moodle, nbgrader_csv

    if args.to == "canvas" and args.canvas_export:
        try:
            text = args.canvas_export.read_bytes().decode("utf-8")
            filled, unmatched = canvas.fill_export(text, grades, matched.learners, canvas_ids, args.missing)
        except (OSError, UnicodeDecodeError, ValueError) as error:
            print(f"the Canvas export {printable(str(args.canvas_export), 200)} cannot be filled: "
                  f"{printable(str(error), 300)}", file=sys.stderr)
            return None
        for what, names in unmatched.items():
            _listed(f"Canvas export: {what}", names)
        return filled
    if args.to == "canvas":
        data, left_out = canvas.write_import(grades, matched.learners, canvas_ids, args.missing)
        _listed("NOT EXPORTED: no Canvas ID, SIS User ID or SIS Login ID in the roster", left_out)
    elif args.to == "moodle":
        data, left_out = moodle.write_import(grades, matched.learners, args.moodle_id, args.missing)
        _listed(f"NOT EXPORTED: no {args.moodle_id} in the roster", left_out)
    else:
        data = nbgrader_csv.write_csv(grades, matched.learners, args.missing)
    return data


def main(argv: list[str]) -> int:
    """``python -m grader export ...`` and ``python -m grader gradescope ...`` (argv[0] names which)."""
    import argparse

    if argv[:1] == ["gradescope"]:
        parser = argparse.ArgumentParser(prog="python -m grader gradescope", description=(
            "write a Gradescope autograder zip (setup.sh, run_autograder, the course's hidden tests) for ASSIGNMENT"))
        parser.add_argument("assignment", help="assignment id, e.g. 04_rmsnorm")
        parser.add_argument("--root", type=Path, default=None, help="course root (default: this repository)")
        parser.add_argument("--out", type=Path, default=None, help="folder for ASSIGNMENT.zip (default: "
                                                                   "build/gradescope)")
        args = parser.parse_args(argv[1:])
        from grader.grading.export.gradescope import build_zip

        try:
            path = build_zip(args.root, args.assignment, args.out)
        except FileNotFoundError as error:
            print(printable(str(error), 500), file=sys.stderr)
            return 2
        print(f"wrote {path}: upload it as the assignment's autograder (Gradescope: Configure Autograder → Zip file)")
        return 0
    parser = argparse.ArgumentParser(prog="python -m grader export", description=__doc__)
    add_arguments(parser)
    return export(parser.parse_args(argv[1:]))
