#!/usr/bin/env python3
"""fmha.exe's Elapsed (its CUDA events) against ncu's gpu__time_duration of the same problem:
one launch after one warm-up, the default 20-launch burst, and bursts of ~25 ms and ~250 ms.

    python3 bench/elapsed_vs_ncu.py [--exe bin/fmha.exe] > elapsed.md

Prints a markdown table (µs, and Elapsed / ncu). Needs a GPU, ncu and a build with the ws bf16
d 64/128/256 kernels (bench/NOTES.md §45 reads it).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench import ncu  # noqa: E402
from bench.ab import run  # noqa: E402  (one fmha.exe run, parsed; exits with the reason on a failure)

# (b, h, s, d, causal): the FA3 grid's s = 8k rows, and one short kernel
PROBLEMS = [(2, 32, 8192, 64, False), (16, 16, 1024, 128, False), (2, 16, 8192, 128, False),
            (2, 16, 8192, 128, True), (2, 8, 8192, 256, False)]


def elapsed(exe: str, args: list[str], runs: int, warm: int, repeats: int = 3) -> float:
    """Median of `repeats` processes' Elapsed µs."""
    return statistics.median(run(exe, [*args, "-runs", str(runs), "-warm-up-runs", str(warm)])[0]
                             for _ in range(repeats))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--exe", default="bin/fmha.exe")
    args = parser.parse_args(argv)
    print("| problem | ncu µs | Elapsed -runs 1 | -runs 20 | ~25 ms burst | ~250 ms burst |")
    print("|---|---|---|---|---|---|")
    for b, h, s, d, causal in PROBLEMS:
        flags = ["-bf16", "-b", str(b), "-h", str(h), "-s", str(s), "-min-s", str(s), "-d", str(d), "-skip-checks",
                 "-v", "0"] + (["-causal-mask"] if causal else [])
        kernel = ncu.fmha_exe_us([args.exe, *flags, "-runs", str(ncu.CALLS), "-warm-up-runs", "1"])
        times = [elapsed(args.exe, flags, 1, 1), elapsed(args.exe, flags, 20, 10),
                 elapsed(args.exe, flags, max(1, int(25_000 / kernel)), 10),
                 elapsed(args.exe, flags, max(1, int(250_000 / kernel)), 10)]
        print(f"| b={b} h={h} s={s} d={d}{' causal' if causal else ''} | {kernel:.1f} | "
              + " | ".join(f"{t:.1f} ({t / kernel:.3f})" for t in times) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
