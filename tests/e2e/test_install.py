"""Installing the course on the Pythons people have, and a set-up that reinstalls only as the
venv's owner.

For each interpreter present (Debian 12's /usr/bin/python3, pyenv's 3.10 to 3.13), pip resolves
`.[dev]` with constraints.txt in a dry run from a throw-away venv: nothing is installed. All
interpreters run at once (13-17 s of CPU each, most of it pip turning index pages into candidates).
The interpreter this suite runs on needs no dry run: its .venv is a real install of the same
constraints, and its installed distributions are checked the same way (exactly the pins).

Only wheel metadata is read, never a whole wheel: pip >= 25.3 stops a dry run before
downloading, and `--use-feature=fast-deps` reads a wheel's metadata with HTTP range requests
when the index offers no PEP 658 metadata file (this machine's index offers none). Without
both, each of 3.10, 3.12 and 3.13 would download torch (500 MB) and its CUDA packages (GBs).
Each dry run's HTTP requests are recorded, and none may have fetched a whole file over 20 MB.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from tests.conftest import ROOT

pytestmark = pytest.mark.slow

# One pip for every interpreter, run from its wheel: pips before 25.3 (the venvs' own, 23.0 to
# 24.2 here) download every wheel they resolve, even in a dry run. The one `make install` installs.
PIP = next(line for line in (ROOT / "constraints.txt").read_text().splitlines() if line.startswith("pip=="))
DRY_RUN_TIMEOUT_S = 600
# A dry run fetches index pages and byte ranges of wheels; a wheel fetched whole above this
# size means the dry run is downloading what it resolves (torch's wheels are 500 MB).
LARGEST_WHOLE_DOWNLOAD = 20 * 2**20
# Each dry run records its HTTP requests (for the check above) through pip's vendored urllib3 logger alone,
# which logs one line per request: pip's own --log writes all of pip's debug output (50 MB, a third of a
# run's CPU).
PIP_WITH_REQUEST_LOG = """
import logging, logging.config, runpy, sys
handler = logging.FileHandler(sys.argv.pop(1))
handler.setFormatter(logging.Formatter("%(message)s"))
pip_configures = logging.config.dictConfig

def configure_then_record_requests(config):
    pip_configures(config)  # resets the level and handlers of every logger below pip._vendor
    requests = logging.getLogger("pip._vendor.urllib3.connectionpool")
    requests.setLevel(logging.DEBUG)
    requests.addHandler(handler)

logging.config.dictConfig = configure_then_record_requests
sys.argv.pop(0)  # now pip's path inside its wheel, then pip's arguments
runpy.run_path(sys.argv[0], run_name="__main__")
"""
TORCH = "2.13.0"
# PyPI's torch for Linux brings these (its own markers); only the CPU build, which the tested
# environment holds, does without them, so constraints.txt does not pin them.
TORCH_CUDA_PACKAGES = re.compile(r"^(nvidia-|cuda-|triton$)")


def newest_pyenv(minor: str) -> Path | None:
    """pyenv's newest 3.x.y of ``minor`` ("3.10"), or None."""
    versions = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    found = [p for p in versions.glob(f"{minor}.*") if re.fullmatch(r"\d+\.\d+\.\d+", p.name)]
    found = [p / "bin" / "python" for p in sorted(found, key=lambda p: Version(p.name))]
    return found[-1] if found and os.access(found[-1], os.X_OK) else None


INTERPRETERS = {
    "system-python3": Path("/usr/bin/python3") if os.access("/usr/bin/python3", os.X_OK) else None,  # Debian 12: 3.11.2
    **{f"pyenv-{minor}": newest_pyenv(minor) for minor in ["3.10", "3.11", "3.12", "3.13"]},
}
PRESENT = {name: python for name, python in INTERPRETERS.items() if python}


def is_this_suites_python(python: Path | None) -> bool:
    """Whether ``python`` is the interpreter this suite's venv was made from (same installation)."""
    return python is not None and Path(sys.base_prefix).resolve() == python.resolve().parent.parent


def needs_dry_run(name: str) -> bool:
    """Every present interpreter but this suite's own (its .venv is a real install of the constraints),
    unless no other is present: pip's traffic is then checked on that one."""
    return not is_this_suites_python(PRESENT[name]) or all(is_this_suites_python(p) for p in PRESENT.values())


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def constraint_lines() -> list[Requirement]:
    lines = (ROOT / "constraints.txt").read_text().splitlines()
    return [Requirement(line) for line in lines if line.strip() and not line.startswith("#")]


def copy_project(destination: Path) -> None:
    """What pip needs to build the project's metadata: it writes an .egg-info beside it, so
    each run gets its own copy rather than the shared checkout."""
    destination.mkdir(parents=True)
    for name in ["pyproject.toml", "README.md", "constraints.txt"]:
        shutil.copy2(ROOT / name, destination / name)
    for package in ["grader", "normlab"]:
        shutil.copytree(ROOT / package, destination / package, ignore=shutil.ignore_patterns("__pycache__"))


@pytest.fixture(scope="module")
def dry_runs(tmp_path_factory):
    """Starts every present interpreter's dry run at once; name -> (process, work folder, start)."""
    if not PRESENT:
        yield {}
        return
    base = tmp_path_factory.mktemp("install")
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                    "--dest", str(base), PIP], check=True, capture_output=True, text=True)
    wheel = next(base.glob("pip-*.whl"))
    runs = {}
    for name, python in PRESENT.items():
        if not needs_dry_run(name):
            continue  # its own .venv is the install: test_constraints_resolve reads it
        work = base / name
        copy_project(work / "project")
        subprocess.run([str(python), "-m", "venv", "--without-pip", str(work / "venv")], check=True)
        command = [str(work / "venv" / "bin" / "python"), "-c", PIP_WITH_REQUEST_LOG, str(work / "requests.log"),
                   f"{wheel}/pip", "install", "--dry-run", "--quiet", "--ignore-installed", "--use-feature=fast-deps",
                   "--report", str(work / "report.json"), "-c", "constraints.txt", ".[dev]"]
        with open(work / "output.txt", "w") as output:
            process = subprocess.Popen(command, cwd=work / "project", stdout=output, stderr=subprocess.STDOUT)
        runs[name] = (process, work, time.monotonic())
    yield runs
    for process, _, _ in runs.values():
        if process.poll() is None:
            process.kill()
            process.wait()


def fetched(log: str) -> list[tuple[str, int, int]]:
    """(path, HTTP status, bytes) of each GET in pip's log (urllib3's debug lines)."""
    return [(path, int(status), int(size)) for path, status, size in
            re.findall(r'"GET (\S+) HTTP/[\d.]+" (\d{3}) (\d+)', log)]


def test_an_interpreter_to_check_is_present():
    if not PRESENT:
        message = "none of /usr/bin/python3 and pyenv's 3.10-3.13 is on this machine"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{message}: CI must check that constraints.txt resolves")
        pytest.skip(message)


def installed_report() -> dict:
    """This suite's environment in the shape of pip's report: what a dry run would have resolved."""
    import importlib.metadata
    import sysconfig

    from packaging.markers import default_environment

    # The venv's site-packages only: sys.path can hold more (setuptools puts its vendored packages on it)
    site = sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})
    install = [{"metadata": {"name": d.metadata["Name"], "version": d.version}}
               for d in importlib.metadata.distributions(path=site)]
    return {"environment": default_environment(), "install": install}


@pytest.mark.parametrize("name", list(INTERPRETERS))
def test_constraints_resolve(name, dry_runs):
    if name not in PRESENT:
        pytest.skip(f"{name} is not on this machine")
    if name not in dry_runs:  # this suite's own interpreter: its venv holds what pip installed
        check_resolution(name, installed_report(), installed=True)
        print(f"{name}: this suite's environment (Python {sys.version.split()[0]}) holds exactly constraints.txt")
        return
    process, work, began = dry_runs[name]
    try:
        process.wait(timeout=max(1, DRY_RUN_TIMEOUT_S - (time.monotonic() - began)))
    except subprocess.TimeoutExpired:
        process.kill()
        pytest.fail(f"{name}: pip's dry run took over {DRY_RUN_TIMEOUT_S} s")
    seconds = time.monotonic() - began
    output = (work / "output.txt").read_text()
    # past this machine's index warnings
    errors = output[output.find("ERROR"):] if "ERROR" in output else output[-4000:]
    assert process.returncode == 0, f"{name}: pip could not resolve .[dev] with constraints.txt:\n{errors}"

    report = json.loads((work / "report.json").read_text())
    resolved = check_resolution(name, report)
    environment = report["environment"]
    requests = fetched((work / "requests.log").read_text())
    # none at all would mean the log missed them (pip's vendored urllib3 renamed?), not that pip fetched nothing
    assert requests, f"{name}: no HTTP request of the dry run was recorded: is the package index reachable?"
    whole = [(path.rsplit("/", 1)[-1], size) for path, status, size in requests if status == 200
             and path.endswith((".whl", ".tar.gz", ".zip")) and size > LARGEST_WHOLE_DOWNLOAD]
    assert whole == [], f"{name}: the dry run downloaded whole files: {whole}"
    traffic = f"{len(requests)} GETs, {sum(size for _, _, size in requests) / 2**20:.0f} MiB"
    print(f"{name} (Python {environment['python_full_version']}): resolved {len(resolved)} packages in "
          f"{seconds:.0f} s; {traffic}; torch {resolved['torch']['metadata']['version']}")


def check_resolution(name: str, report: dict, installed: bool = False) -> dict:
    """Checks pip's report (or this environment's, ``installed``) against constraints.txt; returns
    the resolved items by normalized name."""
    environment = report["environment"]
    resolved = {normalized(item["metadata"]["name"]): item for item in report["install"]}
    versions = {n: Version(item["metadata"]["version"]).public for n, item in resolved.items()}
    pins = {}
    for line in constraint_lines():
        if line.marker is None or line.marker.evaluate(environment):
            assert normalized(line.name) not in pins, f"{name}: two lines of constraints.txt apply to {line.name}"
            pins[normalized(line.name)] = str(line.specifier).removeprefix("==")

    assert versions["torch"] == TORCH
    for package, version in versions.items():
        if package in pins:
            assert version == pins[package], f"{name}: {package} {version}, pinned {pins[package]}"
        else:  # nothing left to chance: every package is pinned for this Python
            assert package in {"layernorm-course", "setuptools"} | ({"pip"} if installed else set()) \
                or TORCH_CUDA_PACKAGES.match(package), (
                f"{name}: {package} {version} is not pinned in constraints.txt for Python "
                f"{environment['python_full_version']}")
    # Wheels only: an sdist would need a compiler (and minutes) on the learner's machine.
    sdists = [n for n, item in resolved.items() if n != "layernorm-course" and not installed
              and not item["download_info"]["url"].endswith(".whl")]
    assert sdists == [], f"{name}: no wheel for {sdists}"
    if environment["python_version"] == "3.11":
        # Exactly the pinned versions, none missing (from 3.11.5 on: the tested environment).
        tested = {n: v for n, v in versions.items() if n in pins}
        if not installed:
            pins.pop("pip")  # a dry run installs what .[dev] needs, which pip is not
        assert tested == pins, f"{name}: pinned but not resolved: {sorted(set(pins) - set(tested))}"
    return resolved


@pytest.mark.parametrize("name", list(INTERPRETERS))
def test_the_course_packages_compile(name, tmp_path):
    """grader/ and normlab/ use no syntax newer than each supported Python (a syntax check only)."""
    python = INTERPRETERS[name]
    if python is None:
        pytest.skip(f"{name} is not on this machine")
    env = dict(os.environ, PYTHONPYCACHEPREFIX=str(tmp_path))  # no __pycache__ written into the checkout
    result = subprocess.run([str(python), "-m", "compileall", "-q", "grader", "normlab"], cwd=ROOT, env=env,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


# -- the set-up stamp ---------------------------------------------------------------------------
def test_set_up_reinstalls_only_as_the_venvs_owner():
    """A course whose .venv is older than pyproject.toml. A throw-away user runs `make build`
    while .venv is root's (mode 755): one line says who can update it, pip does not run, the
    build does. Once .venv is that user's, the user would reinstall and root would not. The
    venv's python is a script that logs its arguments: other users cannot read pyenv's
    Pythons under /root, and no real Python is needed."""
    if os.geteuid() != 0:
        pytest.skip("needs root to create a throw-away user")
    for tool in ["make", "useradd", "userdel", "runuser"]:
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed")
    user = f"lncstamp{uuid.uuid4().hex[:8]}"
    course = Path(tempfile.mkdtemp(prefix="make-stamp-"))  # pytest's tmp_path is private to root
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MAKE", "MFLAGS"))}  # not `make test`'s flags
    try:
        course.chmod(0o755)
        shutil.copy2(ROOT / "Makefile", course / "Makefile")
        calls = course / "calls.log"
        calls.touch()
        calls.chmod(0o666)
        venv = course / ".venv"
        (venv / "bin").mkdir(parents=True)
        (venv / "lib" / "python3.11" / "site-packages").mkdir(parents=True)
        python = venv / "bin" / "python"
        python.write_text(f'#!/bin/sh\necho "$*" >> {calls}\n')
        python.chmod(0o755)
        stamp = venv / ".installed"
        stamp.touch()
        os.utime(stamp, (0, 0))  # set up long ago: older than the files below
        for name in ["pyproject.toml", "constraints.txt"]:
            (course / name).write_text("")
        subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", user], check=True)

        def make(*args, as_user=True):
            prefix = ["runuser", "-u", user, "--"] if as_user else []
            return subprocess.run(prefix + ["make", "--no-print-directory", *args], cwd=course, env=env,
                                  capture_output=True, text=True, timeout=60)

        planned = make("-n", "build")
        assert planned.returncode == 0, planned.stderr
        assert "pip" not in planned.stdout and "make install" in planned.stdout, planned.stdout
        ran = make("build")
        assert ran.returncode == 0, ran.stdout + ran.stderr
        assert "only its owner (root) can update it, with 'make install'" in ran.stdout, ran.stdout
        assert calls.read_text().splitlines() == ["-m grader build"]  # and no `-m pip`

        subprocess.run(["chown", "-R", user, str(venv)], check=True)
        assert "-m pip install" in make("-n", "build").stdout  # the owner does bring it up to date
        as_root = make("build", as_user=False)
        assert as_root.returncode == 0 and f"only its owner ({user})" in as_root.stdout, as_root.stdout + as_root.stderr
        assert calls.read_text().splitlines() == ["-m grader build"] * 2
    finally:
        subprocess.run(["userdel", user], capture_output=True)
        shutil.rmtree(course, ignore_errors=True)
