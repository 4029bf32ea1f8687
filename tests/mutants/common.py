"""Mistakes any exercise can make, planted in correct implementations of every notebook.

Each generic mistake wraps a correct implementation of an array-returning exercise (the
source's solution and the correct ones in tests/implementations), keeping its signature,
so the diagnosis reads as it would for a learner's own function.
"""
from __future__ import annotations

import inspect

import numpy as np

from tests.diagnosis_harness import solution
from tests.implementations import backward, bn_vs_ln, placement, rmsnorm
from tests.implementations import placement as impl_placement
from tests.mutants import mutant

# (notebook, exercise) -> correct implementations to plant the mistakes in
BASES = {
    ("01_bn_vs_ln", "layernorm"): [bn_vs_ln.ln_keepdims, bn_vs_ln.ln_np_var_newaxis],
    ("01_bn_vs_ln", "batch_norm"): [bn_vs_ln.bn_axes_tuple],
    ("03_backward", "layer_norm_jacobian"): [backward.jacobian_matrix_form],
    ("03_backward", "layer_norm_vjp"): [backward.vjp_means],
    ("04_rmsnorm", "rms_norm"): [rmsnorm.rms_vectorised, rmsnorm.rms_per_token],
    ("05_placement", "residual_sublayer"): [placement.sublayer_if_chain],
}


def _wrap(base, body, label):
    """A function with ``base``'s signature whose result is ``body(base, args, kwargs)``."""
    def wrapped(*args, **kwargs):
        return body(base, args, kwargs)

    wrapped.__signature__ = inspect.signature(base)
    wrapped.__name__ = wrapped.__qualname__ = f"{base.__name__}__{label}"
    return wrapped


def _recursive(base, args, kwargs):
    return _recursive(base, args, kwargs)


def _set_first_nan(out):
    out = np.array(out, copy=True)
    out.flat[0] = np.nan
    return out


def _set_last_inf(out):
    out = np.array(out, copy=True)
    out.flat[-1] = np.inf
    return out


def _overwrite_input(base, args, kwargs):
    out = base(*args, **kwargs)
    args[0][...] = 0.0
    return out


def _scale_input(base, args, kwargs):
    out = base(*args, **kwargs)
    x = args[0]
    x *= 2.0
    return out


def _unpack_three(base, args, kwargs):
    batch, tokens, features = args[0].shape
    return base(*args, **kwargs)


def _unpack_two(base, args, kwargs):
    tokens, features = args[0].shape
    return base(*args, **kwargs)


def _axis_two(base, args, kwargs):
    np.sum(args[0], axis=2)
    return base(*args, **kwargs)


def _changed_signature(base, label):
    """``base`` behind a signature the learner changed: the check's own call then fails to bind (a real TypeError
    from Python, raised before any line of the function runs).

    ``missing_argument``: an extra required parameter; ``unexpected_keyword``: the last parameter removed (the
    base then gets its default).
    """
    names = list(inspect.signature(base).parameters)
    if label == "missing_argument":
        params, call = names + ["scale"], names
    else:
        params, call = names[:-1], names[:-1]
    source = f"def {base.__name__}({', '.join(params)}):\n    return base({', '.join(call)})\n"
    scope = {"base": base}
    exec(source, scope)
    return scope[base.__name__]


def _torch_result(base, args, kwargs):
    import torch

    return torch.from_numpy(np.asarray(base(*args, **kwargs)))


def _raise(kind):
    def body(base, args, kwargs):
        raise kind("not finished yet")

    return body


# common id -> {variant label: body(base, args, kwargs)}
MISTAKES = {
    "common.not_an_array": {"tolist": lambda b, a, k: b(*a, **k).tolist(),
                            "tuple": lambda b, a, k: tuple(b(*a, **k))},
    "common.torch_returned": {"from_numpy": _torch_result,
                              "tensor": lambda b, a, k: __import__("torch").tensor(b(*a, **k))},
    "common.returned_none": {"no_return": lambda b, a, k: (b(*a, **k), None)[1],
                             "print_only": lambda b, a, k: None},
    "common.wrong_shape": {"leading_axis": lambda b, a, k: b(*a, **k)[None],
                           "trailing_axis": lambda b, a, k: b(*a, **k)[..., None]},
    "common.wrong_dtype": {"float32": lambda b, a, k: b(*a, **k).astype(np.float32),
                           "float16": lambda b, a, k: b(*a, **k).astype(np.float16)},
    "common.non_finite": {"nan": lambda b, a, k: _set_first_nan(b(*a, **k)),
                          "inf": lambda b, a, k: _set_last_inf(b(*a, **k))},
    "common.modified_input": {"zeroed": _overwrite_input, "scaled": _scale_input},
    "common.fixed_rank": {"unpack_three": _unpack_three, "unpack_two": _unpack_two},
    "common.broadcast_mismatch": {"one_more": lambda b, a, k: b(*a, **k) + np.zeros(a[0].shape[-1] + 1),
                                  "one_less": lambda b, a, k: b(*a, **k) * np.ones(max(a[0].shape[-1] - 1, 2) + 5)},
    "common.matmul_axes": {"matmul": lambda b, a, k: a[0] @ np.ones((a[0].shape[-1] + 1, 2)),
                           "dot": lambda b, a, k: np.matmul(np.ones((3, a[0].shape[-1] + 2)), a[0].T) * b(*a, **k)},
    # "common.signature_changed": built by _changed_signature (a wrapper cannot change how Python binds a call)
    "common.undefined_name": {"helper": lambda b, a, k: undefined_helper(b(*a, **k)),  # noqa: F821 - the undefined name is the mistake
                              "typo": lambda b, a, k: b(*a, **k) + mu_hat},  # noqa: F821 - the undefined name is the mistake
    "common.torch_method_on_array": {"dim": lambda b, a, k: b(*a, **k) * a[0].dim(),
                                     "size": lambda b, a, k: b(*a, **k) / a[0].size(-1)},
    "common.zero_division": {"count": lambda b, a, k: b(*a, **k) * (1 / 0),
                             "mod": lambda b, a, k: b(*a, **k) * (len(a) % 0)},
    "common.recursion": {"self_call": _recursive,
                         "helper_clash": lambda b, a, k: _recursive(b, a, k) + 1},
    "common.memory_blowup": {"outer": lambda b, a, k: np.empty((2**40, 2**40)) @ b(*a, **k),
                             "ones": lambda b, a, k: b(*a, **k) * np.ones((2**45,)).sum()},
    "common.learner_raised": {"value_error": _raise(ValueError), "runtime_error": _raise(RuntimeError)},
}
UNREACHABLE = {
    "common.not_a_function": "raised by check_signature, which runs in its own (ungraded) cell",
    "common.delegation": "raised by the grading sandbox only (tests/unit/test_delegation.py)",
}


# ---------------------------------------------------------------------------- mistakes of code from elsewhere
# Wrong implementations taken from public code hard-code eps, compute in float32 or bfloat16, or call torch's
# methods on numpy arrays. Each is planted in the solution of every exercise it applies to; the id it plants is
# that notebook's own, where the catalogue has one.
WILD_EXERCISES = {  # (notebook, exercise) -> (eps hard-coded id, eps ignored id, float32 id, bfloat16 id)
    ("01_bn_vs_ln", "layernorm"): ("ln.eps_hardcoded", "ln.eps_ignored", "common.lower_precision",
                                   "common.lower_precision"),
    ("01_bn_vs_ln", "batch_norm"): ("bn.eps_hardcoded", "bn.eps_ignored", "common.lower_precision",
                                    "common.lower_precision"),
    ("01_bn_vs_ln", "batch_norm_train"): ("bn.eps_hardcoded", "bn.eps_ignored", "common.lower_precision",
                                          "common.lower_precision"),
    ("01_bn_vs_ln", "batch_norm_eval"): ("bn.eps_hardcoded", "bn.eps_ignored", "common.lower_precision",
                                         "common.lower_precision"),
    ("03_backward", "layer_norm_jacobian"): ("bwd.eps_hardcoded", "bwd.eps_ignored", "common.lower_precision",
                                             "common.lower_precision"),
    ("03_backward", "layer_norm_vjp"): ("bwd.eps_hardcoded", "bwd.eps_ignored", "common.lower_precision",
                                        "common.lower_precision"),
    ("03_backward", "layer_norm_backward"): ("bwd.eps_hardcoded", "bwd.eps_ignored", "common.lower_precision",
                                             "common.lower_precision"),
    ("04_rmsnorm", "rms_norm"): ("rms.eps_ignored", "rms.eps_ignored", "rms.float32_inside",
                                 "rms.low_precision_statistics"),
    ("04_rmsnorm", "rms_norm_backward"): ("rms.eps_ignored", "rms.eps_ignored", "rms.float32_inside",
                                          "rms.low_precision_statistics"),
    ("05_placement", "qk_norm_logits"): ("common.eps_not_used", "common.eps_not_used", "common.lower_precision",
                                         "common.lower_precision"),
}
HARD_CODED = (1e-5, 1e-6, 1e-8, 1e-12, 1e-3)


def _with_eps(value):
    """The base called with ``eps=value`` whatever eps the check passed."""
    def body(base, args, kwargs):
        bound = inspect.signature(base).bind(*args, **kwargs)
        bound.apply_defaults()
        bound.arguments["eps"] = value
        return base(*bound.args, **bound.kwargs)

    return body


def _bf16(array):
    import torch

    return torch.from_numpy(np.ascontiguousarray(array, dtype=np.float32)).to(torch.bfloat16).to(torch.float32).numpy()


def _in_precision(which, round_output=True):
    """The base run on float32 (or bfloat16-rounded) copies of its float64 arrays, the result cast back."""
    def down(value):
        if isinstance(value, np.ndarray) and value.dtype == np.float64:
            return _bf16(value) if which == "bfloat16" else value.astype(np.float32)
        return value

    def up(value):
        if isinstance(value, tuple):
            return tuple(up(v) for v in value)
        if isinstance(value, np.ndarray) and value.dtype == np.float32:
            value = _bf16(value) if which == "bfloat16" and round_output else value
            return value.astype(np.float64)
        return value

    def body(base, args, kwargs):
        if not any(isinstance(a, np.ndarray) and a.dtype == np.float64 for a in list(args) + list(kwargs.values())):
            return base(*args, **kwargs)
        return up(base(*[down(a) for a in args], **{k: down(v) for k, v in kwargs.items()}))

    return body


def _torch_mean(base, args, kwargs):
    x = next(a for a in args if isinstance(a, np.ndarray))
    x.mean(dim=-1, keepdim=True)  # torch's spelling on a numpy array: TypeError inside the learner's code
    return base(*args, **kwargs)


def _wild_mutants():
    found = []
    for (notebook, exercise), (hard, ignored, f32, bf16) in WILD_EXERCISES.items():
        base = solution(notebook, exercise)
        default = inspect.signature(base).parameters["eps"].default
        variants = [(hard if value > 1e-10 else ignored, f"eps={value:g}", _with_eps(value))  # 1e-12 reads as 0
                    for value in HARD_CODED if value != default]
        variants += [(ignored, "eps=0", _with_eps(0.0)), (f32, "float32", _in_precision("float32")),
                     (bf16, "bfloat16", _in_precision("bfloat16"))]
        if bf16 == "common.lower_precision":  # bfloat16 inputs, float32 arithmetic, the float32 result kept
            variants += [(bf16, "bfloat16_inputs", _in_precision("bfloat16", round_output=False))]
        variants += [("common.torch_method_on_array", "mean_dim", _torch_mean)]
        if exercise == "qk_norm_logits":  # the one exercise whose notebook has no eps id: enough of the common one
            for other in (impl_placement.qk_einsum, impl_placement.qk_norms):
                variants += [(hard, f"{other.__name__}/eps={value:g}", _with_eps(value), other)
                             for value in (1e-5, 1e-8, 1e-12, 1e-3, 1e-4, 1e-7, 1e-10, 0.0)]
        for planted, label, body, *other in variants:
            found.append(mutant(notebook, exercise, planted, _wrap(other[0] if other else base, body, label),
                                f"{notebook}/{exercise}/wild/{label}"))
    return found


def _bases():
    for (notebook, exercise), functions in BASES.items():
        yield notebook, exercise, [solution(notebook, exercise), *functions]


def _mutants():
    found = []
    for notebook, exercise, bases in _bases():
        for base in bases:
            for mistake, variants in MISTAKES.items():
                for label, body in variants.items():
                    function = _wrap(base, body, label)
                    found.append(mutant(notebook, exercise, mistake, function,
                                        f"{notebook}/{exercise}/{base.__name__}/{mistake}/{label}"))
            for label in ("missing_argument", "unexpected_keyword"):
                found.append(mutant(notebook, exercise, "common.signature_changed", _changed_signature(base, label),
                                    f"{notebook}/{exercise}/{base.__name__}/common.signature_changed/{label}"))
    return found + _wild_mutants()


MUTANTS = _mutants()
CORRECT = []  # the notebooks' modules hold the correct implementations
