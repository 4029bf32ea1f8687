"""One ``python -m grader grade`` run of a class: ``pipeline`` (the command and its steps), ``grading_run``
(``GradingRun``: sanitise, execute, record, feedback, pipelined per learner), ``course_setup``, ``course_lock``,
``intake`` and ``notebook_repair`` (submissions in), ``jobs`` and ``results`` (what executes, what comes back),
``feedback_work`` (the feedback pool), ``summary`` and ``terminal`` (what is printed), ``bench``."""
