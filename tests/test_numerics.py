"""Numerics at the edges: every finite, positive -scale-bmm1 whose logits fit fp32 gives a
finite output that passes the reference (softmax/exp2_row.h: beyond 2^24 in log2 units the
integer running max no longer sits within a unit of the exact products). Kernels whose softmax
keeps one FFMA a score (ws, decode's mma path) refuse such problems, and dispatch takes one
that handles them."""

import pytest

from tests.test_cli import fmha  # noqa: F401  (the fixture: run the binary without colour)


@pytest.mark.parametrize("scale, why", [("0", "-scale-bmm1 must be > 0"), ("-0.125", "-scale-bmm1 must be > 0"),
                                        ("3e38", "-scale-bmm1 is too large")])
def test_scales_without_a_softmax_are_refused(scale, why, fmha):
    r = fmha("-d", "64", "-scale-bmm1", scale)
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert why in r.stderr and len(r.stderr.splitlines()) == 1


# One problem per path on a Hopper build: flash (-force-non-warp-specialization), decode at
# 257 and 33 keys (both on its warp path: the mma path keeps one FFMA a score and leaves such
# problems to it), and what dispatch picks by itself (ws leaves them to flash likewise). The row's logits reach
# 2^24 (1e6 x inputs of 1) and far beyond (1e20, the 99999999999999999999).
PATHS = {
    "flash": (["-force-non-warp-specialization"], "flash"),
    "decode-long": (["-s-q", "1", "-separate-q-k-v"], "decode"),
    "decode-short": (["-s-q", "1", "-separate-q-k-v", "-s", "33", "-min-s", "1"], "decode"),
    "dispatch": ([], "flash"),
}


@pytest.mark.gpu
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("scale", ["1e6", "99999999999999999999"])
@pytest.mark.parametrize("mask", [[], ["-causal-mask"]], ids=["padding", "causal"])
def test_huge_scale_gives_a_finite_correct_output(path, scale, mask, fmha):
    flags, family = PATHS[path]
    args = ["-d", "64", "-b", "2", "-h", "4", "-s", "257", "-min-s", "7", "-bf16", "-scale-bmm1", scale, *mask,
            "-v", "1", *flags]
    r = fmha(*args)
    if r.returncode == 2 and "no kernel fits" in r.stderr:
        pytest.skip(f"no {family} kernel for this problem in this build: {r.stderr.splitlines()[0]}")
    assert r.returncode == 0, (r.returncode, r.stdout[-2000:], r.stderr[-2000:])
    assert "Checks........: SUCCESS" in r.stdout
    assert f"fmha_v2_{family}_" in r.stdout


WIDE = "logits may reach 2^24 in log2 units"


def test_ws_refuses_wide_logits(fmha):
    """-use-tma keeps the ws rows only; a problem whose logits may reach 2^24 is not theirs."""
    rows = fmha("-list-kernels").stdout
    if "fmha_v2_ws_bf16_d64_" not in rows:
        pytest.skip("no ws bf16 d=64 kernel in this build (TORCH_CUDA_ARCH_LIST without 9.0)")
    r = fmha("-d", "64", "-bf16", "-use-tma", "-scale-bmm1", "1e6")
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert WIDE in r.stderr
    # The default scale with inputs of 1 stays far below: the ws row passes dispatch (no GPU: exit 3).
    assert WIDE not in fmha("-d", "64", "-bf16", "-use-tma").stderr


@pytest.mark.parametrize("args, wide", [
    (["-scale-bmm1", "1e6"], True),
    (["-range-q", "1000", "-range-k", "1000"], True),    # 64 / 8 * 1000 * 1000 * log2(e) > 2^23
    (["-range-q", "1000", "-range-k", "1000", "-softcapping-scale-bmm1", "30"], False),  # the cap bounds it
    (["-range-q", "30", "-range-k", "30"], False),
])
def test_decode_mma_row_refuses_wide_logits(args, wide, fmha):
    name = next((line.split()[0] for line in fmha("-list-kernels").stdout.splitlines()
                 if line.startswith("fmha_v2_decode_bf16_d64_") and "_w1x4_" in line), None)
    if name is None:
        pytest.skip("no decode bf16 d=64 mma kernel in this build")
    r = fmha("-kernel", name, "-d", "64", "-bf16", "-s-q", "1", "-separate-q-k-v", *args)
    assert (WIDE in r.stderr) == wide, (r.returncode, r.stderr)
    assert r.returncode == (2 if wide else 3) or (not wide and r.returncode == 0), (r.returncode, r.stderr)
