"""Env flags -> Config -> the kernels each family generates, and setup.py's messages."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from generator import enumerate as enum
from generator.families import decode as decode_family
from generator.env import Arch, Config, EnvError, parse, parse_arch_list
from generator.main import kernels, select
from generator.rules import broken, family_archs

ROOT = Path(__file__).resolve().parent.parent
FLAGS = ("TORCH_CUDA_ARCH_LIST", "ENABLE_HMMA_FP32", "ENABLE_SM89_QMMA", "ENABLE_SM100",
         "ENABLE_SM120", "SCHEDULING_MODE", "USE_CCACHE", "FMHA_FILTER")


def run_setup(tmp_path, *args, **flags):
    """setup.py in a subprocess with exactly `flags` set, writing under tmp_path."""
    env = {k: v for k, v in os.environ.items() if k not in FLAGS}
    env.update(flags)
    return subprocess.run([sys.executable, str(ROOT / "setup.py"), "--out", str(tmp_path / "gen"), *args],
                          env=env, capture_output=True, text=True, timeout=120)


def names(environ):
    return [s.name for s in kernels(parse(environ))]


# --- counts -----------------------------------------------------------------------------
# Written out from the rules (enumerate.py's comments), not computed from its tables:
# flash: d = 16, 24, ..., 256 (31 sizes) and MLA's d = 192 / dv = 128: 32 per (dtype, acc).
N_HEADS = 32
# ws: d = 32, 40, 64, 72, 80, 96, 104, 128, 160, 192, 256 and MLA: 12 per dtype; and e4m3
# (FP8) at d = 64 (two rows: the padding mask's 192 x 128 first), 128, 256 and MLA so far.
N_WS = 12
N_WS_FP8 = 5
WS_FP8 = ["fmha_v2_ws_e4m3_d64_192x128_w12x1_sm90", "fmha_v2_ws_e4m3_d64_128x256_w8x1_sm90", "fmha_v2_ws_e4m3_d128_128x192_w8x1_sm90",
          "fmha_v2_ws_e4m3_d256_128x128_w8x1_sm90", "fmha_v2_ws_e4m3_d192_dv128_128x128_w8x1_sm90"]
# decode: portable like flash, so every build has them: 2 dtypes x d 32, 64, 128, 256 x (the
# mma path + the warp path's rows 1, 4, 8), and the e4m3-cache mma tile of each (dtype, d).
N_DEC_16 = 32
N_DEC_KV8 = 8
N_DEC = N_DEC_16 + N_DEC_KV8
# The e4m3-cache tiles: 4, 2, 2, 1 KV heads a CTA (16 rows each), 32 KB stages of K and V.
KV8_TILES = {32: "64x128_w1x4", 64: "32x128_w1x4", 128: "32x64_w1x4", 256: "16x64_w1x4"}

# qmma (ENABLE_SM89_QMMA=1, an arch >= 8.9 listed): e4m3 at d = 64 and 128, 64 x 64 on 4 warps.
QMMA_NAMES = ["fmha_v2_qmma_e4m3_d64_64x64_w4x1_sm89", "fmha_v2_qmma_e4m3_d128_64x64_w4x1_sm89"]

# Tiles by head size (block_m x block_n _ warps_m x warps_n), as the rules choose them.
DECODE_TILES = {32: ("64x64_w1x4", "1x16_w4x1", "4x16_w4x1", "8x8_w4x1"),
                64: ("32x64_w1x4", "1x8_w4x1", "4x8_w4x1", "8x4_w4x1"),
                128: ("16x64_w1x4", "1x4_w4x1", "4x4_w4x1", "8x2_w4x1"),
                256: ("16x64_w1x4", "1x2_w4x1", "4x2_w4x1", "8x1_w4x1")}
WS_TILES = {32: "192x128_w12x1", 40: "192x128_w12x1", 64: "192x128_w12x1", 72: "128x128_w8x1",
            80: "128x128_w8x1", 96: "128x128_w8x1", 104: "128x128_w8x1", 128: "128x128_w8x1",
            160: "128x64_w8x1", 192: "128x64_w8x1", 256: "128x64_w8x1"}
FLASH_MLA = "d192_dv128_64x64_w4x1"
WS_MLA = "d192_dv128_128x128_w8x1"


def flash_names(dtype: str) -> list[str]:
    """128 query rows up to d = 128, 64 above (the accumulators' registers)."""
    sizes = [f"d{d}_{'128x64' if d <= 128 else '64x64'}_w4x1" for d in range(16, 257, 8)]
    return [f"fmha_v2_flash_{dtype}_{size}_sm80" for size in sizes + [FLASH_MLA]]


def ws_names(dtype: str) -> list[str]:
    return [f"fmha_v2_ws_{dtype}_{size}_sm90" for size in [f"d{d}_{t}" for d, t in WS_TILES.items()] + [WS_MLA]]


def decode_names(dtype: str) -> list[str]:
    return [f"fmha_v2_decode_{dtype}_d{d}_{tile}_sm80" for d, tiles in DECODE_TILES.items() for tile in tiles]


def kv8_names(dtype: str) -> list[str]:
    return [f"fmha_v2_decode_{dtype}_kve4m3_d{d}_{tile}_sm80" for d, tile in KV8_TILES.items()]


def test_hand_counts():
    assert (len(flash_names("fp16")), len(ws_names("bf16")), len(decode_names("bf16")) * 2) == (N_HEADS, N_WS, N_DEC_16)
    assert len(kv8_names("bf16")) * 2 == N_DEC_KV8


@pytest.mark.parametrize("environ, flash, ws", [
    # The default list 8.0;9.0 names Hopper: ws fp16 and bf16 (both accumulate in fp32;
    # ENABLE_HMMA_FP32 is about the flash family's fp16_fp32 kernels only).
    ({}, 2 * N_HEADS, 2 * N_WS + N_WS_FP8),
    ({"ENABLE_HMMA_FP32": "1"}, 3 * N_HEADS, 2 * N_WS + N_WS_FP8),      # + flash fp16 with fp32 accumulation
    ({"TORCH_CUDA_ARCH_LIST": "8.0"}, 2 * N_HEADS, 0),       # no 9.x: no ws
    ({"TORCH_CUDA_ARCH_LIST": "8.0", "ENABLE_HMMA_FP32": "1"}, 3 * N_HEADS, 0),
    ({"TORCH_CUDA_ARCH_LIST": "9.0"}, 2 * N_HEADS, 2 * N_WS + N_WS_FP8),
    ({"TORCH_CUDA_ARCH_LIST": "9.0a"}, 2 * N_HEADS, 2 * N_WS + N_WS_FP8),
    ({"TORCH_CUDA_ARCH_LIST": "8.0;9.0"}, 2 * N_HEADS, 2 * N_WS + N_WS_FP8),
    ({"TORCH_CUDA_ARCH_LIST": "8.6"}, 2 * N_HEADS, 0),
    ({"TORCH_CUDA_ARCH_LIST": "10.0;12.0"}, 2 * N_HEADS, 0),  # sm_90a code runs on sm_90 only
    ({"TORCH_CUDA_ARCH_LIST": "9.0", "ENABLE_HMMA_FP32": "1"}, 3 * N_HEADS, 2 * N_WS + N_WS_FP8),
    ({"TORCH_CUDA_ARCH_LIST": "9.0a", "ENABLE_HMMA_FP32": "1"}, 3 * N_HEADS, 2 * N_WS + N_WS_FP8),
    ({"ENABLE_SM100": "1", "ENABLE_SM89_QMMA": "1"}, 2 * N_HEADS, 2 * N_WS + N_WS_FP8),   # + qmma (QMMA_NAMES)
])
def test_counts(environ, flash, ws):
    selections = select(parse(environ))
    assert list(selections) == ["decode", "ws", "qmma", "flash"]  # dispatch order
    assert len(selections["flash"].kept) == flash
    assert len(selections["ws"].kept) == ws
    assert len(selections["decode"].kept) == N_DEC
    qmma = len(QMMA_NAMES) if environ.get("ENABLE_SM89_QMMA") else 0
    assert [s.name for s in selections["qmma"].kept] == QMMA_NAMES[:qmma]
    assert len(names(environ)) == N_DEC + flash + ws + qmma


def test_default_kernels():
    """Registry order: decode, ws, flash; within a family by dtype, then head size."""
    decode = decode_names("fp16_fp32") + decode_names("bf16") + kv8_names("fp16_fp32") + kv8_names("bf16")
    ws = ws_names("fp16_fp32") + ws_names("bf16") + WS_FP8
    flash = flash_names("fp16") + flash_names("bf16")
    got = names({})
    assert got == decode + ws + flash
    assert got[:2] == ["fmha_v2_decode_fp16_fp32_d32_64x64_w1x4_sm80", "fmha_v2_decode_fp16_fp32_d32_1x16_w4x1_sm80"]
    assert got[-1] == "fmha_v2_flash_bf16_d192_dv128_64x64_w4x1_sm80"


def test_hopper_build_with_hmma_fp32():
    """TORCH_CUDA_ARCH_LIST=9.0 ENABLE_HMMA_FP32=1 (bench/gpu_tier.sh's build): 165 kernels."""
    got = names({"TORCH_CUDA_ARCH_LIST": "9.0", "ENABLE_HMMA_FP32": "1"})
    assert len(got) == 165
    assert got == (decode_names("fp16_fp32") + decode_names("bf16") + kv8_names("fp16_fp32") + kv8_names("bf16") + ws_names("fp16_fp32") + ws_names("bf16")
                   + WS_FP8 + flash_names("fp16") + flash_names("bf16") + flash_names("fp16_fp32"))


def test_decode_rows_ascend():
    """Within a (dtype, d): first the mma path (dispatch takes it for caches of at least 64
    keys, any row count), then the warp-path rows 1, 4, 8: the driver takes the first that
    holds h / h_kv * s_q rows; the largest holds any count (it tiles)."""
    specs = [s for s in kernels(parse({})) if s.family == "decode" and not s.kv_dtype]
    for dtype in ("fp16", "bf16"):
        for d, tiles in DECODE_TILES.items():
            got = [f"{s.block_m}x{s.block_n}_w{s.warps_m}x{s.warps_n}" for s in specs if s.dtype == dtype and s.d == d]
            assert got == list(tiles)
    assert [enum.decode_max_rows(s) for s in specs[:4]] == [0, 1, 4, 0]
    assert [enum.decode_min_s_kv(s) for s in specs[:4]] == [64, 0, 0, 0]


def test_ws_rows_come_before_flash_rows_of_the_same_problem():
    """The driver runs the first row that fits: on Hopper the ws kernel, elsewhere (no sm_90a
    image) the flash one. fp16 accumulation (-fp16) has no ws kernel; e4m3 has no flash one."""
    order = [(s.family, s.dtype, s.acc, s.d) for s in kernels(parse({"ENABLE_HMMA_FP32": "1"}))]
    ws = [key for key in order if key[0] == "ws"]
    assert len(ws) == 2 * N_WS + N_WS_FP8 and not any(acc == "fp16" for _, _, acc, _ in ws)
    for _, dtype, acc, d in ws:
        if dtype != "e4m3":
            assert order.index(("ws", dtype, acc, d)) < order.index(("flash", dtype, acc, d))


def test_arch_list_changes_binaries_not_kernels():
    """Flash runs on every arch >= 8.0: the list picks the gencode, not the kernel set."""
    flash = [n for n in names({}) if "_flash_" in n]
    for arch_list, expect in [("9.0", ["9.0"]), ("8.0;9.0", ["8.0", "9.0"]), ("8.6", ["8.6"])]:
        config = parse({"TORCH_CUDA_ARCH_LIST": arch_list})
        assert [n for n in names({"TORCH_CUDA_ARCH_LIST": arch_list}) if "_flash_" in n] == flash
        assert [str(a) for a in family_archs("flash", config)] == expect


@pytest.mark.parametrize("arch_list, expect", [
    ("9.0", ["9.0a"]),             # 9.0 means Hopper; ws needs the arch-specific target
    ("9.0a", ["9.0a"]),
    ("8.0;9.0", ["9.0a"]),
    ("9.0+PTX", ["9.0a"]),         # compute_90a PTX would only load on sm_90: none embedded
    ("8.0;8.9;10.0", []),
    ("8.0", []),
])
def test_ws_archs(arch_list, expect):
    assert [str(a) for a in family_archs("ws", parse({"TORCH_CUDA_ARCH_LIST": arch_list}))] == expect


def test_head_sizes_cover_every_multiple_of_8_from_16_to_256():
    assert enum.HEAD_SIZES == tuple(range(16, 257, 8))
    assert {32, 40, 64, 72, 80, 96, 104, 128, 160, 192, 256} <= set(enum.HEAD_SIZES)


def test_every_candidate_passes_the_rules():
    """With every flag that turns kernels on, no candidate of any family is rejected."""
    config = parse({"ENABLE_HMMA_FP32": "1"})
    specs = [s for family in enum.candidates(config).values() for s in family]
    assert {s.family for s in specs} == {"decode", "ws", "flash"} and len(specs) == 165
    assert [(s.name, broken(s, config)) for s in specs if broken(s, config)] == []


def test_ws_tile():
    # One 64-column panel (d <= 64): 192 rows over three consumer warpgroups (12 warps);
    # otherwise 128 rows over two. 128-key blocks, 64 from three panels on (shared memory).
    assert enum.WS_HEAD_SIZES == (32, 40, 64, 72, 80, 96, 104, 128, 160, 192, 256)
    assert [enum.ws_tile(d) for d in enum.WS_HEAD_SIZES] == (
        [(192, 128, 12, 1)] * 3 + [(128, 128, 8, 1)] * 5 + [(128, 64, 8, 1)] * 3)
    # MLA (d=192, dv=128): Q and two 128-key K/V stages fit, so 128 keys.
    assert enum.ws_tile(192, 128) == (128, 128, 8, 1)


# --- FMHA_FILTER ------------------------------------------------------------------------

@pytest.mark.parametrize("globs, count", [
    ("*_fp16_d64_*", 1),
    ("*bf16*", 32 + 12 + 16 + 4),           # flash + ws + decode + decode over an e4m3 cache
    ("*_flash_bf16*", 32),
    ("*_ws_*", 29),                         # fp16 (fp32 accumulation), bf16, and e4m3 at d = 64 (2), 128, 256, MLA
    ("*_d128_*,*_d256_*", 4 + 6 + 20),      # flash + ws (+ e4m3) + decode (2 dtypes x (4 tiles + the e4m3 cache's))
    (" *_d128_* , *_d256_* ,", 4 + 6 + 20), # blanks and empty entries are ignored
    ("*_e4m3_*", 5),                        # e4m3 inputs (ws); an e4m3 cache is "_kve4m3_"
    ("*_kve4m3_*", 8),
    ("fmha_v2_flash_fp16_d32_128x64_w4x1_sm80", 1),
    ("fmha_v2_ws_bf16_d256_128x64_w8x1_sm90", 1),
    ("*_flash_fp16_fp32*", 0),              # rules come first: HMMA_FP32 is off
    ("*_ws_fp16_fp32*", 12),                # the ws family's fp16 kernels need no flag
    ("nothing*", 0),
    ("", 133),                              # empty = unset = everything
])
def test_fmha_filter(globs, count):
    assert len(names({"FMHA_FILTER": globs})) == count


def test_filtered_and_rejected_are_reported_apart():
    selection = select(parse({"FMHA_FILTER": "*bf16*"}))["flash"]
    assert len(selection.kept) == N_HEADS
    assert len(selection.filtered) == N_HEADS                  # the fp16 kernels
    assert {r[0].name for r in selection.rejected} == {n for n in names({"ENABLE_HMMA_FP32": "1"})
                                                       if "_flash_fp16_fp32" in n}


# --- env parsing ------------------------------------------------------------------------

@pytest.mark.parametrize("text, expect", [
    ("8.0;9.0", ["8.0", "9.0"]),
    ("8.0,9.0", ["8.0", "9.0"]),
    (" 8.0  9.0 ", ["8.0", "9.0"]),
    ("9.0;8.0", ["8.0", "9.0"]),                    # sorted: same list, same files
    ("9.0;9.0+PTX;8.0;8.0", ["8.0", "9.0+PTX"]),     # duplicates merge, PTX kept
    ("9.0a", ["9.0a"]),
    ("9.0A", ["9.0a"]),
    ("8.6;8.9;9.0;10.0;12.0", ["8.6", "8.9", "9.0", "10.0", "12.0"]),
    ("10.0f;12.0a+ptx", ["10.0f", "12.0a+PTX"]),
])
def test_arch_list(text, expect):
    assert [str(a) for a in parse_arch_list(text)] == expect


def test_arch_gencode():
    assert Arch(90, "a", ptx=True).gencode() == [
        "-gencode arch=compute_90a,code=sm_90a", "-gencode arch=compute_90a,code=compute_90a"]
    assert Arch(80).gencode() == ["-gencode arch=compute_80,code=sm_80"]


@pytest.mark.parametrize("text, words", [
    ("abc", "not an arch"),
    ("8", "not an arch"),
    ("8.0;sm_90", "not an arch"),
    ("7.5", "no kernel family supports it"),
    ("7.5;8.0", "no kernel family supports it"),
    ("8.5", "not a known arch"),
    ("8.6a", "the 'a' suffix needs an arch >= 9.0"),
    ("9.0f", "the 'f' suffix needs an arch >= 10.0"),
    (";", "empty"),
])
def test_bad_arch_list(text, words):
    with pytest.raises(EnvError, match=words):
        parse_arch_list(text)


@pytest.mark.parametrize("value, expect", [
    ("1", True), ("true", True), ("TRUE", True), ("On", True),
    ("0", False), ("false", False), ("OFF", False), ("", False),
])
def test_bool_flags(value, expect):
    assert parse({"ENABLE_HMMA_FP32": value}).enable_hmma_fp32 is expect
    assert parse({"USE_CCACHE": value}).use_ccache is expect


@pytest.mark.parametrize("flag, value", [
    ("ENABLE_HMMA_FP32", "yes"), ("ENABLE_HMMA_FP32", "2"), ("USE_CCACHE", "enable"),
    ("ENABLE_SM100", "-1"), ("SCHEDULING_MODE", "2"), ("SCHEDULING_MODE", "persistent"),
])
def test_bad_flag_values(flag, value):
    with pytest.raises(EnvError, match=flag):
        parse({flag: value})


def test_defaults():
    config = parse({})
    assert config == Config()
    assert [str(a) for a in config.archs] == ["8.0", "9.0"]
    assert config.scheduling_mode == 1 and not config.enable_hmma_fp32 and config.fmha_filter == ()
    assert parse({"SCHEDULING_MODE": "0"}).scheduling_mode == 0


# --- setup.py as users run it -----------------------------------------------------------

@pytest.mark.parametrize("flag, value", [
    ("TORCH_CUDA_ARCH_LIST", "abc"),
    ("TORCH_CUDA_ARCH_LIST", "7.5"),
    ("ENABLE_HMMA_FP32", "yes"),
    ("SCHEDULING_MODE", "2"),
    ("USE_CCACHE", "maybe"),
])
def test_setup_rejects_bad_values_with_exit_2(tmp_path, flag, value):
    run = run_setup(tmp_path, **{flag: value})
    assert run.returncode == 2
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("setup.py: error: ") and flag in lines[0]
    assert not (tmp_path / "gen").exists()        # nothing generated from a bad config


@pytest.mark.parametrize("flags, flash", [({}, 64), ({"TORCH_CUDA_ARCH_LIST": "9.0", "ENABLE_HMMA_FP32": "1"}, 96)])
def test_setup_prints_one_line_per_family(tmp_path, flags, flash):
    run = run_setup(tmp_path, **flags)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0].startswith("decode (decode family, s_q <= 16, split-KV, mma.sync or CUDA cores): 40 kernels -> ")
    assert lines[1].startswith("ws (ws family, wgmma + TMA, warp-specialised): 29 kernels -> ")
    assert lines[2].startswith("qmma (sm89 family, FP8 e4m3 mma.sync (QMMA)): 0 kernels -> ")  # ENABLE_SM89_QMMA off
    assert lines[3].startswith(f"flash (sm80 family, mma.sync): {flash} kernels -> ")
    assert "rejected" not in run.stdout


HMMA_REASON = "flash fp16 inputs with fp32 accumulation need ENABLE_HMMA_FP32=1"
WS_ARCH_REASON = "family ws is built for sm_90a only (wgmma, setmaxnreg): TORCH_CUDA_ARCH_LIST must name 9.0 or 9.0a"


def rejected_lines(stdout):
    return [line for line in stdout.splitlines() if line.startswith("  rejected ")]


def test_setup_verbose_prints_rejections_with_reasons(tmp_path):
    run = run_setup(tmp_path, "-v")
    assert run.returncode == 0, run.stderr
    rejected = rejected_lines(run.stdout)
    assert len(rejected) == N_HEADS   # flash fp16_fp32 only: ws fp16 kernels need no flag
    assert all(line.endswith(f": {HMMA_REASON}") for line in rejected)
    assert "  compiled for: 9.0a\n" in run.stdout and "  compiled for: 8.0 9.0\n" in run.stdout


def test_setup_explains_no_ws_without_hopper(tmp_path):
    run = run_setup(tmp_path, "-v", TORCH_CUDA_ARCH_LIST="8.0;8.6", ENABLE_HMMA_FP32="1")
    assert run.returncode == 0, run.stderr
    assert "ws (ws family, wgmma + TMA, warp-specialised): 0 kernels" in run.stdout
    assert "  compiled for: nothing (no arch of this family in TORCH_CUDA_ARCH_LIST)" in run.stdout
    ws = [line for line in rejected_lines(run.stdout) if "_ws_" in line]
    assert len(ws) == 2 * N_WS + N_WS_FP8 and all(line.endswith(f": {WS_ARCH_REASON}") for line in ws)
    assert not [line for line in rejected_lines(run.stdout) if "_flash_" in line]


def test_setup_reports_what_the_arch_flags_built(tmp_path):
    run = run_setup(tmp_path, ENABLE_SM89_QMMA="1", ENABLE_SM100="on", ENABLE_SM120="true", SCHEDULING_MODE="0")
    assert run.returncode == 0, run.stderr
    assert ("ENABLE_SM89_QMMA=1: the qmma family (FP8 e4m3, mma.sync m16n8k32) is built for the listed archs "
            "from 8.9 on") in run.stdout
    assert "qmma (sm89 family, FP8 e4m3 mma.sync (QMMA)): 2 kernels -> " in run.stdout
    for flag, sm in (("ENABLE_SM100", "sm_100"), ("ENABLE_SM120", "sm_120")):
        assert f"{flag}=1: flash and decode are also compiled for {sm}; no Blackwell-specific family" in run.stdout
    assert "SCHEDULING_MODE=0: ws kernels use static grid, one CTA per tile" in run.stdout


@pytest.mark.parametrize("mode, persistent", [("0", "false"), ("1", "true"), (None, "true")])
def test_scheduling_mode_reaches_the_ws_traits_and_registry(tmp_path, mode, persistent):
    """SCHEDULING_MODE (default 1) is the ws kernels' kPersistent and KernelMeta::persistent;
    the flash family has no scheduler parameter."""
    env = {"FMHA_FILTER": "*_d128_*", "TORCH_CUDA_ARCH_LIST": "9.0"}
    if mode is not None:
        env["SCHEDULING_MODE"] = mode
    run = run_setup(tmp_path, **env)
    assert run.returncode == 0, run.stderr
    kernels = sorted((tmp_path / "gen" / "kernels").glob("*.cu"))
    ws = [k for k in kernels if "_ws_" in k.name]
    flash = [k for k in kernels if "_flash_" in k.name]
    assert ws and flash
    for k in ws:
        assert f"/*kPersistent=*/{persistent}>" in k.read_text(), k.name
    for k in flash:
        assert "kPersistent" not in k.read_text(), k.name
    registry = (tmp_path / "gen" / "registry.cpp").read_text()
    rows = registry.split("const KernelMeta kKernels[] = {")[1]
    assert rows.count(f"/*persistent=*/{persistent}") >= len(ws)
    assert rows.count("/*persistent=*/false") >= len(flash)


def test_setup_bad_argument_exits_2(tmp_path):
    assert run_setup(tmp_path, "--no-such-flag").returncode == 2


def test_decode_kv8_tiles():
    """The e4m3-cache rows: the mma path alone, at every cache length (no warp path takes an
    e4m3 cache), after every 16-bit-cache row; OneHead siblings at d = 64 and 128 (d = 32's
    would be a 512-key block, past the paged loader's 256), no Quad."""
    specs = [s for s in kernels(parse({})) if s.family == "decode"]
    kv8 = [s for s in specs if s.kv_dtype]
    assert [s.name for s in kv8] == kv8_names("fp16_fp32") + kv8_names("bf16")
    assert specs[-len(kv8):] == kv8
    assert {enum.decode_min_s_kv(s) for s in kv8} == {0} and {enum.decode_max_rows(s) for s in kv8} == {0}
    assert all(decode_family.constants(s)["kKvE4m3"] for s in kv8)
    assert {s.d: tuple(decode_family.siblings(s).values()) for s in kv8} == {
        32: (), 64: ((16, 256, 1, 4),), 128: ((16, 128, 1, 4),), 256: ()}
    assert not any(decode_family.constants(s)["kKvE4m3"] for s in specs if not s.kv_dtype)
