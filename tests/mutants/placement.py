"""Mutants of 05_placement: wrong ``residual_sublayer`` with known mistakes, and correct variants.

A residual_sublayer is assembled from three parts, each of which can be right or wrong:

* a *formula* per mode, ``formula(x, F, norm)``, each written in several ways (x + F(h),
  F(h) + x, np.add, named intermediates, an in-place sum on a copy);
* a *dispatch* style: an if/elif chain, returns only, match, a validated table of lambdas,
  validation first, a table of helpers, a tuple index;
* what happens to an invalid mode: a guard run first, the mode prepared (lower-cased...),
  and the final rejection (raise ValueError naming the modes, or a wrong way to reject).

Wrong formulas plant the modes check's mistakes (alone, and in pairs that one expression
shows together); wrong guards, preparations, rejections and dispatches plant the rejects
check's mistakes with every formula right.
"""
from __future__ import annotations

import itertools
import logging
import re

import numpy as np

from tests.diagnosis_harness import solution
from tests.implementations import placement as impl
from tests.mutants import Correct, mutant

NB, EX = "05_placement", "residual_sublayer"
MODES = ("pre", "post", "output")


# ---------------------------------------------------------------------------- formulas
def _pre_named(x, F, norm):
    h = norm(x)
    y = F(h)
    return x + y


def _pre_copy(x, F, norm):
    out = x.copy()
    out += F(norm(x))
    return out


def _post_named(x, F, norm):
    h = x + F(x)
    return norm(h)


def _post_copy(x, F, norm):
    s = x.copy()
    s += F(x)
    return norm(s)


def _output_named(x, F, norm):
    y = F(x)
    return x + norm(y)


def _output_copy(x, F, norm):
    out = np.array(x, copy=True)
    out += norm(F(x))
    return out


FORMULAS = OK = {
    "pre": {"sum": lambda x, F, n: x + F(n(x)), "sum_right": lambda x, F, n: F(n(x)) + x,
            "np_add": lambda x, F, n: np.add(x, F(n(x))), "named": _pre_named, "copy": _pre_copy},
    "post": {"sum": lambda x, F, n: n(x + F(x)), "sum_right": lambda x, F, n: n(F(x) + x),
             "np_add": lambda x, F, n: n(np.add(x, F(x))), "named": _post_named, "copy": _post_copy},
    "output": {"sum": lambda x, F, n: x + n(F(x)), "sum_right": lambda x, F, n: n(F(x)) + x,
               "np_add": lambda x, F, n: np.add(x, n(F(x))), "named": _output_named, "copy": _output_copy},
}


def _unused_norm(body):
    """The normalised input computed into a variable, then not used: body(x, F, norm) decides what is returned."""
    def formula(x, F, norm):
        h = norm(x)  # noqa: F841 - the unused result is the mistake
        return body(x, F, norm)

    return formula


def _overwrite(body):
    """x = norm(x) first, so every later x is the normalised one."""
    def formula(x, F, norm):
        x = norm(x)
        return body(x, F, norm)

    return formula


def _stray(extra, formula):
    """A correct formula, plus one more call (a debugging print, a shape assertion)."""
    def wrapped(x, F, norm):
        extra(x, F, norm)
        return formula(x, F, norm)

    return wrapped


# id(s) -> {label: {mode: wrong formula}}: the modes not named use a correct formula
P, OUT = OK["pre"]["sum"], OK["output"]["sum"]
FORMULA_MISTAKES = {
    "place.pre_post_swapped": {
        "pre_gets_post": {"pre": OK["post"]["sum"]}, "pre_gets_post_named": {"pre": _post_named},
        "post_gets_pre": {"post": OK["pre"]["sum"]}, "post_gets_pre_copy": {"post": _pre_copy},
        "both": {"pre": OK["post"]["np_add"], "post": OK["pre"]["np_add"]},
    },
    "place.post_output_swapped": {
        "post_gets_output": {"post": OK["output"]["sum"]}, "post_gets_output_named": {"post": _output_named},
        "output_gets_post": {"output": OK["post"]["sum"]}, "output_gets_post_copy": {"output": _post_copy},
        "both": {"post": OK["output"]["sum_right"], "output": OK["post"]["sum_right"]},
    },
    "place.pre_output_swapped": {
        "output_gets_pre": {"output": OK["pre"]["sum"]}, "output_gets_pre_named": {"output": _pre_named},
        "pre_gets_output": {"pre": OK["output"]["sum"]}, "pre_gets_output_copy": {"pre": _output_copy},
        "both": {"pre": OK["output"]["np_add"], "output": OK["pre"]["np_add"]},
    },
    "place.norm_missing": {
        "pre": {"pre": lambda x, F, n: x + F(x)}, "post": {"post": lambda x, F, n: x + F(x)},
        "output": {"output": lambda x, F, n: x + F(x)}, "post_add": {"post": lambda x, F, n: np.add(x, F(x))},
    },
    "place.sublayer_missing": {
        "pre": {"pre": lambda x, F, n: x + n(x)}, "post": {"post": lambda x, F, n: n(x)},
        "output": {"output": lambda x, F, n: x + n(x)}, "output_right": {"output": lambda x, F, n: n(x) + x},
    },
    "place.residual_missing": {
        "pre": {"pre": lambda x, F, n: F(n(x))}, "post": {"post": lambda x, F, n: n(F(x))},
        "output": {"output": lambda x, F, n: n(F(x))}, "pre_named": {"pre": lambda x, F, n: F(n(x)).copy()},
    },
    "place.pre_sublayer_on_raw": {
        "unused": {"pre": _unused_norm(lambda x, F, n: x + F(x))},
        "unused_right": {"pre": _unused_norm(lambda x, F, n: F(x) + x)},
        "unused_add": {"pre": _unused_norm(lambda x, F, n: np.add(x, F(x)))},
    },
    "place.sublayer_on_normalised": {
        "post": {"post": lambda x, F, n: n(x + F(n(x)))}, "output": {"output": lambda x, F, n: x + n(F(n(x)))},
        "post_named": {"post": lambda x, F, n: n(F(n(x)) + x)},
        "output_named": {"output": lambda x, F, n: n(F(n(x))) + x},
    },
    "place.normalised_residual": {
        "pre_overwrite": {"pre": _overwrite(lambda x, F, n: x + F(x))},
        "pre_named": {"pre": lambda x, F, n: (lambda h: h + F(h))(n(x))},
        "output": {"output": lambda x, F, n: n(x) + n(F(x))},
        "post": {"post": lambda x, F, n: n(n(x) + F(x))},
    },
    "place.difference_not_sum": {
        "pre": {"pre": lambda x, F, n: x - F(n(x))}, "pre_reversed": {"pre": lambda x, F, n: F(n(x)) - x},
        "post": {"post": lambda x, F, n: n(x - F(x))}, "output": {"output": lambda x, F, n: x - n(F(x))},
    },
    "place.post_norm_input": {
        "norm_first_term": {"post": lambda x, F, n: n(x) + F(x)},
        "norm_second_term": {"post": lambda x, F, n: F(x) + n(x)},
        "norm_each": {"post": lambda x, F, n: n(x) + n(F(x))},
    },
    "place.output_norm_input": {
        "norm_of_x": {"output": lambda x, F, n: F(x) + n(x)},
        "norm_of_sum": {"output": lambda x, F, n: x + n(x + F(x))},
        "norm_of_x_left": {"output": lambda x, F, n: n(x) + F(x)},
    },
    "place.repeated_calls": {
        "shape_assert": {"pre": _stray(lambda x, F, n: F(n(x)).shape, P)},
        "debug_norm": {"output": _stray(lambda x, F, n: float(n(x).mean()), OUT)},
        "post_twice": {"post": _stray(lambda x, F, n: F(x), OK["post"]["sum"])},
        "output_norm_twice": {"output": lambda x, F, n: x + n(F(x)) + 0 * n(F(x))},
    },
    # two mistakes that one expression shows together
    ("place.norm_missing", "place.residual_missing"): {
        "pre": {"pre": lambda x, F, n: F(x)}, "post": {"post": lambda x, F, n: F(x)},
        "output": {"output": lambda x, F, n: F(x)}},
    ("place.pre_sublayer_on_raw", "place.residual_missing"): {"pre": {"pre": _unused_norm(lambda x, F, n: F(x))}},
    ("place.pre_sublayer_on_raw", "place.normalised_residual"): {"pre": {"pre": lambda x, F, n: n(x) + F(x)}},
    ("place.pre_sublayer_on_raw", "place.difference_not_sum"): {
        "pre": {"pre": _unused_norm(lambda x, F, n: x - F(x))}},
    ("place.sublayer_on_normalised", "place.residual_missing"): {
        "post": {"post": lambda x, F, n: n(F(n(x)))}, "output": {"output": lambda x, F, n: n(F(n(x)))}},
    ("place.sublayer_on_normalised", "place.difference_not_sum"): {
        "post": {"post": lambda x, F, n: n(x - F(n(x)))}, "output": {"output": lambda x, F, n: x - n(F(n(x)))}},
    ("place.normalised_residual", "place.difference_not_sum"): {
        "pre": {"pre": _overwrite(lambda x, F, n: x - F(x))}},
    ("place.norm_missing", "place.difference_not_sum"): {
        "pre": {"pre": lambda x, F, n: x - F(x)}, "post": {"post": lambda x, F, n: F(x) - x}},
    ("place.sublayer_missing", "place.difference_not_sum"): {"output": {"output": lambda x, F, n: x - n(x)}},
}


# ---------------------------------------------------------------------------- rejecting an invalid mode
def _raise_ok(mode):
    raise ValueError(f"mode must be 'pre', 'post' or 'output', got {mode!r}")


class ModeError(Exception):
    pass


def _raiser(kind, text="mode must be 'pre', 'post' or 'output', got {!r}"):
    def reject(mode):
        raise kind(text.format(mode))

    return reject


REJECT_MISTAKES = {
    "place.unhelpful_error": {
        "vague": _raiser(ValueError, "invalid mode"), "bare": lambda mode: (_ for _ in ()).throw(ValueError()),
        "got_only": _raiser(ValueError, "bad mode {!r}"),
        "two_of_three": _raiser(ValueError, "mode must be 'pre' or 'post'"),
        "index": lambda mode: MODES.index(mode), "the_mode": lambda mode: (_ for _ in ()).throw(ValueError(repr(mode))),
        "unknown": _raiser(ValueError, "unknown normalisation placement"),
    },
    "place.wrong_exception": {
        "runtime": _raiser(RuntimeError), "type": _raiser(TypeError), "key": _raiser(KeyError),
        "not_implemented": _raiser(NotImplementedError), "exception": _raiser(Exception),
        "lookup": _raiser(LookupError),
        "custom": _raiser(ModeError), "assertion": _raiser(AssertionError),
    },
    "place.missing_raise": {
        "fall_off": lambda mode: None, "print": lambda mode: print(f"unknown mode {mode!r}"),
        "log": lambda mode: logging.getLogger("residual_sublayer").debug("unknown mode %r", mode),
    },
}


ACCEPTS = {  # an invalid mode answered with result(x, F, norm) instead of an error
    "input": lambda x, F, n: x, "copy": lambda x, F, n: x.copy(), "sublayer": lambda x, F, n: F(x),
    "norm": lambda x, F, n: n(x), "zeros": lambda x, F, n: np.zeros_like(x), "no_norm": lambda x, F, n: x + F(x),
    "message": lambda x, F, n: "invalid mode", "minus_one": lambda x, F, n: -1, "nan": lambda x, F, n: np.nan * x,
    "empty": lambda x, F, n: np.empty((0,)),
}


# guards run on the mode before anything else
GUARDS = {
    "place.method_on_mode": {
        "lower": lambda m: m.lower() != m, "isalpha": lambda m: not m.isalpha(), "strip": lambda m: m.strip() != m,
        "islower": lambda m: not m.islower(), "startswith": lambda m: m.startswith(" "),
        "casefold": lambda m: m.casefold() != m, "isidentifier": lambda m: not m.isidentifier(),
    },
    "place.mode_used_unchecked": {
        "len": lambda m: len(m) == 0, "in": lambda m: " " in m,
        "regex": lambda m: re.fullmatch("pre|post|output", m) is None,
        "concat": lambda m: (m + "") != m, "format": lambda m: f"{m:s}" != m,
        "set": lambda m: not set(m) <= set("preostu"),
        "sorted": lambda m: sorted(m) == [],
    },
    "place.assert_validation": {
        "in_modes": None, "with_message": None, "isinstance": None, "or_chain": None, "in_list": None,
        "not_in": None, "all_of": None,
    },
}


def _assert_guard(how):
    def guard(mode):
        if how == "in_modes":
            assert mode in MODES
        elif how == "with_message":
            assert mode in MODES, f"mode must be 'pre', 'post' or 'output', got {mode!r}"
        elif how == "isinstance":
            assert isinstance(mode, str) and mode in MODES
        elif how == "or_chain":
            assert mode == "pre" or mode == "post" or mode == "output", "bad mode"
        elif how == "in_list":
            assert mode in list(MODES), "unknown mode"
        elif how == "not_in":
            assert not (mode not in MODES)
        else:
            assert any(mode == m for m in MODES)
        return False

    return guard


PREPARES = {  # the mode lower-cased or stripped before the dispatch
    "lower": lambda m: m.lower() if isinstance(m, str) else m,
    "strip": lambda m: m.strip() if isinstance(m, str) else m,
    "strip_lower": lambda m: m.strip().lower() if isinstance(m, str) else m,
    "casefold": lambda m: m.casefold() if isinstance(m, str) else m,
    "str_lower": lambda m: str(m).lower(),
    "str_strip_lower": lambda m: str(m).strip().lower(),
    "bytes_too": lambda m: (m.decode() if isinstance(m, bytes) else m).lower() if isinstance(m, (str, bytes)) else m,
}


# ---------------------------------------------------------------------------- dispatch
DISPATCHES = ("if_chain", "if_return", "match", "lazy_table", "validate_first", "helpers_table", "tuple_index")


def _build(formulas=None, dispatch="if_chain", guard=None, prepare=None, reject=_raise_ok, accept=None,
           typo=None):
    """A residual_sublayer. formulas: {mode: formula} overriding the correct "sum" ones; typo: {mode: misspelling}
    of the string compared with; accept: what an invalid mode returns instead of reaching ``reject``."""
    chosen = {m: (formulas or {}).get(m, OK[m]["sum"]) for m in MODES}
    spelled = {m: (typo or {}).get(m, m) for m in MODES}
    names = tuple(spelled[m] for m in MODES)

    def fallback(x, F, norm, mode):
        if accept is not None:
            return accept(x, F, norm)
        return reject(mode)

    def residual_sublayer(x, F, norm, mode):
        if guard is not None and guard(mode):
            raise ValueError(f"mode must be 'pre', 'post' or 'output', got {mode!r}")
        if prepare is not None:
            mode = prepare(mode)
        if dispatch == "if_chain":
            if mode == spelled["pre"]:
                return chosen["pre"](x, F, norm)
            elif mode == spelled["post"]:
                return chosen["post"](x, F, norm)
            elif mode == spelled["output"]:
                return chosen["output"](x, F, norm)
            return fallback(x, F, norm, mode)
        if dispatch == "if_return":
            for m in MODES:
                if mode == spelled[m]:
                    return chosen[m](x, F, norm)
            return fallback(x, F, norm, mode)
        if dispatch == "match":
            match mode:
                case m if m == spelled["pre"]:
                    return chosen["pre"](x, F, norm)
                case m if m == spelled["post"]:
                    return chosen["post"](x, F, norm)
                case m if m == spelled["output"]:
                    return chosen["output"](x, F, norm)
                case _:
                    return fallback(x, F, norm, mode)
        if dispatch == "lazy_table":
            table = {spelled[m]: (lambda m=m: chosen[m](x, F, norm)) for m in MODES}
            if not isinstance(mode, str) or mode not in table:
                return fallback(x, F, norm, mode)
            return table[mode]()
        if dispatch == "validate_first":
            if mode not in names:
                return fallback(x, F, norm, mode)
            return chosen[MODES[names.index(mode)]](x, F, norm)
        if dispatch == "helpers_table":
            helpers = {spelled[m]: chosen[m] for m in MODES}
            helper = helpers.get(mode) if isinstance(mode, (str, bytes)) else None
            if helper is None:
                return fallback(x, F, norm, mode)
            return helper(x, F, norm)
        # tuple_index
        for k, name in enumerate(names):
            if isinstance(mode, str) and mode == name:
                return chosen[MODES[k]](x, F, norm)
        return fallback(x, F, norm, mode)

    return residual_sublayer


# ---------------------------------------------------------------------------- wrong dispatches
def _key_error(style, formulas=None):
    chosen = {m: (formulas or {}).get(m, OK[m]["sum"]) for m in MODES}

    def residual_sublayer(x, F, norm, mode):
        if style == "lambdas":
            return {m: (lambda m=m: chosen[m](x, F, norm)) for m in MODES}[mode]()
        if style == "functions":
            return {"pre": chosen["pre"], "post": chosen["post"], "output": chosen["output"]}[mode](x, F, norm)
        if style == "getitem":
            return dict(zip(MODES, (chosen[m] for m in MODES), strict=True)).__getitem__(mode)(x, F, norm)
        if style == "eager_values":  # only one is computed: the lookup comes first
            placement = {"pre": 0, "post": 1, "output": 2}[mode]
            return chosen[MODES[placement]](x, F, norm)
        if style == "nested":
            table = {"norm_first": {"pre": chosen["pre"]},
                     "norm_last": {"post": chosen["post"], "output": chosen["output"]}}
            group = "norm_first" if mode == "pre" else "norm_last"
            return table[group][mode](x, F, norm)
        if style == "pop":
            return dict(zip(MODES, (chosen[m] for m in MODES), strict=True)).pop(mode)(x, F, norm)
        return {m: m for m in MODES}[mode] and chosen[mode](x, F, norm)  # "identity_table"

    return residual_sublayer


KEY_ERRORS = ("lambdas", "functions", "getitem", "eager_values", "nested", "pop", "identity_table")


def _else(last, style, writing="sum"):
    """The last valid mode written as a bare else (or a table's default)."""
    others = [m for m in MODES if m != last]
    OK = {m: {"sum": ways[writing], "named": ways["named"], "np_add": ways["np_add"]} for m, ways in FORMULAS.items()}

    def residual_sublayer(x, F, norm, mode):
        if style == "if_chain":
            if mode == others[0]:
                return OK[others[0]]["sum"](x, F, norm)
            elif mode == others[1]:
                return OK[others[1]]["sum"](x, F, norm)
            else:
                return OK[last]["sum"](x, F, norm)
        if style == "match":
            match mode:
                case m if m == others[0]:
                    return OK[others[0]]["sum"](x, F, norm)
                case m if m == others[1]:
                    return OK[others[1]]["sum"](x, F, norm)
                case _:
                    return OK[last]["named"](x, F, norm)
        if style == "get_default":
            table = {others[0]: OK[others[0]]["sum"], others[1]: OK[others[1]]["sum"]}
            return table.get(mode, OK[last]["sum"])(x, F, norm)
        if style == "ternary":
            f = (OK[others[0]]["sum"] if mode == others[0] else OK[others[1]]["sum"] if mode == others[1]
                 else OK[last]["np_add"])
            return f(x, F, norm)
        # "default_first"
        y = None
        if mode == others[0]:
            y = OK[others[0]]["sum"](x, F, norm)
        if mode == others[1]:
            y = OK[others[1]]["sum"](x, F, norm)
        return y if y is not None else OK[last]["sum"](x, F, norm)

    return residual_sublayer


ELSE_STYLES = ("if_chain", "match", "get_default", "ternary", "default_first")


# ---------------------------------------------------------------------------- assembling the mutants
def _mutants():
    found = []
    k = 0
    for planted, variants in FORMULA_MISTAKES.items():
        tag = "+".join(planted) if isinstance(planted, tuple) else planted
        # enough dispatch styles that each id gets at least 20 mutants of its own
        per_variant = max(2, -(-21 // len(variants))) if isinstance(planted, str) else 3
        for label, formulas in variants.items():
            for j in range(per_variant):
                dispatch = DISPATCHES[(k + j) % len(DISPATCHES)]
                found.append(mutant(NB, EX, planted, _build(formulas, dispatch), f"{EX}/{tag}/{label}/{dispatch}"))
            k += 1
    # whole-function mistakes of the modes check
    for dispatch in DISPATCHES:
        found.append(mutant(NB, EX, "place.repeated_calls", _eager(dispatch),
                            f"{EX}/place.repeated_calls/eager/{dispatch}"))
    typos = (("pre", "pree"), ("post", "Post"), ("output", "ouptut"))
    for dispatch, (m, spelling) in itertools.product(DISPATCHES, typos):
        found.append(mutant(NB, EX, "place.valid_mode_rejected", _build(dispatch=dispatch, typo={m: spelling}),
                            f"{EX}/place.valid_mode_rejected/{spelling}/{dispatch}"))
    # the rejects check: every formula right
    for planted, variants in REJECT_MISTAKES.items():
        for j, (label, reject) in enumerate(variants.items()):
            for dispatch in (DISPATCHES if len(variants) < 5 else DISPATCHES[j % 2::2]):
                found.append(mutant(NB, EX, planted, _build(dispatch=dispatch, reject=reject),
                                    f"{EX}/{planted}/{label}/{dispatch}"))
    for planted, guards in GUARDS.items():
        for j, (label, guard) in enumerate(guards.items()):
            guard = _assert_guard(label) if planted == "place.assert_validation" else guard
            for dispatch in DISPATCHES[j % 2::2]:
                found.append(mutant(NB, EX, planted, _build(dispatch=dispatch, guard=guard),
                                    f"{EX}/{planted}/{label}/{dispatch}"))
    for j, (label, prepare) in enumerate(PREPARES.items()):
        for dispatch in DISPATCHES[j % 2::2]:
            found.append(mutant(NB, EX, "place.mode_normalised", _build(dispatch=dispatch, prepare=prepare),
                                f"{EX}/place.mode_normalised/{label}/{dispatch}"))
    for j, (label, result) in enumerate(ACCEPTS.items()):
        for dispatch in DISPATCHES[j % 2::3]:
            found.append(mutant(NB, EX, "place.invalid_mode_accepted", _build(dispatch=dispatch, accept=result),
                                f"{EX}/place.invalid_mode_accepted/{label}/{dispatch}"))
    for style in KEY_ERRORS:
        for variant, formulas in (("sum", None), ("named", {m: OK[m]["named"] for m in MODES}),
                                  ("mixed", {"pre": OK["pre"]["np_add"], "output": OK["output"]["copy"]})):
            found.append(mutant(NB, EX, "place.dict_key_error", _key_error(style, formulas),
                                f"{EX}/place.dict_key_error/{style}/{variant}"))
    for last, style, writing in itertools.product(MODES, ELSE_STYLES, ("sum", "copy")):
        found.append(mutant(NB, EX, "place.else_catches_all", _else(last, style, writing),
                            f"{EX}/place.else_catches_all/{last}/{style}/{writing}"))
    return found


def _eager(dispatch):
    """Every placement computed, then one picked: F and norm run three times."""
    def residual_sublayer(x, F, norm, mode):
        results = {"pre": x + F(norm(x)), "post": norm(x + F(x)), "output": x + norm(F(x))}
        if mode not in results if isinstance(mode, str) else True:
            raise ValueError(f"mode must be one of {list(results)}, got {mode!r}")
        if dispatch == "if_chain":
            return results["pre"] if mode == "pre" else results["post"] if mode == "post" else results["output"]
        return results[mode]

    return residual_sublayer


def _corrects():
    found = [Correct(NB, EX, f, f"{EX}/correct/impl/{f.__name__}") for f in impl.CORRECT]
    found.append(Correct(NB, EX, solution(NB, EX), f"{EX}/correct/solution"))
    writings = list(OK["pre"])
    for j, dispatch in enumerate(DISPATCHES):
        for shift in (0, 2):
            formulas = {m: OK[m][writings[(j + shift + i) % len(writings)]] for i, m in enumerate(MODES)}
            found.append(Correct(NB, EX, _build(formulas, dispatch), f"{EX}/correct/{dispatch}/{shift}"))
    found.append(Correct(NB, EX, _build(dispatch="if_chain", guard=lambda m: not isinstance(m, str)),
                         f"{EX}/correct/type_guard"))
    found.append(Correct(NB, EX, _build(dispatch="match", reject=_raiser(ValueError, "unknown mode {!r}: use 'pre', "
                                                                              "'post' or 'output'")),
                         f"{EX}/correct/other_message"))
    return found


MUTANTS = _mutants()
CORRECT = _corrects()
UNREACHABLE: dict = {}


# ============================================================================ qk_norm_logits
QK_EX = "qk_norm_logits"
RMS_STYLES = ("mean_sq", "square", "linalg")
PRODUCTS = ("matmul", "einsum", "moveaxis")
GAIN_STYLES = ("each", "combined")


def _qk(rms="mean_sq", product="matmul", gains="each", *, no_sqrt=False, l2=None, drop=(), centre=False,
        axis=-1, raw=(), transposed=False, full_T=None, late_scale=False):
    """A qk_norm_logits assembled from a writing style and zero or more planted mistakes."""
    def normalise(v, eps):
        if centre:
            v = v - v.mean(axis=-1, keepdims=True)
        if l2 is not None:
            return v / np.linalg.norm(v, axis=-1, keepdims=True)
        ax = axis
        if rms == "mean_sq":
            return v / np.sqrt(np.mean(v**2, axis=ax, keepdims=True) + eps)
        if rms == "square":
            return v * (1.0 / np.sqrt(np.square(v).mean(axis=ax, keepdims=True) + eps))
        size = v.shape[-1] if ax == -1 else (v.shape[-2] if ax == -2 else v.shape[-1] * v.shape[-2])
        return v / np.sqrt(np.linalg.norm(v, axis=ax, keepdims=True) ** 2 / size + eps)

    def qk_norm_logits(q, k, g_q, g_k, eps=1e-6):
        d_k = q.shape[-1]
        q_n = q if "q" in raw else normalise(q, eps)
        k_n = k if "k" in raw else normalise(k, eps)
        gq = np.ones_like(g_q) if "g_q" in drop else g_q
        gk = np.ones_like(g_k) if "g_k" in drop else g_k
        if gains == "each":
            q_n, k_n = q_n * gq, k_n * gk
        else:
            q_n = q_n * (gq * gk)
        scale = 1.0 if no_sqrt or l2 == "no_sqrt" else 1.0 / np.sqrt(d_k)
        if late_scale:
            q_n = q_n * scale
            scale = 1.0
        if full_T == "T":
            out = q_n @ k_n.T
        elif full_T == "transpose":
            out = np.matmul(q_n, np.transpose(k_n))
        elif full_T == "method":
            out = q_n @ k_n.transpose()
        elif product == "matmul":
            out = np.matmul(q_n, np.swapaxes(k_n, -1, -2))
        elif product == "einsum":
            out = np.einsum("...id,...jd->...ij", q_n, k_n)
        else:
            out = q_n @ np.moveaxis(k_n, -1, -2)
        out = out * scale
        return np.swapaxes(out, -1, -2) if transposed else out

    return qk_norm_logits


def _qk_styles():
    return list(itertools.product(RMS_STYLES, PRODUCTS, GAIN_STYLES))


QK_MISTAKES = {  # id(s) -> {label: keyword arguments of _qk}
    "place.qk_missing_sqrt_dk": {"no_sqrt": dict(no_sqrt=True)},
    "place.qk_l2_normalised": {"l2": dict(l2="keep_sqrt"), "l2_no_sqrt": dict(l2="no_sqrt")},
    "place.qk_gain_missing": {"g_q": dict(drop=("g_q",)), "g_k": dict(drop=("g_k",)),
                              "both": dict(drop=("g_q", "g_k"))},
    "place.qk_mean_subtracted": {"centred": dict(centre=True), "centred_late": dict(centre=True, late_scale=True)},
    "place.qk_norm_axis": {"tokens": dict(axis=-2), "whole": dict(axis=(-2, -1))},
    "place.qk_unnormalised_side": {"q_raw": dict(raw=("q",)), "k_raw": dict(raw=("k",)),
                                   "both_raw": dict(raw=("q", "k"))},
    "place.qk_transposed": {"keys_rows": dict(transposed=True),
                            "keys_rows_late": dict(transposed=True, late_scale=True)},
    ("place.qk_gain_missing", "place.qk_missing_sqrt_dk"): {"g_k_no_sqrt": dict(drop=("g_k",), no_sqrt=True)},
}


def _qk_mutants():
    found = []
    styles = _qk_styles()
    for planted, variants in QK_MISTAKES.items():
        tag = "+".join(planted) if isinstance(planted, tuple) else planted
        for label, kwargs in variants.items():
            chosen = styles if len(variants) < 3 or isinstance(planted, tuple) else styles[::2]
            for rms, product, gains in chosen:
                if kwargs.get("axis") == (-2, -1) and rms != "mean_sq":
                    continue  # one writing of the whole-array statistics is enough
                found.append(mutant(NB, QK_EX, planted, _qk(rms, product, gains, **kwargs),
                                    f"{QK_EX}/{tag}/{label}/{rms}/{product}/{gains}"))
    for full_T, rms, gains, late in itertools.product(("T", "transpose", "method"), RMS_STYLES, GAIN_STYLES,
                                                      (False, True)):
        found.append(mutant(NB, QK_EX, "place.qk_transpose_all_axes",
                            _qk(rms, "matmul", gains, full_T=full_T, late_scale=late),
                            f"{QK_EX}/place.qk_transpose_all_axes/{full_T}/{rms}/{gains}/{late}"))
    return found


def _qk_corrects():
    found = [Correct(NB, QK_EX, f, f"{QK_EX}/correct/impl/{f.__name__}") for f in impl.QK_CORRECT]
    found.append(Correct(NB, QK_EX, solution(NB, QK_EX), f"{QK_EX}/correct/solution"))
    for rms, product, gains in _qk_styles():
        found.append(Correct(NB, QK_EX, _qk(rms, product, gains), f"{QK_EX}/correct/{rms}/{product}/{gains}"))
    found.append(Correct(NB, QK_EX, _qk(late_scale=True), f"{QK_EX}/correct/late_scale"))
    return found


MUTANTS = MUTANTS + _qk_mutants()
CORRECT = CORRECT + _qk_corrects()
