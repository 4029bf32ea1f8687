"""Feedback that does not reveal the hidden tests.

nbgrader's feedback shows each test cell as it ran, hidden block included, and an error's traceback quotes the lines
around the failing one, so a learner whose visible check fails would still read the hidden lines below it.
``ClearHiddenTestsFromFeedback`` removes the hidden block from the source (nbgrader's ``ClearHiddenTests``) and, from
the error output of such a cell, the traceback frames that quote the cell itself; the learner's own frames, the
checks' frames and every message stay. The course's ``nbgrader_config.py`` names it in
``GenerateFeedback.preprocessors``.
"""
from __future__ import annotations

import re

from nbgrader.preprocessors import ClearHiddenTests

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


class ClearHiddenTestsFromFeedback(ClearHiddenTests):
    """ClearHiddenTests for feedback: also drops traceback frames that quote a hidden block."""

    def preprocess_cell(self, cell, resources, cell_index):
        if cell.cell_type == "code" and self.begin_test_delimeter in cell.source:
            own_frame = re.compile(rf"^\s*(Cell|Input) In ?\[\s*{cell.get('execution_count')}\s*\]")
            hidden = [line.strip() for line in cell.source.split(self.begin_test_delimeter, 1)[1].splitlines()
                      if len(line.strip()) > 3]
            for output in cell.get("outputs", []):
                if output.get("output_type") == "error":
                    frames = [_ANSI.sub("", frame) for frame in output.get("traceback", [])]
                    output.traceback = [
                        frame for frame, plain in zip(output.traceback, frames, strict=True)
                        if not own_frame.match(plain) and not any(line in plain for line in hidden)
                    ]
        return super().preprocess_cell(cell, resources, cell_index)
