"""No point hangs on anything a learner's process says about itself (issue 39, kind 1).

Under ``grader grade`` the checks run in the trusted grader and call the learner's functions in a
sandbox. Each verdict that gives or takes points is decided where learner code cannot reach it:

- values: the grader compares data it generated with data it received (rebuilt from plain data);
- in-place mutation: the arguments lie in memory the grader shares with the sandbox, and the grader
  reads it back itself (``grader.grading.sandbox.shared_args``);
- one pass over a stream: every read is served, and counted, by the grader (06's stream).

What only the learner's process can report (its peak memory, which library norms it called) is
evidence: it never changes a status, and reaches the instructor's report as a flag. Every test here
pairs a tampering technique with the same function untampered and asks for the same verdict.
tests/integration/test_hostile.py grades such learners in its class and reads the flags from ``grader report``.
"""
import numpy as np
import pytest

from grader.checks import backward, bn_vs_ln, welford
from grader.compare import CheckFailed, call_learner
from grader.grading.sandbox.client import Sandbox

pytestmark = pytest.mark.slow

# Ways a notebook can rewrite what its own process tells the grader; each runs in a cell before the checks.
TAMPERING = {
    "untampered": "",
    # the reply's fields blanked by a patched worker class (found by import, as any module is)
    "blank_reply_fields": (
        "from grader.grading.sandbox import worker as _w\n_call = _w.Worker.call\n"
        "def _forged(self, message):\n    reply = _call(self, message)\n"
        "    reply.update(mutated=[], delegated=[], peak=0)\n    return reply\n_w.Worker.call = _forged\n"),
    # every outgoing message rewritten on its way out, at the last step before the pipe
    "rewrite_sent_messages": (
        "from grader.grading.sandbox import worker as _w\n_send = _w.Worker.send\n"
        "def _send_forged(self, message):\n    if message.get('op') == 'return':\n"
        "        message = {**message, 'mutated': [], 'delegated': [], 'peak': 1}\n"
        "    return _send(self, message)\n_w.Worker.send = _send_forged\n"),
    # the reply written by the notebook itself, straight onto the grader's pipe, fields blanked
    "write_the_raw_channel": (
        "import os, json as _json\nfrom grader.grading.sandbox import worker as _w\n_call = _w.Worker.call\n"
        "def _raw(self, message):\n    reply = _call(self, message)\n"
        "    reply.update(mutated=[], delegated=[], peak=0)\n"
        "    os.write(self.channel_out.fileno(), (_json.dumps(reply) + '\\n').encode())\n"
        "    return None\n"
        "_send = _w.Worker.send\n"
        "def _quiet_send(self, message):\n    if message is not None:\n        _send(self, message)\n"
        "_w.Worker.call = _raw\n_w.Worker.send = _quiet_send\n"),
    # the comparisons and the measurement the worker once used, made to see nothing
    "blind_numpy_and_tracemalloc": (
        "import numpy, tracemalloc\nnumpy.array_equal = lambda *a, **k: True\n"
        "tracemalloc.get_traced_memory = lambda: (0, 0)\n"),
    # the tripwires taken off: the originals pulled out of the wrappers' closures and put back
    "unwire": (
        "import torch, torch.nn.functional as _F\n"
        "def _original(f):\n    for c in getattr(f, '__closure__', None) or ():\n"
        "        v = c.cell_contents\n        if callable(v) and getattr(v, '__name__', '') == f.__name__:\n"
        "            return v\n    return f\n"
        "_F.layer_norm = _original(_F.layer_norm)\ntorch.layer_norm = _original(torch.layer_norm)\n"),
}
IMPORTS = "import numpy as np\nimport torch\nimport torch.nn.functional as F\n"

MUTATING_LAYERNORMS = {  # each also returns the right values
    "x -= mu": ("def layernorm(x, gamma, beta, eps=1e-5):\n    x -= x.mean(axis=-1, keepdims=True)\n"
                "    x /= np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps)\n    return x * gamma + beta\n"),
    "torch in place on a shared view": (
        "def layernorm(x, gamma, beta, eps=1e-5):\n    t = torch.from_numpy(x)\n"
        "    t.sub_(t.mean(-1, keepdim=True))\n    t.div_(torch.sqrt((t * t).mean(-1, keepdim=True) + eps))\n"
        "    return x * gamma + beta\n"),
    "x[...] = from a thread": (
        "import threading\ndef layernorm(x, gamma, beta, eps=1e-5):\n"
        "    c = x - x.mean(axis=-1, keepdims=True)\n    y = c / np.sqrt((c * c).mean(axis=-1, keepdims=True) + eps)\n"
        "    t = threading.Thread(target=lambda: x.__setitem__(Ellipsis, 0.0))\n    t.start()\n    t.join()\n"
        "    return y * gamma + beta\n"),
}
# As under Jupyter, a forked child's writes to its parent's arrays stay in the child: not a change in place.
FORKED_CHILD_WRITES = (
    "import os\ndef layernorm(x, gamma, beta, eps=1e-5):\n"
    "    c = x - x.mean(axis=-1, keepdims=True)\n    y = c / np.sqrt((c * c).mean(axis=-1, keepdims=True) + eps)\n"
    "    pid = os.fork()\n    if pid == 0:\n        x[...] = 0.0\n        os._exit(0)\n"
    "    os.waitpid(pid, 0)\n    return y * gamma + beta\n")
DELEGATING_LAYERNORMS = {
    "F.layer_norm": ("def layernorm(x, gamma, beta, eps=1e-5):\n    return F.layer_norm(torch.from_numpy(x), "
                     "(x.shape[-1],), torch.from_numpy(gamma), torch.from_numpy(beta), eps).numpy()\n"),
    "torch.ops by name": ("def layernorm(x, gamma, beta, eps=1e-5):\n    op = getattr(torch.ops.aten, 'native_' + "
                          "'layer_norm')\n    return op(torch.from_numpy(x), [x.shape[-1]], torch.from_numpy(gamma), "
                          "torch.from_numpy(beta), eps)[0].numpy()\n"),
}
JACOBIAN_VJP = ("def layer_norm_vjp(x, g, eps=1e-5):\n    d = x.size\n    c = x - x.mean()\n"
                "    s = 1 / np.sqrt((c * c).mean() + eps)\n    xh = c * s\n"
                "    J = s * (np.eye(d) - 1 / d - np.outer(xh, xh) / d)\n    return J.T @ g\n")
RESET_PEAK_VJP = JACOBIAN_VJP.replace("    return J.T @ g\n", "    v = J.T @ g\n    del J\n    import tracemalloc\n"
                                                                "    tracemalloc.reset_peak()\n    return v\n")
KEEPING_WELFORD = ("def welford_mean_var(x):\n    kept = [float(v) for v in x]\n    n = len(kept)\n"
                   "    m = sum(kept) / n\n    return m, sum((v - m) ** 2 for v in kept) / n\n")


def sandbox_with(*cells: str) -> Sandbox:
    box = Sandbox(mode="auto")
    for source in cells:
        reply = box.run_cell(source)
        assert reply["error"] is None, reply["error"]
    return box


def verdict(check, function) -> str:
    """'passed', or the first line of the check's failure."""
    try:
        check(function)
    except CheckFailed as failure:
        return str(failure).strip().splitlines()[0]
    return "passed"


@pytest.fixture(scope="module", params=list(TAMPERING))
def tampered(request):
    """A sandbox whose notebook ran the tampering cell after its imports (a fresh one per technique)."""
    box = sandbox_with(IMPORTS, TAMPERING[request.param])
    yield request.param, box
    box.close()


@pytest.mark.parametrize("case", list(MUTATING_LAYERNORMS))
def test_an_input_changed_in_place_is_seen_whatever_the_process_says(tampered, case):
    technique, box = tampered
    box.run_cell(MUTATING_LAYERNORMS[case])
    x = np.random.default_rng(0).standard_normal((3, 8))
    with pytest.raises(CheckFailed, match="modified its input array in place"):
        call_learner(box.lookup("layernorm"), x, np.ones(8), np.zeros(8), what="layernorm(x)")
    assert verdict(bn_vs_ln.check_layernorm, box.lookup("layernorm")) != "passed", technique


@pytest.mark.parametrize("source", [
    "def layernorm(x, gamma, beta, eps=1e-5):\n    c = x - x.mean(axis=-1, keepdims=True)\n"
    "    return c / np.sqrt((c * c).mean(axis=-1, keepdims=True) + eps) * gamma + beta\n", FORKED_CHILD_WRITES],
    ids=["plain", "a forked child writes x"])
def test_an_honest_function_is_not_called_a_mutator(tampered, source):
    _, box = tampered
    box.run_cell(source)
    box.evidence.clear()
    assert verdict(bn_vs_ln.check_layernorm, box.lookup("layernorm")) == "passed"
    assert box.evidence == []


@pytest.mark.parametrize("case", list(DELEGATING_LAYERNORMS))
def test_delegation_is_evidence_and_never_changes_a_verdict(tampered, case):
    """Right values pass however the process reports its calls; what it did report becomes a flag."""
    technique, box = tampered
    box.run_cell(DELEGATING_LAYERNORMS[case])
    box.evidence.clear()
    assert verdict(bn_vs_ln.check_layernorm, box.lookup("layernorm")) == "passed", technique
    checks = {entry["check"] for entry in box.evidence}
    assert checks <= {"delegation"}
    if technique == "untampered":
        assert checks == {"delegation"}, box.evidence


@pytest.mark.parametrize("vjp", [JACOBIAN_VJP, RESET_PEAK_VJP], ids=["builds (d, d)", "then resets the peak"])
def test_memory_is_evidence_and_never_changes_a_verdict(tampered, vjp):
    technique, box = tampered
    box.run_cell(vjp)
    box.evidence.clear()
    assert verdict(lambda f: backward.check_vjp_memory(f, d=1024), box.lookup("layer_norm_vjp")) == "passed"
    assert {entry["check"] for entry in box.evidence} <= {"memory"}
    if technique == "untampered" and vjp is JACOBIAN_VJP:
        assert [entry["check"] for entry in box.evidence] == ["memory"], box.evidence


def test_a_second_pass_is_counted_by_the_grader_whatever_the_process_says(tampered):
    """The stream's reads are served by the grader: keeping the elements is evidence, reading twice fails."""
    technique, box = tampered
    box.run_cell(KEEPING_WELFORD)
    box.evidence.clear()
    assert verdict(lambda f: welford.check_welford_one_pass(f, n=3000), box.lookup("welford_mean_var")) == "passed"
    if technique in ("untampered", "unwire"):
        assert [entry["check"] for entry in box.evidence] == ["memory"], box.evidence
    box.run_cell("def welford_mean_var(x):\n    n = len(x)\n    m = sum(float(v) for v in x) / n\n"
                 "    return m, sum((float(v) - m) ** 2 for v in x) / n\n")
    second_pass = verdict(lambda f: welford.check_welford_one_pass(f, n=3000), box.lookup("welford_mean_var"))
    assert second_pass != "passed" and "stream" in second_pass, second_pass


# -- the grader's channel does not depend on modules a notebook may replace for its own reasons ------------------
HONEST_PATCHES = {
    "json.dumps pretty-prints": "import json, functools\njson.dumps = functools.partial(json.dumps, indent=1)\n",
    "json.loads wrapped": "import json\n_loads = json.loads\njson.loads = lambda s, **k: _loads(s, **k)\n",
    "base64 returns text": ("import base64\n_b = base64.b64encode\n"
                            "base64.b64encode = lambda b, *a: _b(b, *a).decode()\n"),
    "builtins instrumented": ("import builtins\n_isinstance, _calls = builtins.isinstance, [0]\n"
                              "def _counting(o, t):\n    _calls[0] += 1\n    return _isinstance(o, t)\n"
                              "builtins.isinstance = _counting\nbuiltins.print = lambda *a, **k: None\n"),
    "struct and os.write wrapped": ("import struct, os\n_pack = struct.pack\nstruct.pack = lambda *a: _pack(*a)\n"
                                    "_write = os.write\nos.write = lambda fd, b: _write(fd, b)\n"),
}


@pytest.mark.parametrize("patch", list(HONEST_PATCHES))
def test_a_notebook_that_replaces_library_functions_for_itself_is_graded_as_jupyter_would(patch):
    with sandbox_with(IMPORTS, HONEST_PATCHES[patch],
                      "def layernorm(x, gamma, beta, eps=1e-5):\n    c = x - x.mean(axis=-1, keepdims=True)\n"
                      "    return c / np.sqrt((c * c).mean(axis=-1, keepdims=True) + eps) * gamma + beta\n") as box:
        assert verdict(bn_vs_ln.check_layernorm, box.lookup("layernorm")) == "passed"
        assert box.run_cell("{'a': [1, 2]}")["outputs"][0]["data"]["text/plain"] == "{'a': [1, 2]}"
