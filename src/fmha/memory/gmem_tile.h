// Global -> shared tile copies with cp.async: every thread of the CTA moves 16-byte
// chunks, consecutive threads take consecutive chunks of a row (coalesced), rows past
// the sequence's end and padded head-dim columns are zero-filled in shared memory.
#pragma once

#include "fmha/memory/cp_async.h"
#include "fmha/memory/kv_rows.h"
#include "fmha/memory/smem_layout.h"

namespace fmha {
namespace memory {

// Elements of one 16-byte chunk: 8 of fp16 or bf16, 16 of e4m3.
template <typename Element>
FMHA_HOST_DEVICE constexpr int chunk_elems() {
    return kChunkBytes / static_cast<int>(sizeof(Element));
}

// How TileLoader::load_keys issues a paged KV cache's copies: an unrolled loop (decode: more
// registers, fewer instructions), or a rolled loop in a function of its own (flash: the call
// saves the caller's live registers, but costs a kernel at the register limit nothing on the
// token-storage path; inline, the paged path moved its main loop's spills).
enum class PagedCopies { kUnrolled, kCall };

// Layout: the shared tile (SmemLayout). kValidChunks: chunks of a row that exist in global
// memory (head size / 8); chunks past it are padding and read as zeros. kHeads > 1: the
// tile is kHeads such tiles, one per head of heads first, first + 1, ... (head_stride
// elements apart in global memory, Layout::kBytes apart in shared memory), copied as one
// row of kHeads * kChunks chunks per key: where a token's heads are adjacent, each key
// is one contiguous read (the decode family's heads per CTA); heads past `heads` read
// as zeros.
template <class Layout, int kValidChunks, int kThreads, int kHeads = 1>
struct TileLoader {
    static constexpr int kChunks = Layout::kChunks;         // per head
    static constexpr int kRowChunks = kHeads * kChunks;     // a key row across the heads
    static constexpr int kTotal = Layout::kRows * kRowChunks;
    static constexpr int kIters = ceil_div(kTotal, kThreads);
    // With kThreads a multiple of the row's chunk count, a thread keeps one column and
    // walks rows with a fixed stride: no division per chunk.
    static constexpr bool kFixedColumn = kThreads % kRowChunks == 0;
    static constexpr int kRowStep = kFixedColumn ? kThreads / kRowChunks : 0;
    static_assert(kValidChunks <= kChunks, "padding only adds chunks");
    static_assert(kHeads == 1 || (kFixedColumn && kTotal % kThreads == 0), "several heads: a fixed column per thread");

    // This thread's column (kFixedColumn): its head and that head's chunk.
    static FMHA_DEVICE int column_head(int tid) { return kHeads == 1 ? 0 : tid % kRowChunks / kChunks; }
    static FMHA_DEVICE int column_chunk(int tid) { return kHeads == 1 ? tid % kChunks : tid % kRowChunks % kChunks; }

    // gmem: the tile's row 0, column 0; row_stride in elements. Rows >= valid_rows are
    // zero-filled (only checked when kCheckRows), and so are chunks >= valid_chunks (a head
    // size below the tile's, known at run time). The caller commits the group.
    template <bool kCheckRows, typename Element>
    static FMHA_DEVICE void load(uint32_t smem_base, const Element* gmem, int64_t row_stride,
                                 int valid_rows, int tid, int64_t head_stride = 0, int heads = 1,
                                 int valid_chunks = kValidChunks) {
        if constexpr (kFixedColumn) {
            const int head = column_head(tid);
            const int chunk = column_chunk(tid);
            const int row0 = tid / kRowChunks;
            const bool col_ok = chunk < valid_chunks && (kHeads == 1 || head < heads);
            const Element* src = gmem + head * head_stride + row0 * row_stride + chunk * chunk_elems<Element>();
            smem_base += static_cast<uint32_t>(head * Layout::kBytes);
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
                    const bool ok = chunk < valid_chunks && (!kCheckRows || row < valid_rows);
                    const Element* src = gmem + row * row_stride + chunk * chunk_elems<Element>();
                    cp_async_16(smem_base + Layout::offset(row, chunk), ok ? src : gmem, ok);
                }
            }
        }
    }

    // As load, for the key rows key0, key0 + 1, ... of `rows` (memory/kv_rows.h): token
    // storage takes load's path; a paged cache looks up each run of rows' block (rows >=
    // valid_rows are neither looked up nor read) in load_paged, issued as kPaged says.
    // kHeads > 1: `rows` are the first head's, `heads` of the tile's heads exist.
    template <bool kCheckRows, PagedCopies kPaged, typename Element, bool kIsV>
    static FMHA_DEVICE void load_keys(uint32_t smem_base, const Params& p, const KvRows<Element, kIsV>& rows,
                                      int key0, int valid_rows, int tid, int heads = 1) {
        using Rows = KvRows<Element, kIsV>;
        if (!Rows::paged(p)) {
            load<kCheckRows>(smem_base, rows.base + int64_t(key0) * Rows::row_stride(p), Rows::row_stride(p),
                             valid_rows, tid, kHeads == 1 ? 0 : Rows::head_stride(p), heads);
        } else if constexpr (kPaged == PagedCopies::kCall) {
            static_assert(kHeads == 1, "several heads: unrolled paged copies");
            load_paged_call<kCheckRows>(smem_base, p, rows, key0, valid_rows, tid);
        } else {
            load_paged<kCheckRows, true>(smem_base, p, rows, key0, valid_rows, tid, heads);  // kUnrolled
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
                                       int key0, int valid_rows, int tid, int heads = 1) {
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
                   chunk * chunk_elems<Element>();
        };
        if constexpr (kFixedColumn && kTotal % kThreads == 0) {
            const int head = column_head(tid);
            const int chunk = column_chunk(tid);
            const int row0 = tid / kRowChunks;
            const bool col_ok = chunk < kValidChunks && (kHeads == 1 || head < heads);
            const int64_t head_off = kHeads == 1 ? 0 : head * Rows::head_stride(p);
            const uint32_t dst = smem_base + static_cast<uint32_t>(head * Layout::kBytes);
            const auto copy = [&](int it) {
                const int row = row0 + it * kRowStep;
                const bool ok = col_ok && row < rows_read;
                const Element* src = source(row, chunk) + head_off;
                cp_async_16(dst + Layout::offset(row, chunk), ok ? src : rows.base, ok);
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
