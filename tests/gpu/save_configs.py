"""The -save-tensors problems of test_save_tensors.py: one table for the prefill families, one
for a family that serves a few query rows (decode), and which kernel of a build runs each.

Every (family, dtype, accumulation, path) of the build is re-checked on each configuration, on
its smallest kernel that holds the problem (skipped, saying why, where the build has none).
"""

from bench.suites import ODD_HEAD_SIZES
from generator.rules import decode_is_mma
from generator.spec import FAMILIES, KernelSpec

from .cases import VARIANT_FLAGS
from .manifest import is_decode

SAVE_CONFIGS = {
    "padding_fixed": ["-b", "2", "-h", "4", "-s", "77"],
    "causal_varlen": ["-b", "3", "-h", "4", "-s", "150", "-min-s", "20", "-causal-mask", "-save-softmax"],
    "gqa_pad_s": ["-b", "3", "-h", "8", "-gqa", "2", "-s", "130", "-min-s", "40", "-pad-s", "-contiguous-q-kv"],
    "causal_sq_lt_s": ["-b", "2", "-h", "4", "-s", "200", "-s-q", "33", "-causal-mask", "-separate-q-k-v"],
    "mqa_causal_scales": ["-b", "2", "-h", "4", "-mqa", "-s", "96", "-causal-mask", "-randn",
                          "-scale-bmm1", "0.07", "-scale-bmm2", "0.8"],
    "softcap_causal": ["-b", "2", "-h", "4", "-s", "150", "-min-s", "30", "-causal-mask", "-randn",
                       "-softcapping-scale-bmm1", "2"],
    "sliding_window_varlen": ["-b", "3", "-h", "4", "-s", "300", "-min-s", "90", "-sliding-window-size", "70",
                              "-randn"],
    "bidirectional_window_sq_lt_s": ["-b", "2", "-h", "8", "-gqa", "2", "-s", "260", "-s-q", "130",
                                     "-sliding-window-size", "45", "-bidirectional-sliding-window-mask",
                                     "-separate-q-k-v"],
    "chunked_varlen": ["-b", "3", "-h", "4", "-s", "400", "-min-s", "100", "-chunked-attention-size", "64",
                       "-contiguous-q-kv"],
    "sinks_window": ["-b", "3", "-h", "8", "-gqa", "4", "-s", "200", "-min-s", "1", "-sliding-window-size", "50",
                     "-use-attention-sinks", "-randn", "-save-softmax"],
    # 12 heads: the slopes of a head count that is not a power of two; s_q < s shifts the positions
    "alibi_causal_gqa": ["-b", "3", "-h", "12", "-gqa", "4", "-s", "180", "-min-s", "40", "-s-q", "60",
                         "-causal-mask", "-alibi", "-randn", "-separate-q-k-v"],
    "alibi_padding": ["-b", "2", "-h", "6", "-s", "100", "-alibi", "-randn", "-save-softmax"],
    # a bias per (sequence, head), and one broadcast over the batch with GQA and s_q < s
    "bias_causal_varlen": ["-b", "3", "-h", "4", "-s", "150", "-min-s", "20", "-causal-mask", "-attention-bias",
                           "-randn", "-save-softmax"],
    "bias_broadcast_gqa": ["-b", "2", "-h", "8", "-gqa", "2", "-s", "170", "-s-q", "90", "-attention-bias",
                           "-attention-bias-shape", "1h", "-separate-q-k-v"],
    # random bits: rows that see few keys or none (var-len down to 1 key), with sinks and the LSE
    "custom_mask_varlen": ["-b", "3", "-h", "4", "-s", "200", "-min-s", "1", "-custom-mask", "-randn",
                           "-use-attention-sinks", "-save-softmax"],
    "custom_mask_sq_lt_s": ["-b", "2", "-h", "8", "-gqa", "4", "-s", "300", "-s-q", "100", "-custom-mask",
                            "-contiguous-q-kv"],
    # MLA head sizes (d != dv, MLA_CONFIGS): the family's kernel with dv != d
    "mla_causal_varlen": ["-b", "3", "-h", "8", "-gqa", "2", "-s", "260", "-min-s", "30", "-causal-mask", "-randn",
                          "-separate-q-k-v", "-save-softmax"],
    # a paged KV cache: small blocks over var-len caches down to one token, with GQA and the
    # LSE; chunked prefill (s_q < s) in blocks larger than a key tile; MLA's two head sizes
    "paged_causal_varlen": ["-b", "3", "-h", "8", "-gqa", "2", "-s", "300", "-min-s", "1", "-causal-mask",
                            "-paged-kv", "-tokens-per-block", "16", "-randn", "-save-softmax"],
    "paged_chunked_prefill": ["-b", "3", "-h", "4", "-mqa", "-s", "700", "-min-s", "200", "-s-q", "64",
                              "-causal-mask", "-paged-kv", "-tokens-per-block", "128", "-use-attention-sinks"],
    "mla_paged": ["-b", "2", "-h", "4", "-s", "333", "-min-s", "100", "-s-q", "90", "-paged-kv",
                  "-tokens-per-block", "32", "-randn"],
    # a head size fmha_v2 serves beyond the powers of two (ODD_HEAD_CONFIGS)
    "odd_head_size_varlen": ["-b", "3", "-h", "6", "-gqa", "3", "-s", "180", "-min-s", "20", "-causal-mask",
                             "-randn", "-contiguous-q-kv", "-save-softmax"],
    # dropout: the float64 output drops what oracle.dropout_keep says (the families that have it)
    "dropout_causal_varlen": ["-b", "3", "-h", "4", "-gqa", "2", "-s", "150", "-min-s", "20", "-causal-mask",
                              "-randn", "-separate-q-k-v", "-dropout", "0.25", "-save-softmax"],
}
# The same configurations for a family that serves only a few query rows (decode): s_q <= 16, with key
# splits (s up to 3000), GQA/MQA packing and causal rows on the diagonal.
SAVE_CONFIGS_FEW_ROWS = {
    "padding_fixed": ["-b", "2", "-h", "4", "-s", "77", "-s-q", "1", "-separate-q-k-v"],
    "causal_varlen": ["-b", "3", "-h", "4", "-s", "3000", "-min-s", "20", "-s-q", "5", "-causal-mask",
                      "-separate-q-k-v", "-save-softmax"],
    "gqa_pad_s": ["-b", "3", "-h", "8", "-gqa", "2", "-s", "1300", "-min-s", "40", "-pad-s", "-s-q", "2",
                  "-contiguous-q-kv"],
    "causal_sq_lt_s": ["-b", "2", "-h", "4", "-s", "200", "-s-q", "16", "-causal-mask", "-separate-q-k-v"],
    "mqa_causal_scales": ["-b", "2", "-h", "4", "-mqa", "-s", "960", "-s-q", "3", "-causal-mask", "-randn",
                          "-scale-bmm1", "0.07", "-scale-bmm2", "0.8", "-separate-q-k-v"],
    "softcap_causal": ["-b", "3", "-h", "8", "-gqa", "2", "-s", "1300", "-min-s", "2", "-s-q", "2", "-causal-mask",
                       "-randn", "-softcapping-scale-bmm1", "2", "-separate-q-k-v"],
    "sliding_window_varlen": ["-b", "3", "-h", "8", "-gqa", "2", "-s", "3000", "-min-s", "200", "-s-q", "4",
                              "-sliding-window-size", "700", "-randn", "-separate-q-k-v"],
    "bidirectional_window_sq_lt_s": ["-b", "2", "-h", "4", "-s", "1300", "-s-q", "16", "-sliding-window-size", "9",
                                     "-bidirectional-sliding-window-mask", "-separate-q-k-v"],
    "chunked_varlen": ["-b", "3", "-h", "4", "-mqa", "-s", "3000", "-min-s", "100", "-s-q", "7",
                       "-chunked-attention-size", "256", "-contiguous-q-kv"],
    "sinks_window": ["-b", "3", "-h", "8", "-gqa", "4", "-s", "2500", "-min-s", "1", "-s-q", "3",
                     "-sliding-window-size", "600", "-use-attention-sinks", "-randn", "-separate-q-k-v",
                     "-save-softmax"],
    "alibi_causal_gqa": ["-b", "3", "-h", "12", "-gqa", "4", "-s", "1500", "-min-s", "40", "-s-q", "4",
                         "-causal-mask", "-alibi", "-randn", "-separate-q-k-v"],
    "alibi_padding": ["-b", "2", "-h", "6", "-s", "900", "-s-q", "2", "-alibi", "-randn", "-separate-q-k-v",
                      "-save-softmax"],
    "bias_causal_varlen": ["-b", "3", "-h", "8", "-gqa", "2", "-s", "2000", "-min-s", "20", "-s-q", "4",
                           "-causal-mask", "-attention-bias", "-randn", "-separate-q-k-v", "-save-softmax"],
    "bias_broadcast_gqa": ["-b", "2", "-h", "8", "-gqa", "2", "-s", "1200", "-s-q", "3", "-attention-bias",
                           "-attention-bias-shape", "b1", "-separate-q-k-v"],
    "custom_mask_varlen": ["-b", "3", "-h", "8", "-gqa", "2", "-s", "2500", "-min-s", "1", "-s-q", "5",
                           "-custom-mask", "-randn", "-use-attention-sinks", "-separate-q-k-v", "-save-softmax"],
    "custom_mask_sq_lt_s": ["-b", "2", "-h", "8", "-gqa", "4", "-s", "300", "-s-q", "16", "-custom-mask",
                            "-contiguous-q-kv"],
    "mla_causal_varlen": ["-b", "3", "-h", "8", "-gqa", "2", "-s", "2000", "-min-s", "30", "-s-q", "4",
                          "-causal-mask", "-randn", "-separate-q-k-v", "-save-softmax"],
    "paged_causal_varlen": ["-b", "3", "-h", "8", "-gqa", "2", "-s", "3000", "-min-s", "1", "-s-q", "4",
                            "-causal-mask", "-paged-kv", "-tokens-per-block", "16", "-randn", "-save-softmax"],
    "paged_chunked_prefill": ["-b", "3", "-h", "4", "-mqa", "-s", "1300", "-min-s", "200", "-s-q", "16",
                              "-causal-mask", "-paged-kv", "-tokens-per-block", "128", "-use-attention-sinks"],
    "mla_paged": ["-b", "2", "-h", "4", "-s", "1333", "-min-s", "100", "-s-q", "9", "-paged-kv",
                  "-tokens-per-block", "32", "-randn"],
    "odd_head_size_varlen": ["-b", "3", "-h", "6", "-gqa", "3", "-s", "1200", "-min-s", "20", "-s-q", "4",
                             "-causal-mask", "-randn", "-contiguous-q-kv", "-save-softmax"],
    "dropout_causal_varlen": ["-b", "3", "-h", "4", "-gqa", "2", "-s", "1200", "-min-s", "20", "-s-q", "4",
                              "-causal-mask", "-randn", "-separate-q-k-v", "-dropout", "0.25"],
}
# Configurations that run a kernel whose V head size differs from Q's (MLA: d=192, dv=128).
MLA_CONFIGS = ("mla_causal_varlen", "mla_paged")
# Configurations that run the family's smallest kernel of a head size fmha_v2 serves beyond the
# powers of two (ODD_HEAD_SIZES, the bench's `heads` suite; 192 is MLA's, above).
ODD_HEAD_CONFIGS = ("odd_head_size_varlen",)


def save_path(kernel: dict) -> str:
    """The decode family's paths (mma: warps along keys; warp: one warp per unit; the mma path
    over an e4m3 KV cache), each re-checked on its own; '' for families with one path."""
    if not is_decode(kernel):
        return ""
    if kernel.get("kv_dtype"):
        return f"mma_kv{kernel['kv_dtype']}"
    return "mma" if decode_is_mma(KernelSpec.parse(kernel["name"], masks=tuple(kernel["masks"]))) else "warp"


def layout_for(kernel: dict, flags: list) -> list:
    """A configuration's flags for `kernel`: an e4m3 KV cache is a tensor of its own, so its
    contiguous Q + KV configurations run with separate Q, K, V."""
    if not kernel.get("kv_dtype"):
        return list(flags)
    return ["-separate-q-k-v" if f == "-contiguous-q-kv" else f for f in flags]


def save_kinds(kernels: list[dict]) -> list[tuple]:
    """Every (family, dtype, accumulation, path) of the build, so each family's output is re-checked."""
    return sorted({kind_of(k) for k in kernels})


def kind_of(kernel: dict) -> tuple:
    return kernel["family"], kernel["dtype"], kernel["acc"], save_path(kernel)


def configs_for(family_kind: tuple) -> dict:
    return SAVE_CONFIGS_FEW_ROWS if FAMILIES[family_kind[0]].max_s_q else SAVE_CONFIGS


def smallest(kernels) -> dict | None:
    return min(kernels, key=lambda k: (k["d"], k["dv"], k["name"]), default=None)


def save_kernel(kernels: list[dict], family_kind: tuple, config: str) -> tuple[dict | None, str]:
    """The kernel of `family_kind` that runs `config`, or None and why: the smallest that holds
    the problem. A prefill family's has the causal mask; a decode path's tiles any head ratio
    (max_rows 0); MLA_CONFIGS need dv != d, ODD_HEAD_CONFIGS an ODD_HEAD_SIZES head; and the
    kernel must have each variant the configuration asks for (generator.rules.VARIANT_EXCLUSIONS
    leaves some kernels of a family without one)."""
    fits = [k for k in kernels if kind_of(k) == family_kind
            and (k["max_rows"] == 0 if is_decode(k) else "causal" in k["masks"])]
    if config in MLA_CONFIGS:
        fits, why = [k for k in fits if k["dv"] != k["d"]], "with dv != d (generator/enumerate.py MLA_HEAD_SIZES)"
    elif config in ODD_HEAD_CONFIGS:
        fits = [k for k in fits if k["d"] in ODD_HEAD_SIZES and k["dv"] == k["d"]]
        why = f"with d in {ODD_HEAD_SIZES} (README's variant table)"
    else:
        why = ""
    flags = configs_for(family_kind)[config]
    if "-custom-mask" in flags:  # a mask some families lack (qmma)
        fits, why = [k for k in fits if "custom" in k["masks"]], "with the custom mask"
    needs = {v for v, flag in VARIANT_FLAGS.items() if flag in flags}
    having = [k for k in fits if needs <= set(k["variants"])]
    if fits and not having:
        why = f"with {sorted(needs)} (generator/spec.py variants)"
    kernel = smallest(having)
    return kernel, "" if kernel else f"no {'-'.join(filter(None, family_kind))} kernel {why}".rstrip()
