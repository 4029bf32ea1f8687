"""One flag for every notebook: are we being graded (or timed) rather than read?

nbgrader sets ``NBGRADER_EXECUTION`` while it executes a notebook (autograde, validate,
generate_feedback). Demo and experiment cells then do the least work that still runs them,
so grading stays fast; graded cells never look at this flag.
"""
import os


def quick_run() -> bool:
    """True while nbgrader executes the notebook: demo cells shrink their experiments."""
    return bool(os.environ.get("NBGRADER_EXECUTION"))
