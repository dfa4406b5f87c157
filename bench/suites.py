"""Benchmark suites: each one a name, a metric and a list of attention problems; nothing else.

A Problem is one forward attention call, Q [b, h, s_q, d] against K and V [b, h_kv, s, d].
Its FLOP and byte counts below are the one definition that the runner, the writers and the
plots use.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from fnmatch import fnmatchcase
from itertools import product
from typing import NamedTuple


class Dtype(NamedTuple):
    flag: str    # fmha.exe's flags (space-separated)
    torch: str   # torch dtype attribute of SDPA's inputs
    bytes: int   # per element, of Q, K, V and O


DTYPES = {
    "fp16": Dtype("-fp16", "float16", 2),            # fmha.exe: fp16 P·V partials
    "fp16-fp32": Dtype("-fp16-fp32", "float16", 2),  # fmha.exe: fp32 P·V, like SDPA's backends
    "bf16": Dtype("-bf16", "bfloat16", 2),
    "e4m3": Dtype("-e4m3 -bf16-output", "float8_e4m3fn", 1),  # O in bf16, as FA3's fp8 writes it
}


@dataclass(frozen=True)
class Problem:
    b: int
    h: int       # query heads
    h_kv: int    # key/value heads (h_kv < h: GQA)
    s_q: int     # query length
    s: int       # key/value length
    d: int       # head size of Q, K and V
    causal: bool
    # Variants (0: off). SDPA has neither, so its rows are empty and the dense problem of the
    # same suite is the comparison: fmha.exe's own kernel without the variant.
    window: int = 0      # sliding-window causal mask: W keys up to the row's own (-sliding-window-size)
    softcap: float = 0.0  # logit softcapping cap (-softcapping-scale-bmm1)
    paged: int = 0       # K/V in a paged cache of blocks of this many tokens (-paged-kv -tokens-per-block)
    # Variants SDPA has as an attn_mask (so its rows are measured): an additive [b, h, s_q, s]
    # bias (-attention-bias; a float mask) and a random bit per (sequence, row, key), half of
    # them set (-custom-mask; a bool mask [b, 1, s_q, s]).
    bias: bool = False
    custom: bool = False

    def __post_init__(self):
        if self.h % self.h_kv:
            raise ValueError(f"h={self.h} is not a multiple of h_kv={self.h_kv}")
        if self.causal and self.s_q != self.s:
            # SDPA's is_causal is top-left aligned and ours bottom-right: equal only when s_q == s.
            raise ValueError("a causal problem needs s_q == s to compare with SDPA")
        if self.window and not (self.causal and 1 <= self.window <= self.s):
            raise ValueError("a sliding window is causal, with 1 <= window <= s")
        if self.paged not in (0, 16, 32, 64, 128):
            raise ValueError("a paged KV cache has blocks of 16, 32, 64 or 128 tokens")
        if (self.bias or self.custom) and (self.causal or self.bias == self.custom):
            raise ValueError("a bias or a custom mask, one of them, on a non-causal problem")

    @property
    def variant(self) -> bool:
        """Whether the problem asks for something SDPA does not offer."""
        return bool(self.window or self.softcap or self.paged)

    def pairs(self) -> float:
        """(query, key) pairs the mask leaves per (batch, head). Causal is bottom-right aligned
        and keeps the diagonal, as fmha.exe counts: s_q·(s - s_q) + s_q·(s_q + 1)/2; a sliding
        window of W leaves min(p + 1, W) keys to the query at position p."""
        if self.custom:  # half the bits are set; fmha.exe counts the visible pairs
            return self.s_q * self.s / 2
        if not self.causal:
            return float(self.s_q * self.s)
        if self.window:
            return float(sum(min(p + 1, self.window) for p in range(self.s - self.s_q, self.s)))
        return self.s_q * (self.s - self.s_q) + self.s_q * (self.s_q + 1) / 2

    def flop(self) -> float:
        """Two GEMMs of 2·d FLOP per pair: 4·b·h·d·pairs (4·b·h·s²·d non-causal, about half causal)."""
        return 4.0 * self.b * self.h * self.d * self.pairs()

    def bytes(self, elt: int) -> float:
        """The fewest bytes to move: Q and O once, K and V once per KV head (not per query head)."""
        q_and_o = 2 * self.b * self.h * self.s_q * self.d
        k_and_v = 2 * self.b * self.h_kv * self.s * self.d
        bias = self.b * self.h * self.s_q * self.s if self.bias else 0
        return float(elt * (q_and_o + k_and_v + bias))

    def fmha_args(self) -> list[str]:
        args = ["-b", self.b, "-h", self.h, "-d", self.d, "-s", self.s]
        if self.h_kv != self.h:
            args += ["-gqa", self.h_kv]
        if self.paged:  # a layout of its own: Q apart, K and V in the pool
            args += ["-paged-kv", "-tokens-per-block", self.paged]
        if self.s_q != self.s:  # the default packed QKV layout needs s_q == s
            args += ["-s-q", self.s_q] + ([] if self.paged else ["-separate-q-k-v"])
        if self.causal:
            args.append("-causal-mask")
        if self.window:
            args += ["-sliding-window-size", self.window]
        if self.softcap:
            args += ["-softcapping-scale-bmm1", f"{self.softcap:g}"]
        if self.bias:
            args.append("-attention-bias")
        if self.custom:
            args.append("-custom-mask")
        return [str(a) for a in args]

    def mask_label(self) -> str:
        """The table's causal cell: no, yes, or the window; a softcap follows."""
        cell = f"window {self.window}" if self.window else ("yes" if self.causal else "no")
        return (cell + (f", softcap {self.softcap:g}" if self.softcap else "") + (", bias" if self.bias else "")
                + (", custom mask" if self.custom else "") + (f", paged {self.paged}" if self.paged else ""))

    def label(self) -> str:
        heads = f"{self.h}" if self.h == self.h_kv else f"{self.h}/{self.h_kv}"
        length = f"{self.s}" if self.s_q == self.s else f"{self.s_q}/{self.s}"
        return (f"b={self.b} h={heads} s={length} d={self.d}{' causal' if self.causal else ''}"
                + (f" window={self.window}" if self.window else "") + (f" softcap={self.softcap:g}" if self.softcap else "")
                + (" bias" if self.bias else "") + (" custom-mask" if self.custom else "")
                + (f" paged={self.paged}" if self.paged else ""))

    @classmethod
    def from_row(cls, row: dict) -> Problem:
        """The problem of a CSV row (values may be strings; the variant columns may be absent,
        in CSVs written before they existed)."""
        def flag(raw) -> bool:
            return raw.strip().lower() in ("true", "1", "yes") if isinstance(raw, str) else bool(raw)

        values = {}
        for f in fields(cls):
            raw = row.get(f.name)
            if raw in (None, "") and f.name not in REQUIRED_FIELDS:
                continue  # the field's default
            if f.type in (bool, "bool"):
                values[f.name] = flag(raw)
            else:
                values[f.name] = float(raw) if f.type in (float, "float") else int(float(raw))
        return cls(**values)


PROBLEM_FIELDS = tuple(f.name for f in fields(Problem))
REQUIRED_FIELDS = ("b", "h", "h_kv", "s_q", "s", "d", "causal")  # every CSV has these


def mha(b: int, h: int, s: int, d: int, causal: bool) -> Problem:
    """Self-attention: as many KV heads as query heads, s_q == s."""
    return Problem(b, h, h, s, s, d, causal)


@dataclass(frozen=True)
class Suite:
    name: str
    metric: str                    # what the table and plot show: "tflops" or "gbs"
    problems: tuple[Problem, ...]
    about: str
    dtype: str | None = None       # fixed by the suite; None: --dtype decides


MASKS = (False, True)  # non-causal, causal
FA3_TOKENS = 16384     # FlashAttention-3's grid: b = 16k / s, hidden 2048 = h·d
FA3_HEADS = {64: 32, 128: 16, 256: 8}
FA3_LENGTHS = (512, 1024, 2048, 4096, 8192, 16384)
VARIANT_LENGTHS = (8192, 32768)
ODD_HEAD_SIZES = (40, 72, 80, 96, 104, 160)

SUITES = {suite.name: suite for suite in (
    Suite("readme", "tflops", (mha(4, 32, 1024, 128, True),),
          "fmha_v2's README problem (-d 128 -b 4 -h 32 -s 1024 -causal-mask)"),
    Suite("fa3", "tflops",
          tuple(mha(FA3_TOKENS // s, h, s, d, causal)
                for (d, h), causal, s in product(FA3_HEADS.items(), MASKS, FA3_LENGTHS)),
          "FlashAttention-3's grid: 16k tokens (b = 16384 / s), hidden 2048 (h = 2048 / d), "
          "d 64/128/256, s 512..16k, causal and not (ANCHORS.md)"),
    Suite("seed", "tflops",
          tuple(mha(1, 12, s, 128, causal) for causal, s in product(MASKS, (2048, 4096, 8192))),
          "the seed configs: b=1, h=12, d=128, s 2k/4k/8k, bf16, causal and not", dtype="bf16"),
    Suite("decode", "gbs",
          tuple(Problem(30720, h, h, 1, 2, d, False) for d, h in product((128, 256), (16, 32)))
          + tuple(Problem(b, 32, 8, 1, s, 128, False) for b, s in product((1, 8, 64), (4096, 16384, 65536)))
          + tuple(Problem(b, 32, 8, 1, s, 128, False) for b, s in ((20, 4096), (20, 16384), (24, 4096), (24, 65536),
                                                                   (40, 16384)))
          + tuple(Problem(b, 32, 8, 1, s, 64, False) for b, s in product((8, 64), (4096, 16384, 65536)))
          + tuple(Problem(b, 32, 8, 1, s, 64, False) for b, s in ((40, 4096), (48, 4096), (48, 16384)))
          + tuple(Problem(b, 32, 8, 1, 16384, 256, False) for b in (8, 64))
          + tuple(Problem(b, 32, 8, 1, s, 128, False, paged=t) for b, s, t in ((8, 16384, 16), (8, 16384, 128),
                                                                              (64, 4096, 16))),
          "s_q = 1 against a 2-token KV (b=30720, h 16/32, d 128/256) and a long GQA KV cache "
          "(b 1/8/64, h=32 over 8 KV heads, s 4k/16k/64k, d=128), ANCHORS.md's decode cases, three "
          "batches between one and four waves of units (b 20 at 4k/16k, 24 at 4k/64k, 40 at 16k), the "
          "other head sizes of the long cache (d=64: b 8/64 at 4k/16k/64k, and b 40/48 at 4k and 48 at 16k, "
          "half to three quarters of a wave of one-head units; d=256: b 8/64 at 16k), and "
          "three of the long caches paged (blocks of 16 and 128 tokens; SDPA has no paged cache: "
          "the same problem's dense row is the comparison); a bandwidth problem, so GB/s (bytes "
          "really moved), next to the copy bandwidth measured in the same run"),
    Suite("variants", "tflops",
          tuple(mha(32768 // s, 16, s, 128, True) for s in VARIANT_LENGTHS)
          + tuple(Problem(32768 // s, 16, 16, s, s, 128, True, window=w)
                  for s, w in product(VARIANT_LENGTHS, (1024, 4096)))
          + (mha(4, 16, 8192, 128, False), Problem(4, 16, 16, 8192, 8192, 128, False, softcap=30.0),
             Problem(4, 16, 16, 8192, 8192, 128, True, softcap=30.0))
          + tuple(Problem(4, 16, 16, 8192, 8192, 128, False, paged=t) for t in (16, 128))
          + (mha(2, 16, 4096, 128, False), Problem(2, 16, 16, 4096, 4096, 128, False, bias=True),
             Problem(2, 16, 16, 4096, 4096, 128, False, custom=True)),
          "variants next to our dense kernel on the same problem: sliding window W = 1024, 4096 at "
          "s = 8k, 32k (32k tokens, h=16, d=128; time should follow the window, not s), logit "
          "softcapping (cap 30) at s = 8k, causal and not, and a paged KV cache (blocks of 16 and 128 "
          "tokens) at s = 8k, where SDPA has no equivalent; an additive bias and a custom bit mask "
          "at s = 4k, b = 2, which SDPA takes as a float or bool attn_mask"),
    Suite("heads", "tflops",
          tuple(mha(4, 16, 4096, d, causal) for causal, d in product(MASKS, ODD_HEAD_SIZES)),
          "the head sizes fmha_v2 serves beyond the powers of two (40, 72, 80, 96, 104, 160) at "
          "b=4, h=16, s=4k, causal and not; on Hopper they run on the ws family, padded to whole "
          "64-column panels"),
    Suite("grid", "tflops",
          tuple(mha(b, h, s, d, causal)
                for causal, d, b, h, s in product(MASKS, (64, 128), (8, 16), (8, 16), (256, 512, 1024))),
          "B {8,16} x H {8,16} x N {256,512,1024} x D {64,128}, causal and not"),
)}

ALL = "all"  # every suite above, in this order


def select(names: list[str]) -> list[Suite]:
    """The suites named (ALL expands to every suite), each once, in the order given."""
    chosen = []
    for name in names:
        for suite in SUITES.values() if name == ALL else (SUITES[name],):
            if suite not in chosen:
                chosen.append(suite)
    return chosen


def only(suites: list[Suite], globs: list[str]) -> list[Suite]:
    """Each suite cut to the problems whose label (Problem.label(), as --list prints it)
    matches one of `globs` (fnmatch, case-sensitive); a suite left with none is dropped. A cut
    suite is named `<name>-part` and says which globs chose it, so its files stand apart from
    the whole suite's."""
    if not globs:
        return suites
    cut = []
    for suite in suites:
        kept = tuple(p for p in suite.problems if any(fnmatchcase(p.label(), g) for g in globs))
        if kept:
            cut.append(replace(suite, name=f"{suite.name}-part", problems=kept,
                               about=f"the problems matching {' or '.join(repr(g) for g in globs)} of: {suite.about}"))
    return cut
