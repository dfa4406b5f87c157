// Lengths, offsets and layout storage (host), and the gather back to the logical layout.
#include "layouts.h"

#include <algorithm>

#include "elementwise.h"
#include "rng.h"

namespace fmha {
namespace {

template <class T>
__global__ void gather_kernel(const T* src, int64_t row_stride, int64_t head_stride, int heads,
                              int cols, const int* offsets, const int* lens, int b, int s_cap,
                              float* dst) {
    const int64_t n = int64_t(b) * s_cap * heads * cols;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += int64_t(gridDim.x) * blockDim.x) {
        const int c = static_cast<int>(i % cols);
        const LogicalRow r = logical_row(i / cols, heads, s_cap);
        float x = 0.f;
        if (r.pos < lens[r.seq])
            x = to_float(src[(int64_t(offsets[r.seq]) + r.pos) * row_stride + r.head * head_stride + c]);
        dst[i] = x;
    }
}

// Zeroed allocation of `rows` x `width` elements of `bytes` each (padding rows stay zero).
DeviceBuffer<uint8_t> zeroed(int64_t rows, int64_t width, int bytes) {
    DeviceBuffer<uint8_t> buf(static_cast<size_t>(rows * width * bytes));
    CUDA_CHECK(cudaMemset(buf.get(), 0, buf.bytes()));
    return buf;
}

}  // namespace

SeqLens make_seqlens(const Problem& p) {
    SeqLens l;
    const int span = p.s - p.min_s + 1;
    for (int i = 0; i < p.b; ++i) {
        const int kv = p.min_s + static_cast<int>(hash(p.seed, kStreamLens, i) % uint64_t(span));
        const int q = std::min(p.s_q, kv);
        l.kv_lens.push_back(kv);
        l.q_lens.push_back(q);
        l.kv_offsets.push_back(static_cast<int>(p.pad_s ? int64_t(i) * p.s : l.kv_total));
        l.q_offsets.push_back(static_cast<int>(p.pad_s ? int64_t(i) * p.s_q : l.q_total));
        l.kv_total += kv;
        l.q_total += q;
        l.s_kv_max = std::max(l.s_kv_max, kv);
        l.s_q_max = std::max(l.s_q_max, q);
    }
    l.kv_storage_tokens = p.pad_s ? int64_t(p.b) * p.s : l.kv_total;
    l.q_storage_tokens = p.pad_s ? int64_t(p.b) * p.s_q : l.q_total;
    return l;
}

QkvStorage make_qkv_storage(const Problem& p, const SeqLens& lens) {
    QkvStorage s;
    const int64_t tq = lens.q_storage_tokens, tkv = lens.kv_storage_tokens;
    const int64_t d = p.d, dv = p.dv, h = p.h, hkv = p.h_kv;
    const int eb = element_bytes(p.dtype), kvb = element_bytes(p.kv_dtype);
    const DataType qt = p.dtype, kvt = p.kv_dtype;
    // The element `offset` elements into a buffer.
    const auto at = [eb](const DeviceBuffer<uint8_t>& buf, int64_t offset) -> void* { return buf.get() + offset * eb; };
    switch (p.layout) {
        case Layout::kPackedQkv: {  // one row per token: Q heads, then K heads, then V heads
            const int64_t row = (h + 2 * hkv) * d;
            s.qkv = zeroed(tq, row, eb);
            s.q_view = {at(s.qkv, 0), row, d, p.h, p.d, qt};
            s.k_view = {at(s.qkv, h * d), row, d, p.h_kv, p.d, qt};
            s.v_view = {at(s.qkv, (h + hkv) * d), row, d, p.h_kv, p.d, qt};
            break;
        }
        case Layout::kContiguousQKv: {  // Q, and KV with K heads then V heads per token
            s.q = zeroed(tq, h * d, eb);
            s.kv = zeroed(tkv, 2 * hkv * d, eb);
            s.q_view = {at(s.q, 0), h * d, d, p.h, p.d, qt};
            s.k_view = {at(s.kv, 0), 2 * hkv * d, d, p.h_kv, p.d, qt};
            s.v_view = {at(s.kv, hkv * d), 2 * hkv * d, d, p.h_kv, p.d, qt};
            break;
        }
        case Layout::kPagedKv:  // K and V in token storage first (Params::logical), paged later
        case Layout::kSeparateQKv: {
            s.q = zeroed(tq, h * d, eb);
            s.k = zeroed(tkv, hkv * d, kvb);
            s.v = zeroed(tkv, hkv * dv, kvb);
            s.q_view = {at(s.q, 0), h * d, d, p.h, p.d, qt};
            s.k_view = {s.k.get(), hkv * d, d, p.h_kv, p.d, kvt};
            s.v_view = {s.v.get(), hkv * dv, dv, p.h_kv, p.dv, kvt};
            break;
        }
    }
    return s;
}

void gather_logical(const void* src, DataType type, int64_t row_stride, int64_t head_stride,
                    int heads, int cols, const int* offsets, const int* lens, int b, int s_cap,
                    float* dst, cudaStream_t stream) {
    const int grid = grid_for(int64_t(b) * s_cap * heads * cols, kThreads);
    const auto gather = [&](auto element) {
        using T = decltype(element);
        gather_kernel<<<grid, kThreads, 0, stream>>>(static_cast<const T*>(src), row_stride, head_stride, heads,
                                                     cols, offsets, lens, b, s_cap, dst);
    };
    if (type == DataType::kFp32)
        gather(0.f);
    else
        with_input_type(type, gather);
    CUDA_CHECK(cudaGetLastError());
}

}  // namespace fmha
