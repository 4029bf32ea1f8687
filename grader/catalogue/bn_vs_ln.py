"""Misconceptions of 01_bn_vs_ln: layernorm (ln.), batch_norm and its running statistics (bn.), the probe (causal.).

In the order grader.checks.bn_vs_ln tests for them.
"""
from grader.catalogue import entry

_LN, _BN = "LayerNorm", "BatchNorm"


def _forward(prefix: str, kind: str) -> list:
    """The mistakes layernorm and batch_norm share, worded for ``kind``."""
    return [
        entry(f"{prefix}.unbiased_variance", "Unbiased variance (n - 1)",
              f"{kind} divides the sum of squared deviations by the number of values n, not by n - 1.",
              "Count the values each statistic averages over, and divide by that count itself.",
              "Carried over from statistics courses and from torch.var's default; the output is off by "
              "sqrt((n-1)/n), visible only for small groups."),
        entry(f"{prefix}.naive_variance", "Variance as mean of squares minus squared mean",
              "E[x²] − μ² cancels catastrophically when the mean is large next to the spread; the two-pass "
              "formula, the mean of squared deviations, does not.",
              "Subtract the mean first, then average the squares of what is left.",
              "Algebraically right, numerically wrong for offset data; only a large-offset test shows it "
              "(notebook 06 returns to it)."),
        entry(f"{prefix}.eps_outside_sqrt", "Epsilon outside the square root",
              "The scale is the square root of the variance plus epsilon: epsilon goes inside the root.",
              "Write the scale as one formula and check where epsilon sits relative to the root.",
              "Both forms avoid a division by zero, so learners think them equivalent; they differ most "
              "on nearly constant inputs with a large epsilon."),
        entry(f"{prefix}.no_sqrt", "Divided by the variance",
              "The output is divided by a standard deviation, the square root of the variance (plus epsilon).",
              "Ask what units your divisor has: a variance is a squared spread.",
              "Variance and standard deviation confused; the output no longer has unit spread."),
        entry(f"{prefix}.not_scaled", "No division by the scale",
              "Normalising both centres and rescales: after subtracting the mean, divide by the standard "
              "deviation.",
              "After centring, does the spread of each group of outputs come out as one?",
              "The scale was computed and then not used, or forgotten; outputs are only centred."),
        entry(f"{prefix}.eps_ignored", "Epsilon ignored",
              "Epsilon is part of the formula and the caller chooses it: it must reach the scale.",
              "Follow the epsilon argument through your function: where does it enter the scale?",
              "Invisible for epsilon 1e-5 on unit-spread data; a test with a large epsilon exposes it."),
        entry(f"{prefix}.eps_hardcoded", "Epsilon fixed to a constant",
              "The epsilon the caller passes is the one to use, not a default written into the body.",
              "Does your function use the epsilon it was given, or a number of its own?",
              "Usually a helper called without passing epsilon on, or a literal copied from library docs."),
        entry(f"{prefix}.not_centred", "Mean not subtracted",
              f"{kind} subtracts the mean before dividing by the standard deviation.",
              "Is the average of each group of outputs zero?",
              "Only the division was written; often a learner thinking of RMSNorm."),
        entry(f"{prefix}.wrong_scale", "Some other scale",
              "The divisor is the square root of the biased variance plus epsilon, nothing else.",
              "Compare your divisor with the standard deviation of the same group, term by term.",
              "Another spread measure (range, mean absolute deviation, a norm, a factor); the mean was right."),
        entry(f"{prefix}.affine_swapped", "Gain and shift swapped",
              "The gain multiplies the normalised value and the shift is added to it, not the other way round.",
              "Which of the two parameters multiplies, and which one is added?",
              "The two parameters look alike in the signature; with gain one and shift zero the slip shows "
              "as a constant output."),
        entry(f"{prefix}.gamma_ignored", "Gain ignored",
              "The normalised value is multiplied by the learned gain, one per feature.",
              "Where does the gain enter your output?",
              "Tests with gain one hide it; the checks use a random gain."),
        entry(f"{prefix}.beta_ignored", "Shift ignored",
              "The learned shift, one per feature, is added after the gain.",
              "Where does the shift enter your output?",
              "Tests with shift zero hide it; the checks use a random shift."),
        entry(f"{prefix}.shift_before_gain", "Shift added before the gain",
              "The gain multiplies the normalised value alone; the shift is added afterwards.",
              "Expand your last line: is the shift multiplied by the gain too?",
              "Parentheses in the wrong place; with gain one it is invisible."),
        entry(f"{prefix}.beta_subtracted", "Shift subtracted",
              "The shift is added to the scaled value, not subtracted.",
              "Check the sign with which the shift enters your output.",
              "A sign slip, often by analogy with subtracting the mean."),
        entry(f"{prefix}.affine_misapplied", "Gain or shift used another way",
              "Gain and shift act only at the end, elementwise per feature, on the normalised value.",
              f"With gain one and shift zero your {kind} is right: look only at how the two parameters are "
              "used, and in which order.",
              "E.g. the gain applied to the input before normalising, or dividing instead of multiplying; "
              "tests with gain one and shift zero hide all of these."),
    ]


MISCONCEPTIONS = [
    # ------------------------------------------------------------------ layernorm
    entry("ln.no_keepdims", "Reduction without keepdims",
          "A statistic of each token keeps a length-one feature axis, so that it lines up with that token's "
          "features.",
          "Compare the shape of your mean with the shape of the input: which axis lines up with which?",
          "Runs on one token and on square inputs (silently wrong there), fails with a broadcasting error "
          "elsewhere."),
    entry("ln.over_batch", "LayerNorm over the batch",
          "LayerNorm takes each token's statistics over that token's own features only; averaging over the "
          "other tokens is BatchNorm.",
          "Over which values is each mean taken: those of one token, or those of many tokens?",
          "The confusion this notebook is about; often BatchNorm code reused. On a single token every output "
          "becomes zero."),
    entry("ln.wrong_axis", "Statistics over the wrong axes",
          "LayerNorm's statistics run over the last axis, the features, whatever the number of leading axes.",
          "Which axis holds the features, and is that the one your statistics run over?",
          "A fixed axis number, or no axis at all (the whole array)."),
    *_forward("ln", _LN),
    # ------------------------------------------------------------------ batch_norm
    entry("bn.over_features", "BatchNorm over the features",
          "BatchNorm takes each feature's statistics over every token of the batch; averaging over a token's "
          "own features is LayerNorm.",
          "For one feature, which values does its mean average over?",
          "The mirror image of the LayerNorm mistake; often layernorm code reused."),
    entry("bn.wrong_axis", "Statistics over the wrong axes",
          "BatchNorm's statistics run over every axis but the last: batch and positions together for a "
          "sequence batch.",
          "List the axes of the input and say which ones a feature's statistics should cover.",
          "Axis 0 only (right for two axes, wrong for three), the positions only, or the whole array."),
    *_forward("bn", _BN),
    # ------------------------------------------------------------------ batch_norm_train, batch_norm_eval
    entry("bn.running_in_place", "Running statistics updated in place",
          "The training step returns new running statistics and leaves the arrays it was given as they are, "
          "so the caller decides what to keep.",
          "After your function returns, are the caller's running mean and variance still what they passed in?",
          "PyTorch's buffers are updated in place, so learners copy that habit; here the step is a pure function "
          "and the check compares the caller's arrays before and after."),
    entry("bn.running_not_returned", "Running statistics not returned",
          "A training step has three results: the output and the two new running statistics; a statistic "
          "computed inside the function and never returned is lost.",
          "Count the values your function returns: the exercise asks for three.",
          "The update is written as a local rebinding, which the caller never sees."),
    entry("bn.running_not_updated", "Running statistics never updated",
          "Every training step mixes the batch statistics into the running ones; returning the old running "
          "statistics unchanged leaves evaluation mode at its initial state forever.",
          "Compare the running statistics you return with the ones you received: do they differ?",
          "Often the batch statistics are computed but the update line is missing, or updates a copy that is "
          "not returned."),
    entry("bn.momentum_reversed", "Momentum weights swapped",
          "In the PyTorch convention the momentum is the weight of the new batch statistic and one minus the "
          "momentum is the weight of the old running value.",
          "With a small momentum, should one batch move the running statistics a little or a lot?",
          "Keras and TensorFlow call the weight of the old value the momentum (0.99), PyTorch the weight of the "
          "new one (0.1): learners who know one convention write the other."),
    entry("bn.momentum_ignored", "Running statistics replaced by the batch's",
          "A running average keeps most of its old value and moves part of the way towards each batch; "
          "replacing it by the last batch's statistics throws the history away.",
          "How much of the old running value does your update keep?",
          "Equivalent to momentum one: evaluation then depends on whichever batch came last."),
    entry("bn.momentum_hardcoded", "Momentum fixed to a constant",
          "The momentum the caller passes is the one to use, not PyTorch's default written into the body.",
          "Does your update use the momentum it was given, or a number of its own?",
          "Invisible with the default momentum; the checks also pass other values."),
    entry("bn.running_var_biased", "Running variance from the biased variance",
          "PyTorch normalises a training batch with its biased variance but stores the unbiased one (dividing by "
          "n minus one) in the running variance.",
          "Which variance does the normalisation use, and which one goes into the running average?",
          "The two variances differ by the factor n over n minus one, large for small batches; the convention "
          "has to be stated, and the exercise states it."),
    entry("bn.running_std", "Running variance holds a standard deviation",
          "The running variance averages variances; the square root belongs to the normalisation only.",
          "Is what you store a variance or its square root?",
          "The scale computed for the normalisation is reused for the update."),
    entry("bn.running_var_eps", "Epsilon stored in the running variance",
          "Epsilon is part of the normalisation, inside its square root; the running variance stores the plain "
          "batch variance.",
          "Where does epsilon enter your update of the running variance, and should it?",
          "The variance plus epsilon computed for the scale is reused for the update; in evaluation epsilon is "
          "then added twice."),
    entry("bn.running_wrong_axes", "Running statistics over the wrong axes",
          "There is one running mean and one running variance per feature, averaged over every token of the "
          "batch: over every axis but the last.",
          "What shape do your running statistics have, and how many numbers should there be?",
          "Axis zero only is right for a two-axis input and wrong for a sequence batch; no axis at all gives one "
          "number for every feature."),
    entry("bn.train_uses_running", "Training mode normalises with running statistics",
          "In training mode the output uses the statistics of the current batch; the running statistics are only "
          "updated there, and used in evaluation mode.",
          "Which statistics does your training output use: the batch's, or the running ones?",
          "The two modes mixed up; such a layer never sees its own batch statistics while training."),
    entry("bn.eval_uses_batch_stats", "Evaluation mode uses batch statistics",
          "Evaluation mode normalises with the running statistics alone, so the output for one input does not "
          "depend on what else is in the batch, and a single token works.",
          "Does your evaluation output change if you add other tokens to the batch?",
          "Training-mode code reused for evaluation, wholly or for the mean or the variance only; it hides the "
          "train and test gap instead of measuring it."),
    entry("bn.eval_updates_running", "Evaluation mode changes the running statistics",
          "Evaluation only reads the running statistics; they change in training steps only.",
          "After an evaluation call, are the running statistics still what they were?",
          "Evaluation on test data must not drift the model: PyTorch freezes the buffers after the switch to "
          "evaluation mode."),
    # ------------------------------------------------------------------ leaks_future
    entry("causal.norm_not_called", "Probe never calls norm",
          "Whether a function leaks can only be found by running it: on the input and on a changed input.",
          "Your answer must come from comparing outputs of the function you were given.",
          "A guess from the input alone, or a constant answer."),
    entry("causal.not_a_bool", "Answer not a single True or False",
          "The probe answers one yes-or-no question about the whole prefix.",
          "Reduce your comparison to one truth value before returning it.",
          "A per-position or per-element comparison returned as it is, or a difference instead of a verdict."),
    entry("causal.changed_past", "Changed position t or earlier",
          "The future starts at position t + 1; changing position t changes output t even for a causal "
          "function.",
          "List the positions your probe changes: all of them must come after t.",
          "An off-by-one in the slice, or a change applied to the whole input."),
    entry("causal.no_change", "Nothing was changed",
          "A comparison can only reveal a dependence if the two inputs really differ after t.",
          "Check that the input you pass the second time differs from the first one after t.",
          "A change computed but not stored, applied to a copy that is not used, or too small to register "
          "in floating point."),
    entry("causal.change_can_be_zero", "A change that leaves zeros unchanged",
          "A change must alter every later token, including tokens that are zero (padding).",
          "What does your change do to a token that is exactly zero?",
          "Setting the future to zero, or scaling it: both leave zero padding as it is."),
    entry("causal.only_next_token", "Only token t + 1 changed",
          "A leak can come from any later position, not only the next one.",
          "Change every token after t, not just the first of them.",
          "A look-ahead of two positions goes unseen."),
    entry("causal.tolerant_comparison", "Comparison with a tolerance",
          "Any change counts, however small: a causal function leaves earlier outputs bit for bit unchanged, "
          "so the comparison must be exact.",
          "Does your comparison forgive small differences? A leak can be smaller than any tolerance.",
          "np.allclose and assert_close habits from testing; a larger change to the input does not help."),
    entry("causal.earlier_positions_skipped", "Earlier positions not compared",
          "Every output at positions 0 to t must be compared, not only the one at t.",
          "Which output positions does your comparison look at?",
          "Comparing position t alone misses a leak into an earlier position."),
    entry("causal.position_t_skipped", "Position t left out of the comparison",
          "Position t belongs to the past: the compared prefix runs from 0 up to and including t.",
          "Does the prefix you compare include position t itself?",
          "An off-by-one in the slice end (a half-open range that stops one short)."),
    entry("causal.compares_future", "Future outputs compared",
          "Only the outputs at positions 0 to t are compared; outputs after t may change even for a causal "
          "function.",
          "Which output positions does your comparison include beyond t?",
          "Comparing the whole output (or slicing the wrong axis) flags every function as leaky."),
    entry("causal.last_position", "Leak claimed at the last position",
          "At the last position there is no future, so nothing can leak: the answer is False.",
          "What is there to change after the last position?",
          "A special case for t at the end that answers True."),
]
