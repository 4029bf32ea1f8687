"""Latency of the 02_geometry bar-drag widget: ``python -m normlab.bench_widget``.

Builds ``BarDragWidget`` without a browser, moves its sliders (the six bars, a, c and eps) a
number of times and prints how long each move takes, from setting a slider's value to the
Image widget holding the new PNG. The target is one 60 Hz frame, 16 ms, at the median. The observe
callback runs synchronously, so that is the whole kernel-side cost of one drag event (the browser's share, a
comm message and an image swap, is not included).

Two kinds of moves: "drag" (default) imitates a person dragging, small steps on one control
at a time; "jump" sets random values anywhere in each slider's range, which changes axis
limits far more often and is the pessimistic case ("both" runs one after the other). Timings are
noisy and depend on the load of the machine: this prints them and never fails on them.

``--markdown docs/benchmarks.md`` also writes the table into that page, between its
``bench-widget`` markers (``grader.benchmarks_markdown``), with the date, commit and machine.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # headless; the widget itself never touches pyplot

import numpy as np

from grader import benchmarks_markdown
from normlab.geometry import BarDragWidget


def _moves(w: BarDragWidget, n: int, mode: str, rng: np.random.Generator):
    """Yield (slider, new value) pairs."""
    eps = getattr(w, "eps_slider", None)  # the widget of before this slider existed is timed too
    controls = list(w.sliders) + [w.scale, w.shift] + ([eps] if eps is not None else [])
    log = {c for c in controls if type(c).__name__ == "FloatLogSlider"}
    for k in range(n):
        if mode == "jump":
            s = controls[k % len(controls)]
            if s in log:
                v = float(s.base ** rng.uniform(s.min, s.max))
            else:
                v = float(np.round(rng.uniform(s.min, s.max) / s.step) * s.step)
        else:
            # Drags of 10 events on one control, each 1 to 3 slider steps, bouncing at the ends.
            s = controls[(k // 10) % len(controls)]
            if s in log:
                v = float(s.value * s.base ** (rng.choice([-1, 1]) * rng.integers(1, 4) * s.step))
                if not s.base ** s.min <= v <= s.base ** s.max:
                    v = float(s.value ** 2 / v)
            else:
                v = float(np.round((s.value + rng.choice([-1, 1]) * rng.integers(1, 4) * s.step) / s.step) * s.step)
                if not s.min <= v <= s.max:
                    v = float(s.value - (v - s.value))
        if v == s.value:  # a move that changes nothing fires no event; nudge it
            v = v * s.base ** s.step if s in log else (v + s.step if v + s.step <= s.max else v - s.step)
        yield s, v


def measure(n_updates: int = 200, *, mode: str = "drag", dpi: int = 80, show_rms: bool = True,
            seed: int = 0, widget_class=None) -> dict:
    """Time ``n_updates`` slider moves on a fresh widget.

    Returns a dict: "all", "bars" (the six x sliders), "a_c" (scale, shift and eps): arrays of
    latencies in ms; "panel_draws" and "full_draws": how many moves needed part or all of
    the figure's background redrawn; "png_bytes" (the last image's size) and "size_px".
    ``widget_class`` times another implementation with the same attributes (default
    ``BarDragWidget``), e.g. an earlier version, for a side-by-side comparison.
    """
    w = (widget_class or BarDragWidget)(seed=seed, dpi=dpi, show_rms=show_rms)
    rng = np.random.default_rng(seed)
    for s, v in _moves(w, 8, "drag", rng):  # warm-up: font caches, mathtext, first layout
        s.value = v
    panel0, full0 = w.n_panel_draws, w.n_full_draws
    kinds, times = [], []
    for s, v in _moves(w, n_updates, mode, rng):
        before = w.image.value
        t0 = time.perf_counter()
        s.value = v
        refreshed = w.image.value is not before
        t1 = time.perf_counter()
        if not refreshed:
            raise RuntimeError("a slider move did not refresh the image")
        times.append(1e3 * (t1 - t0))
        kinds.append("bars" if any(s is b for b in w.sliders) else "a_c")
    ms, kinds = np.array(times), np.array(kinds)
    return {
        "all": ms, "bars": ms[kinds == "bars"], "a_c": ms[kinds == "a_c"],
        "panel_draws": w.n_panel_draws - panel0, "full_draws": w.n_full_draws - full0,
        "png_bytes": len(w.image.value),
        "size_px": tuple(int(round(v)) for v in w.fig.get_size_inches() * dpi),
    }


def _summary(ms: np.ndarray) -> str:
    return (f"median {np.median(ms):6.1f} ms   p95 {np.percentile(ms, 95):6.1f} ms   "
            f"max {ms.max():6.1f} ms   (n = {ms.size})")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description="Time BarDragWidget updates (slider set -> Image refreshed).")
    p.add_argument("-n", "--n-updates", type=int, default=200)
    p.add_argument("--mode", choices=("drag", "jump", "both"), default="drag")
    p.add_argument("--dpi", type=int, default=80)
    p.add_argument("--no-rms", action="store_true", help="time the 3-panel figure instead of 4")
    p.add_argument("--markdown", type=Path, default=None, metavar="PATH",
                   help="also write the table between PATH's bench-widget markers (docs/benchmarks.md)")
    args = p.parse_args(argv)
    if args.markdown:
        benchmarks_markdown.check_section(args.markdown, "bench-widget")  # a page it cannot write fails now
    # before measuring: the load average of a machine not yet busy with this
    when = benchmarks_markdown.provenance("python -m normlab.bench_widget " + " ".join(
        argv if argv is not None else sys.argv[1:]))
    results = {}
    for mode in (("drag", "jump") if args.mode == "both" else (args.mode,)):
        res = results[mode] = measure(args.n_updates, mode=mode, dpi=args.dpi, show_rms=not args.no_rms)
        w_px, h_px = res["size_px"]
        print(f"BarDragWidget update latency, {mode} moves, dpi {args.dpi}, {w_px}x{h_px} px, "
              f"PNG {res['png_bytes'] / 1024:.0f} KiB (target: median <= 16 ms, one 60 Hz frame)")
        print(f"  all moves     {_summary(res['all'])}")
        print(f"  bar sliders   {_summary(res['bars'])}")
        print(f"  a, c and eps  {_summary(res['a_c'])}")
        print(f"  panels redrawn (y-limits changed): {res['panel_draws']}, whole figure redrawn: "
              f"{res['full_draws']}, the rest only blitted the bars")
    if args.markdown:
        benchmarks_markdown.write_section(args.markdown, "bench-widget",
                                          benchmarks_markdown.widget_section(results, dpi=args.dpi, when=when))
        print(f"wrote the bench-widget section of {args.markdown}")


if __name__ == "__main__":
    main()
