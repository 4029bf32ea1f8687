"""Where the norm goes, for notebook 05: gradient scale, stream growth, a live widget, QK-norm.

Every experiment here stacks residual MLP sublayers F(x) = W2 act(W1 x) (width d, hidden
width 4d, no biases) around a LayerNorm without gain or shift (torch's kernel), in one of
three placements. The composition is not written here: each experiment takes the learner's
``residual_sublayer(x, F, norm, mode)`` (notebook 05's exercise) as its first argument and
calls it on torch tensors, so the placements are

    "post"    x <- LN(x + F(x))                       (Vaswani et al., 2017)
    "pre"     x <- x + F(LN(x)),  then one final LN    (GPT-2, Radford et al., 2019)
    "output"  x <- x + LN(F(x)),  then one final LN    (OLMo 2's reordered norm, 2024)

At initialisation it backpropagates a random linear loss, the mean over a batch of tokens
of y_b . v with one fixed random v: (d,), and reads off the Frobenius norm of the gradient
of every layer's output matrix W2 (Xiong et al., 2020, state their theorem for that matrix).
Weights are Gaussian with variance 1/fan_in; everything runs in float32 on the CPU, with
several random initialisations batched into one batched matmul.

What the defaults show (ReLU, d = 64, 128 tokens): post-LN's top layer keeps a large
gradient at every depth while its bottom layers' gradients fall as the model deepens;
pre-LN's last layer falls like 1/sqrt(L), because the final norm divides by
||x_L|| / sqrt(d), and its layers stay within a few-fold of each other. Measured mechanism
(``stream_gradients``): through a ReLU post-LN stack the gradient one token receives keeps
roughly its size, but the tokens' gradients stop pointing the same way, and a W2 gradient
is a sum over tokens, so it shrinks towards a floor that falls like 1/sqrt(tokens). The
profile depends on the branch: with ``act="gelu"`` or ``"tanh"`` post-LN gradients grow
towards the input instead.

Example::

    from normlab.placement import gradient_scale_table, plot_gradient_scale, format_gradient_table
    table = gradient_scale_table(residual_sublayer)   # depths 8 ... 128, 4 initialisations, seconds
    print(format_gradient_table(table))
    plot_gradient_scale(table)
"""

from __future__ import annotations

import contextlib
import html
import io
import math
import time

import numpy as np
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FormatStrFormatter, LogLocator, NullFormatter

from normlab.run_mode import figures_drawn

# The norms below are left out of __all__, so `from normlab.placement import *` cannot
# shadow a norm or a residual_sublayer that a learner writes in an exercise.
__all__ = [
    "MODES",
    "gradient_norms",
    "gradient_scale_table",
    "gradient_scale_rows",
    "stream_gradients",
    "format_gradient_table",
    "plot_gradient_scale",
    "stream_norms",
    "relative_write_sizes",
    "plot_stream_growth",
    "PlacementWidget",
    "placement_widget",
    "qk_logit_bound",
    "plot_qk_logits",
]

MODES = ("pre", "post", "output")
DEPTHS = (8, 16, 32, 64, 128)
EPS = 1e-5

_ACTS = {
    "relu": torch.relu,
    "gelu": torch.nn.functional.gelu,
    "tanh": torch.tanh,
}

_MODE_COLOURS = {"post": "C3", "pre": "C0", "output": "C2"}

_MODE_LABELS = {
    "post": "post-LN:  x ← LN(x + F(x))",
    "pre": "pre-LN:  x ← x + F(LN(x))",
    "output": "output-LN:  x ← x + LN(F(x))",
}


# --------------------------------------------------------------------------- the maths


def _layer_norm(x: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    """LayerNorm without gain or shift over the last axis (torch's own kernel). x: (..., d)."""
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), eps=eps)


@contextlib.contextmanager
def _one_thread():
    """Run torch on one intra-op thread, then restore the caller's setting.

    These matmuls are small (128 x 64 x 256): splitting them across threads costs more in
    synchronisation than it saves, and on a busy 2-core machine a 2-thread matmul measured
    100x slower than a 1-thread one.
    """
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def _check_mode(mode: str) -> None:
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")


def _act(name: str):
    try:
        return _ACTS[name]
    except KeyError:
        raise ValueError(f"act must be one of {tuple(_ACTS)}, got {name!r}") from None


def _generator(seed: int, depth: int, d: int) -> torch.Generator:
    # One stream per (seed, depth, d): a table entry does not depend on which other depths
    # were computed before it, or in which order.
    return torch.Generator().manual_seed(1_000_003 * seed + 1009 * depth + d)


def _init(depth: int, d: int, seeds: int, tokens: int, seed: int, dtype=torch.float32):
    """Weights and data for `seeds` independent models, batched on a leading axis.

    Returns W1: (depth, seeds, d, 4d), W2: (depth, seeds, 4d, d), x0: (seeds, tokens, d),
    v: (seeds, 1, d). Weight variance is 1/fan_in (LeCun), so a branch fed a unit-RMS
    input writes a vector whose squared norm is about d/2 (ReLU halves it).
    """
    hidden = 4 * d
    g = _generator(seed, depth, d)
    w1 = torch.randn(depth, seeds, d, hidden, generator=g, dtype=dtype) / math.sqrt(d)
    w2 = torch.randn(depth, seeds, hidden, d, generator=g, dtype=dtype) / math.sqrt(hidden)
    x0 = torch.randn(seeds, tokens, d, generator=g, dtype=dtype)
    v = torch.randn(seeds, 1, d, generator=g, dtype=dtype)
    return w1, w2, x0, v


def _block(sublayer, x: torch.Tensor, F, norm, mode: str) -> torch.Tensor:
    """One residual sublayer, composed by the caller's ``sublayer(x, F, norm, mode)``.

    normlab has no composition of its own: the experiments run the learner's
    ``residual_sublayer`` (notebook 05's exercise) on torch tensors, so its F and norm are
    differentiable. A function that only adds and calls F and norm works unchanged.
    """
    try:
        y = sublayer(x, F, norm, mode)
    except NotImplementedError:
        raise
    except Exception as error:  # re-raised with what the experiment needs
        raise TypeError(f"{getattr(sublayer, '__name__', 'sublayer')}(x, F, norm, {mode!r}) failed on torch "
                        f"tensors ({type(error).__name__}: {error}). These experiments pass torch tensors: "
                        "combine them with + and calls of F and norm only (no np.add, no .copy()).") from error
    if not isinstance(y, torch.Tensor) or y.shape != x.shape:
        raise TypeError(f"{getattr(sublayer, '__name__', 'sublayer')}(x, F, norm, {mode!r}) returned "
                        f"{type(y).__name__} {getattr(y, 'shape', '')}, expected a torch tensor of shape "
                        f"{tuple(x.shape)}: use + and calls of F and norm only, so that torch tensors stay tensors.")
    return y


def _mlp(act, w1, w2, scale: float = 1.0):
    """The branch F(h) = act((scale h) W1) W2 for one layer's weights (batched over initialisations)."""
    return lambda h: act((scale * h) @ w1) @ w2


def _grad_profiles(sublayer, depth: int, modes, *, d: int, tokens: int, seeds: int, seed: int, act: str,
                   dtype=torch.float32) -> dict:
    """||dL/dW2|| per layer and per initialisation: {mode: (seeds, depth) ndarray}.

    All modes see the same weights, inputs and loss vector, so they differ only in where
    the norm sits.
    """
    for m in modes:
        _check_mode(m)
    f = _act(act)
    w1, w2_all, x0, v = _init(depth, d, seeds, tokens, seed, dtype)
    out = {}
    with _one_thread():
        for mode in modes:
            out[mode] = _grad_profile(sublayer, mode, f, w1, w2_all, x0, v)
    return out


def _grad_profile(sublayer, mode, f, w1, w2_all, x0, v) -> np.ndarray:
    """(seeds, depth) gradient norms for one placement; see ``_grad_profiles``."""
    depth, tokens = w1.shape[0], x0.shape[1]
    # One leaf for the whole stack; unbind gives per-layer views whose gradients are
    # stacked back in a single op (indexing a leaf per layer would cost O(depth^2)).
    w2 = w2_all.clone().requires_grad_(True)
    w2_layers = w2.unbind(0)
    x = x0
    for layer in range(depth):
        x = _block(sublayer, x, _mlp(f, w1[layer], w2_layers[layer]), _layer_norm, mode)
    if mode != "post":
        x = _layer_norm(x)  # the final norm that pre-LN (and output-LN) models add
    loss = (x @ v.transpose(1, 2)).sum() / tokens  # mean over tokens of y_b . v, summed over seeds
    (g,) = torch.autograd.grad(loss, [w2])
    return g.flatten(2).norm(dim=-1).T.double().numpy()  # (seeds, depth)


def gradient_norms(sublayer, depth: int, mode: str = "post", *, d: int = 64, tokens: int = 128, seeds: int = 4,
                   seed: int = 0, act: str = "relu", per_seed: bool = False) -> np.ndarray:
    """Frobenius norm of dL/dW2 for every layer of a fresh residual MLP stack.

    sublayer: the composition ``sublayer(x, F, norm, mode)`` (notebook 05's residual_sublayer),
    called on torch tensors; depth: number of sublayers L; mode: "pre", "post" or "output"; d: model width (hidden
    width 4d); tokens: batch of tokens the loss averages over; seeds: random initialisations.
    Returns (depth,) float64, layer 1 (next to the input) first, averaged over the
    initialisations; with ``per_seed=True`` returns (seeds, depth) instead.
    """
    prof = _grad_profiles(sublayer, depth, (mode,), d=d, tokens=tokens, seeds=seeds, seed=seed, act=act)[mode]
    return prof if per_seed else prof.mean(axis=0)


def stream_gradients(sublayer, depth: int, mode: str = "post", *, d: int = 64, tokens: int = 128, seeds: int = 4,
                     seed: int = 0, act: str = "relu") -> dict:
    """What the gradient looks like on its way down: dL/dx_l at the input of every layer.

    ``sublayer`` composes each block, as in ``gradient_norms``.

    Returns a dict of (depth,) float64 arrays, layer 1 first: ``per_token``, the mean over
    tokens and initialisations of ||dL/dx_l|| for one token (times ``tokens``, so it is the
    size of the gradient a token would get from a loss on that token alone), and
    ``coherence``, ||mean over tokens of dL/dx_l|| / mean over tokens of ||dL/dx_l||: 1 when
    every token's gradient points the same way, about 1/sqrt(tokens) when they are unrelated.
    A W2 gradient is a sum over tokens, so it is large when the tokens' gradients agree.
    """
    _check_mode(mode)
    f = _act(act)
    w1, w2, x0, v = _init(depth, d, seeds, tokens, seed)
    with _one_thread():
        x = x0.clone().requires_grad_(True)
        inputs = []
        for layer in range(depth):
            inputs.append(x)
            x = _block(sublayer, x, _mlp(f, w1[layer], w2[layer]), _layer_norm, mode)
        if mode != "post":
            x = _layer_norm(x)
        loss = (x @ v.transpose(1, 2)).sum() / tokens
        grads = torch.autograd.grad(loss, inputs)
    per_token = np.array([tokens * g.norm(dim=-1).mean().item() for g in grads])
    coherence = np.array([(g.mean(dim=1).norm(dim=-1) / g.norm(dim=-1).mean(dim=1)).mean().item() for g in grads])
    return {"per_token": per_token, "coherence": coherence}


def gradient_scale_table(sublayer, depths=DEPTHS, modes=("post", "pre"), *, d: int = 64, tokens: int = 128,
                         seeds: int = 4, seed: int = 0, act: str = "relu", quick: bool = False) -> dict:
    """The gradient-scale experiment: every layer's ||dL/dW2|| for several depths.

    ``sublayer`` composes each block, as in ``gradient_norms``.

    The defaults take a few seconds on a 2-core CPU (8 s with the machine busy). The
    post-LN imbalance depends on ``tokens``: the bottom layers' gradients level off at a
    floor that falls like 1/sqrt(tokens) (at L = 128, top over bottom was about 5x with 64
    tokens, 7x with 128 and 14x with 256).
    ``quick=True`` (for grading runs) shrinks it to depths (4, 8, 16), d = 32, 32 tokens and
    2 initialisations: the same code path, a few hundred milliseconds.
    Returns a dict: ``depths`` (tuple of int), ``modes`` (tuple of str), ``norms``
    ({mode: {depth: (depth,) ndarray, mean over initialisations}}), ``per_seed``
    ({mode: {depth: (seeds, depth) ndarray}}), ``config`` (the settings) and ``seconds``.
    """
    if quick:
        depths, d, seeds, tokens = (4, 8, 16), min(d, 32), min(seeds, 2), min(tokens, 32)
    depths = tuple(int(x) for x in depths)
    modes = tuple(modes)
    t0 = time.perf_counter()
    per_seed = {m: {} for m in modes}
    for depth in depths:
        prof = _grad_profiles(sublayer, depth, modes, d=d, tokens=tokens, seeds=seeds, seed=seed, act=act)
        for m in modes:
            per_seed[m][depth] = prof[m]
    norms = {m: {L: per_seed[m][L].mean(axis=0) for L in depths} for m in modes}
    return {
        "depths": depths,
        "modes": modes,
        "norms": norms,
        "per_seed": per_seed,
        "config": dict(d=d, hidden=4 * d, tokens=tokens, seeds=seeds, seed=seed, act=act,
                       loss="mean over tokens of y . v, one fixed v ~ N(0, I)",
                       init="Gaussian, variance 1/fan_in, no biases", dtype="float32"),
        "seconds": time.perf_counter() - t0,
    }


def gradient_scale_rows(table: dict) -> list[dict]:
    """One row per depth: ``depth`` and, per mode m, ``m_first``, ``m_last`` (layers 1 and L),
    ``m_min``, ``m_max`` and ``m_spread`` (max / min over layers)."""
    rows = []
    for L in table["depths"]:
        row = {"depth": L}
        for m in table["modes"]:
            g = table["norms"][m][L]
            row.update({f"{m}_first": float(g[0]), f"{m}_last": float(g[-1]), f"{m}_min": float(g.min()),
                        f"{m}_max": float(g.max()), f"{m}_spread": float(g.max() / g.min())})
        rows.append(row)
    return rows


def format_gradient_table(table: dict) -> str:
    """Plain-text table: per depth, each mode's first-layer and last-layer gradient norms and
    their spread (largest over smallest layer)."""
    modes = table["modes"]
    head = f"{'layers':>6}"
    for m in modes:
        head += f" | {m + ' first':>10} {m + ' last':>10} {'spread':>7}"
    lines = [head, "-" * len(head)]
    for row in gradient_scale_rows(table):
        line = f"{row['depth']:>6}"
        for m in modes:
            line += f" | {row[m + '_first']:>10.2f} {row[m + '_last']:>10.2f} {row[m + '_spread']:>6.1f}x"
        lines.append(line)
    c = table["config"]
    lines.append(f"(d = {c['d']}, hidden {c['hidden']}, {c['tokens']} tokens, {c['act']}, "
                 f"mean of {c['seeds']} initialisations; spread = max/min over layers)")
    return "\n".join(lines)


def _plain_log_ticks(axis) -> None:
    """Ticks at 1, 2, 5 x 10^k labelled as plain numbers (20, not 2×10¹) on a log axis."""
    axis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FormatStrFormatter("%g"))
    axis.set_minor_formatter(NullFormatter())


def _depth_colours(n: int):
    from matplotlib import colormaps

    cmap = colormaps["viridis"]
    return [cmap(0.85 * i / max(n - 1, 1)) for i in range(n)]


def plot_gradient_scale(table: dict, *, normalise_x: bool = True, dpi: int = 100) -> Figure:
    """One panel per placement: ||dL/dW2|| against the layer's position, one line per depth.

    x is the layer index divided by the depth (0 = input side, 1 = output side) when
    ``normalise_x``, else the layer index itself; y is logarithmic and shared by the panels.
    """
    modes, depths = table["modes"], table["depths"]
    fig = Figure(figsize=(5.2 * len(modes), 4.0), dpi=dpi, facecolor="white")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(modes), sharey=True, squeeze=False)[0]
    colours = _depth_colours(len(depths))
    for ax, m in zip(axes, modes, strict=True):
        for L, col in zip(depths, colours, strict=True):
            g = table["norms"][m][L]
            x = np.arange(1, L + 1) / L if normalise_x else np.arange(1, L + 1)
            ax.plot(x, g, color=col, lw=1.8, marker="o" if L <= 16 else None, ms=3, label=f"L = {L}")
        ax.set_yscale("log")
        ax.set_xlabel("layer position ℓ / L  (0 = input, 1 = output)" if normalise_x else "layer ℓ")
        ax.grid(True, which="both", color="0.9", lw=0.6)
        ax.set_title(_gradient_finding(table, m), fontsize=10)
    axes[0].set_ylabel(r"$\|\partial \mathcal{L} / \partial W_2\|_F$  (log scale)")
    _plain_log_ticks(axes[0].yaxis)  # the panels share y
    axes[-1].legend(title="depth", fontsize=8, title_fontsize=8, loc="best")
    fig.set_layout_engine("tight")
    return fig


def _gradient_finding(table: dict, mode: str) -> str:
    """A title that states what the panel shows, with the numbers behind it."""
    lo, hi = table["depths"][0], table["depths"][-1]
    g_lo, g_hi = table["norms"][mode][lo], table["norms"][mode][hi]
    if mode == "post":
        return (f"post-LN: top layer does not shrink ({g_lo[-1]:.0f} → {g_hi[-1]:.0f}),\n"
                f"bottom falls with depth ({g_lo[0]:.0f} → {g_hi[0]:.0f}): "
                f"{g_hi[-1] / g_hi[0]:.0f}× apart at L = {hi}")
    name = {"pre": "pre-LN", "output": "output-LN"}[mode]
    return (f"{name}: last layer shrinks with depth ({g_lo[-1]:.0f} → {g_hi[-1]:.1f},\n"
            f"×{g_hi[-1] / g_lo[-1]:.2f}; 1/√{hi // lo} = {math.sqrt(lo / hi):.2f}), "
            f"layers within {g_hi.max() / g_hi.min():.1f}×")


# ----------------------------------------------------------------- the stream's growth


def _pre_ln_stream(sublayer, depth: int, *, d: int, tokens: int, seeds: int, seed: int, act: str,
                   scaling: str | None):
    """Forward a pre-LN stack without gradients; return per-layer stream norms and write norms,
    both (depth+1,) and (depth,), averaged over tokens and initialisations. Each block is
    ``sublayer(x, F, norm, "pre")``; its write is what it added to the stream."""
    if scaling not in (None, "sun"):
        raise ValueError(f"scaling must be None or 'sun', got {scaling!r}")
    f = _act(act)
    w1, w2, x, _v = _init(depth, d, seeds, tokens, seed)
    stream, writes = [x.norm(dim=-1).mean().item()], []
    with torch.no_grad(), _one_thread():
        for layer in range(depth):
            # Sun et al. (2025), "LayerNorm Scaling": multiply the norm's output by 1/sqrt(l).
            s = 1.0 / math.sqrt(layer + 1) if scaling == "sun" else 1.0
            x_next = _block(sublayer, x, _mlp(f, w1[layer], w2[layer], scale=s), _layer_norm, "pre")
            writes.append(((x_next - x).norm(dim=-1) / x.norm(dim=-1)).mean().item())
            x = x_next
            stream.append(x.norm(dim=-1).mean().item())
    return np.array(stream), np.array(writes)


def stream_norms(sublayer, depth: int = 64, *, d: int = 64, tokens: int = 64, seeds: int = 4, seed: int = 0,
                 act: str = "relu", scaling: str | None = None) -> np.ndarray:
    """||x_l|| of the pre-LN residual stream, l = 0 (the input) ... depth: (depth+1,).

    Each block is ``sublayer(x, F, norm, "pre")`` (notebook 05's residual_sublayer).

    Each pre-LN write has about the same size and the writes are nearly uncorrelated, so
    ||x_l||^2 grows linearly and ||x_l|| like sqrt(l). ``scaling="sun"`` multiplies each
    norm's output by 1/sqrt(l) (Sun et al., 2025), which slows the growth to about
    sqrt(log l) at initialisation. Mean over tokens and initialisations.
    """
    return _pre_ln_stream(sublayer, depth, d=d, tokens=tokens, seeds=seeds, seed=seed, act=act,
                          scaling=scaling)[0]


def relative_write_sizes(sublayer, depth: int = 64, *, d: int = 64, tokens: int = 64, seeds: int = 4, seed: int = 0,
                         act: str = "relu", scaling: str | None = None) -> np.ndarray:
    """||F(LN(x_l))|| / ||x_l|| for l = 0 ... depth-1: how much each pre-LN layer can move
    the stream it writes into: (depth,). It falls like 1/sqrt(l), since the write has a fixed
    size and the stream grows like sqrt(l). Mean over tokens and initialisations."""
    return _pre_ln_stream(sublayer, depth, d=d, tokens=tokens, seeds=seeds, seed=seed, act=act,
                          scaling=scaling)[1]


def plot_stream_growth(sublayer, depth: int = 64, *, d: int = 64, dpi: int = 100) -> Figure:
    """Two panels: the pre-LN stream norm ||x_l|| against the sqrt(l) law fitted to it, and the
    relative write size ||F(LN(x_l))|| / ||x_l|| against l on log-log axes."""
    norms, rel = _pre_ln_stream(sublayer, depth, d=d, tokens=64, seeds=4, seed=0, act="relu", scaling=None)
    ell = np.arange(depth + 1)
    # ||x_l||^2 = ||x_0||^2 + l c d: fit the one constant c by least squares on the squares.
    c = float(np.sum(ell * (norms**2 - norms[0] ** 2)) / np.sum(ell**2)) / d
    fig = Figure(figsize=(10.4, 3.8), dpi=dpi, facecolor="white")
    FigureCanvasAgg(fig)
    ax1, ax2 = fig.subplots(1, 2)
    ax1.plot(ell, norms, "o", ms=3, color="C0", label="measured")
    ax1.plot(ell, np.sqrt(norms[0] ** 2 + ell * c * d), color="0.3", lw=1.2,
             label=rf"$\sqrt{{\|x_0\|^2 + \ell\, c\, d}}$, c = {c:.2f}")
    ax1.set_xlabel("layer ℓ")
    ax1.set_ylabel(r"$\|x_\ell\|$")
    ax1.set_title(f"pre-LN stream grows like √ℓ: ×{norms[-1] / norms[0]:.1f} after {depth} layers", fontsize=10)
    ax1.legend(fontsize=8)
    l1 = np.arange(1, depth + 1)
    # A write of fixed squared size c d into a stream of squared size ||x_0||^2 + l c d.
    predicted = np.sqrt(c * d) / np.sqrt(norms[0] ** 2 + (l1 - 1) * c * d)
    ax2.loglog(l1, rel, "o", ms=3, color="C1", label="measured")
    ax2.loglog(l1, predicted, color="0.3", lw=1.2, label=r"$\sqrt{c\,d} \,/\, \sqrt{\|x_0\|^2 + \ell\, c\, d}$")
    ax2.set_xlabel("layer ℓ + 1  (log)")
    ax2.set_ylabel(r"$\|F(\mathrm{LN}(x_\ell))\| \,/\, \|x_\ell\|$  (log)")
    ax2.set_title(f"later layers only nudge: {rel[0]:.2f} at layer 1, {rel[-1]:.2f} at layer {depth}", fontsize=10)
    ax2.legend(fontsize=8)
    for ax in (ax1, ax2):
        ax.grid(True, which="both", color="0.9", lw=0.6)
    _plain_log_ticks(ax2.xaxis)
    _plain_log_ticks(ax2.yaxis)
    fig.set_layout_engine("tight")
    return fig


# ---------------------------------------------------------------------------- widget


class PlacementWidget:
    """Live, smaller gradient-scale experiment: pick a depth and a placement, see every layer's
    ||dL/dW2||, averaged over four initialisations. ``sublayer`` composes each block (the
    learner's residual_sublayer).

    Display ``w.widget`` (or ``w`` as the last line of a cell). Attributes for code and
    tests: ``depth`` (IntSlider), ``mode`` (ToggleButtons "post" / "pre" / "output"),
    ``width`` (Dropdown, d), ``resample_button``, ``readout`` (HTML), ``image`` (Image with
    the PNG), ``fig`` (the one Figure, updated in place), ``lines`` ({mode: Line2D}),
    ``profiles`` ({mode: (depth,) ndarray}, the numbers drawn) and ``n_renders``.
    The selected placement is drawn bold; the other two stay in the figure as thin lines.
    """

    def __init__(self, sublayer, depth: int = 32, mode: str = "post", *, d: int = 32, tokens: int = 32, seeds: int = 4,
                 max_depth: int = 64, dpi: int = 80):
        import ipywidgets as widgets  # here, so the rest of the module works without ipywidgets

        _check_mode(mode)
        self.sublayer = sublayer
        self.tokens, self.seeds = tokens, seeds
        self._seed = 0
        self._cache: dict = {}
        self.n_renders = 0
        self.profiles: dict = {}
        self.seconds = 0.0

        self.fig = Figure(figsize=(7.2, 3.6), dpi=dpi, facecolor="white")
        self._canvas = FigureCanvasAgg(self.fig)
        self.ax = self.fig.add_subplot(1, 1, 1)
        self.lines = {}
        for m in MODES:
            (self.lines[m],) = self.ax.plot([], [], color=_MODE_COLOURS[m], marker="o", ms=3, label=m + "-LN")
        self.ax.set_yscale("log")
        _plain_log_ticks(self.ax.yaxis)
        self.ax.set_xlabel("layer ℓ  (1 = next to the input)")
        self.ax.set_ylabel(r"$\|\partial \mathcal{L} / \partial W_2\|_F$  (log)")
        self.ax.grid(True, which="major", color="0.9", lw=0.6)
        self.ax.legend(loc="upper left", fontsize=8)
        self.fig.subplots_adjust(left=0.11, right=0.98, bottom=0.14, top=0.88)

        self.depth = widgets.IntSlider(value=depth, min=2, max=max_depth, step=2, description="layers L",
                                       continuous_update=False)
        self.mode = widgets.ToggleButtons(options=list(MODES), value=mode, description="placement")
        self.width = widgets.Dropdown(options=[16, 32, 64], value=d, description="width d")
        self.resample_button = widgets.Button(description="New initialisations",
                                              tooltip="draw four fresh random models")
        self.readout = widgets.HTML()
        self.image = widgets.Image(format="png")
        for w in (self.depth, self.mode, self.width):
            w.observe(self._on_change, names="value")
        self.resample_button.on_click(lambda _b: self.resample())
        self.widget = widgets.VBox([
            widgets.HBox([self.depth, self.width, self.resample_button]),
            self.mode,
            self.readout,
            self.image,
        ])
        self.update()

    def _on_change(self, _change) -> None:
        self.update()

    def resample(self) -> None:
        """Draw new random models (the next seed) and redraw."""
        self._seed += 1
        self.update()

    def _compute(self, depth: int, d: int) -> dict:
        key = (depth, d, self._seed)
        if key not in self._cache:
            prof = _grad_profiles(self.sublayer, depth, MODES, d=d, tokens=self.tokens,
                                  seeds=self.seeds, seed=self._seed,
                                  act="relu")
            self._cache[key] = {m: p.mean(axis=0) for m, p in prof.items()}
        return self._cache[key]

    def update(self) -> None:
        """Recompute (or fetch from the cache) and redraw the figure into the Image."""
        t0 = time.perf_counter()
        depth, d, sel = int(self.depth.value), int(self.width.value), self.mode.value
        self.profiles = self._compute(depth, d)
        layers = np.arange(1, depth + 1)
        for m, line in self.lines.items():
            line.set_data(layers, self.profiles[m])
            chosen = m == sel
            line.set_linewidth(2.4 if chosen else 0.9)
            line.set_alpha(1.0 if chosen else 0.45)
            line.set_markersize(4 if chosen else 0)
            line.set_zorder(3 if chosen else 2)
        allv = np.concatenate(list(self.profiles.values()))
        self.ax.set_xlim(0.5, depth + 0.5)
        self.ax.set_ylim(allv.min() / 1.5, allv.max() * 1.5)
        # The title names what is drawn, never what it shows: the learner reads that off the curves.
        self.ax.set_title(f"{_MODE_LABELS[sel]}   (L = {depth}, d = {d})", fontsize=10)
        if figures_drawn():  # graded: no picture is looked at (normlab.run_mode)
            buf = io.BytesIO()
            self._canvas.print_png(buf)
            self.image.value = buf.getvalue()
            self.n_renders += 1
        self.seconds = time.perf_counter() - t0
        self.readout.value = self._readout_html(depth, sel)

    def _readout_html(self, depth: int, sel: str) -> str:
        cells = []
        for m in MODES:
            g = self.profiles[m]
            style = "font-weight:bold" if m == sel else "color:#666"
            cells.append(f"<span style='{style}'>{html.escape(m)}-LN: first {g[0]:.2f}, last {g[-1]:.2f}, "
                         f"max/min {g.max() / g.min():.1f}×</span>")
        return ("&nbsp;&nbsp;|&nbsp;&nbsp;".join(cells) +
                f"<br><small>mean of {self.seeds} initialisations, {self.tokens} tokens; "
                f"drawn in {1000 * self.seconds:.0f} ms</small>")

    def _ipython_display_(self):  # `w` on the last line of a cell shows the widget
        from IPython.display import display

        display(self.widget)


def placement_widget(sublayer, **kwargs) -> PlacementWidget:
    """Build a ``PlacementWidget`` whose blocks are ``sublayer(x, F, norm, mode)`` (notebook 05's
    residual_sublayer); keyword arguments as its constructor. Display ``.widget``."""
    return PlacementWidget(sublayer, **kwargs)


# --------------------------------------------------------------------------- QK-norm


def qk_logit_bound(qk_norm_logits, scales=(1, 2, 4, 8, 16, 32), *, d_model: int = 256, d_k: int = 64,
                   tokens: int = 64, gain: float = 1.0, seed: int = 0) -> dict:
    """Largest |attention logit| as W_Q and W_K grow, with and without QK-norm.

    One head: q = x (s W_Q), k = x (s W_K) for each factor s in ``scales``, with x: (tokens,
    d_model) standard normal and W_Q, W_K: (d_model, d_k) of variance 1/d_model. Plain logits
    are q.k / sqrt(d_k) and grow like s^2. The QK-norm logits are what ``qk_norm_logits(q, k,
    g_q, g_k)`` returns (notebook 05's exercise) with both gains equal to ``gain``; after an
    RMSNorm each vector has norm gain * sqrt(d_k), so by Cauchy-Schwarz |logit| <= gain^2 sqrt(d_k)
    for every s. Returns a dict: float64 arrays (len(scales),) ``scales``, ``plain``,
    ``qk_norm``, and the floats ``bound`` and ``gain``.
    """
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((tokens, d_model))
    wq = rng.standard_normal((d_model, d_k)) / math.sqrt(d_model)
    wk = rng.standard_normal((d_model, d_k)) / math.sqrt(d_model)
    g = np.full(d_k, float(gain))
    scales = np.asarray(scales, dtype=np.float64)
    plain, normed = [], []
    for s in scales:
        q, k = x @ (s * wq), x @ (s * wk)
        plain.append(float(np.abs(np.einsum("id,jd->ij", q, k)).max()) / math.sqrt(d_k))
        normed.append(float(np.abs(np.asarray(qk_norm_logits(q, k, g, g))).max()))
    return {"scales": scales, "plain": np.array(plain), "qk_norm": np.array(normed),
            "bound": gain**2 * math.sqrt(d_k), "gain": float(gain)}


def plot_qk_logits(result: dict, *, dpi: int = 100) -> Figure:
    """Max |logit| against the weight scale s (log-log): plain grows like s^2, QK-norm stays
    under its bound. ``result`` is what ``qk_logit_bound`` returns."""
    s, plain, normed = result["scales"], result["plain"], result["qk_norm"]
    fig = Figure(figsize=(5.6, 3.8), dpi=dpi, facecolor="white")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    ax.loglog(s, plain, "o-", color="C3", label="no QK-norm")
    ax.loglog(s, normed, "s-", color="C0", label=f"QK-norm (RMS, gain {result['gain']:g})")
    ax.axhline(result["bound"], color="C0", ls="--", lw=1, label=f"bound {result['bound']:.3g}")
    ax.set_xlabel("scale s of W_Q and W_K  (log)")
    ax.set_ylabel("max |attention logit|  (log)")
    ax.set_title(f"without QK-norm the largest logit grows like s² (×{plain[-1] / plain[0]:.0f});\n"
                 f"with it, it stays ≤ {result['bound']:.3g} at every scale", fontsize=10)
    ax.grid(True, which="both", color="0.9", lw=0.6)
    ax.legend(fontsize=8)
    fig.set_layout_engine("tight")
    return fig
