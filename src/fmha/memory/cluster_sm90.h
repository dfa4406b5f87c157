// Thread-block cluster primitives (SM90): the CTA's rank and size, a barrier over every
// thread of the cluster, and loads from another CTA's shared memory (distributed shared
// memory). Compiled for an architecture before SM90 they stand for a cluster of one CTA,
// so a portable kernel can call them; its launcher must then not ask for a cluster
// (kernel::compiled_for_sm90 says whether the kernel's code has them).
#pragma once

#include <cstdint>

#include "fmha/utils.h"

namespace fmha {
namespace memory {

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define FMHA_CLUSTERS 1
#else
#define FMHA_CLUSTERS 0
#endif

FMHA_DEVICE uint32_t cluster_size() {
#if FMHA_CLUSTERS
    uint32_t n;
    asm volatile("mov.u32 %0, %%cluster_nctarank;\n" : "=r"(n));
    return n;
#else
    return 1;
#endif
}

// Every thread of the cluster arrives; returns once all have. The release / acquire pair
// makes each CTA's shared-memory writes before it visible to the others' reads after it.
FMHA_DEVICE void cluster_sync() {
#if FMHA_CLUSTERS
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
#else
    __syncthreads();
#endif
}

// The same barrier without ordering: for a CTA that must not leave while the others still
// read its shared memory, once the values it read itself are used.
FMHA_DEVICE void cluster_sync_relaxed() {
#if FMHA_CLUSTERS
    asm volatile("barrier.cluster.arrive.relaxed.aligned;\nbarrier.cluster.wait.aligned;\n" ::: "memory");
#else
    __syncthreads();
#endif
}

// The shared::cluster address of `addr` (a shared::cta address of this CTA) in CTA `rank`.
FMHA_DEVICE uint32_t cluster_map(uint32_t addr, uint32_t rank) {
#if FMHA_CLUSTERS
    uint32_t out;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(out) : "r"(addr), "r"(rank));
    return out;
#else
    return addr;
#endif
}

FMHA_DEVICE float2 ld_cluster_f2(uint32_t addr) {
    float2 v;
#if FMHA_CLUSTERS
    asm volatile("ld.shared::cluster.v2.f32 {%0, %1}, [%2];\n" : "=f"(v.x), "=f"(v.y) : "r"(addr));
#else
    asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];\n" : "=f"(v.x), "=f"(v.y) : "r"(addr));
#endif
    return v;
}

FMHA_DEVICE float4 ld_cluster_f4(uint32_t addr) {
    float4 v;
#if FMHA_CLUSTERS
    asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];\n"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
                 : "r"(addr));
#else
    asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];\n"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
                 : "r"(addr));
#endif
    return v;
}

}  // namespace memory
}  // namespace fmha
