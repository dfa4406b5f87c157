#!/usr/bin/env python3
"""FP8 (e4m3) forward accuracy of ours (the package, lib/libfmha.so) and FlashAttention-3's
(the `fa3_fwd` wheel) on the same inputs (issue #32's accuracy table).

    python3 bench/fp8_accuracy.py [--out DIR]

Inputs: q, k, v drawn in float32 (normal, or normal with 1 % of the head channels, at least
one, scaled by 16: outlier channels), quantised per (batch, KV head) to e4m3 at
amax / 448 (FA3's q/k/v_descale carry the scales back). Each side runs the same e4m3 tensors
and descales. Errors, relative to the reference's RMS, of O against float64 attention:
"kernel" on the dequantised inputs (what the kernel itself adds: P in e4m3, the QGMMA's
sums), "end to end" on the float32 inputs (input quantisation too). Writes
<out>/fp8_accuracy_<gpu>.md and prints it.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "python"))

from bench import fa3 as fa3_wheel  # noqa: E402
from bench.perf_baseline import gpu_slug  # noqa: E402

E4M3_MAX = 448.0
SHAPES = [  # (b, h, h_kv, s, d)
    (2, 8, 8, 1024, 64),
    (2, 8, 2, 1024, 128),
    (1, 8, 8, 4096, 128),
    (2, 4, 4, 1024, 256),
    # past 1024 keys, where the wide tiles run (d = 64 on 256 keys, d = 256 on 128: bench/NOTES.md §86-§91)
    (1, 8, 8, 4096, 64),
    (1, 4, 4, 4096, 256),
]


def inputs(torch, b, h, h_kv, s, d, outliers, gen):
    def draw(heads):
        x = torch.randn(b, s, heads, d, generator=gen, device="cuda")
        if outliers:
            n = max(1, round(0.01 * d))
            channels = torch.randperm(d, generator=gen, device="cuda")[:n]
            x[..., channels] *= 16.0
        return x
    return draw(h), draw(h_kv), draw(h_kv)


def quantise(torch, x, group):
    """x [b, s, heads, d] float32 -> (e4m3 tensor, descale [b, heads // group] float32):
    one scale per (batch, KV head), the query heads of a group sharing their KV head's."""
    b, s, heads, d = x.shape
    amax = x.abs().reshape(b, s, heads // group, group, d).amax(dim=(1, 3, 4)).clamp_min(1e-12)
    scale = amax / E4M3_MAX
    per_head = scale.repeat_interleave(group, dim=1)[:, None, :, None]
    return (x / per_head).to(torch.float8_e4m3fn), scale.float().contiguous()


def attention_fp64(torch, q, k, v, causal):
    """[b, s, h, d] float64, K/V heads repeated to q's; bottom-right causal (s_q == s here)."""
    group = q.shape[2] // k.shape[2]
    k, v = k.repeat_interleave(group, 2), v.repeat_interleave(group, 2)
    scores = torch.einsum("bihd,bjhd->bhij", q, k) / math.sqrt(q.shape[-1])
    if causal:
        s = q.shape[1]
        scores = scores.masked_fill(torch.ones(s, s, dtype=torch.bool, device=q.device).triu(1), -math.inf)
    return torch.einsum("bhij,bjhd->bihd", torch.softmax(scores, -1), v)


def errors(out, want):
    diff = out.double() - want
    norm = want.pow(2).mean().sqrt().item()
    return diff.abs().max().item() / norm, diff.pow(2).mean().sqrt().item() / norm


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    args = parser.parse_args(argv)
    import torch
    import fmha
    fa3, why = fa3_wheel.load()
    gen = torch.Generator(device="cuda").manual_seed(32)
    rows = []
    for b, h, h_kv, s, d in SHAPES:
        for causal in (False, True):
            for outliers in (False, True):
                q, k, v = inputs(torch, b, h, h_kv, s, d, outliers, gen)
                (q8, qd), (k8, kd), (v8, vd) = (quantise(torch, t, g) for t, g in ((q, h // h_kv), (k, 1), (v, 1)))
                deq = [t8.double() * sc.double().repeat_interleave(t8.shape[2] // sc.shape[1], 1)[:, None, :, None]
                       for t8, sc in ((q8, qd), (k8, kd), (v8, vd))]
                want_kernel = attention_fp64(torch, *deq, causal)
                want_e2e = attention_fp64(torch, q.double(), k.double(), v.double(), causal)
                kw = dict(causal=causal, q_descale=qd, k_descale=kd, v_descale=vd)
                sides = {"ours": lambda: fmha.flash_attn_func(q8, k8, v8, **kw)}
                if fa3 is not None:
                    sides["fa3"] = lambda: fa3.flash_attn_func(q8, k8, v8, **kw)
                found = {}
                for name, call in sides.items():
                    try:
                        out = call()
                        out = out[0] if isinstance(out, tuple) else out
                        found[name] = errors(out, want_kernel) + errors(out, want_e2e)
                    except Exception as error:  # a side that refuses the shape: a dash and why
                        found[name] = str(error).splitlines()[0][:80]
                rows.append(((b, h, h_kv, s, d, causal, outliers), found))
    gpu = torch.cuda.get_device_name()
    lines = [f"### FP8 (e4m3) forward accuracy: ours and FA3 on the same inputs ({gpu}, "
             f"torch {torch.__version__}{'' if fa3 else '; ' + why})", "",
             "Errors relative to the reference's RMS. kernel: against float64 attention on the dequantised "
             "e4m3 inputs; end to end: against float64 attention on the float32 inputs (quantisation "
             "per (batch, KV head) at amax / 448 included). Outliers: 1 % of the channels (at least one) x 16.", "",
             "| b | h/h_kv | s | d | causal | outliers | side | kernel max | kernel RMS | end-to-end max | end-to-end RMS |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for (b, h, h_kv, s, d, causal, outliers), found in rows:
        for side, e in found.items():
            cells = [f"{x:.4f}" for x in e] if isinstance(e, tuple) else ["—"] * 4
            lines.append(f"| {b} | {h}/{h_kv} | {s} | {d} | {'yes' if causal else 'no'} | "
                         f"{'yes' if outliers else 'no'} | {side} | " + " | ".join(cells) + " |")
            if not isinstance(e, tuple):
                lines.append(f"|  |  |  |  |  |  | {side}: {e} |  |  |  |  |")
    text = "\n".join(lines) + "\n"
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"fp8_accuracy_{gpu_slug(gpu)}.md"
    path.write_text(text)
    print(text)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
