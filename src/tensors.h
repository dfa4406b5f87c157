// Everything on the device for one run, put together from the layout's storage (layouts.h),
// the random inputs (inputs.h), the variants' tensors (variants.h) and the paged pool
// (paged_kv.h), with the Params that point into it.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "cli.h"
#include "device_buffer.h"
#include "inputs.h"
#include "layouts.h"
#include "paged_kv.h"
#include "params.h"
#include "variants.h"

namespace fmha {

struct DeviceTensors {
    QkvStorage storage;          // Q, K, V in the layout's storage (-paged-kv: the logical K/V)
    PagedKvTensors paged;        // -paged-kv: the pool the kernel reads K and V from
    DeviceBuffer<uint16_t> o;    // [kGuardRows + tokens_q + kGuardRows, h, dv]
    DeviceBuffer<int> q_offsets, q_lens, kv_offsets, kv_lens;
    DeviceBuffer<int> tile_counter;  // Params::tile_counter: every launch runs on one stream
    DeviceBuffer<float> lse;         // -save-softmax: Params::softmax_lse, [b, h, s_q_max]
    VariantTensors variants;
    Params params;   // what the kernel reads
    // What the reference and -save-tensors read: params with K and V in token storage (the
    // logical K/V that -paged-kv's pool was built from); == params for the other layouts.
    Params logical;
};

// Allocates the layout's buffers, sets Params (everything but num_sms) and fills Q, K, V
// from the counter-based RNG. O is not filled: call poison_output before each checked run.
DeviceTensors make_tensors(const Problem& p, const SeqLens& lens);

// The input sets the timed launches cycle through: t.params first, then copies of Q, K and V
// (owned by `copies`) until one pass over them is at least twice the L2, at most
// kMaxTimingSets. Back-to-back launches over one set that fits in L2 would time the cache,
// not the memory a real model's inputs come from (the SDPA side of bench/run.py rotates too).
constexpr int kMaxTimingSets = 8;
std::vector<Params> timing_input_sets(const DeviceTensors& t, size_t l2_bytes,
                                      std::vector<DeviceBuffer<uint8_t>>* copies);

// Writes kPoisonBits over the whole O allocation, guard rows included (e4m3 O: kPoisonBitsE4m3
// on every byte), and kPoisonLseBits over the softmax statistics when the run saves them.
void poison_output(const Problem& p, DeviceTensors& t, cudaStream_t stream);

}  // namespace fmha
