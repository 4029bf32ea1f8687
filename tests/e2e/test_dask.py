"""Grading on Dask workers (``grader grade A --scheduler tcp://...``), on loopback.

A real ``dask scheduler`` and two ``dask worker`` processes, started here, grade a generated
class (a quarter each correct, partial, wrong, hostile); the scores, the feedback and the
gradebook must be those of grading the same class on this machine's own pool, and one worker
killed mid-run (SIGKILL) must lose and duplicate nothing: the scheduler gives its jobs to the
other worker, and the coordinator accepts one result per job.
"""
import csv
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grader.grading.slots import dask_pool
from tests.conftest import subprocess_env
from tests.course_helpers import free_port, make_course
from tests.course_helpers import gradebook_rows as _gradebook

ASSIGNMENT = "06_welford"  # the quickest notebook to grade
# 8 in `make test` (two of each kind; the worker is killed after 2 of 8 results, so the other takes
# over at least 2 jobs); LNCOURSE_DASK_LEARNERS=60 grades the bench's 60-learner class (about 5 min here).
LEARNERS = int(os.environ.get("LNCOURSE_DASK_LEARNERS", "8"))
VENV_BIN = Path(sys.executable).parent


# -- slots: one sandbox uid per live worker process on a machine -----------------------------------------
CLAIM = ("import sys, time; from grader.grading.slots import claim; print(claim.claim_slot(sys.argv[1]), flush=True); "
         "time.sleep(60)")


def test_live_workers_hold_distinct_slots_and_a_dead_ones_slot_is_reused(tmp_path):
    holders = [subprocess.Popen([sys.executable, "-c", CLAIM, str(tmp_path)], stdout=subprocess.PIPE, text=True,
                                env=subprocess_env()) for _ in range(3)]
    try:
        slots = [int(p.stdout.readline()) for p in holders]
        assert sorted(slots) == [0, 1, 2]
        holders[1].kill()  # SIGKILL: no cleanup ran, the kernel released the lock
        holders[1].wait()
        again = subprocess.run([sys.executable, "-c", CLAIM.replace("time.sleep(60)", "pass"), str(tmp_path)],
                               capture_output=True, text=True, env=subprocess_env(), timeout=60)
        assert int(again.stdout) == slots[1]
    finally:
        for p in holders:
            p.kill()
            p.wait()


# -- a loopback cluster ------------------------------------------------------------------------------------
class Cluster:
    def __init__(self, folder: Path, workers: int = 2):
        self.port = free_port()
        self.address = f"tcp://127.0.0.1:{self.port}"
        self.folder = folder
        env = subprocess_env()
        self.scheduler = subprocess.Popen([str(VENV_BIN / "dask"), "scheduler", "--host", "127.0.0.1", "--port",
                                           str(self.port), "--no-dashboard"], env=env, cwd=folder,
                                          stdout=subprocess.DEVNULL, stderr=open(folder / "scheduler.log", "w"))
        self.workers = [subprocess.Popen([str(VENV_BIN / "dask"), "worker", self.address, "--nthreads", "1",
                                          "--no-nanny", "--no-dashboard", "--name", f"w{i}", "--local-directory",
                                          str(folder / f"w{i}")], env=env, cwd=folder, stdout=subprocess.DEVNULL,
                                         stderr=open(folder / f"worker{i}.log", "w")) for i in range(workers)]
        from distributed import Client

        with Client(self.address, timeout=60, set_as_default=False) as client:
            client.wait_for_workers(workers, timeout=120)

    def close(self):
        for process in [*self.workers, self.scheduler]:
            if process.poll() is None:
                process.kill()
            process.wait()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """One cluster for the file (each worker imports torch and starts a zygote: seconds of CPU); the test
    that kills a worker comes last."""
    running = Cluster(tmp_path_factory.mktemp("cluster"))
    yield running
    running.close()


@pytest.mark.slow
def test_the_pool_runs_jobs_on_every_worker_and_each_reports_its_sandbox(cluster):
    pool = dask_pool.DaskPool(cluster.address)
    try:
        assert len(pool.workers()) == 2
        futures = [pool.submit(os.getpid) for _ in range(6)]
        assert len({f.result(timeout=120) for f in futures}) == 2  # both worker processes took jobs
        reports = pool.reports({"mode": "auto"})
        worker_slots = [r["slot"] for r in reports.values()]
        # two slots of their own; which numbers depends on what else on the machine grades now
        assert len(set(worker_slots)) == 2 and all(isinstance(s, int) and s >= 0 for s in worker_slots), reports
        assert all(r["problem"] is None and r["isolation"] in ("user", "userns") for r in reports.values()), reports
    finally:
        pool.shutdown()


# -- a class graded twice: locally, and on the cluster with one worker killed -------------------------------
@pytest.fixture(scope="module")
def generated_class(tmp_path_factory) -> tuple[Path, dict]:
    """The class, built once for the file (each test grades copies of it): (course, student -> kind)."""
    from grader.grading.run.bench import make_class

    base = make_course(tmp_path_factory.mktemp("dask"), ASSIGNMENT, name="base")
    roster = make_class(base, [ASSIGNMENT], LEARNERS)
    return base, roster


def _grade(course: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "grader", "grade", ASSIGNMENT, "--root", str(course), "--csv",
                             str(course / "grades.csv"), "--jobs", "2", *extra], cwd=course, env=subprocess_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _scores(course: Path) -> dict:
    with open(course / "grades.csv", newline="") as f:
        return {row["student_id"]: float(row["raw_score"]) for row in csv.DictReader(f)}


MEMORY = re.compile(r"\d+(\.\d+)? ?(bytes|KiB|MiB|GiB)")  # peak memory differs a little from run to run


def _feedback(course: Path) -> dict:
    return {str(p.relative_to(course / "feedback")): MEMORY.sub("N KiB", p.read_text())
            for p in sorted((course / "feedback").rglob("*.html"))}


def _cached(course: Path) -> int:
    return len(list((course / "build" / "grading-cache").rglob("*.json")))


@pytest.mark.slow
def test_dask_grading_equals_local_grading_and_survives_a_killed_worker(tmp_path, generated_class, cluster):
    base, roster = generated_class
    local, distributed = tmp_path / "local", tmp_path / "distributed"
    shutil.copytree(base, local)
    shutil.copytree(base, distributed)

    out, err = _grade(local).communicate(timeout=900)
    assert _scores(local), out + err

    grading = _grade(distributed, "--scheduler", cluster.address)
    deadline = time.monotonic() + 600
    while _cached(distributed) < 2 and grading.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    cached_when_killed = _cached(distributed)
    cluster.workers[0].send_signal(signal.SIGKILL)  # mid-run: the other worker must take over its jobs
    out, err = grading.communicate(timeout=900)
    assert grading.returncode == 0, out + err
    assert 0 < cached_when_killed < LEARNERS, "the worker was not killed mid-run"
    assert cluster.workers[0].wait() == -signal.SIGKILL and cluster.workers[1].poll() is None
    assert "dask: 2 workers" in err

    assert _scores(distributed) == _scores(local)
    assert len(_scores(local)) == LEARNERS
    assert {s for s, kind in roster.items() if kind == "hostile"} <= {s for s, v in _scores(local).items() if v == 0}
    assert _feedback(distributed) == _feedback(local)
    book = _gradebook(distributed)
    assert book == _gradebook(local)
    assert len(book["submissions"]) == LEARNERS and len({g[:2] for g in book["grades"]}) == len(book["grades"])
    assert _cached(distributed) == LEARNERS  # one accepted result per job


@pytest.mark.slow
def test_an_unreachable_scheduler_scores_nobody(tmp_path, generated_class):
    base = tmp_path / "course"
    shutil.copytree(generated_class[0], base)
    out, err = _grade(base, "--scheduler", f"tcp://127.0.0.1:{free_port()}",
                      "--GradeConfig.scheduler_timeout=2").communicate(timeout=300)
    assert "no usable worker" in err and "Nothing was scored" in err, err
    assert not (base / "grades.csv").exists()
    assert _cached(base) == 0
