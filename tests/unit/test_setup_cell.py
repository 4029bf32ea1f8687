"""The self-study edition's set-up cell tells the truth about where the course package comes from."""
from grader.course.build import colab_cells
from tests.conftest import ROOT


def test_the_setup_cell_names_the_command_the_readme_gives():
    setup = colab_cells(ROOT, "04_rmsnorm")[1].source
    readme = (ROOT / "README.md").read_text()
    assert "make install" in readme  # what the README tells students to run first
    assert "`make install`" in setup and "first `make lab`" in setup
    assert "`make lab` has already installed it" not in setup
