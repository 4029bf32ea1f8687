"""Grading on a Dask cluster: ``python -m grader grade A --scheduler tcp://HOST:PORT``.

The coordinator (the ``grader grade`` process) builds the jobs, hands each to a Dask worker
as the same call the local pool makes (``grader.grading.slots.execution_slot.execute_task(job_text)``: data in,
data out), and accepts what comes back exactly as it accepts a local result. Only the
coordinator writes the result cache, the gradebook and the feedback.

Each worker runs the same zygote-and-sandbox executor as a local slot. A job travels whole
(``pack``): the sanitised notebook, the instructor's notebook and the learner's files, as bytes,
so a worker needs no view of the coordinator's disk (Dask-Gateway pods, Slurm nodes); it writes
them to a private folder of its own, executes, and removes it (``run_packed``). A worker needs:
this project installed (``pip install .[dev] -c constraints.txt``) and root or unprivileged user
namespaces for the sandbox; ``probe`` asks every worker which it has. A worker must also run the
coordinator's grader in the same environment (``grader.grading.run.jobs.grader_version``: the grader's
code, Python, every installed version), since that is part of each job's key: a worker that does not
is refused at the start, and one that joins later fails each job it is sent (zero and a message).
Jobs on one worker run one at a time (a lock), so ``--nthreads 1`` and one worker per core
is the efficient layout. A worker that dies mid-job loses nothing: the scheduler gives its
jobs to another worker, and a result is accepted once per job.
"""
from __future__ import annotations

import atexit
import base64
import json
import os
import shutil
import tempfile
import threading
from dataclasses import replace
from pathlib import Path

from grader.course import skip_iri_grammars
from grader.grading.slots import claim as slots

_job_lock = threading.Lock()
_scratch: Path | None = None  # this worker's folder for sandboxes (its own disk, not the coordinator's)


# -- jobs that travel whole ---------------------------------------------------------------------------
def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


class OtherGrader(RuntimeError):
    """This worker's grader or environment is not the one a job's key names."""


def require_same_grader(job, pinned: str) -> None:
    """Raise ``OtherGrader`` unless this process's ``grader_version(pinned)`` is the job's: a result from
    other code or other package versions would be filed under a key that does not describe it."""
    from grader.grading.run.jobs import grader_version

    if grader_version(pinned) != job.grader:
        raise OtherGrader("this Dask worker runs another grader, Python or package versions than the coordinator: "
                          "install the same checkout with the same constraints.txt there")


def pack(job, pinned: str) -> str:
    """``job`` (grader.grading.run.jobs.Job) with the bytes it names: the sanitised notebook, the instructor's
    notebook and every regular file of the learner's folder (links and other entries are left out, as
    the sandbox's copy leaves them out), and ``pinned`` (``GradeConfig.grader_version``), with which the
    worker checks it is the grader the job's key names. Read on the coordinator, which alone sees the course."""
    from grader.grading.run.jobs import folder_entries

    files = [[_b64(relative), _b64(path.read_bytes())] for relative, path, regular in folder_entries(job.files)
             if regular]
    return json.dumps({"job": job.to_json(), "pinned": pinned, "notebook": _b64(Path(job.notebook_path).read_bytes()),
                       "source": _b64(Path(job.source_path).read_bytes()), "files": files})


def _private_file(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(descriptor, "wb") as f:
        f.write(data)


def _pid_of(folder: Path) -> int | None:
    """The worker pid in a scratch folder's name (``lncourse-dask-<pid>-<random>``), or None."""
    parts = folder.name.split("-")
    return int(parts[2]) if len(parts) >= 4 and parts[2].isdigit() else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def sweep_dead_scratch(temp: Path | None = None) -> list[Path]:
    """Remove the scratch folders of this user's workers that died without their atexit (a SIGKILLed
    or OOM-killed worker leaves its sandboxes and job folders behind); returns what it removed.
    Only folders owned by this uid whose pid is gone are touched: a live worker's folder is kept."""
    removed = []
    for folder in Path(temp or tempfile.gettempdir()).glob("lncourse-dask-*"):
        pid = _pid_of(folder)
        try:
            owned = folder.lstat().st_uid == os.getuid() and folder.is_dir() and not folder.is_symlink()
        except OSError:
            continue
        if pid is not None and owned and pid != os.getpid() and not _alive(pid):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


def _worker_scratch() -> Path:
    """This worker's scratch folder for sandboxes and job folders: made once (named after this pid, so
    a later worker can tell a dead one's folder), sandbox uids may pass through it (0711)."""
    global _scratch
    if _scratch is None or not _scratch.is_dir():
        sweep_dead_scratch()
        _scratch = Path(tempfile.mkdtemp(prefix=f"lncourse-dask-{os.getpid()}-"))
        atexit.register(shutil.rmtree, _scratch, True)  # a worker that exits normally leaves nothing behind
        os.chmod(_scratch, 0o711)
        (_scratch / "sandboxes").mkdir(mode=0o711)
        os.chmod(_scratch / "sandboxes", 0o711)
    return _scratch


def unpack(packed: str, folder: Path):
    """The job of ``pack``'s text, its files written under ``folder`` (private: 0700, files 0600) and its
    paths and scratch pointing there; the job's identity (key, digests) is unchanged. Raises ``OtherGrader``
    (nothing written) if this process is not the grader the job's key names."""
    from grader.grading.run.jobs import Job

    data = json.loads(packed)
    job = Job.from_json(data["job"])
    require_same_grader(job, data["pinned"])
    job_folder = folder / "job"
    job_folder.mkdir(mode=0o700)
    _private_file(job_folder / "notebook.ipynb", base64.b64decode(data["notebook"]))
    _private_file(job_folder / "source.ipynb", base64.b64decode(data["source"]))
    files = job_folder / "files"
    files.mkdir(mode=0o700)
    for relative, content in data["files"]:
        path = Path(os.fsdecode(base64.b64decode(relative)))
        if path.is_absolute() or ".." in path.parts:
            raise ValueError(f"a packed file leaves its folder: {path}")
        _private_file(files / path, base64.b64decode(content))
    options = {**job.options, "scratch": str(_worker_scratch() / "sandboxes"),
               "hidden": [*job.options.get("hidden", []), str(job_folder)]}
    return replace(job, notebook_path=str(job_folder / "notebook.ipynb"), source_path=str(job_folder / "source.ipynb"),
                   files=str(files), options=options)


def run_packed(packed: str) -> tuple[str, float]:
    """On a worker: execute a packed job in a private folder of its own, removed afterwards; returns what
    the local pool's ``execute_task`` returns (the result as JSON text, seconds)."""
    from grader.grading.slots import execution_slot

    # 0700 inside the worker's scratch (so a killed worker's sweep takes it too): no sandbox uid reads it
    folder = Path(tempfile.mkdtemp(prefix="job-", dir=_worker_scratch()))
    try:
        return execution_slot.execute_task(unpack(packed, folder).to_json())
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _setup_worker() -> int:
    """On a worker: claim a slot (its sandbox uid) and warm the executor, once per worker process."""
    with _job_lock:
        if slots.held() is None:
            skip_iri_grammars()  # before the executor's first import of nbformat
            slots.claim_slot()
            import grader.grading.autograde.execute  # noqa: F401 - imported once, before the first job
            from grader import oracles
            from grader.grading.sandbox.zygote_client import default_zygote

            oracles._torch()
            default_zygote()
    return slots.held()


def run_serialised(function, *args):
    """Run ``function(*args)`` on a worker, one job at a time (the slot's uid and zygote are one)."""
    _setup_worker()
    with _job_lock:
        return function(*args)


def _worker_report(options: dict, pinned: str = "") -> dict:
    """On a worker: its slot, host, whether a sandbox starts with the class's options ("problem": None
    or why not), the isolation level that sandbox enforced ("none" if none started) and its
    ``grader_version(pinned)``."""
    import socket

    from grader.grading.run.jobs import grader_version
    from grader.grading.slots import execution_slot

    slot = _setup_worker()
    with _job_lock:
        probe = execution_slot.probe({**options, "scratch": str(_worker_scratch() / "sandboxes")})
    return {"host": socket.gethostname(), "slot": slot, "problem": probe.problem, "isolation": probe.level or "none",
            "grader": grader_version(pinned)}


class DaskPool:
    """A ``concurrent.futures``-like pool whose jobs run on the workers of a Dask scheduler."""

    def __init__(self, address: str, connect_seconds: float = 30.0):
        from distributed import Client

        self.address = address
        self.client = Client(address, timeout=connect_seconds, set_as_default=False)
        self.executor = self.client.get_executor(pure=False)

    def workers(self) -> list[str]:
        return sorted(self.client.scheduler_info(n_workers=-1)["workers"])

    def wait_for_workers(self, n: int = 1, seconds: float = 60.0) -> None:
        self.client.wait_for_workers(n, timeout=seconds)

    def reports(self, options: dict, pinned: str = "") -> dict[str, dict]:
        """Every worker's report (``_worker_report``), by worker address."""
        return self.client.run(_worker_report, options, pinned)

    def submit(self, function, *args):
        """A ``concurrent.futures.Future`` of ``function(*args)`` run on some worker."""
        return self.executor.submit(run_serialised, function, *args)

    def shutdown(self, wait: bool = True, cancel_futures: bool = False) -> None:
        try:
            self.executor.shutdown(wait=wait and not cancel_futures)
        finally:
            self.client.close()
