#!/usr/bin/env python3
"""The backward pass at head sizes off the FA3 grid (d = 32, 96, 160, 192, MLA's 192 / 128): the fmha
package's autograd beside SDPA's cuDNN and flash backends, timed as bench/bwd.py times them (its
time_backward), b 8 s 2k and b 2 s 8k, 16 heads, causal and not. TFLOP/s: 2.5x the forward's
2 b h s^2 (d + dv) (halved when causal). Prints a markdown table (a side that refuses a problem:
"-"; SDPA-flash has no MLA).

    python3 bench/bwd_heads.py [bf16|fp16]
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(ROOT))
from bench.bwd import time_backward  # noqa: E402

HEADS = ((32, 32), (96, 96), (160, 160), (192, 192), (192, 128))  # (d, dv)
SHAPES = ((8, 2048), (2, 8192))  # (b, s)
QUERY_HEADS = 16


def sides(torch, b: int, s: int, d: int, dv: int, causal: bool, dtype) -> dict:
    """{side: (forward, [q, k, v])}, fresh leaves requiring grad in each side's fastest layout."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    import fmha
    gen = torch.Generator(device="cuda").manual_seed(0)
    h = QUERY_HEADS

    def leaves(qk_shape, v_shape):
        return [torch.randn(shape, device="cuda", dtype=dtype, generator=gen).requires_grad_()
                for shape in (qk_shape, qk_shape, v_shape)]

    out = {"fmha": (lambda q, k, v: fmha.flash_attn_func(q, k, v, causal=causal), leaves((b, s, h, d), (b, s, h, dv)))}
    for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)):
        def forward(q, k, v, backend=backend):
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        out[name] = (forward, leaves((b, h, s, d), (b, h, s, dv)))
    return out


def main(argv=None) -> int:
    import torch
    argv = sys.argv[1:] if argv is None else argv
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[argv[0] if argv else "bf16"]
    print(f"{torch.cuda.get_device_name()}: backward TFLOP/s (2.5x forward), {dtype}")
    print("| problem | fmha | cudnn | flash | fmha / cudnn |")
    print("|---|---|---|---|---|")
    cell = lambda x: f"{x:.1f}" if x else "-"  # noqa: E731
    for d, dv in HEADS:
        for b, s in SHAPES:
            for causal in (False, True):
                flop = 2.5 * 2 * b * QUERY_HEADS * s * s * (d + dv) / (2 if causal else 1)
                row = {}
                for name, (forward, inputs) in sides(torch, b, s, d, dv, causal, dtype).items():
                    try:
                        row[name] = flop / (time_backward(torch, forward, inputs) * 1e-3) / 1e12
                    except (RuntimeError, NotImplementedError, ValueError):
                        row[name] = None
                    torch.cuda.empty_cache()
                ratio = row["fmha"] / row["cudnn"] if row["fmha"] and row["cudnn"] else None
                label = f"d={d} dv={dv} b={b} h={QUERY_HEADS} s={s}{' causal' if causal else ''}"
                print(f"| {label} | {cell(row['fmha'])} | {cell(row['cudnn'])} | {cell(row['flash'])} | "
                      f"{f'{ratio:.2f}' if ratio else '-'} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
