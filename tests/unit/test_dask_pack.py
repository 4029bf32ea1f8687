"""Jobs that travel whole to a Dask worker (grader.grading.slots.dask_pool.pack / unpack): the worker needs no
view of the coordinator's disk, and the job it runs is the same job (same key, digests and files)."""
import base64
import json
import os
import stat
from pathlib import Path

import nbformat
import pytest

from grader.grading.run.jobs import Job, folder_digest, grader_version
from grader.grading.slots import dask_pool


@pytest.fixture
def job(tmp_path):
    course = tmp_path / "coordinator"
    notebook, source, files = course / "autograded" / "a.ipynb", course / "source" / "a.ipynb", course / "files"
    for path in (notebook, source):
        path.parent.mkdir(parents=True, exist_ok=True)
        nb = nbformat.v4.new_notebook()
        nb.cells = [nbformat.v4.new_code_cell(f"print({path.parent.name!r})", id="c1")]
        nbformat.write(nb, path)
    (files / "data").mkdir(parents=True)
    (files / "helper.py").write_text("VALUE = 3\n")
    (files / "data" / "table.bin").write_bytes(bytes(range(256)))
    (files / "link.py").symlink_to(files / "helper.py")  # never followed, never sent
    options = {"mode": "auto", "scratch": str(course / "sandboxes"), "limits": {"cell_seconds": 20},
               "hidden": [str(course)]}
    return Job.make("A", "ada", "a", notebook, source, files, options, grader=grader_version("test"))


def test_the_unpacked_job_is_the_same_job_with_its_bytes_in_a_private_folder(job, tmp_path):
    worker = tmp_path / "worker"
    worker.mkdir()
    unpacked = dask_pool.unpack(dask_pool.pack(job, "test"), worker)
    assert unpacked.identity() == job.identity() and unpacked.notebook_digest == job.notebook_digest
    for path in (unpacked.notebook_path, unpacked.source_path, unpacked.files):
        assert str(worker) in path and "coordinator" not in path
    assert open(unpacked.notebook_path, "rb").read() == open(job.notebook_path, "rb").read()
    assert open(unpacked.source_path, "rb").read() == open(job.source_path, "rb").read()
    got = sorted(str(p.relative_to(unpacked.files)) for p in Path(unpacked.files).rglob("*") if p.is_file())
    assert got == ["data/table.bin", "helper.py"]
    assert folder_digest(unpacked.files) != folder_digest(job.files)  # the link is not there: the sandbox skips it too
    job_folder = worker / "job"
    assert stat.S_IMODE(job_folder.stat().st_mode) == 0o700
    assert stat.S_IMODE(os.stat(unpacked.source_path).st_mode) == 0o600  # the hidden tests
    assert str(job_folder) in unpacked.options["hidden"] and unpacked.options["hidden"][0] == job.options["hidden"][0]
    scratch = unpacked.options["scratch"]
    assert "coordinator" not in scratch and os.path.isdir(scratch) and stat.S_IMODE(os.stat(scratch).st_mode) == 0o711
    assert unpacked.options["limits"] == job.options["limits"]


@pytest.mark.parametrize("name", [b"../escape.py", b"/etc/cron.d/x", b"data/../../x"])
def test_a_packed_file_that_leaves_its_folder_is_refused(job, tmp_path, name):
    packed = json.loads(dask_pool.pack(job, "test"))
    packed["files"].append([base64.b64encode(name).decode(), base64.b64encode(b"x").decode()])
    (tmp_path / "worker").mkdir()
    with pytest.raises(ValueError):
        dask_pool.unpack(json.dumps(packed), tmp_path / "worker")
    assert not (tmp_path / "escape.py").exists()


def test_a_worker_running_another_grader_or_environment_refuses_the_job(job, tmp_path, monkeypatch):
    """The job's key names the coordinator's grader and environment: a worker whose own differ (another
    numpy, another checkout, another pin) writes nothing and raises; the coordinator scores it zero."""
    from grader.grading.run import jobs
    (tmp_path / "worker").mkdir()
    with pytest.raises(dask_pool.OtherGrader, match="same constraints.txt"):
        dask_pool.unpack(dask_pool.pack(job, "another pin"), tmp_path / "worker")
    monkeypatch.setattr(jobs, "_VERSION_CACHE", {})
    real = jobs.environment()
    monkeypatch.setattr(jobs, "environment", lambda: real.replace("numpy-", "numpy-0.0.1+other-"))
    with pytest.raises(dask_pool.OtherGrader):
        dask_pool.unpack(dask_pool.pack(job, "test"), tmp_path / "worker")
    assert list((tmp_path / "worker").iterdir()) == []


class _FakeCluster:
    """What ``grader.grading.run.grading_run._dask_pool`` asks of a ``DaskPool``: two workers, one of another grader."""

    def __init__(self, address, connect_seconds):
        pass

    def wait_for_workers(self, n, seconds):
        pass

    def reports(self, options, pinned):
        ours = grader_version(pinned)
        return {"tcp://a:1": {"host": "a", "slot": 0, "problem": None, "isolation": "userns", "grader": ours},
                "tcp://b:1": {"host": "b", "slot": 0, "problem": None, "isolation": "userns", "grader": "0" * 64}}


def test_the_coordinator_refuses_a_cluster_with_a_worker_of_another_grader(monkeypatch):
    from grader.grading.run import grading_run
    monkeypatch.setattr(dask_pool, "DaskPool", _FakeCluster)
    _, problem = grading_run._dask_pool("tcp://x:1", {}, 1.0, grader_version("pin"), "pin")
    assert problem and "tcp://b:1" in problem and "tcp://a:1" not in problem and "constraints.txt" in problem
    monkeypatch.setattr(_FakeCluster, "reports", lambda self, options, pinned: {
        "tcp://a:1": {"host": "a", "slot": 0, "problem": None, "isolation": "userns",
                      "grader": grader_version(pinned)}})
    assert grading_run._dask_pool("tcp://x:1", {}, 1.0, grader_version("pin"), "pin")[1] is None


def test_a_dead_workers_scratch_is_swept_and_a_live_ones_kept(tmp_path):
    """A SIGKILLed worker never runs its atexit: the next worker of the same user removes its folder
    (named after its pid), and nothing of a live worker's or of another naming."""
    import subprocess
    import sys

    finished = subprocess.Popen([sys.executable, "-c", "pass"])
    finished.wait()  # its pid is now free (reuse within this test is vanishingly unlikely)
    dead = tmp_path / f"lncourse-dask-{finished.pid}-abc"
    live = tmp_path / f"lncourse-dask-{os.getppid()}-def"
    other = tmp_path / "lncourse-dask-xyz"
    for folder in (dead, live, other):
        (folder / "sandboxes" / "job-1").mkdir(parents=True)
        (folder / "sandboxes" / "job-1" / "hidden.ipynb").write_text("{}")
    assert dask_pool.sweep_dead_scratch(tmp_path) == [dead]
    assert not dead.exists() and live.is_dir() and other.is_dir()
    assert dask_pool.sweep_dead_scratch(tmp_path) == []
