"""Implementations of the 02_geometry exercises: several correct, many classic mistakes.

Each WRONG_* table maps a name to (function, substring the diagnosis must contain,
keyword arguments for the check that exposes it).
"""
import numpy as np


# ---------------------------------------------------------------- centering_matrix
def centering_outer(d):
    ones = np.ones(d)
    return np.eye(d) - np.outer(ones, ones) / d


def centering_broadcast(d):
    """Subtract 1/d from every entry of the identity (a scalar broadcasts)."""
    return np.identity(d) - 1.0 / d


def centering_columns_of_identity(d):
    """Centre each column e_j of the identity: P e_j = e_j - mean(e_j) 1."""
    eye = np.eye(d)
    return eye - eye.mean(axis=0, keepdims=True)


def centering_loops(d):
    """Entry by entry, the way the formula reads."""
    P = np.zeros((d, d))
    for i in range(d):
        for j in range(d):
            P[i, j] = (1.0 if i == j else 0.0) - 1.0 / d
    return P


def centering_identity(d):
    return np.eye(d)


def centering_no_one_over_d(d):
    return np.eye(d) - np.ones((d, d))


def centering_inner_product(d):
    """np.ones(d) @ np.ones(d) is the number d, so this subtracts 1 from every entry."""
    return np.eye(d) - np.ones(d) @ np.ones(d) / d


def centering_inner_product_no_d(d):
    return np.eye(d) - np.ones(d) @ np.ones(d)


def centering_mean_projector(d):
    return np.ones((d, d)) / d


def centering_d_squared(d):
    return np.eye(d) - np.ones((d, d)) / d**2


def centering_d_minus_one(d):
    return np.eye(d) - np.ones((d, d)) / (d - 1)


def centering_diagonal_only(d):
    return np.eye(d) * (1 - 1 / d)


def centering_sign_flipped(d):
    return np.ones((d, d)) / d - np.eye(d)


def centering_vector(d):
    return np.ones(d) - 1.0 / d


def centering_float32(d):
    return (np.eye(d) - 1.0 / d).astype(np.float32)


def centering_integer(d):
    return np.eye(d, dtype=int) - np.ones((d, d), dtype=int) // d


def centering_list(d):
    return (np.eye(d) - 1.0 / d).tolist()


def centering_lower_triangle(d):
    """Subtracts the mean of the first i+1 entries (a running mean), not of all d."""
    P = np.eye(d)
    for i in range(d):
        P[i, : i + 1] -= 1.0 / (i + 1)
    return P


CORRECT_CENTERINGS = [centering_outer, centering_broadcast, centering_columns_of_identity, centering_loops]
WRONG_CENTERINGS = {
    "identity": (centering_identity, "returned the identity", {}),
    "1/d missing": (centering_no_one_over_d, "the 1/d is missing", {}),
    "inner product for the outer one": (centering_inner_product, "inner product", {}),
    "inner product, no 1/d": (centering_inner_product_no_d, "not the outer product", {}),
    "mean projector": (centering_mean_projector, "the projection onto 1", {}),
    "divided by d twice": (centering_d_squared, "divided by d twice", {}),
    "d - 1 for d": (centering_d_minus_one, "d - 1 where d belongs", {}),
    "diagonal only": (centering_diagonal_only, "only the diagonal", {}),
    "sign flipped": (centering_sign_flipped, "sign is flipped", {}),
    "vector for matrix": (centering_vector, "returned a vector", {}),
    "float32": (centering_float32, "dtype float32", {}),
    "integer": (centering_integer, "dtype int64", {}),
    "list": (centering_list, "builtins.list", {}),
    "running mean": (centering_lower_triangle, "not symmetric", {}),
    "d = 1 gives identity": (centering_identity, "for d = 1", {"d": 1}),
}


# ---------------------------------------------------------------- invariance_gap
def gap_direct(norm, x, a, c):
    return float(np.max(np.abs(norm(a * x + c) - norm(x))))


def gap_per_token(norm, x, a, c):
    """Token by token, with an explicit all-ones vector and Python's max."""
    d = x.shape[-1]
    ones = np.ones(d)
    rows = x.reshape(-1, d)
    return max(float(np.abs(norm(a * row + c * ones) - norm(row)).max()) for row in rows)


def gap_infinity_norm(norm, x, a, c):
    """The gap is the infinity norm of the flattened difference."""
    moved = norm(np.multiply(x, a) + np.full_like(x, c))
    return float(np.linalg.norm((moved - norm(x)).ravel(), ord=np.inf))


def gap_no_shift(norm, x, a, c):
    return float(np.max(np.abs(norm(a * x) - norm(x))))


def gap_no_scale(norm, x, a, c):
    return float(np.max(np.abs(norm(x + c) - norm(x))))


def gap_shift_scaled(norm, x, a, c):
    return float(np.max(np.abs(norm(a * (x + c)) - norm(x))))


def gap_swapped(norm, x, a, c):
    return float(np.max(np.abs(norm(c * x + a) - norm(x))))


def gap_shift_times_x(norm, x, a, c):
    return float(np.max(np.abs(norm(a * x + c * x) - norm(x))))


def gap_in_place(norm, x, a, c):
    """z = x is not a copy: both calls then see the moved array."""
    z = x
    z *= a
    z += c
    return float(np.max(np.abs(norm(z) - norm(x))))


def gap_signed(norm, x, a, c):
    return float(np.max(norm(a * x + c) - norm(x)))


def gap_signed_other_way(norm, x, a, c):
    return float(np.max(norm(x) - norm(a * x + c)))


def gap_mean(norm, x, a, c):
    return float(np.mean(np.abs(norm(a * x + c) - norm(x))))


def gap_euclidean(norm, x, a, c):
    return float(np.linalg.norm(norm(a * x + c) - norm(x)))


def gap_difference_of_maxima(norm, x, a, c):
    return float(abs(np.max(norm(a * x + c)) - np.max(norm(x))))


def gap_relative(norm, x, a, c):
    base = norm(x)
    return float(np.max(np.abs(norm(a * x + c) - base)) / np.max(np.abs(base)))


def gap_first_token(norm, x, a, c):
    return float(np.max(np.abs(norm(a * x[0] + c) - norm(x[0]))))


def gap_per_token_array(norm, x, a, c):
    return np.max(np.abs(norm(a * x + c) - norm(x)), axis=-1)


def gap_elementwise(norm, x, a, c):
    return np.abs(norm(a * x + c) - norm(x))


def gap_float32(norm, x, a, c):
    return np.float32(np.max(np.abs(norm(a * x + c) - norm(x))))


def gap_never_calls_norm(norm, x, a, c):
    return float(np.max(np.abs((a * x + c) - x)))


def gap_always_zero(norm, x, a, c):
    """'LayerNorm is invariant, so the gap is 0': true only up to eps, and false for RMSNorm."""
    return 0.0


def gap_no_return(norm, x, a, c):
    np.max(np.abs(norm(a * x + c) - norm(x)))


CORRECT_GAPS = [gap_direct, gap_per_token, gap_infinity_norm]
WRONG_GAPS = {
    "shift not added": (gap_no_shift, "shift c was not added", {}),
    "scale not applied": (gap_no_scale, "scale a was not applied", {}),
    "shift scaled": (gap_shift_scaled, "a * (x + c)", {}),
    "a and c swapped": (gap_swapped, "swapped", {}),
    "shift times x": (gap_shift_times_x, "c multiplied x", {}),
    "x changed in place": (gap_in_place, "in place", {}),
    "signed maximum": (gap_signed, "absolute value first", {}),
    "signed maximum, other way": (gap_signed_other_way, "absolute value first", {}),
    "mean instead of max": (gap_mean, "mean absolute difference", {}),
    "Euclidean norm": (gap_euclidean, "Euclidean norm", {}),
    "difference of maxima": (gap_difference_of_maxima, "difference of the two maxima", {}),
    "relative gap": (gap_relative, "not a relative one", {}),
    "first token only": (gap_first_token, "first token only", {}),
    "one gap per token": (gap_per_token_array, "one gap per token", {}),
    "elementwise differences": (gap_elementwise, "elementwise differences", {}),
    "float32 scalar": (gap_float32, "float32 scalar", {}),
    "norm never called": (gap_never_calls_norm, "never called", {}),
    "always zero": (gap_always_zero, "never called", {}),
    "no return": (gap_no_return, "forget the return", {}),
}
