"""Mistakes of 06_welford: one-pass mean and variance, the stream it reads, and merging partials.

In the order the checks test them (grader/checks/welford.py): what welford_mean_var returns,
its mean, its variance, the one-pass stream, then welford_combine.
"""
from grader.catalogue import entry

MISCONCEPTIONS = [
    # ---------------------------------------------------------------- what welford_mean_var returns
    entry("welford.not_a_tuple", "Result not the tuple asked for",
          "The functions return a tuple of plain numbers: (mean, var), or (count, mean, M2) for a partial.",
          "Look at what your function gives back: a list, an array or a tuple of another length is not the "
          "tuple the exercise describes.",
          "Lists, arrays of the two numbers, or an extra count in the result."),
    entry("welford.array_not_scalar", "An array instead of a number",
          "The mean and the variance of a 1-D array are single numbers, not arrays.",
          "Check what kind of object each returned value is: a 0-d array or an array of shape one is still an "
          "array; convert it to a plain float.",
          "Accumulators started as arrays of length one, or keepdims on a reduction."),
    entry("welford.low_precision", "Lower-precision floats",
          "A running statistic loses digits at every update; it is accumulated and returned in float64.",
          "Which of your numbers are in single or half precision? Start the accumulators as "
          "ordinary Python floats.",
          "Learners copying GPU habits: float32 accumulators lose the offset test completely."),
    entry("welford.integer_division", "Integer or floor division",
          "The mean of integers is generally not an integer; the statistics are real numbers.",
          "Look for floor division or a conversion to a whole number; divide with true division and keep floats.",
          "Floor division, or int and round applied to the mean."),
    entry("welford.not_a_float", "Not a float",
          "The mean and the variance are returned as floats (Python float or numpy float64).",
          "Check the type of each value you return: exact fractions, decimals, strings, complex numbers, "
          "booleans or containers are not floats; convert at the end.",
          "Fractions or Decimals from an exact computation, a complex root, or a value wrapped in a list."),
    # ---------------------------------------------------------------- the mean
    entry("welford.swapped_outputs", "Mean and variance swapped",
          "The function returns the mean first, then the variance.",
          "Compare the order of the values you return with the order in the docstring.",
          "Harmless once seen; the worked example (mean 5, var 5) hides it."),
    entry("welford.sum_not_mean", "Sum instead of mean",
          "The mean is the sum divided by the count.",
          "Your first value grows with the number of elements: what should it be divided by?",
          "A running total returned without its final division."),
    entry("welford.count_off_by_one", "Count off by one",
          "After k elements the count is k: the first element is counted before it is used, so the mean equals "
          "it after one step.",
          "Trace your count through the first two elements by hand: is it 1 and then 2 when the division happens?",
          "Dividing by n plus or minus one, a count incremented after the division (zero at the first step), or "
          "the first element counted twice."),
    entry("welford.total_count_in_update", "Total length in the running update",
          "The running mean divides each update by the number of elements seen so far, not by the total length.",
          "Each update moves the mean towards the new element by one over the count so far; what does dividing "
          "by the full length do to the first elements?",
          "An exponential moving average in disguise: the mean depends on the order of the data."),
    # ---------------------------------------------------------------- the variance
    entry("welford.unbiased_variance", "Unbiased variance (divided by n − 1)",
          "The function returns the biased variance, M2 over n, the one LayerNorm uses; n − 1 is the sample "
          "estimator.",
          "Which count does your final division use? LayerNorm's variance divides by the number of elements.",
          "The statistics-course default (and torch.var's); also a division by zero for one element."),
    entry("welford.m2_returned", "M2 returned instead of the variance",
          "M2 is the sum of squared deviations; the variance is M2 divided by the count.",
          "Your variance grows with the number of elements: the last step of the algorithm is missing.",
          "The final division forgotten; the value is n times too large."),
    entry("welford.std_returned", "Standard deviation returned",
          "The variance is the mean squared deviation; the standard deviation is its square root.",
          "Is there a square root in your final step? The variance does not take one.",
          "Confusion with the normalisation step, which divides by the square root of the variance plus epsilon."),
    entry("welford.naive_variance", "E[x²] − μ² (catastrophic cancellation)",
          "Subtracting two large, nearly equal numbers loses the digits they share; Welford accumulates squared "
          "deviations so no such subtraction happens.",
          "Shift your test data far from zero and compare; accumulate the squared distances to the running mean "
          "rather than the squares themselves.",
          "The textbook formula: exact on paper, no correct digit at an offset of a hundred million in float64."),
    entry("welford.old_mean_twice", "M2 updated with the old mean twice",
          "M2 grows by the product of the distance to the old mean and the distance to the new mean.",
          "In your update of M2, which mean does each factor use? One factor uses the mean before the update, "
          "the other the mean after it.",
          "The square of the old-mean distance, or M2 updated before the mean; the variance comes out too large."),
    entry("welford.new_mean_twice", "M2 updated with the new mean twice",
          "M2 grows by the product of the distance to the old mean and the distance to the new mean.",
          "In your update of M2, which mean does each factor use? One factor uses the mean before the update, "
          "the other the mean after it.",
          "The square of the new-mean distance; the variance comes out too small."),
    # ---------------------------------------------------------------- one pass over a stream
    entry("welford.two_passes", "Two passes over the data",
          "A one-pass algorithm reads each element once: the mean and M2 are updated together in a single loop.",
          "Count how many times your function goes over the data; computing the mean first is already one pass.",
          "The two-pass algorithm is accurate but cannot run on a stream or in a kernel that reads each row once."),
    entry("welford.whole_array_ops", "Whole-array operations on a stream",
          "A stream offers its elements one at a time; library reductions and array arithmetic need the whole "
          "array at once.",
          "Replace every reduction and every arithmetic on the whole input with work inside one loop over its "
          "elements.",
          "Library mean and variance, conversion to an array, or vectorised deviations."),
    entry("welford.skips_elements", "Elements left out",
          "Every element enters the mean and the variance, however long the data.",
          "Does your loop stop early, skip some positions or sample the data when it is long?",
          "Caps, strides or early stops added for speed on long inputs."),
    entry("welford.keeps_elements", "Elements kept in memory",
          "A one-pass algorithm keeps three numbers (count, mean, M2), whatever the length of the data.",
          "Does your function store the elements it has read, in a list or an array, to go over them later?",
          "Copying the stream into a list, a deque or an array; memory grows with n."),
    # ---------------------------------------------------------------- welford_combine
    entry("welford.count_not_int", "Count not an integer",
          "The count of a partial is a whole number of elements, kept as an integer.",
          "Check the type of the count you return: sums and products of integer counts stay integers unless "
          "something converts them.",
          "Counts converted to float, or divided by one, on the way through."),
    entry("welford.empty_partial", "The empty partial mishandled",
          "Merging with the empty partial (no data) gives the other partial unchanged, and two empty ones give "
          "the empty one.",
          "What does your merge do when one count is zero? Follow it by hand: which division has a zero below it?",
          "No guard for empty chunks (a division by a zero count), or a guard that returns the wrong side."),
    entry("welford.combine_count", "Merged count wrong",
          "The merged partial counts the elements of both chunks: the two counts add.",
          "How many elements does the merged chunk hold?",
          "One side's count returned, or an off-by-one in the merged count."),
    entry("welford.unweighted_mean", "Means averaged without weights",
          "The merged mean weights each chunk's mean by its count.",
          "A chunk of a thousand elements and a chunk of one do not pull the mean equally: weight each mean by its "
          "count.",
          "The plain average of the two means; right only when the chunks have equal sizes."),
    entry("welford.swapped_weights", "Weights of the means swapped",
          "The merged mean moves from one chunk's mean towards the other's by the other chunk's share of the "
          "count.",
          "Which chunk should pull the merged mean more, the larger or the smaller? Check which count multiplies "
          "which mean.",
          "The count of the wrong chunk in the mean shift; the mean lands on the small chunk's side."),
    entry("welford.variance_in_partial", "Variance kept in the partial instead of M2",
          "A partial keeps M2, the sum of squared deviations, because sums of squares of two chunks add while "
          "variances do not.",
          "The third entry of a partial is not yet divided by the count; divide only when the variance is needed.",
          "The merge finalised too early: the third entry divided by n."),
    entry("welford.no_between_term", "Between-chunk term missing",
          "The merged M2 is the two chunks' M2 plus the spread of their means around each other.",
          "Two chunks with different means are more spread out together than each one alone: what term "
          "accounts for the distance between their means?",
          "The two M2 added alone; right only when the chunk means coincide."),
    entry("welford.between_term_scale", "Between-chunk term wrongly scaled",
          "The between-chunk term is the squared difference of the means times the product of the counts, over "
          "the total count.",
          "Write the between-chunk term for two chunks of one element each and check it against their variance.",
          "Divided by the square of the count, not divided, doubled or halved."),
    entry("welford.scalar_only", "Merge written for numbers only",
          "The merge is plain arithmetic, so it works elementwise: the same function merges one partial or a whole "
          "array of partials at once, one per token, as a normalisation kernel does.",
          "Call your merge with partials whose mean and M2 are arrays of a few entries. Which line turns an array "
          "into one number, or asks whether an array is true?",
          "Conversions to a Python float, math functions, or a branch on a mean's value: fine on numbers, an error "
          "on arrays."),
]
