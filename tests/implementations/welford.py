"""Implementations of the 06_welford exercises: several correct, many classic mistakes.

Each WRONG_* table maps a name to (function, substring the diagnosis must contain,
keyword arguments for the check that exposes it).
"""
import numpy as np


# ---------------------------------------------------------------- welford_mean_var, correct
def welford_classic(x):
    """Welford (1962) as usually written: delta with the old mean, then with the new one."""
    count, mean, m2 = 0, 0.0, 0.0
    for xi in x:
        count += 1
        delta = xi - mean
        mean += delta / count
        delta2 = xi - mean
        m2 += delta * delta2
    return float(mean), float(m2 / count)


def welford_float_count(x):
    """Running sum of squared deviations S with the count as a float; returns numpy float64 scalars."""
    k = np.float64(0.0)
    mean = np.float64(0.0)
    s = np.float64(0.0)
    for xi in x:
        k += 1.0
        old = mean
        mean = old + (xi - old) / k
        s = s + (xi - old) * (xi - mean)
    return mean, s / k


def welford_indexed(x):
    """Index loop; M2 grows by (k-1)/k * delta**2, the same update written another way."""
    n = len(x)
    mean, m2 = 0.0, 0.0
    for i in range(n):
        k = i + 1
        delta = float(x[i]) - mean
        m2 += delta * delta * (k - 1) / k
        mean += delta / k
    return mean, m2 / n


def welford_first_element(x):
    """Initialise with the first element, then loop over the rest (a slice)."""
    mean = float(x[0])
    m2 = 0.0
    k = 1
    for xi in x[1:]:
        k += 1
        delta = xi - mean
        mean += delta / k
        m2 += delta * (xi - mean)
    return mean, m2 / k


def shifted_data(x):
    """One pass on data shifted by its first element (Chan, Golub & LeVeque, 1983): also stable."""
    shift = float(x[0])
    n, s1, s2 = 0, 0.0, 0.0
    for xi in x:
        d = float(xi) - shift
        n += 1
        s1 += d
        s2 += d * d
    mean_d = s1 / n
    return shift + mean_d, (s2 - s1 * mean_d) / n


CORRECT_MEAN_VARS = [welford_classic, welford_float_count, welford_indexed, welford_first_element, shifted_data]


# ---------------------------------------------------------------- welford_mean_var, wrong
def naive_sums(x):
    """E[x²] − μ² in one loop: the textbook formula."""
    n, s, ss = 0, 0.0, 0.0
    for xi in x:
        n += 1
        s += xi
        ss += xi * xi
    mean = s / n
    return mean, ss / n - mean * mean


def unbiased(x):
    count, mean, m2 = 0, 0.0, 0.0
    for xi in x:
        count += 1
        delta = xi - mean
        mean += delta / count
        m2 += delta * (xi - mean)
    return float(mean), float(m2 / (count - 1))


def naive_unbiased(x):
    """Two mistakes: E[x²] − μ², and divided by n − 1."""
    n, s, ss = 0, 0.0, 0.0
    for xi in x:
        n += 1
        s += xi
        ss += xi * xi
    mean = s / n
    return mean, (ss - n * mean * mean) / (n - 1)


def returns_m2(x):
    count, mean, m2 = 0, 0.0, 0.0
    for xi in x:
        count += 1
        delta = xi - mean
        mean += delta / count
        m2 += delta * (xi - mean)
    return float(mean), float(m2)


def mean_updated_after_use(x):
    """M2 is updated before the mean: it uses the old mean twice."""
    count, mean, m2 = 0, 0.0, 0.0
    for xi in x:
        count += 1
        delta = xi - mean
        m2 += delta * (xi - mean)
        mean += delta / count
    return float(mean), float(m2 / count)


def new_mean_twice(x):
    count, mean, m2 = 0, 0.0, 0.0
    for xi in x:
        count += 1
        mean += (xi - mean) / count
        m2 += (xi - mean) ** 2
    return float(mean), float(m2 / count)


def returns_std(x):
    mean, var = welford_classic(x)
    return mean, var**0.5


def divides_by_total_length(x):
    """mean += delta / n with n = len(x): an exponential moving average, not the mean."""
    n = len(x)
    mean, m2 = 0.0, 0.0
    for xi in x:
        delta = xi - mean
        mean += delta / n
        m2 += delta * (xi - mean)
    return float(mean), float(m2 / n)


def float32_accumulators(x):
    count, mean, m2 = 0, np.float32(0.0), np.float32(0.0)
    for xi in x:
        count += 1
        delta = np.float32(xi) - mean
        mean += delta / np.float32(count)
        m2 += delta * (np.float32(xi) - mean)
    return mean, m2 / np.float32(count)


def array_of_shape_one(x):
    mean, m2 = np.zeros(1), np.zeros(1)
    count = 0
    for xi in x:
        count += 1
        delta = xi - mean
        mean += delta / count
        m2 += delta * (xi - mean)
    return mean, m2 / count


def list_result(x):
    return list(welford_classic(x))


def swapped(x):
    mean, var = welford_classic(x)
    return var, mean


def floor_division_mean(x):
    total, n = 0, 0
    for xi in x:
        total += xi
        n += 1
    mean = total // n
    return mean, welford_classic(x)[1]


WRONG_MEAN_VARS = {
    "naive E[x²] − μ²": (naive_sums, "cancels catastrophically", {}),
    "naive at offset 1e6": (naive_sums, "at offset 1e+06", {"offset": 1e6}),
    "unbiased": (unbiased, "unbiased variance (divided by n−1)", {}),
    "returns M2": (returns_m2, "returned the sum of squared deviations M2 instead of M2/n", {}),
    "mean updated after use": (mean_updated_after_use, "updated the mean after using it", {}),
    "new mean twice": (new_mean_twice, "used the new mean twice", {}),
    "standard deviation": (returns_std, "standard deviation", {}),
    "divides by total n": (divides_by_total_length, "depends on the order", {}),
    "float32 accumulators": (float32_accumulators, "float64", {}),
    "array of shape (1,)": (array_of_shape_one, "shape (1,)", {}),
    "list instead of tuple": (list_result, "should return a tuple", {}),
    "swapped": (swapped, "(var, mean)", {}),
    "floor division": (floor_division_mean, "floor division", {"x": np.arange(1, 11)}),
    "unbiased on one element": (unbiased, "n - 1 = 0", {"x": np.array([3.25])}),
    "naive and unbiased at an offset": (naive_unbiased, "2 mistakes together: (1) you returned the unbiased variance",
                                        {"x": 1e8 + np.random.default_rng(5).standard_normal(500)}),
}


# ---------------------------------------------------------------- one pass, wrong
def two_pass_loops(x):
    n, total = 0, 0.0
    for xi in x:
        n += 1
        total += xi
    mean = total / n
    m2 = 0.0
    for xi in x:
        m2 += (xi - mean) ** 2
    return float(mean), float(m2 / n)


def builtin_sum_then_loop(x):
    mean = sum(x) / len(x)
    return float(mean), float(sum((xi - mean) ** 2 for xi in x) / len(x))


def numpy_library(x):
    return float(np.mean(x)), float(np.var(x))


def method_calls(x):
    return float(x.mean()), float(x.var())


def converts_first(x):
    return welford_classic(np.asarray(x, dtype=np.float64))


def keeps_a_list(x):
    values = [float(xi) for xi in x]
    mean = sum(values) / len(values)
    return mean, sum((v - mean) ** 2 for v in values) / len(values)


def vectorised_deviations(x):
    n, total = 0, 0.0
    for xi in x:
        n += 1
        total += xi
    mean = total / n
    return mean, float(sum((x - mean) ** 2)) / n


def swallows_the_stream_error(x):
    try:
        return float(np.mean(x)), float(np.var(x))
    except Exception:  # noqa: BLE001 - hides the check's message, as a defensive learner might
        return two_pass_loops(x)


WRONG_ONE_PASS = {
    "two loops": (two_pass_loops, "you computed the mean first (two passes)", {}),
    "sum(x) then a generator": (builtin_sum_then_loop, "you computed the mean first (two passes)", {}),
    "np.mean and np.var": (numpy_library, "np.mean(x)", {}),
    "x.mean() and x.var()": (method_calls, "x.mean", {}),
    "np.asarray first": (converts_first, "np.asarray(x)", {}),
    "keeps a list": (keeps_a_list, "kept the elements", {}),
    "x - mean": (vectorised_deviations, "whole-array arithmetic", {}),
    "catches the error": (swallows_the_stream_error, "the whole array at once", {}),
}


# ---------------------------------------------------------------- welford_combine
def combine_chan(a, b):
    """Chan, Golub & LeVeque: shift the mean by delta·n_b/n, add the between-chunk term."""
    n_a, mean_a, m2_a = a
    n_b, mean_b, m2_b = b
    if n_a == 0:
        return b
    if n_b == 0:
        return a
    n = n_a + n_b
    delta = mean_b - mean_a
    return n, mean_a + delta * n_b / n, m2_a + m2_b + delta * delta * n_a * n_b / n


def combine_weighted(a, b):
    """Weighted means, then each chunk's squared distance to the merged mean."""
    n = a[0] + b[0]
    if n == 0:
        return (0, 0.0, 0.0)
    mean = (a[0] * a[1] + b[0] * b[1]) / n
    m2 = a[2] + b[2] + a[0] * (a[1] - mean) ** 2 + b[0] * (b[1] - mean) ** 2
    return n, mean, m2  # no float(...): section 6 merges arrays of means


CORRECT_COMBINES = [combine_chan, combine_weighted]


def combine_no_between_term(a, b):
    n, mean, _ = combine_chan(a, b)
    return n, mean, a[2] + b[2]


def combine_unweighted_mean(a, b):
    n, _, m2 = combine_chan(a, b)
    if a[0] == 0 or b[0] == 0:
        return combine_chan(a, b)
    return n, (a[1] + b[1]) / 2, m2


def combine_swapped_weights(a, b):
    n_a, mean_a, m2_a = a
    n_b, mean_b, m2_b = b
    if n_a == 0 or n_b == 0:
        return combine_chan(a, b)
    n = n_a + n_b
    delta = mean_b - mean_a
    return n, mean_a + delta * n_a / n, m2_a + m2_b + delta * delta * n_a * n_b / n


def combine_divides_by_n_squared(a, b):
    n_a, mean_a, m2_a = a
    n_b, mean_b, m2_b = b
    if n_a == 0 or n_b == 0:
        return combine_chan(a, b)
    n = n_a + n_b
    delta = mean_b - mean_a
    return n, mean_a + delta * n_b / n, m2_a + m2_b + delta * delta * n_a * n_b / n**2


def combine_no_empty_guard(a, b):
    n_a, mean_a, m2_a = a
    n_b, mean_b, m2_b = b
    n = n_a + n_b
    delta = mean_b - mean_a
    return n, mean_a + delta * n_b / n, m2_a + m2_b + delta * delta * n_a * n_b / n


def combine_returns_variance(a, b):
    n, mean, m2 = combine_chan(a, b)
    return n, mean, m2 / n if n else 0.0


def combine_float_count(a, b):
    n, mean, m2 = combine_chan(a, b)
    return float(n), mean, m2


def combine_list(a, b):
    return list(combine_chan(a, b))


def combine_floats(a, b):
    """Right on numbers; float(...) of an array of means raises (the notebook's rule: plain arithmetic)."""
    n, mean, m2 = combine_chan(a, b)
    return n, float(mean), float(m2)


def combine_branches_on_equal_means(a, b):
    """A shortcut that is right on numbers and asks for the truth value of an array on arrays."""
    if a[0] and b[0] and a[1] == b[1]:
        return a[0] + b[0], a[1], a[2] + b[2]
    return combine_chan(a, b)


WRONG_COMBINES = {
    "no between-chunk term": (combine_no_between_term, "forgot the between-chunk term", {}),
    "unweighted mean": (combine_unweighted_mean, "without weights", {}),
    "swapped weights": (combine_swapped_weights, "weights of the two means are swapped", {}),
    "between term over n²": (combine_divides_by_n_squared, "by n² instead of n", {}),
    "no guard for empty": (combine_no_empty_guard, "empty partial", {}),
    "third entry is the variance": (combine_returns_variance, "the variance M2/n", {}),
    "float count": (combine_float_count, "count should be an int", {}),
    "list instead of tuple": (combine_list, "should return a tuple", {}),
    "float(...) of the results": (combine_floats, "works for numbers but not for arrays", {}),
    "an if on the means": (combine_branches_on_equal_means, "works for numbers but not for arrays", {}),
}
