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


def _missing_required(base, args, kwargs):
    raise TypeError(f"{base.__name__}() missing 1 required positional argument: 'scale'")


def _unexpected_keyword(base, args, kwargs):
    raise TypeError(f"{base.__name__}() got an unexpected keyword argument 'eps'")


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
    "common.signature_changed": {"missing_argument": _missing_required, "unexpected_keyword": _unexpected_keyword},
    "common.undefined_name": {"helper": lambda b, a, k: undefined_helper(b(*a, **k)),  # noqa: F821
                              "typo": lambda b, a, k: b(*a, **k) + mu_hat},  # noqa: F821
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
    return found


MUTANTS = _mutants()
CORRECT = []  # the notebooks' modules hold the correct implementations
