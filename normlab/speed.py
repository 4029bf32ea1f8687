"""Honest CPU timings of LayerNorm and RMSNorm, for notebook 04.

A norm over a (tokens, d) float32 array does a handful of arithmetic operations per element
and must read x and write y at least once each, so on a CPU (and a GPU) it is limited by
memory traffic, not by arithmetic. The fair yardstick is therefore a plain copy of the same
array, which also reads and writes every element once, timed in the same run: a norm that
reaches 100% of the copy's bandwidth cannot get faster. Each row reports the median time
of several calls, the bandwidth it implies (bytes read + bytes written, divided by time),
and that bandwidth as a fraction of the faster copy.

Fewer passes over memory is the whole game: an unfused chain of torch operations (or of numpy
ones, such as the learner's own ``rms_norm`` from notebook 04, timed when it is passed in)
makes several passes (each operation reads and writes a full temporary), a fused kernel makes
one. The package ships no numpy norm of its own: those are the notebooks' exercises. The
rows report ratios on this machine, which depend on its caches, its memory, its load and
the torch build; nothing here asserts how fast anything must be. On a busy 2-core machine
torch's default of two threads made its rows slower and noisier than one thread did;
``threads=1`` is there to see that.

Example::

    from normlab.speed import speed_table, format_speed_table, speed_ratios
    rows = speed_table(rms_norm=rms_norm)    # (2048, 4096) float32, a few seconds; times your rms_norm too
    print(format_speed_table(rows))
    speed_table(compile=True)                # adds torch.compile rows; compiling takes 10-60 s
"""

from __future__ import annotations

import contextlib
import ctypes
import statistics
import sys
import time
import warnings

import numpy as np
import torch
import torch.nn.functional as F

__all__ = ["time_call", "speed_table", "format_speed_table", "speed_ratios"]

EPS = 1e-5


def time_call(fn, *, min_repeats: int = 3, max_repeats: int = 50, budget_s: float = 0.25) -> tuple[float, int]:
    """Median wall time of ``fn()`` in seconds, and the number of timed calls.

    One untimed call first (it allocates, touches pages and fills caches, and for
    ``torch.compile`` it compiles); then at least ``min_repeats`` timed calls, more while the
    total stays under ``budget_s``. The median ignores the odd call slowed by another process.
    """
    fn()
    times = []
    start = time.perf_counter()
    while len(times) < max_repeats:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
        if len(times) >= min_repeats and time.perf_counter() - start > budget_s:
            break
    return statistics.median(times), len(times)


@contextlib.contextmanager
def _reuse_freed_memory(enabled: bool = True):
    """Keep freed large blocks in the process's heap while timing (glibc only; else a no-op).

    By default glibc serves every allocation above 128 KiB to 32 MiB with a fresh mmap and
    unmaps it on free, so each call of an eager op that returns a new 32 MiB tensor makes the
    kernel zero 8192 fresh pages. On the machine this was written on that page-faulting cost
    3x more than the arithmetic and the memory traffic, and it hit torch (4 KiB pages) far
    harder than numpy (which asks for huge pages). Raising the thresholds makes freed memory
    reusable, as a framework's caching allocator would; the settings are restored after.
    Yields True when the setting took effect.
    """
    libc = None
    if enabled and sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL("libc.so.6")
        except OSError:
            libc = None
    m_trim_threshold, m_mmap_threshold = -1, -3  # from glibc's malloc.h
    ok = (bool(libc) and libc.mallopt(m_mmap_threshold, 1 << 30) == 1
          and libc.mallopt(m_trim_threshold, (1 << 31) - 1) == 1)
    try:
        yield ok
    finally:
        if libc:
            libc.mallopt(m_mmap_threshold, 128 * 1024)  # glibc's defaults
            libc.mallopt(m_trim_threshold, 128 * 1024)
            libc.malloc_trim(0)  # hand the kept memory back


# ---------------------------------------------------------------- the implementations
# Each takes x: (tokens, d) float32 and returns y of the same shape. gamma is ones and
# beta zeros (values do not change the cost); they are still read, as in a real model.


def _torch_layer_norm(x, gamma, beta, eps=EPS):
    return F.layer_norm(x, (x.shape[-1],), gamma, beta, eps)  # one fused ATen kernel


def _torch_rms_unfused(x, gamma, eps=EPS):
    # Four full-size operations: pow writes x^2, mean reads it, then two multiplies.
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * gamma


def _torch_layer_norm_unfused(x, gamma, beta, eps=EPS):
    mu = x.mean(-1, keepdim=True)
    xc = x - mu
    return xc * torch.rsqrt(xc.pow(2).mean(-1, keepdim=True) + eps) * gamma + beta


def _torch_rms_norm(x, gamma, eps=EPS):
    return F.rms_norm(x, (x.shape[-1],), gamma, eps)


# ------------------------------------------------------------------------------ table


def speed_table(shape=(2048, 4096), *, compile: bool = False, budget_s: float = 0.15, seed: int = 0,
                min_repeats: int = 3, reuse_memory: bool = True, threads: int | None = None,
                rms_norm=None) -> list[dict]:
    """Time copies, LayerNorms and RMSNorms over one (tokens, d) float32 array.

    shape: (tokens, d); the default, 32 MiB in and 32 MiB out, is more than a typical
    last-level cache, so the copy measures main memory. compile: also time ``torch.compile``
    of the unfused chains (the first call compiles: tens of seconds on a small CPU).
    budget_s: rough time spent per row. reuse_memory: see ``_reuse_freed_memory`` (without
    it, fresh-page faults dominate the torch rows). threads: torch's intra-op thread count
    for the run (restored after); None keeps the current setting. rms_norm: a numpy
    ``rms_norm(x, gamma, eps)`` (notebook 04's exercise) to time next to the others; a row
    whose function raises (not written yet) says so in its note.

    Returns one dict per row with keys ``name``, ``op`` ("copy", "layernorm", "rmsnorm"),
    ``threads``, ``memory_reused``,
    ``backend`` ("numpy", "torch", "torch.compile"), ``ms`` (median), ``repeats``, ``bytes``
    (read + written, counting x and y once each), ``gb_per_s`` and ``fraction_of_copy``
    (bandwidth over the faster copy's), and ``note``. A row that could not run (no
    ``F.rms_norm``, compile failed) has ``ms`` None and says why in ``note``.
    """
    tokens, d = (int(s) for s in shape)
    rng = np.random.default_rng(seed)
    x_np = rng.standard_normal((tokens, d), dtype=np.float32)
    g_np, b_np = np.ones(d, np.float32), np.zeros(d, np.float32)
    x_t, g_t, b_t = torch.from_numpy(x_np), torch.from_numpy(g_np), torch.from_numpy(b_np)
    nbytes = 2 * x_np.nbytes  # read x once, write y once; gamma and beta are negligible

    cases = [
        ("copy: numpy x.copy()", "copy", "numpy", lambda: x_np.copy(), "reads x, writes a new array"),
        ("copy: torch x.clone()", "copy", "torch", lambda: x_t.clone(), "reads x, writes a new tensor"),
        ("RMSNorm: numpy, your rms_norm", "rmsnorm", "numpy",
         None if rms_norm is None else (lambda: rms_norm(x_np, g_np, EPS)),
         "whole-array numpy operations" if rms_norm is not None else "pass rms_norm= to time yours"),
        ("LayerNorm: torch F.layer_norm", "layernorm", "torch", lambda: _torch_layer_norm(x_t, g_t, b_t),
         "one fused kernel"),
        ("LayerNorm: torch unfused chain", "layernorm", "torch",
         lambda: _torch_layer_norm_unfused(x_t, g_t, b_t), "mean, sub, pow, mean, rsqrt, mul, mul, add"),
        ("RMSNorm: torch unfused chain", "rmsnorm", "torch", lambda: _torch_rms_unfused(x_t, g_t),
         "pow, mean, rsqrt, mul, mul"),
    ]
    if hasattr(F, "rms_norm"):
        cases.append(("RMSNorm: torch F.rms_norm", "rmsnorm", "torch", lambda: _torch_rms_norm(x_t, g_t),
                      f"torch {torch.__version__}"))
    else:
        cases.append(("RMSNorm: torch F.rms_norm", "rmsnorm", "torch", None,
                      f"not in torch {torch.__version__} (added in 2.4)"))
    if compile:
        for name, op, fn, args in (
            ("LayerNorm: torch.compile(unfused chain)", "layernorm", _torch_layer_norm_unfused, (x_t, g_t, b_t)),
            ("RMSNorm: torch.compile(unfused chain)", "rmsnorm", _torch_rms_unfused, (x_t, g_t)),
        ):
            compiled = torch.compile(fn, dynamic=False)
            cases.append((name, op, "torch.compile", (lambda c=compiled, a=args: c(*a)),
                          "the chain fused by the compiler"))

    rows = []
    old_threads = torch.get_num_threads()
    try:
        if threads is not None:
            torch.set_num_threads(int(threads))
        with _reuse_freed_memory(reuse_memory) as reused:
            _time_cases(cases, rows, nbytes, budget_s, min_repeats)
        n_threads = torch.get_num_threads()
    finally:
        torch.set_num_threads(old_threads)
    best_copy = max(r["gb_per_s"] for r in rows if r["op"] == "copy" and r["gb_per_s"])
    for r in rows:
        r["memory_reused"] = reused
        r["threads"] = n_threads
        if r["gb_per_s"] is not None:
            r["fraction_of_copy"] = r["gb_per_s"] / best_copy
    return rows


def _time_cases(cases, rows, nbytes, budget_s, min_repeats) -> None:
    for name, op, backend, fn, note in cases:
        row = {"name": name, "op": op, "backend": backend, "ms": None, "repeats": 0, "bytes": nbytes,
               "gb_per_s": None, "fraction_of_copy": None, "note": note}
        if fn is not None:
            try:
                t0 = time.perf_counter()
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # compile may warn; the table is the output
                    sec, n = time_call(fn, min_repeats=min_repeats, budget_s=budget_s)
                if backend == "torch.compile":
                    row["note"] += f" (first call and timing took {time.perf_counter() - t0:.1f} s)"
                row.update(ms=1e3 * sec, repeats=n, gb_per_s=nbytes / sec / 1e9)
            except Exception as exc:  # noqa: BLE001 - e.g. no C++ compiler for inductor: report it, keep the table
                first = (str(exc).splitlines() or [""])[0][:80]
                row["note"] = f"failed: {type(exc).__name__}" + (f": {first}" if first else "")
        rows.append(row)


def speed_ratios(rows: list[dict]) -> dict:
    """A few ratios the notebook quotes, from ``speed_table`` rows (None where a row is missing):
    ``unfused_ln_over_rms`` (the unfused torch LayerNorm chain over the unfused RMSNorm chain: like
    with like) and ``torch_unfused_rms_over_fused_ln`` (time ratios, > 1 means the first is slower),
    ``fused_ln_fraction_of_copy`` and ``yours_fraction_of_copy`` (your numpy rms_norm's bandwidth)."""
    ms = {r["name"]: r["ms"] for r in rows}

    def ratio(a, b):
        return ms[a] / ms[b] if ms.get(a) and ms.get(b) else None

    fused = next((r for r in rows if r["name"] == "LayerNorm: torch F.layer_norm"), None)
    return {
        "unfused_ln_over_rms": ratio("LayerNorm: torch unfused chain", "RMSNorm: torch unfused chain"),
        "torch_unfused_rms_over_fused_ln": ratio("RMSNorm: torch unfused chain", "LayerNorm: torch F.layer_norm"),
        "fused_ln_fraction_of_copy": fused["fraction_of_copy"] if fused else None,
        "yours_fraction_of_copy": next((r["fraction_of_copy"] for r in rows
                                        if r["name"] == "RMSNorm: numpy, your rms_norm"), None),
    }


def _human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}"
        n /= 1024
    return f"{n:.0f} GiB"  # unreachable


def format_speed_table(rows: list[dict]) -> str:
    """Plain-text table of ``speed_table`` rows: time, bandwidth and fraction of the copy."""
    width = max(len(r["name"]) for r in rows)
    head = f"{'':{width}}  {'ms':>8}  {'GB/s':>7}  {'of copy':>7}  note"
    lines = [head, "-" * len(head)]
    for r in rows:
        if r["ms"] is None:
            lines.append(f"{r['name']:{width}}  {'-':>8}  {'-':>7}  {'-':>7}  {r['note']}")
        else:
            lines.append(f"{r['name']:{width}}  {r['ms']:>8.2f}  {r['gb_per_s']:>7.1f}  "
                         f"{100 * r['fraction_of_copy']:>6.0f}%  {r['note']}")
    if rows:
        size = _human_bytes(rows[0]["bytes"] / 2)
        reuse = "freed memory reused" if rows[0].get("memory_reused") else "fresh pages every call"
        lines.append(f"(float32, {size} in and {size} out per call; median of repeats; "
                     f"{rows[0].get('threads', torch.get_num_threads())} torch threads; {reuse};\n"
                     " ratios vary with the machine and its load)")
    return "\n".join(lines)
