"""Headless tests of normlab.geometry (notebook 02's widget and figures) and its benchmark."""

import matplotlib

matplotlib.use("Agg")

import inspect
import io
import re
import tokenize

import numpy as np
import pytest

pytest.importorskip("ipywidgets")

from normlab import geometry
from normlab.geometry import (
    CIRCLE_LABEL,
    BarDragWidget,
    sphere_points_3d,
    sphere_view_3d,
    static_geometry_figure,
)

EPS = 1e-5
# A vector with a large spread, so that eps changes LN(a x) by well under 1e-6.
X_TEST = np.array([-4.5, 4.0, -1.0, 3.5, 0.5, -2.5])


def ln_ref(z, eps=EPS):
    """LayerNorm written out again here, independently of the module under test."""
    z = np.asarray(z, dtype=np.float64)
    mu = sum(z) / len(z)
    var = sum((v - mu) ** 2 for v in z) / len(z)
    return np.array([(v - mu) / (var + eps) ** 0.5 for v in z])


def rms_ref(z, eps=EPS):
    z = np.asarray(z, dtype=np.float64)
    return z / (sum(v * v for v in z) / len(z) + eps) ** 0.5


@pytest.fixture
def w():
    return BarDragWidget(show_rms=True)


def set_x(w, x):
    for s, v in zip(w.sliders, x, strict=True):
        s.value = float(v)


def test_panels_plot_input_centred_and_layernorm(w):
    """Bar heights in each panel equal what the test computes from the sliders."""
    set_x(w, X_TEST)
    assert np.array_equal(w.x, X_TEST)
    np.testing.assert_allclose(w.heights("input"), X_TEST, atol=1e-12)
    np.testing.assert_allclose(w.heights("centred"), X_TEST - X_TEST.mean(), atol=1e-12)
    np.testing.assert_allclose(w.heights("ln"), ln_ref(X_TEST), atol=1e-12)
    np.testing.assert_allclose(w.heights("rms"), rms_ref(X_TEST), atol=1e-12)


def test_readouts_show_mu_sigma_sum_and_squared_norm(w):
    """The HTML readout and w.stats hold mu, sigma, sum(x_hat) and ||x_hat||^2."""
    a, c = 2.0, -1.5
    set_x(w, X_TEST)
    w.scale.value, w.shift.value = a, c
    z = a * X_TEST + c
    mu, sigma = z.mean(), z.std()
    x_hat = ln_ref(z)
    expected = {"mu": mu, "sigma": sigma, "sum_x_hat": x_hat.sum(), "sq_norm_x_hat": x_hat @ x_hat,
                "predicted_sq_norm": 6 * sigma**2 / (sigma**2 + EPS)}
    for k, v in expected.items():
        assert w.stats[k] == pytest.approx(v, abs=1e-9), k
    assert w.stats["sq_norm_x_hat"] == pytest.approx(6.0, abs=1e-5)
    # The readout a learner sees: numbers in the order mu, sigma, sum, squared norm, prediction.
    shown = [float(v) for v in re.findall(r"monospace'>([-+0-9.e]+)<", w.readout.value)]
    assert shown[:5] == pytest.approx([mu, sigma, x_hat.sum(), x_hat @ x_hat, expected["predicted_sq_norm"]],
                                      abs=1e-4)


def test_shift_leaves_layernorm_panel_still_but_moves_rmsnorm(w):
    set_x(w, X_TEST)
    ln0, rms0 = w.heights("ln"), w.heights("rms")
    for c in (7.3, -9.9, 0.4):
        w.shift.value = c
        np.testing.assert_allclose(w.heights("input"), X_TEST + c, atol=1e-12)
        np.testing.assert_allclose(w.heights("ln"), ln0, atol=1e-9)  # exact: c leaves sigma alone
        assert np.abs(w.heights("rms") - rms0).max() > 0.05, "RMSNorm should move with the shift c"


def test_scale_leaves_layernorm_and_rmsnorm_panels_still(w):
    set_x(w, X_TEST)
    ln0, rms0 = w.heights("ln"), w.heights("rms")
    # eps makes LN(a x) differ from LN(x) by about |x_hat| eps / (2 sigma^2) <= 1e-6 here.
    for a in (1.7, 2.5, 4.0):
        w.scale.value = a
        np.testing.assert_allclose(w.heights("input"), a * X_TEST, atol=1e-12)
        np.testing.assert_allclose(w.heights("ln"), ln0, atol=1e-6)
        np.testing.assert_allclose(w.heights("rms"), rms0, atol=1e-6)
    w.shift.value = 3.0  # both controls at once
    np.testing.assert_allclose(w.heights("ln"), ln0, atol=1e-6)


def test_negative_scale_flips_layernorm_and_rmsnorm(w):
    """a < 0 is allowed: LN(a x + c) = -LN(x) (up to eps), and the same for RMSNorm with c = 0."""
    set_x(w, X_TEST)
    ln0, rms0 = w.heights("ln"), w.heights("rms")
    assert w.scale.min < 0
    for a in (-0.5, -1.0, -3.5):
        w.scale.value = a
        assert w.scale.value == a, "the scale slider must accept negative values"
        np.testing.assert_allclose(w.heights("input"), a * X_TEST, atol=1e-12)
        np.testing.assert_allclose(w.heights("ln"), -ln0, atol=1e-5)
        np.testing.assert_allclose(w.heights("rms"), -rms0, atol=1e-5)
        np.testing.assert_allclose(w.heights("ln"), ln_ref(a * X_TEST), atol=1e-12)
    w.scale.value = 0.0  # a constant token: nothing left after centring
    np.testing.assert_allclose(w.heights("ln"), 0.0, atol=1e-12)


def test_eps_slider_reaches_the_noise_floor(w):
    """Raising eps shrinks LN(z) inside the sphere: ||x_hat||^2 = d sigma^2 / (sigma^2 + eps), half of d at
    eps = sigma^2."""
    set_x(w, X_TEST)
    sigma2 = X_TEST.var()
    assert w.eps == pytest.approx(EPS)
    assert w.eps_slider.max >= 2 and 10 ** w.eps_slider.max > 4 * sigma2, "eps must reach beyond sigma^2"
    for eps in (1e-3, 1.0, 10.0, 100.0):
        w.eps_slider.value = eps
        assert w.eps == pytest.approx(eps)
        np.testing.assert_allclose(w.heights("ln"), ln_ref(X_TEST, eps), atol=1e-12)
        np.testing.assert_allclose(w.heights("rms"), rms_ref(X_TEST, eps), atol=1e-12)
        assert w.stats["sq_norm_x_hat"] == pytest.approx(6 * sigma2 / (sigma2 + eps), rel=1e-12)
        assert w.stats["predicted_sq_norm"] == pytest.approx(w.stats["sq_norm_x_hat"], rel=1e-12)
    shown = re.findall(r"ε</td><td[^>]*>([-+0-9.e]+)<", w.readout.value)
    assert shown and float(shown[0]) == pytest.approx(100.0), "the readout shows the eps in use"
    w.eps_slider.value = sigma2  # the noise floor: half the squared radius
    assert w.stats["sq_norm_x_hat"] == pytest.approx(3.0, rel=0.15)  # the slider's grid is 10^0.1 apart


def test_titles_describe_and_do_not_conclude(w):
    """The widget is an experiment: no title or label says what a, c or eps do."""
    texts = [w._suptitle.get_text()] + [p.ax.get_title() for p in w.panels.values()]
    for text in texts:
        for verdict in ("unmoved", "ignores", "does not move", "moves with", "sums to 0", "="[:0] + "invariant"):
            assert verdict not in text, (verdict, text)
    w.show_rms.value = False
    assert "ignores" not in w._suptitle.get_text()


def test_reset_restores_initial_vector_and_controls(w):
    x0 = w.x.copy()
    set_x(w, X_TEST)
    w.scale.value, w.shift.value, w.eps_slider.value = 3.0, 2.0, 1.0
    renders = w.n_renders
    w.reset_button.click()
    assert np.array_equal(w.x, x0)
    assert np.array_equal(x0, np.array(geometry.X0))
    assert (w.scale.value, w.shift.value) == (1.0, 0.0)
    assert w.eps == pytest.approx(EPS)
    assert w.n_renders == renders + 1, "reset should redraw once, not once per slider"
    np.testing.assert_allclose(w.heights("ln"), ln_ref(x0), atol=1e-12)


def test_randomise_changes_the_vector(w):
    for _ in range(3):
        before = w.x
        w.randomise_button.click()
        x = w.x
        assert not np.array_equal(x, before), "Randomise gave the same vector"
        assert np.all((x >= w.sliders[0].min) & (x <= w.sliders[0].max))
        np.testing.assert_allclose(x, np.round(x, 1), atol=1e-12)  # on the slider grid
        np.testing.assert_allclose(w.heights("ln"), ln_ref(w.z), atol=1e-12)


def test_figure_is_updated_in_place_never_rebuilt(w):
    fig, axes = w.fig, list(w.fig.axes)
    bars = [p.bars for p in w.panels.values()]
    n = w.n_renders
    actions = [
        lambda: setattr(w.sliders[2], "value", -3.3),
        lambda: setattr(w.scale, "value", 5.0),
        lambda: setattr(w.shift, "value", -8.0),
        lambda: setattr(w.scale, "value", -2.0),
        lambda: setattr(w.eps_slider, "value", 30.0),  # large enough to shrink LN visibly
        lambda: setattr(w.show_rms, "value", False),
        lambda: setattr(w.show_rms, "value", True),
        w.randomise_button.click,
        w.reset_button.click,
    ]
    for act in actions:
        before = w.image.value
        act()
        assert w.image.value != before, "every change must refresh the image"
    assert w.fig is fig and list(w.fig.axes) == axes
    assert all(p.bars is b for p, b in zip(w.panels.values(), bars, strict=True))
    assert all(any(p.bars is a for a in p.ax.collections) for p in w.panels.values())
    assert w.n_renders == n + len(actions)  # one render per event


def test_blitting_draws_the_same_picture_as_a_full_redraw(w):
    PIL = pytest.importorskip("PIL.Image")
    rng = np.random.default_rng(3)
    for k in range(12):  # big jumps, so that axis limits change several times
        if k % 4 == 0:
            w.set_x(np.round(rng.uniform(-5, 5, 6), 1))
        if k % 2 == 0:
            w.scale.value = float(np.round(rng.uniform(-4, 4), 2))
        if k % 3 == 0:
            w.eps_slider.value = float(10 ** rng.uniform(-8, 2))
        w.shift.value = float(np.round(rng.uniform(-10, 10), 1))
    assert w.n_panel_draws > 0, "the test meant to exercise panel redraws"
    blitted = np.asarray(PIL.open(io.BytesIO(w.image.value)).convert("RGB"), dtype=int)
    w.update(full_redraw=True)
    full = np.asarray(PIL.open(io.BytesIO(w.image.value)).convert("RGB"), dtype=int)
    assert blitted.shape == full.shape
    assert np.abs(blitted - full).max() <= 8, "stale pixels left by a partial redraw"


def test_rmsnorm_toggle_shows_and_hides_its_panel():
    w = BarDragWidget(show_rms=False)
    assert not w.panels["rms"].ax.get_visible()
    assert "RMSNorm" not in w.readout.value
    width = w.fig.get_size_inches()[0]
    w.show_rms.value = True
    assert w.panels["rms"].ax.get_visible()
    assert "RMSNorm" in w.readout.value
    assert w.fig.get_size_inches()[0] > width
    np.testing.assert_allclose(w.heights("rms"), rms_ref(w.z), atol=1e-12)


def test_equal_bars_give_zero_and_say_why(w):
    set_x(w, [1.5] * 6)
    np.testing.assert_allclose(w.heights("ln"), 0.0, atol=1e-12)
    assert w.stats["sq_norm_x_hat"] == pytest.approx(0.0, abs=1e-12)
    assert "ε" in w.readout.value


def test_widget_tree_is_displayable_container(w):
    import ipywidgets

    assert isinstance(w.widget, ipywidgets.VBox)
    assert isinstance(w.image, ipywidgets.Image) and w.image.format == "png"
    assert bytes(w.image.value).startswith(b"\x89PNG")  # bytes in 7.x, memoryview in 8.x
    PIL = pytest.importorskip("PIL.Image")
    img = PIL.open(io.BytesIO(bytes(w.image.value)))
    img.load()  # the hand-written PNG decodes, at the canvas' size, pixel for pixel
    assert img.size == tuple(int(v) for v in w._canvas.get_width_height())
    np.testing.assert_array_equal(np.asarray(img.convert("RGB")), np.asarray(w._canvas.buffer_rgba())[..., :3])
    assert len(w.sliders) == 6 and all(s.orientation == "vertical" for s in w.sliders)


def test_module_uses_only_the_ipywidgets_api_common_to_7_7_and_8():
    src = inspect.getsource(geometry)
    # Code only: drop comments and strings (docstrings may name what is avoided).
    code = " ".join(tok.string for tok in tokenize.generate_tokens(io.StringIO(src).readline)
                    if tok.type not in (tokenize.COMMENT, tokenize.STRING))
    for banned in ("Tab", "Accordion", "jslink", "jsdlink", "ipympl", "enable_custom_widget_manager",
                   "Stack", "TagsInput", "ColorsInput", "pyplot"):
        assert not re.search(rf"\b{banned}\b", code), banned
    allowed = {"FloatSlider", "FloatLogSlider", "Button", "Checkbox", "ToggleButton", "HTML", "Label",
               "HBox", "VBox", "Layout", "Image", "Output"}
    used = set(re.findall(r"\bwidgets\.([A-Za-z_]+)", src))
    assert used and used <= allowed, used - allowed


def test_widget_figure_never_goes_through_pyplot():
    import matplotlib.pyplot as plt

    plt.close("all")
    BarDragWidget()
    static_geometry_figure()
    sphere_view_3d(n_points=5)
    assert plt.get_fignums() == []  # nothing auto-displays a second copy in a notebook


def test_sphere_view_3d_circle_and_layernorm_points():
    fig = sphere_view_3d(n_points=25, seed=1)
    lines = [ln for ax in fig.axes for ln in getattr(ax, "lines", [])]
    circles = [ln for ln in lines if ln.get_label() == CIRCLE_LABEL]
    outputs = [ln for ln in lines if ln.get_label() == "LN(x)"]
    assert len(circles) == 2 and len(outputs) == 2  # one per view
    pts = np.column_stack(circles[0].get_data_3d())
    np.testing.assert_allclose(np.linalg.norm(pts, axis=1), np.sqrt(3.0), atol=1e-12)
    np.testing.assert_allclose(pts.sum(axis=1), 0.0, atol=1e-12)
    ln_pts = np.column_stack(outputs[0].get_data_3d())
    assert ln_pts.shape == (25, 3)
    np.testing.assert_allclose(ln_pts.sum(axis=1), 0.0, atol=1e-12)
    data = sphere_points_3d(n_points=25, seed=1)
    var = data["x"].var(axis=1)
    # On the circle up to eps: ||x_hat||^2 = d sigma^2 / (sigma^2 + eps), slightly under 3.
    np.testing.assert_allclose((ln_pts**2).sum(axis=1), 3 * var / (var + EPS), rtol=1e-12)
    np.testing.assert_allclose(np.linalg.norm(ln_pts, axis=1), np.sqrt(3.0), rtol=1e-3)
    np.testing.assert_allclose(ln_pts, np.array([ln_ref(p) for p in data["x"]]), atol=1e-12)
    np.testing.assert_allclose(data["centred"].sum(axis=1), 0.0, atol=1e-12)
    assert fig.texts and "√3" in fig.texts[0].get_text()  # the title states the finding


def test_static_figure_tells_the_invariance_story():
    fig = static_geometry_figure(X_TEST, a=3.0, c=4.0)
    assert len(fig.axes) == 8  # two rows: x and 3x + 4, four columns

    def bars(ax):
        (collection,) = ax.collections
        return np.array([path.vertices[2, 1] for path in collection.get_paths()])

    top, bottom = fig.axes[:4], fig.axes[4:]
    np.testing.assert_allclose(bars(top[2]), ln_ref(X_TEST), atol=1e-12)
    np.testing.assert_allclose(bars(bottom[2]), bars(top[2]), atol=1e-6)
    assert np.abs(bars(bottom[3]) - bars(top[3])).max() > 0.05
    assert len(static_geometry_figure(a=1.0, c=0.0, rms=False).axes) == 3
    with pytest.raises(ValueError):
        static_geometry_figure(a=-1.0)


def test_module_ships_no_hand_written_norm():
    """LayerNorm and RMSNorm come from grader.oracles (torch), not from a formula written here."""
    assert not hasattr(geometry, "layer_norm") and not hasattr(geometry, "rms_norm")
    src = inspect.getsource(geometry)
    assert "oracles.layer_norm" in src and "oracles.rms_norm" in src
    assert not re.search(r"np\.sqrt\([^)]*var", src), "a hand-written normalisation in normlab/geometry.py"
    x = np.random.default_rng(0).normal(size=(2, 3, 6)) * 4 + 1
    np.testing.assert_allclose(geometry._layer_norm(x, EPS)[1, 2], ln_ref(x[1, 2]), atol=1e-12)


@pytest.mark.slow  # a subprocess running the benchmark
def test_benchmark_runs_headless():
    from normlab import bench_widget

    res = bench_widget.measure(n_updates=12)
    assert res["all"].shape == (12,) and np.all(res["all"] > 0)  # timings are printed, never asserted
    res = bench_widget.measure(n_updates=40, mode="jump")  # every control, eps and negative a included
    assert res["a_c"].size > 0 and res["bars"].size > 0
