"""Command line: ``python -m grader build`` and ``python -m grader grade ASSIGNMENT``."""
from grader.grading.cli import main

raise SystemExit(main())
