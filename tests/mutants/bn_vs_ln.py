"""Mutants of 01_bn_vs_ln: layernorm, batch_norm and leaks_future, each with known mistakes.

The forward mutants come from one builder, ``_norm``: a style (vectorised numpy, numpy's var
and std, a Python loop over the groups of statistics, torch, einsum), a statistic, a map from
it to the scale, centring, and the use of gain and shift; a mistake is one of those choices
made wrong, a combination is two of them. Axis mistakes, keepdims slips and the probe's
mistakes are written out as small families of closures. CORRECT holds every correct
implementation of tests/implementations/bn_vs_ln.py, the source's solutions and more
correct variants in other styles.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from tests.diagnosis_harness import solution
from tests.implementations import bn_vs_ln as impl
from tests.mutants import Correct, mutant

NB = "01_bn_vs_ln"
EXERCISE = {"ln": "layernorm", "bn": "batch_norm"}
STYLES = ["numpy", "npvar", "loop", "torch", "einsum"]


# ====================================================================== forward builder
def _groups(kind, x):
    """x as a 2-D array whose rows (ln) or columns (bn) are the groups of statistics, and the way back."""
    d = x.shape[-1]
    flat = x.reshape(-1, d)
    return flat, (lambda out: out.reshape(x.shape))


def _scale_np(v, eps, scale, sqrt=np.sqrt):
    if scale == "right":
        return sqrt(v + eps)
    if scale == "outside":
        return sqrt(v) + eps
    if scale == "pow_outside":
        return v ** 0.5 + eps
    if scale == "eps_first_outside":
        return eps + sqrt(v)
    if scale == "ones":
        return v * 0.0 + 1.0
    if scale == "var_eps":
        return v + eps
    if scale == "var":
        return v
    if scale == "no_eps":
        return sqrt(v)
    if scale == "pow_no_eps":
        return v ** 0.5
    if isinstance(scale, tuple) and scale[0] == "fixed":
        return sqrt(v + scale[1])
    if scale == "none":
        return 1.0
    raise ValueError(scale)


def _affine(z, gamma, beta, affine):
    if affine == "right":
        return gamma * z + beta
    if affine == "right_fma":
        return z * gamma + beta
    if affine == "swapped":
        return beta * z + gamma
    if affine == "swapped_call":
        return z * beta + gamma
    if affine == "swapped_np":
        return beta * z + gamma if torch.is_tensor(z) else np.add(np.multiply(beta, z), gamma)
    if affine == "swapped_reversed":
        return gamma + z * beta
    if affine == "shift_before_gain_right":
        return (z + beta) * gamma
    if affine == "shift_before_gain_np":
        return gamma * (beta + z) if torch.is_tensor(z) else np.multiply(gamma, np.add(z, beta))
    if affine == "beta_subtracted_plus_neg":
        return gamma * z + (-beta)
    if affine == "beta_subtracted_np":
        return gamma * z - beta if torch.is_tensor(z) else np.subtract(np.multiply(gamma, z), beta)
    if affine == "gamma_ignored":
        return z + beta
    if affine == "gamma_ignored_ones":
        return np.ones_like(gamma) * z + beta if not torch.is_tensor(z) else z + beta
    if affine == "beta_ignored":
        return gamma * z
    if affine == "beta_ignored_zero":
        return gamma * z + 0.0 * beta
    if affine == "both_ignored":
        return z
    if affine == "both_ignored_copy":
        return z * 1.0
    if affine == "shift_before_gain":
        return gamma * (z + beta)
    if affine == "shift_before_gain_expanded":
        return gamma * z + gamma * beta
    if affine == "beta_subtracted":
        return gamma * z - beta
    if affine == "beta_subtracted_neg":
        return -beta + gamma * z
    if affine == "gamma_divides":
        return z / gamma + beta
    if affine == "gamma_squared":
        return gamma * gamma * z + beta
    if affine == "gamma_reversed":
        return gamma[::-1].copy() * z + beta if not torch.is_tensor(gamma) else gamma.flip(0) * z + beta
    if affine == "beta_scaled":
        return gamma * z + 2.0 * beta
    if affine == "gamma_plus_one":
        return (1.0 + gamma) * z + beta
    raise ValueError(affine)


def _norm(kind, style, stat="biased", scale="right", centre=True, affine="right", first_affine=None):
    """A layernorm (kind "ln") or batch_norm ("bn") built from the given choices.

    ``first_affine``: applied to x before normalising ("gamma_first": gamma * x, a misplaced gain).
    """
    def stat_value(c, sq_mean, mu, n):
        if stat == "biased":
            return c
        if stat == "unbiased":
            return c * n / (n - 1)
        if stat == "naive":
            return sq_mean - mu * mu
        raise ValueError(stat)

    def norm(x, gamma, beta, eps=1e-5):
        if first_affine == "gamma_first":
            x = gamma * x
        if first_affine == "beta_first":
            x = x + beta
        axes = (-1,) if kind == "ln" else tuple(range(x.ndim - 1))
        n = x.shape[-1] if kind == "ln" else int(np.prod(x.shape[:-1]))
        if style == "numpy":
            mu = x.mean(axis=axes, keepdims=True)
            c = ((x - mu) ** 2).mean(axis=axes, keepdims=True)
            v = stat_value(c, (x * x).mean(axis=axes, keepdims=True), mu, n)
            z = (x - mu) / _scale_np(v, eps, scale) + (mu / _scale_np(v, eps, scale) if not centre else 0.0)
            return _affine(z, gamma, beta, affine)
        if style == "npvar":
            mu = np.mean(x, axis=axes, keepdims=True)
            if stat == "naive":
                v = np.mean(np.square(x), axis=axes, keepdims=True) - np.square(mu)
            else:
                v = np.var(x, axis=axes, keepdims=True, ddof=1 if stat == "unbiased" else 0)
            if scale == "outside" and stat != "naive":
                s = np.std(x, axis=axes, keepdims=True, ddof=1 if stat == "unbiased" else 0) + eps
            elif scale == "no_eps" and stat != "naive":
                s = np.std(x, axis=axes, keepdims=True, ddof=1 if stat == "unbiased" else 0)
            else:
                s = _scale_np(v, eps, scale)
            z = np.divide(np.subtract(x, mu) if centre else x, s)
            return _affine(z, gamma, beta, affine)
        if style == "loop":
            flat, back = _groups(kind, x)
            out = np.empty_like(flat)
            groups = range(flat.shape[0]) if kind == "ln" else range(flat.shape[1])
            for g in groups:
                values = [float(v) for v in (flat[g] if kind == "ln" else flat[:, g])]
                m = sum(values) / len(values)
                c = sum((v - m) ** 2 for v in values) / len(values)
                sq = sum(v * v for v in values) / len(values)
                var = stat_value(c, sq, m, len(values))
                s = _scale_np(var, eps, scale, sqrt=math.sqrt)
                row = [((v - m) if centre else v) / s for v in values]
                if kind == "ln":
                    out[g] = row
                else:
                    out[:, g] = row
            return _affine(back(out), gamma, beta, affine)
        if style == "torch":
            t = torch.from_numpy(np.ascontiguousarray(x))
            g = torch.from_numpy(np.asarray(gamma, dtype=np.float64))
            b = torch.from_numpy(np.asarray(beta, dtype=np.float64))
            dims = (-1,) if kind == "ln" else tuple(range(t.dim() - 1))
            mu = t.mean(dim=dims, keepdim=True)
            if stat == "naive":
                v = (t * t).mean(dim=dims, keepdim=True) - mu ** 2
            else:
                v = t.var(dim=dims, keepdim=True, unbiased=stat == "unbiased")
            z = (t - mu if centre else t) / _scale_np(v, eps, scale, sqrt=torch.sqrt)
            return _affine(z, g, b, affine).numpy()
        if style == "einsum":
            flat, back = _groups(kind, x)
            if kind == "ln":
                mu = np.einsum("nd->n", flat)[:, None] / n
                c = np.einsum("nd,nd->n", flat - mu, flat - mu)[:, None] / n
                sq = np.einsum("nd,nd->n", flat, flat)[:, None] / n
            else:
                mu = np.einsum("nd->d", flat) / n
                c = np.einsum("nd,nd->d", flat - mu, flat - mu) / n
                sq = np.einsum("nd,nd->d", flat, flat) / n
            v = stat_value(c, sq, mu, n)
            z = (flat - mu if centre else flat) / _scale_np(v, eps, scale)
            return _affine(back(z), gamma, beta, affine)
        raise ValueError(style)

    norm.__name__ = norm.__qualname__ = EXERCISE[kind]
    return norm


def _ids(kind, *names):
    return [f"{kind}.{name}" for name in names]


def _forward_mutants(kind):
    made = []

    def add(planted, function, label):
        made.append(mutant(NB, EXERCISE[kind], _ids(kind, *planted), function, f"{kind}/{label}"))

    # ---------------------------------------------------------------- statistic and map
    for style in STYLES:
        add(["unbiased_variance"], _norm(kind, style, stat="unbiased"), f"unbiased/{style}")
        add(["unbiased_variance", "eps_outside_sqrt"], _norm(kind, style, stat="unbiased", scale="outside"),
            f"unbiased+outside/{style}")
        add(["unbiased_variance", "eps_ignored"], _norm(kind, style, stat="unbiased", scale="no_eps"),
            f"unbiased+eps_ignored/{style}")
        add(["unbiased_variance", "no_sqrt"], _norm(kind, style, stat="unbiased", scale="var_eps"),
            f"unbiased+no_sqrt/{style}")
        add(["unbiased_variance", "no_sqrt", "eps_ignored"], _norm(kind, style, stat="unbiased", scale="var"),
            f"unbiased+var/{style}")
        add(["naive_variance"], _norm(kind, style, stat="naive"), f"naive/{style}")
        add(["eps_outside_sqrt"], _norm(kind, style, scale="outside"), f"outside/{style}")
        add(["eps_outside_sqrt"], _norm(kind, style, scale="pow_outside"), f"outside_pow/{style}")
        add(["eps_outside_sqrt"], _norm(kind, style, scale="eps_first_outside"), f"outside_eps_first/{style}")
        add(["not_scaled"], _norm(kind, style, scale="ones"), f"not_scaled_ones/{style}")
        add(["no_sqrt"], _norm(kind, style, scale="var_eps"), f"no_sqrt/{style}")
        add(["no_sqrt", "eps_ignored"], _norm(kind, style, scale="var"), f"var/{style}")
        add(["not_scaled"], _norm(kind, style, scale="none"), f"not_scaled/{style}")
        add(["eps_ignored"], _norm(kind, style, scale="no_eps"), f"eps_ignored/{style}")
        add(["eps_ignored"], _norm(kind, style, scale="pow_no_eps"), f"eps_ignored_pow/{style}")
        for fixed in (1e-5, 1e-6, 1e-3, 1e-4):
            add(["eps_hardcoded"], _norm(kind, style, scale=("fixed", fixed)), f"eps_hardcoded/{style}/{fixed:g}")
        add(["unbiased_variance", "eps_hardcoded"], _norm(kind, style, stat="unbiased", scale=("fixed", 1e-6)),
            f"unbiased+eps_hardcoded/{style}/1e-06")
        add(["not_centred"], _norm(kind, style, centre=False), f"not_centred/{style}")
        add(["not_centred"], _norm(kind, style, centre=False, affine="right_fma"), f"not_centred/{style}/fma")
        add(["naive_variance"], _norm(kind, style, stat="naive", affine="right_fma"), f"naive/{style}/fma")
    # naive variance written in more ways
    for label, function in _naive_variants(kind).items():
        add(["naive_variance"], function, f"naive/{label}")
    for label, function in _not_scaled_variants(kind).items():
        add(["not_scaled"], function, f"not_scaled/{label}")
    for label, function in _not_centred_variants(kind).items():
        add(["not_centred"], function, f"not_centred/{label}")
    for label, function in _wrong_scale_variants(kind).items():
        add(["wrong_scale"], function, f"wrong_scale/{label}")
    # ---------------------------------------------------------------- gain and shift
    affine_mistakes = {
        "swapped": ["affine_swapped"], "swapped_call": ["affine_swapped"],
        "gamma_ignored": ["gamma_ignored"], "gamma_ignored_ones": ["gamma_ignored"],
        "beta_ignored": ["beta_ignored"], "beta_ignored_zero": ["beta_ignored"],
        "both_ignored": ["gamma_ignored", "beta_ignored"], "both_ignored_copy": ["gamma_ignored", "beta_ignored"],
        "swapped_np": ["affine_swapped"], "swapped_reversed": ["affine_swapped"],
        "shift_before_gain": ["shift_before_gain"], "shift_before_gain_expanded": ["shift_before_gain"],
        "shift_before_gain_right": ["shift_before_gain"], "shift_before_gain_np": ["shift_before_gain"],
        "beta_subtracted": ["beta_subtracted"], "beta_subtracted_neg": ["beta_subtracted"],
        "beta_subtracted_plus_neg": ["beta_subtracted"], "beta_subtracted_np": ["beta_subtracted"],
        "gamma_divides": ["affine_misapplied"], "gamma_squared": ["affine_misapplied"],
        "gamma_reversed": ["affine_misapplied"], "beta_scaled": ["affine_misapplied"],
    }
    for style in STYLES:
        for affine, planted in affine_mistakes.items():
            add(planted, _norm(kind, style, affine=affine), f"{affine}/{style}")
        add(["affine_misapplied"], _norm(kind, style, first_affine="gamma_first"), f"gamma_first/{style}")
        if kind == "ln":  # a shift per feature added before BatchNorm is removed again by its own mean
            add(["affine_misapplied"], _norm(kind, style, first_affine="beta_first"), f"beta_first/{style}")
    # ---------------------------------------------------------------- axes
    for label, (planted, function) in _axis_variants(kind).items():
        add(planted, function, f"axes/{label}")
    other = "batch_norm" if kind == "ln" else "layernorm"
    reused = [solution(NB, other)] + (impl.CORRECT_BATCH_NORMS + CORRECT_BATCH_NORMS if kind == "ln"
                                      else impl.CORRECT_LAYERNORMS + CORRECT_LAYERNORMS)
    for i, function in enumerate(reused):
        name = "solution" if i == 0 else function.__name__
        add(["over_batch" if kind == "ln" else "over_features"], function, f"axes/{other}_reused/{name}")
    return made


# ---------------------------------------------------------------- hand-written families
def _axes_of(kind, x):
    return -1 if kind == "ln" else tuple(range(x.ndim - 1))


def _naive_variants(kind):
    def mean_sq_minus(x, gamma, beta, eps=1e-5):
        a = _axes_of(kind, x)
        mu = np.mean(x, axis=a, keepdims=True)
        var = np.mean(x ** 2, axis=a, keepdims=True) - mu ** 2
        return gamma * (x - mu) / np.sqrt(var + eps) + beta

    def sums(x, gamma, beta, eps=1e-5):
        a = _axes_of(kind, x)
        n = x.size // (x.shape[-1] if kind == "bn" else x.size // x.shape[-1])
        s1, s2 = x.sum(axis=a, keepdims=True), (x * x).sum(axis=a, keepdims=True)
        mu = s1 / n
        var = s2 / n - mu * mu
        return gamma * (x - mu) / np.sqrt(var + eps) + beta

    def fsum_loop(x, gamma, beta, eps=1e-5):
        d = x.shape[-1]
        flat = x.reshape(-1, d)
        out = np.empty_like(flat)
        groups = [flat[i] for i in range(flat.shape[0])] if kind == "ln" else [flat[:, j] for j in range(d)]
        for i, g in enumerate(groups):
            m = math.fsum(g) / len(g)
            var = math.fsum(v * v for v in g) / len(g) - m * m
            row = (g - m) / math.sqrt(var + eps)
            if kind == "ln":
                out[i] = row
            else:
                out[:, i] = row
        return gamma * out.reshape(x.shape) + beta

    def torch_square(x, gamma, beta, eps=1e-5):
        t = torch.from_numpy(x)
        dims = (-1,) if kind == "ln" else tuple(range(t.dim() - 1))
        mu = t.mean(dim=dims, keepdim=True)
        var = t.square().mean(dim=dims, keepdim=True) - mu.square()
        return (torch.from_numpy(gamma) * (t - mu) * torch.rsqrt(var + eps) + torch.from_numpy(beta)).numpy()

    def matmul(x, gamma, beta, eps=1e-5):
        d = x.shape[-1]
        flat = x.reshape(-1, d)
        if kind == "ln":
            ones = np.ones(d) / d
            mu, sq = (flat @ ones)[:, None], ((flat * flat) @ ones)[:, None]
        else:
            ones = np.ones(flat.shape[0]) / flat.shape[0]
            mu, sq = ones @ flat, ones @ (flat * flat)
        out = (flat - mu) / np.sqrt(sq - mu * mu + eps)
        return gamma * out.reshape(x.shape) + beta

    def one_pass(x, gamma, beta, eps=1e-5):
        """The single-pass accumulator: a running sum and a running sum of squares."""
        d = x.shape[-1]
        flat = x.reshape(-1, d)
        out = np.empty_like(flat)
        groups = [flat[i] for i in range(flat.shape[0])] if kind == "ln" else [flat[:, j] for j in range(d)]
        for i, g in enumerate(groups):
            s1 = s2 = 0.0
            for v in g:
                s1 += v
                s2 += v * v
            m = s1 / len(g)
            row = (g - m) / math.sqrt(s2 / len(g) - m * m + eps)
            if kind == "ln":
                out[i] = row
            else:
                out[:, i] = row
        return gamma * out.reshape(x.shape) + beta

    def average(x, gamma, beta, eps=1e-5):
        a = _axes_of(kind, x)
        mu = np.average(x, axis=a, keepdims=True)
        var = np.average(np.square(x), axis=a, keepdims=True) - np.square(mu)
        return np.multiply(gamma, (x - mu) / np.sqrt(var + eps)) + beta

    def torch_pow(x, gamma, beta, eps=1e-5):
        t = torch.from_numpy(x)
        dims = (-1,) if kind == "ln" else tuple(range(t.dim() - 1))
        mu = torch.mean(t, dim=dims, keepdim=True)
        var = torch.mean(t.pow(2), dim=dims, keepdim=True) - mu.pow(2)
        return (torch.from_numpy(gamma) * (t - mu) / torch.sqrt(var + eps) + torch.from_numpy(beta)).numpy()

    def einsum_squares(x, gamma, beta, eps=1e-5):
        flat = x.reshape(-1, x.shape[-1])
        spec = "nd,nd->n" if kind == "ln" else "nd,nd->d"
        n = flat.shape[1] if kind == "ln" else flat.shape[0]
        mu = flat.mean(axis=1 if kind == "ln" else 0, keepdims=True)
        sq = np.einsum(spec, flat, flat).reshape(mu.shape) / n
        return gamma * ((flat - mu) / np.sqrt(sq - mu ** 2 + eps)).reshape(x.shape) + beta

    def product_of_means(x, gamma, beta, eps=1e-5):
        a = _axes_of(kind, x)
        var = np.mean(x * x, axis=a, keepdims=True) - np.mean(x, axis=a, keepdims=True) * np.mean(x, axis=a,
                                                                                               keepdims=True)
        return gamma * (x - np.mean(x, axis=a, keepdims=True)) / np.sqrt(var + eps) + beta

    return {"mean_sq_minus": mean_sq_minus, "sums": sums, "fsum_loop": fsum_loop, "torch_square": torch_square,
            "matmul": matmul, "one_pass": one_pass, "average": average, "torch_pow": torch_pow,
            "einsum_squares": einsum_squares, "product_of_means": product_of_means}


def _not_scaled_variants(kind):
    def unused_scale(x, gamma, beta, eps=1e-5):
        a = _axes_of(kind, x)
        mu = x.mean(axis=a, keepdims=True)
        s = np.sqrt(x.var(axis=a, keepdims=True) + eps)  # noqa: F841 - computed, then forgotten
        return gamma * (x - mu) + beta

    def divides_by_one(x, gamma, beta, eps=1e-5):
        a = _axes_of(kind, x)
        return gamma * (x - np.mean(x, axis=a, keepdims=True)) / 1.0 + beta

    def scale_cancelled(x, gamma, beta, eps=1e-5):
        a = _axes_of(kind, x)
        s = np.sqrt(x.var(axis=a, keepdims=True) + eps)
        return gamma * ((x - x.mean(axis=a, keepdims=True)) / s) * s + beta

    def torch_centre_only(x, gamma, beta, eps=1e-5):
        t = torch.from_numpy(x)
        dims = (-1,) if kind == "ln" else tuple(range(t.dim() - 1))
        return (torch.from_numpy(gamma) * (t - t.mean(dim=dims, keepdim=True)) + torch.from_numpy(beta)).numpy()

    def subtract_twice_named(x, gamma, beta, eps=1e-5):
        a = _axes_of(kind, x)
        x_hat = x - np.mean(x, axis=a, keepdims=True)
        return np.add(np.multiply(gamma, x_hat), beta)

    def loop_centre_only(x, gamma, beta, eps=1e-5):
        flat = x.reshape(-1, x.shape[-1])
        out = np.empty_like(flat)
        columns = kind == "bn"
        for i in range(flat.shape[1] if columns else flat.shape[0]):
            g = flat[:, i] if columns else flat[i]
            row = g - sum(g) / len(g)
            if columns:
                out[:, i] = row
            else:
                out[i] = row
        return gamma * out.reshape(x.shape) + beta

    def einsum_centre_only(x, gamma, beta, eps=1e-5):
        flat = x.reshape(-1, x.shape[-1])
        if kind == "ln":
            c = flat - (np.einsum("nd->n", flat) / flat.shape[1])[:, None]
        else:
            c = flat - np.einsum("nd->d", flat) / flat.shape[0]
        return (gamma * c + beta).reshape(x.shape)

    def sqrt_one(x, gamma, beta, eps=1e-5):
        a = _axes_of(kind, x)
        return gamma * (x - x.mean(axis=a, keepdims=True)) / np.sqrt(1.0) + beta

    def wrong_variable(x, gamma, beta, eps=1e-5):
        a = _axes_of(kind, x)
        mu = x.mean(axis=a, keepdims=True)
        var = x.var(axis=a, keepdims=True)
        x_hat = x - mu
        x_hat / np.sqrt(var + eps)  # computed, not stored
        return gamma * x_hat + beta

    def average_only(x, gamma, beta, eps=1e-5):
        a = _axes_of(kind, x)
        return np.subtract(x, np.average(x, axis=a, keepdims=True)) * gamma + beta

    return {"unused_scale": unused_scale, "divides_by_one": divides_by_one, "scale_cancelled": scale_cancelled,
            "torch_hand": torch_centre_only, "x_hat_centred_only": subtract_twice_named, "loop_hand": loop_centre_only,
            "einsum_hand": einsum_centre_only, "sqrt_one": sqrt_one, "wrong_variable": wrong_variable,
            "average_only": average_only}


def _not_centred_variants(kind):
    def forgot_mu(x, gamma, beta, eps=1e-5):
        a = _axes_of(kind, x)
        var = x.var(axis=a, keepdims=True)
        return gamma * x / np.sqrt(var + eps) + beta

    def mu_unused(x, gamma, beta, eps=1e-5):
        a = _axes_of(kind, x)
        mu = x.mean(axis=a, keepdims=True)
        var = ((x - mu) ** 2).mean(axis=a, keepdims=True)
        x_hat = x / np.sqrt(var + eps)
        return gamma * x_hat + beta

    def torch_no_mean(x, gamma, beta, eps=1e-5):
        t = torch.from_numpy(x)
        dims = (-1,) if kind == "ln" else tuple(range(t.dim() - 1))
        s = torch.sqrt(t.var(dim=dims, keepdim=True, unbiased=False) + eps)
        return (torch.from_numpy(gamma) * t / s + torch.from_numpy(beta)).numpy()

    def std_squared(x, gamma, beta, eps=1e-5):
        a = _axes_of(kind, x)
        return gamma * x / np.sqrt(np.std(x, axis=a, keepdims=True) ** 2 + eps) + beta

    def loop_no_mean(x, gamma, beta, eps=1e-5):
        flat = x.reshape(-1, x.shape[-1])
        out = np.empty_like(flat)
        columns = kind == "bn"
        for i in range(flat.shape[1] if columns else flat.shape[0]):
            g = flat[:, i] if columns else flat[i]
            m = math.fsum(g) / len(g)
            out_row = g / math.sqrt(math.fsum((v - m) ** 2 for v in g) / len(g) + eps)
            if columns:
                out[:, i] = out_row
            else:
                out[i] = out_row
        return gamma * out.reshape(x.shape) + beta

    def einsum_no_mean(x, gamma, beta, eps=1e-5):
        flat = x.reshape(-1, x.shape[-1])
        axis = 1 if kind == "ln" else 0
        c = flat - flat.mean(axis=axis, keepdims=True)
        n = flat.shape[axis]
        var = (np.einsum("nd,nd->n", c, c)[:, None] if kind == "ln" else np.einsum("nd,nd->d", c, c)) / n
        return gamma * (flat / np.sqrt(var + eps)).reshape(x.shape) + beta

    def inverse_no_mean(x, gamma, beta, eps=1e-5):
        a = _axes_of(kind, x)
        inv = 1.0 / np.sqrt(np.var(x, axis=a, keepdims=True) + eps)
        return x * inv * gamma + beta

    def torch_rsqrt_no_mean(x, gamma, beta, eps=1e-5):
        t = torch.from_numpy(x)
        dims = (-1,) if kind == "ln" else tuple(range(t.dim() - 1))
        var, _ = torch.var_mean(t, dim=dims, keepdim=True, unbiased=False)
        return (t * torch.rsqrt(var + eps) * torch.from_numpy(gamma) + torch.from_numpy(beta)).numpy()

    def subtracted_from_wrong_name(x, gamma, beta, eps=1e-5):
        a = _axes_of(kind, x)
        mu = x.mean(axis=a, keepdims=True)
        centred = x - mu
        s = np.sqrt((centred ** 2).mean(axis=a, keepdims=True) + eps)
        return gamma * (x / s) + beta

    def np_divide(x, gamma, beta, eps=1e-5):
        a = _axes_of(kind, x)
        return np.divide(x, np.sqrt(np.var(x, axis=a, keepdims=True) + eps)) * gamma + beta

    return {"np_divide": np_divide, "forgot_mu": forgot_mu, "mu_unused": mu_unused, "torch_hand": torch_no_mean,
            "std_squared": std_squared,
            "loop_hand": loop_no_mean, "einsum_hand": einsum_no_mean, "inverse": inverse_no_mean,
            "torch_rsqrt": torch_rsqrt_no_mean, "wrong_name": subtracted_from_wrong_name}


def _wrong_scale_variants(kind):
    def spread(measure):
        def norm(x, gamma, beta, eps=1e-5):
            a = _axes_of(kind, x)
            mu = x.mean(axis=a, keepdims=True)
            c = x - mu
            n = x.shape[-1] if kind == "ln" else x.size // x.shape[-1]
            s = {
                "twice_std": lambda: 2.0 * np.sqrt((c * c).mean(axis=a, keepdims=True) + eps),
                "range": lambda: x.max(axis=a, keepdims=True) - x.min(axis=a, keepdims=True) + eps,
                "mean_abs": lambda: np.abs(c).mean(axis=a, keepdims=True) + eps,
                "max_abs": lambda: np.abs(c).max(axis=a, keepdims=True) + eps,
                "l2_norm": lambda: np.sqrt((c * c).sum(axis=a, keepdims=True) + eps),
                "sqrt_sqrt_eps": lambda: np.sqrt((c * c).mean(axis=a, keepdims=True)) + np.sqrt(eps),
                "fourth_root": lambda: ((c * c).mean(axis=a, keepdims=True) + eps) ** 0.25,
                "eps_squared": lambda: np.sqrt((c * c).mean(axis=a, keepdims=True) + eps * eps) * 1.001,
                "n_plus_one": lambda: np.sqrt((c * c).sum(axis=a, keepdims=True) / (n + 1) + eps),
                "var_times_std": lambda: np.sqrt((c * c).mean(axis=a, keepdims=True) + eps) ** 1.5,
                "rms": lambda: np.sqrt((x * x).mean(axis=a, keepdims=True) + eps),
                "half_std": lambda: np.sqrt((c * c).mean(axis=a, keepdims=True) + eps) / 2.0,
                "n_minus_two": lambda: np.sqrt((c * c).sum(axis=a, keepdims=True) / (n - 2) + eps),
                "median_abs": lambda: np.median(np.abs(c), axis=a, keepdims=True) + eps,
                "std_plus_one": lambda: np.sqrt((c * c).mean(axis=a, keepdims=True)) + 1.0,
                "cbrt": lambda: ((c * c).mean(axis=a, keepdims=True) + eps) ** (1.0 / 3.0),
                "max_minus_mean": lambda: np.abs(x.max(axis=a, keepdims=True) - mu) + eps,
                "std_plus_var": lambda: np.sqrt((c * c).mean(axis=a, keepdims=True) + eps)
                + (c * c).mean(axis=a, keepdims=True),
            }[measure]()
            return gamma * c / s + beta
        return norm

    measures = ["twice_std", "range", "mean_abs", "max_abs", "l2_norm", "sqrt_sqrt_eps", "fourth_root",
                "eps_squared", "n_plus_one", "var_times_std", "rms", "half_std", "n_minus_two", "median_abs",
                "std_plus_var", "std_plus_one", "cbrt", "max_minus_mean"]
    found = {m: spread(m) for m in measures}

    def torch_mad(x, gamma, beta, eps=1e-5):
        t = torch.from_numpy(x)
        dims = (-1,) if kind == "ln" else tuple(range(t.dim() - 1))
        c = t - t.mean(dim=dims, keepdim=True)
        return (torch.from_numpy(gamma) * c / (c.abs().mean(dim=dims, keepdim=True) + eps)
                + torch.from_numpy(beta)).numpy()

    def loop_half_var(x, gamma, beta, eps=1e-5):
        flat = x.reshape(-1, x.shape[-1])
        out = np.empty_like(flat)
        columns = kind == "bn"
        for i in range(flat.shape[1] if columns else flat.shape[0]):
            g = flat[:, i] if columns else flat[i]
            m = sum(g) / len(g)
            var = sum((v - m) ** 2 for v in g) / len(g)
            row = (g - m) / math.sqrt(var / 2 + eps)
            if columns:
                out[:, i] = row
            else:
                out[i] = row
        return gamma * out.reshape(x.shape) + beta

    def torch_rms(x, gamma, beta, eps=1e-5):
        t = torch.from_numpy(x)
        dims = (-1,) if kind == "ln" else tuple(range(t.dim() - 1))
        c = t - t.mean(dim=dims, keepdim=True)
        return (torch.from_numpy(gamma) * c * torch.rsqrt(t.square().mean(dim=dims, keepdim=True) + eps)
                + torch.from_numpy(beta)).numpy()

    found["torch_mad"] = torch_mad
    found["loop_half_var"] = loop_half_var
    found["torch_rms"] = torch_rms
    return found


def _axis_variants(kind):
    """planted ids, function: statistics over the wrong axes, and (layernorm) reductions without keepdims."""
    found = {}

    def simple(planted, mean, var=None):
        def norm(x, gamma, beta, eps=1e-5):
            mu = mean(x)
            v = var(x) if var is not None else mean((x - mu) ** 2)
            return gamma * (x - mu) / np.sqrt(v + eps) + beta
        return planted, norm

    def torch_simple(planted, dims_of, keep=True):
        def norm(x, gamma, beta, eps=1e-5):
            t = torch.from_numpy(x)
            dims = dims_of(t)
            if dims is None:
                mu, v = t.mean(), t.var(unbiased=False)
            else:
                mu = t.mean(dim=dims, keepdim=keep)
                v = t.var(dim=dims, keepdim=keep, unbiased=False)
            return (torch.from_numpy(gamma) * (t - mu) / torch.sqrt(v + eps) + torch.from_numpy(beta)).numpy()
        return planted, norm

    if kind == "ln":
        wrong, batch, keep = ["wrong_axis"], ["over_batch"], ["no_keepdims"]
        found.update({
            "axis0": simple(wrong, lambda a: a.mean(axis=0, keepdims=True)),
            "axis0_no_keepdims": simple(wrong, lambda a: a.mean(axis=0)),
            "axis0_np_var": simple(wrong, lambda a: np.mean(a, 0), lambda a: np.var(a, 0)),
            "whole": simple(wrong, lambda a: a.mean()),
            "whole_np": simple(wrong, lambda a: np.mean(a), lambda a: np.var(a)),
            "whole_axis_none": simple(wrong, lambda a: a.mean(axis=None)),
            "whole_sum_size": simple(wrong, lambda a: a.sum() / a.size),
            "whole_tuple": simple(wrong, lambda a: a.mean(axis=tuple(range(a.ndim)), keepdims=True)),
            "whole_ravel": simple(wrong, lambda a: a.ravel().mean(), lambda a: np.var(a.ravel())),
            "whole_flatten_loop": simple(wrong, lambda a: sum(float(v) for v in a.flat) / a.size),
            "axis0_tuple": simple(wrong, lambda a: a.mean(axis=(0,), keepdims=True)),
            "whole_np_std": simple(wrong, lambda a: np.mean(a), lambda a: np.std(a) ** 2),
            "torch_whole": torch_simple(wrong, lambda t: None),
            "torch_dim0": torch_simple(wrong, lambda t: 0),
            "torch_dim0_nokeep": torch_simple(wrong, lambda t: 0, keep=False),
            "leading": simple(batch, lambda a: a.mean(axis=tuple(range(a.ndim - 1)), keepdims=True)),
            "leading_no_keepdims": simple(batch, lambda a: a.mean(axis=tuple(range(a.ndim - 1)))),
            "leading_np_var": simple(batch, lambda a: np.mean(a, axis=tuple(range(a.ndim - 1))),
                                     lambda a: np.var(a, axis=tuple(range(a.ndim - 1)))),
            "leading_flat": simple(batch, lambda a: a.reshape(-1, a.shape[-1]).mean(axis=0)),
            "leading_add_reduce": simple(batch, lambda a: np.add.reduce(a, axis=tuple(range(a.ndim - 1)))
                                         / max(a.size // a.shape[-1], 1)),
            "leading_average": simple(batch, lambda a: np.average(a.reshape(-1, a.shape[-1]), axis=0)),
            "mean_no_keepdims": simple(keep, lambda a: a.mean(axis=-1), lambda a: a.var(axis=-1, keepdims=True)),
            "var_no_keepdims": (keep, _ln_var_no_keepdims),
            "both_no_keepdims": simple(keep, lambda a: np.mean(a, axis=-1), lambda a: np.var(a, axis=-1)),
            "sum_no_keepdims": simple(keep, lambda a: a.sum(axis=-1) / a.shape[-1]),
            "std_no_keepdims": (keep, _ln_std_no_keepdims),
            "average_no_keepdims": simple(keep, lambda a: np.average(a, axis=-1)),
            "torch_no_keepdim": torch_simple(keep, lambda t: -1, keep=False),
            "add_reduce": simple(keep, lambda a: np.add.reduce(a, axis=-1) / a.shape[-1]),
            "np_subtract": (keep, lambda x, gamma, beta, eps=1e-5: gamma * np.subtract(x, np.mean(x, axis=-1))
                            / np.sqrt(np.var(x, axis=-1, keepdims=True) + eps) + beta),
            "ndim_minus_one": simple(keep, lambda a: a.mean(axis=a.ndim - 1)),
            "keepdims_false": simple(keep, lambda a: np.mean(a, axis=-1, keepdims=False)),
            "expand_dims_front": simple(keep, lambda a: np.expand_dims(a.mean(axis=-1), 0)),
            "newaxis_front": simple(keep, lambda a: a.mean(axis=-1)[None]),
            "nanmean": simple(keep, lambda a: np.nanmean(a, axis=-1)),
            "mean_var_no_keepdims": simple(keep, lambda a: a.mean(-1), lambda a: a.var(-1)),
            "sum_sq_no_keepdims": simple(keep, lambda a: np.sum(a, axis=-1) / a.shape[-1],
                                         lambda a: np.sum((a - a.mean(-1, keepdims=True)) ** 2, axis=-1) / a.shape[-1]),
            "torch_var_mean": (keep, _ln_torch_var_mean_no_keepdim),
            "torch_std": (keep, _ln_torch_std_no_keepdim),
            "torch_functional_mean": (keep, _ln_torch_functional_no_keepdim),
            "torch_var_no_keepdim": (keep, _ln_torch_var_no_keepdim),
        })
        for style in STYLES:
            found[f"leading_{style}"] = (batch, _over_axes(style, lambda a: tuple(range(a.ndim - 1))))
            found[f"axis0_{style}"] = (wrong, _over_axes(style, lambda a: (0,)))
    else:
        wrong, features = ["wrong_axis"], ["over_features"]
        found.update({
            "axis0": simple(wrong, lambda a: a.mean(axis=0)),
            "axis0_keepdims": simple(wrong, lambda a: a.mean(axis=0, keepdims=True)),
            "axis0_np_var": simple(wrong, lambda a: np.mean(a, 0), lambda a: np.var(a, 0)),
            "positions": simple(wrong, lambda a: a.mean(axis=a.ndim - 2, keepdims=True)),
            "whole": simple(wrong, lambda a: a.mean()),
            "whole_np": simple(wrong, lambda a: np.mean(a), lambda a: np.var(a)),
            "whole_sum": simple(wrong, lambda a: a.sum() / a.size),
            "off_by_one_axes": simple(wrong, lambda a: a.mean(axis=tuple(range(a.ndim - 2)) or None, keepdims=True)),
            "torch_dim0": torch_simple(wrong, lambda t: 0),
            "torch_whole": torch_simple(wrong, lambda t: None),
            "torch_positions": torch_simple(wrong, lambda t: t.dim() - 2),
            "positions_np_var": simple(wrong, lambda a: np.mean(a, axis=1, keepdims=True),
                                       lambda a: np.var(a, axis=1, keepdims=True)),
            "whole_ravel": simple(wrong, lambda a: a.ravel().mean(), lambda a: np.var(a.ravel())),
            "whole_loop": simple(wrong, lambda a: sum(float(v) for v in a.flat) / a.size),
            "axis0_tuple": simple(wrong, lambda a: a.mean(axis=(0,))),
            "first_sequence_axes": simple(wrong, lambda a: a.mean(axis=tuple(range(1, a.ndim - 1)) or (0,),
                                                                  keepdims=True)),
            "last": simple(features, lambda a: a.mean(axis=-1, keepdims=True)),
            "last_np_var": simple(features, lambda a: np.mean(a, -1, keepdims=True),
                                  lambda a: np.var(a, -1, keepdims=True)),
            "last_sum": simple(features, lambda a: a.sum(axis=-1, keepdims=True) / a.shape[-1]),
            "layernorm_reused": (features, impl.ln_keepdims),
            "layernorm_fsum_reused": (features, impl.ln_rows_fsum),
            "torch_last": torch_simple(features, lambda t: -1),
            "torch_last_tuple": torch_simple(features, lambda t: (t.dim() - 1,)),
        })
        for style in STYLES:
            found[f"last_{style}"] = (features, _over_axes(style, lambda a: (a.ndim - 1,)))
            found[f"axis0_{style}"] = (wrong, _over_axes(style, lambda a: (0,)))
    return found


def _over_axes(style, axes_of):
    """A normalisation with the right formula over ``axes_of(x)``, written in ``style``."""
    def norm(x, gamma, beta, eps=1e-5):
        axes = axes_of(x)
        if style in ("numpy", "einsum"):
            mu = x.mean(axis=axes, keepdims=True)
            var = ((x - mu) ** 2).mean(axis=axes, keepdims=True)
            return gamma * (x - mu) / np.sqrt(var + eps) + beta
        if style == "npvar":
            return gamma * (x - np.mean(x, axis=axes, keepdims=True)) / np.sqrt(np.var(x, axis=axes, keepdims=True)
                                                                                + eps) + beta
        if style == "torch":
            t = torch.from_numpy(x)
            mu = t.mean(dim=axes, keepdim=True) if axes else t
            var = t.var(dim=axes, keepdim=True, unbiased=False) if axes else torch.zeros_like(t)
            return (torch.from_numpy(gamma) * (t - mu) / torch.sqrt(var + eps) + torch.from_numpy(beta)).numpy()
        # loop: move the reduced axes to the front, flatten them, loop over what is left
        moved = np.moveaxis(x, axes, tuple(range(len(axes)))) if axes else x[None]
        k = int(np.prod([x.shape[a] for a in axes])) if axes else 1
        flat = moved.reshape(k, -1)
        out = np.empty_like(flat)
        for j in range(flat.shape[1]):
            column = [float(v) for v in flat[:, j]]
            m = sum(column) / k
            var = sum((v - m) ** 2 for v in column) / k
            out[:, j] = [(v - m) / math.sqrt(var + eps) for v in column]
        out = out.reshape(moved.shape)
        out = np.moveaxis(out, tuple(range(len(axes))), axes) if axes else out[0]
        return gamma * out + beta
    return norm


def _ln_var_no_keepdims(x, gamma, beta, eps=1e-5):
    mu = x.mean(axis=-1, keepdims=True)
    return gamma * (x - mu) / np.sqrt(((x - mu) ** 2).mean(axis=-1) + eps) + beta


def _ln_std_no_keepdims(x, gamma, beta, eps=1e-5):
    mu = np.mean(x, axis=-1, keepdims=True)
    return gamma * (x - mu) / np.sqrt(np.std(x, axis=-1) ** 2 + eps) + beta


def _ln_torch_var_mean_no_keepdim(x, gamma, beta, eps=1e-5):
    t = torch.from_numpy(x)
    var, mu = torch.var_mean(t, dim=-1, unbiased=False)
    return (torch.from_numpy(gamma) * (t - mu) / torch.sqrt(var + eps) + torch.from_numpy(beta)).numpy()


def _ln_torch_std_no_keepdim(x, gamma, beta, eps=1e-5):
    t = torch.from_numpy(x)
    mu = t.mean(dim=-1, keepdim=True)
    return (torch.from_numpy(gamma) * (t - mu) / torch.sqrt(t.std(dim=-1, unbiased=False) ** 2 + eps)
            + torch.from_numpy(beta)).numpy()


def _ln_torch_functional_no_keepdim(x, gamma, beta, eps=1e-5):
    t = torch.from_numpy(x)
    mu = torch.mean(t, -1)
    return (torch.from_numpy(gamma) * (t - mu) / torch.sqrt(torch.var(t, -1, keepdim=True, unbiased=False) + eps)
            + torch.from_numpy(beta)).numpy()


def _ln_torch_var_no_keepdim(x, gamma, beta, eps=1e-5):
    t = torch.from_numpy(x)
    mu = t.mean(dim=-1, keepdim=True)
    v = t.var(dim=-1, unbiased=False)
    return (torch.from_numpy(gamma) * (t - mu) / torch.sqrt(v + eps) + torch.from_numpy(beta)).numpy()


# ====================================================================== leaks_future
def _noise_change(x, t):
    changed = x.copy()
    later = changed[:, t + 1:]
    later += 1.0 + np.random.default_rng(1).standard_normal(later.shape) ** 2
    return changed


def _plus_one(x, t):
    changed = x.copy()
    changed[:, t + 1:] += 1.0
    return changed


def _concat(x, t):
    return np.concatenate([x[:, : t + 1], x[:, t + 1:] + 2.5], axis=1)


def _replace_random(x, t):
    changed = np.array(x, copy=True)
    changed[:, t + 1:] = 3.0 + np.abs(np.random.default_rng(7).standard_normal(changed[:, t + 1:].shape))
    return changed


GOOD_CHANGES = {"noise": _noise_change, "plus_one": _plus_one, "concat": _concat, "replace": _replace_random}


def _prefix(out, t):
    return out[:, : t + 1]


def _exact(a, b):
    return not np.array_equal(a, b)


def _probe(change, differ=_exact, select=_prefix, name="leaks_future"):
    def leaks_future(norm, x, t):
        return bool(differ(select(norm(x), t), select(norm(change(x, t)), t)))
    leaks_future.__name__ = leaks_future.__qualname__ = name
    return leaks_future


def _truncating(differ=_exact, select=_prefix, keep=None):
    """Run norm on the prefix alone and compare with the prefix of the full output."""
    def leaks_future(norm, x, t):
        stop = t + 1 if keep is None else keep(t)
        return bool(differ(select(norm(x), t), select(norm(x[:, :stop]), t)))
    return leaks_future


def _per_position(change, positions, differ=_exact):
    """Compare output position by position over ``positions(t, T)``."""
    def leaks_future(norm, x, t):
        before, after = norm(x), norm(change(x, t))
        return any(differ(before[:, s], after[:, s]) for s in positions(t, x.shape[1]))
    return leaks_future


def _torch_probe(change, select=lambda a, t: a[:, : t + 1], differ=lambda a, b: not torch.equal(a, b)):
    def leaks_future(norm, x, t):
        a = torch.from_numpy(np.asarray(norm(x)))
        b = torch.from_numpy(np.asarray(norm(change(x, t))))
        return bool(differ(select(a, t), select(b, t)))
    return leaks_future


def _tolerances():
    """Comparisons that forgive a difference of 1e-11 (each returns True for 'different')."""
    def torch_close(a, b):
        try:
            torch.testing.assert_close(torch.from_numpy(a), torch.from_numpy(b))
        except AssertionError:
            return True
        return False

    def np_testing(a, b):
        try:
            np.testing.assert_allclose(a, b, rtol=1e-9)
        except AssertionError:
            return True
        return False

    return {
        "allclose": lambda a, b: not np.allclose(a, b),
        "allclose_tight": lambda a, b: not np.allclose(a, b, rtol=1e-9, atol=1e-10),
        "isclose_all": lambda a, b: not np.isclose(a, b).all(),
        "abs_diff": lambda a, b: bool(np.max(np.abs(a - b), initial=0.0) > 1e-9),
        "rel_diff": lambda a, b: bool(np.max(np.abs(a - b) / (np.abs(a) + 1e-12), initial=0.0) > 1e-10),
        "float32": lambda a, b: not np.array_equal(a.astype(np.float32), b.astype(np.float32)),
        "round": lambda a, b: not np.array_equal(np.round(a, 8), np.round(b, 8)),
        "math_isclose": lambda a, b: not all(math.isclose(p, q) for p, q in zip(a.ravel(), b.ravel(), strict=True)),
        "torch_allclose": lambda a, b: not torch.allclose(torch.from_numpy(a), torch.from_numpy(b)),
        "torch_assert_close": torch_close,
        "np_testing": np_testing,
        "norm_of_diff": lambda a, b: bool(np.linalg.norm(a - b) > 1e-8 * max(np.linalg.norm(a), 1.0)),
    }


def _probe_mutants():
    made = []

    def add(planted, function, label):
        made.append(mutant(NB, "leaks_future", planted, function, f"causal/{label}"))

    # ---------------------------------------------------------------- norm never called
    not_called = {
        "always_false": lambda norm, x, t: False,
        "always_true": lambda norm, x, t: True,
        "not_last": lambda norm, x, t: t < x.shape[1] - 1,
        "future_nonzero": lambda norm, x, t: bool(np.any(x[:, t + 1:])),
        "future_size": lambda norm, x, t: x[:, t + 1:].size > 0,
        "callable": lambda norm, x, t: callable(norm),
        "compares_inputs": lambda norm, x, t: not np.array_equal(x[:, : t + 1], x[:, : t + 1]),
        "np_false": lambda norm, x, t: np.bool_(False),
        "first_half": lambda norm, x, t: t < x.shape[1] // 2,
        "batch_gt_one": lambda norm, x, t: x.shape[0] > 1,
        "name_check": lambda norm, x, t: "batch" in getattr(norm, "__name__", ""),
        "even_t": lambda norm, x, t: t % 2 == 0,
        "future_changed_copy": lambda norm, x, t: not np.array_equal(_plus_one(x, t), x),
        "shape_check": lambda norm, x, t: x.ndim == 3,
        "mean_future": lambda norm, x, t: bool(abs(x[:, t + 1:].mean()) > 0) if t + 1 < x.shape[1] else False,
        "zero_t": lambda norm, x, t: t == 0,
        "none_future": lambda norm, x, t: x[:, t + 1:] is None,
        "std_check": lambda norm, x, t: bool(np.std(x) > 0),
        "nonneg": lambda norm, x, t: bool(np.all(x >= 0)),
        "len_check": lambda norm, x, t: len(x) > t,
    }
    for label, function in not_called.items():
        add("causal.norm_not_called", function, f"not_called/{label}")

    # ---------------------------------------------------------------- not one True or False
    def per_position(norm, x, t):
        return np.any(norm(x)[:, : t + 1] != norm(_plus_one(x, t))[:, : t + 1], axis=(0, 2))

    not_bool = {
        "per_position": per_position,
        "elementwise": lambda norm, x, t: norm(x)[:, : t + 1] != norm(_plus_one(x, t))[:, : t + 1],
        "max_diff": lambda norm, x, t: float(np.max(np.abs(norm(x)[:, : t + 1] - norm(_plus_one(x, t))[:, : t + 1]))),
        "np_max_diff": lambda norm, x, t: np.max(np.abs(norm(x)[:, : t + 1] - norm(_noise_change(x, t))[:, : t + 1])),
        "count": lambda norm, x, t: np.sum(norm(x)[:, : t + 1] != norm(_plus_one(x, t))[:, : t + 1]),
        "int": lambda norm, x, t: int(not np.array_equal(norm(x)[:, : t + 1], norm(_plus_one(x, t))[:, : t + 1])),
        "zero_d_array": lambda norm, x, t: np.array(not np.array_equal(norm(x)[:, : t + 1],
                                                                         norm(_concat(x, t))[:, : t + 1])),
        "string": lambda norm, x, t: "True" if not np.array_equal(norm(x)[:, : t + 1],
                                                                  norm(_plus_one(x, t))[:, : t + 1]) else "False",
        "tuple": lambda norm, x, t: (not np.array_equal(norm(x)[:, : t + 1], norm(_plus_one(x, t))[:, : t + 1]),),
        "list": lambda norm, x, t: [bool(v) for v in per_position(norm, x, t)],
        "torch_any": lambda norm, x, t: (torch.from_numpy(norm(x)[:, : t + 1])
                                         != torch.from_numpy(norm(_plus_one(x, t))[:, : t + 1])).any(),
        "torch_ne": lambda norm, x, t: torch.ne(torch.from_numpy(norm(x)), torch.from_numpy(norm(_concat(x, t)))),
        "diff_array": lambda norm, x, t: norm(x)[:, : t + 1] - norm(_plus_one(x, t))[:, : t + 1],
        "float_flag": lambda norm, x, t: float(not np.array_equal(norm(x)[:, : t + 1],
                                                                  norm(_replace_random(x, t))[:, : t + 1])),
        "np_sum_bool": lambda norm, x, t: np.sum(per_position(norm, x, t)),
        "nonzero": lambda norm, x, t: np.nonzero(per_position(norm, x, t))[0],
        "where": lambda norm, x, t: np.where(per_position(norm, x, t))[0],
        "any_axis1": lambda norm, x, t: np.any(norm(x)[:, : t + 1] != norm(_noise_change(x, t))[:, : t + 1], axis=1),
        "dict": lambda norm, x, t: {"leaks": not np.array_equal(norm(x)[:, : t + 1],
                                                                 norm(_plus_one(x, t))[:, : t + 1])},
        "norm_of_diff": lambda norm, x, t: np.linalg.norm(norm(x)[:, : t + 1] - norm(_plus_one(x, t))[:, : t + 1]),
    }
    for label, function in not_bool.items():
        add("causal.not_a_bool", function, f"not_a_bool/{label}")

    # ---------------------------------------------------------------- what is changed
    def changing(region, amount=1.0):
        def change(x, t):
            changed = x.copy()
            changed[region(x, t)] += amount
            return changed
        return change

    past = {
        "from_t": lambda x, t: (slice(None), slice(t, None)),
        "everything": lambda x, t: (slice(None), slice(None)),
        "prefix": lambda x, t: (slice(None), slice(0, t + 1)),
        "position_t": lambda x, t: (slice(None), t),
        "from_t_minus_one": lambda x, t: (slice(None), slice(max(t - 1, 0), None)),
        "ellipsis_from_t": lambda x, t: (Ellipsis, slice(t, None), slice(None)),
        "last_only_wraps": lambda x, t: (slice(None), slice(-(x.shape[1] - t), None)),
    }
    for label, region in past.items():
        add("causal.changed_past", _probe(changing(region)), f"changed_past/{label}")
        add("causal.changed_past", _probe(changing(region, np.pi)), f"changed_past/{label}/pi")
        add("causal.changed_past", _torch_probe(changing(region, 0.5)), f"changed_past/{label}/torch")

    def no_op(x, t):
        changed = x.copy()
        changed[:, t + 1:] + 1.0  # computed, not stored
        return changed

    def tiny(x, t):
        changed = x.copy()
        changed[:, t + 1:] += 1e-300
        return changed

    def times_one(x, t):
        changed = x.copy()
        changed[:, t + 1:] *= 1.0
        return changed

    def reassigned(x, t):
        changed = x.copy()
        changed[:, t + 1:] = x[:, t + 1:]
        return changed

    def np_add_no_out(x, t):
        changed = np.copy(x)
        np.add(changed[:, t + 1:], 1.0)
        return changed

    def copy_of_future_changed(x, t):
        changed = x.copy()
        future = changed[:, t + 1:].copy()
        future += 1.0
        return changed

    def plus_zero(x, t):
        return x + 0.0

    def rounded_change(x, t):
        changed = x.copy()
        changed[:, t + 1:] += 1e-17 * np.abs(x[:, t + 1:])
        return changed

    def changed_then_overwritten(x, t):
        changed = x.copy()
        changed[:, t + 1:] += 1.0
        changed = x.copy()
        return changed

    def changed_list(x, t):
        changed = x.copy()
        rows = list(changed[:, t + 1:].ravel())
        rows = [r + 1.0 for r in rows]  # a changed list that is never written back
        return changed

    no_changes = {"no_op": no_op, "tiny": tiny, "times_one": times_one, "reassigned": reassigned,
                  "np_add_no_out": np_add_no_out, "copy_of_future": copy_of_future_changed, "plus_zero": plus_zero,
                  "rounded": rounded_change, "overwritten": changed_then_overwritten, "list": changed_list}
    for label, change in no_changes.items():
        add("causal.no_change", _probe(change), f"no_change/{label}")
        add("causal.no_change", _torch_probe(change), f"no_change/{label}/torch")

    def setting(value_of):
        def change(x, t):
            changed = x.copy()
            changed[:, t + 1:] = value_of(changed[:, t + 1:])
            return changed
        return change

    zeros = {
        "zero_fill": lambda f: 0.0,
        "zeros_like": lambda f: np.zeros_like(f),
        "times_two": lambda f: 2.0 * f,
        "negated": lambda f: -f,
        "times_noise": lambda f: f * (1.0 + np.abs(np.random.default_rng(3).standard_normal(f.shape))),
        "cubed": lambda f: f ** 3,
        "sin": lambda f: np.sin(f),
        "tanh": lambda f: np.tanh(f),
        "times_ten": lambda f: f * 10.0,
        "sign": lambda f: np.sign(f),
    }
    for label, value_of in zeros.items():
        add("causal.change_can_be_zero", _probe(setting(value_of)), f"zero/{label}")
        add("causal.change_can_be_zero", _torch_probe(setting(value_of)), f"zero/{label}/torch")

    def next_token(amount):
        def change(x, t):
            changed = x.copy()
            if t + 1 < x.shape[1]:
                changed[:, t + 1] += amount
            return changed
        return change

    def next_slice(x, t):
        changed = x.copy()
        changed[:, t + 1: t + 2] = changed[:, t + 1: t + 2] * 3.0 + 1.0
        return changed

    def next_concat(x, t):
        return np.concatenate([x[:, : t + 1], x[:, t + 1: t + 2] + 1.0, x[:, t + 2:]], axis=1)

    for amount in (1.0, 0.5, 10.0, -2.0):
        add("causal.only_next_token", _probe(next_token(amount)), f"next_token/{amount}")
        add("causal.only_next_token", _torch_probe(next_token(amount)), f"next_token/{amount}/torch")
        add("causal.only_next_token", _per_position(next_token(amount), lambda t, T: range(t + 1)),
            f"next_token/{amount}/per_position")
    add("causal.only_next_token", _probe(next_token(3.0), differ=lambda a, b: bool(np.any(a != b))),
        "next_token/any_ne")
    add("causal.only_next_token", _per_position(next_token(2.0), lambda t, T: range(t, -1, -1)),
        "next_token/per_position_reversed")
    for label, change in {"slice": next_slice, "concat": next_concat}.items():
        add("causal.only_next_token", _probe(change), f"next_token/{label}")
        add("causal.only_next_token", _torch_probe(change), f"next_token/{label}/torch")
        add("causal.only_next_token", _per_position(change, lambda t, T: range(t + 1)),
            f"next_token/{label}/per_position")

    # ---------------------------------------------------------------- how it compares
    for label, differ in _tolerances().items():
        change_label, change = list(GOOD_CHANGES.items())[len(label) % len(GOOD_CHANGES)]
        add("causal.tolerant_comparison", _probe(change, differ), f"tolerant/{label}/{change_label}")
        add("causal.tolerant_comparison", _truncating(differ), f"tolerant/{label}/truncate")
    add("causal.tolerant_comparison", _probe(changing(lambda x, t: (slice(None), slice(t + 1, None)), 1e6),
                                             _tolerances()["allclose"]), "tolerant/allclose/huge_change")

    only_t = {
        "index_t": lambda out, t: out[:, t],
        "slice_t": lambda out, t: out[:, t: t + 1],
        "index_zero": lambda out, t: out[:, 0],
        "ellipsis_t": lambda out, t: out[..., t, :],
        "take_t": lambda out, t: np.take(out, t, axis=1),
    }
    for label, select in only_t.items():
        for change_label, change in list(GOOD_CHANGES.items())[:3]:
            add("causal.earlier_positions_skipped", _probe(change, select=select),
                f"earlier_skipped/{label}/{change_label}")
    add("causal.earlier_positions_skipped", _per_position(_plus_one, lambda t, T: [t]), "earlier_skipped/loop_t")
    add("causal.earlier_positions_skipped", _truncating(select=lambda out, t: out[:, t]),
        "earlier_skipped/truncate_t")
    add("causal.earlier_positions_skipped", _torch_probe(_noise_change, select=lambda a, t: a[:, t]),
        "earlier_skipped/torch_t")
    add("causal.earlier_positions_skipped", _torch_probe(_concat, select=lambda a, t: a.select(1, t)),
        "earlier_skipped/torch_select")
    add("causal.earlier_positions_skipped", _per_position(_concat, lambda t, T: [0]), "earlier_skipped/loop_zero")

    without_t = {
        "stop_t": lambda out, t: out[:, :t],
        "from_one": lambda out, t: out[:, 1: t + 1],
        "stop_t_ellipsis": lambda out, t: out[..., :t, :],
        "stop_max_t_1": lambda out, t: out[:, : max(t, 1)],
    }
    for label, select in without_t.items():
        for change_label, change in list(GOOD_CHANGES.items())[:3]:
            add("causal.position_t_skipped", _probe(change, select=select), f"t_skipped/{label}/{change_label}")
    add("causal.position_t_skipped", _per_position(_plus_one, lambda t, T: range(t)), "t_skipped/loop_range_t")
    add("causal.position_t_skipped", _truncating(select=lambda out, t: out[:, :t]), "t_skipped/truncate_stop_t")
    add("causal.position_t_skipped", _torch_probe(_noise_change, select=lambda a, t: a[:, :t]), "t_skipped/torch")
    add("causal.position_t_skipped", _per_position(_concat, lambda t, T: range(1, t + 1)), "t_skipped/loop_from_one")
    add("causal.position_t_skipped", _torch_probe(_concat, select=lambda a, t: a.narrow(1, 0, t)),
        "t_skipped/torch_narrow")
    add("causal.position_t_skipped", _per_position(_replace_random, lambda t, T: range(t)), "t_skipped/loop_replace")
    add("causal.position_t_skipped", _probe(_replace_random, select=lambda out, t: out[:, :t]),
        "t_skipped/stop_t/replace")
    add("causal.position_t_skipped", _probe(_plus_one, differ=lambda a, b: bool(np.any(a != b)),
                                            select=lambda out, t: out[:, 0:t]), "t_skipped/zero_to_t/any_ne")

    future = {
        "everything": lambda out, t: out,
        "from_t": lambda out, t: out[:, t:],
        "after_t": lambda out, t: out[:, t + 1:],
        "batch_axis": lambda out, t: out[: t + 1],
        "one_extra": lambda out, t: out[:, : t + 2],
    }
    for label, select in future.items():
        for change_label, change in list(GOOD_CHANGES.items())[:3]:
            add("causal.compares_future", _probe(change, select=select), f"compares_future/{label}/{change_label}")
    add("causal.compares_future", _per_position(_plus_one, lambda t, T: range(T)), "compares_future/loop_all")
    add("causal.compares_future", _torch_probe(_noise_change, select=lambda a, t: a), "compares_future/torch_all")
    add("causal.compares_future", _torch_probe(_concat, select=lambda a, t: a[:, t:]), "compares_future/torch_from_t")
    add("causal.compares_future", _per_position(_replace_random, lambda t, T: range(t, T)),
        "compares_future/loop_from_t")
    add("causal.compares_future", _probe(_replace_random, select=lambda out, t: out),
        "compares_future/everything/replace")

    # ---------------------------------------------------------------- a True at the last position
    def says_true_at_end(base, condition):
        def leaks_future(norm, x, t):
            answer = base(norm, x, t)
            return True if condition(x, t) else answer
        return leaks_future

    conditions = {
        "t_eq_last": lambda x, t: t == x.shape[1] - 1,
        "t_plus_one_eq_T": lambda x, t: t + 1 == x.shape[1],
        "future_empty": lambda x, t: x[:, t + 1:].size == 0,
        "t_ge_last": lambda x, t: t >= x.shape[1] - 1,
    }
    bases = {"noise": _probe(_noise_change), "plus_one": _probe(_plus_one), "truncate": _truncating(),
             "torch": _torch_probe(_concat), "per_position": _per_position(_plus_one, lambda t, T: range(t + 1))}
    for label, condition in conditions.items():
        for base_label, base in bases.items():
            add("causal.last_position", says_true_at_end(base, condition), f"last_position/{label}/{base_label}")
    return made


# ====================================================================== correct variants
def ln_einsum(x, gamma, beta, eps=1e-5):
    d = x.shape[-1]
    flat = x.reshape(-1, d)
    mu = np.einsum("nd->n", flat) / d
    c = flat - mu[:, None]
    var = np.einsum("nd,nd->n", c, c) / d
    return (gamma * c / np.sqrt(var + eps)[:, None] + beta).reshape(x.shape)


def ln_loop_float64(x, gamma, beta, eps=1e-5):
    d = x.shape[-1]
    rows = x.reshape(-1, d)
    out = np.empty_like(rows)
    for i in range(rows.shape[0]):
        row = [float(v) for v in rows[i]]
        m = sum(row) / d
        var = sum((v - m) * (v - m) for v in row) / d
        s = math.sqrt(var + eps)
        out[i] = [float(gamma[j]) * (row[j] - m) / s + float(beta[j]) for j in range(d)]
    return out.reshape(x.shape)


def ln_torch(x, gamma, beta, eps=1e-5):
    t = torch.from_numpy(x)
    mu = t.mean(dim=-1, keepdim=True)
    var = ((t - mu) ** 2).mean(dim=-1, keepdim=True)
    return (torch.from_numpy(gamma) * (t - mu) * torch.rsqrt(var + eps) + torch.from_numpy(beta)).numpy()


def ln_torch_var(x, gamma, beta, eps=1e-5):
    t = torch.as_tensor(x, dtype=torch.float64)
    var, mu = torch.var_mean(t, dim=-1, keepdim=True, unbiased=False)
    return torch.addcmul(torch.from_numpy(beta), torch.from_numpy(gamma), (t - mu) / torch.sqrt(var + eps)).numpy()


def ln_matmul(x, gamma, beta, eps=1e-5):
    d = x.shape[-1]
    centring = np.eye(d) - np.full((d, d), 1.0 / d)
    c = x @ centring
    var = (c * c) @ np.full(d, 1.0 / d)
    return gamma * c / np.sqrt(var + eps)[..., None] + beta


def ln_std_squared(x, gamma, beta, eps=1e-5):
    mu = np.mean(x, axis=-1, keepdims=True)
    return gamma * ((x - mu) / np.sqrt(np.std(x, axis=-1, keepdims=True) ** 2 + eps)) + beta


def ln_inverse(x, gamma, beta, eps=1e-5):
    mu = np.add.reduce(x, axis=-1, keepdims=True) / x.shape[-1]
    c = np.subtract(x, mu)
    inv = 1.0 / np.sqrt(np.add.reduce(c * c, axis=-1, keepdims=True) / x.shape[-1] + eps)
    return c * inv * gamma + beta


def ln_apply_along_axis(x, gamma, beta, eps=1e-5):
    def one(token):
        m = math.fsum(token) / token.size
        return (token - m) / math.sqrt(math.fsum((token - m) ** 2) / token.size + eps)
    return gamma * np.apply_along_axis(one, -1, x) + beta


def ln_average(x, gamma, beta, eps=1e-5):
    mu = np.average(x, axis=-1)[..., np.newaxis]
    var = np.average((x - mu) ** 2, axis=-1)[..., np.newaxis]
    return np.multiply(gamma, x - mu) / np.sqrt(var + eps) + beta


def ln_moveaxis(x, gamma, beta, eps=1e-5):
    """Features first, statistics over axis 0, then back."""
    xt = np.moveaxis(x, -1, 0)
    mu = xt.mean(axis=0)
    var = ((xt - mu) ** 2).mean(axis=0)
    return gamma * np.moveaxis((xt - mu) / np.sqrt(var + eps), 0, -1) + beta


def bn_einsum(x, gamma, beta, eps=1e-5):
    d = x.shape[-1]
    flat = x.reshape(-1, d)
    n = flat.shape[0]
    mu = np.einsum("nd->d", flat) / n
    c = flat - mu
    var = np.einsum("nd,nd->d", c, c) / n
    return (gamma * c / np.sqrt(var + eps) + beta).reshape(x.shape)


def bn_loop_float64(x, gamma, beta, eps=1e-5):
    d = x.shape[-1]
    flat = x.reshape(-1, d)
    out = np.empty_like(flat)
    for j in range(d):
        column = [float(v) for v in flat[:, j]]
        m = sum(column) / len(column)
        var = sum((v - m) ** 2 for v in column) / len(column)
        out[:, j] = [float(gamma[j]) * (v - m) / math.sqrt(var + eps) + float(beta[j]) for v in column]
    return out.reshape(x.shape)


def bn_fsum(x, gamma, beta, eps=1e-5):
    d = x.shape[-1]
    flat = x.reshape(-1, d)
    out = np.empty_like(flat)
    for j in range(d):
        column = flat[:, j]
        m = math.fsum(column) / column.size
        var = math.fsum((column - m) ** 2) / column.size
        out[:, j] = (column - m) / math.sqrt(var + eps)
    return gamma * out.reshape(x.shape) + beta


def bn_torch(x, gamma, beta, eps=1e-5):
    t = torch.from_numpy(x)
    dims = tuple(range(t.dim() - 1))
    var, mu = torch.var_mean(t, dim=dims, keepdim=True, unbiased=False)
    return (torch.from_numpy(gamma) * (t - mu) / torch.sqrt(var + eps) + torch.from_numpy(beta)).numpy()


def bn_torch_flat(x, gamma, beta, eps=1e-5):
    t = torch.from_numpy(x).reshape(-1, x.shape[-1])
    mu = t.mean(dim=0)
    var = ((t - mu) ** 2).mean(dim=0)
    out = (t - mu) * torch.rsqrt(var + eps) * torch.from_numpy(gamma) + torch.from_numpy(beta)
    return out.reshape(x.shape).numpy()


def bn_np_var(x, gamma, beta, eps=1e-5):
    axes = tuple(range(x.ndim - 1))
    return np.multiply(gamma, np.divide(x - np.mean(x, axis=axes, keepdims=True),
                                        np.sqrt(np.var(x, axis=axes, keepdims=True) + eps))) + beta


def bn_matmul(x, gamma, beta, eps=1e-5):
    flat = x.reshape(-1, x.shape[-1])
    w = np.full(flat.shape[0], 1.0 / flat.shape[0])
    mu = w @ flat
    var = w @ ((flat - mu) ** 2)
    return ((flat - mu) / np.sqrt(var + eps) * gamma + beta).reshape(x.shape)


def bn_transpose(x, gamma, beta, eps=1e-5):
    """Features first: each row of the transposed flat array is one feature's values."""
    rows = x.reshape(-1, x.shape[-1]).T
    mu = rows.mean(axis=1, keepdims=True)
    var = ((rows - mu) ** 2).mean(axis=1, keepdims=True)
    return ((gamma[:, None] * (rows - mu) / np.sqrt(var + eps) + beta[:, None]).T).reshape(x.shape)


def bn_sum_count(x, gamma, beta, eps=1e-5):
    axes = tuple(range(x.ndim - 1))
    n = x.size // x.shape[-1]
    mu = x.sum(axis=axes) / n
    var = np.square(x - mu).sum(axis=axes) / n
    return (x - mu) * (gamma / np.sqrt(var + eps)) + beta


def bn_moveaxis(x, gamma, beta, eps=1e-5):
    xt = np.moveaxis(x, -1, 0)
    axes = tuple(range(1, x.ndim))
    mu = xt.mean(axis=axes, keepdims=True)
    var = xt.var(axis=axes, keepdims=True)
    column = (-1,) + (1,) * (x.ndim - 1)
    return np.moveaxis(gamma.reshape(column) * (xt - mu) / np.sqrt(var + eps) + beta.reshape(column), 0, -1)


def probe_torch_equal(norm, x, t):
    changed = torch.from_numpy(x).clone()
    changed[:, t + 1:] += 2.0
    a = torch.from_numpy(norm(x))[:, : t + 1]
    b = torch.from_numpy(norm(changed.numpy()))[:, : t + 1]
    return not torch.equal(a, b)


def probe_per_position_exact(norm, x, t):
    changed = x.copy()
    changed[:, t + 1:] += 1.0 + np.abs(np.random.default_rng(5).standard_normal(changed[:, t + 1:].shape))
    before, after = norm(x), norm(changed)
    return any(not np.array_equal(before[:, s], after[:, s]) for s in range(t + 1))


def probe_truncate_torch(norm, x, t):
    return not torch.equal(torch.from_numpy(norm(x)[:, : t + 1]), torch.from_numpy(norm(x[:, : t + 1].copy())))


def probe_affine_change(norm, x, t):
    changed = x.copy()
    changed[:, t + 1:] = 2.0 * changed[:, t + 1:] + 1.0
    return bool(np.any(norm(x)[:, : t + 1] != norm(changed)[:, : t + 1]))


def probe_where_zero(norm, x, t):
    future = x[:, t + 1:]
    changed = np.concatenate([x[:, : t + 1], np.where(future == 0, 1.0, -3.0 * future)], axis=1)
    return not (norm(x)[:, : t + 1] == norm(changed)[:, : t + 1]).all()


def probe_bytes(norm, x, t):
    changed = x.copy()
    changed[:, t + 1:] += 1.0
    before = np.ascontiguousarray(norm(x)[:, : t + 1]).tobytes()
    return before != np.ascontiguousarray(norm(changed)[:, : t + 1]).tobytes()


def probe_several_trials(norm, x, t):
    rng = np.random.default_rng(11)
    base = norm(x)[:, : t + 1]
    for _ in range(3):
        changed = x.copy()
        changed[:, t + 1:] += 1.0 + rng.random(changed[:, t + 1:].shape)
        if not np.array_equal(base, norm(changed)[:, : t + 1]):
            return True
    return False


def probe_max_abs_diff(norm, x, t):
    changed = _concat(x, t)
    return float(np.max(np.abs(norm(x)[:, : t + 1] - norm(changed)[:, : t + 1]))) > 0.0


def probe_torch_cat(norm, x, t):
    tx = torch.from_numpy(x)
    changed = torch.cat([tx[:, : t + 1], tx[:, t + 1:] + 1.5], dim=1).numpy()
    return bool((torch.from_numpy(norm(x))[:, : t + 1] != torch.from_numpy(norm(changed))[:, : t + 1]).any())


def probe_big_change(norm, x, t):
    changed = x.copy()
    changed[:, t + 1:] += 1e3
    return not np.array_equal(norm(x)[:, : t + 1], norm(changed)[:, : t + 1])


def probe_loop_positions_exact(norm, x, t):
    before = norm(x)
    for j in range(t + 1, x.shape[1]):
        changed = x.copy()
        changed[:, j:] += 1.0
        after = norm(changed)
        for s in range(t + 1):
            if not np.array_equal(before[:, s], after[:, s]):
                return True
    return False


CORRECT_LAYERNORMS = [ln_einsum, ln_loop_float64, ln_torch, ln_torch_var, ln_matmul, ln_std_squared, ln_inverse,
                      ln_apply_along_axis, ln_average, ln_moveaxis]
CORRECT_BATCH_NORMS = [bn_einsum, bn_loop_float64, bn_fsum, bn_torch, bn_torch_flat, bn_np_var, bn_matmul,
                       bn_transpose, bn_sum_count, bn_moveaxis]
CORRECT_PROBES = [probe_torch_equal, probe_per_position_exact, probe_truncate_torch, probe_affine_change,
                  probe_where_zero, probe_bytes, probe_several_trials, probe_max_abs_diff, probe_torch_cat,
                  probe_big_change, probe_loop_positions_exact]


def _correct():
    found = []
    tables = [("layernorm", impl.CORRECT_LAYERNORMS + CORRECT_LAYERNORMS),
              ("batch_norm", impl.CORRECT_BATCH_NORMS + CORRECT_BATCH_NORMS),
              ("leaks_future", impl.CORRECT_PROBES + CORRECT_PROBES)]
    for exercise, functions in tables:
        found.append(Correct(NB, exercise, solution(NB, exercise), f"{exercise}/solution"))
        for function in functions:
            found.append(Correct(NB, exercise, function, f"{exercise}/{function.__name__}"))
    kinds = {"ln": "layernorm", "bn": "batch_norm"}
    for kind, exercise in kinds.items():  # the builder's own correct choices, in every style
        for style in STYLES:
            found.append(Correct(NB, exercise, _norm(kind, style), f"{exercise}/builder/{style}"))
            found.append(Correct(NB, exercise, _norm(kind, style, affine="right_fma"),
                                 f"{exercise}/builder/{style}/fma"))
    for label, change in GOOD_CHANGES.items():  # the probe builders' correct choices
        found.append(Correct(NB, "leaks_future", _probe(change), f"leaks_future/builder/{label}"))
        found.append(Correct(NB, "leaks_future", _torch_probe(change), f"leaks_future/builder/{label}/torch"))
        found.append(Correct(NB, "leaks_future", _per_position(change, lambda t, T: range(t + 1)),
                             f"leaks_future/builder/{label}/per_position"))
    found.append(Correct(NB, "leaks_future", _truncating(), "leaks_future/builder/truncate"))
    return found


# ====================================================================== running statistics
TRAIN_STYLES = ["numpy", "npvar", "flat", "torch", "einsum"]


def _batch_stats(style, x):
    """(mu, biased var, n) per feature, shape (d,), written in ``style``."""
    d = x.shape[-1]
    leading = tuple(range(x.ndim - 1))
    n = x.size // d
    if style == "numpy":
        mu = x.mean(axis=leading)
        return mu, ((x - mu) ** 2).mean(axis=leading), n
    if style == "npvar":
        return np.mean(x, axis=leading), np.var(x, axis=leading), n
    if style == "flat":
        flat = x.reshape(-1, d)
        mu = flat.sum(axis=0) / n
        return mu, np.square(flat - mu).sum(axis=0) / n, n
    if style == "torch":
        t = torch.from_numpy(np.ascontiguousarray(x)).reshape(-1, d)
        var, mu = torch.var_mean(t, dim=0, unbiased=False)
        return mu.numpy(), var.numpy(), n
    if style == "einsum":
        flat = x.reshape(-1, d)
        mu = np.einsum("nd->d", flat) / n
        c = flat - mu
        return mu, np.einsum("nd,nd->d", c, c) / n, n
    raise ValueError(style)


def _train(style, weight="right", var_stat="unbiased", axes="right", update="new", norm="batch", y_stat="biased",
           form="standard"):
    """A batch_norm_train built from the given choices (see the catalogue's bn. running ids).

    weight: the weight of the batch statistic ("right" = momentum, "reversed", "ignored" = 1, "none" = 0,
    "hard" = 0.1, "hard_reversed" = 0.9); var_stat: what feeds the running variance; axes: of the running
    statistics ("right", "axis0", "all"); update: "new" arrays, "in_place" (and returned), "in_place_y" (and
    only y returned), "y_only" (rebinding, only y returned); norm: what the output is normalised with.
    """
    def batch_norm_train(x, gamma, beta, running_mean, running_var, momentum=0.1, eps=1e-5):
        mu, var, n = _batch_stats(style, x)
        if axes == "axis0":
            r_mu = x.mean(axis=0)
            r_var = ((x - r_mu) ** 2).mean(axis=0)
        elif axes == "all":
            r_mu = np.full_like(mu, x.mean())
            r_var = np.full_like(var, x.var())
        else:
            r_mu, r_var = mu, var
        unbiased = r_var * n / (n - 1)
        stat = {"unbiased": unbiased, "biased": r_var, "std": np.sqrt(unbiased), "std_biased": np.sqrt(r_var),
                "unbiased_eps": unbiased + eps, "biased_eps": r_var + eps, "std_eps": np.sqrt(r_var + eps)}[var_stat]
        w = {"right": momentum, "reversed": 1 - momentum, "ignored": 1.0, "none": 0.0, "hard": 0.1,
             "hard_reversed": 0.9}[weight]
        if form == "standard":
            new_mean = (1 - w) * running_mean + w * r_mu
            new_var = (1 - w) * running_var + w * stat
        elif form == "increment":
            new_mean = running_mean + w * (r_mu - running_mean)
            new_var = running_var + w * (stat - running_var)
        else:  # "lerp": numpy-free weighted sum, the old value last
            new_mean = w * r_mu + (1 - w) * running_mean
            new_var = w * stat + (1 - w) * running_var
        if norm == "batch":
            v = var * n / (n - 1) if y_stat == "unbiased" else var
            scale = np.sqrt(v) + eps if y_stat == "outside" else np.sqrt(v + eps)
            y = gamma * (x - mu) / scale + beta
        elif norm == "running_old":
            y = gamma * (x - running_mean) / np.sqrt(running_var + eps) + beta
        else:  # "running_new"
            y = gamma * (x - new_mean) / np.sqrt(new_var + eps) + beta
        if update in ("in_place", "in_place_y"):
            running_mean[...] = new_mean
            running_var[...] = new_var
            if update == "in_place_y":
                return y
            return y, running_mean, running_var
        if update == "y_only":
            return y
        return y, new_mean, new_var

    return batch_norm_train


def _train_in_place_torch(x, gamma, beta, running_mean, running_var, momentum=0.1, eps=1e-5):
    """torch tensors sharing the caller's memory, updated with in-place ops (as nn.BatchNorm1d does)."""
    mu, var, n = _batch_stats("torch", x)
    rm, rv = torch.from_numpy(running_mean), torch.from_numpy(running_var)
    rm.mul_(1 - momentum).add_(momentum * torch.from_numpy(mu))
    rv.mul_(1 - momentum).add_(momentum * torch.from_numpy(var * n / (n - 1)))
    return gamma * (x - mu) / np.sqrt(var + eps) + beta, running_mean, running_var


def _train_augmented(x, gamma, beta, running_mean, running_var, momentum=0.1, eps=1e-5):
    """Augmented assignment on the arguments: in place."""
    mu, var, n = _batch_stats("numpy", x)
    running_mean *= 1 - momentum
    running_mean += momentum * mu
    running_var *= 1 - momentum
    running_var += momentum * var * n / (n - 1)
    return gamma * (x - mu) / np.sqrt(var + eps) + beta, running_mean, running_var


def _without_momentum(base):
    def batch_norm_train(x, gamma, beta, running_mean, running_var, momentum=0.1, eps=1e-5):
        return base(x, gamma, beta, running_mean, running_var, eps=eps)

    return batch_norm_train


def _forgets(base, index):
    """Right, except that running statistic ``index`` (1: mean, 2: var) comes back as it was passed in."""
    def batch_norm_train(x, gamma, beta, running_mean, running_var, momentum=0.1, eps=1e-5):
        out = list(base(x, gamma, beta, running_mean, running_var, momentum, eps))
        out[index] = np.array((running_mean, running_var)[index - 1], copy=True)
        return tuple(out)

    return batch_norm_train


def _running_collector(exercise, prefix):
    """(made, add) for the mutants of ``exercise`` ("batch_norm_train" or "batch_norm_eval").

    add(planted, function, label) names the function like the exercise and appends a mutant
    planting the bn. ids ``planted``, labelled f"{prefix}/{label}".
    """
    made = []

    def add(planted, function, label):
        function.__name__ = function.__qualname__ = exercise
        made.append(mutant(NB, exercise, _ids("bn", *planted), function, f"{prefix}/{label}"))

    return made, add


def _train_mutants():
    made, add = _running_collector("batch_norm_train", "train")
    for style in TRAIN_STYLES:
        for form in ("standard", "increment", "lerp"):
            add(["momentum_reversed"], _train(style, weight="reversed", form=form), f"reversed/{style}/{form}")
            add(["momentum_ignored"], _train(style, weight="ignored", form=form), f"ignored/{style}/{form}")
            add(["running_not_updated"], _train(style, weight="none", form=form), f"none/{style}/{form}")
            add(["momentum_hardcoded"], _train(style, weight="hard", form=form), f"hard/{style}/{form}")
            add(["running_var_biased"], _train(style, var_stat="biased", form=form), f"biased/{style}/{form}")
            add(["running_in_place"], _train(style, update="in_place", form=form), f"in_place/{style}/{form}")
            add(["running_not_returned"], _train(style, update="y_only", form=form), f"y_only/{style}/{form}")
        add(["momentum_reversed", "running_var_biased"], _train(style, weight="reversed", var_stat="biased"),
            f"reversed+biased/{style}")
        add(["momentum_ignored", "running_var_biased"], _train(style, weight="ignored", var_stat="biased"),
            f"ignored+biased/{style}")
        add(["momentum_reversed", "running_std"], _train(style, weight="reversed", var_stat="std"),
            f"reversed+std/{style}")
        add(["running_std"], _train(style, var_stat="std"), f"std/{style}")
        add(["running_std"], _train(style, var_stat="std", form="increment"), f"std/{style}/increment")
        add(["running_std", "running_var_biased"], _train(style, var_stat="std_biased"), f"std_biased/{style}")
        add(["running_std", "running_var_biased", "running_var_eps"], _train(style, var_stat="std_eps"),
            f"std_eps/{style}")
        add(["running_var_eps"], _train(style, var_stat="unbiased_eps"), f"var_eps/{style}")
        add(["running_var_eps"], _train(style, var_stat="unbiased_eps", form="lerp"), f"var_eps/{style}/lerp")
        add(["running_var_eps", "running_var_biased"], _train(style, var_stat="biased_eps"), f"biased_eps/{style}")
        add(["running_var_eps", "momentum_reversed"], _train(style, var_stat="unbiased_eps", weight="reversed"),
            f"var_eps+reversed/{style}")
        add(["running_var_biased", "running_wrong_axes"], _train(style, axes="all", var_stat="biased"),
            f"all+biased/{style}")
        for form in ("standard", "increment"):
            add(["running_wrong_axes"], _train(style, axes="axis0", form=form), f"axis0/{style}/{form}")
            add(["running_wrong_axes"], _train(style, axes="all", form=form), f"all/{style}/{form}")
            add(["running_wrong_axes", "momentum_reversed"], _train(style, axes="all", weight="reversed", form=form),
                f"all+reversed/{style}/{form}")
            add(["train_uses_running"], _train(style, norm="running_old", form=form), f"uses_old/{style}/{form}")
            add(["train_uses_running"], _train(style, norm="running_new", form=form), f"uses_new/{style}/{form}")
        add(["running_in_place", "running_not_returned"], _train(style, update="in_place_y"), f"in_place_y/{style}")
        add(["running_in_place", "running_not_returned"], _train(style, update="in_place_y", form="increment"),
            f"in_place_y/{style}/increment")
        add(["train_uses_running"], _train(style, norm="running_old", weight="reversed"), f"uses_old+rev/{style}")
        # mistakes of the output, carried over from batch_norm
        add(["unbiased_variance"], _train(style, y_stat="unbiased"), f"y_unbiased/{style}")
        add(["eps_outside_sqrt"], _train(style, y_stat="outside"), f"y_outside/{style}")
    for base in CORRECT_TRAINS + impl.CORRECT_TRAINS:  # a helper called without passing momentum on
        add(["momentum_hardcoded"], _without_momentum(base), f"hard/helper/{base.__name__}")
        add(["running_not_updated"], _forgets(base, 1), f"none/forgets_mean/{base.__name__}")
        add(["running_not_updated"], _forgets(base, 2), f"none/forgets_var/{base.__name__}")
    add(["running_in_place"], _train_in_place_torch, "in_place/torch_shared")
    add(["running_in_place"], _train_augmented, "in_place/augmented")
    return made


def _eval(style, centre="running", stat="running", scale="right", affine="right", update=None):
    """A batch_norm_eval built from the given choices.

    centre: "running", "batch" or "none"; stat: the variance used ("running", "batch", "batch_unbiased");
    scale: as in _scale_np; update: None, "after" (running statistics updated in place after y is computed),
    "before" (updated in place with the batch, then used).
    """
    def batch_norm_eval(x, gamma, beta, running_mean, running_var, eps=1e-5):
        d = x.shape[-1]
        flat = x.reshape(-1, d)
        n = flat.shape[0]
        if style == "torch":
            t = torch.from_numpy(np.ascontiguousarray(flat))
            mu, var = t.mean(dim=0).numpy(), t.var(dim=0, unbiased=False).numpy()
        elif style == "loop":
            mu = np.array([math.fsum(flat[:, k]) / n for k in range(d)])
            var = np.array([math.fsum((flat[:, k] - mu[k]) ** 2) / n for k in range(d)])
        else:
            mu = flat.mean(axis=0)
            var = ((flat - mu) ** 2).mean(axis=0)
        if update == "before":
            running_mean *= 0.9
            running_mean += 0.1 * mu
            running_var *= 0.9
            running_var += 0.1 * var * n / max(n - 1, 1)
        c = {"running": running_mean, "batch": mu, "none": 0.0}[centre]
        v = {"running": running_var, "batch": var, "batch_unbiased": var * n / max(n - 1, 1)}[stat]
        s = _scale_np(v, eps, scale)
        if style == "rsqrt":
            z = (x - c) * (1.0 / s)
        else:
            z = (x - c) / s
        out = _affine(z, gamma, beta, affine)
        if update == "after":
            running_mean[...] = 0.9 * running_mean + 0.1 * mu
            running_var[...] = 0.9 * running_var + 0.1 * var
        return out

    return batch_norm_eval


EVAL_STYLES = ["numpy", "torch", "loop", "rsqrt"]


def _eval_mutants():
    made, add = _running_collector("batch_norm_eval", "eval")
    for style in EVAL_STYLES:
        for stat in ("batch", "batch_unbiased"):
            add(["eval_uses_batch_stats"], _eval(style, centre="batch", stat=stat), f"batch/{style}/{stat}")
            add(["eval_uses_batch_stats"], _eval(style, stat=stat), f"batch_var/{style}/{stat}")
            add(["eval_uses_batch_stats", "eps_outside_sqrt"], _eval(style, centre="batch", stat=stat,
                                                                      scale="outside"), f"batch+outside/{style}/{stat}")
        add(["eval_uses_batch_stats"], _eval(style, centre="batch"), f"batch_mean/{style}")
        add(["eval_uses_batch_stats"], _eval(style, centre="batch", affine="right_fma"), f"batch_mean/{style}/fma")
        add(["eval_uses_batch_stats", "eps_ignored"], _eval(style, centre="batch", stat="batch", scale="no_eps"),
            f"batch+no_eps/{style}")
        add(["eval_updates_running"], _eval(style, update="after"), f"updates_after/{style}")
        add(["eval_updates_running"], _eval(style, update="after", affine="right_fma"), f"updates_after/{style}/fma")
        add(["eval_updates_running", "eval_uses_batch_stats"], _eval(style, update="before"),
            f"updates_before/{style}")
        add(["eval_updates_running", "eval_uses_batch_stats"], _eval(style, update="before", affine="right_fma"),
            f"updates_before/{style}/fma")
        add(["eval_updates_running", "eval_uses_batch_stats"], _eval(style, update="after", centre="batch"),
            f"updates_after+batch/{style}")
        add(["eval_updates_running", "eval_uses_batch_stats"], _eval(style, update="after", stat="batch"),
            f"updates_after+batch_var/{style}")
        # the forward mistakes, on the running statistics
        add(["eps_outside_sqrt"], _eval(style, scale="outside"), f"outside/{style}")
        add(["eps_ignored"], _eval(style, scale="no_eps"), f"no_eps/{style}")
        add(["no_sqrt"], _eval(style, scale="var_eps"), f"no_sqrt/{style}")
        add(["not_scaled"], _eval(style, scale="ones"), f"not_scaled/{style}")
        add(["not_centred"], _eval(style, centre="none"), f"not_centred/{style}")
        add(["eps_hardcoded"], _eval(style, scale=("fixed", 1e-5)), f"eps_hardcoded/{style}")
        for affine, planted in [("swapped", ["affine_swapped"]), ("beta_ignored", ["beta_ignored"]),
                                ("gamma_ignored", ["gamma_ignored"]), ("shift_before_gain", ["shift_before_gain"]),
                                ("beta_subtracted", ["beta_subtracted"]), ("gamma_squared", ["affine_misapplied"])]:
            add(planted, _eval(style, affine=affine), f"{affine}/{style}")
    return made


# ---------------------------------------------------------------- correct variants
def train_calls_batch_norm(x, gamma, beta, running_mean, running_var, momentum=0.1, eps=1e-5):
    y = solution(NB, "batch_norm")(x, gamma, beta, eps)
    flat = x.reshape(-1, x.shape[-1])
    return y, running_mean + momentum * (flat.mean(axis=0) - running_mean), \
        (1 - momentum) * running_var + momentum * np.var(flat, axis=0, ddof=1)


def train_torch(x, gamma, beta, running_mean, running_var, momentum=0.1, eps=1e-5):
    t = torch.from_numpy(x).reshape(-1, x.shape[-1])
    mu, var = t.mean(dim=0), t.var(dim=0, correction=0)
    y = (t - mu) / torch.sqrt(var + eps) * torch.from_numpy(gamma) + torch.from_numpy(beta)
    rm = torch.lerp(torch.from_numpy(running_mean), mu, momentum)
    rv = torch.lerp(torch.from_numpy(running_var), t.var(dim=0, unbiased=True), momentum)
    return y.reshape(x.shape).numpy(), rm.numpy(), rv.numpy()


def train_loop(x, gamma, beta, running_mean, running_var, momentum=0.1, eps=1e-5):
    d = x.shape[-1]
    flat = x.reshape(-1, d)
    n = flat.shape[0]
    y = np.empty_like(flat)
    new_mean, new_var = np.empty(d), np.empty(d)
    for k in range(d):
        column = flat[:, k]
        m = math.fsum(column) / n
        ss = math.fsum((column - m) ** 2)
        y[:, k] = gamma[k] * (column - m) / math.sqrt(ss / n + eps) + beta[k]
        new_mean[k] = (1 - momentum) * running_mean[k] + momentum * m
        new_var[k] = (1 - momentum) * running_var[k] + momentum * ss / (n - 1)
    return y.reshape(x.shape), new_mean, new_var


def train_copy_then_in_place(x, gamma, beta, running_mean, running_var, momentum=0.1, eps=1e-5):
    """Copies first, then in-place arithmetic on the copies: the caller's arrays stay as they were."""
    mu, var, n = _batch_stats("numpy", x)
    new_mean, new_var = running_mean.copy(), np.array(running_var)
    new_mean *= 1 - momentum
    new_mean += momentum * mu
    new_var *= 1 - momentum
    new_var += momentum * var * n / (n - 1)
    return gamma * (x - mu) / np.sqrt(var + eps) + beta, new_mean, new_var


def eval_flat(x, gamma, beta, running_mean, running_var, eps=1e-5):
    flat = x.reshape(-1, x.shape[-1])
    return ((flat - running_mean) / np.sqrt(running_var + eps) * gamma + beta).reshape(x.shape)


def eval_torch(x, gamma, beta, running_mean, running_var, eps=1e-5):
    t = torch.from_numpy(x)
    out = (t - torch.from_numpy(running_mean)) * torch.rsqrt(torch.from_numpy(running_var) + eps)
    return (out * torch.from_numpy(gamma) + torch.from_numpy(beta)).numpy()


def eval_folded(x, gamma, beta, running_mean, running_var, eps=1e-5):
    """Folded into one scale and one shift per feature, as inference engines do."""
    a = gamma / np.sqrt(running_var + eps)
    return a * x + (beta - a * running_mean)


def eval_loop(x, gamma, beta, running_mean, running_var, eps=1e-5):
    out = np.empty_like(x)
    for k in range(x.shape[-1]):
        out[..., k] = gamma[k] * (x[..., k] - running_mean[k]) / math.sqrt(running_var[k] + eps) + beta[k]
    return out


CORRECT_TRAINS = [train_calls_batch_norm, train_torch, train_loop, train_copy_then_in_place]
CORRECT_EVALS = [eval_flat, eval_torch, eval_folded, eval_loop]


def _correct_running():
    found = [Correct(NB, "batch_norm_train", solution(NB, "batch_norm_train"), "batch_norm_train/solution"),
             Correct(NB, "batch_norm_eval", solution(NB, "batch_norm_eval"), "batch_norm_eval/solution")]
    for function in CORRECT_TRAINS + impl.CORRECT_TRAINS:
        found.append(Correct(NB, "batch_norm_train", function, f"batch_norm_train/{function.__name__}"))
    for function in CORRECT_EVALS + impl.CORRECT_EVALS:
        found.append(Correct(NB, "batch_norm_eval", function, f"batch_norm_eval/{function.__name__}"))
    for style in TRAIN_STYLES:  # the builders' own correct choices
        for form in ("standard", "increment", "lerp"):
            found.append(Correct(NB, "batch_norm_train", _train(style, form=form),
                                 f"batch_norm_train/builder/{style}/{form}"))
    for style in EVAL_STYLES:
        found.append(Correct(NB, "batch_norm_eval", _eval(style), f"batch_norm_eval/builder/{style}"))
        found.append(Correct(NB, "batch_norm_eval", _eval(style, affine="right_fma"),
                             f"batch_norm_eval/builder/{style}/fma"))
    return found


# Every id of grader/catalogue/bn_vs_ln.py is planted by some mutant below; none is unreachable.
UNREACHABLE: set = set()
MUTANTS = _forward_mutants("ln") + _forward_mutants("bn") + _probe_mutants() + _train_mutants() + _eval_mutants()
CORRECT = _correct() + _correct_running()
