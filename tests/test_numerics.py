"""Numerics at the edges: every finite, positive -scale-bmm1 whose logits fit fp32 gives a
finite output that passes the reference, in every family (softmax/exp2_row.h: beyond 2^24 in
log2 units the integer running max no longer sits within a unit of the exact products)."""

import os
import subprocess

import pytest


@pytest.fixture(scope="module")
def fmha(fmha_exe):
    env = dict(os.environ, NO_COLOR="1")

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(fmha_exe), *args], capture_output=True, text=True, timeout=300, env=env)

    return run


@pytest.mark.parametrize("scale, why", [("0", "-scale-bmm1 must be > 0"), ("-0.125", "-scale-bmm1 must be > 0"),
                                        ("3e38", "-scale-bmm1 is too large")])
def test_scales_without_a_softmax_are_refused(scale, why, fmha):
    r = fmha("-d", "64", "-scale-bmm1", scale)
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert why in r.stderr and len(r.stderr.splitlines()) == 1


# One problem per family on a Hopper build (decode: s_q = 1; ws: the default on sm_90;
# flash: -force-non-warp-specialization). The row's logits reach 2^24 (1e6 x inputs of 1)
# and far beyond (1e20, the 99999999999999999999).
FAMILIES = {
    "flash": ["-force-non-warp-specialization"],
    "ws": ["-use-tma"],
    "decode": ["-s-q", "1", "-separate-q-k-v"],
}


@pytest.mark.gpu
@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("scale", ["1e6", "99999999999999999999"])
@pytest.mark.parametrize("mask", [[], ["-causal-mask"]], ids=["padding", "causal"])
def test_huge_scale_gives_a_finite_correct_output(family, scale, mask, fmha):
    args = ["-d", "64", "-b", "2", "-h", "4", "-s", "257", "-min-s", "7", "-bf16", "-scale-bmm1", scale, *mask,
            "-v", "1", *FAMILIES[family]]
    r = fmha(*args)
    if r.returncode == 2 and "no kernel fits" in r.stderr:
        pytest.skip(f"no {family} kernel for this problem in this build: {r.stderr.splitlines()[0]}")
    assert r.returncode == 0, (r.returncode, r.stdout[-2000:], r.stderr[-2000:])
    assert "Checks........: SUCCESS" in r.stdout
    assert f"fmha_v2_{family}_" in r.stdout
