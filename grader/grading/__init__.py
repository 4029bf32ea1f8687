"""The grading server: intake, jobs, the sandbox, nbgrader's record and feedback phases, reports.

What an instructor runs (``python -m grader grade``, ``report``, ``bench-grade``); it imports the
course tooling and the learner side, and nothing of it is imported by either.
"""
