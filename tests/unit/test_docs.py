"""The README and docs/ hold together: links and anchors resolve, pages named in code exist, the README stays
short, and its table of tested versions says what pyproject.toml, constraints.txt and the Colab-like test hold."""
import re
from pathlib import Path
from urllib.parse import unquote

import pytest
from packaging.specifiers import SpecifierSet

from tests.conftest import ROOT
from tests.unit.test_environment import constraint_pins, normalized, pyproject

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.M | re.S)


def prose(text: str) -> str:
    """Markdown without its fenced code blocks (a `# comment` there is no heading, a `](x)` no link)."""
    return FENCE.sub("", text)


def anchors(path: Path) -> set[str]:
    """GitHub's ids for a page's headings: lower case, punctuation dropped, spaces to hyphens, repeats -1, -2."""
    seen: dict[str, int] = {}
    found = set()
    for heading in re.findall(r"^#{1,6} +(.+?) *#*$", prose(path.read_text(encoding="utf-8")), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        found.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
        seen[slug] = seen.get(slug, 0) + 1
    return found


def test_anchors_follow_githubs_rule():
    page = ROOT / "build" / "test-docs-anchors.md"
    page.parent.mkdir(exist_ok=True)
    page.write_text("# What `grader grade` adds to `nbgrader autograde`\n## Gradescope: one in Gradescope's box\n"
                    "```bash\n# not a heading\n```\n## Notes\n## Notes\n")
    try:
        assert anchors(page) == {"what-grader-grade-adds-to-nbgrader-autograde", "gradescope-one-in-gradescopes-box",
                                 "notes", "notes-1"}
    finally:
        page.unlink()


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_and_anchor_resolves(page):
    broken = []
    for target in LINK.findall(prose(page.read_text(encoding="utf-8"))):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):
            continue  # a web address
        file, _, anchor = unquote(target).partition("#")
        path = (page.parent / file).resolve() if file else page
        if not path.exists():
            broken.append(target)
        elif anchor and path.suffix == ".md" and anchor not in anchors(path):
            broken.append(f"{target} (no such heading)")
    assert not broken, f"{page.relative_to(ROOT)}: {broken}"


def test_every_docs_page_named_in_code_or_tests_exists():
    named = set()
    for folder in ("grader", "normlab", "tests", "tools", "source"):
        for path in (ROOT / folder).rglob("*"):
            if path.suffix in (".py", "") and path.is_file() and "__pycache__" not in path.parts:
                named |= {(m, path) for m in re.findall(r"\bdocs/[\w-]+\.md\b", path.read_text(errors="replace"))}
    assert named, "no page named anywhere: the pattern is wrong"
    missing = sorted(f"{name} (in {path.relative_to(ROOT)})" for name, path in named if not (ROOT / name).exists())
    assert not missing


def test_the_readme_is_short():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 120, f"README.md has {len(lines)} lines: move details into docs/"


def readme_versions() -> dict[str, list[str]]:
    """library -> the cells of its row in the README's "Tested versions" table."""
    text = (ROOT / "README.md").read_text(encoding="utf-8").split("## Tested versions", 1)[1].split("\n## ", 1)[0]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in text.splitlines() if line.startswith("|")]
    assert rows[0][:5] == ["library", "`pyproject.toml` allows", "tested (Python 3.11)", "install only (Python 3.10)",
                           "Colab-like kernel"]
    return {row[0]: row[1:] for row in rows[2:]}


def colab_like_pins() -> list[tuple[str, str]]:
    """The Colab-like kernel's packages, read from its test (importing it would import that test's helpers)."""
    text = (ROOT / "tests" / "e2e" / "test_colab_like.py").read_text()
    pins = re.findall(r'"([\w.-]+)==([\w.]+)"', text.split("COLAB_PACKAGES = [", 1)[1].split("\n]", 1)[0])
    assert any(name == "numpy" for name, _ in pins), "COLAB_PACKAGES not found"
    return pins


def test_the_readmes_tested_versions_are_what_the_project_pins_and_allows():
    project = pyproject()["project"]
    allowed = {}
    for requirement in project["dependencies"] + project["optional-dependencies"]["dev"]:
        name, _, spec = re.match(r"([\w.-]+)\s*(\[.*?\])?\s*([^;]*)", requirement).groups()
        allowed[normalized(name)] = SpecifierSet(spec)
    pins_311, pins_310 = constraint_pins("3.11.7"), constraint_pins("3.10.13")
    colab = {normalized(name): version for name, version in colab_like_pins()}
    rows = readme_versions()
    assert {"numpy", "torch", "nbgrader", "ipykernel"} <= set(rows)
    for library, (allows, on_311, on_310, on_colab) in rows.items():
        key = normalized(library)
        assert SpecifierSet(allows) == allowed[key], f"{library}: pyproject.toml allows {allowed[key]}"
        assert on_311 == pins_311[key], f"{library}: constraints.txt pins {pins_311[key]} on 3.11"
        assert on_310 == pins_310[key], f"{library}: constraints.txt pins {pins_310[key]} on 3.10"
        assert on_colab.split(" ")[0] == colab.get(key, "—"), f"{library}: the Colab-like kernel has {colab.get(key)}"
