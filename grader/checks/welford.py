"""Checks for 06_welford: mean and variance in one stable pass, and merging partial results.

Oracles: exact rational arithmetic. Every float64 (and every integer) is a fraction with a
power-of-two denominator, so the sums of x and x**2 over a whole array are exact Python
integers after one common scaling; the mean and the biased variance follow as fractions and
are rounded to float64 once. No float formula of the exercise is used as a reference.

One pass is checked with a stream: an object that supports only ``for xi in x``, ``len(x)``
and ``x[i]``/``x[a:b]``, counts how many elements are read, refuses whole-array operations
(``np.asarray``, ``x.mean()``, ``x - m``), and is watched by ``tracemalloc`` so that copying
the elements into a list first shows up as memory that grows with the data. Under
``grader grade`` the stream stays in the grader and the sandboxed function reads it through
a proxy (``grader.grading.sandbox.stream``), with memory measured inside the sandbox: the same check.

Diagnoses come from properties of the answer: ratios to the exact variance (n/(n-1), n,
square root), invariance to shifting the data (a correct variance does not care about the
offset; E[x²] - μ² does), invariance to reordering the data (a correct update does not care
about the order; an update that uses the mean at the wrong moment does), and the parts of the
parallel formula (within-chunk M2 and between-chunk term).
"""
from __future__ import annotations

import itertools
import warnings
from fractions import Fraction

import numpy as np

from grader.boundary import StreamSource
from grader.compare import (
    CheckFailed,
    LearnerError,
    call_learner,
    call_measuring_memory,
    check,
    fail,
    ids_of,
    passed,
    preview,
    tag,
    unproven,
)

U = 2.0**-53                            # unit roundoff of float64
WORKED_EXAMPLE = np.array([2.0, 4.0, 6.0, 8.0])
EMPTY = (0, 0.0, 0.0)                   # the partial result of no data: (count, mean, M2)
MEMORY_BUDGET = 64 * 1024               # bytes: O(1) state, the stream's bookkeeping, a notebook's background threads
SHAPE_RULES = {  # the likely cause of a shape or index error raised by the learner's code
    "mean_var": "x is a 1-D array (or, in the one-pass check, a stream) of n values, n from 1 up: loop over it with "
                "`for xi in x` and never index past x[len(x) - 1].",
    "combine": "a and b are partials (count, mean, M2), tuples of three numbers: unpack them as n_a, mean_a, m2_a = a.",
}
# Data sets merged at once in the array part of check_welford_combine, as section 6 merges one partial per
# token: each row its own scale and shift, so that no two rows share a mean.
ARRAY_ROW_SCALES = (1.0, 0.5, 2.0)
ARRAY_ROW_SHIFTS = (0.0, 3.0, -7.0)
SCALAR_ONLY = tag("welford_combine works for numbers but not for arrays of them. Section 6 passes partials whose mean "
                  "and M2 are numpy arrays (one entry per token) and merges them all at once, so the merge must be "
                  "plain arithmetic: no float(...), int(...) or math.* on a mean or an M2, no `if` on their values "
                  "(only on the counts), and no np.average/np.mean across the two partials without axis=0.",
                  "welford.scalar_only")


# ----------------------------------------------------------------------------- the oracle
def _exact_sums(x) -> tuple[int, Fraction, Fraction]:
    """(n, sum x, sum x²) of a 1-D array, exactly (integers or float64 values)."""
    values = np.asarray(x)
    if values.dtype.kind in "iub":
        items = [int(v) for v in values.tolist()]
    else:
        items = [float(v) for v in values.astype(np.float64).tolist()]
    ratios = [v.as_integer_ratio() for v in items]
    if not ratios:
        return 0, Fraction(0), Fraction(0)
    scale = max(den for _, den in ratios)  # every denominator is a power of two
    ints = [num * (scale // den) for num, den in ratios]
    return len(ints), Fraction(sum(ints), scale), Fraction(sum(i * i for i in ints), scale * scale)


def exact_moments(x) -> tuple[int, Fraction, Fraction]:
    """(count, mean, M2) of a 1-D array as exact fractions; M2 = sum of squared deviations."""
    n, s1, s2 = _exact_sums(x)
    if n == 0:
        return 0, Fraction(0), Fraction(0)
    return n, s1 / n, s2 - s1 * s1 / n


def exact_mean_var(x) -> tuple[float, float]:
    """Mean and biased variance of a 1-D array, computed exactly and rounded once to float64.

    An oracle for checks and demos: it needs the whole array, several times over.
    """
    n, mean, m2 = exact_moments(x)
    if n == 0:
        raise ValueError("the mean of an empty array is undefined")
    return float(mean), float(m2 / n)


# ----------------------------------------------------------------------------- strict values
def _kind(value) -> str:
    if type(value).__name__ == "Unsupported" and hasattr(value, "type_name"):  # a value that left a sandbox
        return str(value.type_name)
    module, name = type(value).__module__, type(value).__name__
    return name if module == "builtins" else f"{module}.{name}"


def _strict_float(value, what: str, non_finite: tuple = ("common.non_finite",)) -> float:
    """Accept a Python float or a numpy float64 scalar; explain anything else.

    ``non_finite``: the ids a NaN or inf names here (the caller knows which of the message's
    alternatives are possible).
    """
    if type(value) in (float, np.float64):
        number = float(value)
        if not np.isfinite(number):
            fail(f"{what} is {number}.\nA NaN or inf usually comes from a division by zero: a count that starts at 0 "
                 "and is incremented after it is used, or n - 1 = 0 for a single element.", *non_finite)
        return number
    kind = _kind(value)
    if isinstance(value, np.ndarray):
        if value.shape == ():
            hint = "a 0-d array: return float(...) of it."
        elif value.shape == (1,):
            hint = ("an array of shape (1,), e.g. from np.zeros(1), x[:1] or keepdims=True: return a scalar, "
                    "e.g. float(mean) or mean[0].")
        else:
            hint = f"an array of shape {value.shape}: return one number."
        fail(f"{what} should be a float (Python float or numpy float64), but it is {hint}", "welford.array_not_scalar")
    if isinstance(value, (np.floating,)):
        fail(f"{what} should be a float64, but it is {kind}.\nAccumulate in float64: start from 0.0 and avoid "
             "np.float32(...) or .astype(np.float32); lower precision loses digits at every update.",
             "welford.low_precision")
    if isinstance(value, (bool, np.bool_)):
        fail(f"{what} should be a float, but it is a boolean ({value}).", "welford.not_a_float")
    if isinstance(value, (int, np.integer)):
        fail(f"{what} should be a float, but it is an integer ({kind} {value}).\nDid you use // (floor division) or "
             "int(...)? The mean of integers is generally not an integer: use / and keep floats.",
             "welford.integer_division")
    if value is None:
        fail(f"{what} is None. Did you forget a return statement?", "common.returned_none")
    torch = kind.startswith("torch")
    hint = " Convert with float(...)." if torch else ""
    fail(f"{what} should be a float (Python float or numpy float64), but it is {kind}.{hint}",
         "common.torch_returned" if torch else "welford.not_a_float")


def _strict_pair(result, what: str, n: int) -> tuple[float, float]:
    if type(result) is not tuple or len(result) != 2:
        extra = f" of length {len(result)}" if isinstance(result, (tuple, list)) else ""
        fail(f"{what} should return a tuple (mean, var); it returned {_kind(result)}{extra}.\n"
             "End with `return mean, var` (a tuple of two floats).", "welford.not_a_tuple")
    # a NaN mean comes from a count used before it was incremented; a NaN variance of one element may also be n - 1 = 0
    var_nan = ("welford.count_off_by_one", "welford.unbiased_variance") if n == 1 else ("welford.count_off_by_one",)
    return (_strict_float(result[0], f"{what}: the mean", ("welford.count_off_by_one",)),
            _strict_float(result[1], f"{what}: the variance", var_nan))


def _quiet_call(function, *args, what: str, rule: str = "mean_var"):
    """Call learner code with numpy's floating-point warnings silenced (a failure is reported anyway)."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return call_learner(function, *args, what=what, shape_rule=SHAPE_RULES[rule])


# ----------------------------------------------------------------------------- welford_mean_var
def _tolerances(x: np.ndarray, n: int, var: float) -> tuple[float, float]:
    """Error allowed on the mean and on the variance.

    A one-pass update rounds the running mean at every step, so its mean can drift by about
    n·u·mean|x|, and its variance by about n·u·mean|x|·σ (the error grows like |μ|/σ, the
    condition number κ: Chan, Golub & LeVeque's (1983) n·κ·u for the updating algorithm).
    E[x²] - μ² errs by about u·E[x²] = u·(μ² + σ²), which grows like (|μ|/σ)²: it exceeds the
    variance tolerance below, about 4·n·κ·u + 1e-9, once |μ|/σ is above both 4n and about 3000.
    """
    mean_abs = float(np.mean(np.abs(x.astype(np.float64))))
    sigma = float(np.sqrt(var))
    drift = 2 * n * U * mean_abs
    return 1e-12 * sigma + drift, 1e-9 * var + 2 * drift * sigma + drift**2


def _shuffled(x: np.ndarray, seed: int = 12345) -> np.ndarray:
    """The same values in another order (never the reversed order, which leaves an arithmetic progression alone)."""
    order = np.random.default_rng(seed).permutation(x.size)
    if x.size > 2 and np.array_equal(order, np.arange(x.size)[::-1]):
        order = np.roll(order, 1)
    return x[order]


def _probe(function, x: np.ndarray):
    """The learner's answer on a derived input, or None if it fails there."""
    try:
        result = _quiet_call(function, x, what="probe")
        if type(result) is tuple and len(result) == 2:
            return float(result[0]), float(result[1])
    except NotImplementedError:
        raise
    except Exception:  # noqa: BLE001 - a probe only refines a diagnosis
        return None
    return None


def _running_means(x: np.ndarray) -> dict[str, float]:
    """What the classic wrong running counts give on x: each update divided by the total length n, or by k - 1
    after starting from the first element (a count incremented after its use, i.e. the mean of x[1:])."""
    values = [float(v) for v in x.astype(np.float64)]
    n = len(values)
    ema = 0.0
    for xi in values:
        ema += (xi - ema) / n
    found = {"welford.total_count_in_update": ema}
    if n > 1:
        found["welford.count_off_by_one"] = float(exact_moments(x[1:])[1])
    return found


def _integer_probe(function, x: np.ndarray) -> bool:
    """Whether the learner's mean stays a whole number near the exact one on x moved by a non-integer amount."""
    moved = x.astype(np.float64) + 10.375
    probe = _probe(function, moved)
    if probe is None:
        return False
    mu = float(exact_moments(moved)[1])
    return float(probe[0]).is_integer() and abs(probe[0] - mu) < 1.0 and not mu.is_integer()


def _mean_cause(function, x, n, m, mu, tol_mean) -> str:
    if mu != 0 and abs(m - n * mu) <= max(tol_mean, 1e-12 * abs(n * mu)):
        return tag("you returned the sum of x, not the mean: divide by the count.", "welford.sum_not_mean")
    for k, words in ((n - 1, "n - 1"), (n + 1, "n + 1")):
        if k > 0 and mu != 0 and abs(m - mu * n / k) <= tol_mean + 1e-12 * abs(mu):
            return tag(f"your mean is sum(x) / ({words}): the count is off by one. Count the element before using "
                       "it: k = 1 for the first element, so that mean = x[0] after one step.",
                       "welford.count_off_by_one")
    if float(m).is_integer() and not float(mu).is_integer() and abs(m - mu) < 1.0 and _integer_probe(function, x):
        return tag("your mean is rounded to a whole number. Did you use // (floor division) or int(...)? The mean of "
                   "integers is generally not an integer: use / and keep floats.", "welford.integer_division")
    probe = _probe(function, _shuffled(x))
    if probe is not None and abs(probe[0] - m) > 2 * tol_mean:
        # the message names both wrong counts; simulating each one tells which it is, when one matches
        scale = float(np.mean(np.abs(x.astype(np.float64))))
        matched = [mistake for mistake, value in _running_means(x).items()
                   if abs(m - value) <= 2 * tol_mean + 1e-12 * scale]
        return tag("your mean depends on the order of the elements, so the running mean is updated with the wrong "
                   "count: mean += (xi - mean) / k needs k = 1, 2, 3, ... (the number of elements seen so far, "
                   "including xi), not the total length n and not a count incremented after its use. "
                   "See it: compare welford_mean_var(x) with welford_mean_var(x[::-1]) on "
                   "x = np.array([1.0, 2.0, 6.0]).",
                   *(matched[:1] or ("welford.total_count_in_update", "welford.count_off_by_one")))
    return "the running mean is mean += (xi - mean) / k, with k the number of elements seen so far (including xi)."


def _variance_cause(function, x, n, mu, var, m, v, tol_var) -> str:
    if var > 0:
        ratio = v / var
        known = []
        if n > 1:
            known.append((n / (n - 1), tag("unbiased variance (divided by n−1): M2 / (n - 1) is the sample "
                                           "estimator (np.var(ddof=1), torch.var's default). This function returns the "
                                           "biased variance M2 / n, the one LayerNorm uses.",
                                           "welford.unbiased_variance")))
        if n > 1:
            known.append((float(n), tag("returned the sum of squared deviations M2 instead of M2/n: divide by the "
                                        "count at the end.", "welford.m2_returned")))
        for value, cause in known:
            if abs(ratio - value) <= 1e-6 * value:
                return cause
        if abs(v - np.sqrt(var)) <= 1e-9 * np.sqrt(var) and abs(var - 1.0) > 1e-6:
            return tag("you returned the standard deviation: the variance is its square (do not take a square root).",
                       "welford.std_returned")
        root = _root_cause(n, var, v, 1e-9 * var)
        if root:
            return root
    if abs(mu) > 10 * np.sqrt(var):  # a large offset: is the error there only because of it?
        shift = float(np.round(mu))
        centred = x.astype(np.float64) - shift  # exact: x and shift are within a factor of two of each other
        _, _, centred_m2 = exact_moments(centred)
        centred_var = float(centred_m2 / n)
        probe = _probe(function, centred)
        centred_ok = probe is not None and abs(probe[1] - centred_var) <= 1e-9 * centred_var + 1e-300
        # a second mistake that does not depend on the offset shows on the centred data as a known factor
        other = None
        if probe is not None and not centred_ok and centred_var > 0:
            other = _ratio_cause(n, centred_var, probe[1], 1e-9 * centred_var)
        if centred_ok or other or v < 0:
            error = abs(v - var) / var if var > 0 else abs(v)
            mean_sq = mu * mu + var
            shared = int(np.floor(np.log10(mean_sq / var))) if var > 0 else 16
            kept = f"at most {16 - shared}" if shared < 16 else "none"
            cancels = (f"E[x²] − μ² cancels catastrophically: your variance is off by {error:.1e} (relative) "
                       f"at offset {mu:.0e}" + (", and on the same data shifted to mean ≈ 0 it is right" if centred_ok
                                                else "") +
                       f". mean(x²) ≈ {mean_sq:.6e} and μ² share their first {shared} significant digits; float64 "
                       f"carries about 16, so their difference keeps {kept} correct digits, fewer once rounding errors "
                       "add up. Update the mean and M2 (the sum of squared deviations) together, one element at a time "
                       "(Welford), so that no large number is ever subtracted from another.")
            if other:
                return tag(f"2 mistakes together: (1) {other} (On the same data shifted to mean ≈ 0 that is the only "
                           f"difference.) (2) {cancels}", *ids_of(other), "welford.naive_variance")
            return tag(cancels, "welford.naive_variance")
    if v < 0:
        return tag("a variance cannot be negative: only a difference like E[x²] − μ² can go below zero. "
                   "Accumulate the squared deviations M2 instead.", "welford.naive_variance")
    probe = _probe(function, _shuffled(x))
    if probe is not None and abs(probe[1] - v) > 2 * tol_var:
        if v > var:
            return tag("your variance depends on the order of the data and is too large: M2 used the old mean twice. "
                       "You updated the mean after using it (or added delta * delta). With delta = xi - old mean, "
                       "update mean += delta / k first, then M2 += delta * (xi - new mean).", "welford.old_mean_twice")
        return tag("your variance depends on the order of the data and is too small: you used the new mean twice "
                   "(M2 += (xi - new mean)**2). With delta = xi - old mean, M2 += delta * (xi - new mean): one factor "
                   "with the old mean, one with the new.", "welford.new_mean_twice")
    return ("M2 should grow by delta * (xi - new mean) at each element, with delta = xi - old mean, and the "
            "variance is M2 / n at the end.")


def _check_one_input(function, x: np.ndarray) -> float:
    """Run welford_mean_var on one array and compare with the exact answer; returns the variance's relative error."""
    n = x.size
    what = f"welford_mean_var(x) for x = {preview(x)} (dtype {x.dtype})"
    try:
        result = _quiet_call(function, x, what=what)
    except LearnerError as error:
        if error.error_type != "ZeroDivisionError":
            raise
        raise error.with_cause(tag((
            "for one element the biased variance is M2 / 1 = 0.0; dividing by n - 1 = 0 means the unbiased variance "
            "(this function returns M2 / n). " if n == 1 else "") +
            "A count that starts at 0 must be incremented before the division: k = 1 for the first element.",
            *(("welford.unbiased_variance",) if n == 1 else ()), "welford.count_off_by_one")) from None
    m, v = _strict_pair(result, what, n)
    mean_exact, var_exact = exact_mean_var(x)
    tol_mean, tol_var = _tolerances(x, n, var_exact)
    if n > 1 and var_exact > 0 and abs(m - var_exact) <= tol_var and abs(v - mean_exact) <= tol_mean \
            and abs(m - mean_exact) > tol_mean:
        fail(f"{what} returned (var, mean): the order is (mean, var).", "welford.swapped_outputs")
    if abs(m - mean_exact) > tol_mean:
        cause = _mean_cause(function, x, n, m, mean_exact, tol_mean)
        # a known mistake in the variance as well, e.g. (sum, M2) or (sum / (n - 1), M2 / (n - 1)): name both
        other = _ratio_cause(n, var_exact, v, tol_var) if ids_of(cause) and abs(v - var_exact) > tol_var else None
        if other:
            cause = tag(f"2 mistakes together: (1) {cause} (2) The variance is wrong too: {other}",
                        *ids_of(cause, other))
        fail(f"{what}: the mean is wrong.\n  expected (exact): {mean_exact!r}\n  got:              {m!r}\n"
             f"  error {abs(m - mean_exact):.2e} (tolerance {tol_mean:.1e})\n"
             f"Likely cause: {cause}", *ids_of(cause))
    if abs(v - var_exact) > tol_var:
        error = abs(v - var_exact) / var_exact if var_exact > 0 else abs(v - var_exact)
        kind = "relative" if var_exact > 0 else "absolute"
        cause = _variance_cause(function, x, n, mean_exact, var_exact, m, v, tol_var)
        fail(f"{what}: the variance is wrong.\n  expected (exact): {var_exact!r}\n  got:              {v!r}\n"
             f"  {kind} error {error:.2e} (tolerance {tol_var / var_exact if var_exact > 0 else tol_var:.1e})\n"
             f"Likely cause: {cause}", *ids_of(cause))
    return abs(v - var_exact) / var_exact if var_exact > 0 else abs(v)


@check
def check_welford_mean_var(welford_mean_var, x=None, n=1000, offset=1e8, scale=1.0, seed=0):
    """Compare ``welford_mean_var(x)`` with the exact mean and biased variance.

    Without ``x``: the worked example (2, 4, 6, 8), ``n`` standard normal values, and the same
    values moved to ``offset`` (default 1e8, where E[x²] − μ² keeps no correct digit).
    With ``x``: that array only (any real dtype, 1-D, at least one element).
    """
    if x is None:
        z = np.random.default_rng(seed).standard_normal(n)
        cases = [WORKED_EXAMPLE, scale * z, offset + scale * z]
    else:
        cases = [np.array(x)]
    worst = 0.0
    for case in cases:
        if case.ndim != 1 or case.size == 0:
            raise ValueError("check_welford_mean_var needs a non-empty 1-D array")
        worst = max(worst, _check_one_input(welford_mean_var, case))
    largest = max(float(np.max(np.abs(c.astype(np.float64)))) for c in cases)
    passed(f"welford_mean_var matches the exact mean and variance on {len(cases)} input(s) with |x| up to "
           f"{largest:.1e} (variance relative error ≤ {worst:.1e})")


# ----------------------------------------------------------------------------- one pass
class _Shown:
    """An index the learner used in the sandbox, shown by its repr in the diagnosis."""

    def __init__(self, text: str):
        self.text = text

    def __repr__(self) -> str:
        return self.text


class _StreamViolation(CheckFailed):
    """Raised inside the learner's code the moment it does something a one-pass algorithm cannot."""


_STREAM_RULES = ("welford_mean_var was given a stream: an object that supports only `for xi in x`, `len(x)`, "
                 "`x[i]` and `x[a:b]`, like data arriving from a sensor or a file too large for memory. ")


class CountingStream(StreamSource):
    """A read-once 1-D sequence: counts element reads, refuses whole-array operations.

    Slices share the read counter with the stream they come from, so ``x[0]`` followed by
    ``for xi in x[1:]`` reads each element once. One extra read is tolerated (a peek at
    ``x[0]`` to initialise the mean); reading more than n + 1 elements means a second pass.
    Under ``grader grade`` the learner's code, in its sandbox, gets a proxy whose every read
    is served by ``stream_request`` here, so the count stays on the grader's side.
    """

    __array_ufunc__ = None  # numpy hands binary operators back to us, where they fail with a diagnosis

    def __init__(self, values: np.ndarray, state: dict | None = None, indices: range | None = None):
        self._values = values
        self._state = state if state is not None else {"reads": 0, "limit": values.size + 1, "violation": None,
                                                       "violation_ids": ()}
        self._indices = indices if indices is not None else range(values.size)
        self._passes = []  # iterators opened by a sandboxed proxy, by number

    def stream_request(self, op: str, *args):
        """One operation of the sandbox's proxy (``grader.grading.sandbox.stream``); args come from learner code."""
        if op == "iter":
            self._passes.append(iter(self))
            return len(self._passes) - 1
        if op == "next" and len(args) == 2 and all(type(a) is int for a in args) and 0 <= args[0] < len(self._passes):
            chunk = list(itertools.islice(self._passes[args[0]], max(1, min(args[1], 4096))))
            return np.array(chunk, dtype=self._values.dtype)
        if op == "item" and len(args) == 1 and type(args[0]) is int:
            return self[args[0]]
        if op == "slice" and len(args) == 3 and all(a is None or type(a) is int for a in args):
            return self[slice(*args)]
        if op == "index":
            return self[_Shown(str(args[0]) if args else "?")]
        if op == "array":
            return self.__array__()
        if op == "attribute" and args and type(args[0]) is str and not args[0].startswith("_"):
            return self.__getattr__(args[0])
        self._arithmetic()

    # what a stream offers
    def _read(self, index: int):
        state = self._state
        state["reads"] += 1
        if state["reads"] > state["limit"]:
            self._second_pass()
        return self._values[index]

    def __iter__(self):
        # _read, inlined: this loop runs once per element, under tracemalloc when memory is measured
        state, values = self._state, self._values
        for index in self._indices:
            state["reads"] += 1
            if state["reads"] > state["limit"]:
                self._second_pass()
            yield values[index]

    def _second_pass(self):
        self._violate(
            f"Your function read {self._state['reads']} elements from a stream of {self._values.size}: it went over "
            "the data a second time. Likely cause: you computed the mean first (two passes), with sum(x) / len(x) or "
            "a first loop, and then the squared deviations in a second loop. That two-pass algorithm is accurate, "
            "but it cannot run on a stream, nor in a kernel that reads each row once. Welford updates the mean "
            "and M2 together in a single loop: `for xi in x:`.", "welford.two_passes")

    def __len__(self) -> int:
        return len(self._indices)

    @property
    def shape(self) -> tuple[int]:
        return (len(self._indices),)

    @property
    def size(self) -> int:
        return len(self._indices)

    @property
    def ndim(self) -> int:
        return 1

    @property
    def dtype(self):
        return self._values.dtype

    def __getitem__(self, key):
        if isinstance(key, (int, np.integer)) and not isinstance(key, (bool, np.bool_)):
            return self._read(self._indices[int(key)])
        if isinstance(key, slice):
            return CountingStream(self._values, self._state, self._indices[key])
        self._violate(f"Your function indexed x with {key!r}; a stream only takes one position x[i] or a slice "
                      "x[a:b]. Loop over the elements one at a time: `for xi in x:`.", "welford.whole_array_ops")

    def __repr__(self) -> str:
        return f"<stream of {len(self._indices)} values: loop over it once with `for xi in x`>"

    # what it refuses
    def _violate(self, message: str, *ids: str):
        if self._state["violation"] is None:
            self._state["violation"], self._state["violation_ids"] = message, ids
        # report the first thing that went wrong, even if the learner's code caught it and went on
        raise _StreamViolation("\n" + _STREAM_RULES + "\n" + self._state["violation"] + "\n",
                               *self._state["violation_ids"])

    def _whole_array(self, operation: str):
        self._violate(f"Your function used {operation}, which needs the whole array at once (and makes a second "
                      "pass possible unseen). Process one element at a time: `for xi in x:` (float(xi) converts "
                      "one element if you want a Python float).", "welford.whole_array_ops")

    def __array__(self, *args, **kwargs):
        self._whole_array("np.asarray(x), np.array(x), x.astype or a NumPy function such as np.mean(x), "
                          "np.sum(x) or np.var(x) (they convert x to an array first)")

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        self._whole_array(f"x.{name} (or np.{name}(x), which calls it)")

    def _arithmetic(self, *args):
        self._whole_array("whole-array arithmetic on x (such as x - mean, x ** 2 or x * x)")

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _arithmetic
    __truediv__ = __rtruediv__ = __pow__ = __rpow__ = __matmul__ = __rmatmul__ = _arithmetic

    def __neg__(self):
        self._arithmetic()

    def __abs__(self):
        self._arithmetic()


SHORT_STREAM = 4  # the length of the extra stream that makes n/(n-1) visible when n is large


def _stream_values(n: int, offset, rng, dtype) -> np.ndarray:
    if np.dtype(dtype).kind in "iu":
        return (int(offset) + rng.integers(-50, 51, size=n)).astype(dtype)
    return (offset + rng.standard_normal(n)).astype(dtype)


def _ratio_cause(n: int, var: float, v: float, tol_var: float) -> str | None:
    """Name a variance that is a classic multiple of the right one, within the tolerance."""
    if var <= 0 or n < 2:
        return None
    named = [(n / (n - 1), tag("you returned the unbiased variance (divided by n−1): M2 / (n - 1) is the sample "
                               "estimator (np.var(ddof=1), torch.var's default). This function returns the biased "
                               "variance M2 / n, the one LayerNorm uses.", "welford.unbiased_variance")),
             (float(n), tag("you returned the sum of squared deviations M2 instead of M2/n: divide by the count at the "
                            "end.", "welford.m2_returned"))]
    for factor, cause in named:
        if abs(v - factor * var) <= tol_var * factor:
            return cause
    if abs(var - 1.0) > 1e-6 and abs(v - np.sqrt(var)) <= 1e-9 * np.sqrt(var) + tol_var:
        return tag("you returned the standard deviation: the variance is its square (do not take a square root).",
                   "welford.std_returned")
    return _root_cause(n, var, v, tol_var)


def _root_cause(n: int, var: float, v: float, tol_var: float) -> str | None:
    """Name the square root of a wrong multiple of the variance: sqrt(M2 / (n - 1)) or sqrt(M2)."""
    if var <= 0 or n < 2:
        return None
    named = [(n / (n - 1), "the square root of the unbiased variance, sqrt(M2 / (n - 1)) (np.std(ddof=1))",
              "welford.unbiased_variance"),
             (float(n), "the square root of M2, the sum of squared deviations", "welford.m2_returned")]
    for factor, what, mistake in named:
        root = np.sqrt(factor * var)
        if abs(factor * var - 1.0) > 1e-6 and abs(v - root) <= 1e-9 * root + tol_var * factor / (2 * root):
            return tag(f"2 mistakes together: you returned {what}. (1) The variance divides M2 by n, the count, "
                       "(2) and it is not square-rooted: return M2 / n.", mistake, "welford.std_returned")
    return None


def _one_stream(welford_mean_var, values: np.ndarray, what: str, memory: bool):
    """Run the learner's function on one read-once stream; returns (mean, var, reads, peak) or fails."""
    n = values.size
    stream = CountingStream(values)
    result, peak = None, None
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            if memory:
                result, peak = call_measuring_memory(welford_mean_var, stream, what=what,
                                                     shape_rule=SHAPE_RULES["mean_var"])
            else:
                result = _quiet_call(welford_mean_var, stream, what=what)
    except Exception:
        if stream._state["violation"] is None:
            raise
    # checked after the call too: the learner's code may have caught our exception and gone on
    if stream._state["violation"] is not None:
        fail(_STREAM_RULES + "\n" + stream._state["violation"], *stream._state["violation_ids"])
    reads = stream._state["reads"]
    if reads < n:
        fail(f"{what} read only {reads} of the {n} elements: every element must enter the mean and the variance.",
             "welford.skips_elements")
    if memory and peak is not None and peak > MEMORY_BUDGET:
        unproven(welford_mean_var, "memory",
                 f"{what} used {peak / 1024:.0f} KiB of memory at its peak; a one-pass algorithm keeps three numbers "
                 f"(count, mean, M2), well under {MEMORY_BUDGET // 1024} KiB whatever n is.\nLikely cause: you kept "
                 "the elements (list(x), a list you append to, np.fromiter) to go over them again later. Update the "
                 "mean and M2 as each element arrives, then forget it.", "welford.keeps_elements")
    m, v = _strict_pair(result, what, n)
    mean_exact, var_exact = exact_mean_var(values)
    tol_mean, tol_var = _tolerances(values, n, var_exact)
    if abs(m - mean_exact) > tol_mean or abs(v - var_exact) > tol_var:
        cause = None
        if abs(m - mean_exact) <= tol_mean:
            cause = _ratio_cause(n, var_exact, v, tol_var)
        fail(f"{what} read each element once but returned ({m!r}, {v!r}); the exact answer is "
             f"({mean_exact!r}, {var_exact!r}).\nLikely cause: "
             + (cause or "run check_welford_mean_var for a diagnosis."), *ids_of(cause))
    return m, v, reads, peak, var_exact, tol_var


@check
def check_welford_one_pass(welford_mean_var, n=20000, offset=1e8, seed=0, dtype=np.float64, memory=True):
    """Feed ``welford_mean_var`` a read-once stream of ``n`` values and check it reads each element once.

    Also checks the answer (exactly as ``check_welford_mean_var``) and, with ``memory=True``,
    that peak memory stays O(1): copying the elements into a list grows with ``n``. When n is
    so large that the unbiased variance, n/(n-1) times the right one, fits in the rounding
    tolerance of the offset, a second stream of 4 values (same offset) tells them apart.
    """
    rng = np.random.default_rng(seed)
    values = _stream_values(n, offset, rng, dtype)
    what = f"welford_mean_var(stream of {n} values near {offset:.0e}, dtype {np.dtype(dtype)})"
    _, _, reads, peak, var_exact, tol_var = _one_stream(welford_mean_var, values, what, memory)
    short = ""
    if n > SHORT_STREAM and var_exact / (n - 1) <= 4 * tol_var:
        values = _stream_values(SHORT_STREAM, offset, rng, dtype)
        _one_stream(welford_mean_var, values,
                    f"welford_mean_var(stream of {SHORT_STREAM} values near {offset:.0e}, dtype {np.dtype(dtype)})",
                    memory=False)
        short = f", and a stream of {SHORT_STREAM}"
    extra = f", peak memory {peak / 1024:.1f} KiB" if memory and peak is not None else ""
    passed(f"welford_mean_var made one pass over a stream of {n} values ({reads} reads{extra}){short}")


# ----------------------------------------------------------------------------- welford_combine
def _float_partial(n: int, mean: Fraction, m2: Fraction) -> tuple:
    return (n, float(mean), float(m2)) if n else EMPTY


def _strict_partial(result, what: str, a=None, b=None) -> tuple[int, float, float]:
    if type(result) is not tuple or len(result) != 3:
        extra = f" of length {len(result)}" if isinstance(result, (tuple, list)) else ""
        fail(f"{what} should return a tuple (count, mean, M2); it returned {_kind(result)}{extra}.",
             "welford.not_a_tuple")
    count = result[0]
    if isinstance(count, (bool, np.bool_)) or not isinstance(count, (int, np.integer)):
        fail(f"{what}: the count should be an int, but it is {_kind(count)} ({count!r}).\nKeep counts as integers "
             "(n = n_a + n_b); convert to float only inside the arithmetic.", "welford.count_not_int")
    # a NaN next to an empty partial is 0/0 from a merge without the empty case
    empty = a is not None and b is not None and (a[0] == 0 or b[0] == 0)
    non_finite = ("welford.empty_partial",) if empty else ("common.non_finite",)
    return (int(count), _strict_float(result[1], f"{what}: the mean", non_finite),
            _strict_float(result[2], f"{what}: M2", non_finite))


def _m2_cause(na, nb, m2a, m2b, delta, between, m2, n_exp, m2_exp, tol) -> str:
    """The likely cause of a wrong merged M2 (``between``: the exact between-chunk term)."""
    if n_exp > 0 and abs(m2 - m2_exp / n_exp) <= tol / n_exp + 1e-12 * m2_exp / n_exp:
        return tag("the third entry is the variance M2/n; the partial keeps M2, the sum of squared deviations, "
                   "because sums of squares of two chunks add, while variances do not.", "welford.variance_in_partial")
    if abs(m2 - (m2a + m2b)) <= tol:
        return tag("you added the two M2 and forgot the between-chunk term delta²·n_a·n_b/n: the two chunks have "
                   "different means, and their spread around each other counts too.", "welford.no_between_term")
    if between > 0:
        factor = (m2 - m2a - m2b) / between
        named = [(1 / n_exp, "you divided the between-chunk term by n² instead of n."),
                 (float(n_exp), "the between-chunk term lacks its division by n: it is delta²·n_a·n_b/n."),
                 (2.0, "the between-chunk term is counted twice; it is delta²·n_a·n_b/n."),
                 (0.5, "the between-chunk term is halved; it is delta²·n_a·n_b/n.")]
        for value, cause in named:
            if abs(factor - value) <= 1e-6 * value:
                return tag(cause, "welford.between_term_scale")
        return (f"the between-chunk term is {factor:.4g} times delta²·n_a·n_b/n: M2 = M2_a + M2_b + "
                "delta²·n_a·n_b/n.")
    return "M2 = M2_a + M2_b + delta²·n_a·n_b/n, with delta = mean_b − mean_a."


def _combine_cause(a, b, result, expected) -> str:
    (na, ma, m2a), (nb, mb, m2b) = a, b
    n, m, m2 = result
    n_exp, mean_exp, m2_exp = expected
    if na == 0 or nb == 0:
        return tag("merging with the empty partial (0, 0.0, 0.0) must return the other partial unchanged.",
                   "welford.empty_partial")
    if n != na + nb:
        return tag(f"the count of the merged partial is n_a + n_b = {na + nb}, not {n}.", "welford.combine_count")
    delta = mb - ma
    between = m2_exp - m2a - m2b  # the exact M2 of both chunks, less the spread within each: the between term
    tol_m = 1e-9 * (abs(delta) + 1e-300) + 8 * U * max(abs(ma), abs(mb))
    tol = 1e-9 * m2_exp + 1e-6 * between + 8 * U * max(abs(ma), abs(mb)) * abs(delta) * max(na, nb) + 1e-300
    if abs(m - mean_exp) > tol_m:
        if abs(m - (ma + mb) / 2) <= tol_m:
            cause = tag("you averaged the two means without weights: the merged mean is "
                        "(n_a·mean_a + n_b·mean_b) / n, or mean_a + delta·n_b/n with delta = mean_b − mean_a.",
                        "welford.unweighted_mean")
        elif abs(m - (nb * ma + na * mb) / n_exp) <= tol_m:
            cause = tag("the weights of the two means are swapped: mean_a + delta·n_b/n (the partial with more "
                        "elements pulls the mean towards itself), not delta·n_a/n.", "welford.swapped_weights")
        else:
            return "the merged mean is mean_a + delta·n_b/n, with delta = mean_b − mean_a and n = n_a + n_b."
        # a known mistake in M2 as well (it does not depend on the merged mean): name both
        other = _m2_cause(na, nb, m2a, m2b, delta, between, m2, n_exp, m2_exp, tol) if abs(m2 - m2_exp) > tol else None
        if ids_of(other):
            return tag(f"2 mistakes together: (1) {cause} (2) M2 is wrong too: {other}", *ids_of(cause, other))
        return cause
    return _m2_cause(na, nb, m2a, m2b, delta, between, m2, n_exp, m2_exp, tol)


def _compare_partial(result, expected, what, a=None, b=None, total=None):
    """Compare a learner partial with an exact one; ``total`` (count, mean, M2 of all data) sets the tolerance."""
    n, m, m2 = result
    n_exp, mean_exp, m2_exp = expected
    n_all, mean_all, m2_all = total if total is not None else expected
    mean_abs = abs(mean_all) + (np.sqrt(m2_all / n_all) if n_all else 0.0)
    drift = 4 * max(n_all, 1) * U * mean_abs
    sigma = np.sqrt(m2_all / n_all) if n_all else 0.0
    tol_mean = 1e-12 * sigma + drift
    tol_m2 = max(n_exp, 1) * (1e-9 * (m2_exp / max(n_exp, 1)) + 2 * drift * sigma + drift**2)
    if n == n_exp and abs(m - mean_exp) <= tol_mean and abs(m2 - m2_exp) <= tol_m2:
        return
    cause = _combine_cause(a, b, result, expected) if a is not None else (
        "a merge in the chain above went wrong; run check_welford_combine with two chunks for a diagnosis.")
    fail(f"{what} is wrong.\n  expected (exact): (count, mean, M2) = ({n_exp}, {mean_exp!r}, {m2_exp!r})\n"
         f"  got:              ({n}, {m!r}, {m2!r})\nLikely cause: {cause}", *ids_of(cause))


def _merge(welford_combine, a, b, what):
    try:
        result = _quiet_call(welford_combine, a, b, what=what, rule="combine")
    except LearnerError as error:
        if error.error_type == "ZeroDivisionError" and (a[0] == 0 or b[0] == 0):
            raise error.with_cause(tag("with an empty partial (0, 0.0, 0.0) on either side, n_a·n_b/n or n_b/n can "
                                       "be 0/0. When one count is 0, return the other partial as it is.",
                                       "welford.empty_partial")) from None
        raise
    return _strict_partial(result, what, a, b)


def _array_partial(rows: np.ndarray) -> tuple:
    """(count, mean, M2) of each row of ``rows`` (R, m), exactly: an int count and two float64 arrays (R,)."""
    if rows.shape[1] == 0:
        return 0, np.zeros(rows.shape[0]), np.zeros(rows.shape[0])
    moments = [exact_moments(row) for row in rows]
    return (rows.shape[1], np.array([float(mean) for _, mean, _ in moments]),
            np.array([float(m2) for _, _, m2 in moments]))


def _describe(value) -> str:
    if isinstance(value, np.ndarray):
        return f"an array of shape {value.shape} and dtype {value.dtype}"
    return f"{_kind(value)} {_short_repr(value)}"


def _short_repr(value) -> str:
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - a learner's object may raise anything in its repr
        return ""
    return text if len(text) <= 60 else text[:60] + "..."


def _merge_arrays(welford_combine, a, b, what) -> tuple:
    """Merge two array partials; the result's count, and its mean and M2 as float64 arrays shaped like a's."""
    try:
        result = _quiet_call(welford_combine, a, b, what=what, rule="combine")
    except LearnerError as error:
        # the same function merged numbers: a TypeError (float() of an array) or a ValueError (the truth
        # value of an array, in an `if`) here is code written for numbers only
        if error.error_type in ("TypeError", "ValueError"):
            raise error.with_cause(SCALAR_ONLY) from None
        raise
    if type(result) is not tuple or len(result) != 3:
        fail(f"{what} should return a tuple (count, mean, M2); it returned {_kind(result)}.", "welford.not_a_tuple")
    count, mean, m2 = result
    if isinstance(count, (bool, np.bool_)) or not isinstance(count, (int, np.integer)):
        fail(f"{what}: the count should be an int, but it is {_kind(count)} ({count!r}).", "welford.count_not_int")
    if int(count) == 0:
        return 0, mean, m2  # an empty partial: its statistics are never read
    rows = (len(ARRAY_ROW_SCALES),)
    for name, value in (("the mean", mean), ("M2", m2)):
        if not isinstance(value, np.ndarray) or value.shape != rows:
            collapsed = np.ndim(value) == 0 if not isinstance(value, (list, tuple)) else False
            cause = f"\nLikely cause: {SCALAR_ONLY}" if collapsed else ""
            fail(f"{what}: {name} should be an array of shape {rows}, one entry per data set like the partials "
                 f"passed in, but it is {_describe(value)}.{cause}", *(ids_of(SCALAR_ONLY) if cause else ()))
        if value.dtype != np.float64:
            fail(f"{what}: {name} should be a float64 array, but its dtype is {value.dtype}.\nKeep the arithmetic in "
                 "float64: the partials passed in are float64.", "welford.low_precision")
    empty = a[0] == 0 or b[0] == 0
    for name, value in (("the mean", mean), ("M2", m2)):
        if not np.all(np.isfinite(value)):
            fail(f"{what}: {name} holds NaN or inf: {preview(value)}.\nA NaN next to an empty partial is 0/0 from a "
                 "merge without the empty case.", "welford.empty_partial" if empty else "common.non_finite")
    return int(count), mean, m2


def _compare_rows(result, expected, what, totals, a=None, b=None):
    """Compare an array partial with an exact one, data set by data set, with the scalar diagnoses."""
    for r, total in enumerate(totals):
        def row(p, r=r):
            return (p[0], float(p[1][r]), float(p[2][r])) if p[0] else EMPTY

        _compare_partial(row(result), row(expected), f"{what}, data set {r} (row {r} of the means and M2)",
                         None if a is None else row(a), None if b is None else row(b), total)


def _check_array_merges(welford_combine, sizes, x, what):
    """Steps 1 to 4 of check_welford_combine, with means and M2 that are arrays of several data sets."""
    scales, shifts = np.array(ARRAY_ROW_SCALES), np.array(ARRAY_ROW_SHIFTS)
    offset = float(np.mean(x)) if x.size else 0.0
    X = offset + shifts[:, None] + scales[:, None] * (x - offset)[None, :]  # (R, n): same pattern, rescaled
    chunks = np.split(X, np.cumsum(sizes)[:-1], axis=1)
    partials = [_array_partial(c) for c in chunks]
    totals = [(n, float(mean), float(m2)) for n, mean, m2 in (exact_moments(row) for row in X)]
    nonempty = [i for i, p in enumerate(partials) if p[0]]
    a, b = partials[nonempty[0]], partials[nonempty[1]]
    label = f"welford_combine(a, b) with arrays of {len(scales)} means and M2 (one per data set)"
    both = _array_partial(np.concatenate([chunks[nonempty[0]], chunks[nonempty[1]]], axis=1))
    _compare_rows(_merge_arrays(welford_combine, a, b, label), both, label, totals, a, b)
    empty = _array_partial(X[:, :0])
    for left, right, side in ((empty, a, "a"), (a, empty, "b")):
        label = (f"welford_combine(a, b) with arrays of {len(scales)} means and M2, "
                 f"{'b' if side == 'a' else 'a'} empty (count 0, arrays of zeros)")
        _compare_rows(_merge_arrays(welford_combine, left, right, label), a, label, totals, left, right)
    acc = empty
    for k, part in enumerate(partials):
        acc = _merge_arrays(welford_combine, acc, part, f"welford_combine(acc, partial of chunk {k}) in a "
                            f"left-to-right fold over arrays of {len(scales)} data sets")
    total = _array_partial(X)
    _compare_rows(acc, total, f"the left-to-right fold over arrays of {len(scales)} data sets, {what}", totals)
    level = list(partials)
    while len(level) > 1:
        paired = [_merge_arrays(welford_combine, level[k], level[k + 1], "welford_combine in a pairwise tree over "
                                f"arrays of {len(scales)} data sets") for k in range(0, len(level) - 1, 2)]
        level = paired + ([level[-1]] if len(level) % 2 else [])
    _compare_rows(level[0], total, f"the pairwise tree over arrays of {len(scales)} data sets, {what}", totals)


@check
def check_welford_combine(welford_combine, welford_mean_var=None, sizes=(5, 1, 17, 0, 3, 40, 8), offset=1e6, seed=0):
    """Merge per-chunk partials (count, mean, M2) with ``welford_combine`` and compare with exact statistics.

    Checks one merge of two chunks, merges with the empty partial (0, 0.0, 0.0) on either side
    and on both, a left-to-right fold over chunks of uneven ``sizes`` (an empty one included)
    and a pairwise tree over the same chunks; then all of it again with means and M2 that are
    arrays of three data sets (the way section 6 calls it), which code written for numbers only
    (``float(...)``, ``math.*``, an ``if`` on a mean) fails. If ``welford_mean_var`` is given, the folded
    result must also agree with one sequential pass over all the data.
    """
    sizes = [int(s) for s in sizes]
    x = offset + np.random.default_rng(seed).standard_normal(sum(sizes))
    chunks = np.split(x, np.cumsum(sizes)[:-1])
    exact = [exact_moments(c) for c in chunks]
    partials = [_float_partial(*e) for e in exact]
    n_all, mean_all, m2_all = exact_moments(x)
    total = (n_all, float(mean_all), float(m2_all))
    nonempty = [i for i, s in enumerate(sizes) if s > 0]
    if len(nonempty) < 2:
        raise ValueError("check_welford_combine needs at least two non-empty chunks")

    # 1. one merge of two chunks
    i, j = nonempty[0], nonempty[1]
    a, b = partials[i], partials[j]
    what = f"welford_combine(a, b) for a = {a} and b = {b}"
    both = _float_partial(*exact_moments(np.concatenate([chunks[i], chunks[j]])))
    _compare_partial(_merge(welford_combine, a, b, what), both, what, a, b, total)

    # 2. the empty partial on either side, and on both
    for left, right in ((EMPTY, a), (a, EMPTY)):
        what = f"welford_combine({left}, {right})"
        _compare_partial(_merge(welford_combine, left, right, what), a, what, left, right, total)
    what = f"welford_combine({EMPTY}, {EMPTY})"
    n, m, m2 = _merge(welford_combine, EMPTY, EMPTY, what)
    if n != 0 or m2 != 0.0:
        fail(f"{what} returned ({n}, {m!r}, {m2!r}); merging two empty partials gives the empty partial "
             f"{EMPTY}.\nLikely cause: when one count is 0, return the other partial as it is.",
             "welford.empty_partial")

    # 3. a left-to-right fold, as one sequential pass over the chunks would do
    acc = EMPTY
    for k, part in enumerate(partials):
        acc = _merge(welford_combine, acc, part, f"welford_combine(acc, partial of chunk {k}) in a left-to-right fold")
    what = f"the left-to-right fold of welford_combine over chunks of sizes {sizes}"
    _compare_partial(acc, total, what, total=total)

    # 4. a pairwise tree, as threads of a GPU block would do
    level = list(partials)
    while len(level) > 1:
        paired = [_merge(welford_combine, level[k], level[k + 1], "welford_combine in a pairwise tree")
                  for k in range(0, len(level) - 1, 2)]
        level = paired + ([level[-1]] if len(level) % 2 else [])
    _compare_partial(level[0], total, f"the pairwise tree of welford_combine over chunks of sizes {sizes}", total=total)

    # 5. the same merges on arrays of means and M2: several data sets at once, as section 6 does
    _check_array_merges(welford_combine, sizes, x, what=f"chunks of sizes {sizes}")

    # 6. the same answer as one pass over all the data
    agree = ""
    if welford_mean_var is not None:
        m_pass, v_pass = _strict_pair(_quiet_call(welford_mean_var, x, what="welford_mean_var(x)"),
                                      "welford_mean_var(x)", x.size)
        folded = (acc[1], acc[2] / acc[0])
        tol_mean, tol_var = _tolerances(x, x.size, float(m2_all / n_all))
        if abs(folded[0] - m_pass) > 2 * tol_mean or abs(folded[1] - v_pass) > 2 * tol_var:
            fail(f"Merging the chunks gives (mean, var) = {folded}, but your welford_mean_var over the same data "
                 f"gives ({m_pass!r}, {v_pass!r}).\nLikely cause: one of your two functions is wrong; "
                 "run check_welford_mean_var to see which.")
        agree = " and agrees with your one-pass welford_mean_var"
    passed(f"welford_combine merges {len(sizes)} chunks of sizes {sizes} (empty ones included) exactly, "
           f"left to right and as a tree, on numbers and on arrays of {len(ARRAY_ROW_SCALES)} data sets{agree}")


# ----------------------------------------------------------------------------- derive it: the M2 update
M2_PROBE = (1.0, 3.0, 5.0, 11.0)        # small integers: every mean and M2 along the way is exact in float64
M2_OFFSET = 1e5                         # an offset where a cancelling but algebraically right update loses digits


def _run_m2_update(update, values, what):
    """Fold ``update(m2, mean_old, mean_new, x)`` over ``values``: (M2, or None for the placeholder)."""
    m2, mean = 0.0, 0.0
    for k, x in enumerate(values, start=1):
        x = float(x)
        mean_new = mean + (x - mean) / k
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            result = call_learner(update, m2, mean, mean_new, x, what=f"{what} at element {k}")
        if result is None or result is Ellipsis:
            return None
        if isinstance(result, (bool, np.bool_)) or not isinstance(result, (int, float, np.integer, np.floating)):
            shape = f" of shape {result.shape}" if isinstance(result, np.ndarray) else ""
            fail(f"{what} returned {_kind(result)}{shape} at element {k}; it should return one number, the new M2.")
        m2, mean = float(result), mean_new
    return m2


def _m2_step_cause(update) -> tuple[str, bool]:
    """What the learner's update does on one exact step (the 4th element of M2_PROBE), and whether it is right there."""
    values = np.array(M2_PROBE)
    _, mean_old, m2_old = exact_moments(values[:-1])
    _, mean_new, m2_new = exact_moments(values)
    x = float(values[-1])
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            got = float(call_learner(update, float(m2_old), float(mean_old), float(mean_new), x, what="probe"))
    except Exception:  # noqa: BLE001 - a probe only refines a diagnosis
        return "", False
    increment = float(m2_new - m2_old)
    call = f"my_m2_update({float(m2_old)}, {float(mean_old)}, {float(mean_new)}, {x})"
    seen = (f"On the stream {list(M2_PROBE)}, step k = 4 ({call}) should give M2 = {float(m2_new)} "
            f"(the old M2 {float(m2_old)} plus {increment}); yours gives {got!r}.\n")
    if abs(got - increment) <= 1e-9 * increment:
        return seen + "Likely cause: you returned only the increment: add it to the old m2.", False
    ratio = (got - float(m2_old)) / increment
    named = [
        (4 / 3, "your increment is k/(k−1) = 4/3 times too large, which is what (x − mean_old)² gives: the old mean "
                "in both places. The squared deviation from the old mean misses a factor (k−1)/k; find that factor "
                "among the means you are given."),
        (3 / 4, "your increment is (k−1)/k = 3/4 of the true one, which is what (x − mean_new)² gives: the new mean "
                "in both places. One of the two deviations should be from the other mean."),
        (1 / 3, "your increment is 1/(k−1) of the true one: (mean_new − mean_old) is 1/k of a deviation, so a "
                "product with it is k times too small; use deviations of x itself."),
        (1 / 4, "your increment is 1/k of the true one: (mean_new − mean_old) is 1/k of a deviation, so a "
                "product with it is k times too small; use deviations of x itself."),
        (-1.0, "your increment has the wrong sign: M2 never decreases when an element arrives. Check which mean is "
               "subtracted from what."),
        (2.0, "your increment is twice the true one: a factor 2 too many."),
        (0.5, "your increment is half the true one: a factor 1/2 too many."),
        (0.0, "M2 did not change: the update adds nothing."),
    ]
    if abs(ratio - 1.0) <= 1e-12:
        return "", True
    for value, words in named:
        if abs(ratio - value) <= 1e-9:
            return seen + "Likely cause: " + words, False
    return seen + (f"Likely cause: your increment is {ratio:.4g} times the true one. Start from "
                   "M2_k = Σ x_i² − k·mean_k² and write x = mean_old + δ."), False


@check
def check_m2_update(update, n=400, offset=M2_OFFSET, seed=0):
    """Fold ``update(m2, mean_old, mean_new, x)`` over streams and compare the final M2 with exact arithmetic.

    The check computes the running mean itself; the learner's expression only updates M2.
    Streams: (1, 3, 5, 11) (exact at every step), ``n`` standard normal values, and the same
    values moved to ``offset``, where an update that forms products of the size of mean² and
    subtracts them loses digits. A placeholder (None or ``...``) is told to come first.
    """
    z = np.random.default_rng(seed).standard_normal(n)
    cases = [("the stream (1, 3, 5, 11)", np.array(M2_PROBE)), (f"{n} standard normal values", z),
             (f"the same values at offset {offset:.0e}", offset + z)]
    worst = 0.0
    for label, values in cases:
        got = _run_m2_update(update, values, "my_m2_update")
        if got is None:
            print("✎ my_m2_update: write your expression first (replace the ...), then run this cell again.")
            return
        _, mean, m2 = exact_moments(values)
        expected = float(m2)
        sigma = float(np.sqrt(float(m2 / len(values))))
        # a stable update errs by a few u·|mean|/σ per step (its deviations carry the running mean's rounding)
        tol = 1e-12 + 20 * U * abs(float(mean)) / sigma * np.sqrt(len(values))
        error = abs(got - expected) / expected if np.isfinite(got) else np.inf
        if error <= tol:
            worst = max(worst, error)
            continue
        cause, exact_step = _m2_step_cause(update)
        if exact_step and abs(float(mean)) > 10 * sigma:
            cause = (f"Your update is right on exact data, but at offset {offset:.0e} it loses digits: "
                      "cancellation. It forms numbers of the size of mean² (x·x, x·mean, mean·mean) and "
                      "subtracts them. Rewrite it so that it only multiplies differences of x and the "
                      "means, numbers of the size of σ.")
        elif exact_step:
            cause = "Your update is right on the exact stream (1, 3, 5, 11); look for a rounding problem."
        fail(f"my_m2_update folded over {label} gives M2 = {got!r}; the exact sum of squared deviations is "
             f"{expected!r} (relative error {error:.1e}, allowed {tol:.1e}).\n{cause}")
    passed(f"my_m2_update gives the exact M2 (relative error ≤ {worst:.1e}) on {len(cases)} streams, "
           f"offset {offset:.0e} included")
