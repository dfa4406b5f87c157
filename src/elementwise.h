// Device helpers of the driver's elementwise kernels (grid-stride loops over a tensor):
// launch geometry, fp16 / bf16 conversions and the dtype switch. CUDA code: .cu files only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cstdint>

#include "params.h"

namespace fmha {

constexpr int kThreads = 256;
constexpr int kWarpSize = 32;
constexpr int kMaxGridBlocks = 65536;  // grid-stride loops cover the rest

// Blocks for `work_items` at `per_block` a block: at least one, at most kMaxGridBlocks.
inline int grid_for(int64_t work_items, int per_block) {
    return std::max(1, static_cast<int>(std::min<int64_t>((work_items + per_block - 1) / per_block,
                                                          kMaxGridBlocks)));
}

template <class T> __device__ inline T from_float(float x);
template <> __device__ inline __half from_float<__half>(float x) { return __float2half_rn(x); }
template <> __device__ inline __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
    return __float2bfloat16_rn(x);
}

template <> __device__ inline __nv_fp8_e4m3 from_float<__nv_fp8_e4m3>(float x) {
    return __nv_fp8_e4m3(x);  // to nearest even, saturating at +-448
}

template <class T> __device__ inline float to_float(T x) { return static_cast<float>(x); }
template <> __device__ inline float to_float<__half>(__half x) { return __half2float(x); }
template <> __device__ inline float to_float<__nv_bfloat16>(__nv_bfloat16 x) {
    return __bfloat162float(x);
}

// Calls f(T{}) with T the element type of a 16-bit dtype: __nv_bfloat16 for kBf16, else
// __half (the driver's tensors are one or the other).
template <class F>
void with_16bit_type(DataType type, F&& f) {
    if (type == DataType::kBf16)
        f(__nv_bfloat16{});
    else
        f(__half{});
}

// Calls f(T{}) with T the element type of an input dtype: __nv_fp8_e4m3 for kE4m3, else
// with_16bit_type's.
template <class F>
void with_input_type(DataType type, F&& f) {
    if (type == DataType::kE4m3)
        f(__nv_fp8_e4m3{});
    else
        with_16bit_type(type, f);
}

}  // namespace fmha
