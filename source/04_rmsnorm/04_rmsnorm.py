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
# # 04 · RMSNorm: LayerNorm without the mean
#
# LayerNorm does two things to a token: it removes the mean, then it divides by the spread.
# Zhang & Sennrich (2019) asked which of the two does the useful work. Their bet was the
# division, and they proposed **RMSNorm**, which keeps only that: divide the token by its root
# mean square and apply a gain. T5, LLaMA, Mistral, Gemma and Qwen normalise this way.
#
# By the end of this notebook you will be able to
#
# 1. derive RMSNorm from LayerNorm and implement it for any shape `(..., d)`, in float32 as well as float64;
# 2. recall its geometry from [notebook 02](02_geometry.ipynb): the sphere without the hyperplane, scale
#    invariance kept and shift invariance lost;
# 3. derive its backward pass yourself ($\partial r/\partial x_j$, one Jacobian entry, $\mathbf J^\top\mathbf g$), each
#    step checked against finite differences, and implement it;
# 4. check both against PyTorch (`nn.RMSNorm`, `F.rms_norm`, autograd);
# 5. explain, with a measurement, why real code computes the statistics in float32 even in a bfloat16 model,
#    and write such a bfloat16 RMSNorm yourself, graded against the rounding floor of bfloat16;
# 6. estimate what the common variants of the formula (Gemma's gain, two values of $\epsilon$, $\epsilon$ in
#    the wrong place) change in the output;
# 7. (optional) time LayerNorm against RMSNorm on your machine and read the result honestly.
#
# **Time.** About 120 minutes, and about 5 more for the optional part. This is an estimate, not a timing of
# learners: `tools/read-through-estimate` counts about 5,100 words of prose (read at 150 words a minute), 37
# code cells to run (half a minute each), 3 graded exercises (10 minutes each), 3 derivation steps (5 each), 11
# predictions (2 each) and 0 widgets (5 each), and adds the 12 s the solved notebook took to run on the course's
# test machine.
#
# **How the exercises work.** Each exercise is a function with a fixed signature. Replace
# `raise NotImplementedError()` with your code, run the cell, then run the checks below it.
# Until you implement a function, its checks fail with `NotImplementedError`; that is expected.
# A failing check tells you what it expected, what it got, and the most likely cause.
#
# **Derivation steps** (section 3) ask for one expression at a time, written as a small function in place
# of its `...`; the cell below compares it with central finite differences of the forward pass and says
# what is off. The worked derivation waits in a reveal under each check.
#
# **Predict, then run.** Every experiment starts with a question. Where it asks for a number, write it in
# place of the `...` of the `guess_... = ...` cell; the cell that measures the answer compares. Where it asks
# for a statement, write it down (a comment in a new cell will do) before you run the cell. Nothing about a
# guess is graded, and the answers wait in reveals after the measurement.

# %%
import matplotlib.pyplot as plt
import numpy as np
import torch

from grader.checks.rmsnorm import check_rms_norm, check_rms_norm_backward, check_rms_norm_bf16
from grader.compare import check_signature
from grader.derive import check_jacobian_entry, check_scale_gradient, check_vjp_expression
from grader.learner import hint, progress
from grader.predict import compare
from normlab.run_mode import quick_run

np.set_printoptions(precision=4, suppress=True)
QUICK = quick_run()  # True under nbgrader: demo cells do the least work and figures are not drawn

# %% [markdown]
# ## 1. The definition: derive it from LayerNorm
#
# For one token $\mathbf x\in\mathbb R^d$, LayerNorm ([notebook 01](01_bn_vs_ln.ipynb)) computes the mean
# $\mu$ and the biased variance $\sigma^2=\frac1d\sum_j(x_j-\mu)^2$, divides $\mathbf x-\mu$ by
# $\sqrt{\sigma^2+\epsilon}$, then applies a gain $\boldsymbol\gamma$ and a shift $\boldsymbol\beta$. RMSNorm deletes
# everything that has to do with the mean. Before you open the definition, answer on paper:
#
# 1. Set $\mu=0$ in $\sigma^2$. What is left? It measures the token's *size* without any reference to its
#    centre; its square root (with $\epsilon$) is called the root mean square, $r$.
# 2. Where must $\epsilon$ go so that the zero token comes out as zero rather than $0/0$, as in LayerNorm?
# 3. With the mean gone, is there still a job for the shift $\boldsymbol\beta$? How many parameters are left?
# 4. Test your formula (with $\epsilon=0$, $\boldsymbol\gamma=\mathbf 1$) on three tokens: one feature ($d=1$)
#    must come out as $\pm1$; $d$ equal entries $c\neq0$ as $\operatorname{sign}(c)\,\mathbf 1$, where LayerNorm
#    gives $\mathbf 0$; and $a\mathbf x$, for any $a>0$, as the same output as $\mathbf x$.
#
# **Predict, then run.** For the example $\mathbf x=(2,4,6,8)$, whose mean is 5, and $\epsilon=10^{-6}$: what is
# $r$? The cell after yours asks PyTorch's `F.rms_norm` for $\hat{\mathbf x}$ (gain 1), reads $r$ off as
# $x_1/\hat x_1$, and compares; it prints LayerNorm's $\hat{\mathbf x}$ next to it.

# %%
guess_r_example = ...  # your guess: r for x = (2, 4, 6, 8) and eps = 1e-6

# %%
x_example = np.array([2.0, 4.0, 6.0, 8.0])
d = x_example.size
x_hat_rms = torch.nn.functional.rms_norm(torch.from_numpy(x_example), (d,), eps=1e-6).numpy()
x_hat_ln = torch.nn.functional.layer_norm(torch.from_numpy(x_example), (d,), eps=1e-5).numpy()
r = x_example[0] / x_hat_rms[0]  # x / x_hat is the same number for every entry: one r per token

compare(guess_r_example, r, name="r of (2, 4, 6, 8)")
print(f"r = x_1 / x_hat_1 = {r:.4f}")
print("RMSNorm x_hat  =", x_hat_rms, f"  sum = {x_hat_rms.sum():.4f}   sum of squares = {np.sum(x_hat_rms**2):.5f}")
print("LayerNorm x_hat =", x_hat_ln, f"  sum = {x_hat_ln.sum():.1e}  sum of squares = {np.sum(x_hat_ln**2):.5f}")

# %% [markdown]
# <details><summary>The definition (open after you have answered the four questions)</summary>
#
# $$r=\sqrt{\frac1d\sum_{j=1}^d x_j^2+\epsilon},\qquad \hat{\mathbf x}=\frac{\mathbf x}{r},\qquad
#   \operatorname{RMSNorm}(\mathbf x)=\boldsymbol\gamma\odot\hat{\mathbf x}.$$
#
# 1. With $\mu=0$ the variance becomes the mean square $\frac1d\sum_j x_j^2$: for $(2,4,6,8)$ it is
#    $(4+16+36+64)/4=30$, so $r=\sqrt{30+10^{-6}}\approx5.477$, the number printed above.
# 2. Inside the square root, as in LayerNorm: the zero token is divided by $\sqrt\epsilon$, not by zero.
# 3. No. Without a mean there is no shift to undo, and the only parameter is the gain
#    $\boldsymbol\gamma\in\mathbb R^d$: $d$ parameters where a LayerNorm has $2d$.
# 4. $d=1$: $x_1/|x_1|=\pm1$. Equal entries: $r=|c|$. Scaling: $r$ grows with $a$ and cancels it.
#
# When a token's mean is zero, $\sigma^2$ *is* the mean square and the two norms agree; they differ exactly
# when the mean is not zero.
# </details>
#
# Both outputs above have squared norm $d=4$ (up to $\epsilon$). Only LayerNorm's sums to zero: RMSNorm
# kept the fact that every entry of $\mathbf x$ is positive. That difference is the whole geometry of
# section 2.

# %% [markdown]
# ### Exercise 1 · `rms_norm`
#
# The contract:
#
# - **Signature** `rms_norm(x, gamma, eps=1e-6)`, with the definition you derived above.
# - **Shapes.** `x` is `(..., d)`: one token `(d,)`, a sequence `(T, d)`, a batch `(B, T, d)`, ...; `gamma` is
#   `(d,)`. The result has `x`'s shape, and every token gets its own $r$.
# - **Dtype.** The result has `x`'s dtype: float64 in, float64 out; float32 in, float32 out. (Computing the
#   statistics in a wider type and casting back is fine.) `x` is not modified.
# - **Errors.** None of its own: the inputs are always valid.
#
# Two questions before you write it. $r$ is one number per token: what shape must it have so that
# `x / r` divides every token of a `(B, T, d)` batch by its own $r$, and which arguments of the reduction
# give that shape? And what does your function return for a token of zeros?
#
# What the checks ask: for a float64 input, a result within a relative $10^{-9}$ of torch's float64
# `rms_norm` (the largest error divided by the largest output entry), so no step may run in float32;
# for a float32 input, a float32 result within $10^{-5}$ of that float64 reference. The inputs include one
# token, batches of 2 to 4 dimensions, a square `(6, 6)` input, $d=2$ and $d=4096$, $\epsilon$ up to 1,
# rows whose RMS ranges from $10^{-6}$ to 10 (where $\epsilon$ dominates), and a gain with negative entries.
#
# In this notebook's exercises, compute the result yourself: a graded function that calls PyTorch's
# `layer_norm`, `rms_norm`, `batch_norm`, `group_norm`, `instance_norm` or `var_mean` (or the matching
# `torch.nn` module), or a helper from the course's `grader` or `normlab` packages, skips the exercise.
# The class grader cannot prove what your code called (it runs in your own process, which your code
# controls), so no points depend on it: it lists what it saw for your instructor, who decides.
# Comparing with them in other cells is fine.
#
# **Stuck?** Run `hint("rms_norm")` in a new cell. Its steps open as you try: step 1 (the
# idea) at once; step 2 (what your checks said) once you have run the checks below on your own
# code; step 3 (the shape of the code) after a check fails again since you saw step 2. Asking again
# repeats the highest open step and says what opens the next. `progress()` shows where you stand.

# %% nbgrader={"grade": false, "grade_id": "rms_norm", "locked": false, "schema_version": 3, "solution": true, "task": false}
def rms_norm(x, gamma, eps=1e-6):
    """RMSNorm over the last axis, as you defined it in section 1 (gain gamma, eps as given).

    x: (..., d) float32 or float64; gamma: (d,). Returns (..., d) with x's dtype.
    """
    ### BEGIN SOLUTION
    r = np.sqrt(np.mean(np.square(x), axis=-1, keepdims=True) + eps)
    return (gamma * (x / r)).astype(x.dtype, copy=False)
    ### END SOLUTION


# %% nbgrader={"grade": false, "grade_id": "signature_rms_norm", "locked": true, "schema_version": 3, "solution": false, "task": false}
# Locked: tells you if the signature above no longer matches what the tests call.
check_signature(rms_norm, "rms_norm", "(x, gamma, eps=1e-06)")

# %% nbgrader={"grade": true, "grade_id": "test_rms_norm", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
"""Checks rms_norm against torch's RMSNorm on (2, 4, 6, 8), a (2, 3, 8) batch and a square (6, 6) input."""
check_rms_norm(rms_norm)
### BEGIN HIDDEN TESTS
check_rms_norm(rms_norm, shape=(4, 5, 16), seed=11)                          # 3-D, non-uniform gamma
check_rms_norm(rms_norm, shape=(3, 9), eps=1.0, seed=12)                     # an eps that matters
check_rms_norm(rms_norm, shape=(4, 8), eps=1e-2, seed=13, scale=0.1)         # mean square comparable to eps
check_rms_norm(rms_norm, shape=(2, 3, 12), tiny_rows=True, seed=14)          # rows with RMS from 1e-6 to 10
check_rms_norm(rms_norm, shape=(5, 33), seed=15, gamma=np.linspace(-2.0, 3.0, 33))
check_rms_norm(rms_norm, shape=(2,), seed=16, offset=3.0)                    # d = 2, all entries positive
check_rms_norm(rms_norm, shape=(8, 8), seed=17)                              # square again: keepdims
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_rms_norm_float32", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
"""Checks that float32 in gives float32 out, within float32 rounding of a float64 reference."""
check_rms_norm(rms_norm, dtype=np.float32)
### BEGIN HIDDEN TESTS
check_rms_norm(rms_norm, shape=(4, 4096), seed=21, dtype=np.float32)                # a LLaMA-sized d
check_rms_norm(rms_norm, shape=(3, 4, 16), eps=1e-5, seed=22, dtype=np.float32)
check_rms_norm(rms_norm, shape=(6, 32), tiny_rows=True, seed=23, dtype=np.float32)
### END HIDDEN TESTS

# %% [markdown]
# ## 2. The geometry, recalled
#
# [Notebook 02](02_geometry.ipynb) took LayerNorm apart into a projection onto the hyperplane $\sum_j x_j=0$
# followed by a scaling onto the sphere of radius $\sqrt d$, and measured its invariances with the bar widget
# (its "show RMSNorm" box adds this notebook's norm to the picture). RMSNorm keeps only the second step:
# $\lVert\hat{\mathbf x}\rVert^2=d\,m/(m+\epsilon)\approx d$ with $m=\frac1d\sum_j x_j^2$, so its outputs lie on the
# whole sphere, not on a slice of it.
#
# **Predict, then run.** The next cell takes three tokens and prints, for LayerNorm and for your `rms_norm`
# (both with $\epsilon=0$), the largest change of the output when $\mathbf x$ becomes $3\mathbf x$ and when it
# becomes $\mathbf x+\mathbf 1$. Which of the four numbers are rounding noise (near $10^{-16}$), and which are
# of order 0.1 to 1? Decide from the geometry, and from question 4 of section 1, before you run it.

# %%
def layer_norm_torch(x, eps=1e-5):
    """LayerNorm without gain and shift, from PyTorch, for numpy float64 arrays x: (..., d)."""
    return torch.nn.functional.layer_norm(torch.from_numpy(x), (x.shape[-1],), eps=eps).numpy()


rng = np.random.default_rng(0)
d_demo = 64
x_demo = rng.standard_normal((3, d_demo)) + np.array([[0.0], [2.0], [-5.0]])  # three tokens, three means
x_token = x_demo[0]
ones = np.ones(d_demo)

y_demo = rms_norm(x_demo, ones)
print("|RMSNorm(x)|^2 / d per token:", np.sum(y_demo**2, axis=-1) / d_demo)
print("largest change of the output, with eps = 0:")
for name, norm in [("LayerNorm", lambda x: layer_norm_torch(x, eps=0.0)), ("RMSNorm  ", lambda x: rms_norm(x, ones, eps=0.0))]:
    scaled = np.max(np.abs(norm(3.0 * x_demo) - norm(x_demo)))
    shifted = np.max(np.abs(norm(x_demo + 1.0) - norm(x_demo)))
    print(f"  {name}  x -> 3x: {scaled:.1e}    x -> x + 1: {shifted:.1e}")

# %% [markdown]
# <details><summary>Answer</summary>
#
# Three of the four are rounding noise: both norms ignore $\mathbf x\to3\mathbf x$ (for every $a>0$,
# $\operatorname{RMSNorm}(a\mathbf x)=\operatorname{RMSNorm}(\mathbf x)$), and LayerNorm ignores $\mathbf x\to\mathbf x+\mathbf 1$
# because it projects onto the hyperplane first. RMSNorm's shift row is of order one:
# $\operatorname{RMSNorm}(\mathbf x+c\mathbf 1)\ne\operatorname{RMSNorm}(\mathbf x)$, because the direction $\mathbf 1$
# survives like any other.
# </details>
#
# A large shift $c\mathbf 1$ takes over the mean square, so $\hat{\mathbf x}\to\operatorname{sign}(c)\,\mathbf 1$. That
# costs little in practice: nothing in a Transformer makes "the same amount added to every feature" a quantity worth
# ignoring, and Zhang & Sennrich (2019) found RMSNorm matched LayerNorm's quality in their experiments.

# %% [markdown]
# ## 3. The backward pass: delete the mean terms
#
# [Notebook 03](03_backward.ipynb) derived LayerNorm's Jacobian in three steps: the derivative of the
# scale, one entry by the quotient rule, then the product $\mathbf J^\top\mathbf g$. Repeat them for RMSNorm,
# which has no $\mu$. As there, $\delta_{ij}$ is 1 when $i=j$ and 0 otherwise, $\mathbf g=\boldsymbol\gamma\odot\partial\mathcal L/\partial\mathbf y$
# is the gradient reaching $\hat{\mathbf x}$ ($\odot$: elementwise product), and the chain rule gives
# $\partial\mathcal L/\partial x_j=\sum_i g_i\,\partial\hat x_i/\partial x_j=(\mathbf J^\top\mathbf g)_j$.
#
# ### Step 1 · Derive $\partial r/\partial x_j$
#
# With $m=\frac1d\sum_k x_k^2$ and $r=\sqrt{m+\epsilon}$: differentiate $m$, then the square root. Write the
# result for every $j$ at once, shape `(d,)`. The check compares it with central finite differences of
# $r$ on three tokens (one where $\epsilon=0.5$ matters).

# %%
def my_dr_dx(x, eps):
    """dr/dx_j for every j, shape (d,). x: (d,) float64, eps: the epsilon inside the square root."""
    return ...  # your expression


# %%
check_scale_gradient(my_dr_dx, norm="rms")

# %% [markdown]
# <details><summary>Worked derivation of step 1</summary>
#
# $$\frac{\partial m}{\partial x_j}=\frac{2x_j}{d},\qquad
#   \frac{\partial r}{\partial x_j}=\frac1{2r}\cdot\frac{2x_j}{d}=\frac{x_j}{d\,r}=\frac{\hat x_j}{d}.$$
#
# The same form as LayerNorm's $\partial s/\partial x_j=\hat x_j/d$, with $\hat{\mathbf x}=\mathbf x/r$; no term
# from a mean, because there is none. The next cell confirms it on the example $(2,4,6,8)$.
# </details>

# %%
h = 1e-6
numeric_dr = []
for j in range(d):
    step = np.zeros(d)
    step[j] = h
    r_plus, r_minus = (np.sqrt(np.mean((x_example + sign * step) ** 2) + 1e-6) for sign in (1, -1))
    numeric_dr.append((r_plus - r_minus) / (2 * h))
print("dr/dx: finite differences", np.array(numeric_dr), "   formula x_hat / d", x_hat_rms / d)

# %% [markdown]
# ### Step 2 · Derive one Jacobian entry $J_{ij}=\partial\hat x_i/\partial x_j$
#
# Apply the quotient rule to $\hat x_i=x_i/r$, with your step 1. Return one number for one pair $(i, j)$;
# $\delta_{ij}$ is `(i == j)` in code. The check calls your function for every $i$ and $j$.

# %%
def my_jacobian_entry(x, eps, i, j):
    """J[i, j] = d x_hat_i / d x_j of RMSNorm, one number. x: (d,) float64; i, j: indices of the features."""
    return ...  # your expression


# %%
check_jacobian_entry(my_jacobian_entry, norm="rms")

# %% [markdown]
# <details><summary>Worked derivation of step 2</summary>
#
# $$\frac{\partial\hat x_i}{\partial x_j}=\frac{\delta_{ij}}{r}-\frac{x_i}{r^2}\cdot\frac{\hat x_j}{d}
#   =\frac1r\Big(\delta_{ij}-\frac{\hat x_i\hat x_j}{d}\Big),\qquad
#   \boxed{\;\mathbf J=\frac1r\Big(\mathbf I-\tfrac1d\hat{\mathbf x}\hat{\mathbf x}^\top\Big)\;}$$
#
# This is LayerNorm's $\frac1s(\mathbf I-\frac1d\mathbf 1\mathbf 1^\top-\frac1d\hat{\mathbf x}\hat{\mathbf x}^\top)$
# with the $\mathbf 1\mathbf 1^\top$ term deleted (it came from $\partial\mu/\partial x_j$) and $s$ renamed $r$.
# </details>
#
# ### Step 3 · Derive $\mathbf J^\top\mathbf g$
#
# Sum your entry against $g_i$ over $i$, term by term, and write the result for every $j$ at once, shape
# `(d,)`, with whole-array operations (no `(d, d)` array).

# %%
def my_vjp(x, g, eps):
    """(J^T g)_j for every j, shape (d,). x: (d,) the token, g: (d,) the gradient with respect to x_hat."""
    return ...  # your expression


# %%
check_vjp_expression(my_vjp, norm="rms")

# %% [markdown]
# <details><summary>Worked derivation of step 3</summary>
#
# $\mathbf J$ is symmetric, so $\mathbf J^\top\mathbf g=\mathbf J\mathbf g$; $\sum_i g_i\delta_{ij}=g_j$ and
# $\sum_i g_i\hat x_i\hat x_j/d=\operatorname{mean}(\mathbf g\odot\hat{\mathbf x})\,\hat x_j$. With the gain,
#
# $$\frac{\partial\mathcal L}{\partial\mathbf x}=\mathbf J\mathbf g=\frac1r\Big(\mathbf g-\operatorname{mean}(\mathbf g\odot\hat{\mathbf x})\,\hat{\mathbf x}\Big),
#   \qquad \frac{\partial\mathcal L}{\partial\gamma_j}=\sum_t\frac{\partial\mathcal L}{\partial y_{t,j}}\,\hat x_{t,j},$$
#
# where $t$ runs over every token (every leading index). LayerNorm's formula loses its
# $-\operatorname{mean}(\mathbf g)$ term; there is no $\boldsymbol\beta$, so no third gradient.
# </details>

# %% [markdown]
# ### Exercise 2 · `rms_norm_backward`
#
# The contract:
#
# - **Signature** `rms_norm_backward(dy, x, gamma, eps=1e-6)`: the gradients of $\mathcal L$ with respect to `x`
#   and `gamma`, given `dy` $=\partial\mathcal L/\partial\mathbf y$ for $\mathbf y=$ `rms_norm(x, gamma, eps)`.
# - **Shapes.** `x` and `dy` are `(..., d)`, `gamma` is `(d,)`. Return the tuple `(dx, dgamma)`: `dx` shaped
#   like `x`, `dgamma` of shape `(d,)`.
# - **Dtype.** Both have `x`'s dtype. The inputs are not modified.
# - **Errors.** None of its own.
#
# Your step 3 is `dx` for one token with $\mathbf g=\boldsymbol\gamma\odot$ `dy`. Three questions turn it into the
# exercise: which reductions of your step 3 must become one per token for a `(B, T, d)` batch, and with what
# shape? $\gamma_j$ multiplies $\hat x_j$ in every token: for a single token, what is $\partial\mathcal L/\partial\gamma_j$,
# and for a batch, over which axes of `x` do the tokens' contributions add up (the answer must work for any
# number of leading axes)? Then open the step 3 reveal, if you have not, and compare.
#
# What the checks ask: in float64, `dx` and `dgamma` within a relative $10^{-9}$ of torch's autograd (the
# largest error divided by the largest entry), and within $10^{-6}$ of central differences of **your**
# `rms_norm`; for float32 inputs, float32 gradients within $10^{-5}$ of the float64 answer. The inputs
# include one token, 2 to 4 dimensions, $\epsilon$ up to 1, rows whose RMS ranges from $10^{-6}$ to 10, small
# tokens with an offset, and a gain with negative entries.
#
# **Stuck?** `hint("rms_norm_backward")` climbs the same ladder as Exercise 1: step 2 after a run of the
# checks below, step 3 after a failed run since step 2.

# %% nbgrader={"grade": false, "grade_id": "rms_norm_backward", "locked": false, "schema_version": 3, "solution": true, "task": false}
def rms_norm_backward(dy, x, gamma, eps=1e-6):
    """Gradients of y = gamma * x / sqrt(mean(x**2) + eps).

    dy, x: (..., d); gamma: (d,). Returns dx (..., d) and dgamma (d,), with x's dtype.
    """
    ### BEGIN SOLUTION
    r = np.sqrt(np.mean(np.square(x), axis=-1, keepdims=True) + eps)
    x_hat = x / r
    g = gamma * dy
    dx = (g - np.mean(g * x_hat, axis=-1, keepdims=True) * x_hat) / r
    dgamma = np.sum(dy * x_hat, axis=tuple(range(x.ndim - 1)))
    return dx.astype(x.dtype, copy=False), dgamma.astype(x.dtype, copy=False)
    ### END SOLUTION


# %% nbgrader={"grade": false, "grade_id": "signature_rms_norm_backward", "locked": true, "schema_version": 3, "solution": false, "task": false}
# Locked: tells you if the signature above no longer matches what the tests call.
check_signature(rms_norm_backward, "rms_norm_backward", "(dy, x, gamma, eps=1e-06)")

# %% nbgrader={"grade": true, "grade_id": "test_rms_norm_backward", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
"""Checks dx and dgamma against autograd for a (2, 3, 5) input, and against differences of your rms_norm."""
check_rms_norm_backward(rms_norm_backward, rms_norm)
### BEGIN HIDDEN TESTS
check_rms_norm_backward(rms_norm_backward, shape=(8,), seed=31)
check_rms_norm_backward(rms_norm_backward, shape=(4, 16), eps=1.0, seed=32)
check_rms_norm_backward(rms_norm_backward, shape=(2, 2, 3, 7), seed=33)
check_rms_norm_backward(rms_norm_backward, shape=(6, 8), tiny_rows=True, seed=34)
check_rms_norm_backward(rms_norm_backward, shape=(5, 33), seed=35, gamma=np.linspace(-2.0, 3.0, 33))
check_rms_norm_backward(rms_norm_backward, shape=(3, 9), eps=1e-2, seed=36, scale=0.1, offset=0.05)
check_rms_norm_backward(rms_norm_backward, shape=(2, 3, 64), seed=37, dtype=np.float32)
check_rms_norm_backward(rms_norm_backward, shape=(6, 16), tiny_rows=True, seed=38, dtype=np.float32)
### END HIDDEN TESTS

# %% [markdown]
# ### What the deleted term changes
#
# With $\epsilon=0$, $\lVert\hat{\mathbf x}\rVert^2=d$, so $\mathbf w=\hat{\mathbf x}/\sqrt d$ is a unit
# vector and $r\mathbf J=\mathbf I-\mathbf w\mathbf w^\top$ (the step 2 reveal). LayerNorm's $s\mathbf J$ was the
# projection that removes two directions, $\mathbf 1$ and $\hat{\mathbf x}$ ([notebook 03](03_backward.ipynb)).
#
# **Predict, then run.** The next cell builds $\mathbf J$ column by column from your `rms_norm_backward` (because
# $\mathbf J$ is symmetric, passing $\mathbf e_j$ as `dy`, with $\boldsymbol\gamma=\mathbf 1$, returns column $j$)
# for a token of $d=64$ features, and counts the eigenvalues of $r\mathbf J$ equal to 0. How many? It also prints,
# for one gradient $\mathbf g$, the products $\mathbf g\cdot\mathbf x$ and $\mathbf g\cdot\mathbf 1$ and the ratio
# $\lVert\mathbf g(\mathbf x)\rVert/\lVert\mathbf g(2\mathbf x)\rVert$: write down which of the first two you
# expect to be zero, and the value of the ratio.

# %%
guess_zero_eigenvalues = ...  # your guess: how many eigenvalues of r J are 0, for d = 64

# %%
g_demo = rng.standard_normal(d_demo)
grad, _ = rms_norm_backward(g_demo, x_token, ones, eps=0.0)
grad_2x, _ = rms_norm_backward(g_demo, 2 * x_token, ones, eps=0.0)
print(f"1. grad . x = {grad @ x_token:+.1e}   (compare |grad| |x| = {np.linalg.norm(grad) * np.linalg.norm(x_token):.1f})")
print(f"2. grad . 1 = {grad.sum():+.4f}")
print(f"3. |grad(x)| / |grad(2x)| = {np.linalg.norm(grad) / np.linalg.norm(grad_2x):.4f}")

r_token = np.sqrt(np.mean(x_token**2))
J_columns = np.stack([rms_norm_backward(e, x_token, ones, eps=0.0)[0] for e in np.eye(d_demo)], axis=1)
eigenvalues = np.linalg.eigvalsh(r_token * (J_columns + J_columns.T) / 2)
zero_eigenvalues = int(np.sum(np.isclose(eigenvalues, 0.0, atol=1e-9)))
print(f"eigenvalues of r J: {np.sum(np.isclose(eigenvalues, 1.0))} equal to 1, {zero_eigenvalues} equal to 0  "
      f"(d = {d_demo})")
compare(guess_zero_eigenvalues, zero_eigenvalues, name="eigenvalues of r J equal to 0")

# %% [markdown]
# <details><summary>Answer</summary>
#
# **One.** $\mathbf I-\mathbf w\mathbf w^\top$ is an orthogonal projection that removes **one** direction (rank
# $d-1$), where LayerNorm's removed two (rank $d-2$). Read as properties of the gradient:
#
# 1. **orthogonal to $\mathbf x$** (scaling $\mathbf x$ does not change the output), as for LayerNorm: the
#    first number is rounding noise;
# 2. **not orthogonal to $\mathbf 1$** (shifting $\mathbf x$ does change the output), unlike LayerNorm;
# 3. **divided by $r$**: a token twice as large gets half the gradient, so the ratio is 2.
#
# </details>

# %% [markdown]
# ## 4. In PyTorch
#
# PyTorch has shipped `nn.RMSNorm` and `F.rms_norm` since version 2.4. We compare them with your
# functions in float64, so that any difference is a formula difference, and let autograd confirm
# your backward on a `(2, 3, 8)` batch.
#
# **Predict, then run.** If your functions are right, how large will the four printed differences be? Not
# zero: why not, and roughly what power of ten? Write your answer down first.

# %%
d_t = 8
x_np, dy_np = rng.standard_normal((2, 3, d_t)), rng.standard_normal((2, 3, d_t))
gamma_np = rng.uniform(0.5, 1.5, d_t)

layer = torch.nn.RMSNorm(d_t, eps=1e-6, dtype=torch.float64)
with torch.no_grad():
    layer.weight.copy_(torch.from_numpy(gamma_np))
x_t = torch.tensor(x_np, requires_grad=True)
y_t = layer(x_t)
y_t.backward(torch.from_numpy(dy_np))

dx_mine, dgamma_mine = rms_norm_backward(dy_np, x_np, gamma_np)
functional = torch.nn.functional.rms_norm(torch.from_numpy(x_np), (d_t,), torch.from_numpy(gamma_np), eps=1e-6)
print("max |rms_norm - nn.RMSNorm|  =", f"{np.max(np.abs(rms_norm(x_np, gamma_np) - y_t.detach().numpy())):.1e}")
print("max |rms_norm - F.rms_norm|  =", f"{np.max(np.abs(rms_norm(x_np, gamma_np) - functional.numpy())):.1e}")
print("max |dx - autograd|          =", f"{np.max(np.abs(dx_mine - x_t.grad.numpy())):.1e}")
print("max |dgamma - autograd|      =", f"{np.max(np.abs(dgamma_mine - layer.weight.grad.numpy())):.1e}")

# %% [markdown]
# <details><summary>Answer</summary>
#
# A few units of float64's rounding, $10^{-16}$ to $10^{-15}$ for outputs of order one: the same formula
# evaluated in another order rounds differently. A difference of $10^{-6}$ or more is a formula difference.
# </details>
#
# One trap: `nn.RMSNorm(d)` without `eps=` does **not** use $10^{-6}$. Its default `eps=None` means
# `torch.finfo(dtype).eps`, about $1.2\times10^{-7}$ in float32 (and $2.2\times10^{-16}$ in float64).
#
# **Predict, then run.** The next cell compares `rms_norm(..., eps=1e-6)` with a default `nn.RMSNorm` on a token
# of RMS about 1 and on one of RMS about $10^{-3}$ (mean square about $10^{-6}$). For which token do you expect a
# visible difference, and of what size? Use $\sqrt{m+\epsilon}\approx\sqrt m\,(1+\frac{\epsilon}{2m})$ for $m\gg\epsilon$.

# %%
default_layer = torch.nn.RMSNorm(d_t)  # float32, eps=None
print(f"default eps: {default_layer.eps} -> torch.finfo(float32).eps = {torch.finfo(torch.float32).eps:.3g}, "
      f"torch.finfo(float64).eps = {torch.finfo(torch.float64).eps:.3g}")
for token_scale in [1.0, 1e-3]:
    token = (token_scale * rng.standard_normal(d_t)).astype(np.float32)
    with torch.no_grad():
        ours = rms_norm(token, np.ones(d_t, dtype=np.float32), eps=1e-6)
        theirs = default_layer(torch.from_numpy(token)).numpy()
    print(f"token RMS ~ {token_scale:g}:  max |rms_norm(eps=1e-6) - nn.RMSNorm(default)| = {np.max(np.abs(ours - theirs)):.1e}")

# %% [markdown]
# <details><summary>Answer</summary>
#
# For the token of RMS 1 the two values of $\epsilon$ change the output by about
# $(10^{-6}-1.2\times10^{-7})/2\approx4\times10^{-7}$ of its size, a few units of float32's rounding: invisible in
# practice (the first line). For the token of RMS $10^{-3}$, $m\approx\epsilon$, the approximation fails and the
# outputs differ by a sizeable fraction of their size (the second line).
# </details>

# %% [markdown]
# ## 5. Statistics in float32
#
# Large models store activations in bfloat16: the exponent range of float32 with only **8
# significant bits** (7 stored, 1 implicit), about two to three decimal digits. For one number that
# is often enough. For a long sum it may not be, and RMSNorm's statistic is exactly such a sum: $d$
# squares, with $d=4096$ a common width.
#
# **Predict.** Start a bfloat16 total at 0 and add 1.0 to it 4096 times, rounding the total to bfloat16
# after every addition (round to nearest, ties to even). What is the total at the end? Think about which
# whole numbers 8 significant bits can hold.

# %%
guess_bf16_total_of_ones = ...  # your guess: the bfloat16 total after adding 1.0 4096 times

# %% [markdown]
# The next cell adds 4096 squares one at a time, in a bfloat16 accumulator and in a float32 one (the
# terms themselves are the same bfloat16 numbers in both): first 4096 ones, where the stall is exact,
# then the squares of 4096 standard normal samples, which is what a norm sees.

# %%
from normlab.precision import bf16_rms_norm_errors, bf16_running_sum, eps_differences, gemma_parameterisation

ones_sum = bf16_running_sum(np.ones(4096))
print(f"adding 1.0 4096 times: float32 {ones_sum['fp32'][-1]:.0f}, bfloat16 {ones_sum['bf16'][-1]:.0f} "
      f"(no change after term {ones_sum['stalled_at']})")
stall = bf16_running_sum(n=4096, seed=0)
steps = np.arange(1, stall["terms"].size + 1)
print(f"sum of 4096 squares: float32 {stall['fp32'][-1]:.1f}, bfloat16 {stall['bf16'][-1]:.1f}, "
      f"exact {stall['exact'][-1]:.1f}  (bfloat16 / exact = {stall['final_ratio']:.3f})")
print(f"terms that left the bfloat16 total unchanged: {100 * stall['lost_fraction']:.1f} %")

fig, (ax_sum, ax_ratio) = plt.subplots(1, 2, figsize=(10, 3.8))
ax_sum.plot(steps, stall["fp32"], label="float32 accumulator")
ax_sum.plot(steps, stall["bf16"], label="bfloat16 accumulator")
ax_sum.plot(steps, ones_sum["bf16"], "k:", label="bfloat16, every term 1.0")
ax_sum.set_xlabel("number of squares added")
ax_sum.set_ylabel("running sum of $x_i^2$ (no unit)")
ax_sum.set_title("In bfloat16 the running sum falls far behind")
ax_sum.legend()
finite = np.isfinite(stall["ratio"]) & (stall["terms"] > 0)
kept, lost = finite & ~stall["lost"], finite & stall["lost"]
ax_ratio.loglog(steps[kept], stall["ratio"][kept], ".", ms=2, label="term changed the total")
ax_ratio.loglog(steps[lost], stall["ratio"][lost], ".", ms=2, label="term lost")
for level in (256, 512):
    ax_ratio.axhline(level, color="k", lw=0.8, ls="--")
ax_ratio.set_xlabel("number of squares added")
ax_ratio.set_ylabel("bfloat16 total / next term")
ax_ratio.set_title("Terms are lost once the total is ~256x them")
ax_ratio.legend(markerscale=5)
fig.set_layout_engine("tight")
plt.show()

# %%
compare(guess_bf16_total_of_ones, ones_sum["bf16"][-1], name="bfloat16 total of 4096 ones")

# %% [markdown]
# <details><summary>Answer</summary>
#
# **256**, the count printed above. With 8 significant bits every whole number up to $2^8=256$ is exact, so
# the first 256 additions are exact. Above 256 the spacing of bfloat16 numbers is 2: $256+1=257$ lies exactly
# halfway between 256 and 258, and the tie goes to the even significand, 256. Every later addition of 1.0
# is rounded away, so the remaining 3840 terms are lost.
#
# In general, next to a running total $S$ consecutive bfloat16 numbers are $S/256$ to $S/128$ apart, and
# rounding to nearest throws away any term smaller than half of that gap. Once the total is about 256
# times the next term, adding the term changes nothing: the sum **stalls**.
# </details>
#
# Adding ones, the bfloat16 total stops for good at 256. With random squares it does not stop
# completely, because the occasional large square still counts, but most terms are lost and the total
# ends near half the true one. On the right, every term above the dashed line at 512 is lost and every
# term below 256 is kept; in between it depends on where the total sits between two powers of two.
# Too small a sum means too small an $r$, and every output too large.
#
# **Where should the wider type go?** The model's tensors are bfloat16, and so must the norm's output be.
# Every bfloat16 number is exact in float32. Of the steps (square, sum, divide by $d$, add $\epsilon$, square root,
# $\mathbf x/r$, times $\boldsymbol\gamma$), which must run in float32 for the sum not to stall, and at which step
# may the result go back to bfloat16 without losing more than bfloat16 must lose anyway?
#
# **Predict, then run.** The next cell measures four bfloat16 RMSNorms of the same bfloat16 input, $d=4096$,
# against a float64 reference: the stalled bfloat16 accumulator; torch's operations run directly on bfloat16
# tensors; everything up to $\mathbf x/r$ in float32, then cast back to bfloat16 ("upcast, normalise, cast
# back"); and the float64 answer rounded to bfloat16, the best a bfloat16 output can be. Rank the first three
# by their error, and say which, if any, reaches the last row.

# %%
errors = bf16_rms_norm_errors(rows=8, d=4096, eps=1e-6)
labels = {"bf16_accumulator": "bfloat16 running sum", "bf16_torch_ops": "torch ops on bfloat16 tensors",
          "upcast_fix": "upcast, normalise, cast back", "rounding_floor": "float64 answer rounded to bfloat16"}
print(f"{'variant':36s} {'relative error':>15s} {'output RMS':>11s}")
for key, label in labels.items():
    print(f"{label:36s} {errors[key]['rel_error']:15.2e} {errors[key]['output_rms']:11.4f}")

# %% [markdown]
# <details><summary>Answer</summary>
#
# The stalled sum makes the outputs too large by the factor printed in the last column (the right RMS
# is 1). torch's own bfloat16 operations accumulate the mean in float32 internally, but they round
# every intermediate to bfloat16 and lose a little more. The upcast recipe reaches the rounding floor:
# no bfloat16 output can do better. It is what LLaMA's reference RMSNorm does and what fused kernels do
# internally. Your Exercise 1 test asks the same of float32: the statistics must be at least as precise
# as the data.
# </details>

# %% [markdown]
# ### Exercise 3 · `rms_norm_bf16`: a bfloat16 RMSNorm with float32 statistics
#
# Write your answer to "where should the wider type go?" as a bfloat16 model runs it. The contract:
#
# - **Signature** `rms_norm_bf16(x, gamma, eps=1e-6)`: the RMSNorm of section 1, of bfloat16 activations.
# - **Inputs.** bfloat16 numbers; numpy has no bfloat16, so they arrive as float32 arrays (what
#   `tensor.float().numpy()` gives), and the stub's first line turns them into the bfloat16 tensors a model
#   holds: `x` of shape `(..., d)` and `gamma` of shape `(d,)`.
# - **Result.** `y`, a **bfloat16 tensor** of `x`'s shape (the stub's last line hands it back as a float32 array).
#   Its statistics ($m$, $r$ and $\mathbf x/r$) are computed in float32 or wider, never on bfloat16 tensors,
#   one $r$ per token. The gain may be applied before the cast to bfloat16, in float32 (Gemma's order, one
#   rounding), or after it, multiplying the bfloat16 $\mathbf x/r$ by the bfloat16 `gamma` (LLaMA's order, two
#   roundings). Both are accepted.
# - **Errors.** None of its own.
#
# What the checks ask, the rounding floor: every entry of `y` must be what correct rounding to bfloat16 gives,
# in one of the two orders, starting from the exact (float64) $\gamma_j x_j/r$ of these very bfloat16 inputs;
# within $1/16$ of a bfloat16 spacing of a rounding tie, either neighbour counts. That allows at most 1.5
# spacings of error and decides nothing by chance: an implementation with float32 statistics passes on every
# input, and one whose statistics went through bfloat16 misses on a large share of the entries. The inputs are
# tokens of $d$ from 64 to 4096 with RMS from $10^{-6}$ to 10 (so $\epsilon$ matters on the smallest), a
# per-token offset, a gain with negative entries, and $\epsilon$ from $10^{-6}$ to $10^{-4}$. As in the other
# exercises, a call of `F.rms_norm` or `nn.RMSNorm` here is listed for your instructor.
#
# **Stuck?** `hint("rms_norm_bf16")`: step 2 after a run of the checks below, step 3 after a failed
# run since step 2.

# %% nbgrader={"grade": false, "grade_id": "rms_norm_bf16", "locked": false, "schema_version": 3, "solution": true, "task": false}
def rms_norm_bf16(x, gamma, eps=1e-6):
    """RMSNorm of bfloat16 activations with float32 statistics: gamma * x / sqrt(mean(x**2) + eps), in bfloat16.

    x: (..., d), gamma: (d,): float32 arrays holding bfloat16 numbers. Returns (..., d) float32 holding bfloat16 numbers.
    """
    x, gamma = torch.from_numpy(x).to(torch.bfloat16), torch.from_numpy(gamma).to(torch.bfloat16)  # a model's tensors
    ### BEGIN SOLUTION
    x32 = x.float()  # the upcast
    r = (x32 * x32).mean(-1).add(eps).sqrt()[..., None]  # one r per token, float32, shape (..., 1)
    y = (x32 / r).bfloat16() * gamma  # LLaMA's order: round, then the bfloat16 gain
    ### END SOLUTION
    return y.float().numpy()  # y: your bfloat16 result, shape (..., d)


# %% nbgrader={"grade": false, "grade_id": "signature_rms_norm_bf16", "locked": true, "schema_version": 3, "solution": false, "task": false}
# Locked: tells you if the signature above no longer matches what the tests call.
check_signature(rms_norm_bf16, "rms_norm_bf16", "(x, gamma, eps=1e-06)")

# %% nbgrader={"grade": true, "grade_id": "test_rms_norm_bf16", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
"""Checks every entry of rms_norm_bf16 against bfloat16 rounding of a float64 RMSNorm: (6, 1024), (5, 2, 48), (512,)."""
check_rms_norm_bf16(rms_norm_bf16)
### BEGIN HIDDEN TESTS
check_rms_norm_bf16(rms_norm_bf16, shape=(4, 4096), seed=41)               # a LLaMA-sized d
check_rms_norm_bf16(rms_norm_bf16, shape=(3, 2, 128), eps=1e-5, seed=42)   # 3-D, another eps
check_rms_norm_bf16(rms_norm_bf16, shape=(8, 256), eps=1e-4, seed=43)      # an eps that matters on more tokens
check_rms_norm_bf16(rms_norm_bf16, shape=(16, 64), seed=44)                # many small tokens
### END HIDDEN TESTS

# %% [markdown]
# Your function on the table's input: it should land on the rounding floor, next to the upcast recipe.

# %%
with_yours = bf16_rms_norm_errors(rows=8, d=4096, eps=1e-6, yours=rms_norm_bf16)
for key, label in {**labels, "yours": "your rms_norm_bf16"}.items():
    print(f"{label:36s} {with_yours[key]['rel_error']:15.2e} {with_yours[key]['output_rms']:11.4f}")

# %% [markdown]
# ## 6. Know your parameterisation
#
# Three variants of "RMSNorm" are common, and porting weights between them without noticing gives
# outputs that are wrong by a little or by a lot.
#
# **Gemma's gain.** Gemma multiplies by $(\mathbf 1+\boldsymbol\gamma)$ and initialises $\boldsymbol\gamma$
# at zero. With $\mathbf w=\mathbf 1+\boldsymbol\gamma$ it is the same function; what changes is the
# point weight decay pulls towards: zero for $\boldsymbol\gamma$, so a gain of one, instead of a gain of
# zero for a plain $\mathbf w$. (Other models drop parameters altogether: OLMo's first release used a
# LayerNorm with no learned gain or shift, and PaLM removed every bias from its norms and dense layers.)
#
# **Predict, then run.** Gemma's trained $\boldsymbol\gamma$ sits near 0. Loaded by mistake into a layer that
# multiplies by a plain $\mathbf w$, roughly how large is the output error, for outputs of size about 1? And a
# gain of 1.5 after 100 steps of weight decay 0.01 (each step multiplies the decayed parameter by 0.99): where
# does it end in each parameterisation?

# %%
gemma = gemma_parameterisation(d=64, start_gain=1.5, steps=100, decay=0.01)
print(f"max |y(w) - y(1 + gamma)| with gamma = w - 1:             {gemma['same_function_max_diff']:.1e}")
print(f"max |y(w) - y(gamma)|, Gemma's gamma loaded as a plain w: {gemma['missing_one_max_diff']:.2f}")
print(f"a gain of 1.5 after {gemma['steps']} steps of weight decay {gemma['decay']}: "
      f"plain w -> {gemma['decayed_gain_plain']:.3f},  Gemma's 1 + gamma -> {gemma['decayed_gain_gemma']:.3f}")

# %% [markdown]
# **The value of $\epsilon$, and where it sits.** $10^{-5}$ and $10^{-6}$ are both common, and
# `nn.RMSNorm`'s default is neither (section 4). For a token with mean square $m\gg\epsilon$,
# $\sqrt{m+\epsilon}\approx\sqrt m\,(1+\frac{\epsilon}{2m})$, so changing $\epsilon$ from $10^{-6}$ to $10^{-5}$ moves the
# output by a relative amount of about $(10^{-5}-10^{-6})/(2m)$: invisible for ordinary tokens, of order one
# when $m$ approaches $\epsilon$. Putting $\epsilon$ outside the square root, $\mathbf x/(\sqrt{m}+\epsilon)$, is a
# different function again.
#
# **Predict.** A token has RMS 0.01, so $m=10^{-4}$, and $\epsilon=10^{-5}$. By what relative amount does
# moving $\epsilon$ outside the root change its output, $\lVert\mathbf y_\text{outside}-\mathbf y_\text{inside}\rVert_\infty/\lVert\mathbf y_\text{inside}\rVert_\infty$?
# (Write both denominators as $\sqrt m$ times a factor close to 1.)

# %%
guess_eps_outside_change = ...  # your guess: a relative change, e.g. 0.5 for 50 %

# %% [markdown]
# The next cell measures both variants on tokens of $d=4096$ features scaled from $10^{-3}$ to $10$, and the
# one after it takes a token whose RMS is exactly 0.01.

# %%
eps_effects = eps_differences(scales=(1e-3, 1e-2, 1e-1, 1.0, 10.0), d=4096, norm="rms", eps=1e-5, other_eps=1e-6)
print("token RMS   eps 1e-5 vs 1e-6   sqrt(m + eps) vs sqrt(m) + eps   (relative change of the output)")
for scale, change, outside in zip(eps_effects["scales"], eps_effects["eps_change"], eps_effects["eps_outside"]):
    print(f"{scale:9g}   {change:16.1e}   {outside:30.1e}")

# %%
eps_token = 1e-5
x_small = np.random.default_rng(5).standard_normal(4096)
x_small *= 0.01 / np.sqrt(np.mean(x_small**2))  # RMS exactly 0.01, so m = 1e-4
m_small = np.mean(x_small**2)
y_inside = x_small / np.sqrt(m_small + eps_token)
y_outside = x_small / (np.sqrt(m_small) + eps_token)
measured_outside = np.max(np.abs(y_outside - y_inside)) / np.max(np.abs(y_inside))
print(f"RMS 0.01, eps = 1e-5: measured relative change {measured_outside:.4f}")
print(f"first order |eps/(2m) - eps/sqrt(m)| = {abs(eps_token / (2 * m_small) - eps_token / np.sqrt(m_small)):.4f}"
      f"   (eps/(2m) = {eps_token / (2 * m_small):.4f}, eps/sqrt(m) = {eps_token / np.sqrt(m_small):.4f})")
compare(guess_eps_outside_change, measured_outside, name="relative change with eps outside the root, RMS 0.01")

# %% [markdown]
# <details><summary>Answer</summary>
#
# **About 5 %** (the cell prints 0.0478). Write $r=\sqrt{m+\epsilon}=\sqrt m\,\sqrt{1+\epsilon/m}\approx\sqrt m\,(1+\frac{\epsilon}{2m})$
# and $r_\text{outside}=\sqrt m+\epsilon=\sqrt m\,(1+\frac{\epsilon}{\sqrt m})$. The output is $\mathbf x$ divided by
# one of them, so
#
# $$\frac{\mathbf y_\text{outside}}{\mathbf y_\text{inside}}=\frac{r}{r_\text{outside}}\approx1+\frac{\epsilon}{2m}-\frac{\epsilon}{\sqrt m},
#   \qquad\text{relative change}\approx\Big|\frac{\epsilon}{2m}-\frac{\epsilon}{\sqrt m}\Big| .$$
#
# At $m=10^{-4}$ the first term is 0.05 and the second 0.001: what matters is not the $\epsilon$ added
# outside but the $\epsilon$ *missing* inside. The first-order value, 0.049, is a little above the measured
# one because $\epsilon/m=0.1$ is not very small (the next term of $\sqrt{1+\epsilon/m}$ is $-\epsilon^2/(8m^2)$).
# For a unit-size token ($m=1$) the two terms combine to $-\epsilon/2$, five parts per million (the table's
# RMS 1 row); for $m\lesssim\epsilon$ the approximation fails and the change is of order one (its first row).
# </details>

# %% [markdown]
# For unit-size tokens the differences are a few parts per million: small, but real, and they pass
# through every layer to the logits, which is why a ported model that disagrees with the original in
# the fifth digit should make you check $\epsilon$ first. For tokens with a small RMS (early layers,
# padding, a dead feature group), the variants are different functions.

# %% [markdown]
# ## 7. Speed, honestly (optional)
#
# > **Optional.** Nothing graded depends on this section; skip to section 8 if you are short of
# > time. It is about measuring, not about RMSNorm's formula.
#
# Zhang & Sennrich (2019) measured RMSNorm cutting running time by 7 % to 64 % compared with
# LayerNorm, depending on the model. Those were whole models, timed in the frameworks of the day. Why
# the saving was that large is not something their paper isolates; below we offer one explanation, and
# it is a hypothesis. Before quoting the number about your own code, ask what a norm costs.
#
# Per element, a norm does a handful of additions and multiplications, and it must read $\mathbf x$
# and write $\mathbf y$ at least once. A modern processor does arithmetic far faster than it moves
# bytes from main memory, so a norm is **memory-bound**: its time is set by how many times it passes
# over the array. The fair yardstick is a plain copy of the same array, which also reads and writes
# every element once. A norm running at 100 % of the copy's bandwidth cannot get faster.
#
# The cell below times, on this machine and on one float32 array of shape `(tokens, d)`:
#
# - a copy (numpy and torch), the yardstick;
# - your `rms_norm` from Exercise 1, whole-array numpy operations;
# - torch's `F.layer_norm`, one fused kernel; LayerNorm and RMSNorm as unfused torch chains (eight operations
#   against five); `F.rms_norm`;
# - if you set `TIME_COMPILE = True`, `torch.compile` of the two chains, which fuses each into one
#   loop. It is off by default: its first call compiles, which takes tens of seconds.
#
# **Predict, then run.** Which takes longer, the unfused LayerNorm chain or the unfused RMSNorm chain, and by
# roughly what factor if time follows the number of passes over the array? And will the fused `F.layer_norm`
# beat the unfused RMSNorm chain, although it does more arithmetic?

# %%
from normlab.speed import format_speed_table, speed_ratios, speed_table

TIME_COMPILE = False  # True adds the torch.compile rows (tens of seconds of compilation first)
if QUICK:  # a tiny array and two calls per row: this only proves that the cell runs
    speed_rows = speed_table(shape=(64, 1024), compile=False, budget_s=0.0, min_repeats=1, rms_norm=rms_norm)
else:  # larger than the caches, so the copy measures main memory
    speed_rows = speed_table(shape=(2048, 4096), compile=TIME_COMPILE, rms_norm=rms_norm)
print(format_speed_table(speed_rows))

ratios = speed_ratios(speed_rows)
print()
if ratios["unfused_ln_over_rms"]:
    print(f"unfused chains: LayerNorm took {ratios['unfused_ln_over_rms']:.2f} times as long as RMSNorm")
if ratios["torch_unfused_rms_over_fused_ln"]:
    print(f"torch: the unfused RMSNorm chain took {ratios['torch_unfused_rms_over_fused_ln']:.2f} times as long "
          "as the fused F.layer_norm")
if ratios["fused_ln_fraction_of_copy"]:
    print(f"the fused F.layer_norm reached {100 * ratios['fused_ln_fraction_of_copy']:.0f} % of the copy's bandwidth")
if ratios["yours_fraction_of_copy"]:
    print(f"your numpy rms_norm reached {100 * ratios['yours_fraction_of_copy']:.0f} % of the copy's bandwidth")

# %% [markdown]
# How to read the table (your numbers depend on your processor, its caches, its load and the torch
# build; read them, not the ones you expect):
#
# - **Unfused, like with like.** Both torch chains are whole-array operations, and RMSNorm's chain
#   is shorter: it should win, in roughly the proportion of passes (your numpy `rms_norm` is such a chain too;
#   its fraction of the copy says how many passes it makes). Our hypothesis is that
#   Zhang & Sennrich's 7–64 % comes mostly from this situation, norms run as unfused operations; it
#   fits the numbers here, but their paper does not test it.
# - **torch, fused against unfused.** `F.layer_norm` reads $\mathbf x$ once and writes $\mathbf y$ once.
#   An RMSNorm written as `x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * gamma` makes a pass
#   per operation, so on a CPU build of torch the norm that does *more* arithmetic can take *less*
#   time. Compare the `F.rms_norm` row with the chain's: if they are close, this build computes it as
#   a composite of the same operations rather than as one kernel.
# - **Fusion is the larger lever** (run the cell with `TIME_COMPILE = True` to see it). Once
#   `torch.compile` fuses each chain into one loop, both norms
#   move the same bytes, so their times should come close (timings of a few milliseconds are noisy:
#   rerun the cell before reading much into a gap); what is left of RMSNorm's advantage is one
#   reduction fewer per token. On a GPU the same holds: fused LayerNorm and RMSNorm kernels both run
#   near the memory bandwidth, so choosing RMSNorm saves little time once the kernels are fused.
# - **The fraction of the copy** says how much is left to gain: far below 100 % means extra passes or
#   overheads (small arrays are dominated by the cost of launching each operation); near 100 % means
#   the implementation is as fast as the memory allows. A multithreaded torch kernel can exceed 100 %
#   of a copy that ran on one thread; read that as "at the memory limit".

# %% [markdown]
# ## 8. Self-test
#
# **(a) What is the length of an RMS-normalised token?** Take $\mathbf x\sim\mathcal N(\mathbf 0,\mathbf I_d)$
# and $\boldsymbol\gamma=\mathbf 1$. **Predict, then run:** is $\lVert\operatorname{RMSNorm}(\mathbf x)\rVert$ about 1 or about
# $\sqrt d$? And as $d$ grows from 2 to 8192, how far from $d$ can $\lVert\mathbf x\rVert^2$ be for one token, and
# $\lVert\operatorname{RMSNorm}(\mathbf x)\rVert^2$? The cell draws 200 tokens at each width.

# %%
widths = 2 ** np.arange(1, 11 if QUICK else 14)
samples = 20 if QUICK else 200
input_sq, output_sq = [], []
for width in widths:
    x_s = rng.standard_normal((samples, width))
    input_sq.append(np.sum(x_s**2, axis=-1))
    output_sq.append(np.sum(rms_norm(x_s, np.ones(width)) ** 2, axis=-1))
input_sq, output_sq = np.array(input_sq), np.array(output_sq)

fig, (ax_left, ax_right) = plt.subplots(1, 2, figsize=(10, 3.8))
ax_left.loglog(widths, input_sq.mean(axis=1), "o", ms=4, label=r"$\|x\|^2$ (mean over tokens)")
ax_left.loglog(widths, output_sq.mean(axis=1), "s", ms=4, mfc="none", label=r"$\|$RMSNorm$(x)\|^2$")
ax_left.loglog(widths, widths, "k--", lw=1, label="d")
ax_left.set_xlabel("width d (features)")
ax_left.set_ylabel("squared norm")
ax_left.set_title("Both are about d on average")
ax_left.legend()
ax_right.loglog(widths, np.max(np.abs(input_sq / widths[:, None] - 1), axis=1), "o", ms=4, label=r"input $x$")
ax_right.loglog(widths, np.max(np.abs(output_sq / widths[:, None] - 1), axis=1), "s", ms=4, mfc="none", label="RMSNorm(x)")
ax_right.loglog(widths, 4 * np.sqrt(2 / widths), "k:", lw=1, label=r"$4\sqrt{2/d}$")
ax_right.set_xlabel("width d (features)")
ax_right.set_ylabel(r"largest $|\,\|\cdot\|^2/d-1\,|$ over tokens")
ax_right.set_title("Only RMSNorm(x) is at d for every token (up to eps)")
ax_right.legend()
fig.set_layout_engine("tight")
plt.show()
print(f"largest deviation of |RMSNorm(x)|^2 / d from 1: {np.max(np.abs(output_sq / widths[:, None] - 1)):.1e}")

# %% [markdown]
# <details><summary>Answer</summary>
#
# About $\sqrt d$, not 1: each feature is of order one, whatever the width. The input's squared norm is a sum of
# $d$ squares: its mean is $d$ and its spread is $\sqrt{2d}$, so $\lVert\mathbf x\rVert^2/d\to1$ only as
# $d\to\infty$ (the dotted guide, four spreads). The output's squared norm is $d\,m/(m+\epsilon)$ for **every**
# input: it is $d$ up to $\epsilon$, at any $d$ (the last line).
# </details>
#
# Consequence for stacked RMSNorms: with $\boldsymbol\gamma=\mathbf 1$ the output already has mean
# square 1, so a second RMSNorm changes it only by the $\epsilon$ factor. Magnitudes do not grow or
# shrink through a chain of norms; the gains $\boldsymbol\gamma$ alone set the scale a layer reads.
#
# **(b) How many parameters?** A norm has one gain per feature (and LayerNorm one shift per feature),
# next to a $d\times d$ projection it feeds. **Predict, then run:** for $d=4096$, what percentage of that
# projection's parameters is a LayerNorm?

# %%
d_model = 4096
count = lambda module: sum(p.numel() for p in module.parameters())
n_rms, n_ln = count(torch.nn.RMSNorm(d_model)), count(torch.nn.LayerNorm(d_model))
n_linear = count(torch.nn.Linear(d_model, d_model, device="meta"))
print(f"RMSNorm({d_model}): {n_rms} parameters;  LayerNorm({d_model}): {n_ln}")
print(f"Linear({d_model}, {d_model}): {n_linear:,} parameters")
print(f"a LayerNorm is {100 * n_ln / n_linear:.3f} % of that Linear, an RMSNorm {100 * n_rms / n_linear:.3f} %")

# %% [markdown]
# Norms are a rounding error in the parameter count. Their cost is elsewhere: they touch every
# activation, twice per layer, which is why section 7 is about memory traffic, not arithmetic.

# %% [markdown]
# ## 9. Interview questions
#
# Try each one aloud before you reveal the answer.
#
# <details><summary><b>What is RMSNorm, and why have most recent LLMs switched to it?</b></summary>
#
# $\boldsymbol\gamma\odot\mathbf x/\sqrt{\operatorname{mean}(\mathbf x^2)+\epsilon}$: LayerNorm without
# the mean subtraction and without the shift. It keeps scale invariance and drops shift invariance,
# which costs little because the direction $\mathbf 1$ of the residual stream is not special. It needs
# one reduction over the features instead of two, has $d$ parameters instead of $2d$, and Zhang &
# Sennrich (2019) found it matched LayerNorm's quality while cutting running time by 7 % to 64 %
# depending on the model. In practice, simplicity and kernel speed decided it.
# </details>
#
# <details><summary><b>Derive the gradient of RMSNorm with respect to its input.</b></summary>
#
# $\partial r/\partial x_j=x_j/(dr)=\hat x_j/d$, so the quotient rule gives
# $\mathbf J=\frac1r(\mathbf I-\frac1d\hat{\mathbf x}\hat{\mathbf x}^\top)$ and
# $\partial\mathcal L/\partial\mathbf x=\frac1r(\mathbf g-\operatorname{mean}(\mathbf g\odot\hat{\mathbf x})\hat{\mathbf x})$
# with $\mathbf g=\boldsymbol\gamma\odot\partial\mathcal L/\partial\mathbf y$: LayerNorm's formula with the
# $-\operatorname{mean}(\mathbf g)$ term deleted. The gradient is orthogonal to $\mathbf x$ (up to $\epsilon$),
# not to $\mathbf 1$, and scales like $1/r$; $r\mathbf J$ is a projection of rank $d-1$.
# $\partial\mathcal L/\partial\boldsymbol\gamma=\sum_t\partial\mathcal L/\partial\mathbf y_t\odot\hat{\mathbf x}_t$.
# </details>
#
# <details><summary><b>What does RMSNorm give up compared with LayerNorm, and when could it matter?</b></summary>
#
# Invariance to adding a constant to every feature: $\operatorname{RMSNorm}(\mathbf x+c\mathbf 1)$ moves
# towards $\pm\mathbf 1$ as $c$ grows. It would matter if some layer systematically wrote a large common
# offset into the stream; then that offset would dominate the mean square and shrink everything else.
# In practice the mean direction carries no special meaning and models trained with RMSNorm do as well.
# </details>
#
# <details><summary><b>Your model runs in bfloat16. Why should the norm's statistics be computed in float32?</b></summary>
#
# bfloat16 keeps 8 significant bits. A running sum of $d$ squares stops growing once the total is
# about 256 times the next term (the term is below half a unit in the last place), so for
# $d=4096$ most of the terms are simply lost and $r$ comes out too small. Upcast to float32, compute
# $r$ and $\mathbf x/r$, and cast back; LLaMA's reference RMSNorm does exactly this and fused kernels
# do it internally.
# </details>
#
# <details><summary><b>You load Gemma weights into a LLaMA-style RMSNorm and the logits are slightly off. What do you check?</b></summary>
#
# The parameterisation of the gain: Gemma multiplies by $(1+\boldsymbol\gamma)$ with $\boldsymbol\gamma$
# initialised at zero, so its stored weights must be shifted by one for a plain $\boldsymbol\gamma$ layer.
# Then $\epsilon$: $10^{-5}$ and $10^{-6}$ are both common (and `nn.RMSNorm`'s default is neither), and
# whether it sits inside the square root. Each gives small but real output differences (section 6).
# </details>
#
# <details><summary><b>Your benchmark on a laptop shows RMSNorm no faster than LayerNorm. Does that contradict Zhang & Sennrich?</b></summary>
#
# Not necessarily. A norm reads and writes each activation about once, so a good kernel is bound by
# memory traffic, and both norms move the same bytes; saving one reduction matters only when the
# kernels are not fused and each extra operation is one more pass over memory. Their 7–64 % were
# measured on whole models; that unfused operations explain most of it is a plausible hypothesis, not
# their finding. On a CPU, PyTorch's LayerNorm is one fused kernel
# while an RMSNorm written as separate tensor operations makes several passes, so the "slower" norm can
# win. Compare like with like (both fused, or both unfused) and report bandwidth, not only time.
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
# - RMSNorm: $r=\sqrt{\operatorname{mean}(\mathbf x^2)+\epsilon}$, output $\boldsymbol\gamma\odot\mathbf x/r$;
#   one reduction, no mean, no shift, $d$ parameters.
# - Geometry: the sphere of radius $\sqrt d$ without LayerNorm's hyperplane. Scale invariance kept,
#   shift invariance lost; the direction $\mathbf 1$ survives.
# - Backward: LayerNorm's with the mean terms deleted,
#   $\frac1r(\mathbf g-\operatorname{mean}(\mathbf g\odot\hat{\mathbf x})\hat{\mathbf x})$, and
#   $\partial\mathcal L/\partial\boldsymbol\gamma=\sum_t\mathbf{dy}_t\odot\hat{\mathbf x}_t$.
# - Compute the statistics in float32: upcast, normalise, cast back.
# - Check the parameterisation when porting weights: $(1+\boldsymbol\gamma)$, the value of $\epsilon$,
#   and $\epsilon$ inside the square root.
# - A norm is memory-bound: judge implementations by bytes moved, and compare fused with fused.
#
# *References:* Zhang & Sennrich (2019), *Root Mean Square Layer Normalization*;
# Ba, Kiros & Hinton (2016), *Layer Normalization*.
#
# Next: [05 · Where the norm goes: pre-LN, post-LN and the output norm](05_placement.ipynb)
