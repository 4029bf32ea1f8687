"""The attempt log: every check a learner runs and every hint they ask for, kept in the notebook.

In a live IPython kernel (JupyterLab, Colab, a classic notebook), each event appends a record

    {"exercise": "rms_norm", "kind": "check" | "hint", "check": "check_rms_norm" | None,
     "outcome": "passed" | "failed" | "not_implemented" | "error" | None,
     "misconceptions": ["rms.eps_outside_sqrt", ...], "level": 1..4 | None, "time": 1767225600.0,
     "run": 12}

``run`` (absent outside a kernel's cell, and in older records) is the kernel's execution count of
the cell that ran the check: the checks one cell runs are one run of the exercise (records saved before it
existed read as None: one run each).

to a log in the kernel, and displays an invisible output (``text/plain`` is empty) carrying
every record of that exercise so far (the last ``KEEP``) under ``MIME``. So the log is saved
with the notebook and travels with a submission; nothing leaves the machine. On first use in
a kernel the earlier records are read back from the saved notebook, when the kernel knows
its path (``JPY_SESSION_NAME``, set by jupyter_server), so they survive a kernel restart.

Outside a kernel (a plain script, the trusted side of ``python -m grader grade``, where
``IPython.get_ipython()`` is None) nothing is recorded and nothing is displayed. Nothing
here ever writes to stderr: nbgrader gives a test cell zero if it does.

``read_attempts(nb)`` reads the records back from any notebook (the instructor's report
uses it on submissions): it never raises, whatever the bytes or the structure, and bounds
its work.
"""
from __future__ import annotations

import json
import math
import os
import sys
import time

MIME = "application/vnd.lncourse.attempt+json"
VERSION = 1
KEEP = 200                    # records of one exercise carried by one output
KINDS = ("check", "hint")
OUTCOMES = ("passed", "failed", "not_implemented", "error")

# bounds on what read_attempts examines
MAX_CELLS = 5000
MAX_OUTPUTS_PER_CELL = 200
MAX_PAYLOAD_CHARS = 2 * 2**20     # a payload stored as a JSON string
MAX_NOTEBOOK_BYTES = 64 * 2**20   # a notebook given as bytes or text, or read from disk
MAX_EXAMINED = 50_000             # records looked at, in all
MAX_MISCONCEPTIONS = 32
MAX_NAME = 100
TIME_LIMIT = 1e11                 # seconds since 1970: year 5138

_records: list[dict] = []
_keys: set = set()
_loaded = False
_last_time = 0.0
_override: dict | None = None     # tests: {"live": bool, "display": callable or None}


# ------------------------------------------------------------------ where we run
def shell():
    """The running IPython shell, or None (a plain process). Imports nothing new."""
    ipython = sys.modules.get("IPython")
    if ipython is None:
        return None
    try:
        return ipython.get_ipython()
    except Exception:  # noqa: BLE001 - a half-imported or replaced IPython: not a kernel we know
        return None


def live() -> bool:
    """True in a live IPython kernel, where records are kept and displayed."""
    if _override is not None:
        return bool(_override.get("live"))
    return shell() is not None


def publish(bundle: dict) -> None:
    """Display a raw mime bundle in the kernel (tests may capture it instead)."""
    if _override is not None and _override.get("display") is not None:
        _override["display"](bundle)
        return
    from IPython.display import display

    display(bundle, raw=True)


def _testing(live: bool = True, display=None, reset: bool = True) -> None:
    """Tests only: behave as if in a kernel (or not), send displays to ``display``; start empty."""
    global _override, _loaded
    _override = {"live": live, "display": display}
    if reset:
        clear()
        _loaded = True  # no notebook file to read back


def _stop_testing() -> None:
    global _override
    _override = None
    clear()


def clear() -> None:
    """Forget every record of this kernel (the saved notebook keeps its own)."""
    global _last_time, _loaded
    _records.clear()
    _keys.clear()
    _last_time = 0.0
    _loaded = False


# ------------------------------------------------------------------ the log
def execution_count() -> int | None:
    """The running cell's execution count in a kernel, or None."""
    try:
        count = getattr(shell(), "execution_count", None)
    except Exception:  # noqa: BLE001 - no kernel, or an odd one: no run number
        return None
    return count if type(count) is int and 0 <= count < 2**31 else None


def record(exercise: str, kind: str, check: str | None = None, outcome: str | None = None,
           misconceptions=(), level: int | None = None) -> dict | None:
    """Append one record and display this exercise's records; in a plain process, do nothing.

    Returns the record, or None when nothing was recorded. Never raises, never writes to stderr.
    """
    global _last_time
    try:
        if not live():
            return None
        _ensure_loaded()
        now = time.time()
        if now <= _last_time:
            now = _last_time + 1e-6  # distinct times: (exercise, kind, check, time) is the record's key
        candidate = {"exercise": exercise, "kind": kind, "check": check, "outcome": outcome,
                     "misconceptions": list(misconceptions or ()), "level": level, "time": now,
                     "run": execution_count() if kind == "check" else None}
        valid = validate(candidate)
        if valid is None:
            return None
        _last_time = now
        _add(valid)
        publish({MIME: {"version": VERSION, "records": records(exercise)[-KEEP:]}, "text/plain": ""})
        return dict(valid)
    except Exception:  # noqa: BLE001 - the log must never change what a check or a hint does
        return None


def records(exercise: str | None = None) -> list[dict]:
    """Copies of the records of this kernel (read back from the notebook on first use), oldest first."""
    try:
        _ensure_loaded()
    except Exception:  # noqa: BLE001 - an unreadable log shows as empty, never breaks the cell
        pass
    chosen = _records if exercise is None else [r for r in _records if r["exercise"] == exercise]
    return [dict(r, misconceptions=list(r["misconceptions"])) for r in chosen]


def _key(r: dict) -> tuple:
    return (r["exercise"], r["kind"], r["check"], r["time"])


def _add(r: dict) -> bool:
    key = _key(r)
    if key in _keys:
        return False
    _keys.add(key)
    _records.append(r)
    return True


def _merge(found: list[dict]) -> None:
    """Add records read back from a notebook, keeping the log in time order."""
    global _last_time
    added = [r for r in found if _add(r)]
    if added:
        _records.sort(key=lambda r: r["time"])
        _last_time = max(_last_time, _records[-1]["time"])


def _notebook_path() -> str | None:
    path = os.environ.get("JPY_SESSION_NAME")
    if not path:
        sh = shell()
        user_ns = getattr(sh, "user_ns", None)
        path = user_ns.get("__session__") if isinstance(user_ns, dict) else None
    if not isinstance(path, str) or not path.endswith(".ipynb"):
        return None
    for candidate in (path, os.path.join(os.getcwd(), os.path.basename(path))):
        if os.path.isfile(candidate):
            return candidate
    return None


def _ensure_loaded() -> None:
    """On first use in a kernel, read back the records saved in this notebook's file."""
    global _loaded
    if _loaded or not live():
        return
    _loaded = True
    path = _notebook_path()
    if path is None:
        return
    try:
        if os.path.getsize(path) > MAX_NOTEBOOK_BYTES:
            return
        with open(path, "rb") as f:
            data = f.read(MAX_NOTEBOOK_BYTES + 1)
    except OSError:
        return
    _merge(read_attempts(data))


# ------------------------------------------------------------------ reading a notebook
def _exact(value, *types) -> bool:
    return type(value) in types


def validate(r) -> dict | None:
    """A clean copy of one record, or None if any field is missing or wrong."""
    from grader.catalogue import ID_PATTERN
    from grader.exercises import EXERCISES

    try:
        if not isinstance(r, dict):
            return None
        exercise, kind, check = r.get("exercise"), r.get("kind"), r.get("check")
        outcome, ids, level, when = r.get("outcome"), r.get("misconceptions"), r.get("level"), r.get("time")
        if not _exact(exercise, str) or exercise not in EXERCISES:
            return None
        if not _exact(kind, str) or kind not in KINDS:
            return None
        if kind == "check":
            if not (_exact(check, str) and 6 < len(check) <= MAX_NAME and check.startswith("check_")
                    and check.isascii() and check.replace("_", "a").isalnum()):
                return None
            if not _exact(outcome, str) or outcome not in OUTCOMES or level is not None:
                return None
        else:
            if check is not None or outcome is not None:
                return None
            if not _exact(level, int) or not 1 <= level <= 4:
                return None
        if not _exact(ids, list) or len(ids) > MAX_MISCONCEPTIONS:
            return None
        clean_ids = []
        for item in ids:
            if not _exact(item, str) or len(item) > MAX_NAME or not ID_PATTERN.match(item):
                return None
            clean_ids.append(item)
        if not _exact(when, int, float):
            return None
        run = r.get("run")
        if run is not None and not (_exact(run, int) and 0 <= run < 2**31 and kind == "check"):
            return None
        when = float(when)
        if not math.isfinite(when) or not 0.0 <= when <= TIME_LIMIT:
            return None
        clean = {"exercise": exercise, "kind": kind, "check": check, "outcome": outcome,
                 "misconceptions": clean_ids, "level": level, "time": when}
        if run is not None:  # absent from records written before runs were counted
            clean["run"] = run
        return clean
    except Exception:  # noqa: BLE001 - a hostile mapping
        return None


def _as_notebook(nb):
    if isinstance(nb, (bytes, bytearray, memoryview)):
        if len(nb) > MAX_NOTEBOOK_BYTES:
            return None
        nb = bytes(nb).decode("utf-8")
    if isinstance(nb, str):
        if len(nb) > MAX_NOTEBOOK_BYTES:
            return None
        nb = json.loads(nb)
    return nb if isinstance(nb, dict) else None


def _payload(output):
    if not isinstance(output, dict):
        return None
    if output.get("output_type") not in ("display_data", "execute_result", "update_display_data"):
        return None
    data = output.get("data")
    if not isinstance(data, dict):
        return None
    payload = data.get(MIME)
    if isinstance(payload, str):
        if len(payload) > MAX_PAYLOAD_CHARS:
            return None
        payload = json.loads(payload)
    if not isinstance(payload, dict) or not _exact(payload.get("version"), int) or payload.get("version") != VERSION:
        return None
    found = payload.get("records")
    return found if isinstance(found, list) else None


def read_attempts(nb) -> list[dict]:
    """Every valid attempt record saved in a notebook (an nbformat node, a dict, JSON text or bytes).

    Deduplicated by (exercise, kind, check, time), oldest first. Never raises: anything that
    is not a well-formed record is skipped. Work is bounded: at most MAX_CELLS cells,
    MAX_OUTPUTS_PER_CELL outputs per cell, the last KEEP records of each output, and
    MAX_EXAMINED records in all.
    """
    try:
        nb = _as_notebook(nb)
        cells = nb.get("cells") if nb is not None else None
        if not isinstance(cells, list):
            return []
    except Exception:  # noqa: BLE001 - any bytes, any structure
        return []
    seen: set = set()
    found: list[dict] = []
    examined = 0
    for cell in cells[:MAX_CELLS]:
        try:
            outputs = cell.get("outputs") if isinstance(cell, dict) else None
            if not isinstance(outputs, list):
                continue
            outputs = outputs[:MAX_OUTPUTS_PER_CELL]
        except Exception:  # noqa: BLE001 - a malformed output is skipped
            continue
        for output in outputs:
            try:
                batch = _payload(output)
                if batch is None:
                    continue
                batch = batch[-KEEP:]
            except Exception:  # noqa: BLE001 - a malformed record is skipped
                continue
            for item in batch:
                examined += 1
                if examined > MAX_EXAMINED:
                    return sorted(found, key=lambda r: r["time"])
                clean = validate(item)
                if clean is None:
                    continue
                key = _key(clean)
                if key not in seen:
                    seen.add(key)
                    found.append(clean)
    return sorted(found, key=lambda r: r["time"])
