"""The timed problems of test_perf.py (-m perf): a few per kernel, and for each kernel without
one the reason, so that every kernel of the manifest is either timed or skipped saying why.

They assert a speed only against a stored baseline of the same GPU (--perf-baseline,
bench/perf_baseline.py); benchmarks against other libraries live in bench/run.py.
"""

from generator.rules import decode_is_mma
from generator.spec import KernelSpec

from .cases import CORE_HEAD_SIZES, CORE_MASKS, DEFAULT_HEADS, Case, Shape, heads_case
from .manifest import is_decode

# FlashAttention-3's grid at 16k tokens and hidden size 2048: for every prefill kernel of a
# core head size, each of its core masks at s in PERF_SEQ_LENS, b = 16k / s, h = 2048 / d.
PERF_TOKENS, PERF_HIDDEN, PERF_SEQ_LENS = 16384, 2048, (1024, 4096)
PERF_FLAGS = ["-skip-checks", "-v", "0", "-runs", "20", "-warm-up-runs", "10"]
# Decode kernels: one token per sequence against a 4k KV cache, b = 16, 32 query heads over as
# many KV heads as the kernel's tile holds: the warp path by its rows per warp (MHA, GQA 4,
# GQA 8), the mma path (16 rows a KV head, whatever its KV heads a CTA) at GQA 4.
PERF_DECODE = Shape(16, 4096, s_q=1)
PERF_DECODE_KV_WARP = {1: 32, 4: 8, 8: 4}  # rows per warp (block_m) -> KV heads
PERF_DECODE_KV_MMA = 8


def decode_kv_heads(kernel: dict) -> int | None:
    if decode_is_mma(KernelSpec.parse(kernel["name"], masks=tuple(kernel["masks"]))):
        return PERF_DECODE_KV_MMA
    return PERF_DECODE_KV_WARP.get(kernel["block_m"])


def kernel_cases(kernel: dict) -> tuple[list[Case], str]:
    """The timed problems of one kernel, or none and why."""
    d, dv = kernel["d"], kernel["dv"]
    if d not in CORE_HEAD_SIZES:
        return [], f"d={d}: the perf tier times head sizes {', '.join(map(str, CORE_HEAD_SIZES))}"
    if is_decode(kernel):
        h_kv = decode_kv_heads(kernel)
        if h_kv is None:
            return [], f"no KV-head count for a decode tile of {kernel['block_m']} rows (PERF_DECODE_KV_WARP)"
        return [heads_case(kernel, "padding", "separate_q_k_v", PERF_DECODE, h_kv, h=DEFAULT_HEADS)], ""
    if dv != d:
        return [], "dv != d: the perf problems are packed QKV, which needs dv == d"
    heads = max(1, round(PERF_HIDDEN / d))
    return [Case(kernel, mask, "packed_qkv", "mha", Shape(PERF_TOKENS // s, s), heads=heads)
            for s in PERF_SEQ_LENS for mask in kernel["masks"] if mask in CORE_MASKS], ""


def perf_cases(kernels: list[dict]) -> tuple[list[Case], dict[str, str]]:
    """Every kernel's timed problems (by name), and {name: why not} for the kernels without any."""
    cases, untimed = [], {}
    for kernel in sorted(kernels, key=lambda k: k["name"]):
        timed, why = kernel_cases(kernel)
        if not timed:
            untimed[kernel["name"]] = why or f"none of {kernel['masks']} is a core mask {CORE_MASKS}"
        cases += timed
    return cases, untimed
