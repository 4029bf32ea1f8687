"""The grading server: what an instructor runs (``python -m grader grade``, ``report``, ``export``,
``gradescope``, ``bench-grade``). It imports the course tooling and the learner side; neither imports it.

Where things are, by job:

- ``cli``, ``config`` (``GradeConfig``: every setting, one route), ``startup``: the commands and their settings.
- ``run/``: one grading run of a class, start to end: the course folder and its lock, intake of the
  submissions, jobs and their results, the run itself (``pipeline`` drives, ``grading_run`` holds it), the
  feedback pool, the summary printed at the end, the speed benchmark.
- ``slots/``: where a notebook's job executes: local execution slots forked from warm processes, or Dask workers.
- ``sandbox/``: where learner code runs: isolation, the zygote, the worker and the channel to it.
- ``autograde/``: nbgrader's autograde steps around the sandbox, the trusted test cells' execution, the gradebook.
- ``feedback/``: the feedback pages: hidden tests removed, learner HTML sanitised, budgets, render caches.
- ``report/``: the class report. ``export/``: grades out to Canvas, Moodle, Gradescope, PrairieLearn, CSV.
- ``seams/``: every use of another library's non-public parts, checked at start-up.
"""
