"""PyTorch SDPA, FlashAttention-2 and cuDNN backends, on the sm90_dev benchmark shapes.

16k tokens (b = 16384 / s), hidden 2048 (h = 2048 / d), FLOP = 4 b h s^2 d (halved when causal).
Run in the same device call as sm90_dev --bench so that the ratios are side by side.
Usage: python3 tests/kernel_dev/sdpa_bench_sm90.py
"""
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.functional import scaled_dot_product_attention

BACKENDS = (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION))


def bench(backend, dtype, d, s, causal, trials=7, iters=10):
    b, h = 16384 // s, 2048 // d
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=dtype) for _ in range(3))
    with sdpa_kernel(backend):
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
    return 4.0 * b * h * s * s * d * (0.5 if causal else 1.0) / (ms * 1e-3) / 1e12


def main():
    print(f"{'sdpa':34s} {'s2k':>14s} {'s2k causal':>14s} {'s8k':>14s} {'s8k causal':>14s}"
          f"   (TFLOP/s, {torch.cuda.get_device_name()})")
    for dtype, tag in ((torch.float16, "fp16"), (torch.bfloat16, "bf16")):
        for d in (64, 128, 256):
            for name, backend in BACKENDS:
                try:
                    vals = [bench(backend, dtype, d, s, c) for s in (2048, 8192) for c in (False, True)]
                    print(f"{name + '_' + tag + '_d' + str(d):34s} " + " ".join(f"{x:14.1f}" for x in vals))
                except RuntimeError as e:
                    print(f"{name + '_' + tag + '_d' + str(d):34s} unavailable: {str(e).splitlines()[0][:60]}")


if __name__ == "__main__":
    main()
