"""Jupyter fidelity: the sandbox runs cells the way a Jupyter kernel (and so ``nbgrader autograde``) does.

Most tests talk to one ``Sandbox`` directly and look at the worker's "ran" reply: its
``outputs`` (nbformat output dicts) and, as before, ``stdout``/``stderr``/``error``. The slow
test at the end grades one honest notebook per feature twice, with plain ``nbgrader autograde``
and with ``python -m grader grade``, and wants full and identical marks.
"""
import csv
import json
import os
import shutil
import subprocess
import sys
import time

import nbformat
import pytest

from grader.grading.sandbox.client import Limits, Sandbox
from tests.conftest import subprocess_env


def run(box, source: str) -> dict:
    """The worker's raw reply to one cell."""
    reply = box.request({"op": "run", "source": source})
    assert reply["op"] == "ran"
    assert set(reply) >= {"outputs", "stdout", "stderr", "error"}
    json.dumps(reply)  # plain data only
    return reply


def ok(box, source: str) -> dict:
    reply = run(box, source)
    assert reply["error"] is None, reply
    assert not [o for o in reply["outputs"] if o["output_type"] == "error"], reply["outputs"]
    return reply


def stdout(reply) -> str:
    return "".join(o["text"] for o in reply["outputs"] if o["output_type"] == "stream" and o["name"] == "stdout")


def kinds(reply) -> list[str]:
    return [o["output_type"] for o in reply["outputs"]]


def valid_outputs(outputs) -> None:
    """Each output is one nbformat accepts."""
    cell = nbformat.v4.new_code_cell("", outputs=[nbformat.from_dict(o) for o in outputs])
    nbformat.validate(nbformat.v4.new_notebook(cells=[cell]))


# slow: every test here goes through a real grading sandbox or kernel (the module's sandbox starts in ~3 s)
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def box():
    with Sandbox(mode="auto") as sandbox:
        yield sandbox


# -- magics a notebook may start a cell with: the rest of the cell still runs ------------------------------------
@pytest.mark.parametrize("magic", ["%matplotlib inline", "%autosave 0", "%config InlineBackend.figure_format = 'png'",
                                   "%load_ext autoreload\n%autoreload 2", "%timeit -n1 -r1 sum(range(10))",
                                   "!echo hi", "%precision 3", "%env MY_FLAG=1", "%pwd", "%who"])
def test_a_magic_at_the_top_of_a_cell_leaves_the_def_below_it_working(box, magic):
    name = "f_" + str(abs(hash(magic)))
    ok(box, f"{magic}\ndef {name}(x):\n    return x + 1\n")
    assert stdout(ok(box, f"print({name}(41))")) == "42\n"


def test_timeit_prints_its_timing(box):
    assert "per loop" in stdout(ok(box, "%timeit -n1 -r1 sum(range(10))"))


def test_time_cell_magic_runs_the_cell_and_reports(box):
    reply = ok(box, "%%time\ntimed = sum(range(1000))\n")
    assert "Wall time" in stdout(reply)
    assert stdout(ok(box, "print(timed)")) == "499500\n"


def test_capture_cell_magic_keeps_the_output_out_of_the_cell(box):
    assert ok(box, "%%capture captured\nprint('hidden')\n")["outputs"] == []
    assert stdout(ok(box, "print(captured.stdout, end='')")) == "hidden\n"


def test_shell_escapes(box):
    # in a pseudo-terminal of the sandbox's own, as in a Jupyter kernel: stderr joins stdout, lines end in CRLF
    assert stdout(ok(box, "!echo hi; echo there >&2")) == "hi\r\nthere\r\n"
    reply = ok(box, "listing = !echo a; echo b\nlisting")
    assert reply["outputs"][-1]["data"]["text/plain"] == "['a', 'b']"
    assert stdout(ok(box, "import os\n_ = os.system('echo from-fd-1')")) == "from-fd-1\n"  # fds 1 and 2 are outputs too


# The thread that watches fd 1 reads the pipe, then writes the text to the stream: a cell that ends in between must
# still get its text (it went missing under load, about once in twenty runs). Here that thread pauses after
# each read; the pause is longer than the rest of the cell.
PAUSE_AFTER_EACH_WATCHER_READ = """
import os, threading, time
_read = os.read
def read_then_pause(fd, size):
    data = _read(fd, size)
    if threading.current_thread() is not threading.main_thread():
        time.sleep(0.3)
    return data
os.read = read_then_pause
os.write(1, b'read by the old os.read\\n')
"""


def test_what_a_cell_writes_to_its_fds_is_its_output_however_slow_the_watching_thread():
    with Sandbox(mode="auto") as slow_box:
        ok(slow_box, PAUSE_AFTER_EACH_WATCHER_READ)
        for _ in range(2):
            reply = ok(slow_box, "import os, sys\n_ = os.system('echo to-fd-1; echo to-fd-2 >&2')\n"
                                 "os.write(1, b'direct\\n')\n42")
            assert stdout(reply) == "to-fd-1\ndirect\n"
            assert "".join(o["text"] for o in reply["outputs"] if o.get("name") == "stderr") == "to-fd-2\n"
            assert kinds(reply)[-1] == "execute_result"  # flushed before the result, as ipykernel's displayhook does
            assert stdout(ok(slow_box, "print('next')")) == "next\n"  # nothing spills into the next cell
            # what reached the fd before a print comes before it, though the thread still holds it
            assert stdout(ok(slow_box, "os.write(1, b'first\\n')\nprint('second')")) == "first\nsecond\n"
        # a learner who breaks os.read (the watching thread dies of it) still sees what they print
        reply = ok(slow_box, "def broken(*args):\n    raise OSError('no reading')\nos.read = broken\n"
                             "os.write(1, b'left in the pipe\\n')\nprint('printed', flush=True)\nprint('at the end')")
        assert stdout(reply) == "printed\nat the end\n"


# A fork of the sandbox (a learner's multiprocessing) has no thread watching fd 1, and may be made while that thread
# holds its lock: the child's flush must not wait for that lock.
FORK_WHILE_ANOTHER_THREAD_HOLDS_THE_READ_LOCK = """
import os, sys, threading, time
held, release = threading.Event(), threading.Event()
def hold():
    with sys.stdout._read_lock:
        held.set()
        release.wait(5)
threading.Thread(target=hold).start()
held.wait()
pid = os.fork()
if pid == 0:
    sys.stdout.flush()
    os._exit(0)
for _ in range(500):
    if os.waitpid(pid, os.WNOHANG)[0]:
        print('the child exited')
        break
    time.sleep(0.01)
else:
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    print('the child hung')
release.set()
"""


def test_a_forked_child_flushes_without_waiting_for_the_watching_threads_lock(box):
    assert stdout(ok(box, FORK_WHILE_ANOTHER_THREAD_HOLDS_THE_READ_LOCK)) == "the child exited\n"


def test_what_forked_children_print_is_the_cells_output_as_in_jupyter(box):
    reply = ok(box, "import multiprocessing\ndef square(x):\n    print('child', x, 'of', 4)\n    return x * x\n"
                    "with multiprocessing.get_context('fork').Pool(2) as pool:\n    print(pool.map(square, range(4)))")
    lines = stdout(reply).splitlines()
    assert lines[-1] == "[0, 1, 4, 9]" and sorted(lines[:-1]) == [f"child {x} of 4" for x in range(4)], lines


THREADS_PRINT_WHILE_A_CHILD_WRITES_TO_FD_1 = """
import subprocess, threading
child = subprocess.Popen(['sh', '-c', 'for i in $(seq 2000); do echo fd-$i; done'])
failures = []
def talk(n):
    try:
        for i in range(2000):
            print('thread', n, i)
    except Exception as error:
        failures.append(repr(error))
threads = [threading.Thread(target=talk, args=(n,)) for n in range(8)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
child.wait()
"""


def test_threads_print_at_once_while_a_child_writes_to_fd_1(box):
    ok(box, THREADS_PRINT_WHILE_A_CHILD_WRITES_TO_FD_1)
    assert stdout(ok(box, "print(failures[:3])")) == "[]\n"


def test_a_child_flooding_fd_1_after_its_cell_holds_no_later_cell():
    # `yes` keeps writing to fd 1 after its cell ends: each later cell still returns at once, its text capped
    with Sandbox(mode="auto") as flooded:
        ok(flooded, "import subprocess\nflood = subprocess.Popen(['yes'])")
        began, texts = time.monotonic(), []
        for _ in range(3):
            texts.append(stdout(ok(flooded, "for i in range(1000):\n    print('mine', i)")))
            assert len(texts[-1]) < 2 * Limits().output_characters
        assert time.monotonic() - began < 30
        texts.append(stdout(ok(flooded, "flood.kill(); flood.wait(); print('killed')")))
        assert any("y\ny\n" in text for text in texts), "the flood never reached a cell: the test tested nothing"


def test_pyproject_asks_for_the_ipykernel_the_sandbox_streams_need():
    """FdOutStream uses ipykernel's watchfd="force" and _original_stdstream_fd, both new in 6.24: the install must
    not accept an older ipykernel (6.23's sandbox would lose what a learner's forked child prints)."""
    from packaging.requirements import Requirement
    from packaging.version import Version

    from grader.grading.seams import ipykernel as fd_output
    from tests.unit.test_environment import pyproject

    ipykernel = next(Requirement(r) for r in pyproject()["project"]["optional-dependencies"]["dev"]
                     if Requirement(r).name == "ipykernel")
    floor = Version(".".join(map(str, fd_output.IPYKERNEL_MINIMUM)))
    assert f">={floor}" in str(ipykernel.specifier).split(","), ipykernel
    assert not ipykernel.specifier.contains("6.23.9") and ipykernel.specifier.contains(str(floor))


@pytest.mark.parametrize("older", ["6.23.0", "6.0.0", "5.5.6"])
def test_a_sandbox_refuses_an_ipykernel_too_old_for_its_streams(monkeypatch, older):
    """Under an older ipykernel, the sandbox's stream seam raises ImportError naming the library and the version
    needed (the sandbox then does not start, and nothing is scored) instead of grading forks unlike Jupyter."""
    import ipykernel

    from grader.grading import seams
    from grader.grading.seams import ipykernel as ipykernel_seam

    monkeypatch.setattr(seams, "_verdicts", {})
    monkeypatch.setattr(ipykernel, "version_info", tuple(int(part) for part in older.split(".")))
    with pytest.raises(ImportError, match=r"sandbox cannot start: ipykernel .*ipykernel >= 6\.24 is needed"):
        ipykernel_seam.refuse_unless_usable()


def test_a_kernel_that_cannot_start_says_why():
    """A sandbox whose kernel cannot be set up (here: the ImportError of an ipykernel too old) answers the grader's
    hello with the reason, which the instructor reads ("no sandbox could start (...)"), not a bare exit status."""
    from grader.grading.sandbox import isolation, worker

    to_child, from_child = os.pipe(), os.pipe()
    pid = os.fork()
    if pid == 0:  # the sandbox's side, as the zygote's fork runs it, minus the confinement
        try:
            os.dup2(to_child[0], 0)
            os.dup2(from_child[1], 1)

            def kernel_that_cannot_start(self):
                raise ImportError("the grading sandbox needs ipykernel >= 6.24 (this environment has 6.17.1)")

            isolation.apply = lambda config: {"mode": "basic"}
            worker.Worker.start_kernel = kernel_that_cannot_start
            worker.run({"environment": {}, "output_limit": 1000})
        finally:
            os._exit(99)
    os.close(to_child[0])
    os.close(from_child[1])
    with os.fdopen(from_child[0], "rb") as channel:
        hello = json.loads(channel.readline())
    os.close(to_child[1])
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 3
    assert hello == {"op": "hello", "ok": False, "error": "its kernel could not start (ImportError: the grading "
                     "sandbox needs ipykernel >= 6.24 (this environment has 6.17.1))"}


def test_autoreload_picks_up_an_edited_helper_module(box):
    ok(box, "%load_ext autoreload\n%autoreload 2")
    ok(box, "open('reloaded_helper.py', 'w').write('def answer():\\n    return 1\\n')\nimport reloaded_helper")
    assert stdout(ok(box, "print(reloaded_helper.answer())")) == "1\n"
    time.sleep(1.1)  # a newer mtime
    ok(box, "open('reloaded_helper.py', 'w').write('def answer():\\n    return 2\\n')")
    assert stdout(ok(box, "print(reloaded_helper.answer())")) == "2\n"


# -- outputs --------------------------------------------------------------------------------------------------------
def test_the_last_expression_is_an_execute_result(box):
    reply = ok(box, "x = 20\nx + 22")
    result = reply["outputs"][-1]
    assert result["output_type"] == "execute_result" and result["data"]["text/plain"] == "42"
    assert type(result["execution_count"]) is int
    assert reply["stdout"] == ""  # no "Out[..]:" text any more
    assert stdout(ok(box, f"print(Out[{result['execution_count']}])")) == "42\n"  # IPython's output history works
    valid_outputs(reply["outputs"])


def test_display_publishes_display_data(box):
    reply = ok(box, "from IPython.display import HTML, Markdown, display\n"
                    "display(Markdown('**bold**'))\ndisplay(HTML('<b>hi</b>'))\ndisplay({'a': 1})\nprint('after')")
    assert kinds(reply) == ["display_data", "display_data", "display_data", "stream"]
    assert reply["outputs"][0]["data"]["text/markdown"] == "**bold**"
    assert reply["outputs"][1]["data"]["text/html"] == "<b>hi</b>"
    assert reply["outputs"][2]["data"]["text/plain"] == "{'a': 1}"
    valid_outputs(reply["outputs"])


def test_display_updates_and_clear_output(box):
    reply = ok(box, "from IPython.display import display, clear_output\n"
                    "handle = display('first', display_id=True)\nhandle.update('second')\n")
    assert [o["data"]["text/plain"] for o in reply["outputs"]] == ["'second'"]
    reply = ok(box, "from IPython.display import clear_output\nfor i in range(3):\n"
                    "    clear_output(wait=True)\n    print(i)\n")
    assert stdout(reply) == "2\n"


def test_inline_matplotlib_figures_are_display_data(box):
    reply = ok(box, "%matplotlib inline\nimport matplotlib.pyplot as plt\nplt.plot([0, 1])\nplt.show()")
    figure = [o for o in reply["outputs"] if o["output_type"] == "display_data"]
    assert len(figure) == 1 and figure[0]["data"]["image/png"].startswith("iVBOR")
    assert "Figure" in figure[0]["data"]["text/plain"]
    valid_outputs(reply["outputs"])


def test_without_a_magic_figures_still_appear_when_the_environment_chooses_no_backend():
    """A Jupyter kernel makes the inline backend matplotlib's default (unless MPLBACKEND says otherwise),
    and shows every figure a cell leaves open when the cell ends."""
    with Sandbox(mode="auto") as fresh:
        backend = stdout(ok(fresh, "import os\nprint(os.environ.get('MPLBACKEND', ''))")).strip()
        if backend and "inline" not in backend:
            pytest.skip(f"the sandbox environment asks for MPLBACKEND={backend}")
        reply = ok(fresh, "import matplotlib.pyplot as plt\nplt.plot([0, 1]);")
        assert [list(o["data"]) for o in reply["outputs"]] == [["text/plain", "image/png"]]


def test_errors_are_error_outputs_and_the_error_key_stays(box):
    reply = run(box, "def broken():\n    return 1 / 0\nbroken()")
    error = reply["outputs"][-1]
    assert error["output_type"] == "error" and error["ename"] == "ZeroDivisionError"
    assert error["evalue"] == "division by zero" and all(type(line) is str for line in error["traceback"])
    assert reply["error"]["ename"] == "ZeroDivisionError" and "broken" in reply["error"]["traceback"]
    valid_outputs(reply["outputs"])


# Cells that fail through every kind of frame a traceback quotes: the cell, a function and a comprehension
# defined in cells, a library's Python frames, exec'd code, a syntax error; and inspect asked about a cell.
FAILING_CELLS = [
    "import inspect, sys\nimport numpy as np\ndef helper(x):\n    return [1 / v for v in x]",
    "helper([1, 0])",
    "np.linalg.inv(np.zeros((2, 2)))",
    "exec(compile('def f():\\n    raise KeyError(1)\\nf()', '<made>', 'exec'))",
    "def broken(:\n    pass",
    "print(inspect.getmodule(sys._getframe().f_code), inspect.getmodule(helper).__name__,\n"
    "      inspect.getsourcefile(helper) is not None)",
    "helper([0])",
]


def test_tracebacks_read_as_in_a_jupyter_kernel(tmp_path):
    """Byte for byte, every error output and print of FAILING_CELLS, sandbox against a real kernel: the
    worker's shortcut for inspect (a cell's file is known to be no module's) changes no traceback."""
    from nbclient import NotebookClient

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source) for source in FAILING_CELLS])
    NotebookClient(nb, timeout=120, startup_timeout=120, allow_errors=True, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute(env=subprocess_env(), cwd=str(tmp_path))
    in_jupyter = [[{k: o[k] for k in o if k != "execution_count"} for o in cell.outputs] for cell in nb.cells]
    with Sandbox(mode="auto") as sandbox:
        in_sandbox = [[{k: o[k] for k in o if k != "execution_count"} for o in run(sandbox, source)["outputs"]]
                      for source in FAILING_CELLS]
    assert [kinds({"outputs": outputs}) for outputs in in_jupyter][1:5] == [["error"]] * 4
    assert in_sandbox == in_jupyter


def test_warnings_go_to_stderr(box):
    reply = ok(box, "import warnings\nwarnings.warn('careful')")
    assert "UserWarning: careful" in reply["stderr"]
    assert [o["name"] for o in reply["outputs"]] == ["stderr"]


def test_input_fails_as_under_nbclient(box):
    assert run(box, "input('name? ')")["error"]["ename"] == "StdinNotImplementedError"


# -- the kernel and its environment ------------------------------------------------------------------------------
def test_get_ipython_is_a_kernel_shell(box):
    reply = ok(box, "ip = get_ipython()\nprint(type(ip).__name__, type(ip.kernel).__name__, "
                    "'KernelMagics' in str(type(ip.magics_manager.registry.get('KernelMagics'))))")
    assert stdout(reply) == "InProcessInteractiveShell InProcessKernel True\n"


def test_the_folder_of_the_notebook_is_the_cwd_and_on_sys_path(box):
    reply = ok(box, "import os, sys\nprint(sys.path[0] in ('', os.getcwd()))\n"
                    "open('helper_here.py', 'w').write('VALUE = 7\\n')\nopen('table.csv', 'w').write('1,2\\n')\n"
                    "from helper_here import VALUE\nprint(VALUE, open('table.csv').read().strip())")
    assert stdout(reply) == "True\n7 1,2\n"


def test_a_user_a_home_and_a_temporary_folder(box):
    reply = ok(box, "import getpass, os, tempfile\nuser = getpass.getuser()\n"
                    "print(bool(user), os.environ.get('USER') == user, os.environ.get('LOGNAME') == user)\n"
                    "folder = tempfile.mkdtemp()\nopen(os.path.join(folder, 'x.txt'), 'w').write('x')\n"
                    "home = os.path.expanduser('~')\nopen(os.path.join(home, 'note.txt'), 'w').write('y')\n"
                    "print(os.path.isdir(home), home != '~')")
    assert stdout(reply) == "True True True\nTrue True\n"


def test_the_kernel_opens_no_network_socket_and_holds_no_channel(box):
    """Every socket the process has is a Unix one (a socketpair of the kernel's event loop); walking
    the kernel's objects never reaches the worker or the grader's channel."""
    reply = ok(box, """
import gc, os, socket, types
families = set()
for fd in os.listdir('/proc/self/fd'):
    try:
        if os.readlink(f'/proc/self/fd/{fd}').startswith('socket:'):
            s = socket.socket(fileno=os.dup(int(fd)))
            families.add(s.family.name)
            s.close()
    except OSError:
        pass
print(sorted(families))
seen, frontier, found = set(), [get_ipython().kernel], []
for depth in range(7):
    nxt = []
    for obj in frontier:
        if id(obj) in seen or isinstance(obj, (types.ModuleType, type)):
            continue
        seen.add(id(obj))
        kind = type(obj)
        if kind.__name__ == 'Worker' and kind.__module__ == 'grader.grading.sandbox.worker':
            found.append('worker')
        nxt.extend(gc.get_referents(obj))
    frontier = nxt
print(found)
""")
    families, found = stdout(reply).splitlines()
    assert families in ("[]", "['AF_UNIX']")
    assert found == "[]"


def test_shell_commands_inherit_only_the_standard_fds(box):
    """The grader's channel (and the kernel's pipes) are not inherited by a learner's `!cmd` or os.system."""
    assert stdout(ok(box, "!ls /proc/self/fd")).split() == ["0", "1", "2", "3"]  # 3: ls's own listing


# -- caps --------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def small_box():
    with Sandbox(mode="auto", limits=Limits(output_characters=1000)) as sandbox:
        yield sandbox


def test_every_output_is_capped_by_the_worker(small_box):
    reply = run(small_box, "print('x' * 5000)\nimport sys\nsys.stderr.write('e' * 5000)\n")
    for name in ("stdout", "stderr"):
        text = "".join(o["text"] for o in reply["outputs"] if o["output_type"] == "stream" and o["name"] == name)
        assert len(text) <= 1000 and "truncated" in text
    reply = run(small_box, "from IPython.display import display\ndisplay('y' * 5000)\n"
                           "display({'image/png': 'A' * (3 * 2**20), 'text/plain': 'big picture'}, raw=True)\n"
                           "raise ValueError('z' * 5000)")
    plain, picture, error = reply["outputs"]
    assert len(plain["data"]["text/plain"]) <= 1000 and "truncated" in plain["data"]["text/plain"]
    assert picture["data"] == {"text/plain": "big picture"}  # the image did not fit: dropped whole
    assert len(error["evalue"]) <= 1000 and sum(map(len, error["traceback"])) <= 1000
    assert len(reply["error"]["traceback"]) <= 1000
    valid_outputs(reply["outputs"])


def test_a_cell_with_thousands_of_outputs_keeps_a_bounded_number(small_box):
    reply = ok(small_box, "from IPython.display import display\nfor i in range(5000):\n    display(i)\n")
    assert len(reply["outputs"]) <= 100 and "more outputs not kept" in reply["outputs"][-1]["text"]


# -- honest notebooks, graded by plain nbgrader and by `grader grade` ------------------------------------------------
def _npy_bytes() -> bytes:
    import io

    import numpy as np

    buffer = io.BytesIO()
    np.save(buffer, np.arange(3.0))
    return buffer.getvalue()


# feature: (text before each solution, text after it, files submitted beside the notebook). Each goes at the top of
# every solution cell of 03_backward, so that a feature the grader gets wrong stops the def below it: no points.
FEATURES = {
    "matplotlib_inline": ("%matplotlib inline\n", "", {}),
    "autosave": ("%autosave 0\n", "", {}),
    "timeit": ("%timeit -n1 -r1 sum(range(10))\n", "", {}),
    "autoreload": ("%load_ext autoreload\n%autoreload 2\n", "", {}),
    "time_cell_magic": ("%%time\n", "", {}),
    "capture_cell_magic": ("%%capture captured\n", "", {}),
    "shell_escape": ("!echo hi\n", "", {}),
    "plot_show": ("import matplotlib.pyplot as plt\nplt.plot([0, 1])\nplt.show()\n", "", {}),
    "display": ("from IPython.display import Markdown, display\ndisplay(Markdown('*my notes*'))\n"
                "display(np.arange(3))\n",
                "", {}),
    "config_inline_backend": ("%config InlineBackend.figure_format = 'png'\n", "", {}),
    "kernel": ("assert get_ipython().kernel is not None\n", "", {}),
    "helper_module": ("from helpers import centred\nassert centred(np.arange(3.0)).sum() == 0\n", "",
                      {"helpers.py": "import numpy as np\n\n\ndef centred(x):\n    return x - np.mean(x)\n"}),
    "data_files": ("assert np.load('table.npy').shape == (3,)\nassert open('notes.txt').read() == 'hello'\n", "",
                   {"table.npy": _npy_bytes(), "notes.txt": "hello"}),
    "getuser": ("import getpass\nassert getpass.getuser()\n", "", {}),
    "temporary_and_home": ("import os, tempfile\nopen(os.path.join(tempfile.mkdtemp(), 'scratch.txt'), "
                           "'w').write('x')\n"
                           "open(os.path.join(os.path.expanduser('~'), 'fidelity_note.txt'), 'w')"
                           ".write('x')\n", "", {}),
    "last_expression": ("", "\n_value = 41 + 1\n_value\n", {}),
}


def _scores(csv_path, assignment):
    with open(csv_path, newline="") as f:
        return {r["student_id"]: float(r["raw_score"]) for r in csv.DictReader(f) if r["assignment"] == assignment}


# Two learners, each using every other feature at the top of every solution cell (plain nbgrader costs
# ~13 s a notebook here; the unit tests above pin each feature alone). Each gets one of the two cell magics.
LEARNERS = {f"learner_{i}": list(FEATURES)[i::2] for i in range(2)}


def test_honest_notebooks_get_the_same_full_marks_from_plain_nbgrader_and_grader_grade(tmp_path):
    from tests.course_helpers import make_course
    from tests.integration.test_hostile import ASSIGNMENT, EXERCISES, grade, solution_sources, submission

    course = make_course(tmp_path)
    right = solution_sources()
    for student, features in LEARNERS.items():
        # a cell magic (%%) must open its cell: those features go first, one per learner at most
        features = sorted(features, key=lambda f: not FEATURES[f][0].startswith("%%"))
        assert sum(FEATURES[f][0].startswith("%%") for f in features) <= 1, features
        before = "".join(FEATURES[f][0] for f in features)
        after = "".join(FEATURES[f][1] for f in features)
        nb = submission({name: before + right[name] + after for name in EXERCISES})
        folder = course / "submitted" / student / ASSIGNMENT
        folder.mkdir(parents=True)
        nbformat.write(nb, folder / f"{ASSIGNMENT}.ipynb")
        for feature in features:
            for name, content in FEATURES[feature][2].items():
                (folder / name).write_bytes(content if isinstance(content, bytes) else content.encode())
    plain = tmp_path / "plain"
    shutil.copytree(course, plain)
    env = subprocess_env()
    env["HOME"] = str(tmp_path / "home")  # the learners write to their home: not this machine's
    os.makedirs(env["HOME"])

    def nbgrader(*arguments):
        return subprocess.Popen([sys.executable, "-m", "nbgrader", *arguments], cwd=plain, env=env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

    autograde = nbgrader("autograde", ASSIGNMENT, "--force")  # meanwhile, the other grader
    ours, messages, _ = grade(course, timeout=60)
    for step in (lambda: autograde, lambda: nbgrader("export", "--to=grades.csv")):
        process = step()
        output, _ = process.communicate(timeout=1200)
        assert process.returncode == 0, output[-6000:]
    plain_scores = _scores(plain / "grades.csv", ASSIGNMENT)
    expected = {student: 7.0 for student in LEARNERS}
    assert plain_scores == expected, "plain nbgrader itself does not give these honest notebooks full marks"
    assert ours == expected, {s: messages.get(s) for s in ours if ours[s] != 7.0}
