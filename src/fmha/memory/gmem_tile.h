// Global -> shared tile copies with cp.async: every thread of the CTA moves 16-byte
// chunks, consecutive threads take consecutive chunks of a row (coalesced), rows past
// the sequence's end and padded head-dim columns are zero-filled in shared memory.
#pragma once

#include "fmha/memory/cp_async.h"
#include "fmha/memory/kv_rows.h"
#include "fmha/memory/smem_layout.h"

namespace fmha {
namespace memory {

// How TileLoader::load_keys issues a paged KV cache's copies: an unrolled loop (decode: more
// registers, fewer instructions), or a rolled loop in a function of its own (flash: the call
// saves the caller's live registers, but costs a kernel at the register limit nothing on the
// token-storage path; inline, the paged path moved its main loop's spills).
enum class PagedCopies { kUnrolled, kCall };

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
    // storage takes load's path; a paged cache looks up each run of rows' block (rows >=
    // valid_rows are neither looked up nor read) in load_paged, issued as kPaged says.
    template <bool kCheckRows, PagedCopies kPaged, typename Element, bool kIsV>
    static FMHA_DEVICE void load_keys(uint32_t smem_base, const Params& p, const KvRows<Element, kIsV>& rows,
                                      int key0, int valid_rows, int tid) {
        using Rows = KvRows<Element, kIsV>;
        if (!Rows::paged(p)) {
            load<kCheckRows>(smem_base, rows.base + int64_t(key0) * Rows::row_stride(p), Rows::row_stride(p),
                             valid_rows, tid);
        } else if constexpr (kPaged == PagedCopies::kCall) {
            load_paged_call<kCheckRows>(smem_base, p, rows, key0, valid_rows, tid);
        } else {
            load_paged<kCheckRows, true>(smem_base, p, rows, key0, valid_rows, tid);  // kUnrolled
        }
    }

    template <bool kCheckRows, typename Element, bool kIsV>
    static __device__ __noinline__ void load_paged_call(uint32_t smem_base, const Params& p,
                                                        const KvRows<Element, kIsV> rows, int key0, int valid_rows,
                                                        int tid) {
        load_paged<kCheckRows, false>(smem_base, p, rows, key0, valid_rows, tid);
    }

    // The tile's keys come in runs that share a block (at most kRows / 16 + 1 of them, blocks
    // being >= 16 tokens): lane i of each warp looks up run i's block id, one coalesced load,
    // and a row's id is a shuffle away (so every lane of the warp must call this). The copies
    // are then issued like token storage's, from an unrolled loop (kUnroll) or a rolled one.
    template <bool kCheckRows, bool kUnroll, typename Element, bool kIsV>
    static FMHA_DEVICE void load_paged(uint32_t smem_base, const Params& p, const KvRows<Element, kIsV>& rows,
                                       int key0, int valid_rows, int tid) {
        using Rows = KvRows<Element, kIsV>;
        static_assert(Layout::kRows / 16 + 1 <= 32, "a run per lane");
        const int tpb = p.tokens_per_block;
        const int shift = __ffs(tpb) - 1;
        const int rows_read = kCheckRows ? min_int(valid_rows, Layout::kRows) : Layout::kRows;
        const int first = key0 >> shift;
        const int runs = rows_read > 0 ? ((key0 + rows_read - 1) >> shift) - first + 1 : 0;
        const int lane = tid % 32;
        const int lane_block = lane < runs ? __ldg(rows.table_row(p) + first + lane) : 0;
        const int64_t stride = Rows::row_stride(p), block_stride = Rows::block_stride(p);
        // row's source (its block id from lane (key >> shift) - first); every lane calls it.
        const auto source = [&](int row, int chunk) {
            const int key = key0 + row;
            const int block = __shfl_sync(0xffffffffu, lane_block, ((key >> shift) - first) & 31);
            return rows.base + int64_t(block) * block_stride + int64_t(key & (tpb - 1)) * stride +
                   chunk * kElemsPerChunk;
        };
        if constexpr (kFixedColumn && kTotal % kThreads == 0) {
            const int chunk = tid % kChunks;
            const int row0 = tid / kChunks;
            const bool col_ok = chunk < kValidChunks;
            const auto copy = [&](int it) {
                const int row = row0 + it * kRowStep;
                const bool ok = col_ok && row < rows_read;
                const Element* src = source(row, chunk);
                cp_async_16(smem_base + Layout::offset(row, chunk), ok ? src : rows.base, ok);
            };
            if constexpr (kUnroll) {
#pragma unroll
                for (int it = 0; it < kIters; ++it) copy(it);
            } else {
#pragma unroll 1
                for (int it = 0; it < kIters; ++it) copy(it);
            }
        } else {
#pragma unroll 1
            for (int it = 0; it < kIters; ++it) {
                const int idx = tid + it * kThreads;
                const int row = idx / kChunks;
                const int chunk = idx % kChunks;
                const Element* src = source(row, chunk);  // every lane, before the guard
                if (kTotal % kThreads == 0 || idx < kTotal) {
                    const bool ok = chunk < kValidChunks && row < rows_read;
                    cp_async_16(smem_base + Layout::offset(row, chunk), ok ? src : rows.base, ok);
                }
            }
        }
    }
};

}  // namespace memory
}  // namespace fmha
