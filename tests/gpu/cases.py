"""A problem of the GPU tier: its kernel and shape, and the fmha.exe flags they make.

The tables that choose problems live in matrix.py (the kernel x case table), perf_cases.py and
save_configs.py; this module is their vocabulary.
"""

from dataclasses import dataclass

from .manifest import dtype_flags

LAYOUT_FLAGS = {
    "packed_qkv": [],                      # the default
    "contiguous_q_kv": ["-contiguous-q-kv"],
    "separate_q_k_v": ["-separate-q-k-v"],
    "q_paged_kv": ["-paged-kv"],           # with -tokens-per-block in the case's extra flags
}
# attention type -> (default h, h_kv (None: h), flags)
ATTENTION = {
    "mha": (4, None, []),
    "gqa": (8, 2, ["-gqa", "2"]),
    "mqa": (4, 1, ["-mqa"]),
}
# Query heads of a problem that names its heads (decode, perf): h = 32 over h_kv KV heads.
DEFAULT_HEADS = 32
# Head sizes that every tier covers in full: the whole case table, the timed problems.
CORE_HEAD_SIZES = (32, 64, 128, 256)

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


# Shorter words for a test ID: the layout's flag (-packed-qkv, -contiguous-q-kv, ...) and the
# local masks without "sliding".
LAYOUT_TAGS = {"packed_qkv": "packed", "contiguous_q_kv": "contiguous", "separate_q_k_v": "separate",
               "q_paged_kv": "paged"}
MASK_TAGS = {"sliding_window": "window", "bidirectional_sliding_window": "bidir_window"}
# The flag of each run-time variant (generator.spec.VARIANTS).
VARIANT_FLAGS = {"softcap": "-softcapping-scale-bmm1", "alibi": "-alibi", "bias": "-attention-bias",
                 "sinks": "-use-attention-sinks", "softmax_stats": "-save-softmax", "paged_kv": "-paged-kv",
                 "dropout": "-dropout"}


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


@dataclass(frozen=True)
class Case:
    """One run of one kernel (its manifest entry) on one problem."""

    kernel: dict
    mask: str
    layout: str
    attn: str
    shape: Shape
    extra: tuple = ()
    tag: str = ""
    heads: int = 0     # query heads; 0 = the attention type's default
    kv_heads: int = 0  # KV heads of a "gqa" case; 0 = the attention type's default
    e4m3_out: bool = False  # e4m3 kernels: O in e4m3 (else bf16)

    @property
    def h(self) -> int:
        return self.heads or ATTENTION[self.attn][0]

    @property
    def h_kv(self) -> int:
        return self.kv_heads or ATTENTION[self.attn][1] or self.h

    def args(self) -> list[str]:
        k = self.kernel
        out = ["-d", str(k["d"]), "-dv", str(k["dv"]), *dtype_flags(k, self.e4m3_out), "-h", str(self.h)]
        attn_flags = ["-gqa", str(self.kv_heads)] if self.kv_heads else ATTENTION[self.attn][2]
        out += attn_flags + LAYOUT_FLAGS[self.layout] + self.shape.flags()
        return out + mask_flags(self.mask, self.shape.s) + list(self.extra)

    @property
    def id(self) -> str:
        """The test ID: the kernel's name less fmha_v2_, the problem in short words."""
        parts = [self.kernel["name"].removeprefix("fmha_v2_"), MASK_TAGS.get(self.mask, self.mask),
                 LAYOUT_TAGS[self.layout], self.attn, self.shape.tag]
        if self.heads:
            parts.insert(4, f"h{self.h}x{self.h_kv}")
        if self.e4m3_out:
            parts.append("o_e4m3")
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


def heads_case(kernel: dict, mask: str, layout: str, shape: Shape, h_kv: int, extra: tuple = (),
               tag: str = "", h: int = DEFAULT_HEADS) -> Case:
    """A case with h query heads over h_kv KV heads: attention type mha, mqa or gqa from the ratio."""
    attn = "mha" if h_kv == h else ("mqa" if h_kv == 1 else "gqa")
    return Case(kernel, mask, layout, attn, shape, extra, tag, heads=h, kv_heads=h_kv if attn == "gqa" else 0)


def paged_case(kernel: dict, mask: str, attn: str, shape: Shape, tokens: int, h_kv: int = 0, h: int = 0) -> Case:
    """A case in a paged KV cache of `tokens` a block: the attention type's heads, or h over h_kv."""
    extra = ("-tokens-per-block", str(tokens))
    if h:
        return heads_case(kernel, mask, "q_paged_kv", shape, h_kv, extra, f"tpb{tokens}", h=h)
    return Case(kernel, mask, "q_paged_kv", attn, shape, extra, f"tpb{tokens}")
