"""nbgrader configuration for the LayerNorm/RMSNorm course (this folder is the course root)."""
import os

c = get_config()  # noqa: F821 - injected by traitlets

course_root = os.path.dirname(os.path.abspath(__file__))
build_dir = os.path.join(course_root, "build")
os.makedirs(build_dir, exist_ok=True)

c.CourseDirectory.course_id = "layernorm-rmsnorm"
c.CourseDirectory.root = course_root
# The percent scripts in source/ hold the solutions and hidden tests: nbgrader copies every
# non-notebook file of an assignment into release/, so they must never be copied. Only they
# are named: nbgrader applies the same list to submissions, and a learner's own helper
# module (helpers.py beside the notebook) must reach autograded/ like any other file.
_percent_scripts = sorted(name for name in os.listdir(os.path.join(course_root, "source"))
                          if os.path.isfile(os.path.join(course_root, "source", name, name + ".py"))
                          ) if os.path.isdir(os.path.join(course_root, "source")) else []
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback",
                            *(name + ".py" for name in _percent_scripts)]
c.CourseDirectory.db_url = "sqlite:///" + os.path.join(build_dir, "gradebook.db")

# The stub a learner sees in place of each solution.
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}

# nbgrader zeroes a test cell that writes to stderr; strip known harmless noise.
c.IgnorePattern.enabled = True
c.IgnorePattern.pattern = r"Matplotlib is building the font cache|UserWarning: FigureCanvasAgg is non-interactive"

# `python -m grader grade` (grader/grading/config.py; `python -m grader grade --help-all` lists them all).
# Graded notebooks are small; a cell that takes minutes is a hung submission. Plain
# `nbgrader autograde` gets the same per-cell limit.
c.GradeConfig.cell_timeout = 120
c.GradeConfig.notebook_timeout = 600
# c.GradeConfig.jobs = 0            # notebooks in parallel (0: one per core)
# c.GradeConfig.cache_dir = ""      # cached job results (default: build/grading-cache)
c.Execute.timeout = int(c.GradeConfig.cell_timeout)

# What the grader adds to nbgrader's exporters is named here and lives in the package
# (grader/grading/feedback/): the course's settings stay in this file, the code in one place.
# Feedback never reveals the hidden tests (hidden_tests.py).
c.GenerateFeedback.preprocessors = ["nbgrader.preprocessors.GetGrades",
                                    "grader.grading.feedback.hidden_tests.ClearHiddenTestsFromFeedback",
                                    "nbconvert.preprocessors.CSSHTMLHeaderPreprocessor"]
# Every HTML page made from a learner's notebook (feedback, the formgrader's submission view) is
# sanitised (sanitise.py says how, and why in three parts).
c.HTMLExporter.sanitize_html = True
c.HTMLExporter.preprocessors = ["grader.grading.feedback.sanitise.SanitizeLearnerHTML"]
c.HTMLExporter.filters = {"markdown2html": "grader.grading.feedback.sanitise.markdown2html"}
