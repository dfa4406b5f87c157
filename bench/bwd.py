#!/usr/bin/env python3
"""The backward pass (issue #33): the fmha package's autograd beside SDPA's cuDNN and flash
backends, timed the same way in one run on the GPU, on FlashAttention-3's grid.

    python3 bench/bwd.py [--dtype bf16 fp16] [--only '*d=128*'] [--deterministic] [--dropout P] [--forward]
                         [--sides fmha cudnn flash] [--out DIR]

Each side runs its own forward once per problem (the graph kept), then the backward alone,
torch.autograd.grad(out, (q, k, v), dout, retain_graph=True), timed as bench/run.py times
SDPA (median_us_per_call: back-to-back bursts sized to ~25 ms between two CUDA events, each
after 0.5 s of an idle GPU, the median of 5). TFLOP/s counts 2.5x the forward's FLOPs
(FlashAttention's convention; bench/suites.py Problem.flop). Inputs: the layout each side is fastest in
([b, s, h, d] for ours, [b, h, s, d] for SDPA). A side that refuses a problem gets an empty
cell with the reason in the CSV. --dropout P: every side's forward
drops with probability P (their backward then regenerates their own mask); bwd_<gpu>_dropout.csv.
--forward: the forward call alone instead (no autograd graph; TFLOP/s of the forward's FLOPs),
fwd_<gpu>[_dropout].csv: the forward of a training step with dropout, which bench/run.py has not.
--sides: the sides to time (default all; `--sides fmha` times ours alone, for an A/B of two
builds of lib/libfmha.so).
"""

from __future__ import annotations

import argparse
import csv
import fnmatch
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(ROOT))
from bench.timing import median_us_per_call  # noqa: E402
from bench.suites import SUITES, Problem  # noqa: E402

MAX_CALLS = 500
REPEATS = 5
WARM_UP = 3
SIDES = ("fmha", "cudnn", "flash")


def bwd_flop(p: Problem) -> float:
    """FlashAttention's count for a backward pass: 2.5 forward passes."""
    return 2.5 * p.flop()


def problems(only: list[str]) -> list[Problem]:
    """The FA3 grid, filtered by globs on the problems' labels."""
    grid = SUITES["fa3"].problems
    return [p for p in grid if not only or any(fnmatch.fnmatchcase(p.label(), g) for g in only)]


def make_side(torch, name: str, p: Problem, dtype, deterministic: bool, dropout: float = 0.0):
    """(forward, inputs) of a side: forward(q, k, v) -> out, on fresh leaves requiring grad."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    if name == "fmha":
        import fmha
        shape = (p.b, p.s, p.h, p.d)

        def forward(q, k, v):
            return fmha.flash_attn_func(q, k, v, causal=p.causal, deterministic=deterministic, dropout_p=dropout)
    else:
        shape = (p.b, p.h, p.s, p.d)
        backend = SDPBackend.CUDNN_ATTENTION if name == "cudnn" else SDPBackend.FLASH_ATTENTION

        def forward(q, k, v):
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(q, k, v, is_causal=p.causal, dropout_p=dropout)
    gen = torch.Generator(device="cuda").manual_seed(0)
    inputs = [torch.randn(shape, device="cuda", dtype=dtype, generator=gen).requires_grad_() for _ in range(3)]
    return forward, inputs


def time_backward(torch, forward, inputs) -> float:
    """Median ms of one backward call."""
    q, k, v = inputs
    out = forward(q, k, v)
    dout = torch.randn_like(out)

    def call(_):
        torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)

    return median_us_per_call(torch, call, MAX_CALLS, REPEATS, WARM_UP) / 1e3


def time_forward(torch, forward, inputs) -> float:
    """Median ms of one forward call, without an autograd graph."""
    q, k, v = (t.detach() for t in inputs)

    def call(_):
        forward(q, k, v)

    with torch.no_grad():
        return median_us_per_call(torch, call, MAX_CALLS, REPEATS, WARM_UP) / 1e3


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dtype", nargs="+", default=["bf16"], choices=["bf16", "fp16"])
    parser.add_argument("--only", nargs="*", default=[], help="globs on problem labels, e.g. '*d=128*'")
    parser.add_argument("--deterministic", action="store_true", help="ours with deterministic=True too")
    parser.add_argument("--dropout", type=float, default=0.0, help="dropout probability of every side")
    parser.add_argument("--forward", action="store_true", help="time the forward call instead of the backward")
    parser.add_argument("--sides", nargs="+", default=list(SIDES), choices=SIDES, help="sides to time")
    parser.add_argument("--out", type=Path, default=None, help="write bwd_<gpu>.csv here")
    args = parser.parse_args(argv)

    import torch
    gpu = torch.cuda.get_device_name()
    sides = tuple(s for s in SIDES if s in args.sides) + (("fmha-det",) if args.deterministic else ())
    rows = []
    what = "forward TFLOP/s" if args.forward else "backward TFLOP/s (2.5x forward)"
    print(f"{gpu}, torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}: {what}"
          + (f", dropout {args.dropout}" if args.dropout else ""))
    print("| dtype | problem | " + " | ".join(sides) + " | fmha / cudnn |")
    print("|---|---|" + "---|" * (len(sides) + 1))
    for dtype_name in args.dtype:
        dtype = getattr(torch, {"bf16": "bfloat16", "fp16": "float16"}[dtype_name])
        for p in problems(args.only):
            row = {"gpu": gpu, "dtype": dtype_name, "problem": p.label()}
            for side in sides:
                try:
                    forward, inputs = make_side(torch, side.split("-")[0], p, dtype, side == "fmha-det", args.dropout)
                    ms = (time_forward if args.forward else time_backward)(torch, forward, inputs)
                    row[side] = (p.flop() if args.forward else bwd_flop(p)) / (ms * 1e-3) / 1e12
                    row[f"{side}_ms"] = ms
                except (RuntimeError, NotImplementedError, ValueError) as e:
                    row[side] = None
                    row[f"{side}_why"] = str(e).splitlines()[0][:200]
                torch.cuda.empty_cache()
            rows.append(row)
            ratio = row["fmha"] / row["cudnn"] if row.get("fmha") and row.get("cudnn") else None
            cells = [f"{row[s]:.1f}" if row.get(s) else "-" for s in sides]
            print(f"| {dtype_name} | {p.label()} | " + " | ".join(cells) + f" | {f'{ratio:.2f}' if ratio else '-'} |",
                  flush=True)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        kind = "fwd" if args.forward else "bwd"
        path = args.out / f"{kind}_{gpu.lower().replace(' ', '-')}{'_dropout' if args.dropout else ''}.csv"
        keys = sorted({k for r in rows for k in r}, key=lambda k: (k not in ("gpu", "dtype", "problem"), k))
        with path.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=keys)
            writer.writeheader()
            writer.writerows(rows)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
