// What the run's device tensors hold before a launch: random values from the counter-based
// RNG (rng.h), as -seed, -range-*, -scale-*, -randn and -1s choose, and the poison of memory
// that a kernel must leave alone.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cli.h"
#include "layouts.h"
#include "params.h"
#include "rng.h"

namespace fmha {

// A NaN in both fp16 and bf16 (exponent bits all set in both encodings, mantissa not
// zero) that neither format produces as its canonical NaN (0x7fff / 0x7fc0), so a
// kernel that writes a NaN still shows up as "touched".
constexpr uint16_t kPoisonBits = 0x7fa5;
// e4m3's one NaN (S.1111.111): an e4m3 pool's spare blocks.
constexpr uint8_t kPoisonBitsE4m3 = 0x7f;
// The softmax statistics' poison (-save-softmax): a float NaN no kernel computes.
constexpr uint32_t kPoisonLseBits = 0x7fa5a5a5u;

// Fills the rows within the lengths of one [token, head, col] view of Q, K or V (p.dtype:
// e4m3 rounds the same values to nearest, saturating),
// sequence i's at offsets[i] (device arrays), s_cap positions a sequence at most.
void fill_view(const Problem& p, const View& v, const int* offsets, const int* lens, int s_cap,
               RngStream stream, float range, float scale);

// Fills n elements of a flat fp16 / bf16 tensor, element i with the RNG's value i.
void fill_flat(DataType type, uint16_t* data, int64_t n, const FillSpec& f);

// Writes the poison `bits` over n elements.
void poison(uint8_t* data, int64_t n, uint8_t bits, cudaStream_t stream = nullptr);
void poison(uint16_t* data, int64_t n, uint16_t bits, cudaStream_t stream = nullptr);
void poison(uint32_t* data, int64_t n, uint32_t bits, cudaStream_t stream = nullptr);

}  // namespace fmha
