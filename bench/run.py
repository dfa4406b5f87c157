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
(`burst`); for ours a one-launch probe run gives the call's length where it may be long
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
import statistics
import subprocess
import sys
import tarfile
import time
import warnings
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # `bench` and `tests` as packages

from bench import fa3 as fa3_wheel, ncu, report  # noqa: E402
from bench.suites import ALL, DTYPES, SUITES, Problem, Suite, only, select  # noqa: E402
from bench.perf_baseline import gpu_slug  # noqa: E402  (results and baselines share one name rule)
from tests.gpu import driver  # noqa: E402  (the one parser of fmha.exe's output, tests/gpu/contract.py)

NAN = float("nan")
BACKENDS = {"flash": "FLASH_ATTENTION", "cudnn": "CUDNN_ATTENTION", "efficient": "EFFICIENT_ATTENTION"}
FMHA_TIMEOUT_S = 300      # one fmha.exe run; less when --time-budget has less left
MIN_FMHA_TIMEOUT_S = 10
# A measurement aims at this many milliseconds of back-to-back launches (at most --runs
# launches, at least one), so a 20 ms decode call does not take 20 x 10 launches per backend
# (the default of --measure-ms).
MEASURE_MS = 25.0
WARM_UP_MS = 200.0      # stop warming up early past this, after at least two launches
SPIN_CYCLES = 4_000_000  # ~2 ms of GPU spin before each measurement: covers enqueueing its launches
# Host sleep, the GPU idle, before each measurement of every side, so that each starts below
# the power limit as a fresh fmha.exe run does (§103: bursts after 0.5 s idle read the same as
# the first of a series; back to back, the later ones of a heavy problem read 5-8 % slower).
COOL_MS = 500.0
ROTATE_BELOW_BYTES = 256 * 2**20  # inputs this small get 3 sets, rotated, so L2 does not serve repeats
# Lower bounds on any backend's speed, to tell a problem whose --runs launches surely fit in
# MEASURE_MS (no probe run for ours) from one that may not.
PROBE_ABOVE_FLOPS = 50e12   # FLOP/s
PROBE_ABOVE_BYTES = 200e9   # bytes/s


def needs_probe(p: Problem, dtype: str, runs: int, measure_ms: float = MEASURE_MS) -> bool:
    """Whether `runs` launches of p might take longer than measure_ms even for a backend as
    slow as PROBE_ABOVE_FLOPS / PROBE_ABOVE_BYTES (then ours is probed for its length)."""
    slowest_us = max(p.flop() / PROBE_ABOVE_FLOPS, p.bytes(DTYPES[dtype].bytes) / PROBE_ABOVE_BYTES) * 1e6
    return runs > 1 and runs * slowest_us > measure_ms * 1e3


def burst(us_per_call: float, runs: int, warm_up: int, measure_ms: float = MEASURE_MS) -> tuple[int, int]:
    """(timed, warm-up) launches of one measurement of a call this long, the rule SDPA's
    measurement follows (median_us_per_call): about measure_ms of timed launches, at most
    `runs`, at least one; warm-up launches up to `warm_up` (at least two) while under
    WARM_UP_MS."""
    us = max(us_per_call, 1e-3)
    timed = max(1, min(runs, int(measure_ms * 1e3 / us)))
    warm = max(2, min(max(warm_up, 2), int(WARM_UP_MS * 1e3 / us) + 1))
    return timed, warm


@dataclass
class Timing:
    us: float          # per call; NaN when not measured
    note: str = ""     # why not measured, or what was done differently
    kernel: str = ""   # the kernel fmha.exe picked


Timer = Callable[[Problem, str], Timing]  # (problem, dtype) -> Timing


# ---------------------------------------------------------------------------------------------
# Ours: bin/fmha.exe

def median_of_runs(measure: Callable[[], tuple[dict | None, str]], repeats: int) -> tuple[dict | None, str]:
    """The run with the median "us" of `repeats` calls of `measure` (fmha.exe's parsed fields,
    or None and why); the first failure ends it."""
    runs = []
    for _ in range(max(1, repeats)):
        fields, why = measure()
        if fields is None:
            return None, why
        runs.append(fields)
    runs.sort(key=lambda fields: float(fields["us"]))
    return runs[(len(runs) - 1) // 2], ""


def fmha_timer(exe: Path, extra: list[str], runs: int, warm_up: int, deadline: float | None = None,
               repeats: int = 1, measure_ms: float = MEASURE_MS, cool_ms: float = COOL_MS) -> Timer:
    def run(p: Problem, dtype: str, timed: int, warm: int) -> tuple[dict | None, str]:
        args = [*p.fmha_args(), *DTYPES[dtype].flag.split(), *extra, "-skip-checks", "-v", "0",
                "-runs", str(timed), "-warm-up-runs", str(warm)]
        timeout = FMHA_TIMEOUT_S if deadline is None else \
            max(MIN_FMHA_TIMEOUT_S, min(FMHA_TIMEOUT_S, deadline - time.monotonic()))
        try:
            proc = driver.run_fmha(exe, args, timeout=timeout)
        except subprocess.TimeoutExpired:
            return None, f"ours: no result in {timeout:.0f} s"
        if proc.returncode != 0:
            why = (proc.stderr.strip() or proc.stdout.strip()).splitlines()
            return None, f"ours: exit {proc.returncode}: {why[-1] if why else ''}"[:200]
        try:
            return driver.parse_output(proc.stdout), ""
        except AssertionError as error:
            return None, f"ours: unparsed output ({str(error).splitlines()[0]})"[:200]

    def time_ours(p: Problem, dtype: str) -> Timing:
        timed, warm = runs, warm_up
        if needs_probe(p, dtype, runs, measure_ms):  # may be long: SDPA's burst for its length
            fields, why = run(p, dtype, 1, 1)
            if fields is None:
                return Timing(NAN, why)
            timed, warm = burst(float(fields["us"]), runs, warm_up, measure_ms)
        def measured_run():
            time.sleep(cool_ms / 1e3)  # from an idle GPU, as the torch sides' bursts (COOL_MS)
            return run(p, dtype, timed, warm)

        fields, why = median_of_runs(measured_run, repeats)
        if fields is None:
            return Timing(NAN, why)
        us, reported = float(fields["us"]), float(fields["tflops"])
        ours = p.flop() / us / 1e6
        note = "" if abs(reported - ours) <= 0.01 * ours + 0.01 else \
            f"ours: fmha.exe reports {reported:.2f} TFLOP/s, Problem.flop() gives {ours:.2f}"
        return Timing(us, note, fields["kernel"])

    return time_ours


# ---------------------------------------------------------------------------------------------
# PyTorch SDPA

def median_us_per_call(torch, launch: Callable[[int], None], max_launches: int, repeats: int,
                       warm_up: int, measure_ms: float = MEASURE_MS, cool_ms: float = COOL_MS) -> float:
    """Median over `repeats` measurements of back-to-back launches, CUDA events around each,
    each after cool_ms of an idle GPU (COOL_MS) and then warm-up launches, as a fresh fmha.exe
    run has before its timed ones."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begun = time.perf_counter()
    for i in range(max(warm_up, 2)):  # the first launch pays for handles and plans
        launch(i)
        if i >= 1 and (time.perf_counter() - begun) * 1e3 > WARM_UP_MS:
            break
    torch.cuda.synchronize()
    start.record()
    launch(0)
    end.record()
    end.synchronize()
    launches, warm = burst(start.elapsed_time(end) * 1e3, max_launches, warm_up, measure_ms)
    times = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        if cool_ms > 0:
            time.sleep(cool_ms / 1e3)
            for i in range(warm):  # the clocks back up: without these, short calls read slow (§103)
                launch(i)
        torch.cuda._sleep(SPIN_CYCLES)  # the launches below are all queued before `start` fires
        start.record()
        for i in range(launches):
            launch(i)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / launches)
    return statistics.median(times)


# SDPA's refusal warns "<backend> kernel not used because:", then that backend's reasons, for
# every fused backend in turn; these prefixes (lower case) tell whose section a line opens.
WARNING_SECTIONS = {"efficient": "memory efficient", "flash": "flash attention", "cudnn": "cudnn attention"}


def refusal(who: str, error: Exception, caught: list) -> str:
    """Why SDPA refused `who`: the reasons it warned under that backend's heading (the
    exception itself only says there was no kernel)."""
    section, reasons = None, []
    for w in caught:
        text = " ".join(str(w.message).split(" (Triggered internally")[0].split())
        if text.endswith("not used because:"):
            section = next((k for k, prefix in WARNING_SECTIONS.items() if text.lower().startswith(prefix)), None)
        elif section == who and text not in reasons:
            reasons.append(text)
    if not reasons:
        lines = str(error).strip().splitlines()
        reasons = [lines[0] if lines else type(error).__name__]
    return " / ".join(reasons)[:240]


Measure = Callable[[Callable[[int], None]], float]  # launch(i) -> µs per call


def burst_measure(torch, runs: int, repeats: int, warm_up: int, measure_ms: float = MEASURE_MS,
                  cool_ms: float = COOL_MS) -> Measure:
    return lambda launch: median_us_per_call(torch, launch, runs, repeats, warm_up, measure_ms, cool_ms)


def sdpa_timer(torch, who: str, runs: int, repeats: int, warm_up: int, measure_ms: float = MEASURE_MS,
               measure: Measure | None = None, cool_ms: float = COOL_MS) -> Timer:
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = getattr(SDPBackend, BACKENDS[who])
    measure = measure or burst_measure(torch, runs, repeats, warm_up, measure_ms, cool_ms)

    def attempt(sets, **kw) -> tuple[float, str]:
        def launch(i):
            F.scaled_dot_product_attention(*sets[i % len(sets)], **kw)

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                with sdpa_kernel([backend]):
                    return measure(launch), ""
            except torch.cuda.OutOfMemoryError:
                return NAN, "out of memory"
            except RuntimeError as error:  # refused shape, dtype or GPU; a failed launch
                return NAN, refusal(who, error, caught)

    def time_sdpa(p: Problem, dtype: str) -> Timing:
        if p.variant:
            return Timing(NAN, f"{who}: SDPA has no sliding window, softcapping or paged KV cache")
        if DTYPES[dtype].bytes == 1:
            return Timing(NAN, f"{who}: SDPA has no fp8 attention")
        tdtype = getattr(torch, DTYPES[dtype].torch)
        n_sets = 1 if p.bytes(DTYPES[dtype].bytes) > ROTATE_BELOW_BYTES else 3
        try:
            sets = [(torch.randn(p.b, p.h, p.s_q, p.d, device="cuda", dtype=tdtype),
                     torch.randn(p.b, p.h_kv, p.s, p.d, device="cuda", dtype=tdtype),
                     torch.randn(p.b, p.h_kv, p.s, p.d, device="cuda", dtype=tdtype)) for _ in range(n_sets)]
        except torch.cuda.OutOfMemoryError:
            return Timing(NAN, f"{who}: out of memory for the inputs")
        if p.bias or p.custom:  # ours: a bias per (batch, head); a bit mask per (batch, row), shared by the heads
            try:
                masks = [torch.randn(p.b, p.h, p.s_q, p.s, device="cuda", dtype=tdtype) if p.bias
                         else torch.rand(p.b, 1, p.s_q, p.s, device="cuda") < 0.5 for _ in sets]
            except torch.cuda.OutOfMemoryError:
                return Timing(NAN, f"{who}: out of memory for the attn_mask")
            sets = [(q, k, v, m) for (q, k, v), m in zip(sets, masks)]
            us, why = attempt(sets, enable_gqa=p.h_kv != p.h)
            return Timing(us, f"{who}: {why}" if why else "")
        if p.h_kv == p.h:
            us, why = attempt(sets, is_causal=p.causal)
            return Timing(us, f"{who}: {why}" if why else "")
        us, why = attempt(sets, is_causal=p.causal, enable_gqa=True)
        if not math.isnan(us):
            return Timing(us)
        group = p.h // p.h_kv
        try:
            expanded = [(q, k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)) for q, k, v in sets]
        except torch.cuda.OutOfMemoryError:
            return Timing(NAN, f"{who}: {why}; out of memory expanding K/V to {p.h} heads")
        del sets
        us, why_expanded = attempt(expanded, is_causal=p.causal)
        if math.isnan(us):
            also = "the same" if why_expanded == why else why_expanded
            return Timing(NAN, f"{who}: {why}; with K/V expanded: {also}")
        return Timing(us, f"{who}: K/V expanded to {p.h} heads (enable_gqa refused: {why})")

    return time_sdpa


def fa3_timer(torch, fa3, why_not: str, runs: int, repeats: int, warm_up: int, measure_ms: float = MEASURE_MS,
              measure: Measure | None = None, cool_ms: float = COOL_MS) -> Timer:
    """FlashAttention-3's forward (fa3_fwd_interface, None: not installed, `why_not` says why),
    timed as SDPA is; fp8 (e4m3) inputs with unit descales."""
    measure = measure or burst_measure(torch, runs, repeats, warm_up, measure_ms, cool_ms)

    def time_fa3(p: Problem, dtype: str) -> Timing:
        if fa3 is None:
            return Timing(NAN, f"fa3: {why_not}")
        if p.bias or p.custom:
            return Timing(NAN, "fa3: no bias or custom mask")
        if p.paged:
            return Timing(NAN, "fa3: its paged cache is not timed here (the dense row is the comparison)")
        fp8 = DTYPES[dtype].bytes == 1
        make = getattr(torch, "bfloat16" if fp8 else DTYPES[dtype].torch)
        n_sets = 1 if p.bytes(DTYPES[dtype].bytes) > ROTATE_BELOW_BYTES else 3
        try:
            sets = []
            for _ in range(n_sets):
                q = torch.randn(p.b, p.s_q, p.h, p.d, device="cuda", dtype=make)
                k, v = (torch.randn(p.b, p.s, p.h_kv, p.d, device="cuda", dtype=make) for _ in range(2))
                sets.append(tuple(t.to(torch.float8_e4m3fn) for t in (q, k, v)) if fp8 else (q, k, v))
        except torch.cuda.OutOfMemoryError:
            return Timing(NAN, "fa3: out of memory for the inputs")
        kw = {"causal": p.causal}
        if p.window:
            kw["window_size"] = (p.window - 1, 0)  # ours: W keys up to the row's own
        if p.softcap:
            kw["softcap"] = p.softcap
        if fp8:
            ones = torch.ones(p.b, p.h_kv, device="cuda", dtype=torch.float32)
            kw.update(q_descale=ones, k_descale=ones, v_descale=ones)
        if p.s_q == 1 and not p.causal:  # decode: FA3's kvcache path chooses its splits
            kw.pop("causal")

            def launch(i):
                q, k, v = sets[i % len(sets)]
                fa3.flash_attn_with_kvcache(q, k, v, num_splits=0, **kw)
        else:
            def launch(i):
                fa3.flash_attn_func(*sets[i % len(sets)], **kw)
        try:
            return Timing(measure(launch))
        except torch.cuda.OutOfMemoryError:
            return Timing(NAN, "fa3: out of memory")
        except (RuntimeError, TypeError, ValueError) as error:  # a refused head size, dtype or GPU
            lines = str(error).strip().splitlines()
            return Timing(NAN, f"fa3: {lines[0] if lines else type(error).__name__}"[:200])

    return time_fa3


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
