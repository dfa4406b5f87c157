// The backward pass's GPU reference (draft, issue #33): dQ, dK, dV in fp32 (reference_bwd.cu).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "params.h"

namespace fmha {

// Floats of scratch run_reference_bwd needs (each row's LSE and D).
size_t reference_bwd_scratch_floats(const Params& p);

// p: the forward problem, p.o the forward's output as the kernel wrote it; d_o: dL/dO with O's
// strides; dtype fp16 or bf16. dq_ref: dense fp32 [q storage tokens, h, d]; dk_ref, dv_ref:
// dense fp32 [kv storage tokens, h_kv, d | dv]; rows past a length are not written.
// cudaErrorInvalidValue for what the draft does not serve: a mask other than padding and
// causal, a head size above 256, h not a multiple of h_kv. Score modifiers and sinks are
// ignored: the caller refuses them.
// The RMS magnitude of dQ, dK and dV (the terms' absolute values summed; reference_bwd.cu)
// over counts[t] elements each, from the scratch of a finished run_reference_bwd.
cudaError_t reference_bwd_magnitudes(const float* scratch, double rms[3], int64_t counts[3]);

cudaError_t run_reference_bwd(const Params& p, DataType dtype, const void* d_o, float* dq_ref, float* dk_ref,
                              float* dv_ref, float* scratch, cudaStream_t stream);

}  // namespace fmha
