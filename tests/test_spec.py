"""KernelSpec: the name is derived from the fields, parses back, and is unique."""

import json
from pathlib import Path

import pytest

from generator import enumerate as enum
from generator.env import parse
from generator.spec import ALL_MASKS, KernelSpec

CONFIGS = {
    "default": {},
    "hmma_fp32": {"ENABLE_HMMA_FP32": "1"},
    "sm90_only": {"TORCH_CUDA_ARCH_LIST": "9.0", "ENABLE_HMMA_FP32": "1"},
    "all_archs": {"TORCH_CUDA_ARCH_LIST": "8.0;8.6;8.9;9.0a;10.0;12.0+PTX"},
    "no_hopper": {"TORCH_CUDA_ARCH_LIST": "8.0", "ENABLE_HMMA_FP32": "1"},
}

SPEC = KernelSpec(family="flash", sm=80, dtype="fp16", acc="fp16", d=128, dv=128,
                  block_m=128, block_n=64, warps_m=4, warps_n=1)


def all_candidates(environ):
    return [s for specs in enum.candidates(parse(environ)).values() for s in specs]


@pytest.mark.parametrize("config", CONFIGS)
def test_every_candidate_round_trips_and_is_unique(config):
    specs = all_candidates(CONFIGS[config])
    assert {s.family for s in specs} == {"decode", "flash", "ws"}   # candidates: before the arch rules
    for spec in specs:
        assert KernelSpec.parse(spec.name, masks=spec.masks) == spec
    names = [s.name for s in specs]
    assert len(set(names)) == len(names)


@pytest.mark.parametrize("changes, name", [
    ({}, "fmha_v2_flash_fp16_d128_128x64_w4x1_sm80"),
    ({"acc": "fp32"}, "fmha_v2_flash_fp16_fp32_d128_128x64_w4x1_sm80"),
    ({"dtype": "bf16", "acc": "fp32"}, "fmha_v2_flash_bf16_d128_128x64_w4x1_sm80"),
    # Nonsense pairings still have a name that parses, so -v can print why they are rejected.
    ({"dtype": "bf16"}, "fmha_v2_flash_bf16_fp16_d128_128x64_w4x1_sm80"),
    ({"dv": 64}, "fmha_v2_flash_fp16_d128_dv64_128x64_w4x1_sm80"),
    ({"block_m": 64, "block_n": 32, "warps_m": 2, "warps_n": 2}, "fmha_v2_flash_fp16_d128_64x32_w2x2_sm80"),
    ({"family": "ws", "sm": 90, "acc": "fp32", "block_n": 128, "warps_m": 8},
     "fmha_v2_ws_fp16_fp32_d128_128x128_w8x1_sm90"),
    ({"family": "ws", "sm": 90, "dtype": "bf16", "acc": "fp32", "d": 256, "dv": 256, "warps_m": 8},
     "fmha_v2_ws_bf16_d256_128x64_w8x1_sm90"),
])
def test_name_format(changes, name):
    spec = KernelSpec(**{**SPEC.__dict__, **changes})
    assert spec.name == name
    assert KernelSpec.parse(name) == spec


def test_masks_are_not_part_of_the_name():
    causal_only = KernelSpec(**{**SPEC.__dict__, "masks": ["causal"]})
    assert causal_only.name == SPEC.name
    assert causal_only.masks == ("causal",)            # stored as a tuple: hashable
    assert KernelSpec.parse(SPEC.name).masks == ALL_MASKS
    assert KernelSpec.parse(SPEC.name, masks=("causal",)) == causal_only


@pytest.mark.parametrize("name", [
    "",
    "fmha_v2_flash",
    "fmha_v2_flash_fp16_d128_128x64_w4x1_sm80_extra",
    "xfmha_v2_flash_fp16_d128_128x64_w4x1_sm80",
    "fmha_v2_hopper_fp16_d128_128x64_w4x1_sm80",        # no such family
    "fmha_v2_flash_sm90_bf16_d128_128x128_w8x1_sm90",   # the header's name is not the family's
    "fmha_v2_ws_bf16_fp32_d128_128x128_w8x1_sm90",      # canonical: bf16 accumulates in fp32
    "fmha_v2_flash_e5m2_d128_128x64_w4x1_sm80",         # no such dtype
    "fmha_v2_flash_fp16_fp64_d128_128x64_w4x1_sm80",    # no such accumulation
    "fmha_v2_flash_fp16_d128_128x64_w4_sm80",
    "fmha_v2_flash_fp16_d0_128x64_w4x1_sm80",           # sizes must be positive
    "fmha_v2_flash_fp16_d128_dv128_128x64_w4x1_sm80",   # canonical: dv only when it differs
    "fmha_v2_flash_bf16_fp32_d128_128x64_w4x1_sm80",    # canonical: bf16 accumulates in fp32
    "fmha_v2_flash_fp16_d0128_128x64_w4x1_sm80",        # canonical: no leading zeros
    "FMHA_V2_FLASH_FP16_D128_128X64_W4X1_SM80",
])
def test_parse_rejects_garbage(name):
    with pytest.raises(ValueError):
        KernelSpec.parse(name)


@pytest.mark.parametrize("changes", [
    {"family": "hopper"}, {"dtype": "fp8"}, {"acc": "int32"}, {"d": 0}, {"block_m": -64},
    {"warps_m": 4.0}, {"masks": ("padding", "sliding")},
])
def test_constructor_rejects_unknown_vocabulary(changes):
    with pytest.raises(ValueError):
        KernelSpec(**{**SPEC.__dict__, **changes})


def test_to_dict_is_json_with_the_name():
    data = json.loads(json.dumps(SPEC.to_dict()))
    assert data["name"] == SPEC.name
    assert data["masks"] == list(ALL_MASKS)
    fields = {k: v for k, v in data.items() if k != "name"}
    assert KernelSpec(**fields) == SPEC


# The flag of every run-time variant (spec.VARIANTS) and of every mask beyond padding and
# causal (spec.MASKS): each must have a row in docs/USAGE.md's variant x family table.
USAGE_VARIANT_FLAGS = {
    "softcap": "-softcapping-scale-bmm1", "alibi": "-alibi", "bias": "-attention-bias",
    "sinks": "-use-attention-sinks", "softmax_stats": "-save-softmax", "paged_kv": "-paged-kv",
    "sliding_window": "-sliding-window-size", "bidirectional_sliding_window": "-bidirectional-sliding-window-mask",
    "chunked": "-chunked-attention-size", "custom": "-custom-mask", "wide_logits": "-scale-bmm1",
    "dropout": "-dropout",
}


def test_usage_variant_table_has_every_variant_and_family():
    from generator.spec import FAMILIES, MASKS, VARIANTS
    assert set(USAGE_VARIANT_FLAGS) == set(VARIANTS) | (set(MASKS) - {"padding", "causal"})
    text = (Path(__file__).resolve().parent.parent / "docs" / "USAGE.md").read_text()
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| variant | flag |"))
    header = lines[start]
    for family in FAMILIES:
        assert f"| {family} (" in header, f"docs/USAGE.md's variant table has no column for the {family} family"
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append(line)
    for name, flag in USAGE_VARIANT_FLAGS.items():
        row = next((r for r in rows if flag in r.split("|")[2]), None)
        assert row is not None, f"docs/USAGE.md's variant table has no row for {name} ({flag})"
        assert len(row.split("|")) == len(header.split("|")), f"the {name} row does not fill every family column"
