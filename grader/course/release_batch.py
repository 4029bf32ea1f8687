"""Run ``nbgrader generate_assignment`` for several assignments in one process.

Importing nbgrader's apps costs seconds; generating one assignment costs under one.
Run as ``python -m grader.course.release_batch ID [ID ...]`` from the course root.
"""
import sys

from grader.course import skip_iri_grammars

skip_iri_grammars()  # before nbgrader imports jsonschema
from nbgrader.apps import GenerateAssignmentApp  # noqa: E402 - after skip_iri_grammars()


def read_migration_head_in_process() -> None:
    """Make nbgrader stamp a new gradebook with its migration head read in this process.

    nbgrader's ``get_alembic_version`` runs ``alembic heads`` as a child process (a Python start and
    alembic's import: about 2 s of CPU, on every new gradebook); alembic's own ``ScriptDirectory`` reads
    the same head from nbgrader's migration scripts in well under 0.1 s. Anything but exactly one head
    is left to nbgrader's own way.
    """
    import nbgrader.api
    from alembic.script import ScriptDirectory
    from nbgrader.dbutil import ALEMBIC_DIR

    by_subprocess = nbgrader.api.get_alembic_version

    def head() -> str:
        heads = ScriptDirectory(ALEMBIC_DIR).get_heads()
        return heads[0] if len(heads) == 1 else by_subprocess()

    nbgrader.api.get_alembic_version = head


def main(assignments: list[str]) -> int:
    read_migration_head_in_process()
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
