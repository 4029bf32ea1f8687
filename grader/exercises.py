"""The graded exercises of the course, as data: which notebook, which checks, two hints.

One entry per graded solution cell of ``source/`` (``tests/unit/test_hints.py`` derives the list
from there and compares). Each exercise names

- ``checks``: the public checks its visible test cells call (``grader.checks.<module>``);
- ``hidden_checks``: checks that only its hidden tests call (a learner may still run them);
- ``concept``: step 1 of the hint ladder (``grader.learner.hint``): the idea, in words;
- ``shape``: step 3: the structure of the code in words (which quantities, in which order,
  reductions over which axis), never code a learner could copy.

Importing this module is cheap: it loads neither numpy nor the checks.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Exercise:
    name: str
    notebook: str
    checks: tuple
    concept: str
    shape: str
    hidden_checks: tuple = ()

    @property
    def check_module(self) -> str:
        """The module that defines this exercise's checks."""
        return "grader.checks." + CHECK_MODULES[self.notebook]

    @property
    def all_checks(self) -> tuple:
        return self.checks + self.hidden_checks


CHECK_MODULES = {
    "01_bn_vs_ln": "bn_vs_ln",
    "02_geometry": "geometry",
    "03_backward": "backward",
    "04_rmsnorm": "rmsnorm",
    "05_placement": "placement",
    "06_welford": "welford",
}

_ALL = [
    # ------------------------------------------------------------------ 01 · why not BatchNorm
    Exercise(
        "layernorm", "01_bn_vs_ln", ("check_layernorm",),
        concept=(
            "LayerNorm standardises every token on its own. The mean and the spread come from the d features "
            "of that one token (the last axis), never from other tokens or other sequences. The spread is the "
            "biased variance (divide by d, not d - 1), epsilon is added to the variance before the square root, "
            "and only then do the per-feature gain and shift apply."),
        shape=(
            "1. For every token, its mean over the last axis, kept as a length-1 axis so that it lines up with x.\n"
            "2. The deviations of x from that mean, as a new array (x itself stays untouched).\n"
            "3. The mean of the squared deviations over the last axis, kept the same way: the biased variance.\n"
            "4. The scale: the square root of the variance plus eps.\n"
            "5. The deviations divided by the scale, multiplied by gamma, plus beta.\n"
            "Nothing in it may depend on how many leading axes x has: a single token of shape (d,) works too."),
    ),
    Exercise(
        "batch_norm", "01_bn_vs_ln", ("check_batch_norm",),
        concept=(
            "BatchNorm in training mode exchanges the roles of the axes: every feature (the last axis) gets one "
            "mean and one variance, computed over every token of the batch, that is over all the other axes at "
            "once. The same biased variance, the same epsilon inside the square root, then the gain and shift of "
            "that feature."),
        shape=(
            "1. The list of every axis except the last one.\n"
            "2. The mean of x over all of those axes together: one number per feature.\n"
            "3. The biased variance over the same axes, from the deviations to that mean.\n"
            "4. The deviations divided by the square root of variance plus eps, times gamma, plus beta.\n"
            "Per-feature statistics of shape (d,) line up with the last axis of x without any reshaping."),
    ),
    Exercise(
        "leaks_future", "01_bn_vs_ln", ("check_leaks_future",),
        concept=(
            "A function is causal when its outputs at positions 0..t depend only on its inputs at positions "
            "0..t. The probe runs the function twice, on x and on a copy that differs only after position t, and "
            "asks whether any earlier output moved at all: an exact comparison, not a tolerance. When t is the "
            "last position there is no future, so nothing can leak."),
        shape=(
            "1. A copy of x (x itself is never changed).\n"
            "2. In the copy, change every token after position t (time is axis 1) by an amount that cannot be "
            "zero.\n"
            "3. Apply norm to the original and to the changed copy.\n"
            "4. From both outputs keep positions 0 to t, position t included.\n"
            "5. Return one bool: whether the two kept parts differ anywhere, compared exactly."),
    ),
    Exercise(
        "batch_norm_train", "01_bn_vs_ln", ("check_batch_norm_train",),
        concept=(
            "A training step does two things. Its output is BatchNorm in training mode, with the batch's own mean "
            "and biased variance per feature. Beside it, the running statistics move part of the way towards the "
            "batch's: the new value keeps one minus momentum of the old one and adds momentum times the batch "
            "statistic, the momentum being the weight of the new batch (PyTorch's convention). The running "
            "variance is fed the unbiased batch variance, divided by N minus one. The inputs stay untouched: the "
            "new running statistics are new arrays, returned with the output."),
        shape=(
            "1. The leading axes, and N, the number of tokens per feature.\n"
            "2. The batch mean and the biased batch variance per feature, over the leading axes.\n"
            "3. The output, exactly as in your training-mode BatchNorm (calling it is fine).\n"
            "4. The unbiased batch variance: the biased one times N over N minus one.\n"
            "5. The new running mean and the new running variance, each a weighted sum of the old value and the "
            "batch statistic, as new arrays of shape (d,).\n"
            "6. Return the output and the two new running statistics, in that order."),
    ),
    Exercise(
        "batch_norm_eval", "01_bn_vs_ln", ("check_batch_norm_eval",),
        concept=(
            "Evaluation mode freezes the statistics: every feature is normalised with the running mean and the "
            "running variance it was given, epsilon inside the square root, then the gain and shift apply. "
            "Nothing is computed from the batch itself, so a single token works and the output for one token "
            "does not depend on the others. Nothing is updated either."),
        shape=(
            "1. The scale per feature: the square root of the running variance plus eps.\n"
            "2. x minus the running mean, divided by that scale; both have shape (d,) and line up with the last "
            "axis of x.\n"
            "3. Times gamma, plus beta. No reduction over x anywhere."),
    ),
    # ------------------------------------------------------------------ 02 · geometry
    Exercise(
        "complement_projection", "02_geometry", ("check_complement_projection",),
        concept=(
            "Removing a set of directions from every vector is a linear map: the orthogonal projection onto the "
            "complement of the span of V's columns. It is symmetric and idempotent, sends every column of V to "
            "zero and keeps d - r dimensions, r being the number of independent columns. With an orthonormal "
            "basis of the span it is the identity minus the sum of the outer products of the basis vectors; the "
            "columns of V themselves are in general neither of unit length, nor orthogonal, nor independent."),
        shape=(
            "1. Turn the columns of V into an orthonormal basis of their span, one column at a time: take the "
            "column, subtract its components along the basis vectors you already have, and keep what is left, "
            "divided by its length, only if its length is not negligible (a tolerance relative to the size of V).\n"
            "2. Add up the outer products of the basis vectors with themselves: the projection onto the span.\n"
            "3. The d-by-d identity minus that sum, in float64 (for a V with no direction left to remove, the "
            "identity itself)."),
    ),
    Exercise(
        "invariance_gap", "02_geometry", ("check_invariance_gap",),
        concept=(
            "The gap measures how far the output of norm moves when its input is scaled by a and shifted by c: "
            "the largest absolute difference, over every entry of every token, between norm of the transformed "
            "input and norm of the original one. Zero for an invariant map."),
        shape=(
            "1. The transformed input: a times x, plus c in every entry, as a new array (x unchanged).\n"
            "2. norm applied to the transformed input and to x.\n"
            "3. The absolute difference of the two outputs, entry by entry.\n"
            "4. Its largest value over all entries (every axis at once), returned as a Python float."),
    ),
    # ------------------------------------------------------------------ 03 · backward
    Exercise(
        "layer_norm_jacobian", "03_backward", ("check_layer_norm_jacobian", "check_jacobian_is_projection"),
        concept=(
            "Differentiate x_hat = (x - mu) / s with respect to every input. Besides the numerator, two things "
            "depend on x: the mean mu, which contributes the centring projection, and the scale s, which "
            "contributes a rank-one term along x_hat itself. The Jacobian is symmetric: the centring projection "
            "minus that rank-one term, all divided by s, with epsilon inside s."),
        shape=(
            "1. d, the mean and the biased variance of the token, and s, the square root of variance plus eps.\n"
            "2. x_hat, the centred token divided by s.\n"
            "3. Three d-by-d terms: the identity, the constant matrix with every entry 1/d, and the outer product "
            "of x_hat with itself divided by d.\n"
            "4. The identity minus the other two, everything divided by s."),
    ),
    Exercise(
        "layer_norm_vjp", "03_backward", ("check_layer_norm_vjp",), hidden_checks=("check_vjp_memory",),
        concept=(
            "Never build the matrix. The Jacobian is symmetric, so its transpose times g is the Jacobian times g, "
            "and multiplying its three terms by g one at a time leaves two reductions over the features: the "
            "mean of g and the mean of g times x_hat. Remove both components from g and divide by s: time "
            "and memory linear in d."),
        shape=(
            "1. s and x_hat of the token, as in the forward pass.\n"
            "2. Two numbers: the mean of g, and the mean of the entrywise product of g and x_hat.\n"
            "3. g, minus the first number, minus the second number times x_hat.\n"
            "4. That vector divided by s. No array of shape (d, d) anywhere."),
    ),
    Exercise(
        "layer_norm_backward", "03_backward", ("check_layer_norm_backward",),
        concept=(
            "Every token has its own mean and scale, and gets the vector-Jacobian product of exercise 2 with "
            "g = gamma times the incoming gradient. gamma and beta are shared by all tokens, so their gradients "
            "add up one contribution per token: a sum over every leading axis (batch and position)."),
        shape=(
            "1. Per-token s and x_hat, with every reduction over the last axis kept as a length-1 axis.\n"
            "2. g: gamma times dy.\n"
            "3. dx: g minus its per-token mean, minus the per-token mean of g times x_hat multiplied by x_hat, "
            "all divided by s.\n"
            "4. dgamma: dy times x_hat, summed over every axis except the last.\n"
            "5. dbeta: dy summed over the same axes. Return the three, dx first."),
    ),
    # ------------------------------------------------------------------ 04 · RMSNorm
    Exercise(
        "rms_norm", "04_rmsnorm", ("check_rms_norm",),
        concept=(
            "RMSNorm keeps only the division of LayerNorm: every token is divided by its root mean square, the "
            "square root of the mean of the squares of its features plus epsilon, then multiplied by gamma. No "
            "mean is subtracted, no shift is added, epsilon is inside the square root, and the result keeps the "
            "dtype of x."),
        shape=(
            "1. The squares of the entries of x.\n"
            "2. Their mean over the last axis, kept as a length-1 axis: one mean square per token.\n"
            "3. Plus eps, then the square root: r, one per token.\n"
            "4. x divided by r, multiplied by gamma.\n"
            "5. If any step widened the dtype (a float64 gamma with a float32 x), convert the result back to the "
            "dtype of x."),
    ),
    Exercise(
        "rms_norm_backward", "04_rmsnorm", ("check_rms_norm_backward",),
        concept=(
            "Start from the backward pass of LayerNorm and delete every term that came from the mean: with "
            "g = gamma times dy, dx is g minus (the mean of g times x_hat) times x_hat, divided by r. dgamma "
            "collects dy times x_hat from every token."),
        shape=(
            "1. Recompute r and x_hat exactly as the forward pass does.\n"
            "2. g: gamma times dy.\n"
            "3. Per token, the mean of g times x_hat over the last axis, kept as a length-1 axis.\n"
            "4. dx: g minus that mean times x_hat, divided by r.\n"
            "5. dgamma: dy times x_hat, summed over every axis except the last.\n"
            "6. Both in the dtype of x, returned as a tuple (dx, dgamma)."),
    ),
    Exercise(
        "rms_norm_bf16", "04_rmsnorm", ("check_rms_norm_bf16",),
        concept=(
            "A bfloat16 model keeps its activations in 8 significant bits, too few for a sum of d squares. So the "
            "norm upcasts: the token goes to float32, the mean square, r and the normalised token are computed "
            "there, and only the result is rounded back to bfloat16. The gain is applied either in float32 before "
            "that rounding or to the rounded result in bfloat16; both are accepted."),
        shape=(
            "1. Keep the given first line: x and gamma become bfloat16 tensors.\n"
            "2. A float32 copy of x.\n"
            "3. From that copy: the mean of the squares over the last dim, kept as a length-1 dim, plus eps, then "
            "the reciprocal square root (or the square root to divide by): still float32.\n"
            "4. The float32 copy times that factor: the normalised token, in float32.\n"
            "5. Either multiply by gamma in float32 and convert to bfloat16, or convert to bfloat16 and multiply by "
            "the bfloat16 gamma. Call the bfloat16 result y; the given last line returns it."),
    ),
    # ------------------------------------------------------------------ 05 · placement
    Exercise(
        "residual_sublayer", "05_placement", ("check_residual_sublayer", "check_residual_sublayer_rejects"),
        concept=(
            "The three placements differ only in where the norm sits next to the residual addition: pre-LN "
            "normalises what F reads, post-LN normalises the sum, the output norm normalises what F writes. F is "
            "called exactly once, x is never modified, and a mode that is not exactly one of the three strings "
            "is an error, not a guess."),
        shape=(
            "Compare mode with each of the three strings in turn. In each branch build that one composition, "
            "with a single call of F and a single call of norm, and return it straight away. After the three "
            "branches, raise a ValueError whose message lists the three valid modes."),
    ),
    Exercise(
        "qk_norm_logits", "05_placement", ("check_qk_norm_logits",),
        concept=(
            "QK-norm puts every query and every key of a head on the same length before they meet: each vector is "
            "divided by its own root mean square (over its d_k features, plus eps inside the root, no centring), "
            "then multiplied feature by feature by its side's gain. The logits are then ordinary attention "
            "logits: one dot product per query and key, divided by the square root of d_k, queries along the "
            "rows."),
        shape=(
            "1. d_k, the length of the last axis.\n"
            "2. The queries divided by their root mean square over the last axis (kept as a length-1 axis), "
            "times g_q; the same for the keys with g_k.\n"
            "3. The product of the normalised queries with the normalised keys whose last two axes are swapped "
            "(only those two, so batch axes stay where they are).\n"
            "4. Divided by the square root of d_k."),
    ),
    # ------------------------------------------------------------------ 06 · Welford
    Exercise(
        "welford_mean_var", "06_welford", ("check_welford_mean_var", "check_welford_one_pass"),
        concept=(
            "Read the data once, keeping three numbers: the count so far, the running mean, and M2, the sum of "
            "squared deviations from the running mean. Each element updates them through its deviation from the "
            "previous mean, so nothing of the size of the mean squared is ever formed and nothing large cancels. "
            "The biased variance is M2 divided by the count."),
        shape=(
            "1. Start from a count of 0, a mean of 0 and an M2 of 0.\n"
            "2. One loop over the elements, in order. Inside it: increase the count; take the deviation of the "
            "element from the old mean; move the mean by that deviation divided by the count; add the deviation "
            "times (the element minus the new mean) to M2.\n"
            "3. After the loop: the mean, and M2 divided by the count, both as Python floats.\n"
            "No list of the elements, no second pass, no whole-array operation."),
    ),
    Exercise(
        "welford_combine", "06_welford", ("check_welford_combine",),
        concept=(
            "Two partial results merge with the formula of Chan, Golub and LeVeque: the counts add; the mean "
            "moves from the first chunk's mean towards the second one's by the fraction n_B / n of their "
            "difference; M2 is the spread within each chunk plus the spread between the two means, delta squared "
            "times n_A n_B / n. An empty partial changes nothing."),
        shape=(
            "1. Unpack both partials into their count, mean and M2.\n"
            "2. If either count is zero, return the other partial as it is.\n"
            "3. The total count, and delta: the second mean minus the first.\n"
            "4. The merged mean and the merged M2, from the formula of section 5.\n"
            "5. Return the triple (count, mean, M2) with plain arithmetic, no conversion to float, so that "
            "arrays of means work too."),
    ),
]

EXERCISES: dict[str, Exercise] = {e.name: e for e in _ALL}
NOTEBOOKS = tuple(CHECK_MODULES)
# check name -> exercise name (every check belongs to exactly one exercise)
CHECK_TO_EXERCISE: dict[str, str] = {c: e.name for e in _ALL for c in e.all_checks}


def get(name: str) -> Exercise | None:
    return EXERCISES.get(name)


def for_notebook(notebook: str) -> list[Exercise]:
    """The exercises of one notebook, in the order the notebook asks for them."""
    return [e for e in _ALL if e.notebook == notebook]


def of_check(check_name) -> Exercise | None:
    """The exercise a public check tests, e.g. ``"check_welford_one_pass"`` -> welford_mean_var."""
    name = CHECK_TO_EXERCISE.get(check_name) if isinstance(check_name, str) else None
    return EXERCISES.get(name) if name else None
