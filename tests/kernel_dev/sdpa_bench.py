"""PyTorch SDPA (FlashAttention-2 backend) on the kernel_dev benchmark shapes, for comparison.

16k tokens (b = 16384 / s), hidden 2048 (h = 2048 / d), FLOP = 4 b h s^2 d (halved when causal).
Usage: python3 tests/kernel_dev/sdpa_bench.py
"""
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.functional import scaled_dot_product_attention


def bench(dtype, d, s, causal, trials=5, iters=10):
    b, h = 16384 // s, 2048 // d
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=dtype) for _ in range(3))
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        for _ in range(3):
            scaled_dot_product_attention(q, k, v, is_causal=causal)
        torch.cuda.synchronize()
        times = []
        for _ in range(trials):
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(iters):
                scaled_dot_product_attention(q, k, v, is_causal=causal)
            stop.record()
            stop.synchronize()
            times.append(start.elapsed_time(stop) / iters)
    ms = sorted(times)[trials // 2]
    flop = 4.0 * b * h * s * s * d * (0.5 if causal else 1.0)
    return flop / (ms * 1e-3) / 1e12


def main():
    print(f"{'sdpa flash':34s} {'s2k':>14s} {'s2k causal':>14s} {'s8k':>14s} {'s8k causal':>14s}"
          f"   (TFLOP/s, {torch.cuda.get_device_name()})")
    for dtype, tag in ((torch.float16, "fp16"), (torch.bfloat16, "bf16")):
        for d in (64, 128, 256):
            vals = [bench(dtype, d, s, c) for s in (2048, 8192) for c in (False, True)]
            print(f"{'sdpa_' + tag + '_d' + str(d):34s} " + " ".join(f"{x:14.1f}" for x in vals))


if __name__ == "__main__":
    main()
