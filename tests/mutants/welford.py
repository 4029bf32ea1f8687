"""Mutants of 06_welford: welford_mean_var and welford_combine written in many styles, each
with one or two catalogued mistakes planted, and correct variants that must pass untouched.

Every implementation is generated as source text (a style's template, its slots filled with
the correct code or with a way of writing a mistake) and compiled, so each one reads like a
learner's own function. Styles of welford_mean_var: the classic loop, float counts, an index
loop, enumerate, the first element as the starting mean, the (k-1)/k form of the M2 update,
numpy float64 accumulators, chunks merged with Chan's formula, data shifted by its first
element, and a loop that also keeps the running total. Styles of welford_combine: Chan's
delta form, weighted means, a weight variable, and indexing the partials.

Only the mutants of the four one-pass mistakes (two passes, whole-array operations, elements
left out, elements kept) pass the array tests and reach the one-pass test, which streams 20000
values through a Python loop: 20 of each, so that scoring stays fast. Every catalogued id is
reachable through the test cells (UNREACHABLE is empty).

Two mistakes that the check names together are planted together: sqrt(M2 / (n - 1)),
sqrt(M2), (sum, M2), sum / (n - 1) with M2 / (n - 1), averaged means without the between-chunk
term, and a few more. Mistakes that hide behind an earlier diagnosis are not combined: E[x²] − μ²
shows only at an offset, after the worked example has already exposed any other mistake.
"""
from __future__ import annotations

import array
import collections
import itertools
import math
import statistics
import textwrap
from decimal import Decimal
from fractions import Fraction

import numpy as np

from tests.diagnosis_harness import solution
from tests.implementations import welford as impl
from tests.mutants import Correct, mutant

NB = "06_welford"
MV, COMBINE = "welford_mean_var", "welford_combine"
_GLOBALS = {"np": np, "math": math, "statistics": statistics, "collections": collections, "array": array,
            "itertools": itertools, "Decimal": Decimal, "Fraction": Fraction}


def _compile(source: str, label: str):
    """Compile a generated implementation; its name is the exercise's, its file the label."""
    namespace = dict(_GLOBALS)
    exec(compile(textwrap.dedent(source), f"<{label}>", "exec"), namespace)  # our own generated code
    name = MV if MV in namespace else COMBINE
    return namespace[name]


# ============================================================================ welford_mean_var
# A style is a template with slots; SLOTS gives each slot's correct code. Every style ends with
# `n` (the count), `mean` and `m2` in hand, then `{final}` and `{ret}`.
STYLES = {
    "classic": ("""
        def welford_mean_var(x):
            n, mean, m2 = {n0}, 0.0, 0.0
            for xi in x:
                {update}
            {final}
            return {ret}
        """, {"n0": "0", "update": """
                n += 1
                delta = {xi} - mean
                mean += delta / n
                m2 += delta * ({xi} - mean)"""}),
    "float_count": ("""
        def welford_mean_var(x):
            n = 0.0
            mean = 0.0
            m2 = 0.0
            for xi in x:
                {update}
            {final}
            return {ret}
        """, {"update": """
                n += 1.0
                old = mean
                mean = old + ({xi} - old) / n
                m2 = m2 + ({xi} - old) * ({xi} - mean)"""}),
    "indexed": ("""
        def welford_mean_var(x):
            n = len(x)
            mean, m2 = 0.0, 0.0
            for i in range(n):
                xi = x[i]
                {update}
            {final}
            return {ret}
        """, {"update": """
                k = i + 1
                delta = {xi} - mean
                mean = mean + delta / k
                m2 = m2 + delta * ({xi} - mean)"""}),
    "enumerate": ("""
        def welford_mean_var(x):
            mean = m2 = 0.0
            n = 0
            for {enum}:
                {update}
            {final}
            return {ret}
        """, {"enum": "k, xi in enumerate(x, start=1)", "update": """
                n = k
                delta = {xi} - mean
                mean += delta / k
                m2 += delta * ({xi} - mean)"""}),
    "first_element": ("""
        def welford_mean_var(x):
            mean = float(x[0])
            m2 = 0.0
            n = 1
            for xi in x[1:]:
                {update}
            {final}
            return {ret}
        """, {"update": """
                n += 1
                delta = {xi} - mean
                mean += delta / n
                m2 += delta * ({xi} - mean)"""}),
    "km1": ("""
        def welford_mean_var(x):
            n, mean, m2 = 0, 0.0, 0.0
            for xi in x:
                {update}
            {final}
            return {ret}
        """, {"update": """
                n += 1
                delta = {xi} - mean
                m2 += delta * delta * (n - 1) / n
                mean += delta / n"""}),
    "numpy_scalars": ("""
        def welford_mean_var(x):
            n = np.float64(0.0)
            mean = np.float64(0.0)
            m2 = np.float64(0.0)
            for xi in x:
                {update}
            {final}
            return {ret}
        """, {"update": """
                n = n + 1
                delta = np.float64(xi) - mean
                mean = mean + delta / n
                m2 = m2 + delta * (np.float64(xi) - mean)"""}),
    "chunked": ("""
        def welford_mean_var(x):
            n, mean, m2 = 0, 0.0, 0.0
            size = len(x)
            for start in range(0, size, {chunk}):
                k, mean_c, m2_c = 0, 0.0, 0.0
                for xi in x[start:start + {chunk}]:
                    {update}
                if n == 0:
                    n, mean, m2 = k, mean_c, m2_c
                else:
                    total = n + k
                    d = mean_c - mean
                    mean = mean + d * k / total
                    m2 = m2 + m2_c + d * d * n * k / total
                    n = total
            {final}
            return {ret}
        """, {"chunk": "7", "update": """
                    k += 1
                    delta = {xi} - mean_c
                    mean_c += delta / k
                    m2_c += delta * ({xi} - mean_c)"""}),
    "shifted": ("""
        def welford_mean_var(x):
            shift = None
            n, s1, s2 = 0, 0.0, 0.0
            for xi in x:
                if shift is None:
                    shift = float(xi)
                d = float(xi) - shift
                n += 1
                s1 += d
                s2 += d * d
            mean = shift + s1 / n
            m2 = s2 - s1 * (s1 / n)
            {final}
            return {ret}
        """, {}),
    "with_total": ("""
        def welford_mean_var(x):
            n, mean, m2, total = 0, 0.0, 0.0, 0.0
            for xi in x:
                n += 1
                total += {xi}
                delta = {xi} - mean
                mean += delta / n
                m2 += delta * ({xi} - mean)
            mean = {total_mean}
            {final}
            return {ret}
        """, {"total_mean": "total / n"}),
}
DEFAULTS = {"xi": "xi", "final": "var = m2 / n", "ret": "float(mean), float(var)"}


def fill(template: str, slots: dict) -> str:
    """The template with its slots filled: a slot alone on its line is a block of code, indented like the slot."""
    lines = []
    for line in textwrap.dedent(template).splitlines():
        stripped = line.strip()
        if stripped.startswith("{") and stripped.endswith("}") and stripped[1:-1] in slots:
            indent = line[:len(line) - len(line.lstrip())]
            block = textwrap.dedent(slots[stripped[1:-1]]).strip("\n")
            lines.extend(indent + b if b.strip() else "" for b in block.splitlines())
        else:
            lines.append(line)
    code = "\n".join(lines) + "\n"
    for _ in range(2):  # inline slots, also those inside blocks ({xi} in {update})
        for key, value in slots.items():
            code = code.replace("{" + key + "}", value)
    return code


def mean_var_source(style: str, **slots) -> str:
    template, own = STYLES[style]
    return fill(template, {**DEFAULTS, **own, **slots})


def _mv(planted, label, style, **slots):
    label = f"{'+'.join(sorted(planted)) if not isinstance(planted, str) else planted}/{style}/{label}"
    return mutant(NB, MV, planted, _compile(mean_var_source(style, **slots), label), label)


def _both_xi(style):
    """The element as read, and converted to a Python float first (not for styles that convert themselves)."""
    return [("raw", "xi"), ("float", "float(xi)")] if style not in ("numpy_scalars", "shifted") else [("raw", "xi")]


# ---------------------------------------------------------------- what comes back, and the final step
FINALS = {  # mistake -> {way: (final, ret)}; `final` computes var from n, mean, m2
    "welford.unbiased_variance": {
        "n-1": ("var = m2 / (n - 1)", None), "n-1.0": ("var = m2 / (n - 1.0)", None),
        "max": ("var = m2 / max(n - 1, 1)", None), "rescaled": ("var = (m2 / n) * n / (n - 1)", None),
        "len": ("var = m2 / (len(x) - 1)", None)},
    "welford.m2_returned": {
        "m2": ("var = m2", None), "times_one": ("var = m2 * 1.0", None),
        "no_division": ("var = m2 / 1", None)},
    "welford.std_returned": {
        "pow": ("var = (m2 / n) ** 0.5", None), "math_sqrt": ("var = math.sqrt(m2 / n)", None),
        "np_sqrt": ("var = np.sqrt(m2 / n)", None)},
    "welford.swapped_outputs": {
        "floats": (None, "float(var), float(mean)"), "plain": (None, "var, mean")},
    "welford.sum_not_mean": {
        "times_n": (None, "float(mean * n), float(var)"), "n_times": (None, "float(n * mean), float(var)"),
        "len": (None, "float(mean * len(x)), float(var)")},
    "welford.not_a_tuple": {
        "list": (None, "[float(mean), float(var)]"), "array": (None, "np.array([mean, var])"),
        "dict": (None, '{"mean": float(mean), "var": float(var)}'), "triple": (None, "n, float(mean), float(var)"),
        "var_only": (None, "float(var)"), "with_m2": (None, "float(mean), float(var), float(m2)")},
    "welford.array_not_scalar": {
        "zero_d": (None, "np.array(mean), np.array(var)"), "asarray_var": (None, "float(mean), np.asarray(var)"),
        "one": (None, "np.array([mean]), np.array([var])"), "atleast": (None, "np.atleast_1d(mean), float(var)"),
        "matrix": (None, "float(mean), np.reshape(var, (1, 1))")},
    "welford.low_precision": {
        "float32": (None, "np.float32(mean), np.float32(var)"), "var32": (None, "float(mean), np.float32(var)"),
        "float16": (None, "np.float16(mean), float(var)")},
    "welford.integer_division": {
        "int": (None, "int(mean), float(var)"), "round": (None, "round(mean), float(var)"),
        "floor": (None, "math.floor(mean), float(var)"), "int_var": (None, "float(mean), int(var)"),
        "floor_div": (None, "float(mean // 1), float(var)")},
    "welford.not_a_float": {
        "fraction": (None, "Fraction(float(mean)), float(var)"), "decimal": (None, "float(mean), Decimal(float(var))"),
        "str": (None, "str(mean), str(var)"), "complex": (None, "complex(mean), float(var)"),
        "list": (None, "float(mean), [float(var)]")},
}
# two mistakes in the last lines, both named by the check
FINAL_PAIRS = {
    ("welford.unbiased_variance", "welford.std_returned"): {
        "std_ddof1": ("var = (m2 / (n - 1)) ** 0.5", None), "np_sqrt": ("var = np.sqrt(m2 / (n - 1))", None)},
    ("welford.m2_returned", "welford.std_returned"): {
        "sqrt_m2": ("var = math.sqrt(m2)", None), "pow": ("var = m2 ** 0.5", None)},
    ("welford.m2_returned", "welford.sum_not_mean"): {
        "no_divisions": ("var = m2", "float(mean * n), float(var)")},
}


def _final_mutants():
    found = []
    tables = [(mistake, ways) for mistake, ways in FINALS.items()] + list(FINAL_PAIRS.items())
    for mistake, ways in tables:
        for way, (final, ret) in ways.items():
            for style in STYLES:
                slots = {}
                if final is not None:
                    slots["final"] = final
                if ret is not None:
                    slots["ret"] = ret
                found.append(_mv(mistake, way, style, **slots))
    return found


# ---------------------------------------------------------------- the running update
# mistake -> {style: {way: slots}}
def _update(lines: str) -> dict:
    return {"update": lines}


UPDATES = {
    "welford.old_mean_twice": {
        "classic": {"delta_squared": _update("""
                n += 1
                delta = {xi} - mean
                mean += delta / n
                m2 += delta * delta"""),
                    "delta_pow": _update("""
                n += 1
                delta = {xi} - mean
                mean += delta / n
                m2 += delta ** 2"""),
                    "m2_first": _update("""
                n += 1
                delta = {xi} - mean
                m2 += delta * ({xi} - mean)
                mean += delta / n""")},
        "float_count": {"m2_first": _update("""
                n += 1.0
                old = mean
                m2 = m2 + ({xi} - old) * ({xi} - old)
                mean = old + ({xi} - old) / n"""),
                        "old_squared": _update("""
                n += 1.0
                old = mean
                mean = old + ({xi} - old) / n
                m2 = m2 + ({xi} - old) ** 2""")},
        "indexed": {"delta_squared": _update("""
                k = i + 1
                delta = {xi} - mean
                mean = mean + delta / k
                m2 = m2 + delta * delta"""),
                    "m2_first": _update("""
                k = i + 1
                delta = {xi} - mean
                m2 = m2 + delta * ({xi} - mean)
                mean = mean + delta / k""")},
        "first_element": {"delta_squared": _update("""
                n += 1
                delta = {xi} - mean
                mean += delta / n
                m2 += delta * delta""")},
        "numpy_scalars": {"m2_first": _update("""
                n = n + 1
                delta = np.float64(xi) - mean
                m2 = m2 + delta * (np.float64(xi) - mean)
                mean = mean + delta / n""")},
        "km1": {"no_factor": _update("""
                n += 1
                delta = {xi} - mean
                m2 += delta * delta
                mean += delta / n""")},
        "chunked": {"delta_squared": _update("""
                    k += 1
                    delta = {xi} - mean_c
                    mean_c += delta / k
                    m2_c += delta * delta""")},
        "enumerate": {"m2_first": _update("""
                n = k
                delta = {xi} - mean
                m2 += delta * ({xi} - mean)
                mean += delta / k""")},
    },
    "welford.new_mean_twice": {
        "classic": {"pow": _update("""
                n += 1
                mean += ({xi} - mean) / n
                m2 += ({xi} - mean) ** 2"""),
                    "recomputed": _update("""
                n += 1
                delta = {xi} - mean
                mean += delta / n
                delta = {xi} - mean
                m2 += delta * delta"""),
                    "product": _update("""
                n += 1
                mean += ({xi} - mean) / n
                m2 += ({xi} - mean) * ({xi} - mean)""")},
        "numpy_scalars": {"pow": _update("""
                n = n + 1
                mean = mean + (np.float64(xi) - mean) / n
                m2 = m2 + (np.float64(xi) - mean) ** 2""")},
        "float_count": {"product": _update("""
                n += 1.0
                old = mean
                mean = old + ({xi} - old) / n
                m2 = m2 + ({xi} - mean) * ({xi} - mean)""")},
        "indexed": {"pow": _update("""
                k = i + 1
                mean = mean + ({xi} - mean) / k
                m2 = m2 + ({xi} - mean) ** 2"""),
                    "recomputed": _update("""
                k = i + 1
                mean = mean + ({xi} - mean) / k
                d = {xi} - mean
                m2 = m2 + d * d""")},
        "enumerate": {"pow": _update("""
                n = k
                mean += ({xi} - mean) / k
                m2 += ({xi} - mean) ** 2""")},
        "chunked": {"pow": _update("""
                    k += 1
                    mean_c += ({xi} - mean_c) / k
                    m2_c += ({xi} - mean_c) ** 2""")},
        "first_element": {"pow": _update("""
                n += 1
                mean += ({xi} - mean) / n
                m2 += ({xi} - mean) ** 2"""),
                          "product": _update("""
                n += 1
                mean = mean + ({xi} - mean) / n
                m2 = m2 + ({xi} - mean) * ({xi} - mean)""")},
    },
    "welford.total_count_in_update": {
        "classic": {"len": _update("""
                n += 1
                delta = {xi} - mean
                mean += delta / len(x)
                m2 += delta * ({xi} - mean)"""),
                    "size": _update("""
                n += 1
                delta = {xi} - mean
                mean += delta / x.size
                m2 += delta * ({xi} - mean)"""),
                    "shape": _update("""
                n += 1
                delta = {xi} - mean
                mean = mean + delta / x.shape[0]
                m2 += delta * ({xi} - mean)"""),
                    "times_inverse": _update("""
                n += 1
                delta = {xi} - mean
                mean += delta * (1.0 / len(x))
                m2 += delta * ({xi} - mean)""")},
        "enumerate": {"len": _update("""
                n = k
                delta = {xi} - mean
                mean += delta / len(x)
                m2 += delta * ({xi} - mean)""")},
        "float_count": {"len": _update("""
                n += 1.0
                old = mean
                mean = old + ({xi} - old) / len(x)
                m2 = m2 + ({xi} - old) * ({xi} - mean)"""),
                        "float_len": _update("""
                n += 1.0
                old = mean
                mean = old + ({xi} - old) / float(len(x))
                m2 = m2 + ({xi} - old) * ({xi} - mean)""")},
        "indexed": {"n": _update("""
                k = i + 1
                delta = {xi} - mean
                mean = mean + delta / n
                m2 = m2 + delta * ({xi} - mean)"""),
                    "len": _update("""
                k = i + 1
                delta = {xi} - mean
                mean = mean + delta / len(x)
                m2 = m2 + delta * ({xi} - mean)""")},
        "km1": {"len": _update("""
                n += 1
                delta = {xi} - mean
                m2 += delta * delta * (n - 1) / n
                mean += delta / len(x)""")},
        "numpy_scalars": {"len": _update("""
                n = n + 1
                delta = np.float64(xi) - mean
                mean = mean + delta / len(x)
                m2 = m2 + delta * (np.float64(xi) - mean)""")},
    },
    "welford.count_off_by_one": {
        "classic": {"after_use": _update("""
                delta = {xi} - mean
                mean += delta / n
                m2 += delta * ({xi} - mean)
                n += 1"""),
                    "guarded_after_use": _update("""
                if n == 0:
                    mean = {xi}
                else:
                    delta = {xi} - mean
                    mean += delta / n
                    m2 += delta * ({xi} - mean)
                n += 1"""),
                    "starts_at_one": {"n0": "1", "update": """
                n += 1
                delta = {xi} - mean
                mean += delta / n
                m2 += delta * ({xi} - mean)"""}},
        "indexed": {"k_is_i": _update("""
                k = i
                delta = {xi} - mean
                mean = mean + delta / k
                m2 = m2 + delta * ({xi} - mean)"""),
                    "k_is_i_plus_2": _update("""
                k = i + 2
                delta = {xi} - mean
                mean = mean + delta / k
                m2 = m2 + delta * ({xi} - mean)""")},
        "enumerate": {"from_zero": {"enum": "k, xi in enumerate(x)"},
                      "from_two": {"enum": "k, xi in enumerate(x, 2)"}},
        "first_element": {"after_use": _update("""
                delta = {xi} - mean
                mean += delta / n
                m2 += delta * ({xi} - mean)
                n += 1""")},
        "with_total": {"n-1": {"total_mean": "total / (n - 1)"}, "n+1": {"total_mean": "total / (n + 1)"},
                       "len-1": {"total_mean": "total / (len(x) - 1)"}},
    },
}
UPDATE_PAIRS = {  # two mistakes, both named
    ("welford.count_off_by_one", "welford.unbiased_variance"): {
        "with_total": {"n-1_everywhere": {"total_mean": "total / (n - 1)", "final": "var = m2 / (n - 1)"}}},
    ("welford.sum_not_mean", "welford.unbiased_variance"): {
        "with_total": {"total_and_ddof1": {"total_mean": "total", "final": "var = m2 / (n - 1)"}}},
    ("welford.std_returned", "welford.sum_not_mean"): {
        "with_total": {"total_and_std": {"total_mean": "total", "final": "var = (m2 / n) ** 0.5"}}},
}


def _update_mutants():
    found = []
    for mistake, styles in [*UPDATES.items(), *UPDATE_PAIRS.items()]:
        for style, ways in styles.items():
            for way, slots in ways.items():
                for conversion, xi in _both_xi(style):
                    found.append(_mv(mistake, f"{way}/{conversion}", style, xi=xi, **slots))
    return found


# ---------------------------------------------------------------- welford.integer_division on values
def _integer_value_mutants():
    found = []
    ways = {"total_floor": {"total_mean": "total // n"}, "np_floor": {"total_mean": "float(np.floor(total / n))"},
            "int_total": {"total_mean": "float(int(total / n))"},
            "round_total": {"total_mean": "float(round(total / n))"}}
    for way, slots in ways.items():
        for conversion, xi in _both_xi("with_total"):
            found.append(_mv("welford.integer_division", f"{way}/{conversion}", "with_total", xi=xi, **slots))
    return found


# ---------------------------------------------------------------- welford.naive_variance
NAIVE = {
    "sums": """
        def welford_mean_var(x):
            n, s, ss = 0, 0.0, 0.0
            for xi in x:
                v = {xi}
                n += 1
                s += v
                ss += v * v
            mean = s / n
            return float(mean), float({var})
        """,
    "running_squares": """
        def welford_mean_var(x):
            n, mean, mean_sq = 0, 0.0, 0.0
            for xi in x:
                v = {xi}
                n += 1
                mean += (v - mean) / n
                mean_sq += (v * v - mean_sq) / n
            s, ss = mean * n, mean_sq * n
            return float(mean), float({var})
        """,
    "numpy_sums": """
        def welford_mean_var(x):
            n = 0
            s = np.float64(0.0)
            ss = np.float64(0.0)
            for xi in x:
                v = {xi}
                n += 1
                s = s + v
                ss = ss + v ** 2
            mean = s / n
            return mean, {var}
        """,
}
NAIVE_VARS = {"mean_sq": "ss / n - mean * mean", "pow": "ss / n - mean ** 2", "sums": "(ss - s * s / n) / n",
              "n_mean_sq": "(ss - n * mean * mean) / n", "s_mean": "(ss - s * mean) / n"}


def _naive_mutants():
    found = []
    for style, source in NAIVE.items():
        for way, var in NAIVE_VARS.items():
            conversions = ([("np", "np.float64(xi)")] if style == "numpy_sums"
                           else [("raw", "xi"), ("float", "float(xi)")])
            for conversion, xi in conversions:
                label = f"welford.naive_variance/{style}/{way}/{conversion}"
                code = source.replace("{xi}", xi).replace("{var}", var)
                found.append(mutant(NB, MV, "welford.naive_variance", _compile(code, label), label))
    return found


# ---------------------------------------------------------------- accumulators of the wrong kind
ACCUMULATORS = {
    "welford.low_precision": {
        "float32": ("np.float32(0.0)", "np.float32(xi)", "mean, m2 / n"),
        "float32_count": ("np.float32(0.0)", "np.float32(xi)", "mean, m2 / np.float32(n)"),
        "float16": ("np.float16(0.0)", "np.float16(xi)", "mean, m2 / n")},
    "welford.array_not_scalar": {
        "zeros1": ("np.zeros(1)", "xi", "mean, m2 / n"), "list_array": ("np.array([0.0])", "xi", "mean, m2 / n"),
        "full": ("np.full(1, 0.0)", "float(xi)", "mean, m2 / n")},
}


def _accumulator_mutants():
    found = []
    template = """
        def welford_mean_var(x):
            n = 0
            mean = {zero}
            m2 = {zero}
            for xi in x:
                v = {xi}
                n += 1
                delta = v - mean
                mean = mean + delta / n
                m2 = m2 + delta * (v - mean)
            return {ret}
        """
    for mistake, ways in ACCUMULATORS.items():
        for way, (zero, xi, ret) in ways.items():
            for returned in (ret, ret.replace("mean,", "mean * 1,")):
                label = f"{mistake}/accumulators/{way}/{'plain' if returned == ret else 'scaled'}"
                code = template.replace("{zero}", zero).replace("{xi}", xi).replace("{ret}", returned)
                found.append(mutant(NB, MV, mistake, _compile(code, label), label))
    return found


# ---------------------------------------------------------------- one pass: mistakes only a stream shows
ONE_PASS = {
    "welford.two_passes": {
        "two_loops": """
            n, total = 0, 0.0
            for xi in x:
                n += 1
                total += {xi}
            mean = total / n
            m2 = 0.0
            for xi in x:
                m2 += ({xi} - mean) ** 2
            return float(mean), float(m2 / n)""",
        "builtin_sum": """
            mean = sum(x) / len(x)
            m2 = 0.0
            for xi in x:
                m2 += ({xi} - mean) * ({xi} - mean)
            return float(mean), float(m2 / len(x))""",
        "fsum": """
            mean = math.fsum(x) / len(x)
            return float(mean), math.fsum(({xi} - mean) ** 2 for xi in x) / len(x)""",
        "fmean": """
            mean = statistics.fmean(x)
            m2 = 0.0
            for xi in x:
                m2 += ({xi} - mean) ** 2
            return float(mean), m2 / len(x)""",
        "index_loops": """
            n = len(x)
            total = 0.0
            for i in range(n):
                total += {xi_i}
            mean = total / n
            m2 = 0.0
            for i in range(n):
                m2 += ({xi_i} - mean) ** 2
            return float(mean), float(m2 / n)""",
        "welford_then_m2": """
            n, mean = 0, 0.0
            for xi in x:
                n += 1
                mean += ({xi} - mean) / n
            m2 = sum(({xi} - mean) ** 2 for xi in x)
            return float(mean), float(m2 / n)""",
        "corrected_two_pass": """
            n = len(x)
            mean = sum(x) / n
            d1, d2 = 0.0, 0.0
            for xi in x:
                d = {xi} - mean
                d1 += d
                d2 += d * d
            return float(mean + d1 / n), float((d2 - d1 * d1 / n) / n)""",
        "count_first": """
            n = sum(1 for _ in x)
            mean, m2, k = 0.0, 0.0, 0
            for xi in x:
                k += 1
                delta = {xi} - mean
                mean += delta / k
                m2 += delta * ({xi} - mean)
            return float(mean), float(m2 / n)""",
        "shift_by_max": """
            shift = max(x)
            n, s1, s2 = 0, 0.0, 0.0
            for xi in x:
                d = {xi} - shift
                n += 1
                s1 += d
                s2 += d * d
            return float(shift + s1 / n), float((s2 - s1 * s1 / n) / n)""",
        "generator_twice": """
            n = len(x)
            mean = sum({xi} for xi in x) / n
            return float(mean), float(sum(({xi} - mean) ** 2 for xi in x) / n)""",
    },
    "welford.whole_array_ops": {
        "np_mean_var": "return float(np.mean(x)), float(np.var(x))",
        "methods": "return float(x.mean()), float(x.var())",
        "asarray": """
            values = np.asarray(x, dtype=np.float64)
            mean = values.mean()
            return float(mean), float(((values - mean) ** 2).mean())""",
        "np_array": "values = np.array(x)\n            return float(values.mean()), float(values.var())",
        "astype": "values = x.astype(np.float64)\n            return float(values.mean()), float(values.var())",
        "deviations": """
            n, total = 0, 0.0
            for xi in x:
                n += 1
                total += xi
            mean = total / n
            return mean, float(sum((x - mean) ** 2)) / n""",
        "squares": "mean = np.sum(x) / len(x)\n            return float(mean), float(np.sum((x - mean) ** 2) / len(x))",
        "sum_method": "mean = x.sum() / len(x)\n"
                      "            return float(mean), float(((x - mean) ** 2).sum() / len(x))",
        "std": "return float(np.mean(x)), float(np.std(x)) ** 2",
        "average": "mean = np.average(x)\n            return float(mean), float(np.average((x - mean) ** 2))",
        "tolist": "values = x.tolist()\n            mean = sum(values) / len(values)\n"
                  "            return mean, sum((v - mean) ** 2 for v in values) / len(values)",
        "copy": "values = x.copy()\n            return float(values.mean()), float(values.var())",
        "fancy_index": """
            values = x[list(range(len(x)))]
            return float(np.mean(values)), float(np.var(values))""",
        "square_ufunc": "mean = np.mean(x)\n            return float(mean), float(np.mean(np.square(x - mean)))",
        "times_one": "values = x * 1.0\n            return float(values.mean()), float(values.var())",
        "negated": "values = -x\n            return float(-values.mean()), float(values.var())",
        "flatten": "values = x.flatten()\n            return float(values.mean()), float(values.var())",
        "catches": """
            try:
                return float(np.mean(x)), float(np.var(x))
            except Exception:
                n, total = 0, 0.0
                for xi in x:
                    n += 1
                    total += xi
                mean = total / n
                return float(mean), float(sum((xi - mean) ** 2 for xi in x) / n)""",
        "cumsum": "total = np.cumsum(x)[-1]\n            mean = total / len(x)\n"
                  "            return float(mean), float(np.mean((np.asarray(x) - mean) ** 2))",
        "dot": "mean = np.mean(x)\n            d = x - mean\n            return float(mean), float(d @ d / len(x))",
    },
    "welford.keeps_elements": {
        "list": "values = list(x)",
        "comprehension": "values = [float(v) for v in x]",
        "append": "values = []\n            for xi in x:\n                values.append(xi)",
        "tuple": "values = tuple(x)",
        "sorted": "values = sorted(x)",
        "deque": "values = collections.deque(x)",
        "array_module": "values = array.array('d', x)",
        "fromiter": "values = np.fromiter(x, dtype=np.float64)",
        "map": "values = list(map(float, x))",
        "star": "values = [*x]",
    },
    "welford.skips_elements": {
        "cap_enumerate": """
            n, mean, m2 = 0, 0.0, 0.0
            for i, xi in enumerate(x):
                if i >= {limit}:
                    break
                n += 1
                delta = {xi} - mean
                mean += delta / n
                m2 += delta * ({xi} - mean)
            return float(mean), float(m2 / n)""",
        "cap_range": """
            n = min(len(x), {limit})
            mean, m2 = 0.0, 0.0
            for i in range(n):
                xi = {xi_i}
                delta = xi - mean
                mean += delta / (i + 1)
                m2 += delta * (xi - mean)
            return float(mean), float(m2 / n)""",
        "stride": """
            if len(x) > {limit}:
                x = x[::2]
            n, mean, m2 = 0, 0.0, 0.0
            for xi in x:
                n += 1
                delta = {xi} - mean
                mean += delta / n
                m2 += delta * ({xi} - mean)
            return float(mean), float(m2 / n)""",
        "head": """
            x = x[:{limit}]
            n, mean, m2 = 0, 0.0, 0.0
            for xi in x:
                n += 1
                delta = {xi} - mean
                mean += delta / n
                m2 += delta * ({xi} - mean)
            return float(mean), float(m2 / n)""",
        "islice": """
            n, mean, m2 = 0, 0.0, 0.0
            for xi in itertools.islice(x, {limit}):
                n += 1
                delta = {xi} - mean
                mean += delta / n
                m2 += delta * ({xi} - mean)
            return float(mean), float(m2 / n)""",
    },
}
KEEPS_THEN = {  # what the kept elements are used for: a correct computation, so only the memory is wrong
    "two_pass": "\n            mean = sum(values) / len(values)\n"
                "            return float(mean), float(sum((v - mean) ** 2 for v in values) / len(values))",
    "welford": "\n            n, mean, m2 = 0, 0.0, 0.0\n            for v in values:\n                n += 1\n"
               "                delta = v - mean\n                mean += delta / n\n"
               "                m2 += delta * (v - mean)\n            return float(mean), float(m2 / n)",
}


def _one_pass_mutants():
    found = []

    def add(mistake, label, body):
        code = "def welford_mean_var(x):\n            " + body.strip() + "\n"
        found.append(mutant(NB, MV, mistake, _compile(code, label), label))

    for way, body in ONE_PASS["welford.two_passes"].items():
        for conversion, xi, xi_i in (("raw", "xi", "x[i]"), ("float", "float(xi)", "float(x[i])")):
            add("welford.two_passes", f"welford.two_passes/{way}/{conversion}",
                body.replace("{xi_i}", xi_i).replace("{xi}", xi))
    for way, body in ONE_PASS["welford.whole_array_ops"].items():
        add("welford.whole_array_ops", f"welford.whole_array_ops/{way}", body)
    for way, body in ONE_PASS["welford.keeps_elements"].items():
        for then, rest in KEEPS_THEN.items():
            add("welford.keeps_elements", f"welford.keeps_elements/{way}/{then}", body + rest)
    for way, body in ONE_PASS["welford.skips_elements"].items():
        for limit, xi, xi_i in (("6000", "xi", "x[i]"), ("8192", "float(xi)", "float(x[i])"),
                                ("7000", "xi", "x[i]"), ("10000", "float(xi)", "float(x[i])")):
            add("welford.skips_elements", f"welford.skips_elements/{way}/{limit}",
                body.replace("{limit}", limit).replace("{xi_i}", xi_i).replace("{xi}", xi))
    return found


# ============================================================================ welford_combine
COMBINE_STYLES = {
    "chan": ("""
        def welford_combine(a, b):
            n_a, mean_a, m2_a = a
            n_b, mean_b, m2_b = b
            {guard}
            n = n_a + n_b
            delta = mean_b - mean_a
            mean = {mean}
            m2 = {m2}
            return {ret}
        """, {"mean": "mean_a + delta * n_b / n", "m2": "m2_a + m2_b + delta * delta * n_a * n_b / n"}),
    "weighted": ("""
        def welford_combine(a, b):
            n_a, mean_a, m2_a = a
            n_b, mean_b, m2_b = b
            {guard}
            n = n_a + n_b
            delta = mean_b - mean_a
            mean = {mean}
            m2 = {m2}
            return {ret}
        """, {"mean": "(n_a * mean_a + n_b * mean_b) / n", "m2": "m2_a + m2_b + delta ** 2 * n_a * n_b / n"}),
    "weight": ("""
        def welford_combine(a, b):
            n_a, mean_a, m2_a = a
            n_b, mean_b, m2_b = b
            {guard}
            n = n_a + n_b
            w = {w}
            delta = mean_b - mean_a
            mean = {mean}
            m2 = {m2}
            return {ret}
        """, {"w": "n_b / n", "mean": "mean_a + w * delta", "m2": "m2_a + m2_b + w * n_a * delta * delta"}),
    "indexed": ("""
        def welford_combine(a, b):
            n_a, n_b = a[0], b[0]
            mean_a, mean_b = a[1], b[1]
            m2_a, m2_b = a[2], b[2]
            {guard}
            n = n_a + n_b
            delta = mean_b - mean_a
            mean = {mean}
            m2 = {m2}
            return ({ret})
        """, {"mean": "mean_a + delta * (n_b / n)", "m2": "m2_a + m2_b + delta * delta * (n_a * n_b / n)"}),
}
GUARD = "    if n_a == 0:\n        return b\n    if n_b == 0:\n        return a"
COMBINE_DEFAULTS = {"guard": GUARD, "ret": "n, mean, m2"}


def combine_source(style: str, **slots) -> str:
    template, own = COMBINE_STYLES[style]
    return fill(template, {**COMBINE_DEFAULTS, **own, **slots})


def _cb(planted, label, style, **slots):
    name = "+".join(sorted(planted)) if not isinstance(planted, str) else planted
    label = f"combine/{name}/{style}/{label}"
    return mutant(NB, COMBINE, planted, _compile(combine_source(style, **slots), label), label)


# mistake -> {way: slots}; written for the chan form, with the other styles' forms where they differ
COMBINE_MISTAKES = {
    "welford.not_a_tuple": {"list": {"ret": "[n, mean, m2]"}, "array": {"ret": "np.array([n, mean, m2])"},
                            "pair": {"ret": "mean, m2"}, "four": {"ret": "n, mean, m2, m2 / n"},
                            "dict": {"ret": '{"n": n, "mean": mean, "m2": m2}'}},
    "welford.count_not_int": {"float": {"ret": "float(n), mean, m2"}, "times_one": {"ret": "n * 1.0, mean, m2"},
                              "divided": {"ret": "n / 1, mean, m2"}, "np_float": {"ret": "np.float64(n), mean, m2"},
                              "float32": {"ret": "np.float32(n), mean, m2"}},
    "welford.empty_partial": {
        "no_guard": {"guard": ""},
        "wrong_side": {"guard": "    if n_a == 0:\n        return a\n    if n_b == 0:\n        return b"},
        "empty_result": {"guard": "    if n_a == 0 or n_b == 0:\n        return (0, 0.0, 0.0)"},
        "only_a": {"guard": "    if n_a == 0:\n        return a"},
        "zero_stats": {"guard": "if n_a == 0:\n    return (n_b, 0.0, 0.0)\nif n_b == 0:\n    return (n_a, 0.0, 0.0)"},
    },
    "welford.combine_count": {"n_a": {"ret": "n_a, mean, m2"}, "max": {"ret": "max(n_a, n_b), mean, m2"},
                              "plus_one": {"ret": "n + 1, mean, m2"}, "product": {"ret": "n_a * n_b, mean, m2"},
                              "n_b": {"ret": "n_b, mean, m2"}},
    "welford.unweighted_mean": {"half_sum": {"mean": "(mean_a + mean_b) / 2"},
                                "half_times": {"mean": "0.5 * (mean_a + mean_b)"},
                                "half_delta": {"mean": "mean_a + delta / 2"},
                                "np_mean": {"mean": "float(np.mean([mean_a, mean_b]))"},
                                "weight_half": {"mean": "mean_a + 0.5 * delta"}},
    "welford.swapped_weights": {"n_a": {"mean": "mean_a + delta * n_a / n"},
                                "weighted": {"mean": "(n_b * mean_a + n_a * mean_b) / n"},
                                "from_b": {"mean": "mean_b - delta * n_b / n"},
                                "fraction": {"mean": "mean_a + (n_a / n) * delta"},
                                "swapped_products": {"mean": "(mean_a * n_b + mean_b * n_a) / (n_a + n_b)"}},
    "welford.variance_in_partial": {"ret": {"ret": "n, mean, m2 / n"},
                                    "ret_sum": {"ret": "n, mean, m2 / (n_a + n_b)"},
                                    "m2_over_n": {"m2": "(m2_a + m2_b + delta * delta * n_a * n_b / n) / n"},
                                    "times_inverse": {"ret": "n, mean, m2 * (1 / n)"},
                                    "ret_float": {"ret": "n, mean, float(m2 / n)"}},
    "welford.no_between_term": {"sum": {"m2": "m2_a + m2_b"}, "plus_zero": {"m2": "m2_b + m2_a"},
                                "float": {"m2": "float(m2_a + m2_b)"}, "sum_builtin": {"m2": "sum((m2_a, m2_b))"},
                                "np_add": {"m2": "float(np.add(m2_a, m2_b))"}},
    # right on numbers, wrong on the arrays of means section 6 merges (float(...) is the lazy version the
    # notebook's "plain arithmetic" rule forbids; the others are the same shortcut in other clothes)
    "welford.scalar_only": {"float_ret": {"ret": "n, float(mean), float(m2)"},
                            "float_mean": {"mean": "float(mean_a + delta * n_b / n)"},
                            "math_fsum": {"m2": "math.fsum((m2_a, m2_b, delta * delta * n_a * n_b / n))"},
                            "np_average": {"mean": "np.average([mean_a, mean_b], weights=[n_a, n_b])"},
                            "branch_on_means": {"guard": textwrap.dedent(GUARD) + "\nif mean_a == mean_b:\n"
                                                         "    return n_a + n_b, mean_a, m2_a + m2_b"},
                            "float_inputs": {"guard": textwrap.dedent(GUARD)
                                                      + "\nmean_a, mean_b = float(mean_a), float(mean_b)"}},
    "welford.between_term_scale": {"n_squared": {"m2": "m2_a + m2_b + delta * delta * n_a * n_b / n ** 2"},
                                   "n_times_n": {"m2": "m2_a + m2_b + delta * delta * n_a * n_b / (n * n)"},
                                   "no_division": {"m2": "m2_a + m2_b + delta * delta * n_a * n_b"},
                                   "doubled": {"m2": "m2_a + m2_b + 2 * delta * delta * n_a * n_b / n"},
                                   "halved": {"m2": "m2_a + m2_b + delta * delta * n_a * n_b / (2 * n)"}},
}
COMBINE_PAIRS = {
    ("welford.no_between_term", "welford.unweighted_mean"): {
        "average_all": {"mean": "(mean_a + mean_b) / 2", "m2": "m2_a + m2_b"}},
    ("welford.no_between_term", "welford.swapped_weights"): {
        "swapped_no_between": {"mean": "mean_a + delta * n_a / n", "m2": "m2_a + m2_b"}},
    ("welford.between_term_scale", "welford.unweighted_mean"): {
        "half_and_n_squared": {"mean": "(mean_a + mean_b) / 2",
                               "m2": "m2_a + m2_b + delta * delta * n_a * n_b / n ** 2"}},
    ("welford.unweighted_mean", "welford.variance_in_partial"): {
        "average_and_variance": {"mean": "(mean_a + mean_b) / 2", "ret": "n, mean, m2 / n"}},
}


def _combine_mutants():
    found = []
    for mistake, ways in [*COMBINE_MISTAKES.items(), *COMBINE_PAIRS.items()]:
        for way, slots in ways.items():
            for style in COMBINE_STYLES:
                found.append(_cb(mistake, way, style, **slots))
    return found


# ============================================================================ correct variants
CORRECT_MEAN_VAR_STYLES = [(style, "raw", {}) for style in STYLES] + [
    (style, "float", {"xi": "float(xi)"}) for style in ("classic", "indexed")]
CORRECT_MEAN_VAR_EXTRA = {
    "chunked_64": ("chunked", {"chunk": "64"}),
    "with_total_float": ("with_total", {"total_mean": "float(total) / n"}),
    "classic_ret_np": ("classic", {"ret": "np.float64(mean), np.float64(var)"}),
    "classic_final_mean_of_m2": ("classic", {"final": "var = m2 * (1.0 / n)"}),
}
CORRECT_COMBINE_EXTRA = {
    "guard_on_n": ("chan", {"guard": "    if n_a + n_b == 0:\n        return (0, 0.0, 0.0)"}),
    "guard_not": ("chan", {"guard": "    if not n_a:\n        return b\n    if not n_b:\n        return a"}),
    "guard_both_then_formula": ("weighted", {"guard": "    if n_a == 0 and n_b == 0:\n        return (0, 0.0, 0.0)"}),
    "weighted_spread": ("weighted", {"m2": "m2_a + m2_b + n_a * (mean_a - mean) ** 2 + n_b * (mean_b - mean) ** 2"}),
    "tuple_ret": ("chan", {"ret": "(n, mean, m2)"}),
    "np_average_axis0": ("chan", {"mean": "np.average([mean_a, mean_b], weights=[n_a, n_b], axis=0)"}),
    "float_ops": ("chan", {"mean": "mean_a + delta * (float(n_b) / n)",
                           "m2": "m2_a + m2_b + delta ** 2 * (n_a * n_b) / n"}),
}


def _corrects():
    found = [Correct(NB, MV, solution(NB, MV), "solution/welford_mean_var"),
             Correct(NB, COMBINE, solution(NB, COMBINE), "solution/welford_combine")]
    found += [Correct(NB, MV, f, f"implementations/{f.__name__}") for f in impl.CORRECT_MEAN_VARS]
    found += [Correct(NB, COMBINE, f, f"implementations/{f.__name__}") for f in impl.CORRECT_COMBINES]
    for style, conversion, slots in CORRECT_MEAN_VAR_STYLES:
        label = f"correct/{style}/{conversion}"
        found.append(Correct(NB, MV, _compile(mean_var_source(style, **slots), label), label))
    for name, (style, slots) in CORRECT_MEAN_VAR_EXTRA.items():
        label = f"correct/{name}"
        found.append(Correct(NB, MV, _compile(mean_var_source(style, **slots), label), label))
    for style in COMBINE_STYLES:
        label = f"correct/combine/{style}"
        found.append(Correct(NB, COMBINE, _compile(combine_source(style), label), label))
    for name, (style, slots) in CORRECT_COMBINE_EXTRA.items():
        label = f"correct/combine/{name}"
        found.append(Correct(NB, COMBINE, _compile(combine_source(style, **slots), label), label))
    return found


MUTANTS = (_final_mutants() + _update_mutants() + _integer_value_mutants() + _naive_mutants()
           + _accumulator_mutants() + _one_pass_mutants() + _combine_mutants())
CORRECT = _corrects()
UNREACHABLE: set = set()

assert len({m.label for m in MUTANTS}) == len(MUTANTS), "mutant labels must be unique"
assert len({c.label for c in CORRECT}) == len(CORRECT), "correct labels must be unique"
