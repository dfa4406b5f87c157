#include "api/prep.h"

namespace fmha {
namespace api {
namespace {

__global__ void lengths_kernel(Lengths l, int* out) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < l.b; i += gridDim.x * blockDim.x) {
        const int q_off = l.cu_q != nullptr ? l.cu_q[i] : int(i * l.q_step);
        const int q_len = l.cu_q != nullptr ? l.cu_q[i + 1] - l.cu_q[i] : l.s_q;
        const int kv_off = l.paged ? 0 : (l.cu_k != nullptr ? l.cu_k[i] : int(i * l.kv_step));
        const int kv_len = l.seqused_k != nullptr ? l.seqused_k[i]
                           : l.cu_k != nullptr    ? l.cu_k[i + 1] - l.cu_k[i]
                                                  : l.s_kv;
        out[i] = q_off;
        out[l.b + i] = q_len;
        out[2 * l.b + i] = kv_off;
        out[3 * l.b + i] = kv_len;
    }
}

}  // namespace

cudaError_t launch_lengths(const Lengths& l, int* out, cudaStream_t stream) {
    const int threads = 256;
    const int blocks = (l.b + threads - 1) / threads < 64 ? (l.b + threads - 1) / threads : 64;
    lengths_kernel<<<blocks, threads, 0, stream>>>(l, out);
    return cudaGetLastError();
}

}  // namespace api
}  // namespace fmha
