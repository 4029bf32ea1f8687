# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 06 · Mean and variance in one stable pass
#
# Every LayerNorm call starts with two statistics per token, the mean and the variance of
# its $d$ features. A fused GPU kernel wants both from **one** sweep over the row: it reads
# the features once, keeps a few numbers per thread, and never goes back. The formula most of
# us learned for that, $\sigma^2=\operatorname{mean}(x^2)-\mu^2$, does read the data once, and it
# quietly destroys every digit of the answer when the mean is large compared with the spread.
#
# By the end of this notebook you will be able to
#
# 1. predict how many digits $\operatorname{mean}(x^2)-\mu^2$ loses at a given offset, in float64
#    and in float32, measure it, and compare it with Chan, Golub & LeVeque's worst-case bounds,
# 2. explain why the *order* of a sum matters too (NumPy sums pairwise; optional section 3),
# 3. derive Welford's update of the sum of squared deviations and implement **Welford's
#    algorithm**: one pass, one element at a time, and stable,
# 4. implement the **parallel merge** of two partial results (Chan, Golub & LeVeque), the
#    reduction that GPU kernels spread over their threads, and
# 5. compute LayerNorm's statistics for a `(T, d)` array with it, one feature at a time and
#    as a tree of "threads".
#
# **Time.** About 75 minutes, and about 5 more for the optional part. This is an estimate, not a timing of
# learners: `tools/read-through-estimate` counts about 4,800 words of prose (read at 150 words a minute), 24
# code cells to run (half a minute each), 2 graded exercises (10 minutes each), 1 derivation steps (5 each), 2
# predictions (2 each) and 0 widgets (5 each), and adds the 10 s the solved notebook took to run on the course's
# test machine.
#
# The notebook assumes LayerNorm's definition ([notebook 01](01_bn_vs_ln.ipynb)); it stands on its own
# otherwise.
#
# **Predict, then run.** A few cells ask you for a guess first: write a number in place of the
# `...` in the `guess_...` cell, run it, then run the cell after it, which measures the answer
# and tells you how close you were. Nothing about a guess is graded.
#
# **How the exercises work.** Each exercise is a function with a fixed signature. Replace
# `raise NotImplementedError()` with your code, run the cell, then run the checks below it.
# Until you implement a function, its checks fail with `NotImplementedError`; that is expected.
# A failing check tells you what it expected, what it got, and the most likely cause.

# %%
import matplotlib.pyplot as plt
import numpy as np

from grader.checks.welford import (
    check_welford_combine,
    check_welford_mean_var,
    check_welford_one_pass,
    check_m2_update,
    exact_mean_var,
)
from grader.compare import check_signature
from grader.learner import hint, progress
from grader.predict import compare
from normlab.run_mode import quick_run
from normlab.welford_demo import (
    NAIVE_GUIDE,
    WELFORD_GUIDE,
    condition_numbers,
    summation_error_figure,
    summation_errors,
    variance_error_figure,
    variance_errors,
)

QUICK = quick_run()  # True under nbgrader: demo cells do the least work and figures are not drawn
U64, U32 = 2.0**-53, 2.0**-24  # unit roundoff: the largest relative error of one rounding
print(f"float64: u = {U64:.2e}, about {-np.log10(U64):.1f} significant decimal digits")
print(f"float32: u = {U32:.2e}, about {-np.log10(U32):.1f} significant decimal digits")

# %% [markdown]
# ## 1. Two ways to write the variance
#
# LayerNorm uses the mean and the *biased* variance of a token's $n=d$ features:
#
# $$\mu=\frac1n\sum_{i=1}^n x_i,\qquad \sigma^2=\frac1n\sum_{i=1}^n (x_i-\mu)^2 .$$
#
# Read literally, this needs **two passes**: one to get $\mu$, a second for the squared
# deviations. Expanding the square removes the dependence on $\mu$ inside the sum,
#
# $$\sigma^2=\frac1n\sum_{i=1}^n x_i^2-\mu^2=\operatorname{mean}(x^2)-\mu^2,$$
#
# so a single pass that accumulates $\sum x_i$ and $\sum x_i^2$ side by side seems to do the
# job. Both formulas are exact in real arithmetic. Here they are, written for rows of any
# leading shape `(..., n)` so that we can later run them on many rows at once.

# %%
def naive_mean_var(x):
    """The textbook one-pass formula mean(x²) - mean(x)². x: (..., n)."""
    mean = np.mean(x, axis=-1)
    return mean, np.mean(x * x, axis=-1) - mean**2


def two_pass_mean_var(x):
    """Mean first, then the mean squared deviation from it. x: (..., n)."""
    mean = np.mean(x, axis=-1)
    return mean, np.mean((x - mean[..., None]) ** 2, axis=-1)


x_example = np.array([2.0, 4.0, 6.0, 8.0])
for name, formula in [("naive", naive_mean_var), ("two-pass", two_pass_mean_var)]:
    mean, var = formula(x_example)
    print(f"{name:>8}: mean = {mean}, var = {var}")

# %% [markdown]
# ## 2. Catastrophic cancellation
#
# A floating-point number keeps a fixed number of significant digits: each operation is
# exact up to a relative error of at most $u$, the unit roundoff printed above. So
# $\operatorname{mean}(x^2)$ and $\mu^2$ each arrive with an error of about $u\,\mu^2$. When
# $|\mu|\gg\sigma$ they are two huge, nearly equal numbers, and their difference $\sigma^2$
# is small: the subtraction is exact, but it exposes the errors they already carried. The
# relative error of the result is about
#
# $$\frac{u\,(\mu^2+\sigma^2)}{\sigma^2}=u\Big(1+\frac{\mu^2}{\sigma^2}\Big),$$
#
# which reaches 100% once $\mu/\sigma$ is about $1/\sqrt u$. The smallest example fits in two
# float32 numbers.

# %%
pair = np.array([2281.5, 2281.25], dtype=np.float32)
mean_pair, var_pair = exact_mean_var(pair)
naive_pair = naive_mean_var(pair)[1]
print("x               =", pair)
print("x**2 in float32 =", pair * pair, "  exact:", [float(v) ** 2 for v in pair])
print("mean(x**2)      =", np.mean(pair * pair), "   mu**2 =", np.float32(np.mean(pair)) ** 2)
print(f"naive variance  = {naive_pair}")
print(f"two-pass        = {two_pass_mean_var(pair)[1]}")
print(f"true variance   = {var_pair}   (mean {mean_pair})")
print(f"spacing of float32 numbers near 5.2e6: {np.spacing(np.float32(5.2e6))}")

# %% [markdown]
# The squares are about $5.2\times10^6$, where neighbouring float32 numbers are $0.5$ apart:
# each square is rounded by up to $0.25$, sixteen times the variance we are after. The
# two-pass formula never forms a large square: the deviations $\pm0.125$ are exact, and so is
# their mean square.
#
# How bad does it get as the mean grows? The next cell draws $n$ standard normal values, moves
# them to an offset $\mu$ between $10^0$ and $10^{12}$, stores them in float64 or float32, and
# compares each formula with the exact variance of the stored values (rational arithmetic,
# rounded once). Each point is the median over a few independent draws.
#
# **Predict first.** The data are $10^8+\mathcal N(0,1)$ in float64, so $\mu/\sigma\approx10^8$.
# How many correct significant decimal digits does $\operatorname{mean}(x^2)-\mu^2$ keep? (A
# relative error of $10^{-k}$ means $k$ correct digits; 100% or more means none.)

# %%
guess_naive_digits_1e8 = ...  # your guess: a whole number of correct digits, from 0 to 16

# %%
offsets = 10.0 ** np.arange(13)
n_sweep, trials_sweep = (200, 2) if QUICK else (1000, 5)
formulas = {
    "E[x²] − μ² (naive)": lambda rows: naive_mean_var(rows)[1],
    "two-pass": lambda rows: two_pass_mean_var(rows)[1],
}
sweep = {name: variance_errors(formulas, offsets, dtype, n=n_sweep, trials=trials_sweep)
         for name, dtype in (("float64", np.float64), ("float32", np.float32))}
for name, errors in sweep.items():
    naive = errors["E[x²] − μ² (naive)"]
    lost = offsets[np.argmax(naive >= 1.0)]
    print(f"{name}: naive error at offset 1e4 = {naive[4]:.1e};  first offset with >= 100% error: {lost:.0e}")
fig = variance_error_figure(
    offsets, sweep, {"float64": U64, "float32": U32},
    title=f"E[x²] − μ² loses every digit once μ/σ ≈ 1/√u ({1 / np.sqrt(U64):.0e} in float64, "
          f"{1 / np.sqrt(U32):.0e} in float32)")
plt.show()

# %%
naive_error_1e8 = sweep["float64"]["E[x²] − μ² (naive)"][8]
naive_digits_1e8 = int(max(0.0, np.floor(-np.log10(naive_error_1e8))))
print(f"float64, offset 1e8: relative error {naive_error_1e8:.2f}, so {naive_digits_1e8} correct digits")
compare(guess_naive_digits_1e8, naive_digits_1e8, name="digits kept by E[x²] − μ² at offset 1e8")

# %% [markdown]
# <details><summary>Answer</summary>
#
# None. Both $\operatorname{mean}(x^2)$ and $\mu^2$ are about $10^{16}$ and each carries a rounding
# error of about $u\cdot10^{16}\approx1$, the size of the variance itself: the relative error is
# $u(1+\mu^2/\sigma^2)\approx1.1$, and the cell measured it. Every factor of 10 in the offset
# costs two digits, and float64 has about 16 to spend, so they are gone at $10^8$.
# </details>

# %% [markdown]
# The naive formula follows the dotted line $u(1+\mu^2/\sigma^2)$, the rounding of its two
# large terms alone: every factor of 10 in the offset costs two digits. In float64 the data
# $10^8+\mathcal N(0,1)$ leaves it no correct digit (the answer can even be negative); in float32
# an offset of a few thousand is enough. The float32 curves stop at $10^8$: there the spacing
# of float32 numbers exceeds the spread of the data, so the stored values are all equal and
# there is nothing left to measure. The two-pass formula does far better: its deviations
# $x_i-\mu$ are small numbers computed almost exactly, and the rounding error of $\mu$, about
# $u\,|\mu|$, enters its result only squared, as $(u\,\mu/\sigma)^2$, which is why it too drifts
# up at the largest offsets. It enters squared because the deviations from the exact mean sum to
# zero: a mean off by $\delta$ gives $\sum_i(x_i-\mu-\delta)^2=\sum_i(x_i-\mu)^2+n\delta^2$, with no
# term in $\delta$ alone.
#
# ### The worst case: Chan, Golub & LeVeque's bounds
#
# The dotted line is a typical size. Chan, Golub & LeVeque (1983, Table 1) bound the worst case:
# the relative error of the computed $S=\sum_i(x_i-\mu)^2=n\sigma^2$ (so also of $\sigma^2$), with
# the leading terms only and constant factors dropped, in terms of the condition number of the data
#
# $$\kappa=\frac{\lVert x\rVert_2}{\sqrt S}=\sqrt{1+\frac{\mu^2}{\sigma^2}}\approx\frac{|\mu|}{\sigma}.$$
#
# (The two forms agree because $\lVert x\rVert_2^2=\sum_i x_i^2=S+n\mu^2$ and $S=n\sigma^2$.) It
# is called the condition number because changing each $x_i$ by a relative amount of at most
# $\epsilon$ changes $S$ by a relative amount of at most about $2\kappa\epsilon$ (the change is
# $2\sum_i(x_i-\mu)\,\Delta x_i$; apply Cauchy–Schwarz): one power of $\kappa$ is in the problem
# itself, and an algorithm with $\kappa^2$ in its bound loses more than the data force it to.
#
# | algorithm | left to right | pairwise |
# |---|---|---|
# | textbook, $\sum_i x_i^2-\frac1n\big(\sum_i x_i\big)^2$ | $n\,\kappa^2u$ | $\kappa^2u\,\log_2 n$ |
# | two-pass | $n\,u+n^2\kappa^2u^2$ | $u\log_2 n+(\kappa\,u\log_2 n)^2$ |
# | updating (Welford, section 4) | $n\,\kappa\,u$ | $\kappa\,u\log_2 n$ |
#
# "Pairwise" means sums added as a balanced tree (section 3) and, for the updating algorithm,
# partial results merged as one (section 5). The power of $\kappa$ is the cancellation: two for
# the textbook formula, as the estimate above says. The factor in front, $n$ or $\log_2 n$, is how
# the rounding errors of the sums pile up. The two-pass bound is the squared term we just
# derived, plus the rounding of an ordinary sum of squares. `np.mean` sums pairwise, so the
# right-hand column is the one for both formulas above (NumPy adds blocks of up to 128 numbers
# with eight running totals before it splits in halves, so its worst case is somewhat above
# $\log_2 n$). The next cell sets the errors the sweep measured beside these bounds, with $\kappa$
# computed exactly from the data.

# %%
kappa_sweep = {name: condition_numbers(offsets, dtype, n=n_sweep, trials=trials_sweep)
               for name, dtype in (("float64", np.float64), ("float32", np.float32))}
log2_n = np.log2(n_sweep)
cgl_pairwise = {  # Chan, Golub & LeVeque (1983), Table 1, the column for pairwise sums
    "E[x²] − μ² (naive)": lambda kappa, u: kappa**2 * u * log2_n,
    "two-pass": lambda kappa, u: u * log2_n + (kappa * u * log2_n) ** 2,
}
for name, u in (("float64", U64), ("float32", U32)):
    print(f"{name}, n = {n_sweep}: measured error / bound")
    print(f"{'offset':>8} {'κ':>8}" + "".join(f"{label:>26}" for label in cgl_pairwise))
    for i in range(0, len(offsets), 2):
        kappa = kappa_sweep[name][i]
        if not np.isnan(kappa):
            print(f"{offsets[i]:>8.0e} {kappa:>8.1e}" + "".join(
                f"{sweep[name][label][i]:>16.1e} / {bound(kappa, u):.1e}" for label, bound in cgl_pairwise.items()))
    ratios = np.concatenate([sweep[name][label] / bound(kappa_sweep[name], u) for label, bound in cgl_pairwise.items()])
    naive_error = sweep[name]["E[x²] − μ² (naive)"]
    margin = cgl_pairwise["E[x²] − μ² (naive)"](kappa_sweep[name], u) / naive_error
    kept = np.isfinite(margin) & (naive_error < 0.5)  # rows where the naive result keeps a digit
    print(f"naive formula, rows that keep a digit: bound / measured from {margin[kept].min():.0f} to {margin[kept].max():.0f}")
    print(f"largest measured / bound: {np.nanmax(ratios):.2g}; "
          f"every error below its bound: {bool(np.nanmax(ratios) < 1)}\n")

# %% [markdown]
# Every error the sweep measured lies inside its bound (the last line of each block): the naive
# formula's by a factor of 4 to 16 where it keeps a digit (the line above it), two-pass's by far more. A bound assumes that every
# rounding error has the largest size and that all of them push the same way; real ones are
# smaller and partly cancel. What the bounds get right is the shape: the slopes of the figure,
# two digits per factor of 10 in $\mu/\sigma$ for the textbook formula, and the second-order
# drift of two-pass.

# %% [markdown]
# ## 3. The order of a sum matters too (optional)
#
# > **Optional.** This section explains the factor $n$ against $\log_2 n$ in the bounds above.
# > Nothing later needs more than its conclusion, that pairwise sums are far more accurate than
# > a running total. Short of time? Skip to section 4.
#
# Both formulas above are built on sums, and a sum of $n$ numbers is not exact either. Adding
# left to right into one running total (*recursive* summation) has an error bound that grows
# like $(n-1)\,u$; splitting the numbers in two halves, summing each half the same way and
# adding the two results (*pairwise* summation) has a bound that grows like $\log_2 n\cdot u$
# (both relative to the sum, for numbers of one sign; Higham, 2002, ch. 4). `np.sum` and
# `np.mean` sum pairwise along a contiguous axis (short blocks are added directly, longer ones
# split in halves); `np.cumsum`, and any Python loop, add left to right. Here are both on
# uniform float32 numbers in $[0, 1)$, against the correctly rounded `math.fsum`.
#
# **Predict first.** For $n=2^{22}$ (about 4.2 million) float32 values, how many times smaller
# is the relative error of the pairwise sum than that of the left-to-right sum? The two bounds
# above differ by $(n-1)/\log_2 n$, about $1.9\times10^5$ here; do the actual errors differ as much?

# %%
guess_sum_error_ratio = ...  # your guess: (left-to-right error) / (pairwise error) at n = 2**22

# %%
rng = np.random.default_rng(0)
n_sum = 2**18 if QUICK else 2**22
values32 = rng.random(n_sum, dtype=np.float32)

n_loop = 2**14
total = np.float32(0.0)
for v in values32[:n_loop]:  # a plain Python loop adds left to right, in float32
    total += v
print(f"Python loop over {n_loop} float32 values: {total}; np.cumsum's last entry: "
      f"{np.cumsum(values32[:n_loop])[-1]} (the same additions, in the same order)")

sizes = np.unique(np.logspace(4, np.log2(n_sum), 25, base=2).astype(int))
sums = summation_errors(values32, sizes)
print(f"n = {n_sum}: left to right off by {sums['sequential'][-1]:.1e}, pairwise by {sums['pairwise'][-1]:.1e} "
      "(relative)")
fig = summation_error_figure(sums, U32, title=f"Pairwise sum: {sums['sequential'][-1] / sums['pairwise'][-1]:.0f}× "
                             f"smaller error than left to right (n = {n_sum:,})")
plt.show()

# %%
sum_error_ratio = sums["sequential"][-1] / sums["pairwise"][-1]
print(f"n = {n_sum:,}: bound ratio (n - 1) / log2(n) = {(n_sum - 1) / np.log2(n_sum):.3g}, "
      f"measured error ratio {sum_error_ratio:.3g}" + ("   (quick run: n is smaller than 2**22)" if QUICK else ""))
compare(guess_sum_error_ratio, sum_error_ratio, name="left-to-right error / pairwise error", rel=0.5)

# %% [markdown]
# <details><summary>Answer</summary>
#
# Large, but far less than the ratio of the bounds; the cell prints both. A bound assumes that
# every rounding error has the worst size and the same sign. Real rounding errors are smaller
# on average and partly cancel, so both sums stay well inside their bounds, the left-to-right one
# by a larger factor. The ordering survives (pairwise wins by orders of magnitude); the
# worst-case ratio does not.
# </details>

# %% [markdown]
# The left-to-right total drifts as soon as it is much larger than the numbers it adds: each
# addition rounds the total, and the rounding errors pile up. Pairwise summation adds numbers
# of similar size at every level, so its error barely grows. Keep this in mind for the rest of
# the notebook: Welford's running mean is a left-to-right update, and the parallel merge of
# section 5 lets you arrange the same work as a tree.

# %% [markdown]
# ## 4. Welford's algorithm
#
# Welford (1962) keeps three numbers while reading the data once: the count $k$ of elements
# seen so far, their mean $\mu_k$, and $M_{2,k}=\sum_{i\le k}(x_i-\mu_k)^2$, the sum of squared
# deviations from that mean. It starts from $k=0$, $\mu_0=0$, $M_{2,0}=0$, and at the end
# $\sigma^2=M_{2,n}/n$. The mean is the easy half: the mean of $k$ numbers, written as a
# correction of the mean of the first $k-1$, is
#
# $$\mu_k=\mu_{k-1}+\frac{x_k-\mu_{k-1}}{k}.$$
#
# ### Derive it · the update of $M_2$
#
# When $x_k$ arrives you know $M_{2,k-1}$, the old mean $\mu_{k-1}$, the new mean $\mu_k$ and
# $x_k$ itself, but no earlier element. **Find $M_{2,k}$ from these four numbers.** Write your
# answer as `my_m2_update(m2, mean_old, mean_new, x)`, returning the new $M_2$; the cell after it
# runs your update over three streams (the running mean is computed for you) and compares the
# final $M_2$ with the exact sum of squared deviations.
#
# Two things to aim for. It must be exact in real arithmetic: the check starts with
# $(1, 3, 5, 11)$, where every step is exact in float64. And it must be *stable*: the last stream
# sits at an offset of $10^5$, where an expression that multiplies large numbers such as
# $x\cdot\mu$ and then subtracts them loses digits, exactly as $\operatorname{mean}(x^2)-\mu^2$
# did. Aim for a product of differences, each of the size of $\sigma$.
#
# *Hint:* start from $M_{2,k}=\sum_{i\le k}x_i^2-k\mu_k^2$ for $k$ and for $k-1$, subtract, and
# write $x_k=\mu_{k-1}+\delta$ and $\mu_k=\mu_{k-1}+\delta/k$. Then get rid of $k$: your function
# is not given it, and the two means already know it.

# %%
def my_m2_update(m2, mean_old, mean_new, x):
    """M2 after x arrives, from M2 before it and the means before and after it."""
    return ...  # your expression


# %%
check_m2_update(my_m2_update)

# %% [markdown]
# <details><summary>Worked derivation</summary>
#
# Write $a=\mu_{k-1}$ and $\delta=x_k-a$, so that $x_k=a+\delta$ and $\mu_k=a+\delta/k$. With
# $M_{2,k}=\sum_{i\le k}x_i^2-k\mu_k^2$ and the same for $k-1$, the old squares cancel:
#
# $$M_{2,k}-M_{2,k-1}=x_k^2-k\mu_k^2+(k-1)a^2
#   =(a+\delta)^2-k\Big(a+\frac{\delta}{k}\Big)^2+(k-1)a^2=\delta^2\,\frac{k-1}{k}.$$
#
# The factor $(k-1)/k$ is hidden in the new mean: $x_k-\mu_k=\delta-\delta/k=\delta\,(k-1)/k$. So
#
# $$M_{2,k}=M_{2,k-1}+(x_k-\mu_{k-1})\,(x_k-\mu_k),$$
#
# and Welford's whole step is $\delta=x_k-\mu_{k-1}$, $\mu_k=\mu_{k-1}+\delta/k$,
# $M_{2,k}=M_{2,k-1}+\delta\,(x_k-\mu_k)$. The classic mistakes show why both means are needed:
# $(x_k-\mu_{k-1})^2$ is $k/(k-1)$ times too large, $(x_k-\mu_k)^2$ is $(k-1)/k$ of the answer.
# Multiplied out, $x_k^2-x_k\mu_k-x_k\mu_{k-1}+\mu_{k-1}\mu_k$ is the same number in real
# arithmetic and the cancelling form in floating point.
#
# **Why the product form is stable.** Both factors are *deviations*, of the size of $\sigma$;
# nothing of the size of $\mu^2$ is ever formed, so there is nothing large to cancel. The only
# big number, $\mu_k$, is rounded once per step, so after $n$ steps its error can reach about
# $n\,u\,|\mu|$, and every deviation inherits it: a relative error of about $n\,u\,|\mu|/\sigma$ in
# $M_2$. That is the bound of Chan, Golub & LeVeque (1983, Table 1) for this updating algorithm,
# $n\,\kappa\,u$, against $n\,\kappa^2u$ for $\sum x_i^2-(\sum x_i)^2/n$ accumulated the same way
# (left to right), with $\kappa=\sqrt{1+\mu^2/\sigma^2}\approx|\mu|/\sigma$ (section 2). Both grow
# with $n$; the difference is one power of $\mu/\sigma$ instead of two.
# </details>

# %% [markdown]
# ### Exercise 1 · `welford_mean_var`
#
# Write `welford_mean_var(x)` for a 1-D array `x` of $n\ge1$ numbers (float or integer dtype).
# Read each element **once, in order** (`for xi in x:`), update the count, the mean and $M_2$
# (with the update you derived above), and return `(mean, var)` with the **biased** variance
# $M_2/n$, as two Python floats (or numpy float64 scalars): not arrays, not float32.
#
# The checks compare your answer with exact rational arithmetic, on data at an offset of
# $10^8$ among others, and allow what one pass must round: with $u=2^{-53}$ and
# $\delta=2\,n\,u\,\operatorname{mean}|x_i|$, an error of $10^{-12}\sigma+\delta$ in the mean and
# $10^{-9}\sigma^2+2\delta\sigma+\delta^2$ in the variance. A failed check prints both numbers. They also call your function with a **stream**: an object that supports
# only `for xi in x`, `len(x)`, `x[i]` and slices `x[a:b]`, like data arriving from a sensor.
# It reports a second pass over the data, any whole-array operation (`np.asarray(x)`,
# `np.mean(x)`, `x.sum()`, `x - m`), and memory that grows with the data (a list of the
# elements kept for later). The stream counts its reads itself, so a second pass costs points under the
# class grader too; memory is measured inside your own process, which proves nothing, so there it costs
# no points and is listed for your instructor.
#
# What the grader runs besides the checks you see: normal data at offsets $-10^8$ (5000
# values), $10^{10}$ (500 values) and $10^6$ with a spread of only $10^{-3}$; one element
# (variance 0, also as an `int32` array); two elements ($10^8$ and $10^8+1$, variance 0.25); the
# float32 pair of section 2 given in float64; the integers 1 to 10 (mean 5.5, variance 8.25);
# 300 integers near $10^9$ (`int64`); and a constant array (variance exactly 0). The stream check
# is also run with one element, with two, and with 300 `int64` integers near $10^9$.
#
# In this notebook's exercises, compute the result yourself: a graded function that calls PyTorch's
# `layer_norm`, `rms_norm`, `batch_norm`, `group_norm`, `instance_norm` or `var_mean` (or the matching
# `torch.nn` module), or a helper from the course's `grader` or `normlab` packages, skips the exercise.
# The class grader cannot prove what your code called (it runs in your own process, which your code
# controls), so no points depend on it: it lists what it saw for your instructor, who decides.
# Comparing with them in other cells is fine.
#
# *Hint:* three variables and one loop; convert at the end with `float(...)`.
#
# **Stuck?** Run `hint("welford_mean_var")` in a new cell. Its steps open as you try: step 1 (the
# idea) at once; step 2 (what your checks said) once you have run the checks below on your own
# code; step 3 (the shape of the code) after a check fails again since you saw step 2. Asking again
# repeats the highest open step and says what opens the next. `progress()` shows where you stand.

# %% nbgrader={"grade": false, "grade_id": "welford_mean_var", "locked": false, "schema_version": 3, "solution": true, "task": false}
def welford_mean_var(x):
    """One pass over x (1-D). Returns (mean, biased variance).

    x: (n,) with n >= 1, any real dtype; read once, element by element.
    Returns two Python floats (numpy float64 scalars are accepted too).
    """
    ### BEGIN SOLUTION
    count, mean, m2 = 0, 0.0, 0.0
    for xi in x:
        count += 1
        delta = xi - mean
        mean += delta / count
        m2 += delta * (xi - mean)
    return float(mean), float(m2 / count)
    ### END SOLUTION


# %% nbgrader={"grade": false, "grade_id": "signature_welford_mean_var", "locked": true, "schema_version": 3, "solution": false, "task": false}
# Locked: tells you if the signature above no longer matches what the tests call.
check_signature(welford_mean_var, "welford_mean_var", "(x)")

# %% nbgrader={"grade": true, "grade_id": "test_welford_mean_var", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
"""Checks (mean, var) against exact arithmetic on (2, 4, 6, 8), N(0, 1) data, and the same data at 1e8."""
check_welford_mean_var(welford_mean_var)
### BEGIN HIDDEN TESTS
check_welford_mean_var(welford_mean_var, n=5000, offset=-1e8, seed=1)
check_welford_mean_var(welford_mean_var, n=500, offset=1e10, seed=2)
check_welford_mean_var(welford_mean_var, n=800, offset=1e6, scale=1e-3, seed=3)
for x_hidden in [
    np.array([3.25]),                       # one element: the variance is 0
    np.array([1e8 + 0.5]),
    np.array([1e8, 1e8 + 1.0]),             # two elements: var = 0.25
    np.array([2281.5, 2281.25]),            # the float32 pair, in float64
    np.arange(1, 11),                       # integers: mean 5.5, var 8.25
    np.array([7], dtype=np.int32),
    10**9 + np.random.default_rng(4).integers(0, 100, size=300),
    np.full(50, 0.1),                       # constant: var exactly 0
]:
    check_welford_mean_var(welford_mean_var, x=x_hidden)
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_welford_one_pass", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
"""Feeds a read-once stream of 20000 values and checks one pass, constant memory and the answer."""
check_welford_one_pass(welford_mean_var)
### BEGIN HIDDEN TESTS
check_welford_one_pass(welford_mean_var, n=1, seed=1)
check_welford_one_pass(welford_mean_var, n=2, offset=0.0, seed=2)
check_welford_one_pass(welford_mean_var, n=300, offset=10**9, dtype=np.int64, seed=3)
### END HIDDEN TESTS

# %% [markdown]
# Your function against the two formulas of section 1, on the data of the checks: $10^8$ plus
# 1000 standard normal values, in float64.

# %%
x_offset = 1e8 + np.random.default_rng(0).standard_normal(1000)
exact_offset = exact_mean_var(x_offset)[1]
for name, variance in [("E[x²] − μ²", naive_mean_var(x_offset)[1]),
                       ("two-pass", two_pass_mean_var(x_offset)[1]),
                       ("welford_mean_var", welford_mean_var(x_offset)[1])]:
    print(f"{name:>17}: var = {float(variance)!r:<20} relative error {abs(variance - exact_offset) / exact_offset:.1e}")
print(f"{'exact':>17}: var = {exact_offset!r}")
print("the float32 pair:", welford_mean_var(pair), " exact:", exact_mean_var(pair))

# %% [markdown]
# Welford is many orders of magnitude better than the naive formula, and still some way behind
# two-pass: its running mean is rounded at every step, and that error enters the variance to
# first order. That is the price of reading the data once. Chan, Golub & LeVeque (1983) analyse
# these algorithms side by side.

# %% [markdown]
# ## 5. Merging partial results
#
# A GPU does not walk a row of 4096 features with one thread. Each thread runs Welford on its
# own slice and holds a **partial result** $(n_A,\mu_A,M_{2,A})$; then the threads merge their
# partials, two at a time, in a tree. Chan, Golub & LeVeque give the merge of two chunks $A$ and
# $B$ (in a 1979 Stanford report; their 1983 paper compares it with the other algorithms).
#
# **Derive the merge before you write it.** With $\delta=\mu_B-\mu_A$, answer on paper:
#
# 1. The count is easy. The merged mean is a weighted average of $\mu_A$ and $\mu_B$: with which
#    weights? Write it as $\mu_A$ plus a multiple of $\delta$.
# 2. $M_2$ of the union is the spread *within* each chunk plus a spread *between* the two chunk
#    means. Check your between term on two chunks of one element each, $x$ and $y$: the merged $M_2$
#    must be $(x-y)^2/2$.
# 3. With $n_B=1$ (one new element, $M_{2,B}=0$) your merge must be exactly the Welford update you
#    derived in section 4. Is it?
# 4. What must come back when one partial is empty? What does your formula do when both are?
#
# <details><summary>The merge (open after you have written yours)</summary>
#
# $$n=n_A+n_B,\qquad \mu=\mu_A+\delta\,\frac{n_B}{n},\qquad
#   M_2=M_{2,A}+M_{2,B}+\delta^2\,\frac{n_A\,n_B}{n}.$$
#
# For $x$ and $y$: $(x-y)^2\cdot\frac{1\cdot1}{2}$. With $n_B=1$ it is Welford's update, so Welford is
# the special case "merge one element at a time". With one partial empty the merge must return
# the other; with both empty $\delta\,n_B/n$ is $0/0$.
# </details>
#
# Merging as a balanced tree, from
# single elements up, is Chan, Golub & LeVeque's *pairwise algorithm*: its bound is
# $\kappa\,u\log_2 n$ instead of Welford's $n\,\kappa\,u$ (the table in section 2), the same gain
# as pairwise summation over a running total. Section 6 measures both.
#
# We represent a partial result as a tuple `(count, mean, M2)` with an `int` count; the empty
# partial, of no data at all, is `(0, 0.0, 0.0)`. We keep $M_2$ rather than the variance
# because sums of squared deviations of two chunks add up (plus the between term), while
# variances do not. The next cell gives you the two conversions.

# %%
EMPTY = (0, 0.0, 0.0)


def welford_partial(chunk):
    """(count, mean, M2) of one chunk, from your welford_mean_var. chunk: (m,), possibly empty."""
    if len(chunk) == 0:
        return EMPTY
    mean, var = welford_mean_var(chunk)
    return len(chunk), mean, var * len(chunk)


def welford_finalize(partial):
    """(mean, biased variance) of a partial result with count >= 1."""
    count, mean, m2 = partial
    return mean, m2 / count


# %% [markdown]
# ### Exercise 2 · `welford_combine`
#
# Write `welford_combine(a, b)` that merges two partial results `(count, mean, M2)` into the
# partial result of both chunks together, with the merge you derived. If either partial is empty
# (count 0), return the other one unchanged: the formula would divide $0$ by $0$ when both are.
# Return a tuple `(count, mean, M2)` whose count is an `int` ($n_A+n_B$). The checks pass float
# means and $M_2$ and expect floats back; then they run every merge again with means and $M_2$ that
# are numpy arrays of shape `(3,)`, three data sets at once (section 6 merges one partial per token
# this way), and expect float64 arrays of that shape back. So use plain arithmetic: no `float(...)`,
# no `math.*` and no `if` on a mean or an $M_2$ (an `if` on the counts is fine).
#
# The checks build exact partials of chunks of uneven sizes (one of them empty), merge them
# left to right and as a pairwise tree, and compare with exact statistics of all the data and
# with your `welford_mean_var` over the same data in one pass. Every check also merges the empty
# partial with a partial on either side, and two empty partials (the result must be empty).
# The grader adds: two chunks of one element each, at offset 0; two empty
# chunks followed by chunks of 300 and 1 elements, an empty one, and chunks of 2 and 77, at offset
# $-10^8$, so the fold starts with empty partials; sixteen
# chunks of 64 at offset $10^4$, compared with your `welford_mean_var` too; and a chunk of 1000
# with a chunk of 1 at offset $10^8$. Each merged count must be exact. With $n$, $\mu$ and $\sigma$ those of
# all the data and $\delta=4\,n\,u\,(|\mu|+\sigma)$, the mean may be off by $10^{-12}\sigma+\delta$ and $M_2$ by
# $10^{-9}M_2+n\,(2\delta\sigma+\delta^2)$: the rounding a merge at a large offset cannot avoid.
#
# **Stuck?** `hint("welford_combine")` climbs the same ladder as Exercise 1: step 2 after a run of the
# checks below, step 3 after a failed run since step 2.

# %% nbgrader={"grade": false, "grade_id": "welford_combine", "locked": false, "schema_version": 3, "solution": true, "task": false}
def welford_combine(a, b):
    """Merge two partial results (count, mean, M2) into the one of both chunks.

    a, b: (count: int, mean, M2); the empty partial is (0, 0.0, 0.0).
    Returns (count, mean, M2) of the concatenated data.
    """
    ### BEGIN SOLUTION
    n_a, mean_a, m2_a = a
    n_b, mean_b, m2_b = b
    if n_a == 0:
        return b
    if n_b == 0:
        return a
    n = n_a + n_b
    delta = mean_b - mean_a
    return n, mean_a + delta * n_b / n, m2_a + m2_b + delta * delta * n_a * n_b / n
    ### END SOLUTION


# %% nbgrader={"grade": false, "grade_id": "signature_welford_combine", "locked": true, "schema_version": 3, "solution": false, "task": false}
# Locked: tells you if the signature above no longer matches what the tests call.
check_signature(welford_combine, "welford_combine", "(a, b)")

# %% nbgrader={"grade": true, "grade_id": "test_welford_combine", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
"""Merges uneven chunks (one empty) left to right and as a tree; compares with exact statistics and one pass."""
check_welford_combine(welford_combine, welford_mean_var)
### BEGIN HIDDEN TESTS
check_welford_combine(welford_combine, sizes=(1, 1), offset=0.0, seed=1)
check_welford_combine(welford_combine, sizes=(0, 0, 300, 1, 0, 2, 77), offset=-1e8, seed=2)
check_welford_combine(welford_combine, welford_mean_var, sizes=(64,) * 16, offset=1e4, seed=3)
check_welford_combine(welford_combine, sizes=(1000, 1), offset=1e8, seed=4)
### END HIDDEN TESTS

# %% [markdown]
# Here is the merge at work: the data of section 4 cut into chunks of very different sizes
# (one empty), each summarised on its own, then merged left to right and as a tree.

# %%
cuts = [0, 7, 7, 300, 301, 650, 1000]  # chunk sizes 7, 0, 293, 1, 349, 350
partials = [welford_partial(x_offset[start:stop]) for start, stop in zip(cuts[:-1], cuts[1:])]
print("chunk sizes:", [p[0] for p in partials])

merged = EMPTY
for p in partials:
    merged = welford_combine(merged, p)

level = partials
while len(level) > 1:
    merged_pairs = [welford_combine(level[k], level[k + 1]) for k in range(0, len(level) - 1, 2)]
    level = merged_pairs + (level[-1:] if len(level) % 2 else [])

for name, result in [("left to right", welford_finalize(merged)), ("tree", welford_finalize(level[0])),
                     ("one pass", welford_mean_var(x_offset))]:
    print(f"{name:>13}: mean {result[0]!r:<20} var {result[1]!r:<20} "
          f"relative error of var {abs(result[1] - exact_offset) / exact_offset:.1e}")

# %% [markdown]
# All three agree with the exact variance to many digits. This merge is what fused
# normalisation kernels parallelise: PyTorch's reduction library defines `WelfordOps`
# (`ATen/native/SharedReduceOps.h`) around two core operations, `reduce` (Welford's update of
# one element) and `combine` (the merge above), next to helpers: `project` turns the partial into
# the result, `warp_shfl_down` moves a partial between GPU threads, `translate_idx` passes it
# through unchanged. Its CPU kernels compute rowwise moments "by Welford algorithm and cascade sum"
# (`ATen/native/cpu/moments_utils.h`): Welford within chunks, then pairwise merges.

# %% [markdown]
# ## 6. LayerNorm's statistics, one feature at a time
#
# LayerNorm needs one mean and one variance per token of a `(T, d)` array. Your
# `welford_combine` works elementwise on arrays, so merging the partial `(1, X[:, j], 0)` of
# feature `j` updates all `T` tokens at once: Welford vectorised over the tokens, looping over
# the features. The second function does it the way a GPU block would: 32 "threads" each run
# Welford over their own slice of features, then merge their partials in a tree of 5 levels.
# With as many threads as features, each slice holds one feature and the tree is Chan, Golub &
# LeVeque's pairwise algorithm ($d$ must be a power of two for that, as it is here).

# %%
def welford_rows(X):
    """Mean and biased variance of each row of X: (T, d), one feature (column) at a time."""
    partial = (0, np.zeros(X.shape[0], X.dtype), np.zeros(X.shape[0], X.dtype))
    for j in range(X.shape[1]):
        partial = welford_combine(partial, (1, X[:, j], np.zeros_like(X[:, j])))
    return welford_finalize(partial)


def welford_rows_tree(X, threads=32):
    """Same statistics, GPU style: each of `threads` slices runs Welford, then a pairwise tree merge."""
    T, d = X.shape
    slices = X.reshape(T, threads, d // threads)  # thread t owns features t*d/threads ... (t+1)*d/threads - 1
    partial = (0, np.zeros((T, threads), X.dtype), np.zeros((T, threads), X.dtype))
    for j in range(slices.shape[2]):
        partial = welford_combine(partial, (1, slices[:, :, j], np.zeros_like(slices[:, :, j])))
    while partial[1].shape[1] > 1:  # every thread holds the same count, so halves merge exactly
        count, mean, m2 = partial
        partial = welford_combine((count, mean[:, 0::2], m2[:, 0::2]), (count, mean[:, 1::2], m2[:, 1::2]))
    count, mean, m2 = partial
    return welford_finalize((count, mean[:, 0], m2[:, 0]))


T_tokens, d_model = (4, 1024) if QUICK else (16, 4096)
z_tokens = np.random.default_rng(1).standard_normal((T_tokens, d_model))
print(f"T = {T_tokens} tokens, d = {d_model} features, float32: max relative error of the {T_tokens} variances;")
print("last two columns: Chan, Golub & LeVeque's bounds for Welford (left to right) and the pairwise algorithm")
print(f"{'offset':>6} {'κ':>6} {'E[x²]−μ²':>9} {'np.var':>8} {'Welford':>8} {'tree':>8} {'pairwise':>8}"
      f" {'d·κ·u':>8} {'log2(d)·κ·u':>11}")
for offset in [0.0, 30.0, 300.0, 3000.0]:
    X32 = (offset + z_tokens).astype(np.float32)
    stats = [exact_mean_var(row) for row in X32]
    exact = np.array([var for _, var in stats])
    kappa = max(np.sqrt(1 + mean**2 / var) for mean, var in stats)
    row = [naive_mean_var(X32)[1], np.var(X32, axis=-1), welford_rows(X32)[1], welford_rows_tree(X32)[1],
           welford_rows_tree(X32, threads=d_model)[1]]
    print(f"{offset:>6.0f} {kappa:>6.0f} " + " ".join(f"{np.max(np.abs(v - exact) / exact):>8.1e}" for v in row)
          + f" {d_model * kappa * U32:>8.1e} {np.log2(d_model) * kappa * U32:>11.1e}")
mean_check, var_check = welford_rows(z_tokens)
print("float64, offset 0: max |mean - np.mean| =", f"{np.max(np.abs(mean_check - z_tokens.mean(axis=-1))):.1e},",
      "max |var - np.var| =", f"{np.max(np.abs(var_check - z_tokens.var(axis=-1))):.1e}")

# %% [markdown]
# A token whose features share a mean a few hundred times their spread already costs the
# naive formula most of float32's digits; Welford, sequential or as a tree, keeps them, inside
# its bound. Here the error follows the length of the sequential part: Welford walks all $d$
# features in a row, the 32-thread tree $d/32$ per thread, the pairwise algorithm one.
# `np.var` is the two-pass formula (it subtracts the mean first), accurate but two passes.
#
# Finally, the sweep of section 2 once more, now with Welford: in float64 your
# `welford_mean_var` on each row, in float32 the row-wise `welford_rows` above (float32
# throughout, as in a kernel). The two guide lines are typical sizes at this fixed $n$, one and
# two powers of $\mu/\sigma$. The worst-case bounds of section 2 sit above them: both Welford
# versions add left to right, so theirs is $n\,\kappa\,u$, a factor $n$ above the guide; the naive
# and two-pass formulas sum pairwise. The cell also prints Welford's errors beside $n\,\kappa\,u$.
#
# **Predict first.** float32 keeps about 7 digits, and at an offset of $10^4$ the naive formula
# kept none of them. How many correct digits does Welford keep there, with $n=1000$? Think of
# how many powers of $\mu/\sigma$ its error carries.

# %%
guess_welford_digits_float32 = ...  # your guess: a whole number of correct digits, from 0 to 7

# %%
float64_methods = dict(formulas, **{"Welford (welford_mean_var)": lambda rows: [welford_mean_var(r)[1] for r in rows]})
float32_methods = dict(formulas, **{"Welford (welford_rows)": lambda rows: welford_rows(rows)[1]})
sweep_all = {
    "float64": variance_errors(float64_methods, offsets, np.float64, n=n_sweep, trials=trials_sweep),
    "float32": variance_errors(float32_methods, offsets, np.float32, n=n_sweep, trials=trials_sweep),
}
for (name, errors), u in zip(sweep_all.items(), (U64, U32)):
    welford_errors = [v for k, v in errors.items() if k.startswith("Welford")][0]
    bounds = n_sweep * kappa_sweep[name] * u  # Chan, Golub & LeVeque (1983): n·κ·u for the updating algorithm
    picked = ", ".join(f"{welford_errors[i]:.1e} (bound {bounds[i]:.1e})" for i in (0, 4, 6))
    print(f"{name}: Welford's error at offsets 1e0, 1e4, 1e6: {picked}; "
          f"largest error / bound: {np.nanmax(welford_errors / bounds):.1e}")
fig = variance_error_figure(offsets, sweep_all, {"float64": U64, "float32": U32}, guides=(NAIVE_GUIDE, WELFORD_GUIDE),
                            title="Welford's error grows like u·μ/σ, the naive formula's like u·(μ/σ)²")
plt.show()

# %%
welford_error_1e4 = sweep_all["float32"]["Welford (welford_rows)"][4]
welford_digits_1e4 = int(max(0.0, np.floor(-np.log10(welford_error_1e4))))
print(f"float32, offset 1e4: Welford's relative error {welford_error_1e4:.1e}, so {welford_digits_1e4} correct digits")
compare(guess_welford_digits_float32, welford_digits_1e4, name="digits kept by Welford in float32 at offset 1e4")

# %% [markdown]
# <details><summary>Answer</summary>
#
# About three. Welford's error carries one power of $\mu/\sigma$: about
# $u\,\mu/\sigma\approx6\times10^{-8}\cdot10^4\approx6\times10^{-4}$, which leaves three or four of
# float32's seven digits. The naive formula's error carries two powers, $u(\mu/\sigma)^2\approx6$,
# and left none. The bound $n\,\kappa\,u$, printed above, would allow almost no correct digit: it
# is the worst case, in which every rounding error is as large as possible and all of them push
# the same way.
# </details>

# %% [markdown]
# ## 7. In PyTorch
#
# This notebook does not import torch (a large library, slow to import for the little we would
# use), but three facts are worth knowing:
#
# - `torch.var(x)` and `torch.std(x)` default to the **unbiased** estimator (`correction=1`,
#   dividing by $n-1$); `np.var` defaults to the biased one. LayerNorm uses the biased variance,
#   so compare with `torch.var(x, dim=-1, correction=0)` (older spelling: `unbiased=False`).
# - `torch.var_mean(x, dim=-1, correction=0)` returns both statistics from one reduction.
# - The reductions behind them and behind `torch.nn.functional.layer_norm` accumulate with
#   Welford updates and merge partial results with the parallel formula: `WelfordOps` in
#   `ATen/native/SharedReduceOps.h` and `RowwiseMoments` in `ATen/native/cpu/moments_utils.h`
#   (in the headers installed with torch, under `torch/include`).

# %% [markdown]
# ## 8. Interview questions
#
# Try each one aloud before you reveal the answer.
#
# <details><summary><b>Why not compute the variance as E[x²] − E[x]²?</b></summary>
#
# Both terms are about $\mu^2$ and carry a rounding error of about $u\,\mu^2$; their difference
# $\sigma^2$ can be far smaller, so the relative error is about $u(\mu/\sigma)^2$. In float64 it
# reaches 100% near $\mu/\sigma\approx10^8$, in float32 near a few thousand, and the result can
# even come out negative. Use two passes, or Welford's update in one.
# </details>
#
# <details><summary><b>Write Welford's update. Why is it stable?</b></summary>
#
# $\delta=x-\mu$; $\mu\mathrel{+}=\delta/k$; $M_2\mathrel{+}=\delta\,(x-\mu_\text{new})$; at the end
# $\sigma^2=M_2/n$. Everything added is a deviation of the size of $\sigma$; no square of the
# size of $\mu^2$ is formed, so nothing large cancels. Chan, Golub & LeVeque (1983) bound its
# relative error by about $n\,\kappa\,u$, against $n\,\kappa^2u$ for the textbook formula (both
# accumulated left to right), with $\kappa\approx|\mu|/\sigma$. Merged as a balanced tree
# (their pairwise algorithm), the $n$ becomes $\log_2 n$.
# </details>
#
# <details><summary><b>Eight GPUs each hold the mean and variance of their shard. How do you get the global
# ones?</b></summary>
#
# Not by averaging the variances: that ignores how far the shard means are from each other.
# Convert each to $(n_i,\mu_i,M_{2,i}=n_i\sigma_i^2)$ and merge pairwise with
# $\mu=\mu_A+\delta n_B/n$, $M_2=M_{2,A}+M_{2,B}+\delta^2 n_An_B/n$ (Chan, Golub & LeVeque), in a
# tree of $\log_2 8=3$ levels; the counts matter when the shards are uneven.
# </details>
#
# <details><summary><b>Is Welford more accurate than the two-pass algorithm?</b></summary>
#
# No. Two-pass subtracts a mean whose rounding error then enters the variance only squared, so
# it is usually the more accurate of the two; Welford's running mean is rounded at every step,
# and that error enters to first order. Welford's advantage is that it needs one pass: it works
# on streams and in kernels that read each row once. Both are far better than $E[x^2]-\mu^2$.
# </details>
#
# <details><summary><b>Why does a fused LayerNorm kernel care about doing its statistics in one pass?</b></summary>
#
# LayerNorm does little arithmetic per byte, so its speed is set by memory traffic. Reading the
# row once and keeping only $(n,\mu,M_2)$ per thread, then merging the partials across threads,
# gives both statistics without a second read of the row. The merge is associative, so it can
# be done in any tree shape.
# </details>
#
# <details><summary><b>Your LayerNorm matches PyTorch's except for a tiny constant factor. What happened?</b></summary>
#
# Probably the variance: `torch.var` divides by $n-1$ by default, LayerNorm by $n$. The outputs
# then differ by a factor $\sqrt{(n-1)/n}$ (up to $\epsilon$). Use `correction=0`.
# </details>

# %% [markdown]
# ## Your progress
#
# The table reads the checks you have run in this notebook (it runs none itself): ✔ every check of an
# exercise passed at its last run, ✘ one failed, – not run yet. Run it again whenever you like.

# %%
progress()

# %% [markdown]
# ## What to remember
#
# - $E[x^2]-\mu^2$ reads the data once but loses digits like $u(\mu/\sigma)^2$: all of them at
#   $\mu/\sigma\approx1/\sqrt u$ ($10^8$ in float64, a few thousand in float32).
# - The condition number $\kappa=\sqrt{1+\mu^2/\sigma^2}\approx|\mu|/\sigma$ sets the worst case
#   (Chan, Golub & LeVeque, 1983): left to right, $n\,\kappa^2u$ for the textbook formula,
#   $n\,u+n^2\kappa^2u^2$ for two-pass, $n\,\kappa\,u$ for Welford; with pairwise sums or a tree of
#   merges, $\log_2 n$ replaces $n$. The measured errors sat well inside these bounds.
# - Welford: $\delta=x_k-\mu_{k-1}$, $\mu_k=\mu_{k-1}+\delta/k$, $M_{2,k}=M_{2,k-1}+\delta(x_k-\mu_k)$,
#   $\sigma^2=M_2/n$. One pass, constant memory, nothing of the size of $\mu^2$ formed.
# - Partial results $(n,\mu,M_2)$ merge exactly: $M_2=M_{2,A}+M_{2,B}+\delta^2n_An_B/n$. Welford is
#   the merge with one element; GPU kernels merge per-thread partials in a tree.
# - Two-pass is the most accurate when you can afford to read the data twice: its mean's error
#   enters squared. Sums themselves are best done pairwise (`np.sum`), not left to right.
# - LayerNorm uses the biased variance ($/n$); `torch.var` defaults to $/(n-1)$.
#
# *References:*
# B. P. Welford (1962), *Note on a method for calculating corrected sums of squares and products*, Technometrics.
# T. F. Chan, G. H. Golub & R. J. LeVeque (1979), *Updating formulae and a pairwise algorithm for computing sample
# variances*, Stanford report STAN-CS-79-773; and (1983), *Algorithms for computing the sample variance: analysis
# and recommendations*, The American Statistician.
# N. J. Higham (2002), *Accuracy and Stability of Numerical Algorithms*, 2nd ed., SIAM (§1.9, the sample variance;
# chapter 4, summation).
# Ba, Kiros & Hinton (2016), *Layer Normalization*.
#
# Next: this is the last notebook. Back to [the course overview](../README.md) for the map of all six.
