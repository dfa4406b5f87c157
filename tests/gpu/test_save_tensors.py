"""-save-tensors runs re-checked in float64 (oracle.py), independent of the driver's own
reference: the kernel's output with the driver's metric and epsilon, the driver's fp32
reference norm-wise, and with -save-softmax both LSEs."""

import json

import numpy as np
import pytest

from .contract import DEFAULT_EPSILON, LSE_TOLERANCE
from .driver import describe, run_fmha
from .manifest import dtype_flags, kernels_or_skip, require_arch
from .oracle import (REF_REL_L2, alibi_slopes_fp64, attention_fp64, gather_paged_fp64, round_to, saved_dropout,
                     spec_error, visible_fp64)
from .save_configs import SAVE_CONFIGS, configs_for, layout_for, save_kernel, save_kinds

KERNELS = kernels_or_skip()
TENSORS = ("q", "k", "v", "o", "o_ref", "seqlens_q", "seqlens_kv")


def load_run(path, kernel: dict) -> tuple[dict, dict]:
    """The saved tensors and meta.json of a run of `kernel`, their shapes checked."""
    t = {name: np.load(path / f"{name}.npy") for name in TENSORS}
    meta = json.loads((path / "meta.json").read_text())
    assert meta["kernel"] == kernel["name"]
    b, s_q, h, _ = t["q"].shape
    assert t["o"].shape == t["o_ref"].shape == (b, s_q, h, kernel["dv"])
    assert t["seqlens_q"].dtype == t["seqlens_kv"].dtype == np.int32
    s = t["k"].shape[1]
    t["custom"] = t["bias"] = None
    if meta["mask"] == "custom":
        t["custom"] = np.load(path / "custom_mask.npy")
        assert t["custom"].shape == (b, s_q, s) and t["custom"].dtype == np.int32
    if meta["attention_bias"]:
        t["bias"] = np.load(path / "bias.npy")
        shape = meta["attention_bias_shape"]
        assert t["bias"].shape == (b if shape[0] == "b" else 1, h if shape[1] == "h" else 1, s_q, s)
    if meta["paged_kv"]:  # the kernel read the pool: K and V gathered through the block table
        k, v = gather_paged_fp64(path, meta, t["seqlens_kv"], s)
        for name, got in (("k", k), ("v", v)):
            assert np.array_equal(got, t[name]), f"{name}_pool.npy through block_table.npy is not {name}.npy"
    t["sinks"] = np.load(path / "sinks.npy").astype(np.float64) if meta["attention_sinks"] else None
    return t, meta


def expected_fp64(t: dict, meta: dict, dtype: str, lse_amb=None) -> tuple:
    """(out, amb, lse) of oracle.attention_fp64 for the saved run (lse_amb: as there)."""
    custom = t["custom"]
    keep, rescale = saved_dropout(t, meta)
    return attention_fp64(t["q"], t["k"], t["v"], t["seqlens_q"], t["seqlens_kv"],
                          meta["scale_bmm1"], meta["scale_softmax"] * meta["scale_bmm2"],
                          lambda i, lq, lk: visible_fp64(meta, lq, lk, custom[i] if custom is not None else None),
                          dtype, meta["softcapping_scale_bmm1"] or 0.0, t["sinks"],
                          alibi_slopes_fp64(t["q"].shape[2]) if meta["alibi"] else None, t["bias"],
                          meta["p_block_keys"], keep, rescale, lse_amb)


@pytest.mark.gpu
@pytest.mark.parametrize("kind", save_kinds(KERNELS), ids=lambda kind: "-".join(filter(None, kind)))
@pytest.mark.parametrize("config", SAVE_CONFIGS)
def test_save_tensors(kind, config, exe, gpu_sm, tmp_path):
    kernel, why = save_kernel(KERNELS, kind, config)
    if kernel is None:
        pytest.skip(why)
    require_arch(kernel, gpu_sm)
    flags = layout_for(kernel, configs_for(kind)[config])
    # e4m3 kernels: O in e4m3 (the driver's default) for every other config, else bf16.
    e4m3_out = list(SAVE_CONFIGS).index(config) % 2 == 0
    args = ["-d", str(kernel["d"]), "-dv", str(kernel["dv"]), *dtype_flags(kernel, e4m3_out), *flags]
    proc = run_fmha(exe, [*args, "-kernel", kernel["name"], "-save-tensors", str(tmp_path),
                          "-v", "0", "-runs", "1", "-warm-up-runs", "0"])
    assert proc.returncode == 0, describe(proc)

    t, meta = load_run(tmp_path, kernel)
    dtype = kind[1]
    # Over an e4m3 KV cache the decode kernels' P is f16 whatever the queries' type (kv_e4m3.h).
    assert meta["kv_dtype"] == (kernel.get("kv_dtype") or dtype)
    b, s_q, h, _ = t["q"].shape
    lse_amb = np.zeros((b, h, s_q))  # e4m3: how far the QGMMA's S error may move each LSE
    expected, amb, lse = expected_fp64(t, meta, "fp16" if kernel.get("kv_dtype") else dtype, lse_amb)
    # Rows past each sequence's length are zero in both outputs.
    real = np.arange(s_q)[None, :] < t["seqlens_q"][:, None]  # [b, s_q]
    for name in ("o", "o_ref"):
        assert not np.any(t[name][~real]), f"{name}.npy has non-zero rows past a sequence's length"

    # The kernel's output against float64, with the driver's own metric and its default epsilon
    # (a float there), at the float64 value nearest it within the P rounding ambiguity (nearly
    # always amb == 0).
    eps = meta["epsilon"]
    assert eps == np.float32(DEFAULT_EPSILON[dtype]), f"meta.json's epsilon {eps} is not contract.py's default"
    found = t["o"][real]
    nearest = np.clip(found, expected[real] - amb[real], expected[real] + amb[real])
    if meta["output_dtype"] == "e4m3":  # as the kernel rounds O: its own value where it is one of the interval's
        nearest = round_to(nearest, "e4m3")
    err = spec_error(found, np.where(np.isfinite(found), nearest, expected[real]), eps)
    bad = np.argwhere(err > eps)
    assert bad.size == 0, f"{len(bad)} of {err.size} elements over eps={eps}; worst {err.max():.3g}"

    # The driver's fp32 reference against float64, norm-wise (element-wise relative errors
    # are meaningless near zero). Both round P to the input type at a power-of-two scale, so
    # they differ by fp32 rounding and the rare P that fp32 noise tips across a rounding edge.
    ref, exp = t["o_ref"][real].astype(np.float64), expected[real]
    rel = np.linalg.norm(ref - exp) / np.linalg.norm(exp)
    assert rel < REF_REL_L2, f"o_ref.npy is {rel:.3g} (relative L2) from float64"

    # -save-softmax: the kernel's and the driver's LSE against float64, rows past a length zero
    # (e4m3: within lse_amb more, as the driver's check_lse).
    assert meta["save_softmax"] == ("-save-softmax" in flags)
    if meta["save_softmax"]:
        real_rows = np.broadcast_to(real[:, None, :], (b, h, s_q))
        for name in ("lse", "lse_ref"):
            got = np.load(tmp_path / f"{name}.npy")
            assert got.shape == (b, h, s_q)
            assert not np.any(got[~real_rows]), f"{name}.npy has non-zero rows past a sequence's length"
            same_inf = np.isinf(got[real_rows]) & (got[real_rows] == lse[real_rows])
            diff = np.where(same_inf, 0.0, np.abs(got[real_rows].astype(np.float64) - lse[real_rows]))
            over = diff - lse_amb[real_rows]
            assert np.all(over <= LSE_TOLERANCE), f"{name}.npy is {np.nanmax(over):.3g} past lse_amb from float64"
