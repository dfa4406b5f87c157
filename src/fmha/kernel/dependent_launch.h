// Programmatic dependent launch (SM90): a grid launched with it may start its CTAs before the
// grid ahead of it in the stream has finished, once every CTA of that one has allowed it
// (allow_dependents) or exited. Its CTAs then wait (wait_for_prerequisites) until the grid
// ahead has completed and its memory is visible, before they touch global memory: what
// overlaps is the launch and the CTAs' start, never a read or a write, so the stream's order
// holds for any grid ahead, with or without the attribute. Before SM90 both are no-ops and
// the host leaves the attribute off.
#pragma once

#include <cuda_runtime.h>

#include "fmha/kernel/cluster_launch.h"  // config_with
#include "fmha/utils.h"

namespace fmha {
namespace kernel {

// The first thing a kernel launched with launch_dependent does, before any global access.
FMHA_DEVICE void wait_for_prerequisites() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// The grid behind this one may launch once every CTA has called this (or exited). At a CTA's
// start: once the last CTAs of this grid have started, the next grid's take each slot this
// one frees (and wait there); later, they start only as the last CTAs reach that point.
FMHA_DEVICE void allow_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// kernel<<<blocks, threads, smem, stream>>>(args...) with programmatic stream serialisation:
// the launch may overlap the previous grid's end (its kernel must start with
// wait_for_prerequisites).
template <typename... Expected, typename... Actual>
cudaError_t launch_dependent(void (*kernel)(Expected...), unsigned blocks, int threads, int smem,
                             cudaStream_t stream, Actual&&... args) {
    cudaLaunchAttribute attr{};
    attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr.val.programmaticStreamSerializationAllowed = 1;
    const cudaLaunchConfig_t config = config_with(blocks, threads, smem, stream, attr);
    return cudaLaunchKernelEx(&config, kernel, static_cast<Actual&&>(args)...);
}

}  // namespace kernel
}  // namespace fmha
