"""Kernel durations from Nsight Compute for the benchmarks' side-by-side tables: ncu's
gpu__time_duration of each kernel, with clocks and caches left as in a plain run
(--clock-control none --cache-control none), so its figures can stand beside CUDA-event
times of the same calls.

A torch program marks what it wants timed with `marked_range(name, calls)`: a profiled range
that opens with a marker kernel (torch.cuda._sleep) and holds `calls` calls; `profile(cmd)`
runs the program under ncu and returns each range's kernel time per call (every kernel a call
launched, summed), by name. `fmha_exe_us` does the same for bin/fmha.exe's launches.
"""

from __future__ import annotations

import csv
import io
import re
import shutil
import statistics
import subprocess
from contextlib import contextmanager
from pathlib import Path

CALLS = 3            # calls per marked range
MARK = "NCU-RANGE"   # the child's stdout line naming each range, in order
MARKER_KERNEL = "spin_kernel"  # torch.cuda._sleep's kernel
FLAGS = ["--clock-control", "none", "--cache-control", "none", "--metrics", "gpu__time_duration.sum",
         "--print-units", "base", "--csv"]
NS = {"nsecond": 1.0, "usecond": 1e3, "msecond": 1e6, "second": 1e9}


def available() -> bool:
    return shutil.which("ncu") is not None


@contextmanager
def marked_range(name: str, calls: int = CALLS):
    """A range of `calls` calls for profile(): announced on stdout, opened by a marker kernel,
    profiled only between cudaProfilerStart and Stop (ncu --profile-from-start off)."""
    import torch

    torch.cuda.synchronize()
    print(f"{MARK}\t{name}\t{calls}", flush=True)
    torch.cuda.profiler.start()
    torch.cuda._sleep(1)
    try:
        yield
    finally:
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()


def profile_calls(name: str, launch, calls: int = CALLS) -> None:
    """launch(i) makes call i: two unprofiled calls (plans, handles, lazy loading), then a
    marked range of `calls` calls."""
    launch(0)
    launch(1)
    with marked_range(name, calls):
        for i in range(calls):
            launch(i)


def kernels(text: str) -> list[tuple[str, float]]:
    """(kernel name, gpu__time_duration in ns) of each profiled kernel in ncu's --csv output,
    in launch order; other lines (==PROF==, the program's own) are skipped."""
    start = text.find('"ID"')
    if start < 0:
        return []
    rows = []
    for row in csv.DictReader(io.StringIO(text[start:])):
        if row.get("Metric Name") != "gpu__time_duration.sum" or not row.get("ID", "").isdigit():
            continue
        value = float(row["Metric Value"].replace(",", ""))
        rows.append((int(row["ID"]), row["Kernel Name"], value * NS.get(row.get("Metric Unit", "nsecond"), 1.0)))
    rows.sort()
    return [(name, ns) for _, name, ns in rows]


def per_range(ranges: list[tuple[str, int]], launched: list[tuple[str, float]]) -> dict[str, float]:
    """µs per call of each named range: the kernels after its marker and before the next one,
    summed and divided by its calls. A range whose calls launched nothing is left out."""
    out, i = {}, -1
    sums = [0.0] * len(ranges)
    seen = [False] * len(ranges)
    for name, ns in launched:
        if MARKER_KERNEL in name:
            i += 1
            continue
        if 0 <= i < len(ranges):
            sums[i] += ns
            seen[i] = True
    if i + 1 != len(ranges):
        raise ValueError(f"ncu saw {i + 1} markers for {len(ranges)} ranges")
    for (name, calls), total, any_kernel in zip(ranges, sums, seen):
        if any_kernel and calls > 0:
            out[name] = total / calls / 1e3
    return out


def profile(cmd: list[str], log: Path, timeout: float = 900) -> dict[str, float]:
    """Runs `cmd` (a program using marked_range) under ncu; µs per call by range name. ncu's
    CSV is kept at `log`."""
    log.parent.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(["ncu", "--profile-from-start", "off", *FLAGS, "--log-file", str(log), *cmd],
                          capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"ncu exited {proc.returncode}: {(proc.stderr or proc.stdout).strip()[-400:]}")
    ranges = []
    for line in proc.stdout.splitlines():
        if line.startswith(MARK + "\t"):
            _, name, calls = line.split("\t")
            ranges.append((name, int(calls)))
    return per_range(ranges, kernels(log.read_text()))


OURS = "regex:fwd_kernel|decode_kernel|decode_short_kernel|decode_mma_kernel|combine_kernel"
OURS_MAIN = re.compile(r"fwd_kernel|decode_kernel|decode_short_kernel|decode_mma_kernel")  # one a call


def fmha_exe_us(cmd: list[str], skip: int = 1, timeout: float = 300, locked: bool = False) -> float:
    """Median ncu duration (µs) of the calls of `cmd` (bin/fmha.exe with -runs N): each call
    is an attention kernel and what follows it before the next (decode's combine), after the
    first `skip` (warm-up) calls; NaN if ncu saw none. locked: ncu holds the GPU at its base
    clock for each kernel (--clock-control base), so the power limit and the boost clock play
    no part: time in cycles at one clock, for A/B runs (bench/ab.py --locked), not for tables
    beside CUDA events."""
    flags = [*FLAGS]
    if locked:
        flags[flags.index("--clock-control") + 1] = "base"
    proc = subprocess.run(["ncu", *flags, "-k", OURS, *cmd], capture_output=True, text=True, timeout=timeout)
    calls: list[float] = []
    for name, ns in kernels(proc.stdout):
        if OURS_MAIN.search(name):
            calls.append(ns)
        elif calls:
            calls[-1] += ns
    calls = calls[skip:]
    if proc.returncode != 0 or not calls:
        return float("nan")
    return statistics.median(calls) / 1e3
