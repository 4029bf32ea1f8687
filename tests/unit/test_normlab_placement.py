"""normlab.placement: the gradient-scale experiment, stream growth, the widget, QK-norm.

Small configurations only (a few seconds in all); the claims tested are the shapes the
notebook's prose relies on, with margins far wider than the seed-to-seed noise.
"""
import math

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pytest
from matplotlib.figure import Figure

from normlab import placement
from tests.implementations.placement import qk_matmul as QK
from tests.implementations.placement import sublayer_if_chain as SUB  # normlab has no composition of its own


@pytest.fixture(scope="module")
def small_table():
    # d = 32, 4 and 32 layers, 4 initialisations: about half a second.
    return placement.gradient_scale_table(SUB, depths=(4, 32), modes=("post", "pre"), d=32, tokens=32, seeds=4)


def test_gradient_norms_shape_and_finite():
    """One finite, positive norm per layer; per_seed gives one row per initialisation."""
    g = placement.gradient_norms(SUB, 6, "pre", d=16, tokens=8, seeds=3)
    assert g.shape == (6,) and g.dtype == np.float64
    assert np.all(np.isfinite(g)) and np.all(g > 0)
    p = placement.gradient_norms(SUB, 6, "output", d=16, tokens=8, seeds=3, per_seed=True)
    assert p.shape == (3, 6)


def test_gradient_norms_deterministic():
    """The same seed gives the same numbers, whatever was computed before."""
    a = placement.gradient_norms(SUB, 5, "post", d=16, tokens=8, seeds=2, seed=3)
    placement.gradient_norms(SUB, 7, "post", d=16, tokens=8, seeds=2, seed=4)
    b = placement.gradient_norms(SUB, 5, "post", d=16, tokens=8, seeds=2, seed=3)
    np.testing.assert_array_equal(a, b)


def test_unknown_mode_and_act_raise():
    """Only "pre", "post" and "output" exist."""
    with pytest.raises(ValueError, match="mode"):
        placement.gradient_norms(SUB, 2, "sandwich", d=8, tokens=4, seeds=1)
    with pytest.raises(ValueError, match="act"):
        placement.gradient_norms(SUB, 2, "pre", d=8, tokens=4, seeds=1, act="swish")


def test_post_ln_imbalance_grows_with_depth(small_table):
    """Post-LN: the top layer's gradient does not shrink with depth, the bottom layer's does,
    so last/first grows."""
    n = small_table["norms"]["post"]
    shallow, deep = n[4], n[32]
    assert deep[-1] > 0.8 * shallow[-1]
    assert deep[0] < 0.8 * shallow[0]
    assert deep[-1] / deep[0] > 1.5 * (shallow[-1] / shallow[0])
    assert deep[-1] / deep[0] > 2.0


def test_pre_ln_last_layer_shrinks_with_depth(small_table):
    """Pre-LN: the last layer's gradient falls with depth (the theorem says like 1/sqrt(L))
    and is spread across layers far less than post-LN's."""
    pre, post = small_table["norms"]["pre"], small_table["norms"]["post"]
    ratio = pre[32][-1] / pre[4][-1]
    assert 0.25 < ratio < 0.7, ratio  # 1/sqrt(8) = 0.35; stream growth from x_0 makes it a bit larger
    spread = lambda g: g.max() / g.min()  # noqa: E731 - a one-line helper
    assert spread(pre[32]) < spread(post[32])


def test_table_rows_and_text(small_table):
    """Rows carry first/last per mode; the text table has one line per depth."""
    rows = placement.gradient_scale_rows(small_table)
    assert [r["depth"] for r in rows] == [4, 32]
    assert rows[1]["post_last"] == pytest.approx(small_table["norms"]["post"][32][-1])
    text = placement.format_gradient_table(small_table)
    assert "post first" in text and "pre last" in text
    assert len(text.splitlines()) == 2 + 2 + 1


def test_quick_table_is_small():
    """quick=True (grading runs) shrinks the experiment but keeps its structure."""
    tab = placement.gradient_scale_table(SUB, quick=True)
    assert tab["depths"] == (4, 8, 16)
    assert tab["config"]["d"] == 32 and tab["config"]["seeds"] == 2
    assert all(tab["norms"][m][16].shape == (16,) for m in ("post", "pre"))
    assert tab["seconds"] > 0  # reported, never asserted against a limit


def test_plot_gradient_scale(small_table):
    """One panel per placement with one line per depth, log y, titles that state the finding."""
    fig = placement.plot_gradient_scale(small_table)
    assert isinstance(fig, Figure)
    axes = fig.get_axes()
    assert len(axes) == 2
    for ax in axes:
        assert ax.get_yscale() == "log"
        assert len(ax.get_lines()) == 2
    assert "post-LN" in axes[0].get_title() and "pre-LN" in axes[1].get_title()


def test_stream_gradients_shapes():
    """Per-layer stream gradients: post-LN tokens lose agreement on the way down, pre-LN's
    identity path keeps more of it."""
    post = placement.stream_gradients(SUB, 24, "post", d=32, tokens=32, seeds=2)
    pre = placement.stream_gradients(SUB, 24, "pre", d=32, tokens=32, seeds=2)
    for r in (post, pre):
        assert r["per_token"].shape == (24,) and r["coherence"].shape == (24,)
        assert np.all((r["coherence"] > 0) & (r["coherence"] <= 1 + 1e-6))
    assert post["coherence"][-1] > 0.9
    assert post["coherence"][0] < pre["coherence"][0]


def test_stream_norm_grows_like_sqrt_depth():
    """Pre-LN: ||x_l||^2 grows about linearly in l, and each write is a shrinking fraction."""
    depth, d = 32, 32
    norms = placement.stream_norms(SUB, depth, d=d, tokens=32, seeds=2)
    assert norms.shape == (depth + 1,)
    sq = norms**2
    # Single steps can shrink the stream a little; over eight layers it always grows.
    assert np.all(sq[8:] > sq[:-8])
    # Linear growth of the square: the second half adds about as much as the first.
    first, second = sq[depth // 2] - sq[0], sq[depth] - sq[depth // 2]
    assert 0.7 < second / first < 1.4
    rel = placement.relative_write_sizes(SUB, depth, d=d, tokens=32, seeds=2)
    assert rel.shape == (depth,)
    assert rel[-1] < 0.5 * rel[0]


def test_sun_scaling_slows_stream_growth():
    """Scaling each norm's output by 1/sqrt(l) (Sun et al., 2025) keeps the stream smaller."""
    plain = placement.stream_norms(SUB, 32, d=32, tokens=16, seeds=2)
    scaled = placement.stream_norms(SUB, 32, d=32, tokens=16, seeds=2, scaling="sun")
    assert scaled[0] == pytest.approx(plain[0])
    assert scaled[-1] < 0.7 * plain[-1]
    with pytest.raises(ValueError):
        placement.stream_norms(SUB, 4, d=8, tokens=4, seeds=1, scaling="other")


@pytest.mark.parametrize("gain", [1.0, 2.0])
def test_qk_norm_bounds_the_logits(gain):
    """Without QK-norm the largest logit grows like s^2; with it (the learner's function), it
    stays under g^2 sqrt(d_k) and does not move."""
    r = placement.qk_logit_bound(QK, (1, 4, 16, 64), d_k=32, d_model=64, tokens=16, gain=gain)
    assert r["plain"][-1] / r["plain"][0] == pytest.approx(64.0**2, rel=1e-6)
    assert np.all(r["qk_norm"] <= r["bound"] * (1 + 1e-9))
    np.testing.assert_allclose(r["qk_norm"], r["qk_norm"][0], rtol=1e-6)  # scale-invariant
    assert r["bound"] == pytest.approx(gain**2 * math.sqrt(32))


def test_plot_qk_logits():
    """The QK-norm figure draws both curves and the bound."""
    r = placement.qk_logit_bound(QK, (1, 2, 4), d_k=8, d_model=16, tokens=4)
    fig = placement.plot_qk_logits(r)
    assert isinstance(fig, Figure) and len(fig.get_axes()[0].get_lines()) == 3


def test_placement_widget_updates_in_place():
    """The widget builds, a control change re-renders into the same Image from the same Figure."""
    pytest.importorskip("ipywidgets")
    w = placement.placement_widget(SUB, depth=8, d=16, tokens=8, seeds=2, max_depth=16)
    fig, png0, renders0 = w.fig, w.image.value, w.n_renders
    assert isinstance(fig, Figure) and png0[:8] == b"\x89PNG\r\n\x1a\n"
    w.depth.value = 12
    assert w.fig is fig
    assert w.n_renders == renders0 + 1
    assert w.image.value != png0
    assert len(w.lines["post"].get_xdata()) == 12
    np.testing.assert_allclose(w.lines["post"].get_ydata(), w.profiles["post"])
    png1 = w.image.value
    w.mode.value = "pre"  # cached: only the styling changes
    assert w.image.value != png1
    assert w.lines["pre"].get_linewidth() > w.lines["post"].get_linewidth()
    w.resample_button.click()
    assert w.fig is fig and w.n_renders == renders0 + 3
    assert "post-LN" in w.readout.value


def test_normlab_has_no_composition_of_its_own():
    """The experiments take the learner's residual_sublayer: normlab compares no mode string
    with a placement and writes no residual formula (issue 11)."""
    import inspect

    source = inspect.getsource(placement)
    for needle in ("return x + ", "return norm(", "def _sublayer", "def _rms_norm"):
        assert needle not in source, needle


def test_numbers_do_not_depend_on_how_the_sublayer_is_written():
    """Two differently written correct compositions give the same gradients, bit for bit."""
    from tests.implementations.placement import sublayer_lazy_table

    for mode in ("pre", "post", "output"):
        a = placement.gradient_norms(SUB, 6, mode, d=16, tokens=8, seeds=2)
        b = placement.gradient_norms(sublayer_lazy_table, 6, mode, d=16, tokens=8, seeds=2)
        np.testing.assert_allclose(a, b, rtol=1e-6)


def test_a_numpy_only_sublayer_gets_a_clear_error():
    def numpy_only(x, F, norm, mode):
        return np.add(x, F(norm(x)))

    with pytest.raises(TypeError, match="torch tensors"):
        placement.gradient_norms(numpy_only, 3, "pre", d=8, tokens=4, seeds=1)


def test_widget_title_states_no_finding():
    """The widget's title names what is drawn (placement, L, d), never a measured ratio."""
    pytest.importorskip("ipywidgets")
    w = placement.placement_widget(SUB, depth=4, d=16, tokens=8, seeds=2, max_depth=8)
    title = w.ax.get_title()
    assert "L = 4" in title and "/" not in title.split("(")[-1]
