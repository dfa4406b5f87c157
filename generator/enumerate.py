"""Env Config -> candidate KernelSpecs, one function per family.

Each family's head sizes, dtypes and tiles are its module's (generator/families/); this
module turns them into specs. Candidates are what a family could offer; rules.py decides
which are generated (a flag may turn some off) and FMHA_FILTER narrows the rest. Order
matters: the driver dispatches to the first registry row that fits, so families come in
FAMILIES order (spec.py: the preferred family first) and within a family the preferred
kernel first.
"""

from __future__ import annotations

from dataclasses import replace

from .env import Config
from .families import decode as _decode
from .families import flash as _flash
from .families import qmma as _qmma
from .families import ws as _ws
from .spec import ALL_MASKS, FAMILIES, KernelSpec

# (d, dv) pairs beyond dv = d that the prefill families build: DeepSeek's MLA prefill heads
# (Q and K of 192 = 128 "nope" + 64 rope columns, V of 128), separate Q/K/V only.
MLA_HEAD_SIZES = ((192, 128),)

# The families' choices live in generator/families/; these names stay for their importers.
HEAD_SIZES = _flash.HEAD_SIZES
FLASH_DTYPES = _flash.DTYPES
flash_tile = _flash.tile
WS_HEAD_SIZES = _ws.HEAD_SIZES
WS_DTYPES = _ws.DTYPES
WS_SMEM_BUDGET = _ws.SMEM_BUDGET
ws_panels = _ws.panels
ws_tile = _ws.tile
DECODE_HEAD_SIZES = _decode.HEAD_SIZES
DECODE_ROWS = _decode.ROWS
DECODE_DTYPES = _decode.DTYPES
DECODE_WARPS = _decode.WARPS
DECODE_UNROLL = _decode.UNROLL
DECODE_MMA_MIN_S_KV = _decode.MMA_MIN_S_KV
decode_mma_tile = _decode.mma_tile
decode_tile = _decode.warp_tile


def _spec(family_name: str, dtype: str, acc: str, d: int, dv: int, tile: tuple, kv_dtype: str = "") -> KernelSpec:
    block_m, block_n, warps_m, warps_n = tile
    return KernelSpec(family=family_name, sm=FAMILIES[family_name].sm, dtype=dtype, acc=acc, d=d, dv=dv,
                      block_m=block_m, block_n=block_n, warps_m=warps_m, warps_n=warps_n, masks=ALL_MASKS,
                      kv_dtype=kv_dtype)


def _specs(family_name: str, dtypes, head_sizes, tile) -> list[KernelSpec]:
    """One spec per (dtype, acc) x head size, every mask, tiles from `tile(d, dv)`. head_sizes:
    d (dv = d) or a (d, dv) pair."""
    specs = []
    for dtype, acc in dtypes:
        for size in head_sizes:
            d, dv = size if isinstance(size, tuple) else (size, size)
            specs.append(_spec(family_name, dtype, acc, d, dv, tile(d, dv)))
    return specs


def flash(config: Config) -> list[KernelSpec]:
    """The flash family (FlashAttention-2 split over mma.sync, SM80 and newer)."""
    return _specs("flash", _flash.DTYPES, _flash.HEAD_SIZES + MLA_HEAD_SIZES, _flash.tile)


def ws(config: Config) -> list[KernelSpec]:
    """The ws family (FlashAttention-3 design over wgmma + TMA, warp-specialised, sm_90a)."""
    fp8 = _specs("ws", _ws.FP8_DTYPES, _ws.FP8_HEAD_SIZES + MLA_HEAD_SIZES, _ws.fp8_tile)
    return (_specs("ws", _ws.DTYPES, _ws.HEAD_SIZES + MLA_HEAD_SIZES, _ws.tile)
            + [row for spec in fp8 for row in _ws.fp8_rows(spec)])


def decode(config: Config) -> list[KernelSpec]:
    """The decode family: per (dtype, d), its tiles in registry order (families/decode.py), then
    the e4m3-cache tiles (a row of another KV dtype never serves a 16-bit cache)."""
    return ([_spec("decode", dtype, acc, d, d, tile)
             for dtype, acc in _decode.DTYPES for d in _decode.HEAD_SIZES for tile in _decode.tiles(d)]
            + [_spec("decode", dtype, acc, d, d, _decode.kv8_tile(d), kv_dtype="e4m3")
               for dtype, acc in _decode.KV8_DTYPES for d in _decode.KV8_HEAD_SIZES])


def qmma(config: Config) -> list[KernelSpec]:
    """The qmma family (FP8 on SM89's mma.sync QMMA), with ENABLE_SM89_QMMA=1: every mask but
    the custom one."""
    if not config.enable_sm89_qmma:
        return []
    return [replace(spec, masks=_qmma.MASKS) for spec in _specs("qmma", _qmma.DTYPES, _qmma.HEAD_SIZES, _qmma.tile)]


def decode_max_rows(spec: KernelSpec) -> int:
    """KernelMeta::max_rows (families/decode.py); 0 for the other families."""
    return _decode.max_rows(spec) if spec.family == "decode" else 0


def decode_min_s_kv(spec: KernelSpec) -> int:
    """KernelMeta::min_s_kv (families/decode.py); 0 for the other families."""
    return _decode.min_s_kv(spec) if spec.family == "decode" else 0


# family name -> its enumeration function; a new family adds one line here.
ENUMERATORS = {
    "decode": decode,
    "ws": ws,
    "qmma": qmma,
    "flash": flash,
}
assert set(ENUMERATORS) == set(FAMILIES), "every family needs an enumeration function"


def candidates(config: Config) -> dict[str, list[KernelSpec]]:
    """Every family's candidates, before rules and FMHA_FILTER, in FAMILIES (dispatch) order."""
    return {name: ENUMERATORS[name](config) for name in FAMILIES}
