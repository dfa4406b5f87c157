"""Rendering generated/: golden files, write-if-changed, stale removal, strict templates."""

import json
import os
import re
from pathlib import Path

import jinja2
import pytest

from generator.env import parse
from generator.main import kernels, main
from generator.render import (environment, kernel_path, render_all, render_kernel,
                              render_makefile, render_registry, write_if_changed)
from generator.spec import KernelSpec

GOLDEN = Path(__file__).resolve().parent / "golden"
# FMHA_UPDATE_GOLDEN=1 pytest tests/test_render.py rewrites the golden files after a
# deliberate template change; review the diff before committing it.
UPDATE = os.environ.get("FMHA_UPDATE_GOLDEN") == "1"

SPEC = KernelSpec.parse("fmha_v2_flash_fp16_d128_128x64_w4x1_sm80")
BF16 = KernelSpec.parse("fmha_v2_flash_bf16_d64_128x64_w4x1_sm80")
WS = KernelSpec.parse("fmha_v2_ws_bf16_d128_128x128_w8x1_sm90")


def check_golden(name, text):
    path = GOLDEN / name
    if UPDATE:
        path.write_text(text)
    assert text == path.read_text(), f"{name} differs from tests/golden/ (FMHA_UPDATE_GOLDEN=1 to accept)"


@pytest.mark.parametrize("spec", [SPEC, WS], ids=lambda s: s.family)
def test_kernel_golden(spec):
    check_golden(f"{spec.name}.cu", render_kernel(environment(), spec))


def test_ws_kernel_uses_the_sm90_header_and_refuses_other_targets():
    text = render_kernel(environment(), WS)
    assert '#include "fmha/kernel/ws.h"' in text
    assert "ws::Traits<Config, __nv_bfloat16, /*kHeadDim=*/128" in text
    assert "#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)\n#error" in text
    assert "#error" not in render_kernel(environment(), SPEC)       # portable: any arch


def test_registry_golden():
    check_golden("registry.cpp", render_registry(environment(), [WS, SPEC, BF16]))


def test_empty_registry_is_valid_cpp():
    text = render_registry(environment(), [])
    assert "const int kNumKernels = 0;" in text
    # A zero-length array is ill-formed: the table keeps one zeroed sentinel row.
    assert re.search(r"kKernels\[\] = \{\s*\{\},", text)


def test_registry_row_fields():
    text = render_registry(environment(), [KernelSpec.parse("fmha_v2_flash_bf16_d64_128x64_w4x1_sm80",
                                                            masks=("causal",))])
    assert "DataType::kBf16, DataType::kFp32" in text
    assert ("mask_bit(MaskType::kCausal), /*variants=*/kVariantSoftcap | kVariantAlibi | kVariantBias | kVariantSinks | "
            "kVariantSoftmaxStats | kVariantPagedKv | kVariantWideLogits | kVariantDropout, /*warp_specialized=*/false") in text
    assert "const int kNumKernels = 1;" in text


def test_registry_ws_row():
    text = render_registry(environment(), [KernelSpec.parse("fmha_v2_ws_fp16_fp32_d64_192x128_w12x1_sm90")])
    assert '{"fmha_v2_ws_fp16_fp32_d64_192x128_w12x1_sm90", "ws", 90, DataType::kFp16, DataType::kFp32,' in text
    assert "/*block_m=*/192, /*block_n=*/128, /*warps_m=*/12, /*warps_n=*/1" in text
    assert ("mask_bit(MaskType::kPadding) | mask_bit(MaskType::kCausal) | mask_bit(MaskType::kSlidingWindow) | "
            "mask_bit(MaskType::kBidirectionalWindow) | mask_bit(MaskType::kChunked) | mask_bit(MaskType::kCustom), "
            "/*variants=*/kVariantAlibi | kVariantBias | kVariantSinks | kVariantSoftmaxStats | kVariantPagedKv | "
            "kVariantDropout, "
            "/*warp_specialized=*/true") in text
    assert "/*uses_tma=*/true, /*persistent=*/true," in text    # SCHEDULING_MODE's default, 1
    assert "/*persistent=*/false," in render_registry(
        environment(), [KernelSpec.parse("fmha_v2_ws_fp16_fp32_d64_192x128_w12x1_sm90")], scheduling_mode=0)


def test_registry_lists_decode_then_ws_then_flash_rows():
    """Registry order is dispatch order: a problem with at most 16 query rows per sequence
    takes a decode row; otherwise on Hopper a ws row wins over the flash row of the same
    problem; elsewhere it has no image and the flash row runs."""
    text = render_registry(environment(), kernels(parse({"TORCH_CUDA_ARCH_LIST": "8.0;9.0"})))
    rows = re.findall(r'^    \{"(fmha_v2_\w+)"', text, re.MULTILINE)
    families = [KernelSpec.parse(name).family for name in rows]
    rank = {"decode": 0, "ws": 1, "flash": 2}
    assert families == sorted(families, key=rank.get) and set(families) == set(rank)


def test_decode_rows_carry_their_limits_and_workspace():
    text = render_registry(environment(), [KernelSpec.parse("fmha_v2_decode_bf16_d128_16x64_w1x4_sm80"),
                                           KernelSpec.parse("fmha_v2_decode_bf16_d128_4x4_w4x1_sm80"),
                                           KernelSpec.parse("fmha_v2_decode_bf16_d128_8x2_w4x1_sm80")])
    assert "size_t workspace_fmha_v2_decode_bf16_d128_4x4_w4x1_sm80(const Params&);" in text
    assert "/*max_s_q=*/16, /*max_rows=*/0, /*min_s_kv=*/64," in text   # the mma path: long caches, any rows
    assert "/*max_s_q=*/16, /*max_rows=*/4, /*min_s_kv=*/0," in text     # rows per warp 4 holds 4 rows
    assert "/*max_s_q=*/16, /*max_rows=*/0, /*min_s_kv=*/0," in text     # the largest warp row tiles any count
    assert ("entry_fmha_v2_decode_bf16_d128_8x2_w4x1_sm80, workspace_fmha_v2_decode_bf16_d128_8x2_w4x1_sm80,\n"
            "     /*tile=*/nullptr}") in text


def test_registry_rows_carry_their_siblings_key_blocks():
    """KernelMeta::sibling_block_n: the key block of each sibling, in the siblings' order (the
    e4m3 reference rounds P on the tile that runs); {} for a row without siblings."""
    wide = "fmha_v2_ws_e4m3_d128_128x192_w8x1_sm90"
    lean = "fmha_v2_ws_e4m3_d256_128x128_w8x1_sm90"
    plain = "fmha_v2_ws_bf16_d128_128x128_w8x1_sm90"
    text = render_registry(environment(), [KernelSpec.parse(n) for n in (wide, lean, plain)])
    assert '/*siblings=*/"fmha_v2_ws_e4m3_d128_128x128_w8x1_sm90", /*sibling_block_n=*/{128},' in text
    assert '/*siblings=*/"fmha_v2_ws_e4m3_d256_128x64_w8x1_sm90", /*sibling_block_n=*/{64},' in text
    assert '/*siblings=*/"", /*sibling_block_n=*/{},' in text


def test_decode_row_names_its_siblings():
    """Two KV heads a CTA at d = 64: the row names the one-head tiles its launch may run, and
    the TU's tile_ function says which one did."""
    name = "fmha_v2_decode_bf16_d64_32x64_w1x4_sm80"
    text = render_registry(environment(), [KernelSpec.parse(name)])
    assert ('/*siblings=*/"fmha_v2_decode_bf16_d64_16x128_w1x4_sm80,fmha_v2_decode_bf16_d64_16x64_w1x4_sm80", '
            '/*sibling_block_n=*/{128, 64},' in text)
    assert f"int tile_{name}(const Params&);" in text and f"/*tile=*/tile_{name}}}" in text
    kernel = render_kernel(environment(), KernelSpec.parse(name))
    assert f"int tile_{name}(const Params& params) {{ return decode::sibling_index<Traits>(params); }}" in kernel
    tu = render_kernel(environment(), KernelSpec.parse("fmha_v2_decode_bf16_d128_4x4_w4x1_sm80"))
    assert "decode::workspace_bytes<Traits>(params)" in tu and "kPersistent" not in tu


def makefile_vars(text):
    return dict(re.findall(r"^(\w+) := (.*)$", text, re.MULTILINE))


SM90A = "-gencode arch=compute_90a,code=sm_90a"


@pytest.mark.parametrize("arch_list, gencode, ws", [
    ("8.0;9.0", "-gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90", SM90A),
    ("9.0", "-gencode arch=compute_90,code=sm_90", SM90A),
    ("8.0", "-gencode arch=compute_80,code=sm_80", None),
    ("8.6", "-gencode arch=compute_86,code=sm_86", None),
    ("9.0a+PTX;8.0", "-gencode arch=compute_80,code=sm_80 -gencode arch=compute_90a,code=sm_90a "
                     "-gencode arch=compute_90a,code=compute_90a", SM90A),
    ("8.9 12.0", "-gencode arch=compute_89,code=sm_89 -gencode arch=compute_120,code=sm_120", None),
])
def test_makefile_gencode(arch_list, gencode, ws):
    """flash: every listed arch (9.0 -> sm_90); ws: sm_90a alone whenever 9.0 or 9.0a is listed."""
    config = parse({"TORCH_CUDA_ARCH_LIST": arch_list})
    specs = kernels(config)
    text = render_makefile(environment(), specs, config)
    variables = makefile_vars(text)
    assert variables["GENCODE_flash"] == gencode
    assert variables["SRC_GENCODE"] == gencode      # the flash family covers every arch >= 8.0
    assert variables.get("GENCODE_ws") == ws
    assert any(s.family == "ws" for s in specs) == (ws is not None)
    for spec in specs:
        assert f"$(call obj,$(GEN_DIR)/{kernel_path(spec)}): GENCODE := $(GENCODE_{spec.family})" in text
        assert f"$(GEN_DIR)/{kernel_path(spec)}" in text.split("KERNEL_SRCS :=")[1]


def test_makefile_records_use_ccache_as_default():
    config = parse({"USE_CCACHE": "on"})
    assert "USE_CCACHE ?= 1" in render_makefile(environment(), [], config)


# The manifest of TORCH_CUDA_ARCH_LIST=9.0;8.0 FMHA_FILTER=*_d64_*, written out by hand from
# the rules: name -> (block_m, block_n, warps_m, warps_n, max_rows, min_s_kv). Decode d = 64: the
# mma path's 16 rows for each of 2 KV heads over 64 keys (max_rows 0: it tiles any count; a
# cache of 64 keys or more), then the warp path's rows 1, 4, 8 at 2, 2, 1 passes of 4 keys (the
# largest tiles any count); ws d = 64: 192 rows over 12 warps; flash: 128 x 64 over 4 warps.
D64_MANIFEST = {
    "fmha_v2_decode_fp16_fp32_d64_32x64_w1x4_sm80": (32, 64, 1, 4, 0, 64),
    "fmha_v2_decode_fp16_fp32_d64_1x8_w4x1_sm80": (1, 8, 4, 1, 1, 0),
    "fmha_v2_decode_fp16_fp32_d64_4x8_w4x1_sm80": (4, 8, 4, 1, 4, 0),
    "fmha_v2_decode_fp16_fp32_d64_8x4_w4x1_sm80": (8, 4, 4, 1, 0, 0),
    "fmha_v2_decode_bf16_d64_32x64_w1x4_sm80": (32, 64, 1, 4, 0, 64),
    "fmha_v2_decode_bf16_d64_1x8_w4x1_sm80": (1, 8, 4, 1, 1, 0),
    "fmha_v2_decode_bf16_d64_4x8_w4x1_sm80": (4, 8, 4, 1, 4, 0),
    "fmha_v2_decode_bf16_d64_8x4_w4x1_sm80": (8, 4, 4, 1, 0, 0),
    "fmha_v2_decode_fp16_fp32_kve4m3_d64_32x128_w1x4_sm80": (32, 128, 1, 4, 0, 0),  # an e4m3 cache: 2 KV heads
    "fmha_v2_decode_bf16_kve4m3_d64_32x128_w1x4_sm80": (32, 128, 1, 4, 0, 0),
    "fmha_v2_ws_fp16_fp32_d64_192x128_w12x1_sm90": (192, 128, 12, 1, 0, 0),
    "fmha_v2_ws_bf16_d64_192x128_w12x1_sm90": (192, 128, 12, 1, 0, 0),
    "fmha_v2_ws_e4m3_d64_192x128_w12x1_sm90": (192, 128, 12, 1, 0, 0),
    "fmha_v2_ws_e4m3_d64_128x256_w8x1_sm90": (128, 256, 8, 1, 0, 0),
    "fmha_v2_flash_fp16_d64_128x64_w4x1_sm80": (128, 64, 4, 1, 0, 0),
    "fmha_v2_flash_bf16_d64_128x64_w4x1_sm80": (128, 64, 4, 1, 0, 0),
}
# The decode mma tiles of two KV heads name their one-head siblings: OneHead (the same 8192
# elements a stage in one head, 128 keys) and, at d = 64, Quad (16 KB stages, 64 keys); the ws
# 192-row tiles their 128-row Short, the e4m3 256-key tile its 128-key Short.
D64_SIBLINGS = {
    "fmha_v2_ws_fp16_fp32_d64_192x128_w12x1_sm90": ["fmha_v2_ws_fp16_fp32_d64_128x128_w8x1_sm90"],
    "fmha_v2_ws_bf16_d64_192x128_w12x1_sm90": ["fmha_v2_ws_bf16_d64_128x128_w8x1_sm90"],
    "fmha_v2_ws_e4m3_d64_128x256_w8x1_sm90": ["fmha_v2_ws_e4m3_d64_128x128_w8x1_sm90"],
    "fmha_v2_decode_fp16_fp32_d64_32x64_w1x4_sm80": ["fmha_v2_decode_fp16_fp32_d64_16x128_w1x4_sm80",
                                                     "fmha_v2_decode_fp16_fp32_d64_16x64_w1x4_sm80"],
    "fmha_v2_decode_bf16_d64_32x64_w1x4_sm80": ["fmha_v2_decode_bf16_d64_16x128_w1x4_sm80",
                                                "fmha_v2_decode_bf16_d64_16x64_w1x4_sm80"],
    "fmha_v2_decode_fp16_fp32_kve4m3_d64_32x128_w1x4_sm80": ["fmha_v2_decode_fp16_fp32_kve4m3_d64_16x256_w1x4_sm80"],
    "fmha_v2_decode_bf16_kve4m3_d64_32x128_w1x4_sm80": ["fmha_v2_decode_bf16_kve4m3_d64_16x256_w1x4_sm80"],
}
EVERY_MASK = ["padding", "causal", "sliding_window", "bidirectional_sliding_window", "chunked", "custom"]
EVERY_VARIANT = ["softcap", "alibi", "bias", "sinks", "softmax_stats", "paged_kv"]


def test_manifest(tmp_path):
    config = parse({"TORCH_CUDA_ARCH_LIST": "9.0;8.0", "FMHA_FILTER": "*_d64_*"})
    render_all(kernels(config), config, tmp_path)
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["config"] == {"enable_hmma_fp32": False, "enable_sm100": False, "enable_sm120": False,
                                  "enable_sm89_qmma": False, "fmha_filter": ["*_d64_*"], "scheduling_mode": 1,
                                  "torch_cuda_arch_list": ["8.0", "9.0"], "use_ccache": False}
    assert [k["name"] for k in manifest["kernels"]] == list(D64_MANIFEST)
    for entry in manifest["kernels"]:
        family, dtype = entry["name"].split("_")[2:4]
        block_m, block_n, warps_m, warps_n, max_rows, min_s_kv = D64_MANIFEST[entry["name"]]
        kv8 = "_kve4m3_" in entry["name"]  # the mma path at every length
        assert entry == {
            "name": entry["name"], "family": family, "sm": 90 if family == "ws" else 80,
            "dtype": dtype, "acc": "fp16" if entry["name"].startswith("fmha_v2_flash_fp16_") else "fp32",
            "d": 64, "dv": 64, "block_m": block_m, "block_n": block_n, "warps_m": warps_m, "warps_n": warps_n,
            # the e4m3 192-row tile's row: the padding mask alone (ws.py FP8_PADDING_TILE)
            "masks": ["padding"] if dtype == "e4m3" and block_m == 192 else EVERY_MASK, "max_rows": max_rows, "min_s_kv": min_s_kv, "kv_dtype": "e4m3" if kv8 else "",
            # ws: no softcapping in its 192-row tiles (generator/families/ws.py), e4m3 no bias;
            # ws and decode's mma path (min_s_kv 64): no wide logits (one FFMA a score)
            "variants": [v for v in EVERY_VARIANT if v != "bias" and (v != "softcap" or block_m == 128)]
                        if dtype == "e4m3" else
                        EVERY_VARIANT[1:] + ["dropout"] if family == "ws" else
                        EVERY_VARIANT if min_s_kv or kv8 else EVERY_VARIANT + ["wide_logits"] + (["dropout"] if family == "flash" else []),
            # What tests/gpu/manifest.py's require_arch reads: sm_90a code runs on sm_90 alone;
            # decode and flash are portable.
            "archs": ["9.0a"] if family == "ws" else ["8.0", "9.0"],
            "siblings": D64_SIBLINGS.get(entry["name"], []),
            # ws tiles with a Short sibling run it up to 1024 keys at d = 64 (ws.py short_max_keys)
            "short_max_keys": 1024 if family == "ws" and entry["name"] in D64_SIBLINGS else 0,
        }, entry["name"]


def test_second_run_writes_nothing(tmp_path, capsys):
    out = tmp_path / "gen"
    assert main(["--out", str(out)], environ={}) == 0
    files = sorted(p for p in out.rglob("*") if p.is_file())
    assert len(files) == len(kernels(parse({}))) + 4     # + registry, makefile, manifest, stamp
    # Age every file so a rewrite, even within the same second, shows in the mtime.
    for path in files:
        os.utime(path, (1_000_000_000, 1_000_000_000))
    capsys.readouterr()
    assert main(["--out", str(out)], environ={}) == 0
    assert capsys.readouterr().out.rstrip().endswith(": up to date")
    assert all(path.stat().st_mtime == 1_000_000_000 for path in files)
    assert sorted(p for p in out.rglob("*") if p.is_file()) == files


def test_changed_flag_rewrites_only_what_it_changes(tmp_path):
    render_all(kernels(parse({})), parse({}), tmp_path)
    outcome = render_all(kernels(parse({})), parse({"TORCH_CUDA_ARCH_LIST": "9.0"}), tmp_path)
    # New gencode: kernel sources are the same; the makefile, manifest, arch stamp and the
    # registry (its archs column) are not.
    assert sorted(p.name for p in outcome.written) == ["archs.stamp", "makefile", "manifest.json", "registry.cpp"]


def test_stale_kernels_are_removed(tmp_path):
    both = kernels(parse({"FMHA_FILTER": "*_flash_*_d64_*"}))
    assert len(both) == 2
    render_all(both, parse({}), tmp_path)
    (tmp_path / "kernels" / "README").write_text("not a kernel: left alone\n")
    outcome = render_all(both[:1], parse({}), tmp_path)
    assert [p.name for p in outcome.removed] == [f"{both[1].name}.cu"]
    assert sorted(p.name for p in (tmp_path / "kernels").iterdir()) == ["README", f"{both[0].name}.cu"]


def test_write_if_changed(tmp_path):
    path = tmp_path / "a" / "b.txt"
    assert write_if_changed(path, "x\n") is True
    assert write_if_changed(path, "x\n") is False
    assert write_if_changed(path, "y\n") is True and path.read_text() == "y\n"
    assert [p.name for p in path.parent.iterdir()] == ["b.txt"]     # no temp file left behind


def test_strict_undefined(tmp_path):
    (tmp_path / "t.j2").write_text("launch_{{ nmae }}\n")
    with pytest.raises(jinja2.UndefinedError):
        environment(tmp_path).get_template("t.j2").render(name="x")


def test_real_templates_are_strict():
    with pytest.raises(jinja2.UndefinedError):
        environment().get_template("kernel.cu.j2").render(name=SPEC.name)   # no spec, family...
