#!/usr/bin/env python3
"""Decode over an e4m3 KV cache against the same decode over a bf16 cache (issue #32, item 4):
fmha.exe on both, timed as bench/run.py times ours (fmha_timer: each run from an idle GPU, a
burst of about MEASURE_MS, the median of three runs), beside a device-to-device copy measured in
the same run. Per problem: each
side's time and GB/s (the bytes really read and written: K and V at their element size), the
speed-up of the e4m3 cache and its share of the copy bandwidth. Where the `fa3_fwd` wheel is
installed, FlashAttention-3's decode beside them (`flash_attn_with_kvcache`, its own splits,
timed as bench/run.py times it): over the bf16 cache, and all-e4m3 (its FP8 path takes e4m3
queries too: a neighbouring problem, not the same one). Prints a markdown table.

    python3 bench/kv_e4m3.py [--exe bin/fmha.exe] [--out FILE.md]

bf16 queries, one query row a sequence (s_q = 1), 32 query heads over 8 KV heads.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench import fa3 as fa3_wheel  # noqa: E402
from bench.run import Timing, copy_bandwidth, fa3_timer, fmha_timer  # noqa: E402
from bench.suites import Problem  # noqa: E402

HEADS, KV_HEADS = 32, 8
# (d, b, s_kv): the bar's region (b >= 8, s_kv >= 16k) at d = 64 and 128 whole, at d = 32 and
# 256 its corners; then two problems outside it (one sequence, a short cache).
PROBLEMS = ([(d, b, s) for d in (64, 128) for b in (8, 16, 64) for s in (16384, 32768, 65536)]
            + [(d, b, s) for d in (32, 256) for b in (8, 16) for s in (16384, 65536)]
            + [(128, 1, 65536), (128, 8, 4096)])
RUNS, WARM_UP = 20, 10


def problem(d: int, b: int, s: int) -> Problem:
    return Problem(b=b, h=HEADS, h_kv=KV_HEADS, s_q=1, s=s, d=d, causal=False)


def cache_bytes(p: Problem, kv8: bool) -> float:
    """The bytes a call moves: bf16 Q and O, K and V at their element size (Problem.bytes at 2
    bytes less half of K and V for the e4m3 cache)."""
    return p.bytes(2) - (2.0 * p.b * p.h_kv * p.s * p.d if kv8 else 0.0)


def cell(t: Timing, p: Problem, kv8: bool) -> str:
    """'us | GB/s' of ours, or the reason it has no time."""
    if math.isnan(t.us):
        return f"— ({t.note}) | —"
    return f"{t.us:.1f} | {cache_bytes(p, kv8) / t.us / 1e3:.0f}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--exe", type=Path, default=ROOT / "bin" / "fmha.exe")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    import torch
    copy = copy_bandwidth(torch)
    gpu = torch.cuda.get_device_name()
    fa3, why_not = fa3_wheel.load()
    time_fa3 = fa3_timer(torch, fa3, why_not, runs=RUNS, repeats=3, warm_up=WARM_UP)
    lines = [f"GPU: {gpu}; device-to-device copy {copy:.0f} GB/s (read + write); bf16 queries, h {HEADS}, "
             f"h_kv {KV_HEADS}, s_q 1" + ("" if fa3 else f"; {why_not}"), "",
             "| d | b | s_kv | bf16 cache us | GB/s | e4m3 cache us | GB/s | speed-up | e4m3 GB/s / copy "
             "| FA3 bf16 us | FA3 e4m3 (q too) us |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    ours = {kv8: fmha_timer(args.exe, ["-kv-e4m3"] if kv8 else [], RUNS, WARM_UP, repeats=3) for kv8 in (False, True)}
    for d, b, s in PROBLEMS:
        p = problem(d, b, s)
        wide, narrow = ours[False](p, "bf16"), ours[True](p, "bf16")
        fa3_bf16, fa3_e4m3 = time_fa3(p, "bf16"), time_fa3(p, "e4m3")
        lines.append(f"| {d} | {b} | {s} | {cell(wide, p, False)} | {cell(narrow, p, True)} | "
                     f"{wide.us / narrow.us:.2f} | {cache_bytes(p, True) / narrow.us / 1e3 / copy:.2f} | "
                     f"{fa3_bf16.us:.1f} | {fa3_e4m3.us:.1f} |")
        print(lines[-1], flush=True)
    text = "\n".join(lines) + "\n"
    if args.out:
        args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
