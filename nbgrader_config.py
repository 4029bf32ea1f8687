"""nbgrader configuration for the LayerNorm/RMSNorm course (this folder is the course root)."""
import os

c = get_config()  # noqa: F821  (injected by traitlets)

course_root = os.path.dirname(os.path.abspath(__file__))
build_dir = os.path.join(course_root, "build")
os.makedirs(build_dir, exist_ok=True)

c.CourseDirectory.course_id = "layernorm-rmsnorm"
c.CourseDirectory.root = course_root
# The percent scripts in source/ hold the solutions and hidden tests: nbgrader copies every
# non-notebook file of an assignment into release/, so *.py must never be copied.
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback", "*.py"]
c.CourseDirectory.db_url = "sqlite:///" + os.path.join(build_dir, "gradebook.db")

# The stub a learner sees in place of each solution.
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}

# nbgrader zeroes a test cell that writes to stderr; strip known harmless noise.
c.IgnorePattern.enabled = True
c.IgnorePattern.pattern = r"Matplotlib is building the font cache|UserWarning: FigureCanvasAgg is non-interactive"

# Graded notebooks are small; a cell that takes minutes is a hung submission.
c.Execute.timeout = 120
