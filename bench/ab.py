#!/usr/bin/env python3
"""A/B of two fmha.exe builds on one suite's problems, interleaved in one process.

    python3 bench/ab.py A_EXE B_EXE [--suite fa3] [--dtype bf16] [--only GLOB ...] [--repeats 4]
                        [--cool-ms 500] [--extra FLAGS]

For each problem, runs A and B alternately `--repeats` times (`-skip-checks`, bursts of about
25 ms as bench/run.py times ours) and prints the median µs of each and B / A. Both must pick
the same kernel; a problem where they differ is flagged. Meant for "no change intended" checks
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
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error(f"--repeats {args.repeats}: expected at least 1")
    suites = only(select([args.suite]), args.only) if args.only else select([args.suite])
    print("| problem | kernel | A us | B us | B / A |")
    print("|---|---|---|---|---|")
    ratios = []
    for suite in suites:
        for p in suite.problems:
            base = [*p.fmha_args(), *DTYPES[args.dtype].flag.split(), *args.extra.split(), "-skip-checks", "-v", "0"]
            probe, _ = run(args.a, [*base, "-runs", "1", "-warm-up-runs", "1"])
            runs = max(1, min(200, int(BURST_MS * 1000 / probe)))
            timed = [*base, "-runs", str(runs), "-warm-up-runs", str(max(1, runs // 2))]
            times = {args.a: [], args.b: []}
            kernels = {}
            for i in range(args.repeats):
                for exe in ((args.a, args.b) if i % 2 == 0 else (args.b, args.a)):
                    time.sleep(args.cool_ms / 1e3)
                    us, kernels[exe] = run(exe, timed)
                    times[exe].append(us)
            a, b = statistics.median(times[args.a]), statistics.median(times[args.b])
            ratios.append(b / a)
            kernel = kernels[args.a] if kernels[args.a] == kernels[args.b] else \
                f"{kernels[args.a]} != {kernels[args.b]}"
            print(f"| {p.label()} | {kernel} | {a:.1f} | {b:.1f} | {b / a:.3f} |", flush=True)
    print(f"\nB / A over {len(ratios)} problems: geometric mean "
          f"{statistics.geometric_mean(ratios):.4f}, min {min(ratios):.3f}, max {max(ratios):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
