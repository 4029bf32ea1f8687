"""What every execution slot needs, imported once in the forkserver the slots are forked from.

A slot runs the trusted test cells (``grader.grading.autograde.execute``, torch's reference norms in
``grader.oracles``, autograd). Imported per slot, that was 2-3 s of
CPU each, on the same cores as the zygotes' own imports. Nothing here runs torch: a forked child
must not inherit a started thread pool.
"""
import atexit
import importlib
import os
import shutil

from grader.course import skip_iri_grammars
from grader.grading.startup import package_modules, private_torch_cache

skip_iri_grammars()  # before nbformat (grader.grading.autograde.execute) imports jsonschema
_torch_cache, _owner = private_torch_cache(), os.getpid()
if _torch_cache:  # the forkserver removes it when it exits; the slots leave by os._exit
    atexit.register(lambda: os.getpid() == _owner and shutil.rmtree(_torch_cache, ignore_errors=True))

from grader.grading.slots.slot_pool import LEARNER_PACKAGES, SLOT_WARM_MODULES  # noqa: E402 - after the torch cache set-up above

os.environ.setdefault("MPLBACKEND", "Agg")  # the slots draw nothing
for _name in SLOT_WARM_MODULES:
    importlib.import_module(_name)
for _name in package_modules(LEARNER_PACKAGES):
    importlib.import_module(_name)
