"""The sandbox's evidence of delegation: which library implementation a graded function called.

Wraps the library implementations of the exercises (``Tripwires``) before the first learner cell,
and records which of them a learner function calls while the grader calls it (``Worker.call``).
What it records comes from the learner's process: the grader treats it as evidence, never a verdict.
"""
from __future__ import annotations

import sys

# Library implementations of the exercises themselves. A graded function that calls one of them
# while the grader calls it is reported ("delegated"); notebook cells may use them freely.
FUNCTIONS = {
    "torch": ["layer_norm", "native_layer_norm", "rms_norm", "batch_norm", "native_batch_norm", "group_norm",
              "native_group_norm", "instance_norm", "var_mean"],
    "torch.nn.functional": ["layer_norm", "rms_norm", "batch_norm", "group_norm", "instance_norm"],
}
MODULES = {  # torch.nn classes whose forward() is the whole exercise (subclasses included)
    "torch.nn.modules.normalization": ["LayerNorm", "RMSNorm", "GroupNorm"],
    "torch.nn.modules.batchnorm": ["_BatchNorm"],
    "torch.nn.modules.instancenorm": ["_InstanceNorm"],
}
PACKAGES = ("grader", "normlab")  # every function and method the course's own packages define,
SPARED = ("grader.grading.sandbox",)  # except the sandbox's own machinery (protocol, streams)


class Tripwires:
    """Wraps library implementations of the exercises, and records which a learner function calls.

    Installed once, before the first learner cell, so that ``from torch.nn.functional import
    layer_norm`` in a notebook binds the wrapper; a module imported or reloaded later is wrapped
    as it loads (an import hook). Only calls between ``start()`` and ``stop()`` are recorded, and
    only the outermost one (``nn.LayerNorm`` calls ``F.layer_norm``, which calls ``torch.layer_norm``:
    one name). Holds no reference to the worker or its channel. A learner bent on it can unwrap
    these; they are there for honest delegation, not for a hostile notebook.
    """

    MARK = "_lncourse_tripwire"

    def __init__(self, functions: dict, modules: dict, packages: tuple, spared: tuple):
        self.functions, self.modules, self.packages, self.spared = functions, modules, packages, spared
        self.calls = None  # names called since start(), or None: not recording
        self.dispatch = None  # the dispatch-mode recorder of the current call
        self.depth = 0
        self.wires = {}  # id(original) -> (original, wrapper)

    # What those library calls become in torch's dispatcher, whichever door they came through
    # (torch.ops.aten, torch._C, an unwrapped original): seen by a dispatch mode during the call.
    DISPATCHED = {"native_layer_norm", "native_layer_norm_backward", "native_batch_norm",
                  "native_batch_norm_backward", "_native_batch_norm_legit", "_native_batch_norm_legit_functional",
                  "native_group_norm", "native_group_norm_backward", "var_mean", "_fused_rms_norm",
                  "_fused_rms_norm_backward"}

    def start(self) -> None:
        self.calls, self.depth = [], 0
        self.dispatch = self._dispatch_recorder()
        if self.dispatch is not None:
            self.dispatch.__enter__()

    def stop(self) -> list[str]:
        calls, self.calls = self.calls or [], None
        if self.dispatch is not None:
            try:
                self.dispatch.__exit__(None, None, None)
            except Exception:  # noqa: BLE001 - the learner's code left torch's mode stack in a mess
                calls = calls or ["torch (its dispatch mode stack was tampered with)"]
            seen, self.dispatch = self.dispatch.seen, None
            if not calls and seen:
                calls = [f"torch.ops.aten.{name}" for name in seen]
        return calls

    def _dispatch_recorder(self):
        """A torch dispatch mode that notes the norms' kernels, or None when torch is not loaded."""
        if "torch" not in sys.modules:
            return None
        try:
            from grader.compare import uncompiled_dispatch_mode

            TorchDispatchMode = uncompiled_dispatch_mode()
        except ImportError:
            return None
        watched = self.DISPATCHED

        class Recorder(TorchDispatchMode):
            def __init__(self):
                super().__init__()
                self.seen = []

            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                name = getattr(getattr(func, "overloadpacket", None), "__name__", "")
                if name in watched and name not in self.seen:
                    self.seen.append(name)
                return func(*args, **(kwargs or {}))

        return Recorder()

    def wants(self, name: str) -> bool:
        if name in self.functions or name in self.modules:
            return True
        return (name.partition(".")[0] in self.packages
                and not any(name == s or name.startswith(s + ".") for s in self.spared))

    def install(self) -> None:
        sys.meta_path.insert(0, self._finder())
        loaded = [m for name, m in list(sys.modules.items()) if m is not None and self.wants(name)]
        for module in loaded:
            self.arm(module)
        for module in loaded:  # names one module imported from another before the wires were in place
            self._rebind(module)

    def arm(self, module) -> None:
        """Wire the library entry points ``module`` defines."""
        import inspect

        name = getattr(module, "__name__", "")
        for attr in self.functions.get(name, ()):
            original = getattr(module, attr, None)
            if callable(original):
                setattr(module, attr, self.wire(original, f"{name}.{attr}"))
        for class_name in self.modules.get(name, ()):
            cls = getattr(module, class_name, None)
            if isinstance(cls, type) and inspect.isfunction(vars(cls).get("forward")):
                cls.forward = self.wire(vars(cls)["forward"], self._torch_module_name)
        if name.partition(".")[0] in self.packages and self.wants(name):
            for attr, value in list(vars(module).items()):
                if getattr(value, "__module__", None) != name:
                    continue
                if inspect.isfunction(value):
                    setattr(module, attr, self.wire(value, f"{name}.{value.__qualname__}"))
                elif inspect.isclass(value):
                    for method_name, method in list(vars(value).items()):
                        if inspect.isfunction(method) and (not method_name.startswith("__")
                                                           or method_name in ("__init__", "__call__")):
                            label = f"{name}.{value.__qualname__}"
                            if method_name != "__init__":
                                label += f".{method_name}"
                            setattr(value, method_name, self.wire(method, label))
        self._rebind(module)

    def _rebind(self, module) -> None:
        for attr, value in list(vars(module).items()):
            known = self.wires.get(id(value))
            if known is not None and known[0] is value:
                setattr(module, attr, known[1])

    @staticmethod
    def _torch_module_name(args) -> str:
        kind = type(args[0]) if args else object
        public = next((c for c in kind.__mro__
                       if c.__module__.startswith("torch.nn") and not c.__name__.startswith("_")), kind)
        return f"torch.nn.{public.__name__}"

    def wire(self, original, label):
        """``original`` behind a tripwire that records ``label`` (or ``label(args)``) while recording."""
        import functools

        if getattr(original, self.MARK, False):
            return original
        known = self.wires.get(id(original))
        if known is not None and known[0] is original:
            return known[1]
        recorder = self

        @functools.wraps(original)
        def tripwire(*args, **kwargs):
            calls = recorder.calls
            if calls is None:
                return original(*args, **kwargs)
            if not recorder.depth:
                name = label if type(label) is str else label(args)
                if name not in calls:
                    calls.append(name)
            recorder.depth += 1
            try:
                return original(*args, **kwargs)
            finally:
                recorder.depth -= 1

        del tripwire.__wrapped__  # no handle to the original for the learner's code
        setattr(tripwire, self.MARK, True)
        self.wires[id(original)] = (original, tripwire)
        return tripwire

    def _finder(self):
        """A meta-path finder that wires the modules of interest as they are executed (import, reload)."""
        import importlib.machinery

        tripwires = self

        class TripwireFinder:
            @staticmethod
            def find_spec(fullname, path=None, target=None):
                if not tripwires.wants(fullname):
                    return None
                for finder in sys.meta_path:
                    if isinstance(finder, TripwireFinder) or not hasattr(finder, "find_spec"):
                        continue
                    spec = finder.find_spec(fullname, path, target)
                    if spec is not None:
                        break
                else:
                    return None
                loader = spec.loader
                if isinstance(loader, importlib.machinery.SourceFileLoader):  # one loader per module
                    execute = loader.exec_module

                    def exec_module(module):
                        execute(module)
                        tripwires.arm(module)

                    loader.exec_module = exec_module
                return spec

        return TripwireFinder()
