// The paged pool: its random block order (host) and the copy of K and V into it (device).
#include "paged_kv.h"

#include <algorithm>
#include <utility>

#include "elementwise.h"
#include "inputs.h"
#include "rng.h"

namespace fmha {
namespace {

// Writes every owned pool block from the logical K and V ([token, h_kv, d|dv] at the
// sequence's offset); rows past the sequence's length get finite noise.
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

}  // namespace

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

PagedKvTensors make_paged_pool(const Problem& p, const SeqLens& lens, const QkvStorage& storage,
                               const int* kv_offsets, const int* kv_lens, Params& prm) {
    PagedKvTensors t;
    t.host = make_paged_kv(p, lens);
    const PagedKv& g = t.host;
    const int64_t d = p.d, dv = p.dv, hkv = p.h_kv, tpb = g.tokens_per_block;
    const int64_t block_elems = hkv * tpb * (d + dv);
    const int eb = element_bytes(p.kv_dtype);
    const int64_t n = g.pool_blocks * block_elems;
    t.pool = DeviceBuffer<uint8_t>(static_cast<size_t>(n * eb));
    if (eb == 1) {
        poison(t.pool.get(), n, kPoisonBitsE4m3);
    } else {
        poison(reinterpret_cast<uint16_t*>(t.pool.get()), n, kPoisonBits);
    }
    const DeviceBuffer<int> block_seq = to_device(g.block_seq), block_index = to_device(g.block_index);
    const FillSpec tail{p.seed, kStreamPageTail, p.range_k, 1.f, false, false};
    with_input_type(p.kv_dtype, [&](auto element) {
        using T = decltype(element);
        page_kernel<<<grid_for(n, kThreads), kThreads>>>(
            reinterpret_cast<T*>(t.pool.get()), reinterpret_cast<const T*>(storage.k.get()),
            reinterpret_cast<const T*>(storage.v.get()), block_seq.get(), block_index.get(), kv_offsets, kv_lens,
            g.pool_blocks, p.h_kv, g.tokens_per_block, p.d, p.dv, tail);
    });
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaDeviceSynchronize());  // block_seq / block_index are freed on return
    t.block_table = to_device(g.table);
    prm.k = t.pool.get();
    prm.v = t.pool.get() + hkv * tpb * d * eb;
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
    return t;
}

}  // namespace fmha
