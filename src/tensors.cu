// Layouts, lengths and the fill / poison / gather kernels.
#include "tensors.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>

#include "fmha/mask/mask.h"

namespace fmha {
namespace {

constexpr int kThreads = 256;
constexpr int kWarpSize = 32;
constexpr int kMaxGridBlocks = 65536;  // grid-stride loops cover the rest
constexpr float kTwoPi = 6.28318530717958647692f;
constexpr float kInv2Pow24 = 1.0f / 16777216.0f;

// Streams of the counter-based RNG; each tensor (and the lengths) draws from its own.
enum Stream : uint64_t {
    kStreamQ = 1,
    kStreamK = 2,
    kStreamV = 3,
    kStreamLens = 4,
    kStreamSinks = 5,
    kStreamBias = 6,
    kStreamMask = 7,
    kStreamPages = 8,     // -paged-kv: the pool's block order
    kStreamPageTail = 9   // -paged-kv: the rows of a last block past the sequence's length
};

// splitmix64's finaliser: a bijective mix, good enough to turn a counter into bits.
__host__ __device__ inline uint64_t mix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

__host__ __device__ inline uint64_t hash(uint64_t seed, uint64_t stream, uint64_t index) {
    return mix64(mix64(seed ^ mix64(stream)) ^ index);
}

// Top 24 bits as a float in [0, 1).
__device__ inline float unit_float(uint64_t bits) {
    return static_cast<float>(bits >> 40) * kInv2Pow24;
}

struct FillSpec {
    uint64_t seed, stream;
    float range, scale;
    bool ones, randn;
};

__device__ inline float random_value(const FillSpec& f, uint64_t index) {
    if (f.ones) return f.scale;
    const uint64_t h1 = hash(f.seed, f.stream, index);
    if (!f.randn) return (2.f * unit_float(h1) - 1.f) * f.range * f.scale;
    // Box-Muller from two hashes; u1 in (0, 1] keeps the log finite.
    const float u1 = 1.f - unit_float(h1);
    const float u2 = unit_float(mix64(h1));
    return sqrtf(-2.f * logf(u1)) * cosf(kTwoPi * u2) * f.range * f.scale;
}

template <class T> __device__ inline T from_float(float x);
template <> __device__ inline __half from_float<__half>(float x) { return __float2half_rn(x); }
template <> __device__ inline __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
    return __float2bfloat16_rn(x);
}

template <class T> __device__ inline float to_float(T x) { return static_cast<float>(x); }
template <> __device__ inline float to_float<__half>(__half x) { return __half2float(x); }
template <> __device__ inline float to_float<__nv_bfloat16>(__nv_bfloat16 x) {
    return __bfloat162float(x);
}

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
        const int head = static_cast<int>(r % heads);
        const int pos = static_cast<int>((r / heads) % s_cap);
        const int seq = static_cast<int>(r / (int64_t(heads) * s_cap));
        if (pos >= lens[seq]) continue;
        T* row = base + (int64_t(offsets[seq]) + pos) * row_stride + head * head_stride;
        for (int c = lane; c < cols; c += kWarpSize) row[c] = from_float<T>(random_value(f, r * cols + c));
    }
}

// Every element of a flat tensor, value by index (the attention bias).
template <class T>
__global__ void fill_flat_kernel(T* data, int64_t n, FillSpec f) {
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
        data[i] = from_float<T>(random_value(f, i));
}

// -paged-kv: writes every owned pool block from the logical K and V ([token, h_kv, d|dv] at
// the sequence's offset); rows past the sequence's length get finite noise (a kernel reads
// them and must mask them).
template <class T>
__global__ void page_kernel(T* pool, const T* k, const T* v, const int* block_seq, const int* block_index,
                            const int* offsets, const int* lens, int pool_blocks, int h_kv, int tpb, int d, int dv,
                            FillSpec tail) {
    const int64_t k_part = int64_t(h_kv) * tpb * d;
    const int64_t block_elems = k_part + int64_t(h_kv) * tpb * dv;
    const int64_t n = int64_t(pool_blocks) * block_elems;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
        const int block = static_cast<int>(i / block_elems);
        const int seq = block_seq[block];
        if (seq < 0) continue;  // a spare: keeps its poison
        const int64_t e = i % block_elems;
        const bool is_v = e >= k_part;
        const int cols = is_v ? dv : d;
        const int64_t ev = is_v ? e - k_part : e;
        const int head = static_cast<int>(ev / (int64_t(tpb) * cols));
        const int row = static_cast<int>(ev / cols % tpb);
        const int col = static_cast<int>(ev % cols);
        const int key = block_index[block] * tpb + row;
        float x;
        if (key < lens[seq]) {
            const T* src = is_v ? v : k;
            x = to_float(src[(int64_t(offsets[seq]) + key) * h_kv * cols + int64_t(head) * cols + col]);
        } else {
            x = random_value(tail, uint64_t(i));
        }
        pool[i] = from_float<T>(x);
    }
}

template <class T>
__global__ void poison_kernel(T* data, int64_t n, T bits) {
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += int64_t(gridDim.x) * blockDim.x)
        data[i] = bits;
}

template <class T>
__global__ void gather_kernel(const T* src, int64_t row_stride, int64_t head_stride, int heads,
                              int cols, const int* offsets, const int* lens, int b, int s_cap,
                              float* dst) {
    const int64_t n = int64_t(b) * s_cap * heads * cols;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += int64_t(gridDim.x) * blockDim.x) {
        const int c = static_cast<int>(i % cols);
        const int64_t r = i / cols;
        const int head = static_cast<int>(r % heads);
        const int pos = static_cast<int>((r / heads) % s_cap);
        const int seq = static_cast<int>(r / (int64_t(heads) * s_cap));
        float x = 0.f;
        if (pos < lens[seq])
            x = to_float(src[(int64_t(offsets[seq]) + pos) * row_stride + head * head_stride + c]);
        dst[i] = x;
    }
}

int grid_for(int64_t work_items, int per_block) {
    return static_cast<int>(std::min<int64_t>((work_items + per_block - 1) / per_block, kMaxGridBlocks));
}

// Fills one [token, head, col] view of Q, K or V.
struct View {
    uint16_t* base;
    int64_t row_stride, head_stride;
    int heads, cols;
};

void fill(const Problem& p, const View& v, const DeviceBuffer<int>& offsets,
          const DeviceBuffer<int>& lens, int s_cap, uint64_t stream, float range, float scale) {
    const FillSpec f{p.seed, stream, range, scale, p.ones, p.randn};
    const int64_t rows = int64_t(p.b) * s_cap * v.heads;
    const int grid = std::max(1, grid_for(rows, kThreads / kWarpSize));
    if (p.dtype == DataType::kBf16)
        fill_kernel<<<grid, kThreads>>>(reinterpret_cast<__nv_bfloat16*>(v.base), v.row_stride,
                                        v.head_stride, v.heads, v.cols, offsets.get(), lens.get(),
                                        p.b, s_cap, f);
    else
        fill_kernel<<<grid, kThreads>>>(reinterpret_cast<__half*>(v.base), v.row_stride,
                                        v.head_stride, v.heads, v.cols, offsets.get(), lens.get(),
                                        p.b, s_cap, f);
    CUDA_CHECK(cudaGetLastError());
}

// Zeroed allocation of `rows` x `width` 16-bit elements (padding rows stay zero).
DeviceBuffer<uint16_t> zeroed(int64_t rows, int64_t width) {
    DeviceBuffer<uint16_t> buf(static_cast<size_t>(rows * width));
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

PagedKv make_paged_kv(const Problem& p, const SeqLens& lens) {
    PagedKv g;
    g.tokens_per_block = p.tokens_per_block;
    const int tpb = p.tokens_per_block;
    g.table_stride = std::max(1, (lens.s_kv_max + tpb - 1) / tpb);
    int used = 0;
    for (int kv : lens.kv_lens) used += (kv + tpb - 1) / tpb;
    g.pool_blocks = used + used / 4 + 1;
    // A random order of the pool's blocks (Fisher-Yates from the seed); the sequences take
    // the first `used` in turn, the rest are spares.
    std::vector<int> order(g.pool_blocks);
    for (int i = 0; i < g.pool_blocks; ++i) order[i] = i;
    for (int i = g.pool_blocks - 1; i > 0; --i)
        std::swap(order[i], order[hash(p.seed, kStreamPages, uint64_t(i)) % uint64_t(i + 1)]);
    g.table.assign(size_t(p.b) * g.table_stride, -1);
    g.block_seq.assign(g.pool_blocks, -1);
    g.block_index.assign(g.pool_blocks, -1);
    int next = 0;
    for (int seq = 0; seq < p.b; ++seq) {
        const int blocks = (lens.kv_lens[seq] + tpb - 1) / tpb;
        for (int i = 0; i < blocks; ++i) {
            const int block = order[next++];
            g.table[size_t(seq) * g.table_stride + i] = block;
            g.block_seq[block] = seq;
            g.block_index[block] = i;
        }
    }
    return g;
}

namespace {
// The mask fields of Params that mask::Rows reads.
Params mask_params(const Problem& p) {
    Params prm;
    prm.mask = p.mask;
    prm.window = p.sliding_window_size;
    prm.chunk = p.chunked_attention_size;
    return prm;
}
}  // namespace

CustomMask make_custom_mask(const Problem& p, const SeqLens& lens) {
    CustomMask m;
    m.row_words = (lens.s_kv_max + 31) / 32;
    m.s_q_max = lens.s_q_max;
    m.bits.resize(size_t(p.b) * m.s_q_max * m.row_words);
    for (size_t i = 0; i < m.bits.size(); ++i) m.bits[i] = static_cast<uint32_t>(hash(p.seed, kStreamMask, i) >> 32);
    return m;
}

int64_t allowed_pairs(const Problem& p, const SeqLens& lens, const CustomMask* custom) {
    const Params prm = mask_params(p);
    int64_t pairs = 0;
    for (int i = 0; i < p.b; ++i) {
        const int64_t lq = lens.q_lens[i], lk = lens.kv_lens[i];
        if (p.mask == MaskType::kCustom && custom != nullptr) {
            for (int r = 0; r < lens.q_lens[i]; ++r)
                for (int j = 0; j < lens.kv_lens[i]; ++j) pairs += custom->visible(i, r, j);
        } else if (p.mask == MaskType::kPadding || p.mask == MaskType::kCustom) {
            pairs += lq * lk;
        } else if (p.mask == MaskType::kCausal) {
            // Bottom-right aligned: row r sees r + lk - lq + 1 keys (lq <= lk).
            pairs += lq * lk - lq * (lq - 1) / 2;
        } else {  // local masks: row by row
            const auto rows = mask::Rows<mask::Kind::kLocal>::make(prm, lens.q_lens[i], lens.kv_lens[i]);
            for (int r = 0; r < lens.q_lens[i]; ++r) pairs += std::max(0, rows.end(r) - rows.begin(r));
        }
    }
    return pairs;
}

int64_t visible_kv_tokens(const Problem& p, const SeqLens& lens) {
    const Params prm = mask_params(p);
    int64_t tokens = 0;
    for (int i = 0; i < p.b; ++i) {
        const mask::KeyRange keys = mask::sequence_keys(prm, lens.q_lens[i], lens.kv_lens[i]);
        tokens += std::max(0, keys.last - keys.first);
    }
    return tokens;
}

std::vector<float> alibi_slopes(int h) {
    int n = 1;
    while (2 * n <= h) n *= 2;
    std::vector<float> slopes;
    for (int i = 0; i < h; ++i) {
        const double exponent = i < n ? -8.0 * (i + 1) / n : -4.0 * (2 * (i - n) + 1) / n;
        slopes.push_back(static_cast<float>(std::exp2(exponent)));
    }
    return slopes;
}

DeviceTensors make_tensors(const Problem& p, const SeqLens& lens) {
    DeviceTensors t;
    t.q_offsets = to_device(lens.q_offsets);
    t.q_lens = to_device(lens.q_lens);
    t.kv_offsets = to_device(lens.kv_offsets);
    t.kv_lens = to_device(lens.kv_lens);
    t.tile_counter = to_device(std::vector<int>{0});  // persistent kernels' counter, starts at 0

    const int64_t tq = lens.q_storage_tokens, tkv = lens.kv_storage_tokens;
    const int64_t d = p.d, dv = p.dv, h = p.h, hkv = p.h_kv;
    View q{}, k{}, v{};
    switch (p.layout) {
        case Layout::kPackedQkv: {  // one row per token: Q heads, then K heads, then V heads
            const int64_t row = (h + 2 * hkv) * d;
            t.qkv = zeroed(tq, row);
            q = {t.qkv.get(), row, d, p.h, p.d};
            k = {t.qkv.get() + h * d, row, d, p.h_kv, p.d};
            v = {t.qkv.get() + (h + hkv) * d, row, d, p.h_kv, p.d};
            break;
        }
        case Layout::kContiguousQKv: {  // Q, and KV with K heads then V heads per token
            t.q = zeroed(tq, h * d);
            t.kv = zeroed(tkv, 2 * hkv * d);
            q = {t.q.get(), h * d, d, p.h, p.d};
            k = {t.kv.get(), 2 * hkv * d, d, p.h_kv, p.d};
            v = {t.kv.get() + hkv * d, 2 * hkv * d, d, p.h_kv, p.d};
            break;
        }
        case Layout::kPagedKv:  // K and V in token storage first (Params::logical), paged below
        case Layout::kSeparateQKv: {
            t.q = zeroed(tq, h * d);
            t.k = zeroed(tkv, hkv * d);
            t.v = zeroed(tkv, hkv * dv);
            q = {t.q.get(), h * d, d, p.h, p.d};
            k = {t.k.get(), hkv * d, d, p.h_kv, p.d};
            v = {t.v.get(), hkv * dv, dv, p.h_kv, p.dv};
            break;
        }
    }
    t.o = DeviceBuffer<uint16_t>(static_cast<size_t>((tq + 2 * kGuardRows) * h * dv));

    fill(p, q, t.q_offsets, t.q_lens, p.s_q, kStreamQ, p.range_q, p.scale_q);
    fill(p, k, t.kv_offsets, t.kv_lens, p.s, kStreamK, p.range_k, p.scale_k);
    fill(p, v, t.kv_offsets, t.kv_lens, p.s, kStreamV, p.range_v, p.scale_v);
    CUDA_CHECK(cudaDeviceSynchronize());

    Params& prm = t.params;
    prm.q = q.base;
    prm.k = k.base;
    prm.v = v.base;
    prm.o = t.o.get() + kGuardRows * h * dv;
    prm.q_row_stride = q.row_stride;
    prm.q_head_stride = q.head_stride;
    prm.k_row_stride = k.row_stride;
    prm.k_head_stride = k.head_stride;
    prm.v_row_stride = v.row_stride;
    prm.v_head_stride = v.head_stride;
    prm.o_row_stride = h * dv;
    prm.o_head_stride = dv;
    prm.q_offsets = t.q_offsets.get();
    prm.q_lens = t.q_lens.get();
    prm.kv_offsets = t.kv_offsets.get();
    prm.kv_lens = t.kv_lens.get();
    prm.uniform_lengths = uniform_lengths(lens);
    prm.tile_counter = t.tile_counter.get();
    prm.q_tokens = tq;    // packed QKV: tq == tkv, the qkv buffer's rows
    prm.kv_tokens = tkv;
    prm.b = p.b;
    prm.h = p.h;
    prm.h_kv = p.h_kv;
    prm.d = p.d;
    prm.dv = p.dv;
    prm.s_q_max = lens.s_q_max;
    prm.s_kv_max = lens.s_kv_max;
    prm.mask = p.mask;
    prm.window = p.sliding_window_size;
    prm.chunk = p.chunked_attention_size;
    prm.scale_bmm1 = p.scale_bmm1;
    prm.scale_softmax = p.scale_softmax;
    prm.scale_bmm2 = p.scale_bmm2;
    prm.softcap = p.softcapping_scale_bmm1;
    if (p.attention_sinks) {  // uniform in [-1, 3]: from negligible to most of a short row's weight
        for (int head = 0; head < p.h; ++head)
            t.sinks_host.push_back(-1.f + 4.f * float(hash(p.seed, kStreamSinks, head) >> 40) * (1.f / 16777216.f));
        t.sinks = to_device(t.sinks_host);
        prm.sinks = t.sinks.get();
    }
    if (p.alibi) {
        t.alibi = to_device(alibi_slopes(p.h));
        prm.alibi_slopes = t.alibi.get();
    }
    if (p.save_softmax) {
        t.lse = DeviceBuffer<float>(size_t(p.b) * p.h * lens.s_q_max);
        prm.softmax_lse = t.lse.get();
    }
    if (p.attention_bias) {  // [b|1, h|1, s_q_max, s_kv_max], uniform in [-2, 2] (normal, std 2, with -randn)
        const int64_t row = lens.s_kv_max;
        const int64_t plane = int64_t(lens.s_q_max) * row;
        const int64_t heads = p.bias_per_head ? p.h : 1;
        const int64_t n = (p.bias_per_batch ? p.b : 1) * heads * plane;
        t.bias = DeviceBuffer<uint16_t>(static_cast<size_t>(n));
        const FillSpec f{p.seed, kStreamBias, 2.f, 1.f, false, p.randn};
        const int grid = std::max(1, grid_for(n, kThreads));
        if (p.dtype == DataType::kBf16)
            fill_flat_kernel<<<grid, kThreads>>>(reinterpret_cast<__nv_bfloat16*>(t.bias.get()), n, f);
        else
            fill_flat_kernel<<<grid, kThreads>>>(reinterpret_cast<__half*>(t.bias.get()), n, f);
        CUDA_CHECK(cudaGetLastError());
        prm.attention_bias = t.bias.get();
        prm.bias_row_stride = row;
        prm.bias_head_stride = p.bias_per_head ? plane : 0;
        prm.bias_batch_stride = p.bias_per_batch ? heads * plane : 0;
    }
    if (p.mask == MaskType::kCustom) {
        t.custom_mask_host = make_custom_mask(p, lens);
        t.custom_mask = to_device(t.custom_mask_host.bits);
        prm.custom_mask = t.custom_mask.get();
        prm.custom_mask_row_words = t.custom_mask_host.row_words;
    }
    // What the reference and -save-tensors read: K and V in token storage. -paged-kv then
    // builds the pool from them and points the kernel's K and V there.
    t.logical = prm;
    if (p.layout == Layout::kPagedKv) {
        t.paged_host = make_paged_kv(p, lens);
        const PagedKv& g = t.paged_host;
        const int64_t tpb = g.tokens_per_block;
        const int64_t block_elems = hkv * tpb * (d + dv);
        t.kv_pool = DeviceBuffer<uint16_t>(static_cast<size_t>(g.pool_blocks * block_elems));
        const int64_t n = static_cast<int64_t>(t.kv_pool.size());
        poison_kernel<<<std::max(1, grid_for(n, kThreads)), kThreads>>>(t.kv_pool.get(), n, kPoisonBits);
        CUDA_CHECK(cudaGetLastError());
        const DeviceBuffer<int> block_seq = to_device(g.block_seq), block_index = to_device(g.block_index);
        const FillSpec tail{p.seed, kStreamPageTail, p.range_k, 1.f, false, false};
        if (p.dtype == DataType::kBf16)
            page_kernel<<<std::max(1, grid_for(n, kThreads)), kThreads>>>(
                reinterpret_cast<__nv_bfloat16*>(t.kv_pool.get()), reinterpret_cast<const __nv_bfloat16*>(t.k.get()),
                reinterpret_cast<const __nv_bfloat16*>(t.v.get()), block_seq.get(), block_index.get(),
                t.kv_offsets.get(), t.kv_lens.get(), g.pool_blocks, p.h_kv, g.tokens_per_block, p.d, p.dv, tail);
        else
            page_kernel<<<std::max(1, grid_for(n, kThreads)), kThreads>>>(
                reinterpret_cast<__half*>(t.kv_pool.get()), reinterpret_cast<const __half*>(t.k.get()),
                reinterpret_cast<const __half*>(t.v.get()), block_seq.get(), block_index.get(), t.kv_offsets.get(),
                t.kv_lens.get(), g.pool_blocks, p.h_kv, g.tokens_per_block, p.d, p.dv, tail);
        CUDA_CHECK(cudaGetLastError());
        CUDA_CHECK(cudaDeviceSynchronize());  // block_seq / block_index are freed on return
        t.block_table = to_device(g.table);
        prm.k = t.kv_pool.get();
        prm.v = t.kv_pool.get() + hkv * tpb * d;
        prm.k_row_stride = d;
        prm.k_head_stride = tpb * d;
        prm.k_block_stride = block_elems;
        prm.v_row_stride = dv;
        prm.v_head_stride = tpb * dv;
        prm.v_block_stride = block_elems;
        prm.kv_block_table = t.block_table.get();
        prm.kv_table_stride = g.table_stride;
        prm.tokens_per_block = g.tokens_per_block;
        prm.kv_pool_blocks = g.pool_blocks;
        prm.kv_tokens = int64_t(g.pool_blocks) * tpb;  // the pool's rows of one head
    }
    return t;
}

std::vector<Params> timing_input_sets(const DeviceTensors& t, size_t l2_bytes,
                                      std::vector<DeviceBuffer<uint16_t>>* copies) {
    // The buffers the kernel reads (with -paged-kv, the pool and not the logical K/V).
    const auto read_by_kernel = [&](const DeviceBuffer<uint16_t>* b) {
        const auto* base = reinterpret_cast<const char*>(b->get());
        for (const void* ptr : {t.params.q, t.params.k, t.params.v}) {
            const auto* at = static_cast<const char*>(ptr);
            if (b->size() > 0 && at >= base && at < base + b->bytes()) return true;
        }
        return false;
    };
    std::vector<const DeviceBuffer<uint16_t>*> inputs;
    for (const auto* b : {&t.qkv, &t.q, &t.kv, &t.k, &t.v, &t.kv_pool})
        if (read_by_kernel(b)) inputs.push_back(b);
    size_t bytes = 0;
    for (const auto* b : inputs) bytes += b->bytes();
    const size_t wanted = bytes == 0 ? 1 : 2 * l2_bytes / bytes + 1;
    const int sets = static_cast<int>(std::min<size_t>(kMaxTimingSets, wanted));
    std::vector<Params> out{t.params};
    for (int s = 1; s < sets; ++s) {
        Params p = t.params;
        for (const auto* b : inputs) {
            copies->emplace_back(b->size());
            const DeviceBuffer<uint16_t>& copy = copies->back();
            CUDA_CHECK(cudaMemcpy(copy.get(), b->get(), b->bytes(), cudaMemcpyDeviceToDevice));
            // Q, K and V may point anywhere inside a buffer (packed QKV): keep the offset.
            const auto* base = reinterpret_cast<const char*>(b->get());
            for (const void** ptr : {&p.q, &p.k, &p.v}) {
                const auto* at = static_cast<const char*>(*ptr);
                if (at >= base && at < base + b->bytes())
                    *ptr = reinterpret_cast<const char*>(copy.get()) + (at - base);
            }
        }
        out.push_back(p);
    }
    return out;
}

void poison_output(DeviceTensors& t, cudaStream_t stream) {
    const int64_t n = static_cast<int64_t>(t.o.size());
    poison_kernel<<<std::max(1, grid_for(n, kThreads)), kThreads, 0, stream>>>(t.o.get(), n, kPoisonBits);
    CUDA_CHECK(cudaGetLastError());
    if (t.lse.size() > 0) {
        const int64_t m = static_cast<int64_t>(t.lse.size());
        poison_kernel<<<std::max(1, grid_for(m, kThreads)), kThreads, 0, stream>>>(
            reinterpret_cast<uint32_t*>(t.lse.get()), m, kPoisonLseBits);
        CUDA_CHECK(cudaGetLastError());
    }
}

void gather_logical(const void* src, DataType type, int64_t row_stride, int64_t head_stride,
                    int heads, int cols, const int* offsets, const int* lens, int b, int s_cap,
                    float* dst, cudaStream_t stream) {
    const int grid = std::max(1, grid_for(int64_t(b) * s_cap * heads * cols, kThreads));
    switch (type) {
        case DataType::kFp16:
            gather_kernel<<<grid, kThreads, 0, stream>>>(static_cast<const __half*>(src), row_stride,
                                                         head_stride, heads, cols, offsets, lens, b,
                                                         s_cap, dst);
            break;
        case DataType::kBf16:
            gather_kernel<<<grid, kThreads, 0, stream>>>(static_cast<const __nv_bfloat16*>(src),
                                                         row_stride, head_stride, heads, cols,
                                                         offsets, lens, b, s_cap, dst);
            break;
        default:
            gather_kernel<<<grid, kThreads, 0, stream>>>(static_cast<const float*>(src), row_stride,
                                                         head_stride, heads, cols, offsets, lens, b,
                                                         s_cap, dst);
            break;
    }
    CUDA_CHECK(cudaGetLastError());
}

}  // namespace fmha
