// The C API's one helper kernel: each sequence's token offset and length, from cu_seqlens or
// fixed lengths, into the workspace where Params points the kernels (q/kv offsets and lens).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace fmha {
namespace api {

struct Lengths {
    int b = 0;
    const int32_t* cu_q = nullptr;       // b + 1 prefix sums, or nullptr: fixed
    const int32_t* cu_k = nullptr;
    const int32_t* seqused_k = nullptr;  // b, or nullptr
    int64_t q_step = 0, kv_step = 0;     // fixed lengths: tokens from one sequence to the next
    int s_q = 0, s_kv = 0;               // fixed lengths (and the bound of every length)
    bool paged = false;                  // kv offsets unused (0)
};

// out: 4 * b ints, q_offsets | q_lens | kv_offsets | kv_lens.
cudaError_t launch_lengths(const Lengths& l, int* out, cudaStream_t stream);

}  // namespace api
}  // namespace fmha
