"""Env Config -> candidate KernelSpecs, one function per family.

Candidates are what a family could offer; rules.py decides which are generated (a flag may
turn some off) and FMHA_FILTER narrows the rest. Order matters: the driver dispatches to the
first registry row that fits, so families come in FAMILIES order (spec.py: the preferred
family first) and within a family the preferred kernel first.
"""

from __future__ import annotations

from . import rules
from .env import Config
from .spec import ALL_MASKS, FAMILIES, KernelSpec

# Head sizes of the flash family: every multiple of 8 the kernel allows (16..256; it pads d
# to a multiple of 16 with zero columns in shared memory). Each is a small translation unit
# (about 2 s of nvcc per arch), so the whole range costs little build time.
HEAD_SIZES = tuple(range(16, 257, 8))

# (d, dv) pairs beyond dv = d that the prefill families build: DeepSeek's MLA prefill heads
# (Q and K of 192 = 128 "nope" + 64 rope columns, V of 128), separate Q/K/V only.
MLA_HEAD_SIZES = ((192, 128),)

# (dtype, accumulation of P·V). fp16 with fp32 accumulation is rejected by rules.py unless
# ENABLE_HMMA_FP32=1; bf16 accumulating in fp16 makes no sense and is never proposed.
FLASH_DTYPES = (("fp16", "fp16"), ("bf16", "fp32"), ("fp16", "fp32"))


def flash_tile(d: int, dv: int | None = None) -> tuple:
    """(block_m, block_n, warps_m, warps_n) of the flash family for head sizes d and dv
    (default d); the larger one decides.

    The one place the tile of a head size is chosen (measured on an H100, tests/kernel_dev/
    NOTES.md): 128 query rows over 4 warps (2 mma.sync slices of 16 rows each) up to d=128;
    above that the O and S accumulators of 32 rows no longer fit the register file, so 64
    rows (one slice per warp). 128x128 at d=64 spills; 128x32, 64x64 at d=128 and 64x32 at
    d=256 measured 5-15 % slower.
    """
    if max(d, dv or d) <= 128:
        return (128, 64, 4, 1)
    return (64, 64, 4, 1)


def _specs(family_name: str, dtypes, head_sizes, tile) -> list[KernelSpec]:
    """One spec per (dtype, acc) x head size, every mask, tiles from `tile(d)`. head_sizes:
    d (dv = d) or a (d, dv) pair."""
    family = FAMILIES[family_name]
    specs = []
    for dtype, acc in dtypes:
        for size in head_sizes:
            d, dv = size if isinstance(size, tuple) else (size, size)
            block_m, block_n, warps_m, warps_n = tile(d, dv)
            specs.append(
                KernelSpec(
                    family=family.name,
                    sm=family.sm,
                    dtype=dtype,
                    acc=acc,
                    d=d,
                    dv=dv,
                    block_m=block_m,
                    block_n=block_n,
                    warps_m=warps_m,
                    warps_n=warps_n,
                    masks=ALL_MASKS,
                )
            )
    return specs


def flash(config: Config) -> list[KernelSpec]:
    """The flash family (FlashAttention-2 split over mma.sync, SM80 and newer)."""
    return _specs("flash", FLASH_DTYPES, HEAD_SIZES + MLA_HEAD_SIZES, flash_tile)


# The ws family (src/fmha/kernel/ws.h): the head sizes fmha_v2 serves. Its Traits take
# any multiple of 8 (shared memory rounds d up to whole 64-column TMA panels, zero-filled);
# the other multiples of 8 run on the flash family, and a size joins this list when a model
# needs it (each costs two more translation units of about 20 entry points). fp32
# accumulation only (wgmma with an f16 accumulator is not instantiated, so the -fp16 problem
# stays on the flash family). fp16 with fp32 accumulation is the -fp16-fp32 problem:
# rules.py keeps it behind ENABLE_HMMA_FP32=1, as for the flash family.
WS_HEAD_SIZES = (32, 40, 64, 72, 80, 96, 104, 128, 160, 192, 256)
WS_DTYPES = (("fp16", "fp32"), ("bf16", "fp32"))


# Shared memory the ws tile may fill with Q and two K/V stages (227 KB less alignment and barriers).
WS_SMEM_BUDGET = 220 * 1024


def ws_panels(d: int) -> int:
    """Columns of a d-wide head tile in the ws family's shared memory: whole 64-column panels."""
    return -(-d // 64) * 64


def ws_tile(d: int, dv: int | None = None) -> tuple:
    """(block_m, block_n, warps_m, warps_n) of the ws family for head sizes d and dv (default d),
    chosen by the columns they take in shared memory and registers (ws_panels: d = 32 and 40
    as 64, 72..128 as 128, 160 as 192).

    block_m is the query rows of a CTA: one 64-row slab (the wgmma M) per consumer
    warpgroup. warps_m x warps_n counts the consumer warps (the producer warpgroup, 4 more
    warps that only issue TMA, is not in the name). block_n is the key block, a wgmma N.
      d=64:  192 x 128, three consumer warpgroups at 160 registers. The 128 x 128 tile does
             too little wgmma work per softmax at d=64; 192 rows measured +15-20 % at s=2k
             and 8k (tests/kernel_dev/NOTES_sm90.md, stage 3).
      d=128: 128 x 128, two consumer warpgroups at 240 registers.
      d=192, 256: 128 x 64: two 128-key K/V stages no longer fit shared memory next to Q
             (d=256: 2 x 128 KB + 64 KB > 227 KB); 128x64 at d=128 (3 stages) measured
             10-36 % slower than 128x128 there. In general 128 keys wherever Q and two
             128-key K/V stages fit WS_SMEM_BUDGET: d=192 with dv=128 (MLA) takes 128 x 128.
    The Traits' scheduling parameter comes from SCHEDULING_MODE (render.py); kStages and
    kPingPong keep their defaults: 2 K/V stages (3 measured no better), ping-pong on.
    """
    d, dv = ws_panels(d), ws_panels(dv or d)
    if d <= 64 and dv <= 64:
        return (192, 128, 12, 1)
    fits = 128 * d * 2 + 2 * 128 * (d + dv) * 2 <= WS_SMEM_BUDGET
    return (128, 128 if fits else 64, 8, 1)


def ws(config: Config) -> list[KernelSpec]:
    """The ws family (FlashAttention-3 design over wgmma + TMA, warp-specialised, sm_90a)."""
    return _specs("ws", WS_DTYPES, WS_HEAD_SIZES + MLA_HEAD_SIZES, ws_tile)


# The decode family (src/fmha/kernel/decode.h): portable (SM80+), fp32 accumulation, the head
# sizes whose 16-byte chunks split a warp evenly. Per (dtype, d), first the tensor-core path
# (decode_mma_tile), which dispatch takes for caches of DECODE_MMA_MIN_S_KV keys or more;
# then one warp-path kernel per rows-per-warp (block_m) in ascending order, so shorter caches
# take the smallest that holds a problem's query rows per KV head; the largest tiles any
# row count (as the mma path does).
DECODE_HEAD_SIZES = rules.DECODE_HEAD_SIZES
DECODE_ROWS = rules.DECODE_ROWS
decode_mma_tile = rules.decode_mma_tile
# Below this many keys the warp path's per-unit cost is lower than a CTA's pipeline fill. At 64
# and 128 keys the mma path was faster in 15 of 16 cells (d 64/128, b 1-512, H200; 2-10x at
# 128-255 keys, where each warp streamed its keys alone), under 64 slower from b = 64-512
# (bench/NOTES.md §29).
DECODE_MMA_MIN_S_KV = 64
DECODE_DTYPES = (("fp16", "fp32"), ("bf16", "fp32"))
DECODE_WARPS = 4      # independent warps per CTA
# Key passes per warp step (all loads of a step are issued first): more keys in flight where
# few rows leave registers for them (rows 8 at 4 passes needs over 255 registers).
DECODE_UNROLL = {1: 2, 4: 2, 8: 1}


def decode_tile(d: int, rows: int) -> tuple:
    """(block_m, block_n, warps_m, warps_n) of a decode kernel: block_m is the query rows a
    warp carries, block_n the keys per warp step (d / 8 lanes per key, so 256 / d keys per
    pass, DECODE_UNROLL[rows] passes)."""
    return (rows, DECODE_UNROLL[rows] * 256 // d, DECODE_WARPS, 1)


def decode(config: Config) -> list[KernelSpec]:
    """The decode family: every (dtype, d) on the mma path, then at each rows-per-warp of
    DECODE_ROWS on the warp path."""
    specs = []
    for dtype, acc in DECODE_DTYPES:
        for d in DECODE_HEAD_SIZES:
            for block_m, block_n, warps_m, warps_n in (decode_mma_tile(d), *(decode_tile(d, r) for r in DECODE_ROWS)):
                specs.append(KernelSpec(family="decode", sm=FAMILIES["decode"].sm, dtype=dtype, acc=acc, d=d, dv=d,
                                        block_m=block_m, block_n=block_n, warps_m=warps_m, warps_n=warps_n,
                                        masks=ALL_MASKS))
    return specs


def decode_max_rows(spec: KernelSpec) -> int:
    """KernelMeta::max_rows: query rows per KV head a decode kernel holds (0: any, the mma
    path and the warp path's largest block_m tile them); 0 for the other families."""
    if spec.family != "decode" or rules.decode_is_mma(spec) or spec.block_m == max(DECODE_ROWS):
        return 0
    return spec.block_m


def decode_min_s_kv(spec: KernelSpec) -> int:
    """KernelMeta::min_s_kv: the shortest cache (max keys per sequence) for which dispatch
    takes the kernel (0: any); `-kernel NAME` runs it on any."""
    return DECODE_MMA_MIN_S_KV if rules.decode_is_mma(spec) else 0


# family name -> its enumeration function; a new family adds one line here.
ENUMERATORS = {
    "decode": decode,
    "ws": ws,
    "flash": flash,
}
assert set(ENUMERATORS) == set(FAMILIES), "every family needs an enumeration function"


def candidates(config: Config) -> dict[str, list[KernelSpec]]:
    """Every family's candidates, before rules and FMHA_FILTER, in FAMILIES (dispatch) order."""
    return {name: ENUMERATORS[name](config) for name in FAMILIES}
