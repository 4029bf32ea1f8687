"""The grading run's progress bar (grader.grading.run.terminal.Progress, tqdm): learner-controlled names are escaped."""
import io

from grader.grading.run.terminal import Progress


def test_progress_counts_jobs_and_escapes_learner_names(monkeypatch):
    # tqdm takes the width of a non-terminal stream from COLUMNS and LINES when both are set (as
    # under pytest-xdist): a fixed wide one, so that the escaped name is never cut off by the bar
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setenv("LINES", "50")
    stream = io.StringIO()
    bar = Progress(stream=stream, mininterval=0)
    bar.start(3)
    bar.update("ada", "03_backward")
    bar.update("\x1b]0;owned\x07eve\u202e", "03_backward\r\x1b[2K")
    bar.update()
    bar.close()
    text = stream.getvalue()
    assert "3/3" in text
    assert "\x1b" not in text and "\u202e" not in text and "\x07" not in text
    assert "\\x1b]0;owned\\x07eve\\u202e" in text
    assert text.count("\r") >= 1  # tqdm's own redraws only: the learner's \r arrived escaped
    assert "\\r" in text or "…" in text


def test_a_bar_never_started_is_silent(capsys):
    stream = io.StringIO()
    bar = Progress(stream=stream)
    bar.update("ada", "x")
    bar.close()
    assert stream.getvalue() == "" and bar.bar is None
    assert capsys.readouterr() == ("", "")  # nor on the terminal's own streams
