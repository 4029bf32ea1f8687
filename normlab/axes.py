"""Figures for notebook 01: which entries of a (B, T, d) tensor share statistics.

An activation tensor in a Transformer has three axes: batch b, position t and feature k.
A normalisation layer computes a mean and a variance over some of them and uses the pair
for every entry it averaged over. BatchNorm averages over (b, t) for each feature k, so all
B*T tokens share the statistics of feature k. LayerNorm (and RMSNorm) averages over k for
each token (b, t), so each token is normalised by itself. ``shared_statistics_mask`` says
which entries share a statistic as a boolean array; ``axis_picture`` draws the same thing.

The other helpers draw the measurements of the notebook's experiments (which tokens changed
after a perturbation, how noisy batch statistics are, how far generation drifts from
training). They only plot what they are given: nothing here normalises anything.

Every function returns a ``StaticFigure``: a matplotlib ``Figure`` that is not attached to
pyplot and renders itself as a PNG, so it shows once when it is a cell's last value (in
JupyterLab and in Colab, whether or not pyplot was imported) and never leaks into later cells.

Example::

    from normlab.axes import axis_picture, shared_statistics_mask
    axis_picture(("batch", "layer"))            # the two pictures side by side
    shared_statistics_mask("batch", (2, 4, 3), (1, 3, 2)).sum()   # 8 = B * T entries
"""

from __future__ import annotations

import io

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import LogNorm, to_rgba
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

__all__ = [
    "KINDS",
    "StaticFigure",
    "shared_statistics_mask",
    "axis_picture",
    "change_map_figure",
    "spread_figure",
    "generation_gap_figure",
]

# kind -> (panel title, what one statistic averages over)
KINDS = {
    "batch": ("BatchNorm", "one (μ, σ²) per feature k,\nshared by all B·T tokens"),
    "layer": ("LayerNorm / RMSNorm", "one (μ, σ²) per token (b, t),\nover its own d features"),
    "time": ("statistics over positions", "one (μ, σ²) per sequence and feature,\nmixing past and future"),
    "group": ("GroupNorm", "one (μ, σ²) per example and group\nof features, over every position"),
}

_HIGHLIGHT = ("#ff7f0e", "#1f77b4")  # two groups, orange and blue (tab10, colour-blind safe)
_REST = (0.55, 0.55, 0.55, 0.10)      # every other entry: faint grey


def _default_indices(kind: str, shape: tuple) -> list[tuple[int, int, int]]:
    """Two entries whose groups do not overlap, so both colours are visible."""
    B, T, d = shape
    if kind == "batch":
        return [(0, 0, d - 1), (0, 0, max(d // 3, 0))]
    if kind == "layer":
        return [(0, T - 1, 0), (B - 1, max(T // 3, 0), 0)]
    if kind == "time":
        return [(0, 0, d - 1), (B - 1, 0, max(d // 3, 0))]
    return [(0, 0, d - 1), (B - 1, 0, 0)]


def shared_statistics_mask(kind: str, shape, index, groups: int = 2) -> np.ndarray:
    """Entries of a (B, T, d) tensor normalised with the same (mean, variance) as ``index``.

    kind: "batch" (BatchNorm: same feature k, every b and t), "layer" (LayerNorm and
    RMSNorm: same token (b, t), every k), "time" (statistics over positions: same b and k,
    every t) or "group" (GroupNorm: same example b and same group of ``groups`` contiguous
    feature groups, every t). index: (b, t, k). Returns a boolean array of ``shape``.
    """
    shape = tuple(int(n) for n in shape)
    if len(shape) != 3:
        raise ValueError(f"shape must be (B, T, d), got {shape}")
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {sorted(KINDS)}, got {kind!r}")
    b, t, k = (int(i) for i in index)
    B, T, d = shape
    if not (0 <= b < B and 0 <= t < T and 0 <= k < d):
        raise IndexError(f"index {(b, t, k)} is outside shape {shape}")
    mask = np.zeros(shape, dtype=bool)
    if kind == "batch":
        mask[:, :, k] = True
    elif kind == "layer":
        mask[b, t, :] = True
    elif kind == "time":
        mask[b, :, k] = True
    else:
        if groups < 1 or d % groups:
            raise ValueError(f"d = {d} must be a multiple of groups = {groups}")
        size = d // groups
        start = (k // size) * size
        mask[b, :, start:start + size] = True
    return mask


class StaticFigure(Figure):
    """A Figure that displays itself as a PNG when it is the value of a notebook cell.

    IPython uses its own matplotlib formatter when one is registered (after pyplot has set
    up the inline backend) and falls back to ``_repr_png_`` otherwise: either way, one image.
    """

    def _repr_png_(self) -> bytes:
        buffer = io.BytesIO()
        self.savefig(buffer, format="png", bbox_inches="tight", facecolor="white")
        return buffer.getvalue()


def _new_figure(width: float, height: float, dpi: int) -> StaticFigure:
    fig = StaticFigure(figsize=(width, height), dpi=dpi, facecolor="white")
    FigureCanvasAgg(fig)
    return fig


def _box_faces(lo, hi) -> list:
    """The six faces of the box [lo, hi] (3-D corners) as quadrilaterals."""
    (x0, y0, z0), (x1, y1, z1) = lo, hi
    return [
        [(x0, y0, z0), (x1, y0, z0), (x1, y1, z0), (x0, y1, z0)],
        [(x0, y0, z1), (x1, y0, z1), (x1, y1, z1), (x0, y1, z1)],
        [(x0, y0, z0), (x1, y0, z0), (x1, y0, z1), (x0, y0, z1)],
        [(x0, y1, z0), (x1, y1, z0), (x1, y1, z1), (x0, y1, z1)],
        [(x0, y0, z0), (x0, y1, z0), (x0, y1, z1), (x0, y0, z1)],
        [(x1, y0, z0), (x1, y1, z0), (x1, y1, z1), (x1, y0, z1)],
    ]


def _box_grid(lo, hi) -> list:
    """Unit grid lines on the surface of the box [lo, hi], so each entry shows as one cube."""
    lines = []
    for axis in range(3):
        u, v = [a for a in range(3) if a != axis]
        for level in (lo[axis], hi[axis]):          # the two faces perpendicular to `axis`
            for step_axis, span_axis in ((u, v), (v, u)):
                for value in range(int(lo[step_axis]), int(hi[step_axis]) + 1):
                    start, stop = [0.0] * 3, [0.0] * 3
                    start[axis] = stop[axis] = level
                    start[step_axis] = stop[step_axis] = value
                    start[span_axis], stop[span_axis] = lo[span_axis], hi[span_axis]
                    lines.append([tuple(start), tuple(stop)])
    return lines


def axis_picture(kinds=("batch", "layer"), shape=(3, 5, 6), *, groups: int = 2, dpi: int = 100) -> StaticFigure:
    """The (B, T, d) tensor as a block of cubes, one panel per kind of normalisation.

    Each panel colours two groups of entries (orange, blue); all cubes of one colour are
    normalised with one shared mean and variance. Positions run left to right, the batch
    runs into the page, features run upwards, so one token is a vertical column of d cubes.
    """
    from mpl_toolkits.mplot3d.art3d import Line3DCollection, Poly3DCollection

    kinds = tuple(kinds)
    B, T, d = (int(n) for n in shape)
    fig = _new_figure(4.3 * len(kinds) + 0.3, 4.6, dpi)
    for j, kind in enumerate(kinds):
        ax = fig.add_subplot(1, len(kinds), j + 1, projection="3d")
        # Plot axes: x = position t, y = batch b, z = feature k.
        whole = ((0, 0, 0), (T, B, d))
        ax.add_collection3d(Poly3DCollection(_box_faces(*whole), facecolor=_REST, edgecolor="none"))
        ax.add_collection3d(Line3DCollection(_box_grid(*whole), colors=[(0.35, 0.35, 0.35, 0.35)], linewidths=0.5))
        for colour, index in zip(_HIGHLIGHT, _default_indices(kind, (B, T, d)), strict=True):
            b_idx, t_idx, k_idx = np.nonzero(shared_statistics_mask(kind, (B, T, d), index, groups))
            lo = (t_idx.min(), b_idx.min(), k_idx.min())
            hi = (t_idx.max() + 1, b_idx.max() + 1, k_idx.max() + 1)
            ax.add_collection3d(Poly3DCollection(_box_faces(lo, hi), facecolor=to_rgba(colour, 0.85),
                                                 edgecolor="none"))
            ax.add_collection3d(Line3DCollection(_box_grid(lo, hi), colors=[(0.15, 0.15, 0.15, 0.6)],
                                                 linewidths=0.6))
        ax.set_xlim(0, T)
        ax.set_ylim(0, B)
        ax.set_zlim(0, d)
        ax.set_xlabel("position t", labelpad=-6)
        ax.set_ylabel("batch b", labelpad=-6)
        ax.set_zlabel("feature k", labelpad=-8)
        ax.set_xticks(np.arange(T) + 0.5, [str(i) for i in range(T)], fontsize=7)
        ax.set_yticks(np.arange(B) + 0.5, [str(i) for i in range(B)], fontsize=7)
        ax.set_zticks(np.arange(d) + 0.5, [str(i) for i in range(d)], fontsize=7)
        ax.tick_params(pad=-3)
        ax.set_box_aspect((T, B * 1.2, d))
        ax.view_init(elev=18, azim=-62)
        name, rule = KINDS[kind]
        ax.set_title(f"{name}\n{rule}", fontsize=10)
    fig.suptitle(f"Same tensor (B={B}, T={T}, d={d}), different axes: one colour = one shared mean and variance",
                 fontsize=11)
    fig.subplots_adjust(left=0.0, right=1.0, bottom=0.02, top=0.8, wspace=0.05)
    return fig


def change_map_figure(changes: dict, perturbed, *, dpi: int = 100) -> StaticFigure:
    """Heat maps of how much each token's output moved after one token was perturbed.

    changes: {name: (B, T) array of max |output change| per token}. perturbed: (b, t) of the
    token that was changed (outlined in black). Exact zeros are drawn white; the colour of
    the others is the size of the change on a log scale. Each title counts the tokens at
    positions before the perturbed one whose output changed (a leak from the future).
    """
    pb, pt = (int(i) for i in perturbed)
    names = list(changes)
    arrays = [np.asarray(changes[n], dtype=np.float64) for n in names]
    positive = np.concatenate([a[a > 0] for a in arrays] + [np.array([])])
    vmin, vmax = (float(positive.min()), float(positive.max())) if positive.size else (1e-3, 1.0)
    if vmin == vmax:
        vmin, vmax = vmin / 10, vmax * 10
    B, T = arrays[0].shape
    fig = _new_figure(4.6 * len(names) + 1.2, 1.2 + 0.45 * B + 1.0, dpi)
    image = None
    for j, (name, a) in enumerate(zip(names, arrays, strict=True)):
        ax = fig.add_subplot(1, len(names), j + 1)
        shown = np.ma.masked_where(a <= 0, a)
        image = ax.imshow(shown, cmap="viridis", norm=LogNorm(vmin=vmin, vmax=vmax), aspect="auto",
                          interpolation="nearest")
        ax.set_facecolor("white")
        ax.add_patch(Rectangle((pt - 0.5, pb - 0.5), 1, 1, fill=False, edgecolor="black", linewidth=2.2))
        ax.axvline(pt - 0.5, color="crimson", linestyle="--", linewidth=1.2)
        earlier = int(np.sum(a[:, :pt] > 0))
        ax.set_title(f"{name}: {earlier} of {B * pt} earlier tokens changed", fontsize=10)
        ax.set_xlabel("position t (dashed line: the perturbed position)")
        ax.set_ylabel("sequence b in the batch")
        ax.set_xticks(range(T))
        ax.set_yticks(range(B))
    colorbar = fig.colorbar(image, ax=fig.axes, fraction=0.025, pad=0.02)
    colorbar.set_label("max |change of output| (white: exactly 0)")
    fig.suptitle(f"Perturbing token (b={pb}, t={pt}): which outputs move?", fontsize=11)
    return fig


def spread_figure(batch_sizes, spreads: dict, *, tokens_per_sequence: int | None = None,
                  dpi: int = 100) -> StaticFigure:
    """Spread of one token's normalised output over random batch-mates, against batch size.

    batch_sizes: (n,) numbers of sequences per batch. spreads: {name: (n,) standard
    deviations}. Curves that are exactly zero are drawn on the axis and named in the legend.
    A dotted reference line falls like 1/sqrt(B), anchored at the first batch size.
    """
    batch_sizes = np.asarray(batch_sizes, dtype=np.float64)
    fig = _new_figure(6.2, 3.9, dpi)
    ax = fig.add_subplot(1, 1, 1)
    first_nonzero = None
    for name, values in spreads.items():
        values = np.asarray(values, dtype=np.float64)
        label = name + (" (exactly 0 at every B)" if np.all(values == 0) else "")
        ax.plot(batch_sizes, values, "o-", label=label)
        if first_nonzero is None and np.any(values > 0):
            first_nonzero = values
    if first_nonzero is not None:
        ax.plot(batch_sizes, first_nonzero[0] * np.sqrt(batch_sizes[0] / batch_sizes), ":", color="grey",
                label="1/√B reference")
    ax.set_xscale("log", base=2)
    ax.set_xticks(batch_sizes, [f"{b:g}" for b in batch_sizes])
    per = f" of {tokens_per_sequence} tokens" if tokens_per_sequence else ""
    ax.set_xlabel(f"batch size B (sequences{per})")
    ax.set_ylabel("std of the token's output over batches")
    ax.set_ylim(bottom=0)
    ax.set_title("The same token, normalised in different batches:\nBatchNorm's output is noisy, "
                 "most of all for small B", fontsize=10)
    ax.legend(fontsize=9)
    fig.set_layout_engine("tight")
    return fig


def generation_gap_figure(gaps: dict, *, dpi: int = 100) -> StaticFigure:
    """How far each position's output during generation is from its output in training.

    gaps: {name: (T,) max |generation output - training output| per position}. Curves that
    are exactly zero are named so in the legend.
    """
    fig = _new_figure(6.4, 3.9, dpi)
    ax = fig.add_subplot(1, 1, 1)
    styles = iter(["o-", "s--", "^-", "d:"])
    for name, values in gaps.items():
        values = np.asarray(values, dtype=np.float64)
        label = name + (" (exactly 0)" if np.all(values == 0) else "")
        ax.plot(np.arange(values.size), values, next(styles, "o-"), label=label)
    ax.set_xlabel("position t of the generated token")
    ax.set_ylabel("max |generation − training| of the output")
    ax.set_ylim(bottom=0)
    ax.set_title("One token at a time, BatchNorm computes a different function\nthan in training; "
                 "LayerNorm computes the same one", fontsize=10)
    ax.legend(fontsize=9)
    fig.set_layout_engine("tight")
    return fig
