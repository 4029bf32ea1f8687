"""The class report as one self-contained HTML page, rendered from ``templates/report.html.j2``.

Jinja2 with autoescaping on: every value from the document (learner ids, test names, messages,
catalogue text) is text, never markup. ``None`` renders as nothing, and an unknown name in the
template is an error rather than an empty cell.
"""
from __future__ import annotations

import functools

from grader.grading.report.statistics import MIN_GROUP, SUPPRESSED

# no script, no external resource, no form, no framing by a link: the page holds text, tables and two data URIs
CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"


def pct(value) -> str:
    return "" if value is None else f"{value:.1f} %"


def interval(row: dict) -> str:
    return "" if row.get("ci_low") is None else f"{row['ci_low']:.1f} – {row['ci_high']:.1f} %"


def spread(stats: dict | None) -> str:
    """Median (first – third quartile), or nothing."""
    if not stats:
        return ""
    return f"{stats['median']:g} ({stats['q1']:g} – {stats['q3']:g})"


def fixed(value, digits: int) -> str:
    return "" if value is None else f"{value:.{digits}f}"


@functools.cache
def environment():
    """The report's Jinja2 environment, built once: templates found inside the package, wherever it is run from."""
    import jinja2

    env = jinja2.Environment(loader=jinja2.PackageLoader("grader.grading.report", "templates"), autoescape=True,
                             undefined=jinja2.StrictUndefined, finalize=lambda value: "" if value is None else value,
                             trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
    env.filters.update(pct=pct, interval=interval, spread=spread, fixed=fixed)
    return env


def render_html(document: dict, images: dict) -> str:
    """The page for ``document`` (``analysis.analyse``) with ``images`` (``plots.plots``: name -> data URI or None)."""
    context = {**document, "flags": document.get("flags") or [], "by_learner": document.get("by_learner"),
               "images": {"pass_rate": images.get("pass_rate"), "prevalence": images.get("prevalence")},
               "min_group": MIN_GROUP, "suppressed": SUPPRESSED, "csp": CSP}
    return environment().get_template("report.html.j2").render(context)
