"""Headless tests of normlab.axes (notebook 01's figures): the masks, the pictures, the plots."""

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pytest

from normlab import axes
from normlab.axes import (
    KINDS,
    StaticFigure,
    axis_picture,
    change_map_figure,
    generation_gap_figure,
    shared_statistics_mask,
    spread_figure,
)

SHAPE = (3, 5, 6)


@pytest.mark.parametrize("kind, count, same_axes", [
    ("batch", 3 * 5, (2,)),        # every token, one feature
    ("layer", 6, (0, 1)),          # one token, every feature
    ("time", 5, (0, 2)),           # one sequence and feature, every position
    ("group", 5 * 3, (0,)),        # one sequence, a group of 3 features, every position
])
def test_masks_pick_the_right_entries(kind, count, same_axes):
    index = (1, 2, 4)
    mask = shared_statistics_mask(kind, SHAPE, index)
    assert mask.dtype == bool and mask.shape == SHAPE
    assert mask[index] and mask.sum() == count
    for axis in same_axes:  # every marked entry agrees with `index` along these axes
        assert np.all(np.nonzero(mask)[axis] == index[axis])


def test_group_mask_uses_contiguous_groups():
    mask = shared_statistics_mask("group", (2, 4, 6), (0, 0, 1), groups=3)
    assert np.array_equal(np.unique(np.nonzero(mask)[2]), [0, 1])
    with pytest.raises(ValueError):
        shared_statistics_mask("group", (2, 4, 6), (0, 0, 1), groups=4)


def test_masks_reject_bad_arguments():
    with pytest.raises(ValueError):
        shared_statistics_mask("instance", SHAPE, (0, 0, 0))
    with pytest.raises(ValueError):
        shared_statistics_mask("batch", (3, 5), (0, 0, 0))
    with pytest.raises(IndexError):
        shared_statistics_mask("layer", SHAPE, (3, 0, 0))


@pytest.mark.parametrize("kind", list(KINDS))
def test_each_highlighted_group_is_a_box_and_the_two_do_not_overlap(kind):
    """axis_picture draws each group as one box: that is only right if the mask is a box."""
    masks = [shared_statistics_mask(kind, SHAPE, index) for index in axes._default_indices(kind, SHAPE)]
    for mask in masks:
        extents = [np.ptp(i) + 1 for i in np.nonzero(mask)]
        assert mask.sum() == np.prod(extents)
    assert not np.any(masks[0] & masks[1])


def test_box_faces_and_grid():
    faces = axes._box_faces((0, 0, 0), (2, 1, 3))
    assert len(faces) == 6 and all(len(f) == 4 for f in faces)
    corners = {tuple(map(float, p)) for f in faces for p in f}
    assert len(corners) == 8
    lines = axes._box_grid((0, 0, 0), (2, 1, 3))
    # every line lies on the surface and has integer-spaced positions
    for start, stop in lines:
        assert any(start[a] == stop[a] and start[a] in (lo, hi) for a, (lo, hi) in enumerate([(0, 2), (0, 1), (0, 3)]))


def test_axis_picture_panels_titles_and_png():
    fig = axis_picture(("batch", "layer"), shape=SHAPE, dpi=40)
    assert isinstance(fig, StaticFigure)
    panels = fig.axes
    assert len(panels) == 2
    assert "BatchNorm" in panels[0].get_title() and "LayerNorm" in panels[1].get_title()
    for ax in panels:
        assert ax.get_xlabel() == "position t" and ax.get_ylabel() == "batch b" and ax.get_zlabel() == "feature k"
        faces = [c for c in ax.collections if type(c).__name__ == "Poly3DCollection"]
        assert len(faces) == 3  # the whole tensor and two coloured groups
    assert fig._repr_png_()[:8] == b"\x89PNG\r\n\x1a\n"


def test_change_map_counts_earlier_changes_and_blanks_zeros():
    bn = np.full((2, 4), 0.1)
    ln = np.zeros((2, 4))
    ln[1, 2] = 1.0
    fig = change_map_figure({"BatchNorm": bn, "LayerNorm": ln}, (1, 2), dpi=40)
    titles = [ax.get_title() for ax in fig.axes if ax.get_title()]
    assert titles[0].startswith("BatchNorm: 4 of 4 earlier") and titles[1].startswith("LayerNorm: 0 of 4 earlier")
    image = fig.axes[1].images[0].get_array()
    assert np.ma.count_masked(image) == 7  # every exact zero is left white
    assert fig.axes[0].get_xlabel().startswith("position t")


def test_spread_and_gap_figures_label_exact_zeros():
    fig = spread_figure([1, 2, 4], {"BatchNorm": [0.4, 0.3, 0.2], "LayerNorm": [0.0, 0.0, 0.0]},
                        tokens_per_sequence=8, dpi=40)
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert labels == ["BatchNorm", "LayerNorm (exactly 0 at every B)", "1/√B reference"]
    assert "batch size" in fig.axes[0].get_xlabel() and fig.axes[0].get_ylabel()
    fig = generation_gap_figure({"BatchNorm": [0.5, 0.2], "LayerNorm": [0.0, 0.0]}, dpi=40)
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert labels == ["BatchNorm", "LayerNorm (exactly 0)"]
    assert fig.axes[0].get_xlabel() and fig.axes[0].get_ylabel()


def test_public_names_do_not_shadow_exercises():
    """`from normlab.axes import *` must not define layernorm, batch_norm or leaks_future."""
    assert not {"layernorm", "batch_norm", "leaks_future"} & set(axes.__all__)
