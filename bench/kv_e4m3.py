#!/usr/bin/env python3
"""Decode over an e4m3 KV cache against the same decode over a bf16 cache (issue #32, item 4):
fmha.exe on both, timed alike (its Elapsed: CUDA events around back-to-back launches, L2-cold
input copies), beside a device-to-device copy measured in the same run. Per problem: each
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
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench import fa3 as fa3_wheel  # noqa: E402
from bench.run import COOL_MS, copy_bandwidth, fa3_timer  # noqa: E402
from bench.suites import Problem  # noqa: E402
from tests.gpu import driver  # noqa: E402  (fmha.exe's output parser)

HEADS, KV_HEADS = 32, 8
# (d, b, s_kv): the bar's region (b >= 8, s_kv >= 16k) at d = 64 and 128 whole, at d = 32 and
# 256 its corners; then two problems outside it (one sequence, a short cache).
PROBLEMS = ([(d, b, s) for d in (64, 128) for b in (8, 16, 64) for s in (16384, 32768, 65536)]
            + [(d, b, s) for d in (32, 256) for b in (8, 16) for s in (16384, 65536)]
            + [(128, 1, 65536), (128, 8, 4096)])
RUNS, WARM_UP = 20, 10


def time_one(exe: Path, d: int, b: int, s: int, kv8: bool) -> dict:
    args = ["-bf16", "-separate-q-k-v", "-d", str(d), "-b", str(b), "-h", str(HEADS), "-gqa", str(KV_HEADS),
            "-s", str(s), "-s-q", "1", "-skip-checks", "-v", "0", "-runs", str(RUNS), "-warm-up-runs", str(WARM_UP),
            *(["-kv-e4m3"] if kv8 else [])]
    time.sleep(COOL_MS / 1e3)  # from an idle GPU, as fa3_timer's bursts (bench/NOTES.md §103)
    proc = driver.run_fmha(exe, args, timeout=300)
    if proc.returncode != 0:
        raise SystemExit(f"fmha.exe {' '.join(args)}: exit {proc.returncode}: {proc.stderr.strip()}")
    return driver.parse_output(proc.stdout)


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
    for d, b, s in PROBLEMS:
        wide, narrow = time_one(args.exe, d, b, s, False), time_one(args.exe, d, b, s, True)
        speedup = float(wide["us"]) / float(narrow["us"])
        p = Problem(b=b, h=HEADS, h_kv=KV_HEADS, s_q=1, s=s, d=d, causal=False)
        fa3_bf16, fa3_e4m3 = time_fa3(p, "bf16"), time_fa3(p, "e4m3")
        lines.append(f"| {d} | {b} | {s} | {float(wide['us']):.1f} | {float(wide['gbs']):.0f} | "
                     f"{float(narrow['us']):.1f} | {float(narrow['gbs']):.0f} | {speedup:.2f} | "
                     f"{float(narrow['gbs']) / copy:.2f} | {fa3_bf16.us:.1f} | {fa3_e4m3.us:.1f} |")
        print(lines[-1], flush=True)
    text = "\n".join(lines) + "\n"
    if args.out:
        args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
