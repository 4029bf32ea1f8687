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

# Feedback must not reveal the hidden tests. nbgrader's feedback shows each test cell as it
# ran, hidden block included, and an error's traceback quotes the lines around the failing
# one, so a learner whose visible check fails would still read the hidden lines below it.
# This preprocessor removes the hidden block from the source (nbgrader's ClearHiddenTests)
# and, from the error output of such a cell, the traceback frames that quote the cell
# itself; the learner's own frames, the checks' frames and every message stay.
import re as _re  # noqa: E402

from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor  # noqa: E402
from nbgrader.preprocessors import ClearHiddenTests, GetGrades  # noqa: E402

_ANSI = _re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


class ClearHiddenTestsFromFeedback(ClearHiddenTests):
    """ClearHiddenTests for feedback: also drops traceback frames that quote a hidden block."""

    def preprocess_cell(self, cell, resources, cell_index):
        if cell.cell_type == "code" and self.begin_test_delimeter in cell.source:
            own_frame = _re.compile(rf"^\s*(Cell|Input) In ?\[\s*{cell.get('execution_count')}\s*\]")
            hidden = [line.strip() for line in cell.source.split(self.begin_test_delimeter, 1)[1].splitlines()
                      if len(line.strip()) > 3]
            for output in cell.get("outputs", []):
                if output.get("output_type") == "error":
                    frames = [_ANSI.sub("", frame) for frame in output.get("traceback", [])]
                    output.traceback = [
                        frame for frame, plain in zip(output.traceback, frames)
                        if not own_frame.match(plain) and not any(line in plain for line in hidden)
                    ]
        return super().preprocess_cell(cell, resources, cell_index)


c.GenerateFeedback.preprocessors = [GetGrades, ClearHiddenTestsFromFeedback, CSSHTMLHeaderPreprocessor]
