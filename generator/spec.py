"""KernelSpec: one generated kernel, and the tables that map its fields to C++.

The spec's `name` is the one identity of a kernel: the generated file name, the registry
key, the `-kernel NAME` argument, the FMHA_FILTER target and the duplicate check.
`KernelSpec.parse(name)` gives the spec back, so nothing else ever builds or splits names.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Family:
    """What the templates need to know about a kernel family (docs/ARCHITECTURE.md)."""

    name: str                # the spec's `family` value and the name token
    sm: int                  # base arch: binaries for every listed arch >= this
    description: str         # shown by setup.py: "sm80 family, mma.sync"
    header: str              # include path under src/, provides launch<T> and entry<T>
    namespace: str           # C++ namespace inside fmha:: holding Traits, launch, entry
    warp_specialized: bool   # KernelMeta::warp_specialized for every kernel of the family
    uses_tma: bool           # KernelMeta::uses_tma: loads tiles with the bulk tensor copy engine
    template: str            # the kernel translation-unit template
    # True: the family's Traits take SCHEDULING_MODE as kPersistent (after kAccFp16):
    # 0 static grid, 1 persistent CTAs pulling tiles from a counter (KernelMeta::persistent).
    scheduled: bool = False
    # True: the family's launch may use Params::workspace; its TU exports workspace_<name>
    # (KernelMeta::workspace: the bytes a problem needs), which the driver allocates.
    workspace: bool = False
    # Attention variants (keys of VARIANTS) every kernel of the family implements as run-time
    # parameters (KernelMeta::variants); dispatch skips the family for a problem that asks
    # for one it lacks, and its launch refuses it.
    variants: tuple = ()
    # False: portable SASS, built for every TORCH_CUDA_ARCH_LIST entry >= sm. True: uses
    # instructions that exist only in the arch-specific target sm_<sm>a (wgmma, setmaxnreg on
    # Hopper), which runs on that one arch: built for sm_<sm>a alone, whenever the list names
    # the arch with or without the suffix (rules.family_archs).
    arch_specific: bool = False

    @property
    def max_s_q(self) -> int:
        """Query rows per sequence the family serves (KernelMeta::max_s_q; 0: any): its
        module's MAX_S_Q (generator/families/)."""
        from .families import MODULES  # the family modules build on this one
        return getattr(MODULES[self.name], "MAX_S_Q", 0)


# The one place that maps a family to its header, namespace and C++ template. The order is
# the dispatch preference: the registry lists the families in this order and the driver runs
# the first row that fits the problem and has an image for the GPU, so a problem with at most
# 16 query rows per sequence runs a decode kernel, a Hopper GPU runs a ws kernel where one
# fits and every other GPU (no sm_90a image) the flash one.
FAMILIES = {
    "decode": Family(
        name="decode",
        sm=80,
        description="decode family, s_q <= 16, split-KV, mma.sync or CUDA cores",
        header="fmha/kernel/decode.h",
        namespace="decode",
        warp_specialized=False,
        uses_tma=False,
        template="kernel.cu.j2",
        workspace=True,
        variants=("softcap", "alibi", "bias", "sinks", "softmax_stats", "paged_kv", "wide_logits"),
    ),
    "ws": Family(
        name="ws",
        sm=90,
        description="ws family, wgmma + TMA, warp-specialised",
        header="fmha/kernel/ws.h",
        namespace="ws",
        warp_specialized=True,
        uses_tma=True,
        template="kernel.cu.j2",
        arch_specific=True,
        scheduled=True,
        variants=("softcap", "alibi", "bias", "sinks", "softmax_stats", "paged_kv", "dropout"),
    ),
    # FP8 on mma.sync m16n8k32 (SM89's QMMA; on sm_90 tested, not fast: ws's e4m3 kernels first).
    "qmma": Family(
        name="qmma",
        sm=89,
        description="sm89 family, FP8 e4m3 mma.sync (QMMA)",
        header="fmha/kernel/qmma_sm89.h",
        namespace="qmma",
        warp_specialized=False,
        uses_tma=False,
        template="kernel.cu.j2",
        variants=("sinks", "softmax_stats", "paged_kv"),
    ),
    "flash": Family(
        name="flash",
        sm=80,
        description="sm80 family, mma.sync",
        header="fmha/kernel/flash_sm80.h",
        namespace="flash_sm80",
        warp_specialized=False,
        uses_tma=False,
        template="kernel.cu.j2",
        variants=("softcap", "alibi", "bias", "sinks", "softmax_stats", "paged_kv", "wide_logits", "dropout"),
    ),
}

# dtype / accumulation token -> (C++ element type, fmha::DataType enumerator).
DTYPES = {
    "fp16": ("__half", "DataType::kFp16"),
    "bf16": ("__nv_bfloat16", "DataType::kBf16"),
    "e4m3": ("__nv_fp8_e4m3", "DataType::kE4m3"),  # FP8 inputs, O in bf16 (the ws family)
}
ACCS = {
    "fp16": "DataType::kFp16",
    "fp32": "DataType::kFp32",
}
# K and V element types other than the inputs' (KernelSpec.kv_dtype, the name's "_kv<dtype>"
# token): an e4m3 KV cache under fp16/bf16 queries (the decode family, bench/NOTES.md §78).
KV_DTYPES = {
    "e4m3": "DataType::kE4m3",
}
# Accumulation each input type gets when the name says nothing more. Any other pairing is
# spelled out in the name ("fp16_fp32"), so every (dtype, acc) pair has a name that parses.
DEFAULT_ACC = {"fp16": "fp16", "bf16": "fp32", "e4m3": "fp32"}

# Variant name -> its fmha::VariantBit (src/params.h): run-time parameters a family's kernels
# implement (Family.variants). Why each is run-time rather than a spec field: bench/NOTES.md.
VARIANTS = {
    "softcap": "kVariantSoftcap",   # -softcapping-scale-bmm1 (Params::softcap)
    "alibi": "kVariantAlibi",       # -alibi (Params::alibi_slopes)
    "bias": "kVariantBias",         # -attention-bias (Params::attention_bias)
    "sinks": "kVariantSinks",       # -use-attention-sinks (Params::sinks)
    "softmax_stats": "kVariantSoftmaxStats",  # -save-softmax (Params::softmax_lse)
    "paged_kv": "kVariantPagedKv",  # -paged-kv (Params::kv_block_table)
    # Logits that may reach 2^24 in log2 units (Params::wide_logits): a huge -scale-bmm1 or
    # input range. Families whose softmax takes the rounded-product path there
    # (softmax/exp2_row.h) offer it; ws keeps one FFMA a score and leaves such problems to flash.
    "wide_logits": "kVariantWideLogits",
    # -dropout P (Params::dropout_p), without a score modifier: flash, and ws's 16-bit
    # two-consumer tiles (ws::Traits::kHasDropout).
    "dropout": "kVariantDropout",
}

# Mask token -> fmha::MaskType enumerator (src/params.h), in the order of that enum. The token
# is also fmha.exe's `mask=` label. sliding_window .. chunked are the local masks: one
# compile-time kind in the kernels (mask::Kind::kLocal) with the window or chunk size at run
# time, since a key range per row costs the inner loop nothing beyond the causal compare
# (bench/NOTES.md §10). custom: a bit per (row, key) read from memory, a score modifier over
# the padding kind's blocks (softmax/score_tensor.h, bench/NOTES.md §13).
MASKS = {
    "padding": "MaskType::kPadding",
    "causal": "MaskType::kCausal",
    "sliding_window": "MaskType::kSlidingWindow",
    "bidirectional_sliding_window": "MaskType::kBidirectionalWindow",
    "chunked": "MaskType::kChunked",
    "custom": "MaskType::kCustom",
}
ALL_MASKS = tuple(MASKS)

PREFIX = "fmha_v2"

# Built from the tables above so the parser knows exactly the tokens the name can hold.
_NAME_RE = re.compile(
    rf"{PREFIX}_(?P<family>{'|'.join(sorted(FAMILIES, key=len, reverse=True))})"
    rf"_(?P<dtype>{'|'.join(DTYPES)})(?:_(?P<acc>{'|'.join(ACCS)}))?"
    rf"(?:_kv(?P<kv_dtype>{'|'.join(KV_DTYPES)}))?"
    r"_d(?P<d>\d+)(?:_dv(?P<dv>\d+))?"
    r"_(?P<block_m>\d+)x(?P<block_n>\d+)"
    r"_w(?P<warps_m>\d+)x(?P<warps_n>\d+)"
    r"_sm(?P<sm>\d+)"
)


@dataclass(frozen=True)
class KernelSpec:
    """One kernel. Field vocabulary is checked here; what combinations work is rules.py."""

    family: str
    sm: int
    dtype: str          # input element type: "fp16" | "bf16" (O the same) | "e4m3" (O in bf16)
    acc: str            # accumulation of P·V: "fp16" | "fp32"
    d: int              # head size of Q and K
    dv: int             # head size of V and O
    block_m: int        # query rows per CTA
    block_n: int        # keys per main-loop step
    warps_m: int
    warps_n: int
    masks: tuple = ALL_MASKS   # not in the name: all are instantiated in one TU
    kv_dtype: str = ""  # K and V: "" the inputs' dtype, else a KV_DTYPES key (Q and O stay `dtype`)

    def __post_init__(self):
        if self.family not in FAMILIES:
            raise ValueError(f"unknown family {self.family!r} (known: {', '.join(FAMILIES)})")
        if self.dtype not in DTYPES:
            raise ValueError(f"unknown dtype {self.dtype!r} (known: {', '.join(DTYPES)})")
        if self.kv_dtype and self.kv_dtype not in KV_DTYPES:
            raise ValueError(f"unknown KV dtype {self.kv_dtype!r} (known: {', '.join(KV_DTYPES)})")
        if self.acc not in ACCS:
            raise ValueError(f"unknown accumulation {self.acc!r} (known: {', '.join(ACCS)})")
        for field in ("sm", "d", "dv", "block_m", "block_n", "warps_m", "warps_n"):
            value = getattr(self, field)
            if type(value) is not int or value <= 0:
                raise ValueError(f"{field} must be a positive int, got {value!r}")
        # Accept any iterable of masks but store a tuple so specs stay hashable.
        object.__setattr__(self, "masks", tuple(self.masks))
        unknown = [m for m in self.masks if m not in MASKS]
        if unknown:
            raise ValueError(f"unknown masks {unknown} (known: {', '.join(MASKS)})")

    @property
    def dtype_token(self) -> str:
        token = self.dtype if self.acc == DEFAULT_ACC[self.dtype] else f"{self.dtype}_{self.acc}"
        return f"{token}_kv{self.kv_dtype}" if self.kv_dtype else token

    @property
    def name(self) -> str:
        head = f"d{self.d}" if self.dv == self.d else f"d{self.d}_dv{self.dv}"
        return (
            f"{PREFIX}_{self.family}_{self.dtype_token}_{head}"
            f"_{self.block_m}x{self.block_n}_w{self.warps_m}x{self.warps_n}_sm{self.sm}"
        )

    @classmethod
    def parse(cls, name: str, masks=ALL_MASKS) -> "KernelSpec":
        """The spec named `name`. Masks are not part of a name, so they come as an argument."""
        match = _NAME_RE.fullmatch(name)
        if match is None:
            raise ValueError(f"not a kernel name: {name!r}")
        g = match.groupdict()
        dtype = g["dtype"]
        d = int(g["d"])
        spec = cls(
            family=g["family"],
            sm=int(g["sm"]),
            dtype=dtype,
            acc=g["acc"] or DEFAULT_ACC[dtype],
            d=d,
            dv=int(g["dv"]) if g["dv"] else d,
            block_m=int(g["block_m"]),
            block_n=int(g["block_n"]),
            warps_m=int(g["warps_m"]),
            warps_n=int(g["warps_n"]),
            masks=masks,
            kv_dtype=g["kv_dtype"] or "",
        )
        # Reject spellings that parse but are not canonical (d128_dv128, bf16_fp32, d0128):
        # one kernel, one name.
        if spec.name != name:
            raise ValueError(f"not a canonical kernel name: {name!r} (did you mean {spec.name!r}?)")
        return spec

    def to_dict(self) -> dict:
        """The spec as plain JSON values, with its name (generated/manifest.json)."""
        out = asdict(self)
        out["masks"] = list(self.masks)
        out["name"] = self.name
        return out
