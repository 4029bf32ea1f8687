"""Misconceptions of 03_backward: the Jacobian, the fast VJP and the full backward (see grader.catalogue).

In the order the checks meet them: the scale s and eps, the sign, the mean and variance terms
of J = (I - 11^T/d - x_hat x_hat^T/d) / s (and of J g), whole-result factors, then the VJP's
agreement and memory, then the parameter gradients and the per-token reductions of the backward.
"""
from grader.catalogue import entry

MISCONCEPTIONS = [
    # ---------------------------------------------------------------- the scale s and eps
    entry("bwd.eps_ignored", "Epsilon ignored",
          "The forward pass divides by s, the square root of the variance plus epsilon, so its derivative does too.",
          "Which value of epsilon does your derivative use? It should be the one passed in, wherever the scale or "
          "the normalised input appears.",
          "The formula written for epsilon zero; visible only where epsilon is not negligible next to the variance."),
    entry("bwd.eps_hardcoded", "Epsilon fixed instead of passed",
          "The function uses the epsilon it is given, not a constant of its own.",
          "Call your function with a large epsilon: does the result change?",
          "A literal 1e-5 in the body; passes every test with the default and fails the others."),
    entry("bwd.unbiased_variance", "Unbiased variance (d - 1)",
          "LayerNorm's variance is the mean of the squared deviations: it divides by d, not d - 1.",
          "Count what you divide by when you average the squared deviations, and check the default of the "
          "variance function you call.",
          "Usually torch's variance default, or a statistics habit; the same slip as in the forward."),
    entry("bwd.eps_outside_sqrt", "Epsilon outside the square root",
          "The scale is the square root of the variance plus epsilon; epsilon belongs inside the root.",
          "Where does epsilon sit in your scale: under the square root, or added after it?",
          "Shows on nearly constant tokens, where epsilon dominates the variance."),
    entry("bwd.divided_by_variance", "Divided by s squared",
          "x_hat divides by s once, so every term of the derivative carries exactly one factor 1/s.",
          "Count the factors of s in your denominator: the variance is s squared, not s.",
          "Dividing by the variance, or by s twice (once in x_hat, once again outside)."),
    entry("bwd.no_division_by_s", "Not divided by s",
          "Every term of the derivative of x_hat is divided by the token's scale s.",
          "Compare the size of your result with the expected one: is a division by the scale missing?",
          "The projection written without its 1/s; the result is s times too large."),
    entry("bwd.sign_flipped", "Sign flipped",
          "The derivative of x_hat has the identity with a plus sign; the two removed directions are subtracted.",
          "Check the sign of each term against the derivation.",
          "A minus sign distributed wrongly, or the terms subtracted in the wrong order."),
    # ---------------------------------------------------------------- the mean and variance terms
    entry("bwd.mean_term_missing", "Mean term missing",
          "The mean depends on every input with slope 1/d, which gives the term that removes the average of the "
          "gradient.",
          "Does your result sum to zero over the features? If not, one of the two removed directions is still "
          "there.",
          "The derivative of the mean forgotten: the gradient keeps its average, which LayerNorm cannot see."),
    entry("bwd.sum_not_mean", "Sum where a mean belongs",
          "Both removed components are averages over the d features: each carries a factor 1/d.",
          "Check each reduction over the features: an average, or a plain sum?",
          "A missing 1/d on one term, or on the whole result; the BatchNorm-style sums form without its 1/d."),
    entry("bwd.variance_term_missing", "Variance term missing",
          "The scale s depends on every input too, which gives the term that removes the component along x_hat.",
          "Is the component of your result along the normalised input close to zero? If not, the derivative of the "
          "scale is missing.",
          "The quotient rule applied to the numerator only, as if s were a constant."),
    entry("bwd.x_instead_of_x_hat", "Raw input where the normalised one belongs",
          "The derivative is written in the normalised input x_hat, centred and scaled, not in the raw input.",
          "In the last term (and in the gain's gradient), which vector do you use: the raw input, or the centred and "
          "scaled one?",
          "Raw x in the outer product, in the projection coefficient, or in the gain's gradient."),
    entry("bwd.wrong_factor", "A term with the wrong factor",
          "Each term has exactly the factor the derivation gives: 1/s once overall, 1/d on each removed direction.",
          "Redo the derivative of s step by step: the 2 from the square and the 1/2 from the root cancel.",
          "Catch-all for constants off by 2, 1/2 or another number; read the learner's derivation."),
    entry("bwd.extra_one_over_d", "An extra 1/d",
          "The identity term of the derivative has no 1/d; only the two removed directions do.",
          "Is your whole result d times too small? Look for a 1/d applied to every term.",
          "A 1/d put in front of the whole bracket instead of on the two outer products."),
    # ---------------------------------------------------------------- the VJP
    entry("bwd.functions_disagree", "Jacobian and VJP disagree",
          "The VJP is the Jacobian's transpose times g: the two functions must give the same result.",
          "Multiply your Jacobian's transpose by the same g and compare with your VJP: which one is off?",
          "The VJP is right and the Jacobian is not (or the reverse); the Jacobian's own test says more."),
    entry("bwd.builds_jacobian", "Builds the (d, d) matrix",
          "The VJP needs two averages and a few vectors: time and memory grow like d, not d squared.",
          "Expand the Jacobian times g term by term: each outer product times g is a vector times a number.",
          "Jacobian then product, or an outer product, or autograd's full Jacobian: 128 MiB at d 4096."),
    # ---------------------------------------------------------------- the full backward
    entry("bwd.not_a_triple", "Not a tuple of three gradients",
          "The backward returns exactly three arrays, dx, dgamma and dbeta, as a tuple.",
          "Look at what your function returns: a tuple of three, in that order.",
          "Lists, dicts, two or four values, or the three stacked in one array."),
    entry("bwd.params_not_summed", "Parameter gradient not summed",
          "gamma and beta are shared by every token, so their gradients add up the contributions of all tokens.",
          "What shape should the gain's gradient have, and how do the tokens' contributions combine?",
          "dgamma or dbeta left per token, with the input's shape."),
    entry("bwd.summed_axis0_only", "Summed over the first axis only",
          "The parameter gradients sum over every leading axis, batch and positions alike.",
          "How many leading axes does the input have, and did you sum over all of them?",
          "Code written for (N, d) inputs; fails on (B, T, d)."),
    entry("bwd.dbeta_wrong", "Shift gradient wrong",
          "beta is added to every output, so its gradient is the sum of the incoming gradient over the tokens.",
          "What multiplies beta in the forward pass? Then what reaches it in the backward?",
          "A mean instead of a sum, gamma or x_hat slipped into dbeta."),
    entry("bwd.dgamma_times_gamma", "Gain in its own gradient",
          "gamma multiplies x_hat, so its gradient is the incoming gradient times x_hat; gamma itself does not "
          "appear.",
          "Differentiate the gain times the normalised input with respect to the gain.",
          "The scaled gradient reused for the gain's gradient."),
    entry("bwd.dgamma_wrong", "Gain gradient wrong",
          "The gain's gradient is the incoming gradient times the forward pass's x_hat, summed over the tokens.",
          "Which normalised input does your gain's gradient use, and how are the tokens combined: added up, or "
          "averaged?",
          "Catch-all for dgamma: a mean instead of a sum, or another product."),
    entry("bwd.stats_wrong_axis", "Statistics over the wrong axis",
          "Every token has its own mean, scale and averages, taken over its features, the last axis.",
          "Over which axis of the array are your averages taken? Each token is reduced over its own features only.",
          "Means over the whole batch or over the first axis; reductions that mix tokens."),
    entry("bwd.gamma_not_in_g", "Gain misused in the input gradient",
          "The gradient that reaches x_hat is gamma times the incoming gradient, and it feeds the input's gradient.",
          "Where does gamma enter your input gradient, and does it multiply?",
          "gamma forgotten in dx, or divided by."),
]
