"""Implementations of the 05_placement exercise: several correct, many classic mistakes.

WRONG maps a name to (function, substring the diagnosis must contain, which check exposes
it: "modes" for check_residual_sublayer, "rejects" for check_residual_sublayer_rejects).
"""


# ---------------------------------------------------------------- correct
def sublayer_if_chain(x, F, norm, mode):
    if mode == "pre":
        return x + F(norm(x))
    elif mode == "post":
        return norm(x + F(x))
    elif mode == "output":
        return x + norm(F(x))
    raise ValueError(f"mode must be 'pre', 'post' or 'output', got {mode!r}")


def sublayer_lazy_table(x, F, norm, mode):
    """A table of lambdas, so only the chosen placement runs; validated before the lookup."""
    placements = {
        "pre": lambda: x + F(norm(x)),
        "post": lambda: norm(x + F(x)),
        "output": lambda: x + norm(F(x)),
    }
    if not isinstance(mode, str) or mode not in placements:
        raise ValueError(f"unknown mode {mode!r}; valid modes are {sorted(placements)}")
    return placements[mode]()


def sublayer_match(x, F, norm, mode):
    match mode:
        case "pre":
            h = norm(x)
            return F(h) + x
        case "post":
            s = x.copy()
            s += F(x)  # in place on a copy: fine
            return norm(s)
        case "output":
            return norm(F(x)) + x
        case _:
            raise ValueError("expected mode 'pre', 'post' or 'output', got %r" % (mode,))


CORRECT = [sublayer_if_chain, sublayer_lazy_table, sublayer_match]


# ---------------------------------------------------------------- wrong
def pre_and_post_swapped(x, F, norm, mode):
    if mode == "pre":
        return norm(x + F(x))
    if mode == "post":
        return x + F(norm(x))
    return sublayer_if_chain(x, F, norm, mode)


def post_and_output_swapped(x, F, norm, mode):
    if mode == "post":
        return x + norm(F(x))
    if mode == "output":
        return norm(x + F(x))
    return sublayer_if_chain(x, F, norm, mode)


def pre_uses_x_in_F(x, F, norm, mode):
    """A typo: the normalised input is computed, then x is passed to F anyway."""
    if mode == "pre":
        h = norm(x)  # noqa: F841 - the unused result is the mistake
        return x + F(x)
    return sublayer_if_chain(x, F, norm, mode)


def pre_no_residual(x, F, norm, mode):
    if mode == "pre":
        return F(norm(x))
    return sublayer_if_chain(x, F, norm, mode)


def post_no_residual(x, F, norm, mode):
    if mode == "post":
        return norm(F(x))
    return sublayer_if_chain(x, F, norm, mode)


def pre_normalised_residual(x, F, norm, mode):
    """Overwrites the stream with its normalised version, so the residual is norm(x)."""
    if mode == "pre":
        x = norm(x)
        return x + F(x)
    return sublayer_if_chain(x, F, norm, mode)


def output_norm_on_input(x, F, norm, mode):
    if mode == "output":
        return x + F(norm(x))
    return sublayer_if_chain(x, F, norm, mode)


def output_F_on_normalised(x, F, norm, mode):
    if mode == "output":
        return x + norm(F(norm(x)))
    return sublayer_if_chain(x, F, norm, mode)


def post_forgets_norm(x, F, norm, mode):
    if mode == "post":
        return x + F(x)
    return sublayer_if_chain(x, F, norm, mode)


def pre_subtracts(x, F, norm, mode):
    if mode == "pre":
        return x - F(norm(x))
    return sublayer_if_chain(x, F, norm, mode)


def eager_all_three(x, F, norm, mode):
    """Computes every placement, then picks one: F runs three times."""
    results = {"pre": x + F(norm(x)), "post": norm(x + F(x)), "output": x + norm(F(x))}
    if mode not in results:
        raise ValueError(f"mode must be one of {list(results)}")
    return results[mode]


def post_in_place(x, F, norm, mode):
    if mode == "post":
        x += F(x)
        return norm(x)
    return sublayer_if_chain(x, F, norm, mode)


def pre_calls_F_twice(x, F, norm, mode):
    if mode == "pre":
        h = norm(x)
        F(h)  # a stray debugging call
        return x + F(h)
    return sublayer_if_chain(x, F, norm, mode)


def typo_in_output(x, F, norm, mode):
    if mode == "pre":
        return x + F(norm(x))
    if mode == "post":
        return norm(x + F(x))
    if mode == "ouptut":
        return x + norm(F(x))
    raise ValueError(f"mode must be 'pre', 'post' or 'output', got {mode!r}")


def lower_cases_mode(x, F, norm, mode):
    return sublayer_if_chain(x, F, norm, str(mode).strip().lower())


def else_is_output(x, F, norm, mode):
    if mode == "pre":
        return x + F(norm(x))
    elif mode == "post":
        return norm(x + F(x))
    else:
        return x + norm(F(x))


def no_else(x, F, norm, mode):
    if mode == "pre":
        return x + F(norm(x))
    if mode == "post":
        return norm(x + F(x))
    if mode == "output":
        return x + norm(F(x))


def dict_lookup(x, F, norm, mode):
    return {"pre": lambda: x + F(norm(x)), "post": lambda: norm(x + F(x)),
            "output": lambda: x + norm(F(x))}[mode]()


def asserts_mode(x, F, norm, mode):
    assert mode in ("pre", "post", "output"), "bad mode"
    return sublayer_if_chain(x, F, norm, mode)


def unhelpful_message(x, F, norm, mode):
    if mode in ("pre", "post", "output"):
        return sublayer_if_chain(x, F, norm, mode)
    raise ValueError("invalid mode")


def lower_on_none(x, F, norm, mode):
    """Lower-cases only to compare; fine for strings, AttributeError for None."""
    if mode.lower() != mode:
        raise ValueError(f"mode must be lower case: 'pre', 'post' or 'output', got {mode!r}")
    return sublayer_if_chain(x, F, norm, mode)


def returns_list(x, F, norm, mode):
    return sublayer_if_chain(x, F, norm, mode).tolist()


WRONG = {
    "pre and post swapped": (pre_and_post_swapped, "the post-LN order", "modes"),
    "post and output swapped": (post_and_output_swapped, "the output-norm order", "modes"),
    "F called on x in pre": (pre_uses_x_in_F, "F was called on x, not on norm(x)", "modes"),
    "no residual in pre": (pre_no_residual, "the residual x was not added", "modes"),
    "no residual in post": (post_no_residual, "the residual x was not added", "modes"),
    "normalised residual": (pre_normalised_residual, "the residual you added is norm(x), not x", "modes"),
    "output norm on the input": (output_norm_on_input, "that is the pre-LN order", "modes"),
    "output with F on norm(x)": (output_F_on_normalised, "F was called on norm(x)", "modes"),
    "post forgets the norm": (post_forgets_norm, "norm was never called", "modes"),
    "pre subtracts": (pre_subtracts, "a difference where a sum belongs", "modes"),
    "all three computed": (eager_all_three, "called F 3 times", "modes"),
    "F called twice": (pre_calls_F_twice, "called F 2 times", "modes"),
    "x modified in place": (post_in_place, "changed the caller's x in place", "modes"),
    "typo in a mode string": (typo_in_output, "a typo in a string", "modes"),
    "list result": (returns_list, "builtins.list", "modes"),
    "mode lower-cased": (lower_cases_mode, "you lower-cased or stripped the mode", "rejects"),
    "else catches everything": (else_is_output, "an `else:` branch catches every other mode", "rejects"),
    "no else branch": (no_else, "returned None instead of raising ValueError", "rejects"),
    "dictionary lookup": (dict_lookup, "raises KeyError for a missing key", "rejects"),
    "assert instead of raise": (asserts_mode, "disappears altogether under `python -O`", "rejects"),
    "unhelpful message": (unhelpful_message, "unhelpful message", "rejects"),
    "method called on None": (lower_on_none, "None.lower()", "rejects"),
}


# ================================================================ qk_norm_logits
import numpy as np  # noqa: E402 - this section of the file starts here


def qk_matmul(q, k, g_q, g_k, eps=1e-6):
    d_k = q.shape[-1]
    q_hat = q / np.sqrt(np.mean(q**2, axis=-1, keepdims=True) + eps)
    k_hat = k / np.sqrt(np.mean(k**2, axis=-1, keepdims=True) + eps)
    return (g_q * q_hat) @ np.swapaxes(g_k * k_hat, -1, -2) / np.sqrt(d_k)


def qk_einsum(q, k, g_q, g_k, eps=1e-6):
    """Gains folded into one vector; einsum over the features."""
    r_q = np.sqrt((q * q).mean(-1, keepdims=True) + eps)
    r_k = np.sqrt((k * k).mean(-1, keepdims=True) + eps)
    return np.einsum("...id,...jd->...ij", q / r_q * (g_q * g_k), k / r_k) / q.shape[-1] ** 0.5


def qk_norms(q, k, g_q, g_k, eps=1e-6):
    """The root mean square written with np.linalg.norm."""
    d_k = q.shape[-1]
    q_n = g_q * q / np.sqrt(np.linalg.norm(q, axis=-1, keepdims=True) ** 2 / d_k + eps)
    k_n = g_k * k / np.sqrt(np.linalg.norm(k, axis=-1, keepdims=True) ** 2 / d_k + eps)
    return np.matmul(q_n, np.moveaxis(k_n, -1, -2)) / np.sqrt(d_k)


QK_CORRECT = [qk_matmul, qk_einsum, qk_norms]


def qk_no_sqrt(q, k, g_q, g_k, eps=1e-6):
    return qk_matmul(q, k, g_q, g_k, eps) * np.sqrt(q.shape[-1])


def qk_unit_vectors(q, k, g_q, g_k, eps=1e-6):
    q_n = g_q * q / np.linalg.norm(q, axis=-1, keepdims=True)
    k_n = g_k * k / np.linalg.norm(k, axis=-1, keepdims=True)
    return q_n @ np.swapaxes(k_n, -1, -2) / np.sqrt(q.shape[-1])


def qk_forgets_g_k(q, k, g_q, g_k, eps=1e-6):
    return qk_matmul(q, k, g_q, np.ones_like(g_k), eps)


def qk_layer_norm(q, k, g_q, g_k, eps=1e-6):
    return qk_matmul(q - q.mean(-1, keepdims=True), k - k.mean(-1, keepdims=True), g_q, g_k, eps)


def qk_over_tokens(q, k, g_q, g_k, eps=1e-6):
    q_hat = q / np.sqrt(np.mean(q**2, axis=-2, keepdims=True) + eps)
    k_hat = k / np.sqrt(np.mean(k**2, axis=-2, keepdims=True) + eps)
    return (g_q * q_hat) @ np.swapaxes(g_k * k_hat, -1, -2) / np.sqrt(q.shape[-1])


def qk_keys_raw(q, k, g_q, g_k, eps=1e-6):
    q_hat = q / np.sqrt(np.mean(q**2, axis=-1, keepdims=True) + eps)
    return (g_q * q_hat) @ np.swapaxes(g_k * k, -1, -2) / np.sqrt(q.shape[-1])


def qk_keys_first(q, k, g_q, g_k, eps=1e-6):
    return np.swapaxes(qk_matmul(q, k, g_q, g_k, eps), -1, -2)


def qk_dot_T(q, k, g_q, g_k, eps=1e-6):
    q_hat = q / np.sqrt(np.mean(q**2, axis=-1, keepdims=True) + eps)
    k_hat = k / np.sqrt(np.mean(k**2, axis=-1, keepdims=True) + eps)
    return (g_q * q_hat) @ (g_k * k_hat).T / np.sqrt(q.shape[-1])


QK_WRONG = {
    "no 1/sqrt(d_k)": (qk_no_sqrt, "sqrt(d_k) = "),
    "unit vectors": (qk_unit_vectors, "unit-length"),
    "g_k forgotten": (qk_forgets_g_k, "g_k was not applied"),
    "LayerNorm": (qk_layer_norm, "subtracted each vector's mean"),
    "mean square over tokens": (qk_over_tokens, "changed the logits of other"),
    "keys not normalised": (qk_keys_raw, "the keys are not normalised"),
    "keys times queries": (qk_keys_first, "the transpose of the expected"),
    "k.T on batches": (qk_dot_T, "reverses every axis"),
}
