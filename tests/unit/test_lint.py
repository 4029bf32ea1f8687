"""Lint habits that ruff itself does not enforce (ruff runs in `make check`, not here: a style finding
never fails `make test`). Every `# noqa` names its rule(s) and says why after " - "."""
import io
import re
import tokenize

from tests.conftest import ROOT

LINTED = ["grader", "normlab", "tests", "tools"]
NOQA = re.compile(r"#\s*noqa\b(?P<rest>.*)$")  # in a comment token: text in strings is not a directive
GOOD = re.compile(r":\s*[A-Z]+[0-9]+(\s*,\s*[A-Z]+[0-9]+)*\s+-\s+\S")


def _python_files():
    yield ROOT / "nbgrader_config.py"
    for folder in LINTED:
        if (ROOT / folder).is_dir():
            yield from sorted((ROOT / folder).rglob("*.py"))


def test_every_noqa_names_its_rule_and_says_why():
    bare = []
    for path in _python_files():
        source = path.read_text(encoding="utf-8")
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            match = NOQA.search(token.string) if token.type == tokenize.COMMENT else None
            if match and not GOOD.match(match.group("rest")):
                bare.append(f"{path.relative_to(ROOT)}:{token.start[0]}: {token.string[:100]}")
    assert not bare, "a noqa without a rule or a reason (`# noqa: RULE - why`):\n" + "\n".join(bare)
