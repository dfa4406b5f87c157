// Host side of thread-block clusters (SM90): whether a kernel's code for this device has
// cluster instructions, how many clusters of n CTAs can be resident at once, and a launch
// that groups n consecutive CTAs (blockIdx.x) into one cluster.
#pragma once

#include <cuda_runtime.h>

namespace fmha {
namespace kernel {

constexpr int kMaxCluster = 8;  // CTAs a cluster may hold on every SM90 part (portable size)

// Whether `fn`'s code for the current device was compiled for SM90 or newer, where
// memory::cluster_* are real (code JIT-compiled from older PTX stands for one-CTA clusters)
// and so is programmatic dependent launch (dependent_launch.h).
inline bool compiled_for_sm90(const void* fn) {
    cudaFuncAttributes attr{};
    if (cudaFuncGetAttributes(&attr, fn) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    return attr.ptxVersion >= 90;
}

// The launch configuration of `blocks` CTAs (threads, smem bytes each) with one launch
// attribute, `attr`, which must outlive the configuration (cudaLaunchKernelEx).
inline cudaLaunchConfig_t config_with(unsigned blocks, int threads, int smem, cudaStream_t stream,
                                      const cudaLaunchAttribute& attr) {
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(blocks);
    config.blockDim = dim3(static_cast<unsigned>(threads));
    config.dynamicSmemBytes = static_cast<size_t>(smem);
    config.stream = stream;
    config.attrs = const_cast<cudaLaunchAttribute*>(&attr);
    config.numAttrs = 1;
    return config;
}

// The launch configuration of `blocks` CTAs (threads, smem bytes each) in clusters of n
// consecutive CTAs; `attr` receives the cluster shape and must outlive the configuration.
inline cudaLaunchConfig_t cluster_config(unsigned blocks, int threads, int smem, int n, cudaStream_t stream,
                                         cudaLaunchAttribute& attr) {
    attr = cudaLaunchAttribute{};
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = static_cast<unsigned>(n);
    attr.val.clusterDim.y = 1;
    attr.val.clusterDim.z = 1;
    return config_with(blocks, threads, smem, stream, attr);
}

// Clusters of n CTAs (threads, smem bytes each) resident at once on the device; 0 when the
// device has no clusters of n (the query's error is cleared).
inline int max_active_clusters(const void* fn, int threads, int smem, int n) {
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t config = cluster_config(static_cast<unsigned>(n), threads, smem, n, nullptr, attr);
    int clusters = 0;
    if (cudaOccupancyMaxActiveClusters(&clusters, fn, &config) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return clusters;
}

// Launches kernel<<<blocks, threads, smem, stream>>>(args...) with clusters of n consecutive
// CTAs (blocks a multiple of n).
template <typename... Expected, typename... Actual>
cudaError_t launch_clusters(void (*kernel)(Expected...), unsigned blocks, int threads, int smem, int n,
                            cudaStream_t stream, Actual&&... args) {
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t config = cluster_config(blocks, threads, smem, n, stream, attr);
    return cudaLaunchKernelEx(&config, kernel, static_cast<Actual&&>(args)...);
}

}  // namespace kernel
}  // namespace fmha
