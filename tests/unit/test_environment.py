"""The install files agree: environment.yml, pyproject.toml, constraints.txt, .ci/run."""
import re

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

from tests.conftest import ROOT

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10 (pyproject's dev extra brings tomli)
    import tomli as tomllib

# Pythons whose markers constraints.txt distinguishes (soupsieve needs 3.11.5), up to the newest tested.
PYTHONS = ["3.10.0", "3.10.13", "3.11.0", "3.11.4", "3.11.5", "3.11.7", "3.12.1", "3.13.0"]


def pyproject():
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)


def normalized(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def python_environment(version):
    """Marker environment of this machine, as if it ran Python ``version``."""
    return {**default_environment(), "python_full_version": version,
            "python_version": ".".join(version.split(".")[:2])}


def constraint_pins(python):
    """name -> exact version, of the lines of constraints.txt that apply on ``python``."""
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            pin = Requirement(line)
            if pin.marker is None or pin.marker.evaluate(python_environment(python)):
                assert normalized(pin.name) not in pins, f"two lines of constraints.txt apply to {pin.name} on {python}"
                assert str(pin.specifier).startswith("=="), line
                pins[normalized(pin.name)] = str(pin.specifier)[2:]
    return pins


def requirement_name(requirement):
    return normalized(Requirement(requirement).name)


def test_environment_yml_installs_this_project_with_constraints():
    text = (ROOT / "environment.yml").read_text()
    project = pyproject()["project"]
    assert f"name: {project['name']}" in text
    # conda's Python is one pyproject allows, and the one the unmarked pins were tested on.
    python = re.search(r"- python=(\d+\.\d+)$", text, re.M)
    assert python and SpecifierSet(project["requires-python"]).contains(python.group(1))
    assert f"on Python {python.group(1)}" in (ROOT / "constraints.txt").read_text()
    assert "- pip" in text and "-e .[dev]" in text and "-c constraints.txt" in text
    # Thin: no package besides python and pip is listed for conda; pyproject owns the rest.
    dependencies = text.split("dependencies:", 1)[1]
    conda_packages = re.findall(r"^  - (\w[\w.=-]*)$", dependencies, re.M)
    assert sorted(p.split("=")[0] for p in conda_packages) == ["pip", "python"]


def test_every_dependency_is_pinned_in_constraints_on_every_python():
    project = pyproject()["project"]
    for python in PYTHONS:
        pins = constraint_pins(python)  # also: at most one line applies to a package
        for text in project["dependencies"] + project["optional-dependencies"]["dev"]:
            requirement = Requirement(text)
            if requirement.marker is None or requirement.marker.evaluate(python_environment(python)):
                assert requirement_name(text) in pins, f"{text} has no exact version in constraints.txt on {python}"
        assert pins["torch"] == "2.13.0"


def test_the_lowest_python_allowed_is_one_the_install_test_resolves_on():
    from tests.e2e.test_install import INTERPRETERS

    floor = re.fullmatch(r">=\s*(\d+\.\d+)", pyproject()["project"]["requires-python"].strip())
    assert floor, "requires-python is a plain lower bound"
    assert f"pyenv-{floor.group(1)}" in INTERPRETERS and PYTHONS[0].startswith(floor.group(1) + ".")


def test_learner_dependencies_do_not_force_ipywidgets_8():
    # Colab ships ipywidgets 7.7; requiring 8 there forces a runtime restart.
    widgets = [r for r in pyproject()["project"]["dependencies"] if requirement_name(r) == "ipywidgets"]
    assert widgets and ">=8" not in widgets[0].replace(" ", "")


def test_ci_calls_make_test_only():
    lines = [line for line in (ROOT / ".ci" / "run").read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    assert any("make test" in line for line in lines)


def test_every_tested_pin_lies_inside_the_bounds_and_every_bound_has_a_ceiling():
    """pyproject's ranges are honest: each admits the version tested (constraints.txt, on every Python), and each
    has a ceiling (below the next minor for the libraries whose internals the grader touches), but for
    calendar-versioned ones."""
    project = pyproject()["project"]
    requirements = [Requirement(t) for t in project["dependencies"] + project["optional-dependencies"]["dev"]]
    for python in PYTHONS:
        pins = constraint_pins(python)
        for requirement in requirements:
            if requirement.marker is not None and not requirement.marker.evaluate(python_environment(python)):
                continue
            pinned = pins[requirement_name(str(requirement))]
            assert requirement.specifier.contains(pinned, prereleases=True), \
                f"{requirement} excludes {pinned} ({python})"
    calendar = {"distributed", "tomli"}
    for requirement in requirements:
        if requirement_name(str(requirement)) not in calendar:
            assert any(spec.operator == "<" for spec in requirement.specifier), f"{requirement} has no ceiling"


def test_constraints_lowest_is_generated_from_the_current_bounds():
    """constraints-lowest.txt (what tests/e2e/test_lowest_versions.py installs) pins each floor of pyproject.toml:
    tools/lowest_constraints.py writes it, and a bound changed without rerunning it fails here."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("lowest_constraints", ROOT / "tools" / "lowest_constraints.py")
    lowest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lowest)
    assert (ROOT / "constraints-lowest.txt").read_text() == lowest.render(pyproject()), (
        "constraints-lowest.txt is out of date: run python tools/lowest_constraints.py")
    pins = {normalized(Requirement(line).name): str(Requirement(line).specifier)
            for line in lowest.render(pyproject()).splitlines() if line and not line.startswith("#")}
    project = pyproject()["project"]
    for text in project["dependencies"] + project["optional-dependencies"]["dev"]:
        requirement = Requirement(text)
        if requirement.marker is not None and not requirement.marker.evaluate(python_environment("3.11.7")):
            continue
        floor = next(spec.version for spec in requirement.specifier if spec.operator == ">=")
        expected = lowest.NOT_AT_FLOOR.get(requirement.name, (floor,))[0]
        assert pins[requirement_name(text)] == f"=={expected}", text
