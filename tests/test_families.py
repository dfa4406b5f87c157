"""generator/families/: each family's limits and the Config its translation units render,
checked against numbers written out by hand, and (with nvcc) against the C++ guards."""

import re
from dataclasses import replace
import shutil
import subprocess

import pytest

from generator.env import parse
from generator.families import constants, sibling_names
from generator.families import ws as ws_family
from generator.main import kernels
from generator.render import environment, render_kernel
from generator.rules import kernel_variants
from generator.spec import FAMILIES, KernelSpec

from tests.test_build import ROOT, SM90A

SM90 = "-gencode arch=compute_90,code=sm_90"


def spec(name: str) -> KernelSpec:
    return KernelSpec.parse(name)


# --- ws ------------------------------------------------------------------------------------

# name -> (columns of d, of dv in shared memory, softcapping compiled). 227 KB is sm_90's
# per-block opt-in limit (232448 bytes); 7 KB of it the tile choice leaves for alignment,
# barriers and tile slots (220 KB for Q and two K/V stages).
WS_CONFIGS = {
    "fmha_v2_ws_bf16_d32_192x128_w12x1_sm90": (64, 64, False),
    "fmha_v2_ws_bf16_d40_192x128_w12x1_sm90": (64, 64, False),
    "fmha_v2_ws_bf16_d64_192x128_w12x1_sm90": (64, 64, False),
    "fmha_v2_ws_bf16_d72_128x128_w8x1_sm90": (128, 128, True),
    "fmha_v2_ws_bf16_d128_128x128_w8x1_sm90": (128, 128, True),
    "fmha_v2_ws_bf16_d160_128x64_w8x1_sm90": (192, 192, True),
    "fmha_v2_ws_bf16_d192_dv128_128x128_w8x1_sm90": (192, 128, True),
    "fmha_v2_ws_bf16_d256_128x64_w8x1_sm90": (256, 256, True),
}


def test_smem_limit_is_the_cxx_guard():
    # The generator sizes ws tiles to SMEM_LIMIT; flash and decode static_assert against
    # kMaxSmemPerCta. 232448 bytes: cudaDevAttrMaxSharedMemoryPerBlockOptin on sm_90.
    text = (ROOT / "src/fmha/utils.h").read_text()
    kib = int(re.search(r"constexpr int kMaxSmemPerCta = (\d+) \* 1024;", text).group(1))
    assert ws_family.SMEM_LIMIT == kib * 1024 == 232448


@pytest.mark.parametrize("name", WS_CONFIGS)
def test_ws_constants(name):
    dim_qk, dim_v, softcap = WS_CONFIGS[name]
    short = (128, 128, 1024) if spec(name).block_m == 192 else (0, 0, 0)  # test_ws_config_names_the_short_sibling
    assert constants(spec(name)) == {"kSmemLimit": 232448, "kSmemReserve": 7168, "kPanelCols": 64,
                                     "kDimQK": dim_qk, "kDimV": dim_v, "kSoftcap": softcap,
                                     "kShortBlockM": short[0], "kShortBlockN": short[1], "kShortMaxKeys": short[2],
                                     "kMaskKinds": 7}


def test_ws_smem_budget_decides_the_key_block():
    assert ws_family.SMEM_BUDGET == 220 * 1024
    # Q [128, 192] + 2 x (K [128, 192] + V [128, 128]): 48 + 160 = 208 KB fits; d = dv = 192: 240 KB not.
    assert ws_family.tiles_fit(128, 128, 192, 128) and not ws_family.tiles_fit(128, 128, 192, 192)


def test_ws_softcap_follows_the_config():
    """The row's variants and the TU's kSoftcap are one fact: no softcapping at 192 rows."""
    for name, (_, _, softcap) in WS_CONFIGS.items():
        assert ("softcap" in kernel_variants(spec(name))) == softcap, name


# --- decode --------------------------------------------------------------------------------

# name -> (KV heads a CTA, OneHead's keys a stage, Quad's; 0: no such sibling; e4m3 cache).
DECODE_MMA = {
    "fmha_v2_decode_bf16_d32_64x64_w1x4_sm80": (4, 256, 0, False),
    "fmha_v2_decode_bf16_d64_32x64_w1x4_sm80": (2, 128, 64, False),
    "fmha_v2_decode_bf16_d128_16x64_w1x4_sm80": (1, 0, 0, False),
    "fmha_v2_decode_bf16_d256_16x64_w1x4_sm80": (1, 0, 0, False),
    # an e4m3 cache: 32 KB stages of K and V, up to 4 KV heads, OneHead up to 256 keys, no Quad
    "fmha_v2_decode_bf16_kve4m3_d32_64x128_w1x4_sm80": (4, 0, 0, True),
    "fmha_v2_decode_fp16_fp32_kve4m3_d64_32x128_w1x4_sm80": (2, 256, 0, True),
    "fmha_v2_decode_bf16_kve4m3_d128_32x64_w1x4_sm80": (2, 128, 0, True),
    "fmha_v2_decode_bf16_kve4m3_d256_16x64_w1x4_sm80": (1, 0, 0, True),
}


@pytest.mark.parametrize("name", DECODE_MMA)
def test_decode_mma_constants(name):
    heads, one_head, quad, kv8 = DECODE_MMA[name]
    assert constants(spec(name)) == {"kMaxSq": 16, "kMma": True, "kHeads": heads,
                                     "kOneHeadBlockN": one_head, "kQuadBlockN": quad, "kKvE4m3": kv8}


@pytest.mark.parametrize("name", ["fmha_v2_decode_bf16_d128_4x4_w4x1_sm80",
                                  "fmha_v2_decode_fp16_fp32_d64_8x4_w4x1_sm80"])
def test_decode_warp_constants(name):
    assert constants(spec(name)) == {"kMaxSq": 16, "kMma": False, "kHeads": 1, "kOneHeadBlockN": 0, "kQuadBlockN": 0,
                                     "kKvE4m3": False}


def test_siblings_are_named():
    assert sibling_names(spec("fmha_v2_decode_bf16_d64_32x64_w1x4_sm80")) == (
        "fmha_v2_decode_bf16_d64_16x128_w1x4_sm80", "fmha_v2_decode_bf16_d64_16x64_w1x4_sm80")
    assert sibling_names(spec("fmha_v2_decode_fp16_fp32_d32_64x64_w1x4_sm80")) == (
        "fmha_v2_decode_fp16_fp32_d32_16x256_w1x4_sm80",)
    assert sibling_names(spec("fmha_v2_decode_bf16_d128_16x64_w1x4_sm80")) == ()
    # ws: the 192-row tiles' Short sibling, 128 rows on two consumer warpgroups; none for 128 rows.
    assert sibling_names(spec("fmha_v2_ws_bf16_d64_192x128_w12x1_sm90")) == ("fmha_v2_ws_bf16_d64_128x128_w8x1_sm90",)
    assert sibling_names(spec("fmha_v2_ws_fp16_fp32_d32_192x128_w12x1_sm90")) == (
        "fmha_v2_ws_fp16_fp32_d32_128x128_w8x1_sm90",)
    assert sibling_names(spec("fmha_v2_ws_bf16_d128_128x128_w8x1_sm90")) == ()
    assert sibling_names(spec("fmha_v2_ws_e4m3_d192_dv128_128x128_w8x1_sm90")) == ()
    # ... and the e4m3 128-key tile with dv > 128 (a 24-register producer): 128 x 64.
    assert sibling_names(spec("fmha_v2_ws_e4m3_d256_128x128_w8x1_sm90")) == ("fmha_v2_ws_e4m3_d256_128x64_w8x1_sm90",)
    # ... and an e4m3 tile past 128 keys: 128 x 128.
    assert sibling_names(spec("fmha_v2_ws_e4m3_d128_128x192_w8x1_sm90")) == ("fmha_v2_ws_e4m3_d128_128x128_w8x1_sm90",)
    assert sibling_names(spec("fmha_v2_ws_e4m3_d64_128x256_w8x1_sm90")) == ("fmha_v2_ws_e4m3_d64_128x128_w8x1_sm90",)
    # ... but the e4m3 192-row tile runs the padding mask alone (FP8_PADDING_TILE): none.
    assert sibling_names(spec("fmha_v2_ws_e4m3_d64_192x128_w12x1_sm90")) == ()


@pytest.mark.parametrize("name, short", [
    ("fmha_v2_ws_bf16_d64_192x128_w12x1_sm90", (128, 128, 1024)),      # causal problems of <= 1024 keys
    ("fmha_v2_ws_e4m3_d256_128x128_w8x1_sm90", (128, 64, 384)),        # the lean tile: <= 384 (NOTES §92)
    ("fmha_v2_ws_e4m3_d128_128x192_w8x1_sm90", (128, 128, 1024)),
    ("fmha_v2_ws_e4m3_d64_128x256_w8x1_sm90", (128, 128, 1024)),
    ("fmha_v2_ws_bf16_d128_128x128_w8x1_sm90", (0, 0, 0)),
    ("fmha_v2_ws_e4m3_d64_192x128_w12x1_sm90", (0, 0, 0)),
])
def test_ws_config_names_the_short_sibling(name, short):
    """The sibling's tile and the longest problem it runs are decided once, here, and handed to
    ws::Traits::Short and launch.h's runs_short through Config."""
    c = constants(spec(name))
    assert (c["kShortBlockM"], c["kShortBlockN"], c["kShortMaxKeys"]) == short
    if short[0]:
        bm, bn = short[:2]
        assert sibling_names(spec(name)) == (name.replace(f"_{spec(name).block_m}x{spec(name).block_n}_",
                                                          f"_{bm}x{bn}_").replace("w12x1", "w8x1"),)


def test_ws_config_compiles_the_rows_mask_kinds():
    """ws::Config::kMaskKinds: a bit per mask::Kind of the row's masks (padding 1, causal 2,
    local 4), so the e4m3 padding row compiles no causal or local kernel."""
    assert constants(spec("fmha_v2_ws_bf16_d64_192x128_w12x1_sm90"))["kMaskKinds"] == 7
    assert constants(replace(spec("fmha_v2_ws_e4m3_d64_192x128_w12x1_sm90"), masks=("padding",)))["kMaskKinds"] == 1
    assert constants(replace(spec("fmha_v2_ws_bf16_d64_192x128_w12x1_sm90"), masks=("custom", "chunked")))["kMaskKinds"] == 5
    rows = {s.name: s for s in kernels(parse({"TORCH_CUDA_ARCH_LIST": "9.0"})) if s.family == "ws"}
    assert constants(rows["fmha_v2_ws_e4m3_d64_192x128_w12x1_sm90"])["kMaskKinds"] == 1
    assert constants(rows["fmha_v2_ws_e4m3_d64_128x256_w8x1_sm90"])["kMaskKinds"] == 7


def test_max_s_q():
    assert {name: family.max_s_q for name, family in FAMILIES.items()} == {"decode": 16, "ws": 0, "qmma": 0, "flash": 0}


# --- rendering -----------------------------------------------------------------------------

def test_flash_renders_no_config():
    text = render_kernel(environment(), spec("fmha_v2_flash_fp16_d128_128x64_w4x1_sm80"))
    assert "Config" not in text and "flash_sm80::Traits<__half, /*kHeadDim=*/128" in text


def test_decode_renders_its_config():
    text = render_kernel(environment(), spec("fmha_v2_decode_bf16_d64_32x64_w1x4_sm80"))
    assert ("using Config = decode::Config</*kMaxSq=*/16, /*kMma=*/true, /*kHeads=*/2, /*kOneHeadBlockN=*/128, "
            "/*kQuadBlockN=*/64, /*kKvE4m3=*/false>;\nusing Traits = decode::Traits<Config, __nv_bfloat16,") in text


# --- the C++ guards accept what is rendered ----------------------------------------------

def traits_probe(names) -> str:
    """A TU that instantiates each kernel's Traits with its rendered Config (no kernels: the
    static_asserts run, nothing is compiled for the device)."""
    lines = []
    for i, name in enumerate(names):
        text = render_kernel(environment(), spec(name))
        body = text[text.index("namespace {\n") + len("namespace {\n"):text.index("}  // namespace")]
        lines += [f"namespace probe{i} {{", body, f"static_assert(sizeof(Traits) > 0, \"{name}\");", "}"]
    return "\n".join(lines)


def compile_probe(tmp_path, header: str, gencode: str, body: str) -> subprocess.CompletedProcess:
    source = tmp_path / "probe.cu"
    source.write_text(f'#include "{header}"\nnamespace fmha {{\n{body}\n}}  // namespace fmha\n')
    return subprocess.run(["nvcc", "-std=c++17", f"-I{ROOT / 'src'}", "--expt-relaxed-constexpr", *gencode.split(),
                           "-c", str(source), "-o", str(tmp_path / "probe.o")],
                          capture_output=True, text=True, timeout=600)


needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not found")


@pytest.mark.build
@needs_nvcc
@pytest.mark.parametrize("family, header, gencode", [
    ("ws", "fmha/kernel/ws.h", SM90A),
    ("decode", "fmha/kernel/decode.h", SM90),
    ("flash", "fmha/kernel/flash_sm80.h", SM90),
])
def test_cpp_guards_accept_every_rendered_config(tmp_path, family, header, gencode):
    """Every kernel of the default build (ENABLE_HMMA_FP32=1): its Config passes the Traits'
    static_asserts."""
    names = [s.name for s in kernels(parse({"ENABLE_HMMA_FP32": "1"})) if s.family == family]
    result = compile_probe(tmp_path, header, gencode, traits_probe(names))
    assert result.returncode == 0, result.stderr[-3000:]


@pytest.mark.build
@needs_nvcc
@pytest.mark.parametrize("header, gencode, body, message", [
    # softcapping rendered for the 192-row tile
    ("fmha/kernel/ws.h", SM90A,
     "using T = ws::Traits<ws::Config<232448, 7168, 64, 64, 64, true, 128, 128, 1024>, __half, 64, 64, 192, 128, 12, 1, "
     "false>;",
     "ws: softcapping only at two consumer warpgroups"),
    # a 16-bit 192-row tile, which runs dropout on its Short, rendered without one
    ("fmha/kernel/ws.h", SM90A,
     "using T = ws::Traits<ws::Config<232448, 7168, 64, 64, 64, false>, __half, 64, 64, 192, 128, 12, 1, false>;",
     "ws: a 16-bit 192-row or a kWideKeys tile needs a Short sibling"),
    # panels that are not d's
    ("fmha/kernel/ws.h", SM90A,
     "using T = ws::Traits<ws::Config<232448, 7168, 64, 64, 64, true>, __half, 128, 128, 128, 128, 8, 1, false>;",
     "ws: Config's kDimQK, kDimV are d, dv in whole 128-byte panels"),
    # one KV head rendered for a two-head tile
    ("fmha/kernel/decode.h", SM90,
     "using T = decode::Traits<decode::Config<16, true, 1, 0, 0>, __half, 64, 64, 32, 64, 1, 4, false>;",
     "decode mma: kBlockM 16 rows per KV head"),
    # the mma path rendered for a warp tile
    ("fmha/kernel/decode.h", SM90,
     "using T = decode::Traits<decode::Config<16, true, 1, 0, 0>, __half, 128, 128, 4, 4, 4, 1, false>;",
     "decode mma: kWarpsN 4"),
])
def test_cpp_guards_refuse_a_wrong_config(tmp_path, header, gencode, body, message):
    result = compile_probe(tmp_path, header, gencode, body + "\nstatic_assert(sizeof(T) > 0);")
    assert result.returncode != 0 and message in result.stderr, result.stderr[-3000:]


# --- qmma ----------------------------------------------------------------------------------

def test_qmma_tiles_and_masks():
    """e4m3 at d = 64 and 128 on the 64 x 64 tile, every mask but the custom one, built with
    ENABLE_SM89_QMMA=1 for the listed archs from 8.9 on."""
    from generator.env import parse
    from generator.enumerate import qmma
    from generator.rules import broken, family_archs
    specs = qmma(parse({"ENABLE_SM89_QMMA": "1"}))
    assert [s.name for s in specs] == ["fmha_v2_qmma_e4m3_d64_64x64_w4x1_sm89", "fmha_v2_qmma_e4m3_d128_64x64_w4x1_sm89"]
    assert all("custom" not in s.masks and len(s.masks) == 5 for s in specs)
    assert qmma(parse({})) == []
    assert [a.number for a in family_archs("qmma", parse({"TORCH_CUDA_ARCH_LIST": "8.0;8.9;9.0;12.0"}))] == [89, 90, 120]
    assert [r.name for r in broken(specs[0], parse({"TORCH_CUDA_ARCH_LIST": "8.0;8.6"}))] == ["arch"]
    assert constants(specs[0]) == {}
