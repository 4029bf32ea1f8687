"""nbgrader's autograde around the sandbox: ``nbgrader_steps`` (sanitise and record phases, results replayed into
the gradebook), ``execute`` (one notebook: learner cells in the sandbox, test cells in the trusted grader),
``gradebook_engines``."""
