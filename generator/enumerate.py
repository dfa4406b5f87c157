"""Env Config -> candidate KernelSpecs, one function per family.

Candidates are what a family could offer; rules.py decides which are generated (a flag may
turn some off) and FMHA_FILTER narrows the rest. Order matters: the driver dispatches to the
first registry row that fits, so within a family list the preferred kernel first.
"""

from __future__ import annotations

from .env import Config
from .spec import ALL_MASKS, FAMILIES, KernelSpec

# Head sizes the flash kernel handles today.
HEAD_SIZES = (32, 64, 128, 256)
# Head sizes of real models that are not powers of two (GPT-J 80, Falcon 64/128, StarCoder
# 128, some ViTs 40/72/80/96, DeepSeek 192...). They need the kernel to loop over d in
# 8-wide ldmatrix steps with a partial last 64-wide block; flip the switch once it does.
EXTENDED_HEAD_SIZES = (32, 40, 48, 64, 72, 80, 96, 104, 128, 160, 192, 256)
USE_EXTENDED_HEAD_SIZES = False

# (dtype, accumulation of P·V). fp16 with fp32 accumulation is rejected by rules.py unless
# ENABLE_HMMA_FP32=1; bf16 accumulating in fp16 makes no sense and is never proposed.
FLASH_DTYPES = (("fp16", "fp16"), ("bf16", "fp32"), ("fp16", "fp32"))


def flash_tile(d: int) -> tuple:
    """(block_m, block_n, warps_m, warps_n) of the flash family for head size d.

    The one place the tile of a head size is chosen. Placeholders until tuned on the device:
    128 query rows over 4 warps (16 rows per mma.sync slice, 2 slices each) while Q, K and V
    tiles fit in shared memory; d=256 halves both to stay under the SM80 limit.
    """
    if d <= 128:
        return (128, 64, 4, 1)
    return (64, 64, 4, 1)


def head_sizes() -> tuple:
    return EXTENDED_HEAD_SIZES if USE_EXTENDED_HEAD_SIZES else HEAD_SIZES


def flash(config: Config) -> list[KernelSpec]:
    """The flash family (FlashAttention-2 split over mma.sync, SM80 and newer)."""
    family = FAMILIES["flash"]
    specs = []
    for dtype, acc in FLASH_DTYPES:
        for d in head_sizes():
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
