"""The sandbox's Jupyter kernel: ipykernel's own, in this process, publishing to a recorder instead of sockets.

The kernel is ipykernel's own (``InProcessKernel`` and its ``ZMQInteractiveShell``): the same
magics (``%matplotlib``, ``%timeit``, ``%%capture``, ``!cmd``...), display publisher, inline
matplotlib backend and ``get_ipython().kernel`` as under ``nbgrader autograde``. What it
publishes becomes nbformat outputs (``outputs.CellOutputs``): no network socket is opened (its
event loop's wake-up socketpair is a Unix one) and no kernel object holds the worker or its channel.
"""
from __future__ import annotations

import os
import sys

NOT_A_MODULE = "<a notebook cell: no module>"  # a name no import gives sys.modules


def start(record, tripwires):
    """Start the in-process kernel and return it. ``Worker.start_kernel`` does, once, before the grader's hello,
    so a kernel that cannot start says why (and every request finds it started).

    ``record``: called with each message the kernel publishes (the kernel's session holds it, never the worker);
    ``tripwires``: installed here, before any learner code.
    """
    _import_before_the_notebook_folder()
    from grader.grading.seams import ipykernel as ipykernel_seam

    ipykernel_seam.refuse_unless_usable()

    tripwires.install()  # before any learner code: `from torch... import layer_norm` binds the wrapper
    _name_the_user()
    _inline_figures()
    kernel = _make_kernel(_kernel_class(), record)
    # As in a kernel started by Jupyter: print() and writes to fds 1 and 2 (os.system, C code) are outputs.
    kernel.stdout = ipykernel_seam.FdOutStream(kernel.session, kernel.iopub_thread, "stdout")
    kernel.stderr = ipykernel_seam.FdOutStream(kernel.session, kernel.iopub_thread, "stderr")
    sys.stdout, sys.stderr = kernel.stdout, kernel.stderr
    ipykernel_seam.refuse_stdin(kernel)  # input() raises StdinNotImplementedError, as under nbclient
    _without_pty(kernel.shell)
    if "" not in sys.path:
        sys.path.insert(0, "")  # the notebook's folder, as in a kernel: its helper modules import
    return kernel


def _import_before_the_notebook_folder() -> None:
    """Everything the worker and its helpers import later, imported before '' joins sys.path:
    a learner's inspect.py or traceback.py must not replace them."""
    import base64  # noqa: F401 - imported before '' joins sys.path (see above)
    import contextlib  # noqa: F401 - imported before '' joins sys.path (see above)
    import inspect  # noqa: F401 - imported before '' joins sys.path (see above)
    import json  # noqa: F401 - imported before '' joins sys.path (see above)
    import pwd  # noqa: F401 - imported before '' joins sys.path (see above)
    import select  # noqa: F401 - imported before '' joins sys.path (see above)
    import time  # noqa: F401 - imported before '' joins sys.path (see above)
    import traceback  # noqa: F401 - imported before '' joins sys.path (see above)
    import tracemalloc  # noqa: F401 - imported before '' joins sys.path (see above)

    import numpy  # noqa: F401 - imported before '' joins sys.path (see above)


def _name_the_user() -> None:
    """USER and LOGNAME, as a login would set them (getpass, some libraries read them)."""
    import pwd

    if not os.environ.get("USER") or not os.environ.get("LOGNAME"):
        try:
            user = pwd.getpwuid(os.getuid()).pw_name
        except KeyError:
            user = "learner"
        os.environ.setdefault("USER", user)
        os.environ.setdefault("LOGNAME", user)


def _inline_figures() -> None:
    """ipykernel's default matplotlib backend: figures appear as outputs."""
    if not os.environ.get("MPLBACKEND"):
        os.environ["MPLBACKEND"] = "module://matplotlib_inline.backend_inline"
        if "matplotlib" in sys.modules:  # imported by the zygote, under another default
            sys.modules["matplotlib"].rcParams["backend"] = os.environ["MPLBACKEND"]


def _make_kernel(kernel_class, record):
    """A ``kernel_class`` whose session hands each message to ``record`` instead of a socket."""
    from jupyter_client.session import Session
    from traitlets.config import Config

    class RecordingSession(Session):
        """Hands each message the kernel publishes to ``record`` instead of a socket."""

        def send(self, stream, msg_or_type, content=None, parent=None, ident=None, buffers=None, track=False,
                 header=None, metadata=None):
            msg = msg_or_type if isinstance(msg_or_type, dict) else self.msg(
                msg_or_type, content=content, parent=parent, header=header, metadata=metadata)
            record(msg)
            return msg

    config = Config()
    config.HistoryManager.hist_file = ":memory:"  # In/Out and %history work; no file, no saving thread
    return kernel_class(config=config, session=RecordingSession(config=config))


def _kernel_class():
    """ipykernel's InProcessKernel, without the debugger (no frontend can attach; debugpy costs 0.2 s)."""
    if "ipykernel.debugger" not in sys.modules and "debugpy" not in sys.modules:
        sys.modules["debugpy"] = None  # so ipykernel.debugger finds no debugpy
        try:
            import ipykernel.debugger  # noqa: F401 - imported for its side effect, before the learner runs
        except ImportError:
            pass
        finally:
            del sys.modules["debugpy"]  # the learner's own `import debugpy` still works
    from ipykernel.inprocess.ipkernel import InProcessKernel

    return InProcessKernel


def _without_pty(shell) -> None:
    """``!cmd`` and ``x = !cmd`` run through a pseudo-terminal (pexpect); where the sandbox has
    none, run them as IPython does on Windows: through pipes (fds 1 and 2 are outputs already)."""
    try:
        for fd in os.openpty():
            os.close(fd)
        return
    except OSError:
        pass
    from IPython.utils.process import get_output_error_code
    from IPython.utils.text import LSString, SList

    def getoutput(cmd, split=True, depth=0):
        if cmd.rstrip().endswith("&"):
            raise OSError("Background processes not supported.")
        out, err, code = get_output_error_code(shell.var_expand(cmd, depth=depth + 1))
        shell.user_ns["_exit_code"] = code
        text = out + err if err else out
        return SList(text.splitlines()) if split else LSString(text)

    shell.system = shell.system_raw
    shell.getoutput = getoutput


def flush(kernel) -> None:
    """Hand over everything the cell printed: its text, and what it wrote to fds 1 and 2."""
    for stream in (kernel.stdout, kernel.stderr):
        try:
            stream.flush()  # drains the fd's pipe, then waits until the IOPub thread has handed everything over
        except Exception:  # noqa: BLE001 - a broken stream must not stop the cell
            pass


def known_not_a_module(shell, source: str) -> None:
    """Tell ``inspect`` that this cell's file is no module's file, before the cell runs.

    Formatting a traceback, IPython asks ``inspect.getmodule`` about each frame, about ten times a
    frame; for a cell's file, which is on no disk and in no module, every ask walks all of
    ``sys.modules`` (about 2,000 with torch) to find none. A wrong notebook fails a dozen cells:
    a third of its sandbox's CPU went there. With the file mapped to a name that is not in
    ``sys.modules``, getmodule answers None at once, as the walk would have for any frame or code
    object (objects without ``__name__``; objects with ``__module__`` never look). A module that
    really has this file replaces the entry at the next walk.
    """
    try:
        import inspect

        cell_file = shell.compile.get_code_name(source, source, shell.execution_count)
        inspect.modulesbyfile.setdefault(cell_file, NOT_A_MODULE)
    except Exception:  # noqa: BLE001 - a faster traceback only; the cell runs either way
        pass
