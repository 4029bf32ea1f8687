"""The install files agree: environment.yml, pyproject.toml, constraints.txt, .ci/run."""
import re
import tomllib

from tests.conftest import ROOT


def pyproject():
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)


def constraint_pins():
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, version = line.split("==")
            pins[re.sub(r"[-_.]+", "-", name).lower()] = version
    return pins


def requirement_name(requirement):
    return re.sub(r"[-_.]+", "-", re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0]).lower()


def test_environment_yml_installs_this_project_with_constraints():
    text = (ROOT / "environment.yml").read_text()
    project = pyproject()["project"]
    assert f"name: {project['name']}" in text
    python = re.search(r"- python=(\d+)\.(\d+)", text)
    minimum = tuple(int(p) for p in re.search(r">=(\d+)\.(\d+)", project["requires-python"]).groups())
    assert python and tuple(int(p) for p in python.groups()) >= minimum
    assert "- pip" in text and "-e .[dev]" in text and "-c constraints.txt" in text
    # Thin: no package besides python and pip is listed for conda; pyproject owns the rest.
    dependencies = text.split("dependencies:", 1)[1]
    conda_packages = re.findall(r"^  - (\w[\w.=-]*)$", dependencies, re.M)
    assert sorted(p.split("=")[0] for p in conda_packages) == ["pip", "python"]


def test_every_dependency_is_pinned_in_constraints():
    project = pyproject()["project"]
    pins = constraint_pins()
    for requirement in project["dependencies"] + project["optional-dependencies"]["dev"]:
        assert requirement_name(requirement) in pins, f"{requirement} has no exact version in constraints.txt"
    assert pins["torch"] == "2.13.0"


def test_learner_dependencies_do_not_force_ipywidgets_8():
    # Colab ships ipywidgets 7.7; requiring 8 there forces a runtime restart.
    widgets = [r for r in pyproject()["project"]["dependencies"] if requirement_name(r) == "ipywidgets"]
    assert widgets and ">=8" not in widgets[0].replace(" ", "")


def test_ci_calls_make_test_only():
    lines = [l for l in (ROOT / ".ci" / "run").read_text().splitlines() if l.strip() and not l.startswith("#")]
    assert any("make test" in l for l in lines)
