"""A graded function that hands its whole job to a library implementation is reported, as evidence.

While the grader calls a learner function, the sandbox's tripwires record which library
implementations of the exercises it called (torch's layer_norm, rms_norm, batch_norm,
group_norm, instance_norm, var_mean and their nn modules; anything of the course's own
``grader`` and ``normlab`` packages); the "call" reply carries them as ``"delegated"``.
Notebook cells (demos comparing with torch) are never recorded, and no correct
implementation (tests/implementations, the solutions in source/) trips a wire. The reply comes from
the learner's own process, so the grader takes it as evidence for the instructor's report, never as
a verdict (tests/integration/test_forged_verdicts.py).
"""
import inspect

import numpy as np
import pytest

from grader.checks import backward, bn_vs_ln, geometry, placement, rmsnorm, welford
from grader.course.build import SOLUTION_MARKER, script_to_notebook
from grader.grading.sandbox.client import Sandbox
from tests.conftest import ASSIGNMENTS, ROOT
from tests.implementations import backward as backward_impl
from tests.implementations import bn_vs_ln as bn_vs_ln_impl
from tests.implementations import geometry as geometry_impl
from tests.implementations import placement as placement_impl
from tests.implementations import rmsnorm as rmsnorm_impl
from tests.implementations import welford as welford_impl

# slow: a real grading sandbox (~5 s to start)
pytestmark = pytest.mark.slow

X = np.random.default_rng(0).standard_normal((2, 3, 8))
GAMMA, BETA = np.linspace(0.5, 1.5, 8), np.linspace(-1.0, 1.0, 8)
IMPORTS = ("import numpy as np\nimport torch\nimport torch.nn.functional as F\n"
           "from torch.nn.functional import layer_norm, rms_norm\nfrom torch import var_mean\n")


def call(box, name, *args) -> dict:
    """The worker's raw reply to the grader calling the learner's ``name(*args)``."""
    reply = box.request({"op": "call", "name": name, "args": [box.encode(a) for a in args], "kwargs": [],
                         "measure_memory": False})
    assert reply["op"] == "return", reply
    return reply


def define(box, source: str) -> None:
    reply = box.run_cell(source)
    assert reply["error"] is None, reply


@pytest.fixture(scope="module")
def box():
    with Sandbox(mode="auto") as sandbox:
        define(sandbox, IMPORTS)  # before the tripwires could be put back: the names bound here are the wired ones
        yield sandbox


DELEGATING = {
    # name: (source of `graded(x, gamma, beta)`, what the reply must name)
    "F.layer_norm imported first": ("return layer_norm(torch.from_numpy(x), (x.shape[-1],), torch.from_numpy(gamma), "
                                    "torch.from_numpy(beta), eps=1e-5).numpy()", "torch.nn.functional.layer_norm"),
    "torch.nn.functional.layer_norm": ("return torch.nn.functional.layer_norm(torch.from_numpy(x), (x.shape[-1],))"
                                       ".numpy()", "torch.nn.functional.layer_norm"),
    "torch.layer_norm": ("return torch.layer_norm(torch.from_numpy(x), (x.shape[-1],)).numpy()", "torch.layer_norm"),
    "nn.LayerNorm": ("return torch.nn.LayerNorm(x.shape[-1], dtype=torch.float64)"
                     "(torch.from_numpy(x)).detach().numpy()",
                     "torch.nn.LayerNorm"),
    "F.rms_norm imported first": ("return rms_norm(torch.from_numpy(x), (x.shape[-1],), torch.from_numpy(gamma), "
                                  "eps=1e-6).numpy()", "torch.nn.functional.rms_norm"),
    "torch.rms_norm": ("return torch.rms_norm(torch.from_numpy(x), (x.shape[-1],)).numpy()", "torch.rms_norm"),
    "nn.RMSNorm": ("return torch.nn.RMSNorm(x.shape[-1], dtype=torch.float64)(torch.from_numpy(x)).detach().numpy()",
                   "torch.nn.RMSNorm"),
    "F.batch_norm": ("t = torch.from_numpy(x.reshape(-1, x.shape[-1]))\n"
                     "    return F.batch_norm(t, None, None, training=True).numpy()", "torch.nn.functional.batch_norm"),
    "nn.BatchNorm1d": ("t = torch.from_numpy(x.reshape(-1, x.shape[-1]))\n"
                       "    return torch.nn.BatchNorm1d(x.shape[-1], dtype=torch.float64)(t).detach().numpy()",
                       "torch.nn.BatchNorm1d"),
    "F.group_norm": ("return F.group_norm(torch.from_numpy(x), 1).numpy()", "torch.nn.functional.group_norm"),
    "nn.GroupNorm": ("return torch.nn.GroupNorm(1, x.shape[1], "
                     "dtype=torch.float64)(torch.from_numpy(x)).detach().numpy()",
                     "torch.nn.GroupNorm"),
    "F.instance_norm": ("return F.instance_norm(torch.from_numpy(x)).numpy()", "torch.nn.functional.instance_norm"),
    "var_mean imported first": ("var, mean = var_mean(torch.from_numpy(x), dim=-1, correction=0)\n"
                                "    return (mean.numpy(), var.numpy())", "torch.var_mean"),
    "torch.var_mean": ("var, mean = torch.var_mean(torch.from_numpy(x), dim=-1, correction=0)\n"
                       "    return (mean.numpy(), var.numpy())", "torch.var_mean"),
    "normlab.geometry._layer_norm": ("from normlab.geometry import _layer_norm as theirs\n    return theirs(x, 1e-5)",
                                     "normlab.geometry._layer_norm"),
    "normlab.geometry._rms_norm": ("import normlab.geometry\n    return normlab.geometry._rms_norm(x, 1e-5)",
                                   "normlab.geometry._rms_norm"),
    "grader.oracles.layer_norm": ("from grader import oracles\n    return oracles.layer_norm(x, 1e-5, gamma, beta)",
                                  "grader.oracles.layer_norm"),
    "grader.numerics via grader.compare": ("from grader.compare import relative_error\n"
                                           "    return relative_error(x, x)", "grader.numerics.relative_error"),
    # doors around the Python-level wires: torch's dispatcher still sees the kernel
    "torch.ops.aten": ("return torch.ops.aten.native_layer_norm(torch.from_numpy(x), [x.shape[-1]], None, None, "
                       "1e-5)[0].numpy()", "torch.ops.aten.native_layer_norm"),
    "an unwrapped original": ("original = getattr(torch.layer_norm, '__wrapped__', None) or torch._C._VariableFunctions"
                              ".layer_norm\n    return original(torch.from_numpy(x), (x.shape[-1],)).numpy()",
                              "torch.ops.aten.native_layer_norm"),
    "torch._C var_mean": ("var, mean = torch._C._VariableFunctions.var_mean(torch.from_numpy(x), dim=-1, "
                          "correction=0)\n"
                          "    return (mean.numpy(), var.numpy())", "torch.ops.aten.var_mean"),
}


@pytest.mark.parametrize("case", list(DELEGATING))
def test_delegating_to_a_library_implementation_is_reported(box, case):
    body, expected = DELEGATING[case]
    define(box, f"def graded(x, gamma, beta):\n    {body}\n")
    assert call(box, "graded", X, GAMMA, BETA)["delegated"] == [expected]


def test_only_the_outermost_implementation_is_named(box):
    """nn.LayerNorm calls F.layer_norm, which calls torch.layer_norm: the learner called one thing."""
    define(box, "def graded(x):\n    m = torch.nn.LayerNorm(x.shape[-1], dtype=torch.float64)\n"
                "    return (m(torch.from_numpy(x)) + F.layer_norm(torch.from_numpy(x), "
                "(x.shape[-1],))).detach().numpy()\n")
    assert call(box, "graded", X)["delegated"] == ["torch.nn.LayerNorm", "torch.nn.functional.layer_norm"]


def test_a_raising_function_still_reports_its_delegation(box):
    define(box, "def graded(x):\n    torch.var_mean(torch.from_numpy(x))\n    raise ValueError('then gave up')\n")
    reply = box.request({"op": "call", "name": "graded", "args": [box.encode(X)], "kwargs": [],
                         "measure_memory": False})
    assert reply["op"] == "raise" and reply["delegated"] == ["torch.var_mean"]


def test_demo_cells_may_use_the_library_freely(box):
    """Comparing with torch in a notebook cell is the course's own "In PyTorch" section: never recorded."""
    reply = box.run_cell("y_torch = F.layer_norm(torch.from_numpy(X_demo := np.ones((2, 4)) * [[1, 2, 3, 4]]), (4,))\n"
                         "layer = torch.nn.LayerNorm(4, dtype=torch.float64)\n"
                         "y_layer = layer(torch.from_numpy(X_demo))\n"
                         "from normlab.geometry import _layer_norm as reference\ny_ref = reference(X_demo, 1e-5)\n"
                         "def compare(x):\n    return F.layer_norm(torch.from_numpy(x), (x.shape[-1],)).numpy()\n"
                         "compare(X_demo)\n")
    assert reply["error"] is None
    define(box, "def graded(x):\n    c = x - x.mean(axis=-1, keepdims=True)\n"
                "    return c / np.sqrt((c * c).mean(axis=-1, keepdims=True) + 1e-5)\n")
    assert call(box, "graded", X)["delegated"] == []
    assert "delegated" not in box.request({"op": "run", "source": "compare(X_demo)"})


def test_torch_used_for_something_else_is_fine(box):
    """A graded function may compute with torch (or autograd) itself: only the implementations are wired."""
    define(box, "def graded(x, g):\n    t = torch.tensor(x, requires_grad=True)\n"
                "    mu = t.mean(-1, keepdim=True)\n    var = ((t - mu) ** 2).mean(-1, keepdim=True)\n"
                "    y = (t - mu) / torch.sqrt(var + 1e-5)\n    y.backward(torch.from_numpy(g))\n"
                "    return t.grad.numpy()\n")
    assert call(box, "graded", X, np.ones_like(X))["delegated"] == []


def test_reloading_or_reimporting_a_module_keeps_its_wires(box):
    define(box, "import importlib, sys, normlab.geometry\nimportlib.reload(normlab.geometry)\n"
                "from normlab.geometry import _layer_norm as reloaded\n"
                "del sys.modules['grader.oracles']\nimport grader.oracles as reimported\n"
                "def graded(x):\n    return reloaded(x, 1e-5)\n"
                "def graded_too(x):\n    return reimported.layer_norm(x, 1e-5)\n")
    assert call(box, "graded", X)["delegated"] == ["normlab.geometry._layer_norm"]
    assert call(box, "graded_too", X)["delegated"] == ["grader.oracles.layer_norm"]


def test_the_grader_side_turns_a_delegation_into_evidence_not_a_verdict(box):
    """What the learner's process reports about itself cannot be proven: the check decides on the values alone
    (a delegating layernorm passes), and the sandbox keeps what it saw for the instructor's report."""
    define(box, "def layernorm(x, gamma, beta, eps=1e-5):\n"
                "    return F.layer_norm(torch.from_numpy(x), (x.shape[-1],), torch.from_numpy(gamma), "
                "torch.from_numpy(beta), eps).numpy()\n")
    box.evidence.clear()
    bn_vs_ln.check_layernorm(box.lookup("layernorm"))
    assert {"check": "delegation",
            "seen": "layernorm called torch.nn.functional.layer_norm while the grader called it"} in box.evidence
    box.evidence.clear()


# -- no correct implementation trips a wire --------------------------------------------------------------------
CORRECT = [  # (module of implementations, their list, the exercise's name, its visible check)
    (bn_vs_ln_impl, "CORRECT_LAYERNORMS", "layernorm", bn_vs_ln.check_layernorm),
    (bn_vs_ln_impl, "CORRECT_BATCH_NORMS", "batch_norm", bn_vs_ln.check_batch_norm),
    (bn_vs_ln_impl, "CORRECT_PROBES", "leaks_future", bn_vs_ln.check_leaks_future),
    (bn_vs_ln_impl, "CORRECT_TRAINS", "batch_norm_train", bn_vs_ln.check_batch_norm_train),
    (bn_vs_ln_impl, "CORRECT_EVALS", "batch_norm_eval", bn_vs_ln.check_batch_norm_eval),
    (geometry_impl, "CORRECT_PROJECTIONS", "complement_projection", geometry.check_complement_projection),
    (geometry_impl, "CORRECT_GAPS", "invariance_gap", geometry.check_invariance_gap),
    (backward_impl, "CORRECT_JACOBIANS", "layer_norm_jacobian", backward.check_layer_norm_jacobian),
    (backward_impl, "CORRECT_VJPS", "layer_norm_vjp", backward.check_layer_norm_vjp),
    (backward_impl, "CORRECT_BACKWARDS", "layer_norm_backward", backward.check_layer_norm_backward),
    (placement_impl, "CORRECT", "residual_sublayer", placement.check_residual_sublayer),
    (placement_impl, "QK_CORRECT", "qk_norm_logits", placement.check_qk_norm_logits),
    (rmsnorm_impl, "CORRECT_FORWARDS", "rms_norm", rmsnorm.check_rms_norm),
    (rmsnorm_impl, "CORRECT_BACKWARDS", "rms_norm_backward", rmsnorm.check_rms_norm_backward),
    (rmsnorm_impl, "CORRECT_BF16", "rms_norm_bf16", rmsnorm.check_rms_norm_bf16),
    (welford_impl, "CORRECT_MEAN_VARS", "welford_mean_var", welford.check_welford_mean_var),
    (welford_impl, "CORRECT_COMBINES", "welford_combine", welford.check_welford_combine),
]


def recording(box) -> list:
    """Every "delegated" list the worker sends back from now on."""
    seen, request = [], box.request

    def recorded(message, *args, **kwargs):
        reply = request(message, *args, **kwargs)
        if message.get("op") == "call":
            seen.append(reply.get("delegated"))
        return reply

    box.request = recorded
    return seen


@pytest.fixture(scope="module")
def implementations():
    """One sandbox per module of implementations, with the whole module defined in it."""
    boxes = {}
    yield lambda module: boxes.get(module) or boxes.setdefault(module, _sandbox_with(module))
    for sandbox in boxes.values():
        sandbox.close()


def _sandbox_with(module) -> Sandbox:
    sandbox = Sandbox(mode="auto")
    define(sandbox, inspect.getsource(module))
    return sandbox


@pytest.mark.parametrize("module, function, name, check", [
    pytest.param(module, function, name, check, id=f"{name}-{function.__name__}")
    for module, listing, name, check in CORRECT for function in getattr(module, listing)])
def test_correct_implementations_do_not_trip_a_wire(implementations, module, function, name, check):
    sandbox = implementations(module)
    define(sandbox, f"{name} = {function.__name__}")
    seen = recording(sandbox)
    try:
        check(sandbox.lookup(name))
    finally:
        del sandbox.request  # back to the class's method
    assert seen and all(d == [] for d in seen), (function.__name__, [d for d in seen if d])


def solution_notebook(assignment):
    return script_to_notebook(ROOT / "source" / assignment / f"{assignment}.py")


@pytest.mark.slow  # every cell of every notebook, about 5 s each
@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_the_course_solutions_do_not_trip_a_wire(assignment):
    """Each solved notebook, run as ``grader grade`` runs it (cells in the sandbox, test cells here)."""
    nb = solution_notebook(assignment)
    code = [c for c in nb.cells if c.cell_type == "code"]
    tests = [c for c in code if c.metadata.get("nbgrader", {}).get("grade")
             and not c.metadata["nbgrader"].get("solution")]
    namespace = {"__name__": "__grader_tests__"}
    exec(compile(code[0].source, "<imports>", "exec"), namespace)
    with Sandbox(mode="auto") as sandbox:
        seen = recording(sandbox)
        for cell in code:
            if cell in tests:
                local = dict(namespace)
                for name in cell.metadata["nbgrader"].get("grade_id", ""), *_names(cell.source):
                    if name and name not in local:
                        try:
                            local[name] = sandbox.lookup(name)
                        except KeyError:
                            pass
                exec(compile(cell.source, f"<{cell.metadata['nbgrader']['grade_id']}>", "exec"), local)
            else:
                reply = sandbox.run_cell(SOLUTION_MARKER.sub("", cell.source))
                assert reply["error"] is None, (assignment, cell.source[:200], reply["error"])
    assert seen and all(d == [] for d in seen), [d for d in seen if d]


def _names(source: str) -> set[str]:
    import ast

    return {n.id for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Name)}
