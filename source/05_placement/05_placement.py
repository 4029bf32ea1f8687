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
# # 05 · Where the norm goes: pre-LN, post-LN and the output norm
#
# A Transformer block is a chain of residual sublayers, each of which reads the residual stream
# $\mathbf x$, computes something with a function $F$ (attention or an MLP), and adds it back.
# Every such sublayer also has a norm, and there are only a few places to put it. The choice
# looks like a matter of taste. It is not: it decides how gradients are spread over the layers
# at initialisation, whether the model needs a learning-rate warm-up, how much the deep layers
# can still change the representation, and whether the model trains at all at large depth.
#
# By the end of this notebook you will be able to
#
# 1. write one function that builds a residual sublayer in each of the three placements,
# 2. predict, and measure, how fast the residual stream grows with depth in each placement,
# 3. reproduce the gradient-scale argument of Xiong et al. (2020) and say which layers of a
#    post-LN model get the large gradients, and why,
# 4. explain what pre-LN gives up, and why it needs a final norm,
# 5. name the placements of real models and the parallel block, write QK-norm attention logits and
#    derive the bound QK-norm puts on them, and
# 6. check your function against PyTorch's own `TransformerEncoderLayer`.
#
# **Time.** About 90 minutes, and about 5 more for the optional part. This is an estimate, not a timing of
# learners: `tools/read-through-estimate` counts about 5,800 words of prose (read at 150 words a minute), 28
# code cells to run (half a minute each), 2 graded exercises (10 minutes each), 0 derivation steps (5 each), 5
# predictions (2 each) and 1 widgets (5 each), and adds the 54 s the solved notebook took to run on the course's
# test machine.
#
# It builds on LayerNorm's backward pass ([notebook 03](03_backward.ipynb)): the gradient through a norm is
# divided by the scale of its input.
#
# **Predict, then run.** A few cells ask you for a guess first: replace the `...` in the
# `guess_...` cell, run it, then run the cell after it, which measures the answer and tells you
# how close you were. Nothing about a guess is graded.
#
# Sections marked *optional* go deeper into a measurement; the rest of the notebook does not
# depend on them.
#
# **How the exercises work.** There are two (7 points): `residual_sublayer` in Section 1 and
# `qk_norm_logits` in Section 6. Replace `raise NotImplementedError()` with your code, run the
# cell, then run the checks below it. Until you implement the function, its checks fail with
# `NotImplementedError`; that is expected. A failing check tells you what it expected, what it
# got, and the most likely cause.

# %%
import matplotlib.pyplot as plt
import numpy as np

from grader.checks.placement import (
    check_qk_norm_logits,
    check_residual_sublayer,
    check_residual_sublayer_rejects,
    describe_composition,
)
from grader.compare import check_signature
from grader.learner import hint, progress
from grader.predict import choose, compare
from normlab.run_mode import quick_run

np.set_printoptions(precision=3, suppress=True)
QUICK = quick_run()  # True under nbgrader: demo cells do the least work and figures are not drawn

# %% [markdown]
# ## 1. Three ways to put a norm next to a residual
#
# Write $\operatorname{N}$ for the norm (LayerNorm or RMSNorm) and $F$ for the sublayer. The
# original Transformer (Vaswani et al., 2017) adds the sublayer's write to the stream first and
# normalises the sum. This is **post-LN**. GPT-2 (Radford et al., 2019) normalises only what the
# sublayer *reads*, and adds one last norm after the final block, just before the unembedding
# $\mathbf W_U$: $\text{logits}=\operatorname{N}_{\text{final}}\big(\mathbf x^{(S)}\big)\,\mathbf W_U$, where
# $\mathbf x^{(S)}$ is the stream after the last of the $S$ sublayers. This is **pre-LN**. OLMo 2
# (OLMo Team, 2024) normalises what the sublayer *writes*. We will call this the **output norm**.
#
# **Write each placement as one update** $\mathbf x\leftarrow\dots$ of the stream, from the sentence that
# describes it, before you read on. Where does $\operatorname{N}$ sit relative to $F$ and to the $+$?
#
# The useful way to tell them apart is the **identity path**: the route from a block's input to
# its output that skips $F$. In pre-LN and in the output norm, that route is a plain `+`, so
# the stream that leaves the last block is the embedding plus a sum of writes, and a gradient
# reaches every layer untouched along it. In post-LN the route passes through a norm at every
# sublayer, so both the stream and its gradient are rescaled $S$ times on the way.
#
# ### Exercise · `residual_sublayer`
#
# Write `residual_sublayer(x, F, norm, mode)` for `x` of shape `(..., d)`. `F` and `norm` are
# functions that map a `(..., d)` array to a new array of the same shape. For `mode` equal to
# `"pre"`, `"post"` or `"output"`, return the stream after one sublayer in that placement, an array
# shaped like `x`; for any other `mode` raise a `ValueError` whose message names the three valid
# modes. The checks compare your result with the composition they expect, built from the same `F`
# and `norm`, and allow a relative error of $10^{-9}$ (measured against 1 or the largest entry,
# whichever is larger).
#
# Your three updates from above are the answer. Test them against two questions before you code:
#
# 1. If `norm` is the identity, which two modes must return the same thing, and what is it?
# 2. If `F` returns zeros, which modes return `x` unchanged, and what does the third return?
#
# <details><summary>The three compositions (open after you have written yours)</summary>
#
# | `mode` | result |
# |---|---|
# | `"pre"` | `x + F(norm(x))` |
# | `"post"` | `norm(x + F(x))` |
# | `"output"` | `x + norm(F(x))` |
#
# With `norm` the identity all three give `x + F(x)`; with `F` returning zeros, pre and output give
# `x` back (if `norm(0)` is 0) and post gives `norm(x)`.
# </details>
#
# Three rules that real code follows and the checks enforce: call `F` exactly once (it is the
# expensive part, and with dropout two calls would not even agree); do not modify `x` in place
# (the caller still needs the stream); and compare `mode` with the three strings exactly, so
# that `"Pre"` or `None` is reported rather than guessed at.
#
# The checks pass you recording versions of `F` and `norm` that log every call, then tell you
# which composition your code actually built.
#
# What the grader runs besides the checks you see: the same three modes on inputs of shapes
# 1×3, 16×32, 2×2×2×4, 3×1×7, 5 (one axis), 2×3×4×9, 64 (one axis) and 4×2,
# with three kinds of test functions (an MLP with a length-2 norm, an affine map with a min-max
# norm, and an elementwise sine with a mean-scaling norm); and a `ValueError` naming the three
# modes for `"PRE"`, `" pre"`, `"post "`, `"pre-LN"`, `"postln"`, `"outputs"`, `"norm"`,
# `"sandwich"`, `"parallel"`, `0`, `1` and `b"pre"`.
#
# In this notebook's exercises, compute the result yourself: a graded function that calls PyTorch's
# `layer_norm`, `rms_norm`, `batch_norm`, `group_norm`, `instance_norm` or `var_mean` (or the matching
# `torch.nn` module), or a helper from the course's `grader` or `normlab` packages, skips the exercise.
# The class grader cannot prove what your code called (it runs in your own process, which your code
# controls), so no points depend on it: it lists what it saw for your instructor, who decides.
# The `F` and `norm` you are given are yours to call, and comparing with the library in other cells
# is fine.
#
# **Stuck?** Run `hint("residual_sublayer")` in a new cell. Its steps open as you try: step 1 (the
# idea) at once; step 2 (what your checks said) once you have run the checks below on your own
# code; step 3 (the shape of the code) after a check fails again since you saw step 2. Asking again
# repeats the highest open step and says what opens the next. `progress()` shows where you stand.

# %% nbgrader={"grade": false, "grade_id": "residual_sublayer", "locked": false, "schema_version": 3, "solution": true, "task": false}
def residual_sublayer(x, F, norm, mode):
    """One residual sublayer with its norm in one of three places.

    x: (..., d). F, norm: functions (..., d) -> (..., d). mode: "pre", "post" or "output".
    Returns (..., d): x + F(norm(x)), norm(x + F(x)) or x + norm(F(x)).
    Raises ValueError for any other mode.
    """
    ### BEGIN SOLUTION
    if mode == "pre":
        return x + F(norm(x))
    if mode == "post":
        return norm(x + F(x))
    if mode == "output":
        return x + norm(F(x))
    raise ValueError(f"mode must be 'pre', 'post' or 'output', got {mode!r}")
    ### END SOLUTION


# %% nbgrader={"grade": false, "grade_id": "signature_residual_sublayer", "locked": true, "schema_version": 3, "solution": false, "task": false}
# Locked: tells you if the signature above no longer matches what the tests call.
check_signature(residual_sublayer, "residual_sublayer", "(x, F, norm, mode)")

# %% nbgrader={"grade": true, "grade_id": "test_residual_sublayer", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
"""Checks the composition built for each mode, on inputs of shape (8,), (3, 5) and (2, 4, 6)."""
check_residual_sublayer(residual_sublayer)
### BEGIN HIDDEN TESTS
for shapes_hidden, pair_hidden, seed_hidden in [
    (((1, 3), (16, 32)), "affine", 11),
    (((2, 2, 2, 4), (3, 1, 7)), "elementwise", 12),
    (((5,), (2, 3, 4, 9)), "mlp", 13),
    (((64,), (4, 2)), "affine", 14),
]:
    check_residual_sublayer(residual_sublayer, shapes=shapes_hidden, pair=pair_hidden, seed=seed_hidden)
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_residual_sublayer_rejects", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
"""Checks that mode='Pre', '' and None raise a ValueError that names the valid modes."""
check_residual_sublayer_rejects(residual_sublayer)
### BEGIN HIDDEN TESTS
check_residual_sublayer_rejects(residual_sublayer, invalid_modes=("PRE", " pre", "post ", "pre-LN", "postln",
                                                                  "outputs", "norm", "sandwich", "parallel",
                                                                  0, 1, b"pre"), d=7, seed=3)
### END HIDDEN TESTS

# %% [markdown]
# The checks read your composition off the calls your function made. You can ask for the same
# reading yourself: `describe_composition` runs your function once with recording `F` and
# `norm` and names what it returned.

# %%
for mode in ["pre", "post", "output"]:
    print(f"{mode:>6}:  {describe_composition(residual_sublayer, mode)}")

# %% [markdown]
# ## 2. Your function in a deep stack
#
# Now let us stack 64 sublayers built by your function and follow the size of the residual
# stream. Each $F$ is a small MLP with random weights, $F(\mathbf h)=\operatorname{relu}(\mathbf h\mathbf W_1)\mathbf W_2$
# with $\mathbf W_1\in\mathbb R^{d\times 4d}$ and $\mathbf W_2\in\mathbb R^{4d\times d}$, both drawn with
# variance $1/\text{fan-in}$, the usual initialisation. The norm is a LayerNorm without gain or
# shift. Watch the root mean square (RMS) of the stream, $\lVert\mathbf x_\ell\rVert/\sqrt d$, as
# $\ell$ grows.
#
# **Predict first.** The stream starts with RMS 1 (standard normal tokens). In pre-LN every
# sublayer adds a write computed from a normalised input. What is the stream's RMS after the
# 64th sublayer? (Think about how large one write is, and whether random writes add up like
# numbers or like the sides of a right triangle.)

# %%
guess_pre_rms_64 = ...  # your guess: RMS of the pre-LN stream after 64 sublayers

# %%
def layer_norm(h, eps=1e-5):
    """LayerNorm over the last axis, without gain or shift (the subject of notebook 01)."""
    centred = h - h.mean(axis=-1, keepdims=True)
    return centred / np.sqrt((centred**2).mean(axis=-1, keepdims=True) + eps)


def random_mlp(d, rng):
    """A fresh MLP sublayer h -> relu(h W1) W2 with variance-1/fan-in weights."""
    W1 = rng.standard_normal((d, 4 * d)) / np.sqrt(d)
    W2 = rng.standard_normal((4 * d, d)) / np.sqrt(4 * d)
    return lambda h: np.maximum(h @ W1, 0.0) @ W2


def stream_rms(mode, n_layers=64, d=64, n_tokens=64, seed=0):
    """RMS of the stream after each of n_layers sublayers built by residual_sublayer: (n_layers + 1,)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n_tokens, d))
    rms = [np.sqrt(np.mean(x**2))]
    for _ in range(n_layers):
        x = residual_sublayer(x, random_mlp(d, rng), layer_norm, mode)
        rms.append(np.sqrt(np.mean(x**2)))
    return np.array(rms)


n_layers = 16 if QUICK else 64
rms_by_mode = {mode: stream_rms(mode, n_layers) for mode in ["pre", "post", "output"]}
for mode, rms in rms_by_mode.items():
    picks = [0, 1, 4, 16, 64]
    print(f"{mode:>6}: stream RMS at layers {[p for p in picks if p <= n_layers]}: "
          f"{np.round(rms[[p for p in picks if p <= n_layers]], 2)}")

# %%
pre_rms_last = rms_by_mode["pre"][-1]
print(f"pre-LN stream RMS after {n_layers} sublayers: {pre_rms_last:.2f}"
      + ("   (quick run under grading: fewer layers than 64)" if QUICK else ""))
compare(guess_pre_rms_64, pre_rms_last, name="pre-LN stream RMS after 64 sublayers", rel=0.2)

# %% [markdown]
# <details><summary>Answer</summary>
#
# About 6, not 64 and not 1. Each write has squared norm about $d/2$ (the next cells explain the
# $\tfrac12$), and random writes are nearly orthogonal to the stream, so squared norms add:
# $\lVert\mathbf x_{64}\rVert^2\approx d+64\cdot d/2$, an RMS of about $\sqrt{33}\approx5.7$.
# The stream grows like the square root of the depth.
# </details>

# %% [markdown]
# Three different stories. Post-LN renormalises the stream after every sublayer, so its RMS
# stays at 1 (up to $\epsilon$) however deep the model is. Pre-LN lets the stream accumulate:
# every write has about the same size, because every branch reads a normalised input, and
# random writes are nearly orthogonal, so their *squared* norms add:
#
# $$\mathbb E\,\lVert\mathbf x_\ell\rVert^2\;\approx\;\lVert\mathbf x_0\rVert^2+\ell\,c\,d .$$
#
# The stream grows like $\sqrt\ell$. For a ReLU MLP with these weights a normalised input gives a
# write of squared norm about $d/2$, so $c\approx\tfrac12$. The output norm grows too, a little
# faster: each write is the output of a norm, of squared norm exactly $d$, so $c\approx 1$ (the
# points wander a little around the curve, because with one random model per sublayer the writes
# are only roughly orthogonal to the stream).
# Xiong et al. (2020) prove bounds of this linear form for pre-LN, between $(1+\ell/2)\,d$ and
# $(1+3\ell/2)\,d$ in their setting. The plot compares the measured RMS with
# $\sqrt{1+c\,\ell}$.

# %%
ell = np.arange(n_layers + 1)
fig, ax = plt.subplots(figsize=(6.2, 3.8))
for mode, colour, c in [("post", "C3", 0.0), ("pre", "C0", 0.5), ("output", "C2", 1.0)]:
    ax.plot(ell, rms_by_mode[mode], "o", ms=3, color=colour, label=f"{mode}: measured")
    ax.plot(ell, np.sqrt(1 + c * ell), "-", lw=1, color=colour, label=rf"$\sqrt{{1 + {c:g}\,\ell}}$")
ax.set_xlabel("sublayer index ℓ")
ax.set_ylabel("RMS of the stream  ‖x_ℓ‖ / √d")
ax.set_title("Post-LN pins the stream; pre-LN and output-norm\nstreams grow like √ℓ")
ax.legend(fontsize=8, ncol=2)
fig.set_layout_engine("tight")
plt.show()

# %% [markdown]
# Where $c\approx\tfrac12$ comes from, measured. A normalised input $\mathbf h$ has
# $\lVert\mathbf h\rVert\approx\sqrt d$, so each of the $4d$ pre-activations of $\mathbf h\mathbf W_1$ is
# roughly standard normal. ReLU zeroes about half of them and keeps the rest, and a standard
# normal $z$ has $\mathbb E[\operatorname{relu}(z)^2]=\tfrac12$: the hidden vector has squared norm
# about $4d\cdot\tfrac12=2d$, a norm of about $\sqrt{2d}$ (not $\sqrt{4d}$). Then $\mathbf W_2$, of
# variance $1/(4d)$, maps it to a write whose $d$ entries each have variance $2d/(4d)=\tfrac12$.

# %%
rng_check = np.random.default_rng(5)
d_check = 64
W1_check = rng_check.standard_normal((d_check, 4 * d_check)) / np.sqrt(d_check)
W2_check = rng_check.standard_normal((4 * d_check, d_check)) / np.sqrt(4 * d_check)
h_check = layer_norm(rng_check.standard_normal((256, d_check)))
hidden_check = np.maximum(h_check @ W1_check, 0.0)
write_check = hidden_check @ W2_check
print(f"d = {d_check}, 256 tokens: mean |relu(h W1)| = {np.linalg.norm(hidden_check, axis=-1).mean():.2f},  "
      f"sqrt(2d) = {np.sqrt(2 * d_check):.2f},  sqrt(4d) = {np.sqrt(4 * d_check):.2f}")
print(f"mean |write|² / d = {np.mean(np.sum(write_check**2, axis=-1)) / d_check:.3f}  (c ≈ 1/2)")

# %% [markdown]
# ## 3. The gradient-scale argument
#
# Xiong et al. (2020) analysed both placements at initialisation. The argument fits on a
# whiteboard once two facts are on the table.
#
# * **Fact one, from [notebook 03](03_backward.ipynb).** The gradient that flows back through a norm is divided by
#   the scale of the norm's input, $s=\lVert\mathbf x-\mu\mathbf 1\rVert/\sqrt d$. A stream four
#   times larger receives a gradient four times smaller.
# * **Fact two, from the plot above.** In pre-LN the stream's RMS grows like $\sqrt{1+c\ell}$, so
#   its norm $\lVert\mathbf x_\ell\rVert$ grows like $\sqrt{d\,(1+c\ell)}$; in post-LN the RMS stays
#   at 1 and the norm at $\sqrt d$.
#
# **Pre-LN.** The loss sees the stream only through the final norm, whose input has scale about
# $\sqrt{1+cS}\sim\sqrt S$. By fact one, the gradient entering the stream is damped by about
# $1/\sqrt S$. The identity path then carries that damped gradient, unchanged, to every
# sublayer. A sublayer's output matrix $\mathbf W_2$ gets the product of its own activation
# (of order one, because its input was normalised) and that gradient, so **every layer's weight
# gradient is of order $1/\sqrt S$**, and in this simple picture the layers are treated alike.
#
# **Post-LN.** The stream is renormalised after each sublayer, so no norm over a growing stream
# stands between the loss and the last sublayer: its gradient is not damped by the depth. Going down one sublayer, the gradient crosses the
# Jacobian of $\operatorname{N}(\mathbf z)$ at $\mathbf z=\mathbf x+F(\mathbf x)$, a sum of two
# vectors of comparable size, hence larger than $\sqrt d$, and then the branch's Jacobian
# $\mathbf I+\partial F/\partial\mathbf x$. The first divides each token's gradient by a factor
# above one, the second multiplies it by about as much, so the size per token roughly holds
# (the measurement below shows it). What the two do not preserve is the *direction*: each token's
# gradient is projected and masked in its own way (the norm removes that token's own
# $\hat{\mathbf x}$, the ReLU passes that token's own units). A weight gradient is a sum over
# tokens, and after many sublayers the tokens' gradients no longer agree, so the sum shrinks.
# That is the one mechanism behind post-LN's profile: the layers near the output, whose tokens'
# gradients still agree, get the large gradients.
#
# Xiong et al. state the result for the second weight matrix $\mathbf W^{2,L}$ of the last MLP in
# a model with $L$ layers: with high probability at initialisation,
#
# $$\text{post-LN:}\ \ \Big\lVert\frac{\partial\mathcal L}{\partial\mathbf W^{2,L}}\Big\rVert_F\le\mathcal O\big(d\sqrt{\ln d}\big),
#   \qquad
#   \text{pre-LN:}\ \ \Big\lVert\frac{\partial\mathcal L}{\partial\mathbf W^{2,L}}\Big\rVert_F\le\mathcal O\Big(d\sqrt{\tfrac{\ln d}{L}}\Big).$$
#
# The post-LN bound does not involve $L$; the pre-LN bound falls like $1/\sqrt L$. Both are upper
# bounds: they say how fast a gradient can shrink or grow with depth, not the exact factor.
#
# **Why this matters: warm-up.** Large gradients at the top, multiplied by a large learning rate,
# make the first updates of the top layers far too big. A learning-rate warm-up, which starts
# tiny and ramps up over the first steps of training, is what keeps post-LN alive. The argument
# is cleanest for SGD, where a step is proportional to the gradient; with Adam, which rescales
# every coordinate, the unreliable second-moment estimates of the first steps also play a part
# (Liu et al., 2019), but the conclusion stands. Xiong et al. measured it on IWSLT14
# German→English: their post-LN Transformer trained with Adam reached a BLEU of about 34 with
# warm-up and **8.45 without it**, while a pre-LN Transformer trained without any warm-up reached
# comparable BLEU in less training time. Warm-up had been a patch for post-LN's gradient profile.

# %% [markdown]
# ### Measuring it
#
# The experiment below stacks residual MLP sublayers (the same kind as in Section 2) in both
# placements, for depths from 8 to 128, feeds a batch of random tokens, backpropagates a random
# linear loss, and records $\lVert\partial\mathcal L/\partial\mathbf W_2\rVert_F$ for **every**
# layer's output matrix, averaged over four random initialisations. Pre-LN gets its final norm;
# post-LN needs none, since its stream is already normalised. It runs in torch (float32, on the
# CPU); under grading it runs a quick version with smaller, shallower models. Every block is built
# by your `residual_sublayer`, called on torch tensors so that autograd can follow it: written
# with `+` and calls of `F` and `norm`, as the exercise asks, it works unchanged.
#
# **Predict first.** In the post-LN model of depth 128, which layer's output matrix gets the
# larger gradient: the first (next to the input) or the last (next to the loss)?

# %%
guess_post_ln_larger = ...  # your guess: "first" or "last"

# %%
import torch  # the experiments below run in torch; the exercise did not need it
from IPython.display import display

from normlab.placement import (
    format_gradient_table,
    gradient_scale_table,
    plot_gradient_scale,
    plot_qk_logits,
    plot_stream_growth,
    placement_widget,
    qk_logit_bound,
    relative_write_sizes,
    stream_norms,
)

table = gradient_scale_table(residual_sublayer, modes=("post", "pre"), quick=QUICK)
print(format_gradient_table(table))
print(f"({table['seconds']:.1f} s)")

# %%
deepest = table["depths"][-1]
post_deep = table["norms"]["post"][deepest]
larger = "last" if post_deep[-1] > post_deep[0] else "first"
print(f"post-LN, depth {deepest}: first layer {post_deep[0]:.1f}, last layer {post_deep[-1]:.1f} "
      f"(last / first = {post_deep[-1] / post_deep[0]:.1f})" + ("   (quick run: shallower than 128)" if QUICK else ""))
choose(guess_post_ln_larger, ["first", "last"], larger, name="larger gradient under post-LN at depth 128")

# %% [markdown]
# <details><summary>Answer</summary>
#
# The last one, by a wide factor (the cell prints it). Post-LN's stream is renormalised after
# every sublayer, so the gradient that reaches the top layers does not shrink with depth; the
# further down a layer sits, the more sublayers its tokens' gradients have crossed, and the less
# they agree with each other. Xiong et al. (2020) bound the last layer's gradient independently of
# the depth, which is why post-LN needs a warm-up.
# </details>

# %%
fig = plot_gradient_scale(table)
display(fig)

# %% [markdown]
# Each panel is one placement; each line is one model depth; the horizontal axis is the
# layer's position, input on the left. The next cell reads the two statements of Xiong et al.'s
# theorem off the measurement: post-LN's last layer against the depth, and pre-LN's last layer
# against the $1/\sqrt L$ rate.
#
# **Predict first.** Write two guesses before you run it: from the shallowest model to the deepest,
# does post-LN's last-layer gradient fall, stay or rise? And does pre-LN's fall by more or by less
# than the theorem's rate, $1/\sqrt{128/8}=0.25$?

# %%
L_lo, L_hi = table["depths"][0], table["depths"][-1]
post, pre = table["norms"]["post"], table["norms"]["pre"]
rows = [
    ("post-LN, last layer", f"{post[L_lo][-1]:.1f} → {post[L_hi][-1]:.1f}"),
    ("post-LN, first layer", f"{post[L_lo][0]:.1f} → {post[L_hi][0]:.1f}"),
    ("post-LN, last / first at the deepest", f"{post[L_hi][-1] / post[L_hi][0]:.1f}"),
    ("pre-LN, last layer", f"{pre[L_lo][-1]:.1f} → {pre[L_hi][-1]:.1f}"),
    ("pre-LN, last layer, deepest / shallowest", f"{pre[L_hi][-1] / pre[L_lo][-1]:.2f}"),
    ("1/sqrt(depth ratio), the theorem's rate", f"{np.sqrt(L_lo / L_hi):.2f}"),
    ("sqrt((1 + L_lo/2) / (1 + L_hi/2)), stream growth", f"{np.sqrt((1 + L_lo / 2) / (1 + L_hi / 2)):.2f}"),
    ("pre-LN, max / min over layers at the deepest", f"{pre[L_hi].max() / pre[L_hi].min():.1f}"),
]
print(f"depths {L_lo} → {L_hi}" + ("   (quick run under grading)" if QUICK else ""))
for name, here in rows:
    print(f"{name:44s} {here:>16s}")

# %% [markdown]
# **Reading the numbers.** Post-LN's last layer gets a gradient that does not shrink as the model gets
# deeper: it *grows*, from the shallowest model to the deepest (the first row), and levels off from
# depth 64 (the table above). Xiong et al.'s bound does not involve $L$, and nothing here contradicts
# it, but "independent of depth" would be wrong about this measurement. Pre-LN's last layer does shrink
# with depth, but by less than the theorem's rate: compare the ratio printed for pre-LN with
# $1/\sqrt{\text{depth ratio}}$. Part of the gap is the stream's starting size: by Section 2 the final
# norm's input has RMS $\sqrt{1+c\,L}$ with $c\approx\tfrac12$, not $\sqrt L$, and the row "stream growth"
# prints the ratio that gives. The rest is the branches' Jacobians, which the optional part below
# measures: each adds a little to the gradient on its way down.

# %% [markdown]
# ### Try it live
#
# The widget runs a smaller version of the experiment (width $d$ = 32, 32 tokens) each time you
# move a control, with your `residual_sublayer` building every block. Choose the depth, the width
# and the placement; the chosen profile is drawn bold, the other two thin. Each point is the mean
# of four random initialisations; "New initialisations" draws four fresh models. Below the plot it
# prints, per placement, the first layer's and the last layer's gradient and their spread. If
# widgets cannot render here, the static figure above answers the same questions.
#
# Three tasks. Move the sliders, write down what you see, then open the expected observation.
#
# 1. Placement `post`. Move the depth from 8 to 64. What happens to the last layer's gradient,
#    to the first layer's, and to the spread?
# 2. Placement `pre`, same sweep. Which end of the model now gets the larger gradient, and what
#    happens to the last layer's gradient as the model deepens? Compare its change with
#    $1/\sqrt 8$, the theorem's rate for an eight-fold deeper model.
# 3. Depth 64. Switch between `pre`, `output` and `post`. Is the output norm's profile closer to
#    pre-LN's or to post-LN's, and why?
#
# <details><summary>Expected observations</summary>
#
# 1. The last layer's gradient stays about the same, or grows a little; the first layer's falls;
#    the spread grows with the depth. Post-LN's profile: the top gets the large gradients.
# 2. Now the layers near the input get somewhat more than the last one (each branch the gradient
#    passes on its way down adds a little), and the last layer's gradient falls as the model
#    deepens, by a factor a little weaker than $1/\sqrt 8$ (the stream starts at $\mathbf x_0$,
#    not at zero). The spread stays small.
# 3. Close to pre-LN's: the last layer's gradient is damped by the final norm and the layers stay
#    within a small factor of each other. What decides the profile is the identity path, a plain
#    `+` in both, not whether a norm touches the sublayer.
#
# </details>

# %%
widget = placement_widget(residual_sublayer, depth=4 if QUICK else 24)
display(widget.widget)

# %% [markdown]
# ### Optional: where post-LN's imbalance comes from
#
# *Nothing later depends on it (the **Time.** paragraph at the top counts it apart). Skip to Section 4 if you
# are short of time.*
#
# The absolute values depend on the set-up, and they should. The gradient
# $\partial\mathcal L/\partial\mathbf W_2$ is a sum over tokens of outer products of the layer's
# hidden activation (of norm about $\sqrt{2d}$, measured in Section 2) with the gradient reaching
# the stream (which scales with the norm of the loss vector, $\sqrt d$); that is the factor $d$ in
# both of Xiong et al.'s bounds. Another width, another loss (how many tokens it averages, how
# large its random vector is), another activation or initialisation changes every number by a
# constant.
#
# The **size of post-LN's imbalance** is the most sensitive number of all, because it builds up
# over the depth. To see where it comes from, look at the gradient on the stream itself, $\partial\mathcal L/\partial\mathbf x_\ell$,
# at the input of the first, the middle and the last sublayer. Two numbers per layer: its size
# for one token, and its *coherence*, the length of the tokens' average gradient divided by the
# average length (1 when all tokens' gradients point the same way, near $1/\sqrt{\text{tokens}}$
# when they are unrelated). A weight gradient is a sum over tokens, so it needs both.

# %%
from normlab.placement import stream_gradients

L_flow = 16 if QUICK else 64
flow_kwargs = dict(d=32, tokens=32, seeds=2) if QUICK else {}
print(f"depth L = {L_flow}; gradient on the stream at the input of sublayer 1, L/2 and L")
print(f"{'':8} {'size per token':>26} {'coherence over tokens':>26}")
for mode in ["post", "pre"]:
    flow = stream_gradients(residual_sublayer, L_flow, mode, **flow_kwargs)
    picks = [0, L_flow // 2 - 1, L_flow - 1]
    sizes = "  ".join(f"{v:6.2f}" for v in flow["per_token"][picks])
    coherence = "  ".join(f"{v:6.2f}" for v in flow["coherence"][picks])
    print(f"{mode + '-LN':8} {sizes:>26} {coherence:>26}")

# %% [markdown]
# This is the mechanism of Section 3, measured. In post-LN each token's gradient keeps roughly its
# size all the way down: the norm's Jacobian takes away about as much as the branch's Jacobian
# $\mathbf I+\partial F/\partial\mathbf x$ gives back. What changes is its direction. Every sublayer treats each token's gradient differently:
# the norm projects out *that token's* direction $\hat{\mathbf x}$, and the branch's ReLU lets a
# different set of units through for each token. After many sublayers the tokens' gradients no
# longer agree, and their sum, the gradient of a bottom layer's weights, is small. In pre-LN the
# main path is a plain `+`, the same for every token, so the directions hold together better.
# How small depends on how many tokens the loss averages and on how quickly the directions come
# apart, which is why the imbalance is so sensitive to the set-up: its direction (top layers
# favoured) is what Xiong et al.'s analysis predicts, its size depends on the details.
#
# Pre-LN shows the other side of the argument. The gradient entering the stream is small (the
# final norm's damping), but it *grows* on its way down, because each sublayer's Jacobian is
# $\mathbf I+\partial F/\partial\mathbf x$, not $\mathbf I$: every branch it passes adds a
# little. The whiteboard argument, which follows only the identity path, ignores this; the
# layers near the input get somewhat more than the last one (compare pre-LN's first-layer and
# last-layer columns in the table). What pre-LN does guarantee is that the top of the model, where
# post-LN's large gradients sit, is damped by the final norm, and more so the deeper the model.

# %% [markdown]
# ## 4. Why pre-LN needs a final norm
#
# In pre-LN nothing ever normalises the stream itself. After the last block its scale has grown
# with the depth (Section 2), and it differs from token to token. Feed that straight into the
# unembedding and the logits inherit the scale: a deeper model would have a colder softmax
# (sharper, more confident predictions) for no reason but its depth, and the loss surface would
# change with it. The final norm puts every token back on the same scale. It is also, by fact
# one, where the $1/\sqrt L$ damping of the backward pass comes from.
#
# The cell below builds pre-LN stacks of several depths with your `residual_sublayer`, then
# measures the spread of the logits with and without the final norm.
#
# **Predict first.** Without the final norm, roughly what will the logits' standard deviation be at 64
# layers, if it is about 1 at one layer? (Section 2's stream RMS after 64 sublayers is your clue.)

# %%
def pre_ln_logits_std(n_layers, d=64, vocab=256, n_tokens=64, seed=0):
    """Std of the logits of a random pre-LN stack, without and with the final norm."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n_tokens, d))
    for _ in range(n_layers):
        x = residual_sublayer(x, random_mlp(d, rng), layer_norm, "pre")
    W_U = rng.standard_normal((d, vocab)) / np.sqrt(d)
    return float(np.std(x @ W_U)), float(np.std(layer_norm(x) @ W_U))


print(f"{'layers':>6} {'logit std, no final norm':>26} {'with final norm':>16}")
for n in [1, 4, 16] if QUICK else [1, 4, 16, 64, 128]:
    without, with_final = pre_ln_logits_std(n)
    print(f"{n:>6} {without:>26.2f} {with_final:>16.2f}")

# %% [markdown]
# Without the final norm the logits' spread grows like the stream, $\sqrt{1+\ell/2}$; with it,
# it stays at 1 at every depth.
#
# ## 5. Pre-LN is not free
#
# If pre-LN were better in every way, the story would end here. It has two known costs.
#
# **Later layers matter less.** The stream grows like $\sqrt\ell$, while every pre-LN write has a
# fixed size. So the write of layer 40 is a much smaller fraction of the stream than the write of
# layer 4: deep layers can only nudge the representation. The left panel below measures the
# stream against the $\sqrt\ell$ law; the right one measures each layer's write as a fraction of
# the stream it writes into, $\lVert F(\operatorname{N}(\mathbf x_\ell))\rVert/\lVert\mathbf x_\ell\rVert$.

# %%
fig = plot_stream_growth(residual_sublayer, depth=16 if QUICK else 64, d=32 if QUICK else 64)
display(fig)

# %% [markdown]
# This fits an observation made on trained open LLMs: many of their deep layers can be removed
# with little loss. Sun et al. (2025) call it the curse of depth and propose **LayerNorm
# scaling**: multiply the output of the $\ell$-th layer's norm by $1/\sqrt\ell$. That slows the
# stream's growth; it does not stop it. With the scaling, the write of layer $\ell$ has squared
# norm about $c\,d/\ell$ instead of $c\,d$, so the squared norms add up to
# $\lVert\mathbf x_0\rVert^2+c\,d\,(1+\tfrac12+\dots+\tfrac1\ell)\approx\lVert\mathbf x_0\rVert^2+c\,d\,(\ln\ell+0.58)$:
# the squared norm grows like $\ln\ell$ rather than like $\ell$. The next cell measures the
# stream with and without that scaling, and the cell after it compares the scaled stream with
# this logarithmic law. (At initialisation the scaling also shrinks each write, so it does not by itself
# make a deep write a larger fraction of the stream; Sun et al.'s argument is about keeping the
# output variance, and with it the deep layers' usefulness, under control during training.)

# %%
depth_sun = 16 if QUICK else 64
kwargs = dict(d=32, tokens=16, seeds=2) if QUICK else {}
plain_stream = stream_norms(residual_sublayer, depth_sun, **kwargs)
sun_stream = stream_norms(residual_sublayer, depth_sun, scaling="sun", **kwargs)
plain_write = relative_write_sizes(residual_sublayer, depth_sun, **kwargs)
sun_write = relative_write_sizes(residual_sublayer, depth_sun, scaling="sun", **kwargs)
print(f"{'layer':>5} {'|x| plain':>10} {'|x| 1/sqrt(l)':>14} {'write/|x| plain':>16} {'write/|x| 1/sqrt(l)':>20}")
for layer in [1, 4, 16, 64]:
    if layer <= depth_sun:
        print(f"{layer:>5} {plain_stream[layer]:>10.1f} {sun_stream[layer]:>14.1f} "
              f"{plain_write[layer - 1]:>16.3f} {sun_write[layer - 1]:>20.3f}")

# %% [markdown]
# *Optional: the logarithmic law, measured.* The next cell fits $c$ to the unscaled stream and
# compares the scaled stream with $\sqrt{\lVert\mathbf x_0\rVert^2+c\,d\,H_\ell}$.

# %%
# c from the unscaled stream (|x_l|² = |x_0|² + l c d), then the harmonic law for the scaled one.
d_sun = kwargs.get("d", 64)
c_sun = (plain_stream[-1] ** 2 - plain_stream[0] ** 2) / (depth_sun * d_sun)
harmonic = np.cumsum(1.0 / np.arange(1, depth_sun + 1))
predicted_sun = np.sqrt(sun_stream[0] ** 2 + c_sun * d_sun * harmonic)
print(f"c = {c_sun:.2f} from the unscaled stream")
for layer in [4, 16, 64]:
    if layer <= depth_sun:
        print(f"layer {layer:>2}: scaled |x| measured {sun_stream[layer]:5.1f}, "
              f"sqrt(|x_0|² + c d H_l) = {predicted_sun[layer - 1]:5.1f}  (H_l = 1 + 1/2 + ... + 1/l = {harmonic[layer - 1]:.2f})")
print(f"growth of |x|² from layer {depth_sun // 4} to {depth_sun}: unscaled "
      f"{(plain_stream[-1] ** 2 - plain_stream[0] ** 2) / (plain_stream[depth_sun // 4] ** 2 - plain_stream[0] ** 2):.2f}x, "
      f"scaled {(sun_stream[-1] ** 2 - sun_stream[0] ** 2) / (sun_stream[depth_sun // 4] ** 2 - sun_stream[0] ** 2):.2f}x")

# %% [markdown]
# **Post-LN can end up better, if it trains.** Liu et al. (2020) argued that post-LN's
# instability comes less from the gradient imbalance than from *amplification*: post-LN leans
# heavily on its residual branches, so a small change of the parameters moves the output a lot.
# They also found that pre-LN's lighter reliance on the branches limits the quality it can reach,
# and proposed an initialisation, **Admin**, that keeps post-LN stable early in training and
# leaves its full capacity for later. **DeepNet** (Wang et al., 2022) went the same way to 1,000
# layers with DeepNorm, which scales up the residual before a post-LN,
# $\operatorname{N}(\alpha\mathbf x+F(\mathbf x))$ with $\alpha>1$, and scales down the
# initialisation of some weights.

# %% [markdown]
# ## 6. Where modern models put their norms
#
# | model | year | norm | where it sits |
# |---|---|---|---|
# | Transformer (Vaswani et al.) | 2017 | LayerNorm | after the residual add (post-LN) |
# | BERT | 2018 | LayerNorm | post-LN |
# | GPT-2, GPT-3 | 2019, 2020 | LayerNorm | before each sublayer (pre-LN), one more before the unembedding |
# | T5 | 2019 | RMS scaling without bias | pre-norm, plus a final norm |
# | PaLM | 2022 | LayerNorm without bias | pre-LN; attention and MLP read the same normalised input, in parallel |
# | LLaMA 1 to 3 | 2023, 2024 | RMSNorm | pre-norm, plus a final norm |
# | Gemma 2 | 2024 | RMSNorm | both before and after each sublayer |
# | OLMo 2 | 2024 | RMSNorm | on each sublayer's output, $\mathbf x+\operatorname{N}(F(\mathbf x))$, and QK-norm |
#
# Two newer patterns are worth a sentence each.
#
# * **The parallel block** (GPT-J, PaLM) computes
#   $\mathbf x+\operatorname{Attn}(\operatorname{N}(\mathbf x))+\operatorname{MLP}(\operatorname{N}(\mathbf x))$
#   instead of two residual sublayers in a row. Both branches read the same normalised input, so
#   their input projections fuse into one matrix multiplication. Chowdhery et al. (2022) report
#   about 15% faster training at large scale for PaLM, with a small quality loss at 8B
#   parameters and none at 62B.
# * **Normalising what a sublayer writes** (Gemma 2's post-norms, OLMo 2's output norm) bounds the
#   size of every write while keeping the identity path a plain `+`. That answers the
#   amplification concern of Liu et al. and keeps pre-LN's gradient profile, as the widget's
#   "output" placement shows.
#
# ### QK-norm, a norm inside attention
#
# Large models have one more place where a norm earns its keep. Attention logits are
# $\mathbf q\cdot\mathbf k/\sqrt{d_k}$ with $\mathbf q=\mathbf x\mathbf W_Q$ and
# $\mathbf k=\mathbf x\mathbf W_K$, and nothing in pre-LN stops $\mathbf W_Q$ and $\mathbf W_K$
# from growing during training until the softmax saturates into one-hot attention. QK-norm
# normalises each head's query and key vectors before the dot product: Henry et al. (2020) with
# an L2 normalisation and a learned scale, Dehghani et al. (2023) with a LayerNorm, most recent
# LLMs with an RMSNorm. Dehghani et al. found it essential to train a 22-billion-parameter vision
# Transformer; OLMo 2 and Gemma 3, among others, use it.
#
# ### Exercise · `qk_norm_logits`
#
# Write `qk_norm_logits(q, k, g_q, g_k, eps=1e-6)` for one attention head: queries `q` of shape
# `(..., T_q, d_k)`, keys `k` of shape `(..., T_k, d_k)` with the same leading axes, and two gains
# `g_q`, `g_k` of shape `(d_k,)`. Return the logits, of shape `(..., T_q, T_k)`: the usual scaled
# dot-product logits of query $i$ with key $j$, computed after each query and each key has gone
# through an RMSNorm with its own gain (the docstring says it in one line).
#
# **Write the logit $\text{logits}_{ij}$ as a formula first.** Check it on three questions: with one
# query, one key, $\mathbf q=\mathbf k$, both gains 1 and $\epsilon=0$, what must the logit be? If query $i$ is
# made three times longer, what must happen to row $i$? If every key is shifted by the same constant
# vector, must the logits stay the same?
#
# <details><summary>The formula (open after you have written yours)</summary>
#
# $$\text{logits}_{ij}=\frac{\big(\mathbf g_q\odot\operatorname{RMSNorm}(\mathbf q_i)\big)\cdot\big(\mathbf g_k\odot\operatorname{RMSNorm}(\mathbf k_j)\big)}{\sqrt{d_k}},
#   \qquad \operatorname{RMSNorm}(\mathbf v)=\frac{\mathbf v}{\sqrt{\tfrac1{d_k}\sum_m v_m^2+\epsilon}} ,$$
#
# where $\odot$ multiplies feature by feature. With $\mathbf q=\mathbf k$, gains 1 and $\epsilon=0$ the logit is
# $d_k/\sqrt{d_k}=\sqrt{d_k}$; a longer query leaves its row unchanged (up to $\epsilon$); a shift changes the
# logits, because RMSNorm does not centre.
# </details>
#
# What the checks require, all of it graded:
#
# * row $i$ belongs to query $i$ and column $j$ to key $j$, and $T_q$ may differ from $T_k$;
# * each query and each key is normalised on its own, over its $d_k$ features (the last axis),
#   without centring (an RMSNorm, not a LayerNorm), with $\epsilon$ inside the square root;
# * each gain multiplies its own side, feature by feature;
# * any number of leading axes (a batch of heads), so transpose only the last two axes;
# * a float64 array, within a relative error of $10^{-9}$ of torch's `rms_norm` followed by the
#   product; `q` and `k` are not modified.
#
# The visible checks use shapes $5\times5$, $3\times6$ (queries × keys) and a batch of two
# $4\times4$ heads, $d_k$ = 8 or 16. The grader adds $1\times1$ with $d_k=2$, $7\times7$ with
# $d_k=32$, a batch of three $2\times5$ heads, a $2\times3$ batch of $3\times3$ heads and
# $6\times6$ with $d_k=64$. The checks diagnose by experiment: they make one query three times
# longer, or shift every vector by a constant, and look at what your logits do.
#
# The rule of Section 1 holds here too: compute the RMSNorm yourself (no `rms_norm`, `layer_norm`
# or `var_mean` from PyTorch, no helper of the course's packages).
#
# **Stuck?** `hint("qk_norm_logits")`: step 2 after a run of the checks below, step 3 after a failed
# run since step 2.

# %% nbgrader={"grade": false, "grade_id": "qk_norm_logits", "locked": false, "schema_version": 3, "solution": true, "task": false}
def qk_norm_logits(q, k, g_q, g_k, eps=1e-6):
    """Attention logits of one head with QK-norm (RMSNorm with a gain on queries and on keys).

    q: (..., T_q, d_k), k: (..., T_k, d_k), g_q, g_k: (d_k,).
    Returns (..., T_q, T_k): entry [..., i, j] is (g_q * RMSNorm(q_i)) . (g_k * RMSNorm(k_j)) / sqrt(d_k).
    """
    ### BEGIN SOLUTION
    d_k = q.shape[-1]
    q_unit = q / np.sqrt(np.mean(np.square(q), axis=-1, keepdims=True) + eps)
    k_unit = k / np.sqrt(np.mean(np.square(k), axis=-1, keepdims=True) + eps)
    scores = np.matmul(q_unit * g_q, np.swapaxes(k_unit * g_k, -2, -1))
    return scores / np.sqrt(d_k)
    ### END SOLUTION


# %% nbgrader={"grade": false, "grade_id": "signature_qk_norm_logits", "locked": true, "schema_version": 3, "solution": false, "task": false}
# Locked: tells you if the signature above no longer matches what the tests call.
check_signature(qk_norm_logits, "qk_norm_logits", "(q, k, g_q, g_k, eps=1e-06)")

# %% nbgrader={"grade": true, "grade_id": "test_qk_norm_logits", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
"""Checks the QK-norm logits against torch's RMSNorm on 5x5, 3x6 and a batch of two 4x4 heads."""
check_qk_norm_logits(qk_norm_logits)
### BEGIN HIDDEN TESTS
check_qk_norm_logits(qk_norm_logits, cases=(((), 1, 1, 2, 1e-6), ((), 7, 7, 32, 1e-6), ((3,), 2, 5, 4, 1e-6),
                                            ((2, 3), 3, 3, 16, 1e-6), ((), 6, 6, 64, 1e-6)), seed=11)
check_qk_norm_logits(qk_norm_logits, cases=(((), 6, 6, 12, 1e-2), ((3,), 3, 5, 16, 1e-4)), seed=21)  # eps is used
### END HIDDEN TESTS

# %% [markdown]
# **Predict first.** Take both gains equal to one number $g$. However large $\mathbf W_Q$ and
# $\mathbf W_K$ grow, no logit can exceed a bound that depends only on $g$ and $d_k$. What is it,
# for $g=1$ and $d_k=64$? (What is the length of a vector after an RMSNorm? Then use
# Cauchy–Schwarz.)

# %%
guess_qk_bound = ...  # your guess: the largest possible |logit| for g = 1, d_k = 64

# %% [markdown]
# The cell multiplies $\mathbf W_Q$ and $\mathbf W_K$ by a growing factor $s$ and reports the
# largest logit of one head, without QK-norm and with your `qk_norm_logits`.

# %%
qk = qk_logit_bound(qk_norm_logits, gain=1.0, d_k=64)
print(f"{'scale s':>8} {'max |logit|, plain':>20} {'max |logit|, QK-norm':>22}")
for s, plain, normed in zip(qk["scales"], qk["plain"], qk["qk_norm"]):
    print(f"{s:>8g} {plain:>20.1f} {normed:>22.3f}")
print(f"the bound g² √d_k = {qk['bound']:.2f}")
compare(guess_qk_bound, qk["bound"], name="bound on a QK-norm logit, g = 1, d_k = 64", rel=0.05)
display(plot_qk_logits(qk))

# %% [markdown]
# <details><summary>Answer</summary>
#
# $\sqrt{64}=8$, times $g^2$ in general. After an RMSNorm every vector has squared length
# $d_k$ (up to $\epsilon$), so after the gain its length is $g\sqrt{d_k}$. By Cauchy–Schwarz
# $|\mathbf q\cdot\mathbf k|\le g\sqrt{d_k}\cdot g\sqrt{d_k}=g^2d_k$, and dividing by
# $\sqrt{d_k}$ gives $g^2\sqrt{d_k}$. With a different gain per feature the same argument gives
# $\max_m|g_{q,m}\,g_{k,m}|\sqrt{d_k}$, reached when a query and a key both point along the
# feature with the largest product.
# </details>
#
# Without QK-norm the largest logit grows like $s^2$, since both $\mathbf q$ and $\mathbf k$ grow
# like $s$. With it, the logits do not move (up to the tiny effect of $\epsilon$): a norm is scale
# invariant, so scaling $\mathbf W_Q$ and $\mathbf W_K$ changes nothing after it, and the bound
# holds at every scale.

# %% [markdown]
# ## 7. In PyTorch
#
# PyTorch's `nn.TransformerEncoderLayer` offers exactly two of our placements through one flag:
# `norm_first=False` (the default) is post-LN, `norm_first=True` is pre-LN. A layer is two
# residual sublayers in a row, self-attention and then the MLP, each with its own LayerNorm
# (`norm1`, `norm2`). So your function, called twice with the layer's own pieces as `F` and
# `norm`, should reproduce the layer exactly. We run in float64 with dropout off.

# %%
def to_numpy_function(module_call):
    """Wrap a torch function so that it takes and returns numpy arrays."""
    return lambda h: module_call(torch.from_numpy(h)).numpy()


torch.manual_seed(0)
x_tokens = np.random.default_rng(1).standard_normal((2, 5, 16))  # (batch, sequence, d)
for norm_first, mode in [(False, "post"), (True, "pre")]:
    layer = torch.nn.TransformerEncoderLayer(d_model=16, nhead=4, dim_feedforward=64, dropout=0.0,
                                             batch_first=True, norm_first=norm_first, dtype=torch.float64)
    layer.eval()
    attention = to_numpy_function(lambda h: layer.self_attn(h, h, h, need_weights=False)[0])
    mlp = to_numpy_function(lambda h: layer.linear2(layer.activation(layer.linear1(h))))
    with torch.no_grad():
        expected = layer(torch.from_numpy(x_tokens)).numpy()
        h = residual_sublayer(x_tokens, attention, to_numpy_function(layer.norm1), mode)
        mine = residual_sublayer(h, mlp, to_numpy_function(layer.norm2), mode)
    print(f"norm_first={norm_first!s:5}  vs  two residual_sublayer(..., mode={mode!r}):  "
          f"max |difference| = {np.max(np.abs(mine - expected)):.1e}")

# %% [markdown]
# A difference of zero, or around $10^{-16}$, means the compositions are identical. Two details
# of the PyTorch version: a pre-LN stack needs its final norm added by hand
# (`nn.TransformerEncoder(..., norm=nn.LayerNorm(d))`), and the output norm of OLMo 2 has no flag;
# you would write that block yourself, with `residual_sublayer(x, F, norm, "output")` as its core.

# %% [markdown]
# ## 8. Interview questions
#
# Try each one aloud before you reveal the answer.
#
# <details><summary><b>Write down pre-LN and post-LN. What is the difference that matters?</b></summary>
#
# Post-LN: $\mathbf x\leftarrow\operatorname{N}(\mathbf x+F(\mathbf x))$. Pre-LN:
# $\mathbf x\leftarrow\mathbf x+F(\operatorname{N}(\mathbf x))$, plus one final norm before the
# unembedding. In pre-LN the identity path from the embeddings to the final norm is a chain of
# plain additions, so gradients reach every layer undisturbed; in post-LN the stream, and its
# gradient, pass through a norm at every sublayer.
# </details>
#
# <details><summary><b>Why do post-LN Transformers need a learning-rate warm-up, and pre-LN ones often not?</b></summary>
#
# Post-LN renormalises the stream after every sublayer, so the gradient of the top layers does not
# shrink with depth. On the way down, each sublayer projects and masks every token's gradient
# in its own way, so the tokens' gradients stop agreeing and the weight gradients of the lower
# layers, sums over tokens, come out smaller: the top layers get the largest gradients. Xiong et al. (2020) bound the last MLP's output-matrix gradient by
# $\mathcal O(d\sqrt{\ln d})$ for post-LN and $\mathcal O(d\sqrt{\ln d/L})$ for pre-LN. In pre-LN the
# stream grows like $\sqrt\ell$, the final norm divides the incoming gradient by about $\sqrt L$,
# and the identity path hands that damped gradient down to every layer. Large top-layer
# gradients with a large learning rate make post-LN's first steps diverge; warm-up keeps the
# early steps small until the optimiser's statistics settle. On IWSLT14 De–En, post-LN reached
# BLEU ≈ 34 with warm-up and 8.45 without; pre-LN trained well with no warm-up at all.
# </details>
#
# <details><summary><b>Pre-LN trains more easily. What does it give up?</b></summary>
#
# Its stream grows like $\sqrt\ell$ while each write has a fixed size, so a deep layer can change
# the representation only by a shrinking fraction: later layers are underused, and pruning
# studies remove many deep layers of pre-LN LLMs with little loss. Remedies include scaling each
# norm's output by $1/\sqrt\ell$ (Sun et al., 2025) and normalising what each sublayer writes
# (Gemma 2, OLMo 2). Post-LN models that do train stably, with Admin (Liu et al., 2020) or
# DeepNorm (Wang et al., 2022), have been reported to reach better quality.
# </details>
#
# <details><summary><b>Why does a pre-LN Transformer need a final norm before the unembedding?</b></summary>
#
# Nothing else normalises the stream, whose scale after the last block grows with the depth and
# varies from token to token. Without a final norm the logits inherit that scale: the softmax
# temperature would depend on depth and on the token, and so would the loss landscape. The final
# norm puts every token on the same scale, and its $1/s$ in the backward pass is where pre-LN's
# $1/\sqrt L$ gradient damping comes from.
# </details>
#
# <details><summary><b>What does QK-norm bound, and why does it need no assumption on the weights?</b></summary>
#
# The attention logits. After an RMSNorm with gain $g$, every query and key has norm
# $g\sqrt{d_k}$, so $|\mathbf q\cdot\mathbf k|/\sqrt{d_k}\le g^2\sqrt{d_k}$ by Cauchy–Schwarz. The
# norm is scale invariant, so multiplying $\mathbf W_Q$ or $\mathbf W_K$ by any factor changes
# nothing after it: the bound holds however large the projections grow. Only the gain can make
# the logits larger.
# </details>
#
# <details><summary><b>What is the parallel block, and what does it buy?</b></summary>
#
# $\mathbf x+\operatorname{Attn}(\operatorname{N}(\mathbf x))+\operatorname{MLP}(\operatorname{N}(\mathbf x))$:
# attention and MLP read the same normalised input side by side instead of one after the other.
# Their input projections fuse into one larger matrix multiplication. PaLM reports about 15%
# faster training at large scale, with a small quality loss at 8B parameters and none at 62B
# (Chowdhery et al., 2022).
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
# - Post-LN: $\operatorname{N}(\mathbf x+F(\mathbf x))$. Pre-LN: $\mathbf x+F(\operatorname{N}(\mathbf x))$
#   plus a final norm. Output norm: $\mathbf x+\operatorname{N}(F(\mathbf x))$.
# - Pre-LN keeps a clean identity path; its stream grows like $\sqrt\ell$, and the final norm
#   divides the gradient entering the stream by about $\sqrt L$: no large gradients at the top.
# - Post-LN pins the stream, so its top layers get large gradients whatever the depth: that is why
#   it needs warm-up (BLEU ≈ 34 with, 8.45 without, in Xiong et al., 2020).
# - Pre-LN's price: deep writes are a shrinking fraction of the stream, so deep layers are
#   underused. Remedies: $1/\sqrt\ell$ norm scaling, output norms, Admin or DeepNorm for post-LN.
# - QK-norm bounds attention logits whatever $\mathbf W_Q$, $\mathbf W_K$ do; the parallel block
#   trades a little quality for about 15% speed.
#
# *References.* Vaswani et al. (2017), *Attention Is All You Need*. Radford et al. (2019),
# *Language Models are Unsupervised Multitask Learners* (GPT-2). Xiong et al. (2020), *On Layer
# Normalization in the Transformer Architecture*. Liu et al. (2019), *On the Variance of the
# Adaptive Learning Rate and Beyond*. Liu et al. (2020), *Understanding the Difficulty of Training
# Transformers* (Admin). Henry et al. (2020), *Query-Key Normalization for Transformers*.
# Chowdhery et al. (2022), *PaLM*. Wang et al. (2022), *DeepNet: Scaling Transformers to 1,000
# Layers*. Dehghani et al. (2023), *Scaling Vision Transformers to 22 Billion Parameters*. OLMo
# Team (2024), *2 OLMo 2 Furious*. Sun et al. (2025), *The Curse of Depth in Large Language
# Models*.
#
# Next: [06 · Mean and variance in one stable pass](06_welford.ipynb)
