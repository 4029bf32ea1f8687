"""Grades out of the gradebook, into the systems instructors keep them in.

One module per job:

- ``roster``: who a learner is outside nbgrader (name, email, SIS ids, LMS user id), from a roster CSV,
  and which learners the gradebook and the roster do not share;
- ``gradebook``: the scores of a class, read from nbgrader's gradebook (the only source of points);
- ``canvas``, ``moodle``, ``nbgrader_csv``: the import files of each target;
- ``rawcsv``: a CSV reader that keeps every byte, for filling an instructor's own Canvas export;
- ``command``: ``python -m grader export``;
- ``autograder``: one submitted notebook graded by the same intake, sandbox, hidden tests and nbgrader
  record step as ``python -m grader grade``, into per-test data;
- ``gradescope``, ``prairielearn``: that per-test data as each host's results.json, and the
  Gradescope autograder zip.
"""
