"""No solution code and no hidden test reaches what learners can read.

Needles: every 8-token n-gram of every solution region (``### BEGIN SOLUTION`` ...) and of
every hidden-test line (comments dropped) of ``source/``. Haystacks: every file under
``release/``, ``grader/``, ``normlab/``, ``docs/`` and README.md (the cell sources of a
notebook), and every string of the hint ladder (``grader.exercises``) and of the catalogue.
``notebooks/`` is not scanned: the self-study edition carries the solutions on purpose,
compressed, for ``hint()``'s last step (tests/unit/test_hints.py shows they are only there), and
the hidden tests, in the "extra checks" cell after each test cell (issue 13: self-learners get
the graded version's full feedback; tests/integration/test_build.py shows they are only there). Those
extra-checks cells are scanned here for solution code, which they must never hold.

Some overlaps are legitimate: the exercise statements name the formula or the idiom to use,
a later notebook reuses an earlier exercise in a demo, a diagnosis states the formula the
learner got wrong, normlab's demos carry their own norms (and the sandbox gives no credit to
a graded function that calls them). Each is listed in ALLOWED as (files, phrase, reason): an
n-gram found in a file passes only if at least COVER of its N tokens lie inside occurrences,
in that file, of phrases allowed there (so an idiom passes with a token or two of context,
while a solution line, which strings several quantities together, does not). Anything else
fails and names the n-gram and the file.
"""
from __future__ import annotations

import fnmatch
import io
import json
import re
import tokenize

import pytest

from grader.course.build import HIDDEN_TESTS, SOLUTION_REGION
from tests.conftest import ASSIGNMENTS, ROOT

N = 8
COVER = 6
TOKEN = re.compile(r"[A-Za-z_][A-Za-z_0-9]*|\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|\*\*|//|==|!=|<=|>=|->|[^\sA-Za-z_0-9]")

EVERYWHERE = "*"
CHECKS = "grader/checks/*"
MUTANT = "a classic mistake rebuilt to recognise it (statistics over the wrong axis, mean subtracted, ...)"
IDIOM = "a numpy idiom the exercise statements themselves give (reduce over the features, sum over leading axes)"
ALLOWED = [
    # ------------------------------------------------------------------ idioms, anywhere
    (EVERYWHERE, "axis=-1, keepdims=True", IDIOM),
    (EVERYWHERE, ".mean(axis=-1, keepdims=True)", IDIOM),
    (EVERYWHERE, "tuple(range(x.ndim - 1))", IDIOM),
    (EVERYWHERE, "np.max(np.abs(", "the largest absolute difference: how every check and demo compares arrays"),
    (EVERYWHERE, "d = x.shape[-1]", "the number of features, read off the input"),
    (EVERYWHERE, "np.random.default_rng(0)", "seeded random data, as every demo makes it"),
    (EVERYWHERE, "default_rng(0).standard_normal(", "seeded random data"),
    (EVERYWHERE, "np.random.default_rng(4)", "seeded random data"),
    (EVERYWHERE, "np.arange(1, 11)", "the integers 1 to 10, a worked example with a known mean and variance"),
    (EVERYWHERE, "np.sqrt(var + eps)", "LayerNorm's scale, written in every notebook's prose as s = sqrt(var + eps)"),
    # ------------------------------------------------------------------ the statements say it
    ("release/01_bn_vs_ln/*", "[:, t + 1:]", "the leaks_future docstring: 'changing x[:, t + 1:] changes any of "
                                             "norm(x)[:, :t + 1]'"),
    ("release/01_bn_vs_ln/*", "norm(x)[:, :t + 1],", "the leaks_future docstring"),
    ("release/01_bn_vs_ln/*", "[:, :t + 1]", "the leaks_future docstring"),
    ("release/01_bn_vs_ln/*", "** 2).mean(axis=", "section 1's demo of the two averages, before the exercise "
                                                  "asks for LayerNorm"),
    ("release/05_placement/*", "x + F(norm(x))", "the exercise's table of the three compositions"),
    ("release/05_placement/*", "norm(x + F(x))", "the exercise's table"),
    ("release/05_placement/*", "x + norm(F(x))", "the exercise's table"),
    ("release/05_placement/*", '"pre", "post", "', "the three modes, named by the exercise"),
    ("release/04_rmsnorm/*", "np.sqrt(np.mean(", "r recomputed after Exercise 1 (section 3's finite differences, the "
     "eigenvalue demo, section 6's token of RMS 0.01); section 1 derives r and reveals it before"),
    ("release/06_welford/*", "np.array([2281.5, 2281.25]", "section 2's float32 pair; a hidden test "
                                                           "reruns it in float64"),
    # ------------------------------------------------------------------ a later notebook reuses an earlier exercise
    ("release/02_geometry/*", "mu = x.mean(axis=-1, keepdims=True) var = ((x - mu) ** 2).mean(axis=-1, keepdims=True) "
     "return (x - mu) / np.sqrt(var + eps)", "02 defines LayerNorm (notebook 01's exercise) for its demos"),
    ("release/02_geometry/*", ").mean(axis=-1, keepdims=True) + eps)", "02's RMSNorm for its demos (after 01)"),
    ("release/02_geometry/*", "(x - x.mean())", "centring one token, the subject of 02"),
    ("release/02_geometry/*", ".var(axis=-1, keepdims=True) + eps)", "02's weight-growth demo: LayerNorm of X W"),
    ("release/02_geometry/*", ".mean(axis=-1, keepdims=True)) / s g =", "02's weight-growth demo"),
    ("release/02_geometry/*", "= (g - g.mean(axis=-1, keepdims=True) - np.mean(g *",
     "02's weight-growth demo needs LayerNorm's gradient; 03 states the same formula in its prose before "
     "its exercise (it is 03's layer_norm_backward, shown one notebook early)"),
    ("release/02_geometry/*", ", axis=-1, keepdims=True) *", "02's weight-growth demo"),
    ("release/03_backward/*", "- mu) ** 2).mean(", "section 1's forward pass, once more (01's exercise)"),
    ("release/03_backward/*", "(x - x.mean())", "section 1's forward pass"),
    ("release/04_rmsnorm/*", "np.max(np.abs(norm(", "the invariance demo reuses 02's gap"),
    ("release/05_placement/*", ".mean(axis=-1, keepdims=True) return",
     "05's own LayerNorm and RMSNorm (01, 04) for its stacks"),
    ("release/05_placement/*", "** 2).mean(axis=-1, keepdims=True) + eps)", "05's own RMSNorm (04) for its stacks"),
    ("release/05_placement/*", "np.sqrt(np.mean(", "05's own RMSNorm"),
    # ------------------------------------------------------------------ checks: oracles, mutants, messages
    # The checks rebuild the quantities of the derivation and the classic mistakes (mutants) to name
    # what went wrong, and their messages state the formula a learner got wrong. None of it is a
    # function a learner could call in place of their own (design.md: no reference solutions).
    (CHECKS, "mu = x.mean(axis=", MUTANT),
    (CHECKS, "(x - mu) / np.sqrt(", MUTANT),
    (CHECKS, "((x - mu) ** 2", "leaky norms the probe check hands the learner's function, and their statistics"),
    (CHECKS, "x - x.mean(axis=", MUTANT),
    (CHECKS, "x_hat = (x - x.mean()) / s", "the projection check builds u and w = x_hat / sqrt(d)"),
    (CHECKS, "np.sqrt(np.mean(", "candidate statistics of classic mistakes (wrong axis, one r for all tokens)"),
    (CHECKS, "keepdims=True) + eps)", MUTANT),
    (CHECKS, "g.mean(axis=-1, keepdims=True)", "dx candidates whose means are taken over the wrong axes"),
    (CHECKS, "g.mean(axis=-1", "the diagnosis reads the learner's dx along 1 and x_hat"),
    (CHECKS, "* x_hat, axis=-1, keepdims=True)", "the diagnosis decomposes the learner's dx along x_hat"),
    (CHECKS, "np.mean(g * x_hat, axis=", "dx candidates; and the fix a diagnosis gives for a sum used as a mean"),
    (CHECKS, "mean(g * x_hat) * x_hat) /", "diagnoses state the formula dx = (g - mean(g * x_hat) * x_hat) / r"),
    (CHECKS, "mean(g * x_hat) * x_hat", "diagnoses name the term the learner got wrong"),
    (CHECKS, "(g * x_hat, axis=-1, keepdims=True)", "the diagnosis decomposes the learner's dx along x_hat"),
    (CHECKS, "x_hat = x / r", "the diagnosis rebuilds x_hat from the learner's own r, read off their dx"),
    (CHECKS, "g = gamma * dy", "the derivation's notation, which the diagnosis decomposes dx in"),
    (CHECKS, 'if mode == "post"', "a diagnosis branches on the mode being checked"),
    (CHECKS, ", np.sum(dy * x_hat", "dgamma candidates of classic mistakes (not summed over every axis)"),
    (CHECKS, "range(x.ndim - 1)", "the leading axes, one at a time, for the wrong-axis mutants"),
    (CHECKS, "return float(np.max(np.abs(", "the largest absolute difference, as a float"),
    (CHECKS, "[:, t + 1:]", "the causality probes change the future to test the learner's probe"),
    (CHECKS, "[:, :t + 1]", "the causality probes compare the past"),
    (CHECKS, "x.mean(axis=-1", MUTANT),
    (CHECKS, ", shape=(3, 6), eps=1e-5, seed=", "a check's defaults, which a hidden test spells out"),
    (CHECKS, ", shape=(2, 3,", "a check's defaults"),
    (CHECKS, "check_layer_norm_backward(layer_norm_backward, shape=(2, 3,", "a docstring's example call"),
    (CHECKS, "), eps=1e-5, seed=", "a check's defaults"),
    ("grader/checks/geometry.py", "norm(a * x + c) - norm(x)", "the gap's definition, computed in torch as the oracle"),
    ("grader/checks/geometry.py", "norm(a * x + c)", "the gap's definition"),
    ("grader/checks/welford.py", ") return float(mean), float(m2 /", "exact_mean_var, the exact oracle (fractions, "
                                                                     "several passes)"),
    ("grader/checks/welford.py", "float(mean), float(m2", "exact_mean_var, the exact oracle"),
    ("grader/checks/placement.py", "norm(x + F(x))", "the compositions a trace is named after"),
    ("grader/checks/placement.py", "x + F(norm(x))", "the compositions a trace is named after"),
    ("grader/checks/placement.py", "x + norm(F(x))", "the compositions a trace is named after"),
    ("grader/checks/placement.py", '"pre", "post", "', "the three modes"),
    ("grader/checks/placement.py", '"PRE", "pre", "post", "pre-LN", "postln", "outputs", "norm", "sandwich", '
     '"parallel", 0, 1, b"pre")', "the check's own invalid modes (ALL_INVALID); any non-exact comparison fails on "
     "them, so knowing them helps no wrong implementation"),
    ("grader/checks/placement.py", ", axis=-1, keepdims=True) +", "the recording norms' own statistics"),
    ("grader/checks/placement.py", "- 1, keepdims=True) -", "the recording norms' own statistics"),
    ("grader/checks/placement.py", "- 1, keepdims=True)) /", "the recording norms' own statistics"),
    ("grader/checks/placement.py", "- 1, keepdims=True))", "the recording norms' own statistics"),
    ("grader/checks/placement.py", "\"mode must be 'pre', 'post' or 'output', got",
     "the rejection diagnosis shows the ValueError message the exercise asks for"),
    ("grader/checks/placement.py", ", 1e-6), ((), ", "qk_norm_logits' visible cases, in the (leading, T_q, "
                                                     "T_k, d_k, eps) "
     "format its hidden test also uses"),
    ("grader/checks/placement.py", ", 16, 1e-6), ((", "qk_norm_logits' visible cases"),
    ("grader/compare.py", "tuple(range(x.ndim - 1))", IDIOM),
    # ------------------------------------------------------------------ normlab: the demos' own norms
    ("normlab/*", "np.sqrt(np.mean(", "normlab's RMSNorm for the widgets and the precision demo"),
    ("normlab/*", "x - x.mean(axis=-1, keepdims=True)", "normlab's centring"),
    ("normlab/placement.py", "(x + F(x))", "normlab's residual block runs 05's deep-stack experiments; the sandbox "
     "gives no credit to a graded function that calls it"),
    ("normlab/placement.py", '"pre", "post", "', "normlab's residual block"),
    ("normlab/placement.py", 'raise ValueError(f"mode must be', "normlab's residual block"),
    ("normlab/placement.py", ', got {mode!r}")', "normlab's residual block"),
    ("normlab/placement.py", 'if mode == "post": return', "normlab's residual block"),
]


def tokens(text: str) -> list[str]:
    return TOKEN.findall(text)


def without_comment(line: str) -> str:
    try:
        for token in tokenize.generate_tokens(io.StringIO(line).readline):
            if token.type == tokenize.COMMENT:
                return line[:token.start[1]]
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass
    return line


def needles() -> dict[str, str]:
    """n-gram -> where it comes from."""
    found: dict[str, str] = {}
    for assignment in ASSIGNMENTS:
        text = (ROOT / "source" / assignment / f"{assignment}.py").read_text()
        blocks = [("solution", m.group(1)) for m in SOLUTION_REGION.finditer(text)]
        blocks += [("hidden test", m.group(0)) for m in HIDDEN_TESTS.finditer(text)]
        for kind, block in blocks:
            lines = [without_comment(line) for line in block.splitlines() if "HIDDEN TESTS" not in line]
            # a solution region is one stream (its statements follow each other); a hidden test line by line
            streams = ["\n".join(lines)] if kind == "solution" else lines
            for stream in streams:
                t = tokens(stream)
                for i in range(len(t) - N + 1):
                    found.setdefault(" ".join(t[i:i + N]), f"{kind} of {assignment}")
    return found


def haystacks() -> dict[str, str]:
    """name -> text learners can read."""
    texts: dict[str, str] = {}
    paths = [p for folder in ("release", "grader", "normlab", "docs") for p in (ROOT / folder).rglob("*")
             if p.is_file() and "__pycache__" not in p.parts]
    for path in paths + [ROOT / "README.md"]:
        try:
            text = path.read_text()
        except (UnicodeDecodeError, OSError):
            continue  # images
        if path.suffix == ".ipynb":
            text = "\n".join("".join(c["source"]) for c in json.loads(text)["cells"])
        texts[str(path.relative_to(ROOT))] = text
    from grader import catalogue
    from grader.exercises import EXERCISES

    for exercise in EXERCISES.values():
        texts[f"<exercises:{exercise.name}.concept>"] = exercise.concept
        texts[f"<exercises:{exercise.name}.shape>"] = exercise.shape
    for entry in catalogue.all_misconceptions().values():
        for field in ("name", "concept", "hint", "note"):
            texts[f"<catalogue:{entry.id}.{field}>"] = getattr(entry, field)
    return texts


def covered(name: str, t: list[str]) -> list[bool]:
    mask = [False] * len(t)
    for files, phrase, _ in ALLOWED:
        if not fnmatch.fnmatch(name, files):
            continue
        p = tokens(phrase)
        for i in range(len(t) - len(p) + 1):
            if t[i:i + len(p)] == p:
                mask[i:i + len(p)] = [True] * len(p)
    return mask


def leaks(texts: dict[str, str] | None = None, kinds: tuple[str, ...] = ("solution", "hidden test")) -> list[str]:
    """Every n-gram of ``kinds`` (solution, hidden test) found in ``texts`` (default: haystacks()) and not allowed."""
    wanted = {gram: origin for gram, origin in needles().items() if origin.startswith(kinds)}
    found = []
    for name, text in (haystacks() if texts is None else texts).items():
        t = tokens(text)
        mask = None
        for i in range(len(t) - N + 1):
            gram = " ".join(t[i:i + N])
            if gram in wanted:
                mask = covered(name, t) if mask is None else mask
                if sum(mask[i:i + N]) < COVER:
                    found.append(f"{name}: {gram!r} ({wanted[gram]})")
    return found


def test_needles_are_there():
    """The scan has something to look for in every assignment: solutions and hidden tests."""
    origins = set(needles().values())
    for assignment in ASSIGNMENTS:
        assert f"solution of {assignment}" in origins and f"hidden test of {assignment}" in origins


@pytest.mark.slow  # reads every edition (~5 s)
def test_nothing_learners_read_contains_a_solution_or_a_hidden_test():
    found = leaks()
    assert not found, "solution or hidden-test code outside source/ (allow it in ALLOWED with a reason, or " \
        "remove it):\n" + "\n".join(found[:60])


@pytest.mark.slow  # builds the editions again (~4 s)
def test_a_planted_solution_or_hidden_test_is_found():
    """The allowances leave every solution region and every hidden-test block detectable."""
    for assignment in ASSIGNMENTS:
        text = (ROOT / "source" / assignment / f"{assignment}.py").read_text()
        blocks = ([m.group(1) for m in SOLUTION_REGION.finditer(text)]
                  + [m.group(0) for m in HIDDEN_TESTS.finditer(text)])
        for block in blocks:
            assert leaks({f"release/{assignment}/planted.ipynb": block}), f"{assignment}: not detected:\n{block}"
            assert leaks({"grader/planted.py": block}), f"{assignment}: not detected:\n{block}"


def test_every_allowance_is_used_and_explained():
    """An allowance nobody needs any more is removed, so the list stays a reviewed one."""
    texts = haystacks()
    wanted = needles()
    for files, phrase, reason in ALLOWED:
        assert reason.strip(), phrase
        p = tokens(phrase)
        used = False
        for name, text in texts.items():
            if not fnmatch.fnmatch(name, files):
                continue
            t = tokens(text)
            for i in range(len(t) - len(p) + 1):
                if t[i:i + len(p)] == p:
                    window = t[max(0, i - N + 1): i + len(p) + N - 1]
                    if any(" ".join(window[j:j + N]) in wanted for j in range(len(window) - N + 1)):
                        used = True
                        break
            if used:
                break
        assert used, f"ALLOWED entry no longer needed, remove it: {files} {phrase!r}"


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_self_study_extra_checks_hold_no_solution_code(assignment):
    """The extra-checks cells of notebooks/ (committed, and as build() makes them from source/) hold hidden
    tests only: no 8-token run of any solution."""
    import nbformat

    from grader.course.build import hidden_tests, is_extra_checks, script_to_notebook

    committed = nbformat.read(ROOT / "notebooks" / f"{assignment}.ipynb", as_version=4)
    fresh = hidden_tests(script_to_notebook(ROOT / "source" / assignment / f"{assignment}.py"))
    texts = {f"notebooks/{assignment}.ipynb#{c.id}": c.source for c in committed.cells if is_extra_checks(c)}
    texts.update({f"notebooks/{assignment}.ipynb#extra-{grade_id} (from source/)": body
                  for grade_id, body in fresh.items()})
    assert fresh, f"{assignment}: no hidden tests to carry"
    found = leaks(texts, kinds=("solution",))
    assert not found, "solution code in the self-study edition's extra checks:\n" + "\n".join(found[:20])
    # the scan is live: a solution region pasted into an extra-checks cell is found
    text = (ROOT / "source" / assignment / f"{assignment}.py").read_text()
    region = next(SOLUTION_REGION.finditer(text)).group(1)
    assert leaks({f"notebooks/{assignment}.ipynb#extra-planted": region}, kinds=("solution",))


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_self_study_sketches_decode_to_the_solutions_and_only_there(assignment):
    """notebooks/ carries each solution compressed (hint's step 4); release/ carries no sketch cell."""
    import nbformat

    from grader.course.build import script_to_notebook, solution_regions
    from grader.learner import encode_solution

    regions = solution_regions(script_to_notebook(ROOT / "source" / assignment / f"{assignment}.py"))
    self_study = nbformat.read(ROOT / "notebooks" / f"{assignment}.ipynb", as_version=4)
    sketch = next(c for c in self_study.cells if c.id == "solution-sketches")
    for name, text in regions.items():
        assert f'"{name}": "{encode_solution(text)}"' in sketch.source
    assert sketch.metadata["jupyter"]["source_hidden"] is True
    release = nbformat.read(ROOT / "release" / assignment / f"{assignment}.ipynb", as_version=4)
    assert not [c for c in release.cells if "register_solutions" in c.source or c.id == "solution-sketches"]
