"""Implementations of the 02_geometry exercises: several correct, many classic mistakes.

Each WRONG_* table maps a name to (function, substring the diagnosis must contain,
keyword arguments for the check that exposes it).
"""
import numpy as np


# ---------------------------------------------------------------- complement_projection
def projection_gram_schmidt(V):
    """Orthonormalise the columns one by one, skipping those that add no new direction."""
    d = V.shape[0]
    basis = []
    tol = 1e-10 * max(1.0, float(np.abs(V).max()))
    for v in V.T:
        w = v.astype(np.float64)
        for q in basis:
            w = w - (q @ w) * q
        if np.linalg.norm(w) > tol:
            basis.append(w / np.linalg.norm(w))
    P = np.eye(d)
    for q in basis:
        P -= np.outer(q, q)
    return P


def projection_pinv(V):
    """I - V V^+: V V^+ is the projection onto the column space, dependent columns included."""
    return np.eye(V.shape[0]) - V @ np.linalg.pinv(V)


def projection_svd(V):
    """Left singular vectors with a nonzero singular value span the columns."""
    U, s, _ = np.linalg.svd(V, full_matrices=False)
    U = U[:, s > 1e-10 * s.max()]
    return np.eye(V.shape[0]) - U @ U.T


def projection_lstsq(V):
    """Each e_j minus its least-squares fit by the columns of V: the residual maker."""
    eye = np.eye(V.shape[0])
    coefficients = np.linalg.lstsq(V, eye, rcond=None)[0]
    return eye - V @ coefficients


def projection_span(V):
    return V @ np.linalg.pinv(V)


def projection_unnormalised(V):
    return np.eye(V.shape[0]) - V @ V.T


def projection_sum_of_singles(V):
    P = np.eye(V.shape[0])
    for v in V.T:
        P -= np.outer(v, v) / (v @ v)
    return P


def projection_chained(V):
    P = np.eye(V.shape[0])
    for v in V.T:
        P = P @ (np.eye(V.shape[0]) - np.outer(v, v) / (v @ v))
    return P


def projection_inverse_gram(V):
    return np.eye(V.shape[0]) - V @ np.linalg.inv(V.T @ V) @ V.T


def projection_qr(V):
    Q, _ = np.linalg.qr(V)
    return np.eye(V.shape[0]) - Q @ Q.T


def projection_first_column(V):
    v = V[:, 0]
    return np.eye(V.shape[0]) - np.outer(v, v) / (v @ v)


def projection_rows(V):
    return np.eye(V.shape[1]) - V.T @ np.linalg.pinv(V.T)


def projection_float32(V):
    return projection_pinv(V).astype(np.float32)


def projection_list(V):
    return projection_pinv(V).tolist()


CORRECT_PROJECTIONS = [projection_gram_schmidt, projection_pinv, projection_svd, projection_lstsq]
WRONG_PROJECTIONS = {
    "span, not complement": (projection_span, "projection ONTO their span", {}),
    "not normalised": (projection_unnormalised, "as if every column had length 1", {}),
    "sum of single projections": (projection_sum_of_singles, "right when the columns of V are orthogonal", {}),
    "chained single projections": (projection_chained, "right when the columns of V are orthogonal", {}),
    "inverse of the Gram matrix": (projection_inverse_gram, "one column is a combination of the others", {}),
    "QR keeps every column": (projection_qr, "one column is a combination of the others", {}),
    "first column only": (projection_first_column, "removes column 0 of V and nothing else", {}),
    "rows for columns": (projection_rows, "your code read them as rows", {}),
    "float32": (projection_float32, "dtype float32", {}),
    "list": (projection_list, "builtins.list", {}),
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
