#!/usr/bin/env python3
"""Split a grid's times into a fixed cost and a cost a key, per head size and mask.

    python3 bench/fit_tiles.py bench/results/fa3_nvidia-h200_e4m3.csv [--min-s 1024]

The fa3 suite keeps 16k tokens (b = 16384 / s) and 2048 hidden (h = 2048 / d), so every row
of one head size has the same number of query tiles and only their length s varies. A
least-squares line t = a + b s through each side's times (rows with s >= --min-s) then
separates what a launch pays whatever the length (a: the tiles' prologues and epilogues,
their tail) from what each key costs (b). No GPU needed: it reads bench/run.py's CSV
(bench/NOTES.md §100).
"""
from __future__ import annotations

import argparse
import math
import sys
from collections import defaultdict
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from bench.report import IMPLS, read_csv  # noqa: E402


def line(points: list[tuple[float, float]]) -> tuple[float, float]:
    """(a, b) of the least-squares t = a + b s through (s, t) points (at least two s)."""
    if len({s for s, _ in points}) < 2:
        raise ValueError("a line needs at least two lengths")
    b, a = np.polyfit([s for s, _ in points], [t for _, t in points], 1)
    return float(a), float(b)


def fits(rows: list[dict], min_s: int) -> dict:
    """{(d, causal): {side: (a us, b us a key)}} for the sides with two lengths or more."""
    groups = defaultdict(lambda: defaultdict(list))
    for r in rows:
        if r["s"] < min_s:
            continue
        for side in IMPLS:
            t = r.get(f"{side}_us", math.nan)
            if not math.isnan(t):
                groups[(r["d"], r["causal"])][side].append((r["s"], t))
    return {key: {side: line(pts) for side, pts in sides.items() if len({s for s, _ in pts}) >= 2}
            for key, sides in sorted(groups.items())}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv")
    ap.add_argument("--min-s", type=int, default=1024, help="leave out shorter rows (default 1024)")
    args = ap.parse_args(argv)
    _, rows = read_csv(Path(args.csv))
    print("| d | causal | side | fixed a (us) | b (us a key) |")
    print("|---|---|---|---|---|")
    for (d, causal), sides in fits(rows, args.min_s).items():
        for side, (a, b) in sides.items():
            print(f"| {d} | {'yes' if causal else 'no'} | {side} | {a:.1f} | {b:.4f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
