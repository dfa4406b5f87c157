"""The ws family (src/fmha/kernel/ws.h): FlashAttention-3's design over wgmma + TMA,
warp-specialised, sm_90a. Its head sizes, dtypes, tiles, limits and the constants its
translation units hand to ws::Traits (constants()).
"""

from __future__ import annotations

from dataclasses import replace

from ..spec import MASKS

# The head sizes fmha_v2 serves. Traits take any multiple of 8 (shared memory rounds d up to
# whole 64-column TMA panels, zero-filled); the other multiples of 8 run on the flash family,
# and a size joins this list when a model needs it (each costs two more translation units of
# about 20 entry points). MLA's (192, 128) comes from enumerate.MLA_HEAD_SIZES.
HEAD_SIZES = (32, 40, 64, 72, 80, 96, 104, 128, 160, 192, 256)
# fp32 accumulation only (wgmma with an f16 accumulator is not instantiated, so the -fp16
# problem stays on the flash family). fp16 with fp32 accumulation is the -fp16-fp32 problem:
# rules.py keeps it behind ENABLE_HMMA_FP32=1, as for the flash family.
DTYPES = (("fp16", "fp32"), ("bf16", "fp32"))
# FP8 (e4m3 Q, K, V; QGMMA; V made K-major in shared memory by the producer warpgroup; O in
# bf16): the head sizes served so far (bench/NOTES.md §53), and MLA's (192, 128) from
# enumerate.MLA_HEAD_SIZES, on two consumer warpgroups (fp8_tile: 128 rows on 128 keys, 192 at
# d = 128 and 256 at d = 64, with siblings for short problems). Head tiles are whole 128-byte
# panels: d = 64 pads V to one (P V still runs over its 64 columns only, ws::Traits::kDimO),
# and MLA's d = 192 pads Q and K to 256 columns.
FP8_DTYPES = (("e4m3", "fp32"),)
# e4m3 key blocks wider than 128, by (d, dv): d = 128 on 192 keys, 0.88-0.91x the time of 128
# keys at s >= 2k (not causal), 1.07-1.12x at s = 512; d = 64 on 256, 0.90-0.97x at s >= 2k
# (192 keys there: 1.15-1.19x not causal) (bench/NOTES.md §87).
FP8_WIDE_BLOCK_N = {(128, 128): 192, (64, 64): 256}
FP8_HEAD_SIZES = (64, 128, 256)
# e4m3 tiles for the padding mask only, in a registry row ahead of fp8_tile's (which serves the
# rest): d = 64 on 192 x 128 over three consumer warpgroups, as FA3 runs it, 0.88-0.96x the
# time of 128 x 256 not causal at s = 1k-16k, but 1.03-1.07x causal from 2k (bench/NOTES.md §99).
FP8_PADDING_TILE = {(64, 64): (192, 128, 12, 1)}

# Tiles ws::Traits accepts (it static_asserts them): one 64-row slab (the wgmma M) per
# consumer warpgroup, two or three of them; a key block is a wgmma N.
BLOCK_M = (128, 192)
BLOCK_N = (64, 128)
FP8_BLOCK_N = (192, 256)  # e4m3 only (FP8_WIDE_BLOCK_N)
WARPGROUP_ROWS = 64

# Columns of a TMA panel: 128-byte rows of 16-bit elements, the SW128 swizzle's width.
PANEL_COLS = 64
# Dynamic shared memory a CTA may opt into on sm_90 (cudaDevAttrMaxSharedMemoryPerBlockOptin).
SMEM_LIMIT = 227 * 1024
# What the tile choice leaves beside Q and the K/V stages for the 1024-byte alignment, the
# mbarriers and the persistent tile slots (Traits static_asserts that they fit).
SMEM_RESERVE = 7 * 1024
SMEM_BUDGET = SMEM_LIMIT - SMEM_RESERVE
# The e4m3 tiles' reserve: the 1024-byte alignment, the mbarriers and the tile slots (about
# 1.4 KB). O's staging is not counted: where it does not fit beside, it goes over the raw V
# ring (ws::Traits::kOInV, bench/NOTES.md §88).
FP8_SMEM_RESERVE = 2 * 1024
ELEMENT_BYTES = 2
KV_STAGES = 2   # Traits' default kStages (3 measured no better)

# Consumer warpgroups whose registers cannot carry logit softcapping: the 192-row tile's
# three consumers at 160 registers spilled 44 bytes on the tanh of a 64 x 128 score block
# (d = 64, ptxas -v); the 128-row tiles' two at 232 do not (bench/NOTES.md §12).
SOFTCAP_BLOCK_M_EXCLUDED = (192,)


def panels(d: int, dtype: str = "bf16") -> int:
    """Columns a d-wide head tile takes in shared memory: whole 128-byte panels (64 columns of
    16-bit elements, 128 of e4m3)."""
    cols = PANEL_COLS * (2 if dtype == "e4m3" else 1)
    return -(-d // cols) * cols


def tile(d: int, dv: int | None = None) -> tuple:
    """(block_m, block_n, warps_m, warps_n) for head sizes d and dv (default d), chosen by the
    columns they take in shared memory and registers (panels: d = 32 and 40 as 64, 72..128 as
    128, 160 as 192).

    block_m is the query rows of a CTA: one 64-row slab per consumer warpgroup. warps_m x
    warps_n counts the consumer warps (the producer warpgroup, 4 more warps that only issue
    TMA, is not in the name). block_n is the key block, a wgmma N.
      d=64:  192 x 128, three consumer warpgroups at 160 registers. The 128 x 128 tile does
             too little wgmma work per softmax at d=64; 192 rows measured +15-20 % at s=2k
             and 8k (tests/kernel_dev/NOTES_sm90.md, stage 3).
      d=128: 128 x 128, two consumer warpgroups at 240 registers.
      d=192, 256: 128 x 64: two 128-key K/V stages no longer fit shared memory next to Q
             (d=256: 2 x 128 KB + 64 KB > 227 KB); 128x64 at d=128 (3 stages) measured
             10-36 % slower than 128x128 there. In general 128 keys wherever Q and two
             128-key K/V stages fit SMEM_BUDGET: d=192 with dv=128 (MLA) takes 128 x 128.
    The Traits' scheduling parameter comes from SCHEDULING_MODE (render.py); kStages and
    kPingPong keep their defaults: 2 K/V stages, ping-pong on.
    """
    d, dv = panels(d), panels(dv or d)
    if d <= PANEL_COLS and dv <= PANEL_COLS:
        return (192, 128, 12, 1)
    return (128, 128 if tiles_fit(128, 128, d, dv) else 64, 8, 1)


def fp8_tile(d: int, dv: int | None = None) -> tuple:
    """tile() for e4m3: two consumer warpgroups (the d = 64 padding mask has a row of three
    ahead of this one, FP8_PADDING_TILE), on 128-key blocks wherever they fit at one byte an
    element (fp8_fits: d = 256 too, whose consumers then take 240 registers, lean_producer;
    bench/NOTES.md §86), or wider ones (FP8_WIDE_BLOCK_N). A tile past 128 keys, or with
    lean_producer, has a sibling for short problems (siblings)."""
    block_m, block_n, warps_m, warps_n = tile(d, dv)
    dv = dv or d
    if (d, dv) in FP8_WIDE_BLOCK_N:
        block_n = FP8_WIDE_BLOCK_N[(d, dv)]
    elif fp8_fits(128, 128, d, dv):
        block_n = 128
    return (128, block_n, 8, 1)


def fp8_rows(spec) -> list:
    """The registry rows of an e4m3 spec on fp8_tile's tile: FP8_PADDING_TILE's row for the
    padding mask alone first where its (d, dv) has one (dispatch takes the first row that
    fits), then the spec itself for every mask."""
    padding = FP8_PADDING_TILE.get((spec.d, spec.dv))
    if padding is None:
        return [spec]
    block_m, block_n, warps_m, warps_n = padding
    return [replace(spec, block_m=block_m, block_n=block_n, warps_m=warps_m, warps_n=warps_n,
                    masks=("padding",)), spec]


def tiles_fit(block_m: int, block_n: int, d: int, dv: int) -> bool:
    """Whether Q and KV_STAGES K/V stages of head sizes d, dv fit SMEM_BUDGET."""
    q = block_m * panels(d) * ELEMENT_BYTES
    kv = KV_STAGES * block_n * (panels(d) + panels(dv)) * ELEMENT_BYTES
    return q + kv <= SMEM_BUDGET


def fp8_fits(block_m: int, block_n: int, d: int, dv: int) -> bool:
    """Whether an e4m3 tile fits: Q and KV_STAGES stages of K, V and V^T at one byte an
    element, beside FP8_SMEM_RESERVE."""
    q = block_m * panels(d, "e4m3")
    vt = -(-dv // PANEL_COLS) * PANEL_COLS * 128 * -(-block_n // 128)
    kv = KV_STAGES * (block_n * (panels(d, "e4m3") + panels(dv, "e4m3")) + vt)
    return q + kv <= SMEM_LIMIT - FP8_SMEM_RESERVE


def is_fp8_padding_tile(spec) -> bool:
    """Whether spec's tile is FP8_PADDING_TILE's row for its (d, dv)."""
    tile = FP8_PADDING_TILE.get((spec.d, spec.dv))
    return tile is not None and (spec.block_m, spec.block_n) == tile[:2]


def traits_ok(spec) -> bool:
    """What ws::Traits static_asserts (src/fmha/kernel/ws.h), so that a spec outside
    it gets a reason from rules.py instead of a static_assert from nvcc."""
    fp8_ok = spec.dtype != "e4m3" or (spec.d % 32 == 0 and spec.dv % 32 == 0 and (
        spec.block_m == 128 or is_fp8_padding_tile(spec)))
    return (spec.acc == "fp32" and fp8_ok
            and spec.block_m in BLOCK_M and spec.warps_m == spec.block_m // 16 and spec.warps_n == 1
            and (spec.block_n in BLOCK_N or (spec.dtype == "e4m3" and spec.block_n in FP8_BLOCK_N)))


def softcap(spec) -> bool:
    """Whether the kernel compiles logit softcapping (KernelMeta's kVariantSoftcap)."""
    return spec.block_m not in SOFTCAP_BLOCK_M_EXCLUDED


# Variants some ws kernels cannot carry: rules.kernel_variants drops them from the row.
VARIANT_EXCLUSIONS = {
    "softcap": lambda spec: not softcap(spec),
    "bias": lambda spec: spec.dtype == "e4m3",  # a bias in the inputs' dtype has no use at 8 bits
    # ws::Traits::kHasDropout: 16-bit inputs, d <= 192 (the 192-row tiles run it on their
    # 128-row sibling)
    "dropout": lambda spec: spec.dtype == "e4m3" or max(spec.d, spec.dv) > 192,
}


# A tile's sibling, Short, which the launch runs instead for problems of at most
# short_max_keys(spec) keys (ws/launch.h runs_short). This is the one place it is chosen: ws::Config
# hands the tile and the bound to ws::Traits::Short.
#   - a 16-bit 192-row tile's is 128 rows (two consumer warpgroups), for causal problems of at
#     most 1024 keys (bench/NOTES.md §55, §57); the e4m3 one runs no causal problem
#     (FP8_PADDING_TILE) and has none;
#   - an e4m3 tile of 128 keys with dv > 128 (lean_producer) has 128 x 64, for every problem of
#     at most 384 keys (§86, §92), and for the paged KV caches and softcapping its kernel lacks;
#   - an e4m3 tile past 128 keys has 128 x 128, for every problem of at most 1024 keys and for
#     softcapping, which its kernel lacks (§87).
SHORT_SIBLING_BLOCK_M = 192
SHORT_MAX_KEYS = 1024
LEAN_SHORT_MAX_KEYS = 384


def lean_producer(spec) -> bool:
    """ws::Traits::kLeanProducer: e4m3 on 128-key blocks with dv > 128, whose consumers take 240
    registers and leave the producer warpgroup 24."""
    return spec.dtype == "e4m3" and spec.block_n == 128 and spec.dv > 128


def siblings(spec) -> dict:
    """The tiles a launch of `spec` may run instead of its own, by the Traits' name for them:
    {"Short": (block_m, block_n, warps_m, warps_n)}; empty for a tile without one."""
    if spec.block_m == SHORT_SIBLING_BLOCK_M and spec.dtype != "e4m3":
        return {"Short": (128, spec.block_n, 128 // 16, spec.warps_n)}
    if lean_producer(spec):
        return {"Short": (128, 64, 128 // 16, spec.warps_n)}
    if spec.dtype == "e4m3" and spec.block_n > 128:
        return {"Short": (128, 128, 128 // 16, spec.warps_n)}
    return {}


def short_max_keys(spec) -> int:
    """Problems of at most this many keys run siblings(spec)'s Short (0: the tile has none)."""
    if not siblings(spec):
        return 0
    return LEAN_SHORT_MAX_KEYS if lean_producer(spec) else SHORT_MAX_KEYS


def sibling_names(spec) -> tuple:
    """The kernel names of siblings(spec): the row's tile swapped for each."""
    return tuple(replace(spec, block_m=bm, block_n=bn, warps_m=wm, warps_n=wn).name
                 for bm, bn, wm, wn in siblings(spec).values())


# The bit of each fmha.exe mask in ws::Config::kMaskKinds: one per mask::Kind, the kernels a
# translation unit compiles (padding 0, causal 1, local 2; the custom mask is padding's kernel
# with a score modifier).
MASK_KIND_BITS = {"padding": 1, "custom": 1, "causal": 2, "sliding_window": 4,
                  "bidirectional_sliding_window": 4, "chunked": 4}
assert set(MASK_KIND_BITS) == set(MASKS), "every mask needs its kind's bit"


def mask_kinds(spec) -> int:
    """ws::Config::kMaskKinds: the mask kinds of spec.masks, so that a row of fewer masks
    (FP8_PADDING_TILE) compiles no kernel its registry row cannot reach."""
    kinds = 0
    for mask in spec.masks:
        kinds |= MASK_KIND_BITS[mask]
    return kinds


def constants(spec) -> dict:
    """The facts ws::Config hands to ws::Traits, in its template parameter order."""
    short_m, short_n, _, _ = siblings(spec).get("Short", (0, 0, 0, 0))
    return {
        "kSmemLimit": SMEM_LIMIT,
        "kSmemReserve": SMEM_RESERVE,
        "kPanelCols": PANEL_COLS,
        "kDimQK": panels(spec.d, spec.dtype),
        "kDimV": panels(spec.dv, spec.dtype),
        "kSoftcap": softcap(spec),
        "kShortBlockM": short_m,
        "kShortBlockN": short_n,
        "kShortMaxKeys": short_max_keys(spec),
        "kMaskKinds": mask_kinds(spec),
    }
