"""One execution slot: a local pool's worker process, which runs one notebook's grading job at a time.

It is forked from the coordinator's forkserver (``grader.grading.slots.warm_slot`` imported this module
there), so nothing here may import nbgrader: a slot runs the trusted test cells and talks to its
zygote, nothing more. The Dask workers run the same ``probe`` and ``execute_task``.
"""
from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass

from grader.grading.run.jobs import run_job
from grader.grading.slots import claim as slots

SANDBOX_UID_BASE = 61000  # one unprivileged uid per parallel slot when grading as root


def init_slot(factory: str | None = None, lifeline=None):
    """Claim this worker's slot (its sandbox uid, grader.grading.slots.claim) and its zygote: a fork of the
    coordinator's warm ``ZygoteFactory`` at ``factory``, or (none) one that imports everything itself.
    The slot's own modules arrive warm from the forkserver (``grader.grading.slots.warm_slot``); ``lifeline``: the read
    end of ``grader.grading.slots.slot_pool.coordinator_lifeline``."""
    die_with_parent()
    if lifeline is not None:
        _exit_with_coordinator(lifeline)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the parent's handler is for the parent
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the parent, which stops the workers
    slots.claim_slot()
    from grader.grading.sandbox.zygote_client import default_zygote, use_factory

    use_factory(factory)
    default_zygote(wait=False)  # a zygote of its own imports torch for the learners' code while this worker
    import grader.grading.autograde.execute  # noqa: F401 - imports it for the checks (test cells run here)
    from grader import oracles

    oracles._torch()
    default_zygote()


def _exit_with_coordinator(lifeline) -> None:
    """Exit this slot (its zygote and sandboxes follow) as soon as ``lifeline`` reads EOF."""
    import threading

    def watch():
        try:
            lifeline.recv_bytes()  # nobody writes: returns only by EOF
        except (EOFError, OSError):
            pass
        os._exit(1)

    threading.Thread(target=watch, name="coordinator-lifeline", daemon=True).start()


def die_with_parent() -> None:
    """A worker (and so its zygote and sandboxes) is killed when its parent dies, even by SIGKILL: the
    coordinator, or for a slot the forkserver, which exits as soon as the coordinator is gone."""
    parent = os.getppid()
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return  # not Linux: the worker notices the broken pipe when it next reads
    if os.getppid() != parent:
        os._exit(1)  # the parent died before the request took effect


def sandbox_uid() -> int:
    """This process's sandbox uid: one per slot held on this machine. A process that runs a sandbox without
    having claimed a slot (a pool's initializer claims one) claims one now, rather than share another run's."""
    return SANDBOX_UID_BASE + slots.claim_slot()  # claimed once per process; later calls return the same slot


@dataclass(frozen=True)
class ProbeResult:
    """What starting one sandbox with the class's options showed (``probe``).

    ``problem``: None if a sandbox started and ran a cell, else why not; ``level``: the isolation
    level the sandbox enforced ("user", "userns", "basic"), None if none started.
    """

    problem: str | None
    level: str | None = None


def probe(options: dict) -> ProbeResult:
    """Start one sandbox with the class's options and run one cell (no learner code runs)."""
    from grader.grading.sandbox import client, zygote_client

    problem = None
    for _ in range(2):  # a zygote that died under us gets one fresh start
        try:
            limits = client.Limits(**options.get("limits", {}))
            with client.Sandbox(**{k: v for k, v in options.items() if k != "limits"}, uid=sandbox_uid(),
                                limits=limits) as box:
                report = box.isolation  # the sandbox's own account (isolation.apply): what it enforced
                level = report.get("mode") if isinstance(report, dict) else None
                if box.run_cell("1 + 1")["error"]:
                    return ProbeResult("a sandbox started but could not run a cell", level)
            return ProbeResult(None, level)
        except client.SandboxError as error:
            problem = str(error)
            zygote_client._default_zygote = None
    return ProbeResult(problem)


def execute_task(job_text: str) -> tuple[str, float]:
    """Execute one job in a pool worker: its result as JSON text, and the seconds it took. Writes nothing."""
    started = time.monotonic()
    return run_job(job_text, sandbox_uid=sandbox_uid()), time.monotonic() - started
