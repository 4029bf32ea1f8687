"""The same diagnosis in the notebook and under `grader grade`.

Under `grader grade` the learner's function runs in a sandbox and the check talks to it
through a proxy: arguments and results cross as plain data, exceptions come back as text
(numpy's AxisError arrives renamed). Every wrong implementation in tests/implementations/
is checked both ways: the verdict, the class of the failure, the misconception ids and the
diagnosis (less line numbers, which differ between a file and a notebook cell) must agree.
"""
import inspect
import re
from pathlib import Path

import pytest

from grader.checks import backward, bn_vs_ln, geometry, placement, rmsnorm, welford
from grader.compare import CheckFailed
from tests.implementations import backward as backward_impl
from tests.implementations import bn_vs_ln as bn_vs_ln_impl
from tests.implementations import geometry as geometry_impl
from tests.implementations import placement as placement_impl
from tests.implementations import rmsnorm as rmsnorm_impl
from tests.implementations import welford as welford_impl

pytestmark = pytest.mark.slow

# (implementations module, table, the check that exposes its entries)
TABLES = [
    (bn_vs_ln_impl, "WRONG_LAYERNORMS", bn_vs_ln.check_layernorm),
    (bn_vs_ln_impl, "WRONG_BATCH_NORMS", bn_vs_ln.check_batch_norm),
    (bn_vs_ln_impl, "WRONG_PROBES", bn_vs_ln.check_leaks_future),
    (bn_vs_ln_impl, "WRONG_TRAINS", bn_vs_ln.check_batch_norm_train),
    (bn_vs_ln_impl, "WRONG_EVALS", bn_vs_ln.check_batch_norm_eval),
    (geometry_impl, "WRONG_PROJECTIONS", geometry.check_complement_projection),
    (geometry_impl, "WRONG_GAPS", geometry.check_invariance_gap),
    (backward_impl, "WRONG_JACOBIANS", backward.check_layer_norm_jacobian),
    (backward_impl, "WRONG_VJPS", backward.check_layer_norm_vjp),
    (backward_impl, "WRONG_BACKWARDS", backward.check_layer_norm_backward),
    (rmsnorm_impl, "WRONG_FORWARDS", rmsnorm.check_rms_norm),
    (rmsnorm_impl, "WRONG_BACKWARDS", rmsnorm.check_rms_norm_backward),
    (rmsnorm_impl, "WRONG_BF16", rmsnorm.check_rms_norm_bf16),
    (placement_impl, "WRONG", {"modes": placement.check_residual_sublayer,
                               "rejects": placement.check_residual_sublayer_rejects}),
    (placement_impl, "QK_WRONG", placement.check_qk_norm_logits),
    (welford_impl, "WRONG_MEAN_VARS", welford.check_welford_mean_var),
    (welford_impl, "WRONG_ONE_PASS", welford.check_welford_one_pass),
    (welford_impl, "WRONG_COMBINES", welford.check_welford_combine),
]
# diagnoses of what only the learner's process can measure (compare.unproven): notes for the instructor there
UNPROVEN = {("welford.keeps_elements",), ("bwd.builds_jacobian",), ("common.memory_blowup",)}
LINE = re.compile(r"line \d+, in \S+")
MEMORY = re.compile(r"\d+(\.\d+)? ?(bytes|KiB|MiB|GiB)")  # a sandbox's process allocates a little differently


def _cases():
    for module, table, checks in TABLES:
        for name, (function, _, *rest) in getattr(module, table).items():
            extra = rest[0] if rest else {}  # some tables give no keyword arguments
            check = checks[extra] if isinstance(checks, dict) else checks
            kwargs = {} if isinstance(checks, dict) else extra
            yield pytest.param(module, function, check, kwargs, id=f"{module.__name__.split('.')[-1]}:{table}:{name}")


def _outcome(check, function, kwargs):
    try:
        check(function, **kwargs)
    except CheckFailed as failure:
        text = MEMORY.sub("N KiB", LINE.sub("line N", str(failure).strip()))
        return type(failure).__name__, tuple(failure.misconceptions), text
    except Exception as error:  # noqa: BLE001 - an undiagnosed failure: compared by type
        return type(error).__name__, (), ""
    return "passed", (), ""


@pytest.fixture(scope="module")
def sandboxes():
    """One sandbox per implementations module, with the whole module defined in it."""
    client = pytest.importorskip("grader.grading.sandbox.client")
    opened = {}
    try:
        yield lambda module: opened.get(module.__name__) or opened.setdefault(module.__name__, _open(client, module))
    finally:
        for box in opened.values():
            box.__exit__(None, None, None)


def _open(client, module):
    box = client.Sandbox(mode="auto")
    box.__enter__()
    reply = box.run_cell(Path(inspect.getsourcefile(module)).read_text())
    assert not any(o.get("output_type") == "error" for o in reply["outputs"]), reply
    return box


@pytest.mark.parametrize("module, function, check, kwargs", list(_cases()))
def test_the_diagnosis_is_the_same_in_a_grading_sandbox(sandboxes, module, function, check, kwargs):
    if getattr(module, function.__name__, None) is not function:
        pytest.skip("not a module-level function: cannot be defined in a sandbox by name")
    here = _outcome(check, function, kwargs)
    box = sandboxes(module)
    box.evidence.clear()
    there = _outcome(check, box.lookup(function.__name__), kwargs)
    assert here[0] != "passed"
    if here[1] in UNPROVEN:  # measured in the learner's own process: evidence under grading, never a verdict
        assert there[0] == "passed" and [e["check"] for e in box.evidence] == ["memory"], (here, there, box.evidence)
        return
    assert there[:2] == here[:2], (here, there)
    assert there[2] == here[2]
