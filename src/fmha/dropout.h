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
// (rows = queries) gets all eight from one call; the backward's S^T tiles (rows = keys) get
// four of a call's eight. The call's counter is (key group, query group, batch * h + head,
// low word of offset), its key the seed with the offset's high word folded in. A pair is kept
// iff its 16 bits are >= threshold = round(p 2^16): p is used as a multiple of 2^-16, and the
// kept values are scaled by 2^16 / (2^16 - threshold), so the expectation is exact.
#pragma once

#include <cstdint>

#ifdef __CUDACC__
#define FMHA_DROPOUT_FN __host__ __device__ __forceinline__
#else
#define FMHA_DROPOUT_FN inline
#endif

namespace fmha {
namespace dropout {

struct Philox4 {
    uint32_t x, y, z, w;
};

FMHA_DROPOUT_FN uint32_t mul_hi(uint32_t a, uint32_t b) {
#ifdef __CUDA_ARCH__
    return __umulhi(a, b);
#else
    return static_cast<uint32_t>((static_cast<uint64_t>(a) * b) >> 32);
#endif
}

// Philox4x32 with 10 rounds of counter c under key (k0, k1).
FMHA_DROPOUT_FN Philox4 philox(Philox4 c, uint32_t k0, uint32_t k1) {
    constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;  // the round multipliers
    constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;  // the key schedule's increments
#ifdef __CUDA_ARCH__
#pragma unroll
#endif
    for (int round = 0; round < 10; ++round) {
        const uint32_t hi0 = mul_hi(kM0, c.x), lo0 = kM0 * c.x;
        const uint32_t hi1 = mul_hi(kM1, c.z), lo1 = kM1 * c.z;
        c = Philox4{hi1 ^ c.y ^ k0, lo1, hi0 ^ c.w ^ k1, lo0};
        k0 += kW0, k1 += kW1;
    }
    return c;
}

// A problem's dropout: off where threshold == 0 (p = 0).
struct Dropout {
    uint32_t threshold = 0;  // round(p 2^16), <= 2^16 - 1
    uint32_t key0 = 0, key1 = 0;
    uint32_t offset = 0;  // the counter's fourth word
    float rescale = 1.f;  // 2^16 / (2^16 - threshold)
};

// p in [0, 1) (larger values clamp to the largest threshold); seed and offset as the caller
// keeps them (torch: its CUDA generator's).
FMHA_DROPOUT_FN Dropout make(float p, uint64_t seed, uint64_t offset) {
    Dropout d;
    const double t = p > 0.f ? static_cast<double>(p) * 65536.0 + 0.5 : 0.0;
    d.threshold = t >= 65535.0 ? 65535u : static_cast<uint32_t>(t);
    d.key0 = static_cast<uint32_t>(seed);
    d.key1 = static_cast<uint32_t>(seed >> 32) ^ static_cast<uint32_t>(offset >> 32);
    d.offset = static_cast<uint32_t>(offset);
    d.rescale = static_cast<float>(65536.0 / (65536.0 - d.threshold));
    return d;
}

// The keep bits of the group that holds (q, k): bit 4 (q / 8 % 2) + 2 (k / 8 % 2) + k % 2.
// bh = batch * h + head.
FMHA_DROPOUT_FN uint32_t group_bits(const Dropout& d, uint32_t bh, uint32_t q, uint32_t k) {
    const uint32_t q_group = (q >> 4) << 3 | (q & 7u);
    const uint32_t k_group = (k >> 4) << 2 | (k >> 1 & 3u);
    const Philox4 r = philox(Philox4{k_group, q_group, bh, d.offset}, d.key0, d.key1);
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

#ifdef __CUDACC__
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

// Whether (q, k) of (batch, head) bh is kept (the references' one-at-a-time form).
FMHA_DROPOUT_FN bool keep(const Dropout& d, uint32_t bh, uint32_t q, uint32_t k) {
    return (group_bits(d, bh, q, k) >> bit_of(q, k) & 1u) != 0;
}

}  // namespace dropout
}  // namespace fmha
