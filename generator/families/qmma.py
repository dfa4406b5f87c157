"""The qmma family (src/fmha/kernel/qmma_sm89.h): FP8 e4m3 attention on mma.sync m16n8k32
with e4m3 operands, the SM89 (Ada) instruction, built for sm_89 and every later arch listed
(on sm_90 ptxas lowers it to conversions and HMMA: tested there, not fast there; the ws family's
e4m3 kernels come first in dispatch). Generated with ENABLE_SM89_QMMA=1. bench/NOTES.md §79.
"""

from __future__ import annotations

from ..spec import ALL_MASKS

DTYPES = (("e4m3", "fp32"),)
# k32 slices of d and 32-column V transposes; d = 256 spills on sm_90 (O's 128 registers and
# the unpacked fragments), so not yet.
HEAD_SIZES = (64, 128)
# 64 query rows on 4 warps, 64-key blocks (the transpose's and the e4m3 reference's block).
TILE = (64, 64, 4, 1)
# The custom mask is a score modifier the kernel does not apply.
MASKS = tuple(m for m in ALL_MASKS if m != "custom")


def tile(d: int, dv: int | None = None) -> tuple:
    """(block_m, block_n, warps_m, warps_n) at every head size."""
    return TILE


def traits_ok(spec) -> bool:
    """What qmma::Traits static_asserts (src/fmha/kernel/qmma_sm89.h)."""
    return ((spec.dtype, spec.acc) in DTYPES and spec.d in HEAD_SIZES and spec.dv == spec.d
            and (spec.block_m, spec.block_n, spec.warps_m, spec.warps_n) == TILE and "custom" not in spec.masks)


def constants(spec) -> dict:
    """qmma::Traits takes nothing beyond the tile: no Config is rendered."""
    return {}
