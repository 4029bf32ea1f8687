"""Correct and classic wrong implementations of the exercises, used to test the checks."""
import inspect
import textwrap


def define_in_sandbox(sandbox, function, name: str, helpers=()):
    """Define ``function`` (and the module-level ``helpers`` it calls) in a grading sandbox
    under ``name``; returns the proxy a test cell would get under ``grader grade``."""
    sources = [textwrap.dedent(inspect.getsource(helper)) for helper in helpers]
    sources.append(textwrap.dedent(inspect.getsource(function)).replace(f"def {function.__name__}(", f"def {name}(", 1))
    sandbox.run_cell("import numpy as np\n" + "\n\n".join(sources))
    return sandbox.lookup(name)
