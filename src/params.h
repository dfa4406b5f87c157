// One Params struct shared by the driver, the reference, the launchers and the kernels.
//
// Every tensor is addressed as  base + token * row_stride + head * head_stride + col,
// all in elements of the tensor's own type. That single rule covers every layout
// (packed QKV, contiguous Q + KV, separate Q/K/V, padded or packed sequences): the
// driver sets pointers and strides, the kernels never branch on the layout.
#pragma once

#include <cstddef>
#include <cstdint>

#include "fmha/dropout.h"

namespace fmha {

enum class DataType : int { kFp16 = 0, kBf16 = 1, kFp32 = 2, kE4m3 = 3 };

// Masks a kernel may support; a kernel's registry entry carries a bitmask of these.
// With p = r + (kv_len - q_len) the position of query row r among the keys (queries are
// the last q_len positions of a sequence), key j < kv_len is visible to row r iff
//   kPadding             always
//   kCausal              j <= p
//   kSlidingWindow       p - window < j <= p                       (Mistral/Gemma)
//   kBidirectionalWindow p - window < j < p + window               (encoder local layers)
//   kChunked             j <= p and j / chunk == p / chunk         (Llama-4 chunked)
//   kCustom              bit j of row r of the sequence's Params::custom_mask
// The three local masks are one compile-time kind in the kernels (mask::Kind::kLocal): a
// visible range [begin(r), end(r)) per row, from Params::window / Params::chunk at run time.
// kCustom runs the padding kind's blocks with the bits as a score modifier
// (softmax::ScoreMod::kCustomMask, softmax/score_tensor.h).
enum class MaskType : int {
    kPadding = 0,
    kCausal = 1,
    kSlidingWindow = 2,
    kBidirectionalWindow = 3,
    kChunked = 4,
    kCustom = 5
};
constexpr MaskType kMaskTypes[] = {MaskType::kPadding,           MaskType::kCausal,  MaskType::kSlidingWindow,
                                   MaskType::kBidirectionalWindow, MaskType::kChunked, MaskType::kCustom};
constexpr uint32_t mask_bit(MaskType m) { return 1u << static_cast<int>(m); }

// Storage of Q, K, V (the driver's choice; the kernels only see pointers and strides, and a
// block table for kPagedKv).
enum class Layout : int { kPackedQkv = 0, kContiguousQKv = 1, kSeparateQKv = 2, kPagedKv = 3 };

// Attention variants beyond the mask that a problem may ask for and a kernel may offer
// (KernelMeta::variants, from the family's `variants` in generator/spec.py): run-time
// parameters of the kernels, one bit each.
enum VariantBit : uint32_t {
    kVariantSoftcap = 1u << 0,  // Params::softcap > 0
    kVariantSinks = 1u << 1,    // Params::sinks != nullptr
    kVariantSoftmaxStats = 1u << 2,  // Params::softmax_lse != nullptr
    kVariantAlibi = 1u << 3,         // Params::alibi_slopes != nullptr
    kVariantBias = 1u << 4,          // Params::attention_bias != nullptr
    kVariantPagedKv = 1u << 5,       // Params::kv_block_table != nullptr
    kVariantWideLogits = 1u << 6,    // Params::wide_logits
    kVariantDropout = 1u << 7,       // Params::dropout.threshold != 0
};

struct Params {
    // Inputs and output. q/k/v/o element type is the kernel's dtype (fp16 or bf16).
    const void* q = nullptr;
    const void* k = nullptr;
    const void* v = nullptr;
    void* o = nullptr;

    // Strides in elements. row = one token, head = one head inside that token.
    int64_t q_row_stride = 0, q_head_stride = 0;
    int64_t k_row_stride = 0, k_head_stride = 0;
    int64_t v_row_stride = 0, v_head_stride = 0;
    int64_t o_row_stride = 0, o_head_stride = 0;

    // Where each sequence's rows start and how many there are (fmha/seq_lens.h reads them):
    //   offset of sequence i: q_offsets[i], or i * q_step where q_offsets is null;
    //   length: q_lens[i], or q_offsets[i + 1] - q_offsets[i] where only q_offsets is given
    //   (cu_seqlens: b + 1 prefix sums), or s_q_max where neither is.
    // K/V alike (kv_*; kv_lens is seqused_k in the C API), except that a paged cache has no
    // offsets. fmha.exe passes its own arrays (packed, or -pad-s: offsets i * s with the real
    // lengths) and null ones with the steps where every sequence is full and back to back.
    const int* q_offsets = nullptr;
    const int* q_lens = nullptr;
    const int* kv_offsets = nullptr;
    const int* kv_lens = nullptr;
    int q_step = 0;
    int kv_step = 0;

    // Rows each storage holds, padding included: Q/O and K/V (packed QKV: both are the one
    // buffer's rows). What a TMA tensor map spans (the ws family refuses a launch where either
    // is 0; reads past it come back as zeros); the SM80 family does not read them. Every
    // (offset + length) of a sequence is <= its storage's count.
    int64_t q_tokens = 0, kv_tokens = 0;

    int b = 0;         // batch
    int h = 0;         // query heads
    int h_kv = 0;      // key/value heads; h % h_kv == 0, query head i reads kv head i / (h / h_kv)
    int d = 0;         // head size of Q and K
    int dv = 0;        // head size of V and O
    int s_q_max = 0;   // max over q_lens (grid size)
    int s_kv_max = 0;  // max over kv_lens

    MaskType mask = MaskType::kPadding;
    // Causal is bottom-right aligned: query row r of a sequence may see key j iff
    //   j <= r + (kv_len - q_len). The local masks (see MaskType) take their size from:
    int window = 0;  // kSlidingWindow, kBidirectionalWindow: W >= 1 keys on each side
    int chunk = 0;   // kChunked: C, a power of two >= 1

    // S = scale_bmm1 * Q K^T ;  P = softmax(S) ;  O = scale_softmax * scale_bmm2 * P V
    float scale_bmm1 = 1.f;
    float scale_softmax = 1.f;
    float scale_bmm2 = 1.f;
    // Logit softcapping (Gemma-2): S = softcap * tanh(scale_bmm1 * Q K^T / softcap) when
    // > 0 (0: off). A kernel without kVariantSoftcap refuses a launch with it.
    float softcap = 0.f;
    // Whether a logit, in log2 units (scale_bmm1 * log2(e) * S), may reach 2^24, where an
    // integer row max no longer sits within a unit of every exact product: the caller's
    // bound (the driver's from its input ranges). A kernel without kVariantWideLogits (ws,
    // whose softmax keeps one FFMA a score) refuses a launch with it.
    bool wide_logits = false;
    // Attention sinks (gpt-oss): h floats, a logit per query head added to every row's softmax
    // denominator (fmha/softmax/sinks.h); nullptr: off. A kernel without kVariantSinks
    // refuses a launch with it.
    const float* sinks = nullptr;
    // ALiBi: h floats, query head i's slope m_i; the logit of query row r (key position p)
    // and key j becomes scale_bmm1 * q.k - m_i * |p - j| (fmha/softmax/score_mod.h). nullptr:
    // off. Not with softcap. A kernel without kVariantAlibi refuses a launch with it.
    const float* alibi_slopes = nullptr;
    // Softmax statistics (-save-softmax): when not nullptr, the kernel writes each query row's
    // natural-log log-sum-exp of its logits (scale_bmm1 and softcapping applied, the sink
    // included in the sum; -inf for a row that sees no key) at
    //   softmax_lse[(batch * h + head) * s_q_max + row]   (row within its sequence)
    // (fmha/softmax/stats.h). Rows past a sequence's q_len are not written. A kernel without
    // kVariantSoftmaxStats refuses a launch with it.
    float* softmax_lse = nullptr;
    // Attention bias: an additive [b or 1, h or 1, s_q, s_kv] tensor of the kernel's element
    // type; the logit of query row r (within its sequence) and key j of sequence `batch`,
    // query head `head`, becomes scale_bmm1 * q.k + bias at
    //   attention_bias + batch * bias_batch_stride + head * bias_head_stride + r * bias_row_stride + j
    // (a stride of 0 broadcasts that dimension; bias_row_stride >= s_kv_max). nullptr: off.
    // One score modifier at a time (softmax/score_mod.h). A kernel without kVariantBias
    // refuses a launch with it.
    const void* attention_bias = nullptr;
    int64_t bias_batch_stride = 0, bias_head_stride = 0, bias_row_stride = 0;
    // Custom mask (mask == kCustom): one bit per (sequence, query row, key), key j of row r of
    // sequence `batch` visible iff bit j % 32 of
    //   custom_mask[(batch * s_q_max + r) * custom_mask_row_words + j / 32]
    // is set; custom_mask_row_words >= ceil(s_kv_max / 32). Shared by the heads.
    const uint32_t* custom_mask = nullptr;
    int custom_mask_row_words = 0;

    // Paged KV cache (-paged-kv): when kv_block_table != nullptr, the keys of sequence
    // `batch` live in fixed-size blocks of a pool, found through the sequence's row of the
    // block table. Key j of KV head g is at
    //   k + kv_block_table[batch * kv_table_stride + j / tokens_per_block] * k_block_stride
    //     + (j % tokens_per_block) * k_row_stride + g * k_head_stride
    // (V alike, with v_*), and kv_offsets are not read. Only the entries of the blocks that hold
    // one of the sequence's kv_len keys are read; the rows of its last block past kv_len are
    // read and masked (they must hold finite values). tokens_per_block: a power of two >= 16.
    // kv_pool_blocks: the pool's block count (the TMA maps' extent; every table entry read is
    // in [0, kv_pool_blocks)). The driver's pool (paged_kv.h) is TensorRT-LLM's:
    // [block][K: h_kv, tokens_per_block, d][V: h_kv, tokens_per_block, dv].
    const int* kv_block_table = nullptr;
    int kv_table_stride = 0;
    int tokens_per_block = 0;
    int kv_pool_blocks = 0;
    int64_t k_block_stride = 0, v_block_stride = 0;

    int num_sms = 0;   // filled by the driver from the device

    // Persistent scheduling (ws family built with SCHEDULING_MODE=1): one device int the
    // CTAs draw tile indices from. Zero it once before the first launch; every launch leaves
    // it zero again. Launches that share one counter must not overlap in time (one stream).
    // A persistent kernel refuses a launch without it (cudaErrorInvalidValue).
    int* tile_counter = nullptr;

    // Scratch of families with a workspace (decode: split-KV partials and arrival counters);
    // the registry's KernelMeta::workspace says how many bytes a problem uses. Handed to the
    // first launch zeroed; every launch leaves its counters at zero again, so launches on one
    // stream share it. A launch given fewer bytes runs fewer splits (never fails for lack of it).
    void* workspace = nullptr;
    size_t workspace_bytes = 0;

    // e4m3 inputs: dequantisation factors per (batch, KV head), at [batch * h_kv + kv_head]
    // (FlashAttention-3's q/k/v_descale); nullptr: 1. Q K^T is scaled by q_descale *
    // k_descale with scale_bmm1, O by v_descale. The 16-bit kernels never read them.
    const float* q_descale = nullptr;
    const float* k_descale = nullptr;
    const float* v_descale = nullptr;
    // Dropout (training): each probability of P V is dropped with probability p in [0, 1),
    // the kept ones scaled by 1 / (1 - p), the LSE unchanged; which ones is a function of
    // (seed, offset, batch, query head, row, key) alone, so the backward regenerates the
    // forward's mask. dropout::make(p, seed, offset) (fmha/dropout.h: p is used as a multiple
    // of 2^-16); threshold 0: off. A kernel without kVariantDropout refuses a launch with it.
    dropout::Dropout dropout;

    // e4m3 inputs: O in e4m3 (fmha_v2's default output: scale_bmm2 scales it into range, values
    // round to nearest and saturate at +-448; o strides in e4m3 elements), else in bf16. The
    // 16-bit kernels refuse it (launch_checks.h params_fit).
    bool o_e4m3 = false;
};

}  // namespace fmha
