// Every CUDA runtime call in the driver goes through CUDA_CHECK: on failure it prints
//   CUDA error: <cudaGetErrorString> (<call>)
// on stderr and exits with code 3 (SPEC.md: no device, CUDA error, out of memory).
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

namespace fmha {

constexpr int kExitCudaError = 3;

[[noreturn]] inline void cuda_fail(cudaError_t err, const char* call) {
    std::fflush(stdout);
    std::fprintf(stderr, "CUDA error: %s (%s)\n", cudaGetErrorString(err), call);
    std::exit(kExitCudaError);
}

inline void cuda_check(cudaError_t err, const char* call) {
    if (err != cudaSuccess) cuda_fail(err, call);
}

}  // namespace fmha

#define CUDA_CHECK(call) ::fmha::cuda_check((call), #call)
