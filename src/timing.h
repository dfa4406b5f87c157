// Event timing of work enqueued on a stream, for the driver's Elapsed and Backward lines.
#pragma once

#include <cuda_runtime.h>

#include "cuda_check.h"

namespace fmha {

// Elapsed milliseconds of the work `fn` enqueues on `stream`, measured with one event pair.
template <class Fn>
float time_on_stream(cudaStream_t stream, Fn fn) {
    cudaEvent_t start, stop;
    CUDA_CHECK(cudaEventCreate(&start));
    CUDA_CHECK(cudaEventCreate(&stop));
    CUDA_CHECK(cudaEventRecord(start, stream));
    fn();
    CUDA_CHECK(cudaEventRecord(stop, stream));
    CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0.f;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    CUDA_CHECK(cudaEventDestroy(start));
    CUDA_CHECK(cudaEventDestroy(stop));
    return ms;
}

}  // namespace fmha
