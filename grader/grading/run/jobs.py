"""Grading jobs: hermetic, content-addressed, returning their result as data.

A **job** is one learner's notebook folder plus the assignment's trusted bundle, named by
digests; its **result** is the JSON document of ``grader.grading.run.results`` (schema-checked, never
pickled) with a ``job`` field naming the job that produced it. The key of a job is

    sha256({"assignment", "student", "notebook", "submission", "bundle", "grader", "settings"})

- ``submission``: the sanitised notebook as executed (each cell's type, text and grade_id, in
  order) and every file of the learner's folder the sandbox sees (path, bytes);
- ``bundle``: the instructor's notebook for it (source/<assignment>/<notebook>.ipynb: the
  test cells, hidden ones included, and the imports they run with);
- ``grader``: this grader (every module of ``grader`` and ``normlab``, the result schema) and the
  environment it runs in (Python, and every installed distribution's version: a new numpy or torch
  can change a verdict, so it re-executes);
- ``settings``: what changes a verdict besides those (isolation level, time limits);
- and who it is for: two learners who hand in the same bytes are two jobs (a result names
  its learner, and is accepted for that learner only).

A result is stored under a key only if it was computed from that key's bytes: the executor reports
the digests of what it read and ran (``executed``: the notebook's cells, the learner's folder as the
sandbox copied it), and ``accept`` refuses a result whose ``executed`` is not the job's ``submission``
(a file changed between the job's making and its run), so such a result is neither recorded nor cached.

Seam. ``run_job(job_text) -> result_text`` is a pure function of data in, data out: the job is
a JSON text (``Job.to_json``), the result a JSON text; the worker writes no file the
coordinator reads. The local pool (``grader.grading.run.pipeline``) calls it in warm worker processes; a Dask
executor submits the same function (``client.submit(run_job, job.to_json(), key=job.key)``)
and hands the returned text to the same ``accept``. Only the coordinator validates results,
writes the cache (``ResultCache``), the gradebook and the feedback.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from grader.grading.run import results

JOB_FIELDS = ("key", "submission", "bundle", "grader", "settings")
_VERSION_CACHE: dict[str, str] = {}


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def canonical(value) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


# What installs packages, not what runs a notebook: a worker image with another pip grades the same.
INSTALLERS = {"pip", "setuptools", "wheel"}


def package_folders() -> list[str]:
    """Where this Python imports installed packages from: its site-packages, the user's (where Python reads it:
    not in a venv; ``pip install --user`` there shadows the environment's) and every PYTHONPATH folder (which the
    slots and sandboxes inherit)."""
    import site
    import sysconfig

    folders = [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
    if site.ENABLE_USER_SITE:
        folders.append(site.getusersitepackages())
    folders += [f for f in os.environ.get("PYTHONPATH", "").split(os.pathsep) if f]
    return list(dict.fromkeys(folders))


def environment() -> str:
    """What executes a job besides the grader's code, as text: the Python (version, implementation,
    platform), PYTHONPATH, and every distribution installed in ``package_folders()``, by name and version."""
    import platform
    import sys

    names = set()
    for folder in package_folders():
        try:
            # a dist-info folder's name holds its distribution's name and version (parsing every METADATA: 0.1 s)
            names.update(n for n in os.listdir(folder) if n.endswith((".dist-info", ".egg-info"))
                         and n.split("-")[0].lower() not in INSTALLERS)
        except OSError:
            pass
    python = f"{platform.python_implementation()} {'.'.join(map(str, sys.version_info[:3]))} " \
             f"{sys.platform} {platform.machine()}"
    # a folder on PYTHONPATH may hold plain packages, with no dist-info to name them: its path counts too
    return "\n".join([python, f"PYTHONPATH={os.environ.get('PYTHONPATH', '')}", *sorted(names)])


def grader_version(pinned: str = "") -> str:
    """Digest of the grading code (every .py of the grader and normlab packages, and the schema) and
    of ``environment()``; or, if ``pinned`` (``GradeConfig.grader_version``), of that name instead of
    the code (the environment still counts)."""
    if "env" not in _VERSION_CACHE:
        _VERSION_CACHE["env"] = _sha(environment().encode())
    if pinned:
        return _sha(f"pinned {pinned}\nschema {results.SCHEMA_VERSION}\nenvironment {_VERSION_CACHE['env']}".encode())
    if "v" not in _VERSION_CACHE:
        import grader

        digest = hashlib.sha256(f"schema {results.SCHEMA_VERSION}\n".encode())
        for package in (Path(grader.__file__).parent, Path(grader.__file__).parent.parent / "normlab"):
            for path in sorted(package.rglob("*.py")):
                if "__pycache__" in path.parts:
                    continue
                digest.update(str(path.relative_to(package.parent)).encode() + b"\0")
                digest.update(_sha(path.read_bytes()).encode() + b"\n")
        digest.update(f"environment {_VERSION_CACHE['env']}".encode())
        _VERSION_CACHE["v"] = digest.hexdigest()
    return _VERSION_CACHE["v"]


def executed_digest(nb) -> str:
    """What the executor reads of a sanitised notebook: each cell's type, text and grade_id, in order."""
    cells = []
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        grade_id = meta.get("grade_id") if isinstance(meta, dict) else None
        cells.append([cell.cell_type, cell.source, grade_id if isinstance(grade_id, str) else None])
    return _sha(canonical(cells))


def folder_entries(folder: Path):
    """(relative path as bytes, path, is a regular file) for every file under ``folder``, in sorted order;
    links are not followed (a link is an entry that is not a regular file)."""
    folder = Path(folder)
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
        dirnames.sort()
        for name in sorted(filenames):
            path = Path(dirpath) / name
            yield os.fsencode(path.relative_to(folder)), path, path.is_file() and not path.is_symlink()


def folder_digest(folder: Path | None, copied: bool = False) -> str:
    """Every regular file under ``folder`` (relative path, bytes), in sorted order; links are not followed.
    Other entries (links, devices) count by name, unless ``copied``: then only what the sandbox's copy of the
    folder holds counts (its regular files), which a job's ``submission`` and a result's ``executed`` digest."""
    digest = hashlib.sha256()
    if not folder or not Path(folder).is_dir():
        return _sha(b"no folder")
    for relative, path, regular in folder_entries(folder):
        if not regular:
            if not copied:
                digest.update(b"other\0" + relative + b"\n")
            continue
        digest.update(b"file\0" + relative + b"\0" + _sha(path.read_bytes()).encode() + b"\n")
    return digest.hexdigest()


def submission_digest(parts: dict) -> str:
    """A job's ``submission``: the digest of its parts ({"notebook": executed_digest, "folder": folder_digest}),
    which the executor reports for what it ran (a result's ``executed``, ``grader.grading.autograde.execute``)."""
    return _sha(canonical(parts))


def execution_settings(options: dict) -> dict:
    """The sandbox options that can change a verdict (not the uid, scratch or hidden folders)."""
    return {"mode": options.get("mode", "auto"), "limits": dict(sorted(options.get("limits", {}).items()))}


@dataclass(frozen=True)
class Job:
    """One learner notebook to execute; plain data (``to_json``/``from_json``) so any worker can run it."""

    assignment: str
    student: str
    notebook: str
    notebook_path: str  # the sanitised notebook (autograded/<student>/<assignment>/<notebook>.ipynb)
    source_path: str  # the trusted bundle: the instructor's notebook
    files: str  # the learner's folder, as the sandbox sees it
    options: dict = field(default_factory=dict)  # sandbox options (grader.grading.run.pipeline.sandbox_options)
    submission: str = ""
    bundle: str = ""
    grader: str = ""
    settings: str = ""
    notebook_digest: str = ""  # grader.grading.run.results.notebook_digest of the sanitised notebook
    key: str = ""
    submission_parts: dict = field(default_factory=dict)  # {"notebook", "folder"}: the digests ``submission`` is of

    @classmethod
    def make(cls, assignment: str, student: str, notebook: str, notebook_path: Path, source_path: Path,
             files: Path, options: dict, grader: str | None = None) -> "Job":
        import nbformat

        nb = nbformat.read(str(notebook_path), as_version=4)
        parts_read = {"notebook": executed_digest(nb), "folder": folder_digest(files, copied=True)}
        submission = submission_digest(parts_read)
        bundle = results.file_digest(Path(source_path))
        settings = _sha(canonical(execution_settings(options)))
        parts = {"submission": submission, "bundle": bundle, "grader": grader or grader_version(), "settings": settings}
        # the learner is part of the key: two learners' identical notebooks are two jobs, two results
        key = _sha(canonical({**parts, "assignment": assignment, "student": student, "notebook": notebook}))
        return cls(assignment, student, notebook, str(notebook_path), str(source_path), str(files), dict(options),
                   notebook_digest=results.notebook_digest(nb), key=key, submission_parts=parts_read, **parts)

    def identity(self) -> dict:
        """What a result must carry to be accepted for this job."""
        return {name: getattr(self, name) for name in JOB_FIELDS}

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "Job":
        return cls(**json.loads(text))


def run_job(job_text: str, sandbox_uid: int | None = None, attempts: int = 2) -> str:
    """Execute one job; returns its result as JSON text (``grader.grading.run.results.SCHEMA`` plus ``job``).

    The executor's whole interface: data in, data out. A sandbox that could not start, or whose
    launcher died, gets one fresh zygote and one more try (``attempts``).
    """
    from grader.grading.autograde.execute import execute_submission
    from grader.grading.sandbox import zygote_client

    job = Job.from_json(job_text)
    who = {"assignment": job.assignment, "student": job.student, "notebook": job.notebook}
    options = {**job.options, "files": job.files}
    if sandbox_uid is not None:
        options["uid"] = sandbox_uid
    result = None
    for attempt in range(attempts):
        result = execute_submission(job.notebook_path, job.source_path, options, who=who)
        if (result["isolation"] is not None and not result.get("retry")) or attempt == attempts - 1:
            break
        zygote_client._default_zygote = None  # no sandbox started, or its zygote died: once more with a fresh one
    result["job"] = job.identity()
    return json.dumps(result)


def cacheable(result: dict) -> bool:
    """Only a complete run is reused: a sandbox that did not start, died or hit a limit runs again next time;
    and only one that says what it executed (``accept`` checked that it is its job's submission)."""
    return (result.get("isolation") is not None and not result.get("retry") and result.get("complete") is True
            and isinstance(result.get("executed"), dict))


def accept(job: Job, data) -> tuple[dict | None, str | None]:
    """(result, None) if ``data`` (a JSON text or a decoded document) is a valid result of exactly
    ``job``; else (None, why not). A result naming another job, learner, notebook or bundle is refused, and
    so is one whose executor read other bytes than the job's (``executed``: the notebook's cells and the
    learner's folder changed between the job's making and its run)."""
    if isinstance(data, (str, bytes)):
        if len(data) > results.MAX_RESULT_BYTES:
            return None, "the result is too large to be trusted"
        try:
            data = json.loads(data)
        except (ValueError, RecursionError) as error:
            return None, f"the result is unreadable ({type(error).__name__})"
    problem = results.invalid(data) if isinstance(data, dict) else "not a JSON object"
    if problem:
        return None, f"the result is malformed ({problem})"
    if data.get("job") != job.identity():
        return None, "the result was produced for another job"
    expected = {"assignment": job.assignment, "student": job.student, "notebook": job.notebook,
                "source_digest": job.bundle, "notebook_digest": job.notebook_digest}
    for name, value in expected.items():
        if data.get(name) != value:
            return None, f"the result does not belong to this job ({name} differs)"
    if "executed" in data and submission_digest(data["executed"]) != job.submission:
        changed = [part for part in ("notebook", "folder") if data["executed"][part] != job.submission_parts.get(part)]
        return None, (f"the result is of other bytes than the job's ({' and '.join(changed) or 'submission'} changed "
                      "between the job's making and its run)")
    return data, None


class ResultCache:
    """Accepted results by job key, one JSON file each (``<folder>/<key[:2]>/<key>.json``); written
    only by the coordinator, atomically (a reader sees a whole file or none); read back through ``accept``."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)

    def path(self, key: str) -> Path:
        if len(key) != 64 or not all(c in "0123456789abcdef" for c in key):
            raise ValueError("a job key is a sha256 hex digest")
        return self.folder / key[:2] / f"{key}.json"

    def get(self, job: Job) -> tuple[dict | None, str | None]:
        """The cached result of ``job``, or (None, why not: absent, or refused by ``accept``)."""
        path = self.path(job.key)
        try:
            if path.is_symlink() or not path.is_file():
                return None, None
            if path.stat().st_size > results.MAX_RESULT_BYTES:
                return None, "the cached result is too large to be trusted"
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            return None, f"the cached result is unreadable ({type(error).__name__})"
        result, problem = accept(job, text)
        if result is not None and not cacheable(result):
            return None, "the cached result is incomplete or does not say what was executed"
        return result, problem

    def put(self, job: Job, result: dict) -> None:
        """Store an accepted, complete result (anything else is not stored)."""
        if not cacheable(result) or accept(job, result)[0] is None:
            return
        path = self.path(job.key)
        path.parent.mkdir(parents=True, exist_ok=True)
        os.chmod(self.folder, 0o700)
        temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        with open(temporary, "w", encoding="utf-8") as f:
            f.write(json.dumps(result))
            f.flush()
            os.fsync(f.fileno())
        temporary.replace(path)
