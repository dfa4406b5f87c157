"""tests/gpu/contract.py against what it copies: the C++ defaults in src/ and SPEC.md's console
lines. (test_cli.py checks a built fmha.exe -help against it too; the -save-tensors re-check,
each run's resolved epsilon.)"""

import re
from pathlib import Path

import pytest

from tests.gpu.contract import (CHECKS_RE, DEFAULT_EPSILON, HELP_EPSILON_RE, LIST_COLUMNS, LSE_TOLERANCE,
                                parse_kernel_table, parse_output)

ROOT = Path(__file__).resolve().parent.parent


def cpp_constant(path: str, name: str) -> float:
    """The value of `constexpr float|double NAME = <literal>;` in a source file of the repo."""
    text = (ROOT / path).read_text()
    found = re.findall(rf"constexpr\s+(?:float|double)\s+{name}\s*=\s*([0-9.]+(?:e[-+]?\d+)?)f?\s*;", text)
    assert len(found) == 1, f"{path}: expected one `constexpr float {name} = ...;`, found {found}"
    return float(found[0])


def test_default_epsilon_is_the_drivers():
    assert {"fp16": cpp_constant("src/cli.cpp", "kDefaultEpsilonFp16"),
            "bf16": cpp_constant("src/cli.cpp", "kDefaultEpsilonBf16"),
            "e4m3": cpp_constant("src/cli.cpp", "kDefaultEpsilonE4m3")} == DEFAULT_EPSILON


def test_qgmma_sum_error_is_the_kernels():
    from tests.gpu.oracle import QGMMA_SUM_ERROR
    assert cpp_constant("src/fmha/mma/fp8_sm90.h", "kQgmmaSumError") == QGMMA_SUM_ERROR


def test_help_text_states_the_default_epsilon():
    # The usage text is a literal beside the constants: it must say the same numbers.
    stated = HELP_EPSILON_RE.findall((ROOT / "src" / "cli.cpp").read_text())
    assert [tuple(map(float, s)) for s in stated] == [(DEFAULT_EPSILON["fp16"], DEFAULT_EPSILON["bf16"],
                                                       DEFAULT_EPSILON["e4m3"])]


def test_lse_tolerance_is_the_checks():
    assert cpp_constant("src/check.h", "kLseTolerance") == LSE_TOLERANCE


# SPEC.md "Console output", with a kernel name and numbers in place of its placeholders.
SPEC_LINES = """\
v1=0 il=0 s_q=1024, s=1024 b=4 h=32/32 d=128/128 dtype=FP16, output_dtype=FP16, flash_attn=true, \
warp_spec=true, mask=causal, alibi=false, attn=mha, qkv_layout=packed_qkv, wm=4 wn=1
Kernel........: fmha_v2_ws_fp16_fp32_d128_128x128_w8x1_sm90
Checks........: SUCCESS
Elapsed ......: 149.694395 us (12.34x), 229.76 Tflop/s, 1234.56 GB/s
"""


def test_spec_lines_parse():
    fields = parse_output(SPEC_LINES)
    assert fields["s_q"] == fields["s"] == "1024" and (fields["h"], fields["h_kv"]) == ("32", "32")
    assert (fields["mask"], fields["attn"], fields["qkv_layout"], fields["warp_spec"]) == (
        "causal", "mha", "packed_qkv", "true")
    assert fields["kernel"] == "fmha_v2_ws_fp16_fp32_d128_128x128_w8x1_sm90" and fields["checks"] == "SUCCESS"
    assert (fields["us"], fields["speedup"], fields["tflops"], fields["gbs"]) == (
        "149.694395", "12.34", "229.76", "1234.56")


def test_disabled_checks_have_no_speedup():
    text = SPEC_LINES.replace("SUCCESS", "DISABLED").replace("(12.34x)", "(n/a)")
    fields = parse_output(text)
    assert fields["checks"] == "DISABLED" and "speedup" not in fields


def test_a_failed_check_still_parses():
    # A failed check prints its mismatches after the four lines.
    text = SPEC_LINES.replace("SUCCESS", "FAILED") + "mismatch at 17: found 0.5, expected 0.25\n"
    assert parse_output(text)["checks"] == "FAILED"


@pytest.mark.parametrize("line", ["Checks........: SUCCESS ", "Checks.......: SUCCESS", "Checks........: OK"])
def test_near_misses_do_not_match(line):
    assert not CHECKS_RE.search(line)


def test_a_missing_line_names_its_regex():
    with pytest.raises(AssertionError, match="Kernel"):
        parse_output(SPEC_LINES.replace("Kernel", "Kernal"))


def test_kernel_table():
    text = ("name                                     family  sm    dtype  acc      d    dv  tile       warps  "
            "masks           warp_spec  tma    sched       max_s_q  min_s_kv  archs        siblings\n"
            "fmha_v2_decode_bf16_d64_32x64_w1x4_sm80  decode  80    bf16   fp32    64    64  32x64      1x4    "
            "padding,causal  false      false  grid        16       64        sm_80,sm_90  "
            "fmha_v2_decode_bf16_d64_16x128_w1x4_sm80,fmha_v2_decode_bf16_d64_16x64_w1x4_sm80\n"
            "1 kernels\n")
    assert parse_kernel_table(text) == [dict(zip(LIST_COLUMNS, (
        "fmha_v2_decode_bf16_d64_32x64_w1x4_sm80", "decode", "80", "bf16", "fp32", "64", "64", "32x64", "1x4",
        "padding,causal", "false", "false", "grid", "16", "64", "sm_80,sm_90",
        "fmha_v2_decode_bf16_d64_16x128_w1x4_sm80,fmha_v2_decode_bf16_d64_16x64_w1x4_sm80")))]
    with pytest.raises(AssertionError, match="header"):
        parse_kernel_table(text.replace("min_s_kv", "min_s"))
