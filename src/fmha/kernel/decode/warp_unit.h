// The warp path's units: where a warp unit (sequence b, KV head g, tile of kRows rows, key
// split) sits, and its loads of Q, K and V as raw 16-byte chunks, one chunk a lane. The
// kernels that run them: warp_kernel.h.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>

#include "fmha/kernel/decode/shape.h"
#include "fmha/mask/mask.h"
#include "fmha/seq_lens.h"
#include "fmha/utils.h"
#include "params.h"

namespace fmha {
namespace decode {

// One 16-byte chunk through the read-only path; zeros where !valid (nothing read).
FMHA_DEVICE uint4 load_raw(const void* src, bool valid) {
    return valid ? __ldg(static_cast<const uint4*>(src)) : make_uint4(0, 0, 0, 0);
}

// A chunk's 8 elements (bf16 or fp16 as `bf16` says) as floats.
FMHA_DEVICE void to_float(float (&x)[kElemsPerChunk], uint4 raw, bool bf16) {
    const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        float2 f;
        if (bf16) {
            __nv_bfloat162 b;
            memcpy(&b, &w[i], 4);
            f = __bfloat1622float2(b);
        } else {
            __half2 h;
            memcpy(&h, &w[i], 4);
            f = __half22float2(h);
        }
        x[2 * i] = f.x;
        x[2 * i + 1] = f.y;
    }
}

// Where a warp unit sits; the same for both warp kernels.
struct WarpUnit {
    int b, g, split;
    int64_t item;
    int q_len, kv_len, rows, row0;
    int key_begin, key_end;  // this split's keys: a slice of mask::sequence_keys
    int q_off, kv_off;
    bool live;  // false: the tile is past the sequence's rows, or the split past its keys
};

// The warp path's divisors, built on the host (FastDiv: the unit -> (b, g, row tile, split)
// and row -> (head, position) decompositions run once or twice per unit, and a division is
// a ~20-instruction sequence where the tiny caches leave ~300 instructions per unit).
struct UnitDivs {
    FastDiv splits, row_tiles, h_kv, group;
};

inline UnitDivs unit_divs(const Params& p, const Shape& s) {
    return UnitDivs{FastDiv(s.splits), FastDiv(s.row_tiles), FastDiv(p.h_kv), FastDiv(s.group)};
}

// unit < 2^31 (the launch checks the unit count).
template <class Tr, mask::Kind kMask>
FMHA_DEVICE WarpUnit warp_unit(const Params& p, const Shape& shape, const UnitDivs& divs, int unit) {
    WarpUnit u;
    const int item_tile = divs.splits.div(unit);
    u.split = divs.splits.mod(unit, item_tile);
    const int item = divs.row_tiles.div(item_tile);
    const int row_tile = divs.row_tiles.mod(item_tile, item);
    u.item = item;
    u.b = divs.h_kv.div(item);
    u.g = divs.h_kv.mod(item, u.b);
    u.q_len = seq_q_len(p, u.b);
    u.kv_len = seq_kv_len(p, u.b);
    u.rows = shape.group * u.q_len;
    u.row0 = row_tile * Tr::kRows;
    const mask::KeyRange keys = mask::sequence_keys<kMask>(p, u.q_len, u.kv_len);
    u.key_begin = keys.first + u.split * shape.keys_per_split;
    u.key_end = min_int(keys.last, u.key_begin + shape.keys_per_split);
    u.q_off = seq_q_offset(p, u.b);
    u.kv_off = seq_kv_offset(p, u.b);
    // A split past the sequence's keys writes nothing; the combine reads only live splits.
    // (With one split the unit always runs: a sequence without keys gets zero rows.)
    u.live = u.row0 < u.rows && !(shape.splits > 1 && u.key_begin >= keys.last);
    return u;
}

// One warp unit's loads in flight: this lane's 16-byte chunk of its Q rows and of one
// step's K and V rows (kPasses passes), unconverted (4 registers a chunk).
template <class Tr, int kPasses>
struct WarpLoads {
    uint4 q[Tr::kRows];
    uint4 k[kPasses];
    uint4 v[kPasses];
};

template <class Tr>
FMHA_DEVICE void load_q(uint4 (&q)[Tr::kRows], const Params& p, const Shape& shape, const FastDiv& group,
                        const WarpUnit& u, int sub) {
    using Element = typename Tr::Element;
#pragma unroll
    for (int r = 0; r < Tr::kRows; ++r) {
        const int row = u.row0 + r;
        const bool valid = row < u.rows;
        const int pos = valid ? group.div(row) : 0;
        const int head = u.g * shape.group + (valid ? group.mod(row, pos) : 0);
        q[r] = load_raw(static_cast<const Element*>(p.q) + int64_t(u.q_off + pos) * p.q_row_stride +
                            int64_t(head) * p.q_head_stride + sub * kElemsPerChunk,
                        valid);
    }
}

// The key a lane holds in pass i of the step at k0: the warp's key groups interleave
// (k0 + i * kKeysPerPass + grp), or, kPerGroup (every lane group works a unit of its own),
// the group walks the keys alone (k0 + i).
template <class Tr, bool kPerGroup>
FMHA_DEVICE int pass_key(int k0, int i, int grp) {
    return kPerGroup ? k0 + i : k0 + i * Tr::kKeysPerPass + grp;
}

// The keys of the step at k0, kPasses passes (zeros past the unit's keys).
template <class Tr, int kPasses, bool kPerGroup = false>
FMHA_DEVICE void load_kv(uint4 (&k)[kPasses], uint4 (&v)[kPasses], const Params& p, const WarpUnit& u,
                         int k0, int sub, int grp) {
    using Element = typename Tr::Element;
    const Element* k_base = static_cast<const Element*>(p.k) + int64_t(u.g) * p.k_head_stride + sub * kElemsPerChunk;
    const Element* v_base = static_cast<const Element*>(p.v) + int64_t(u.g) * p.v_head_stride + sub * kElemsPerChunk;
    if (p.kv_block_table != nullptr) {  // paged KV cache: each key's block from the table
        const int* table = p.kv_block_table + int64_t(u.b) * p.kv_table_stride;
        const int shift = __ffs(p.tokens_per_block) - 1;
#pragma unroll
        for (int i = 0; i < kPasses; ++i) {
            const int key = pass_key<Tr, kPerGroup>(k0, i, grp);
            const bool valid = key < u.key_end;
            const int64_t block = valid ? __ldg(table + (key >> shift)) : 0;
            const int64_t in_block = valid ? key & (p.tokens_per_block - 1) : 0;
            k[i] = load_raw(k_base + block * p.k_block_stride + in_block * p.k_row_stride, valid);
            v[i] = load_raw(v_base + block * p.v_block_stride + in_block * p.v_row_stride, valid);
        }
        return;
    }
#pragma unroll
    for (int i = 0; i < kPasses; ++i) {
        const int key = pass_key<Tr, kPerGroup>(k0, i, grp);
        const bool valid = key < u.key_end;
        const int64_t row = u.kv_off + (valid ? key : 0);
        k[i] = load_raw(k_base + row * p.k_row_stride, valid);
        v[i] = load_raw(v_base + row * p.v_row_stride, valid);
    }
}

}  // namespace decode
}  // namespace fmha
