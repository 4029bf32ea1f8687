"""normlab.speed and normlab.precision: well-formed timing rows, and the bfloat16 facts.

Timings are never asserted (they depend on the machine and its load); only the structure
of the rows and the arithmetic facts are.
"""
import math

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pytest
import torch

from normlab import precision, speed

# ------------------------------------------------------------------------------ speed


@pytest.fixture(scope="module")
def rows():
    def numpy_rms_norm(x, gamma, eps):  # stands for the learner's rms_norm: the package ships none
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * gamma

    return speed.speed_table((64, 128), compile=False, budget_s=0.005, min_repeats=2, rms_norm=numpy_rms_norm)


def test_speed_rows_well_formed(rows):
    """Every implementation gets a row with positive, finite numbers, and a copy is 100%."""
    names = [r["name"] for r in rows]
    assert len(names) == len(set(names))
    assert {"copy", "layernorm", "rmsnorm"} == {r["op"] for r in rows}
    assert not any(r["backend"] == "torch.compile" for r in rows)
    for r in rows:
        assert set(r) >= {"name", "op", "backend", "ms", "repeats", "bytes", "gb_per_s", "fraction_of_copy", "note"}
        assert r["bytes"] == 2 * 64 * 128 * 4
        if r["ms"] is None:  # only F.rms_norm may be missing, on an old torch
            assert "rms_norm" in r["name"] and "your" not in r["name"]
            continue
        assert r["repeats"] >= 2
        for key in ("ms", "gb_per_s", "fraction_of_copy"):
            assert math.isfinite(r[key]) and r[key] > 0
        assert r["gb_per_s"] == pytest.approx(r["bytes"] / (r["ms"] / 1e3) / 1e9)
    copies = [r["fraction_of_copy"] for r in rows if r["op"] == "copy"]
    assert max(copies) == pytest.approx(1.0)


def test_speed_implementations_agree():
    """The timed norms compute what their names say (checked against torch in float64)."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((5, 32)).astype(np.float32) * 3 + 1
    g, b = rng.standard_normal(32).astype(np.float32), rng.standard_normal(32).astype(np.float32)
    xt, gt, bt = (torch.from_numpy(a) for a in (x, g, b))
    ref_ln = torch.nn.functional.layer_norm(xt.double(), (32,), gt.double(), bt.double(), 1e-5).numpy()
    ref_rms = (xt.double() * torch.rsqrt(xt.double().pow(2).mean(-1, keepdim=True) + 1e-5) * gt.double()).numpy()
    for y in (speed._torch_layer_norm(xt, gt, bt), speed._torch_layer_norm_unfused(xt, gt, bt)):
        np.testing.assert_allclose(np.asarray(y), ref_ln, rtol=1e-4, atol=1e-5)
    for y in (speed._torch_rms_unfused(xt, gt),):
        np.testing.assert_allclose(np.asarray(y), ref_rms, rtol=1e-4, atol=1e-5)
    if hasattr(torch.nn.functional, "rms_norm"):
        np.testing.assert_allclose(speed._torch_rms_norm(xt, gt).numpy(), ref_rms, rtol=1e-4, atol=1e-5)


def test_format_speed_table(rows):
    """One line per row, with the bandwidth fraction as a percentage."""
    text = speed.format_speed_table(rows)
    for r in rows:
        assert r["name"] in text
    assert "%" in text and "GB/s" in text
    ratios = speed.speed_ratios(rows)
    assert set(ratios) == {"unfused_ln_over_rms", "torch_unfused_rms_over_fused_ln", "fused_ln_fraction_of_copy",
                           "yours_fraction_of_copy"}
    assert ratios["unfused_ln_over_rms"] > 0 and ratios["yours_fraction_of_copy"] > 0


def test_speed_ships_no_numpy_norm_and_reports_an_unwritten_one():
    """normlab carries no numpy answer to the exercises; a learner's stub gets a row that says it failed."""
    assert not [name for name in vars(speed) if name.startswith("_np_")]

    def stub(x, gamma, eps):
        raise NotImplementedError()

    rows = speed.speed_table((8, 16), budget_s=0.0, min_repeats=1, rms_norm=stub)
    row = next(r for r in rows if "your rms_norm" in r["name"])
    assert row["ms"] is None and "NotImplementedError" in row["note"]
    rows = speed.speed_table((8, 16), budget_s=0.0, min_repeats=1)
    assert next(r for r in rows if "your rms_norm" in r["name"])["ms"] is None


def test_time_call_counts_and_median():
    """At least min_repeats timed calls after one warm-up call."""
    calls = []
    sec, n = speed.time_call(lambda: calls.append(1), min_repeats=4, budget_s=0.0)
    assert n == 4 and len(calls) == 5 and sec >= 0


def test_reuse_freed_memory_restores():
    """The malloc setting is a context: it yields a bool and leaves the process usable."""
    with speed._reuse_freed_memory(True) as ok:
        assert isinstance(ok, bool)
        y = np.ones(1 << 20).sum()
    assert y == float(1 << 20)
    with speed._reuse_freed_memory(False) as ok:
        assert ok is False


# -------------------------------------------------------------------------- precision


def test_bf16_running_sum_stalls():
    """4096 squares: the bfloat16 total ends far below the float32 one, which is right."""
    r = precision.bf16_running_sum(n=4096, seed=0)
    for key in ("terms", "bf16", "fp32", "exact", "ratio", "lost"):
        assert r[key].shape == (4096,)
    assert r["bf16"][-1] < 0.7 * r["fp32"][-1]
    assert r["fp32"][-1] == pytest.approx(r["exact"][-1], rel=1e-5)
    assert r["final_ratio"] < 0.7


def test_bf16_rounding_rule():
    """A term is lost whenever the total is more than 512 times it, and never below 256 times."""
    r = precision.bf16_running_sum(n=4096, seed=1)
    assert r["lost"][r["ratio"] > 512].all()
    assert not r["lost"][r["ratio"] < 256].any()


def test_bf16_sum_of_ones_stops_at_256():
    """Adding 1 to 256 in bfloat16 gives 256: the sum of 4096 ones is 256."""
    r = precision.bf16_running_sum(np.ones(4096))
    assert r["bf16"][-1] == 256.0
    assert r["stalled_at"] == 256
    assert r["exact"][-1] == 4096.0


def test_upcast_fix_is_as_good_as_bfloat16_allows():
    """The float32 upcast lands on the rounding floor; the bf16 accumulator is badly off."""
    e = precision.bf16_rms_norm_errors(rows=4, d=4096)
    floor = e["rounding_floor"]["rel_error"]
    assert floor < 2**-8  # half a unit in the last place of bf16, relative
    assert e["upcast_fix"]["rel_error"] < 1.5 * floor
    assert e["bf16_accumulator"]["rel_error"] > 0.1
    assert e["bf16_accumulator"]["output_rms"] > 1.1  # a stalled mean square is too small
    assert abs(e["upcast_fix"]["output_rms"] - 1) < 0.01
    assert "yours" not in e


def test_bf16_errors_time_the_learners_function_on_the_same_input():
    """``yours`` gets float32 arrays of bfloat16 numbers and lands where its rounding puts it."""
    from tests.implementations import rmsnorm as impl

    seen = []

    def spy(x, gamma, eps):
        seen.append((x.dtype, gamma.dtype, eps))
        return impl.bf16_gemma_order(x, gamma, eps)

    e = precision.bf16_rms_norm_errors(rows=2, d=512, yours=spy)
    assert seen == [(np.float32, np.float32, 1e-6)]
    assert e["yours"]["rel_error"] <= 1.5 * e["rounding_floor"]["rel_error"]
    e = precision.bf16_rms_norm_errors(rows=2, d=512, yours=impl.bf16_no_upcast)
    assert e["yours"]["rel_error"] > e["rounding_floor"]["rel_error"]


def test_gemma_same_function_other_origin():
    """(1 + gamma) computes the same outputs; weight decay pulls it towards gain 1, not 0."""
    r = precision.gemma_parameterisation(start_gain=1.5, steps=100, decay=0.01)
    assert r["same_function_max_diff"] < 1e-12
    assert r["missing_one_max_diff"] > 0.5
    keep = 0.99**100
    assert r["decayed_gain_plain"] == pytest.approx(1.5 * keep)
    assert r["decayed_gain_gemma"] == pytest.approx(1 + 0.5 * keep)


@pytest.mark.parametrize("norm", ["rms", "layer"])
def test_eps_differences(norm):
    """Unit-size inputs: a few parts per million; mean square near eps: order one."""
    r = precision.eps_differences((1e-3, 1.0), d=256, rows=2, norm=norm)
    small, unit = r["eps_change"]
    assert unit == pytest.approx((1e-5 - 1e-6) / 2, rel=0.05)
    assert small > 0.3
    small_out, unit_out = r["eps_outside"]
    assert unit_out == pytest.approx(1e-5 / 2, rel=0.05)
    assert small_out > 0.3
    with pytest.raises(ValueError):
        precision.eps_differences((1.0,), norm="batch")
