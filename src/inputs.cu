// The fill kernels: RNG values by logical index, and constant bits.
#include "inputs.h"

#include "elementwise.h"

namespace fmha {
namespace {

// One warp per (sequence, position, head) row of the logical [b, s_cap, heads, cols]
// view. The value depends on the logical index only, so the same seed gives the same
// tensors in every layout and storage mode.
template <class T>
__global__ void fill_kernel(T* base, int64_t row_stride, int64_t head_stride, int heads, int cols,
                            const int* offsets, const int* lens, int b, int s_cap, FillSpec f) {
    const int64_t rows = int64_t(b) * s_cap * heads;
    const int64_t warps = int64_t(gridDim.x) * blockDim.x / kWarpSize;
    const int lane = threadIdx.x % kWarpSize;
    for (int64_t r = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / kWarpSize; r < rows;
         r += warps) {
        const LogicalRow lr = logical_row(r, heads, s_cap);
        if (lr.pos >= lens[lr.seq]) continue;
        T* row = base + (int64_t(offsets[lr.seq]) + lr.pos) * row_stride + lr.head * head_stride;
        for (int c = lane; c < cols; c += kWarpSize) row[c] = from_float<T>(random_value(f, r * cols + c));
    }
}

// Every element of a flat tensor, value by index (the attention bias).
template <class T>
__global__ void fill_flat_kernel(T* data, int64_t n, FillSpec f) {
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
        data[i] = from_float<T>(random_value(f, i));
}

template <class T>
__global__ void poison_kernel(T* data, int64_t n, T bits) {
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += int64_t(gridDim.x) * blockDim.x)
        data[i] = bits;
}

template <class T>
void launch_poison(T* data, int64_t n, T bits, cudaStream_t stream) {
    poison_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(data, n, bits);
    CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void fill_view(const Problem& p, const View& v, const int* offsets, const int* lens, int s_cap,
               RngStream stream, float range, float scale) {
    const FillSpec f{p.seed, stream, range, scale, p.ones, p.randn};
    const int grid = grid_for(int64_t(p.b) * s_cap * v.heads, kThreads / kWarpSize);
    with_input_type(v.type, [&](auto element) {
        using T = decltype(element);
        fill_kernel<<<grid, kThreads>>>(static_cast<T*>(v.base), v.row_stride, v.head_stride, v.heads, v.cols,
                                        offsets, lens, p.b, s_cap, f);
    });
    CUDA_CHECK(cudaGetLastError());
}

void fill_flat(DataType type, uint16_t* data, int64_t n, const FillSpec& f) {
    with_16bit_type(type, [&](auto element) {
        using T = decltype(element);
        fill_flat_kernel<<<grid_for(n, kThreads), kThreads>>>(reinterpret_cast<T*>(data), n, f);
    });
    CUDA_CHECK(cudaGetLastError());
}

void poison(uint8_t* data, int64_t n, uint8_t bits, cudaStream_t stream) { launch_poison(data, n, bits, stream); }

void poison(uint16_t* data, int64_t n, uint16_t bits, cudaStream_t stream) {
    launch_poison(data, n, bits, stream);
}

void poison(uint32_t* data, int64_t n, uint32_t bits, cudaStream_t stream) {
    launch_poison(data, n, bits, stream);
}

}  // namespace fmha
