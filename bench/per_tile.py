#!/usr/bin/env python3
"""Cost of one more query tile an SM, ours against FlashAttention-3, at a fixed length.

    python3 bench/per_tile.py [--dtype e4m3] [--d 256] [--s 1024 2048] [--tiles 2 4 8 16]
                              [--causal] [--exe bin/fmha.exe] [--sms 132] [--list]

fit_tiles.py splits a grid's time into a cost a launch and a cost a key, but the grid varies
the length and the number of tiles together. This holds the length s and adds tiles: b
sequences of h heads, h = SMs / gcd(SMs, s / 128), so that every launch puts a whole number
of 128-row tiles on each SM (2 to 16 by default). A least-squares line t = a + c x through
each side's times (x tiles an SM) gives c, what one tile costs an SM in a full launch, and a,
what a launch costs besides. The two sides are timed as bench/run.py times them (ours: its
fmha.exe timer; FA3: the `fa3_fwd` wheel, bursts of back-to-back calls). --list prints the
problems and needs no GPU (bench/NOTES.md §101).
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.fit_tiles import line  # noqa: E402
from bench.suites import DTYPES, Problem  # noqa: E402

BLOCK_M = 128  # query rows a tile (ours at d >= 128, and FA3's e4m3 and 16-bit tiles there)


def heads_for(s: int, sms: int) -> int:
    """The fewest heads h such that h x (s / BLOCK_M) tiles fill whole waves of sms."""
    if s % BLOCK_M:
        raise ValueError(f"s = {s} is not a multiple of {BLOCK_M}")
    return sms // math.gcd(sms, s // BLOCK_M)


def problems(s: int, d: int, causal: bool, tiles: list[int], sms: int) -> list[tuple[float, Problem]]:
    """(tiles an SM, problem) for each wanted count that a whole number of sequences gives."""
    h = heads_for(s, sms)
    per_sequence = h * (s // BLOCK_M)  # tiles one sequence adds (a multiple of sms)
    return [(want, Problem(b=want * sms // per_sequence, h=h, h_kv=h, s_q=s, s=s, d=d, causal=causal))
            for want in tiles if want > 0 and want * sms % per_sequence == 0]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtype", default="e4m3", choices=list(DTYPES))
    ap.add_argument("--d", type=int, default=256)
    ap.add_argument("--s", type=int, nargs="+", default=[1024, 2048])
    ap.add_argument("--tiles", type=int, nargs="+", default=[2, 4, 6, 8, 12, 16],
                    help="tiles an SM (counts a whole number of sequences cannot give are left out)")
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--exe", type=Path, default=Path(__file__).resolve().parent.parent / "bin" / "fmha.exe")
    ap.add_argument("--sms", type=int, default=132, help="the GPU's SMs (H100 SXM and H200: 132)")
    ap.add_argument("--list", action="store_true", help="print the problems and exit (no GPU needed)")
    args = ap.parse_args(argv)

    work = {s: problems(s, args.d, args.causal, args.tiles, args.sms) for s in args.s}
    for s, probs in work.items():
        if len(probs) < 2:
            ap.error(f"s = {s}: fewer than two of --tiles {args.tiles} fit whole sequences")
    if args.list:
        for s, probs in work.items():
            for x, p in probs:
                print(f"s={s} tiles/SM={x:g} " + " ".join(p.fmha_args()))
        return 0

    import torch  # the GPU sides only

    from bench import fa3 as fa3_wheel
    from bench import run as runner
    if not torch.cuda.is_available():
        print("no CUDA GPU visible to torch", file=sys.stderr)
        return 2
    fa3, why = fa3_wheel.load()
    timers = {"ours": runner.fmha_timer(args.exe, [], 20, 10, repeats=3),
              "fa3": runner.fa3_timer(torch, fa3, why, 20, 5, 10)}
    print(f"{torch.cuda.get_device_name()}, {args.dtype}, d = {args.d}, "
          f"{'causal' if args.causal else 'not causal'}; us a launch (median)")
    print("| s | tiles/SM | b | h | ours | fa3 | fa3 / ours |")
    print("|---|---|---|---|---|---|---|")
    fits = {}
    for s, probs in work.items():
        points = {side: [] for side in timers}
        for x, p in probs:
            us = {side: timer(p, args.dtype).us for side, timer in timers.items()}
            for side, t in us.items():
                if not math.isnan(t):
                    points[side].append((x, t))
            print(f"| {s} | {x:g} | {p.b} | {p.h} | {us['ours']:.1f} | {us['fa3']:.1f} | "
                  f"{us['fa3'] / us['ours']:.3f} |", flush=True)
        fits[s] = {side: line(pts) for side, pts in points.items() if len({x for x, _ in pts}) >= 2}
    print("\n| s | side | a (us a launch) | c (us a tile an SM) |")
    print("|---|---|---|---|")
    for s, sides in fits.items():
        for side, (a, c) in sides.items():
            print(f"| {s} | {side} | {a:.1f} | {c:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
