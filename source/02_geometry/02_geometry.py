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
# # 02 · The geometry of LayerNorm: a projection, then a sphere
#
# LayerNorm takes a token $\mathbf x\in\mathbb R^d$ and throws away exactly two numbers: its
# mean and its overall scale. What is left is a direction. This notebook makes that sentence
# precise and visible, because it explains what LayerNorm ignores (and so what the next layer
# can never see), why $\epsilon$ matters for quiet tokens, what RMSNorm gives up, and why the
# weights in front of a norm keep growing during training.
#
# By the end of this notebook you will be able to
#
# 1. write centring as a matrix, the projection $\mathbf P=\mathbf I-\frac1d\mathbf 1\mathbf 1^\top$, and build the
#    projection that removes any set of directions, orthogonal or not, independent or not,
# 2. derive the squared length of $\hat{\mathbf x}$, and say what $\epsilon$ does to tokens with a small spread,
# 3. draw the whole picture in $d=3$: a plane, then a circle,
# 4. find by experiment, then prove, which scales and shifts LayerNorm and RMSNorm ignore, and how exactly,
# 5. measure an invariance with a function of your own, and
# 6. (optional section) explain why the weights in front of a norm grow under plain gradient descent.
#
# **Time.** About 80 minutes, and about 5 more for the optional part. This is an estimate, not a timing of
# learners: `tools/read-through-estimate` counts about 4,100 words of prose (read at 150 words a minute), 29
# code cells to run (half a minute each), 2 graded exercises (10 minutes each), 1 derivation steps (5 each), 4
# predictions (2 each) and 1 widgets (5 each), and adds the 12 s the solved notebook took to run on the course's
# test machine.
#
# **How the exercises work.** Each exercise is a function with a fixed signature. Replace
# `raise NotImplementedError()` with your code, run the cell, then run the checks below it.
# Until you implement a function, its checks fail with `NotImplementedError`; that is expected.
# A failing check tells you what it expected, what it got, and the most likely cause.

# %%
import matplotlib.pyplot as plt
import numpy as np
from IPython.display import display

from grader.checks.geometry import check_complement_projection, check_invariance_gap, check_norm_squared
from grader.compare import check_signature
from grader.learner import hint, progress
from grader.predict import choose, compare
from normlab.geometry import BarDragWidget, sphere_points_3d, sphere_view_3d, static_geometry_figure
from normlab.run_mode import quick_run

np.set_printoptions(precision=4, suppress=True)
QUICK = quick_run()  # True under nbgrader: demo cells do the least work and figures are not drawn

# %% [markdown]
# ## 1. Two facts about one token
#
# Recall LayerNorm for one token, without its gain and shift ([notebook 01](01_bn_vs_ln.ipynb)):
#
# $$\mu=\frac1d\sum_{j=1}^d x_j,\qquad \sigma^2=\frac1d\sum_{j=1}^d (x_j-\mu)^2,\qquad s=\sqrt{\sigma^2+\epsilon},\qquad
#   \hat{\mathbf x}=\frac{\mathbf x-\mu\mathbf 1}{s}.$$
#
# The cell below defines it (and RMSNorm, for later) for arrays of any shape `(..., d)` and runs
# it on the worked example $\mathbf x=(2,4,6,8)$: $\mu=5$, deviations $(-3,-1,1,3)$, $\sigma^2=5$.

# %%
def ln(x, eps=1e-5):
    """LayerNorm without gain and shift, over the last axis. x: (..., d) -> x_hat: (..., d)."""
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps)


def rms(x, eps=1e-5):
    """RMSNorm without gain, over the last axis. x: (..., d) -> (..., d)."""
    return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps)


x_example = np.array([2.0, 4.0, 6.0, 8.0])
for eps in (0.0, 1e-5):
    x_hat = ln(x_example, eps)
    print(f"eps = {eps:g}:  x_hat = {x_hat}   sum = {x_hat.sum():+.1e}   sum of squares = {np.sum(x_hat**2):.6f}")

# %% [markdown]
# Two facts you can check by hand: the entries of $\hat{\mathbf x}$ **sum to zero**, and their
# squares **sum to $d=4$** (to $3.99999$ once $\epsilon$ is in). They are the whole geometry
# of LayerNorm. The first says $\hat{\mathbf x}$ lies in a hyperplane; the second says it lies on
# a sphere. The rest of the notebook takes them one at a time.

# %% [markdown]
# ## 2. Centring is a projection
#
# Subtracting the mean is linear in $\mathbf x$. Since $\mu\mathbf 1=\frac1d\mathbf 1(\mathbf 1^\top\mathbf x)$,
#
# $$\mathbf x-\mu\mathbf 1=\Big(\mathbf I-\tfrac1d\mathbf 1\mathbf 1^\top\Big)\mathbf x=\mathbf P\mathbf x .$$
#
# $\mathbf P$ is the **orthogonal projection onto the hyperplane** $H=\{\mathbf v:\sum_j v_j=0\}$,
# the vectors perpendicular to $\mathbf 1$. You can read that off four properties:
#
# - **symmetric**, $\mathbf P^\top=\mathbf P$ (the projection is orthogonal, not oblique);
# - **idempotent**, $\mathbf P^2=\mathbf P$ (centring an already centred vector changes nothing);
# - $\mathbf P\mathbf 1=\mathbf 0$ (a constant token has nothing left after centring);
# - **rank $d-1$**: its eigenvalues are $0$ once (eigenvector $\mathbf 1$) and $1$ for the
#   $d-1$ directions inside $H$.
#
# A symmetric, idempotent matrix is an orthogonal projection, and it is fixed by the directions
# it removes. So these properties determine $\mathbf P$ completely, and the same holds for any
# set of directions, not only $\mathbf 1$.
#
# **Where does the $\frac1d$ come from?** Removing one direction $\mathbf v$ means subtracting the
# component along it, $\frac{\mathbf v^\top\mathbf x}{\mathbf v^\top\mathbf v}\,\mathbf v$: the matrix
# $\mathbf I-\mathbf v\mathbf v^\top/(\mathbf v^\top\mathbf v)$. For $\mathbf v=\mathbf 1$, $\mathbf v^\top\mathbf v=d$.
# Norms in practice remove more than one direction: GroupNorm centres each group of features
# separately (one indicator direction per group), and [notebook 03](03_backward.ipynb) meets the
# projection that removes both $\mathbf 1$ and $\hat{\mathbf x}$. With several directions the
# one-at-a-time recipe needs care, and that is the exercise.
#
# ### Exercise 1 · A projection that removes any set of directions
#
# Write `complement_projection(V)`: given a matrix `V` of shape `(d, k)` whose **columns** are $k$
# directions in $\mathbb R^d$, return the `(d, d)` float64 matrix $\mathbf P$ of the orthogonal projection
# onto everything perpendicular to those columns. So $\mathbf P$ is symmetric, $\mathbf P^2=\mathbf P$,
# $\mathbf P\mathbf v_j=\mathbf 0$ for every column, and $\mathbf P\mathbf w=\mathbf w$ for every $\mathbf w$
# perpendicular to all of them. What the graded tests use, and what your function must handle:
#
# - the columns are in general **not of unit length** and **not orthogonal** to each other;
# - they may be **linearly dependent** (a column that is a combination of the others adds no direction:
#   $k$ columns may span only $r<k$ directions, and then $\mathbf P$ keeps $d-r$ dimensions);
# - sizes from $d=1$, $k=1$ to $d=256$, and $k=d$ (then nothing is left: $\mathbf P=\mathbf 0$);
# - columns along standard basis vectors, so `V[0, 0]` may be 0 or a whole row of `V` may be 0.
#
# The checks judge $\mathbf P$ by the properties above, each to an absolute $10^{-9}$: $\mathbf P$ symmetric,
# $\mathbf P^2=\mathbf P$, $\mathbf P\mathbf V=\mathbf 0$ (divided by the largest $|V_{ij}|$ when it exceeds 1) and trace
# $d-r$. An answer of another shape, or with a non-finite entry, fails.
#
# With `V = np.ones((d, 1))` your function returns the centring matrix. Think before you code: what
# goes wrong if you remove the columns one at a time, each with its own $\mathbf v\mathbf v^\top/(\mathbf v^\top\mathbf v)$,
# when two columns are at an acute angle? Draw it for two vectors in the plane.
#
# In this notebook's exercises, compute the result yourself: a graded function that calls PyTorch's
# `layer_norm`, `rms_norm`, `batch_norm`, `group_norm`, `instance_norm` or `var_mean` (or the matching
# `torch.nn` module), or a helper from the course's `grader` or `normlab` packages, skips the exercise.
# The class grader cannot prove what your code called (it runs in your own process, which your code
# controls), so no points depend on it: it lists what it saw for your instructor, who decides.
# numpy's linear algebra (`np.linalg`) is yours to use. The `norm` handed to `invariance_gap`
# (Exercise 2) is yours to call, and comparing with the library in other cells is fine.
#
# **Stuck?** Run `hint("complement_projection")` in a new cell. Its steps open as you try: step 1 (the
# idea) at once; step 2 (what your checks said) once you have run the checks below on your own
# code; step 3 (the shape of the code) after a check fails again since you saw step 2. Asking again
# repeats the highest open step and says what opens the next. `progress()` shows where you stand.

# %% nbgrader={"grade": false, "grade_id": "complement_projection", "locked": false, "schema_version": 3, "solution": true, "task": false}
def complement_projection(V):
    """The orthogonal projection onto the directions perpendicular to every column of V.

    V: (d, k), columns of any length, not necessarily orthogonal or independent.
    Returns P: (d, d) float64, symmetric, P @ P = P, P @ V = 0, trace d - (number of independent columns).
    """
    ### BEGIN SOLUTION
    d = V.shape[0]
    tol = 1e-10 * (1.0 + np.abs(V).max())  # relative to the size of V's entries
    basis = []  # orthonormal vectors spanning the columns seen so far (Gram-Schmidt)
    for v in V.T:
        w = 1.0 * v  # a float64 copy of the column
        for q in basis:
            w = w - (q @ w) * q
        length = np.linalg.norm(w)
        if length > tol:  # a dependent column leaves (almost) nothing: skip it
            basis.append(w / length)
    P = np.eye(d)
    for q in basis:
        P -= np.outer(q, q)
    return P
    ### END SOLUTION


# %% nbgrader={"grade": false, "grade_id": "signature_complement_projection", "locked": true, "schema_version": 3, "solution": false, "task": false}
# Locked: tells you if the signature above no longer matches what the tests call.
check_signature(complement_projection, "complement_projection", "(V)")

# %% nbgrader={"grade": true, "grade_id": "test_complement_projection", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
"""Checks complement_projection on the all-ones column, orthogonal, non-orthogonal and dependent columns."""
check_complement_projection(complement_projection)
### BEGIN HIDDEN TESTS
check_complement_projection(complement_projection, cases=(
    (1, (0,), 1, 7, False),  # d = 1: P is the 1 x 1 zero matrix
    (5, (0, 1, 2, 3, 4), 5, 1, True),  # k = d independent columns: P = 0
    (64, (0, 3, 7, 9), 4, 2, True),
    (17, (1, 2, 5), 6, 3, True),  # six columns spanning three directions
    (256, (0,), 1, 4, False),  # the centring matrix at d = 256
    (8, (0, 1, 2), 3, 5, True),
    (6, (2,), 1, 8, False, "standard"),  # V a multiple of e_2: a zero first row, V[0, 0] == 0
    (7, (1, 4), 2, 9, False, "standard"),  # standard-basis columns, zero first row
    (5, (1, 3), 4, 10, True, "standard"),  # rank 2 from four columns, zero first row
    (6, (0, 3), 3, 11, True, "standard"),  # rank-deficient, e_0 among the directions
))
### END HIDDEN TESTS

# %% [markdown]
# Now look at the centring matrix with your own function, for $d=4$: $\mathbf P=\mathbf I-\frac14\mathbf 1\mathbf 1^\top$.

# %%
P = complement_projection(np.ones((4, 1)))
print(P)
print("max |P - P^T|   =", np.max(np.abs(P - P.T)))
print("max |P @ P - P| =", np.max(np.abs(P @ P - P)))
print("rank            =", np.linalg.matrix_rank(P))
print("eigenvalues     =", np.round(np.linalg.eigvalsh(P), 12) + 0.0)
print("P @ 1           =", P @ np.ones(4))
print("P @ (2, 4, 6, 8) =", P @ x_example, "  (the deviations from mu = 5)")
print("same matrix from V = 3 * 1, and from V = [1, 2 * 1]:",
      np.allclose(complement_projection(3 * np.ones((4, 1))), P),
      np.allclose(complement_projection(np.column_stack([np.ones(4), 2 * np.ones(4)])), P))

# %% [markdown]
# The projection depends only on the span of the columns, not on their lengths or on how many
# times a direction is repeated. Remove $\mathbf 1$ and $\hat{\mathbf x}$ together (they are perpendicular,
# since $\sum_j\hat x_j=0$) and two dimensions go: this is the rank-$(d-2)$ projection at the heart of
# LayerNorm's backward pass in [notebook 03](03_backward.ipynb).

# %%
P2 = complement_projection(np.column_stack([np.ones(4), ln(x_example)]))
print("rank of the projection removing 1 and x_hat:", np.linalg.matrix_rank(P2), " (d - 2 = 2)")

# %% [markdown]
# The other half, $\mathbf I-\mathbf P=\frac1d\mathbf 1\mathbf 1^\top$, projects onto the line
# through $\mathbf 1$ and gives $\mu\mathbf 1$. The two pieces are perpendicular, so Pythagoras
# splits every token's squared length into a centred part and a mean part:
#
# $$\lVert\mathbf x\rVert^2=\lVert\mathbf x-\mu\mathbf 1\rVert^2+\lVert\mu\mathbf 1\rVert^2=d\,\sigma^2+d\,\mu^2,
#   \qquad\text{so}\qquad \operatorname{mean}(\mathbf x^2)=\sigma^2+\mu^2 .$$
#
# Keep that identity in mind: it is exactly the difference between RMSNorm and LayerNorm (section 6).

# %%
x = x_example
print(f"|x|^2 = {x @ x:.1f}   |P x|^2 + |(I - P) x|^2 = {(P @ x) @ (P @ x) + ((x - P @ x) @ (x - P @ x)):.1f}")
print(f"mean(x^2) = {np.mean(x**2):.1f}   sigma^2 + mu^2 = {x.var() + x.mean()**2:.1f}")

# %% [markdown]
# Nobody builds $\mathbf P$ in a real implementation: `P @ x` costs $O(d^2)$, `x - x.mean()` costs
# $O(d)$. The matrix is a way of *thinking*: LayerNorm's first step is a linear projection that
# deletes one direction, $\mathbf 1$.

# %% [markdown]
# ## 3. Then a sphere, and what $\epsilon$ does to it
#
# Dividing the centred vector by $s$ fixes its length. How long is it?
#
# **Derive it.** Start from $\hat{\mathbf x}=(\mathbf x-\mu\mathbf 1)/s$ with $s=\sqrt{\sigma^2+\epsilon}$, and use
# the first half of the Pythagoras split above, $\lVert\mathbf x-\mu\mathbf 1\rVert^2=d\,\sigma^2$. Write
# $\lVert\hat{\mathbf x}\rVert^2$ in terms of $d$, $\sigma^2$ and $\epsilon$ only, then type your expression into
# `my_norm_squared(x, eps)` below, for one token `x` of shape `(d,)` (`x.size` is $d$, `x.var()` is
# the biased $\sigma^2$). The check compares it with $\lVert\hat{\mathbf x}\rVert^2$ measured from the
# forward pass on five tokens, one of them constant. It is not graded.

# %%
def my_norm_squared(x, eps):
    """Your expression for |x_hat|^2 of one token x: (d,), in terms of d, sigma^2 and eps."""
    return ...  # your expression


# %%
check_norm_squared(my_norm_squared)

# %% [markdown]
# <details><summary>Answer</summary>
#
# Dividing a vector by the number $s$ divides its squared length by $s^2$:
#
# $$\lVert\hat{\mathbf x}\rVert^2=\frac{\lVert\mathbf x-\mu\mathbf 1\rVert^2}{s^2}=\frac{d\,\sigma^2}{\sigma^2+\epsilon}\approx d ,$$
#
# with equality exactly when $\epsilon=0$ (and $\sigma>0$).
# </details>
#
# So, before the gain and shift, **every token lands on the sphere of radius $\sqrt d$ inside the
# hyperplane $H$**. The gain $\boldsymbol\gamma$ then stretches that sphere into an ellipsoid
# (one stretch per axis), and the shift $\boldsymbol\beta$ moves it. Here are a thousand tokens
# with $d=64$ and wildly different means and scales.
#
# **Predict first.** From your formula for $\lVert\hat{\mathbf x}\rVert^2$: will the lengths after LayerNorm be
# exactly 8, a little above 8, or a little below? Then run the cell.

# %%
rng = np.random.default_rng(0)
tokens = (rng.uniform(0.1, 10.0, size=(1000, 1)) * rng.standard_normal((1000, 64))
          + rng.uniform(-50.0, 50.0, size=(1000, 1)))
x_hat = ln(tokens)
lengths = np.linalg.norm(x_hat, axis=-1)
print(f"token means from {tokens.mean(-1).min():.1f} to {tokens.mean(-1).max():.1f}, "
      f"spreads from {tokens.std(-1).min():.2f} to {tokens.std(-1).max():.2f}")
print(f"after LN: largest |sum of x_hat| = {np.max(np.abs(x_hat.sum(-1))):.1e}, "
      f"lengths from {lengths.min():.6f} to {lengths.max():.6f}  (sqrt(64) = {np.sqrt(64):.0f})")

# %% [markdown]
# The lengths are all a hair below 8: that hair is $\epsilon$. For a token whose spread $\sigma$
# is large compared with $\sqrt\epsilon$, the ratio $\lVert\hat{\mathbf x}\rVert^2/d$ is 1.
# The next cell measures the ratio on a token of dimension 16 whose spread we dial from
# $10^{-5}$ to $10$, with $\epsilon=10^{-5}$, and then on a constant token ($\sigma=0$).
#
# **Predict first.** As $\sigma\to0$, with $\epsilon=10^{-5}$ fixed, what number does
# $\lVert\hat{\mathbf x}\rVert^2/d$ approach? (Does LayerNorm blow a quiet token up to the sphere, or not?)

# %%
guess_ratio_as_sigma_vanishes = ...  # your guess: a number

# %%
eps = 1e-5
direction = rng.standard_normal(16)
direction = (direction - direction.mean()) / direction.std()  # mean 0, standard deviation 1
sigmas = np.logspace(-5, 1, 49)
measured = np.array([np.sum(ln(3.0 + sigma * direction, eps) ** 2) / 16 for sigma in sigmas])
fine = np.logspace(-5, 1, 400)

fig, ax = plt.subplots(figsize=(6.4, 3.9))
ax.semilogx(fine, fine**2 / (fine**2 + eps), color="C0", label=r"formula $\sigma^2/(\sigma^2+\epsilon)$")
ax.semilogx(sigmas, measured, "o", ms=4, color="C1", label=r"measured $\|\hat x\|^2/d$, $d=16$")
ax.axvline(np.sqrt(eps), color="0.5", linestyle=":")
ax.annotate(r"$\sigma=\sqrt{\epsilon}$: half the squared radius", xy=(np.sqrt(eps), 0.5), xytext=(1.5e-2, 0.5),
            arrowprops=dict(arrowstyle="->", color="0.3"), fontsize=9)
ax.text(2e-5, 0.82, r"$\sigma\ll\sqrt{\epsilon}$: $\hat x\approx(x-\mu)/\sqrt{\epsilon}$," + "\npulled towards 0",
        fontsize=9)
ax.text(0.4, 0.82, "on the sphere\nof radius $\\sqrt{d}$", fontsize=9)
ax.set_xlabel(r"token spread $\sigma$ (units of x, log scale)")
ax.set_ylabel(r"$\|\hat x\|^2 / d$ (fraction of $d$)")
ax.set_title(r"With $\epsilon=10^{-5}$, tokens with $\sigma \lesssim 10^{-2}$ fall inside the sphere")
ax.legend(loc="lower right", fontsize=8.5)
fig.set_layout_engine("tight")
plt.show()

for sigma in (1.0, 0.1, 0.01, np.sqrt(eps), 1e-3):
    print(f"sigma = {sigma:.2e}:  |x_hat|^2 / d = {np.sum(ln(3.0 + sigma * direction, eps) ** 2) / 16:.4f}")
with np.errstate(invalid="ignore"):  # 0/0 on purpose
    constant = np.full(4, 5.0)
    print("constant token (5, 5, 5, 5): LN with eps =", ln(constant), "  with eps = 0:", ln(constant, 0.0))

# %%
ratio_at_zero_spread = np.sum(ln(np.full(16, 3.0), eps) ** 2) / 16
print(f"|x_hat|^2 / d at sigma = 1e-5: {measured[0]:.1e};  for a constant token (sigma = 0): {ratio_at_zero_spread:g}")
compare(guess_ratio_as_sigma_vanishes, ratio_at_zero_spread, name="|x_hat|^2 / d as sigma -> 0")

# %% [markdown]
# <details><summary>Answer</summary>
#
# It goes to **0**, not to 1. When $\sigma\ll\sqrt\epsilon$, $\epsilon$ dominates the denominator of
# $\sigma^2/(\sigma^2+\epsilon)$, so $\hat{\mathbf x}\approx(\mathbf x-\mu\mathbf 1)/\sqrt\epsilon$ and the ratio is about
# $\sigma^2/\epsilon$: the token is pulled inside the sphere towards the origin. At $\sigma=\sqrt\epsilon$ the
# ratio is exactly one half (the dotted line). A constant token ends exactly at $\hat{\mathbf x}=\mathbf 0$
# instead of $0/0$.
# </details>
#
# So $\sqrt\epsilon$ is a **noise floor**: a token whose features vary by much less than
# $\sqrt{10^{-5}}\approx 3\cdot10^{-3}$ is not blown up to unit variance (which would amplify
# rounding noise), it is shrunk towards zero. Above the floor, $\epsilon$ is invisible.

# %% [markdown]
# ## 4. The whole picture in $d=3$
#
# In three dimensions everything can be drawn. The hyperplane $H$ is the plane $x_1+x_2+x_3=0$,
# perpendicular to $\mathbf 1=(1,1,1)$, and the "sphere of radius $\sqrt d$ inside $H$" is a
# **circle of radius $\sqrt3$** in that plane. Below, random points $\mathbf x$ (grey) slide along
# $\mathbf 1$ onto the plane (blue: $\mathbf x-\mu\mathbf 1$), then move radially onto the circle
# (red: $\operatorname{LN}(\mathbf x)$). The right view looks straight down $\mathbf 1$.
#
# **Predict first.** How many numbers does it take to say where a red point is? Sketch what the red
# points look like in the right view, then run the cell.

# %%
view_3d = sphere_view_3d(n_points=30, seed=0)
display(view_3d)

# %%
points = sphere_points_3d(n_points=30, seed=0)
radii = np.linalg.norm(points["x_hat"], axis=-1)
print(f"largest |x1 + x2 + x3| of LN(x): {np.max(np.abs(points['x_hat'].sum(-1))):.1e}")
print(f"radii of LN(x): from {radii.min():.6f} to {radii.max():.6f}   (sqrt(3) = {np.sqrt(3):.6f})")

# %% [markdown]
# Count the degrees of freedom: $d$ numbers go in, the hyperplane removes one, the sphere removes
# another. **LayerNorm's output carries $d-2$ numbers per token**: in $d=3$, a single angle on
# the circle. [Notebook 03](03_backward.ipynb) meets the same count from the other side: LayerNorm's Jacobian has
# rank $d-2$.

# %% [markdown]
# ## 5. An experiment: drag the bars
#
# Before the algebra, find out for yourself what LayerNorm ignores. The widget shows a 6-dimensional
# token $\mathbf x$ as six bars (drag the vertical sliders $x_1,\dots,x_6$). The left panel is the input
# $\mathbf z=a\mathbf x+c\mathbf 1$, the middle one the centred $\mathbf z-\mu\mathbf 1$, the right one
# $\operatorname{LN}(\mathbf z)$ with the $\epsilon$ of the slider. The readout gives $\mu$, $\sigma$,
# $\sum_i\hat x_i$, $\lVert\hat{\mathbf x}\rVert^2$ and the formula $d\sigma^2/(\sigma^2+\epsilon)$ of section 3.
#
# **Run the widget's cell yourself.** If you used *Run All*, it stopped at the first check whose
# exercise is not written yet (Exercise 1's, above), so the cell below has not run: click in it and
# press Shift+Enter. The widget does not use your exercises.
#
# **Move the sliders** and answer each question in a sentence before you open its answer.
#
# 1. **The shift.** Move $c$ over its whole range. Which panels change, and which numbers in the readout?
# 2. **The scale.** Move $a$ from 1 up to 4, then down through 0 to $-4$. What does the LayerNorm panel
#    do for $a>0$, at $a=0$, and for $a<0$?
# 3. **RMSNorm.** Tick *show RMSNorm* and repeat questions 1 and 2 for its panel. Which of the two
#    moves does RMSNorm ignore?
# 4. **The noise floor.** Press *Reset*, then raise $\epsilon$ until $\lVert\hat{\mathbf x}\rVert^2$ reads about
#    $3=d/2$. How does that $\epsilon$ compare with $\sigma^2$ in the readout? What happens to the LayerNorm
#    bars as $\epsilon$ grows far beyond $\sigma^2$?

# %%
# Not graded. Run this cell by hand if Run All stopped above it (it needs none of your exercises).
# Move the sliders x1..x6, a, c and eps, and tick "show RMSNorm".
geometry_widget = BarDragWidget()
geometry_widget.widget

# %% [markdown]
# <details><summary>Answer 1: the shift</summary>
#
# Only the input panel moves, and only $\mu$ in the readout. The centred panel, the LayerNorm panel,
# $\sigma$ and $\lVert\hat{\mathbf x}\rVert^2$ do not change at all: adding $c$ to every entry adds $c$ to the mean,
# and centring subtracts it again.
# </details>
#
# <details><summary>Answer 2: the scale</summary>
#
# For every $a>0$ the LayerNorm panel stays put (the change is far below a pixel). At $a=0$ the token is
# constant and LayerNorm returns $\mathbf 0$. For $a<0$ every bar flips sign: $\operatorname{LN}(\mathbf z)=-\operatorname{LN}(\mathbf x)$,
# the antipodal point of the sphere, with the same $\lVert\hat{\mathbf x}\rVert^2$. LayerNorm ignores the size of $a$,
# not its sign.
# </details>
#
# <details><summary>Answer 3: RMSNorm</summary>
#
# RMSNorm ignores $a>0$ (and flips with $a<0$) like LayerNorm, but its bars move with $c$: it does not centre,
# so a shift changes the direction of the token it normalises.
# </details>
#
# <details><summary>Answer 4: the noise floor</summary>
#
# $\lVert\hat{\mathbf x}\rVert^2=d/2$ when $\epsilon\approx\sigma^2$, as $d\sigma^2/(\sigma^2+\epsilon)$ says. Far beyond it,
# the bars shrink towards zero like $\sigma/\sqrt\epsilon$: the token is no longer normalised, only divided by
# $\sqrt\epsilon$. That is the noise floor of section 3, reached here by raising $\epsilon$ instead of
# shrinking $\sigma$. Only the ratio $\epsilon/\sigma^2$ matters: with $\epsilon$ raised, a small $a$ (which shrinks
# $\sigma$ to $|a|\sigma$) pushes the bars in the same way.
# </details>
#
# The next section proves all four answers in three lines of algebra and measures them.

# %% [markdown]
# ## 6. Invariances, and what RMSNorm keeps of them
#
# Here is why the widget behaves as it does. Scale a token by $a$ and shift it by $c$. Its mean becomes
# $a\mu+c$ and its spread $|a|\sigma$, so
#
# $$\operatorname{LN}_\epsilon(a\mathbf x+c\mathbf 1)=\frac{a(\mathbf x-\mu\mathbf 1)}{\sqrt{a^2\sigma^2+\epsilon}}
#   =\operatorname{sign}(a)\,\frac{\mathbf x-\mu\mathbf 1}{\sqrt{\sigma^2+\epsilon/a^2}}
#   =\operatorname{sign}(a)\,\operatorname{LN}_{\epsilon/a^2}(\mathbf x).$$
#
# Read it three ways.
#
# - **The shift $c$ disappears exactly**: centring deletes the direction $\mathbf 1$ it lives in.
# - **A scale $a>0$ disappears up to $\epsilon$**: scaling by $a$ is the same as using $\epsilon/a^2$.
#   With $\sigma^2\gg\epsilon/a^2$ that is invisible; for a very small $a$ it is not.
# - **A scale $a<0$ flips the sign**: $\hat{\mathbf x}$ goes to the antipodal point $-\hat{\mathbf x}$ of the sphere.
#
# So $\operatorname{LN}(a\mathbf x+c\mathbf 1)=\operatorname{LN}(\mathbf x)$ for every $a>0$ and every $c$
# (up to $\epsilon$): a sublayer that rescales the stream or adds the same constant to every feature
# is invisible to the next LayerNorm.

# %% [markdown]
# ### Exercise 2 · Measure an invariance
#
# "Invariant up to $\epsilon$" deserves a number: the **invariance gap** of a map $f$ at $\mathbf x$ for a
# scale $a$ and a shift $c$, which says how far $f$'s output moves when its input is scaled by $a$ and
# shifted by $c$. Decide what that number is before you open it. Answer on paper:
#
# 1. "Shifted by $c$" means $c\mathbf 1$ added to the token. What does one line of numpy add to every token
#    of an array `(..., d)`?
# 2. You hold two outputs of shape `(..., d)`, before and after. Which single number says how far apart
#    they are, in the output's units, so that **one** entry that moves by 0.5 among $10^4$ that do not
#    shows as 0.5 rather than being averaged away?
# 3. An entry that goes down by 2 has moved as far as one that goes up by 2. What must happen to each
#    difference before you take that number?
# 4. Test it: for $f$ the identity, what must the gap be at $a=1$, $c=0$? At $a=-1$, $c=0$, in terms of
#    $\mathbf x$? And for a map that ignores $a$ and $c$?
#
# <details><summary>The definition (open after you have answered the four questions)</summary>
#
# $$\operatorname{gap}(f,\mathbf x,a,c)=\max_{\text{all entries}}\big|f(a\mathbf x+c\mathbf 1)-f(\mathbf x)\big| .$$
#
# 1. `+ c` on an array adds $c$ to every entry, which is $c\mathbf 1$ for every token.
# 2. The largest entry of the difference, over every entry of every token: a mean or a norm would dilute
#    one moved entry among the others.
# 3. Its absolute value, taken before the maximum; otherwise a decrease is hidden.
# 4. 0; $2\max_i|x_i|$; 0.
#
# A map that does not ignore $a$ and $c$ has a gap of the size of its output.
# </details>
#
# The contract:
#
# - **Signature** `invariance_gap(norm, x, a, c)`: the gap you derived, of the map `norm` at `x`.
# - **Shapes.** `norm` is any callable that maps an array `(..., d)` to one of the same shape; `x` is
#   `(..., d)`, one token `(d,)` included; `a` and `c` are floats.
# - **Dtype.** One Python `float` (`float(...)` of a numpy scalar), not an array.
# - **Errors.** None of its own. `x` is not modified: `x *= a` would change the caller's array, and
#   `norm(x)` would then see the moved token.
#
# What the checks ask: your gap within $10^{-9}$ times the largest entry of the norm's output (or within
# $10^{-9}$, if that entry is below 1) of the same gap computed in torch. They hand your function
# PyTorch's LayerNorm and RMSNorm and a probe that returns its input unchanged, with single tokens and
# batches, negative and tiny scales $a$, a large $\epsilon$, and RMSNorm with a shift, where the gap is large.
#
# **Stuck?** `hint("invariance_gap")` climbs the same ladder as Exercise 1: step 2 after a run of the
# checks below, step 3 after a failed run since step 2.

# %% nbgrader={"grade": false, "grade_id": "invariance_gap", "locked": false, "schema_version": 3, "solution": true, "task": false}
def invariance_gap(norm, x, a, c):
    """How far norm's output moves when its input x is scaled by a and shifted by c (c added to every entry).

    norm: callable, (..., d) -> (..., d). x: (..., d) float64, not modified. a, c: floats.
    Returns the invariance gap over every entry of every token, a Python float.
    """
    ### BEGIN SOLUTION
    return float(np.max(np.abs(norm(a * x + c) - norm(x))))
    ### END SOLUTION


# %% nbgrader={"grade": false, "grade_id": "signature_invariance_gap", "locked": true, "schema_version": 3, "solution": false, "task": false}
# Locked: tells you if the signature above no longer matches what the tests call.
check_signature(invariance_gap, "invariance_gap", "(norm, x, a, c)")

# %% nbgrader={"grade": true, "grade_id": "test_invariance_gap", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
"""Checks invariance_gap against torch on two probes, LayerNorm (a=3, c=4) and RMSNorm (c=0, then c=4)."""
check_invariance_gap(invariance_gap)
### BEGIN HIDDEN TESTS
check_invariance_gap(invariance_gap, "layer_norm", a=-2.0, c=0.5, shape=(2, 4, 8), seed=1)  # sign flip
check_invariance_gap(invariance_gap, "layer_norm", a=1e-3, c=0.0, shape=(5, 16), seed=2)  # eps/a^2 is large
check_invariance_gap(invariance_gap, "rms_norm", a=0.25, c=-3.0, shape=(7,), seed=3, offset=10.0)
check_invariance_gap(invariance_gap, "layer_norm", a=10.0, c=100.0, shape=(4, 32), seed=4, eps=1.0)
check_invariance_gap(invariance_gap, "rms_norm", a=50.0, c=0.0, shape=(3, 2, 64), seed=5)
check_invariance_gap(invariance_gap, "identity", a=-1.0, c=2.0, shape=(1, 5), seed=6)
### END HIDDEN TESTS

# %% [markdown]
# Now test the three readings on one token of dimension 8. `lambda z: ln(z, eps=0.0)` is LayerNorm
# without $\epsilon$: any callable will do for `norm`.
#
# **Predict first.** For $a=3$ the gap of LayerNorm is tiny. What does it look like for $a=-2$,
# $c=1$? Pick one of the options below.

# %%
options_negative_scale = ["about 1e-6, the eps effect, as for a > 0",
                          "exactly 0: a norm ignores the sign",
                          "about twice the largest |x_hat_i|",
                          "about 2, the size of a"]
guess_negative_scale = ...  # your guess: copy one of the four strings

# %%
x = rng.standard_normal(8)
ln_exact = lambda z: ln(z, eps=0.0)
for a, c in [(3.0, 4.0), (1000.0, -7.0), (0.01, 50.0), (-2.0, 1.0)]:
    print(f"a = {a:g}, c = {c:g}:  gap of LN = {invariance_gap(ln, x, a, c):.1e} with eps = 1e-5, "
          f"{invariance_gap(ln_exact, x, a, c):.1e} with eps = 0")
print(f"the sign flip: max|LN(-2 x + 1) + LN(x)| = {np.max(np.abs(ln(-2 * x + 1) + ln(x))):.1e}")
print(f"(x has spread sigma = {x.std():.2f}; at a = 0.01 the effective eps/a^2 = {1e-5 / 0.01**2:g} is not small)")

# %%
gap_negative = np.max(np.abs(ln(-2.0 * x + 1.0) - ln(x)))  # measured with ln itself, not your function
print(f"gap of LN at a = -2, c = 1: {gap_negative:.4f};  2 * max|x_hat_i| = {2 * np.max(np.abs(ln(x))):.4f}")
choose(guess_negative_scale, options_negative_scale,
       correct=options_negative_scale[2 if np.isclose(gap_negative, 2 * np.max(np.abs(ln(x)))) else 0],
       name="the gap for a < 0")

# %% [markdown]
# <details><summary>Answer</summary>
#
# About twice the largest $|\hat x_i|$. A negative scale sends $\hat{\mathbf x}$ to the antipodal point
# $-\hat{\mathbf x}$, so the difference is $-2\hat{\mathbf x}$ and its largest absolute entry is
# $2\max_i|\hat x_i|$: of the size of the output itself, not of $\epsilon$. The size of $a$ plays no part,
# only its sign. The invariance holds for $a>0$ only.
# </details>

# %% [markdown]
# **RMSNorm** (Zhang & Sennrich, 2019) skips the centring and divides by the root mean square,
# $\operatorname{RMSNorm}(\mathbf x)=\mathbf x/\sqrt{\operatorname{mean}(\mathbf x^2)+\epsilon}$ (times a gain,
# and no shift). Its squared length is $d\cdot\operatorname{mean}(\mathbf x^2)/(\operatorname{mean}(\mathbf x^2)+\epsilon)\approx d$:
# **the same sphere, without the hyperplane.** Since nothing removes the direction $\mathbf 1$,
# RMSNorm keeps the invariance to $a>0$ but not to $c$. And because
# $\operatorname{mean}(\mathbf x^2)=\sigma^2+\mu^2$ (section 2), RMSNorm and LayerNorm agree exactly
# on tokens whose mean is zero.

# %%
print(f"RMSNorm, scale a = 3: gap = {invariance_gap(rms, x, 3.0, 0.0):.1e}")
print(f"RMSNorm, shift c = 4: gap = {invariance_gap(rms, x, 1.0, 4.0):.2f}")
r = rms(x)
print(f"RMS(x): sum = {r.sum():+.2f} (not 0),  |RMS(x)|^2 = {r @ r:.5f} (d = {x.size})")
print(f"for a centred token: max|RMS(x - mean) - LN(x)| = {np.max(np.abs(rms(x - x.mean()) - ln(x))):.1e}")

# %% [markdown]
# Losing the shift invariance costs little: in the residual stream, $\mathbf 1$ is one direction
# among $d$ with no special meaning. In exchange RMSNorm needs one reduction over the features
# instead of two, and no subtraction; Zhang & Sennrich (2019) report that it matched LayerNorm's
# quality while cutting running time by 7% to 64% depending on the model. [Notebook 04](04_rmsnorm.ipynb) builds it.

# %% [markdown]
# A last measurement, at scale: the gap of LayerNorm and RMSNorm on 256 random tokens of
# dimension 64 (spread about 1), for a few scales and shifts.

# %%
batch = rng.standard_normal((256, 64))
print(f"{'a':>7} {'c':>6} | {'LayerNorm gap':>14} {'RMSNorm gap':>12}")
for a, c in [(1.0, 5.0), (3.0, 0.0), (3.0, 5.0), (100.0, -20.0), (0.01, 0.0), (-1.0, 0.0)]:
    print(f"{a:7g} {c:6g} | {invariance_gap(ln, batch, a, c):14.1e} {invariance_gap(rms, batch, a, c):12.1e}")

# %% [markdown]
# LayerNorm's gap sits at rounding level or at the $\epsilon$ effect, except for $a<0$ (the sign
# flip, a gap of twice the largest $|\hat x_i|$) and a tiny $a$ (where $\epsilon/a^2$ is no longer
# small). RMSNorm ignores $a>0$ but not $c$. The two sweeps below show the same thing as curves.

# %%
shifts = np.linspace(-20.0, 20.0, 21 if QUICK else 81)
scales = np.logspace(-4, 2, 16 if QUICK else 61)
floor = 1e-17  # gaps that are exactly 0 are drawn here, so the log axis can show them
fig, (ax_c, ax_a) = plt.subplots(1, 2, figsize=(11.0, 3.9))
for f, name, style in [(ln, "LayerNorm", dict(color="C0", linewidth=2.5)),
                       (rms, "RMSNorm", dict(color="C3", linestyle="--"))]:
    ax_c.semilogy(shifts, [max(invariance_gap(f, batch, 1.0, c), floor) for c in shifts], label=name, **style)
    ax_a.loglog(scales, [max(invariance_gap(f, batch, a, 0.0), floor) for a in scales], label=name, **style)
ax_c.set_xlabel("shift c (units of x), scale a = 1")
ax_c.set_ylabel("invariance gap (units of the output)")
ax_c.set_title("A shift never moves LayerNorm; it moves RMSNorm")
ax_a.axvline(np.sqrt(1e-5) / batch.std(), color="0.5", linestyle=":", label=r"$a\sigma=\sqrt{\epsilon}$")
ax_a.set_xlabel("scale a (log scale), shift c = 0")
ax_a.set_ylabel("invariance gap (units of the output)")
ax_a.set_title(r"Both ignore $a>0$ up to $\epsilon$, and fail as $a\sigma$ nears $\sqrt{\epsilon}$")
for ax in (ax_c, ax_a):
    ax.legend(fontsize=8.5)
fig.set_layout_engine("tight")
plt.show()

# %% [markdown]
# The widget's story as a still figure, for where widgets cannot render (a static notebook viewer,
# a PDF): the top row is $\mathbf x$, the bottom row $3\mathbf x+4\cdot\mathbf 1$.

# %%
fallback_figure = static_geometry_figure(a=3.0, c=4.0)
display(fallback_figure)

# %% [markdown]
# ## 7. Optional: scale invariance and the growth of weights
#
# > **Optional section.** It applies the scale invariance to training (a gradient, a small regression
# > and four training runs) and is denser than the rest. No exercise and nothing later in the course
# > depends on it: skip to [section 8, In PyTorch](#8.-In-PyTorch) if you are short of time, and come back
# > to it after [notebook 03](03_backward.ipynb), whose backward formula it uses.
#
# Put a linear map in front of the norm: $\operatorname{LN}(\mathbf x\mathbf W)$. Multiplying
# $\mathbf W$ by any $a>0$ multiplies $\mathbf x\mathbf W$ by $a$, which LayerNorm ignores. So the
# loss $\mathcal L(\mathbf W)$ satisfies $\mathcal L(a\mathbf W)=\mathcal L(\mathbf W)$, and three
# consequences follow (treating $\mathbf W$ as one long vector, with $\langle\cdot,\cdot\rangle$ the sum of
# elementwise products):
#
# 1. **The gradient is orthogonal to the weights.** Differentiate $\mathcal L(a\mathbf W)$ with
#    respect to $a$ at $a=1$: $\langle\mathbf G,\mathbf W\rangle=0$, with $\mathbf G=\nabla\mathcal L(\mathbf W)$.
# 2. **Plain gradient steps only grow $\lVert\mathbf W\rVert$.** By Pythagoras,
#    $\lVert\mathbf W-\eta\mathbf G\rVert^2=\lVert\mathbf W\rVert^2+\eta^2\lVert\mathbf G\rVert^2$.
# 3. **The gradient shrinks like $1/\lVert\mathbf W\rVert$.** Differentiating $\mathcal L(a\mathbf W)=\mathcal L(\mathbf W)$
#    with respect to $\mathbf W$ gives $\nabla\mathcal L(a\mathbf W)=\nabla\mathcal L(\mathbf W)/a$. A step
#    turns the *direction* $\mathbf W/\lVert\mathbf W\rVert$ by about $\eta\lVert\mathbf G\rVert/\lVert\mathbf W\rVert$,
#    so the effective learning rate is $\eta/\lVert\mathbf W\rVert^2$.
#
# Together: weight norms grow, and the effective learning rate decays on its own, unless weight
# decay pulls the norm back (van Laarhoven, 2017). In a Transformer this holds exactly for
# matrices followed by a norm with no residual addition in between, such as the query and key
# projections under QK-norm, and only approximately elsewhere.
#
# A small regression checks all three. The model is $\operatorname{LN}(\mathbf x\mathbf W)$ with
# $\mathbf W$ of shape $16\times16$, the loss is half the mean squared error, and the gradient uses
# the backward formula of [notebook 03](03_backward.ipynb) (confirmed here by a finite difference).

# %%
def loss_and_grad(W, X, Y, eps=1e-5):
    """Loss 0.5 * mean over rows of |LN(X W) - Y|^2 and its gradient with respect to W: (d_in, d)."""
    H = X @ W
    s = np.sqrt(H.var(axis=-1, keepdims=True) + eps)
    H_hat = (H - H.mean(axis=-1, keepdims=True)) / s
    g = (H_hat - Y) / len(X)  # d loss / d H_hat
    dH = (g - g.mean(axis=-1, keepdims=True) - np.mean(g * H_hat, axis=-1, keepdims=True) * H_hat) / s
    return 0.5 * np.sum((H_hat - Y) ** 2) / len(X), X.T @ dH


n, d = 512, 16
X = rng.standard_normal((n, d))
Y = ln(X @ (rng.standard_normal((d, d)) / np.sqrt(d))) + 0.5 * rng.standard_normal((n, d))  # noisy targets
W0 = rng.standard_normal((d, d)) / np.sqrt(d)

loss, G = loss_and_grad(W0, X, Y)
V, h = rng.standard_normal((d, d)), 1e-6
numeric = (loss_and_grad(W0 + h * V, X, Y)[0] - loss_and_grad(W0 - h * V, X, Y)[0]) / (2 * h)
print(f"gradient check: <G, V> = {np.sum(G * V):.8f}, finite difference = {numeric:.8f}")
print(f"L(3 W) - L(W)             = {loss_and_grad(3 * W0, X, Y)[0] - loss:+.1e}")
print(f"<G, W> / (|G| |W|)        = {np.sum(G * W0) / (np.linalg.norm(G) * np.linalg.norm(W0)):+.1e}")
print(f"|grad L(2 W)| / |grad L(W)| = {np.linalg.norm(loss_and_grad(2 * W0, X, Y)[1]) / np.linalg.norm(G):.6f}")

# %% [markdown]
# Now train with plain minibatch gradient descent (batches of 16, the same batches in every run)
# from the same direction $\mathbf W_0$ at two sizes, $\lVert\mathbf W\rVert$ and $4\lVert\mathbf W\rVert$.
# All runs start from the *same function*. If the effective learning rate is $\eta/\lVert\mathbf W\rVert^2$,
# the larger start should learn 16 times more slowly, and giving it $16\eta$ should make it retrace
# the small start (up to $\epsilon$). A last run adds weight decay to the large start.
#
# **Predict first.** Without weight decay, which start's $\lVert\mathbf W\rVert$ grows faster, the small one or
# the large one? Write your answer down, then run the cell and read the curves.

# %%
def train(scale, lr, weight_decay=0.0, steps=1000, batch_size=16):
    """Minibatch gradient descent from scale * W0.

    Returns the recorded steps (spaced evenly on a log axis), the loss on all rows and |W| at
    those steps, and the largest relative error of |W_next|^2 = |W|^2 + lr^2 |G|^2.
    """
    batches = np.random.default_rng(1)  # the same batches for every run
    recorded = {0, steps} | {int(t) for t in np.geomspace(1, steps, 60)}
    W, record, pythagoras = scale * W0, [], 0.0
    for t in range(steps + 1):
        if t in recorded:
            record.append((t, loss_and_grad(W, X, Y)[0], np.linalg.norm(W)))
        if t == steps:
            break
        rows = batches.integers(0, n, batch_size)
        G = loss_and_grad(W, X[rows], Y[rows])[1]
        W_next = W - lr * (G + weight_decay * W)
        if weight_decay == 0.0:  # |W_next|^2 = |W|^2 + lr^2 |G|^2, up to eps
            growth = np.sum(W_next**2) - np.sum(W**2)
            pythagoras = max(pythagoras, abs(growth - lr**2 * np.sum(G**2)) / (lr**2 * np.sum(G**2)))
        W = W_next
    t, losses, norms = map(np.array, zip(*record))
    return t, losses, norms, pythagoras


steps = 200 if QUICK else 1000
lr = 0.5
runs = {
    "|W0|, lr": train(1.0, lr, steps=steps),
    "4|W0|, lr": train(4.0, lr, steps=steps),
    "4|W0|, 16 lr": train(4.0, 16 * lr, steps=steps),
    "4|W0|, lr, weight decay 0.01": train(4.0, lr, weight_decay=0.01, steps=steps),
}
for name, (t, losses, norms, pythagoras) in runs.items():
    extra = f"  max relative error of the Pythagoras step: {pythagoras:.1e}" if "decay" not in name else ""
    print(f"{name:30s} loss {losses[0]:.3f} -> {losses[-1]:.3f}   |W| {norms[0]:5.2f} -> {norms[-1]:5.2f}{extra}")
same = np.max(np.abs(runs["4|W0|, 16 lr"][1] - runs["|W0|, lr"][1]))
print(f"largest loss difference between '4|W0|, 16 lr' and '|W0|, lr': {same:.1e}")

# %%
fig, (ax_l, ax_n) = plt.subplots(1, 2, figsize=(11.0, 3.9))
styles = {"|W0|, lr": ("C0", "-"), "4|W0|, lr": ("C3", "-"), "4|W0|, 16 lr": ("k", ":"),
          "4|W0|, lr, weight decay 0.01": ("C2", "-")}
for name, (t, losses, norms, _) in runs.items():
    colour, style = styles[name]
    ax_l.plot(t, losses, color=colour, linestyle=style, label=name)
    ax_n.plot(t, norms, color=colour, linestyle=style, label=name)
ax_l.set_yscale("log")
ax_l.set_xlabel("gradient step (log scale after 1)")
ax_l.set_ylabel("loss on all 512 rows (log scale)")
ax_l.set_title("Same function, 4x the weights: 16x smaller steps, unless lr is 16x")
ax_n.set_xlabel("gradient step (log scale after 1)")
ax_n.set_ylabel(r"$\|W\|$ (Frobenius norm)")
ax_n.set_title("Without weight decay, |W| only grows")
for ax in (ax_l, ax_n):
    ax.set_xscale("symlog", linthresh=1.0)
    ax.set_xlim(0, steps)
    ax.legend(fontsize=8)
fig.set_layout_engine("tight")
plt.show()

# %% [markdown]
# Read the curves.
#
# - **Without weight decay $\lVert\mathbf W\rVert$ only grows**, and the small start grows fastest
#   (its gradients are the largest), so it slows itself down as it goes.
# - **The large start crawls at first**: the same function, but steps 16 times smaller in angle.
#   With $16\eta$ it retraces the small start (the printed loss difference is the $\epsilon$ effect).
# - The effective learning rate sets the noise level as well as the speed: the large start, with its
#   smaller effective rate, ends at a lower loss than the small one at the end of this run.
# - **Weight decay** does not change what the layer can compute (LayerNorm ignores the scale of
#   $\mathbf W$). It pulls the norm back to a level where the growth from the gradient and the pull
#   from the decay balance, and so holds the effective learning rate up instead of letting it
#   decay (van Laarhoven, 2017).
#
# *End of the optional section.*

# %% [markdown]
# ## 8. In PyTorch
#
# `torch.nn.LayerNorm(d, elementwise_affine=False)` and `torch.nn.functional.layer_norm` compute
# $\hat{\mathbf x}$ exactly as `ln` above (biased variance, $\epsilon$ inside the square root,
# default $\epsilon=10^{-5}$), so every invariance of this notebook holds for them unchanged.
# `torch.nn.RMSNorm` (since PyTorch 2.4) has the sphere without the hyperplane. Its default is
# `eps=None`, not $10^{-5}$: PyTorch then uses `torch.finfo(dtype).eps`, the machine epsilon,
# as [notebook 04](04_rmsnorm.ipynb) describes. The cell below measures the $\epsilon$ your installed
# version really adds, for each input type, from the output on a constant token:
# $\epsilon=x^2/y^2-\operatorname{mean}(\mathbf x^2)$.

# %%
import torch  # already loaded by the check of Exercise 2

print("torch", torch.__version__, "  nn.RMSNorm(4).eps =", torch.nn.RMSNorm(4).eps)
for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
    level = 1e-8 if dtype == torch.float64 else 1e-4  # a token whose mean square is comparable to eps
    token = torch.full((4,), level, dtype=dtype)
    with torch.no_grad():
        out = torch.nn.RMSNorm(4, dtype=dtype)(token).double()
    x0 = token.double()
    eps_used = float(x0[0] ** 2 / out[0] ** 2 - (x0 ** 2).mean())
    print(f"{str(dtype):15s} eps used {eps_used:.3g}   torch.finfo(dtype).eps = {torch.finfo(dtype).eps:.3g}   "
          f"torch.finfo(float32).eps = {torch.finfo(torch.float32).eps:.3g}")

# %% [markdown]
# For float32 and float64 inputs the $\epsilon$ used is `torch.finfo(dtype).eps`, exactly as stated. For
# float16 and bfloat16 inputs (in the version measured above) PyTorch computes in float32 and adds
# float32's machine epsilon, not the much larger one of the 16-bit type. Either way, pass `eps=`
# explicitly when you need a particular value. The check of Exercise 2 uses
# `torch.nn.functional.layer_norm` and `torch.nn.functional.rms_norm` in float64 as its oracles;
# the rest of this notebook needs no torch.

# %% [markdown]
# ## 9. Interview questions
#
# Try each one aloud before you reveal the answer.
#
# <details><summary><b>Describe LayerNorm geometrically.</b></summary>
#
# Subtracting the mean is the orthogonal projection $\mathbf I-\frac1d\mathbf 1\mathbf 1^\top$ onto the
# hyperplane of vectors whose entries sum to zero. Dividing by $s=\sqrt{\sigma^2+\epsilon}$ then
# puts the result on the sphere of radius $\sqrt d$ inside that hyperplane (exactly when
# $\epsilon=0$). The gain stretches the sphere into an ellipsoid, the shift moves it. The token
# loses its mean and its scale and keeps its direction.
# </details>
#
# <details><summary><b>Which transformations of its input does LayerNorm ignore, and is it exact?</b></summary>
#
# $\operatorname{LN}(a\mathbf x+c\mathbf 1)=\operatorname{LN}(\mathbf x)$ for all $a>0$ and all $c$. The shift
# is removed exactly; the scale only up to $\epsilon$, because
# $\operatorname{LN}_\epsilon(a\mathbf x+c\mathbf 1)=\operatorname{sign}(a)\operatorname{LN}_{\epsilon/a^2}(\mathbf x)$.
# A negative $a$ flips the sign of $\hat{\mathbf x}$.
# </details>
#
# <details><summary><b>What does ε do to a token whose features are almost equal?</b></summary>
#
# $\lVert\hat{\mathbf x}\rVert^2=d\sigma^2/(\sigma^2+\epsilon)$. When $\sigma\ll\sqrt\epsilon$, $\hat{\mathbf x}\approx(\mathbf x-\mu\mathbf 1)/\sqrt\epsilon$:
# the token is not blown up to unit variance (which would amplify noise) but shrunk towards the
# origin, and a constant token maps to $\mathbf 0$ instead of $0/0$. The scale invariance fails there.
# </details>
#
# <details><summary><b>How many numbers per token survive LayerNorm (before gain and shift)?</b></summary>
#
# $d-2$: the hyperplane removes one (the mean), the sphere another (the scale). The same count
# appears in the backward pass: the Jacobian is $1/s$ times a projection of rank $d-2$.
# </details>
#
# <details><summary><b>RMSNorm versus LayerNorm, geometrically. When do they agree?</b></summary>
#
# RMSNorm keeps the sphere of radius $\sqrt d$ but not the hyperplane: it does not remove $\mathbf 1$,
# so it ignores $a>0$ but not a shift $c$. Since $\operatorname{mean}(\mathbf x^2)=\sigma^2+\mu^2$, the
# two agree on tokens with zero mean. Losing the shift invariance costs little, because $\mathbf 1$ is
# not a special direction of the residual stream, and RMSNorm saves a reduction.
# </details>
#
# <details><summary><b>Where do LayerNorm's outputs live once the gain γ and the shift β are applied?</b></summary>
#
# On an ellipsoid: $\mathbf y=\boldsymbol\gamma\odot\hat{\mathbf x}+\boldsymbol\beta$ ($\odot$: the elementwise product) with $\hat{\mathbf x}$ on the
# $(d-2)$-dimensional sphere. If every $\gamma_j\neq0$, $\mathbf y$ satisfies $\sum_j(y_j-\beta_j)/\gamma_j=0$,
# an affine hyperplane through $\boldsymbol\beta$, and $\sum_j((y_j-\beta_j)/\gamma_j)^2=d$ (up to $\epsilon$).
# </details>
#
# <details><summary><b>A linear layer feeds straight into a LayerNorm and is trained with SGD, without weight decay. What happens to its weights, and why would weight decay help?</b></summary>
#
# The loss ignores the scale of $\mathbf W$, so the gradient is orthogonal to $\mathbf W$ and each step
# grows $\lVert\mathbf W\rVert^2$ by $\eta^2\lVert\mathbf G\rVert^2$. The gradient scales like $1/\lVert\mathbf W\rVert$,
# so the effective learning rate is $\eta/\lVert\mathbf W\rVert^2$ and decays as the norm grows. Weight decay
# does not restrict the functions the layer can compute; it keeps the norm, and so the effective
# learning rate, from drifting (van Laarhoven, 2017).
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
# - Centring is the orthogonal projection $\mathbf P=\mathbf I-\frac1d\mathbf 1\mathbf 1^\top$: symmetric,
#   idempotent, $\mathbf P\mathbf 1=\mathbf 0$, rank $d-1$; the $\frac1d$ is $1/(\mathbf 1^\top\mathbf 1)$. Removing several
#   directions at once needs an orthonormal basis of their span (not one $\mathbf v\mathbf v^\top/\mathbf v^\top\mathbf v$ per column),
#   and the projection depends on that span only.
# - $\hat{\mathbf x}$ lies in the hyperplane $\sum_j\hat x_j=0$ on the sphere $\lVert\hat{\mathbf x}\rVert^2=d\sigma^2/(\sigma^2+\epsilon)\approx d$;
#   $d-2$ numbers per token survive.
# - $\operatorname{LN}(a\mathbf x+c\mathbf 1)=\operatorname{LN}(\mathbf x)$ for $a>0$ (up to $\epsilon$: scaling by $a$ is
#   $\epsilon\to\epsilon/a^2$); $a<0$ flips the sign.
# - $\epsilon$ sets a noise floor: tokens with $\sigma\ll\sqrt\epsilon$ are shrunk towards $\mathbf 0$, not normalised.
# - RMSNorm is the sphere without the hyperplane: invariant to $a>0$, not to $c$; equal to LayerNorm on zero-mean tokens.
# - A weight matrix feeding a norm gets gradients orthogonal to itself; its norm grows and its
#   effective learning rate $\eta/\lVert\mathbf W\rVert^2$ decays, unless weight decay holds it back.
#
# *References:* Ba, Kiros & Hinton (2016), *Layer Normalization*. van Laarhoven (2017), *L2
# Regularization versus Batch and Weight Normalization*. Zhang & Sennrich (2019), *Root Mean
# Square Layer Normalization*.
#
# Next: [03 · LayerNorm's backward pass, derived](03_backward.ipynb)
