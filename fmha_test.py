"""End-to-end GPU tier: every generated kernel through bin/fmha.exe.

The kernels come from generated/manifest.json (written by `python3 setup.py`), never from a
list kept here. Each kernel is crossed with a case table built by the rules below (masks it
supports x layouts x attention types x sequence shapes), pruned deterministically so the
suite stays a few minutes long while every pairing is covered by some kernel.

Every run parses the four `-v 0` lines (SPEC.md "Console output"), asserts the checks passed
and the Kernel line names the requested kernel, and records Tflop/s and GB/s (written as CSV
with `--perf-csv PATH`). `-save-tensors` runs are re-checked against a float64 attention
written here in NumPy, independent of the driver's own reference. The -m perf runs time a few
problems per kernel and assert a speed only against a stored baseline of the same GPU
(`--perf-baseline PATH`, bench/perf_baseline.py), never against a number written here.
"""

import json
import math
import os
import re
import subprocess
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from bench import perf_baseline as perf
from bench.suites import ODD_HEAD_SIZES
from generator.rules import decode_is_mma
from generator.spec import FAMILIES, KernelSpec

REPO = Path(__file__).resolve().parent
RUN_TIMEOUT_S = 120

# ---------------------------------------------------------------------------------------------
# Output parsing (SPEC.md "Console output"), compiled once.

def line_re(pattern: str) -> re.Pattern:
    """A regex for one whole line, searchable in multi-line output."""
    return re.compile(rf"^{pattern}$", re.M)


FIRST_LINE_RE = line_re(
    r"v1=(?P<v1>\d+) il=(?P<il>\d+) s_q=(?P<s_q>\d+), s=(?P<s>\d+) b=(?P<b>\d+)"
    r" h=(?P<h>\d+)/(?P<h_kv>\d+) d=(?P<d>\d+)/(?P<dv>\d+)"
    r" dtype=(?P<dtype>\w+), output_dtype=(?P<output_dtype>\w+),"
    r" flash_attn=(?P<flash_attn>true|false), warp_spec=(?P<warp_spec>true|false),"
    r" mask=(?P<mask>\w+), alibi=(?P<alibi>true|false), attn=(?P<attn>\w+),"
    r" qkv_layout=(?P<qkv_layout>\w+), wm=(?P<wm>\d+) wn=(?P<wn>\d+)"
)
KERNEL_RE = line_re(r"Kernel\.{8}: (?P<kernel>\S+)")
CHECKS_RE = line_re(r"Checks\.{8}: (?P<checks>SUCCESS|FAILED|DISABLED)")
ELAPSED_RE = line_re(
    r"Elapsed \.{6}: (?P<us>\d+\.\d{6}) us \((?:(?P<speedup>\d+\.\d{2})x|n/a)\),"
    r" (?P<tflops>\d+\.\d{2}) Tflop/s, (?P<gbs>\d+\.\d{2}) GB/s"
)
# -v 0 prints exactly these, in this order.
COMPACT_LINES = (FIRST_LINE_RE, KERNEL_RE, CHECKS_RE, ELAPSED_RE)


def parse_output(stdout: str) -> dict:
    """The fields of the four compact lines, wherever they are in `stdout` (a failed check
    prints mismatches after them). Raises AssertionError naming the missing line."""
    fields = {}
    for regex in COMPACT_LINES:
        match = regex.search(stdout)
        assert match, f"no line matching /{regex.pattern}/ in:\n{stdout}"
        fields.update({k: v for k, v in match.groupdict().items() if v is not None})
    return fields


def run_fmha(exe: Path, args: list[str], timeout: float = RUN_TIMEOUT_S) -> subprocess.CompletedProcess:
    env = dict(os.environ, NO_COLOR="1")  # stdout is a pipe anyway; be explicit
    return subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=timeout, env=env)


def describe(proc: subprocess.CompletedProcess) -> str:
    return f"$ {' '.join(proc.args)}\nexit {proc.returncode}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"


# ---------------------------------------------------------------------------------------------
# Kernels: the manifest of the build under test.

def manifest_path() -> Path:
    """generated/manifest.json beside the binary under test ($FMHA_EXE's tree, else the repo's)."""
    if os.environ.get("FMHA_EXE"):
        beside = Path(os.environ["FMHA_EXE"]).resolve().parent.parent / "generated" / "manifest.json"
        if beside.is_file():
            return beside
    return REPO / "generated" / "manifest.json"


def load_kernels() -> list[dict]:
    path = manifest_path()
    if not path.is_file():
        return []
    return json.loads(path.read_text())["kernels"]


KERNELS = load_kernels()
if not KERNELS:  # one skipped entry that says why, rather than hundreds
    pytest.skip(f"{manifest_path()} not found: run `python3 setup.py && make -j` first", allow_module_level=True)


def dtype_flag(kernel: dict) -> str:
    if kernel["dtype"] == "bf16":
        return "-bf16"
    return "-fp16-fp32" if kernel["acc"] == "fp32" else "-fp16"


def warp_spec(kernel: dict) -> str:
    """The first line's warp_spec= value, a property of the kernel's family."""
    return "true" if FAMILIES[kernel["family"]].warp_specialized else "false"


def dtype_label(kernel: dict) -> str:
    """The first line's dtype= value: FP16, FP16_FP32 or BF16 (bf16 always accumulates in fp32)."""
    return "FP16_FP32" if kernel["dtype"] == "fp16" and kernel["acc"] == "fp32" else kernel["dtype"].upper()


# ---------------------------------------------------------------------------------------------
# The case table.

LAYOUT_FLAGS = {
    "packed_qkv": [],                      # the default
    "contiguous_q_kv": ["-contiguous-q-kv"],
    "separate_q_k_v": ["-separate-q-k-v"],
    "q_paged_kv": ["-paged-kv"],           # with -tokens-per-block in the case's extra flags
}
# The layouts the table's rotation walks through; the paged KV cache has cases of its own
# (paged_cases), one per block size.
ROTATING_LAYOUTS = ("packed_qkv", "contiguous_q_kv", "separate_q_k_v")
# attention type -> (default h, h_kv (None: h), flags)
ATTENTION = {
    "mha": (4, None, []),
    "gqa": (8, 2, ["-gqa", "2"]),
    "mqa": (4, 1, ["-mqa"]),
}
# Every (layout, attention) pair; the rotation below walks through it.
PAIRS = [(layout, attn) for layout in ROTATING_LAYOUTS for attn in ATTENTION]

# Masks (generator.spec.MASKS tokens, fmha.exe's mask= labels) -> their flags for a key length
# s. The local masks' sizes follow s, so that short runs cover windows narrower than a key
# block (every visited block masked) and long ones windows of many blocks (block skipping at
# both ends, whole blocks in between); chunks are the power of two at or below s / 3.
CORE_MASKS = ("padding", "causal")


def mask_flags(mask: str, s: int) -> list[str]:
    if mask == "padding":
        return []
    if mask == "causal":
        return ["-causal-mask"]
    if mask == "sliding_window":
        return ["-sliding-window-size", str(max(1, 2 * s // 5))]
    if mask == "bidirectional_sliding_window":
        return ["-sliding-window-size", str(max(1, s // 4)), "-bidirectional-sliding-window-mask"]
    if mask == "chunked":
        return ["-chunked-attention-size", str(1 << (max(1, s // 3).bit_length() - 1))]
    if mask == "custom":  # random bits from the seed
        return ["-custom-mask"]
    raise ValueError(f"no flags for mask {mask!r}")


@dataclass(frozen=True)
class Shape:
    """Batch and sequence lengths of one run."""

    b: int
    s: int                   # max key/value length
    s_q: int | None = None   # query length < s (not with packed QKV, which needs s_q == s)
    min_s: int | None = None # var-len: lengths uniform in [min_s, s]
    pad_s: bool = False      # var-len stored padded to s instead of packed

    @property
    def large(self) -> bool:
        return self.s >= 1000

    def flags(self) -> list[str]:
        out = ["-b", str(self.b), "-s", str(self.s)]
        if self.s_q is not None:
            out += ["-s-q", str(self.s_q)]
        if self.min_s is not None:
            out += ["-min-s", str(self.min_s)]
        if self.pad_s:
            out.append("-pad-s")
        return out

    @property
    def tag(self) -> str:
        parts = [f"b{self.b}", f"s{self.s}"]
        if self.s_q is not None:
            parts.append(f"sq{self.s_q}")
        if self.min_s is not None:
            parts.append(f"min{self.min_s}")
        if self.pad_s:
            parts.append("pad")
        return "_".join(parts)


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
# Head sizes that get the whole table; every other head size of the flash family (it builds
# every multiple of 8) runs the short one, so the tier grows by a few runs per kernel, not 26.
# Every ws kernel (a handful of head sizes) gets the whole table.
CORE_HEAD_SIZES = (32, 64, 128, 256)
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
}


def numerics_for(kernel: dict) -> tuple:
    """NUMERICS plus a run per variant the kernel's family implements (the paged KV cache, a
    layout, has its own cases: paged_cases)."""
    return NUMERICS + tuple(VARIANT_NUMERICS[v] for v in kernel["variants"] if v != "paged_kv")


# The flags of the score modifiers, of which a problem takes one (softmax/score_mod.h); the
# custom mask is one of them.
SCORE_MOD_FLAGS = ("-softcapping-scale-bmm1", "-alibi", "-attention-bias", "-attention-bias-shape")


def numerics_mask(masks: list, ni: int, flags) -> str:
    """The mask of the ni-th numerics run: the kernel's masks in turn, the next one where the
    custom mask would meet another score modifier."""
    mask = masks[ni % len(masks)]
    if mask == "custom" and any(f in SCORE_MOD_FLAGS for f in flags):
        mask = masks[(ni + 1) % len(masks)]
    return mask


@dataclass(frozen=True)
class Case:
    kernel: dict
    mask: str
    layout: str
    attn: str
    shape: Shape
    extra: tuple = ()
    tag: str = ""
    heads: int = 0     # query heads; 0 = the attention type's default
    kv_heads: int = 0  # KV heads of a "gqa" case; 0 = the attention type's default

    @property
    def h(self) -> int:
        return self.heads or ATTENTION[self.attn][0]

    @property
    def h_kv(self) -> int:
        return self.kv_heads or ATTENTION[self.attn][1] or self.h

    def args(self) -> list[str]:
        k = self.kernel
        out = ["-d", str(k["d"]), "-dv", str(k["dv"]), dtype_flag(k), "-h", str(self.h)]
        attn_flags = ["-gqa", str(self.kv_heads)] if self.kv_heads else ATTENTION[self.attn][2]
        out += attn_flags + LAYOUT_FLAGS[self.layout] + self.shape.flags()
        return out + mask_flags(self.mask, self.shape.s) + list(self.extra)

    @property
    def id(self) -> str:
        parts = [self.kernel["name"], self.mask, self.layout, self.attn, self.shape.tag]
        if self.heads:
            parts.insert(4, f"h{self.h}x{self.h_kv}")
        return "-".join(parts + ([self.tag] if self.tag else []))

    @property
    def config(self) -> str:
        """The problem without the kernel, heads included: with the kernel's name, a perf
        baseline's key (independent of pytest's parametrisation order)."""
        parts = [self.mask, self.layout, self.attn, f"h{self.h}", self.shape.tag]
        if self.kv_heads:
            parts.insert(4, f"hkv{self.h_kv}")
        return "-".join(parts + ([self.tag] if self.tag else []))


def valid(kernel: dict, layout: str, shape: Shape) -> bool:
    # Packed QKV stores a token's q, k and v side by side, so it needs s_q == s and dv == d;
    # contiguous Q + KV stores k and v side by side, so it needs dv == d.
    if layout == "packed_qkv" and shape.s_q is not None:
        return False
    return layout == "separate_q_k_v" or kernel["dv"] == kernel["d"]


# Decode (family with max_s_q): query lengths, KV lengths and query heads per KV head
# (h = 32 over 32, 8, 4, 1 KV heads: GQA ratios 1, 4, 8, 32), as issue #5 lists them.
DECODE_S_Q = (1, 2, 4, 16)
DECODE_S_KV = (1, 2, 3, 17, 1000, 4097, 65536)
DECODE_HEADS = 32
DECODE_KV_HEADS = (32, 8, 4, 1)


# Paged KV cache (-paged-kv): each block size on a ragged tile, var-len lengths down to one
# token, chunked prefill (s_q < s over var-len caches) and padded Q storage, rotating between
# kernels; the driver places the blocks in a random order and poisons the spare ones.
PAGED_TOKENS = (16, 32, 64, 128)
PAGED_SHAPES = (Shape(3, 257), Shape(4, 700, min_s=1), Shape(3, 1000, s_q=77, min_s=300),
                Shape(3, 200, s_q=50, min_s=60, pad_s=True))
PAGED_DECODE_S_KV = (17, 1000, 4097)


def paged_case(kernel: dict, mask: str, attn: str, shape: Shape, tokens: int, h_kv: int = 0, h: int = 0) -> Case:
    extra = ("-tokens-per-block", str(tokens))
    if h:
        return heads_case(kernel, mask, "q_paged_kv", shape, h_kv, extra, f"tpb{tokens}", h=h)
    return Case(kernel, mask, "q_paged_kv", attn, shape, extra, f"tpb{tokens}")


def paged_cases(kernel: dict, index: int, brief: bool) -> list[Case]:
    """A kernel's paged-KV runs: every block size (one, rotating, for a brief kernel), each on
    the next shape, mask and attention type."""
    if "paged_kv" not in kernel["variants"]:
        return []
    masks, attns = kernel["masks"], list(ATTENTION)
    js = [index % len(PAGED_TOKENS)] if brief else range(len(PAGED_TOKENS))
    return [paged_case(kernel, masks[(index + j) % len(masks)], attns[(index + j) % len(attns)],
                       PAGED_SHAPES[(index + j) % len(PAGED_SHAPES)], PAGED_TOKENS[j]) for j in js]


def heads_case(kernel: dict, mask: str, layout: str, shape: Shape, h_kv: int, extra: tuple = (),
               tag: str = "", h: int = DECODE_HEADS) -> Case:
    """A case with h query heads over h_kv KV heads: attention type mha, mqa or gqa from the ratio."""
    attn = "mha" if h_kv == h else ("mqa" if h_kv == 1 else "gqa")
    return Case(kernel, mask, layout, attn, shape, extra, tag, heads=h, kv_heads=h_kv if attn == "gqa" else 0)


def decode_cases(kernel: dict, index: int) -> list[Case]:
    """A decode kernel's runs: only problems it holds (query rows per KV head <= its
    max_rows; 0: it tiles any), over the s_q x s_kv x GQA grid (every s_kv, also below the
    kernel's min_s_kv, since -kernel runs it on any length), var-len KV (packed and padded),
    both masks, the layouts that allow s_q < s, each length once per kernel with the
    (s_q, GQA) pairs rotating between kernels."""
    rows_cap = kernel["max_rows"] or None
    combos = [(sq, hkv) for sq in DECODE_S_Q for hkv in DECODE_KV_HEADS
              if rows_cap is None or DECODE_HEADS // hkv * sq <= rows_cap]
    if not combos:
        return []
    layouts = ("separate_q_k_v", "contiguous_q_kv")
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
    # the mma path beyond one wave of CTAs (160 units: 3 splits of 6720 keys, 480 CTAs in 4 waves
    # of 132, or 2 of 10048 where 3 CTAs fit an SM): var-len from 3000 keys, so some sequences
    # fill one split, some two or three
    if decode_is_mma(KernelSpec.parse(kernel["name"], masks=tuple(kernel["masks"]))):
        cases.append(heads_case(kernel, "padding", "separate_q_k_v", Shape(20, 20000, s_q=1, min_s=3000), 8,
                                tag="beyond_one_wave"))
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
                                DECODE_HEADS))
        for j, s_kv in enumerate(PAGED_DECODE_S_KV):
            sq, hkv = combos[-1 - (index + j) % len(combos)]  # from the most rows down
            shape = Shape(3, s_kv, s_q=min(sq, s_kv), min_s=1 if s_kv > 1000 else None)
            cases.append(paged_case(kernel, kernel["masks"][(index + j) % len(kernel["masks"])], "", shape,
                                    PAGED_TOKENS[(index + j + 1) % 4], hkv, DECODE_HEADS))
    return cases


def cases_for(kernel: dict, index: int) -> list[Case]:
    """The runs of one kernel. Each (mask, shape) takes the next valid (layout, attention)
    pair from PAIRS, starting at an offset that depends on the kernel's index, so that across
    kernels every shape meets every pair. Large shapes run under one mask per kernel,
    alternating between kernels."""
    if FAMILIES[kernel["family"]].max_s_q:
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
    return cases + paged_cases(kernel, index, brief=False)


def build_cases(kernels: list[dict]) -> list[Case]:
    seen, cases = set(), []
    for index, kernel in enumerate(sorted(kernels, key=lambda k: k["name"])):
        for case in cases_for(kernel, index):
            key = (kernel["name"], tuple(case.args()))
            if key not in seen:  # the same command line twice tests nothing new
                seen.add(key)
                cases.append(case)
    return cases


CASES = build_cases(KERNELS)


def slow_if_large(case: Case):
    return [pytest.mark.slow] if case.shape.large else []


# ---------------------------------------------------------------------------------------------
# Fixtures.

# A -list-kernels row starts with the kernel's name.
LIST_ROW_RE = re.compile(r"^(fmha_v2_\w+)\s", re.M)


def registry_names(exe: Path) -> set[str]:
    proc = run_fmha(exe, ["-list-kernels"])
    assert proc.returncode == 0, describe(proc)
    return set(LIST_ROW_RE.findall(proc.stdout))


@pytest.fixture(scope="module")
def exe() -> Path:
    """The binary of the build the manifest describes ($FMHA_EXE, else bin/ beside generated/),
    checked to hold exactly the manifest's kernels: a stale binary would make every result
    here mean something else. (conftest's fmha_exe may build a small subset instead; that
    one cannot match the manifest, so this tier does not use it.)"""
    path = Path(os.environ.get("FMHA_EXE") or manifest_path().parent.parent / "bin" / "fmha.exe")
    if not path.is_file():
        pytest.skip(f"{path} is not built: run `make -j`")
    built, listed = registry_names(path), {k["name"] for k in KERNELS}
    if built != listed:
        pytest.fail(f"{path} and {manifest_path()} disagree (only in the binary: {sorted(built - listed)}, "
                    f"only in the manifest: {sorted(listed - built)}): run `make -j`", pytrace=False)
    return path


@pytest.fixture(scope="session")
def perf_record(perf_rows):
    """Appends one run to the session's perf table (conftest.py writes it with --perf-csv and
    compares its -m perf rows with --perf-baseline). `runs`: how many runs `fields` is the
    best of."""

    def record(node: pytest.Item, case: Case, fields: dict, runs: int = 1):
        k = case.kernel
        perf_rows.append({
            "test": node.name, "perf": node.get_closest_marker("perf") is not None,
            "config": case.config, "runs": runs, "kernel": k["name"], "dtype": k["dtype"], "acc": k["acc"],
            "d": k["d"], "dv": k["dv"], "mask": case.mask, "layout": case.layout, "attn": case.attn,
            "b": case.shape.b, "h": case.h, "h_kv": case.h_kv, "s": case.shape.s,
            "s_q": case.shape.s_q or case.shape.s, "min_s": case.shape.min_s, "pad_s": case.shape.pad_s,
            "extra": " ".join(case.extra), "us": float(fields["us"]),
            "tflops": float(fields["tflops"]), "gbs": float(fields["gbs"]),
            "speedup": float(fields["speedup"]) if "speedup" in fields else float("nan"),
        })
    return record


ARCH_RE = re.compile(r"(?P<major>\d+)\.(?P<minor>\d)(?P<suffix>[af]?)(?P<ptx>\+PTX)?")


def loads_on(arch: str, gpu_sm: int) -> bool:
    """Whether code built for `arch` (a TORCH_CUDA_ARCH_LIST entry) runs on an sm_<gpu_sm>:
    SASS runs on the same major at an equal or higher minor ('a' archs: that one GPU only),
    PTX on anything at or above it."""
    m = ARCH_RE.fullmatch(arch)
    number = int(m["major"]) * 10 + int(m["minor"])
    if m["ptx"] and number <= gpu_sm:
        return True
    if m["suffix"] == "a":
        return number == gpu_sm
    return number // 10 == gpu_sm // 10 and number <= gpu_sm


def require_arch(kernel: dict, gpu_sm: int):
    archs = kernel.get("archs") or [f"{kernel['sm'] // 10}.{kernel['sm'] % 10}+PTX"]
    if kernel["sm"] > gpu_sm or not any(loads_on(a, gpu_sm) for a in archs):
        pytest.skip(f"{kernel['name']} was built for {', '.join(archs)}: nothing runs on sm_{gpu_sm}")


# ---------------------------------------------------------------------------------------------
# The kernel x case matrix.

@pytest.mark.gpu
@pytest.mark.parametrize("case", [pytest.param(c, id=c.id, marks=slow_if_large(c)) for c in CASES])
def test_kernel(case: Case, exe, gpu_sm, perf_record, request):
    require_arch(case.kernel, gpu_sm)
    proc = run_fmha(exe, [*case.args(), "-kernel", case.kernel["name"],
                          "-v", "0", "-runs", "1", "-warm-up-runs", "0"])
    assert proc.returncode == 0, describe(proc)
    fields = parse_output(proc.stdout)
    assert fields["checks"] == "SUCCESS", describe(proc)
    assert fields["kernel"] == case.kernel["name"], describe(proc)
    # The first line reports the problem we asked for.
    k, shape = case.kernel, case.shape
    expected = {
        "s": shape.s, "s_q": shape.s_q or shape.s, "b": shape.b, "h": case.h, "h_kv": case.h_kv,
        "d": k["d"], "dv": k["dv"], "dtype": dtype_label(k), "mask": case.mask,
        "attn": case.attn, "qkv_layout": case.layout, "wm": k["warps_m"], "wn": k["warps_n"],
        "warp_spec": warp_spec(k),
    }
    got = {key: type(value)(fields[key]) for key, value in expected.items()}
    assert got == expected, describe(proc)
    perf_record(request.node, case, fields)


# ---------------------------------------------------------------------------------------------
# Registry, output format, exit code 1.

def test_binary_holds_the_manifest_kernels(exe):
    # Needs no GPU: -list-kernels prints the registry. The check itself is in the fixture.
    assert registry_names(exe) == {k["name"] for k in KERNELS}


def pick_kernel(dtype: str = "fp16", acc: str | None = None, mask: str = "causal",
                family: str | None = None) -> dict | None:
    """The smallest-head kernel of a dtype (and family) that supports `mask` (deterministic).
    Without a family, a prefill kernel: the callers' problems have s_q = s, beyond decode's."""
    fits = [k for k in KERNELS if k["dtype"] == dtype and (acc is None or k["acc"] == acc) and mask in k["masks"]
            and (k["family"] == family if family is not None else not FAMILIES[k["family"]].max_s_q)]
    return min(fits, key=lambda k: (k["d"], k["dv"], k["name"])) if fits else None


def kernel_or_skip(**kw) -> dict:
    kernel = pick_kernel(**kw)
    if kernel is None:
        pytest.skip(f"no kernel in the build fits {kw}")
    return kernel


@pytest.mark.gpu
def test_compact_output_is_exactly_the_spec_format(exe, gpu_sm):
    kernel = kernel_or_skip(dtype="fp16", acc="fp16")
    require_arch(kernel, gpu_sm)
    d, wm, wn = kernel["d"], kernel["warps_m"], kernel["warps_n"]
    proc = run_fmha(exe, ["-d", str(d), "-b", "2", "-h", "4", "-s", "128", "-fp16", "-causal-mask",
                          "-kernel", kernel["name"], "-v", "0", "-runs", "2", "-warm-up-runs", "1"])
    assert proc.returncode == 0, describe(proc)
    lines = proc.stdout.splitlines()
    assert len(lines) == 4, describe(proc)
    assert lines[0] == (
        f"v1=0 il=0 s_q=128, s=128 b=2 h=4/4 d={d}/{d} dtype=FP16, output_dtype=FP16, flash_attn=true,"
        f" warp_spec={warp_spec(kernel)}, mask=causal, alibi=false, attn=mha, qkv_layout=packed_qkv, wm={wm} wn={wn}"
    )
    for regex, line in zip(COMPACT_LINES[1:], lines[1:]):
        assert regex.fullmatch(line), f"{line!r} does not match /{regex.pattern}/"
    assert lines[1] == f"Kernel........: {kernel['name']}"
    assert lines[2] == "Checks........: SUCCESS"


@pytest.mark.gpu
def test_skip_checks_prints_disabled_and_no_speedup(exe, gpu_sm):
    kernel = kernel_or_skip(dtype="fp16")
    require_arch(kernel, gpu_sm)
    proc = run_fmha(exe, ["-d", str(kernel["d"]), "-b", "2", "-h", "4", "-s", "256", dtype_flag(kernel),
                          "-kernel", kernel["name"], "-skip-checks", "-v", "0"])
    assert proc.returncode == 0, describe(proc)
    fields = parse_output(proc.stdout)
    assert fields["checks"] == "DISABLED"
    assert "(n/a)" in proc.stdout and "speedup" not in fields


@pytest.mark.gpu
def test_force_non_warp_specialization_runs_a_flash_row(exe, gpu_sm):
    """Without -kernel the first registry row that fits and loads runs: the ws row of its
    problem on Hopper (a non-Hopper GPU has no sm_90a image and falls through to the next
    row). -force-non-warp-specialization skips the ws row on any GPU."""
    ws = sorted((k for k in KERNELS if FAMILIES[k["family"]].warp_specialized), key=lambda k: (k["d"], k["name"]))
    if not ws:
        pytest.skip("no warp-specialised kernel in this build (TORCH_CUDA_ARCH_LIST without 9.0, or FMHA_FILTER)")
    kernel = ws[0]

    def fits(k: dict) -> bool:
        return all(k[f] == kernel[f] for f in ("dtype", "acc", "d", "dv")) and "causal" in k["masks"]

    # The manifest lists the kernels in registry order: the first fit is what dispatch picks
    # (decode rows serve s_q <= 16 only, not this problem's 257).
    others = [k for k in KERNELS if fits(k) and not FAMILIES[k["family"]].warp_specialized
              and not FAMILIES[k["family"]].max_s_q]
    if not others:
        pytest.skip(f"no non-warp-specialised kernel in this build fits {kernel['name']}'s problem")
    flash = others[0]
    loads = kernel["sm"] <= gpu_sm and any(loads_on(a, gpu_sm) for a in kernel["archs"])
    args = ["-d", str(kernel["d"]), "-dv", str(kernel["dv"]), dtype_flag(kernel), "-b", "2", "-h", "4",
            "-s", "257", "-causal-mask", "-v", "0", "-runs", "1", "-warm-up-runs", "0"]
    for extra, expected in (([], kernel if loads else flash), (["-force-non-warp-specialization"], flash)):
        proc = run_fmha(exe, [*args, *extra])
        assert proc.returncode == 0, describe(proc)
        fields = parse_output(proc.stdout)
        assert fields["checks"] == "SUCCESS", describe(proc)
        assert fields["kernel"] == expected["name"], describe(proc)
        assert fields["warp_spec"] == warp_spec(expected), describe(proc)
        assert (int(fields["wm"]), int(fields["wn"])) == (expected["warps_m"], expected["warps_n"]), describe(proc)
    assert warp_spec(flash) == "false"


@pytest.mark.gpu
def test_fp16_problem_takes_fp32_accumulation_on_the_ws_family(exe, gpu_sm):
    """-fp16 asks for at least fp16 accumulation: on Hopper the ws fp16 kernel (fp32
    accumulation, first in the registry) serves it; without warp specialisation the flash
    family's fp16-accumulating kernel does."""
    ws = pick_kernel(dtype="fp16", acc="fp32", family="ws")
    if ws is None or not any(loads_on(a, gpu_sm) for a in ws["archs"]):
        pytest.skip("no ws fp16 kernel for this GPU in this build")
    flash = next((k for k in KERNELS if k["family"] == "flash" and k["dtype"] == "fp16" and k["acc"] == "fp16"
                  and k["d"] == ws["d"] and k["dv"] == ws["dv"]), None)
    args = ["-d", str(ws["d"]), "-fp16", "-b", "2", "-h", "4", "-s", "300", "-causal-mask", "-v", "0",
            "-runs", "1", "-warm-up-runs", "0"]
    for extra, expected in (([], ws), (["-force-non-warp-specialization"], flash)):
        if expected is None:
            continue
        proc = run_fmha(exe, [*args, *extra])
        assert proc.returncode == 0, describe(proc)
        fields = parse_output(proc.stdout)
        assert fields["checks"] == "SUCCESS" and fields["kernel"] == expected["name"], describe(proc)


@pytest.mark.gpu
def test_use_tma_runs_a_tma_row_or_says_none_fits(exe, gpu_sm):
    """-use-tma keeps only the families that load through TMA (ws): on Hopper it runs one;
    on a GPU where no such kernel loads it exits 2 with the reason."""
    ws = pick_kernel(dtype="bf16", family="ws")
    if ws is None:
        pytest.skip("no TMA kernel in this build")
    proc = run_fmha(exe, ["-d", str(ws["d"]), "-bf16", "-b", "2", "-h", "4", "-s", "200", "-use-tma",
                          "-v", "0", "-runs", "1", "-warm-up-runs", "0"])
    if any(loads_on(a, gpu_sm) for a in ws["archs"]):
        assert proc.returncode == 0, describe(proc)
        fields = parse_output(proc.stdout)
        assert fields["checks"] == "SUCCESS" and fields["kernel"] == ws["name"], describe(proc)
    else:
        assert proc.returncode == 2 and "no kernel fits" in proc.stderr, describe(proc)


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["softcap", "alibi", "bias", "sinks", "softmax_stats", "paged_kv"])
def test_variants_run_on_the_ws_family_on_hopper(name, exe, gpu_sm):
    """Every variant of the ws family (generator/spec.py) keeps a Hopper problem on it: dispatch
    takes the first row that has the variant, and the ws row comes first."""
    variant = SAVE_VARIANT_FLAGS[name] + (" 30" if name == "softcap" else "")
    having = [k for k in KERNELS if k["family"] == "ws" and k["dtype"] == "bf16" and name in k["variants"]]
    ws = min(having, key=lambda k: (k["d"], k["name"]), default=None)
    if ws is None or not any(loads_on(a, gpu_sm) for a in ws["archs"]):
        pytest.skip(f"no ws kernel with {name} for this GPU in this build")
    proc = run_fmha(exe, ["-d", str(ws["d"]), "-bf16", "-b", "2", "-h", "6", "-s", "333", "-causal-mask",
                          *variant.split(), "-v", "0", "-runs", "1", "-warm-up-runs", "0"])
    assert proc.returncode == 0, describe(proc)
    fields = parse_output(proc.stdout)
    assert fields["checks"] == "SUCCESS" and fields["kernel"] == ws["name"], describe(proc)
    assert fields["alibi"] == ("true" if variant == "-alibi" else "false"), describe(proc)


@pytest.mark.gpu
def test_few_query_rows_dispatch_to_the_decode_family(exe, gpu_sm):
    """Without -kernel: s_q <= 16 takes a decode row. A cache of at least a row's min_s_kv
    keys takes that row (the mma path); a shorter one the warp-path row with the fewest rows
    per warp that holds h / h_kv * s_q (here 32 / 8 * 1 = 4); s_q = 17 goes to a prefill family."""
    dec = [k for k in KERNELS if FAMILIES[k["family"]].max_s_q and k["dtype"] == "bf16" and k["d"] == 128]
    long_rows = [k for k in dec if k["min_s_kv"]]
    short_rows = [k for k in dec if not k["min_s_kv"] and (k["max_rows"] == 0 or k["max_rows"] >= 4)]
    if not long_rows or not short_rows:
        pytest.skip("no bf16 d=128 decode kernels of both paths in this build")
    require_arch(dec[0], gpu_sm)
    base = ["-d", "128", "-bf16", "-b", "2", "-h", "32", "-gqa", "8", "-separate-q-k-v",
            "-v", "0", "-runs", "1", "-warm-up-runs", "0"]
    long_s = max(k["min_s_kv"] for k in long_rows)
    for s, expected in ((long_s, long_rows[0]),
                        (long_s - 1, min(short_rows, key=lambda k: k["max_rows"] or 1 << 30))):
        proc = run_fmha(exe, [*base, "-s", str(s), "-s-q", "1"])
        assert proc.returncode == 0, describe(proc)
        fields = parse_output(proc.stdout)
        assert fields["checks"] == "SUCCESS" and fields["kernel"] == expected["name"], describe(proc)
    if not any(not FAMILIES[k["family"]].max_s_q and k["dtype"] == "bf16" and k["d"] == 128 for k in KERNELS):
        return  # no prefill kernel for s_q = 17 in this build
    proc = run_fmha(exe, [*base, "-s", "2000", "-s-q", "17"])
    assert proc.returncode == 0, describe(proc)
    assert "_decode_" not in parse_output(proc.stdout)["kernel"], describe(proc)


@pytest.mark.gpu
def test_failed_check_exits_1(exe, gpu_sm):
    # fp16 output can never be within 1e-9 of an fp32 reference on random data.
    kernel = kernel_or_skip(dtype="fp16", acc="fp16")
    require_arch(kernel, gpu_sm)
    proc = run_fmha(exe, ["-d", str(kernel["d"]), "-b", "2", "-h", "4", "-s", "128", "-fp16",
                          "-kernel", kernel["name"], "-epsilon", "1e-9", "-v", "0"])
    assert proc.returncode == 1, describe(proc)
    assert parse_output(proc.stdout)["checks"] == "FAILED", describe(proc)


# ---------------------------------------------------------------------------------------------
# -save-tensors, re-checked in float64 here.

DEFAULT_EPSILON = {"fp16": 0.015, "bf16": 0.025}

SAVE_CONFIGS = {
    "padding_fixed": ["-b", "2", "-h", "4", "-s", "77"],
    "causal_varlen": ["-b", "3", "-h", "4", "-s", "150", "-min-s", "20", "-causal-mask", "-save-softmax"],
    "gqa_pad_s": ["-b", "3", "-h", "8", "-gqa", "2", "-s", "130", "-min-s", "40", "-pad-s", "-contiguous-q-kv"],
    "causal_sq_lt_s": ["-b", "2", "-h", "4", "-s", "200", "-s-q", "33", "-causal-mask", "-separate-q-k-v"],
    "mqa_causal_scales": ["-b", "2", "-h", "4", "-mqa", "-s", "96", "-causal-mask", "-randn",
                          "-scale-bmm1", "0.07", "-scale-bmm2", "0.8"],
    "softcap_causal": ["-b", "2", "-h", "4", "-s", "150", "-min-s", "30", "-causal-mask", "-randn",
                       "-softcapping-scale-bmm1", "2"],
    "sliding_window_varlen": ["-b", "3", "-h", "4", "-s", "300", "-min-s", "90", "-sliding-window-size", "70",
                              "-randn"],
    "bidirectional_window_sq_lt_s": ["-b", "2", "-h", "8", "-gqa", "2", "-s", "260", "-s-q", "130",
                                     "-sliding-window-size", "45", "-bidirectional-sliding-window-mask",
                                     "-separate-q-k-v"],
    "chunked_varlen": ["-b", "3", "-h", "4", "-s", "400", "-min-s", "100", "-chunked-attention-size", "64",
                       "-contiguous-q-kv"],
    "sinks_window": ["-b", "3", "-h", "8", "-gqa", "4", "-s", "200", "-min-s", "1", "-sliding-window-size", "50",
                     "-use-attention-sinks", "-randn", "-save-softmax"],
    # 12 heads: the slopes of a head count that is not a power of two; s_q < s shifts the positions
    "alibi_causal_gqa": ["-b", "3", "-h", "12", "-gqa", "4", "-s", "180", "-min-s", "40", "-s-q", "60",
                         "-causal-mask", "-alibi", "-randn", "-separate-q-k-v"],
    "alibi_padding": ["-b", "2", "-h", "6", "-s", "100", "-alibi", "-randn", "-save-softmax"],
    # a bias per (sequence, head), and one broadcast over the batch with GQA and s_q < s
    "bias_causal_varlen": ["-b", "3", "-h", "4", "-s", "150", "-min-s", "20", "-causal-mask", "-attention-bias",
                           "-randn", "-save-softmax"],
    "bias_broadcast_gqa": ["-b", "2", "-h", "8", "-gqa", "2", "-s", "170", "-s-q", "90", "-attention-bias",
                           "-attention-bias-shape", "1h", "-separate-q-k-v"],
    # random bits: rows that see few keys or none (var-len down to 1 key), with sinks and the LSE
    "custom_mask_varlen": ["-b", "3", "-h", "4", "-s", "200", "-min-s", "1", "-custom-mask", "-randn",
                           "-use-attention-sinks", "-save-softmax"],
    "custom_mask_sq_lt_s": ["-b", "2", "-h", "8", "-gqa", "4", "-s", "300", "-s-q", "100", "-custom-mask",
                            "-contiguous-q-kv"],
    # MLA head sizes (d != dv, MLA_CONFIGS): the family's kernel with dv != d
    "mla_causal_varlen": ["-b", "3", "-h", "8", "-gqa", "2", "-s", "260", "-min-s", "30", "-causal-mask", "-randn",
                          "-separate-q-k-v", "-save-softmax"],
    # a paged KV cache: small blocks over var-len caches down to one token, with GQA and the
    # LSE; chunked prefill (s_q < s) in blocks larger than a key tile; MLA's two head sizes
    "paged_causal_varlen": ["-b", "3", "-h", "8", "-gqa", "2", "-s", "300", "-min-s", "1", "-causal-mask",
                            "-paged-kv", "-tokens-per-block", "16", "-randn", "-save-softmax"],
    "paged_chunked_prefill": ["-b", "3", "-h", "4", "-mqa", "-s", "700", "-min-s", "200", "-s-q", "64",
                              "-causal-mask", "-paged-kv", "-tokens-per-block", "128", "-use-attention-sinks"],
    "mla_paged": ["-b", "2", "-h", "4", "-s", "333", "-min-s", "100", "-s-q", "90", "-paged-kv",
                  "-tokens-per-block", "32", "-randn"],
    # a head size fmha_v2 serves beyond the powers of two (ODD_HEAD_CONFIGS)
    "odd_head_size_varlen": ["-b", "3", "-h", "6", "-gqa", "3", "-s", "180", "-min-s", "20", "-causal-mask",
                             "-randn", "-contiguous-q-kv", "-save-softmax"],
}
# The same configurations for a family that serves only a few query rows (decode): s_q <= 16, with key
# splits (s up to 3000), GQA/MQA packing and causal rows on the diagonal.
SAVE_CONFIGS_FEW_ROWS = {
    "padding_fixed": ["-b", "2", "-h", "4", "-s", "77", "-s-q", "1", "-separate-q-k-v"],
    "causal_varlen": ["-b", "3", "-h", "4", "-s", "3000", "-min-s", "20", "-s-q", "5", "-causal-mask",
                      "-separate-q-k-v", "-save-softmax"],
    "gqa_pad_s": ["-b", "3", "-h", "8", "-gqa", "2", "-s", "1300", "-min-s", "40", "-pad-s", "-s-q", "2",
                  "-contiguous-q-kv"],
    "causal_sq_lt_s": ["-b", "2", "-h", "4", "-s", "200", "-s-q", "16", "-causal-mask", "-separate-q-k-v"],
    "mqa_causal_scales": ["-b", "2", "-h", "4", "-mqa", "-s", "960", "-s-q", "3", "-causal-mask", "-randn",
                          "-scale-bmm1", "0.07", "-scale-bmm2", "0.8", "-separate-q-k-v"],
    "softcap_causal": ["-b", "3", "-h", "8", "-gqa", "2", "-s", "1300", "-min-s", "2", "-s-q", "2", "-causal-mask",
                       "-randn", "-softcapping-scale-bmm1", "2", "-separate-q-k-v"],
    "sliding_window_varlen": ["-b", "3", "-h", "8", "-gqa", "2", "-s", "3000", "-min-s", "200", "-s-q", "4",
                              "-sliding-window-size", "700", "-randn", "-separate-q-k-v"],
    "bidirectional_window_sq_lt_s": ["-b", "2", "-h", "4", "-s", "1300", "-s-q", "16", "-sliding-window-size", "9",
                                     "-bidirectional-sliding-window-mask", "-separate-q-k-v"],
    "chunked_varlen": ["-b", "3", "-h", "4", "-mqa", "-s", "3000", "-min-s", "100", "-s-q", "7",
                       "-chunked-attention-size", "256", "-contiguous-q-kv"],
    "sinks_window": ["-b", "3", "-h", "8", "-gqa", "4", "-s", "2500", "-min-s", "1", "-s-q", "3",
                     "-sliding-window-size", "600", "-use-attention-sinks", "-randn", "-separate-q-k-v",
                     "-save-softmax"],
    "alibi_causal_gqa": ["-b", "3", "-h", "12", "-gqa", "4", "-s", "1500", "-min-s", "40", "-s-q", "4",
                         "-causal-mask", "-alibi", "-randn", "-separate-q-k-v"],
    "alibi_padding": ["-b", "2", "-h", "6", "-s", "900", "-s-q", "2", "-alibi", "-randn", "-separate-q-k-v",
                      "-save-softmax"],
    "bias_causal_varlen": ["-b", "3", "-h", "8", "-gqa", "2", "-s", "2000", "-min-s", "20", "-s-q", "4",
                           "-causal-mask", "-attention-bias", "-randn", "-separate-q-k-v", "-save-softmax"],
    "bias_broadcast_gqa": ["-b", "2", "-h", "8", "-gqa", "2", "-s", "1200", "-s-q", "3", "-attention-bias",
                           "-attention-bias-shape", "b1", "-separate-q-k-v"],
    "custom_mask_varlen": ["-b", "3", "-h", "8", "-gqa", "2", "-s", "2500", "-min-s", "1", "-s-q", "5",
                           "-custom-mask", "-randn", "-use-attention-sinks", "-separate-q-k-v", "-save-softmax"],
    "custom_mask_sq_lt_s": ["-b", "2", "-h", "8", "-gqa", "4", "-s", "300", "-s-q", "16", "-custom-mask",
                            "-contiguous-q-kv"],
    "mla_causal_varlen": ["-b", "3", "-h", "8", "-gqa", "2", "-s", "2000", "-min-s", "30", "-s-q", "4",
                          "-causal-mask", "-randn", "-separate-q-k-v", "-save-softmax"],
    "paged_causal_varlen": ["-b", "3", "-h", "8", "-gqa", "2", "-s", "3000", "-min-s", "1", "-s-q", "4",
                            "-causal-mask", "-paged-kv", "-tokens-per-block", "16", "-randn", "-save-softmax"],
    "paged_chunked_prefill": ["-b", "3", "-h", "4", "-mqa", "-s", "1300", "-min-s", "200", "-s-q", "16",
                              "-causal-mask", "-paged-kv", "-tokens-per-block", "128", "-use-attention-sinks"],
    "mla_paged": ["-b", "2", "-h", "4", "-s", "1333", "-min-s", "100", "-s-q", "9", "-paged-kv",
                  "-tokens-per-block", "32", "-randn"],
    "odd_head_size_varlen": ["-b", "3", "-h", "6", "-gqa", "3", "-s", "1200", "-min-s", "20", "-s-q", "4",
                             "-causal-mask", "-randn", "-contiguous-q-kv", "-save-softmax"],
}
# Configurations that run a kernel whose V head size differs from Q's (MLA: d=192, dv=128).
MLA_CONFIGS = ("mla_causal_varlen", "mla_paged")
# Configurations that run the family's smallest kernel of a head size fmha_v2 serves beyond the
# powers of two (ODD_HEAD_SIZES, the bench's `heads` suite; 192 is MLA's, above).
ODD_HEAD_CONFIGS = ("odd_head_size_varlen",)


# The flag of each run-time variant in SAVE_CONFIGS.
SAVE_VARIANT_FLAGS = {"softcap": "-softcapping-scale-bmm1", "alibi": "-alibi", "bias": "-attention-bias",
                      "sinks": "-use-attention-sinks", "softmax_stats": "-save-softmax", "paged_kv": "-paged-kv"}


def save_path(kernel: dict) -> str:
    """The decode family's two paths (mma: warps along keys; warp: one warp per unit), each
    re-checked on its own; '' for families with one path."""
    if not FAMILIES[kernel["family"]].max_s_q:
        return ""
    return "mma" if decode_is_mma(KernelSpec.parse(kernel["name"], masks=tuple(kernel["masks"]))) else "warp"


# Every (family, dtype, accumulation, path) of the build, so each family's output is re-checked.
SAVE_KINDS = sorted({(k["family"], k["dtype"], k["acc"], save_path(k)) for k in KERNELS})


def spec_error(found: np.ndarray, expected: np.ndarray, eps: float) -> np.ndarray:
    """SPEC.md's per-element error: relative |a-b|/(|a|+|b|), absolute where |a|+|b| <= eps;
    NaN anywhere counts as infinitely wrong."""
    a, b = found.astype(np.float64), expected.astype(np.float64)
    diff, size = np.abs(a - b), np.abs(a) + np.abs(b)
    err = np.where(size <= eps, diff, diff / np.where(size == 0, 1, size))
    return np.where(np.isnan(a) | np.isnan(b), np.inf, err)


REF_REL_L2 = 1e-4  # the driver's fp32 reference against float64, relative L2
LSE_TOLERANCE = 1e-3  # a row's log-sum-exp, absolute (src/check.h kLseTolerance)


def round_to(x, dtype):
    """x (float64) rounded once, to nearest even, to fp16 or bf16, returned as float64. (Through
    float32 first would round twice: a value just off a bf16 midpoint can land on it and tie
    the other way; the driver's reference rounds float64 P once.)"""
    x = np.asarray(x, dtype=np.float64)
    if dtype == "fp16":
        return x.astype(np.float16).astype(np.float64)  # numpy rounds float64 -> half directly
    mant, exp = np.frexp(x)  # x = mant * 2^exp, 0.5 <= |mant| < 1: bf16 keeps 8 significant bits
    return np.ldexp(np.round(mant * 256.0) / 256.0, exp)  # np.round: ties to even


def visible_fp64(meta: dict, lq: int, lk: int, custom=None) -> np.ndarray:
    """[lq, lk] booleans: which keys each query row sees under meta.json's mask. Query row r
    sits at key position p = r + lk - lq (Q holds the last lq tokens). custom: the sequence's
    [s_q, s] slice of custom_mask.npy (mask "custom")."""
    pos = np.arange(lq)[:, None] + (lk - lq)
    key = np.arange(lk)[None, :]
    mask = meta["mask"]
    if mask == "padding":
        return np.ones((lq, lk), dtype=bool)
    if mask == "custom":                # the saved bits, as they are
        return custom[:lq, :lk] != 0
    if mask == "causal":
        return key <= pos
    if mask == "sliding_window":        # the window's W keys end at the row's own position
        return (key <= pos) & (key > pos - meta["sliding_window_size"])
    if mask == "bidirectional_sliding_window":  # W - 1 keys on either side of it
        return np.abs(key - pos) < meta["sliding_window_size"]
    if mask == "chunked":               # causal inside the row's chunk of C keys
        c = meta["chunked_attention_size"]
        return (key <= pos) & (key // c == pos // c)
    raise ValueError(f"meta.json mask {mask!r} has no formula here")


AMBIGUITY = 2.0 ** -16  # relative distance from a rounding edge where a kernel's fp32 P may round either way


def alibi_slopes_fp64(h: int) -> np.ndarray:
    """The ALiBi paper's slopes for h heads (Press et al., its reference code): a geometric
    sequence starting at 2^(-8/n) for n a power of two; otherwise those of the largest power
    of two below h, then every other slope of twice that many heads."""
    def power_of_2(n):
        start = 2.0 ** (-(2.0 ** -(math.log2(n) - 3)))
        return [start * start ** i for i in range(n)]
    if math.log2(h).is_integer():
        return np.array(power_of_2(h))
    closest = 2 ** math.floor(math.log2(h))
    return np.array(power_of_2(closest) + list(alibi_slopes_fp64(2 * closest)[0::2][:h - closest]))


def test_alibi_slopes_fp64_are_the_papers():
    """The paper's examples: 8 heads 1/2 .. 1/256; 12 heads add the odd slopes of 16 heads."""
    assert np.allclose(alibi_slopes_fp64(8), 2.0 ** -np.arange(1, 9))
    assert np.allclose(alibi_slopes_fp64(12), np.r_[2.0 ** -np.arange(1, 9), 2.0 ** -np.array([0.5, 1.5, 2.5, 3.5])])
    assert np.allclose(alibi_slopes_fp64(1), [2.0 ** -8])


def attention_fp64(q, k, v, q_lens, kv_lens, scale_bmm1, scale_out, visible, dtype, softcap=0.0, sinks=None,
                   alibi=None, bias=None):
    """Plain softmax attention per sequence in float64. q [b, s_q, h, d], k [b, s, h_kv, d],
    v [b, s, h_kv, dv]; visible(i, lq, lk) gives the [lq, lk] keys each query row of sequence
    i may see (None: all of them). A row that sees no key is 0. sinks [h] (gpt-oss attention
    sinks): a logit per query head that joins each row's denominator, exp(sink), and nothing
    else. alibi [h]: ALiBi slopes, the logit of query row r and key j less slope *
    |r + lk - lq - j|. bias [b or 1, h or 1, s_q, s]: added to the logits.
    The probabilities that multiply V are rounded to the input dtype, as a tensor-core
    kernel feeds them to P·V (the normaliser uses them unrounded): otherwise a row that
    averages a few nearly cancelling values fails bf16's relative check on that alone.
    Rounding at a power-of-two scale gives the same bits whatever the scale, so this is the
    same P as the kernel's and the driver's reference, computed independently.
    Returns (out, amb, lse): amb bounds how far the P within AMBIGUITY of a rounding edge, which
    a kernel computing P in fp32 may round the other way, move each output element; lse
    [b, h, s_q] is each row's natural-log log-sum-exp of its logits, the sink's exp(sink) in
    the sum (-inf for a row that sees nothing; 0 past a sequence's length, as lse.npy)."""
    b, s_q, h, _ = q.shape
    group = h // k.shape[2]  # query head j reads kv head j // group
    out = np.zeros((b, s_q, h, v.shape[3]))
    amb = np.zeros_like(out)
    lse = np.zeros((b, h, s_q))
    for i in range(b):
        lq, lk = int(q_lens[i]), int(kv_lens[i])
        qi = q[i, :lq].astype(np.float64)
        ki = np.repeat(k[i, :lk].astype(np.float64), group, axis=1)
        vi = np.repeat(v[i, :lk].astype(np.float64), group, axis=1)
        scores = scale_bmm1 * np.einsum("qhd,khd->hqk", qi, ki)
        if softcap:  # Gemma-2 logit softcapping: cap * tanh(logit / cap)
            scores = softcap * np.tanh(scores / softcap)
        if alibi is not None:  # distance between the row's key position and the key
            dist = np.abs(np.arange(lq)[:, None] + (lk - lq) - np.arange(lk)[None, :])
            scores = scores - alibi[:, None, None] * dist[None]
        if bias is not None:  # broadcast over a batch or the heads where the tensor has 1
            scores = scores + bias[i if bias.shape[0] > 1 else 0, :, :lq, :lk].astype(np.float64)
        if visible is not None:
            scores = np.where(visible(i, lq, lk)[None], scores, -np.inf)
        # P = 2^(log2(e)·S - M), M the row max rounded up to an integer: the power-of-two
        # scale makes P's rounding independent of where the kernel saw the max.
        x = scores * np.log2(np.e)
        m = x.max(axis=-1, keepdims=True)
        p = np.exp2(x - np.ceil(np.where(np.isfinite(m), m, 0)))
        norm = p.sum(axis=-1, keepdims=True)
        if sinks is not None:  # exp(sink) on the same 2^(-M) scale as p, for rows that see a key
            m_int = np.ceil(np.where(np.isfinite(m), m, 0))
            norm = norm + np.where(np.isfinite(m), np.exp2(sinks[:, None, None] * np.log2(np.e) - m_int), 0)
        norm = np.where(norm > 0, norm, 1)
        out[i, :lq] = scale_out * np.einsum("hqk,khd->qhd", round_to(p, dtype) / norm, vi)
        edge = round_to(p * (1 + AMBIGUITY), dtype) - round_to(p * (1 - AMBIGUITY), dtype)
        amb[i, :lq] = abs(scale_out) * np.einsum("hqk,khd->qhd", edge / norm, np.abs(vi))
        # The LSE straight from the logits (no 2^-M scale): a log-sum-exp about the true max.
        terms = [scores] if sinks is None else [scores, np.broadcast_to(sinks[:, None, None], (h, lq, 1))]
        logits = np.concatenate(terms, axis=-1)
        top = logits.max(axis=-1, keepdims=True)
        with np.errstate(divide="ignore"):  # a row that sees nothing: log(0) = -inf
            lse[i, :, :lq] = (np.where(np.isfinite(top), top, 0)
                              + np.log(np.exp(logits - np.where(np.isfinite(top), top, 0)).sum(axis=-1, keepdims=True)))[..., 0]
    return out, amb, lse


def gather_paged_fp64(path: Path, meta: dict, kv_lens, s: int) -> tuple:
    """K [b, s, h_kv, d] and V [b, s, h_kv, dv] of a -paged-kv run, read from the pool
    (k_pool.npy, v_pool.npy: [blocks, h_kv, tokens_per_block, d|dv]) through the block table
    (block_table.npy [b, blocks]): key j of sequence i is row j % T of block table[i, j // T].
    Checks the table: each sequence owns ceil(len / T) blocks, no block is owned twice, the
    entries after a sequence's blocks are -1; zeros past the lengths, as k.npy."""
    table = np.load(path / "block_table.npy")
    k_pool, v_pool = np.load(path / "k_pool.npy"), np.load(path / "v_pool.npy")
    tokens = meta["tokens_per_block"]
    assert table.dtype == np.int32 and table.shape[0] == len(kv_lens) and k_pool.shape[2] == tokens
    owned = []
    k = np.zeros((len(kv_lens), s, k_pool.shape[1], k_pool.shape[3]), dtype=k_pool.dtype)
    v = np.zeros((len(kv_lens), s, v_pool.shape[1], v_pool.shape[3]), dtype=v_pool.dtype)
    for i, lk in enumerate(int(x) for x in kv_lens):
        n = -(-lk // tokens)
        assert np.all(table[i, n:] == -1) and np.all(table[i, :n] >= 0), f"sequence {i}'s table row {table[i]}"
        owned += list(table[i, :n])
        keys = np.arange(lk)
        blocks = table[i, keys // tokens]
        k[i, :lk] = k_pool[blocks, :, keys % tokens]
        v[i, :lk] = v_pool[blocks, :, keys % tokens]
    assert len(set(owned)) == len(owned), "a pool block belongs to two places"
    return k, v


@pytest.mark.gpu
@pytest.mark.parametrize("kind", SAVE_KINDS, ids=lambda kind: "-".join(filter(None, kind)))
@pytest.mark.parametrize("config", SAVE_CONFIGS)
def test_save_tensors_match_float64(kind, config, exe, gpu_sm, tmp_path):
    family, dtype, acc, path = kind
    configs = SAVE_CONFIGS
    if FAMILIES[family].max_s_q:  # decode: the path's row-tiling kernel (max_rows 0) holds any head ratio
        configs = SAVE_CONFIGS_FEW_ROWS
        tiling = [k for k in KERNELS if k["family"] == family and k["dtype"] == dtype and k["acc"] == acc
                  and save_path(k) == path and k["max_rows"] == 0]
        kernel = min(tiling, key=lambda k: (k["d"], k["name"]), default=None)
        if kernel is None:
            pytest.skip(f"no {family} kernel in the build fits {kind}")
    else:
        kernel = kernel_or_skip(family=family, dtype=dtype, acc=acc)
    if config in MLA_CONFIGS:
        mla = [k for k in KERNELS if k["family"] == family and k["dtype"] == dtype and k["acc"] == acc
               and save_path(k) == path and k["dv"] != k["d"]]
        if not mla:
            pytest.skip(f"no {family} kernel of {kind} with dv != d (generator/enumerate.py MLA_HEAD_SIZES)")
        kernel = min(mla, key=lambda k: (k["d"], k["name"]))
    if config in ODD_HEAD_CONFIGS:
        odd = [k for k in KERNELS if k["family"] == family and k["dtype"] == dtype and k["acc"] == acc
               and save_path(k) == path and k["d"] in ODD_HEAD_SIZES and k["dv"] == k["d"]]
        if not odd:
            pytest.skip(f"no {family} kernel of {kind} with d in {ODD_HEAD_SIZES} (README's variant table)")
        kernel = min(odd, key=lambda k: (k["d"], k["name"]))
    # A variant some kernels of the family lack (generator.rules.VARIANT_EXCLUSIONS): the
    # smallest kernel of the family that has it.
    needs = {v for v, flag in SAVE_VARIANT_FLAGS.items() if flag in configs[config]}
    if not needs <= set(kernel["variants"]):
        having = [k for k in KERNELS if k["family"] == family and k["dtype"] == dtype and k["acc"] == acc
                  and save_path(k) == path and needs <= set(k["variants"]) and (not FAMILIES[family].max_s_q
                                                                                 or k["max_rows"] == 0)]
        if not having:
            pytest.skip(f"no {family} kernel of {kind} has {sorted(needs)} (generator/spec.py variants)")
        kernel = min(having, key=lambda k: (k["d"], k["name"]))
    require_arch(kernel, gpu_sm)
    args = ["-d", str(kernel["d"]), "-dv", str(kernel["dv"]), dtype_flag(kernel), *configs[config]]
    proc = run_fmha(exe, [*args, "-kernel", kernel["name"], "-save-tensors", str(tmp_path),
                          "-v", "0", "-runs", "1", "-warm-up-runs", "0"])
    assert proc.returncode == 0, describe(proc)

    t = {name: np.load(tmp_path / f"{name}.npy") for name in ("q", "k", "v", "o", "o_ref", "seqlens_q", "seqlens_kv")}
    meta = json.loads((tmp_path / "meta.json").read_text())
    assert meta["kernel"] == kernel["name"]
    b, s_q, h, _ = t["q"].shape
    assert t["o"].shape == t["o_ref"].shape == (b, s_q, h, kernel["dv"])
    assert t["seqlens_q"].dtype == t["seqlens_kv"].dtype == np.int32
    s = t["k"].shape[1]
    custom = bias = None
    if meta["mask"] == "custom":
        custom = np.load(tmp_path / "custom_mask.npy")
        assert custom.shape == (b, s_q, s) and custom.dtype == np.int32
    if meta["attention_bias"]:
        bias = np.load(tmp_path / "bias.npy")
        shape = meta["attention_bias_shape"]
        assert bias.shape == (b if shape[0] == "b" else 1, h if shape[1] == "h" else 1, s_q, s)

    k, v = t["k"], t["v"]
    if meta["paged_kv"]:  # the kernel read the pool: K and V gathered through the block table
        k, v = gather_paged_fp64(tmp_path, meta, t["seqlens_kv"], s)
        for name, got in (("k", k), ("v", v)):
            assert np.array_equal(got, t[name]), f"{name}_pool.npy through block_table.npy is not {name}.npy"
    expected, amb, lse = attention_fp64(t["q"], k, v, t["seqlens_q"], t["seqlens_kv"],
                              meta["scale_bmm1"], meta["scale_softmax"] * meta["scale_bmm2"],
                              lambda i, lq, lk: visible_fp64(meta, lq, lk, custom[i] if custom is not None else None),
                              dtype, meta["softcapping_scale_bmm1"] or 0.0,
                              np.load(tmp_path / "sinks.npy").astype(np.float64) if meta["attention_sinks"] else None,
                              alibi_slopes_fp64(h) if meta["alibi"] else None, bias)
    # Rows past each sequence's length are zero in both outputs.
    real = np.arange(s_q)[None, :] < t["seqlens_q"][:, None]  # [b, s_q]
    for name in ("o", "o_ref"):
        assert not np.any(t[name][~real]), f"{name}.npy has non-zero rows past a sequence's length"

    # The kernel's output against float64, with the driver's own metric and epsilon, at the
    # float64 value nearest it within the P rounding ambiguity (nearly always amb == 0).
    eps = meta.get("epsilon", DEFAULT_EPSILON[dtype])
    found = t["o"][real]
    nearest = np.clip(found, expected[real] - amb[real], expected[real] + amb[real])
    err = spec_error(found, np.where(np.isfinite(found), nearest, expected[real]), eps)
    bad = np.argwhere(err > eps)
    assert bad.size == 0, f"{len(bad)} of {err.size} elements over eps={eps}; worst {err.max():.3g}"

    # The driver's fp32 reference against float64, norm-wise (element-wise relative errors
    # are meaningless near zero). Both round P to the input type at a power-of-two scale, so
    # they differ by fp32 rounding and the rare P that fp32 noise tips across a rounding edge.
    ref, exp = t["o_ref"][real].astype(np.float64), expected[real]
    rel = np.linalg.norm(ref - exp) / np.linalg.norm(exp)
    assert rel < REF_REL_L2, f"o_ref.npy is {rel:.3g} (relative L2) from float64"

    # -save-softmax: the kernel's and the driver's LSE against float64, rows past a length zero.
    assert meta["save_softmax"] == ("-save-softmax" in configs[config])
    if meta["save_softmax"]:
        real_rows = np.broadcast_to(real[:, None, :], (b, h, s_q))
        for name in ("lse", "lse_ref"):
            got = np.load(tmp_path / f"{name}.npy")
            assert got.shape == (b, h, s_q)
            assert not np.any(got[~real_rows]), f"{name}.npy has non-zero rows past a sequence's length"
            same_inf = np.isinf(got[real_rows]) & (got[real_rows] == lse[real_rows])
            diff = np.where(same_inf, 0.0, np.abs(got[real_rows].astype(np.float64) - lse[real_rows]))
            assert np.all(diff <= LSE_TOLERANCE), f"{name}.npy is {np.nanmax(diff):.3g} from float64 (max abs)"


# ---------------------------------------------------------------------------------------------
# Performance (-m perf): a few timed problems per core head size. They assert a speed only
# against a stored baseline of the same GPU (--perf-baseline, bench/perf_baseline.py); benchmarks
# against other libraries live in bench/run.py.

# FlashAttention-3's grid at 16k tokens and hidden size 2048: for every kernel of a core head
# size, each of its masks at s in PERF_SEQ_LENS, b = 16k / s, h = 2048 / d.
PERF_TOKENS, PERF_HIDDEN, PERF_SEQ_LENS = 16384, 2048, (1024, 4096)
PERF_FLAGS = ["-skip-checks", "-v", "0", "-runs", "20", "-warm-up-runs", "10"]
# Decode kernels (few query rows): one token per sequence against a 4k KV cache, b = 16, 32
# query heads over as many KV heads as the kernel's rows per warp hold (MHA, GQA 4, GQA 8).
PERF_DECODE_KV = {1: 32, 4: 8, 8: 4, 16: 8}  # block_m -> KV heads (16: the mma path, GQA 4)
PERF_CASES = [
    Case(k, mask, "packed_qkv", "mha", Shape(PERF_TOKENS // s, s),
         heads=max(1, round(PERF_HIDDEN / k["d"])))
    for k in sorted(KERNELS, key=lambda k: k["name"])
    if k["d"] in CORE_HEAD_SIZES and k["d"] == k["dv"] and not FAMILIES[k["family"]].max_s_q
    for s in PERF_SEQ_LENS
    for mask in k["masks"] if mask in CORE_MASKS
] + [
    heads_case(k, "padding", "separate_q_k_v", Shape(16, 4096, s_q=1), PERF_DECODE_KV[k["block_m"]], h=32)
    for k in sorted(KERNELS, key=lambda k: k["name"])
    if FAMILIES[k["family"]].max_s_q and k["d"] in CORE_HEAD_SIZES and k["block_m"] in PERF_DECODE_KV
]


@pytest.mark.gpu
@pytest.mark.perf
@pytest.mark.parametrize("case", PERF_CASES, ids=lambda c: f"{c.kernel['name']}-{c.config}")
def test_perf(case: Case, exe, gpu_sm, perf_record, perf_baseline, request):
    require_arch(case.kernel, gpu_sm)
    name = case.kernel["name"]

    def run() -> dict:
        proc = run_fmha(exe, [*case.args(), "-kernel", name, *PERF_FLAGS])
        assert proc.returncode == 0, describe(proc)
        fields = parse_output(proc.stdout)
        assert fields["kernel"] == name, describe(proc)
        return fields

    key = (name, case.config)
    expected = perf_baseline.expected(key) if perf_baseline else None
    tolerance = perf_baseline.tolerance if perf_baseline else perf.DEFAULT_TOLERANCE
    fields, runs = perf.measure(run, expected, tolerance)
    perf_record(request.node, case, fields, runs)
    if expected is None:
        if perf_baseline and not perf_baseline.update:
            warnings.warn(perf.MissingBaselineWarning(f"{perf_baseline.path} has no entry for {name} {case.config}"))
        return
    failure = perf.regression_message(float(fields["tflops"]), expected, tolerance)
    if failure:
        pytest.fail(f"{name} {case.config}: {failure}; best of {runs} runs", pytrace=False)
