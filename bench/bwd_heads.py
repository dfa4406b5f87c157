"""The backward pass at head sizes off the FA3 grid (d = 32, 96, 160, 192, MLA's 192 / 128): the fmha
package's autograd beside SDPA's cuDNN and flash backends, timed as bench/bwd.py times them (its
time_backward), b 8 s 2k and b 2 s 8k, 16 heads, causal and not. TFLOP/s: 2.5x the forward's
2 b h s^2 (d + dv) (halved when causal).

    python3 bench/bwd_heads.py [bf16|fp16]
"""
import sys
from pathlib import Path
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python")); sys.path.insert(0, str(ROOT))
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
import fmha
from bench.bwd import time_backward

def sides(b, h, s, d, dv, causal, dtype, det=False):
    out = {}
    gen = torch.Generator(device="cuda").manual_seed(0)
    def mk(shape_qk, shape_v):
        return [torch.randn(sh, device="cuda", dtype=dtype, generator=gen).requires_grad_() for sh in (shape_qk, shape_qk, shape_v)]
    out["fmha"] = (lambda q, k, v: fmha.flash_attn_func(q, k, v, causal=causal, deterministic=det), mk((b, s, h, d), (b, s, h, dv)))
    for name, be in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)):
        def f(q, k, v, be=be):
            with sdpa_kernel(be):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        out[name] = (f, mk((b, h, s, d), (b, h, s, dv)))
    return out

dt = {"bf16": torch.bfloat16, "fp16": torch.float16}[sys.argv[1] if len(sys.argv) > 1 else "bf16"]
print(f"{torch.cuda.get_device_name()}: backward TFLOP/s (2.5x forward), {dt}")
print("| problem | fmha | cudnn | flash | fmha / cudnn |")
print("|---|---|---|---|---|")
for d, dv in ((32, 32), (96, 96), (160, 160), (192, 192), (192, 128)):
    for s, b in ((2048, 8), (8192, 2)):
        for causal in (False, True):
            h = 16
            flop = 2.5 * 2 * b * h * s * s * (d + dv) / (2 if causal else 1)
            row = {}
            for name, (fwd, inputs) in sides(b, h, s, d, dv, causal, dt).items():
                try:
                    row[name] = flop / (time_backward(torch, fwd, inputs) * 1e-3) / 1e12
                except (RuntimeError, NotImplementedError, ValueError) as e:
                    row[name] = None
                torch.cuda.empty_cache()
            r = row["fmha"] / row["cudnn"] if row.get("fmha") and row.get("cudnn") else None
            cell = lambda x: f"{x:.1f}" if x else "-"
            print(f"| d={d} dv={dv} b={b} h={h} s={s}{' causal' if causal else ''} | {cell(row['fmha'])} | {cell(row['cudnn'])} | {cell(row['flash'])} | {f'{r:.2f}' if r else '-'} |", flush=True)
