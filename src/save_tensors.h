// -save-tensors DIR: float32 .npy files in the logical padded layout and meta.json.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "cli.h"
#include "kernel_meta.h"
#include "tensors.h"

namespace fmha {

// Creates DIR (and its parents) before any GPU work; exits 2 when it cannot.
void prepare_save_dir(const std::string& dir);

// Writes q, k, v, o (the kernel's current O) and, when o_ref is not null, o_ref, plus
// seqlens_q, seqlens_kv, sinks (-use-attention-sinks), lse (the kernel's, -save-softmax) and
// lse_ref (when not null; device [b, h, s_q_max] as Params::softmax_lse) and meta.json.
// Exits 2 when a file cannot be written.
void save_tensors(const Problem& p, const SeqLens& lens, const DeviceTensors& t, const float* o_ref,
                  const float* lse_ref, const KernelMeta& kernel, cudaStream_t stream);

// -bwd: do (dO, O's layout), dq [q tokens, h, d] and dk, dv [kv tokens, h_kv, d | dv] (dense,
// the input dtype) and their fp32 references (dense alike, null: not written), as do.npy,
// dq.npy, dk.npy, dv.npy and dq_ref.npy, dk_ref.npy, dv_ref.npy in the logical padded layout.
void save_backward(const Problem& p, const DeviceTensors& t, const void* d_o, const void* dq, const void* dk,
                   const void* dv, const float* dq_ref, const float* dk_ref, const float* dv_ref, cudaStream_t stream);

}  // namespace fmha
