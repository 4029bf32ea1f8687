"""What a careful reader checks in every notebook, checked by machine.

- no control characters (a backspace once ate the b of \\boldsymbol in four places);
- every formula is balanced and uses only LaTeX commands MathJax knows (a parser-level check;
  tests/e2e/test_browser.py renders them in JupyterLab);
- navigation: learning outcomes at the top, a "What to remember" recap, a "Next:" link to the
  following notebook, every mention of another notebook a link to it;
- predict, then run: every ``guess_*`` is assigned in a cell before the cell that measures it;
- every markdown cell renders to well-formed HTML (a ``</details>`` right after a list item once
  closed the details inside the list's last item).
"""
import ast
import re

import jupytext
import pytest

from tests.conftest import ASSIGNMENTS, ROOT

# Commands this course uses, all of them in MathJax 3's default TeX packages (base, ams).
MATHJAX = set("""
Big Bigg Vert alpha approx arg beta big bigg bmatrix boldsymbol boxed cdot cdots cos dfrac delta dots
ell end epsilon eta exp frac gamma ge geq gg hat in infty kappa lVert lambda langle ldots le left leftarrow
leq lesssim ll ln log mathbb mathbf mathcal mathrel mathrm max min mu nabla ne neq odot operatorname
partial phi pi pm qquad quad rVert rangle rho right sigma sim sin sqrt sum tau text textstyle tfrac theta
times to top underbrace vert begin omega prod cap cup forall exists mid Delta Sigma overline tilde
""".split())
# $$display$$, or $inline$ (which, as in JupyterLab's Markdown renderer, may run over a line
# break but not over a blank line).
FORMULA = re.compile(r"\$\$(.+?)\$\$|(?<![\\$])\$((?:[^$\n]|\n(?![ \t]*\n))+?)\$", re.S)


def markdown_cells(assignment):
    nb = jupytext.read(ROOT / "source" / assignment / f"{assignment}.py")
    return nb, [c.source for c in nb.cells if c.cell_type == "markdown"]


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_no_control_characters(assignment):
    paths = [ROOT / "source" / assignment / f"{assignment}.py", ROOT / "notebooks" / f"{assignment}.ipynb",
             ROOT / "release" / assignment / f"{assignment}.ipynb", ROOT / "solutions" / f"{assignment}.ipynb"]
    for path in paths:
        text = path.read_text(encoding="utf-8")
        bad = [(i, hex(ord(ch))) for i, ch in enumerate(text) if ord(ch) < 32 and ch not in "\n\t\r"]
        assert not bad, f"{path.relative_to(ROOT)}: control characters at {bad[:5]}"


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_no_linter_noise_in_learner_cells(assignment):
    source = (ROOT / "source" / assignment / f"{assignment}.py").read_text(encoding="utf-8")
    assert "# noqa" not in source, f"{assignment}: a '# noqa' in a cell learners read"


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_formulas_are_balanced_and_use_known_commands(assignment):
    _, cells = markdown_cells(assignment)
    for source in cells:
        text = re.sub(r"`[^`\n]*`", "", source)  # code spans hold dollars of their own
        for match in FORMULA.finditer(text):
            formula = match.group(1) or match.group(2)
            depth = 0
            for ch in re.sub(r"\\[{}]", "", formula):
                depth += {"{": 1, "}": -1}.get(ch, 0)
                assert depth >= 0, f"{assignment}: unbalanced braces in ${formula}$"
            assert depth == 0, f"{assignment}: unbalanced braces in ${formula}$"
            unknown = set(re.findall(r"\\([A-Za-z]+)", formula)) - MATHJAX
            assert not unknown, f"{assignment}: unknown LaTeX command(s) {sorted(unknown)} in ${formula}$"


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_navigation(assignment):
    _, cells = markdown_cells(assignment)
    text = "\n".join(cells)
    assert "you will be able to" in text.lower(), f"{assignment}: no learning outcomes at the top"
    assert re.search(r"^#+ What to remember", text, re.M), f"{assignment}: no recap"
    index = ASSIGNMENTS.index(assignment)
    if index + 1 < len(ASSIGNMENTS):
        following = ASSIGNMENTS[index + 1]
        assert re.search(rf"Next:.*\]\({following}\.ipynb\)", text), f"{assignment}: no Next: link to {following}"
    # every "notebook NN" is a link (or the text of one)
    for source in cells:
        plain = re.sub(r"\[[^\]]*\]\([^)]*\)", "", re.sub(r"`[^`\n]*`", "", source))
        mentions = re.findall(r"\b[Nn]otebooks? 0[1-6]\b", plain)
        assert not mentions, f"{assignment}: {mentions} not a link in: {source[:200]!r}"


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_every_guess_comes_before_its_measurement(assignment):
    nb, _ = markdown_cells(assignment)
    assigned, used = {}, {}
    for index, cell in enumerate(c for c in nb.cells if c.cell_type == "code"):
        try:
            tree = ast.parse(cell.source)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and node.id.startswith("guess_"):
                target = assigned if isinstance(node.ctx, ast.Store) else used
                target.setdefault(node.id, index)
    for name, first_use in used.items():
        assert name in assigned and assigned[name] < first_use, f"{assignment}: {name} used before the guess cell"


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_markdown_renders_to_well_formed_html(assignment):
    from nbconvert.filters.markdown_mistune import markdown2html_mistune

    from grader.grading.feedback.soup_cache import well_formed

    _, cells = markdown_cells(assignment)
    broken = [source[:80] for source in cells if not well_formed(f"<div>{markdown2html_mistune(source)}</div>")]
    assert broken == [], f"{assignment}: markdown cells whose HTML leaves an element open or closes another: {broken}"
