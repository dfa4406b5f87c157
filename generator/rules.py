"""Named validity rules. A spec is generated only when every rule accepts it.

Enumeration is deliberately generous (it may propose what a flag turns off, or what a kernel
cannot do); each rule says in words why it rejects, and `setup.py -v` prints that reason
next to the kernel name. fmha_test.py can ask the same rules which kernels must not exist.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .env import Arch, Config
from .families import MODULES
from .families import decode as _decode
from .families import qmma as _qmma
from .families import ws as _ws
from .spec import FAMILIES, KernelSpec

MAX_HEAD_SIZE = 256
# ldmatrix moves 8 x 16-byte rows: head sizes come in steps of 8 halves.
HEAD_SIZE_STEP = 8
# mma.sync m16n8k16: each warp owns whole 16-row slices of the tile.
MMA_M = 16
# P·V reduces over the keys in k=16 steps, so a warp's key slice is a multiple of 16.
MMA_K = 16


@dataclass(frozen=True)
class Rule:
    name: str
    reason: str     # why a spec that breaks it is rejected; may name {family} and {arch}
    accepts: Callable[[KernelSpec, Config], bool]

    def why(self, spec: KernelSpec) -> str:
        """The reason, with the spec's family, its base arch (8.0) and sm (80) filled in."""
        sm = FAMILIES[spec.family].sm
        return self.reason.format(family=spec.family, arch=f"{sm // 10}.{sm % 10}", sm=sm)


def _head_size_ok(d: int) -> bool:
    return d % HEAD_SIZE_STEP == 0 and d <= MAX_HEAD_SIZE


def _hmma_fp32_enabled(spec: KernelSpec, config: Config) -> bool:
    # ENABLE_HMMA_FP32 is about the mma.sync (HMMA) family, which has an fp16-accumulating
    # default; wgmma families accumulate in fp32 only, so their fp16 kernels always exist.
    fp16_fp32 = spec.family == "flash" and spec.dtype == "fp16" and spec.acc == "fp32"
    return not fp16_fp32 or config.enable_hmma_fp32


# The families' limits live in generator/families/; these names stay for their importers.
WS_BLOCK_M = _ws.BLOCK_M
WS_BLOCK_N = _ws.BLOCK_N
DECODE_HEAD_SIZES = _decode.HEAD_SIZES
DECODE_ROWS = _decode.ROWS
DECODE_MMA_KEYS = _decode.MMA_KEYS
DECODE_MMA_HEADS = _decode.MMA_HEADS
decode_mma_tile = _decode.mma_tile
decode_is_mma = _decode.is_mma
_DECODE_HEADS = "{{" + ", ".join(map(str, DECODE_HEAD_SIZES)) + "}}"
_DECODE_ROWS = "{{" + ", ".join(map(str, DECODE_ROWS)) + "}}"


def _decode_traits_ok(spec: KernelSpec) -> bool:
    return spec.family != "decode" or _decode.traits_ok(spec)


def _mma_family(spec: KernelSpec) -> bool:
    return spec.family != "decode"


def _ws_traits_ok(spec: KernelSpec) -> bool:
    return spec.family != "ws" or _ws.traits_ok(spec)


RULES = (
    Rule(
        "head_size",
        f"head size must be a multiple of {HEAD_SIZE_STEP} and <= {MAX_HEAD_SIZE}",
        lambda s, c: _head_size_ok(s.d) and _head_size_ok(s.dv),
    ),
    Rule(
        "fp16_acc",
        "fp16 accumulation only with fp16 inputs",
        lambda s, c: s.acc != "fp16" or s.dtype == "fp16",
    ),
    Rule(
        "hmma_fp32",
        "flash fp16 inputs with fp32 accumulation need ENABLE_HMMA_FP32=1",
        _hmma_fp32_enabled,
    ),
    Rule(
        "block_m",
        f"block_m must be a multiple of {MMA_M}*warps_m",
        lambda s, c: not _mma_family(s) or s.block_m % (MMA_M * s.warps_m) == 0,
    ),
    Rule(
        "block_n",
        f"block_n must be a multiple of {MMA_K}*warps_n",
        lambda s, c: not _mma_family(s) or s.block_n % (MMA_K * s.warps_n) == 0,
    ),
    Rule(
        "family_sm",
        "family {family} is built for base arch {arch}: sm must match",
        lambda s, c: s.sm == FAMILIES[s.family].sm,
    ),
    Rule(
        "masks",
        "a kernel must support at least one mask",
        lambda s, c: len(s.masks) > 0,
    ),
    Rule(
        "ws_traits",
        "family {family} (ws::Traits) needs fp32 accumulation, "
        "block_m " + " or ".join(map(str, WS_BLOCK_M)) + " over warps (block_m/16)x1 and block_n "
        + " or ".join(map(str, WS_BLOCK_N)) + " (e4m3 also " + " or ".join(map(str, _ws.FP8_BLOCK_N)) + ")",
        lambda s, c: _ws_traits_ok(s),
    ),
    Rule(
        "qmma_traits",
        "family {family} (qmma::Traits) needs e4m3 inputs with fp32 accumulation, d = dv in "
        + "{{" + ", ".join(map(str, _qmma.HEAD_SIZES)) + "}}, the tile " + "x".join(map(str, _qmma.TILE[:2]))
        + " over warps 4x1, and no custom mask",
        lambda s, c: s.family != "qmma" or _qmma.traits_ok(s),
    ),
    Rule(
        "kv_dtype",
        "a KV dtype other than the inputs' (an e4m3 cache) only in family decode, under fp16 or bf16 queries",
        lambda s, c: not s.kv_dtype or (s.family == "decode" and s.dtype in ("fp16", "bf16")),
    ),
    Rule(
        "decode_traits",
        "family {family} (decode::Traits) needs d = dv in " + _DECODE_HEADS + ", fp32 accumulation, "
        "and either the warp path's tile (block_m rows per warp in " + _DECODE_ROWS + ", block_n a "
        "multiple of 256/d (1-8 passes), warps 1-8 x 1) or the mma path's 16 rows x 8192/d keys "
        "(64 at d = 256), warps 1x4 (an e4m3 cache: families/decode.py kv8_tile)",
        lambda s, c: _decode_traits_ok(s),
    ),
    Rule(
        "arch",
        "family {family} needs an arch >= {arch} in TORCH_CUDA_ARCH_LIST",
        lambda s, c: FAMILIES[s.family].arch_specific or bool(family_archs(s.family, c)),
    ),
    Rule(
        "arch_specific",
        "family {family} is built for sm_{sm}a only (wgmma, setmaxnreg): TORCH_CUDA_ARCH_LIST "
        "must name {arch} or {arch}a",
        lambda s, c: not FAMILIES[s.family].arch_specific or bool(family_archs(s.family, c)),
    ),
)


def kernel_variants(spec: KernelSpec) -> tuple:
    """The run-time variants a kernel implements (KernelMeta::variants): its family's, less
    those its family module's VARIANT_EXCLUSIONS takes from it (ws: no softcapping on the
    192-row tile). The registry row then lacks the bit, dispatch takes the next row for such a
    problem, and the kernel (its Config) refuses it."""
    exclusions = getattr(MODULES[spec.family], "VARIANT_EXCLUSIONS", {})
    return tuple(v for v in FAMILIES[spec.family].variants if not (v in exclusions and exclusions[v](spec)))


def family_archs(family: str, config: Config) -> tuple:
    """The archs a family's kernels are compiled for. A portable family: every configured arch
    at or above its base. An arch-specific one (Family.arch_specific): its base arch's 'a'
    target alone (Arch(90, "a") -> sm_90a), when the list names that arch as 9.0 or 9.0a
    (with or without +PTX: compute_90a PTX would load on sm_90 only, which has the SASS, so
    none is embedded); otherwise nothing, and the family is not generated."""
    fam = FAMILIES[family]
    if fam.arch_specific:
        return (Arch(fam.sm, "a"),) if any(a.number == fam.sm for a in config.archs) else ()
    return tuple(a for a in config.archs if a.number >= fam.sm)


def broken(spec: KernelSpec, config: Config) -> list[Rule]:
    """The rules `spec` breaks under `config`; empty when it is generated."""
    return [rule for rule in RULES if not rule.accepts(spec, config)]

