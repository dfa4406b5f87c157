// What a backward launch reads and writes (flash_bwd_sm80.h): host code includes this alone.
#pragma once

#include <cstddef>
#include <cstdint>

#include "params.h"

namespace fmha {
namespace flash_bwd {

// The backward problem: the forward's (q, k, v, o and their strides, lengths, mask, scale)
// and what the backward adds. dO, dQ, dK, dV have strides of their own (elements; row = one
// token, head = one head) over the token storage of O, Q, K, V.
struct BwdParams {
    Params p;
    const void* d_o = nullptr;
    int64_t do_row_stride = 0, do_head_stride = 0;
    const float* lse = nullptr;    // the forward's LSE [b, h, s_q_max], natural log
    const float* d_lse = nullptr;  // its gradient, the same layout; null: zero
    void* dq = nullptr;
    void* dk = nullptr;
    void* dv = nullptr;
    int64_t dq_row_stride = 0, dq_head_stride = 0, dk_row_stride = 0, dk_head_stride = 0;
    int64_t dv_row_stride = 0, dv_head_stride = 0;
    bool deterministic = false;  // dQ added in key-block order (bitwise reproducible)
    bool dkv_direct = false;     // the main kernel stored dK, dV (MHA): the postprocess converts dQ only
    // Workspace (workspace_bytes), zeroed by the launch:
    float* dq_accum = nullptr;  // [q_tokens, h, d]
    float* dk_accum = nullptr;  // [kv_tokens, h, d], one row per query head
    float* dv_accum = nullptr;  // [kv_tokens, h, dv]
    float* d_sum = nullptr;     // [b, h, rows_pitch]: rowsum(dO O) - d_lse
    float* lse2 = nullptr;      // [b, h, rows_pitch]: the LSE in log2 units (+inf past q_len or with no key)
    int* dq_order = nullptr;    // [b, h, query blocks]: key blocks that added into them (deterministic)
};

constexpr int kBwdBlockM = 64;  // queries a step of flash-bwd (the wgmma kernel's: 64 or 128)
constexpr int kBwdRowsAlign = 128;  // the largest step

// The rows of d_sum and lse2 a (batch, head) takes: s_q_max padded to whole query blocks of
// either kernel, so that a block's rows start 256-byte aligned (the wgmma kernel's TMA boxes
// need 16) and its box never reaches the next head's rows (whose LSE is finite).
constexpr int64_t rows_pitch(const Params& p) {
    return int64_t(p.s_q_max + kBwdRowsAlign - 1) / kBwdRowsAlign * kBwdRowsAlign;
}

inline size_t workspace_floats(const Params& p) {
    return size_t(p.q_tokens) * p.h * p.d + size_t(p.kv_tokens) * p.h * (p.d + p.dv) +
           2 * size_t(p.b) * p.h * size_t(rows_pitch(p));
}
// Bytes of workspace a problem needs (the counters after the floats).
inline size_t workspace_bytes(const Params& p) {
    const size_t blocks = size_t(p.b) * p.h * ((p.s_q_max + kBwdBlockM - 1) / kBwdBlockM);
    return workspace_floats(p) * sizeof(float) + blocks * sizeof(int);
}
inline void carve_workspace(BwdParams& bp, void* ws) {
    const Params& p = bp.p;
    bp.dq_accum = static_cast<float*>(ws);
    bp.dk_accum = bp.dq_accum + size_t(p.q_tokens) * p.h * p.d;
    bp.dv_accum = bp.dk_accum + size_t(p.kv_tokens) * p.h * p.d;
    bp.d_sum = bp.dv_accum + size_t(p.kv_tokens) * p.h * p.dv;
    bp.lse2 = bp.d_sum + size_t(p.b) * p.h * size_t(rows_pitch(p));
    bp.dq_order = reinterpret_cast<int*>(bp.lse2 + size_t(p.b) * p.h * size_t(rows_pitch(p)));
}

}  // namespace flash_bwd
}  // namespace fmha
