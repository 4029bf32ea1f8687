"""Run ``nbgrader generate_assignment`` for several assignments in one process.

Importing nbgrader's apps costs seconds; generating one assignment costs under one.
Run as ``python -m grader.course.release_batch ID [ID ...]`` from the course root.
"""
import sys

from nbgrader.apps import GenerateAssignmentApp


def main(assignments: list[str]) -> int:
    for assignment in assignments:
        app = GenerateAssignmentApp()
        app.initialize([assignment, "--force", "--log-level=ERROR"])
        try:
            app.start()
        except SystemExit as exit_:  # nbgrader exits 1 after logging the error
            if exit_.code:
                return int(exit_.code)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
