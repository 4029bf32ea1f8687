"""The class report's two plots, as PNG data URIs: prevalence of each misconception, pass rate per test."""
from __future__ import annotations

import base64
import io

MAX_PLOTTED = 30  # bars per plot


def plots(document: dict) -> dict[str, str | None]:
    """PNG data URIs: prevalence of each misconception with its interval; pass rate per test
    (None where nothing has an exact figure to plot)."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    out: dict[str, str | None] = {"prevalence": None, "pass_rate": None}
    with matplotlib.rc_context({"text.parse_math": False, "font.size": 9, "svg.hashsalt": "report"}):
        rows = [r for r in document["misconceptions"] if r["percent"] is not None][:MAX_PLOTTED]
        if rows:
            labels = [_short(f"{r['name']} [{r['id']}]") if r["catalogued"] else r["id"] for r in rows]
            out["prevalence"] = _bars(plt, rows, labels, "#c0504d", "% of learners (bars: Wilson 95 % interval)",
                                      min(100, max(r["ci_high"] for r in rows) * 1.1 + 1))
        rows = [r for r in document["tests"] if r["percent"] is not None][:MAX_PLOTTED]
        if rows:
            out["pass_rate"] = _bars(plt, rows, [_short(r["test"]) for r in rows], "#4f81bd",
                                     "% of learners who passed (bars: Wilson 95 % interval)", 100)
    return out


def _bars(plt, rows: list[dict], labels: list[str], color: str, xlabel: str, xmax: float) -> str:
    """Horizontal bars of ``rows``' percent, first row on top, with their intervals as error bars."""
    figure, axes = plt.subplots(figsize=(8, 0.8 + 0.32 * len(rows)))
    values = [r["percent"] for r in rows]
    errors = [[v - r["ci_low"] for v, r in zip(values, rows, strict=True)],
              [r["ci_high"] - v for v, r in zip(values, rows, strict=True)]]
    axes.barh(range(len(rows)), values, xerr=errors, color=color, ecolor="#333333", capsize=3)
    axes.set_yticks(range(len(rows)), labels)
    axes.invert_yaxis()
    axes.set_xlabel(xlabel)
    axes.set_xlim(0, xmax)
    axes.grid(axis="x", alpha=0.3)
    try:
        return _png(figure)
    finally:
        plt.close(figure)


def _png(figure) -> str:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100, bbox_inches="tight", metadata={"Software": None})
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def _short(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
