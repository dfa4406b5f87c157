// The decode units of a problem, the same on host and device: the rows of one (sequence b,
// KV head g) item, the unit grid (b, head group, row tile, key split), and where the splits'
// partials and arrival counters sit in Params::workspace.
#pragma once

#include <cstddef>
#include <cstdint>

#include "fmha/mask/mask.h"
#include "fmha/seq_lens.h"
#include "fmha/utils.h"
#include "params.h"

namespace fmha {
namespace decode {

// Rows of one (b, g) item and the unit grid.
struct Shape {
    int group;      // query heads per KV head, G
    int rows_max;   // G * s_q_max
    int row_tiles;  // ceil(rows_max / kRows)
    int head_groups;  // ceil(h_kv / kHeads): the units' KV heads g = group * kHeads + 0 .. kHeads - 1
    int splits;     // key splits
    int keys_per_split;
    int64_t units;  // b * head_groups * row_tiles * splits
};

template <class Tr>
FMHA_HOST_DEVICE Shape make_shape(const Params& p, int splits) {
    Shape s;
    s.group = p.h / p.h_kv;
    s.rows_max = s.group * p.s_q_max;
    s.row_tiles = ceil_div(s.rows_max, Tr::kRows);
    s.head_groups = ceil_div(p.h_kv, Tr::kHeads);
    s.splits = splits;
    s.keys_per_split = round_up(ceil_div(max_int(mask::key_span_max(p), 1), splits), Tr::kBlockN);
    s.units = int64_t(p.b) * s.head_groups * s.row_tiles * splits;
    return s;
}

// Workspace layout. The mma path first keeps one arrival counter per (item, row tile)
// (the CTA that completes a tile's splits merges them; the driver hands the workspace over
// zeroed and that CTA puts its counter back to 0), padded to 256 bytes. Then the fp32
// partials of a split: [item_row][split][dv] for O, [item_row][split][2] for (max, sum),
// item_row = (b * h_kv + g) * row_tiles * kRows + row.
template <class Tr>
FMHA_HOST_DEVICE size_t counter_bytes(const Params& p, const Shape& s) {
    return Tr::kMma ? (size_t(p.b) * p.h_kv * s.row_tiles * sizeof(int) + 255) / 256 * 256 : 0;
}

template <class Tr>
inline size_t partial_bytes(const Params& p, int splits) {
    const Shape s = make_shape<Tr>(p, splits);
    const size_t item_rows = size_t(p.b) * p.h_kv * s.row_tiles * Tr::kRows;
    return counter_bytes<Tr>(p, s) + item_rows * splits * (size_t(Tr::kHeadDimV) + 2) * sizeof(float);
}

template <class Tr>
FMHA_DEVICE float* partials(const Params& p, const Shape& s) {
    return reinterpret_cast<float*>(static_cast<char*>(p.workspace) + counter_bytes<Tr>(p, s));
}

// Splits that start inside a sequence's keys (mask::sequence_keys); 0 when it has none.
FMHA_DEVICE int live_splits(const Shape& shape, const mask::KeyRange& keys) {
    return ceil_div(max_int(0, keys.last - keys.first), shape.keys_per_split);
}

FMHA_DEVICE int live_splits(const Params& p, const Shape& shape, int b) {
    return live_splits(shape, mask::sequence_keys(p, seq_q_len(p, b), seq_kv_len(p, b)));
}

}  // namespace decode
}  // namespace fmha
