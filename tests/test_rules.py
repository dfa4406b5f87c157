"""Each validity rule rejects what it should, and says why in words."""

import pytest

from generator.env import Config, parse
from generator.enumerate import candidates
from generator.rules import RULES, broken
from generator.spec import KernelSpec

GOOD = KernelSpec(family="flash", sm=80, dtype="fp16", acc="fp16", d=128, dv=128,
                  block_m=128, block_n=64, warps_m=4, warps_n=1)
DEFAULT = parse({})
# A ws kernel's fields (bf16: no ENABLE_HMMA_FP32 needed), to change one at a time.
WS = {"family": "ws", "sm": 90, "dtype": "bf16", "acc": "fp32", "block_m": 128, "block_n": 128, "warps_m": 8}
# A decode kernel's fields (rows per warp in block_m, keys per warp step in block_n).
DECODE = {"family": "decode", "sm": 80, "dtype": "bf16", "acc": "fp32", "block_m": 4, "block_n": 4, "warps_m": 4}
DECODE_TRAITS = ("family decode (decode::Traits) needs d = dv in {32, 64, 128, 256}, fp32 accumulation, "
                 "and either the warp path's tile (block_m rows per warp in {1, 4, 8}, block_n a multiple of "
                 "256/d (1-8 passes), warps 1-8 x 1) or the mma path's 16 rows x 8192/d keys (64 at d = 256), "
                 "warps 1x4 (an e4m3 cache: families/decode.py kv8_tile)")
QMMA = {"family": "qmma", "sm": 89, "dtype": "e4m3", "acc": "fp32", "block_m": 64, "block_n": 64, "warps_m": 4,
        "masks": ("padding", "causal", "sliding_window", "bidirectional_sliding_window", "chunked")}
QMMA_TRAITS = ("family qmma (qmma::Traits) needs e4m3 inputs with fp32 accumulation, d = dv in {64, 128}, "
               "the tile 64x64 over warps 4x1, and no custom mask")
KV8 = {**DECODE, "block_m": 32, "block_n": 64, "warps_m": 1, "warps_n": 4, "kv_dtype": "e4m3"}  # d = 128
WS_TRAITS = ("family ws (ws::Traits) needs fp32 accumulation, "
             "block_m 128 or 192 over warps (block_m/16)x1 and block_n 64 or 128 (e4m3 also 192 or 256)")

# rule name -> (spec changes, config, the reason -v prints). Each breaks exactly that rule.
CASES = {
    "head_size": [
        ({"d": 100, "dv": 100}, DEFAULT, "head size must be a multiple of 8 and <= 256"),
        ({"d": 512, "dv": 512}, DEFAULT, "head size must be a multiple of 8 and <= 256"),
        ({"dv": 260}, DEFAULT, "head size must be a multiple of 8 and <= 256"),
    ],
    "fp16_acc": [
        ({"dtype": "bf16"}, DEFAULT, "fp16 accumulation only with fp16 inputs"),
    ],
    "hmma_fp32": [
        ({"acc": "fp32"}, DEFAULT, "flash fp16 inputs with fp32 accumulation need ENABLE_HMMA_FP32=1"),
    ],
    "block_m": [
        ({"block_m": 96}, DEFAULT, "block_m must be a multiple of 16*warps_m"),
        ({"block_m": 64, "warps_m": 8}, DEFAULT, "block_m must be a multiple of 16*warps_m"),
    ],
    "block_n": [
        ({"block_n": 40}, DEFAULT, "block_n must be a multiple of 16*warps_n"),
        ({"block_n": 16, "warps_n": 2}, DEFAULT, "block_n must be a multiple of 16*warps_n"),
    ],
    "family_sm": [
        ({"sm": 90}, DEFAULT, "family flash is built for base arch 8.0: sm must match"),
        ({**WS, "sm": 80}, DEFAULT, "family ws is built for base arch 9.0: sm must match"),
    ],
    "ws_traits": [
        ({**WS, "block_m": 192, "warps_m": 4}, DEFAULT, WS_TRAITS),   # 192 rows need 12 warps
        ({**WS, "dtype": "fp16", "acc": "fp16"}, DEFAULT, WS_TRAITS),
        ({**WS, "block_n": 192}, DEFAULT, WS_TRAITS),
        ({**WS, "block_m": 64, "warps_m": 4}, DEFAULT, WS_TRAITS),
        ({**WS, "warps_m": 4, "warps_n": 2}, DEFAULT, WS_TRAITS),
    ],
    "decode_traits": [
        ({**DECODE, "d": 96, "dv": 96}, DEFAULT, DECODE_TRAITS),     # 12 lanes per key do not split a warp
        ({**DECODE, "dv": 64}, DEFAULT, DECODE_TRAITS),
        ({**DECODE, "dtype": "fp16", "acc": "fp16"}, DEFAULT, DECODE_TRAITS),
        ({**DECODE, "block_m": 2}, DEFAULT, DECODE_TRAITS),
        ({**DECODE, "block_n": 3}, DEFAULT, DECODE_TRAITS),          # not a multiple of 2 keys per pass
        ({**DECODE, "block_n": 36}, DEFAULT, DECODE_TRAITS),         # 18 passes
        ({**DECODE, "warps_m": 4, "warps_n": 2}, DEFAULT, DECODE_TRAITS),
        ({**DECODE, "block_m": 16, "block_n": 32, "warps_m": 1, "warps_n": 4}, DEFAULT, DECODE_TRAITS),  # mma: 64 keys
        ({**DECODE, "d": 64, "dv": 64, "block_m": 16, "block_n": 64, "warps_m": 1, "warps_n": 4}, DEFAULT,
         DECODE_TRAITS),  # mma at d = 64: 128 keys
        ({**DECODE, "d": 256, "dv": 256, "block_m": 16, "block_n": 32, "warps_m": 1, "warps_n": 4}, DEFAULT,
         DECODE_TRAITS),  # mma at d = 256: 64 keys
        ({**DECODE, "block_m": 32, "block_n": 64, "warps_m": 1, "warps_n": 4}, DEFAULT, DECODE_TRAITS),  # mma: 16 rows
        ({**KV8, "block_n": 128}, DEFAULT, DECODE_TRAITS),  # an e4m3 cache's stage: 16384 e4m3 of K
        ({**DECODE, "kv_dtype": "e4m3"}, DEFAULT, DECODE_TRAITS),  # no warp path over an e4m3 cache
    ],
    "masks": [
        ({"masks": ()}, DEFAULT, "a kernel must support at least one mask"),
    ],
    "qmma_traits": [
        ({**QMMA, "dtype": "bf16"}, DEFAULT, QMMA_TRAITS),
        ({**QMMA, "d": 256, "dv": 256}, DEFAULT, QMMA_TRAITS),   # spills on sm_90 (qmma_sm89.h)
        ({**QMMA, "block_m": 128}, DEFAULT, QMMA_TRAITS),
        ({**QMMA, "masks": ("padding", "custom")}, DEFAULT, QMMA_TRAITS),
    ],
    "kv_dtype": [
        ({"kv_dtype": "e4m3"}, DEFAULT, "a KV dtype other than the inputs' (an e4m3 cache) only in family decode, "
         "under fp16 or bf16 queries"),
    ],
    "arch": [
        # The env parser refuses archs below 8.0, so only a hand-made Config gets here.
        ({}, Config(archs=()), "family flash needs an arch >= 8.0 in TORCH_CUDA_ARCH_LIST"),
    ],
    "arch_specific": [
        ({**WS}, parse({"TORCH_CUDA_ARCH_LIST": "8.0;8.9"}),
         "family ws is built for sm_90a only (wgmma, setmaxnreg): TORCH_CUDA_ARCH_LIST must name 9.0 or 9.0a"),
        # sm_90a code does not run on Blackwell: 10.0 is not enough.
        ({**WS}, parse({"TORCH_CUDA_ARCH_LIST": "10.0"}),
         "family ws is built for sm_90a only (wgmma, setmaxnreg): TORCH_CUDA_ARCH_LIST must name 9.0 or 9.0a"),
    ],
}


def test_every_rule_is_tested():
    assert set(CASES) == {rule.name for rule in RULES}
    assert len({rule.name for rule in RULES}) == len(RULES)


def test_good_spec_breaks_nothing():
    assert broken(GOOD, DEFAULT) == []
    ws = KernelSpec(**{**GOOD.__dict__, **WS})
    for arch_list in ("9.0", "9.0a", "8.0;9.0", "9.0+PTX;12.0"):
        assert broken(ws, parse({"TORCH_CUDA_ARCH_LIST": arch_list})) == []
    # ws head sizes: any multiple of 8 (Traits pad shared memory to 64-column panels), dv != d too.
    for d, dv in ((40, 40), (96, 96), (104, 104), (160, 160), (192, 128), (96, 64)):
        assert broken(KernelSpec(**{**ws.__dict__, "d": d, "dv": dv}), DEFAULT) == []
    assert broken(KernelSpec(**{**GOOD.__dict__, **QMMA}), DEFAULT) == []
    # decode over an e4m3 cache: fp16 and bf16 queries
    for dtype in ("bf16", "fp16"):
        assert broken(KernelSpec(**{**GOOD.__dict__, **KV8, "dtype": dtype}), DEFAULT) == []


@pytest.mark.parametrize("rule, changes, config, reason",
                         [(rule, *case) for rule, cases in CASES.items() for case in cases])
def test_rule_rejects_with_reason(rule, changes, config, reason):
    spec = KernelSpec(**{**GOOD.__dict__, **changes})
    rejected = broken(spec, config)
    assert [r.name for r in rejected] == [rule]
    assert rejected[0].why(spec) == reason


def test_hmma_fp32_flag_lets_fp32_accumulation_through():
    spec = KernelSpec(**{**GOOD.__dict__, "acc": "fp32"})
    assert broken(spec, parse({"ENABLE_HMMA_FP32": "1"})) == []


def test_default_candidates_are_rejected_only_for_the_flag():
    specs = [spec for family in candidates(DEFAULT).values() for spec in family]
    assert {spec.family for spec in specs} == {"decode", "flash", "ws"}
    for spec in specs:
        flash_fp16_fp32 = spec.family == "flash" and spec.acc == "fp32" and spec.dtype == "fp16"
        assert [r.name for r in broken(spec, DEFAULT)] == (["hmma_fp32"] if flash_fp16_fp32 else [])


def test_kernel_variants_drop_the_excluded_ones():
    from generator.rules import kernel_variants
    from generator.spec import FAMILIES
    ws192 = KernelSpec(d=64, dv=64, warps_n=1, **{**WS, "block_m": 192, "warps_m": 12})
    ws128 = KernelSpec(d=128, dv=128, warps_n=1, **WS)
    assert "softcap" not in kernel_variants(ws192)  # the 160-register tile spills with the tanh
    # (dropout: on its 128-row sibling, ws::Traits::kHasDropout)
    assert set(kernel_variants(ws192)) == set(FAMILIES["ws"].variants) - {"softcap"}
    assert kernel_variants(ws128) == FAMILIES["ws"].variants
    assert kernel_variants(GOOD) == FAMILIES["flash"].variants
