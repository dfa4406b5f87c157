"""Env flags -> Config -> the kernels each family generates, and setup.py's messages."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from generator import enumerate as enum
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

N_HEADS = len(enum.HEAD_SIZES)


@pytest.mark.parametrize("environ, count", [
    ({}, 2 * N_HEADS),                                   # fp16, bf16
    ({"ENABLE_HMMA_FP32": "1"}, 3 * N_HEADS),            # + fp16 with fp32 accumulation
    ({"TORCH_CUDA_ARCH_LIST": "9.0"}, 2 * N_HEADS),
    ({"TORCH_CUDA_ARCH_LIST": "8.6"}, 2 * N_HEADS),
    ({"TORCH_CUDA_ARCH_LIST": "9.0", "ENABLE_HMMA_FP32": "1"}, 3 * N_HEADS),
    ({"ENABLE_SM100": "1", "ENABLE_SM89_QMMA": "1"}, 2 * N_HEADS),   # no such families yet
])
def test_counts(environ, count):
    assert len(names(environ)) == count


def test_default_kernels():
    assert names({}) == [
        f"fmha_v2_flash_{dtype}_d{d}_{'x'.join(map(str, enum.flash_tile(d)[:2]))}_w4x1_sm80"
        for dtype in ("fp16", "bf16") for d in enum.HEAD_SIZES
    ]


def test_arch_list_changes_binaries_not_kernels():
    """Flash runs on every arch >= 8.0: the list picks the gencode, not the kernel set."""
    for arch_list, expect in [("9.0", ["9.0"]), ("8.0;9.0", ["8.0", "9.0"]), ("8.6", ["8.6"])]:
        config = parse({"TORCH_CUDA_ARCH_LIST": arch_list})
        assert names({"TORCH_CUDA_ARCH_LIST": arch_list}) == names({})
        assert [str(a) for a in family_archs("flash", config)] == expect


def test_head_sizes_cover_every_multiple_of_8_from_16_to_256():
    assert enum.HEAD_SIZES == tuple(range(16, 257, 8))
    assert {32, 40, 64, 72, 80, 96, 104, 128, 160, 192, 256} <= set(enum.HEAD_SIZES)


def test_tiles_come_from_flash_tile_and_pass_the_rules():
    config = parse({"ENABLE_HMMA_FP32": "1"})
    for spec in enum.flash(config):
        assert (spec.block_m, spec.block_n, spec.warps_m, spec.warps_n) == enum.flash_tile(spec.d)
        assert broken(spec, config) == []


# --- FMHA_FILTER ------------------------------------------------------------------------

@pytest.mark.parametrize("globs, count", [
    ("*_fp16_d64_*", 1),
    ("*bf16*", N_HEADS),
    ("*_d128_*,*_d256_*", 4),
    (" *_d128_* , *_d256_* ,", 4),          # blanks and empty entries are ignored
    ("fmha_v2_flash_fp16_d32_128x64_w4x1_sm80", 1),
    ("*fp16_fp32*", 0),                     # rules come first: HMMA_FP32 is off
    ("nothing*", 0),
    ("", 2 * N_HEADS),                      # empty = unset = everything
])
def test_fmha_filter(globs, count):
    assert len(names({"FMHA_FILTER": globs})) == count


def test_filtered_and_rejected_are_reported_apart():
    selection = select(parse({"FMHA_FILTER": "*bf16*"}))["flash"]
    assert len(selection.kept) == N_HEADS
    assert len(selection.filtered) == N_HEADS                  # the fp16 kernels
    assert {r[0].name for r in selection.rejected} == {n for n in names({"ENABLE_HMMA_FP32": "1"}) if "fp16_fp32" in n}


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
    assert f"flash (sm80 family, mma.sync): {2 * N_HEADS} kernels -> " in run.stdout
    assert "rejected" not in run.stdout


def test_setup_verbose_prints_rejections_with_reasons(tmp_path):
    run = run_setup(tmp_path, "-v")
    assert run.returncode == 0, run.stderr
    rejected = [line for line in run.stdout.splitlines() if line.startswith("  rejected ")]
    assert len(rejected) == N_HEADS
    assert all(line.endswith(": fp16 inputs with fp32 accumulation need ENABLE_HMMA_FP32=1") for line in rejected)


def test_setup_reports_flags_of_families_that_do_not_exist(tmp_path):
    run = run_setup(tmp_path, ENABLE_SM89_QMMA="1", ENABLE_SM100="on", ENABLE_SM120="true", SCHEDULING_MODE="0")
    assert run.returncode == 0, run.stderr
    for flag in ("ENABLE_SM89_QMMA", "ENABLE_SM100", "ENABLE_SM120"):
        assert f"{flag}=1: " in run.stdout and "does not exist yet; nothing was generated" in run.stdout
    assert "SCHEDULING_MODE=0: applies to the sm90 family" in run.stdout


def test_setup_bad_argument_exits_2(tmp_path):
    assert run_setup(tmp_path, "--no-such-flag").returncode == 2
