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
# # 01 · Why Transformers normalise each token by itself
#
# Every sublayer of a Transformer reads the residual stream, and the stream's scale drifts as
# layers add to it. So each sublayer first normalises what it reads. Two recipes were on the
# table: BatchNorm (Ioffe & Szegedy, 2015), the workhorse of convolutional networks, and
# LayerNorm (Ba, Kiros & Hinton, 2016). Both subtract a mean and divide by a standard
# deviation, and both then apply a learned gain $\boldsymbol\gamma$ and shift $\boldsymbol\beta$.
# In training mode they differ in one thing only: **which numbers they average over**. (At test
# time BatchNorm also swaps its batch statistics for running averages; in section 6 you build both
# modes and measure what the swap costs.) That one choice decides whether a language model can cheat during training, whether it
# computes the same function when it generates text, and whether padding and batch size change its
# output.
#
# By the end of this notebook you will be able to
#
# 1. say, for a `(B, T, d)` tensor, which entries share statistics under BatchNorm and under LayerNorm,
# 2. implement LayerNorm for any shape and BatchNorm in training mode,
# 3. implement BatchNorm's running averages and its evaluation mode with PyTorch's conventions
#    (momentum, unbiased running variance),
# 4. show with code three ways BatchNorm fails in a language model: it leaks the future, it
#    computes a different function at test time, and it depends on padding and batch size,
# 5. write a causality probe that catches the first failure in any normalisation function,
# 6. choose among the four common normalisations, and check your code against PyTorch.
#
# **Time.** About 125 minutes. This is an estimate, not a timing of learners: `tools/read-through-estimate`
# counts about 5,700 words of prose (read at 150 words a minute), 43 code cells to run (half a minute each), 5
# graded exercises (10 minutes each), 0 derivation steps (5 each), 7 predictions (2 each) and 0 widgets (5
# each), and adds the 22 s the solved notebook took to run on the course's test machine.
#
# **How the exercises work.** Each exercise is a function with a fixed signature. Replace
# `raise NotImplementedError()` with your code, run the cell, then run the checks below it.
# Until you implement a function, its checks fail with `NotImplementedError`; that is expected.
# A failing check tells you what it expected, what it got, and the most likely cause.

# %%
import numpy as np

from grader.checks.bn_vs_ln import (check_batch_norm, check_batch_norm_eval, check_batch_norm_train, check_layernorm,
                                    check_leaks_future)
from grader.compare import check_signature
from grader.learner import hint, progress
from grader.predict import choose, compare
from normlab.axes import (
    axis_picture,
    change_map_figure,
    generation_gap_figure,
    shared_statistics_mask,
    spread_figure,
)
from normlab.run_mode import quick_run

np.set_printoptions(precision=4, suppress=True)
QUICK = quick_run()  # True under nbgrader: demo cells do the least work and figures are not drawn

# %% [markdown]
# ## 1. One tensor, two ways to average it
#
# Inside a Transformer the activations form a tensor $A\in\mathbb R^{B\times T\times d}$: $B$
# sequences in the batch, $T$ positions per sequence, $d$ features per token. A normalisation
# layer computes a mean $\mu$ and a variance $\sigma^2$ over some of these axes and uses that
# pair for every entry it averaged over.
#
# - **BatchNorm** fixes a feature $k$ and averages over every $(b, t)$: all $B\cdot T$ tokens in
#   the batch. There are $d$ pairs $(\mu_k,\sigma_k^2)$, and the output at $(b, t, k)$ depends on
#   every token in the batch.
# - **LayerNorm** fixes a token $(b, t)$ and averages over its $d$ features. There are $B\cdot T$
#   pairs, and the output at $(b, t, k)$ depends only on token $(b, t)$.
#
# Both keep one $\gamma_k$ and one $\beta_k$ per feature, shared by every token. In the picture,
# a token is a vertical column of $d$ cubes; all cubes of one colour share one mean and one
# variance.

# %%
axis_picture(("batch", "layer"), shape=(3, 5, 6))

# %% [markdown]
# The same statement as code: the shape of the statistics tells you the axis. BatchNorm reduces
# over `axis=(0, 1)` and keeps one number per feature; LayerNorm reduces over `axis=-1` and keeps
# one number per token. `shared_statistics_mask` (from the course's `normlab` package) marks the
# entries that share a statistic with one chosen entry.

# %%
B, T, d = 3, 5, 6
acts = np.random.default_rng(0).standard_normal((B, T, d))
feature_means = acts.mean(axis=(0, 1))               # BatchNorm: one mean per feature
token_means = acts.mean(axis=-1, keepdims=True)      # LayerNorm: one mean per token
print("BatchNorm statistics:", feature_means.shape, "  LayerNorm statistics:", token_means.shape)

entry = (1, 2, 3)  # (b, t, k)
for kind, name in [("batch", "BatchNorm"), ("layer", "LayerNorm")]:
    mask = shared_statistics_mask(kind, acts.shape, entry)
    print(f"{name}: entry {entry} shares its (mu, sigma^2) with {mask.sum()} entries "
          f"in {len(np.unique(np.nonzero(mask)[1]))} position(s) and {len(np.unique(np.nonzero(mask)[0]))} sequence(s)")

# %% [markdown]
# ## 2. LayerNorm, for any shape
#
# LayerNorm standardises each token $\mathbf x\in\mathbb R^d$ with statistics of that token alone, then
# applies a gain $\boldsymbol\gamma$ and a shift $\boldsymbol\beta$ of shape `(d,)`. No other token, no
# other sequence and no running average enters, so training and inference compute the same function.
# Build the formula yourself before you open it. Answer on paper:
#
# 1. Which single number, computed from the token and subtracted from every entry, leaves entries that
#    average to 0?
# 2. After that subtraction, which number must you divide by so that the squares of the entries average
#    to 1? Does its sum of squares get divided by $d$ or by $d-1$? Try the token $(-1, 1)$.
# 3. A token whose $d$ entries are all equal makes that divisor 0. Where can a small $\epsilon>0$ go so
#    that the token comes out as $\mathbf 0$, not $0/0$, and $\epsilon$ has the units of a variance?
# 4. "Per token": one statistic per what, along which axis of a `(B, T, d)` array? What shape must the
#    statistic have to line up with `x` whatever the number of leading axes?
# 5. Every standardised token has mean 0 and mean square about 1. What do $\boldsymbol\gamma$ and
#    $\boldsymbol\beta$ give back that the standardisation took away? What is the output when $d=1$?
#
# <details><summary>The definition (open after you have answered the five questions)</summary>
#
# $$\mu=\frac1d\sum_{j=1}^d x_j,\qquad \sigma^2=\frac1d\sum_{j=1}^d (x_j-\mu)^2,\qquad
#   \hat{\mathbf x}=\frac{\mathbf x-\mu}{\sqrt{\sigma^2+\epsilon}},\qquad
#   \operatorname{LN}(\mathbf x)=\boldsymbol\gamma\odot\hat{\mathbf x}+\boldsymbol\beta ,$$
#
# where $\odot$ is the elementwise product: $(\boldsymbol\gamma\odot\hat{\mathbf x})_k=\gamma_k\hat x_k$.
#
# 1. The mean $\mu$.
# 2. The standard deviation from the **biased** variance, which divides by $d$: $(-1, 1)$ becomes
#    $(-1, 1)$, with mean square 1, where dividing by $d-1$ gives $\pm1/\sqrt2$ and mean square $\frac12$.
# 3. Inside the square root, added to $\sigma^2$: a constant token is divided by $\sqrt\epsilon$, not by zero.
# 4. One mean and one variance per token, over the last axis (`axis=-1`). With `keepdims=True` they have
#    shape `(..., 1)` and broadcast against `x`.
# 5. A learned scale and offset for each feature: without them every output would be forced to mean 0
#    and mean square 1, whatever the next layer needs. For $d=1$ the token equals its mean, so
#    $\hat x=0$ and the output is $\boldsymbol\beta$.
#
# NumPy's `np.var` divides by $d$ by default; PyTorch's `torch.var` divides by $d-1$ unless told otherwise.
# </details>
#
# **Predict, then run.** On paper $\sigma^2=\operatorname{mean}(\mathbf x^2)-\mu^2$ as well. The cell after
# yours computes $\sigma^2$ both ways, in float64 (relative rounding about $10^{-16}$), for a token of 64
# entries with mean about $10^4$ and spread about $10^{-2}$. What relative error do you expect of the
# shortcut? Compare the size of $\operatorname{mean}(\mathbf x^2)$ with the size of the answer you want from it.

# %%
guess_shortcut_error = ...  # your guess: the relative error of mean(x**2) - mu**2 for this token

# %%
token_far = 1e4 + 1e-2 * np.random.default_rng(10).standard_normal(64)  # offset 1e4, spread 1e-2
deviations_way = np.mean((token_far - np.mean(token_far)) ** 2)
shortcut_way = np.mean(token_far**2) - np.mean(token_far) ** 2
shortcut_error = abs(shortcut_way / deviations_way - 1)
compare(guess_shortcut_error, shortcut_error, name="relative error of the shortcut")
print(f"variance from squared deviations: {deviations_way:.6e};  mean(x^2) - mu^2: {shortcut_way:.6e};  "
      f"relative error of the shortcut: {shortcut_error:.1e} (the checks allow 1e-7)")

# %% [markdown]
# <details><summary>Answer</summary>
#
# Of order $10^{-4}$. $\operatorname{mean}(\mathbf x^2)\approx10^8$ is known to about $10^8\times10^{-16}=10^{-8}$, and
# the subtraction keeps that absolute error while the result, $\sigma^2\approx10^{-4}$, is $10^{12}$ times
# smaller: $10^{-8}/10^{-4}=10^{-4}$, times a few roundings. Subtracting $\mu$ first makes the numbers small
# before they are squared, and nothing cancels.
# </details>
#
# ### Exercise 1 · `layernorm`
#
# The contract:
#
# - **Signature** `layernorm(x, gamma, beta, eps=1e-5)`, with the definition you derived above.
# - **Shapes.** `x` is `(..., d)`: one token `(d,)`, a sequence `(T, d)`, a batch `(B, T, d)`, ..., and
#   $d=1$ too. `gamma` and `beta` are `(d,)`. The result has `x`'s shape; every token gets its own statistics.
# - **Dtype.** float64 in, float64 out. `x` is not modified.
# - **Errors.** None of its own: the inputs are always valid.
#
# What the checks ask: a result within a relative $10^{-7}$ of PyTorch's `layer_norm` in float64, for
# inputs of one to four axes, a square input, $d=1$, $\epsilon$ up to 1, a gain with negative entries,
# and tokens of offset $10^4$ and spread $10^{-2}$, where the shortcut above fails: compute $\sigma^2$ from
# the squared deviations. The same goes for `batch_norm` in Exercise 2.
#
# In this notebook's exercises, compute the result yourself: a graded function that calls PyTorch's
# `layer_norm`, `rms_norm`, `batch_norm`, `group_norm`, `instance_norm` or `var_mean` (or the matching
# `torch.nn` module), or a helper from the course's `grader` or `normlab` packages, skips the exercise.
# The class grader cannot prove what your code called (it runs in your own process, which your code
# controls), so no points depend on it: it lists what it saw for your instructor, who decides.
# Comparing with them in other cells is fine.
#
# **Stuck?** Run `hint("layernorm")` in a new cell. Its steps open as you try: step 1 (the
# idea) at once; step 2 (what your checks said) once you have run the checks below on your own
# code; step 3 (the shape of the code) after a check fails again since you saw step 2. Asking again
# repeats the highest open step and says what opens the next. `progress()` shows where you stand.

# %% nbgrader={"grade": false, "grade_id": "layernorm", "locked": false, "schema_version": 3, "solution": true, "task": false}
def layernorm(x, gamma, beta, eps=1e-5):
    """LayerNorm of every token of x (the rows of its last axis), with gain gamma and shift beta.

    x: (..., d) float64; gamma, beta: (d,). Returns a float64 array of x's shape; x is not modified.
    """
    ### BEGIN SOLUTION
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return gamma * (x - mu) / np.sqrt(var + eps) + beta
    ### END SOLUTION


# %% nbgrader={"grade": false, "grade_id": "signature_layernorm", "locked": true, "schema_version": 3, "solution": false, "task": false}
# Locked: tells you if the signature above no longer matches what the tests call.
check_signature(layernorm, "layernorm", "(x, gamma, beta, eps=1e-05)")

# %% nbgrader={"grade": true, "grade_id": "test_layernorm", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
"""Checks layernorm against torch's layer_norm: (2, 4, 6, 8), a (2, 3, 5) batch, a square input, eps = 1."""
check_layernorm(layernorm)
### BEGIN HIDDEN TESTS
for shape_hidden, seed_hidden in [((7,), 11), ((1, 16), 12), ((2, 3, 4, 5), 13), ((6, 6), 14), ((3, 1), 15)]:
    check_layernorm(layernorm, shape=shape_hidden, seed=seed_hidden)
check_layernorm(layernorm, shape=(4, 9), seed=16, eps=1.0, scale=0.3)
check_layernorm(layernorm, shape=(5, 8), seed=17, eps=1e-3, scale=1e-3, offset=2.0)
check_layernorm(layernorm, shape=(3, 2, 64), seed=18, scale=1e-2, offset=1e4)
check_layernorm(layernorm, shape=(2, 12), seed=19, gamma=np.linspace(-2.0, 3.0, 12), beta=np.full(12, 0.5))
### END HIDDEN TESTS

# %% [markdown]
# ## 3. BatchNorm in training mode
#
# BatchNorm standardises with the same recipe as LayerNorm and applies the same $\boldsymbol\gamma$ and
# $\boldsymbol\beta$, but with the roles of the axes exchanged (section 1's picture). This is what it does
# while training; at test time it switches to running averages of its statistics, which section 6 adds.
# Answer on paper, from your answers for LayerNorm:
#
# 1. Which axis of a `(B, T, d)` input does BatchNorm keep, and which does it average over? How many
#    means does it compute, and what shape do they have?
# 2. Over how many numbers $N$ is each mean taken for an input `(B, d)`, `(B, T, d)`, and an image batch
#    stored channels-last as `(B, H, W, d)`?
# 3. Does a mean of shape `(d,)` line up with `x` without reshaping? Which axes do you pass to the reduction?
# 4. A batch that holds one token, $N=1$: what does every output become? Compare LayerNorm at $d=1$.
#
# <details><summary>The definition (open after you have answered the four questions)</summary>
#
# For each feature $k$, with $n$ running over all $N$ tokens of the batch,
#
# $$\mu_k=\frac1N\sum_{n=1}^N x_{n,k},\qquad \sigma_k^2=\frac1N\sum_{n=1}^N (x_{n,k}-\mu_k)^2,
#   \qquad y_{n,k}=\gamma_k\frac{x_{n,k}-\mu_k}{\sqrt{\sigma_k^2+\epsilon}}+\beta_k .$$
#
# 1. It keeps the feature axis and averages over every other axis: $d$ means, of shape `(d,)`.
# 2. $N=B$, $N=B\cdot T$ and $N=B\cdot H\cdot W$: the product of every size but the last.
# 3. Yes: a `(d,)` array broadcasts against the last axis. Reduce over every axis but the last,
#    `tuple(range(x.ndim - 1))`.
# 4. With one token each feature equals its own mean, so every output is $\boldsymbol\beta$: the same
#    degenerate case as LayerNorm at $d=1$, now with the batch as the thing averaged over.
#
# The variance is the biased one, from the squared deviations, and $\epsilon$ sits inside the square
# root, as in Exercise 1.
# </details>
#
# ### Exercise 2 · `batch_norm`
#
# The contract:
#
# - **Signature** `batch_norm(x, gamma, beta, eps=1e-5)`, BatchNorm in training mode as you derived it.
# - **Shapes.** `x` is `(..., d)` with at least two axes: `(B, d)`, `(B, T, d)`, `(B, H, W, d)`, ...;
#   `gamma` and `beta` are `(d,)`. The result has `x`'s shape.
# - **Dtype.** float64 in, float64 out. `x` is not modified.
# - **Errors.** None of its own: the inputs are always valid.
#
# What the checks ask: a result within a relative $10^{-7}$ of PyTorch's `batch_norm(training=True)` in
# float64, for inputs of two to four axes, a batch of one sequence, $\epsilon$ up to 1, a gain with negative
# entries, and a batch of offset $10^4$ and spread $10^{-2}$ (so, as in Exercise 1, no shortcut variance).
#
# **Stuck?** `hint("batch_norm")` climbs the same ladder as Exercise 1: step 2 after a run of the
# checks below, step 3 after a failed run since step 2.

# %% nbgrader={"grade": false, "grade_id": "batch_norm", "locked": false, "schema_version": 3, "solution": true, "task": false}
def batch_norm(x, gamma, beta, eps=1e-5):
    """BatchNorm in training mode: each feature is normalised with the statistics of the whole batch.

    x: (..., d) float64 with at least two axes; gamma, beta: (d,). Returns a float64 array of x's shape;
    x is not modified.
    """
    ### BEGIN SOLUTION
    leading = tuple(range(x.ndim - 1))
    mu = x.mean(axis=leading)
    var = ((x - mu) ** 2).mean(axis=leading)
    return gamma * (x - mu) / np.sqrt(var + eps) + beta
    ### END SOLUTION


# %% nbgrader={"grade": false, "grade_id": "signature_batch_norm", "locked": true, "schema_version": 3, "solution": false, "task": false}
# Locked: tells you if the signature above no longer matches what the tests call.
check_signature(batch_norm, "batch_norm", "(x, gamma, beta, eps=1e-05)")

# %% nbgrader={"grade": true, "grade_id": "test_batch_norm", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
"""Checks batch_norm against torch's batch_norm(training=True) on (2, 3, 5), (8, 4) and an eps = 1 case."""
check_batch_norm(batch_norm)
### BEGIN HIDDEN TESTS
for shape_hidden, seed_hidden in [((2, 3, 2, 4), 21), ((64, 3), 22), ((1, 5, 3), 23), ((4, 4, 4), 24)]:
    check_batch_norm(batch_norm, shape=shape_hidden, seed=seed_hidden)
check_batch_norm(batch_norm, shape=(3, 4, 6), seed=25, eps=1.0, scale=0.2)
check_batch_norm(batch_norm, shape=(5, 6, 3), seed=26, scale=1e-2, offset=1e4)
check_batch_norm(batch_norm, shape=(6, 5), seed=27, gamma=np.linspace(-1.0, 2.0, 5), beta=np.arange(5.0))
### END HIDDEN TESTS

# %% [markdown]
# From here on the experiments use your two functions with $\boldsymbol\gamma=\mathbf 1$ and
# $\boldsymbol\beta=\mathbf 0$, so that any difference between them comes from the axes alone.

# %%
def ln_plain(a):
    """Your layernorm with gamma = 1 and beta = 0. a: (..., d)."""
    return layernorm(a, np.ones(a.shape[-1]), np.zeros(a.shape[-1]))


def bn_plain(a):
    """Your batch_norm (training mode) with gamma = 1 and beta = 0. a: (..., d)."""
    return batch_norm(a, np.ones(a.shape[-1]), np.zeros(a.shape[-1]))


# %% [markdown]
# ## 4. Failure 1: BatchNorm leaks the future
#
# A causal language model predicts token $t+1$ from tokens $0,\dots,t$, and during training it
# does so for every position at once (teacher forcing). Attention is masked so that position $t$
# cannot look ahead. But BatchNorm's statistics for feature $k$ average over all positions of all
# sequences, later ones included, so every output carries a little of every later token.
#
# The experiment: take a batch of 4 sequences of 8 tokens, change one token (sequence 2,
# position 5), and measure how much every token's output moves.
#
# **Predict first.** Under BatchNorm (training mode), what happens to the outputs of the tokens
# *before* position 5? Pick one of the options below.

# %%
options_earlier_tokens = ["exactly unchanged, as under LayerNorm",
                          "changed, but only in sequence 2",
                          "changed in every sequence of the batch"]
guess_earlier_tokens = ...  # your guess: copy one of the three strings

# %%
rng = np.random.default_rng(1)
batch = rng.standard_normal((4, 8, 16))
perturbed = batch.copy()
b_star, t_star = 2, 5
perturbed[b_star, t_star] += rng.standard_normal(16)

changes = {name: np.abs(norm(perturbed) - norm(batch)).max(axis=-1) for name, norm in
           [("BatchNorm", bn_plain), ("LayerNorm", ln_plain)]}
for name, change in changes.items():
    earlier = change[:, :t_star]
    print(f"{name}: largest change of an output before position {t_star}: {earlier.max():.2e}, "
          f"in {np.count_nonzero(earlier)} of {earlier.size} earlier tokens")
change_map_figure(changes, (b_star, t_star))

# %%
earlier_bn = changes["BatchNorm"][:, :t_star]
other_sequences_moved = np.count_nonzero(np.delete(earlier_bn, b_star, axis=0)) > 0
answer_earlier = (options_earlier_tokens[2] if other_sequences_moved
                  else options_earlier_tokens[1] if np.any(earlier_bn) else options_earlier_tokens[0])
choose(guess_earlier_tokens, options_earlier_tokens, correct=answer_earlier, name="BatchNorm's earlier tokens")

# %% [markdown]
# <details><summary>Answer</summary>
#
# Changed in every sequence. BatchNorm's mean and variance of each feature are shared by all
# $4\cdot8$ tokens of the batch, so one changed token moves every statistic and with it every output,
# including tokens that come *before* the change and tokens of other sequences. Under LayerNorm the
# earlier outputs are unchanged to the last bit: the differences are exactly zero, not merely small.
# </details>
#
# ### The bug that looks like success
#
# How much can a model gain from such a leak? Take a language whose tokens are drawn uniformly at
# random from $V=16$ symbols: nothing about the next token can be predicted, so no honest model can
# beat a uniform guess. Embed the tokens with a random table, normalise, and fit a linear readout
# that predicts token $t+1$ from **the normalised vector at position $t$ alone** (no attention at
# all), by least squares on one-hot targets. A uniform guess has squared error $1-1/V$ and accuracy
# $1/V$; a readout that does better is reading the future.
#
# Each batch holds one sequence, as on a device whose batch is a single sequence, so BatchNorm's
# statistics come from that sequence's positions. With $T=2$ the shared mean is the average of the
# current token and the next one, and subtracting it writes the next token into the current
# position. During generation the next token does not exist yet, so position $t$ can only be
# normalised with the statistics of positions $0,\dots,t$.

# %%
V, d_embed = 16, 32
embedding = np.random.default_rng(2).standard_normal((V, d_embed))


def teacher_forced(norm, tokens):
    """Normalise each sequence of token ids (n, T) on its own: a batch of one sequence."""
    return np.stack([norm(embedding[seq][None])[0] for seq in tokens])


def generated(norm, tokens):
    """Position t normalised as in generation: only the prefix 0..t exists."""
    out = np.empty(tokens.shape + (d_embed,))
    for t in range(tokens.shape[1]):
        out[:, t] = np.stack([norm(embedding[seq[: t + 1]][None])[0, t] for seq in tokens])
    return out


def design(features):
    """The readout's input: the normalised vector at each position but the last, and a constant 1."""
    f = features[:, :-1].reshape(-1, d_embed)
    return np.c_[f, np.ones(len(f))]


def fit_readout(features, tokens):
    """Least squares from the vector at position t to the one-hot token t + 1 (a tiny ridge keeps it solvable)."""
    inputs, targets = design(features), np.eye(V)[tokens[:, 1:].ravel()]
    return np.linalg.solve(inputs.T @ inputs + 1e-6 * np.eye(inputs.shape[1]), inputs.T @ targets)


def scores(weights, features, tokens):
    """Squared error and accuracy of the readout's next-token predictions."""
    predictions = design(features) @ weights
    truth = tokens[:, 1:].ravel()
    return np.mean(np.sum((predictions - np.eye(V)[truth]) ** 2, axis=1)), np.mean(predictions.argmax(axis=1) == truth)


n_train, n_test = (600, 150) if QUICK else (3000, 600)
token_rng = np.random.default_rng(3)
print(f"honest floor: squared error {1 - 1 / V:.3f}, accuracy {1 / V:.3f} (chance)\n")
print("norm        T   training (teacher forcing)   generation (one token at a time)")
for T_seq in (2, 8):
    train_tokens = token_rng.integers(0, V, (n_train, T_seq))
    test_tokens = token_rng.integers(0, V, (n_test, T_seq))
    for name, norm in [("BatchNorm", bn_plain), ("LayerNorm", ln_plain)]:
        weights = fit_readout(teacher_forced(norm, train_tokens), train_tokens)
        loss_tf, acc_tf = scores(weights, teacher_forced(norm, test_tokens), test_tokens)
        loss_gen, acc_gen = scores(weights, generated(norm, test_tokens), test_tokens)
        print(f"{name:10s} {T_seq:2d}   error {loss_tf:.3f}, accuracy {acc_tf:.3f}     "
              f"error {loss_gen:.3f}, accuracy {acc_gen:.3f}")

# %% [markdown]
# Under teacher forcing the BatchNorm readout beats the honest floor on *held-out* sequences of
# random tokens, which is impossible without seeing the answer. The moment it has to generate, its
# accuracy falls back to chance and its error climbs to the floor or above. That is the
# signature of a leak in a real model: a training loss that looks too good, and samples that are
# garbage. LayerNorm's numbers are the same in both columns, because its features are the same.
# The leak shrinks as $T$ grows (each token is a smaller part of the mean) but does not vanish, and a
# real model, with attention over all earlier positions, has many more ways to exploit it than a
# linear readout of one position.
#
# ## 5. A causality probe
#
# A leak does not announce itself, and it need not come from BatchNorm: a mean over the wrong
# axis, a cumulative sum in the wrong direction, or a padding trick can all do it. The cure is a
# test you can point at any function: change only the tokens after position $t$, and check whether
# any output at positions $0,\dots,t$ moved.
#
# ### Exercise 3 · `leaks_future`
#
# Write `leaks_future(norm, x, t)` where `norm` maps a `(B, T, d)` array to a `(B, T, d)` array, `x`
# has shape `(B, T, d)` with the time axis at position 1, and `0 <= t < T`. Return `True` if any
# output of `norm` at positions `0..t` changes when the tokens at positions `t+1..T-1` are changed,
# and `False` otherwise. Any change counts, however small. Do not modify `x`. The checks want the
# exact boolean for every `t` (no tolerance) on causal and leaky functions, one of them with a leak of
# size $10^{-11}$.
#
# *Hints:* change **every** later token, by something that cannot be zero. Compare **every**
# earlier position, including $t$ itself. Compare exactly (`np.array_equal`): a causal function
# leaves earlier outputs bit-for-bit unchanged, and a tolerance can hide a small leak. When
# `t = T - 1` there is no future, so the answer is `False`.
#
# **Stuck?** `hint("leaks_future")` climbs the same ladder as Exercise 1: step 2 after a run of the
# checks below, step 3 after a failed run since step 2.

# %% nbgrader={"grade": false, "grade_id": "leaks_future", "locked": false, "schema_version": 3, "solution": true, "task": false}
def leaks_future(norm, x, t):
    """Does norm's output at positions 0..t depend on the tokens after position t?

    norm: function (B, T, d) -> (B, T, d). x: (B, T, d), time on axis 1. t: 0 <= t < T.
    Returns True if changing x[:, t + 1:] changes any of norm(x)[:, :t + 1], else False.
    """
    ### BEGIN SOLUTION
    changed = x.copy()
    later = changed[:, t + 1:]
    later += 1.0 + np.random.default_rng(0).standard_normal(later.shape)
    return not np.array_equal(norm(x)[:, : t + 1], norm(changed)[:, : t + 1])
    ### END SOLUTION


# %% nbgrader={"grade": false, "grade_id": "signature_leaks_future", "locked": true, "schema_version": 3, "solution": false, "task": false}
# Locked: tells you if the signature above no longer matches what the tests call.
check_signature(leaks_future, "leaks_future", "(norm, x, t)")

# %% nbgrader={"grade": true, "grade_id": "test_leaks_future", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
"""Points the probe at causal and leaky functions with known answers, on a (2, 6, 4) input."""
check_leaks_future(leaks_future)
### BEGIN HIDDEN TESTS
for shape_hidden, seed_hidden in [((1, 7, 3), 31), ((3, 4, 1), 32), ((2, 2, 5), 33), ((4, 10, 8), 34)]:
    check_leaks_future(leaks_future, shape=shape_hidden, seed=seed_hidden)
### END HIDDEN TESTS

# %% [markdown]
# Now point your probe at the functions of this notebook. The first two are your exercises; the
# third normalises each feature over the positions of its own sequence, a tempting mistake when
# a tensor is laid out `(B, d, T)`; the fourth does the same with a cumulative mean, so that each
# position only uses positions up to itself.

# %%
def over_positions(a):
    """Statistics over the time axis of each sequence (a mistake, not a recipe)."""
    centred = a - a.mean(axis=1, keepdims=True)
    return centred / np.sqrt((centred**2).mean(axis=1, keepdims=True) + 1e-5)


def over_past_positions(a):
    """Mean of positions 0..t subtracted at position t: causal by construction."""
    return a - np.cumsum(a, axis=1) / np.arange(1, a.shape[1] + 1)[None, :, None]


probe_input = np.random.default_rng(4).standard_normal((2, 6, 8))
for name, norm in [("your layernorm", ln_plain), ("your batch_norm", bn_plain),
                   ("statistics over positions", over_positions), ("mean over past positions", over_past_positions)]:
    answers = [leaks_future(norm, probe_input, t) for t in range(probe_input.shape[1])]
    print(f"{name:26s} leaks at t = 0..5: {answers}")

# %% [markdown]
# Every leaky function leaks at every position but the last, where there is no future left to
# leak. A probe like this belongs in the test suite of any model code: it takes milliseconds,
# and it would have caught the readout's too-good loss before anyone trained on it.
#
# ## 6. Failure 2: train and test compute different functions
#
# A deployed model sees one sequence, or one token, at a time, so BatchNorm cannot use batch
# statistics at test time. Instead it keeps running averages of the batch statistics during
# training, and in evaluation mode it normalises with those averages alone. You build both modes
# now, the way PyTorch's `nn.BatchNorm1d` does, and then measure how far apart they are.
#
# **Running averages.** Each training step computes the batch statistics $\mu_k$ and $\sigma_k^2$ of
# section 3 (over the $N$ tokens of the batch) and moves the running statistics $\overline{\mu}_k$ and
# $\overline{\sigma}_k^2$ part of the way towards them, by an amount set by a momentum $m\in[0,1]$
# (PyTorch's default is $0.1$). A new layer starts from $\overline{\mu}_k=0$ and $\overline{\sigma}_k^2=1$.
# Three conventions, all PyTorch's, fix the rule, and the checks hold you to each of them:
#
# - **The momentum is the weight of the new batch statistic**, not of the old running value. (Keras
#   calls the weight of the *old* value its momentum, 0.99 by default: the opposite convention.)
# - **The running variance is fed the unbiased batch variance** (dividing the sum of squared
#   deviations by $N-1$), while the training output itself is normalised with the **biased**
#   $\sigma_k^2$ of Exercise 2.
# - **Evaluation mode uses the running statistics only.** No statistic of the batch it is given
#   enters, nothing is updated, and a single token of shape `(d,)` works.
#
# **Derive the update before you write it.** Answer on paper:
#
# 1. The new running mean is a weighted average of two numbers. Which two, with which weights, if
#    $m=0$ must leave it unchanged and $m=1$ must replace it by the batch's?
# 2. Feed the same batch again and again. What must the running mean tend to, and what fraction of
#    its distance to it is left after each step when $m=0.1$?
# 3. The unbiased variance divides by $N-1$. Write it in terms of the biased $\sigma_k^2$ you already
#    compute. What goes wrong at $N=1$ (the reason the exercise asks for $N\ge2$)?
# 4. In evaluation mode, which two quantities take the places of $\mu_k$ and $\sigma_k^2$ in the
#    formula of Exercise 2? What must a token equal to $\overline{\boldsymbol\mu}$ come out as?
#
# <details><summary>The update and the evaluation formula (open after you have written yours)</summary>
#
# $$\overline{\mu}_k\leftarrow(1-m)\,\overline{\mu}_k+m\,\mu_k,\qquad
#   \overline{\sigma}_k^2\leftarrow(1-m)\,\overline{\sigma}_k^2+m\,\frac{N}{N-1}\,\sigma_k^2 ,$$
#
# $$y_{n,k}=\gamma_k\,\frac{x_{n,k}-\overline{\mu}_k}{\sqrt{\overline{\sigma}_k^2+\epsilon}}+\beta_k .$$
#
# With $m=0.1$ each step keeps 90 % of the old value; a token equal to $\overline{\boldsymbol\mu}$ comes
# out as $\boldsymbol\beta$. At $N=1$ the factor $N/(N-1)$ divides by zero.
# </details>
#
# ### Exercise 4 · `batch_norm_train`
#
# Write `batch_norm_train(x, gamma, beta, running_mean, running_var, momentum=0.1, eps=1e-5)` for `x`
# of shape `(..., d)` with at least two axes and at least two tokens per feature ($N\ge2$), and
# `gamma`, `beta`, `running_mean`, `running_var` of shape `(d,)`. Return a tuple `(y, new_mean, new_var)`:
# `y` exactly as your `batch_norm(x, gamma, beta, eps)` computes it (you may call it), and the new running
# statistics from your rule, float64 arrays of shape `(d,)`. Use the `momentum` you are given.
# **Do not modify any input, `running_mean` and `running_var` included**: return new arrays. (PyTorch
# updates its buffers in place; a function that returns them is easier to test, and the caller keeps
# the old values.) The checks compare `y`, `new_mean` and `new_var` with
# `torch.nn.functional.batch_norm(training=True)` and the running buffers it updates, in float64, and
# allow a relative error of $10^{-7}$ in each, for several momenta, any `eps`, and batches far from
# zero (so compute both variances from the squared deviations, as before).
#
# *Hint:* $N$ is the product of every size but the last: `x.size // x.shape[-1]`.
#
# **Stuck?** `hint("batch_norm_train")`: step 2 after a run of the checks below, step 3 after a
# failed run since step 2.

# %% nbgrader={"grade": false, "grade_id": "batch_norm_train", "locked": false, "schema_version": 3, "solution": true, "task": false}
def batch_norm_train(x, gamma, beta, running_mean, running_var, momentum=0.1, eps=1e-5):
    """One training step of BatchNorm: the output, and the running statistics moved towards the batch's.

    x: (..., d) with at least two axes and N >= 2 tokens per feature; gamma, beta, running_mean,
    running_var: (d,). Returns (y, new_mean, new_var): y as batch_norm(x, gamma, beta, eps) gives it,
    shape (..., d); new_mean, new_var of shape (d,), from the batch's mean and unbiased variance with
    weight momentum. Modifies none of its inputs.
    """
    ### BEGIN SOLUTION
    y = batch_norm(x, gamma=gamma, beta=beta, eps=eps)
    tokens = np.reshape(x, (-1, gamma.shape[0]))
    batch_mean = tokens.mean(axis=0)
    batch_var_unbiased = ((tokens - batch_mean) ** 2).sum(axis=0) / (len(tokens) - 1)
    keep = 1 - momentum
    return y, keep * running_mean + momentum * batch_mean, keep * running_var + momentum * batch_var_unbiased
    ### END SOLUTION


# %% nbgrader={"grade": false, "grade_id": "signature_batch_norm_train", "locked": true, "schema_version": 3, "solution": false, "task": false}
# Locked: tells you if the signature above no longer matches what the tests call.
check_signature(batch_norm_train, "batch_norm_train", "(x, gamma, beta, running_mean, running_var, momentum=0.1, eps=1e-05)")

# %% nbgrader={"grade": true, "grade_id": "test_batch_norm_train", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
"""Checks batch_norm_train's output and new running statistics against torch's batch_norm(training=True)."""
check_batch_norm_train(batch_norm_train)
### BEGIN HIDDEN TESTS
for shape_hidden, seed_hidden in [((2, 3, 2, 4), 41), ((64, 3), 42), ((1, 5, 3), 43), ((2, 1, 6), 44)]:
    check_batch_norm_train(batch_norm_train, shape=shape_hidden, seed=seed_hidden)
check_batch_norm_train(batch_norm_train, shape=(4, 6), seed=45, momentum=0.01)
check_batch_norm_train(batch_norm_train, shape=(3, 4, 5), seed=46, momentum=0.7, eps=1.0, scale=0.2)
check_batch_norm_train(batch_norm_train, shape=(5, 6, 3), seed=47, scale=1e-2, offset=1e4)
check_batch_norm_train(batch_norm_train, shape=(6, 5), seed=48, momentum=0.25, gamma=np.linspace(-1.0, 2.0, 5),
                       beta=np.arange(5.0))
### END HIDDEN TESTS

# %% [markdown]
# ### Exercise 5 · `batch_norm_eval`
#
# Write `batch_norm_eval(x, gamma, beta, running_mean, running_var, eps=1e-5)` for `x` of any shape
# `(..., d)`, a single token of shape `(d,)` included, with the four other arrays of shape `(d,)`. Normalise
# every feature with the running statistics alone ($\epsilon$ inside the square root), then apply the gain
# and shift; return a float64 array shaped like `x`, and modify none of the inputs. Use your answer to
# question 4 above. The checks compare with `torch.nn.functional.batch_norm(training=False)` in float64
# and allow a relative error of $10^{-7}$; they pick running statistics far from the batch's own, so a
# batch statistic anywhere in the formula shows.
#
# **Stuck?** `hint("batch_norm_eval")`: step 2 after a run of the checks below, step 3 after a
# failed run since step 2.

# %% nbgrader={"grade": false, "grade_id": "batch_norm_eval", "locked": false, "schema_version": 3, "solution": true, "task": false}
def batch_norm_eval(x, gamma, beta, running_mean, running_var, eps=1e-5):
    """BatchNorm in evaluation mode: every feature normalised with the running statistics alone.

    x: (..., d), a single token (d,) included; gamma, beta, running_mean, running_var: (d,).
    Returns an array of the same shape as x. No statistic of x enters, and no input is modified.
    """
    ### BEGIN SOLUTION
    scale = gamma / np.sqrt(running_var + eps)
    return (x - running_mean) * scale + beta
    ### END SOLUTION


# %% nbgrader={"grade": false, "grade_id": "signature_batch_norm_eval", "locked": true, "schema_version": 3, "solution": false, "task": false}
# Locked: tells you if the signature above no longer matches what the tests call.
check_signature(batch_norm_eval, "batch_norm_eval", "(x, gamma, beta, running_mean, running_var, eps=1e-05)")

# %% nbgrader={"grade": true, "grade_id": "test_batch_norm_eval", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
"""Checks batch_norm_eval against torch's batch_norm(training=False): (2, 3, 5), (6, 4) with eps = 1, one token (5,)."""
check_batch_norm_eval(batch_norm_eval)
### BEGIN HIDDEN TESTS
for shape_hidden, seed_hidden in [((7,), 51), ((1, 16), 52), ((2, 3, 4, 5), 53), ((3, 1), 54), ((64, 3), 55)]:
    check_batch_norm_eval(batch_norm_eval, shape=shape_hidden, seed=seed_hidden)
check_batch_norm_eval(batch_norm_eval, shape=(4, 6), seed=56, eps=1e-3, scale=1e-2, offset=1e4)
check_batch_norm_eval(batch_norm_eval, shape=(6, 5), seed=57, gamma=np.linspace(-1.0, 2.0, 5), beta=np.arange(5.0))
### END HIDDEN TESTS

# %% [markdown]
# **Predict first.** A freshly created BatchNorm layer ($\overline{\mu}=\mathbf 0$, $\overline{\sigma}^2=\mathbf 1$,
# $\boldsymbol\gamma=\mathbf 1$, $\boldsymbol\beta=\mathbf 0$) is switched to evaluation mode before it has
# seen a single training batch, and given a batch whose features have mean 3 and standard deviation 2.
# What does it output?

# %%
options_fresh_eval = ["the input itself, up to a factor within 1e-5 of 1",
                      "the same as training mode: mean 0, variance 1 per feature",
                      "all zeros"]
guess_fresh_eval = ...  # your guess: copy one of the three strings

# %%
d_act = 16
ones_act, zeros_act = np.ones(d_act), np.zeros(d_act)
fresh_batch = 3.0 + 2.0 * np.random.default_rng(11).standard_normal((4, 8, d_act))
fresh_eval = batch_norm_eval(fresh_batch, ones_act, zeros_act, np.zeros(d_act), np.ones(d_act))
fresh_train, _, _ = batch_norm_train(fresh_batch, ones_act, zeros_act, np.zeros(d_act), np.ones(d_act))
print(f"evaluation mode: largest |y / x - 1| = {np.abs(fresh_eval / fresh_batch - 1).max():.1e}; "
      f"mean of the output {fresh_eval.mean():.2f}, std {fresh_eval.std():.2f}")
print(f"training mode:   mean of the output {fresh_train.mean():.2f}, std {fresh_train.std():.2f}")
identity_like = np.abs(fresh_eval / fresh_batch - 1).max() < 1e-5
answer_fresh = (options_fresh_eval[0] if identity_like else options_fresh_eval[2] if not np.any(fresh_eval)
                else options_fresh_eval[1])
choose(guess_fresh_eval, options_fresh_eval, correct=answer_fresh, name="a fresh layer in evaluation mode")

# %% [markdown]
# <details><summary>Answer</summary>
#
# The input itself, divided by $\sqrt{1+\epsilon}$. With $\overline{\mu}=0$ and $\overline{\sigma}^2=1$ evaluation mode
# is almost the identity: nothing is normalised, the features keep their mean 3 and spread 2. A model
# that is evaluated before its running statistics have caught up sees unnormalised activations, the
# most extreme form of the train and test gap.
# </details>
#
# **Predict first.** How long does catching up take? Train on the *same* batch again and again, with
# momentum 0.1. After how many steps is the running mean's distance to that batch's mean below 1 % of
# its starting distance? (A number of steps.)

# %%
guess_steps_to_forget = ...  # your guess: a number of training steps

# %%
running_mean, running_var = np.zeros(d_act), np.ones(d_act)
start_gap = np.abs(fresh_batch.mean(axis=(0, 1)) - running_mean).max()
steps = 0
while np.abs(fresh_batch.mean(axis=(0, 1)) - running_mean).max() > 0.01 * start_gap:
    _, running_mean, running_var = batch_norm_train(fresh_batch, ones_act, zeros_act, running_mean, running_var)
    steps += 1
print(f"steps until the running mean is within 1 % of the batch mean: {steps};  "
      f"log(0.01) / log(0.9) = {np.log(0.01) / np.log(0.9):.1f}")
compare(guess_steps_to_forget, steps, name="steps to forget the starting value", rel=0.2)

# %% [markdown]
# <details><summary>Answer</summary>
#
# Each step keeps $1-m=0.9$ of the remaining distance, so after $n$ steps $0.9^n$ of it is left, and
# $0.9^n<0.01$ first holds at the first whole $n$ above $\ln 0.01/\ln 0.9\approx43.7$. The running averages remember roughly the
# last $1/m=10$ batches, which is why they track a model whose activations change during training,
# and also why they are only ever an estimate of what any single batch produced.
# </details>
#
# Now train a layer with your `batch_norm_train` for 300 steps on batches of 4 sequences whose mean
# drifts with position, as a residual stream's does, and then show it one of those sequences.
#
# **Predict first.** The same sequence goes through BatchNorm in training mode (inside a batch of 4)
# and in evaluation mode (alone); it also goes through LayerNorm inside the batch and alone. Which of
# the two differences is exactly 0, and is the other below 0.01 or above 0.1? Write your answer
# down, then run the cell.

# %%
def activations(rng, n_seq, T=8, d=16):
    """Toy activations whose mean drifts with position, as a residual stream's does."""
    drift = 0.4 * np.arange(T)[None, :, None] * np.linspace(1.0, -1.0, d)
    return drift + rng.standard_normal((n_seq, T, d))


rng = np.random.default_rng(5)
running_mean, running_var = np.zeros(d_act), np.ones(d_act)
for _ in range(300):                       # training: batches of 4 sequences
    _, running_mean, running_var = batch_norm_train(activations(rng, 4), ones_act, zeros_act, running_mean, running_var)


def bn_eval_plain(a):
    """Your batch_norm_eval with the trained running statistics, gamma = 1 and beta = 0. a: (..., d)."""
    return batch_norm_eval(a, ones_act, zeros_act, running_mean, running_var)


sequence = activations(rng, 1)
batch = np.concatenate([sequence, activations(rng, 3)])
seen_in_training = bn_plain(batch)[:1]     # what this sequence produced inside a training batch
eval_mode = bn_eval_plain(sequence)
print(f"BatchNorm, same sequence, training mode vs evaluation mode: max difference "
      f"{np.abs(seen_in_training - eval_mode).max():.3f}")
print(f"LayerNorm, same sequence, inside a batch vs alone:          max difference "
      f"{np.abs(ln_plain(batch)[:1] - ln_plain(sequence)).max():.3f}")

# %% [markdown]
# Now generate the sequence one token at a time, as a language model does. There are two ways
# BatchNorm could normalise the new token, and neither reproduces what the model saw in
# training: the running averages (your `batch_norm_eval`), or the statistics of the prefix generated
# so far (training mode on a growing batch of one sequence). For each position we measure how far
# the output is from the one the same token had during training.
#
# **Predict first.** At the first position the prefix is one token. What does training mode on a
# batch of one token output, whatever the token? (Section 3's formula with $N=1$ answers it.)

# %%
T_gen = sequence.shape[1]
gaps = {"BatchNorm, running averages": np.zeros(T_gen), "BatchNorm, statistics of the prefix": np.zeros(T_gen),
        "LayerNorm": np.zeros(T_gen)}
for t in range(T_gen):
    prefix = sequence[:, : t + 1]
    gaps["BatchNorm, running averages"][t] = np.abs(bn_eval_plain(prefix)[0, t] - seen_in_training[0, t]).max()
    gaps["BatchNorm, statistics of the prefix"][t] = np.abs(bn_plain(prefix)[0, t] - seen_in_training[0, t]).max()
    gaps["LayerNorm"][t] = np.abs(ln_plain(prefix)[0, t] - ln_plain(batch)[0, t]).max()
print("first generated token, normalised with its own statistics only:", bn_plain(sequence[:, :1])[0, 0, :6], "...")
generation_gap_figure(gaps)

# %% [markdown]
# The first token of a prefix is a batch of one token: its variance is zero and BatchNorm turns
# it into all zeros (into $\boldsymbol\beta$, in general), erasing it. The running averages are
# closer but still differ from what training produced, because in training each token was
# normalised with the statistics of whatever batch it happened to be in. LayerNorm's gap is zero
# at every position: with or without the batch, with or without the future, it computes the same
# function.
#
# ## 7. Failure 3: small, ragged batches
#
# **Padding.** Sequences in a batch have different lengths, so the short ones are padded, here
# with zeros, up to the longest. BatchNorm counts the padding in its statistics, so the output of
# a *real* token depends on how much padding its batch happens to contain.

# %%
rng = np.random.default_rng(6)
lengths = [8, 5, 2]
real = [1.0 + rng.standard_normal((n, 16)) for n in lengths]   # real tokens, mean about 1


def pad(sequences, T_pad):
    """Stack sequences (n_i, d) into (len, T_pad, d), filling the gaps with zeros."""
    out = np.zeros((len(sequences), T_pad, sequences[0].shape[-1]))
    for i, s in enumerate(sequences):
        out[i, : len(s)] = s
    return out


for name, norm in [("BatchNorm", bn_plain), ("LayerNorm", ln_plain)]:
    out8, out12 = norm(pad(real, 8)), norm(pad(real, 12))
    moved = max(np.abs(out8[i, :n] - out12[i, :n]).max() for i, n in enumerate(lengths))
    print(f"{name}: real tokens, padded to 8 vs to 12: max change {moved:.3f}")
print(f"mean of feature 0 over real tokens: {np.concatenate(real)[:, 0].mean():.3f}; "
      f"over the batch padded to 8: {pad(real, 8)[..., 0].mean():.3f}, to 12: {pad(real, 12)[..., 0].mean():.3f}")

# %% [markdown]
# One could mask the padding out of the statistics, and some codebases do. LayerNorm needs no
# mask: a pad token is normalised by itself and never touches a real one.
#
# **Batch size.** Batch statistics are estimates, and small batches make noisy estimates. Below,
# one fixed token sits at position 0 of a batch whose other tokens are drawn afresh each time; we
# record how much its normalised output varies from batch to batch, for 1 to 32 sequences of 8
# tokens per batch.
#
# **Predict first.** Going from 1 sequence per batch to 32, by what factor does the spread of the
# token's BatchNorm output shrink? (A number: 2 would mean half the spread.)

# %%
guess_spread_ratio = ...  # your guess: spread at 1 sequence / spread at 32 sequences

# %%
rng = np.random.default_rng(7)
token = rng.standard_normal(16)
batch_sizes = [1, 2, 4, 8, 16, 32]
repeats = 25 if QUICK else 200


def spread(outputs):
    """Std over batches of each feature of the token's output, averaged; 0 if all outputs are identical."""
    outputs = np.array(outputs)
    return 0.0 if np.all(outputs == outputs[0]) else float(np.std(outputs, axis=0).mean())


spreads = {"BatchNorm": [], "LayerNorm": []}
for B_size in batch_sizes:
    outputs = {"BatchNorm": [], "LayerNorm": []}
    for _ in range(repeats):
        context = rng.standard_normal((B_size, 8, 16))
        context[0, 0] = token
        outputs["BatchNorm"].append(bn_plain(context)[0, 0])
        outputs["LayerNorm"].append(ln_plain(context)[0, 0])
    for name in spreads:
        spreads[name].append(spread(outputs[name]))
print("spread of the token's BatchNorm output:", np.round(spreads["BatchNorm"], 3))
print("spread of the token's LayerNorm output:", spreads["LayerNorm"])
print("a batch holding this one token only, BatchNorm output:", bn_plain(token[None, None])[0, 0, :6], "...")
spread_figure(batch_sizes, spreads, tokens_per_sequence=8)

# %%
spread_ratio = spreads["BatchNorm"][0] / spreads["BatchNorm"][-1]
print(f"spread at 1 sequence / spread at 32 sequences: {spread_ratio:.2f};  sqrt(32) = {np.sqrt(32):.2f}")
compare(guess_spread_ratio, spread_ratio, name="shrink factor of the spread from B = 1 to B = 32", rel=0.2)

# %% [markdown]
# <details><summary>Answer</summary>
#
# About $\sqrt{32}\approx5.7$, not 32. The batch mean and variance are averages over $8B$ tokens, and
# the error of an average falls like one over the square root of the number of terms: 32 times the
# tokens buys only about 5.7 times less noise. The measured factor comes out a little larger, because
# the square-root law only holds approximately when a batch has as few as 8 tokens.
# </details>
#
# With one sequence per batch the same token's output changes substantially from batch to batch,
# and the noise only falls like $1/\sqrt{B}$. In large-model training the batch a single device
# sees can be a handful of sequences, so that noise never goes away. A batch of one token is the
# extreme: the output is $\boldsymbol\beta$ whatever the token was. LayerNorm's spread is exactly
# zero at every batch size.
#
# ## 8. The normalisation menu
#
# | | averages over | removes | same in training and inference | parameters | typical use |
# |---|---|---|---|---|---|
# | **BatchNorm** (Ioffe & Szegedy, 2015) | the batch (and spatial positions), per feature | each feature's mean and scale | no: running averages at test time | $2d$, plus $2d$ running statistics | ConvNets (ResNet) |
# | **LayerNorm** (Ba, Kiros & Hinton, 2016) | one token's features | the token's mean and scale | yes | $2d$ | Transformers (BERT, GPT-2, GPT-3) |
# | **RMSNorm** (Zhang & Sennrich, 2019) | one token's features, root mean square only | the token's scale | yes | $d$ | recent LLMs (T5, LLaMA, Mistral, Gemma) |
# | **GroupNorm** (Wu & He, 2018) | one example's group of channels, and its spatial positions | each group's mean and scale | yes | $2d$ | vision models trained with small batches |
#
# GroupNorm splits the $d$ channels into groups and averages, for each example, over one group and
# all spatial positions. With one group it is LayerNorm over (channels × positions); with one
# channel per group it is InstanceNorm. Wu & He designed it for detection and segmentation, where
# memory limits the batch to a few images and BatchNorm's statistics become unreliable. Note that
# it averages over positions: fine for an image, a leak in a causal sequence model, which is why
# the right-hand picture below matters.

# %%
axis_picture(("group", "time"), shape=(3, 5, 6))

# %% [markdown]
# The rule behind the menu: **pick the axis whose statistics you can trust.** A ConvNet for
# classification gets large batches of independent images, so statistics over the batch are
# stable and harmless. A Transformer has no such axis except the features: the batch is small
# and ragged, and the positions include the future. Averaging over one token's features is the
# only choice that is reliable, private to the token and identical at training and inference.
#
# ## 9. In PyTorch
#
# `torch.nn.LayerNorm(d)` holds $\boldsymbol\gamma$ as `weight` and $\boldsymbol\beta$ as `bias`, with
# $\epsilon=10^{-5}$ by default. We give it random parameters and compare it with your function in
# float64, so any difference is a formula difference and not rounding.

# %%
import torch  # imported here: only this section needs it

rng = np.random.default_rng(8)
x_np = rng.standard_normal((2, 3, 8))
ln_torch = torch.nn.LayerNorm(8, dtype=torch.float64)
with torch.no_grad():
    ln_torch.weight.copy_(torch.tensor(rng.standard_normal(8)))
    ln_torch.bias.copy_(torch.tensor(rng.standard_normal(8)))
    y_torch = ln_torch(torch.tensor(x_np)).numpy()
y_mine = layernorm(x_np, ln_torch.weight.detach().numpy(), ln_torch.bias.detach().numpy())
print(f"max |layernorm - nn.LayerNorm| = {np.abs(y_mine - y_torch).max():.1e}")
print("nn.LayerNorm(8) parameters:", sum(p.numel() for p in ln_torch.parameters()), "(2d), buffers:",
      len(list(ln_torch.buffers())))

# %% [markdown]
# **The `torch.var` trap.** `torch.var` (like `Tensor.var`) divides by $n-1$ by default; pass
# `correction=0` to get the biased variance LayerNorm uses. NumPy's `np.var` is biased by default.
# A LayerNorm written with the default is off by a factor of about $\sqrt{(d-1)/d}$, largest for
# small $d$.

# %%
x_t = torch.tensor(x_np)
print("torch.var default:", torch.var(x_t[0, 0]).item(), "  correction=0:", torch.var(x_t[0, 0], correction=0).item(),
      "  np.var:", np.var(x_np[0, 0]))
centred_t = x_t - x_t.mean(dim=-1, keepdim=True)
unbiased_ln = centred_t / torch.sqrt(torch.var(x_t, dim=-1, keepdim=True) + 1e-5)
ratio = (unbiased_ln / torch.nn.functional.layer_norm(x_t, (8,))).numpy()
print(f"ratio to F.layer_norm: {ratio.min():.5f} .. {ratio.max():.5f};  sqrt((d-1)/d) = {np.sqrt(7 / 8):.5f}")

# %% [markdown]
# **BatchNorm in PyTorch.** `nn.BatchNorm1d(C)` expects channels on axis 1, `(N, C)` or `(N, C, L)`,
# so a `(B, T, d)` tensor must be transposed to `(B, d, T)` first; given `(B, T, d)` directly it
# treats the $T$ positions as channels. In training mode it matches your `batch_norm`, and its buffers
# `running_mean` and `running_var` move exactly as your `batch_norm_train` moves them; after `.eval()`
# the same input gives a different output, your `batch_norm_eval`'s; and it refuses to train on a single
# value per channel.

# %%
bn_torch = torch.nn.BatchNorm1d(8, dtype=torch.float64)     # training mode by default
with torch.no_grad():
    y_train = bn_torch(x_t.transpose(1, 2)).transpose(1, 2).numpy()
    print(f"max |batch_norm - nn.BatchNorm1d (train)| = {np.abs(bn_plain(x_np) - y_train).max():.1e}")
    _, mine_mean, mine_var = batch_norm_train(x_np, np.ones(8), np.zeros(8), np.zeros(8), np.ones(8))
    buffers_gap = max(np.abs(mine_mean - bn_torch.running_mean.numpy()).max(),
                      np.abs(mine_var - bn_torch.running_var.numpy()).max())
    print(f"running_mean, running_var after that step: max difference from your batch_norm_train {buffers_gap:.1e}")
    try:
        bn_torch(x_t)
    except RuntimeError as error:
        print("given (B, T, d) directly:", str(error).splitlines()[0])
    bn_torch.eval()
    y_eval = bn_torch(x_t.transpose(1, 2)).transpose(1, 2).numpy()
    print(f"same input after .eval(): max difference from training mode {np.abs(y_eval - y_train).max():.3f}, "
          f"from your batch_norm_eval "
          f"{np.abs(y_eval - batch_norm_eval(x_np, np.ones(8), np.zeros(8), mine_mean, mine_var)).max():.1e}")
    bn_torch.train()
    try:
        bn_torch(torch.ones(1, 8, dtype=torch.float64))
    except ValueError as error:
        print("one token in training mode:", error)

# %% [markdown]
# ## 10. Self-test
#
# **(a)** With $\boldsymbol\gamma=\mathbf 1$ and $\boldsymbol\beta=\mathbf 0$, every token of your
# LayerNorm's output should have mean 0 and variance 1 along the last axis: exactly
# $\sigma^2/(\sigma^2+\epsilon)$, a hair below 1.

# %%
x_self = 2.0 + 3.0 * np.random.default_rng(9).standard_normal((4, 7, 512))
y_self = layernorm(x_self, np.ones(512), np.zeros(512))
print(f"largest |mean| over the last axis:         {np.abs(y_self.mean(axis=-1)).max():.1e}")
print(f"largest |variance - 1| over the last axis: {np.abs(y_self.var(axis=-1) - 1).max():.1e}")
print(f"predicted from eps / (var + eps):          {np.max(1e-5 / (x_self.var(axis=-1) + 1e-5)):.1e}")

# %% [markdown]
# **(b)** In one sentence each, why does BatchNorm fail for (i) variable-length padded
# sequences, (ii) a batch of one, (iii) the prediction at token $t$ of an autoregressive model?
#
# <details><summary><b>Answers</b></summary>
#
# (i) The padding enters the batch statistics, so a real token's output depends on how much
# padding its batch contains (section 7).
# (ii) With one example the statistics come from that example alone, a noisy estimate that is
# different for every input, and with a single token the variance is zero and the output is
# $\boldsymbol\beta$ whatever the input.
# (iii) The statistics average over all positions, so the output at $t$ depends on tokens after $t$:
# the model learns to read a future that does not exist at generation time (sections 4 and 5).
# </details>
#
# **(c)** A LayerNorm has $d=4096$ features. How many learnable parameters does it have, and what
# share of the weights does it hold next to the `Linear(4096, 4096)` that follows it?

# %%
d_model = 4096
ln_params = sum(p.numel() for p in torch.nn.LayerNorm(d_model, device="meta").parameters())
linear_params = sum(p.numel() for p in torch.nn.Linear(d_model, d_model, device="meta").parameters())
print(f"LayerNorm({d_model}): {ln_params:,} parameters (gamma and beta, 2d)")
print(f"Linear({d_model}, {d_model}): {linear_params:,} parameters (weight d*d plus bias d)")
print(f"the LayerNorm's share of the pair: {ln_params / (ln_params + linear_params):.4%}")

# %% [markdown]
# Normalisation is nearly free in parameters; what it costs is memory traffic ([notebook 04](04_rmsnorm.ipynb) on
# RMSNorm returns to this).
#
# ## 11. Interview questions
#
# Try each one aloud before you reveal the answer.
#
# <details><summary><b>Why do Transformers use LayerNorm rather than BatchNorm?</b></summary>
#
# LayerNorm's statistics come from one token's own features, so the output of a token does not
# depend on the batch, on other sequences, or on other positions. BatchNorm averages each feature
# over the batch and all positions, which leaks later tokens into earlier ones in a causal model,
# makes the output depend on padding and on batch size (noisy for the small per-device batches of
# language model training), and needs running averages at inference, so training and generation
# compute different functions. LayerNorm computes the same function in all of these situations,
# including one token at a time.
# </details>
#
# <details><summary><b>Your small causal LM's training loss is suspiciously low, but its samples are garbage. What normalisation bug does exactly this?</b></summary>
#
# Statistics taken over the time axis: BatchNorm over positions, or a mean or variance with the
# wrong `axis`. Each position's output then contains information about later tokens, the model
# learns to read it under teacher forcing, and the loss drops below what the data allows. At
# generation the future does not exist, so the samples fall apart. To find it, check every
# reduction axis and run a causality test: change the tokens after $t$ and assert that the outputs
# at positions $\le t$ are bit-for-bit unchanged.
# </details>
#
# <details><summary><b>What changes between <code>model.train()</code> and <code>model.eval()</code> for BatchNorm and for LayerNorm?</b></summary>
#
# BatchNorm switches from the statistics of the current batch (updating its running averages) to
# the stored running averages, so the same input can give a different output. LayerNorm has no
# mode and no buffers: its statistics always come from the token itself. (Dropout also changes
# with the mode; that is a separate matter.)
# </details>
#
# <details><summary><b>What happens if you pass a <code>(B, T, d)</code> tensor to <code>nn.BatchNorm1d(d)</code>?</b></summary>
#
# `BatchNorm1d` takes channels on axis 1, so it treats the $T$ positions as channels: it fails with a
# size mismatch when $T\ne d$ and, worse, runs silently over the wrong axes when $T=d$. Transpose to
# `(B, d, T)`, or use `nn.LayerNorm(d)`, which normalises the last axis.
# </details>
#
# <details><summary><b>How many parameters and buffers does <code>nn.LayerNorm(d)</code> have, and where do they apply?</b></summary>
#
# $2d$ parameters, $\boldsymbol\gamma$ (`weight`) and $\boldsymbol\beta$ (`bias`), shared by every token,
# and no buffers. BatchNorm has the same $2d$ parameters plus two buffers of $d$ running
# statistics; RMSNorm has only the $d$ gains.
# </details>
#
# <details><summary><b>When would you still choose BatchNorm or GroupNorm?</b></summary>
#
# BatchNorm suits ConvNets trained on large batches of independent images, where batch statistics
# are stable and no causality constraint exists; at inference it can even be folded into the
# preceding convolution. When memory limits the batch to a few images (detection, segmentation),
# GroupNorm (Wu & He, 2018) removes the batch dependence by averaging over groups of channels and
# spatial positions of each example.
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
# - BatchNorm averages each feature over the batch (and positions); LayerNorm averages each
#   token over its own features. In training mode: same formula, different axes; the axes decide everything.
# - Statistics over positions leak the future. Under teacher forcing the model exploits the leak,
#   the loss looks too good, and generation fails. Test causality by changing tokens after $t$ and
#   checking that outputs at positions $\le t$ are *exactly* unchanged.
# - BatchNorm computes different functions in training and inference: training normalises with the
#   batch's statistics and moves the running averages towards them (PyTorch: weight $m=0.1$ on the new
#   batch, unbiased variance stored); evaluation uses the running averages alone. Its outputs also
#   depend on padding and on batch size; a batch of one token comes out as $\boldsymbol\beta$.
# - LayerNorm: mean and **biased** variance over the last axis (`keepdims=True`), $\epsilon$ **inside**
#   the square root, $2d$ parameters, identical at training and inference.
# - `torch.var` divides by $n-1$ by default; `np.var` by $n$. `nn.BatchNorm1d` wants channels on axis 1.
# - Pick the axis whose statistics you can trust: for Transformers, the features of each token.
#
# *References:* Ioffe & Szegedy (2015), *Batch Normalization: Accelerating Deep Network Training by
# Reducing Internal Covariate Shift*. Ba, Kiros & Hinton (2016), *Layer Normalization*.
# Wu & He (2018), *Group Normalization*. Zhang & Sennrich (2019), *Root Mean Square Layer
# Normalization*.
#
# Next: [02 · The geometry of LayerNorm: a projection, then a sphere](02_geometry.ipynb)
