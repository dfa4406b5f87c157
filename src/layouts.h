// Where a run's tokens live: the sequence lengths and storage offsets (var-len, packed or
// padded), the storage of Q, K and V in each Layout, and the [token, head, col] views that
// turn it into Params pointers and strides, and back into the logical padded layout.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "cli.h"
#include "device_buffer.h"
#include "params.h"

namespace fmha {

// O rows allocated before and after the real storage; a write there is a bug.
constexpr int kGuardRows = 16;

// Real lengths and storage offsets of every sequence (host side).
struct SeqLens {
    std::vector<int> q_lens, kv_lens, q_offsets, kv_offsets;
    int64_t q_storage_tokens = 0;   // rows of Q / O storage (b*s_q with -pad-s)
    int64_t kv_storage_tokens = 0;  // rows of K / V storage
    int64_t q_total = 0, kv_total = 0;  // sums of the real lengths
    int s_q_max = 0, s_kv_max = 0;
};
// kv_len uniform in [min_s, s] from -seed, q_len = min(s_q, kv_len); packed back to back,
// or sequence i at token i * s (i * s_q) with -pad-s.
SeqLens make_seqlens(const Problem& p);

// Every sequence s_q_max x s_kv_max long, back to back: Params then carries no length arrays
// (the kernels take offsets and lengths from the index, fmha/seq_lens.h).
inline bool uniform_lengths(const SeqLens& l) {
    const size_t b = l.q_lens.size();
    if (l.kv_lens.size() != b || l.q_offsets.size() != b || l.kv_offsets.size() != b) return false;
    for (size_t i = 0; i < b; ++i) {
        const int64_t n = static_cast<int64_t>(i);
        if (l.q_lens[i] != l.s_q_max || l.kv_lens[i] != l.s_kv_max || l.q_offsets[i] != n * l.s_q_max ||
            l.kv_offsets[i] != n * l.s_kv_max)
            return false;
    }
    return true;
}

// Bytes of one element of a tensor of dtype t: e4m3 1, fp16 and bf16 2, fp32 4.
inline int element_bytes(DataType t) { return t == DataType::kE4m3 ? 1 : t == DataType::kFp32 ? 4 : 2; }

// One [token, head, col] view of a Q, K or V tensor of the run's dtype: element (token,
// head, col) is at base + token * row_stride + head * head_stride + col, in elements
// (params.h).
struct View {
    void* base;
    int64_t row_stride, head_stride;
    int heads, cols;
    DataType type;  // its elements': the run's dtype, or kv_dtype for K and V
};

// Row r of a logical [b, s_cap, heads] view: its sequence, position and head.
struct LogicalRow {
    int seq, pos, head;
};
__host__ __device__ inline LogicalRow logical_row(int64_t r, int heads, int s_cap) {
    const int head = static_cast<int>(r % heads);
    const int pos = static_cast<int>((r / heads) % s_cap);
    const int seq = static_cast<int>(r / (int64_t(heads) * s_cap));
    return {seq, pos, head};
}

// Q, K and V storage of the layout, zeroed (padding rows stay zero), and the views into it.
// Only the buffers of the layout are allocated; kPagedKv keeps K and V in token storage here
// (the logical K/V its pool is built from). Bytes: element_bytes(dtype) an element of Q,
// element_bytes(kv_dtype) of K and V (-kv-e4m3: separate and paged layouts only).
struct QkvStorage {
    DeviceBuffer<uint8_t> qkv;  // packed QKV [tokens, h + 2*h_kv, d]
    DeviceBuffer<uint8_t> q;    // [tokens_q, h, d]        (Q + KV, separate and paged layouts)
    DeviceBuffer<uint8_t> kv;   // [tokens_kv, 2*h_kv, d]  (Q + KV)
    DeviceBuffer<uint8_t> k;    // [tokens_kv, h_kv, d]    (separate and paged)
    DeviceBuffer<uint8_t> v;    // [tokens_kv, h_kv, dv]   (separate and paged)
    View q_view, k_view, v_view;
};
QkvStorage make_qkv_storage(const Problem& p, const SeqLens& lens);

// Gathers a strided [token, head, col] tensor of fp16/bf16/e4m3/fp32 into a dense float
// [b, s_cap, heads, cols] in the logical padded layout; rows past a length are zero.
void gather_logical(const void* src, DataType type, int64_t row_stride, int64_t head_stride,
                    int heads, int cols, const int* offsets, const int* lens, int b, int s_cap,
                    float* dst, cudaStream_t stream);

}  // namespace fmha
