"""The flash family (src/fmha/kernel/flash_sm80.h): FlashAttention-2 split over mma.sync,
SM80 and newer. Its head sizes, dtypes and tiles; its Traits derive the rest from the tile.
"""

from __future__ import annotations

# Every multiple of 8 the kernel allows (16..256; it pads d to a multiple of 16 with zero
# columns in shared memory). Each is a small translation unit (about 2 s of nvcc per arch),
# so the whole range costs little build time. MLA's (192, 128) comes from
# enumerate.MLA_HEAD_SIZES.
HEAD_SIZES = tuple(range(16, 257, 8))

# (dtype, accumulation of P·V). fp16 with fp32 accumulation is rejected by rules.py unless
# ENABLE_HMMA_FP32=1; bf16 accumulating in fp16 makes no sense and is never proposed.
DTYPES = (("fp16", "fp16"), ("bf16", "fp32"), ("fp16", "fp32"))


def tile(d: int, dv: int | None = None) -> tuple:
    """(block_m, block_n, warps_m, warps_n) for head sizes d and dv (default d); the larger
    one decides.

    The one place the tile of a head size is chosen (measured on an H100, tests/kernel_dev/
    NOTES.md): 128 query rows over 4 warps (2 mma.sync slices of 16 rows each) up to d=128;
    above that the O and S accumulators of 32 rows no longer fit the register file, so 64
    rows (one slice per warp). 128x128 at d=64 spills; 128x32, 64x64 at d=128 and 64x32 at
    d=256 measured 5-15 % slower.
    """
    if max(d, dv or d) <= 128:
        return (128, 64, 4, 1)
    return (64, 64, 4, 1)


def constants(spec) -> dict:
    """flash::Traits takes nothing beyond the tile: no Config is rendered."""
    return {}
