"""The decode family (src/fmha/kernel/decode.h): a few query rows per sequence against a KV
cache, split-KV, portable (SM80+). Its head sizes, dtypes, tiles (the mma path and the warp
path), its limits (query rows, KV heads per CTA), the sibling tiles a launch may run instead
of the row's, and the constants its translation units hand to decode::Traits (constants()).
"""

from __future__ import annotations

from dataclasses import replace

# Query rows per sequence the family serves (KernelMeta::max_s_q; the launch refuses more).
MAX_S_Q = 16
# fp32 accumulation only; d = dv, the head sizes whose 16-byte chunks split a warp evenly
# (d / 8 lanes per key divide it).
DTYPES = (("fp16", "fp32"), ("bf16", "fp32"))
HEAD_SIZES = (32, 64, 128, 256)

# The mma path's CTA reads MMA_KEYS keys a stage of MMA_HEADS[d] KV heads, each head with its
# own 16-row m-tile of packed query rows: 256 bytes of a token from d = 32 to 128, a 32 KB
# block of K and V (d = 256: one head, 64 KB); fewer bytes a token cost bandwidth
# (bench/NOTES.md §30).
MMA_ROWS = 16
MMA_KEYS = 64
MMA_WARPS = 4          # over the keys of a stage
MMA_HEADS = {32: 4, 64: 2, 128: 1, 256: 1}
# The siblings of a several-head tile: OneHead, one head in the same 32 KB stages, where the
# (sequence, KV head) tiles fit a wave; at d = 64 also Quad, one head in 16 KB stages, four
# CTAs an SM (§30, §34, §35). The launch picks one at run time (decode/launch.h with_sibling).
MMA_STAGE_ELEMS = 8192     # elements of a 32 KB K + V stage: MMA_KEYS * heads * d * 2
QUAD_STAGE_ELEMS = 4096    # ... of Quad's 16 KB stage
QUAD_HEAD_SIZES = (64,)
# An e4m3 KV cache under fp16/bf16 queries (KernelSpec.kv_dtype "e4m3", decode/kv_e4m3.h):
# the mma path only, at every cache length (no warp path). Its CTA reads KV8_HEADS[d] heads
# in 32 KB stages of K and V (KV8_STAGE_ELEMS e4m3 of K a stage): 256 bytes of a token at
# d = 128, 128 at d = 32 and 64 (four heads of 64 spill: their O alone is 128 registers).
# Its OneHead sibling (one head in the same stages) where that block is at most
# KV8_ONE_HEAD_MAX_KEYS keys (the paged loader's limit: a block spans at most 32 pages).
KV8_DTYPES = DTYPES
KV8_HEAD_SIZES = HEAD_SIZES
KV8_HEADS = {32: 4, 64: 2, 128: 2, 256: 1}
KV8_STAGE_ELEMS = 16384
KV8_ONE_HEAD_MAX_KEYS = 256


def kv8_tile(d: int) -> tuple:
    """(block_m, block_n, warps_m, warps_n) of the e4m3-cache mma tile at head size d."""
    return (MMA_ROWS * KV8_HEADS[d], KV8_STAGE_ELEMS // (KV8_HEADS[d] * d), 1, MMA_WARPS)


# Below this many keys the warp path's per-unit cost is lower than a CTA's pipeline fill. At 64
# and 128 keys the mma path was faster in 15 of 16 cells (d 64/128, b 1-512, H200; 2-10x at
# 128-255 keys, where each warp streamed its keys alone), under 64 slower from b = 64-512
# (bench/NOTES.md §29).
MMA_MIN_S_KV = 64

# The warp path: query rows per warp (block_m), independent warps per CTA, key passes per
# warp step (all loads of a step are issued first): more keys in flight where few rows leave
# registers for them (rows 8 at 4 passes needs over 255 registers).
ROWS = (1, 4, 8)
WARPS = 4
PASS_ELEMS = 256   # a warp's 32 lanes x 8 elements (one 16-byte chunk each): 256 / d keys a pass
UNROLL = {1: 2, 4: 2, 8: 1}
MAX_UNROLL = 8
MAX_WARPS = 8


def mma_tile(d: int) -> tuple:
    """(block_m, block_n, warps_m, warps_n) of the mma path at head size d: 16 packed rows for
    each of its MMA_HEADS[d] KV heads, MMA_KEYS keys per stage, 4 warps over the keys."""
    return (MMA_ROWS * MMA_HEADS[d], MMA_KEYS, 1, MMA_WARPS)


def warp_tile(d: int, rows: int) -> tuple:
    """(block_m, block_n, warps_m, warps_n) of a warp-path kernel: block_m is the query rows a
    warp carries, block_n the keys per warp step (d / 8 lanes per key, so 256 / d keys per
    pass, UNROLL[rows] passes)."""
    return (rows, UNROLL[rows] * PASS_ELEMS // d, WARPS, 1)


def tiles(d: int) -> tuple:
    """Every tile at head size d in registry order: the mma path, which dispatch takes for
    caches of MMA_MIN_S_KV keys or more, then the warp path's rows per warp ascending, so
    shorter caches take the smallest that holds a problem's query rows per KV head; the
    largest tiles any row count (as the mma path does)."""
    return (mma_tile(d), *(warp_tile(d, r) for r in ROWS))


def is_mma(spec) -> bool:
    """A decode kernel on the tensor-core path (decode::MmaTraits): its tile says so."""
    return spec.family == "decode" and spec.warps_n > 1


# The mma path keeps one FFMA a score (online_softmax.h without kWideLogits): problems whose
# logits may reach 2^24 take the warp path, which scales Q before the dot products.
VARIANT_EXCLUSIONS = {
    "wide_logits": lambda spec: is_mma(spec),
}


def heads(spec) -> int:
    """KV heads a CTA of the mma path works on (1 on the warp path)."""
    return spec.block_m // MMA_ROWS if is_mma(spec) else 1


def traits_ok(spec) -> bool:
    """What decode::Traits static_asserts (src/fmha/kernel/decode/traits.h)."""
    if not (spec.d in HEAD_SIZES and spec.dv == spec.d and spec.acc == "fp32"):
        return False
    if spec.kv_dtype:
        return spec.kv_dtype == "e4m3" and (spec.block_m, spec.block_n, spec.warps_m, spec.warps_n) == kv8_tile(spec.d)
    if is_mma(spec):
        return (spec.block_m, spec.block_n, spec.warps_m, spec.warps_n) == mma_tile(spec.d)
    keys_per_pass = PASS_ELEMS // spec.d
    return (spec.block_m in ROWS and spec.block_n % keys_per_pass == 0
            and 1 <= spec.block_n // keys_per_pass <= MAX_UNROLL and 1 <= spec.warps_m <= MAX_WARPS
            and spec.warps_n == 1)


def siblings(spec) -> dict:
    """The tiles a launch of `spec` may run instead of its own, by the Traits' name for them:
    {"OneHead": (block_m, block_n, warps_m, warps_n), "Quad": ...}; empty for one-head tiles."""
    if not is_mma(spec) or heads(spec) == 1:
        return {}
    out = {"OneHead": (MMA_ROWS, spec.block_n * heads(spec), spec.warps_m, spec.warps_n)}
    if spec.kv_dtype:  # no Quad: a 16 KB stage holds as many e4m3 keys as OneHead's 32 KB of 16-bit ones
        return out if spec.block_n * heads(spec) <= KV8_ONE_HEAD_MAX_KEYS else {}
    if spec.d in QUAD_HEAD_SIZES:
        out["Quad"] = (MMA_ROWS, QUAD_STAGE_ELEMS // spec.d, spec.warps_m, spec.warps_n)
    return out


def sibling_names(spec) -> tuple:
    """The kernel names of siblings(spec): the row's tile swapped for each."""
    return tuple(replace(spec, block_m=bm, block_n=bn, warps_m=wm, warps_n=wn).name
                 for bm, bn, wm, wn in siblings(spec).values())


def max_rows(spec) -> int:
    """KernelMeta::max_rows: query rows per KV head the kernel holds (0: any, the mma path and
    the warp path's largest block_m tile them)."""
    return 0 if is_mma(spec) or spec.block_m == max(ROWS) else spec.block_m


def min_s_kv(spec) -> int:
    """KernelMeta::min_s_kv: the shortest cache (max keys per sequence) for which dispatch
    takes the kernel (0: any); `-kernel NAME` runs it on any. An e4m3 cache has no warp path:
    its mma tile serves every length."""
    return MMA_MIN_S_KV if is_mma(spec) and not spec.kv_dtype else 0


def constants(spec) -> dict:
    """The facts decode::Config hands to decode::Traits, in its template parameter order."""
    sib = siblings(spec)
    return {
        "kMaxSq": MAX_S_Q,
        "kMma": is_mma(spec),
        "kHeads": heads(spec),
        "kOneHeadBlockN": sib["OneHead"][1] if "OneHead" in sib else 0,
        "kQuadBlockN": sib["Quad"][1] if "Quad" in sib else 0,
        "kKvE4m3": spec.kv_dtype == "e4m3",
    }
