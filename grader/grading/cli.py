"""``python -m grader``: build the course, grade submissions, report on a class."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

WAIT_HELP = ("if another grade, build or report is using this course, wait for it to finish (default: refuse, "
             "naming it, with exit code 4)")


def main(argv: list[str] | None = None) -> int:
    from grader.course import course_root, skip_iri_grammars

    skip_iri_grammars()  # before anything imports nbformat
    parser, grade_parser = _parser()
    if argv is None:
        argv = sys.argv[1:]
    if argv[:1] == ["bench-grade"]:
        from grader.grading.run.bench import main as bench

        return bench(argv[1:])
    if argv[:1] in (["export"], ["gradescope"]):
        from grader.grading.export.command import main as export

        return export(argv)
    args, extra = parser.parse_known_args(argv)
    if extra and (args.command != "grade" or not all(a.startswith("--GradeConfig.") for a in extra)):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if args.command == "grade" and args.help_all:
        from grader.grading.config import help_all

        print(help_all())
        return 0
    if args.command == "grade" and not args.assignment:
        grade_parser.error("the following arguments are required: assignment")
    from grader.grading.run.course_lock import EXIT_LOCKED, CourseLocked, course_lock

    try:
        # one run per course: build and grade write release/, the gradebook and build/grading/; report reads them
        with course_lock(args.root or course_root(), args.command, wait=args.wait, shared=args.command == "report"):
            return _command(args, extra)
    except CourseLocked as refused:
        print(f"nothing was done: {refused}", file=sys.stderr)
        return EXIT_LOCKED


def _parser() -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    """The command line's parser, and its grade command's (which reports a missing assignment itself)."""
    parser = argparse.ArgumentParser(prog="python -m grader", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    _add_build(commands)
    grade_parser = _add_grade(commands)
    _add_report(commands)
    # parsed by their own modules: listed here for --help
    commands.add_parser("bench-grade", help="time plain nbgrader against grader grade on a generated class",
                        add_help=False)
    commands.add_parser("export", help="grades from the gradebook for Canvas, Moodle or a quoted CSV "
                        "(grader/grading/export/)", add_help=False)
    commands.add_parser("gradescope", help="a Gradescope autograder zip for one assignment (build/gradescope/)",
                        add_help=False)
    return parser, grade_parser


def _add_build(commands) -> None:
    build_parser = commands.add_parser("build", help="regenerate source notebooks, release/, notebooks/, solutions/")
    build_parser.add_argument("assignments", nargs="*", help="assignment ids (default: every one present)")
    build_parser.add_argument("--root", type=Path, default=None,
                              help="course root, e.g. a copy in a private home (default: this repository)")
    build_parser.add_argument("--wait", action="store_true", help=WAIT_HELP)


def _add_grade(commands) -> argparse.ArgumentParser:
    from grader.grading.config import GradeConfig

    grade_parser = commands.add_parser("grade", help="autograde submitted/*/ASSIGNMENT and export scores")
    grade_parser.add_argument("assignment", nargs="*",
                              help="assignment id, e.g. 03_backward; several are graded one after another by the "
                                   "same warm workers (one start-up cost, one CSV)")
    grade_parser.add_argument("--root", type=Path, default=None, help="course root (default: this repository)")
    grade_parser.add_argument("--csv", type=Path, default=None, help="where to write the scores (default: "
                                                                     "build/grades.csv)")
    # Every option is a GradeConfig trait (grader/grading/config.py): default < nbgrader_config.py < command line.
    grade_parser.add_argument("--timeout", type=float, default=None,
                              help="seconds one cell may run (GradeConfig.cell_timeout, default "
                                   f"{GradeConfig.cell_timeout.default_value:g})")
    grade_parser.add_argument("--notebook-timeout", type=float, default=None,
                              help="seconds one notebook may run, all its cells together "
                                   f"(GradeConfig.notebook_timeout, default "
                                   f"{GradeConfig.notebook_timeout.default_value:g})")
    grade_parser.add_argument("--jobs", type=int, default=None,
                              help="notebooks graded in parallel (GradeConfig.jobs, default: all cores)")
    grade_parser.add_argument("--isolation", default=None, help="auto, user, userns or basic (GradeConfig.isolation)")
    grade_parser.add_argument("--cache-dir", default=None,
                              help="folder of cached job results (GradeConfig.cache_dir, default build/grading-cache)")
    grade_parser.add_argument("--no-cache", dest="use_cache", action="store_const", const=False, default=None,
                              help="execute every notebook again (GradeConfig.use_cache=False)")
    grade_parser.add_argument("--scheduler", default=None,
                              help="a Dask scheduler (tcp://HOST:PORT): execute on its workers (GradeConfig.scheduler)")
    grade_parser.add_argument("--public-apis-only", action="store_const", const=True, default=None,
                              help="no speed patch of another library's private internals: slower, same grades "
                              "(GradeConfig.public_apis_only)")
    grade_parser.add_argument("--wait", action="store_true", help=WAIT_HELP)
    grade_parser.add_argument("--help-all", action="store_true",
                              help="list every GradeConfig setting (also --GradeConfig.NAME=VALUE) and exit")
    return grade_parser


def _add_report(commands) -> None:
    report_parser = commands.add_parser("report", help="a class report from the last grading: pass rates, "
                                        "misconceptions, attempt logs (build/reports/ASSIGNMENT.html, .csv, .json)")
    report_parser.add_argument("assignment", help="assignment id, e.g. 04_rmsnorm")
    report_parser.add_argument("--root", type=Path, default=None, help="course root (default: this repository)")
    report_parser.add_argument("--out", type=Path, default=None, help="folder for the report (default: build/reports)")
    report_parser.add_argument("--identify", action="store_true",
                               help="name learners and show groups of fewer than 5 exactly (default: neither)")
    report_parser.add_argument("--wait", action="store_true", help=WAIT_HELP)


def _command(args, extra: list[str]) -> int:
    from grader.course import course_root
    from grader.grading.startup import may_execute, names_a_scheduler

    if args.command == "build":
        from grader.course.build import build

        for assignment in build(args.root, assignments=args.assignments or None):
            print(f"built {assignment}: release/, notebooks/, solutions/")
        return 0
    if args.command == "grade":
        root = args.root or course_root()
        local = not args.scheduler if args.scheduler is not None else not names_a_scheduler(root, extra)
        if args.public_apis_only:  # before the sandboxes' warm processes start: they inherit it
            from grader.grading.seams import switch_off_speed_patches

            switch_off_speed_patches()
        if local and may_execute(root, args.assignment, args.use_cache):
            from grader.grading.slots.slot_pool import prestart

            prestart()  # local slots: their warm processes import while this one imports nbgrader
        from grader.grading.run.pipeline import grade

        return grade(args.assignment if len(args.assignment) > 1 else args.assignment[0], root=args.root,
                     csv_path=args.csv, jobs=args.jobs, cell_seconds=args.timeout,
                     notebook_seconds=args.notebook_timeout, argv=extra, isolation=args.isolation,
                     cache_dir=args.cache_dir, use_cache=args.use_cache,
                     scheduler=args.scheduler, public_apis_only=args.public_apis_only, wait=args.wait)
    if args.command == "report":
        from grader.grading.report.render import report

        return report(args.assignment, root=args.root, identify=args.identify, out=args.out)
    return 2

