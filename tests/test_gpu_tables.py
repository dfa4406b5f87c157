"""The GPU tier's tables without a GPU: from the manifest of the build the GPU tier runs
(bench/gpu_tier.sh: TORCH_CUDA_ARCH_LIST=9.0 ENABLE_HMMA_FP32=1), every kernel has runs in the
case table, every pairing the table promises is covered, every kernel is timed by the perf tier
or says why not, and every family is re-checked in float64."""

import json
from collections import defaultdict

import pytest

from generator.env import parse
from generator.main import kernels
from generator.render import render_manifest
from tests.gpu.cases import LAYOUT_FLAGS, VARIANT_FLAGS
from tests.gpu.matrix import PAIRS, build_cases
from tests.gpu.perf_cases import perf_cases
from tests.gpu.save_configs import SAVE_CONFIGS, save_kernel, save_kinds

GPU_TIER_FLAGS = {"TORCH_CUDA_ARCH_LIST": "9.0", "ENABLE_HMMA_FP32": "1", "ENABLE_SM89_QMMA": "1"}


@pytest.fixture(scope="module")
def manifest() -> list[dict]:
    config = parse(GPU_TIER_FLAGS)
    return json.loads(render_manifest(kernels(config), config))["kernels"]


@pytest.fixture(scope="module")
def cases(manifest):
    return build_cases(manifest)


def test_the_gpu_tier_build(manifest):
    assert len(manifest) == 167  # test_enumerate.py counts them by hand (+ the 2 qmma kernels)


def test_every_kernel_runs_every_mask_and_variant(manifest, cases):
    """Every mask on every kernel; every variant on every kernel but the flash family's
    other head sizes (the short table: the paged KV cache only)."""
    runs = defaultdict(list)
    for case in cases:
        runs[case.kernel["name"]].append(case)
    for kernel in manifest:
        mine = runs[kernel["name"]]
        assert {c.mask for c in mine} == set(kernel["masks"]), kernel["name"]
        flags = {flag for c in mine for flag in c.args()}
        ran = {v for v, flag in VARIANT_FLAGS.items() if flag in flags} | ({"wide_logits"} if "1e20" in flags else set())
        brief = kernel["family"] == "flash" and kernel["d"] not in (32, 64, 128, 256)
        assert ran == ({"paged_kv"} if brief else set(kernel["variants"])), kernel["name"]


def test_every_family_meets_every_layout_and_attention(manifest, cases):
    pairs = defaultdict(set)
    for case in cases:
        pairs[case.kernel["family"]].add((case.layout, case.attn))
    for family in {k["family"] for k in manifest}:
        layouts = {layout for layout, _ in pairs[family]}
        if family == "decode":  # s_q < s: no packed QKV; the rotation is over head ratios
            assert layouts == set(LAYOUT_FLAGS) - {"packed_qkv"}
        else:
            assert layouts == set(LAYOUT_FLAGS) and set(PAIRS) <= pairs[family], family


def test_case_ids_are_unique_and_short(cases):
    ids = [c.id for c in cases]
    assert len(set(ids)) == len(ids)
    assert max(map(len, ids)) <= 115, max(ids, key=len)


def test_case_layouts_are_valid(cases):
    """Packed QKV needs s_q == s and dv == d; contiguous Q + KV needs dv == d."""
    for case in cases:
        k = case.kernel
        if case.layout == "packed_qkv":
            assert case.shape.s_q is None and k["dv"] == k["d"], case.id
        if case.layout == "contiguous_q_kv":
            assert k["dv"] == k["d"], case.id


def test_every_kernel_is_timed_or_says_why(manifest):
    timed, untimed = perf_cases(manifest)
    timed_names = {c.kernel["name"] for c in timed}
    assert timed_names.isdisjoint(untimed) and timed_names | set(untimed) == {k["name"] for k in manifest}
    # Written out: the core head sizes of every family are timed, decode's whole family included.
    core = {k["name"] for k in manifest if k["d"] in (32, 64, 128, 256) and k["dv"] == k["d"]}
    assert timed_names == core
    assert all(untimed.values())
    decode = [c for c in timed if c.kernel["family"] == "decode"]
    assert len(decode) == 40 and {c.config for c in decode if c.kernel["warps_n"] == 4} == {
        "padding-separate_q_k_v-gqa-h32-hkv8-b16_s4096_sq1"}


def test_every_family_is_rechecked_in_float64(manifest):
    kinds = save_kinds(manifest)
    assert kinds == [("decode", "bf16", "fp32", "mma"), ("decode", "bf16", "fp32", "mma_kve4m3"),
                     ("decode", "bf16", "fp32", "warp"),
                     ("decode", "fp16", "fp32", "mma"), ("decode", "fp16", "fp32", "mma_kve4m3"),
                     ("decode", "fp16", "fp32", "warp"),
                     ("flash", "bf16", "fp32", ""), ("flash", "fp16", "fp16", ""), ("flash", "fp16", "fp32", ""),
                     ("qmma", "e4m3", "fp32", ""), ("ws", "bf16", "fp32", ""), ("ws", "e4m3", "fp32", ""), ("ws", "fp16", "fp32", "")]
    missing = {(kind[0], kind[1], config) for kind in kinds for config in SAVE_CONFIGS
               if save_kernel(manifest, kind, config)[0] is None}
    # decode has neither MLA's dv != d nor the odd head sizes; e4m3 (d = 64, 128, 256 and MLA)
    # has no odd head size, nor a bias; dropout is flash's and ws's 16-bit 128-row tiles'
    mla_odd = ("mla_causal_varlen", "mla_paged", "odd_head_size_varlen")
    # qmma (e4m3, d 64/128): no score modifier, no custom mask, no dropout, no MLA or odd head size
    qmma = mla_odd + ("dropout_causal_varlen", "alibi_causal_gqa", "alibi_padding", "bias_broadcast_gqa",
                      "bias_causal_varlen", "softcap_causal", "custom_mask_sq_lt_s", "custom_mask_varlen")
    assert missing == ({("decode", dtype, c) for dtype in ("bf16", "fp16") for c in mla_odd + ("dropout_causal_varlen",)}
                       | {("ws", "e4m3", c) for c in ("odd_head_size_varlen", "bias_broadcast_gqa", "bias_causal_varlen",
                                                      "dropout_causal_varlen")}
                       | {("qmma", "e4m3", c) for c in qmma})
