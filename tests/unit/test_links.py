"""Every relative link in every edition resolves: release/ (one folder per assignment), notebooks/, solutions/."""
from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import nbformat
import pytest

from grader.course.build import release_links
from tests.conftest import ASSIGNMENTS, ROOT

LINK = re.compile(r"\]\(([^)\s]+)\)|<a\s[^>]*href=\"([^\"]+)\"|<img\s[^>]*src=\"([^\"]+)\"")
EDITIONS = {"release": lambda a: ROOT / "release" / a / f"{a}.ipynb",
            "notebooks": lambda a: ROOT / "notebooks" / f"{a}.ipynb",
            "solutions": lambda a: ROOT / "solutions" / f"{a}.ipynb"}


def relative_links(path: Path) -> list[str]:
    nb = nbformat.read(path, as_version=4)
    found = []
    for cell in nb.cells:
        if cell.cell_type != "markdown":
            continue
        for match in LINK.finditer(cell.source):
            target = next(g for g in match.groups() if g)
            if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith(("#", "/")):
                continue  # a web address, a mailto:, an anchor in this notebook, an absolute path
            found.append(target)
    return found


@pytest.mark.parametrize("edition", sorted(EDITIONS))
@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_every_relative_link_resolves(edition, assignment):
    path = EDITIONS[edition](assignment)
    links = relative_links(path)
    missing = [link for link in links if not (path.parent / unquote(link.split("#")[0])).exists()]
    assert not missing, f"{path.relative_to(ROOT)}: {missing}"


def test_release_links_point_into_each_assignments_folder():
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("see [04](04_rmsnorm.ipynb) and [03](03_backward.ipynb#the-jacobian)"
                                              " and [the README](../README.md)"),
                nbformat.v4.new_code_cell("x = '[04](04_rmsnorm.ipynb)'")]
    out = release_links(nb)
    assert out.cells[0].source == ("see [04](../04_rmsnorm/04_rmsnorm.ipynb) and "
                                   "[03](../03_backward/03_backward.ipynb#the-jacobian) and [the "
                                   "README](../../README.md)")
    assert out.cells[1].source == "x = '[04](04_rmsnorm.ipynb)'"
