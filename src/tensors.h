// Device tensors of one run: RAII buffers, sequence lengths and offsets, the layout
// builder that turns a Problem into Params pointers and strides, and the fill kernels.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "cli.h"
#include "cuda_check.h"
#include "params.h"

namespace fmha {

// A NaN in both fp16 and bf16 (exponent bits all set in both encodings, mantissa not
// zero) that neither format produces as its canonical NaN (0x7fff / 0x7fc0), so a
// kernel that writes a NaN still shows up as "touched".
constexpr uint16_t kPoisonBits = 0x7fa5;
// O rows allocated before and after the real storage; a write there is a bug.
constexpr int kGuardRows = 16;
// The softmax statistics' poison (-save-softmax): a float NaN no kernel computes.
constexpr uint32_t kPoisonLseBits = 0x7fa5a5a5u;

template <class T>
class DeviceBuffer {
public:
    DeviceBuffer() = default;
    explicit DeviceBuffer(size_t count) : count_(count) {
        if (count > 0) CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&ptr_), count * sizeof(T)));
    }
    ~DeviceBuffer() {
        if (ptr_ != nullptr) cudaFree(ptr_);
    }
    DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), count_(o.count_) {
        o.ptr_ = nullptr;
        o.count_ = 0;
    }
    DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
        std::swap(ptr_, o.ptr_);
        std::swap(count_, o.count_);
        return *this;
    }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;

    T* get() const { return ptr_; }
    size_t size() const { return count_; }
    size_t bytes() const { return count_ * sizeof(T); }

private:
    T* ptr_ = nullptr;
    size_t count_ = 0;
};

template <class T>
DeviceBuffer<T> to_device(const std::vector<T>& host) {
    DeviceBuffer<T> buf(host.size());
    if (!host.empty())
        CUDA_CHECK(cudaMemcpy(buf.get(), host.data(), buf.bytes(), cudaMemcpyHostToDevice));
    return buf;
}

// Real lengths and storage offsets of every sequence (host side).
struct SeqLens {
    std::vector<int> q_lens, kv_lens, q_offsets, kv_offsets;
    int64_t q_storage_tokens = 0;   // rows of Q / O storage (b*s_q with -pad-s)
    int64_t kv_storage_tokens = 0;  // rows of K / V storage
    int64_t q_total = 0, kv_total = 0;  // sums of the real lengths
    int s_q_max = 0, s_kv_max = 0;
};
SeqLens make_seqlens(const Problem& p);
// Params::uniform_lengths: every sequence s_q_max x s_kv_max long, back to back.
inline bool uniform_lengths(const SeqLens& l) {
    const size_t b = l.q_lens.size();
    if (l.kv_lens.size() != b || l.q_offsets.size() != b || l.kv_offsets.size() != b) return false;
    for (size_t i = 0; i < b; ++i) {
        const int64_t n = static_cast<int64_t>(i);
        if (l.q_lens[i] != l.s_q_max || l.kv_lens[i] != l.s_kv_max || l.q_offsets[i] != n * l.s_q_max ||
            l.kv_offsets[i] != n * l.s_kv_max)
            return false;
    }
    return true;
}

// -custom-mask on the host: bit j % 32 of bits[(seq * s_q_max + r) * row_words + j / 32]
// (Params::custom_mask's layout), random from the seed, half of them set.
struct CustomMask {
    std::vector<uint32_t> bits;
    int row_words = 0;
    int s_q_max = 0;
    bool visible(int seq, int r, int j) const {
        return (bits[(size_t(seq) * s_q_max + r) * row_words + j / 32] >> (j % 32)) & 1u;
    }
};
CustomMask make_custom_mask(const Problem& p, const SeqLens& lens);

// (query, key) pairs the mask leaves, summed over sequences (for Tflop/s); `custom` is the
// mask's bits when p.mask is kCustom.
int64_t allowed_pairs(const Problem& p, const SeqLens& lens, const CustomMask* custom = nullptr);

// Keys some query row of its sequence sees, summed over sequences: the K/V rows a kernel
// reads once per KV head (GB/s). kv_total unless a local mask leaves keys unseen.
int64_t visible_kv_tokens(const Problem& p, const SeqLens& lens);

// -paged-kv on the host: every sequence's keys in ceil(kv_len / tokens_per_block) blocks of a
// pool, the blocks of all sequences plus a quarter more (spares nobody owns, poisoned) placed
// in a random order from the seed. table[seq * table_stride + i]: the pool block holding keys
// i * tokens_per_block .. of sequence seq; -1 past the sequence's blocks.
struct PagedKv {
    int tokens_per_block = 0;
    int table_stride = 0;  // blocks of the longest sequence
    int pool_blocks = 0;
    std::vector<int> table;
    // Per pool block: the sequence that owns it and which of its blocks it is (-1: a spare).
    std::vector<int> block_seq, block_index;
};
PagedKv make_paged_kv(const Problem& p, const SeqLens& lens);

// Everything on the device for one run. Params point into these buffers.
struct DeviceTensors {
    DeviceBuffer<uint16_t> qkv;  // packed QKV [tokens, h + 2*h_kv, d]
    DeviceBuffer<uint16_t> q;    // [tokens_q, h, d]        (Q + KV and separate layouts)
    DeviceBuffer<uint16_t> kv;   // [tokens_kv, 2*h_kv, d]  (Q + KV)
    DeviceBuffer<uint16_t> k;    // [tokens_kv, h_kv, d]    (separate)
    DeviceBuffer<uint16_t> v;    // [tokens_kv, h_kv, dv]   (separate; -paged-kv: the logical K/V)
    // -paged-kv: the pool, [block][K: h_kv, tokens_per_block, d][V: h_kv, tokens_per_block, dv]
    // (TensorRT-LLM's layout), and the block table (Params::kv_block_table). Rows of a
    // sequence's last block past its length hold finite noise, the spare blocks kPoisonBits.
    DeviceBuffer<uint16_t> kv_pool;
    PagedKv paged_host;
    DeviceBuffer<int> block_table;
    DeviceBuffer<uint16_t> o;    // [kGuardRows + tokens_q + kGuardRows, h, dv]
    DeviceBuffer<int> q_offsets, q_lens, kv_offsets, kv_lens;
    DeviceBuffer<int> tile_counter;  // Params::tile_counter: every launch runs on one stream
    std::vector<float> sinks_host;   // -use-attention-sinks: one logit per query head (else empty)
    DeviceBuffer<float> sinks;       // Params::sinks
    DeviceBuffer<float> lse;         // -save-softmax: Params::softmax_lse, [b, h, s_q_max]
    DeviceBuffer<float> alibi;       // -alibi: Params::alibi_slopes, alibi_slopes(h)
    DeviceBuffer<uint16_t> bias;     // -attention-bias: Params::attention_bias, [b|1, h|1, s_q_max, s_kv_max]
    CustomMask custom_mask_host;     // -custom-mask (else empty)
    DeviceBuffer<uint32_t> custom_mask;  // Params::custom_mask
    Params params;   // what the kernel reads
    // What the reference and -save-tensors read: params with K and V in token storage (the
    // logical K/V that -paged-kv's pool was built from); == params for the other layouts.
    Params logical;
};

// ALiBi slopes of h query heads as the ALiBi paper defines them (Press et al. 2022, and its
// code for head counts that are not a power of two): with n = 2^floor(log2 h), heads 0..n-1
// get 2^(-8 (i + 1) / n), the others the odd-numbered slopes of 2n heads, 2^(-4 (2 k + 1) / n).
std::vector<float> alibi_slopes(int h);

// Allocates the layout's buffers, sets Params (everything but num_sms) and fills Q, K, V
// from the counter-based RNG. O is not filled: call poison_output before each checked run.
DeviceTensors make_tensors(const Problem& p, const SeqLens& lens);

// The input sets the timed launches cycle through: t.params first, then copies of Q, K and V
// (owned by `copies`) until one pass over them is at least twice the L2, at most
// kMaxTimingSets. Back-to-back launches over one set that fits in L2 would time the cache,
// not the memory a real model's inputs come from (the SDPA side of bench/run.py rotates too).
constexpr int kMaxTimingSets = 8;
std::vector<Params> timing_input_sets(const DeviceTensors& t, size_t l2_bytes,
                                      std::vector<DeviceBuffer<uint16_t>>* copies);

// Writes kPoisonBits over the whole O allocation, guard rows included, and kPoisonLseBits
// over the softmax statistics when the run saves them.
void poison_output(DeviceTensors& t, cudaStream_t stream);

// Gathers a strided [token, head, col] tensor of fp16/bf16/fp32 into a dense float
// [b, s_cap, heads, cols] in the logical padded layout; rows past a length are zero.
void gather_logical(const void* src, DataType type, int64_t row_stride, int64_t head_stride,
                    int heads, int cols, const int* offsets, const int* lens, int b, int s_cap,
                    float* dst, cudaStream_t stream);

}  // namespace fmha
