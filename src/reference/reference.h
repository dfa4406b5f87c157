// The fp32 GPU reference: streams over keys with an online softmax, so its memory is
// O(s) for any sequence length. It reads the same Params as the kernels (layouts,
// strides, offsets, lengths, GQA mapping, masks, scales) and writes fp32.
#pragma once

#include <cuda_runtime.h>

#include "params.h"

namespace fmha {

// o_ref: dense fp32 [q storage tokens, h, dv]; row q_offsets[b] + r holds query row r
//        of sequence b (the same rows as Params::o). Rows past a length are not written.
// o_amb: optional fp32, laid out as o_ref: per element, how far the P whose rounding to
//        the input type fp32 cannot decide may move it (reference.cu; nullptr: not written).
// lse:   optional fp32 [b, h, s_q_max], natural-log sum of exp of the scaled scores
//        (nullptr: not written).
// lse_amb: optional, laid out as lse: per row, how far the e4m3 QGMMA's error in S may move
//        a kernel's LSE (0 for the 16-bit inputs; nullptr: not written).
// p_block_keys: e4m3 only, the kernel's key block (KernelMeta::block_n). The e4m3 kernels
//        subtract the exact running max of the blocks they have visited, last block first,
//        so a P's rounding grid depends on its block; the reference replays that order.
//        0: the max rounded up to an integer, on which the rounded P depends on no order
//        (the 16-bit kernels' rule, and how P was rounded for e4m3 before bench/NOTES.md §56).
// Inputs are fp16, bf16 or e4m3 (dtype); K and V are dtype too, or e4m3 under fp16/bf16
// queries (kv_dtype: the decode family's e4m3 cache, whose P is f16 whatever the queries'
// type). Params::o and the descales are ignored.
cudaError_t run_reference(const Params& p, DataType dtype, DataType kv_dtype, int p_block_keys, float* o_ref,
                          float* o_amb, float* lse, float* lse_amb, cudaStream_t stream);

// Loads the reference kernel and sets its shared-memory limit, so that a following
// timed run_reference measures the kernel only. Idempotent; run_reference calls it too.
cudaError_t prepare_reference(const Params& p, DataType dtype, DataType kv_dtype);

}  // namespace fmha
