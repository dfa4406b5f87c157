#!/usr/bin/env python3
"""A/B of two fmha.exe builds on one suite's problems, interleaved in one process.

    python3 bench/ab.py A_EXE B_EXE [--suite fa3] [--dtype bf16] [--only GLOB ...] [--repeats 4]
                        [--cool-ms 500] [--extra FLAGS] [--locked]

For each problem, runs A and B alternately `--repeats` times (`-skip-checks`, bursts of about
25 ms as bench/run.py times ours) and prints the median µs of each, B / A (the median of each
repeat's pair) and the range of those pairs. Both must pick the same kernel; a problem where
they differ is flagged. A and B may be the same fmha.exe (an A/A run: the noise alone).
--locked times each run by ncu at the GPU's base clock instead (bench/ncu.py): cycles without
the power limit's noise, for changes smaller than the 2 % that the events resolve. Meant for "no change intended" checks
(a refactor, a rare-path branch) where SDPA adds nothing.

Fairness, as bench/run.py: each run starts after --cool-ms of an idle GPU, and the pair's
order turns every repeat (A B, B A, ...). Back to back and always A first, B ran hotter: two
libraries with the same SASS read B up to 2 % slower on long causal problems (NOTES §107).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench import ncu  # noqa: E402
from bench.run import COOL_MS, non_negative_ms  # noqa: E402
from bench.suites import DTYPES, SUITES, only, select  # noqa: E402
from tests.gpu.contract import parse_output  # noqa: E402
from tests.gpu.driver import run_fmha  # noqa: E402

BURST_MS = 25.0


def run(exe: str, args: list[str]) -> tuple[float, str]:
    proc = run_fmha(Path(exe), args, timeout=600)
    if proc.returncode != 0:
        raise SystemExit(f"{exe} {' '.join(args)}: exit {proc.returncode}: {proc.stderr.strip()[-300:]}")
    fields = parse_output(proc.stdout)
    return float(fields["us"]), fields["kernel"]


def run_locked(exe: str, args: list[str]) -> float:
    """--locked: ncu's median kernel duration at the base clock (bench/ncu.py)."""
    us = ncu.fmha_exe_us([exe, *args], locked=True, timeout=600)
    if us != us:
        raise SystemExit(f"ncu {exe} {' '.join(args)}: no kernel duration")
    return us


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a")
    parser.add_argument("b")
    parser.add_argument("--suite", default="fa3", choices=list(SUITES))
    parser.add_argument("--dtype", default="bf16", choices=list(DTYPES))
    parser.add_argument("--only", nargs="+", default=[])
    parser.add_argument("--repeats", type=int, default=4, help="even, so each side goes first as often")
    parser.add_argument("--cool-ms", type=non_negative_ms, default=COOL_MS, metavar="MS",
                        help=f"idle GPU before each measured run (default {COOL_MS:g})")
    parser.add_argument("--extra", default="", help="more fmha.exe flags for both, e.g. -force-non-warp-specialization")
    parser.add_argument("--locked", action="store_true",
                        help="time by ncu at the GPU's base clock (5 launches, the median) instead of fmha.exe's "
                             "events: cycles, without the power limit's noise")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error(f"--repeats {args.repeats}: expected at least 1")
    suites = only(select([args.suite]), args.only) if args.only else select([args.suite])
    print("| problem | kernel | A us | B us | B / A | pairs |")
    print("|---|---|---|---|---|---|")
    ratios = []
    for suite in suites:
        for p in suite.problems:
            base = [*p.fmha_args(), *DTYPES[args.dtype].flag.split(), *args.extra.split(), "-skip-checks", "-v", "0"]
            exes = (args.a, args.b)  # by side (A, B): the same exe twice is an A/A run
            if args.locked:  # one warm-up launch, then five timed ones (fmha_exe_us skips the first)
                kernels = [run(exe, [*base, "-runs", "1", "-warm-up-runs", "0"])[1] for exe in exes]  # names
                timed = [*base, "-runs", "6", "-warm-up-runs", "0"]
            else:
                probe, _ = run(args.a, [*base, "-runs", "1", "-warm-up-runs", "1"])
                runs = max(1, min(200, int(BURST_MS * 1000 / probe)))
                timed, kernels = [*base, "-runs", str(runs), "-warm-up-runs", str(max(1, runs // 2))], ["", ""]
            times = ([], [])
            for i in range(args.repeats):
                for side in ((0, 1) if i % 2 == 0 else (1, 0)):
                    time.sleep(args.cool_ms / 1e3)
                    if args.locked:
                        times[side].append(run_locked(exes[side], timed))
                    else:
                        us, kernels[side] = run(exes[side], timed)
                        times[side].append(us)
            # B / A: the median of each repeat's pair (run next to each other, so a drift of the
            # GPU's clock between repeats cancels); "pairs" is their range, the noise at hand.
            pairs = [b / a for a, b in zip(*times)]
            ratio = statistics.median(pairs)
            ratios.append(ratio)
            kernel = kernels[0] if kernels[0] == kernels[1] else f"{kernels[0]} != {kernels[1]}"
            print(f"| {p.label()} | {kernel} | {statistics.median(times[0]):.1f} | {statistics.median(times[1]):.1f} "
                  f"| {ratio:.3f} | {min(pairs):.3f}-{max(pairs):.3f} |", flush=True)
    print(f"\nB / A over {len(ratios)} problems: geometric mean "
          f"{statistics.geometric_mean(ratios):.4f}, min {min(ratios):.3f}, max {max(ratios):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
