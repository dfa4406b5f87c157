// Global -> shared tile copies with cp.async: every thread of the CTA moves 16-byte
// chunks, consecutive threads take consecutive chunks of a row (coalesced), rows past
// the sequence's end and padded head-dim columns are zero-filled in shared memory.
#pragma once

#include "fmha/memory/cp_async.h"
#include "fmha/memory/kv_rows.h"
#include "fmha/memory/smem_layout.h"

namespace fmha {
namespace memory {

// Layout: the shared tile (SmemLayout). kValidChunks: chunks of a row that exist in global
// memory (head size / 8); chunks past it are padding and read as zeros.
template <class Layout, int kValidChunks, int kThreads>
struct TileLoader {
    static constexpr int kChunks = Layout::kChunks;
    static constexpr int kTotal = Layout::kRows * kChunks;
    static constexpr int kIters = ceil_div(kTotal, kThreads);
    // With kThreads a multiple of the row's chunk count, a thread keeps one column and
    // walks rows with a fixed stride: no division per chunk.
    static constexpr bool kFixedColumn = kThreads % kChunks == 0;
    static constexpr int kRowStep = kFixedColumn ? kThreads / kChunks : 0;
    static_assert(kValidChunks <= kChunks, "padding only adds chunks");

    // gmem: the tile's row 0, column 0; row_stride in elements. Rows >= valid_rows are
    // zero-filled (only checked when kCheckRows). The caller commits the group.
    template <bool kCheckRows, typename Element>
    static FMHA_DEVICE void load(uint32_t smem_base, const Element* gmem, int64_t row_stride,
                                 int valid_rows, int tid) {
        if constexpr (kFixedColumn) {
            const int chunk = tid % kChunks;
            const int row0 = tid / kChunks;
            const bool col_ok = chunk < kValidChunks;
            const Element* src = gmem + row0 * row_stride + chunk * kElemsPerChunk;
            const int64_t step = kRowStep * row_stride;
#pragma unroll
            for (int it = 0; it < kIters; ++it) {
                const int row = row0 + it * kRowStep;
                if (kTotal % kThreads == 0 || row < Layout::kRows) {
                    const bool ok = col_ok && (!kCheckRows || row < valid_rows);
                    cp_async_16(smem_base + Layout::offset(row, chunk), ok ? src : gmem, ok);
                }
                src += step;
            }
        } else {
#pragma unroll
            for (int it = 0; it < kIters; ++it) {
                const int idx = tid + it * kThreads;
                const int row = idx / kChunks;
                const int chunk = idx % kChunks;
                if (kTotal % kThreads == 0 || idx < kTotal) {
                    const bool ok = chunk < kValidChunks && (!kCheckRows || row < valid_rows);
                    const Element* src = gmem + row * row_stride + chunk * kElemsPerChunk;
                    cp_async_16(smem_base + Layout::offset(row, chunk), ok ? src : gmem, ok);
                }
            }
        }
    }

    // As load, for the key rows key0, key0 + 1, ... of `rows` (memory/kv_rows.h): token
    // storage takes load's path; a paged cache looks up each row's block (rows >= valid_rows
    // are neither looked up nor read) in load_paged.
    template <bool kCheckRows, typename Element, bool kIsV>
    static FMHA_DEVICE void load_keys(uint32_t smem_base, const KvRows<Element, kIsV>& rows, int key0,
                                      int valid_rows, int tid) {
        if (!rows.paged()) {
            load<kCheckRows>(smem_base, rows.base + int64_t(key0) * rows.row_stride(), rows.row_stride(), valid_rows,
                             tid);
        } else {
            load_paged<kCheckRows>(smem_base, rows, key0, valid_rows, tid);
        }
    }

    // Not inlined and not unrolled: the kernels that call load_keys run their main loops at
    // the register limit, and the paged path then costs them no registers there (the
    // cp.asyncs do not wait, so the rolled loop only adds a table lookup per row to the issue).
    template <bool kCheckRows, typename Element, bool kIsV>
    static __device__ __noinline__ void load_paged(uint32_t smem_base, const KvRows<Element, kIsV> rows, int key0,
                                                   int valid_rows, int tid) {
#pragma unroll 1
        for (int it = 0; it < kIters; ++it) {
            const int idx = tid + it * kThreads;
            const int row = idx / kChunks;
            const int chunk = idx % kChunks;
            if (kTotal % kThreads == 0 || idx < kTotal) {
                const bool ok = chunk < kValidChunks && (!kCheckRows || row < valid_rows);
                const Element* src = ok ? rows.row(key0 + row) + chunk * kElemsPerChunk : rows.base;
                cp_async_16(smem_base + Layout::offset(row, chunk), src, ok);
            }
        }
    }
};

}  // namespace memory
}  // namespace fmha
