"""Every notebook names its grading flag the same way, through the one helper."""
import re
from pathlib import Path

import pytest

from normlab.run_mode import NOT_DRAWN, draw_figures, quick_run

SOURCES = sorted(Path(__file__).resolve().parents[2].glob("source/*/*.py"))


def test_quick_run_follows_nbgrader(monkeypatch):
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    assert quick_run() is False
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    assert quick_run() is True


def test_one_flag_name_in_every_notebook():
    for source in SOURCES:
        text = source.read_text()
        assert "NBGRADER_EXECUTION" not in text, f"{source.name} reads the variable itself"
        assert not re.search(r"\b(GRADING|FAST)\b", text), f"{source.name} uses another flag name"
        if "QUICK" in text:
            assert "QUICK = quick_run()" in text, source.name


@pytest.fixture
def shell():
    """An IPython shell with the inline backend, as in a kernel; figures drawn again afterwards."""
    from IPython.core.interactiveshell import InteractiveShell
    from matplotlib_inline.backend_inline import configure_inline_support

    shell = InteractiveShell.instance()
    configure_inline_support(shell, "inline")  # what `%matplotlib inline` does in a kernel
    yield shell
    draw_figures(True)


# matplotlib-inline's own config class, made here for the first time (a kernel makes it at `import pyplot`)
@pytest.mark.filterwarnings("ignore:InlineBackend._figure_formats_changed:DeprecationWarning")
def test_under_grading_figures_are_built_but_not_drawn(shell, monkeypatch):
    import matplotlib.pyplot as plt
    from matplotlib_inline.backend_inline import configure_inline_support

    from normlab.axes import axis_picture

    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    static = axis_picture()  # a figure that draws itself through _repr_png_
    assert "image/png" in shell.display_formatter.format(fig)[0]
    assert "image/png" in shell.display_formatter.format(static)[0]

    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    assert quick_run() is True
    for figure in (fig, static):
        data, _ = shell.display_formatter.format(figure)
        assert data == {"text/plain": NOT_DRAWN}
    configure_inline_support(shell, "inline")  # a notebook that enables the backend again keeps it
    assert shell.display_formatter.format(fig)[0] == {"text/plain": NOT_DRAWN}

    draw_figures(True)
    assert "image/png" in shell.display_formatter.format(fig)[0]
    plt.close(fig)


def test_outside_a_kernel_nothing_changes(monkeypatch):
    from IPython.core.interactiveshell import InteractiveShell

    monkeypatch.setattr(InteractiveShell, "initialized", classmethod(lambda cls: False))
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    assert quick_run() is True  # a plain script: no shell to configure, and no error


@pytest.mark.filterwarnings("ignore:InlineBackend._figure_formats_changed:DeprecationWarning")
def test_under_grading_the_widgets_encode_no_image(shell):
    """The two widgets with a picture (02's bars, 05's placements) build and update without encoding a PNG."""
    pytest.importorskip("ipywidgets")
    from normlab import placement
    from normlab.geometry import BarDragWidget
    from tests.implementations.placement import sublayer_if_chain

    draw_figures(False)
    bars = BarDragWidget(show_rms=True)
    placements = placement.placement_widget(sublayer_if_chain, depth=8, d=16, tokens=8, seeds=2, max_depth=16)
    bars.sliders[0].value = 2.0
    placements.depth.value = 12
    assert (bars.n_renders, placements.n_renders) == (0, 0)
    assert not bytes(bars.image.value) and not bytes(placements.image.value)
    assert len(placements.lines["post"].get_xdata()) == 12  # still computed and updated

    draw_figures(True)
    placements.depth.value = 8
    bars.sliders[0].value = 1.0
    assert bytes(placements.image.value)[:4] == bytes(bars.image.value)[:4] == b"\x89PNG"
