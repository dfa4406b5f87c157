"""The kernel x case table of test_matrix.py: each kernel of the manifest crossed with the
problems its rules allow (its masks x layouts x attention types x sequence shapes, its
variants, a paged KV cache), pruned deterministically so that the tier stays a few minutes long
while every pairing is covered by some kernel.
"""

from dataclasses import replace

from generator.rules import decode_is_mma
from generator.spec import FAMILIES, KernelSpec

from .cases import (ATTENTION, CORE_HEAD_SIZES, CORE_MASKS, DEFAULT_HEADS, Case, Shape, heads_case, paged_case,
                    valid)
from .manifest import is_decode

# The layouts the table's rotation walks through; the paged KV cache has cases of its own
# (paged_cases), one per block size.
ROTATING_LAYOUTS = ("packed_qkv", "contiguous_q_kv", "separate_q_k_v")
# Every (layout, attention) pair; cases_for's rotation walks through it.
PAIRS = [(layout, attn) for layout in ROTATING_LAYOUTS for attn in ATTENTION]

# Lengths that hit the edges: a single token, less than one tile, a ragged last tile, exact
# tiles, many tiles with a tail, var-len packed and padded, and s_q < s (decode-like too).
SHAPES = (
    Shape(1, 1),
    Shape(3, 7),
    Shape(3, 77),
    Shape(1, 128),
    Shape(3, 128),
    Shape(3, 257),
    Shape(2, 1000),
    Shape(1, 4097),
    Shape(3, 256, min_s=16),
    Shape(3, 200, min_s=50, pad_s=True),
    Shape(3, 300, s_q=37),
    Shape(3, 513, s_q=1),
    Shape(2, 190, s_q=126, min_s=150),  # var-len K/V with s_q < s
)
# CORE_HEAD_SIZES get the whole table; every other head size of the flash family (it builds
# every multiple of 8) runs the short one, so the tier grows by a few runs per kernel, not 26.
# Every ws kernel (a handful of head sizes) gets the whole table.
BRIEF_SHAPES = (Shape(3, 77), Shape(3, 256, min_s=16), Shape(3, 300, s_q=37))
LOCAL_SHAPES = 3  # shapes per local mask and kernel (the core masks take every shape)
# Input and scale variations, each run once per kernel on a small problem.
NUMERICS = (
    ("randn", ["-randn", "-seed", "7"]),
    ("scales", ["-scale-bmm1", "0.05", "-scale-softmax", "1.5", "-scale-bmm2", "0.5"]),
)
# Run-time variants (generator.spec.VARIANTS): one run each on every kernel that has it (the
# manifest's `variants`: its family's, less generator.rules.VARIANT_EXCLUSIONS).
# Unit-normal inputs make logits ~N(0, 1), so a cap of 2 bends most of them.
VARIANT_NUMERICS = {
    "softcap": ("softcap", ["-randn", "-seed", "11", "-softcapping-scale-bmm1", "2"]),
    # Uniform inputs: with -randn, ALiBi's weight on the nearest keys left one output of an fp16-
    # accumulating d=256 kernel 1.66 % off (eps 1.5 %) on 0.0079 (bench/NOTES.md §12); the fp64
    # re-checks (SAVE_CONFIGS) run ALiBi on unit-normal inputs.
    "alibi": ("alibi", ["-seed", "19", "-alibi"]),
    "bias": ("bias", ["-randn", "-seed", "23", "-attention-bias", "-attention-bias-shape", "1h"]),
    "sinks": ("sinks", ["-randn", "-seed", "13", "-use-attention-sinks"]),
    # The driver checks the kernel's LSE against the reference's and fails the run on a mismatch.
    "softmax_stats": ("lse", ["-randn", "-seed", "17", "-save-softmax"]),
    # Logits far beyond 2^24 in log2 units (softmax/exp2_row.h): finite and right, not NaN.
    "wide_logits": ("wide", ["-seed", "29", "-scale-bmm1", "1e20"]),
    # The reference drops the same (row, key) pairs (fmha/dropout.h): O is checked as usual.
    "dropout": ("dropout", ["-randn", "-seed", "31", "-dropout", "0.17"]),
}


def numerics_for(kernel: dict) -> tuple:
    """NUMERICS plus a run per variant the kernel's family implements (the paged KV cache, a
    layout, has its own cases: paged_cases)."""
    return NUMERICS + tuple(VARIANT_NUMERICS[v] for v in kernel["variants"] if v != "paged_kv")


# The flags of the score modifiers, of which a problem takes one (softmax/score_mod.h); the
# custom mask is one of them. Dropout takes none of them either.
SCORE_MOD_FLAGS = ("-softcapping-scale-bmm1", "-alibi", "-attention-bias", "-attention-bias-shape", "-dropout")


def numerics_mask(masks: list, ni: int, flags) -> str:
    """The mask of the ni-th numerics run: the kernel's masks in turn, the next one where the
    custom mask would meet another score modifier."""
    mask = masks[ni % len(masks)]
    if mask == "custom" and any(f in SCORE_MOD_FLAGS for f in flags):
        mask = masks[(ni + 1) % len(masks)]
    return mask


# Decode (family with max_s_q): query lengths, KV lengths and query heads per KV head
# (h = 32 over 32, 8, 4, 1 KV heads: GQA ratios 1, 4, 8, 32), as issue #5 lists them.
DECODE_S_Q = (1, 2, 4, 16)
DECODE_S_KV = (1, 2, 3, 17, 1000, 4097, 65536)
DECODE_KV_HEADS = (32, 8, 4, 1)


# Paged KV cache (-paged-kv): each block size on a ragged tile, var-len lengths down to one
# token, chunked prefill (s_q < s over var-len caches) and padded Q storage, rotating between
# kernels; the driver places the blocks in a random order and poisons the spare ones.
PAGED_TOKENS = (16, 32, 64, 128)
PAGED_SHAPES = (Shape(3, 257), Shape(4, 700, min_s=1), Shape(3, 1000, s_q=77, min_s=300),
                Shape(3, 200, s_q=50, min_s=60, pad_s=True))
PAGED_DECODE_S_KV = (17, 1000, 4097)


def paged_cases(kernel: dict, index: int, brief: bool) -> list[Case]:
    """A kernel's paged-KV runs: every block size (one, rotating, for a brief kernel), each on
    the next shape, mask and attention type."""
    if "paged_kv" not in kernel["variants"]:
        return []
    masks, attns = kernel["masks"], list(ATTENTION)
    js = [index % len(PAGED_TOKENS)] if brief else range(len(PAGED_TOKENS))
    return [paged_case(kernel, masks[(index + j) % len(masks)], attns[(index + j) % len(attns)],
                       PAGED_SHAPES[(index + j) % len(PAGED_SHAPES)], PAGED_TOKENS[j]) for j in js]


def mma_path_cases(kernel: dict) -> list[Case]:
    """The decode mma path's launch shapes."""
    # Beyond one wave of CTAs (160 units: 3 splits of 6720 keys, 480 CTAs in 4 waves of 132, or
    # 2 of 10048 where 3 CTAs fit an SM): var-len from 3000 keys, so some sequences fill one
    # split, some two or three
    cases = [heads_case(kernel, "padding", "separate_q_k_v", Shape(20, 20000, s_q=1, min_s=3000), 8,
                        tag="beyond_one_wave")]
    # ... and 192 unsplit units of at most 4096 keys, which run two CTAs to an SM from d = 64
    # to 128 (decode.h pair_up); causal s_q = 4, var-len from 1 key
    cases.append(heads_case(kernel, "causal", "separate_q_k_v", Shape(24, 4000, s_q=4, min_s=1), 8,
                            tag="paired_beyond_one_wave"))
    # ... and several KV heads a CTA (d = 64: 2, d = 32: 4; decode.h MmaTraits::kHeads), which
    # run where the one-head units are more than a wave (64 x 5 = 320): 5 KV heads leave a
    # last group of one; var-len from 1 key, s_q = 2, in token storage and a paged cache
    cases.append(heads_case(kernel, "padding", "separate_q_k_v", Shape(64, 300, s_q=2, min_s=1), 5,
                            tag="head_groups", h=20))
    if "paged_kv" in kernel["variants"]:
        cases.append(paged_case(kernel, "causal", "", Shape(64, 300, s_q=2, min_s=1), 16, 5, 20))
    # ... and a tile's splits merged in a thread-block cluster (SM90, d <= 128: decode.h
    # cluster_splits): 64 tiles of 2 splits in 64 clusters of 2 (an H100 or H200 holds 66);
    # var-len from 1 key, so a cluster's second CTA may stream nothing; causal s_q = 2, the
    # LSE and the sinks where the kernel has them
    merge_flags = tuple(flag for variant, flag in (("softmax_stats", "-save-softmax"),
                                                   ("sinks", "-use-attention-sinks"))
                        if variant in kernel["variants"])
    cases.append(heads_case(kernel, "causal", "separate_q_k_v", Shape(8, 4100, s_q=2, min_s=1), 8, merge_flags,
                            tag="clustered_splits"))
    return cases


def decode_cases(kernel: dict, index: int) -> list[Case]:
    """A decode kernel's runs: only problems it holds (query rows per KV head <= its
    max_rows; 0: it tiles any), over the s_q x s_kv x GQA grid (every s_kv, also below the
    kernel's min_s_kv, since -kernel runs it on any length), var-len KV (packed and padded),
    both masks, the layouts that allow s_q < s, each length once per kernel with the
    (s_q, GQA) pairs rotating between kernels."""
    rows_cap = kernel["max_rows"] or None
    combos = [(sq, hkv) for sq in DECODE_S_Q for hkv in DECODE_KV_HEADS
              if rows_cap is None or DEFAULT_HEADS // hkv * sq <= rows_cap]
    if not combos:
        return []
    # (an e4m3 cache is a tensor of its own: separate Q, K, V or paged only)
    layouts = ("separate_q_k_v", "separate_q_k_v") if kernel.get("kv_dtype") else ("separate_q_k_v", "contiguous_q_kv")
    cases = []
    step = index
    for si, s_kv in enumerate(DECODE_S_KV):
        fitting = [c for c in combos if c[0] <= s_kv] or [(1, combos[0][1])]  # fmha.exe wants s_q <= s
        sq, hkv = fitting[step % len(fitting)]
        step += 1
        b = 1 if s_kv >= 65536 else 3
        shape = Shape(b, s_kv, s_q=sq)
        mask = kernel["masks"][si % len(kernel["masks"])]
        cases.append(heads_case(kernel, mask, layouts[si % 2], shape, hkv))
    # var-len KV, packed and padded storage, causal with s_q > 1 where the kernel holds it, and
    # a local mask (rotating between kernels) whose window or chunk leaves keys unread
    sq, hkv = combos[-1]
    local = [m for m in kernel["masks"] if m not in CORE_MASKS]
    varlen = [(Shape(4, 700, s_q=sq, min_s=1), "causal"), (Shape(3, 300, s_q=sq, min_s=50, pad_s=True), "padding"),
              (Shape(2, 129, s_q=sq, min_s=1), "causal")]
    if local:
        varlen.append((Shape(3, 3000, s_q=sq, min_s=300), local[index % len(local)]))
    for shape, mask in varlen:
        cases.append(heads_case(kernel, mask, "separate_q_k_v", shape, hkv))
    if decode_is_mma(KernelSpec.parse(kernel["name"], masks=tuple(kernel["masks"]))):
        cases += mma_path_cases(kernel)
    # numerics: unit-normal inputs and unusual scales, on the kernel's first (s_q, KV heads) pair
    sq, hkv = combos[0]
    for ni, (tag, flags) in enumerate(numerics_for(kernel)):
        cases.append(heads_case(kernel, numerics_mask(kernel["masks"], ni, flags), "separate_q_k_v",
                                Shape(2, 160, s_q=sq), hkv, tuple(flags), tag))
    # the variants on a 2-key cache too (the one-step kernel of the warp path)
    for tag, flags in numerics_for(kernel)[len(NUMERICS):]:
        cases.append(heads_case(kernel, "padding", "separate_q_k_v", Shape(3, 2, s_q=1), hkv, tuple(flags), tag))
    # a paged KV cache: a 2-key cache, and the lengths above (var-len on the longest), block sizes in turn
    if "paged_kv" in kernel["variants"]:
        cases.append(paged_case(kernel, "padding", "", Shape(3, 2, s_q=1), PAGED_TOKENS[index % 4], hkv,
                                DEFAULT_HEADS))
        for j, s_kv in enumerate(PAGED_DECODE_S_KV):
            sq, hkv = combos[-1 - (index + j) % len(combos)]  # from the most rows down
            shape = Shape(3, s_kv, s_q=min(sq, s_kv), min_s=1 if s_kv > 1000 else None)
            cases.append(paged_case(kernel, kernel["masks"][(index + j) % len(kernel["masks"])], "", shape,
                                    PAGED_TOKENS[(index + j + 1) % 4], hkv, DEFAULT_HEADS))
    return cases


def cases_for(kernel: dict, index: int) -> list[Case]:
    """The runs of one kernel. Each (mask, shape) takes the next valid (layout, attention)
    pair from PAIRS, starting at an offset that depends on the kernel's index, so that across
    kernels every shape meets every pair. Large shapes run under one mask per kernel,
    alternating between kernels."""
    if is_decode(kernel):
        return decode_cases(kernel, index)
    masks = kernel["masks"]
    step = index * 4  # 4 is coprime with len(PAIRS) == 9: kernels start at different pairs

    def next_pair(shape: Shape) -> tuple:
        nonlocal step
        while not valid(kernel, PAIRS[step % len(PAIRS)][0], shape):
            step += 1
        step += 1
        return PAIRS[(step - 1) % len(PAIRS)]

    core = [m for m in masks if m in CORE_MASKS]
    local = [m for m in masks if m not in CORE_MASKS]
    full = kernel["d"] in CORE_HEAD_SIZES or FAMILIES[kernel["family"]].warp_specialized
    if not full:  # the short table: tails, var-len, s_q < s; one of them per local mask
        return ([Case(kernel, mask, *next_pair(shape), shape) for mask in core for shape in BRIEF_SHAPES] +
                [Case(kernel, mask, *next_pair(shape), shape)
                 for li, mask in enumerate(local) for shape in [BRIEF_SHAPES[(index + li) % len(BRIEF_SHAPES)]]] +
                paged_cases(kernel, index, brief=True))

    cases = []
    for mi, mask in enumerate(core):
        for si, shape in enumerate(SHAPES):
            if not shape.large or (index + si) % len(core) == mi:
                cases.append(Case(kernel, mask, *next_pair(shape), shape))
    # Each local mask on LOCAL_SHAPES of the shapes, rotating between kernels (3 is coprime
    # with len(SHAPES) == 13, so the kernels of a family together cover every shape).
    for li, mask in enumerate(local):
        for j in range(LOCAL_SHAPES):
            shape = SHAPES[(index + 4 * li + 3 * j) % len(SHAPES)]
            cases.append(Case(kernel, mask, *next_pair(shape), shape))
    small = Shape(2, 160)
    for ni, (tag, flags) in enumerate(numerics_for(kernel)):
        cases.append(Case(kernel, numerics_mask(masks, ni, flags), *next_pair(small), small, tuple(flags), tag))
    return cases + own_tile_cases(kernel, masks, next_pair) + paged_cases(kernel, index, brief=False)


# A ws row with a sibling (Short) runs it for problems of at most its short_max_keys (384 or
# 1024 keys, ws/launch.h runs_short), so most of the table above tests the sibling: each mask and each variant once
# more past that, var-len, on the row's own tile.
OWN_TILE_SHAPE = Shape(2, 1500, min_s=1100)
OWN_TILE_SMALL = Shape(1, 1100)


def own_tile_cases(kernel: dict, masks: list, next_pair) -> list[Case]:
    if kernel["family"] != "ws" or not kernel.get("siblings"):
        return []
    cases = [Case(kernel, mask, *next_pair(OWN_TILE_SHAPE), OWN_TILE_SHAPE) for mask in masks]
    for ni, (tag, flags) in enumerate(numerics_for(kernel)):
        cases.append(Case(kernel, numerics_mask(masks, ni, flags), *next_pair(OWN_TILE_SMALL), OWN_TILE_SMALL,
                          tuple(flags), tag))
    return cases


def with_outputs(kernel: dict, cases: list[Case]) -> list[Case]:
    """e4m3 kernels write O in e4m3 (the driver's default for e4m3 inputs) or bf16: every
    other case of theirs in each."""
    if kernel["dtype"] != "e4m3":
        return cases
    return [replace(case, e4m3_out=True) if i % 2 == 0 else case for i, case in enumerate(cases)]


def build_cases(kernels: list[dict]) -> list[Case]:
    seen, cases = set(), []
    for index, kernel in enumerate(sorted(kernels, key=lambda k: k["name"])):
        for case in with_outputs(kernel, cases_for(kernel, index)):
            key = (kernel["name"], tuple(case.args()))
            if key not in seen:  # the same command line twice tests nothing new
                seen.add(key)
                cases.append(case)
    return cases
