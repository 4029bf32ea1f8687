"""The torch oracles every check compares against, checked against definitions written out here."""
import numpy as np
import pytest

from grader import oracles
from grader.numerics import central_difference_jacobian, random_input, relative_error


def test_batch_norm_handles_a_single_token():
    # torch refuses one value per feature; the oracle answers from a doubled batch.
    np.testing.assert_array_equal(oracles.batch_norm(np.array([[3.0, -1.0]]), 1e-5), np.zeros((1, 2)))


def test_batch_norm_normalises_over_every_axis_but_the_last():
    x = random_input((2, 3, 4), seed=1, scale=2.0, offset=5.0)
    gamma, beta = np.arange(1.0, 5.0), np.linspace(-1, 1, 4)
    flat = x.reshape(-1, 4)
    expected = (flat - flat.mean(0)) / np.sqrt(flat.var(0) + 1e-5) * gamma + beta
    assert relative_error(oracles.batch_norm(x, 1e-5, gamma, beta), expected.reshape(x.shape)) < 1e-12


def test_rms_norm_divides_by_the_root_mean_square():
    x, gamma = random_input((3, 5), seed=2, offset=1.0), np.linspace(0.5, 2.0, 5)
    expected = x / np.sqrt((x ** 2).mean(-1, keepdims=True) + 1e-6) * gamma
    assert relative_error(oracles.rms_norm(x, 1e-6, gamma), expected) < 1e-12
    assert relative_error(oracles.rms_norm(x, 1e-6), expected / gamma) < 1e-12


def test_rms_norm_grads_match_central_differences():
    x, dy, gamma = random_input((6,), seed=3), random_input((6,), seed=4), np.linspace(-1.0, 2.0, 6)
    dx, dgamma = oracles.rms_norm_grads(dy, x, gamma, 1e-6)
    jacobian = central_difference_jacobian(lambda v: oracles.rms_norm(v, 1e-6, gamma), x)
    assert relative_error(dx, dy @ jacobian) < 1e-7
    np.testing.assert_allclose(dgamma, dy * oracles.rms_norm(x, 1e-6), rtol=1e-12)


@pytest.mark.parametrize("name", ["layer_norm", "rms_norm", "identity"])
def test_norm_by_name_returns_a_fresh_float64_array(name):
    x = random_input((2, 4), seed=5)
    y = oracles.norm_by_name(name, x, 1e-5)
    assert y.dtype == np.float64 and y.shape == x.shape and not np.shares_memory(x, y)


def test_norm_by_name_rejects_an_unknown_name():
    with pytest.raises(ValueError, match="unknown norm"):
        oracles.norm_by_name("batch_norm", np.ones((2, 3)), 1e-5)
