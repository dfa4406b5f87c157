// Named barriers (bar.sync / bar.arrive): barrier `id` (1 to 15; 0 is __syncthreads') over
// kThreads threads, a multiple of 32 known at compile time. The warp-specialised kernels (the
// ws family, the wgmma backward) hand work between warpgroups through them.
#pragma once

#include "fmha/utils.h"

namespace fmha {
namespace memory {

template <int kThreads>
FMHA_DEVICE void bar_sync(int id) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "n"(kThreads) : "memory");
}

template <int kThreads>
FMHA_DEVICE void bar_arrive(int id) {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "n"(kThreads) : "memory");
}

// The id known at compile time too (an immediate operand).
template <int kId, int kThreads>
FMHA_DEVICE void bar_sync() {
    asm volatile("bar.sync %0, %1;\n" ::"n"(kId), "n"(kThreads) : "memory");
}

}  // namespace memory
}  // namespace fmha
