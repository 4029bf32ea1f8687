"""What the grader's own processes do at start (skipping the IRI grammars: ``grader.course.skip_iri_grammars``)."""
from __future__ import annotations

import re
from pathlib import Path

TORCH_CACHE_VARIABLE = "TORCHINDUCTOR_CACHE_DIR"
FACTORY_FOLDER_PREFIX = "lncourse-zygotes-"  # a ZygoteFactory's private folder (its socket, torch's cache)


def package_modules(packages: list[str]) -> list[str]:
    """Every module of each package in ``packages`` (dotted names, the packages first), found without importing
    them: what a warm process imports so that its forks do not."""
    import importlib.util
    import pkgutil

    names = []
    for package in packages:
        spec = importlib.util.find_spec(package)
        names.append(package)
        if spec is not None and spec.submodule_search_locations:
            names += [f"{package}.{info.name}" for info in pkgutil.iter_modules(spec.submodule_search_locations)
                      if not info.name.startswith("_")]
    return names


def private_torch_cache() -> str | None:
    """Give this process (and its forks) a private compile-cache folder before torch._dynamo is imported.

    Importing torch._dynamo creates ``$TMPDIR/torchinductor_<user>`` and leaves it behind; a
    grading run must leave nothing in /tmp. Returns the new folder, for the caller to remove when
    it exits, or None when the variable is already set (the instructor's own folder, kept).
    """
    import os
    import tempfile

    if os.environ.get(TORCH_CACHE_VARIABLE):
        return None
    folder = tempfile.mkdtemp(prefix="lncourse-torch-")
    os.environ[TORCH_CACHE_VARIABLE] = folder
    return folder


_SCHEDULER_LINE = re.compile(r"^[ \t]*c\.GradeConfig\.scheduler[ \t]*=[ \t]*([^#\n]*)", re.M)
_LOCAL = {"", "''", '""', "None"}


def names_a_scheduler(root: Path, argv: list[str]) -> bool:
    """Whether a run probably sends its jobs to Dask (``GradeConfig.scheduler``) when ``--scheduler`` is not given:
    ``--GradeConfig.scheduler=ADDRESS`` among ``argv``, else a line of the course's nbgrader_config.py that sets it.

    The file is read as text: loading it imports nbgrader, the very import the local pool's warm processes
    start beside (``may_execute``). A wrong guess costs time only: the pool starts when a job needs it.
    """
    from grader.grading.config import command_line_config

    given = command_line_config(argv).get("GradeConfig", {})
    if "scheduler" in given:
        return bool(given["scheduler"])
    try:
        text = (Path(root) / "nbgrader_config.py").read_text(errors="replace")
    except OSError:
        return False
    return any(value.strip() not in _LOCAL for value in _SCHEDULER_LINE.findall(text))


def never_graded(root: Path, assignment: str, students) -> bool:
    """Whether one of ``students`` has no autograded/ folder for ``assignment``: their notebook will execute."""
    return any(not (Path(root) / "autograded" / student / assignment).is_dir() for student in students)


def may_execute(root: Path, assignments: list[str], use_cache: bool | None) -> bool:
    """Whether a ``grader grade`` run will probably execute a notebook: a learner never graded, or ``--no-cache``.

    Only then are the sandbox's warm processes started before nbgrader is imported: a class whose
    every learner was graded before is mostly cached, and warming sandboxes it does not need costs
    seconds of CPU. A guess either way costs time only: the pool starts at the first cache miss.
    """
    if use_cache is False:
        return True
    return any(never_graded(root, a, [folder.parent.name for folder in (Path(root) / "submitted").glob(f"*/{a}")])
               for a in assignments)
