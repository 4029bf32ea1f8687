"""The coordinator's local pool of execution slots (``grader.grading.slots.execution_slot``), and the two warm
processes every slot comes from.

A forkserver imported what a slot needs once (``grader.grading.slots.warm_slot``); each slot is forked from
it. A zygote factory imported what learners' code needs once (``grader.grading.sandbox.zygote
--factory``); each slot's zygote is a fork of it. Both are started once per coordinator, serve every
pool it starts, and are forked from only after they have run nothing. ``prestart`` starts them before
the coordinator imports nbgrader, so the three imports overlap. Nothing here imports nbgrader or torch.
"""
from __future__ import annotations

import atexit
from concurrent.futures import ProcessPoolExecutor

from grader.grading.slots.execution_slot import init_slot

SLOT_MODULES = ["grader.grading.slots.warm_slot"]  # what the forkserver imports before it forks a slot
# What grader.grading.slots.warm_slot imports there: torch for the trusted test cells' reference norms and
# autograd, and torch.fx.experimental.symbolic_shapes (with sympy), which torch.autograd.grad imports on
# its first call with grad_outputs; not torch._dynamo (the grader's dispatch modes opt out of it).
# And what the test cells run with: each notebook's first code cell, its imports, runs in the slot before
# its tests (grader.grading.autograde.execute.trusted_namespace); imported per slot, matplotlib alone was 0.25 s of CPU.
SLOT_WARM_MODULES = ["numpy", "torch", "torch.fx.experimental.symbolic_shapes", "grader.grading.autograde.execute",
                     "grader.grading.slots.execution_slot", "grader.oracles", "matplotlib.pyplot", "IPython.display",
                     "grader.compare", "grader.derive", "grader.learner", "grader.predict"]
# And every module of the learner-side packages those cells import from (the checks, the widgets and
# experiments). Not in the zygote factory: a sandbox imports ipywidgets, through normlab, after its kernel exists.
LEARNER_PACKAGES = ["grader.checks", "normlab"]

_zygote_factory = None  # this process's ZygoteFactory: started once, used by every later pool
_lifeline_pipe = None  # (read end, write end): the write end stays in the coordinator (and its forks)


def zygote_factory_path() -> str | None:
    """The socket of this process's warm zygote factory (started now if need be); None if it cannot start."""
    global _zygote_factory
    from grader.grading.sandbox.zygote_client import ZygoteFactory

    if _zygote_factory is None or not _zygote_factory.alive():
        try:
            _zygote_factory = ZygoteFactory()
        except OSError:
            _zygote_factory = None
            return None
        atexit.register(_zygote_factory.close)
    return _zygote_factory.path


def slot_context():
    """The forkserver context the slots are started from, with its preload set."""
    import multiprocessing

    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(SLOT_MODULES)  # no effect once the server runs: always this list
    return context


def coordinator_lifeline():
    """The read end of a pipe whose write end only the coordinator holds. A slot is the forkserver's child,
    and the forkserver lives as long as any of its children: PDEATHSIG cannot tie a slot to the coordinator,
    this pipe does (EOF when the coordinator is gone, even by SIGKILL)."""
    global _lifeline_pipe
    if _lifeline_pipe is None:
        import multiprocessing

        _lifeline_pipe = multiprocessing.Pipe(duplex=False)
    return _lifeline_pipe[0]


def prestart() -> None:
    """Start the zygote factory and the forkserver now; each imports while this process goes on.
    Best effort: what fails to start here is started (or given up) by ``new_slot_pool``."""
    zygote_factory_path()
    try:
        from multiprocessing import forkserver

        slot_context()
        forkserver.ensure_running()
    except (OSError, ValueError):
        pass


def new_slot_pool(jobs: int) -> ProcessPoolExecutor:
    """``jobs`` execution slots, started when the first task is submitted."""
    return ProcessPoolExecutor(max_workers=jobs, initializer=init_slot,
                               initargs=(zygote_factory_path(), coordinator_lifeline()), mp_context=slot_context())


def kill_now(pool: ProcessPoolExecutor | None) -> None:
    """Stop a pool's workers now, any ``ProcessPoolExecutor`` (an execution slot's zygote and sandboxes die with
    it)."""
    if pool is None:
        return
    processes = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        try:
            process.kill()
        except (OSError, ValueError):
            pass
    for process in processes:
        process.join(5)
