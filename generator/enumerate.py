"""Env Config -> candidate KernelSpecs, one function per family.

Candidates are what a family could offer; rules.py decides which are generated (a flag may
turn some off) and FMHA_FILTER narrows the rest. Order matters: the driver dispatches to the
first registry row that fits, so within a family list the preferred kernel first.
"""

from __future__ import annotations

from .env import Config
from .spec import ALL_MASKS, FAMILIES, KernelSpec

# Head sizes of the flash family: every multiple of 8 the kernel allows (16..256; it pads d
# to a multiple of 16 with zero columns in shared memory). Each is a small translation unit
# (about 2 s of nvcc per arch), so the whole range costs little build time.
HEAD_SIZES = tuple(range(16, 257, 8))

# (dtype, accumulation of P·V). fp16 with fp32 accumulation is rejected by rules.py unless
# ENABLE_HMMA_FP32=1; bf16 accumulating in fp16 makes no sense and is never proposed.
FLASH_DTYPES = (("fp16", "fp16"), ("bf16", "fp32"), ("fp16", "fp32"))


def flash_tile(d: int) -> tuple:
    """(block_m, block_n, warps_m, warps_n) of the flash family for head size d.

    The one place the tile of a head size is chosen (measured on an H100, tests/kernel_dev/
    NOTES.md): 128 query rows over 4 warps (2 mma.sync slices of 16 rows each) up to d=128;
    above that the O and S accumulators of 32 rows no longer fit the register file, so 64
    rows (one slice per warp). 128x128 at d=64 spills; 128x32, 64x64 at d=128 and 64x32 at
    d=256 measured 5-15 % slower.
    """
    if d <= 128:
        return (128, 64, 4, 1)
    return (64, 64, 4, 1)


def flash(config: Config) -> list[KernelSpec]:
    """The flash family (FlashAttention-2 split over mma.sync, SM80 and newer)."""
    family = FAMILIES["flash"]
    specs = []
    for dtype, acc in FLASH_DTYPES:
        for d in HEAD_SIZES:
            block_m, block_n, warps_m, warps_n = flash_tile(d)
            specs.append(
                KernelSpec(
                    family=family.name,
                    sm=family.sm,
                    dtype=dtype,
                    acc=acc,
                    d=d,
                    dv=d,
                    block_m=block_m,
                    block_n=block_n,
                    warps_m=warps_m,
                    warps_n=warps_n,
                    masks=ALL_MASKS,
                )
            )
    return specs


# family name -> its enumeration function; a new family adds one line here.
ENUMERATORS = {
    "flash": flash,
}
assert set(ENUMERATORS) == set(FAMILIES), "every family needs an enumeration function"


def candidates(config: Config) -> dict[str, list[KernelSpec]]:
    """Every family's candidates, before rules and FMHA_FILTER."""
    return {name: enumerate_family(config) for name, enumerate_family in ENUMERATORS.items()}
