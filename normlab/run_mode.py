"""One flag for every notebook: are we being graded (or timed) rather than read?

nbgrader sets ``NBGRADER_EXECUTION`` while it executes a notebook (autograde, validate,
generate_feedback). Demo and experiment cells then do the least work that still runs them,
and figures are built but not drawn, so grading stays fast; graded cells never look at this flag.
"""
import os


def quick_run() -> bool:
    """True while nbgrader executes the notebook: demo cells shrink their experiments.

    When True, and the notebook runs in an IPython kernel, matplotlib figures are also no longer
    drawn to images (``draw_figures(False)``): drawing one is about 0.1 s, several per notebook,
    and no grade depends on a picture. Every figure is still built and closed as usual.
    """
    quick = bool(os.environ.get("NBGRADER_EXECUTION"))
    if quick:
        draw_figures(False)
    return quick


def draw_figures(on: bool) -> None:
    """Whether the kernel renders each figure it displays (a PNG) or shows only a line of text
    saying it was not drawn (``NOT_DRAWN``). Does nothing outside IPython.

    Off: the inline backend is set to no image format (``%config InlineBackend.figure_formats``,
    so a later ``%matplotlib inline`` keeps it), and every image formatter prints nothing for a
    Figure, which also silences a figure's own ``_repr_png_`` (``normlab.axes.StaticFigure``).
    """
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is None:
        return
    from IPython.core.pylabtools import select_figure_formats
    from matplotlib.figure import Figure
    from matplotlib_inline.backend_inline import InlineBackend

    backend = InlineBackend.instance(parent=shell)
    backend.figure_formats = {"png"} if on else set()
    # drops every Figure printer of every formatter (ours too), then registers the formats asked for
    select_figure_formats(shell, backend.figure_formats, **backend.print_figure_kwargs)
    if on:
        return
    formatters = shell.display_formatter.formatters
    for mime, formatter in formatters.items():
        if mime.startswith("image/") or mime == "application/pdf":
            formatter.for_type(Figure, _no_image)
    formatters["text/plain"].for_type(Figure, _placeholder)


def figures_drawn() -> bool:
    """False in a kernel whose inline backend draws no image format (``draw_figures(False)``): the
    widgets then skip encoding their picture too. True outside IPython."""
    try:
        from IPython import get_ipython
    except ImportError:
        return True
    if get_ipython() is None:
        return True
    from matplotlib_inline.backend_inline import InlineBackend

    return not InlineBackend.initialized() or bool(InlineBackend.instance().figure_formats)


NOT_DRAWN = "[figure not drawn while grading: run the notebook to see it]"


def _no_image(figure) -> None:
    return None


def _placeholder(figure, printer, cycle) -> None:
    printer.text(NOT_DRAWN)
