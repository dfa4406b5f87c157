"""fmha.exe -bwd (issue #33) on a GPU: the flash-bwd kernels' dQ, dK, dV and the driver's GPU
reference of them, both against float64 gradients (oracle.attention_backward_fp64) of the
inputs -save-tensors wrote; the driver's own verdict; -deterministic's repeated runs."""

import json

import numpy as np
import pytest

from .driver import describe, run_fmha
from .oracle import alibi_slopes_fp64, attention_backward_fp64, saved_dropout, visible_fp64

# fmha.exe flags of each problem: var-len with GQA and the causal mask, s_q < s, fixed lengths.
CASES = {
    "bf16_d64_causal_varlen_gqa": ["-bf16", "-d", "64", "-b", "3", "-h", "4", "-gqa", "2", "-s", "200", "-min-s", "1",
                                   "-causal-mask", "-separate-q-k-v"],
    "fp16_d128_causal_sq77_s150": ["-fp16-fp32", "-d", "128", "-b", "2", "-h", "2", "-s", "150", "-s-q", "77",
                                   "-causal-mask", "-separate-q-k-v"],
    "bf16_d128_padding_s128": ["-bf16", "-d", "128", "-b", "2", "-h", "2", "-s", "128"],
    "bf16_d64_sliding_softcap": ["-bf16", "-d", "64", "-b", "2", "-h", "4", "-gqa", "2", "-s", "300", "-min-s", "1",
                                 "-sliding-window-size", "70", "-softcapping-scale-bmm1", "30"],
    "fp16_d128_bidirectional_alibi": ["-fp16-fp32", "-d", "128", "-b", "2", "-h", "4", "-s", "260", "-s-q", "200",
                                      "-sliding-window-size", "40", "-bidirectional-sliding-window-mask", "-alibi",
                                      "-separate-q-k-v"],
    "bf16_d128_chunked_sinks": ["-bf16", "-d", "128", "-b", "3", "-h", "2", "-s", "400", "-min-s", "1",
                                "-chunked-attention-size", "128", "-use-attention-sinks", "-separate-q-k-v"],
    # Dropout: the float64 gradients take the mask from oracle.dropout_keep (the contract, not
    # src/), so a kernel that drops other pairs than the forward did fails here.
    "bf16_d64_dropout_causal_varlen_gqa": ["-bf16", "-d", "64", "-b", "3", "-h", "4", "-gqa", "2", "-s", "200",
                                           "-min-s", "1", "-causal-mask", "-separate-q-k-v", "-dropout", "0.17"],
    "fp16_d128_dropout_sq77_s150": ["-fp16-fp32", "-d", "128", "-b", "2", "-h", "2", "-s", "150", "-s-q", "77",
                                    "-separate-q-k-v", "-dropout", "0.5", "-seed", "5"],
    "bf16_d96_dropout_window": ["-bf16", "-d", "96", "-b", "2", "-h", "2", "-s", "300", "-sliding-window-size", "70",
                                "-separate-q-k-v", "-dropout", "0.3"],
}
# Relative L2 of the draft's gradients from float64: P and dS are rounded to the input dtype
# before their products, the outputs once more (bf16 keeps 8 bits, fp16 11); the driver's fp32
# reference is float64 sums of the same inputs, off by the forward's O rounding in D only.
KERNEL_REL_L2 = {"bf16": 2e-2, "fp16": 4e-3}
REF_REL_L2 = 1e-2


@pytest.mark.gpu
@pytest.mark.parametrize("name", CASES)
def test_backward_matches_float64(name, exe, tmp_path):
    args = CASES[name]
    proc = run_fmha(exe, [*args, "-bwd", "-save-tensors", str(tmp_path), "-v", "0", "-runs", "1", "-warm-up-runs", "0"])
    if proc.returncode == 2 and "no kernel fits" in proc.stderr:
        pytest.skip("no forward kernel for this problem in this build")
    assert proc.returncode == 0, describe(proc)
    assert "Bwd checks" in proc.stdout and "SUCCESS" in proc.stdout.split("Bwd checks")[1], describe(proc)

    t = {n: np.load(tmp_path / f"{n}.npy") for n in ("q", "k", "v", "do", "dq", "dk", "dv", "dq_ref", "dk_ref",
                                                       "dv_ref", "seqlens_q", "seqlens_kv")}
    meta = json.loads((tmp_path / "meta.json").read_text())
    assert meta["bwd"]
    sinks = np.load(tmp_path / "sinks.npy").astype(np.float64) if meta["attention_sinks"] else None
    keep, rescale = saved_dropout(t, meta)
    want = attention_backward_fp64(t["q"], t["k"], t["v"], t["do"], t["seqlens_q"], t["seqlens_kv"],
                                   meta["scale_bmm1"], lambda i, lq, lk: visible_fp64(meta, lq, lk),
                                   meta["softcapping_scale_bmm1"] or 0.0, sinks,
                                   alibi_slopes_fp64(t["q"].shape[2]) if meta["alibi"] else None, keep, rescale)
    dtype = "bf16" if "-bf16" in args else "fp16"
    for grad, w in zip(("dq", "dk", "dv"), want):
        norm = np.linalg.norm(w)
        kernel = np.linalg.norm(t[grad].astype(np.float64) - w) / norm
        ref = np.linalg.norm(t[f"{grad}_ref"].astype(np.float64) - w) / norm
        assert kernel <= KERNEL_REL_L2[dtype], f"{grad}.npy is {kernel:.3g} (relative L2) from float64"
        assert ref <= REF_REL_L2, f"{grad}_ref.npy is {ref:.3g} (relative L2) from float64"


@pytest.mark.gpu
@pytest.mark.parametrize("args", [["-bf16", "-d", "128", "-causal-mask"], ["-fp16-fp32", "-d", "64", "-gqa", "2"],
                                  ["-bf16", "-d", "64", "-dropout", "0.2"]])
def test_deterministic_runs_leave_the_same_bits(args, exe):
    proc = run_fmha(exe, [*args, "-b", "2", "-h", "4", "-s", "700", "-min-s", "1", "-bwd", "-deterministic", "-v", "0",
                          "-runs", "5", "-warm-up-runs", "5"])
    if proc.returncode == 2 and "no kernel fits" in proc.stderr:
        pytest.skip("no forward kernel for this problem in this build")
    assert proc.returncode == 0, describe(proc)
    assert "Bwd repeats...: IDENTICAL over 10 runs" in proc.stdout, describe(proc)
