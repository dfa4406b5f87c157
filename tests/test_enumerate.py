"""Env flags -> Config -> the kernels each family generates, and setup.py's messages."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from generator import enumerate as enum
from generator.env import Arch, Config, EnvError, parse, parse_arch_list
from generator.main import kernels, select
from generator import rules
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

N_HEADS = len(enum.HEAD_SIZES) + len(enum.MLA_HEAD_SIZES)    # flash kernels per (dtype, acc)
N_WS = len(enum.WS_HEAD_SIZES) + len(enum.MLA_HEAD_SIZES)     # ws kernels per (dtype, acc)
# decode kernels: portable like flash, so every build has them: 2 dtypes x head sizes x rows
N_DEC = 2 * len(enum.DECODE_HEAD_SIZES) * (1 + len(enum.DECODE_ROWS))   # mma path + warp path


@pytest.mark.parametrize("environ, flash, ws", [
    # The default list 8.0;9.0 names Hopper: ws fp16 and bf16 (both accumulate in fp32;
    # ENABLE_HMMA_FP32 is about the flash family's fp16_fp32 kernels only).
    ({}, 2 * N_HEADS, 2 * N_WS),
    ({"ENABLE_HMMA_FP32": "1"}, 3 * N_HEADS, 2 * N_WS),      # + flash fp16 with fp32 accumulation
    ({"TORCH_CUDA_ARCH_LIST": "8.0"}, 2 * N_HEADS, 0),       # no 9.x: no ws
    ({"TORCH_CUDA_ARCH_LIST": "8.0", "ENABLE_HMMA_FP32": "1"}, 3 * N_HEADS, 0),
    ({"TORCH_CUDA_ARCH_LIST": "9.0"}, 2 * N_HEADS, 2 * N_WS),
    ({"TORCH_CUDA_ARCH_LIST": "9.0a"}, 2 * N_HEADS, 2 * N_WS),
    ({"TORCH_CUDA_ARCH_LIST": "8.0;9.0"}, 2 * N_HEADS, 2 * N_WS),
    ({"TORCH_CUDA_ARCH_LIST": "8.6"}, 2 * N_HEADS, 0),
    ({"TORCH_CUDA_ARCH_LIST": "10.0;12.0"}, 2 * N_HEADS, 0),  # sm_90a code runs on sm_90 only
    ({"TORCH_CUDA_ARCH_LIST": "9.0", "ENABLE_HMMA_FP32": "1"}, 3 * N_HEADS, 2 * N_WS),
    ({"TORCH_CUDA_ARCH_LIST": "9.0a", "ENABLE_HMMA_FP32": "1"}, 3 * N_HEADS, 2 * N_WS),
    ({"ENABLE_SM100": "1", "ENABLE_SM89_QMMA": "1"}, 2 * N_HEADS, 2 * N_WS),   # no such families yet
])
def test_counts(environ, flash, ws):
    selections = select(parse(environ))
    assert list(selections) == ["decode", "ws", "flash"]          # dispatch order
    assert len(selections["flash"].kept) == flash
    assert len(selections["ws"].kept) == ws
    assert len(selections["decode"].kept) == N_DEC
    assert len(names(environ)) == N_DEC + flash + ws


def test_default_kernels():
    mla = [f"fmha_v2_ws_{dtype}_d192_dv128_128x128_w8x1_sm90" for dtype in ("fp16_fp32", "bf16")]
    ws = [f"fmha_v2_ws_{dtype}_d{d}_{'x'.join(map(str, enum.ws_tile(d)[:2]))}_w{enum.ws_tile(d)[2]}x1_sm90"
          for dtype in ("fp16_fp32", "bf16") for d in enum.WS_HEAD_SIZES]
    n = len(enum.WS_HEAD_SIZES)
    ws = ws[:n] + mla[:1] + ws[n:] + mla[1:]
    flash = [
        f"fmha_v2_flash_{dtype}_d{d}_{'x'.join(map(str, enum.flash_tile(d)[:2]))}_w4x1_sm80"
        for dtype in ("fp16", "bf16") for d in enum.HEAD_SIZES
    ]
    flash = (flash[:len(enum.HEAD_SIZES)] + ["fmha_v2_flash_fp16_d192_dv128_64x64_w4x1_sm80"] +
             flash[len(enum.HEAD_SIZES):] + ["fmha_v2_flash_bf16_d192_dv128_64x64_w4x1_sm80"])
    decode = [name for dtype in ("fp16_fp32", "bf16") for d in enum.DECODE_HEAD_SIZES
              for name in (f"fmha_v2_decode_{dtype}_d{d}_{'x'.join(map(str, enum.decode_mma_tile(d)[:2]))}_w1x4_sm80",
                           *(f"fmha_v2_decode_{dtype}_d{d}_{'x'.join(map(str, enum.decode_tile(d, r)[:2]))}_w4x1_sm80"
                             for r in enum.DECODE_ROWS))]
    assert names({}) == decode + ws + flash


def test_decode_rows_ascend_so_dispatch_takes_the_smallest_that_holds_the_problem():
    """Within a (dtype, d): first the mma path (dispatch takes it for caches of at least
    DECODE_MMA_MIN_S_KV keys, any row count), then the warp-path rows 1, 4, 8: the driver
    takes the first that holds h / h_kv * s_q rows; the largest holds any count (it tiles)."""
    specs = [s for s in kernels(parse({})) if s.family == "decode"]
    for dtype in ("fp16", "bf16"):
        for d in enum.DECODE_HEAD_SIZES:
            tiles = [(s.block_m, s.block_n, s.warps_m, s.warps_n) for s in specs if s.dtype == dtype and s.d == d]
            assert tiles[0] == enum.decode_mma_tile(d)
            assert [t[0] for t in tiles[1:]] == list(enum.DECODE_ROWS)
    assert [enum.decode_max_rows(s) for s in specs[:4]] == [0, 1, 4, 0]
    assert [enum.decode_min_s_kv(s) for s in specs[:4]] == [enum.DECODE_MMA_MIN_S_KV, 0, 0, 0]


def test_ws_kernels_with_hmma_fp32():
    tile = {32: "192x128_w12x1", 40: "192x128_w12x1", 64: "192x128_w12x1", 72: "128x128_w8x1",
            80: "128x128_w8x1", 96: "128x128_w8x1", 104: "128x128_w8x1", 128: "128x128_w8x1",
            160: "128x64_w8x1", 192: "128x64_w8x1", 256: "128x64_w8x1"}
    assert [n for n in names({"TORCH_CUDA_ARCH_LIST": "9.0", "ENABLE_HMMA_FP32": "1"}) if "_ws_" in n] == [
        f"fmha_v2_ws_{dtype}_{name}_sm90" for dtype in ("fp16_fp32", "bf16")
        for name in [f"d{d}_{t}" for d, t in tile.items()] + ["d192_dv128_128x128_w8x1"]]


def test_ws_rows_come_before_flash_rows_of_the_same_problem():
    """The driver runs the first row that fits: on Hopper the ws kernel, elsewhere (no sm_90a
    image) the flash one. fp16 accumulation (-fp16) has no ws kernel."""
    order = [(s.family, s.dtype, s.acc, s.d) for s in kernels(parse({"ENABLE_HMMA_FP32": "1"}))]
    ws = [key for key in order if key[0] == "ws"]
    assert len(ws) == 2 * N_WS and not any(acc == "fp16" for _, _, acc, _ in ws)
    for _, dtype, acc, d in ws:
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


def test_tiles_come_from_their_tile_function_and_pass_the_rules():
    config = parse({"ENABLE_HMMA_FP32": "1"})
    tile = {"flash": enum.flash_tile, "ws": enum.ws_tile,
            "decode": lambda spec: (enum.decode_mma_tile(spec.d) if rules.decode_is_mma(spec)
                                    else enum.decode_tile(spec.d, spec.block_m))}
    specs = [s for family in enum.candidates(config).values() for s in family]
    assert {s.family for s in specs} == set(tile)
    for spec in specs:
        got = (spec.block_m, spec.block_n, spec.warps_m, spec.warps_n)
        assert got == (tile[spec.family](spec) if spec.family == "decode" else tile[spec.family](spec.d, spec.dv))
        assert broken(spec, config) == []


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
    ("*bf16*", N_HEADS + N_WS + N_DEC // 2),
    ("*_flash_bf16*", N_HEADS),
    ("*_ws_*", 2 * N_WS),                   # fp16 (fp32 accumulation) and bf16
    ("*_d128_*,*_d256_*", 4 + 4 + 16),         # flash + ws + decode (2 dtypes x 4 tiles each)
    (" *_d128_* , *_d256_* ,", 4 + 4 + 16),    # blanks and empty entries are ignored
    ("fmha_v2_flash_fp16_d32_128x64_w4x1_sm80", 1),
    ("fmha_v2_ws_bf16_d256_128x64_w8x1_sm90", 1),
    ("*_flash_fp16_fp32*", 0),              # rules come first: HMMA_FP32 is off
    ("*_ws_fp16_fp32*", N_WS),              # the ws family's fp16 kernels need no flag
    ("nothing*", 0),
    ("", 2 * N_HEADS + 2 * N_WS + N_DEC),   # empty = unset = everything
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


def test_setup_prints_one_line_per_family(tmp_path):
    run = run_setup(tmp_path)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0].startswith(f"decode (decode family, s_q <= 16, split-KV, mma.sync or CUDA cores): {N_DEC} kernels -> ")
    assert lines[1].startswith(f"ws (ws family, wgmma + TMA, warp-specialised): {2 * N_WS} kernels -> ")
    assert lines[2].startswith(f"flash (sm80 family, mma.sync): {2 * N_HEADS} kernels -> ")
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


def test_setup_verbose_says_why_ws_is_not_generated_without_hopper(tmp_path):
    run = run_setup(tmp_path, "-v", TORCH_CUDA_ARCH_LIST="8.0;8.6", ENABLE_HMMA_FP32="1")
    assert run.returncode == 0, run.stderr
    assert "ws (ws family, wgmma + TMA, warp-specialised): 0 kernels" in run.stdout
    assert "  compiled for: nothing (no arch of this family in TORCH_CUDA_ARCH_LIST)" in run.stdout
    ws = [line for line in rejected_lines(run.stdout) if "_ws_" in line]
    assert len(ws) == 2 * N_WS and all(line.endswith(f": {WS_ARCH_REASON}") for line in ws)
    assert not [line for line in rejected_lines(run.stdout) if "_flash_" in line]


def test_setup_reports_flags_of_families_that_do_not_exist(tmp_path):
    run = run_setup(tmp_path, ENABLE_SM89_QMMA="1", ENABLE_SM100="on", ENABLE_SM120="true", SCHEDULING_MODE="0")
    assert run.returncode == 0, run.stderr
    for flag in ("ENABLE_SM89_QMMA", "ENABLE_SM100", "ENABLE_SM120"):
        assert f"{flag}=1: " in run.stdout and "does not exist yet; nothing was generated" in run.stdout
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
