"""``python -m grader report ASSIGNMENT``: what a class got wrong, from its last grading.

Reads, never writes, two things the grading left behind:

- the validated results of the last ``grader grade`` run
  (``build/grading/<assignment>/results/<student>/<notebook>.json``, checked as the record
  phase checks them, ``grader.grading.run.results``): which tests each learner passed, and the catalogue
  ids (``grader.catalogue``) of the diagnoses of the ones they failed;
- the attempt log inside each submitted notebook (``submitted/<student>/<assignment>/``,
  read through the same guarded reader as the intake, then ``grader.attempts``): how often
  learners ran each exercise's checks and how far up its hint ladder they went.

and writes ``build/reports/<assignment>.html`` (self-contained: no script, no external
resource, every text escaped, two plots as PNG data URIs), ``.csv`` (cells that a
spreadsheet would run as a formula neutralised) and ``.json``:

- the pass rate of each test cell;
- the prevalence of each misconception among the learners (count, %, Wilson score 95 %
  interval), with its teaching note;
- which mistakes occur together (pairs: count, and lift = P(a and b) / (P(a) P(b)));
- per exercise, the check runs and the highest hint level of the learners who used them
  (median and quartiles).

Privacy by default: no learner id appears in any output, and a group of fewer than
``MIN_GROUP`` learners (a misconception's count, a pair, an exercise's attempt figures, the
pass rates of a class that small) is shown as "< 5", with no exact count, percentage,
interval or lift. ``--identify`` shows exact figures and, per learner, what was diagnosed.
Anything unreadable, malformed or hostile is skipped and counted, never fatal.

One module per step: ``reading`` (results, exercise names, attempt logs) -> ``analysis`` (the
document, with ``statistics``) -> ``plots``, ``html`` (Jinja2, ``templates/``) and ``spreadsheet``
(CSV); ``render`` is the command, which runs them and writes the files.
"""
