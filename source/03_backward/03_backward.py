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
# # 03 · LayerNorm's backward pass, derived
#
# LayerNorm's statistics depend on *every* feature of a token, so each output depends on
# each input. Differentiating it is a favourite interview question for exactly that reason,
# and the answer has a shape worth remembering: **the gradient is projected, then divided by
# the token's scale.** That one sentence explains later why pre-LN Transformers train without
# warm-up ([notebook 05](05_placement.ipynb)).
#
# By the end of this notebook you will be able to
#
# 1. derive $\partial s/\partial x_j$, one Jacobian entry $\partial\hat x_i/\partial x_j$ and the product
#    $\mathbf J^\top\mathbf g$ yourself, each step checked against finite differences before you see the answer;
# 2. implement the Jacobian, then the vector-Jacobian product that never builds it, in $O(d)$ memory;
# 3. implement the full backward with the parameter gradients for inputs of any shape `(..., d)`;
# 4. predict, then measure, the rank of the Jacobian and what it does to a gradient that is the same on
#    every feature;
# 5. state the three properties of the gradient and confirm them numerically and against PyTorch's autograd.
#
# **Time.** About 85 minutes. This is an estimate, not a timing of learners: `tools/read-through-estimate`
# counts about 3,100 words of prose (read at 150 words a minute), 26 code cells to run (half a minute each), 3
# graded exercises (10 minutes each), 3 derivation steps (5 each), 3 predictions (2 each) and 0 widgets (5
# each), and adds the 11 s the solved notebook took to run on the course's test machine.
#
# **How the exercises work.** Each exercise is a function with a fixed signature. Replace
# `raise NotImplementedError()` with your code, run the cell, then run the checks below it.
# Until you implement a function, its checks fail with `NotImplementedError`; that is expected.
# A failing check tells you what it expected, what it got, and the most likely cause.
#
# **Derivation steps** come before the exercises: you write one expression as a small function, in
# place of its `...`, and the cell below it compares your expression with central finite differences
# of the forward pass and says what is off (a sign, a factor, a missing term). The worked derivation
# waits in a reveal under each check. **Predictions** ask for a number first (`guess_... = ...`); the
# next cell measures it and compares.

# %%
import matplotlib.pyplot as plt
import numpy as np

from grader.checks.backward import (
    check_jacobian_is_projection,
    check_layer_norm_backward,
    check_layer_norm_jacobian,
    check_layer_norm_vjp,
    check_vjp_memory,
)
from grader.compare import check_signature
from grader.derive import check_jacobian_entry, check_scale_gradient, check_vjp_expression
from grader.learner import hint, progress
from grader.predict import compare
from normlab.run_mode import quick_run

np.set_printoptions(precision=4, suppress=True)
QUICK = quick_run()  # True under nbgrader: demo cells do the least work and figures are not drawn

# %% [markdown]
# ## 1. The forward pass, once more
#
# For one token $\mathbf x\in\mathbb R^d$, LayerNorm computes the mean, the biased variance
# and a scale that is never zero,
#
# $$\mu=\frac1d\sum_{j=1}^d x_j,\qquad \sigma^2=\frac1d\sum_{j=1}^d (x_j-\mu)^2,\qquad s=\sqrt{\sigma^2+\epsilon},$$
#
# then standardises and applies a learned gain and shift, one of each per feature:
#
# $$\hat{\mathbf x}=\frac{\mathbf x-\mu\mathbf 1}{s},\qquad \mathbf y=\boldsymbol\gamma\odot\hat{\mathbf x}+\boldsymbol\beta .$$
#
# Here $\mathbf 1=(1,\dots,1)$ and $\odot$ is the elementwise product: $(\boldsymbol\gamma\odot\hat{\mathbf x})_j=\gamma_j\hat x_j$.
# The variance divides by $d$, not $d-1$, and $\epsilon$ sits *inside* the square root.
# The cell below runs the formulas on the example $\mathbf x=(2,4,6,8)$.

# %%
x_example = np.array([2.0, 4.0, 6.0, 8.0])
d = x_example.size
mu = x_example.mean()
var = ((x_example - mu) ** 2).mean()
s = np.sqrt(var + 1e-5)
x_hat_example = (x_example - mu) / s

print(f"mu = {mu},  sigma^2 = {var},  s = {s:.4f}")
print("x_hat =", x_hat_example)
print(f"sum(x_hat) = {x_hat_example.sum():.2e}   sum(x_hat**2) = {np.sum(x_hat_example**2):.5f}   (d = {d})")

# %% [markdown]
# Two facts appear: the entries of $\hat{\mathbf x}$ sum to zero, and their squares sum to
# $d\,\sigma^2/(\sigma^2+\epsilon)$, which is $d$ up to $\epsilon$. Both will reappear in the
# backward pass as the two directions the gradient loses.

# %% [markdown]
# ## 2. The derivation, one piece at a time
#
# We want the Jacobian $\mathbf J=\partial\hat{\mathbf x}/\partial\mathbf x$, a $d\times d$
# matrix with entries $J_{ij}=\partial\hat x_i/\partial x_j$. The gain is an elementwise
# product, so if the loss gradient $\partial\mathcal L/\partial\mathbf y$ arrives from above,
# the gradient with respect to $\hat{\mathbf x}$ is simply
# $\mathbf g=\boldsymbol\gamma\odot\partial\mathcal L/\partial\mathbf y$. Why the transpose in
# $\partial\mathcal L/\partial\mathbf x=\mathbf J^\top\mathbf g$? The loss sees $x_j$ only through every
# $\hat x_i$, so the chain rule sums over $i$:
# $\partial\mathcal L/\partial x_j=\sum_i g_i\,\partial\hat x_i/\partial x_j=\sum_i J_{ij}g_i=(\mathbf J^\top\mathbf g)_j$.
#
# We build $\mathbf J$ from small pieces. Throughout, $\delta_{ij}$ (the Kronecker delta) is 1 when
# $i=j$ and 0 otherwise: $\partial x_i/\partial x_j=\delta_{ij}$.
#
# **The mean.** Every input counts once in $\mu$, so $\dfrac{\partial\mu}{\partial x_j}=\dfrac1d$.
#
# ### Step 1 · Derive $\partial s/\partial x_j$
#
# With $s=\sqrt{\sigma^2+\epsilon}$: differentiate $\sigma^2$ first (its square, and remember that $\mu$
# moves too), then the square root. Write the result for every $j$ at once, as an array of shape `(d,)`;
# `x.mean()`, `x.var()` and `np.sqrt` are all you need. The check runs your expression on three tokens
# (one where $\epsilon=0.5$ matters) and compares it with central finite differences of $s$.

# %%
def my_ds_dx(x, eps):
    """ds/dx_j for every j, shape (d,). x: (d,) float64, eps: the epsilon inside the square root."""
    return ...  # your expression


# %%
check_scale_gradient(my_ds_dx, norm="layer")

# %% [markdown]
# <details><summary>Worked derivation of step 1</summary>
#
# **The variance.** Differentiate the square and remember that $\mu$ moves too:
#
# $$\frac{\partial\sigma^2}{\partial x_j}=\frac2d\sum_k (x_k-\mu)\Big(\delta_{kj}-\frac1d\Big)
#   =\frac2d(x_j-\mu)-\frac2{d^2}\underbrace{\sum_k(x_k-\mu)}_{=\,0}=\frac2d(x_j-\mu).$$
#
# The deviations sum to zero, so the term that came from $\mu$ vanishes.
#
# **The scale.** With $s=\sqrt{\sigma^2+\epsilon}$ and the chain rule,
#
# $$\frac{\partial s}{\partial x_j}=\frac1{2s}\cdot\frac2d(x_j-\mu)=\frac{x_j-\mu}{d\,s}=\frac{\hat x_j}{d}.$$
#
# </details>
#
# The cell below confirms both results on the example, by nudging each input and watching
# $\sigma^2$ and $s$ move (central finite differences).

# %%
def variance_and_scale(x, eps=1e-5):
    """Biased variance and s = sqrt(var + eps) of one token x: (d,)."""
    var = ((x - x.mean()) ** 2).mean()
    return var, np.sqrt(var + eps)


h = 1e-6
numeric_dvar, numeric_ds = [], []
for j in range(d):
    step = np.zeros(d)
    step[j] = h
    (var_plus, s_plus), (var_minus, s_minus) = variance_and_scale(x_example + step), variance_and_scale(x_example - step)
    numeric_dvar.append((var_plus - var_minus) / (2 * h))
    numeric_ds.append((s_plus - s_minus) / (2 * h))

print("d(sigma^2)/dx: finite differences", np.array(numeric_dvar), " formula 2(x - mu)/d", 2 * (x_example - mu) / d)
print("d(s)/dx:       finite differences", np.array(numeric_ds), " formula x_hat/d   ", x_hat_example / d)

# %% [markdown]
# ### Step 2 · Derive one Jacobian entry $J_{ij}=\partial\hat x_i/\partial x_j$
#
# Apply the quotient rule to $\hat x_i=(x_i-\mu)/s$, using $\partial\mu/\partial x_j$ and your step 1.
# Write the entry for one pair $(i, j)$ as one number; in code, $\delta_{ij}$ is `(i == j)` and
# $\hat x_i$ is `x_hat[i]`. The check calls your function for every $i$ and $j$.

# %%
def my_jacobian_entry(x, eps, i, j):
    """J[i, j] = d x_hat_i / d x_j, one number. x: (d,) float64; i, j: indices of the features."""
    return ...  # your expression


# %%
check_jacobian_entry(my_jacobian_entry, norm="layer")

# %% [markdown]
# <details><summary>Worked derivation of step 2</summary>
#
# The numerator $x_i-\mu$ contributes $\delta_{ij}-\frac1d$, the denominator contributes
# $-(x_i-\mu)/s^2\cdot\hat x_j/d$:
#
# $$J_{ij}=\frac{\partial\hat x_i}{\partial x_j}=\frac1s\Big(\delta_{ij}-\frac1d\Big)-\frac{x_i-\mu}{s^2}\cdot\frac{\hat x_j}{d}
#   =\frac1s\Big(\delta_{ij}-\frac1d-\frac{\hat x_i\hat x_j}{d}\Big).$$
#
# In matrix form,
#
# $$\boxed{\;\mathbf J=\frac1s\Big(\mathbf I-\tfrac1d\mathbf 1\mathbf 1^\top-\tfrac1d\hat{\mathbf x}\hat{\mathbf x}^\top\Big)\;}$$
#
# Nothing was approximated: $\epsilon$ is inside $s$ and inside $\hat{\mathbf x}$, and the
# formula is exact as long as both are the values the forward pass used.
# </details>

# %% [markdown]
# ### Predict: what does $\mathbf J$ lose?
#
# Take one token with $d=64$ and $\epsilon=0$, and read the matrix form in the reveal above.
#
# 1. **The rank of $\mathbf J$**: how many independent directions survive it? ($64$ would mean none is lost.)
# 2. **The size of $\mathbf J^\top\mathbf 1$**: the gradient reaching $\mathbf x$ when the upstream
#    gradient is the same on every feature, $\mathbf g=\mathbf 1$. What is its length $\lVert\mathbf J^\top\mathbf 1\rVert$?

# %%
guess_jacobian_rank = ...  # your guess: a whole number from 0 to 64
guess_size_of_jt_ones = ...  # your guess: the length of J^T 1, a number

# %%
def layer_norm_forward(x, eps):
    """x_hat of one token x: (d,), float64."""
    variance = np.mean((x - x.mean()) ** 2)
    return (x - x.mean()) / np.sqrt(variance + eps)


def jacobian_by_differences(x, eps, h=1e-5):
    """(d, d) central differences of layer_norm_forward: column j is the response to nudging x_j."""
    steps = h * np.eye(x.size)
    return np.stack([(layer_norm_forward(x + e, eps) - layer_norm_forward(x - e, eps)) / (2 * h) for e in steps], axis=1)


x_rank = np.random.default_rng(7).standard_normal(64)
J_fd = jacobian_by_differences(x_rank, eps=0.0)
singular = np.linalg.svd(J_fd, compute_uv=False)
rank = int(np.sum(singular > 1e-6 * singular[0]))
jt_ones = np.linalg.norm(J_fd.T @ np.ones(64))
jt_random = np.linalg.norm(J_fd.T @ np.random.default_rng(8).standard_normal(64))
print(f"singular values of J: largest {singular[0]:.4f}, then ... {singular[-3]:.4f}, {singular[-2]:.1e}, {singular[-1]:.1e}")
print(f"rank of J (singular values above 1e-6 of the largest): {rank}")
print(f"|J^T 1| = {jt_ones:.1e}   (|J^T g| for a random g: {jt_random:.2f}; zero up to the rounding of finite differences)")
compare(guess_jacobian_rank, rank, name="rank of J at d = 64", rel=0.0)
compare(guess_size_of_jt_ones, 0.0 if jt_ones < 1e-6 * jt_random else jt_ones, name="|J^T 1|")
J_eps = jacobian_by_differences(x_rank, eps=1e-5)
print(f"with eps = 1e-5: the smallest nonzero singular value times s is "
      f"{np.sort(np.linalg.svd(J_eps, compute_uv=False))[1] * np.sqrt(x_rank.var() + 1e-5):.2e}, "
      f"and eps / (sigma^2 + eps) = {1e-5 / (x_rank.var() + 1e-5):.2e}")

# %% [markdown]
# <details><summary>Answer</summary>
#
# **Rank 62, that is $d-2$.** $s\mathbf J=\mathbf I-\frac1d\mathbf 1\mathbf 1^\top-\frac1d\hat{\mathbf x}\hat{\mathbf x}^\top$
# removes two directions: $\mathbf 1$ (shifting every feature by the same amount changes no output) and
# $\hat{\mathbf x}$ (scaling the token changes no output when $\epsilon=0$). Two singular values are
# zero, up to the rounding of the finite differences; the other 62 are $1/s$.
#
# **$\lVert\mathbf J^\top\mathbf 1\rVert=0$.** $\mathbf J$ is symmetric and $\mathbf J\mathbf 1=\frac1s(\mathbf 1-\mathbf 1-\frac1d\hat{\mathbf x}\,\textstyle\sum_j\hat x_j)=\mathbf 0$,
# because the entries of $\hat{\mathbf x}$ sum to zero. An upstream gradient that is the same on every
# feature does not reach $\mathbf x$ at all, whatever its size.
#
# With $\epsilon>0$ the direction $\hat{\mathbf x}$ is not removed but shrunk: $s\mathbf J\hat{\mathbf x}=\frac{\epsilon}{\sigma^2+\epsilon}\hat{\mathbf x}$,
# the small singular value the last line prints. Numerically the rank is then $d-1$, which is why the
# projection check below sets $\epsilon=0$.
# </details>

# %% [markdown]
# ### Exercise 1 · The Jacobian
#
# Write `layer_norm_jacobian(x, eps=1e-5)` for one token `x` of shape `(d,)`, returning the
# `(d, d)` matrix $\partial\hat{\mathbf x}/\partial\mathbf x$ of LayerNorm *without* gain and
# shift: the matrix form in the reveal of step 2. Use float64 throughout (the input is float64).
#
# What the checks ask: every entry within a relative $10^{-6}$ of central finite differences and $10^{-7}$
# of torch's autograd (errors measured against the largest entry), for $d$ from 2 to 128, $\epsilon$ from
# $10^{-5}$ to 1, and a token whose variance is tiny next to $\epsilon$ with a large offset, so $\epsilon$ must
# sit inside the square root exactly as in the forward pass. A second check sets $\epsilon=0$ and asks
# that $s\mathbf J$ be symmetric, equal to its own square, remove $\mathbf 1$ and $\hat{\mathbf x}$, and have rank $d-2$.
#
# In this notebook's exercises, compute the result yourself: a graded function that calls PyTorch's
# `layer_norm`, `rms_norm`, `batch_norm`, `group_norm`, `instance_norm` or `var_mean` (or the matching
# `torch.nn` module), or a helper from the course's `grader` or `normlab` packages, skips the exercise.
# The class grader cannot prove what your code called (it runs in your own process, which your code
# controls), so no points depend on it: it lists what it saw for your instructor, who decides.
# Comparing with them in other cells is fine.
#
# *Hint:* your step-2 expression names three $d\times d$ terms; numpy has a one-call constructor for
# each kind of matrix they are (an identity, a constant matrix, an outer product).
#
# **Stuck?** Run `hint("layer_norm_jacobian")` in a new cell. Its steps open as you try: step 1 (the
# idea) at once; step 2 (what your checks said) once you have run the checks below on your own
# code; step 3 (the shape of the code) after a check fails again since you saw step 2. Asking again
# repeats the highest open step and says what opens the next. `progress()` shows where you stand.

# %% nbgrader={"grade": false, "grade_id": "layer_norm_jacobian", "locked": false, "schema_version": 3, "solution": true, "task": false}
def layer_norm_jacobian(x, eps=1e-5):
    """Jacobian of x_hat = (x - mean(x)) / sqrt(var(x) + eps) for one token.

    x: (d,) float64. Returns J: (d, d) with J[i, j] = d x_hat_i / d x_j.
    """
    ### BEGIN SOLUTION
    d = x.shape[-1]
    s = np.sqrt(x.var() + eps)
    x_hat = (x - x.mean()) / s
    return (np.eye(d) - np.full((d, d), 1.0 / d) - np.outer(x_hat, x_hat) / d) / s
    ### END SOLUTION


# %% nbgrader={"grade": false, "grade_id": "signature_layer_norm_jacobian", "locked": true, "schema_version": 3, "solution": false, "task": false}
# Locked: tells you if the signature above no longer matches what the tests call.
check_signature(layer_norm_jacobian, "layer_norm_jacobian", "(x, eps=1e-05)")

# %% nbgrader={"grade": true, "grade_id": "test_layer_norm_jacobian", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
"""Checks the Jacobian against finite differences and autograd on (2, 4, 6, 8) and a random token."""
check_layer_norm_jacobian(layer_norm_jacobian)
### BEGIN HIDDEN TESTS
for d_hidden, eps_hidden, seed_hidden in [(2, 1e-5, 1), (7, 1e-5, 2), (33, 1.0, 3), (128, 1e-3, 4)]:
    check_layer_norm_jacobian(layer_norm_jacobian, d=d_hidden, eps=eps_hidden, seed=seed_hidden)
# tiny variance next to eps, and a large offset: eps must sit inside the square root
check_layer_norm_jacobian(layer_norm_jacobian, d=9, eps=1e-5, seed=5, scale=1e-3, offset=5.0)
check_layer_norm_jacobian(layer_norm_jacobian, d=5, eps=1.0, seed=6, scale=0.3)
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_jacobian_is_projection", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
"""Checks that with eps = 0, s * J is an orthogonal projection of rank d - 2."""
check_jacobian_is_projection(layer_norm_jacobian)
### BEGIN HIDDEN TESTS
for d_hidden, seed_hidden in [(3, 11), (10, 12), (31, 13)]:
    check_jacobian_is_projection(layer_norm_jacobian, d=d_hidden, seed=seed_hidden)
### END HIDDEN TESTS

# %% [markdown]
# ## 3. The fast formula: never build the matrix
#
# A model with $d=4096$ would need a $4096\times4096$ Jacobian per token (128 MiB in float64)
# just to multiply it by one vector. The product itself needs far less.
#
# ### Step 3 · Derive $\mathbf J^\top\mathbf g$
#
# Write $(\mathbf J^\top\mathbf g)_j=\sum_i g_i J_{ij}$ with your entry from step 2 and carry out the sum
# over $i$ term by term: each term of $J_{ij}$ gives either a multiple of $g_j$ or a sum over the
# features times something that depends on $j$. Write the result for every $j$ at once, shape `(d,)`,
# using whole-array operations only (no `(d, d)` array).

# %%
def my_vjp(x, g, eps):
    """(J^T g)_j for every j, shape (d,). x: (d,) the token, g: (d,) the gradient with respect to x_hat."""
    return ...  # your expression


# %%
check_vjp_expression(my_vjp, norm="layer")

# %% [markdown]
# <details><summary>Worked derivation of step 3</summary>
#
# $\mathbf J$ is symmetric, so $\mathbf J^\top\mathbf g=\mathbf J\mathbf g$. Term by term,
# $\sum_i g_i\delta_{ij}=g_j$, $\sum_i g_i\frac1d=\operatorname{mean}(\mathbf g)$ and
# $\sum_i g_i\frac{\hat x_i\hat x_j}d=\operatorname{mean}(\mathbf g\odot\hat{\mathbf x})\,\hat x_j$, so
#
# $$\frac{\partial\mathcal L}{\partial\mathbf x}=\mathbf J\mathbf g
#   =\frac1s\Big(\mathbf g-\operatorname{mean}(\mathbf g)\,\mathbf 1-\operatorname{mean}(\mathbf g\odot\hat{\mathbf x})\,\hat{\mathbf x}\Big).$$
#
# Two reductions over the features and a few elementwise operations: $O(d)$ time and memory.
# In words: take the incoming gradient, remove its average and its component along
# $\hat{\mathbf x}$, and divide by the token's scale.
#
# Textbooks often write the same formula with sums instead of means, as in the BatchNorm
# derivation, with $d$ pulled out in front:
#
# $$\boxed{\;\frac{\partial\mathcal L}{\partial x_k}=\frac1{d\,s}\Big[d\,g_k-\sum_{j=1}^d g_j-\hat x_k\sum_{j=1}^d\hat x_j\,g_j\Big]\;}$$
#
# Multiply the mean form by $d/d$: $\operatorname{mean}(\mathbf g)=\frac1d\sum_j g_j$ and
# $\operatorname{mean}(\mathbf g\odot\hat{\mathbf x})=\frac1d\sum_j\hat x_j g_j$, so the two are one formula.
# </details>
#
# ### Exercise 2 · The vector-Jacobian product
#
# Write `layer_norm_vjp(x, g, eps=1e-5)` returning $\mathbf J^\top\mathbf g$ for one token,
# `x` and `g` of shape `(d,)`, **without** building a `(d, d)` array: the formula of step 3.
#
# What the checks ask: a result within a relative $10^{-7}$ of torch's autograd (and of your own
# `layer_norm_jacobian(x, eps).T @ g`), for $d$ from 3 to 1000, $\epsilon$ from $10^{-5}$ to 1, and tokens with
# a tiny variance or a large offset. The hidden tests also run it at $d=4096$ and measure its peak memory
# (numpy and torch allocations together): it must stay under 64 vectors of $d$ float64, 2 MiB, where a
# single $4096\times4096$ matrix is 128 MiB. The cell after the checks runs that memory check for you.
# Here a peak over it fails the check. The class grader can only measure it inside your own process,
# which proves nothing, so there a peak over it costs no points: it is listed for your instructor.
#
# **Stuck?** `hint("layer_norm_vjp")` climbs the same ladder as Exercise 1: step 2 after a run of the
# checks below, step 3 after a failed run since step 2.

# %% nbgrader={"grade": false, "grade_id": "layer_norm_vjp", "locked": false, "schema_version": 3, "solution": true, "task": false}
def layer_norm_vjp(x, g, eps=1e-5):
    """J^T g for LayerNorm without gain and shift, in O(d) memory.

    x: (d,) the token, g: (d,) the gradient with respect to x_hat. Returns (d,).
    """
    ### BEGIN SOLUTION
    s = np.sqrt(x.var() + eps)
    x_hat = (x - x.mean()) / s
    return (g - g.mean() - np.mean(g * x_hat) * x_hat) / s
    ### END SOLUTION


# %% nbgrader={"grade": false, "grade_id": "signature_layer_norm_vjp", "locked": true, "schema_version": 3, "solution": false, "task": false}
# Locked: tells you if the signature above no longer matches what the tests call.
check_signature(layer_norm_vjp, "layer_norm_vjp", "(x, g, eps=1e-05)")

# %% nbgrader={"grade": true, "grade_id": "test_layer_norm_vjp", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
"""Checks the VJP against autograd, and that it agrees with your Jacobian."""
check_layer_norm_vjp(layer_norm_vjp, layer_norm_jacobian)
### BEGIN HIDDEN TESTS
for d_hidden, eps_hidden, seed_hidden in [(3, 1e-5, 21), (65, 1e-5, 22), (16, 1.0, 23), (1000, 1e-5, 24)]:
    check_layer_norm_vjp(layer_norm_vjp, d=d_hidden, eps=eps_hidden, seed=seed_hidden)
check_layer_norm_vjp(layer_norm_vjp, d=12, eps=1e-5, seed=25, scale=1e-3, offset=-3.0)
check_layer_norm_vjp(layer_norm_vjp, layer_norm_jacobian, d=9, eps=0.5, seed=26, scale=4.0, offset=10.0)
check_vjp_memory(layer_norm_vjp, d=4096)
### END HIDDEN TESTS

# %% [markdown]
# The memory check the hidden tests run, here for you to see (it measures one call at $d=4096$):

# %%
try:
    check_vjp_memory(layer_norm_vjp)  # d = 4096 by default, as in the hidden test
except NotImplementedError:
    print("layer_norm_vjp is not written yet: implement Exercise 2, then run this cell again.")

# %% [markdown]
# ## 4. The full backward, with parameters, for any shape
#
# In a Transformer, LayerNorm runs on a tensor of shape `(B, T, d)`: every token has its own
# $\mu$ and $s$, while $\boldsymbol\gamma$ and $\boldsymbol\beta$ are shared by all of them, and
# $y_{t,j}=\gamma_j\hat x_{t,j}+\beta_j$ for every token $t$ (every leading index: batch and position).
#
# **Derive the three gradients before you write them.** Answer on paper:
#
# 1. $\gamma_j$ appears in how many outputs $y_{t,j}$? By the chain rule, $\partial\mathcal L/\partial\gamma_j$ is a
#    sum over those outputs of $\partial\mathcal L/\partial y_{t,j}$ times what?
# 2. The same for $\beta_j$. For a batch that holds **one** token, what must both gradients reduce to?
# 3. Exercise 2 takes $\mathbf g=\partial\mathcal L/\partial\hat{\mathbf x}$ for one token. Here you are given
#    $\partial\mathcal L/\partial\mathbf y$: what is $\mathbf g$ in terms of it? What must `dx` be when
#    $\boldsymbol\gamma=\mathbf 0$?
#
# <details><summary>The three gradients (open after you have written yours)</summary>
#
# $$\frac{\partial\mathcal L}{\partial\gamma_j}=\sum_t\frac{\partial\mathcal L}{\partial y_{t,j}}\,\hat x_{t,j},\qquad
#   \frac{\partial\mathcal L}{\partial\beta_j}=\sum_t\frac{\partial\mathcal L}{\partial y_{t,j}},$$
#
# with $t$ over every leading index; for one token they are $\partial\mathcal L/\partial\mathbf y\odot\hat{\mathbf x}$ and
# $\partial\mathcal L/\partial\mathbf y$. The input gradient is the fast formula of Exercise 2 applied to each
# token, with $\mathbf g=\boldsymbol\gamma\odot\partial\mathcal L/\partial\mathbf y$, so $\boldsymbol\gamma=\mathbf 0$ gives `dx` $=\mathbf 0$.
# </details>
#
# ### Exercise 3 · `layer_norm_backward`
#
# Write `layer_norm_backward(dy, x, gamma, eps=1e-5)` for `x` and `dy` of shape `(..., d)` and
# `gamma` of shape `(d,)`. Return `(dx, dgamma, dbeta)` as float64 arrays, `dx` shaped like `x` and both
# parameter gradients of shape `(d,)`; modify none of the inputs.
#
# What the checks ask: each of the three within a relative $10^{-7}$ of torch's autograd, for a single
# token `(d,)` up to four axes, $\epsilon$ up to 1, a token with a tiny spread and an offset, and a gain with
# negative entries.
#
# *Hint:* reduce over the features with `axis=-1, keepdims=True`; sum the parameter gradients
# over `axis=tuple(range(x.ndim - 1))`.
#
# **Stuck?** `hint("layer_norm_backward")` climbs the same ladder as Exercise 1: step 2 after a run of the
# checks below, step 3 after a failed run since step 2.

# %% nbgrader={"grade": false, "grade_id": "layer_norm_backward", "locked": false, "schema_version": 3, "solution": true, "task": false}
def layer_norm_backward(dy, x, gamma, eps=1e-5):
    """Gradients of LayerNorm y = gamma * x_hat + beta.

    dy, x: (..., d); gamma: (d,). Returns dx (..., d), dgamma (d,), dbeta (d,).
    """
    ### BEGIN SOLUTION
    s = np.sqrt(x.var(axis=-1, keepdims=True) + eps)
    x_hat = (x - x.mean(axis=-1, keepdims=True)) / s
    g = gamma * dy
    dx = (g - g.mean(axis=-1, keepdims=True) - np.mean(g * x_hat, axis=-1, keepdims=True) * x_hat) / s
    leading = tuple(range(x.ndim - 1))
    return dx, np.sum(dy * x_hat, axis=leading), np.sum(dy, axis=leading)
    ### END SOLUTION


# %% nbgrader={"grade": false, "grade_id": "signature_layer_norm_backward", "locked": true, "schema_version": 3, "solution": false, "task": false}
# Locked: tells you if the signature above no longer matches what the tests call.
check_signature(layer_norm_backward, "layer_norm_backward", "(dy, x, gamma, eps=1e-05)")

# %% nbgrader={"grade": true, "grade_id": "test_layer_norm_backward", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
"""Checks dx, dgamma, dbeta against autograd for a (2, 3, 5) input with a non-uniform gamma."""
check_layer_norm_backward(layer_norm_backward)
### BEGIN HIDDEN TESTS
check_layer_norm_backward(layer_norm_backward, shape=(8,), seed=31)
check_layer_norm_backward(layer_norm_backward, shape=(4, 16), seed=32, eps=1.0)
check_layer_norm_backward(layer_norm_backward, shape=(2, 2, 3, 7), seed=33)
check_layer_norm_backward(layer_norm_backward, shape=(3, 6), seed=34, scale=1e-3, offset=2.0)
check_layer_norm_backward(layer_norm_backward, shape=(5, 33), seed=35, gamma=np.linspace(-2.0, 3.0, 33))
### END HIDDEN TESTS

# %% [markdown]
# ## 5. Three properties, seen in numbers
#
# Let $\mathbf u=\mathbf 1/\sqrt d$ and $\mathbf w=\hat{\mathbf x}/\sqrt d$. Both have unit length
# (ignoring $\epsilon$, because $\lVert\hat{\mathbf x}\rVert^2=d$), and they are orthogonal, because
# the entries of $\hat{\mathbf x}$ sum to zero. The boxed Jacobian becomes
#
# $$s\,\mathbf J=\mathbf I-\mathbf u\mathbf u^\top-\mathbf w\mathbf w^\top,$$
#
# the orthogonal projection onto the $(d-2)$-dimensional subspace perpendicular to both.
# LayerNorm forgets the mean and the overall scale of its input; its backward pass forgets the
# same two directions. Read three ways:
#
# 1. **The gradient is orthogonal to $\mathbf 1$.** Adding a constant to every feature does not
#    change the output, so the loss has no slope along $\mathbf 1$.
# 2. **The gradient is orthogonal to $\hat{\mathbf x}$, up to $\epsilon$.** Scaling the input does not
#    change the output either (exactly so when $\epsilon=0$).
# 3. **The gradient shrinks like $1/s$.** A token whose vector is four times larger gets a gradient
#    four times smaller.
#
# The next cell checks all three with your `layer_norm_vjp`.
#
# **Predict first.** Write down the three numbers you expect the cell to print: `grad` $\cdot\,\mathbf 1$,
# `grad` $\cdot\,\hat{\mathbf x}$ (with $\epsilon=10^{-5}$ and $\sigma\approx1$) and the ratio of the two gradient
# norms. Is the ratio exactly 4?

# %%
rng = np.random.default_rng(0)
d_demo = 64
x_demo, g_demo = rng.standard_normal(d_demo), rng.standard_normal(d_demo)
x_hat_demo = (x_demo - x_demo.mean()) / np.sqrt(x_demo.var() + 1e-5)
grad = layer_norm_vjp(x_demo, g_demo)
grad_4x = layer_norm_vjp(4 * x_demo, g_demo)

print(f"1. grad . 1     = {grad.sum():+.2e}   (compare |grad| = {np.linalg.norm(grad):.3f})")
print(f"2. grad . x_hat = {grad @ x_hat_demo:+.2e}")
print(f"3. |grad(x)| / |grad(4x)| = {np.linalg.norm(grad) / np.linalg.norm(grad_4x):.4f}")

u = np.ones(d_demo) / np.sqrt(d_demo)
w = x_hat_demo / np.linalg.norm(x_hat_demo)
s_demo = np.sqrt(x_demo.var())
projection = np.eye(d_demo) - np.outer(u, u) - np.outer(w, w)
print("max |s J - (I - u u^T - w w^T)| at eps = 0:",
      f"{np.max(np.abs(s_demo * layer_norm_jacobian(x_demo, eps=0.0) - projection)):.1e}")
print("eigenvalues of s J (rounded):", np.unique(np.round(np.linalg.eigvalsh(s_demo * layer_norm_jacobian(x_demo, eps=0.0)), 6)))

# %% [markdown]
# The eigenvalues are $d-2$ ones and two zeros: exactly a projection that removes two
# directions. Property 3 deserves a picture, because it is the mechanism behind [notebook 05](05_placement.ipynb).
# Scale one token by $a$ and measure the norm of the gradient that flows back through LayerNorm.
#
# **Predict first.** On log-log axes, what slope will the points have, and for which $a$ (if any) should
# they leave the line? ($\epsilon=10^{-5}$ and the token's $\sigma$ is about 1.)

# %%
scales = np.logspace(-1, 2, 31)
grad_norms = [np.linalg.norm(layer_norm_vjp(a * x_demo, g_demo)) for a in scales]

fig, ax = plt.subplots(figsize=(5.5, 3.6))
ax.loglog(scales, grad_norms, "o", ms=4, label="measured |dL/dx|")
ax.loglog(scales, grad_norms[10] * scales[10] / scales, "--", label="slope -1 (1/a)")
ax.set_xlabel("input scale a (token = a * x)")
ax.set_ylabel("gradient norm through LayerNorm")
ax.set_title("A token a times larger gets a gradient a times smaller")
ax.legend()
fig.set_layout_engine("tight")
plt.show()

# %% [markdown]
# ## 6. In PyTorch
#
# PyTorch's `torch.nn.functional.layer_norm` and autograd compute the same gradients. We run
# them in float64 so that any difference is a formula difference, not rounding.

# %%
import torch  # imported here: only this section needs it

x_t = torch.tensor(rng.standard_normal((2, 3, 8)), dtype=torch.float64, requires_grad=True)
dy_np = rng.standard_normal((2, 3, 8))
layer = torch.nn.LayerNorm(8, eps=1e-5, dtype=torch.float64)
with torch.no_grad():
    layer.weight.copy_(torch.tensor(rng.standard_normal(8)))
    layer.bias.copy_(torch.tensor(rng.standard_normal(8)))

layer(x_t).backward(torch.tensor(dy_np))
dx_mine, dgamma_mine, dbeta_mine = layer_norm_backward(dy_np, x_t.detach().numpy(), layer.weight.detach().numpy())
print("max |dx - autograd|     =", f"{np.max(np.abs(dx_mine - x_t.grad.numpy())):.1e}")
print("max |dgamma - autograd| =", f"{np.max(np.abs(dgamma_mine - layer.weight.grad.numpy())):.1e}")
print("max |dbeta - autograd|  =", f"{np.max(np.abs(dbeta_mine - layer.bias.grad.numpy())):.1e}")

one_token = x_t.detach()[0, 0]
jacobian_torch = torch.autograd.functional.jacobian(lambda t: torch.nn.functional.layer_norm(t, (8,), eps=1e-5), one_token)
print("max |J - autograd J|    =", f"{np.max(np.abs(layer_norm_jacobian(one_token.numpy()) - jacobian_torch.numpy())):.1e}")

# %% [markdown]
# Differences around $10^{-16}$ mean the formulas are the same; a formula mistake shows up as
# $10^{-2}$ or worse. Note that `nn.LayerNorm` stores $\boldsymbol\gamma$ as `weight` and
# $\boldsymbol\beta$ as `bias`, and its default $\epsilon$ is $10^{-5}$.

# %% [markdown]
# ## 7. Interview questions
#
# Try each one aloud before you reveal the answer.
#
# <details><summary><b>Derive the gradient of LayerNorm with respect to its input. What properties does it have?</b></summary>
#
# With $\partial\mu/\partial x_j=1/d$ and $\partial s/\partial x_j=\hat x_j/d$, the quotient rule gives
# $\mathbf J=\frac1s(\mathbf I-\frac1d\mathbf 1\mathbf 1^\top-\frac1d\hat{\mathbf x}\hat{\mathbf x}^\top)$, so
# $\partial\mathcal L/\partial\mathbf x=\frac1s(\mathbf g-\operatorname{mean}(\mathbf g)\mathbf 1-\operatorname{mean}(\mathbf g\odot\hat{\mathbf x})\hat{\mathbf x})$
# with $\mathbf g=\boldsymbol\gamma\odot\partial\mathcal L/\partial\mathbf y$. It sums to zero, it is orthogonal to
# $\hat{\mathbf x}$ up to $\epsilon$, and it scales like $1/s$.
# </details>
#
# <details><summary><b>Why is the Jacobian symmetric, and why does that matter?</b></summary>
#
# Both rank-one terms are outer products of a vector with itself ($\mathbf 1\mathbf 1^\top$ and
# $\hat{\mathbf x}\hat{\mathbf x}^\top$). So $\mathbf J^\top\mathbf g=\mathbf J\mathbf g$: you never
# need to think about which side to multiply on, and $s\mathbf J$ can be an orthogonal projection.
# </details>
#
# <details><summary><b>How much memory does LayerNorm's backward need per token?</b></summary>
#
# $O(d)$: the input gradient needs $\hat{\mathbf x}$ (or $\mathbf x$ and $s$), the two means
# $\operatorname{mean}(\mathbf g)$ and $\operatorname{mean}(\mathbf g\odot\hat{\mathbf x})$, and elementwise work.
# Frameworks save $\mu$ and $1/s$ per token from the forward pass for this reason.
# Building $\mathbf J$ would cost $O(d^2)$ per token.
# </details>
#
# <details><summary><b>How are dgamma and dbeta computed for a batch of sequences?</b></summary>
#
# They are shared by every token, so their gradients are sums over every leading axis (batch and
# position): $\sum_t \partial\mathcal L/\partial\mathbf y_t\odot\hat{\mathbf x}_t$ and
# $\sum_t \partial\mathcal L/\partial\mathbf y_t$, each of shape $(d,)$.
# </details>
#
# <details><summary><b>Why does a token with a large norm learn slowly through a LayerNorm?</b></summary>
#
# The input gradient is divided by $s$, the token's standard deviation across features. If the
# residual stream has grown four times larger, the gradient reaching it through the norm is four
# times smaller. In a pre-LN Transformer the stream grows with depth, which is why its gradients
# shrink like $1/\sqrt L$ ([notebook 05](05_placement.ipynb)).
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
# - $\partial\mu/\partial x_j=1/d$, $\partial\sigma^2/\partial x_j=2(x_j-\mu)/d$, $\partial s/\partial x_j=\hat x_j/d$.
# - $\mathbf J=\frac1s(\mathbf I-\frac1d\mathbf 1\mathbf 1^\top-\frac1d\hat{\mathbf x}\hat{\mathbf x}^\top)$ is
#   symmetric, and $s\mathbf J$ projects out $\mathbf 1$ and $\hat{\mathbf x}$ (rank $d-2$).
# - Backward in $O(d)$: $\frac1s(\mathbf g-\operatorname{mean}(\mathbf g)-\operatorname{mean}(\mathbf g\odot\hat{\mathbf x})\hat{\mathbf x})$
#   with $\mathbf g=\boldsymbol\gamma\odot\partial\mathcal L/\partial\mathbf y$.
# - Parameter gradients sum over every token: $\sum_t\mathbf{dy}_t\odot\hat{\mathbf x}_t$ and $\sum_t\mathbf{dy}_t$.
# - Large tokens get small gradients (the $1/s$); that is the lever of the pre-LN argument.
#
# *Reference:* Ba, Kiros & Hinton (2016), *Layer Normalization*.
#
# Next: [04 · RMSNorm: LayerNorm without the mean](04_rmsnorm.ipynb)
