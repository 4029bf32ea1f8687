"""What a grading run needs from the course folder before anything executes: its nbgrader configuration, the
folders the sandbox must hide, the sandbox's options, a warning when the course is open to other users, the class
that submitted, and the assignment built and in the gradebook."""
from __future__ import annotations

import os
import shutil
import stat
import sys
from pathlib import Path

from grader.grading.config import GradeConfig, file_config
from grader.grading.run.terminal import printable


def load_config(root: Path):
    """The course's nbgrader_config.py, with nbconvert validating each notebook once per step.

    nbconvert validates the whole notebook against its JSON schema after every preprocessor
    (seven per nbgrader step here, a third of the coordinator's time per learner);
    ``Exporter.optimistic_validation`` validates once, after the last one, and still raises on an
    invalid notebook. An instructor's own setting of it is kept.
    """
    config = file_config(root)
    exporters = ("Exporter", "TemplateExporter", "NotebookExporter", "HTMLExporter")
    if not any("optimistic_validation" in config.get(name, {}) for name in exporters):
        config.Exporter.optimistic_validation = True
    return config


DEFAULT_EXCHANGE = "/srv/nbgrader/exchange"  # nbgrader's Exchange.root default


def secret_folders(root: Path) -> list[str]:
    """The course and every nbgrader exchange any configuration names, for the sandbox to cover.

    nbgrader reads nbgrader_config.py from each of Jupyter's config folders (JUPYTER_CONFIG_PATH,
    ~/.jupyter, the environment's and the system's etc/jupyter) and the course; a hub usually
    sets Exchange.root globally. Every value found is hidden, not only the one that wins.
    """
    from jupyter_core.paths import jupyter_config_path
    from traitlets.config.loader import PyFileConfigLoader

    found = [str(root), DEFAULT_EXCHANGE]
    for folder in [*jupyter_config_path(), str(root), os.getcwd()]:
        if not os.path.isfile(os.path.join(folder, "nbgrader_config.py")):
            continue
        try:
            config = PyFileConfigLoader("nbgrader_config.py", path=folder).load_config()
        except Exception:  # noqa: BLE001 - nbgrader itself only warns about a broken config file
            continue
        for section in ("Exchange", "CourseDirectory"):
            value = config.get(section, {}).get("root")
            if isinstance(value, str) and value:
                found.append(os.path.abspath(os.path.expanduser(value)))
    return list(dict.fromkeys(found))


def sandbox_options(work: Path, settings: GradeConfig | None = None, hidden: list[str] = ()) -> dict:
    """How each notebook's sandbox is confined; the uid is added per worker (``execute_task``).

    The sandbox's root is an allow-list (the Python installation, the course packages, the
    system; ``grader.grading.sandbox.isolation``), so the course root, build/, the exchange and any other
    checkout are out of its sight; ``hidden`` (``secret_folders``) covers them even where they
    lie inside an allowed folder.
    ``GradeConfig.isolation`` (auto, user, userns, basic) can only ask for basic explicitly;
    anything else is enforced or the sandbox refuses to start.
    """
    settings = settings or GradeConfig()
    return {"mode": settings.isolation, "scratch": str(work / "sandboxes"),
            "limits": {"cell_seconds": settings.cell_timeout, "notebook_seconds": settings.notebook_timeout},
            "hidden": list(hidden)}


def exposure_warning(root: Path) -> str | None:
    """A warning when other users of the machine can enter the course directory.

    On a shared server that lets students read source/ (the hidden tests), everyone's
    submissions and the gradebook, and nbgrader collect leaves submitted/ folders 0777.
    """
    if any(not folder.stat().st_mode & stat.S_IXOTH for folder in (root, *root.parents)):
        return None  # a folder on the way (a private home) keeps everyone else out
    mode = root.stat().st_mode
    return (f"warning: other users of this machine can enter the course directory {printable(str(root), 200)} "
            f"(mode {stat.S_IMODE(mode):o}): on a shared server students could read source/, submitted/ and the "
            "gradebook. `chmod 700` it (docs/instructors.md).")


def class_of(root: Path, assignment: str) -> list[str] | None:
    """The learners who submitted ``assignment``, or None if nobody did."""
    students = sorted(p.parent.name for p in (root / "submitted").glob(f"*/{assignment}") if p.is_dir())
    if not students:
        print(f"no submissions found under {root / 'submitted'}/*/{assignment}", file=sys.stderr)
        return None
    return students


def prepare(root: Path, assignment: str, config) -> None:
    """Build what grading ``assignment`` needs if it is missing (its source notebook, release/, the gradebook's
    record of it); a fresh work folder."""
    from grader.grading.autograde.nbgrader_steps import gradebook_has_assignment

    built = (root / "source" / assignment / f"{assignment}.ipynb").exists() and (root / "release" / assignment).exists()
    if not built or not gradebook_has_assignment(config, root, assignment):
        from grader.course.build import build

        if built:  # a new or replaced gradebook: nbgrader could not sanitise or record anyone
            print(f"{assignment} is not in the gradebook: building it (nbgrader generate_assignment records it) "
                  "before grading", file=sys.stderr)
        build(root, [assignment])
    work = root / "build" / "grading" / assignment
    shutil.rmtree(work, ignore_errors=True)
    (work / "sandboxes").mkdir(parents=True)
    os.chmod(work / "sandboxes", 0o711)  # sandbox uids reach their own folder, list nothing
