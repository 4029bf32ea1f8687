"""Mutants of 03_backward: wrong Jacobians, VJPs and backwards with known mistakes, and correct variants.

Every wrong implementation is generated from one description of the formula (which statistic,
which map to the scale, the factor of each term, the vectors of the outer product, ...) written
in several styles: numpy with matrices, broadcasting or einsum, per-element or per-token loops,
torch tensors converted back, and torch autograd through a hand-written (wrong) forward pass.
Each mutant plants the ids of the mistakes its description contains.

Mistakes that cannot be seen together are not planted together: autograd through x - mu
alone (no division by s) has no variance term either; with no division at all the statistic
is never used, so no unbiased variance can show; a fixed eps only shows where a test passes
another eps, after a mistake the default eps shows has already failed; and the backward's
check diagnoses the first wrong gradient only (dbeta, then dgamma, then dx), so each
backward mutant's mistakes sit in one of them (a wrong scale shows first in dgamma's x_hat).
"""
from __future__ import annotations

import itertools

import numpy as np
import torch

from tests.diagnosis_harness import solution
from tests.implementations import backward as impl
from tests.mutants import Correct, mutant

NB = "03_backward"
JAC, VJP, BWD = "layer_norm_jacobian", "layer_norm_vjp", "layer_norm_backward"

# the scale s = map(statistic): (statistic, map) -> the ids of its mistakes
SCALE_IDS = {"unbiased": "bwd.unbiased_variance", "outside": "bwd.eps_outside_sqrt",
             "variance": "bwd.divided_by_variance", "none": "bwd.no_division_by_s", "ignored": "bwd.eps_ignored",
             "fixed": "bwd.eps_hardcoded"}
TERM_IDS = {"missing_mean": "bwd.mean_term_missing", "sum_mean": "bwd.sum_not_mean", "double_mean": "bwd.wrong_factor",
            "missing_var": "bwd.variance_term_missing", "sum_var": "bwd.sum_not_mean", "double_var": "bwd.wrong_factor",
            "half_var": "bwd.wrong_factor", "x_var": "bwd.x_instead_of_x_hat", "xh_x_var": "bwd.x_instead_of_x_hat",
            "x_xh_var": "bwd.x_instead_of_x_hat"}
WHOLE_IDS = {-1.0: "bwd.sign_flipped", "d": "bwd.sum_not_mean", "1/d": "bwd.extra_one_over_d", 2.0: "bwd.wrong_factor",
             0.5: "bwd.wrong_factor"}


def _planted(stat="biased", smap="right", hstat=None, hmap=None, mean="right", var="right", whole=None):
    ids = set()
    for part in (stat, smap, hstat, hmap):
        if part in SCALE_IDS:
            ids.add(SCALE_IDS[part])
    if mean != "right":
        ids.add(TERM_IDS[f"{mean}_mean"])
    if var != "right":
        ids.add(TERM_IDS[f"{var}_var"])
    if whole is not None:
        ids.add(WHOLE_IDS[whole])
    return ids


# ------------------------------------------------------------------ the pieces, in numpy and in torch
def _variance(x, stat, how, axis=-1):
    ddof = 1 if stat == "unbiased" else 0
    if how == "std":
        return x.std(axis=axis, keepdims=True, ddof=ddof) ** 2
    if how == "manual":
        axes = range(x.ndim) if axis is None else np.atleast_1d(axis)
        count = int(np.prod([x.shape[a] for a in axes]))
        return ((x - x.mean(axis=axis, keepdims=True)) ** 2).sum(axis=axis, keepdims=True) / (count - ddof)
    return x.var(axis=axis, keepdims=True, ddof=ddof)


def _map(w, smap, eps, lib=np):
    e = 1e-5 if smap == "fixed" else eps
    if smap in ("right", "fixed"):
        return lib.sqrt(w + e)
    if smap == "outside":
        return lib.sqrt(w) + eps
    if smap == "variance":
        return w + eps
    if smap == "none":
        return w * 0 + 1
    if smap == "ignored":
        return lib.sqrt(w)
    raise ValueError(smap)


def _np_scale(x, eps, stat, smap, how="var", axis=-1):
    return _map(_variance(x, stat, how, axis), smap, eps)


def _torch_scale(t, eps, stat, smap, dim=-1):

    w = torch.var(t, dim=dim, keepdim=True) if stat == "unbiased" else torch.var(t, dim=dim, keepdim=True,
                                                                                 unbiased=False)
    return _map(w, smap, eps, torch)


def _factors(d, mean, var):
    mc = {"right": 1.0, "missing": 0.0, "sum": float(d), "double": 2.0}[mean]
    vc = {"right": 1.0, "missing": 0.0, "sum": float(d), "double": 2.0, "half": 0.5,
          "x": 1.0, "xh_x": 1.0, "x_xh": 1.0}[var]
    return mc, vc


def _vectors(x, xh, var):
    return {"x": (x, x), "xh_x": (xh, x), "x_xh": (x, xh)}.get(var, (xh, xh))


def _whole(value, d):
    """The factor of the whole result: None (right), "d", "1/d" or a number (-1.0: the sign)."""
    return {None: 1.0, "d": float(d), "1/d": 1.0 / d}[value] if value is None or isinstance(value, str) else value


# ------------------------------------------------------------------ layer_norm_jacobian
def make_jacobian(style, stat="biased", smap="right", hstat=None, hmap=None, mean="right", var="right", whole=None,
                  how="var"):
    hstat, hmap = hstat or stat, hmap or smap

    if style == "autograd":  # torch autograd through a hand-written forward: only the scale and the sign can be off
        def layer_norm_jacobian(x, eps=1e-5):
            import torch

            d = x.shape[-1]
            c = _whole(whole, d)

            def forward(t):
                return c * (t - t.mean()) / _torch_scale(t, eps, stat, smap)

            return torch.autograd.functional.jacobian(forward, torch.from_numpy(x)).numpy()

        return layer_norm_jacobian

    if style == "torch":
        def layer_norm_jacobian(x, eps=1e-5):
            import torch

            t = torch.from_numpy(x)
            d = t.shape[-1]
            s, h = _torch_scale(t, eps, stat, smap), _torch_scale(t, eps, hstat, hmap)
            xh = (t - t.mean()) / h
            mc, vc = _factors(d, mean, var)
            u, w = _vectors(t, xh, var)
            J = torch.eye(d, dtype=torch.float64) - mc / d - vc * torch.outer(u, w) / d
            return (_whole(whole, d) * J / s).numpy()

        return layer_norm_jacobian

    def layer_norm_jacobian(x, eps=1e-5):
        d = x.shape[-1]
        s = _np_scale(x, eps, stat, smap, how)
        xh = (x - x.mean()) / _np_scale(x, eps, hstat, hmap, how)
        mc, vc = _factors(d, mean, var)
        u, w = _vectors(x, xh, var)
        if style == "matrix":
            J = np.eye(d) - np.full((d, d), mc / d) - vc * np.outer(u, w) / d
        elif style == "broadcast":
            J = np.eye(d) - mc / d - vc * u[:, None] * w[None, :] / d
        elif style == "einsum":
            J = np.eye(d) - mc * np.ones((d, d)) / d - vc * np.einsum("i,j->ij", u, w) / d
        elif style == "loop":
            J = np.empty((d, d))
            for i in range(d):
                for j in range(d):
                    J[i, j] = (1.0 if i == j else 0.0) - mc / d - vc * float(u[i]) * float(w[j]) / d
        else:
            raise ValueError(style)
        return _whole(whole, d) * J / float(s[0])

    return layer_norm_jacobian


JAC_STYLES = ["matrix", "broadcast", "einsum", "loop", "torch"]


# ------------------------------------------------------------------ layer_norm_vjp
def make_vjp(style, stat="biased", smap="right", hstat=None, hmap=None, mean="right", var="right", whole=None,
             how="var"):
    hstat, hmap = hstat or stat, hmap or smap

    if style == "autograd":
        def layer_norm_vjp(x, g, eps=1e-5):
            import torch

            c = _whole(whole, x.shape[-1])
            t = torch.tensor(x, requires_grad=True)
            y = c * (t - t.mean()) / _torch_scale(t, eps, stat, smap)
            (dx,) = torch.autograd.grad(y, t, grad_outputs=torch.from_numpy(g))
            return dx.numpy()

        return layer_norm_vjp

    if style == "torch":
        def layer_norm_vjp(x, g, eps=1e-5):
            import torch

            t, gt = torch.from_numpy(x), torch.from_numpy(g)
            d = t.shape[-1]
            s, h = _torch_scale(t, eps, stat, smap), _torch_scale(t, eps, hstat, hmap)
            xh = (t - t.mean()) / h
            mc, vc = _factors(d, mean, var)
            u, w = _vectors(t, xh, var)
            return (_whole(whole, d) * (gt - mc * gt.mean() - vc * (gt * w).mean() * u) / s).numpy()

        return layer_norm_vjp

    def layer_norm_vjp(x, g, eps=1e-5):
        d = x.shape[-1]
        s = _np_scale(x, eps, stat, smap, how)
        xh = (x - x.mean()) / _np_scale(x, eps, hstat, hmap, how)
        mc, vc = _factors(d, mean, var)
        u, w = _vectors(x, xh, var)
        c = _whole(whole, d)
        if style == "means":
            return c * (g - mc * g.mean() - vc * np.mean(g * w) * u) / s
        if style == "sums":
            return c * (d * g - mc * g.sum() - vc * u * np.dot(w, g)) / (d * s)
        if style == "einsum":
            return c * (g - mc * np.einsum("i->", g) / d - vc * np.einsum("i,i->", g, w) / d * u) / s
        if style == "loop":
            sg = sum(float(gi) for gi in g)
            sgw = sum(float(gi) * float(wi) for gi, wi in zip(g, w, strict=True))
            scale = float(s[0])
            return np.array([c * (float(gi) - mc * sg / d - vc * sgw / d * float(ui)) / scale
                             for gi, ui in zip(g, u, strict=True)])
        raise ValueError(style)

    return layer_norm_vjp


VJP_STYLES = ["means", "sums", "einsum", "loop", "torch"]


# ------------------------------------------------------------------ layer_norm_backward
def make_backward(style, stat="biased", smap="right", hstat=None, hmap=None, mean="right", var="right", whole=None,
                  how="var", gamma_mode="right", dgamma="right", dbeta="right", axes="token", dx_axes="token",
                  which="both", ret="tuple"):
    hstat, hmap = hstat or stat, hmap or smap

    def finish(dx, dg, db):
        return {"tuple": lambda: (dx, dg, db), "list": lambda: [dx, dg, db], "pair": lambda: (dx, dg),
                "quad": lambda: (dx, dg, db, None), "dict": lambda: {"dx": dx, "dgamma": dg, "dbeta": db},
                "nested": lambda: (dx, (dg, db))}[ret]()

    def reduce_params(dy, x, xh, gamma, dx, lead, lib_sum, lib_mean):
        products = {"right": dy * xh, "x": dy * x, "times_gamma": dy * xh * gamma, "g": g_of(dy, gamma) * xh,
                    "dx": dx * xh}
        if dgamma == "not_summed":
            dg = dy * xh
        elif dgamma == "axis0":
            dg = lib_sum(dy * xh, (0,))
        elif dgamma == "mean":
            dg = lib_mean(dy * xh, lead)
        else:
            dg = lib_sum(products[dgamma], lead)
        if dbeta == "not_summed":
            db = dy
        elif dbeta == "axis0":
            db = lib_sum(dy, (0,))
        elif dbeta == "mean":
            db = lib_mean(dy, lead)
        elif dbeta == "gamma":
            db = lib_sum(gamma * dy, lead)
        elif dbeta == "xhat":
            db = lib_sum(dy * xh, lead)
        else:
            db = lib_sum(dy, lead)
        return dg, db

    def g_of(dy, gamma):
        return {"right": gamma * dy, "ignore": dy, "divide": dy / gamma, "after": dy, "twice": gamma * gamma * dy}[
            gamma_mode]

    if style == "autograd":
        def layer_norm_backward(dy, x, gamma, eps=1e-5):
            import torch

            t = torch.tensor(x, requires_grad=True)
            gt = torch.tensor(gamma, requires_grad=True)
            bt = torch.zeros(x.shape[-1], dtype=torch.float64, requires_grad=True)
            xh = (t - t.mean(-1, keepdim=True)) / _torch_scale(t, eps, stat, smap)
            y = gt * xh + bt
            dx, dg, db = torch.autograd.grad(y, (t, gt, bt), grad_outputs=torch.from_numpy(dy))
            return finish(dx.numpy(), dg.numpy(), db.numpy())

        return layer_norm_backward

    if style == "torch":
        def layer_norm_backward(dy, x, gamma, eps=1e-5):
            import torch

            t, dyt, gam = torch.from_numpy(x), torch.from_numpy(dy), torch.from_numpy(gamma)
            d = t.shape[-1]
            lead = tuple(range(t.ndim - 1))
            dim = {"token": -1, "all": tuple(range(t.ndim)), "first": 0, "lead": lead}[axes]
            s = _torch_scale(t, eps, stat, smap, dim)
            xh = (t - t.mean(dim=dim, keepdim=True)) / _torch_scale(t, eps, hstat, hmap, dim)
            g = g_of(dyt, gam)
            mc, vc = _factors(d, mean, var)
            u, w = _vectors(t, xh, var)
            rdim = {"token": -1, "all": tuple(range(t.ndim)), "first": 0, "lead": lead}[dx_axes]
            m1 = g.mean(dim=rdim if which in ("both", "mean") else -1, keepdim=True)
            m2 = (g * w).mean(dim=rdim if which in ("both", "proj") else -1, keepdim=True)
            dx = _whole(whole, d) * (g - mc * m1 - vc * m2 * u) / s
            if gamma_mode == "after":
                dx = dx * gam
            # torch reduces over every dim when given dim=(): a 1-D input has no leading axis to sum over
            dg, db = reduce_params(dyt, t, xh, gam, dx, lead, lambda a, ax: a.sum(dim=ax) if ax else a,
                                   lambda a, ax: a.mean(dim=ax) if ax else a)
            return finish(dx.numpy(), dg.numpy(), db.numpy())

        return layer_norm_backward

    def layer_norm_backward(dy, x, gamma, eps=1e-5):
        d = x.shape[-1]
        lead = tuple(range(x.ndim - 1))
        if style == "per_token":  # one token at a time, the one-token VJP of exercise 2
            rows_x, rows_dy = x.reshape(-1, d), dy.reshape(-1, d)
            vjp = make_vjp("means", stat, smap, hstat, hmap, mean, var, whole, how)
            dx = np.stack([vjp(xr, g_of(dyr, gamma), eps)
                           for xr, dyr in zip(rows_x, rows_dy, strict=True)]).reshape(x.shape)
            if gamma_mode == "after":
                dx = dx * gamma
            xh = np.stack([(xr - xr.mean()) / _np_scale(xr, eps, hstat, hmap, how) for xr in rows_x]).reshape(x.shape)
        else:
            axis = {"token": -1, "all": None, "first": 0, "lead": lead}[axes]
            s = _np_scale(x, eps, stat, smap, how, axis)
            xh = (x - x.mean(axis=axis, keepdims=True)) / _np_scale(x, eps, hstat, hmap, how, axis)
            g = g_of(dy, gamma)
            mc, vc = _factors(d, mean, var)
            u, w = _vectors(x, xh, var)
            rax = {"token": -1, "all": None, "first": 0, "lead": lead}[dx_axes]
            if style == "einsum" and dx_axes == "token":
                m1 = np.einsum("...i->...", g)[..., None] / d
                m2 = np.einsum("...i,...i->...", g, w)[..., None] / d
            else:
                m1 = g.mean(axis=rax if which in ("both", "mean") else -1, keepdims=True)
                m2 = (g * w).mean(axis=rax if which in ("both", "proj") else -1, keepdims=True)
            if style == "sums":
                dx = _whole(whole, d) * (d * g - mc * d * m1 - vc * d * m2 * u) / (d * s)
            else:
                dx = _whole(whole, d) * (g - mc * m1 - vc * m2 * u) / s
            if gamma_mode == "after":
                dx = dx * gamma
        np_sum, np_mean = (lambda a, ax: a.sum(axis=ax)), (lambda a, ax: a.mean(axis=ax))
        dg, db = reduce_params(dy, x, xh, gamma, dx, lead, np_sum, np_mean)
        if style == "einsum" and dgamma == "right" and x.ndim > 1:
            dg = np.einsum("td,td->d", dy.reshape(-1, d), xh.reshape(-1, d))
        return finish(dx, dg, db)

    return layer_norm_backward


BWD_STYLES = ["vectorised", "per_token", "sums", "einsum", "torch"]


# ------------------------------------------------------------------ builds the (d, d) matrix (slow: 4096 x 4096)
def _builders():
    def full_numpy(x, g, eps=1e-5):
        d = x.size
        s = np.sqrt(x.var() + eps)
        xh = (x - x.mean()) / s
        return ((np.eye(d) - 1.0 / d - np.outer(xh, xh) / d) / s).T @ g

    def full_torch(x, g, eps=1e-5):
        return impl.vjp_torch_builds_jacobian(x, g, eps)

    found = {"full/numpy": full_numpy, "full/torch": full_torch}

    def outer_term(kind, how):
        def layer_norm_vjp(x, g, eps=1e-5):
            d = x.size
            s = _np_scale(x, eps, "biased", "right", how)
            xh = (x - x.mean()) / s
            if kind == "outer":
                return (g - g.mean() - np.outer(xh, xh) @ g / d) / s
            if kind == "broadcast":
                return (g - g.mean() - (xh[:, None] * xh[None, :]) @ g / d) / s
            if kind == "einsum":
                return (g - g.mean() - np.einsum("ij,j->i", np.einsum("i,j->ij", xh, xh), g) / d) / s
            if kind == "ones":
                return (g - np.ones((d, d)) @ g / d - np.mean(g * xh) * xh) / s
            if kind == "full_ones":
                return (g - np.full((d, d), 1.0 / d) @ g - np.mean(g * xh) * xh) / s
            if kind == "eye":
                return (np.eye(d) @ g - g.mean() - np.mean(g * xh) * xh) / s
            if kind == "diag":
                return (np.diag(g).sum(axis=1) - g.mean() - np.mean(g * xh) * xh) / s
            if kind == "torch_outer":
                import torch

                t, gt = torch.from_numpy(xh), torch.from_numpy(g)
                return ((gt - gt.mean() - torch.outer(t, t) @ gt / d) / float(s[0])).numpy()
            if kind == "torch_ones":
                import torch

                gt = torch.from_numpy(g)
                mean = torch.ones((d, d), dtype=torch.float64) @ gt / d
                return (gt.numpy() - mean.numpy() - np.mean(g * xh) * xh) / s
            raise ValueError(kind)

        return layer_norm_vjp

    for kind, how in itertools.product(["outer", "broadcast", "einsum", "ones", "full_ones", "eye", "diag",
                                        "torch_outer", "torch_ones"], ["var", "std"]):
        found[f"{kind}/{how}"] = outer_term(kind, how)
    return found


# ------------------------------------------------------------------ the mutants
SCALE_MISTAKES = [  # (label, keyword arguments)
    ("eps outside", {"smap": "outside"}), ("divided by var", {"smap": "variance"}), ("no division", {"smap": "none"}),
    ("eps ignored", {"smap": "ignored"}), ("eps fixed", {"smap": "fixed"}), ("unbiased", {"stat": "unbiased"}),
    ("unbiased+eps outside", {"stat": "unbiased", "smap": "outside"}),
    ("unbiased+eps ignored", {"stat": "unbiased", "smap": "ignored"}),
    ("sign", {"whole": -1.0}), ("times d", {"whole": "d"}), ("over d", {"whole": "1/d"}), ("times 2", {"whole": 2.0}),
]
X_HAT_ONLY = [("x_hat unbiased", {"hstat": "unbiased", "hmap": "right"}),
              ("x_hat ignores eps", {"hstat": "biased", "hmap": "ignored"}),
              ("x_hat eps outside", {"hstat": "biased", "hmap": "outside"}),
              ("division ignores eps", {"smap": "ignored", "hstat": "biased", "hmap": "right"}),
              ("division by var", {"smap": "variance", "hstat": "biased", "hmap": "right"})]
TERM_MISTAKES = [("mean missing", {"mean": "missing"}), ("mean summed", {"mean": "sum"}),
                 ("mean doubled", {"mean": "double"}), ("var missing", {"var": "missing"}),
                 ("var summed", {"var": "sum"}), ("var doubled", {"var": "double"}), ("var halved", {"var": "half"}),
                 ("x in outer", {"var": "x"}), ("x_hat x", {"var": "xh_x"}), ("x x_hat", {"var": "x_xh"})]
COMBINATIONS = [("unbiased+mean missing", {"stat": "unbiased", "mean": "missing"}),
                ("eps outside+var missing", {"smap": "outside", "var": "missing"}),
                ("divided by var+x", {"smap": "variance", "var": "x"}),
                ("no division+mean missing", {"smap": "none", "mean": "missing"}),
                ("sign+var missing", {"whole": -1.0, "var": "missing"}),
                ("both terms missing", {"mean": "missing", "var": "missing"}),
                ("both terms summed", {"mean": "sum", "var": "sum"}),
                ("unbiased+over d", {"stat": "unbiased", "whole": "1/d"}),
                ("eps fixed in x_hat", {"hmap": "fixed"})]
HOWS = ["var", "std", "manual"]


def _exercise_mutants(exercise, make, styles, prefix):
    found = []

    def add(planted, function, label, **namespace):
        found.append(mutant(NB, exercise, planted, function, f"{prefix}/{label}", **namespace))

    term_styles = [s for s in styles if s != "autograd"]
    for (label, kw), style in itertools.product(SCALE_MISTAKES, styles):
        add(_planted(**kw), make(style, **kw), f"{label}/{style}")
    for i, ((label, kw), style) in enumerate(itertools.product(X_HAT_ONLY, term_styles[:3])):
        add(_planted(**kw), make(style, how=HOWS[i % 3], **kw), f"{label}/{style}/{HOWS[i % 3]}")
    for i, ((label, kw), style) in enumerate(itertools.product(TERM_MISTAKES, term_styles)):
        add(_planted(**kw), make(style, how=HOWS[i % 2], **kw), f"{label}/{style}/{HOWS[i % 2]}")
    for (label, kw), style in itertools.product(COMBINATIONS, term_styles):
        add(_planted(**kw), make(style, **kw), f"{label}/{style}")
    return found


def _jacobian_mutants():
    return _exercise_mutants(JAC, make_jacobian, JAC_STYLES + ["autograd"], "jacobian")


def _vjp_mutants():
    found = _exercise_mutants(VJP, make_vjp, VJP_STYLES + ["autograd"], "vjp")
    for style in VJP_STYLES:
        found.append(mutant(NB, VJP, _planted(mean="missing", var="missing", smap="none"),
                            make_vjp(style, mean="missing", var="missing", smap="none"), f"vjp/returns g/{style}"))
    # a right VJP, a wrong Jacobian: the test that compares the two
    wrong_jacobians = {
        "mean missing": make_jacobian("matrix", mean="missing"),
        "var missing": make_jacobian("broadcast", var="missing"),
        "unbiased": make_jacobian("einsum", stat="unbiased"), "x": make_jacobian("matrix", var="x"),
        "eps ignored": make_jacobian("broadcast", smap="ignored"), "sign": make_jacobian("loop", whole=-1.0),
        "asymmetric": make_jacobian("matrix", var="xh_x"), "no division": make_jacobian("torch", smap="none"),
        "autograd unbiased": make_jacobian("autograd", stat="unbiased"),
        "eps outside": make_jacobian("einsum", smap="outside"),
    }
    for i, (name, jacobian) in enumerate(wrong_jacobians.items()):
        for style in (VJP_STYLES[i % 5], VJP_STYLES[(i + 2) % 5]):
            found.append(mutant(NB, VJP, "bwd.functions_disagree", make_vjp(style),
                                f"vjp/disagrees with a Jacobian: {name}/{style}", layer_norm_jacobian=jacobian))
    # builds the matrix (slow: each allocates at least 128 MiB at d = 4096)
    for name, function in _builders().items():
        found.append(mutant(NB, VJP, "bwd.builds_jacobian", function, f"vjp/builds (d, d): {name}"))
    return found


def _backward_mutants():
    found = []

    def add(planted, function, label):
        found.append(mutant(NB, BWD, planted, function, f"backward/{label}"))

    # the scale, everywhere: dgamma's x_hat shows it first
    for (label, kw), style in itertools.product(SCALE_MISTAKES[:8], BWD_STYLES[::2] + ["autograd"]):
        add(_planted(**kw), make_backward(style, **kw), f"{label}/{style}")
    for i, style in enumerate(BWD_STYLES):
        how = HOWS[i % 3]
        # the scale of dx only (x_hat right), the terms of dx and its whole factor
        for label, kw in X_HAT_ONLY[3:] + [("dx unbiased", {"stat": "unbiased", "hstat": "biased", "hmap": "right"}),
                                           ("dx eps outside", {"smap": "outside", "hstat": "biased",
                                                               "hmap": "right"})]:
            add(_planted(**kw), make_backward(style, how=how, **kw), f"{label}/{style}")
        for label, kw in TERM_MISTAKES[::2] + SCALE_MISTAKES[8:] + COMBINATIONS[4:6]:
            add(_planted(**kw), make_backward(style, how=how, **kw), f"dx {label}/{style}")
        # gamma in dx
        for mode in ["ignore", "divide", "after", "twice"]:
            add("bwd.gamma_not_in_g", make_backward(style, gamma_mode=mode, how=how), f"gamma {mode}/{style}")
        # what comes back, and the parameter gradients
        for ret in ["list", "pair", "quad", "nested"]:
            add("bwd.not_a_triple", make_backward(style, ret=ret), f"returns {ret}/{style}")
        for part, kw in [("dgamma", {"dgamma": "{}"}), ("dbeta", {"dbeta": "{}"}),
                         ("both", {"dgamma": "{}", "dbeta": "{}"}), ("dgamma std", {"dgamma": "{}", "how": "std"})]:
            add("bwd.params_not_summed", make_backward(style, **{k: v.format("not_summed") if k != "how" else v
                                                                   for k, v in kw.items()}),
                f"{part} not summed/{style}")
            add("bwd.summed_axis0_only", make_backward(style, **{k: v.format("axis0") if k != "how" else v
                                                                   for k, v in kw.items()}),
                f"{part} axis 0/{style}")
        for how_ in HOWS:
            add("bwd.dgamma_times_gamma", make_backward(style, how=how_, dgamma="times_gamma"),
                f"dgamma times gamma/{style}/{how_}")
            add("bwd.dgamma_wrong", make_backward(style, how=how_, dgamma="mean"), f"dgamma mean/{style}/{how_}")
        add("bwd.dgamma_times_gamma", make_backward(style, how=how, dgamma="g"), f"dgamma from g/{style}")
        add("bwd.dgamma_wrong", make_backward(style, dgamma="dx"), f"dgamma from dx/{style}")
        add("bwd.x_instead_of_x_hat", make_backward(style, how=how, dgamma="x"), f"dgamma uses x/{style}")
        for mode in ["mean", "gamma", "xhat"]:
            add("bwd.dbeta_wrong", make_backward(style, dbeta=mode, how=how), f"dbeta {mode}/{style}")
        add("bwd.dbeta_wrong", make_backward(style, dbeta="mean", how="std"), f"dbeta mean/{style}/std")
    add("bwd.not_a_triple", make_backward("autograd", ret="dict"), "returns dict/autograd")
    # statistics over other axes than the features
    for style in ["vectorised", "sums", "torch"]:
        for axes in ["all", "first", "lead"]:
            add("bwd.stats_wrong_axis", make_backward(style, axes=axes), f"x_hat stats over {axes}/{style}")
            for which in ["both", "mean", "proj"]:
                if which == "both" or style != "sums":
                    add("bwd.stats_wrong_axis", make_backward(style, dx_axes=axes, which=which),
                        f"dx means ({which}) over {axes}/{style}")
    return found


def _unique_labels(items):
    labels = [item.label for item in items]
    duplicates = {label for label in labels if labels.count(label) > 1}
    assert not duplicates, duplicates
    return items


MUTANTS = _unique_labels(_jacobian_mutants() + _vjp_mutants() + _backward_mutants())


# ------------------------------------------------------------------ correct implementations
def _correct():
    found = []
    for function in impl.CORRECT_JACOBIANS:
        found.append(Correct(NB, JAC, function, f"jacobian/impl/{function.__name__}"))
    for function in impl.CORRECT_VJPS:
        found.append(Correct(NB, VJP, function, f"vjp/impl/{function.__name__}"))
    for function in impl.CORRECT_BACKWARDS:
        found.append(Correct(NB, BWD, function, f"backward/impl/{function.__name__}"))
    for exercise in (JAC, VJP, BWD):
        found.append(Correct(NB, exercise, solution(NB, exercise), f"{exercise}/source solution"))
    for style in JAC_STYLES + ["autograd"]:
        found.append(Correct(NB, JAC, make_jacobian(style, how=HOWS[len(style) % 3]), f"jacobian/generated/{style}"))
    for style in VJP_STYLES + ["autograd"]:
        found.append(Correct(NB, VJP, make_vjp(style, how=HOWS[len(style) % 3]), f"vjp/generated/{style}"))
    for style in BWD_STYLES + ["autograd"]:
        found.append(Correct(NB, BWD, make_backward(style, how=HOWS[len(style) % 3]), f"backward/generated/{style}"))
    # a right VJP checked against each right Jacobian
    for function in impl.CORRECT_JACOBIANS:
        found.append(Correct(NB, VJP, make_vjp("means"), f"vjp/with impl jacobian {function.__name__}",
                             {"layer_norm_jacobian": function}))
    return found


CORRECT = _unique_labels(_correct())

# every id of grader.catalogue.backward is planted above and reachable through the test cells
UNREACHABLE: set = set()
