"""Grading on a Dask cluster: ``python -m grader grade A --scheduler tcp://HOST:PORT``.

The coordinator (the ``grader grade`` process) builds the jobs, hands each to a Dask worker
as the same call the local pool makes (``grader.grading.pipeline._execute_task(job_text)``: data in,
data out), and accepts what comes back exactly as it accepts a local result. Only the
coordinator writes the result cache, the gradebook and the feedback.

Each worker runs the same zygote-and-sandbox executor as a local slot. A worker needs:
this project installed (``pip install .[dev] -c constraints.txt``), the course directory at
the same path as on the coordinator (a shared filesystem, as on a JupyterHub), and root or
unprivileged user namespaces for the sandbox; ``probe`` asks every worker which it has.
Jobs on one worker run one at a time (a lock), so ``--nthreads 1`` and one worker per core
is the efficient layout. A worker that dies mid-job loses nothing: the scheduler gives its
jobs to another worker, and a result is accepted once per job.
"""
from __future__ import annotations

import threading

from grader.grading import slots
from grader.grading.startup import skip_iri_grammars

_job_lock = threading.Lock()


def _setup_worker() -> int:
    """On a worker: claim a slot (its sandbox uid) and warm the executor, once per worker process."""
    with _job_lock:
        if slots.held() is None:
            skip_iri_grammars()  # before the executor's first import of nbformat
            slots.claim_slot()
            import grader.grading.execute  # noqa: F401 - imported once, before the first job
            from grader import oracles
            from grader.grading.sandbox.client import default_zygote

            oracles._torch()
            default_zygote()
    return slots.held()


def run_serialised(function, *args):
    """Run ``function(*args)`` on a worker, one job at a time (the slot's uid and zygote are one)."""
    _setup_worker()
    with _job_lock:
        return function(*args)


def _worker_report(options: dict) -> dict:
    """On a worker: its slot, host, whether a sandbox starts with the class's options ("problem": None
    or why not) and the isolation level that sandbox enforced ("none" if none started)."""
    import socket

    from grader.grading import pipeline

    slot = _setup_worker()
    with _job_lock:
        probe = pipeline._probe(options)
    return {"host": socket.gethostname(), "slot": slot, "problem": probe.problem, "isolation": probe.level or "none"}


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

    def reports(self, options: dict) -> dict[str, dict]:
        """Every worker's report (``_worker_report``), by worker address."""
        return self.client.run(_worker_report, options)

    def submit(self, function, *args):
        """A ``concurrent.futures.Future`` of ``function(*args)`` run on some worker."""
        return self.executor.submit(run_serialised, function, *args)

    def shutdown(self, wait: bool = True, cancel_futures: bool = False) -> None:
        try:
            self.executor.shutdown(wait=wait and not cancel_futures)
        finally:
            self.client.close()
