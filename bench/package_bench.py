#!/usr/bin/env python3
"""The fmha package beside FlashAttention-3 (the `fa3_fwd` wheel) and SDPA's cuDNN backend,
timed the same way for every side in one run on the GPU.

    python3 bench/package_bench.py [--suite fa3 decode tiny] [--out DIR] [--no-fa3] [--ncu]

Kernel time: a CUDA graph of n calls (n sized so a replay takes ~25 ms, as bench/run.py's
bursts), replayed 7 times, median per call: every side runs in the same kind of burst (a
20-launch burst runs at higher clocks than a sustained one, bench/NOTES.md §41). With --ncu,
the same calls again under Nsight Compute (bench/ncu.py: gpu__time_duration of every kernel a
call launches, summed, clocks and caches as in the graph run), beside the graph times, so the
two clocks can be compared side by side. Host cost: calls on a tiny problem while the GPU is
held busy (so the host never waits for it), wall time per call. Needs torch with CUDA and
lib/libfmha.so (`make`); FA3 is imported as ../shared/ANCHORS.md says (skipped where it is not
installed).
"""

from __future__ import annotations

import argparse
import csv
import math
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(ROOT))
import fmha  # noqa: E402
from bench import fa3 as fa3_wheel, ncu  # noqa: E402

BURST_MS = 25.0


def load_fa3():
    module, why = fa3_wheel.load()
    if module is None:
        print(f"{why}: its column is left out", file=sys.stderr)
    return module


def graph_time_us(fn) -> float:
    """Median µs per call over 7 replays of a CUDA graph of about BURST_MS of calls."""
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    torch.cuda.synchronize()
    n = max(1, min(500, int(BURST_MS * 1000 / max(start.elapsed_time(end) * 1000, 1.0))))
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm-up off the default stream, as capture wants
        fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(n):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(7):
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1000 / n)
    return statistics.median(times)


def host_us(fn, calls: int = 200, repeats: int = 9) -> float:
    """Median wall µs per call of `calls` calls while the GPU spins (~50 ms, longer than the
    loop), so the launch queue never fills and the host's own cost is what is timed."""
    for _ in range(100):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        torch.cuda._sleep(100_000_000)
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        times.append((t1 - t0) / calls * 1e6)
    return statistics.median(times)


def sides_prefill(b, h, s, d, causal, fa3):
    q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    qt, kt, vt = (t.transpose(1, 2).contiguous() for t in (q, k, v))  # SDPA's [b, h, s, d]

    def cudnn():
        with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.CUDNN_ATTENTION):
            return F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)

    sides = {"ours": lambda: fmha.flash_attn_func(q, k, v, causal=causal), "cudnn": cudnn}
    if fa3 is not None:
        sides["fa3"] = lambda: fa3.flash_attn_func(q, k, v, causal=causal)
    return sides


def sides_decode(b, h, h_kv, s_kv, d, fa3):
    q = torch.randn(b, 1, h, d, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(b, s_kv, h_kv, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    lens = torch.full((b,), s_kv, dtype=torch.int32, device="cuda")
    qt, kt, vt = (t.transpose(1, 2).contiguous() for t in (q, k, v))

    def cudnn():
        with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.CUDNN_ATTENTION):
            return F.scaled_dot_product_attention(qt, kt, vt, enable_gqa=h != h_kv)

    sides = {"ours": lambda: fmha.flash_attn_with_kvcache(q, k, v, cache_seqlens=lens), "cudnn": cudnn}
    if fa3 is not None:
        sides["fa3"] = lambda: fa3.flash_attn_with_kvcache(q, k, v, cache_seqlens=lens, num_splits=0)
    return sides


def problems(suites):
    if "fa3" in suites:
        for d in (64, 128, 256):
            for causal in (False, True):
                for s in (512, 1024, 2048, 4096, 8192, 16384):
                    h = 2048 // d
                    yield "fa3", f"b={16384 // s} h={h} s={s} d={d}{' causal' if causal else ''}", \
                        4 * (16384 // s) * h * s * s * d * (0.5 if causal else 1.0), \
                        lambda fa3, b=16384 // s, h=h, s=s, d=d, c=causal: sides_prefill(b, h, s, d, c, fa3)
    if "decode" in suites:
        for b in (1, 8, 64):
            for s in (4096, 16384, 65536):
                yield "decode", f"b={b} h=32/8 s_kv={s} d=128", 4 * b * 32 * s * 128, \
                    lambda fa3, b=b, s=s: sides_decode(b, 32, 8, s, 128, fa3)
    if "tiny" in suites:
        for h in (16, 32):
            yield "tiny", f"b=30720 h={h} s_kv=2 d=128", 4 * 30720 * h * 2 * 128, \
                lambda fa3, h=h: sides_decode(30720, h, h, 2, 128, fa3)


def ncu_child(suites, fa3) -> int:
    """Under ncu (bench/ncu.py): each (problem, side) as one marked range of NCU_CALLS calls."""
    for suite, label, _, make in problems(suites):
        for name, fn in make(fa3).items():
            try:
                ncu.profile_calls(f"{suite}|{label}|{name}", lambda i, fn=fn: fn())
            except Exception:  # a side that cannot run this problem: no range, no column
                continue
        torch.cuda.empty_cache()
    return 0


def host_costs(fa3) -> dict[str, dict[str, float]]:
    """Host µs per call of each function on a tiny problem, ours and FA3's."""
    q = torch.randn(1, 128, 8, 64, device="cuda", dtype=torch.bfloat16)
    flat = torch.randn(128, 8, 64, device="cuda", dtype=torch.bfloat16)
    cu = torch.tensor([0, 64, 128], dtype=torch.int32, device="cuda")
    qd = torch.randn(1, 1, 32, 128, device="cuda", dtype=torch.bfloat16)
    cache = torch.randn(1, 4096, 8, 128, device="cuda", dtype=torch.bfloat16)
    lens = torch.tensor([4096], dtype=torch.int32, device="cuda")
    sides = {"ours": fmha} if fa3 is None else {"ours": fmha, "fa3": fa3}
    calls = {
        "flash_attn_func b=1 s=128 h=8 d=64": lambda m: m.flash_attn_func(q, q, q),
        "flash_attn_varlen_func 2 x 64 tokens h=8 d=64": lambda m: m.flash_attn_varlen_func(flat, flat, flat, cu, cu,
                                                                                              64, 64),
        "flash_attn_with_kvcache b=1 h=32/8 d=128 4k, cache_seqlens tensor":
            lambda m: m.flash_attn_with_kvcache(qd, cache, cache, cache_seqlens=lens),
    }
    return {label: {name: host_us(lambda: call(m)) for name, m in sides.items()} for label, call in calls.items()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", nargs="+", default=["fa3", "decode", "tiny"], choices=["fa3", "decode", "tiny"])
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    parser.add_argument("--no-fa3", action="store_true")
    parser.add_argument("--ncu", action="store_true", help="also ncu's kernel durations of the same calls")
    parser.add_argument("--ncu-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    fa3 = None if args.no_fa3 else load_fa3()
    if args.ncu_child:
        return ncu_child(args.suite, fa3)
    gpu = torch.cuda.get_device_name()
    print(f"{gpu}; kernel time: CUDA graph of ~{BURST_MS:.0f} ms of calls, median of 7 replays, µs per call")
    rows = []
    for suite, label, flops, make in problems(args.suite):
        sides = make(fa3)
        row = {"suite": suite, "problem": label}
        for name, fn in sides.items():
            try:
                row[name] = graph_time_us(fn)
            except Exception as e:  # a side that cannot run this problem: recorded, not fatal
                print(f"  {label}: {name}: {type(e).__name__}: {str(e)[:120]}", file=sys.stderr)
                row[name] = math.nan
        del sides
        torch.cuda.empty_cache()
        ratios = " ".join(f"ours/{n} {row[n] / row['ours']:.3f}" for n in ("fa3", "cudnn") if n in row)
        print(f"{suite:6s} {label:32s} " + " ".join(f"{n} {row[n]:9.1f}" for n in ("ours", "fa3", "cudnn") if n in row)
              + f"   {ratios}   ours {flops / row['ours'] / 1e6:.0f} TFLOP/s")
        rows.append(row)
    if args.ncu:
        child = [sys.executable, str(Path(__file__).resolve()), "--ncu-child", "--suite", *args.suite]
        durations = ncu.profile(child + (["--no-fa3"] if args.no_fa3 else []), args.out / "package_ncu.csv")
        print("ncu gpu__time_duration per call (µs), and graph / ncu:")
        for row in rows:
            for name in ("ours", "fa3", "cudnn"):
                us = durations.get(f"{row['suite']}|{row['problem']}|{name}")
                if us is not None:
                    row[f"{name}_ncu"] = us
            print(f"{row['suite']:6s} {row['problem']:32s} " + " ".join(
                f"{n} {row[n + '_ncu']:9.1f} ({row[n] / row[n + '_ncu']:.3f})" for n in ("ours", "fa3", "cudnn")
                if n + "_ncu" in row))
    host = host_costs(fa3)
    for label, costs in host.items():
        print(f"host cost per call, {label} (µs): " + ", ".join(f"{n} {t:.1f}" for n, t in costs.items()))
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"package_{gpu.lower().replace(' ', '-')}.csv"
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["suite", "problem", "ours", "fa3", "cudnn", "ours_ncu", "fa3_ncu",
                                               "cudnn_ncu"])
        writer.writeheader()
        for row in rows:
            writer.writerow({k: (f"{v:.2f}" if isinstance(v, float) else v) for k, v in row.items()})
        for label, costs in host.items():
            writer.writerow({"suite": "host", "problem": f"{label} (µs a call)",
                             **{name: f"{t:.2f}" for name, t in costs.items()}})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
