// What a decode unit writes for one query row's 8 columns (a chunk): with one split, O itself
// and the row's LSE; with several, the split's fp32 partial, which the merge (merge.h) reads
// and then writes O the same way.
#pragma once

#include <cstdint>

#include "fmha/softmax/sinks.h"
#include "fmha/softmax/stats.h"
#include "fmha/utils.h"
#include "params.h"

namespace fmha {
namespace decode {

// O[q_off + pos, head, chunk] = o / l * out_scale (scale_softmax * scale_bmm2) in the Element
// type, l with the head's sink added, zeros where l is 0 (no key seen); chunk 0 also writes
// the row's LSE. m: the row's max (log2 units); row: its packed row, at position row / group.
// The tensor-core path and the merge; the warp path normalises as OnlineSoftmax::finalize.
template <class Element>
FMHA_DEVICE void store_o_chunk(const Params& p, int b, int head, int row, int group, int q_off, int chunk, float m,
                               float l, const float (&o)[kElemsPerChunk], float out_scale) {
    l += softmax::sink_term(p, head, m);
    const float inv = l > 0.f ? out_scale / l : 0.f;
    uint32_t packed[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) packed[k] = ElementTraits<Element>::pack(o[2 * k] * inv, o[2 * k + 1] * inv);
    const int pos = row / group;
    if (chunk == 0) softmax::store_lse(p, b, head, pos, m, l);
    Element* dst = static_cast<Element*>(p.o) + int64_t(q_off + pos) * p.o_row_stride +
                   int64_t(head) * p.o_head_stride + chunk * kElemsPerChunk;
    *reinterpret_cast<uint4*>(dst) = make_uint4(packed[0], packed[1], packed[2], packed[3]);
}

// A split's partial of the row at `slot` (shape.h's workspace layout): O unnormalised into
// ws_o ([slot][kDv] floats), and with chunk 0 the row's (max, sum) into ws_ml ([slot][2]).
template <int kDv>
FMHA_DEVICE void store_partial_chunk(float* ws_o, float* ws_ml, int64_t slot, int chunk, float m, float l,
                                     const float (&o)[kElemsPerChunk]) {
    float4* dst = reinterpret_cast<float4*>(ws_o + slot * kDv + chunk * kElemsPerChunk);
    dst[0] = make_float4(o[0], o[1], o[2], o[3]);
    dst[1] = make_float4(o[4], o[5], o[6], o[7]);
    if (chunk == 0) {
        ws_ml[2 * slot] = m;
        ws_ml[2 * slot + 1] = l;
    }
}

}  // namespace decode
}  // namespace fmha
