"""Colab-like: every self-study notebook, solutions typed in, runs in a bare Colab-style kernel.

A fresh virtual environment (built once per run) holds only what Google Colab preinstalls
and the course uses, at Colab's versions where they matter: ipywidgets 7.7.1, IPython
7.34 and ipykernel 6.17 (Colab's kernel), numpy 2.0, matplotlib 3.10, torch 2.13 (CPU).
No nbgrader, no JupyterLab, no course package: the notebook's first code cell installs
the course with pip, as in Colab, from a wheel of this checkout (LNCOURSE_PACKAGE_SPEC)
instead of the repository URL. nbclient (in the test's own environment) runs the
notebook in that kernel, from a folder outside the repository, so `import grader` finds
only what pip installed.

Packages go in with ``pip --no-deps`` from an explicit list: ipywidgets 7's front-end
half (widgetsnbextension, and through it the classic notebook server) is Colab's own
front end and is not needed by a kernel, and resolving it would install JupyterLab.
For the same reason the set-up cell's pip runs with PIP_NO_DEPS=1; the test then checks
the course package's declared requirements against the kernel's installed versions, which
is what pip's resolver would have found already satisfied in Colab.
"""
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from tests.conftest import ASSIGNMENTS, ROOT
from tests.course_helpers import type_solutions

pytestmark = pytest.mark.slow

# The kernel's packages, all installed with --no-deps: the dependency closure of numpy,
# matplotlib, torch, ipywidgets 7.7.1 and ipykernel, minus front-end-only packages.
# Colab's versions for the widget stack and the kernel; for the rest, versions this
# machine's local package index holds (so that installing them is fast), with Colab's
# major.minor for numpy and matplotlib.
COLAB_PACKAGES = [
    "pip==26.2.1",
    # numerics and plots
    "numpy==2.0.2", "matplotlib==3.10.9", "contourpy==1.3.3", "cycler==0.12.1", "fonttools==4.66.1",
    "kiwisolver==1.5.1", "packaging==26.3", "pillow==11.3.0", "pyparsing==3.3.3",
    "python-dateutil==2.9.0.post0", "six==1.17.0",
    # torch, CPU build (pip finds the wheel on this machine's disk)
    "torch==2.13.0", "filelock==4.0.8", "typing-extensions==4.16.0", "sympy==1.14.0", "mpmath==1.3.0",
    "networkx==3.6.1", "jinja2==3.1.6", "markupsafe==3.0.3", "fsspec==2026.9.0", "setuptools==80.9.0",
    # widgets and Colab's kernel
    "ipywidgets==7.7.1", "ipython-genutils==0.2.0", "traitlets==5.16.1",
    "ipykernel==6.17.1", "ipython==7.34.0", "backcall==0.2.0", "pickleshare==0.7.5", "decorator==5.3.1",
    "jedi==0.20.0", "parso==0.8.7", "pexpect==4.9.0", "ptyprocess==0.7.0", "prompt-toolkit==3.0.53",
    "wcwidth==0.9.1", "pygments==2.21.0", "matplotlib-inline==0.2.2", "debugpy==1.8.22", "psutil==7.2.2",
    "nest-asyncio==1.6.0", "pyzmq==27.2.0", "tornado==6.5.10", "jupyter-client==8.10.0",
    "jupyter-core==5.9.1", "platformdirs==4.12.2",
]
KERNEL_NAME = "colab-like"
CELL_TIMEOUT_S = 600

# Appended to each notebook: what the kernel ended up with, as JSON on the last line.
REPORT_CELL = '''\
import importlib.metadata as _md, json as _json, sys as _sys
import ipywidgets as _ipw, grader as _grader, normlab as _normlab
from packaging.requirements import Requirement as _Req
_unmet = []
for _r in map(_Req, _md.requires("layernorm-course") or []):
    if _r.marker is not None and not _r.marker.evaluate({"extra": ""}):
        continue
    try:
        _v = _md.version(_r.name)
    except _md.PackageNotFoundError:
        _unmet.append(f"{_r} (missing)")
        continue
    if not _r.specifier.contains(_v, prereleases=True):
        _unmet.append(f"{_r} (installed {_v})")
# A file, not only a printed line: what the test reads must not depend on where iopub routes output.
with open("colab-like-report.json", "w") as _f:
    _json.dump({"ipywidgets": _ipw.__version__, "grader": _grader.__file__, "normlab": _normlab.__file__,
                "prefix": _sys.prefix, "unmet": _unmet, "live_widgets": len(_ipw.Widget.widgets)}, _f)'''


def timed(what: str, command: list[str], **kwargs) -> float:
    began = time.monotonic()
    result = subprocess.run(command, capture_output=True, text=True, **kwargs)
    assert result.returncode == 0, f"{what} failed:\n{result.stdout[-3000:]}{result.stderr[-5000:]}"
    return time.monotonic() - began


@pytest.fixture(scope="session")
def colab(tmp_path_factory):
    """The fresh environment: its python, a kernelspec for it, and a wheel of this checkout."""
    base = tmp_path_factory.mktemp("colab-like")
    venv, wheels, checkout = base / "venv", base / "wheels", base / "checkout"
    timings = {}

    # A wheel built from the files git would publish (tracked, or new and not ignored), the
    # way pip builds the repository URL in Colab.
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout.splitlines()
    for name in listed:
        if (ROOT / name).is_file():
            (checkout / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, checkout / name)
    timings["wheel"] = timed("building the course wheel", [sys.executable, "-m", "pip", "wheel", "--no-deps",
                                                           "--quiet", "-w", str(wheels), str(checkout)])
    (wheel,) = wheels.glob("layernorm_course-*.whl")

    # No ensurepip (slow): this environment's pip installs pip and the rest into the new one.
    timings["venv"] = timed("python -m venv", [sys.executable, "-m", "venv", "--without-pip", str(venv)])
    python = venv / "bin" / "python"
    timings["packages"] = timed(
        "installing the Colab packages",
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-compile", "--quiet",
         "--disable-pip-version-check", *COLAB_PACKAGES])

    kernel_dir = base / "kernels" / KERNEL_NAME
    kernel_dir.mkdir(parents=True)
    (kernel_dir / "kernel.json").write_text(json.dumps({
        "argv": [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Colab-like", "language": "python"}))
    home = base / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("JUPYTER", "NBGRADER", "PYTHON", "VIRTUAL_ENV", "MPLBACKEND", "PIP_"))}
    ours = Path(sys.executable).parent  # this environment's bin/: not the kernel's business
    system_path = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p and Path(p) != ours]
    env.update(PATH=os.pathsep.join([str(venv / "bin"), *system_path]), HOME=str(home),
               LNCOURSE_PACKAGE_SPEC=str(wheel), PIP_NO_DEPS="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    print("Colab-like environment: " + ", ".join(f"{k} {v:.1f} s" for k, v in timings.items()))
    return {"python": python, "kernels": base / "kernels", "env": env, "wheel": wheel, "timings": timings,
            "work": base}


def solved_self_study_notebook(assignment: str):
    """notebooks/ID.ipynb with each solution cell's source replaced by solutions/ID.ipynb's (same cell id)."""
    nb = nbformat.read(ROOT / "notebooks" / f"{assignment}.ipynb", as_version=4)
    assert type_solutions(nb, ROOT / "solutions" / f"{assignment}.ipynb"), \
        f"notebooks/{assignment}.ipynb has no solution cell"
    return nb


def run_in_colab_kernel(colab, nb, workdir: Path):
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import AsyncKernelManager
    from nbclient import NotebookClient

    km = AsyncKernelManager(kernel_name=KERNEL_NAME,
                            kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(colab["kernels"])]))
    nb.metadata["kernelspec"] = {"name": KERNEL_NAME, "display_name": "Colab-like", "language": "python"}
    client = NotebookClient(nb, km=km, timeout=CELL_TIMEOUT_S, startup_timeout=120, allow_errors=False,
                            store_widget_state=True, resources={"metadata": {"path": str(workdir)}})
    began = time.monotonic()
    # cleanup_kc: nbclient shuts down only the kernels of managers it made itself; without it each notebook
    # left its kernel running (half a GB each) until the end of the session
    client.execute(env=colab["env"], cwd=str(workdir), cleanup_kc=True)
    assert not km.has_kernel, "the Colab-like kernel outlived its notebook"
    return time.monotonic() - began


def slowest_cells(nb, n: int = 3) -> str:
    from datetime import datetime

    took = []
    for index, cell in enumerate(nb.cells):
        times = cell.metadata.get("execution", {})
        if "iopub.execute_input" in times and "shell.execute_reply" in times:
            start, end = (datetime.fromisoformat(times[k].replace("Z", "+00:00"))
                          for k in ("iopub.execute_input", "shell.execute_reply"))
            took.append(((end - start).total_seconds(), index))
    return ", ".join(f"cell {i} {t:.1f} s" for t, i in sorted(took, reverse=True)[:n])


def stderr_problems(nb) -> list[str]:
    found = []
    for index, cell in enumerate(nb.cells):
        for output in cell.get("outputs", []):
            if output.output_type == "error":
                found.append(f"cell {index}: {output.ename}: {output.evalue}")
            elif output.output_type == "stream" and output.name == "stderr":
                if any(word in output.text for word in ("Traceback", "Error", "Warning")):
                    found.append(f"cell {index} (stderr): {output.text[-1500:]}")
    return found


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_self_study_notebook_runs_in_colab_like_kernel(colab, assignment, tmp_path):
    """Set-up cell installs the course; every cell, check and widget runs under ipywidgets 7.7."""
    nb = solved_self_study_notebook(assignment)
    nb.cells.append(nbformat.v4.new_code_cell(REPORT_CELL, id="colab-like-report"))
    seconds = run_in_colab_kernel(colab, nb, tmp_path)
    print(f"{assignment}: ran in the Colab-like kernel in {seconds:.1f} s; slowest cells: {slowest_cells(nb)}")

    problems = stderr_problems(nb)
    assert not problems, f"{assignment} in the Colab-like kernel:\n" + "\n".join(problems)
    report = json.loads((tmp_path / "colab-like-report.json").read_text())
    site = str(colab["work"] / "venv")
    assert report["ipywidgets"].startswith("7.7"), report
    assert report["prefix"] == site, report
    for package in ("grader", "normlab"):
        assert report[package].startswith(site), f"{package} was imported from {report[package]}, not the pip install"
    assert not report["unmet"], f"the course needs what this Colab-like kernel lacks: {report['unmet']}"

    # Every widget the notebook built was an ipywidgets 7 widget (protocol 1.x models).
    views = [o for c in nb.cells for o in c.get("outputs", [])
             if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]
    state = nb.metadata.get("widgets", {}).get("application/vnd.jupyter.widget-state+json", {}).get("state", {})
    if views:
        assert state, "widgets were displayed but nbclient recorded no widget state"
    for model in state.values():
        if model["model_module"].startswith("@jupyter-widgets/"):
            assert model["model_module_version"].startswith("1."), (
                f"{model['model_name']} speaks {model['model_module_version']}: not an ipywidgets 7 widget")


LEARNER_LOOP_CELL = '''
import numpy as np
from grader.checks.rmsnorm import check_rms_norm
from grader.learner import hint, progress

def rms_norm(x, gamma, eps=1e-6):
    return gamma * x / (np.sqrt(np.mean(x * x, axis=-1, keepdims=True)) + eps)
'''


def test_a_failing_check_shows_its_diagnosis_and_hints_in_the_colab_kernel(colab, tmp_path):
    """IPython 7's traceback hook shows the diagnosis alone; the hint ladder and progress() work there."""
    from grader.catalogue import get

    setup = nbformat.read(ROOT / "notebooks" / "04_rmsnorm.ipynb", as_version=4).cells[1]
    nb = nbformat.v4.new_notebook()
    nb.cells = [setup, nbformat.v4.new_code_cell(LEARNER_LOOP_CELL),
                nbformat.v4.new_code_cell("check_rms_norm(rms_norm)"),
                nbformat.v4.new_code_cell('hint("rms_norm")\nhint("rms_norm")'),
                nbformat.v4.new_code_cell('progress("04_rmsnorm")')]
    for cell in nb.cells[2:]:
        cell.metadata["tags"] = ["raises-exception"]  # nbclient goes on past an expected error
    run_in_colab_kernel(colab, nb, tmp_path)
    errors = [o for o in nb.cells[2].outputs if o.output_type == "error"]
    assert len(errors) == 1, nb.cells[2].outputs
    traceback = "\n".join(errors[0].traceback)
    assert "CheckFailed in check_rms_norm" in traceback and "eps is outside the square root" in traceback, traceback
    assert "site-packages/grader" not in traceback and "File " not in traceback, traceback
    texts = ["".join(o.get("text", "")) + "".join(str(v) for v in o.get("data", {}).values())
             for c in nb.cells[3:] for o in c.outputs]
    shown = "\n".join(texts)
    assert get("rms.eps_outside_sqrt").hint in shown, shown
    assert "✘" in shown and get("rms.eps_outside_sqrt").name in shown, shown
    assert not [o for c in nb.cells[3:] for o in c.outputs if o.output_type == "error"], shown
