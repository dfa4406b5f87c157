// TMA (SM90 bulk tensor copies): host-side tensor maps and the device-side loads.
//
// Host: CUtensorMaps are encoded with cuTensorMapEncodeTiled, reached through the
// runtime's driver entry point (cudaGetDriverEntryPointByVersion), so nothing links
// libcuda. Maps travel to the kernel by value inside a __grid_constant__ parameter.
//
// Head tiles: every Q/K/V tensor is addressed as base + token*row_stride + head*head_stride
// + col (params.h). A [rows, d] tile of one head lands in shared memory as d/64 column
// panels of [rows, 64] with the 128-byte swizzle, panel after panel: the canonical
// K-major SW128 layout that wgmma reads (mma/wgmma_sm90.h). One 4D box gives all of it:
//   dim0 = 64 columns (contiguous), dim1 = token (row_stride), dim2 = panel (128 bytes),
//   dim3 = head (head_stride); box {64, rows, d/64, 1}.
// Rows past the token extent read as zeros; rows inside the extent but past a
// sequence's end are the next sequence's data, which the kernel must mask.
// A head size that ends inside a panel (d % 64 != 0: 40, 72, ..., 160) cannot split its
// columns into a panel dimension, so its map is 3D, dim0 = d columns (the extent), and the
// tile is loaded one panel at a time at column 64c: the columns past d read as zeros, which
// is what wgmma needs (Q K^T's k16 steps then run over ceil(d / 16) * 16 columns, P V's N
// over whole panels whose extra columns are never stored).
#pragma once

#include <cuda.h>  // CUtensorMap and its enums only: no libcuda symbol is referenced
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "fmha/utils.h"

namespace fmha {
namespace memory {

constexpr int kTmaPanelCols = 64;      // 16-bit elements in one 128-byte swizzle row
constexpr int kTmaPanelRowBytes = 128;
constexpr int kTmaMaxBoxRows = 256;

// The panels a d-column head tile takes, and whether they are whole (the 4D / 5D maps with a
// panel dimension) or the last one is partly zero fill (the column-extent maps).
constexpr int tma_panels(int d) { return (d + kTmaPanelCols - 1) / kTmaPanelCols; }
constexpr bool tma_whole_panels(int d) { return d % kTmaPanelCols == 0; }
// L2 promotion of the maps of head sizes that end inside a panel: 128 bytes. Their rows start
// on 16- or 32-byte boundaries (d = 72: 144-byte rows), and 256-byte promotion fetched around
// each one: d = 72 and 104 ran 11-16 % faster at 128 bytes, 40 and 80 the same (H100,
// bench/NOTES.md §18). Whole-panel maps keep 256 bytes.
constexpr CUtensorMapL2promotion kPartialPanelPromotion = CU_TENSOR_MAP_L2_PROMOTION_L2_128B;

// ---------------------------------------------------------------------------------------
// Host.

inline PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
    static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
        void* ptr = nullptr;
        cudaDriverEntryPointQueryResult status;
        const cudaError_t err =
            cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, 12000, cudaEnableDefault, &status);
        return (err == cudaSuccess && status == cudaDriverEntryPointSuccess)
                   ? reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(ptr)
                   : nullptr;
    }();
    return fn;
}

// Generic tiled map: rank 2..5, dims/strides innermost first (strides in bytes, rank - 1
// of them), box in elements.
inline cudaError_t encode_tiled(CUtensorMap* map, CUtensorMapDataType type, int rank, const void* base,
                                const cuuint64_t* dims, const cuuint64_t* strides, const cuuint32_t* box,
                                CUtensorMapSwizzle swizzle,
                                CUtensorMapL2promotion promotion = CU_TENSOR_MAP_L2_PROMOTION_L2_256B) {
    const PFN_cuTensorMapEncodeTiled_v12000 encode = tensor_map_encoder();
    if (encode == nullptr) return cudaErrorNotSupported;
    const cuuint32_t elem_strides[5] = {1, 1, 1, 1, 1};
    const CUresult r = encode(map, type, static_cast<cuuint32_t>(rank), const_cast<void*>(base), dims, strides, box,
                              elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, promotion,
                              CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

// What both maps below share: dim0 the columns, dim1 rows (row_stride elements apart), then a
// panel dimension (128 bytes apart; whole panels only) and the `outer` dimensions (extent and
// stride in elements, innermost first). A head size that ends inside a panel has no panel
// dimension: dim0 spans d columns, the box one 64-column panel, and a copy of panel c starts
// at column 64c. box_all_panels: a box holds every panel when whole (or one).
template <typename Element, int kOuter>
cudaError_t encode_head_map(CUtensorMap* map, const void* base, int d, int64_t rows, int64_t row_stride,
                            int box_rows, bool box_all_panels, const int64_t (&outer)[kOuter][2],
                            bool parts = false) {
    if (d % 8 != 0 || d < 8 || box_rows < 1 || box_rows > kTmaMaxBoxRows || rows < 1) return cudaErrorInvalidValue;
    constexpr int64_t kElem = 2;
    const bool whole = tma_whole_panels(d) && !parts;
    cuuint64_t dims[5] = {static_cast<cuuint64_t>(whole ? kTmaPanelCols : d), static_cast<cuuint64_t>(rows)};
    cuuint64_t strides[4] = {static_cast<cuuint64_t>(row_stride * kElem)};
    cuuint32_t box[5] = {static_cast<cuuint32_t>(kTmaPanelCols), static_cast<cuuint32_t>(box_rows)};
    int rank = 2;
    if (whole) {
        dims[rank] = static_cast<cuuint64_t>(d / kTmaPanelCols);
        strides[rank - 1] = kTmaPanelRowBytes;
        box[rank++] = box_all_panels ? static_cast<cuuint32_t>(d / kTmaPanelCols) : 1u;
    }
    for (const auto& o : outer) {
        dims[rank] = static_cast<cuuint64_t>(o[0]);
        strides[rank - 1] = static_cast<cuuint64_t>(o[1] * kElem);
        box[rank++] = 1u;
    }
    const CUtensorMapDataType type =
        ElementTraits<Element>::kIsBf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
    return encode_tiled(map, type, rank, base, dims, strides, box, CU_TENSOR_MAP_SWIZZLE_128B,
                        whole ? CU_TENSOR_MAP_L2_PROMOTION_L2_256B : kPartialPanelPromotion);
}

// The head-tile map described at the top: tokens x heads x d of 16-bit `Element`; d a
// multiple of 8 (16-byte rows), whole panels or not. One box holds every panel; parts: one
// box a panel even where d is whole panels (a tile wider than d: tma_load_head_parts).
template <typename Element>
cudaError_t make_head_tile_map(CUtensorMap* map, const void* base, int64_t tokens, int heads, int d,
                               int64_t row_stride, int64_t head_stride, int box_rows, bool parts = false) {
    const int64_t outer[1][2] = {{heads, head_stride}};
    return encode_head_map<Element>(map, base, d, tokens, row_stride, box_rows, true, outer, parts);
}

// A paged KV cache's map (params.h, Params::kv_block_table): every block of the pool holds
// tokens_per_block rows of each head; one copy lands box_rows rows of one 64-column panel:
//   dim0 = 64 columns, dim1 = row in the block (row_stride), dim2 = panel (128 bytes),
//   dim3 = head (head_stride), dim4 = block (block_stride); box {64, box_rows, 1, 1, 1}.
// A head size that ends inside a panel: dim0 = d columns and no panel dimension (4D), the
// copy of panel c at column 64c.
// Blocks past the pool's end read as zeros (how the kernel fills the keys past a sequence).
template <typename Element>
cudaError_t make_paged_tile_map(CUtensorMap* map, const void* base, int blocks, int tokens_per_block, int heads,
                                int d, int64_t row_stride, int64_t head_stride, int64_t block_stride, int box_rows) {
    if (box_rows > tokens_per_block || blocks < 1) return cudaErrorInvalidValue;
    const int64_t outer[2][2] = {{heads, head_stride}, {blocks, block_stride}};
    return encode_head_map<Element>(map, base, d, tokens_per_block, row_stride, box_rows, false, outer);
}

// ---------------------------------------------------------------------------------------
// Device. `bar` is the shared-memory mbarrier the copy's bytes complete on; coordinates
// are in elements, innermost first.

FMHA_DEVICE void tma_prefetch_map(const CUtensorMap* map) {
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

FMHA_DEVICE void tma_load_1d(uint32_t dst, const CUtensorMap* map, uint32_t bar, int c0) {
    asm volatile(
        "cp.async.bulk.tensor.1d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3}], [%2];\n" ::"r"(
            dst),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0)
        : "memory");
}

FMHA_DEVICE void tma_load_2d(uint32_t dst, const CUtensorMap* map, uint32_t bar, int c0, int c1) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];\n" ::"r"(
            dst),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1)
        : "memory");
}

FMHA_DEVICE void tma_load_3d(uint32_t dst, const CUtensorMap* map, uint32_t bar, int c0, int c1, int c2) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], "
        "[%2];\n" ::"r"(dst),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2)
        : "memory");
}

FMHA_DEVICE void tma_load_4d(uint32_t dst, const CUtensorMap* map, uint32_t bar, int c0, int c1, int c2, int c3) {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6}], "
        "[%2];\n" ::"r"(dst),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
        : "memory");
}

FMHA_DEVICE void tma_load_5d(uint32_t dst, const CUtensorMap* map, uint32_t bar, int c0, int c1, int c2, int c3,
                             int c4) {
    asm volatile(
        "cp.async.bulk.tensor.5d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6, "
        "%7}], [%2];\n" ::"r"(dst),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4)
        : "memory");
}

// The copies of a [box_rows, d] head tile (map from make_head_tile_map with this d;
// kPanelBytes = box_rows * 128): whole() once, one copy of every panel, or, d ending inside
// a panel, part(byte offset, first column) once per panel.
template <int kD, int kPanelBytes, class Whole, class Part>
FMHA_DEVICE void for_each_head_copy(Whole&& whole, Part&& part) {
    if constexpr (tma_whole_panels(kD)) {
        whole();
    } else {
#pragma unroll
        for (int c = 0; c < tma_panels(kD); ++c) part(uint32_t(c * kPanelBytes), c * kTmaPanelCols);
    }
}

// Loads the [box_rows, d] tile of `head` starting at `token` into dst.
template <int kD, int kPanelBytes>
FMHA_DEVICE void tma_load_head_tile(uint32_t dst, const CUtensorMap* map, uint32_t bar, int token, int head) {
    for_each_head_copy<kD, kPanelBytes>([&] { tma_load_4d(dst, map, bar, 0, token, 0, head); },
                                        [&](uint32_t off, int col) { tma_load_3d(dst + off, map, bar, col, token, head); });
}

// Loads the first `panels` 64-column panels of a [box_rows, d] head tile from a map made
// with parts = true (or whose d ends inside a panel): one copy a panel, the columns past d
// zero-filled. The backward's wgmma kernels load a head narrower than their tile this way.
template <int kPanelBytes>
FMHA_DEVICE void tma_load_head_parts(uint32_t dst, const CUtensorMap* map, uint32_t bar, int token, int head,
                                     int panels) {
    for (int c = 0; c < panels; ++c) tma_load_3d(dst + uint32_t(c * kPanelBytes), map, bar, c * kTmaPanelCols, token, head);
}

// Stores: shared -> global through a bulk group (the issuing thread's groups complete in
// order; bulk_wait_read<N> returns once all but the last N have read their shared memory, so
// it may be written again). Rows and columns past the map's extent are not written.
FMHA_DEVICE void tma_store_3d(const CUtensorMap* map, uint32_t src, int c0, int c1, int c2) {
    asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%2, %3, %4}], [%1];\n" ::"l"(
                     reinterpret_cast<uint64_t>(map)),
                 "r"(src), "r"(c0), "r"(c1), "r"(c2)
                 : "memory");
}
FMHA_DEVICE void tma_store_4d(const CUtensorMap* map, uint32_t src, int c0, int c1, int c2, int c3) {
    asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5}], [%1];\n" ::"l"(
                     reinterpret_cast<uint64_t>(map)),
                 "r"(src), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
                 : "memory");
}
// Adds the box at smem src (the map's layout and swizzle) elementwise into the 3D tensor at
// {c0, c1, c2}, in the L2, asynchronously (a bulk group, as tma_store_3d); elements past the
// map's extent are not touched.
FMHA_DEVICE void tma_reduce_add_3d(const CUtensorMap* map, uint32_t src, int c0, int c1, int c2) {
    asm volatile(
        "cp.reduce.async.bulk.tensor.3d.global.shared::cta.add.tile.bulk_group [%0, {%2, %3, %4}], [%1];\n" ::"l"(
            reinterpret_cast<uint64_t>(map)),
        "r"(src), "r"(c0), "r"(c1), "r"(c2)
        : "memory");
}
FMHA_DEVICE void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
template <int N>
FMHA_DEVICE void bulk_wait_read() {
    asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}
template <int N>
FMHA_DEVICE void bulk_wait() {
    asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
}
// Orders this thread's generic-proxy writes to shared memory before later async-proxy (TMA)
// reads of it; then a barrier, then the store.
FMHA_DEVICE void fence_proxy_async_smem() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
// Stores the [box_rows, d] tile at `token` of `head` from src in the head-tile layout (the
// mirror of tma_load_head_tile). The caller commits.
template <int kD, int kPanelBytes>
FMHA_DEVICE void tma_store_head_tile(uint32_t src, const CUtensorMap* map, int token, int head) {
    for_each_head_copy<kD, kPanelBytes>([&] { tma_store_4d(map, src, 0, token, 0, head); },
                                        [&](uint32_t off, int col) { tma_store_3d(map, src + off, col, token, head); });
}
// The same [kRows, kD] tile (panel after panel, the head-tile layout) from a paged KV cache
// (map from make_paged_tile_map with this d), called by every lane of a warp: keys key0 ..
// key0 + kRows - 1 of one sequence in boxes of min(tokens_per_block, kMaxBox) keys (kMaxBox: a
// power of two dividing kRows; tokens_per_block a power of two >= 16, so kRows / 16 <= 32
// boxes at most), lane i looking up box i's block and issuing its copies, one per panel.
// The sequence's block-table row starts at table[row] (a 32-bit index: b <= 65535 rows of at
// most 65536 entries, and one register less than a pointer in a producer at its limit); a box
// at or past kv_len is not looked up and reads the block past the pool's end, i.e. zeros (so
// the mbarrier's byte count is the whole tile's either way).
template <int kRows, int kD, int kMaxBox>
FMHA_DEVICE void tma_load_paged_box(uint32_t dst, const CUtensorMap* map, uint32_t bar, const int* table, uint32_t row,
                                    int key0, int kv_len, int tokens_per_block, int head, int pool_blocks, int lane) {
    static_assert(kRows / 16 <= 32, "a box per lane");
    const int box_rows = min_int(tokens_per_block, kMaxBox);
    const int first = lane * box_rows;
    if (first >= kRows) return;
    const int key = key0 + first;
    const int block =
        key < kv_len ? __ldg(table + (row + uint32_t(key >> (__ffs(tokens_per_block) - 1)))) : pool_blocks;
    const int in_block = key & (tokens_per_block - 1);
#pragma unroll
    for (int c = 0; c < tma_panels(kD); ++c) {
        const uint32_t to = dst + (c * kRows + first) * kTmaPanelRowBytes;
        if constexpr (tma_whole_panels(kD)) {
            tma_load_5d(to, map, bar, 0, in_block, c, head, block);
        } else {
            tma_load_4d(to, map, bar, c * kTmaPanelCols, in_block, head, block);
        }
    }
}

}  // namespace memory
}  // namespace fmha
