// The driver's counter-based RNG: every random number is a hash of (seed, stream, index).
// A value depends on its logical index only, so one -seed gives the same inputs in every
// layout, storage mode and launch geometry, and host and device draw the same numbers.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace fmha {

constexpr float kInv2Pow24 = 1.0f / 16777216.0f;

// Each tensor (and the lengths) draws from its own stream.
enum RngStream : uint64_t {
    kStreamQ = 1,
    kStreamK = 2,
    kStreamV = 3,
    kStreamLens = 4,
    kStreamSinks = 5,
    kStreamBias = 6,
    kStreamMask = 7,
    kStreamPages = 8,     // -paged-kv: the pool's block order
    kStreamPageTail = 9,  // -paged-kv: the rows of a last block past the sequence's length
    kStreamDO = 10        // -bwd: dL/dO
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
__host__ __device__ inline float unit_float(uint64_t bits) {
    return static_cast<float>(bits >> 40) * kInv2Pow24;
}

// How a fill draws (-range-*, -scale-*, -randn, -1s): uniform in [-range, range] or normal
// with std range, times scale; with `ones`, scale everywhere.
struct FillSpec {
    uint64_t seed, stream;
    float range, scale;
    bool ones, randn;
};

#ifdef __CUDACC__
__device__ inline float random_value(const FillSpec& f, uint64_t index) {
    constexpr float kTwoPi = 6.28318530717958647692f;
    if (f.ones) return f.scale;
    const uint64_t h1 = hash(f.seed, f.stream, index);
    if (!f.randn) return (2.f * unit_float(h1) - 1.f) * f.range * f.scale;
    // Box-Muller from two hashes; u1 in (0, 1] keeps the log finite.
    const float u1 = 1.f - unit_float(h1);
    const float u2 = unit_float(mix64(h1));
    return sqrtf(-2.f * logf(u1)) * cosf(kTwoPi * u2) * f.range * f.scale;
}
#endif

}  // namespace fmha
