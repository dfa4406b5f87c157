#!/usr/bin/env python3
"""bin/fmha.exe against FlashAttention-3's own kernels (the `fa3_fwd` wheel, where installed)
and PyTorch SDPA's FLASH_ATTENTION, CUDNN_ATTENTION and EFFICIENT_ATTENTION backends, side by
side on one GPU in one run.

    python3 bench/run.py --suite all [--dtype fp16] [--out DIR] [--tar PATH.tar.gz] [--ncu]

Per suite it writes <out>/<suite>_<gpu>_<dtype>.csv, .md (with ours/fa3, ours/flash,
ours/cudnn, ours/efficient) and .png (bench/plot.py: TFLOP/s or GB/s against sequence length); the
markdown tables and a one-line summary per suite are printed last. The CSV and markdown open
with the GPU, driver, torch/CUDA/cuDNN versions and nvidia-smi's SM and memory clocks at the
suite's start and end.

Timing: fmha.exe times itself (-skip-checks, -runs back-to-back launches after
-warm-up-runs, one input set, CUDA events); ours is the median of --ours-repeats such runs.
SDPA and FA3: CUDA events around back-to-back launches after warm-up ones, the median of
--repeats measurements. All take the same burst: about
MEASURE_MS (--measure-ms) of timed launches (at most --runs) after warm-up ones that stop past WARM_UP_MS
(`bench/timing.py`'s `burst`); for ours a one-launch probe run gives the call's length where it may be long
(a GPU at its power limit clocks down within tens of ms, so a longer burst reads slower:
bench/NOTES.md §24). Every measurement of every side starts from an idle GPU: COOL_MS
(--cool-ms) of host sleep before each fmha.exe run, and before each torch burst and its own
warm-up launches. Without it the torch sides' back-to-back bursts ran into the power limit
where ours, separate processes, did not: FA3 read up to 8 % slower than from idle at s = 8k
(bench/NOTES.md §103); inputs randn [b, h, s, d],
rotated over 3 sets when small enough to stay in L2. GQA goes to SDPA with enable_gqa=True;
a backend that refuses it gets K and V expanded to h heads beforehand (repeat_interleave,
outside the timing; the row's note says so, and GB/s still counts the GQA bytes). FA3 takes
[b, s, h, d] inputs, GQA, windows and softcapping natively (decode through
flash_attn_with_kvcache with num_splits=0, its own split heuristic); e4m3 is FA3's alone. A
backend that refuses a problem, fails or runs out of memory leaves NaN and a note, never a
crash. --ncu then profiles the same calls under Nsight Compute (bench/ncu.py: every side's
kernel durations, clocks and caches as in the timed run) and adds them beside the events.
"""

from __future__ import annotations

import argparse
import math
import os
import shlex
import subprocess
import sys
import tarfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # `bench` and `tests` as packages

from bench import fa3 as fa3_wheel, ncu, report  # noqa: E402
from bench.suites import ALL, DTYPES, SUITES, Suite, only, select  # noqa: E402
from bench.perf_baseline import gpu_slug  # noqa: E402  (results and baselines share one name rule)
from bench.timing import (  # noqa: E402  (how each side is timed: bench/timing.py)
    NAN, BACKENDS, MEASURE_MS, COOL_MS, Timing, Timer, fmha_timer, Measure, sdpa_timer, fa3_timer)

# ---------------------------------------------------------------------------------------------
# Nsight Compute: the same calls, kernel durations (--ncu)

def torch_sides(torch, args, measure_for: Callable[[str], Measure] | None = None) -> dict[str, Timer]:
    """FA3 and SDPA's backends; `measure_for(who)` replaces the burst timing (the ncu child)."""
    pick = (lambda who: measure_for(who)) if measure_for else (lambda who: None)
    fa3, why = fa3_wheel.load()
    return {"fa3": fa3_timer(torch, fa3, why, args.runs, args.repeats, args.warm_up_runs, args.measure_ms,
                             pick("fa3"), args.cool_ms),
            **{who: sdpa_timer(torch, who, args.runs, args.repeats, args.warm_up_runs, args.measure_ms, pick(who),
                               args.cool_ms)
               for who in BACKENDS}}


def ncu_child(torch, work: list[tuple[Suite, str]], args) -> int:
    """Runs under ncu (bench/ncu.py): every torch side's calls of every problem, each a marked
    range of ncu.CALLS calls after two unprofiled ones."""
    current = [""]

    def measure_for(who: str) -> Measure:
        def measure(launch) -> float:
            ncu.profile_calls(f"{current[0]}|{who}", launch)
            return 0.0
        return measure

    timers = torch_sides(torch, args, measure_for)
    for suite, dtype in work:
        for p in suite.problems:
            current[0] = f"{suite.name}|{dtype}|{p.label()}"
            for timer in timers.values():
                timer(p, dtype)
            torch.cuda.empty_cache()
    return 0


def add_ncu(results: list[tuple[dict, list[dict]]], work: list[tuple[Suite, str]], args, argv: list[str]) -> None:
    """ncu's µs per call of every side beside the events' (rows' <who>_ncu_us): ours from
    fmha.exe's own launches, the torch sides from a child run of this script."""
    child = [sys.executable, str(Path(__file__).resolve()), "--ncu-child", *argv]
    torch_us = ncu.profile(child, args.out / "ncu_torch_sides.csv")
    for (meta, rows), (suite, dtype) in zip(results, work):
        for row, p in zip(rows, suite.problems):
            cmd = [str(args.exe), *p.fmha_args(), *DTYPES[dtype].flag.split(), *shlex.split(args.fmha_args), "-skip-checks",
                   "-v", "0", "-runs", str(ncu.CALLS), "-warm-up-runs", "1"]
            row["ours_ncu_us"] = ncu.fmha_exe_us(cmd) if math.isfinite(row["ours_us"]) else NAN
            for who in ("fa3", *BACKENDS):
                row[f"{who}_ncu_us"] = torch_us.get(f"{suite.name}|{dtype}|{p.label()}|{who}", NAN)
        meta["ncu"] = "ncu gpu__time_duration (--clock-control none --cache-control none), median of " \
                      f"{ncu.CALLS} calls after one (fmha.exe) or two (torch) unprofiled ones"


# ---------------------------------------------------------------------------------------------
# The run's context

def nvidia_smi(*query: str) -> list[str]:
    """nvidia-smi's answer for the GPU torch uses: the first of CUDA_VISIBLE_DEVICES, else 0
    (nvidia-smi numbers GPUs in PCI order, CUDA fastest first: the same on one-GPU machines)."""
    device = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip() or "0"
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={','.join(query)}", "--format=csv,noheader",
                              "-i", device], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ["unknown"] * len(query)
    values = [v.strip() for v in out.strip().splitlines()[0].split(",")] if out.strip() else []
    return values if len(values) == len(query) else ["unknown"] * len(query)


def clocks() -> str:
    sm, mem, max_sm = nvidia_smi("clocks.sm", "clocks.mem", "clocks.max.sm")
    return f"SM {sm}, memory {mem}, max SM {max_sm}"


def cudnn_version(torch) -> str:
    if not torch.backends.cudnn.is_available():
        return "none"
    v = torch.backends.cudnn.version()  # 91900 = 9.19.0; cuDNN 8 packed 8902 = 8.9.2
    major = v // 10000 if v >= 90000 else v // 1000
    rest = v % 10000 if v >= 90000 else v % 1000
    return f"{major}.{rest // 100}.{rest % 100}"


def git_commit() -> str:
    try:
        out = subprocess.run(["git", "-C", str(REPO), "describe", "--always", "--dirty"],
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return out.stdout.strip() if out.returncode == 0 else "unknown (no git checkout)"


def now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def copy_bandwidth(torch, mib: int = 1024, repeats: int = 5) -> float:
    """Device-to-device copy of `mib` MiB, GB/s counting read + write, best of `repeats`:
    the bandwidth a decode kernel is held against, measured in the same run."""
    src = torch.empty(mib * 2**20, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    dst.copy_(src)
    best = float("inf")
    for _ in range(repeats):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(10):
            dst.copy_(src)
        stop.record()
        stop.synchronize()
        best = min(best, start.elapsed_time(stop) / 10)
    del src, dst
    torch.cuda.empty_cache()
    return 2 * mib * 2**20 / (best * 1e-3) / 1e9


def run_context(torch, args) -> dict:
    return {"gpu": torch.cuda.get_device_name(), "driver": nvidia_smi("driver_version")[0],
            "torch": torch.__version__, "cuda": torch.version.cuda, "cudnn": cudnn_version(torch),
            "commit": git_commit(), "command": shlex.join(sys.argv),
            "ours": f"median of {args.ours_repeats} runs of {args.exe.name} -skip-checks -runs {args.runs} "
                    f"-warm-up-runs {args.warm_up_runs} {args.fmha_args}".strip()
                    + " (its own CUDA-event timing of back-to-back launches; "
                    f"as for SDPA, fewer where {args.runs} would pass {args.measure_ms:g} ms: a 1-launch probe run "
                    f"sets them; each run after {args.cool_ms:g} ms of an idle GPU)",
            "sdpa": f"median of {args.repeats} measurements of up to {args.runs} back-to-back launches "
                    f"(about {args.measure_ms:g} ms each, each after {args.cool_ms:g} ms of an idle GPU and warm-up "
                    "launches; FA3 alike); GQA through enable_gqa, K/V expanded where a backend refuses it (see notes)"}


# ---------------------------------------------------------------------------------------------
# Runner

class Progress:
    """A tqdm bar on a terminal; elsewhere (a log, a device call) one counted line per problem."""

    def __init__(self, total: int, stream=sys.stderr):
        self.total, self.done, self.stream = total, 0, stream
        self.bar = None
        if stream.isatty():
            try:
                from tqdm import tqdm
                self.bar = tqdm(total=total, file=stream, unit="problem", dynamic_ncols=True)
            except ImportError:
                pass

    def start(self, what: str):
        if self.bar is not None:
            self.bar.set_description(what)

    def finish(self, line: str):
        self.done += 1
        if self.bar is not None:
            self.bar.write(line, file=self.stream)
            self.bar.update()
        else:
            width = len(str(self.total))
            print(f"[{self.done:>{width}}/{self.total}] {line}", file=self.stream, flush=True)

    def close(self):
        if self.bar is not None:
            self.bar.close()


def run_suite(suite: Suite, dtype: str, timers: dict[str, Timer], progress: Progress,
              deadline: float | None = None) -> list[dict]:
    """One row per problem; past `deadline` (time.monotonic()) the rest are NaN, noted."""
    rows = []
    for p in suite.problems:
        progress.start(f"{suite.name} {p.label()}")
        if deadline is not None and time.monotonic() > deadline:
            timings = {who: Timing(NAN) for who in timers}
            notes = ["skipped: --time-budget spent"]
        else:
            timings = {who: timer(p, dtype) for who, timer in timers.items()}
            notes = [t.note for t in timings.values()]
        row = report.result_row(p, dtype, {who: t.us for who, t in timings.items()},
                                kernel=timings["ours"].kernel if "ours" in timings else "", notes=notes)
        rows.append(row)
        values = "  ".join(f"{who} {report.fmt(row[f'{who}_{suite.metric}'])}" for who in report.IMPLS)
        progress.finish(f"{suite.name} {dtype} {p.label()}: {values} {report.UNITS[suite.metric]}"
                        + (f"  [{row['note']}]" if row["note"] else ""))
    return rows


def write_suite(out: Path, meta: dict, rows: list[dict]) -> list[Path]:
    """CSV, markdown and (where matplotlib is) PNG of one suite; the paths written."""
    stem = out / f"{meta['suite']}_{gpu_slug(meta['gpu'])}_{meta['dtype']}"
    written = [report.write_csv(stem.with_suffix(".csv"), meta, rows)]
    stem.with_suffix(".md").write_text(report.markdown(meta, rows))
    written.append(stem.with_suffix(".md"))
    try:
        from bench.plot import plot
        written.append(plot(meta, rows, stem.with_suffix(".png")))
    except Exception as error:  # matplotlib missing, say: the CSV is written and plots offline
        print(f"no plot ({type(error).__name__}: {error}); make it with: python3 bench/plot.py {stem}.csv",
              file=sys.stderr)
    return written


def pack(paths: list[Path], tar_path: Path) -> Path:
    """One .tar.gz of `paths`, each stored under its bare name (extract with -C bench/results)."""
    tar_path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(tar_path, "w:gz") as tar:
        for path in paths:
            tar.add(path, arcname=path.name)
    return tar_path


def plan(suites: list[Suite], dtypes: list[str]) -> list[tuple[Suite, str]]:
    """(suite, dtype) pairs to run: a suite with its own dtype runs once, in that dtype."""
    pairs = []
    for suite in suites:
        for dtype in [suite.dtype] if suite.dtype else dtypes:
            if (suite, dtype) not in pairs:
                pairs.append((suite, dtype))
    return pairs


def milliseconds(text: str, zero_ok: bool = False) -> float:
    """A finite number of milliseconds, positive (or, zero_ok, zero too)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}")
    if not ((0 <= value if zero_ok else 0 < value) and value < math.inf):
        raise argparse.ArgumentTypeError(
            f"must be {'zero or ' if zero_ok else ''}a positive number of milliseconds: {text!r}")
    return value


def positive_ms(text: str) -> float:
    """--measure-ms."""
    return milliseconds(text)


def non_negative_ms(text: str) -> float:
    """--cool-ms."""
    return milliseconds(text, zero_ok=True)


def parse_args(argv):
    listing = "\n".join(f"  {s.name:7s} {report.count(len(s.problems), 'problem'):>12s}, {report.UNITS[s.metric]}"
                        f"{', ' + s.dtype + ' always' if s.dtype else ''}: {s.about}" for s in SUITES.values())
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=f"suites:\n{listing}\n  {ALL:7s} every suite above, in that order\n\n"
               "example (one device call, every suite, one archive):\n"
               "  python3 bench/run.py --suite all --out /tmp/bench --tar $OUT/bench.tar.gz --time-budget 540")
    parser.add_argument("--suite", nargs="+", choices=[*SUITES, ALL], default=["fa3"], metavar="SUITE",
                        help=f"one or more of {', '.join([*SUITES, ALL])} (default fa3)")
    parser.add_argument("--dtype", nargs="+", choices=DTYPES, default=["fp16"],
                        help="for suites without their own dtype (default fp16); several run each")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results", help="where every file goes")
    parser.add_argument("--tar", type=Path, help="also pack the files this run wrote into this .tar.gz")
    parser.add_argument("--only", nargs="+", default=[], metavar="GLOB",
                        help="run only the problems whose label (as --list prints it) matches one of these "
                             "globs, e.g. 'b=64 *' 'b=8 *d=64'; the cut suite is written as <suite>-part")
    parser.add_argument("--list", action="store_true", help="print the problems and exit (no GPU needed)")
    parser.add_argument("--time-budget", type=float, metavar="S",
                        help="seconds from start; problems not begun by then are recorded as skipped "
                             "(NaN) so the files and the archive are still written")
    parser.add_argument("--exe", type=Path, default=REPO / "bin" / "fmha.exe")
    parser.add_argument("--fmha-args", default="", help="extra fmha.exe flags, e.g. '-kernel NAME'")
    parser.add_argument("--runs", type=int, default=20, help="timed launches per measurement (SDPA: at most)")
    parser.add_argument("--warm-up-runs", type=int, default=10)
    parser.add_argument("--measure-ms", type=positive_ms, default=MEASURE_MS, metavar="MS",
                        help=f"each measurement, ours and SDPA alike: about MS of back-to-back launches, at "
                             f"most --runs of them (default {MEASURE_MS:g}; a longer burst runs nearer the "
                             "power limit: raise --runs with it)")
    parser.add_argument("--cool-ms", type=non_negative_ms, default=COOL_MS, metavar="MS",
                        help=f"host sleep, the GPU idle, before every measurement of every side (default "
                             f"{COOL_MS:g}; 0: back to back, where the later bursts of a heavy problem meet "
                             "the power limit)")
    parser.add_argument("--repeats", type=int, default=5, help="SDPA and FA3: measurements, median taken")
    parser.add_argument("--ours-repeats", type=int, default=3,
                        help="ours: fmha.exe runs (one measurement each), median taken")
    parser.add_argument("--ncu", action="store_true",
                        help="then every side's kernel durations under Nsight Compute, beside the events' times")
    parser.add_argument("--ncu-child", action="store_true", help=argparse.SUPPRESS)
    return parser, parser.parse_args(argv)


def main(argv=None) -> int:
    began = time.monotonic()
    parser, args = parse_args(argv)
    suites = only(select(args.suite), args.only)
    if not suites:
        parser.error(f"--only {' '.join(args.only)}: no problem of {', '.join(args.suite)} matches")
    work = plan(suites, args.dtype)
    if args.list:
        for suite, dtype in work:
            print(f"{suite.name} ({dtype}, {report.count(len(suite.problems), 'problem')}): {suite.about}")
            for p in suite.problems:
                print(f"  {p.label():40s} fmha.exe {' '.join(p.fmha_args())} {DTYPES[dtype].flag}")
        return 0

    if not args.exe.is_file():
        parser.error(f"{args.exe} not found: run `python3 setup.py && make -j` first")
    os.environ["FMHA_EXE"] = str(args.exe.resolve())  # fmha_test.py reads the manifest beside it
    import torch
    if not torch.cuda.is_available():
        print("no CUDA GPU visible to torch", file=sys.stderr)
        return 3

    if args.ncu_child:
        return ncu_child(torch, work, args)
    if args.ncu and not ncu.available():
        parser.error("--ncu: ncu (Nsight Compute) is not on PATH")
    context = run_context(torch, args)
    deadline = began + args.time_budget if args.time_budget else None
    timers = {"ours": fmha_timer(args.exe, shlex.split(args.fmha_args), args.runs, args.warm_up_runs, deadline,
                                 args.ours_repeats, args.measure_ms, args.cool_ms),
              **torch_sides(torch, args)}
    args.out.mkdir(parents=True, exist_ok=True)
    total = sum(len(suite.problems) for suite, _ in work)
    print(f"{context['gpu']}, driver {context['driver']}, torch {context['torch']}, cuDNN {context['cudnn']}; "
          f"{total} problems: " + ", ".join(f"{s.name} {d} ({len(s.problems)})" for s, d in work),
          file=sys.stderr, flush=True)
    progress = Progress(total)
    written, results = [], []
    for suite, dtype in work:
        meta = {"suite": suite.name, "about": suite.about, "dtype": dtype, "metric": suite.metric,
                **context, "clocks_start": clocks(), "started": now()}
        if suite.metric == "gbs":
            meta["copy_gbs"] = f"{copy_bandwidth(torch):.0f}"
        rows = run_suite(suite, dtype, timers, progress, deadline)
        meta.update(clocks_end=clocks(), finished=now())
        written += write_suite(args.out, meta, rows)  # each suite lands as soon as it is done
        results.append((meta, rows))
        torch.cuda.empty_cache()
    progress.close()
    if args.ncu:
        print("ncu: the same calls again, kernel durations", file=sys.stderr, flush=True)
        add_ncu(results, work, args, [a for a in (argv if argv is not None else sys.argv[1:]) if a != "--ncu"])
        for meta, rows in results:  # rewritten with the ncu columns
            written += [w for w in write_suite(args.out, meta, rows) if w not in written]

    for meta, rows in results:
        print("\n" + report.markdown(meta, rows))
    print(f"wrote {len(written)} files under {args.out}"
          + (f", packed into {pack(written, args.tar)}" if args.tar else ""))
    for meta, rows in results:
        print(report.summary(meta, rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
