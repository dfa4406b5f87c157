"""How bench/ scripts time each side, the same way for all (bench/run.py's docstring has the
rules; bench/NOTES.md §24, §103): ours as fmha.exe runs (fmha_timer), SDPA's backends and
FA3's kernels as bursts of launches between CUDA events (sdpa_timer, fa3_timer,
median_us_per_call), each from an idle GPU, each about MEASURE_MS of launches."""

from __future__ import annotations

import math
import statistics
import subprocess
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from bench.suites import DTYPES, Problem
from tests.gpu import driver  # the one parser of fmha.exe's output (tests/gpu/contract.py)

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
