"""The sandbox's channel (grader.grading.sandbox.protocol) looks up no name at call time that learner code could
rebind: every global its functions use is bound in the module at import, none falls through to builtins."""
from __future__ import annotations

import dis
import inspect
import types

from grader.grading.sandbox import protocol


def _code_objects(code: types.CodeType):
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _code_objects(const)


def _globals_used(function) -> set[str]:
    names = set()
    for code in _code_objects(function.__code__):
        names |= {ins.argval for ins in dis.get_instructions(code) if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME")}
    return names


def _functions():
    for _, value in vars(protocol).items():
        if inspect.isfunction(value) and value.__module__ == protocol.__name__:
            yield value
        elif inspect.isclass(value) and value.__module__ == protocol.__name__:
            yield from (v for v in vars(value).values() if inspect.isfunction(v))


def test_every_global_a_protocol_function_uses_is_bound_in_the_module():
    missing = {f"{function.__qualname__}: {name}" for function in _functions()
               for name in _globals_used(function) if name not in vars(protocol)}
    assert not missing, f"looked up in builtins at call time (bind them at import): {sorted(missing)}"


def test_the_check_sees_a_builtin_looked_up_at_call_time():
    def uses_a_builtin(values):
        return all(values)

    assert "all" in _globals_used(uses_a_builtin)
