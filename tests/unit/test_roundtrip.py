"""The "Create Assignment" round trip: JupyterLab opens a percent script as a notebook through
jupytext's contents manager (the server side of *Open With -> Jupytext Notebook*), the toolbar
edits nbgrader metadata, JupyterLab adds its own, and saving writes back only nbgrader's."""
import difflib
import shutil

import pytest

from grader.course.build import script_to_notebook
from tests.conftest import ASSIGNMENTS

jupytext = pytest.importorskip("jupytext")


@pytest.fixture(params=ASSIGNMENTS)
def lab_copy(request, tmp_path, root):
    """A folder like source/NN/ with the project's jupytext settings, and JupyterLab's contents manager."""
    assignment = request.param
    shutil.copy(root / "pyproject.toml", tmp_path / "pyproject.toml")  # [tool.jupytext] lives there
    shutil.copy(root / "source" / assignment / f"{assignment}.py", tmp_path / "script.py")
    manager = jupytext.TextFileContentsManager(root_dir=str(tmp_path))
    return manager, tmp_path / "script.py"


def test_opening_and_saving_changes_nothing(lab_copy):
    manager, script = lab_copy
    before = script.read_text()
    manager.save(manager.get("script.py"), "script.py")
    assert script.read_text() == before


def test_toolbar_edits_reach_the_script_and_nothing_else_does(lab_copy):
    manager, script = lab_copy
    before = script.read_text()
    model = manager.get("script.py")
    nb = model["content"]
    graded = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("points"))
    graded.metadata["nbgrader"]["points"] = 9  # the toolbar's points box
    new_test = next(c for c in nb.cells if c.cell_type == "code" and "nbgrader" not in c.metadata)
    new_test.metadata["nbgrader"] = {"grade": True, "grade_id": "test_roundtrip", "locked": True, "points": 1,
                                     "schema_version": 3, "solution": False, "task": False}
    for cell in nb.cells:  # what JupyterLab itself writes into a notebook
        cell.metadata["editable"] = True
        cell.metadata["tags"] = ["lab-tag"]
        cell.metadata["execution"] = {"iopub.status.busy": "2026-11-29T00:00:00Z"}
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {}}}
    manager.save(model, "script.py")

    after = script.read_text()
    changed = [line for line in difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0)
               if line[:1] in "+-" and not line.startswith(("+++", "---"))]
    assert len(changed) == 4, "\n".join(changed)  # two cell headers, each replaced
    assert all(line[1:].startswith("# %%") for line in changed), "\n".join(changed)
    for unwanted in ["editable", "lab-tag", "iopub", "widget-state"]:
        assert unwanted not in after

    rebuilt = script_to_notebook(script)
    ids = {c.metadata.get("nbgrader", {}).get("grade_id"): c for c in rebuilt.cells}
    assert ids[graded.metadata["nbgrader"]["grade_id"]].metadata["nbgrader"]["points"] == 9
    assert ids["test_roundtrip"].id == "test_roundtrip"
