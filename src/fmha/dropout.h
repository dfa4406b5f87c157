// Dropout's mask (issue #33): whether the forward with dropout keeps the probability of query
// row q and key k (both within their sequence) of one (batch, query head), as a function of
// those coordinates and the caller's (seed, offset) alone. The backward regenerates the
// forward's mask bit for bit whatever either kernel's tiling, and the references draw the same
// one from this header (it compiles for the host without CUDA too: tests/test_dropout.py).
//
// One Philox4x32-10 call (Salmon, Moraes, Dror, Shaw, SC 2011; counter-based, 10 rounds)
// gives 128 bits: 16 bits each for 8 (query, key) pairs, the group of
//   queries {q0, q0 + 8} x keys {k0, k0 + 1, k0 + 8, k0 + 9}   (q0 % 16 < 8; k0 even, k0 % 16 < 8),
// which is what one thread holds of an m16n8 accumulator pair: an mma.sync or wgmma S tile
// (rows = queries) gets all eight from one call; the backward's S^T tiles (rows = keys) hold
// half of two groups and swap halves with a neighbour lane (transposed_bits). The call's
// counter is (key group, query group, batch * h + head, low word of offset), its key the seed
// with the offset's high word folded in. Word j of the output holds the pairs (q0 + 8 (j / 2),
// k0 + 8 (j % 2) + {0, 1}), the lower 16 bits the even key. A pair is kept iff its 16 bits are
// >= threshold = round(p 2^16): p is used as a multiple of 2^-16, and the kept values are
// scaled by 2^16 / (2^16 - threshold), so the expectation is exact.
#pragma once

#include <cstdint>

#ifdef __CUDACC__
#define FMHA_DROPOUT_FN __host__ __device__ __forceinline__
#else
#define FMHA_DROPOUT_FN inline
#endif

namespace fmha {
namespace dropout {

constexpr int kRounds = 10;

// A problem's dropout, made once on the host (make): off where threshold == 0. The key
// schedule is stored whole so that a kernel reads each round's key from its parameters
// (constant memory) instead of adding it up: 20 instructions of ~90 a call.
struct Dropout {
    uint32_t threshold = 0;  // round(p 2^16), <= 2^16 - 1
    uint32_t offset = 0;     // the counter's fourth word
    float rescale = 1.f;     // 2^16 / (2^16 - threshold)
    uint32_t key[kRounds][2] = {};  // round r's key: (key0 + r W0, key1 + r W1)
};

struct Philox4 {
    uint32_t x, y, z, w;
};

// Philox4x32-10 of counter c under d's key schedule.
FMHA_DROPOUT_FN Philox4 philox(Philox4 c, const Dropout& d) {
    constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;  // the round multipliers
#ifdef __CUDA_ARCH__
#pragma unroll
#endif
    for (int round = 0; round < kRounds; ++round) {
        const uint64_t p0 = static_cast<uint64_t>(kM0) * c.x, p1 = static_cast<uint64_t>(kM1) * c.z;
        c = Philox4{static_cast<uint32_t>(p1 >> 32) ^ c.y ^ d.key[round][0], static_cast<uint32_t>(p1),
                    static_cast<uint32_t>(p0 >> 32) ^ c.w ^ d.key[round][1], static_cast<uint32_t>(p0)};
    }
    return c;
}

// p in [0, 1) (larger values clamp to the largest threshold); seed and offset as the caller
// keeps them (the package: a CPU draw per call; fmha.exe: -seed and 0).
inline Dropout make(float p, uint64_t seed, uint64_t offset) {
    constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;  // the key schedule's increments
    Dropout d;
    const double t = p > 0.f ? static_cast<double>(p) * 65536.0 + 0.5 : 0.0;
    d.threshold = t >= 65535.0 ? 65535u : static_cast<uint32_t>(t);
    d.offset = static_cast<uint32_t>(offset);
    d.rescale = static_cast<float>(65536.0 / (65536.0 - d.threshold));
    uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32) ^ static_cast<uint32_t>(offset >> 32);
    for (int r = 0; r < kRounds; ++r, k0 += kW0, k1 += kW1) d.key[r][0] = k0, d.key[r][1] = k1;
    return d;
}

// The Philox words of the group that holds (q, k). bh = batch * h + head.
FMHA_DROPOUT_FN Philox4 group_words(const Dropout& d, uint32_t bh, uint32_t q, uint32_t k) {
    const uint32_t q_group = (q >> 4) << 3 | (q & 7u);
    const uint32_t k_group = (k >> 4) << 2 | (k >> 1 & 3u);
    return philox(Philox4{k_group, q_group, bh, d.offset}, d);
}

// The keep bits of the group that holds (q, k): bit 4 (q / 8 % 2) + 2 (k / 8 % 2) + k % 2
// (word j's halves are bits 2 j, 2 j + 1).
FMHA_DROPOUT_FN uint32_t group_bits(const Dropout& d, uint32_t bh, uint32_t q, uint32_t k) {
    const Philox4 r = group_words(d, bh, q, k);
    const uint32_t words[4] = {r.x, r.y, r.z, r.w};
    uint32_t bits = 0;
#ifdef __CUDA_ARCH__
#pragma unroll
#endif
    for (int i = 0; i < 8; ++i) {
        const uint32_t u = (words[i / 2] >> (16 * (i % 2))) & 0xffffu;
        bits |= static_cast<uint32_t>(u >= d.threshold) << i;
    }
    return bits;
}

// The bit of (q, k) in its group's bits.
FMHA_DROPOUT_FN int bit_of(uint32_t q, uint32_t k) {
    return static_cast<int>(4 * (q >> 3 & 1u) + 2 * (k >> 3 & 1u) + (k & 1u));
}

// Whether (q, k) of (batch, head) bh is kept (the references' one-at-a-time form).
FMHA_DROPOUT_FN bool keep(const Dropout& d, uint32_t bh, uint32_t q, uint32_t k) {
    return (group_bits(d, bh, q, k) >> bit_of(q, k) & 1u) != 0;
}

#ifdef __CUDACC__
// Drops from a packed m16n8k16 A fragment of 16-bit P (mma::s_to_p's order: rows q0 and q0 + 8
// of keys k0 + {0, 1}, then of keys k0 + {8, 9}) what the group of (q0, k0) drops: each word's
// two 16-bit values against the threshold at once (0xffff where kept), ANDed into the pair
// they belong to (a 16-bit zero is +0 in fp16 and bf16).
__device__ __forceinline__ void drop_fragment(uint32_t (&a)[4], const Dropout& d, uint32_t bh, uint32_t q0,
                                              uint32_t k0) {
    const Philox4 r = group_words(d, bh, q0, k0);
    const uint32_t t2 = d.threshold * 0x10001u;
    a[0] &= __vcmpgeu2(r.x, t2);  // row q0, keys k0 + {0, 1}
    a[1] &= __vcmpgeu2(r.z, t2);  // row q0 + 8
    a[2] &= __vcmpgeu2(r.y, t2);  // row q0, keys k0 + {8, 9}
    a[3] &= __vcmpgeu2(r.w, t2);  // row q0 + 8
}

// The backward's S^T tiles (rows = keys, an m16n8 accumulator pair): a lane holds keys key0 +
// {0, 8} (key0 % 16 < 8, key0 % 2 = lane / 4 % 2) and queries q + {0, 1} (q % 16 < 8 even; + 8
// in the next n-tile). The groups of queries q and q + 1 each lie half in this lane, half in
// lane ^ 4 (key0 ^ 1): each lane draws one and the pair swaps them, one Philox call a lane as
// in the forward. bits[e]: the group of query q + e. Every lane of the warp calls it.
__device__ __forceinline__ void transposed_bits(const Dropout& d, uint32_t bh, uint32_t q, uint32_t key0,
                                                uint32_t (&bits)[2]) {
    const bool odd = (key0 & 1u) != 0;  // this lane draws the group of query q + odd
    const uint32_t own = group_bits(d, bh, q + (odd ? 1u : 0u), key0);
    const uint32_t other = __shfl_xor_sync(0xffffffffu, own, 4);
    bits[0] = odd ? other : own;
    bits[1] = odd ? own : other;
}
#endif

}  // namespace dropout
}  // namespace fmha
