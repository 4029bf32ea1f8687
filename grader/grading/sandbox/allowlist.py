"""What a sandbox may see of the machine: the read-only part of its root, as an allow-list.

The Python installation (``sys.base_prefix``, ``sys.prefix``, every existing ``sys.path`` entry)
and the course packages the notebook imports (``grader``, ``normlab``: those folders only), at
their own paths; the system folders (``SYSTEM_PATHS``). Never a folder around them: not the
whole machine, not a course checkout, not a folder holding the installation (/root, /work).
``rootfs.build_root`` binds what ``plan`` lists.
"""
from __future__ import annotations

import os
import sys

SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")


def inside(path: str, folder: str) -> bool:
    """True if ``path`` is ``folder`` or lies under it."""
    return path == folder or path.startswith(folder.rstrip("/") + "/")


_plan: list | None = None


def plan() -> list[tuple[str, str, str]]:
    """The read-only part of the sandbox's root: (kind, source, target) with kind bind | symlink.

    Computed once in the zygote (``zygote.warm_up``) and inherited by every sandbox it forks.
    """
    global _plan
    if _plan is None:
        _plan = _make_plan()
    return _plan


def _package_dirs() -> list[str]:
    import importlib.util

    found = []
    for name in ("grader", "normlab"):
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        for location in (spec.submodule_search_locations or []) if spec else []:
            if os.path.isdir(location):
                found.append(os.path.realpath(location))
    return found


def _make_plan() -> list[tuple[str, str, str]]:
    entries, covered = [], []
    for path in SYSTEM_PATHS:
        if os.path.islink(path):
            entries.append(("symlink", os.readlink(path), path))
        elif os.path.isdir(path):
            entries.append(("bind", path, path))
            covered.append(path)
    prefixes = {os.path.realpath(p) for p in (sys.base_prefix, sys.prefix, sys.base_exec_prefix, sys.exec_prefix)}
    packages = _package_dirs()

    def unsafe(real: str) -> bool:
        if real == "/" or os.path.exists(os.path.join(real, "nbgrader_config.py")):
            return True  # the whole machine, or a course checkout (source/, solutions/, submitted/...)
        if any(inside(prefix, real) and prefix != real for prefix in prefixes):
            return True  # a folder around the Python installation: /root, /work, a course root holding .venv
        return any(os.path.dirname(p) == real for p in packages) and not any(inside(real, p) for p in prefixes)

    candidates = [sys.base_prefix, sys.prefix, sys.base_exec_prefix, sys.exec_prefix, *sys.path, *packages]
    binds: dict[str, str] = {}
    for path in candidates:
        if not isinstance(path, str) or not os.path.isabs(path) or not os.path.exists(path):
            continue
        real = os.path.realpath(path)
        if unsafe(real):
            continue
        binds.setdefault(real, real)
        alias = os.path.normpath(path)
        if alias != real and os.path.realpath(os.path.dirname(alias)) == os.path.dirname(alias) and not unsafe(alias):
            binds.setdefault(alias, real)  # a symbolic link on the way (a venv's lib64): same folder there too
    for target in sorted(binds):
        if any(inside(target, c) for c in covered):
            continue
        entries.append(("bind", binds[target], target))
        covered.append(target)
    return entries
